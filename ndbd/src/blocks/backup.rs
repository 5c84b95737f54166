//! BACKUP: online backups (ndb_mgm's START BACKUP), taken while traffic goes on, as NDB's
//! BACKUP block takes them: a fuzzy scan of the rows plus a log of the changes made while it
//! ran, cut at a global checkpoint.
//!
//! The management server that was asked coordinates (`rndb_mgm::backup_round`), through the
//! node's report replies (`BackupCommand`); each started data node does its part here:
//!
//! 1. **Start** (`participants`: the started data nodes; a token names the round): every
//!    fragment is backed up by its first replica, in the partition map's order, that is a
//!    participant, so every node reaches the same split (a fragment none holds fails it).
//!    From this moment each such fragment logs the changes committed to it
//!    (`Fragment::backup_log`, filled in `finish_row`); then its rows are scanned into the
//!    data file, a step at a time between other work, as a local checkpoint's are. The node
//!    reports a fingerprint of its tables: nodes that began with different ones fail it.
//! 2. **Scanned**: the data file is synced; the node reports the newest GCI a row it wrote or a
//!    change it logged can have. The server stops the backup at the newest of these,
//!    `stop_gci`: no row in any data file is newer.
//! 3. **Stop**: once `stop_gci` is restorable here, every change of that global checkpoint and
//!    those before it has committed on every replica, so it is in the log. The log file ends
//!    (END), is synced, and the control file (the tables, their indexes, the counts) is
//!    written last: a backup with every node's control file is complete.
//!
//! A restore (`ndb_restore`) loads each data file and applies its log up to `stop_gci`: a row
//! the scan found before a change has that change in the log after it, and a row the scan
//! found after a change of a later GCI cannot exist (`stop_gci` is at least that GCI). The
//! byte layouts are in `ndbfs/backup.rs`.
//!
//! A participant that fails, a file that cannot be written, changes that outgrow
//! BackupLogBufferSize before the disk takes them, a table dropped under it, or a coordinator
//! that stops asking (its server gone) end the backup with NDB's error (1326, 1325, 1324,
//! 1340); its files stay, without a control file from this node, and the node goes on. A
//! backup needs files (1306 with Diskless).

use std::time::{Duration, Instant};

use rndb_config::NodeId;
use rndb_mgm::node_report::{BackupCommand, BackupPhase, BackupProgress};
use rndb_protocol::signals::{gsn, IndexInfo, TableInfo};
use rndb_protocol::NdbError;
use rndb_transporter::FrameHeader;

use super::fs::FsWait;
use super::tup::Row;
use super::{Kernel, Outbox, Signal};
use crate::ndbfs::backup::{self as layout, BackupCtl};
use crate::ndbfs::format::kind;
use crate::ndbfs::{FsData, FsError, FsOp};

/// Rows one step of the scan writes at most.
const ROWS_PER_STEP: usize = 2048;
/// Writes of the data file out at once, at most, whatever BackupDataBufferSize allows.
const WRITES_IN_FLIGHT_CAP: usize = 64;
/// A backup no management server has asked about for this long is given up (1326): the
/// server that coordinated it is gone. Servers ask in every report reply (every 200 ms).
const ORPHAN_TIMEOUT: Duration = Duration::from_secs(10);
/// Writes of the log file out at once, at most: more changes wait in the fragments' buffers
/// (counted against BackupLogBufferSize), so a slow backup disk gets few large writes.
const LOG_WRITES_IN_FLIGHT_MAX: usize = 2;

/// The changes committed to one fragment since its backup began, not yet handed to the log
/// file: records as they go into it.
#[derive(Debug, Default)]
pub struct BackupLog {
    bytes: Vec<u8>,
    records: u64,
    /// A SNAPSHOTSTART backup's: a change that replaces a row logs the image it replaced
    /// first (`backup_kind::BEFORE`).
    pub before_images: bool,
}

impl BackupLog {
    /// An empty log, with the images changes replace (`before_images`) or not.
    pub fn new(before_images: bool) -> Box<BackupLog> {
        Box::new(BackupLog {
            before_images,
            ..BackupLog::default()
        })
    }

    /// A change committed in `gci`: `row` is the new image, or for a delete the image removed
    /// (`kind::PUT`, `kind::DELETE`), or the image a PUT that follows replaced
    /// (`backup_kind::BEFORE`).
    pub fn push(&mut self, gci: u64, kind: u8, table_id: u32, fragment: u32, row: &Row) {
        layout::append_row(
            &mut self.bytes,
            gci,
            kind,
            table_id,
            fragment,
            row.encoded(),
        );
        self.records += 1;
    }
}

/// A backup to begin here (`BackupCommand::Start`).
struct Begin {
    id: u32,
    token: u64,
    participants: Vec<NodeId>,
    snapshot_start: bool,
}

/// What a completed file request of a backup was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BackupIo {
    /// The listing of the backup's directory (it must hold none of this node's files).
    Listed,
    DataWrite,
    DataSync,
    LogWrite(u64),
    LogSync,
    Ctl,
    /// A sync that closes the file of a backup given up (nothing waits for it).
    Close,
}

/// This node's online backups.
#[derive(Debug, Default)]
pub(crate) struct Backups {
    /// `<BackupDataDir>/BACKUP`, absolute; `None` without files.
    root: Option<String>,
    /// BackupLogBufferSize: changes logged but not yet written, at most.
    log_buffer_max: u64,
    /// BackupWriteSize: the bytes one step of the scan writes at most.
    write_size: usize,
    /// Writes of the data file out at once, at most: BackupDataBufferSize of them.
    data_writes_max: usize,
    /// The highest backup id this node has files of or took part in.
    last_id: u32,
    run: Option<Run>,
    /// This node's part of the last backup it took part in, as reported.
    progress: Option<BackupProgress>,
}

#[derive(Debug)]
struct Run {
    id: u32,
    /// The coordinator's name for this round (`BackupCommand::Start`).
    token: u64,
    dir: String,
    participants: Vec<NodeId>,
    /// The fragments this node backs up, (table, fragment), in scan order.
    claimed: Vec<(u32, u32)>,
    /// The scan: the claimed fragment it is in and the next slot.
    next: usize,
    slot: u32,
    /// The directory held none of this node's files; they are being written.
    listed: bool,
    data_written: u64,
    data_in_flight: usize,
    step_queued: bool,
    scanned: bool,
    data_synced: bool,
    /// The newest GCI of a row written to the data file.
    max_gci: u64,
    log_written: u64,
    /// Log bytes handed to NDBFS and not yet written, in how many writes.
    log_in_flight: u64,
    log_writes_in_flight: usize,
    log_records: u64,
    /// The newest GCI of a change logged.
    log_max_gci: u64,
    stop: Option<u32>,
    /// A SNAPSHOTSTART backup's point (`BackupCommand::Stop`).
    snapshot_gci: Option<u32>,
    /// The log's END is written; its sync and then the control file follow.
    finishing: bool,
    tables: Vec<TableInfo>,
    indexes: Vec<IndexInfo>,
    /// When a management server last asked about this backup.
    heard: Instant,
}

impl Backups {
    /// Backups under `root` (`<BackupDataDir>/BACKUP`) whose logs may hold `log_buffer_max`
    /// unwritten bytes; `last_id` is the highest backup id found there.
    pub fn new(root: String, log_buffer_max: u64, last_id: u32) -> Backups {
        Backups {
            root: Some(root),
            log_buffer_max,
            write_size: 256 * 1024,
            data_writes_max: 2,
            last_id,
            run: None,
            progress: None,
        }
    }
}

impl Kernel {
    /// Where backups go, how much unwritten log a backup may hold, and the highest backup id
    /// found there (set by `ndbd` from BackupDataDir and BackupLogBufferSize).
    pub fn set_backup_dir(&mut self, root: String, log_buffer_max: u64, last_id: u32) {
        self.backups = Backups::new(root, log_buffer_max, last_id);
        let durability = &self.durability;
        let write_size = (durability.backup_write_size)
            .min(durability.backup_max_write_size)
            .max(1);
        self.backups.write_size = usize::try_from(write_size).unwrap_or(usize::MAX);
        let writes = durability.backup_data_buffer_size / write_size;
        self.backups.data_writes_max = (writes as usize).clamp(1, WRITES_IN_FLIGHT_CAP);
    }

    /// This node's part of the last backup it took part in.
    pub fn backup_progress(&self) -> Option<&BackupProgress> {
        self.backups.progress.as_ref()
    }

    /// The highest backup id this node has files of or took part in.
    pub fn last_backup_id(&self) -> u32 {
        self.backups.last_id
    }

    /// Refuses (761, as NDB) an API node's DROP TABLE or DROP INDEX while a backup runs
    /// here: the backup's control file names the table. True when refused.
    pub(super) fn refuse_drop_during_backup(
        &mut self,
        from: NodeId,
        header: &FrameHeader,
        out: &mut dyn Outbox,
    ) -> bool {
        let dropping = matches!(header.signal, gsn::DROP_TABLE_REQ | gsn::DROP_INDEX_REQ);
        let Some(run) = &self.backups.run else {
            return false;
        };
        if !dropping || self.qmgr.is_data_node(from) {
            return false;
        }
        let error = NdbError::with_detail(761, format!("backup {} is running", run.id));
        let ref_signal = super::dict::schema::answers_of(header.signal).1;
        super::refuse(&mut self.unsent, out, from, header, ref_signal, &error);
        true
    }

    /// A management server's backup step (repeated in every reply while the backup runs:
    /// a step already taken is only noted as heard).
    pub fn backup_command(&mut self, command: BackupCommand, now: Instant) {
        let id = command.id();
        let same_round = |run: &Run| match &command {
            BackupCommand::Start { token, .. } => run.id == id && run.token == *token,
            _ => run.id == id,
        };
        if let Some(run) = self.backups.run.as_mut().filter(|r| same_round(r)) {
            run.heard = now;
            match command {
                BackupCommand::Start { .. } => {}
                BackupCommand::Stop {
                    stop_gci,
                    snapshot_gci,
                    ..
                } => {
                    if run.stop.is_none() {
                        run.snapshot_gci = snapshot_gci;
                        tracing::info!(
                            backup = id,
                            stop_gci,
                            "backup {id} stops at GCI {stop_gci}"
                        );
                        run.stop = Some(stop_gci);
                        self.backup_try_finish();
                    }
                }
                BackupCommand::Abort { error, .. } => self.backup_fail(NdbError::with_detail(
                    error,
                    "asked by the management server",
                )),
            }
            return;
        }
        let BackupCommand::Start {
            participants,
            token,
            snapshot_start,
            ..
        } = command
        else {
            return;
        };
        if (self.backups.progress.as_ref()).is_some_and(|p| p.id == id && p.token == token) {
            // Done (or given up) already; the server has not heard yet.
            return;
        }
        if let Some(run) = &self.backups.run {
            tracing::warn!(
                running = run.id,
                asked = id,
                "backup {id} asked while backup {} runs here: not started",
                run.id
            );
            return;
        }
        let participants: Vec<NodeId> = participants.into_iter().map(NodeId).collect();
        if !self.qmgr.started() || !participants.contains(&self.me) {
            return;
        }
        let begin = Begin {
            id,
            token,
            participants,
            snapshot_start,
        };
        self.backup_begin(begin, now);
    }

    fn backup_begin(&mut self, begin: Begin, now: Instant) {
        let Begin {
            id,
            token,
            participants,
            snapshot_start,
        } = begin;
        self.backups.last_id = self.backups.last_id.max(id);
        // Every change committed here from now on is logged; the newest GCI one committed
        // before can have is the start (a SNAPSHOTSTART backup goes back to the newest of
        // the participants').
        let newest_logged = self.lqh.redo.as_ref().map_or(0, |r| r.newest_logged);
        let start_gci = [self.gcp.current, self.lqh.newest_committed, newest_logged]
            .into_iter()
            .max()
            .unwrap_or(0);
        self.backups.progress = Some(BackupProgress {
            id,
            token,
            phase: Some(BackupPhase::Running),
            start_gci,
            ..BackupProgress::default()
        });
        let root = match (&self.backups.root, self.has_files) {
            (Some(root), true) => root.clone(),
            _ => {
                return self
                    .backup_failed(id, NdbError::with_detail(1306, "this node keeps no files"))
            }
        };
        // Each fragment goes to its first replica among the participants: the same split on
        // every node, whatever each holds alive or primary just now.
        let mut claimed = Vec::new();
        let mut unclaimed = None;
        let (mut tables, mut indexes) = (Vec::new(), Vec::new());
        for table_id in self.dict.table_ids() {
            let Some(table) = self.dict.get(table_id) else {
                continue;
            };
            if table.hidden_for.is_some() {
                continue;
            }
            tables.push(table.info.clone());
            let index_ids = table.unique.iter().map(|u| u.index_id);
            let index_ids = index_ids.chain(table.ordered.iter().map(|o| o.index_id));
            indexes.extend(
                index_ids
                    .filter_map(|i| self.dict.index(i))
                    .map(|i| i.info.clone()),
            );
            for fragment in 0..table.fragment_count {
                let first = self
                    .dih
                    .replicas(fragment)
                    .iter()
                    .find(|n| participants.contains(n));
                match first {
                    Some(&node) if node == self.me => claimed.push((table_id, fragment)),
                    Some(_) => {}
                    None => unclaimed = Some((table.info.def.name.clone(), fragment)),
                }
            }
        }
        if let Some((table, fragment)) = unclaimed {
            // A node group none of whose nodes serves yet (they start a moment after the
            // others): its rows would be in no node's files.
            let why = format!(
                "no participant holds fragment {fragment} of table {table} (its node group has \
                 no started data node)"
            );
            return self.backup_failed(id, NdbError::with_detail(1326, why));
        }
        self.lqh.set_backup_logs(&claimed, Some(snapshot_start));
        let mut schema = Vec::new();
        tables.iter().for_each(|t| t.encode(&mut schema));
        indexes.iter().for_each(|i| i.encode(&mut schema));
        if let Some(p) = self.backups.progress.as_mut() {
            p.schema = xxhash_rust::xxh3::xxh3_64(&schema);
        }
        tracing::info!(
            backup = id,
            fragments = claimed.len(),
            "backup {id} started: {} fragments backed up here",
            claimed.len()
        );
        let dir = format!("{root}/{}", layout::dir_name(id));
        self.fs.push(
            FsOp::List { path: dir.clone() },
            FsWait::Backup(token, BackupIo::Listed),
        );
        self.backups.run = Some(Run {
            id,
            token,
            dir,
            participants,
            claimed,
            next: 0,
            slot: 0,
            listed: false,
            data_written: 0,
            data_in_flight: 0,
            step_queued: false,
            scanned: false,
            data_synced: false,
            max_gci: 0,
            log_written: 0,
            log_in_flight: 0,
            log_writes_in_flight: 0,
            log_records: 0,
            log_max_gci: 0,
            stop: None,
            snapshot_gci: None,
            finishing: false,
            tables,
            indexes,
            heard: now,
        });
    }

    /// On the timer: hands logged changes to NDBFS, ends a backup whose participant failed or
    /// whose coordinator stopped asking, and finishes one whose stop GCI became restorable.
    pub(crate) fn backup_timer(&mut self, now: Instant) {
        let Some(run) = &self.backups.run else {
            return;
        };
        if let Some(gone) = run.participants.iter().find(|n| !self.qmgr.is_alive(**n)) {
            let why = format!("data node {gone}, a participant, failed");
            return self.backup_fail(NdbError::with_detail(1326, why));
        }
        if now.saturating_duration_since(run.heard) > ORPHAN_TIMEOUT {
            let why = format!(
                "no management server asked about it for {} s (its coordinator is gone)",
                ORPHAN_TIMEOUT.as_secs()
            );
            return self.backup_fail(NdbError::with_detail(1326, why));
        }
        // Changes buffered in the fragments (from the start on, before the files exist too)
        // and handed to NDBFS but not yet written.
        let buffered: u64 = (run.claimed.iter())
            .filter_map(|&(t, f)| self.lqh.fragment(t, f)?.backup_log.as_ref())
            .map(|log| log.bytes.len() as u64)
            .sum();
        if buffered + run.log_in_flight > self.backups.log_buffer_max {
            let why = format!(
                "{} bytes of changes wait for the disk, BackupLogBufferSize is {}",
                buffered + run.log_in_flight,
                self.backups.log_buffer_max
            );
            return self.backup_fail(NdbError::with_detail(1324, why));
        }
        self.backup_write_log(false);
        self.backup_try_finish();
    }

    /// Hands the changes logged since the last call to NDBFS, unless `LOG_WRITES_IN_FLIGHT_MAX`
    /// writes are out already and not `all` (the log's end takes every change).
    fn backup_write_log(&mut self, all: bool) {
        let Some(run) = self.backups.run.as_mut() else {
            return;
        };
        let busy = run.log_writes_in_flight >= LOG_WRITES_IN_FLIGHT_MAX && !all;
        if !run.listed || run.finishing || busy {
            return;
        }
        let mut bytes = Vec::new();
        for &(table_id, fragment) in &run.claimed {
            let log = self.lqh.fragment_mut(table_id, fragment);
            let Some(log) = log.and_then(|f| f.backup_log.as_mut()) else {
                continue;
            };
            if bytes.is_empty() {
                bytes = std::mem::take(&mut log.bytes);
            } else {
                bytes.append(&mut log.bytes);
            }
            run.log_records += std::mem::take(&mut log.records);
        }
        if bytes.is_empty() {
            return;
        }
        run.log_max_gci = run.log_max_gci.max(self.lqh.newest_committed);
        let len = bytes.len() as u64;
        let path = format!(
            "{}/{}",
            run.dir,
            layout::log_file(run.id, u32::from(self.me.0))
        );
        self.fs.push(
            FsOp::Write {
                path,
                offset: run.log_written,
                bytes,
            },
            FsWait::Backup(run.token, BackupIo::LogWrite(len)),
        );
        run.log_written += len;
        run.log_in_flight += len;
        run.log_writes_in_flight += 1;
        if let Some(p) = self.backups.progress.as_mut() {
            (p.log_records, p.log_bytes) = (run.log_records, run.log_written);
        }
    }

    /// One step of the scan: up to a step's rows, from where the last one stopped.
    pub(crate) fn backup_step(&mut self) {
        self.backup_write_log(false);
        let Some(run) = self.backups.run.as_mut() else {
            return;
        };
        run.step_queued = false;
        // Nothing is written before the directory was found free (the files' headers go
        // first, at offset 0).
        let (write_size, writes_max) = (self.backups.write_size, self.backups.data_writes_max);
        if !run.listed || run.scanned || run.data_in_flight >= writes_max {
            return;
        }
        let mut out = Vec::with_capacity(write_size.min(1 << 20) + 4096);
        let mut rows = 0;
        while rows < ROWS_PER_STEP && out.len() < write_size {
            let Some(&(table_id, fragment_no)) = run.claimed.get(run.next) else {
                run.scanned = true;
                break;
            };
            let fragment = self.lqh.fragment(table_id, fragment_no);
            let Some(fragment) = fragment.filter(|f| run.slot < f.rows.id_end()) else {
                run.next += 1;
                run.slot = 0;
                continue;
            };
            if let Some(slot) = fragment.rows.slot(run.slot) {
                if let Some(row) = &slot.committed {
                    let gci = u64::from(slot.gci) << 32;
                    run.max_gci = run.max_gci.max(gci);
                    layout::append_row(
                        &mut out,
                        gci,
                        kind::PUT,
                        table_id,
                        fragment_no,
                        row.encoded(),
                    );
                    rows += 1;
                }
            }
            run.slot += 1;
        }
        let progress = self.backups.progress.get_or_insert_with(Default::default);
        progress.records += rows as u64;
        if run.scanned {
            layout::append_end(&mut out, self.gcp.current, progress.records);
        }
        let (token, path) = (
            run.token,
            format!(
                "{}/{}",
                run.dir,
                layout::data_file(run.id, u32::from(self.me.0))
            ),
        );
        if !out.is_empty() {
            let len = out.len() as u64;
            self.fs.push(
                FsOp::Write {
                    path: path.clone(),
                    offset: run.data_written,
                    bytes: out,
                },
                FsWait::Backup(token, BackupIo::DataWrite),
            );
            run.data_written += len;
            run.data_in_flight += 1;
            if let Some(p) = self.backups.progress.as_mut() {
                p.data_bytes = run.data_written;
            }
        }
        if run.scanned {
            self.fs.push(
                FsOp::Sync { path },
                FsWait::Backup(token, BackupIo::DataSync),
            );
        } else if run.data_in_flight < writes_max {
            run.step_queued = true;
            self.jobs.push_back(Signal::BackupStep);
        }
    }

    /// A file request of the backup round `token` completed (one of a round that ended is
    /// ignored).
    pub(crate) fn backup_io_done(&mut self, token: u64, io: BackupIo, data: FsData) {
        let me = u32::from(self.me.0);
        let Some(run) = self.backups.run.as_mut().filter(|r| r.token == token) else {
            return;
        };
        let id = run.id;
        match io {
            BackupIo::Close => {}
            BackupIo::Listed => {
                // Other nodes may share the directory (one BackupDataDir for several nodes):
                // only this node's own files refuse the id.
                let mine = [
                    layout::data_file(id, me),
                    layout::log_file(id, me),
                    layout::ctl_file(id, me),
                ];
                if let FsData::Names(names) = &data {
                    if let Some(name) = names.iter().find(|n| mine.contains(n)) {
                        let why = format!("{}/{name} exists", run.dir);
                        return self.backup_fail(NdbError::with_detail(1350, why));
                    }
                }
                run.listed = true;
                let data = layout::header(layout::DATA_MAGIC, id, me);
                let log = layout::header(layout::LOG_MAGIC, id, me);
                run.data_written = data.len() as u64;
                run.log_written = log.len() as u64;
                let (data_path, log_path) = (
                    format!("{}/{}", run.dir, layout::data_file(id, me)),
                    format!("{}/{}", run.dir, layout::log_file(id, me)),
                );
                run.data_in_flight += 1;
                run.step_queued = true;
                self.fs.push(
                    FsOp::Write {
                        path: data_path,
                        offset: 0,
                        bytes: data,
                    },
                    FsWait::Backup(token, BackupIo::DataWrite),
                );
                self.fs.push(
                    FsOp::Write {
                        path: log_path,
                        offset: 0,
                        bytes: log,
                    },
                    FsWait::Backup(token, BackupIo::LogWrite(0)),
                );
                run.log_writes_in_flight += 1;
                self.jobs.push_back(Signal::BackupStep);
            }
            BackupIo::DataWrite => {
                run.data_in_flight -= 1;
                if !run.scanned && !run.step_queued {
                    run.step_queued = true;
                    self.jobs.push_back(Signal::BackupStep);
                }
            }
            BackupIo::DataSync => {
                run.data_synced = true;
                let newest_logged = self.lqh.redo.as_ref().map_or(0, |r| r.newest_logged);
                let newest = [
                    self.gcp.current,
                    self.lqh.newest_committed,
                    newest_logged,
                    run.max_gci,
                    run.log_max_gci,
                ];
                let data_bytes = run.data_written;
                if let Some(p) = self.backups.progress.as_mut() {
                    p.phase = Some(BackupPhase::Scanned);
                    p.scanned_gci = newest.into_iter().max().unwrap_or(0);
                    p.data_bytes = data_bytes;
                }
                tracing::info!(backup = id, "backup {id}: every row is in the data file");
                self.backup_try_finish();
            }
            BackupIo::LogWrite(len) => {
                run.log_in_flight -= len;
                run.log_writes_in_flight -= 1;
            }
            BackupIo::LogSync => {
                let ctl = BackupCtl {
                    backup_id: id,
                    start_gci: self.backups.progress.as_ref().map_or(0, |p| p.start_gci),
                    stop_gci: run.stop.unwrap_or(0),
                    snapshot_gci: run.snapshot_gci,
                    records: self.backups.progress.as_ref().map_or(0, |p| p.records),
                    log_records: run.log_records,
                    data_bytes: run.data_written,
                    log_bytes: run.log_written,
                    tables: std::mem::take(&mut run.tables),
                    indexes: std::mem::take(&mut run.indexes),
                };
                let path = format!("{}/{}", run.dir, layout::ctl_file(id, me));
                self.fs.push(
                    FsOp::Replace {
                        path,
                        bytes: ctl.file_bytes(me),
                    },
                    FsWait::Backup(token, BackupIo::Ctl),
                );
            }
            BackupIo::Ctl => {
                let (log_records, log_bytes) = (run.log_records, run.log_written);
                self.backups.run = None;
                if let Some(p) = self.backups.progress.as_mut() {
                    p.phase = Some(BackupPhase::Completed);
                    p.log_records = log_records;
                    p.log_bytes = log_bytes;
                    tracing::info!(
                        backup = id,
                        records = p.records,
                        log_records,
                        "backup {id} completed here"
                    );
                }
            }
        }
    }

    /// Table `table_id` is dropped here (its DROP passed a DICT master whose part of the
    /// backup had ended, or that had not begun it): a backup holding it fails (1340), since
    /// its fragments and their unwritten changes go.
    pub(crate) fn backup_table_dropped(&mut self, table_id: u32) {
        let holds = (self.backups.run.as_ref())
            .is_some_and(|r| r.claimed.iter().any(|&(t, _)| t == table_id));
        if holds {
            let why = format!("table id {table_id} was dropped while the backup ran");
            self.backup_fail(NdbError::with_detail(1340, why));
        }
    }

    /// A file request of the backup round `token` failed: the backup fails (1325), the node
    /// goes on.
    pub(crate) fn backup_io_failed(&mut self, token: u64, error: &FsError) {
        if self.backups.run.as_ref().is_some_and(|r| r.token == token) {
            self.backup_fail(NdbError::with_detail(1325, error.to_string()));
        }
    }

    /// Once scanned, stopped, and the stop GCI restorable here: ends the log, then writes the
    /// control file.
    fn backup_try_finish(&mut self) {
        let restorable = self.gcp.restorable;
        let Some(run) = self.backups.run.as_ref() else {
            return;
        };
        let ready = run.data_synced && !run.finishing && run.stop.is_some_and(|s| s <= restorable);
        if !ready {
            return;
        }
        self.backup_write_log(true);
        let me = u32::from(self.me.0);
        let Some(run) = self.backups.run.as_mut() else {
            return;
        };
        run.finishing = true;
        self.lqh.set_backup_logs(&run.claimed, None);
        let mut end = Vec::new();
        layout::append_end(&mut end, self.gcp.current, run.log_records);
        let len = end.len() as u64;
        let path = format!("{}/{}", run.dir, layout::log_file(run.id, me));
        self.fs.push(
            FsOp::Write {
                path: path.clone(),
                offset: run.log_written,
                bytes: end,
            },
            FsWait::Backup(run.token, BackupIo::LogWrite(len)),
        );
        run.log_written += len;
        run.log_in_flight += len;
        run.log_writes_in_flight += 1;
        self.fs.push(
            FsOp::Sync { path },
            FsWait::Backup(run.token, BackupIo::LogSync),
        );
    }

    /// Ends the running backup with `error`: changes are no longer logged; the files stay
    /// without a control file from this node.
    fn backup_fail(&mut self, error: NdbError) {
        let Some(run) = self.backups.run.take() else {
            return;
        };
        self.lqh.set_backup_logs(&run.claimed, None);
        if run.listed {
            // A synced backup file is closed (`ndbfs/real.rs`); nothing waits for these.
            let me = u32::from(self.me.0);
            for name in [layout::data_file(run.id, me), layout::log_file(run.id, me)] {
                let path = format!("{}/{name}", run.dir);
                self.fs.push(
                    FsOp::Sync { path },
                    FsWait::Backup(run.token, BackupIo::Close),
                );
            }
        }
        self.backup_failed(run.id, error);
    }

    fn backup_failed(&mut self, id: u32, error: NdbError) {
        tracing::warn!(
            backup = id,
            code = error.code,
            "backup {id} failed here: {error}"
        );
        let progress = self.backups.progress.get_or_insert_with(Default::default);
        progress.id = id;
        progress.phase = Some(BackupPhase::Failed);
        progress.error = error.code;
        progress.error_text = error.to_string();
    }
}
