//! DICT's schema log, `D1/DBDICT/P0.SchemaLog`: every schema change this node applied, in
//! order, tagged with the GCI it was applied in. Written and synced with the redo log at each
//! global checkpoint's save, which ends with a GCI_COMPLETED record as each redo part does, so
//! a system restart at a GCI finds every table and index that existed then (it replays the
//! changes up to that GCI, giving each object the same id), and knows when this node did not
//! save that GCI (a write failed: the record is missing).
//!
//! ```text
//! D1/DBDICT/P0.SchemaLog:  header | SCHEMA record | … | GCI_COMPLETED | SCHEMA record | …
//! ```

use crate::ndbfs::format::{self, kind, FileHeader, SchemaChange};
use crate::ndbfs::FsOp;

use super::super::fs::{FsQueue, FsWait};

/// The schema log's path.
pub(crate) const SCHEMA_LOG: &str = "D1/DBDICT/P0.SchemaLog";

/// The schema log of one node (`None` inside: diskless).
#[derive(Debug, Default)]
pub(crate) struct DictLog {
    enabled: bool,
    /// Bytes of the file already handed to NDBFS.
    written: u64,
    pending: Vec<u8>,
    unsynced: bool,
}

impl DictLog {
    /// A log that goes on at `written` bytes of an existing file, or (0) starts a new file.
    pub fn new(enabled: bool, node: u32, written: u64) -> DictLog {
        let mut log = DictLog {
            enabled,
            written,
            pending: Vec::new(),
            unsynced: false,
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

    /// Records a schema change applied in epoch `gci`.
    pub fn append(&mut self, gci: u64, change: &SchemaChange) {
        if self.enabled {
            format::append_record(&mut self.pending, gci, kind::SCHEMA, |b| change.encode(b));
        }
    }

    /// A global checkpoint's save of `gci`: its GCI_COMPLETED record and what is buffered
    /// before it are written and synced. Returns the syncs asked for.
    pub fn save(&mut self, fs: &mut FsQueue, gci: u64) -> usize {
        if self.enabled {
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
}
