//! A system restart on two kernels over in-memory disks: a node whose sysfile names no GCI yet
//! (the cluster crashed after another node wrote its sysfile for the first global checkpoint,
//! before this one did) still restores that checkpoint from its redo log, and a node with no
//! files at all stops with an error that says so.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::time::Instant;

use rndb_config::{ClusterConfig, NodeId};
use rndb_transporter::FrameHeader;

use super::{Kernel, Outbox, SendFailure};
use crate::ndbfs::format::{self, kind, FileHeader, Sysfile};
use crate::ndbfs::{execute, Disk};

const INI: &str = "[ndbd default]\nNoOfReplicas=2\nDataMemory=1M\n\
[ndbd]\nNodeId=1\nHostName=127.0.0.1\n[ndbd]\nNodeId=2\nHostName=127.0.0.1\n\
[api]\nNodeId=50\nHostName=127.0.0.1\n";

/// Files by path; nothing is ever lost.
#[derive(Default)]
struct MemDisk(BTreeMap<String, Vec<u8>>);

impl Disk for MemDisk {
    fn write_at(&mut self, path: &str, offset: u64, bytes: &[u8]) -> io::Result<()> {
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
    fn list(&mut self, path: &str) -> io::Result<Vec<String>> {
        let prefix = format!("{path}/");
        Ok(self
            .0
            .keys()
            .filter_map(|p| p.strip_prefix(&prefix).map(str::to_string))
            .collect())
    }
    fn remove(&mut self, path: &str) -> io::Result<()> {
        self.0.remove(path);
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

fn config() -> ClusterConfig {
    rndb_config::parse_str(INI, Path::new("t.ini")).expect("config")
}

/// A disk whose every redo part saved global checkpoint `gci` (a GCI_COMPLETED record after
/// the file header), and whose sysfile names `sysfile_gci` (none when 0).
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
    if sysfile_gci > 0 {
        let sysfile = Sysfile {
            restorable_gci: sysfile_gci,
        };
        for path in ["D1/DBDIH/P0.sysfile", "D2/DBDIH/P0.sysfile"] {
            disk.0
                .insert(path.into(), sysfile.file_bytes(u32::from(node)));
        }
    }
    disk
}

/// Starts both nodes without `--initial` over `disks` and runs them until nothing moves;
/// returns each node's error, if it stopped, and its epoch.
fn restart(disks: Vec<MemDisk>) -> Vec<(Option<String>, u64)> {
    let config = config();
    let now = Instant::now();
    let mut nodes: Vec<(Kernel, MemDisk)> = config
        .data_nodes
        .iter()
        .zip(disks)
        .map(|(node, disk)| {
            let mut kernel = Kernel::with_files(&config, node, false);
            for other in &config.data_nodes {
                if other.node_id != node.node_id {
                    kernel.on_connect(other.node_id);
                }
            }
            (kernel, disk)
        })
        .collect();
    let mut fatal: Vec<Option<String>> = vec![None; nodes.len()];
    let mut frames: Vec<(NodeId, NodeId, FrameHeader, Vec<u8>)> = Vec::new();
    for _ in 0..1000 {
        let mut next = Vec::new();
        let mut moved = !frames.is_empty();
        for (index, (kernel, disk)) in nodes.iter_mut().enumerate() {
            if fatal[index].is_some() {
                continue;
            }
            let me = NodeId(index as u16 + 1);
            let mut sent = Sent::default();
            for (from, _, header, payload) in frames.iter().filter(|f| f.1 == me) {
                kernel
                    .on_frame(*from, header, payload, &mut sent, now)
                    .expect("a valid frame");
            }
            kernel.run_jobs(&mut sent, now);
            for request in kernel.take_fs_requests() {
                moved = true;
                if let Err(why) = kernel.on_fs_conf(execute(disk, request), &mut sent, now) {
                    fatal[index] = Some(why);
                    break;
                }
                kernel.run_jobs(&mut sent, now);
            }
            if let Some(why) = kernel.take_fatal() {
                fatal[index] = Some(why);
            }
            next.extend(sent.0.into_iter().map(|(to, h, p)| (me, to, h, p)));
        }
        frames = next;
        if !moved {
            break;
        }
    }
    nodes
        .iter()
        .zip(fatal)
        .map(|((kernel, _), why)| (why, kernel.current_gci()))
        .collect()
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
