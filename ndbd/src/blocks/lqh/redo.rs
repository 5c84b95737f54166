//! LQH's redo log: every committed change on this node's replicas, appended as its row's
//! after-image (or a delete) tagged with the transaction's GCI, to one of NoOfFragmentLogParts
//! parts (a fragment always logs to the same part, so a row's changes stay in commit order).
//! A part is a sequence of files of at most FragmentLogFileSize bytes, NoOfFragmentLogFiles of
//! them at most. Changes gather in RedoBuffer and go to NDBFS as they fill a chunk; a global
//! checkpoint's save appends a GCI_COMPLETED record to every part, writes what is buffered and
//! syncs, after which every change of that GCI is on disk (NDB's group commit: one sync for
//! all the transactions of a GCI).
//!
//! When the buffer holds more than RedoBuffer, or a part has less than a file's margin left,
//! new write operations are refused with NDB's temporary errors (1221, 410); a commit is never
//! refused, so what was prepared still gets logged.
//!
//! ```text
//! D<8+part>/DBLQH/S<n>.FragLog:  header(seq) | record | record | … | FILE_END      (n = seq mod files)
//! ```

use rndb_config::Durability;
use rndb_protocol::NdbError;

use crate::ndbfs::format::{self, kind, FileHeader, RowChange};
use crate::ndbfs::FsOp;

/// A part's buffered bytes go to NDBFS once they reach this.
const WRITE_CHUNK_BYTES: usize = 256 * 1024;

/// Bytes of a record without payload (GCI_COMPLETED, FILE_END).
const EMPTY_RECORD_BYTES: u64 = format::RECORD_HEAD_BYTES as u64;

/// What a completed file request of the redo log was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RedoIo {
    /// A write of this many buffered bytes.
    Write(u64),
    /// A sync, part of the save of a global checkpoint.
    Sync,
}

/// The redo log of one data node.
#[derive(Debug)]
pub(crate) struct Redo {
    node: u32,
    files_per_part: u64,
    file_size: u64,
    buffer_max: u64,
    parts: Vec<Part>,
    /// Bytes appended and not yet written (buffered or being written).
    buffered: u64,
    /// Bytes appended since the node started (local checkpoints start by it).
    appended: u64,
    /// File requests for NDBFS, taken by the kernel.
    pub requests: Vec<(FsOp, RedoIo)>,
    /// The newest global checkpoint this log wrote a GCI_COMPLETED for.
    completed: u32,
    /// The newest GCI (whole) of a change logged: a commit may come from a coordinator
    /// already in a GCI this node has not switched to yet (its GCP_COMMIT on its way).
    pub newest_logged: u64,
    /// A change logged behind the GCI_COMPLETED of its own GCI, which a restart up to that
    /// GCI would not restore though every node calls it saved: a broken invariant of the
    /// GCP protocol, for the simulator to fail the seed on (the first one seen).
    pub late_change: Option<String>,
}

/// Where a part goes on after a restart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Resume {
    pub first_seq: u64,
    pub seq: u64,
    /// Bytes of file `seq` kept (0: start the file anew).
    pub offset: u64,
}

/// One part of the log.
#[derive(Debug)]
struct Part {
    index: u32,
    /// The file being written: its place in the part's sequence.
    seq: u64,
    /// The oldest file still needed (a local checkpoint moves it on).
    first_seq: u64,
    /// Bytes of the current file already handed to NDBFS.
    written: u64,
    /// Bytes not yet handed to NDBFS; they follow `written`.
    pending: Vec<u8>,
    /// Files written since the last sync.
    unsynced: Vec<u64>,
    /// Files opened while every file of the ring was still needed (see `make_room`).
    overflow: std::collections::BTreeSet<u64>,
}

impl Part {
    fn path(&self, seq: u64, files_per_part: u64) -> String {
        if self.overflow.contains(&seq) {
            // Past the ring: a name of its own, so that no file still needed is overwritten.
            return part_file(self.index, seq);
        }
        part_file(self.index, seq % files_per_part)
    }

    /// Bytes of the log in use, from the oldest needed file to what is buffered.
    fn used(&self, file_size: u64) -> u64 {
        (self.seq - self.first_seq) * file_size + self.written + self.pending.len() as u64
    }
}

/// The path of file `file` of redo part `part`, as NDB names it.
pub(crate) fn part_file(part: u32, file: u64) -> String {
    format!("D{}/DBLQH/S{file}.FragLog", 8 + part)
}

/// The directory of redo part `part`.
pub(crate) fn part_dir(part: u32) -> String {
    format!("D{}/DBLQH", 8 + part)
}

impl Redo {
    /// A log whose parts go on where a restart left them (`resume`, one per part: the oldest
    /// file still needed, the file to write and the offset to write at, which is after the
    /// last record the restart kept), or start empty (an initial start: no `resume`).
    pub fn new(node: u32, config: &Durability, resume: &[Resume]) -> Redo {
        let parts = (0..config.no_of_fragment_log_parts)
            .map(|index| {
                let at = resume.get(index as usize).copied().unwrap_or_default();
                Part {
                    index,
                    seq: at.seq,
                    first_seq: at.first_seq,
                    written: at.offset,
                    pending: Vec::new(),
                    unsynced: Vec::new(),
                    overflow: Default::default(),
                }
            })
            .collect();
        let mut redo = Redo {
            node,
            files_per_part: u64::from(config.no_of_fragment_log_files.max(3)),
            file_size: config.fragment_log_file_size.max(1 << 20),
            buffer_max: config.redo_buffer,
            parts,
            buffered: 0,
            appended: 0,
            requests: Vec::new(),
            completed: 0,
            newest_logged: 0,
            late_change: None,
        };
        for part in 0..redo.parts.len() {
            if redo.parts[part].written == 0 {
                redo.open_file(part);
            }
        }
        redo
    }

    /// Starts the part's current file: cut to nothing (a reused name holds an older file),
    /// then its header.
    fn open_file(&mut self, part: usize) {
        let (node, files) = (self.node, self.files_per_part);
        let p = &mut self.parts[part];
        p.written = 0;
        if p.seq - p.first_seq >= files {
            // Writes were refused (410) a file before this; only commits of operations
            // prepared before that get here. Going past the ring keeps them.
            tracing::error!(
                part = p.index,
                seq = p.seq,
                "redo log part overran NoOfFragmentLogFiles; writing a file beyond the ring"
            );
            p.overflow.insert(p.seq);
        }
        self.requests.push((
            FsOp::Truncate {
                path: p.path(p.seq, files),
                len: 0,
            },
            RedoIo::Write(0),
        ));
        let before = p.pending.len();
        FileHeader {
            magic: format::REDO_MAGIC,
            node,
            part: p.index,
            seq: p.seq,
        }
        .encode(&mut p.pending);
        self.buffered += (p.pending.len() - before) as u64;
    }

    /// Why a new write operation on `fragment` must be refused now, if it must: the buffer is
    /// full (1221) or the fragment's part is nearly full (410).
    pub fn refusal(&self, fragment: u32) -> Option<NdbError> {
        if self.buffered > self.buffer_max {
            return Some(NdbError::with_detail(
                1221,
                format!(
                    "{} bytes of redo wait to be written; RedoBuffer is {}",
                    self.buffered, self.buffer_max
                ),
            ));
        }
        let part = &self.parts[fragment as usize % self.parts.len()];
        let capacity = self.files_per_part * self.file_size;
        // A file's worth is kept for what is prepared now and commits later.
        if part.used(self.file_size) + self.file_size > capacity {
            return Some(NdbError::with_detail(
                410,
                format!(
                    "redo part {} holds {} of {capacity} bytes",
                    part.index,
                    part.used(self.file_size)
                ),
            ));
        }
        None
    }

    /// Logs a committed change of a row of `fragment`.
    pub fn log_change(&mut self, change: &RowChange<'_>, gci: u64) {
        if format::gci_hi(gci) <= self.completed && self.late_change.is_none() {
            let why = format!(
                "a change of table {} in GCI {} logged after this node's GCI_COMPLETED for GCI {}",
                change.table_id,
                format::gci_hi(gci),
                self.completed
            );
            tracing::error!("{why}");
            self.late_change = Some(why);
        }
        self.newest_logged = self.newest_logged.max(gci);
        let part = change.fragment as usize % self.parts.len();
        let bytes =
            (format::RECORD_HEAD_BYTES + 16 + change.key.len() + change.row.map_or(0, <[u8]>::len))
                as u64;
        self.make_room(part, bytes);
        let record_kind = if change.row.is_some() {
            kind::PUT
        } else {
            kind::DELETE
        };
        let p = &mut self.parts[part];
        let before = p.pending.len();
        format::append_record(&mut p.pending, gci, record_kind, |b| change.encode(b));
        let added = (p.pending.len() - before) as u64;
        self.buffered += added;
        self.appended += added;
        if p.pending.len() >= WRITE_CHUNK_BYTES {
            self.write_pending(part);
        }
    }

    /// Goes on in the part's next file when a record of `bytes` would not fit in this one (with
    /// the FILE_END record after it).
    fn make_room(&mut self, part: usize, bytes: u64) {
        let p = &self.parts[part];
        let end = p.written + p.pending.len() as u64 + bytes + EMPTY_RECORD_BYTES;
        if end <= self.file_size {
            return;
        }
        let p = &mut self.parts[part];
        let before = p.pending.len();
        format::append_record(&mut p.pending, 0, kind::FILE_END, |_| {});
        self.buffered += (p.pending.len() - before) as u64;
        self.write_pending(part);
        self.parts[part].seq += 1;
        self.open_file(part);
    }

    /// Hands the part's buffered bytes to NDBFS.
    fn write_pending(&mut self, part: usize) {
        let files = self.files_per_part;
        let p = &mut self.parts[part];
        if p.pending.is_empty() {
            return;
        }
        let bytes = std::mem::take(&mut p.pending);
        let len = bytes.len() as u64;
        self.requests.push((
            FsOp::Write {
                path: p.path(p.seq, files),
                offset: p.written,
                bytes,
            },
            RedoIo::Write(len),
        ));
        p.written += len;
        if p.unsynced.last() != Some(&p.seq) {
            p.unsynced.push(p.seq);
        }
    }

    /// A global checkpoint's save: every part gets a GCI_COMPLETED record for `gci`, and
    /// everything buffered is written and synced. Returns how many syncs were asked for (the
    /// save is done when that many have completed).
    pub fn save(&mut self, gci: u64) -> usize {
        self.completed = self.completed.max(format::gci_hi(gci));
        let mut paths = Vec::new();
        for part in 0..self.parts.len() {
            self.make_room(part, EMPTY_RECORD_BYTES);
            let p = &mut self.parts[part];
            let before = p.pending.len();
            format::append_record(&mut p.pending, gci, kind::GCI_COMPLETED, |_| {});
            self.buffered += (p.pending.len() - before) as u64;
            self.write_pending(part);
            let files = self.files_per_part;
            let p = &mut self.parts[part];
            for seq in std::mem::take(&mut p.unsynced) {
                paths.push(p.path(seq, files));
            }
        }
        if paths.is_empty() {
            return 0;
        }
        // One request for every file: the disk may make them durable in one call.
        self.requests.push((FsOp::SyncAll { paths }, RedoIo::Sync));
        1
    }

    /// How full the fullest part is, from 0 to 1.
    pub fn fill(&self) -> f64 {
        let capacity = (self.files_per_part * self.file_size) as f64;
        self.parts
            .iter()
            .map(|p| p.used(self.file_size) as f64 / capacity)
            .fold(0.0, f64::max)
    }

    /// Each part's index, the bytes its files hold, and the bytes of them in use (from the
    /// oldest file still needed to what is buffered; more than the files hold while the log
    /// runs past its ring).
    pub fn spaces(&self) -> Vec<(u32, u64, u64)> {
        let total = self.files_per_part * self.file_size;
        self.parts
            .iter()
            .map(|p| (p.index, total, p.used(self.file_size)))
            .collect()
    }

    /// Bytes appended and not yet written (held against RedoBuffer).
    pub fn unwritten(&self) -> u64 {
        self.buffered
    }

    /// Bytes of row changes appended since the node started.
    pub fn appended(&self) -> u64 {
        self.appended
    }

    /// Where each part's next record goes: (file seq, offset).
    pub fn positions(&self) -> Vec<(u64, u64)> {
        self.parts
            .iter()
            .map(|p| (p.seq, p.written + p.pending.len() as u64))
            .collect()
    }

    /// A local checkpoint that started at `starts` is restorable: the files of each part
    /// before its start may be reused.
    pub fn release_before(&mut self, starts: &[(u64, u64)]) {
        for (part, &(seq, _)) in self.parts.iter_mut().zip(starts) {
            part.first_seq = part.first_seq.max(seq.min(part.seq));
        }
    }

    /// A write of `bytes` completed: they no longer count against RedoBuffer.
    pub fn written(&mut self, bytes: u64) {
        self.buffered = self.buffered.saturating_sub(bytes);
    }

    /// Bytes appended and not yet written.
    #[cfg(test)]
    pub fn buffered(&self) -> u64 {
        self.buffered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(parts: u32, files: u32, file_size: u64, buffer: u64) -> Durability {
        Durability {
            no_of_fragment_log_parts: parts,
            no_of_fragment_log_files: files,
            fragment_log_file_size: file_size,
            redo_buffer: buffer,
            ..Durability::default()
        }
    }

    fn change(fragment: u32, row: &[u8]) -> RowChange<'_> {
        RowChange {
            table_id: 1,
            table_version: 0,
            fragment,
            key: b"k",
            row: Some(row),
        }
    }

    #[test]
    fn a_full_buffer_refuses_writes_with_1221_until_written() {
        let mut redo = Redo::new(1, &config(4, 16, 1 << 20, 1 << 20), &[]);
        let row = vec![7u8; 1000];
        while redo.refusal(0).is_none() {
            redo.log_change(&change(0, &row), 1 << 32);
        }
        assert_eq!(redo.refusal(0).map(|e| e.code), Some(1221));
        let written: u64 = redo
            .requests
            .iter()
            .map(|(_, io)| match io {
                RedoIo::Write(n) => *n,
                RedoIo::Sync => 0,
            })
            .sum();
        redo.written(written);
        redo.save(1 << 32);
        let rest: u64 = redo
            .requests
            .iter()
            .map(|(_, io)| match io {
                RedoIo::Write(n) => *n,
                RedoIo::Sync => 0,
            })
            .sum::<u64>()
            - written;
        redo.written(rest);
        assert_eq!(redo.buffered(), 0);
        assert!(redo.refusal(0).is_none());
    }

    #[test]
    fn a_part_that_fills_its_files_refuses_writes_with_410_and_others_go_on() {
        let mut redo = Redo::new(1, &config(4, 3, 1 << 20, 1 << 30), &[]);
        let row = vec![7u8; 4000];
        while redo.refusal(1).is_none() {
            redo.log_change(&change(1, &row), 1 << 32);
        }
        assert_eq!(redo.refusal(1).map(|e| e.code), Some(410));
        assert!(redo.refusal(2).is_none(), "part 2 is empty");
        // Files of part 1 were written in order, each cut to nothing before its header.
        let paths: Vec<&str> = redo
            .requests
            .iter()
            .filter_map(|(op, _)| match op {
                FsOp::Truncate { path, .. } => Some(path.as_str()),
                _ => None,
            })
            .filter(|p| p.starts_with("D9/"))
            .collect();
        assert_eq!(
            paths,
            [
                "D9/DBLQH/S0.FragLog",
                "D9/DBLQH/S1.FragLog",
                "D9/DBLQH/S2.FragLog"
            ]
        );
    }
}
