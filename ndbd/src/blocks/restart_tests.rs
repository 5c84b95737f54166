//! System restarts on two kernels over in-memory disks: a node whose sysfile names no GCI yet
//! (the cluster crashed after another node wrote its sysfile for the first global checkpoint,
//! before this one did) still restores that checkpoint from its redo log; a node with no files
//! at all stops with an error that says so; and a change of a GCI a restart did not restore
//! stays unrestored at every later restart, though the restarted cluster gives its GCI again,
//! and so does a local checkpoint taken past the restart's GCI; no node serves before every
//! node restored; and a global checkpoint whose redo write failed is never saved, though the
//! sync after it succeeded; and a sysfile copy whose write failed
//! is not followed by a write of the other copy; and a node whose disk failed as it cut its
//! logs at a system restart takes no part in a later restart past that one; and a node
//! restarted by node restart, left alone in its node group before its local checkpoint is
//! complete, makes no global checkpoint restorable until that checkpoint covers one; and a
//! late confirmation of an earlier save does not make the current one restorable; and a node
//! restart that loses power between overwriting its sysfile and removing its old files leaves
//! a sysfile naming those files' own restart history, never the cluster's; and a new restart
//! master counts restores under its predecessor's restart number until it numbers the restart
//! anew, after which every node names the new number in its sysfile before any serves, and a
//! CONF, START_REP or DICT_RESTART_DROP from a master that failed is ignored; and a node that
//! missed the start is failed by its side's round, to rejoin by node restart; and a system
//! restart drops a table or index some restored node lacks, everywhere and for good. And that
//! a data node stopping alone refuses API nodes' new work only once each has answered its
//! NODE_STOPPING_REP (or after `STOP_API_MAX`), and a stop of every data node at once; and
//! that a node stopping alone puts its stop off (serving on) when its group's other member
//! must stop or fails, not when it stops gracefully too.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::time::Instant;

use rndb_config::{ClusterConfig, NodeId};
use rndb_transporter::FrameHeader;

use rndb_protocol::schema::encode_values;
use rndb_protocol::{gsn, signals, ColumnDef, ColumnType, TableDef, Value, Writer};

use super::{Kernel, Outbox, SendFailure};
use crate::ndbfs::format::{self, kind, FileHeader, LcpCtl, RowChange, SchemaChange, Sysfile};
use crate::ndbfs::{execute, Disk, FsOp, FsRequest};

const INI: &str = "[ndbd default]\nNoOfReplicas=2\nDataMemory=1M\n\
[ndbd]\nNodeId=1\nHostName=127.0.0.1\n[ndbd]\nNodeId=2\nHostName=127.0.0.1\n\
[api]\nNodeId=50\nHostName=127.0.0.1\n";

/// Files by path; nothing is ever lost. Writes to paths holding the text in `.1` fail with
/// EIO, and truncations of them too when `.2`.
#[derive(Default)]
struct MemDisk(BTreeMap<String, Vec<u8>>, Option<&'static str>, bool);

impl Disk for MemDisk {
    fn write_at(&mut self, path: &str, offset: u64, bytes: &[u8]) -> io::Result<()> {
        if self.1.is_some_and(|text| path.contains(text)) {
            return Err(io::Error::from_raw_os_error(5));
        }
        let file = self.0.entry(path.to_string()).or_default();
        let end = offset as usize + bytes.len();
        if file.len() < end {
            file.resize(end, 0);
        }
        file[offset as usize..end].copy_from_slice(bytes);
        Ok(())
    }
    fn sync(&mut self, _: &str) -> io::Result<()> {
        Ok(())
    }
    fn truncate(&mut self, path: &str, len: u64) -> io::Result<()> {
        if self.2 && self.1.is_some_and(|text| path.contains(text)) {
            return Err(io::Error::from_raw_os_error(5));
        }
        self.0
            .entry(path.to_string())
            .or_default()
            .resize(len as usize, 0);
        Ok(())
    }
    fn replace(&mut self, path: &str, bytes: &[u8]) -> io::Result<()> {
        self.0.insert(path.to_string(), bytes.to_vec());
        Ok(())
    }
    fn read(&mut self, path: &str) -> io::Result<Option<Vec<u8>>> {
        Ok(self.0.get(path).cloned())
    }
    /// The directory's files and subdirectories, as `read_dir` gives them.
    fn list(&mut self, path: &str) -> io::Result<Vec<String>> {
        let prefix = format!("{path}/");
        let mut names: Vec<String> = (self.0.keys())
            .filter_map(|p| p.strip_prefix(&prefix))
            .map(|rest| rest.split('/').next().unwrap_or(rest).to_string())
            .collect();
        names.dedup();
        Ok(names)
    }
    fn remove(&mut self, path: &str) -> io::Result<()> {
        let under = format!("{path}/");
        self.0.retain(|p, _| p != path && !p.starts_with(&under));
        Ok(())
    }
}

#[derive(Default)]
struct Sent(Vec<(NodeId, FrameHeader, Vec<u8>)>);

impl Outbox for Sent {
    fn send(
        &mut self,
        to: NodeId,
        header: FrameHeader,
        encode: &mut dyn FnMut(&mut Vec<u8>),
    ) -> Result<(), SendFailure> {
        let mut payload = Vec::new();
        encode(&mut payload);
        self.0.push((to, header, payload));
        Ok(())
    }
}

/// A DIH frame carrying `GcpSignal { gci, nodes }`: its header and payload.
fn gcp_frame(signal: u16, gci: u64, nodes: [u64; 4]) -> (FrameHeader, Vec<u8>) {
    let mut payload = Vec::new();
    rndb_protocol::dih::GcpSignal { gci, nodes }.encode(&mut payload);
    let header = FrameHeader {
        signal,
        receiver_block: signals::block::DBDIH,
        sender_block: signals::block::DBDIH,
        request_id: 0,
    };
    (header, payload)
}

fn config() -> ClusterConfig {
    rndb_config::parse_str(INI, Path::new("t.ini")).expect("config")
}

/// A disk whose every redo part and schema log saved global checkpoint `gci` (a GCI_COMPLETED
/// record after the file header), and whose sysfile names `sysfile_gci` (none when 0).
fn saved_disk(config: &ClusterConfig, node: u16, gci: u32, sysfile_gci: u32) -> MemDisk {
    let mut disk = MemDisk::default();
    let parts = config.data_nodes[0].durability.no_of_fragment_log_parts;
    for part in 0..parts {
        let mut bytes = Vec::new();
        FileHeader {
            magic: format::REDO_MAGIC,
            node: u32::from(node),
            part,
            seq: 0,
        }
        .encode(&mut bytes);
        format::append_record(
            &mut bytes,
            u64::from(gci) << 32,
            kind::GCI_COMPLETED,
            |_| {},
        );
        disk.0
            .insert(format!("D{}/DBLQH/S0.FragLog", 8 + part), bytes);
    }
    let mut schema = Vec::new();
    FileHeader {
        magic: format::SCHEMA_MAGIC,
        node: u32::from(node),
        part: 0,
        seq: 0,
    }
    .encode(&mut schema);
    format::append_record(
        &mut schema,
        u64::from(gci) << 32,
        kind::GCI_COMPLETED,
        |_| {},
    );
    disk.0.insert("D1/DBDICT/P0.SchemaLog".into(), schema);
    if sysfile_gci > 0 {
        let sysfile = Sysfile {
            restorable_gci: sysfile_gci,
            cut_pending: false,
            restarts: vec![rndb_protocol::dih::RestartId::default()],
        };
        for path in ["D1/DBDIH/P0.sysfile", "D2/DBDIH/P0.sysfile"] {
            disk.0
                .insert(path.into(), sysfile.file_bytes(u32::from(node)));
        }
    }
    disk
}

/// Two data nodes over their disks, driven until nothing moves.
struct Cluster {
    nodes: Vec<(Kernel, MemDisk)>,
    /// Why each node stopped, if it did.
    fatal: Vec<Option<String>>,
    start: Instant,
    /// File requests of this node (index) on paths holding this text wait in `held`, with
    /// the node's index, until `hold` is cleared.
    hold: Option<(usize, &'static str)>,
    held: Vec<(usize, FsRequest)>,
    /// This node (index) loses power before its first request to remove a file or directory
    /// runs: that request and every one after it are lost.
    crash_before_remove: Option<usize>,
    /// Nodes that stopped and whose links the others saw close.
    closed: Vec<bool>,
    /// Frames of this signal from the first node to the second are lost.
    lose: Option<(NodeId, NodeId, u16)>,
    /// This node (index) loses power right after a round in which it sent a frame of this
    /// signal: the frames it sent still arrive, after the others saw its links close.
    crash_after_send: Option<(usize, u16)>,
    /// Frames (from, to) the next `run` delivers first.
    inject: Vec<(NodeId, NodeId, FrameHeader, Vec<u8>)>,
}

impl Cluster {
    /// Starts both nodes without `--initial` over `disks`, and runs them until the start is
    /// over.
    fn restart(disks: Vec<MemDisk>) -> Cluster {
        let mut cluster = Cluster::new(disks, false);
        cluster.run(cluster.start);
        cluster
    }

    /// Both nodes, made to start over `disks` (with `--initial` when `initial`), not yet run.
    fn new(disks: Vec<MemDisk>, initial: bool) -> Cluster {
        Cluster::with_config(&config(), disks, initial)
    }

    /// The same, under `config`.
    fn with_config(config: &ClusterConfig, disks: Vec<MemDisk>, initial: bool) -> Cluster {
        let nodes: Vec<(Kernel, MemDisk)> = config
            .data_nodes
            .iter()
            .zip(disks)
            .map(|(node, disk)| {
                let mut kernel = Kernel::with_files(config, node, initial);
                for other in &config.data_nodes {
                    if other.node_id != node.node_id {
                        kernel.on_connect(other.node_id);
                    }
                }
                (kernel, disk)
            })
            .collect();
        let fatal = vec![None; nodes.len()];
        Cluster {
            closed: vec![false; nodes.len()],
            nodes,
            fatal,
            start: Instant::now(),
            hold: None,
            held: Vec::new(),
            crash_before_remove: None,
            lose: None,
            crash_after_send: None,
            inject: Vec::new(),
        }
    }

    /// Runs the nodes at `now` until no frame, job or file request is left.
    fn run(&mut self, now: Instant) {
        let mut frames = std::mem::take(&mut self.inject);
        for _ in 0..1000 {
            let mut next = Vec::new();
            let mut moved = !frames.is_empty();
            for (index, (kernel, disk)) in self.nodes.iter_mut().enumerate() {
                if self.fatal[index].is_some() {
                    continue;
                }
                let me = NodeId(index as u16 + 1);
                let mut sent = Sent::default();
                let lost = |f: &&(NodeId, NodeId, FrameHeader, Vec<u8>)| {
                    self.lose == Some((f.0, f.1, f.2.signal))
                };
                for (from, _, header, payload) in frames.iter().filter(|f| f.1 == me && !lost(f)) {
                    kernel
                        .on_frame(*from, header, payload, &mut sent, now)
                        .expect("a valid frame");
                }
                kernel.run_jobs(&mut sent, now);
                let mut requests = kernel.take_fs_requests();
                if let Some((_, text)) = self.hold.filter(|(held, _)| *held == index) {
                    let (held, go): (Vec<FsRequest>, _) = requests
                        .into_iter()
                        .partition(|r| r.op.path().contains(text));
                    self.held.extend(held.into_iter().map(|r| (index, r)));
                    requests = go;
                } else if self.hold.is_none() {
                    let (mine, others) = std::mem::take(&mut self.held)
                        .into_iter()
                        .partition(|(i, _)| *i == index);
                    self.held = others;
                    let mine: Vec<(usize, FsRequest)> = mine;
                    requests.splice(0..0, mine.into_iter().map(|(_, r)| r));
                }
                for request in requests {
                    moved = true;
                    if let (Some(crashing), FsOp::Remove { path }) =
                        (self.crash_before_remove, &request.op)
                    {
                        if crashing == index {
                            self.fatal[index] = Some(format!("lost power before removing {path}"));
                            break;
                        }
                    }
                    if let Err(why) = kernel.on_fs_conf(execute(disk, request), &mut sent, now) {
                        self.fatal[index] = Some(why);
                        break;
                    }
                    kernel.run_jobs(&mut sent, now);
                }
                if let Some(why) = kernel.take_fatal() {
                    self.fatal[index] = Some(why);
                }
                if let Some((crashing, signal)) = self.crash_after_send {
                    if crashing == index && sent.0.iter().any(|f| f.1.signal == signal) {
                        self.fatal[index] = Some(format!("lost power after sending {signal}"));
                        self.crash_after_send = None;
                    }
                }
                next.extend(sent.0.into_iter().map(|(to, h, p)| (me, to, h, p)));
            }
            // A node that stopped: its process exited, and the others see its links close.
            for gone in 0..self.nodes.len() {
                if self.fatal[gone].is_none() || self.closed[gone] {
                    continue;
                }
                self.closed[gone] = true;
                moved = true;
                let node = NodeId(gone as u16 + 1);
                for (index, (kernel, _)) in self.nodes.iter_mut().enumerate() {
                    if self.fatal[index].is_none() {
                        let mut sent = Sent::default();
                        kernel.on_disconnect(node, &mut sent, now);
                        let me = NodeId(index as u16 + 1);
                        next.extend(sent.0.into_iter().map(|(to, h, p)| (me, to, h, p)));
                    }
                }
            }
            moved |= !next.is_empty();
            frames = next;
            if !moved {
                return;
            }
        }
        panic!("the nodes never went quiet");
    }

    /// The master's timer runs past TimeBetweenGlobalCheckpoints: one global checkpoint is
    /// saved (its GCI_COMPLETED in every redo part, every sysfile naming it).
    fn save_checkpoint(&mut self) {
        let interval = config().data_nodes[0]
            .durability
            .time_between_global_checkpoints_ms;
        for step in [1, 2] {
            let now = self.start + std::time::Duration::from_millis(u64::from(interval) * step);
            for (kernel, _) in &mut self.nodes {
                kernel.on_timer(now);
            }
            self.run(now);
        }
    }

    /// Every node's timer runs each 500 ms from the start until `ms` (heartbeats, global
    /// checkpoints), the nodes running after each tick.
    fn tick_until(&mut self, ms: u64) {
        self.tick(500, ms);
    }

    /// As `tick_until`, from `from` ms after the start (past the ticks already run).
    fn tick(&mut self, from: u64, ms: u64) {
        for at in (from..=ms).step_by(500) {
            let now = self.start + std::time::Duration::from_millis(at);
            for (index, (kernel, _)) in self.nodes.iter_mut().enumerate() {
                if self.fatal[index].is_none() {
                    kernel.on_timer(now);
                }
            }
            self.run(now);
        }
    }

    /// Each node's error, if it stopped, its epoch and its DataMemory in use.
    fn state(&self) -> Vec<(Option<String>, u64, u64)> {
        self.nodes
            .iter()
            .zip(&self.fatal)
            .map(|((kernel, _), why)| {
                (
                    why.clone(),
                    kernel.current_gci(),
                    kernel.memory_used_bytes(),
                )
            })
            .collect()
    }

    /// Every node loses power (nothing is lost: the disks keep every write): their disks.
    fn crash(self) -> Vec<MemDisk> {
        self.nodes.into_iter().map(|(_, disk)| disk).collect()
    }
}

/// Starts both nodes over `disks` and returns each node's error and epoch.
fn restart(disks: Vec<MemDisk>) -> Vec<(Option<String>, u64)> {
    Cluster::restart(disks)
        .state()
        .into_iter()
        .map(|(why, epoch, _)| (why, epoch))
        .collect()
}

/// The disk of a node of a cluster that created table 1 (`k` Int32 key, `v` Int32) in GCI 1
/// and logged `puts` (key, value, GCI) in fragment 0's redo part, in that order, then GCI 1's
/// GCI_COMPLETED; its sysfile names GCI 1.
fn disk_with_rows(config: &ClusterConfig, node: u16, puts: &[(i32, i32, u32)]) -> MemDisk {
    let mut disk = saved_disk(config, node, 1, 1);
    let def = TableDef::new(
        "t",
        vec![
            ColumnDef::key("k", ColumnType::Int32),
            ColumnDef::new("v", ColumnType::Int32),
        ],
    );
    let mut request = Vec::new();
    signals::encode_table_def(&mut request, &def);
    let mut schema = Vec::new();
    FileHeader {
        magic: format::SCHEMA_MAGIC,
        node: u32::from(node),
        part: 0,
        seq: 0,
    }
    .encode(&mut schema);
    let change = SchemaChange {
        signal: gsn::CREATE_TABLE_REQ,
        first_id: 1,
        request,
    };
    format::append_record(&mut schema, 1 << 32, kind::SCHEMA, |b| change.encode(b));
    format::append_record(&mut schema, 1 << 32, kind::GCI_COMPLETED, |_| {});
    disk.0.insert("D1/DBDICT/P0.SchemaLog".into(), schema);
    let mut redo = Vec::new();
    FileHeader {
        magic: format::REDO_MAGIC,
        node: u32::from(node),
        part: 0,
        seq: 0,
    }
    .encode(&mut redo);
    for &(k, v, gci) in puts {
        append_put(&mut redo, k, v, gci);
    }
    format::append_record(&mut redo, 1 << 32, kind::GCI_COMPLETED, |_| {});
    disk.0.insert("D8/DBLQH/S0.FragLog".into(), redo);
    disk
}

/// Appends a PUT record of table 1's row (`k`, `v`), fragment 0, with GCI `gci`.
fn append_put(bytes: &mut Vec<u8>, k: i32, v: i32, gci: u32) {
    let mut key = Vec::new();
    Value::Int32(k).encode(&mut Writer::new(&mut key));
    let mut row = Vec::new();
    encode_values(
        &mut Writer::new(&mut row),
        &[Value::Int32(k), Value::Int32(v)],
    );
    let change = RowChange {
        table_id: 1,
        table_version: 0,
        fragment: 0,
        key: &key,
        row: Some(&row),
    };
    format::append_record(bytes, u64::from(gci) << 32, kind::PUT, |b| change.encode(b));
}

/// Adds to `disk` (node `node`'s) complete full local checkpoint `id` of table 1's `rows`,
/// taken in epoch `max_gci`, whose replay starts at the head of every redo part.
fn add_lcp(
    config: &ClusterConfig,
    disk: &mut MemDisk,
    node: u16,
    id: u32,
    rows: &[(i32, i32)],
    max_gci: u32,
) {
    let mut data = Vec::new();
    FileHeader {
        magic: format::LCP_DATA_MAGIC,
        node: u32::from(node),
        part: 0,
        seq: u64::from(id),
    }
    .encode(&mut data);
    for &(k, v) in rows {
        append_put(&mut data, k, v, max_gci);
    }
    format::append_record(&mut data, u64::from(max_gci) << 32, kind::LCP_END, |b| {
        b.extend_from_slice(&(rows.len() as u64).to_le_bytes())
    });
    let parts = config.data_nodes[0].durability.no_of_fragment_log_parts;
    let ctl = LcpCtl {
        lcp_id: id,
        base_id: id,
        max_gci: u64::from(max_gci) << 32,
        starts: vec![(0, format::HEADER_BYTES as u64); parts as usize],
    };
    disk.0.insert(format!("LCP/{id}/ALL.Data"), data);
    disk.0
        .insert(format!("LCP/{id}/LCP.ctl"), ctl.file_bytes(u32::from(node)));
}

#[test]
fn a_node_whose_sysfile_names_no_gci_yet_restores_the_checkpoint_from_its_redo_log() {
    let config = config();
    // Both saved GCI 1; node 1 wrote its sysfile, node 2 had not when the cluster crashed.
    let started = restart(vec![
        saved_disk(&config, 1, 1, 1),
        saved_disk(&config, 2, 1, 0),
    ]);
    for (index, (why, epoch)) in started.iter().enumerate() {
        assert_eq!(why, &None, "node {} stopped", index + 1);
        assert_eq!(*epoch >> 32, 2, "node {} serves from GCI 2 on", index + 1);
    }
}

#[test]
fn a_node_without_files_cannot_join_a_restart_at_a_saved_gci() {
    let config = config();
    let started = restart(vec![saved_disk(&config, 1, 1, 1), MemDisk::default()]);
    assert_eq!(started[0].0, None);
    let why = started[1].0.as_deref().unwrap_or_default();
    assert!(why.contains("nothing to restore"), "{why}");
}

#[test]
fn a_change_a_restart_did_not_restore_stays_out_when_its_gci_is_saved_again() {
    let config = config();
    // Row 1 committed in GCI 1; row 2 in GCI 2, logged before GCI 1's GCI_COMPLETED (its
    // commit started while GCI 1 was being saved), and GCI 2 never saved: the first restart,
    // at GCI 1, restores row 1 alone.
    let puts = [(1, 10, 1), (2, 20, 2)];
    let disks = (1..=2).map(|n| disk_with_rows(&config, n, &puts)).collect();
    let mut first = Cluster::restart(disks);
    let after_first = first.state();
    for (index, (why, epoch, _)) in after_first.iter().enumerate() {
        assert_eq!(why, &None, "node {} stopped", index + 1);
        assert_eq!(*epoch >> 32, 2, "node {} serves GCI 2", index + 1);
    }
    // The restarted cluster saves its own GCI 2, with no change in it, and crashes.
    first.save_checkpoint();
    let disks = first.crash();
    let second = Cluster::restart(disks).state();
    for (index, ((why, epoch, memory), (_, _, memory_before))) in
        second.iter().zip(&after_first).enumerate()
    {
        assert_eq!(why, &None, "node {} stopped", index + 1);
        assert_eq!(*epoch >> 32, 3, "node {} restarted at GCI 2", index + 1);
        assert_eq!(
            memory, memory_before,
            "node {} restored row 2, a change of the first cluster's GCI 2 that its restart did not restore",
            index + 1
        );
    }
}

#[test]
fn a_local_checkpoint_past_a_restarts_gci_is_never_restored() {
    let config = config();
    // Row 1 committed in GCI 1, saved; a local checkpoint of epoch 2 holds it and row 2, a
    // change of GCI 2, which was never saved. The restart at GCI 1 cannot use the
    // checkpoint; it replays the redo log and removes the checkpoint.
    let disks = (1..=2)
        .map(|n| {
            let mut disk = disk_with_rows(&config, n, &[(1, 10, 1)]);
            add_lcp(&config, &mut disk, n, 1, &[(1, 10), (2, 20)], 2);
            disk
        })
        .collect();
    let mut first = Cluster::restart(disks);
    let after_first = first.state();
    for (index, (kernel_disk, (why, _, _))) in first.nodes.iter().zip(&after_first).enumerate() {
        assert_eq!(why, &None, "node {} stopped", index + 1);
        let left: Vec<&String> = kernel_disk
            .1
             .0
            .keys()
            .filter(|p| p.starts_with("LCP/"))
            .collect();
        assert!(left.is_empty(), "node {} kept {left:?}", index + 1);
    }
    // The restarted cluster saves its own GCI 2, with no change in it, and crashes before a
    // checkpoint of its own: the next restart, at GCI 2, must not take the old checkpoint of
    // epoch 2 for one of this GCI 2.
    first.save_checkpoint();
    let second = Cluster::restart(first.crash()).state();
    for (index, ((why, epoch, memory), (_, _, memory_before))) in
        second.iter().zip(&after_first).enumerate()
    {
        assert_eq!(why, &None, "node {} stopped", index + 1);
        assert_eq!(*epoch >> 32, 3, "node {} restarted at GCI 2", index + 1);
        assert_eq!(
            memory,
            memory_before,
            "node {} restored row 2 from a checkpoint of the first cluster's GCI 2",
            index + 1
        );
    }
}

#[test]
fn no_node_serves_until_every_node_has_restored() {
    let config = config();
    let disks = (1..=2)
        .map(|n| disk_with_rows(&config, n, &[(1, 10, 1)]))
        .collect();
    let mut cluster = Cluster::new(disks, false);
    // Node 2 agrees on the restart GCI, but its redo log is slow to read.
    cluster.hold = Some((1, "DBLQH"));
    cluster.run(cluster.start);
    let started = |c: &Cluster, i: usize| c.nodes[i].0.qmgr.started();
    assert!(!started(&cluster, 1), "node 2 has not restored yet");
    assert!(
        !started(&cluster, 0),
        "node 1 serves, and would send node 2 operations on rows it has not restored"
    );
    cluster.hold = None;
    cluster.run(cluster.start);
    assert!(started(&cluster, 0) && started(&cluster, 1));
    assert_eq!(cluster.fatal, vec![None, None]);
}

#[test]
fn a_node_whose_redo_write_failed_is_stopped_and_the_cluster_saves_without_it() {
    // Node 2's writes to redo part 2 fail with EIO; its syncs succeed (the file is not there).
    let failing = MemDisk(BTreeMap::new(), Some("D10/"), false);
    let mut cluster = Cluster::new(vec![MemDisk::default(), failing], true);
    cluster.run(cluster.start);
    // The write failed during the start; once started, node 2 asks to be stopped at its
    // next heartbeat.
    cluster.save_checkpoint();
    let why = cluster.fatal[1].clone().unwrap_or_default();
    assert!(
        why.starts_with("error 2813: Unknown file system error (write D10/"),
        "node 2 stops with NDB's code for its file system error: {why:?}"
    );
    assert_eq!(cluster.fatal[0], None);
    let (node1, disk1) = &cluster.nodes[0];
    let (node2, disk2) = &cluster.nodes[1];
    assert_eq!(node1.restorable_gci(), 1, "node 1 saves without node 2");
    assert!(disk1.0.contains_key("D1/DBDIH/P0.sysfile"));
    assert_eq!(
        node2.restorable_gci(),
        0,
        "node 2 took GCI 1 as saved, though its redo part 2 never reached its disk"
    );
    assert!(!disk2.0.contains_key("D1/DBDIH/P0.sysfile"));
}

#[test]
fn the_last_serving_node_of_a_group_goes_on_refusing_writes_when_its_disk_fails() {
    // Both nodes' writes to redo part 2 fail: the first to ask is stopped, the other is then
    // its node group's last serving member and goes on, refusing writes; nothing is saved.
    let failing = || MemDisk(BTreeMap::new(), Some("D10/"), false);
    let mut cluster = Cluster::new(vec![failing(), failing()], true);
    cluster.run(cluster.start);
    cluster.save_checkpoint();
    let stopped: Vec<usize> = (0..2).filter(|&i| cluster.fatal[i].is_some()).collect();
    assert_eq!(stopped.len(), 1, "{:?}", cluster.fatal);
    let (survivor, disk) = &cluster.nodes[1 - stopped[0]];
    assert_eq!(survivor.restorable_gci(), 0);
    assert!(!disk.0.contains_key("D1/DBDIH/P0.sysfile"));
    assert_eq!(survivor.fs.refusal().map(|e| e.code), Some(1234));
}

#[test]
fn two_nodes_of_a_group_whose_disks_failed_together_do_not_declare_each_other() {
    let mut cluster = Cluster::new(vec![MemDisk::default(), MemDisk::default()], true);
    cluster.run(cluster.start);
    for (kernel, _) in &mut cluster.nodes {
        kernel.fs.failed = Some(crate::ndbfs::FsError {
            op: "sync",
            path: "D8/DBLQH/S0.FragLog".into(),
            no_space: true,
            reason: "No space left on device (os error 28)".into(),
        });
    }
    // Each asks the other, which presides without it, at every heartbeat.
    cluster.tick_until(20_000);
    assert_eq!(cluster.fatal, vec![None, None]);
    for (index, (kernel, _)) in cluster.nodes.iter().enumerate() {
        let other = NodeId(2 - index as u16);
        assert!(
            kernel.qmgr.is_up(other),
            "node {} declared node {other} failed",
            index + 1
        );
        assert_eq!(kernel.restorable_gci(), 0);
    }
}

#[test]
fn a_node_whose_save_stalls_past_the_timeout_is_stopped_and_the_cluster_saves_without_it() {
    let ini = INI.replace(
        "DataMemory=1M\n",
        "DataMemory=1M\nTimeBetweenGlobalCheckpointsTimeout=3000\n",
    );
    let config = rndb_config::parse_str(&ini, Path::new("t.ini")).expect("config");
    let mut cluster =
        Cluster::with_config(&config, vec![MemDisk::default(), MemDisk::default()], true);
    cluster.run(cluster.start);
    // Node 2's redo requests never complete from now on: its disk stalls.
    cluster.hold = Some((1, "DBLQH"));
    cluster.tick_until(12_000);
    let why = cluster.fatal[1].clone().unwrap_or_default();
    assert!(
        why.starts_with("error 2303: GCP stop detected"),
        "node 2 stops for its GCP stop: {why:?}"
    );
    assert_eq!(cluster.fatal[0], None);
    assert!(
        cluster.nodes[0].0.restorable_gci() >= 1,
        "node 1 saves without node 2"
    );
}

#[test]
fn after_a_restart_the_sysfile_copy_it_read_is_overwritten_last() {
    // GCI 1 saved, but each node's second sysfile copy was lost (the first save, cut short
    // by a power loss): the restart reads the first copy.
    let config = config();
    let disks = (1..=2)
        .map(|node| {
            let mut disk = saved_disk(&config, node, 1, 1);
            disk.0.remove("D2/DBDIH/P0.sysfile");
            disk
        })
        .collect();
    let mut cluster = Cluster::restart(disks);
    assert_eq!(cluster.fatal, vec![None, None]);
    // The next save's sysfile writes wait: the first must be the copy the restart did not
    // read, so that a power loss during it leaves the one naming GCI 1.
    cluster.hold = Some((0, "P0.sysfile"));
    cluster.save_checkpoint();
    let first = cluster.held.first().map(|(_, r)| r.op.path().to_string());
    assert_eq!(first.as_deref(), Some("D2/DBDIH/P0.sysfile"));
}

#[test]
fn a_failed_sysfile_write_leaves_the_other_copy_untouched() {
    // Node 2's writes of its first sysfile copy fail with EIO; the sync after them succeeds.
    let failing = MemDisk(BTreeMap::new(), Some("D1/DBDIH/P0.sysfile"), false);
    let mut cluster = Cluster::new(vec![MemDisk::default(), failing], true);
    cluster.run(cluster.start);
    cluster.save_checkpoint();
    let (node1, disk1) = &cluster.nodes[0];
    let (node2, disk2) = &cluster.nodes[1];
    // Node 1 saved the checkpoint in both copies (and, node 2 having failed before it
    // answered, the next one at once: durable commits wait for a save every node answered).
    assert!(node1.restorable_gci() >= 1);
    for path in ["D1/DBDIH/P0.sysfile", "D2/DBDIH/P0.sysfile"] {
        assert!(disk1.0.contains_key(path), "node 1 has no {path}");
    }
    // Node 2 never touched its second copy: a power loss now could tear only the first.
    // It stopped (error 2813), and node 1 saved without it.
    assert!(cluster.fatal[1]
        .as_deref()
        .is_some_and(|w| w.starts_with("error 2813")));
    assert_eq!(node2.restorable_gci(), 0);
    assert!(
        !disk2.0.contains_key("D2/DBDIH/P0.sysfile"),
        "node 2 wrote its second sysfile copy after the first one's write failed"
    );
}

#[test]
fn a_node_whose_schema_log_missed_the_restart_gci_stops_instead_of_starting_without_tables() {
    let config = config();
    let puts = [(1, 10, 1)];
    // Node 2's write of the schema log failed (so it never confirmed GCI 1, and its sysfile
    // names nothing), though its redo parts reached GCI 1's GCI_COMPLETED.
    let mut node2 = disk_with_rows(&config, 2, &puts);
    node2.0.retain(|path, _| !path.contains("P0.sysfile"));
    if let Some(schema) = node2.0.get_mut("D1/DBDICT/P0.SchemaLog") {
        schema.truncate(format::HEADER_BYTES);
    }
    let started = restart(vec![disk_with_rows(&config, 1, &puts), node2]);
    let why = started[1].0.as_deref().unwrap_or_default();
    assert!(
        why.contains("no GCI_COMPLETED record for GCI 1"),
        "node 2 must not start without the tables of GCI 1: {why:?}"
    );
}

/// A schema log compacted at every save (header, the table's SCHEMA record, the save's
/// GCI_COMPLETED) stays that size however many saves pass, and a restart from it finds the
/// table and its rows.
#[test]
fn a_compacted_schema_log_stays_small_and_restores_the_tables() {
    let config = config();
    let disks = (1..=2)
        .map(|n| disk_with_rows(&config, n, &[(1, 10, 1)]))
        .collect();
    let mut cluster = Cluster::restart(disks);
    let before = cluster.state();
    for (kernel, _) in &mut cluster.nodes {
        kernel.compact_schema_log_after(1);
    }
    let schema_log = super::dict::log::SCHEMA_LOG;
    let mut sizes = Vec::new();
    for _ in 0..4 {
        cluster.save_checkpoint();
        sizes.push(cluster.nodes[0].1 .0[schema_log].len());
    }
    assert!(
        sizes.windows(2).all(|w| w[0] == w[1]),
        "the schema log does not grow: {sizes:?}"
    );
    let after = Cluster::restart(cluster.crash()).state();
    for (index, ((why, _, memory), (_, _, memory_before))) in after.iter().zip(&before).enumerate()
    {
        assert_eq!(why, &None, "node {} stopped", index + 1);
        assert_eq!(
            memory,
            memory_before,
            "node {} restored the table and its row",
            index + 1
        );
    }
}

#[test]
fn a_restart_counts_a_node_whose_sysfile_names_an_older_restart_no_further_than_the_newest() {
    use super::restart::{can_restore, restart_gci, Named};
    use rndb_protocol::dih::RestartId;
    // Restart histories as (number, GCI) pairs, oldest first.
    let history = |pairs: &[(u32, u32)]| -> Vec<RestartId> {
        (pairs.iter())
            .map(|&(no, gci)| RestartId { no, gci })
            .collect()
    };
    let named = |restorable, pairs: &[(u32, u32)]| Named {
        restorable,
        restarts: history(pairs),
    };
    // Node 2 names GCI 9 restorable, but from before the restart at GCI 3 it never recorded.
    let answers = BTreeMap::from([
        (NodeId(1), named(5, &[(0, 0), (1, 3)])),
        (NodeId(2), named(9, &[(0, 0)])),
    ]);
    assert_eq!(restart_gci(&answers), (5, history(&[(0, 0), (1, 3)])));
    // With no save since that restart, every node can restore it.
    let answers = BTreeMap::from([
        (NodeId(1), named(3, &[(0, 0), (1, 3)])),
        (NodeId(2), named(3, &[(0, 0)])),
    ]);
    let (gci, newest) = restart_gci(&answers);
    assert_eq!(gci, 3);
    assert!(answers.values().all(|n| can_restore(n, 3, &newest)));
    // No restart yet: the newest restorable GCI any names.
    let answers = BTreeMap::from([
        (NodeId(1), named(4, &[(0, 0)])),
        (NodeId(2), named(0, &[(0, 0)])),
    ]);
    assert_eq!(restart_gci(&answers), (4, history(&[(0, 0)])));
    // Seed 0x7a0001db: node 2 last restarted at the initial start and saved up to 16; it
    // missed the restarts at 16 and 17. Its GCI 17 is of the history the first dropped.
    let answers = BTreeMap::from([
        (NodeId(1), named(17, &[(0, 0), (1, 16), (2, 17)])),
        (NodeId(2), named(16, &[(0, 0)])),
    ]);
    let (gci, newest) = restart_gci(&answers);
    assert_eq!(gci, 17);
    assert!(!can_restore(&answers[&NodeId(2)], 17, &newest));
    assert!(can_restore(&answers[&NodeId(2)], 16, &newest));
    // Two restarts at the same GCI (a master failed as it chose it, and the next chose it
    // again): a node that missed both still restores up to it.
    let answers = BTreeMap::from([
        (NodeId(1), named(17, &[(0, 0), (1, 17), (2, 17)])),
        (NodeId(2), named(16, &[(0, 0)])),
    ]);
    let (gci, newest) = restart_gci(&answers);
    assert!(can_restore(&answers[&NodeId(2)], gci, &newest));
    // A node whose last restart is not in the newest history (another history, or older than
    // it keeps) takes no part.
    let answers = BTreeMap::from([
        (NodeId(1), named(20, &[(0, 0), (1, 10), (3, 15)])),
        (NodeId(2), named(15, &[(0, 0), (2, 12)])),
    ]);
    let (gci, newest) = restart_gci(&answers);
    assert_eq!(gci, 20);
    assert!(!can_restore(&answers[&NodeId(2)], 15, &newest));
    // A node that took part in the newest restart restores a GCI its sysfile does not name
    // yet (its log may hold it: its sysfile write came after the save).
    assert!(can_restore(
        &named(19, &[(0, 0), (1, 10), (3, 15)]),
        20,
        &newest
    ));
}

#[test]
fn a_node_whose_disk_failed_as_it_cut_its_logs_sits_out_the_next_restart_past_that_cut() {
    let config = config();
    // Row 1 committed in GCI 1; row 2 in GCI 2, which every node logged complete but no
    // sysfile names (the crash came between the save and the sysfile writes).
    let puts = [(1, 10, 1), (2, 20, 2)];
    let disks: Vec<MemDisk> = (1..=2)
        .map(|n| {
            let mut disk = disk_with_rows(&config, n, &puts);
            if let Some(redo) = disk.0.get_mut("D8/DBLQH/S0.FragLog") {
                format::append_record(redo, 2 << 32, kind::GCI_COMPLETED, |_| {});
            }
            disk
        })
        .collect();
    // The restart at GCI 1 gives GCI 2 again; node 2's disk fails as it cuts its redo part 0
    // there, so its log keeps the first GCI 2's row 2, uncut.
    let mut cluster = Cluster::new(disks, false);
    cluster.nodes[1].1 .1 = Some("D8/");
    cluster.nodes[1].1 .2 = true;
    cluster.run(cluster.start);
    let after_first = cluster.state();
    assert_eq!(after_first[0].0, None);
    // Node 2 started with its disk failed and is stopped; node 1 saves GCI 2 without it.
    cluster.tick_until(6_000);
    let why = cluster.fatal[1].clone().unwrap_or_default();
    assert!(why.starts_with("error 2813"), "{why:?}");
    assert!(cluster.nodes[0].0.restorable_gci() >= 2);
    // Power fails; node 2's disk is mended. Restarting past GCI 1, node 2's redo log would
    // give back row 2 of the GCI 2 the first restart threw away. Its sysfile names that
    // restart (written before the cut) with the cut pending.
    let mut disks = cluster.crash();
    disks[1].1 = None;
    let second = Cluster::restart(disks).state();
    assert_eq!(second[0].0, None, "node 1 restarts");
    assert_eq!(second[0].2, after_first[0].2, "node 1 holds row 1 alone");
    let why = second[1].0.as_deref().unwrap_or_default();
    assert!(
        why.contains("past the system restart at GCI 1 whose cut of this node's logs may not"),
        "node 2 must not restore past the cut its disk failed to make: {why:?}"
    );
}

#[test]
fn a_node_names_the_system_restart_in_its_sysfile_before_it_serves() {
    let config = config();
    let disks = (1..=2)
        .map(|n| disk_with_rows(&config, n, &[(1, 10, 1)]))
        .collect();
    let cluster = Cluster::restart(disks);
    assert_eq!(cluster.fatal, vec![None, None]);
    for (index, (kernel, disk)) in cluster.nodes.iter().enumerate() {
        assert!(kernel.qmgr.started());
        for path in ["D1/DBDIH/P0.sysfile", "D2/DBDIH/P0.sysfile"] {
            let sysfile = Sysfile::from_file(&disk.0[path], index as u32 + 1).expect(path);
            assert_eq!(
                (
                    sysfile.restorable_gci,
                    sysfile.restart_gci(),
                    sysfile.cut_pending
                ),
                (1, 1, false),
                "node {} {path}",
                index + 1
            );
        }
    }
}

#[test]
fn a_restarted_node_left_alone_makes_no_checkpoint_restorable_until_its_own_covers_one() {
    let config = config();
    let mut cluster = Cluster::new(vec![MemDisk::default(), MemDisk::default()], true);
    cluster.run(cluster.start);
    cluster.tick_until(5_000);
    assert!(cluster.nodes[1].0.restorable_gci() >= 1);
    // Node 2 is killed, and started again with --initial: it rejoins by node restart and
    // has every row copied. Its local checkpoint after the copy never completes (its writes
    // to LCP/1/ wait) until `hold` is cleared.
    cluster.fatal[1] = Some("killed".into());
    cluster.tick(5_500, 7_000);
    let mut node2 = Kernel::with_files(&config, &config.data_nodes[1], true);
    node2.on_connect(NodeId(1));
    cluster.nodes[0].0.on_connect(NodeId(2));
    cluster.nodes[1].0 = node2;
    cluster.fatal[1] = None;
    cluster.closed[1] = false;
    cluster.hold = Some((1, "LCP/1/"));
    cluster.tick(7_500, 15_000);
    let node1 = &cluster.nodes[0].0;
    assert!(
        node1.qmgr.is_up(NodeId(2)) && !node1.qmgr.copying.contains(NodeId(2)),
        "node 2 started by node restart: {:?}",
        cluster.fatal
    );
    // Node 1 fails: node 2, whose files hold no copy of the rows yet, serves alone.
    cluster.fatal[0] = Some("killed".into());
    cluster.tick(15_500, 17_000);
    let before = cluster.nodes[1].0.restorable_gci();
    let epoch = cluster.nodes[1].0.current_gci() >> 32;
    cluster.tick(17_500, 30_000);
    let node2 = &cluster.nodes[1].0;
    assert_eq!(cluster.fatal[1], None);
    assert!(
        node2.current_gci() >> 32 >= epoch + 3,
        "global checkpoints went on: {} after {epoch}",
        node2.current_gci() >> 32
    );
    assert_eq!(
        node2.restorable_gci(),
        before,
        "a global checkpoint was made restorable that no file of the node group can restore"
    );
    // Its checkpoint completes: the next save is restorable, and its sysfile names it.
    cluster.hold = None;
    cluster.tick(30_500, 40_000);
    let (node2, disk2) = &cluster.nodes[1];
    assert!(node2.restorable_gci() > before);
    let sysfile = Sysfile::from_file(&disk2.0["D1/DBDIH/P0.sysfile"], 2).expect("sysfile");
    assert_eq!(sysfile.restorable_gci, node2.restorable_gci());
}

/// A COPY_GCIREQ for a GCI this node's sysfile already names, or an older one (a failed
/// master's late request, which can arrive after its successor's), is answered at once: the
/// sysfile never goes back to an older GCI, nor the nodes known to have saved the newest.
#[test]
fn a_late_copy_request_for_an_older_gci_leaves_the_sysfile_as_it_is() {
    let mut cluster = Cluster::new(vec![MemDisk::default(), MemDisk::default()], true);
    cluster.run(cluster.start);
    cluster.tick_until(6_000);
    let saved = cluster.nodes[1].0.restorable_gci();
    assert!(saved >= 2, "two global checkpoints are saved");
    let sysfiles = |cluster: &Cluster| -> Vec<u32> {
        ["D1/DBDIH/P0.sysfile", "D2/DBDIH/P0.sysfile"]
            .iter()
            .map(|path| {
                let sysfile = Sysfile::from_file(&cluster.nodes[1].1 .0[*path], 2).expect(path);
                sysfile.restorable_gci
            })
            .collect()
    };
    let before = sysfiles(&cluster);
    assert!(before.iter().all(|&gci| gci == saved), "{before:?}");
    let late = u64::from(saved - 1) << 32;
    let copy_saved = cluster.nodes[1].0.gcp.copy_saved;
    assert!(copy_saved.contains(NodeId(2)), "{copy_saved:?}");
    // It names node 1 alone.
    let (header, payload) = gcp_frame(gsn::COPY_GCIREQ, late, [0b010, 0, 0, 0]);
    let now = cluster.start + std::time::Duration::from_secs(30);
    let mut sent = Sent::default();
    (cluster.nodes[1].0)
        .on_frame(NodeId(1), &header, &payload, &mut sent, now)
        .expect("a valid frame");
    cluster.nodes[1].0.run_jobs(&mut sent, now);
    let answered = sent.0.iter().any(|(to, header, payload)| {
        *to == NodeId(1)
            && header.signal == gsn::COPY_GCICONF
            && rndb_protocol::dih::GcpSignal::decode(payload).map(|s| s.gci) == Ok(late)
    });
    assert!(answered, "answered at once: {:?}", sent.0);
    assert!(
        !cluster.nodes[1].0.has_fs_requests(),
        "no sysfile write for an older GCI"
    );
    assert_eq!(sysfiles(&cluster), before);
    assert_eq!(cluster.nodes[1].0.gcp.copy_saved, copy_saved);
}

#[test]
fn a_save_confirmation_naming_an_earlier_gci_does_not_make_the_next_one_restorable() {
    let mut cluster = Cluster::new(vec![MemDisk::default(), MemDisk::default()], true);
    cluster.run(cluster.start);
    cluster.save_checkpoint();
    let saved = cluster.nodes[0].0.restorable_gci();
    assert!(saved >= 1, "a first global checkpoint is saved");
    // Node 2's redo log stalls: it cannot confirm the next save.
    cluster.hold = Some((1, "DBLQH"));
    let interval = u64::from(
        config().data_nodes[0]
            .durability
            .time_between_global_checkpoints_ms,
    );
    for step in [3, 4] {
        let now = cluster.start + std::time::Duration::from_millis(interval * step);
        for (kernel, _) in &mut cluster.nodes {
            kernel.on_timer(now);
        }
        cluster.run(now);
    }
    // A confirmation of the save before, late (a master that failed asked for it, and this
    // one began that save again for a later GCI, seed 0x26be3bb65), must not stand for it.
    let (header, payload) = gcp_frame(gsn::GCP_SAVECONF, u64::from(saved) << 32, [0; 4]);
    let now = cluster.start + std::time::Duration::from_millis(interval * 4);
    let mut sent = Sent::default();
    (cluster.nodes[0].0)
        .on_frame(NodeId(2), &header, &payload, &mut sent, now)
        .expect("a valid frame");
    cluster.nodes[0].0.run_jobs(&mut sent, now);
    cluster.run(now);
    assert_eq!(
        cluster.nodes[0].0.restorable_gci(),
        saved,
        "the next GCI is not restorable: node 2's redo log does not hold it"
    );
    cluster.hold = None;
    cluster.run(now);
    assert!(
        cluster.nodes[0].0.restorable_gci() > saved,
        "once node 2 saves it, it is"
    );
}

/// Appends GCI_COMPLETED records for `gcis` to every redo part of `disk`, and to its schema
/// log too when `schema`.
fn complete(config: &ClusterConfig, disk: &mut MemDisk, gcis: &[u32], schema: bool) {
    let parts = config.data_nodes[0].durability.no_of_fragment_log_parts;
    let mut paths: Vec<String> = (0..parts)
        .map(|part| format!("D{}/DBLQH/S0.FragLog", 8 + part))
        .collect();
    if schema {
        paths.push(super::dict::log::SCHEMA_LOG.to_string());
    }
    for path in paths {
        let log = disk.0.get_mut(&path).expect("a log");
        for &gci in gcis {
            format::append_record(log, u64::from(gci) << 32, kind::GCI_COMPLETED, |_| {});
        }
    }
}

/// A node restart that cannot keep its own files (the cluster restarted since they were
/// saved) first overwrites its sysfile with one naming no GCI and the files' own restart
/// history, then removes them. Power lost between the two: the next system restart must
/// not count those files as current, or it would restore their GCIs of an era the cluster's
/// restart gave again (here row 2, of the old GCI 2).
#[test]
fn a_node_restart_that_loses_power_before_removing_its_old_files_never_restores_them() {
    use rndb_protocol::dih::RestartId;
    let config = config();
    // Both saved GCI 1 (row 1). Node 1 then restarted alone at GCI 1 and saved GCIs 2 and 3
    // of its own, with no row 2; node 2, down all along, had logged GCIs 2 (row 2) to 20
    // complete before that restart, and its sysfile names GCI 1 of the first history.
    let mut node1 = disk_with_rows(&config, 1, &[(1, 10, 1)]);
    complete(&config, &mut node1, &[2, 3], true);
    let restarted_at_1 = Sysfile {
        restorable_gci: 3,
        cut_pending: false,
        restarts: vec![RestartId::default(), RestartId { no: 1, gci: 1 }],
    };
    for path in ["D1/DBDIH/P0.sysfile", "D2/DBDIH/P0.sysfile"] {
        node1.0.insert(path.into(), restarted_at_1.file_bytes(1));
    }
    let mut node2 = disk_with_rows(&config, 2, &[(1, 10, 1), (2, 20, 2)]);
    let old_era: Vec<u32> = (2..=20).collect();
    complete(&config, &mut node2, &old_era, true);
    let own_history = vec![RestartId::default()];
    // Both start: the cluster restarts at GCI 3 from node 1, which node 2 cannot restore.
    let mut cluster = Cluster::restart(vec![node1, node2]);
    cluster.tick_until(3_000);
    assert_eq!(cluster.fatal[0], None);
    assert!(cluster.nodes[0].0.qmgr.started(), "node 1 started");
    let why = cluster.fatal[1].clone().unwrap_or_default();
    assert!(why.contains("it joins by node restart"), "{why:?}");
    let one_row = cluster.nodes[0].0.memory_used_bytes();
    // Node 2 starts again and rejoins by node restart: its files hold GCIs of the era before
    // the restart at GCI 1, so they go once it is let in. It loses power before the first
    // removal.
    let mut restarted = Kernel::with_files(&config, &config.data_nodes[1], false);
    restarted.on_connect(NodeId(1));
    cluster.nodes[0].0.on_connect(NodeId(2));
    cluster.nodes[1].0 = restarted;
    cluster.fatal[1] = None;
    cluster.closed[1] = false;
    cluster.crash_before_remove = Some(1);
    cluster.tick(3_500, 10_000);
    let why = cluster.fatal[1].clone().unwrap_or_default();
    assert!(why.starts_with("lost power before removing"), "{why:?}");
    let (_, disk2) = &cluster.nodes[1];
    for path in ["D1/DBDIH/P0.sysfile", "D2/DBDIH/P0.sysfile"] {
        let sysfile = Sysfile::from_file(&disk2.0[path], 2).expect(path);
        assert_eq!(sysfile.restorable_gci, 0, "{path}");
        assert_eq!(
            sysfile.restarts, own_history,
            "{path} names the files' own history"
        );
    }
    // Power fails everywhere. Node 1 restores its own GCIs; node 2 takes no part, and
    // nothing of its old era (row 2) comes back. (Were its sysfile to name the cluster's
    // history, its files would count as current; here a later check, that files dropped for
    // a node restart restore nothing, stops it too.)
    let after = Cluster::restart(cluster.crash());
    assert_eq!(after.fatal[0], None);
    for (index, (kernel, _)) in after.nodes.iter().enumerate() {
        if after.fatal[index].is_none() {
            assert_eq!(
                kernel.memory_used_bytes(),
                one_row,
                "node {} holds row 1 alone",
                index + 1
            );
        }
    }
}

/// `count` data nodes (2 or more) of one node group.
fn one_group(count: u16) -> ClusterConfig {
    let more: String = (3..=count)
        .map(|id| format!("[ndbd]\nNodeId={id}\nHostName=127.0.0.1\n"))
        .collect();
    let ini = INI
        .replace("NoOfReplicas=2", &format!("NoOfReplicas={count}"))
        .replace("[api]", &format!("{more}[api]"));
    rndb_config::parse_str(&ini, Path::new("t.ini")).expect("config")
}

/// Three data nodes of one node group.
fn three_nodes() -> ClusterConfig {
    one_group(3)
}

/// Three nodes of one node group. The master, node 1, fails after its CNTR_START_CONF
/// reached both others, which restored under its restart number: the new master counts
/// those restores and starts at once, without a partial start's wait (seed 0x5000006: a new
/// master that counted only restores under a number it sent itself waited for
/// StartPartialTimeout, and the cluster never served again in the run).
#[test]
fn a_new_master_counts_restores_under_the_restart_its_predecessor_numbered() {
    let config = three_nodes();
    let disks = (1..=3)
        .map(|n| disk_with_rows(&config, n, &[(1, 10, 1)]))
        .collect();
    let mut cluster = Cluster::with_config(&config, disks, false);
    cluster.hold = Some((0, "DBLQH"));
    cluster.run(cluster.start);
    assert!(!cluster.nodes[1].0.qmgr.started());
    cluster.fatal[0] = Some("lost power".into());
    let now = cluster.start + std::time::Duration::from_millis(500);
    for index in 1..3 {
        cluster.nodes[index].0.on_timer(now);
    }
    cluster.run(now);
    assert_eq!(cluster.fatal[1..], [None, None]);
    for index in 1..3 {
        let (kernel, disk) = &cluster.nodes[index];
        assert!(kernel.qmgr.started(), "node {} serves", index + 1);
        let sysfile = Sysfile::from_file(&disk.0["D1/DBDIH/P0.sysfile"], index as u32 + 1)
            .expect("a sysfile");
        let numbers: Vec<u32> = sysfile.restarts.iter().map(|r| r.no).collect();
        assert_eq!(numbers, vec![0, 1], "node {}", index + 1);
    }
}

/// Three nodes of one node group. The master, node 1, fails after its CNTR_START_CONF
/// (restart 1) reached node 2 only; node 2 restored and named restart 1 in its sysfile.
/// Node 2, master now, hears node 3 (which never heard the GCI) once StartPartialTimeout has
/// passed and chooses the same GCI again under a new number, 2. Before they serve, both
/// sysfiles must name number 2: their redo logs will hold GCIs of restart 2, and a sysfile
/// naming 1 counts at the next system restart as one that missed restart 2, restoring no GCI
/// past it (seed 0x1400846: no node of a group could restore the saved GCI 15, and the
/// cluster could not start). Node 2's own restore under number 1 must not count.
#[test]
fn a_restart_numbered_anew_by_a_new_master_is_in_the_sysfile_before_the_node_serves() {
    let config = three_nodes();
    let disks = (1..=3)
        .map(|n| disk_with_rows(&config, n, &[(1, 10, 1)]))
        .collect();
    let mut cluster = Cluster::with_config(&config, disks, false);
    // Node 1 chose the restart GCI, but its redo log is slow to read and its CONF to node 3
    // is lost: node 2 restores alone.
    cluster.hold = Some((0, "DBLQH"));
    cluster.lose = Some((NodeId(1), NodeId(3), gsn::CNTR_START_CONF));
    cluster.run(cluster.start);
    let named = |c: &Cluster, index: usize| -> Vec<Vec<u32>> {
        let node = index as u32 + 1;
        ["D1/DBDIH/P0.sysfile", "D2/DBDIH/P0.sysfile"]
            .iter()
            .map(|path| match c.nodes[index].1 .0.get(*path) {
                Some(bytes) => {
                    let sysfile = Sysfile::from_file(bytes, node).expect(path);
                    sysfile.restarts.iter().map(|r| r.no).collect()
                }
                None => Vec::new(),
            })
            .collect()
    };
    assert_eq!(
        named(&cluster, 1),
        vec![vec![0, 1]; 2],
        "node 2 restored for restart 1"
    );
    // Node 1 loses power; nodes 2 and 3 start once StartPartialTimeout has passed. Node 2's
    // sysfile writes are slow: until they are done, no node serves.
    cluster.fatal[0] = Some("lost power".into());
    cluster.hold = Some((1, "sysfile"));
    let timeout = u64::from(config.data_nodes[0].start_partial_timeout_ms);
    let started = |c: &Cluster, i: usize| c.nodes[i].0.qmgr.started();
    let mut at = 0;
    while !(started(&cluster, 1) && started(&cluster, 2)) {
        at += 500;
        assert!(at <= timeout + 5_000, "nodes 2 and 3 never started");
        if at == timeout + 2_000 {
            assert!(
                !started(&cluster, 2),
                "node 3 serves while node 2's sysfile names the old restart number"
            );
            cluster.hold = None;
        }
        let now = cluster.start + std::time::Duration::from_millis(at);
        for index in 1..3 {
            cluster.nodes[index].0.on_timer(now);
        }
        cluster.run(now);
    }
    assert_eq!(cluster.fatal[1..], [None, None]);
    for index in 1..3 {
        assert_eq!(
            named(&cluster, index),
            vec![vec![0, 1, 2]; 2],
            "node {} serves under restart 2, and its sysfile must say so",
            index + 1
        );
    }
}

/// Node 1's schema log holds a second table, `u`, created in GCI 1, that node 2's lacks (a
/// DICT master that failed before passing the create on, or a takeover's undo not logged by
/// the crash). The system restart must bring back one dictionary: `u` was never acknowledged,
/// so it is dropped on node 1, and the drop is logged, so the next restart agrees too (and
/// node 2's raised id counter is logged); table `t`, which both hold, keeps its rows.
#[test]
fn a_system_restart_drops_a_table_some_restored_node_lacks() {
    let config = config();
    let mut disks: Vec<MemDisk> = (1..=2)
        .map(|n| disk_with_rows(&config, n, &[(1, 10, 1)]))
        .collect();
    splice_schema(&mut disks[0], &[create_u(2)]);
    let mut cluster = Cluster::restart(disks);
    assert_eq!(cluster.fatal, vec![None, None]);
    let held = |c: &Cluster, name: &str| -> Vec<bool> {
        c.nodes.iter().map(|(k, _)| k.has_table(name)).collect()
    };
    assert_eq!(held(&cluster, "u"), vec![false, false], "one dictionary");
    assert_eq!(held(&cluster, "t"), vec![true, true]);
    let rows = cluster.state()[0].2;
    // The restarted cluster saves GCI 2 (node 1's drop in it) and crashes; the next restart
    // agrees with no help.
    cluster.save_checkpoint();
    let disks = cluster.crash();
    let log = &disks[0].0[super::dict::log::SCHEMA_LOG];
    let changes = super::dict::log::logged_changes(&log[format::HEADER_BYTES..]);
    assert_eq!(
        changes,
        vec![
            (gsn::CREATE_TABLE_REQ, 1),
            (gsn::CREATE_TABLE_REQ, 1),
            (gsn::DROP_TABLE_REQ, 2)
        ],
        "node 1 logged the drop in the restarted cluster's first GCI"
    );
    // Node 2 held nothing to drop, but its id counter rose to node 1's: logged, so that its
    // log alone never gives id 2 again.
    let log = &disks[1].0[super::dict::log::SCHEMA_LOG];
    let changes = super::dict::log::logged_changes(&log[format::HEADER_BYTES..]);
    assert_eq!(
        changes,
        vec![
            (gsn::CREATE_TABLE_REQ, 1),
            (super::dict::agree::COUNTER_RECORD, 2)
        ],
        "node 2 logged the agreed id counter in the restarted cluster's first GCI"
    );
    let cluster = Cluster::restart(disks);
    for (kernel, _) in &cluster.nodes {
        assert_eq!(kernel.dict.next_id(), 3, "the counter replayed");
    }
    assert_eq!(cluster.fatal, vec![None, None]);
    assert_eq!(held(&cluster, "u"), vec![false, false]);
    assert_eq!(held(&cluster, "t"), vec![true, true]);
    assert_eq!(cluster.state()[0].2, rows, "table t's row is restored");
}

/// Three nodes of one node group. Node 1, master, sends CNTR_START_CONF (restart 1) to both
/// others and loses power; node 3 restored under restart 1, node 2 (master now) is slow to
/// read its redo log. Past StartPartialTimeout node 2 numbers the restart anew (2) and loses
/// power right after its CONF went out. Node 3 handles node 2's failure before node 2's CONF,
/// read before the failure, arrives: that CONF is ignored (not from its master), and node 3
/// starts. (A review found it: the CONF renumbered node 3 while it rewrote its sysfile, its
/// own START_REP went unheard, and it never served.)
#[test]
fn a_conf_from_a_failed_master_is_ignored_and_the_new_master_starts() {
    let config = three_nodes();
    let disks = (1..=3)
        .map(|n| disk_with_rows(&config, n, &[(1, 10, 1)]))
        .collect();
    let mut cluster = Cluster::with_config(&config, disks, false);
    cluster.hold = Some((1, "DBLQH"));
    cluster.run(cluster.start);
    assert!(
        cluster.nodes[2].0.system_restart_gci().is_some(),
        "node 3 heard restart 1"
    );
    assert!(!cluster.nodes[2].0.qmgr.started());
    cluster.fatal[0] = Some("lost power".into());
    cluster.crash_after_send = Some((1, gsn::CNTR_START_CONF));
    let timeout = u64::from(config.data_nodes[0].start_partial_timeout_ms);
    let mut at = 0;
    while at <= timeout + 60_000 && !cluster.nodes[2].0.qmgr.started() {
        at += 500;
        let now = cluster.start + std::time::Duration::from_millis(at);
        for index in 1..3 {
            if cluster.fatal[index].is_none() {
                cluster.nodes[index].0.on_timer(now);
            }
        }
        cluster.run(now);
    }
    assert!(
        cluster.fatal[1].is_some(),
        "node 2 numbered the restart anew and lost power"
    );
    assert_eq!(cluster.fatal[2], None);
    assert!(
        cluster.nodes[2].0.qmgr.started(),
        "node 3, alone and restored, never serves ({at} ms)"
    );
}

/// Four nodes of one node group (four replicas).
fn four_nodes() -> ClusterConfig {
    one_group(4)
}

/// As above with four nodes: node 2's CONF (restart 2) to node 3 is lost, the one to node 4
/// arrives after node 4 handled node 2's failure (and told node 3, master now, it restored
/// under 1). Both serve. (Before, node 4 took that CONF, missed node 3's START_REP while it
/// rewrote its sysfile, and never served, though it took part in the checkpoints.)
#[test]
fn a_conf_from_a_failed_master_leaves_no_node_that_never_serves() {
    let config = four_nodes();
    let disks = (1..=4)
        .map(|n| disk_with_rows(&config, n, &[(1, 10, 1)]))
        .collect();
    let mut cluster = Cluster::with_config(&config, disks, false);
    cluster.hold = Some((1, "DBLQH"));
    cluster.run(cluster.start);
    assert!(cluster.nodes[3].0.system_restart_gci().is_some());
    cluster.fatal[0] = Some("lost power".into());
    cluster.crash_after_send = Some((1, gsn::CNTR_START_CONF));
    cluster.lose = Some((NodeId(2), NodeId(3), gsn::CNTR_START_CONF));
    let timeout = u64::from(config.data_nodes[0].start_partial_timeout_ms);
    for at in (500..=timeout + 60_000).step_by(500) {
        let now = cluster.start + std::time::Duration::from_millis(at);
        for index in 1..4 {
            if cluster.fatal[index].is_none() {
                cluster.nodes[index].0.on_timer(now);
            }
        }
        cluster.run(now);
    }
    assert_eq!(cluster.fatal[2..], [None, None]);
    let sysfile = |i: usize| {
        Sysfile::from_file(&cluster.nodes[i].1 .0["D1/DBDIH/P0.sysfile"], i as u32 + 1)
            .expect("a sysfile")
    };
    assert!(cluster.nodes[2].0.qmgr.started(), "node 3 serves");
    assert!(
        cluster.nodes[2].0.durable_gci() > 20,
        "and saves checkpoints"
    );
    let (node4, restarts) = (sysfile(3).restorable_gci, sysfile(3).restarts);
    assert!(
        cluster.nodes[3].0.qmgr.started(),
        "node 4 never serves, yet its sysfile names GCI {node4} restorable, restarts {restarts:?}"
    );
}

/// Three nodes of one node group. Node 1, master, sends CNTR_START_REP to node 2 and loses
/// power; its START_REP to node 3 is lost, and node 2 sees the failure before the START_REP:
/// node 2, master now, starts both.
#[test]
fn a_start_rep_that_reached_some_nodes_only_leaves_none_waiting() {
    let config = three_nodes();
    let disks = (1..=3)
        .map(|n| disk_with_rows(&config, n, &[(1, 10, 1)]))
        .collect();
    let mut cluster = Cluster::with_config(&config, disks, false);
    cluster.crash_after_send = Some((0, gsn::CNTR_START_REP));
    cluster.lose = Some((NodeId(1), NodeId(3), gsn::CNTR_START_REP));
    cluster.run(cluster.start);
    for at in (500..=60_000).step_by(500) {
        let now = cluster.start + std::time::Duration::from_millis(at);
        for index in 1..3 {
            if cluster.fatal[index].is_none() {
                cluster.nodes[index].0.on_timer(now);
            }
        }
        cluster.run(now);
    }
    assert!(cluster.nodes[1].0.qmgr.started());
    let sysfile = Sysfile::from_file(&cluster.nodes[2].1 .0["D1/DBDIH/P0.sysfile"], 3).unwrap();
    assert!(
        cluster.nodes[2].0.qmgr.started(),
        "node 3 does not serve ({:?}); its sysfile names GCI {} restorable, restarts {:?}",
        cluster.fatal[2],
        sysfile.restorable_gci,
        sysfile.restarts
    );
}

/// The CREATE TABLE of `u` (`k` Int32 key, `v` Int32) that gives it id `first_id`.
fn create_u(first_id: u32) -> SchemaChange {
    let def = TableDef::new(
        "u",
        vec![
            ColumnDef::key("k", ColumnType::Int32),
            ColumnDef::new("v", ColumnType::Int32),
        ],
    );
    let mut request = Vec::new();
    signals::encode_table_def(&mut request, &def);
    SchemaChange {
        signal: gsn::CREATE_TABLE_REQ,
        first_id,
        request,
    }
}

/// Splices SCHEMA records of GCI 1 (`changes`) into `disk`'s schema log before its last
/// record (GCI 1's GCI_COMPLETED, as long as a record with no body is).
fn splice_schema(disk: &mut MemDisk, changes: &[SchemaChange]) {
    let schema = disk.0.get_mut("D1/DBDICT/P0.SchemaLog").expect("a log");
    let mut completed = Vec::new();
    format::append_record(&mut completed, 1 << 32, kind::GCI_COMPLETED, |_| {});
    let cut = schema.len() - completed.len();
    let mut records = Vec::new();
    for change in changes {
        format::append_record(&mut records, 1 << 32, kind::SCHEMA, |b| change.encode(b));
    }
    schema.splice(cut..cut, records);
}

fn index_objects(c: &Cluster) -> Vec<Vec<(u32, String, String)>> {
    c.nodes.iter().map(|(k, _)| k.dict_objects()).collect()
}

/// Node 1 holds a unique index `ux` on t(v) (id 2, its hidden table id 3) and table `u` with
/// an ordered index `ox` (ids 4, 5), which node 2 lacks. The restart drops them on node 1;
/// the next restart agrees too, and table t keeps its rows.
#[test]
fn a_system_restart_drops_indexes_and_a_table_with_its_index() {
    let config = config();
    let mut disks: Vec<MemDisk> = (1..=2)
        .map(|n| disk_with_rows(&config, n, &[(1, 10, 1)]))
        .collect();
    let index = |table: &str, name: &str, kind: rndb_protocol::IndexKind, first_id: u32| {
        let mut request = Vec::new();
        signals::CreateIndexReq {
            table: table.into(),
            index: name.into(),
            kind,
            columns: vec!["v".into()],
        }
        .encode(&mut request);
        SchemaChange {
            signal: gsn::CREATE_INDEX_REQ,
            first_id,
            request,
        }
    };
    let create_u = create_u(4);
    splice_schema(
        &mut disks[0],
        &[
            index("t", "ux", rndb_protocol::IndexKind::Unique, 2),
            create_u,
            index("u", "ox", rndb_protocol::IndexKind::Ordered, 5),
        ],
    );
    let mut cluster = Cluster::restart(disks);
    assert_eq!(cluster.fatal, vec![None, None]);
    assert_eq!(index_objects(&cluster)[0], index_objects(&cluster)[1]);
    let rows = cluster.state()[0].2;
    cluster.save_checkpoint();
    let disks = cluster.crash();
    let cluster = Cluster::restart(disks);
    assert_eq!(cluster.fatal, vec![None, None]);
    assert_eq!(index_objects(&cluster)[0], index_objects(&cluster)[1]);
    assert_eq!(cluster.state()[0].2, rows);
}

/// Three nodes of one node group; nodes 1 and 3 hold table `u`, which node 2 lacks. Node 1,
/// master, sends DICT_RESTART_DROP (u) and CNTR_START_REP to both others and loses power;
/// they handle its failure before its frames, and ignore both (not from their master): the
/// new master makes the dictionaries one again. (A review found it: node 3 ignored the DROP
/// and took the START_REP, and served with a table node 2 lacked.)
#[test]
fn a_restart_drop_and_start_rep_from_a_failed_master_are_both_ignored() {
    let config = three_nodes();
    let mut disks: Vec<MemDisk> = (1..=3)
        .map(|n| disk_with_rows(&config, n, &[(1, 10, 1)]))
        .collect();
    let create_u = create_u(2);
    splice_schema(&mut disks[0], std::slice::from_ref(&create_u));
    splice_schema(&mut disks[2], &[create_u]);
    let mut cluster = Cluster::with_config(&config, disks, false);
    cluster.crash_after_send = Some((0, gsn::CNTR_START_REP));
    cluster.run(cluster.start);
    assert!(cluster.fatal[0].is_some());
    assert_eq!(cluster.fatal[1..], [None, None]);
    let serving: Vec<bool> = (1..3).map(|i| cluster.nodes[i].0.qmgr.started()).collect();
    let held: Vec<bool> = (1..3).map(|i| cluster.nodes[i].0.has_table("u")).collect();
    assert!(
        !(serving == [true, true] && held[0] != held[1]),
        "nodes 2 and 3 serve; table u held: {held:?}"
    );
}

/// Three nodes of one node group. The master's CNTR_START_REP reaches node 2 (which serves)
/// and not node 3; then the master fails. Node 3 never serves under that restart: node 2's
/// failure round asks it to confirm the side, and a node that does not serve confirms
/// nothing, so node 2 fails it after ArbitrationTimeout (2315); started again, it rejoins by
/// node restart. (Before, node 3 neither served nor stopped, while it took part in the
/// checkpoints.)
#[test]
fn a_node_that_missed_the_start_is_failed_and_rejoins_by_node_restart() {
    let config = three_nodes();
    let disks = (1..=3)
        .map(|n| disk_with_rows(&config, n, &[(1, 10, 1)]))
        .collect();
    let mut cluster = Cluster::with_config(&config, disks, false);
    cluster.lose = Some((NodeId(1), NodeId(3), gsn::CNTR_START_REP));
    cluster.run(cluster.start);
    assert!(cluster.nodes[1].0.qmgr.started(), "node 2 serves");
    assert!(
        !cluster.nodes[2].0.qmgr.started(),
        "node 3 never heard the start"
    );
    cluster.fatal[0] = Some("lost power".into());
    let timeout = u64::from(config.data_nodes[0].arbitration_timeout_ms);
    let mut at = 0;
    while cluster.fatal[2].is_none() {
        at += 500;
        assert!(at <= timeout + 5_000, "node 3 neither serves nor stops");
        let now = cluster.start + std::time::Duration::from_millis(at);
        for index in 1..3 {
            if cluster.fatal[index].is_none() {
                cluster.nodes[index].0.on_timer(now);
            }
        }
        cluster.run(now);
    }
    let why = cluster.fatal[2].clone().unwrap_or_default();
    assert!(why.contains("2315"), "{why}");
    assert!(!cluster.nodes[2].0.qmgr.started());
    assert_eq!(cluster.fatal[1], None);
    assert!(cluster.nodes[1].0.qmgr.started(), "node 2 serves on");
}

#[test]
fn a_node_stopping_alone_refuses_api_work_only_once_its_api_nodes_know() {
    let ini = INI.replace(
        "[api]\nNodeId=50\n",
        "[api]\nNodeId=50\nHostName=127.0.0.1\n[api]\nNodeId=51\n",
    );
    let config = rndb_config::parse_str(&ini, Path::new("t.ini")).expect("config");
    let mut cluster =
        Cluster::with_config(&config, vec![MemDisk::default(), MemDisk::default()], true);
    cluster.run(cluster.start);
    let kernel = &mut cluster.nodes[0].0;
    assert!(kernel.qmgr.started());
    let (a, b) = (NodeId(50), NodeId(51));
    kernel.on_connect(a);
    kernel.on_connect(b);
    let began = cluster.start + std::time::Duration::from_secs(1);
    kernel.begin_stop(began, false);
    let told = |sent: &Sent| -> Vec<NodeId> {
        (sent.0.iter())
            .filter(|(_, h, _)| h.signal == gsn::NODE_STOPPING_REP)
            .filter(|(_, h, _)| h.receiver_block == signals::block::API)
            .map(|(to, _, _)| *to)
            .collect()
    };
    let mut sent = Sent::default();
    assert!(!kernel.ready_to_stop(&mut sent, began));
    assert_eq!(told(&sent), vec![a, b], "each API node told once");
    assert!(!kernel.refusing(), "it serves while they learn");
    let conf = FrameHeader {
        signal: gsn::NODE_STOPPING_CONF,
        receiver_block: signals::block::QMGR,
        sender_block: signals::block::API,
        request_id: 0,
    };
    kernel
        .on_frame(a, &conf, &[], &mut sent, began)
        .expect("NODE_STOPPING_CONF");
    let mut sent = Sent::default();
    assert!(!kernel.ready_to_stop(&mut sent, began));
    assert!(told(&sent).is_empty(), "told only once");
    assert!(!kernel.refusing(), "API node 51 has not answered");
    // Node 51 links again: its new link is told anew.
    kernel.on_disconnect(b, &mut sent, began);
    kernel.on_connect(b);
    let mut sent = Sent::default();
    assert!(!kernel.ready_to_stop(&mut sent, began));
    assert_eq!(told(&sent), vec![b]);
    // It never answers: past STOP_API_MAX the node refuses new work all the same.
    let late = began + super::graceful_stop::STOP_API_MAX;
    assert!(!kernel.ready_to_stop(&mut sent, late - std::time::Duration::from_millis(1)));
    assert!(!kernel.refusing());
    kernel.ready_to_stop(&mut sent, late);
    assert!(kernel.refusing());
}

#[test]
fn a_stop_of_every_data_node_refuses_api_work_at_once() {
    let mut cluster = Cluster::new(vec![MemDisk::default(), MemDisk::default()], true);
    cluster.run(cluster.start);
    let kernel = &mut cluster.nodes[0].0;
    kernel.on_connect(NodeId(50));
    kernel.begin_stop(cluster.start, true);
    assert!(kernel.refusing(), "its API nodes have nowhere else to go");
    let mut sent = Sent::default();
    kernel.ready_to_stop(&mut sent, cluster.start);
    // The API node is not told (the other data node is: it stops too).
    let told: Vec<(NodeId, Vec<u8>)> = (sent.0.iter())
        .filter(|(_, h, _)| h.signal == gsn::NODE_STOPPING_REP)
        .map(|(to, _, p)| (*to, p.clone()))
        .collect();
    assert_eq!(told, vec![(NodeId(2), vec![3])]);
}

#[test]
fn a_node_stopping_alone_puts_its_stop_off_when_its_group_peer_must_stop() {
    let mut cluster = Cluster::new(vec![MemDisk::default(), MemDisk::default()], true);
    cluster.run(cluster.start);
    let kernel = &mut cluster.nodes[0].0;
    kernel.begin_stop(cluster.start, false);
    assert!(kernel.is_stopping());
    // Node 2's disk failed and its president let it stop: it asks its group's peers.
    let mut payload = Vec::new();
    rndb_protocol::qmgr::Arbit {
        ticket: 1,
        node: 2,
        nodes: Vec::new(),
    }
    .encode(&mut payload);
    let req = FrameHeader {
        signal: gsn::STOP_PERM_REQ,
        receiver_block: signals::block::QMGR,
        sender_block: signals::block::QMGR,
        request_id: 0,
    };
    let mut sent = Sent::default();
    kernel
        .on_frame(NodeId(2), &req, &payload, &mut sent, cluster.start)
        .expect("STOP_PERM_REQ");
    // Leaving too would leave node group 0 without a live node: node 1 serves on (its stop
    // waits for another member to serve), and lets node 2 go.
    assert!(kernel.stop_deferred());
    assert!(!kernel.refusing());
    // Node 2 still looks up until its link closes: the stop waits all the same.
    for _ in 0..2 {
        assert!(!kernel.ready_to_stop(&mut sent, cluster.start));
        assert!(kernel.stop_deferred());
    }
    assert!(
        (sent.0.iter()).any(|(to, h, _)| *to == NodeId(2) && h.signal == gsn::STOP_PERM_CONF),
        "{:?}",
        sent.0.iter().map(|f| f.1.signal).collect::<Vec<_>>()
    );
}

#[test]
fn a_node_stopping_alone_puts_its_stop_off_when_its_group_peer_fails_but_not_when_it_stops() {
    let stopping_rep = FrameHeader {
        signal: gsn::NODE_STOPPING_REP,
        receiver_block: signals::block::QMGR,
        sender_block: signals::block::QMGR,
        request_id: 0,
    };
    for peer_stops_gracefully in [false, true] {
        let mut cluster = Cluster::new(vec![MemDisk::default(), MemDisk::default()], true);
        cluster.run(cluster.start);
        let now = cluster.start;
        let kernel = &mut cluster.nodes[0].0;
        kernel.begin_stop(now, false);
        let mut sent = Sent::default();
        if peer_stops_gracefully {
            kernel
                .on_frame(NodeId(2), &stopping_rep, &[], &mut sent, now)
                .expect("NODE_STOPPING_REP");
        }
        kernel.on_disconnect(NodeId(2), &mut sent, now);
        let ready = kernel.ready_to_stop(&mut sent, now);
        if peer_stops_gracefully {
            // Both members of the group were asked to stop (SIGTERM to each): it goes on.
            assert!(!kernel.stop_deferred());
            assert!(kernel.is_stopping() || ready);
        } else {
            assert!(!ready);
            assert!(kernel.stop_deferred(), "it serves on");
            assert!(!kernel.refusing());
            let later = now + std::time::Duration::from_secs(60);
            assert!(
                !kernel.ready_to_stop(&mut sent, later),
                "not while it is alone"
            );
        }
    }
}

/// Drives graceful stops from `from_ms` after the cluster's start: every 100 ms each node's
/// timer runs and
/// each stopping node is asked whether it may go; one that may sends its NODE_STOPPING_REPs
/// and exits (the others see its links close). Returns, in order, each node that left, and
/// whether each other node still running had then saved what it answered and stopped with
/// every data node.
fn drive_stops(
    cluster: &mut Cluster,
    from_ms: u64,
    until_ms: u64,
) -> Vec<(NodeId, Vec<(NodeId, bool)>)> {
    let mut left = Vec::new();
    for at in (from_ms..=until_ms).step_by(100) {
        let now = cluster.start + std::time::Duration::from_millis(at);
        for index in 0..cluster.nodes.len() {
            if cluster.fatal[index].is_some() {
                continue;
            }
            let me = NodeId(index as u16 + 1);
            let kernel = &mut cluster.nodes[index].0;
            kernel.on_timer(now);
            if !kernel.is_stopping() {
                continue;
            }
            let mut sent = Sent::default();
            if kernel.ready_to_stop(&mut sent, now) {
                kernel.on_shutdown(&mut sent);
                cluster.fatal[index] = Some("left gracefully".into());
                let others = (cluster.nodes.iter().zip(&cluster.fatal).enumerate())
                    .filter(|(_, (_, why))| why.is_none())
                    .map(|(i, ((k, _), _))| {
                        let saved = k.saved_for_stop() && !k.stops_alone();
                        (NodeId(i as u16 + 1), saved)
                    })
                    .collect();
                left.push((me, others));
            }
            cluster
                .inject
                .extend(sent.0.into_iter().map(|(to, h, p)| (me, to, h, p)));
        }
        cluster.run(now);
    }
    left
}

/// Every node left gracefully, none before every other node still running had saved and
/// stopped with every data node (`left` from `drive_stops`).
fn assert_every_node_left_after_all_saved(
    cluster: &Cluster,
    left: &[(NodeId, Vec<(NodeId, bool)>)],
) {
    for (node, others) in left {
        for (other, saved) in others {
            assert!(
                saved,
                "node {node} left before node {other} saved: {left:?}"
            );
        }
    }
    assert!(
        (cluster.fatal.iter()).all(|why| why.as_deref() == Some("left gracefully")),
        "{:?}",
        cluster.fatal
    );
}

/// Four data nodes in node groups {1, 2} and {3, 4}, with files.
const TWO_GROUPS: &str = "[ndbd default]\nNoOfReplicas=2\nDataMemory=1M\n\
[ndbd]\nNodeId=1\nHostName=127.0.0.1\n[ndbd]\nNodeId=2\nHostName=127.0.0.1\n\
[ndbd]\nNodeId=3\nHostName=127.0.0.1\n[ndbd]\nNodeId=4\nHostName=127.0.0.1\n\
[api]\nNodeId=50\nHostName=127.0.0.1\n";

/// The four data nodes of `TWO_GROUPS`, started over fresh disks.
fn two_groups_started() -> Cluster {
    let config = rndb_config::parse_str(TWO_GROUPS, Path::new("t.ini")).expect("config");
    let disks = (0..4).map(|_| MemDisk::default()).collect();
    let mut cluster = Cluster::with_config(&config, disks, true);
    cluster.run(cluster.start);
    cluster
}

/// A SIGTERM to every data node at once is four stops alone. Before, each left once its own
/// commits were saved: node group {1, 2} could go while node 3 still waited for its save,
/// which then never came (no group of node 1's left to save it) and its last commits were
/// lost. Now a node that finds no member of its group serving on after it turns its stop into
/// a stop of every data node: no node leaves before every node saved, and none stops with
/// 2305.
#[test]
fn a_sigterm_to_every_data_node_saves_every_node_before_any_leaves() {
    let mut cluster = two_groups_started();
    assert!(cluster.nodes.iter().all(|(k, _)| k.qmgr.started()));
    for (kernel, _) in &mut cluster.nodes {
        kernel.begin_stop(cluster.start, false);
    }
    let left = drive_stops(&mut cluster, 100, 20_000);
    assert_eq!(left.len(), 4, "{left:?} {:?}", cluster.fatal);
    assert_every_node_left_after_all_saved(&cluster, &left);
}

/// A stop alone of a node whose group has another member serving on is a stop alone: the
/// member answers that it knows, and the node leaves without the others stopping. The last
/// member of the group then stopping alone stops every data node instead of leaving the
/// others to stop with 2305.
#[test]
fn a_stop_alone_stays_alone_while_its_group_keeps_a_member() {
    let mut cluster = two_groups_started();
    cluster.nodes[0].0.begin_stop(cluster.start, false);
    let left = drive_stops(&mut cluster, 100, 10_000);
    assert_eq!(
        left.iter().map(|l| l.0).collect::<Vec<_>>(),
        vec![NodeId(1)]
    );
    assert!(
        cluster.fatal[1..].iter().all(Option::is_none),
        "{:?}",
        cluster.fatal
    );
    assert!(cluster.nodes[1..].iter().all(|(k, _)| !k.is_stopping()));
    // Node 2 is now the last of its group.
    let began = cluster.start + std::time::Duration::from_millis(10_000);
    cluster.nodes[1].0.begin_stop(began, false);
    let left = drive_stops(&mut cluster, 10_100, 40_000);
    let order: Vec<NodeId> = left.iter().map(|l| l.0).collect();
    assert_eq!(order.len(), 3, "{left:?} {:?}", cluster.fatal);
    assert_every_node_left_after_all_saved(&cluster, &left);
}

/// A node stopping alone asks the other member of its group again when no answer came
/// (NODE_STOPPING_CONF refused by a full send buffer, seed 0x1879c: both nodes refused work
/// for STOP_FLUSH_MAX), and leaves alone once it answered.
#[test]
fn a_stop_alone_asks_its_group_again_until_it_answers() {
    let mut cluster = Cluster::new(vec![MemDisk::default(), MemDisk::default()], true);
    cluster.run(cluster.start);
    let now = cluster.start;
    let kernel = &mut cluster.nodes[0].0;
    kernel.begin_stop(now, false);
    let begins = |sent: &Sent| {
        (sent.0.iter())
            .filter(|(to, h, p)| {
                *to == NodeId(2) && h.signal == gsn::NODE_STOPPING_REP && p[..] == [2]
            })
            .count()
    };
    let mut sent = Sent::default();
    assert!(!kernel.ready_to_stop(&mut sent, now));
    assert_eq!(begins(&sent), 1);
    let soon = now + std::time::Duration::from_millis(50);
    let mut sent = Sent::default();
    assert!(!kernel.ready_to_stop(&mut sent, soon));
    assert_eq!(begins(&sent), 0, "not again at once");
    let later = now + std::time::Duration::from_millis(100);
    let mut sent = Sent::default();
    assert!(!kernel.ready_to_stop(&mut sent, later));
    assert_eq!(begins(&sent), 1, "again, no answer came");
    let conf = FrameHeader {
        signal: gsn::NODE_STOPPING_CONF,
        receiver_block: signals::block::QMGR,
        sender_block: signals::block::QMGR,
        request_id: 0,
    };
    kernel
        .on_frame(NodeId(2), &conf, &[], &mut sent, later)
        .expect("NODE_STOPPING_CONF");
    let mut sent = Sent::default();
    let much_later = now + std::time::Duration::from_millis(500);
    kernel.ready_to_stop(&mut sent, much_later);
    assert_eq!(begins(&sent), 0, "answered");
    assert!(kernel.stops_alone(), "node 2 serves on");
}
