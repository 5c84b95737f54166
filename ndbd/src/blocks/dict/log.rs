//! DICT's schema log, `D1/DBDICT/P0.SchemaLog`: every schema change this node applied, in
//! order, tagged with the GCI the DICT master applied it in (the same on every node, but for
//! a new master's correction: `dict/takeover.rs`; a unique index's create is logged once its
//! build succeeded here, in this node's epoch if that is later, and neither it nor its undo
//! when the build failed). Written and synced with the redo log at each
//! global checkpoint's save, which ends with a GCI_COMPLETED record as each redo part does, so
//! a system restart at a GCI finds every table and index that existed then (it replays the
//! changes up to that GCI, giving each object the same id), and knows when this node did not
//! save that GCI (a write failed: the record is missing).
//!
//! ```text
//! D1/DBDICT/P0.SchemaLog:  header | SCHEMA record | … | GCI_COMPLETED | SCHEMA record | …
//! ```
//!
//! A save writes 17 bytes even with no schema change: with a save for every durable commit
//! that would grow the file by gigabytes a day. So every `COMPACT_AFTER` saves the file is
//! replaced (atomically, `FsOp::Replace`) by its header, the schema changes this node holds
//! (those it replayed at its start and those applied since, each with its GCI) and the save's
//! GCI_COMPLETED.

use crate::ndbfs::format::{self, kind, FileHeader, SchemaChange};
use crate::ndbfs::FsOp;

use super::super::fs::{FsQueue, FsWait};

/// The schema log's path.
pub(crate) const SCHEMA_LOG: &str = "D1/DBDICT/P0.SchemaLog";

/// Saves after which the schema log is rewritten with only what it must hold.
pub const COMPACT_AFTER: u32 = 1024;

/// The schema log of one node (`None` inside: diskless).
#[derive(Debug, Default)]
pub(crate) struct DictLog {
    enabled: bool,
    node: u32,
    /// Bytes of the file already handed to NDBFS.
    written: u64,
    pending: Vec<u8>,
    unsynced: bool,
    /// Every SCHEMA record this node holds, as written: what a compacted file keeps.
    records: Vec<u8>,
    /// Saves since the file was last written whole, and after how many it is.
    saves: u32,
    compact_after: u32,
    /// The last GCI this node saved (its GCI_COMPLETED is written): a record appended now
    /// lands after it, so a restart at that GCI or before never replays it.
    saved: u32,
}

impl DictLog {
    /// A log that goes on at `written` bytes of an existing file, or (0) starts a new file.
    pub fn new(enabled: bool, node: u32, written: u64) -> DictLog {
        let mut log = DictLog {
            enabled,
            node,
            written,
            pending: Vec::new(),
            unsynced: false,
            records: Vec::new(),
            saves: 0,
            compact_after: COMPACT_AFTER,
            saved: 0,
        };
        if enabled && written == 0 {
            FileHeader {
                magic: format::SCHEMA_MAGIC,
                node,
                part: 0,
                seq: 0,
            }
            .encode(&mut log.pending);
        }
        log
    }

    /// The SCHEMA records a restart replayed from the file (as they were written), which a
    /// compacted file keeps.
    pub fn set_records(&mut self, records: Vec<u8>) {
        self.records = records;
    }

    /// Compacts after `saves` saves instead of `COMPACT_AFTER` (the simulator's seeds save a
    /// few dozen times).
    pub fn set_compact_after(&mut self, saves: u32) {
        self.compact_after = saves.max(1);
    }

    /// Records a schema change applied in epoch `gci`. Without files too, the record is kept:
    /// a node restart copies the dictionary from the president as these records.
    pub fn append(&mut self, gci: u64, change: &SchemaChange) {
        let start = self.records.len();
        format::append_record(&mut self.records, gci, kind::SCHEMA, |b| change.encode(b));
        if self.enabled {
            self.pending.extend_from_slice(&self.records[start..]);
        }
    }

    /// The last GCI whose GCI_COMPLETED this log wrote since it was opened (0: none).
    pub fn saved(&self) -> u32 {
        self.saved
    }

    /// Every SCHEMA record this node holds: the dictionary, as the changes that made it.
    pub fn records(&self) -> &[u8] {
        &self.records
    }

    /// A log that begins a new file holding `records` (a node restart's copied dictionary):
    /// the first save writes them after the header.
    pub fn with_records(node: u32, records: Vec<u8>) -> DictLog {
        let mut log = DictLog::new(true, node, 0);
        log.pending.extend_from_slice(&records);
        log.records = records;
        log
    }

    /// A global checkpoint's save of `gci`: its GCI_COMPLETED record and what is buffered
    /// before it are written and synced. Returns the syncs asked for.
    pub fn save(&mut self, fs: &mut FsQueue, gci: u64) -> usize {
        self.saved = self.saved.max(format::gci_hi(gci));
        if self.enabled {
            self.saves += 1;
            if self.saves >= self.compact_after {
                return self.compact(fs, gci);
            }
            format::append_record(&mut self.pending, gci, kind::GCI_COMPLETED, |_| {});
        }
        if !self.pending.is_empty() {
            let bytes = std::mem::take(&mut self.pending);
            let offset = self.written;
            self.written += bytes.len() as u64;
            fs.push(
                FsOp::Write {
                    path: SCHEMA_LOG.into(),
                    offset,
                    bytes,
                },
                FsWait::SchemaWrite,
            );
            self.unsynced = true;
        }
        if !std::mem::take(&mut self.unsynced) {
            return 0;
        }
        fs.push(
            FsOp::Sync {
                path: SCHEMA_LOG.into(),
            },
            FsWait::SchemaSync,
        );
        1
    }

    /// A save of `gci` that writes the file whole: header, every SCHEMA record held, and the
    /// GCI_COMPLETED. The replace is durable when it completes (one sync to wait for).
    fn compact(&mut self, fs: &mut FsQueue, gci: u64) -> usize {
        let mut bytes = Vec::with_capacity(format::HEADER_BYTES + self.records.len() + 32);
        FileHeader {
            magic: format::SCHEMA_MAGIC,
            node: self.node,
            part: 0,
            seq: 0,
        }
        .encode(&mut bytes);
        bytes.extend_from_slice(&self.records);
        format::append_record(&mut bytes, gci, kind::GCI_COMPLETED, |_| {});
        self.pending.clear();
        self.unsynced = false;
        self.saves = 0;
        self.written = bytes.len() as u64;
        fs.push(
            FsOp::Replace {
                path: SCHEMA_LOG.into(),
                bytes,
            },
            FsWait::SchemaSync,
        );
        1
    }
}

/// The schema changes in `records` (SCHEMA records as this log holds them, no file header),
/// each as (its signal, the GCI it was logged in), in order. For tests.
#[cfg(test)]
pub(crate) fn logged_changes(records: &[u8]) -> Vec<(u16, u32)> {
    let mut changes = Vec::new();
    let mut offset = 0;
    while let format::Next::Record(record) = format::read_record(records, offset) {
        if record.kind == kind::SCHEMA {
            let change = SchemaChange::decode(record.payload).expect("a schema change");
            changes.push((change.signal, format::gci_hi(record.gci)));
        }
        offset = record.next;
    }
    changes
}
