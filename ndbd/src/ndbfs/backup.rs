//! The byte layouts of an online backup's files (ndb_mgm's START BACKUP), under NDB's names:
//! each data node writes three files in `BACKUP/BACKUP-<id>/` under its BackupDataDir.
//!
//! ```text
//! BACKUP-<id>-0.<node>.Data   magic RNDBBKPD, seq = id; PUT records (gci = the row's last
//!                             change), then END (rows u64)
//! BACKUP-<id>.<node>.log      magic RNDBBKPL, seq = id; PUT (after-image) and DELETE
//!                             (before-image) records in commit order, gci = the commit's,
//!                             in a SNAPSHOTSTART backup each PUT that replaced a row
//!                             right after a BEFORE record (the image it replaced), then
//!                             END (records u64, BEFORE records counted)
//! BACKUP-<id>.<node>.ctl      magic RNDBBKPC, seq = id; CTL, then a TABLE record per table
//!                             and an INDEX record per index; written last, once the other
//!                             two are synced: a backup without it is incomplete
//! row payload                 table_id u32 | fragment u32 | row (packed values, all columns)
//! CTL payload                 backup_id u32 | start_gci u64 | stop_gci u32 | records u64 |
//!                             log_records u64 | data_bytes u64 | log_bytes u64 | tables u32 |
//!                             indexes u32 [| snapshot_gci u32: SNAPSHOTSTART backups only]
//! TABLE payload               TableInfo (table_id u32 | version u32 | TableDef)
//! INDEX payload               IndexInfo
//! ```
//!
//! Records have the framing of every data node file ([`super::format`]): length, CRC, GCI,
//! kind. The data file holds each row of the fragments this node backed up as a fuzzy scan
//! found it; the log holds every change committed to those fragments from before the scan
//! began until the backup stopped. A restore loads the data and applies, in order, the log
//! records whose GCI's high word is at most `stop_gci`: the result is each fragment as of the
//! end of that global checkpoint. A SNAPSHOTSTART backup restores to the end of
//! `snapshot_gci` instead: the log records up to it are applied, and of each row's later ones
//! only the first, backwards (its BEFORE or DELETE image put back, a row it inserted deleted).

use rndb_protocol::codec::{DecodeError, Reader, Writer};
use rndb_protocol::signals::{IndexInfo, TableInfo};
use rndb_protocol::{TableDef, Value};

use super::format::{append_record, kind, read_record, FileHeader, Next, HEADER_BYTES};

pub const DATA_MAGIC: [u8; 8] = *b"RNDBBKPD";
pub const LOG_MAGIC: [u8; 8] = *b"RNDBBKPL";
pub const CTL_MAGIC: [u8; 8] = *b"RNDBBKPC";

/// Record kinds of backup files (after the kinds of [`kind`]; rows are [`kind::PUT`] and
/// [`kind::DELETE`]).
pub mod backup_kind {
    /// The last record of a data or log file: how many row records it holds (u64).
    pub const END: u8 = 11;
    /// A control file's first record: [`super::BackupCtl`].
    pub const CTL: u8 = 12;
    /// A table of the backup: `TableInfo`.
    pub const TABLE: u8 = 13;
    /// An index of the backup: `IndexInfo`.
    pub const INDEX: u8 = 14;
    /// In a SNAPSHOTSTART backup's log, right before the PUT of a change that replaced a row:
    /// the row's image before it (a row record).
    pub const BEFORE: u8 = 15;
}

/// The directory of backup `id`, under `<BackupDataDir>/BACKUP`.
pub fn dir_name(id: u32) -> String {
    format!("BACKUP-{id}")
}

/// Node `node`'s data file of backup `id`.
pub fn data_file(id: u32, node: u32) -> String {
    format!("BACKUP-{id}-0.{node}.Data")
}

/// Node `node`'s log file of backup `id`.
pub fn log_file(id: u32, node: u32) -> String {
    format!("BACKUP-{id}.{node}.log")
}

/// Node `node`'s control file of backup `id`.
pub fn ctl_file(id: u32, node: u32) -> String {
    format!("BACKUP-{id}.{node}.ctl")
}

/// The header of node `node`'s file with `magic` of backup `id`.
pub fn header(magic: [u8; 8], id: u32, node: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES);
    FileHeader {
        magic,
        node,
        part: 0,
        seq: u64::from(id),
    }
    .encode(&mut out);
    out
}

/// Appends a row record (`kind::PUT` or `kind::DELETE`) of `gci`.
pub fn append_row(out: &mut Vec<u8>, gci: u64, kind: u8, table_id: u32, fragment: u32, row: &[u8]) {
    append_record(out, gci, kind, |b| {
        Writer::new(b).u32(table_id).u32(fragment);
        b.extend_from_slice(row);
    });
}

/// Appends the END record of a data or log file holding `records` rows.
pub fn append_end(out: &mut Vec<u8>, gci: u64, records: u64) {
    append_record(out, gci, backup_kind::END, |b| {
        b.extend_from_slice(&records.to_le_bytes())
    });
}

/// One row record as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackupRow<'a> {
    pub gci: u64,
    /// `kind::PUT` or `kind::DELETE`.
    pub kind: u8,
    pub table_id: u32,
    pub fragment: u32,
    /// The packed row: every column's value (a delete's is the row it removed).
    pub row: &'a [u8],
    /// The record's offset in its file.
    pub offset: usize,
}

impl BackupRow<'_> {
    /// The row's values, checked against its table `def` (one per column, each of its type,
    /// nothing after the last).
    pub fn values(&self, def: &TableDef) -> Result<Vec<Value>, DecodeError> {
        let mut values = Vec::new();
        let mut r = Reader::new(self.row, "backup row");
        def.decode_row_into(&mut r, &mut values)?;
        r.finish()?;
        Ok(values)
    }
}

/// What is at one offset of a data or log file.
enum Step<'a> {
    /// A row record, and where the next record starts.
    Row(BackupRow<'a>, usize),
    /// The END record, the file's last, and where it ends.
    End(usize),
}

/// Reads the record at `at` of `bytes` (the file from `base` on), `rows` row records having
/// come before it: a row, or the END record whose count must be `rows`. Errors name the
/// file's offset.
fn step(bytes: &[u8], at: usize, base: usize, rows: u64) -> Result<Step<'_>, String> {
    let offset = base + at;
    let record = match read_record(bytes, at) {
        Next::Record(r) => r,
        Next::End => {
            return Err(format!(
                "ends at offset {offset} without its END record (the backup did not finish \
                 writing it)"
            ))
        }
        Next::Bad(why) => return Err(format!("at offset {offset}: {why}")),
    };
    match record.kind {
        kind::PUT | kind::DELETE | backup_kind::BEFORE => {
            let mut r = Reader::new(record.payload, "backup row");
            let (table_id, fragment) = r
                .u32()
                .and_then(|t| Ok((t, r.u32()?)))
                .map_err(|e| format!("at offset {offset}: {e}"))?;
            let row = BackupRow {
                gci: record.gci,
                kind: record.kind,
                table_id,
                fragment,
                row: r.rest(),
                offset,
            };
            Ok(Step::Row(row, record.next))
        }
        backup_kind::END => {
            let count = <[u8; 8]>::try_from(record.payload)
                .map(u64::from_le_bytes)
                .map_err(|_| format!("at offset {offset}: an END record that is not a u64"))?;
            if count != rows {
                return Err(format!(
                    "at offset {offset}: the END record counts {count} rows, the file holds {rows}"
                ));
            }
            Ok(Step::End(record.next))
        }
        other => Err(format!("at offset {offset}: a record of kind {other}")),
    }
}

/// Reads a whole data or log file (`magic`) of node `node` of backup `id`: its row records,
/// checked against the END record's count. Every error names the offset it is at.
pub fn read_rows(
    bytes: &[u8],
    magic: [u8; 8],
    id: u32,
    node: u32,
) -> Result<Vec<BackupRow<'_>>, String> {
    check_header(bytes, magic, id, node)?;
    let mut rows = Vec::new();
    let mut at = HEADER_BYTES;
    loop {
        match step(bytes, at, 0, rows.len() as u64)? {
            Step::Row(row, next) => {
                rows.push(row);
                at = next;
            }
            Step::End(end) => {
                if end != bytes.len() {
                    return Err(format!(
                        "{} bytes after the END record at offset {at}",
                        bytes.len() - end
                    ));
                }
                return Ok(rows);
            }
        }
    }
}

/// Bytes a streamed file is read in at least.
const READ_CHUNK_BYTES: usize = 1 << 20;

/// The part of a file being streamed that is in memory: the bytes from offset `base` on, the
/// next record at `at` of them.
struct Window<'f> {
    file: &'f mut dyn std::io::Read,
    bytes: Vec<u8>,
    base: usize,
    at: usize,
    eof: bool,
}

impl Window<'_> {
    /// Makes `bytes[at..]` hold `want` bytes, or all the file has left.
    fn fill(&mut self, want: usize) -> Result<(), String> {
        if self.bytes.len() - self.at >= want || self.eof {
            return Ok(());
        }
        self.bytes.drain(..self.at);
        self.base += self.at;
        self.at = 0;
        while self.bytes.len() < want && !self.eof {
            let old = self.bytes.len();
            self.bytes.resize(old + want.max(READ_CHUNK_BYTES), 0);
            let mut read = 0;
            while old + read < self.bytes.len() {
                match self.file.read(&mut self.bytes[old + read..]) {
                    Ok(0) => {
                        self.eof = true;
                        break;
                    }
                    Ok(n) => read += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        return Err(format!("at offset {}: read: {e}", self.base + old + read))
                    }
                }
            }
            self.bytes.truncate(old + read);
        }
        Ok(())
    }
}

/// Reads a data or log file (`magic`) of node `node` of backup `id` from `file` a record at a
/// time, in memory of a chunk, handing each row record to `each`: the checks of
/// [`read_rows`], for a file of any size. Returns how many rows it read.
pub fn scan_rows(
    file: &mut dyn std::io::Read,
    magic: [u8; 8],
    id: u32,
    node: u32,
    each: &mut dyn FnMut(BackupRow<'_>) -> Result<(), String>,
) -> Result<u64, String> {
    let mut w = Window {
        file,
        bytes: Vec::new(),
        base: 0,
        at: 0,
        eof: false,
    };
    w.fill(HEADER_BYTES)?;
    check_header(&w.bytes, magic, id, node)?;
    w.at = HEADER_BYTES;
    let mut rows = 0u64;
    loop {
        // The record's head, then the whole record its length says (a length past the limit
        // is for `step` to refuse).
        w.fill(super::format::RECORD_HEAD_BYTES)?;
        if let Some(head) = w.bytes.get(w.at..w.at + 4) {
            let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
            w.fill(super::format::RECORD_HEAD_BYTES + len.min(super::format::PAYLOAD_MAX))?;
        }
        let end = match step(&w.bytes, w.at, w.base, rows)? {
            Step::Row(row, next) => {
                each(row)?;
                rows += 1;
                w.at = next;
                continue;
            }
            Step::End(end) => end,
        };
        let end_at = w.base + w.at;
        w.at = end;
        w.fill(1)?;
        if w.bytes.len() > w.at {
            return Err(format!("bytes after the END record at offset {end_at}"));
        }
        return Ok(rows);
    }
}

fn check_header(bytes: &[u8], magic: [u8; 8], id: u32, node: u32) -> Result<(), String> {
    let header = FileHeader::decode(bytes, magic).map_err(|e| format!("at offset 0: {e}"))?;
    if header.node != node || header.seq != u64::from(id) || header.part != 0 {
        return Err(format!(
            "at offset 0: the header names node {} backup {} part {}, not node {node} backup \
             {id} part 0",
            header.node, header.seq, header.part
        ));
    }
    Ok(())
}

/// Which log records a restore applies, and as what, in file order (`ndb_restore`'s and the
/// simulator's): the records up to the stop GCP; of a SNAPSHOTSTART backup, those up to its
/// snapshot GCP, and of each row's later records the first, backwards (a BEFORE or DELETE
/// record's image put back, the row a PUT with no BEFORE inserted deleted), which takes the
/// row back to where it was at the end of the snapshot GCP. BEFORE records are not applied
/// otherwise.
#[derive(Debug)]
pub struct LogReplay {
    stop_gci: u32,
    snapshot_gci: Option<u32>,
    /// SNAPSHOTSTART: the rows (table, key) already taken back.
    taken_back: std::collections::HashSet<(u32, Vec<u8>)>,
}

impl LogReplay {
    pub fn new(ctl: &BackupCtl) -> LogReplay {
        LogReplay {
            stop_gci: ctl.stop_gci,
            snapshot_gci: ctl.snapshot_gci,
            taken_back: Default::default(),
        }
    }

    /// The record to apply for log record `row`, if any: `row`, or (going back) `row` with
    /// another kind. `key` gives the row's key bytes, asked for records past a snapshot GCP.
    pub fn take<'r, E>(
        &mut self,
        row: BackupRow<'r>,
        key: impl FnOnce(&BackupRow<'r>) -> Result<Vec<u8>, E>,
    ) -> Result<Option<BackupRow<'r>>, E> {
        let gci = (row.gci >> 32) as u32;
        let forward = row.kind != backup_kind::BEFORE;
        let Some(snapshot) = self.snapshot_gci else {
            return Ok((gci <= self.stop_gci && forward).then_some(row));
        };
        if gci <= snapshot {
            return Ok(forward.then_some(row));
        }
        if !self.taken_back.insert((row.table_id, key(&row)?)) {
            return Ok(None);
        }
        let kind = match row.kind {
            // A change that replaced the row (its PUT follows), or a delete: the image before.
            backup_kind::BEFORE | kind::DELETE => kind::PUT,
            // A PUT with no BEFORE: the row was inserted.
            _ => kind::DELETE,
        };
        Ok(Some(BackupRow { kind, ..row }))
    }
}

/// A node's control file of a backup: what it holds and the schema to restore it into.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupCtl {
    pub backup_id: u32,
    /// The node's epoch when its part of the backup began.
    pub start_gci: u64,
    /// The backup is each table as of the end of this global checkpoint: a restore applies
    /// log records up to it.
    pub stop_gci: u32,
    /// A SNAPSHOTSTART backup: it restores to the end of this global checkpoint (the newest
    /// any participant had seen when its part began), going back from the log's later
    /// records.
    pub snapshot_gci: Option<u32>,
    /// Rows in the data file, records in the log file, and the two files' sizes in bytes.
    pub records: u64,
    pub log_records: u64,
    pub data_bytes: u64,
    pub log_bytes: u64,
    /// The tables backed up (unique indexes' hidden tables are not: a restore builds them).
    pub tables: Vec<TableInfo>,
    /// Their unique and ordered indexes.
    pub indexes: Vec<IndexInfo>,
}

impl BackupCtl {
    /// The whole control file of node `node`.
    pub fn file_bytes(&self, node: u32) -> Vec<u8> {
        let mut out = header(CTL_MAGIC, self.backup_id, node);
        append_record(
            &mut out,
            u64::from(self.stop_gci) << 32,
            backup_kind::CTL,
            |b| {
                Writer::new(b)
                    .u32(self.backup_id)
                    .u64(self.start_gci)
                    .u32(self.stop_gci)
                    .u64(self.records)
                    .u64(self.log_records)
                    .u64(self.data_bytes)
                    .u64(self.log_bytes)
                    .u32(self.tables.len() as u32)
                    .u32(self.indexes.len() as u32);
                if let Some(gci) = self.snapshot_gci {
                    Writer::new(b).u32(gci);
                }
            },
        );
        for table in &self.tables {
            append_record(&mut out, 0, backup_kind::TABLE, |b| table.encode(b));
        }
        for index in &self.indexes {
            append_record(&mut out, 0, backup_kind::INDEX, |b| index.encode(b));
        }
        out
    }

    /// Reads node `node`'s whole control file of backup `id`. Every error names the offset
    /// it is at.
    pub fn from_file(bytes: &[u8], id: u32, node: u32) -> Result<BackupCtl, String> {
        check_header(bytes, CTL_MAGIC, id, node)?;
        let mut offset = HEADER_BYTES;
        // Each record of `kind` carries GCI `gci` (the control record the stop GCI's, the
        // others 0).
        let next = |kind: u8, gci: u64, offset: &mut usize| -> Result<&[u8], String> {
            let at = *offset;
            match read_record(bytes, at) {
                Next::Record(r) if r.kind == kind && r.gci == gci => {
                    *offset = r.next;
                    Ok(r.payload)
                }
                Next::Record(r) if r.kind == kind => Err(format!(
                    "at offset {at}: a record of kind {kind} with GCI {}, expected {gci}",
                    r.gci
                )),
                Next::Record(r) => Err(format!(
                    "at offset {at}: a record of kind {}, expected {kind}",
                    r.kind
                )),
                Next::End => Err(format!("ends at offset {at}, before its last record")),
                Next::Bad(why) => Err(format!("at offset {at}: {why}")),
            }
        };
        let at = offset;
        let gci = match read_record(bytes, at) {
            Next::Record(r) => r.gci,
            _ => 0,
        };
        let payload = next(backup_kind::CTL, gci, &mut offset)?;
        let mut r = Reader::new(payload, "backup control record");
        let decode = |r: &mut Reader<'_>| -> Result<(BackupCtl, u32, u32), DecodeError> {
            let mut ctl = BackupCtl {
                backup_id: r.u32()?,
                start_gci: r.u64()?,
                stop_gci: r.u32()?,
                records: r.u64()?,
                log_records: r.u64()?,
                data_bytes: r.u64()?,
                log_bytes: r.u64()?,
                snapshot_gci: None,
                tables: Vec::new(),
                indexes: Vec::new(),
            };
            let (tables, indexes) = (r.u32()?, r.u32()?);
            if r.remaining() > 0 {
                ctl.snapshot_gci = Some(r.u32()?);
            }
            r.finish()?;
            Ok((ctl, tables, indexes))
        };
        let (mut ctl, tables, indexes) =
            decode(&mut r).map_err(|e| format!("at offset {at}: {e}"))?;
        if gci != u64::from(ctl.stop_gci) << 32 {
            return Err(format!(
                "at offset {at}: the control record's GCI {gci} is not its stop GCI {}",
                ctl.stop_gci
            ));
        }
        if ctl.backup_id != id {
            return Err(format!(
                "at offset {at}: the control record names backup {}, not {id}",
                ctl.backup_id
            ));
        }
        for _ in 0..tables {
            let at = offset;
            let payload = next(backup_kind::TABLE, 0, &mut offset)?;
            ctl.tables
                .push(TableInfo::decode(payload).map_err(|e| format!("at offset {at}: {e}"))?);
        }
        for _ in 0..indexes {
            let at = offset;
            let payload = next(backup_kind::INDEX, 0, &mut offset)?;
            ctl.indexes
                .push(IndexInfo::decode(payload).map_err(|e| format!("at offset {at}: {e}"))?);
        }
        if offset != bytes.len() {
            return Err(format!(
                "{} bytes after the last record, at offset {offset}",
                bytes.len() - offset
            ));
        }
        Ok(ctl)
    }
}

#[cfg(test)]
mod tests {
    use rndb_protocol::{ColumnDef, ColumnType, IndexKind, TableDef};

    use super::*;

    fn ctl() -> BackupCtl {
        BackupCtl {
            backup_id: 7,
            start_gci: 5 << 32 | 2,
            stop_gci: 9,
            snapshot_gci: None,
            records: 2,
            log_records: 1,
            data_bytes: 120,
            log_bytes: 90,
            tables: vec![TableInfo {
                table_id: 3,
                table_version: 1,
                def: TableDef::new(
                    "t",
                    vec![
                        ColumnDef::key("id", ColumnType::Int32),
                        ColumnDef::new("v", ColumnType::Varchar(20)),
                    ],
                ),
            }],
            indexes: vec![IndexInfo {
                index_id: 4,
                index_version: 1,
                table_id: 3,
                table_version: 1,
                kind: IndexKind::Ordered,
                name: "v_idx".into(),
                columns: vec![1],
            }],
        }
    }

    #[test]
    fn a_control_file_reads_back_and_damage_is_reported_at_its_offset() {
        let bytes = ctl().file_bytes(2);
        assert_eq!(BackupCtl::from_file(&bytes, 7, 2), Ok(ctl()));
        let snapshot = BackupCtl {
            snapshot_gci: Some(6),
            ..ctl()
        };
        let read = BackupCtl::from_file(&snapshot.file_bytes(2), 7, 2);
        assert_eq!(read, Ok(snapshot), "a SNAPSHOTSTART backup's point");
        let err = BackupCtl::from_file(&bytes, 7, 3).unwrap_err();
        assert!(err.contains("node 2 backup 7 part 0, not node 3"), "{err}");
        let mut damaged = bytes.clone();
        damaged[HEADER_BYTES + 20] ^= 1;
        let err = BackupCtl::from_file(&damaged, 7, 2).unwrap_err();
        assert!(
            err.starts_with(&format!("at offset {HEADER_BYTES}: ")),
            "{err}"
        );
        let cut = &bytes[..bytes.len() - 3];
        assert!(BackupCtl::from_file(cut, 7, 2).is_err());
    }

    /// A SNAPSHOTSTART backup's log goes forward to its snapshot GCP and then back one change
    /// a row; without a snapshot GCP, forward to the stop GCP, BEFORE records left out.
    #[test]
    fn a_log_replays_to_the_stop_gcp_or_back_to_the_snapshot_gcp() {
        let record = |gci: u32, kind: u8, key: &'static [u8]| BackupRow {
            gci: u64::from(gci) << 32,
            kind,
            table_id: 3,
            fragment: 0,
            row: key,
            offset: 0,
        };
        let log = [
            record(4, kind::PUT, b"k1"),
            record(4, backup_kind::BEFORE, b"k2"),
            record(4, kind::PUT, b"k2"),
            record(6, backup_kind::BEFORE, b"k1"),
            record(6, kind::PUT, b"k1"),
            record(7, kind::PUT, b"k3"),
            record(8, kind::DELETE, b"k4"),
            record(9, kind::PUT, b"k4"),
            record(9, backup_kind::BEFORE, b"k1"),
            record(9, kind::PUT, b"k1"),
        ];
        let replayed = |snapshot_gci| {
            let mut replay = LogReplay::new(&BackupCtl {
                snapshot_gci,
                ..ctl()
            });
            let key = |r: &BackupRow<'_>| Ok::<_, ()>(r.row.to_vec());
            (log.iter())
                .filter_map(|&r| replay.take(r, key).unwrap())
                .map(|r| ((r.gci >> 32) as u32, r.kind, r.row))
                .collect::<Vec<_>>()
        };
        let (put, delete) = (kind::PUT, kind::DELETE);
        // Forward to the stop GCP (9).
        let forward = replayed(None);
        assert_eq!(forward.len(), 7, "{forward:?}");
        assert!(forward.iter().all(|&(_, k, _)| k != backup_kind::BEFORE));
        // To GCP 5: k1 put back to its image before GCP 6, k3 (inserted at 7) deleted, k4
        // (deleted at 8) put back; the later changes of each are left out.
        assert_eq!(
            replayed(Some(5)),
            vec![
                (4, put, &b"k1"[..]),
                (4, put, &b"k2"[..]),
                (6, put, &b"k1"[..]),
                (7, delete, &b"k3"[..]),
                (8, put, &b"k4"[..]),
            ]
        );
    }

    #[test]
    fn a_row_file_needs_its_end_record_and_its_count() {
        let mut bytes = header(LOG_MAGIC, 7, 2);
        append_row(&mut bytes, 9 << 32, kind::PUT, 3, 1, b"row-a");
        append_row(&mut bytes, 10 << 32, kind::DELETE, 3, 0, b"row-b");
        let unfinished = bytes.clone();
        append_end(&mut bytes, 10 << 32, 2);
        let rows = read_rows(&bytes, LOG_MAGIC, 7, 2).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows[0].kind, rows[0].table_id, rows[0].fragment),
            (kind::PUT, 3, 1)
        );
        assert_eq!(
            (rows[1].kind, rows[1].row, rows[1].gci),
            (kind::DELETE, &b"row-b"[..], 10 << 32)
        );
        let err = read_rows(&unfinished, LOG_MAGIC, 7, 2).unwrap_err();
        assert!(err.contains("without its END record"), "{err}");
        let err = read_rows(&bytes, DATA_MAGIC, 7, 2).unwrap_err();
        assert!(err.starts_with("at offset 0: not a RNDBBKPD file"), "{err}");
        let mut wrong = unfinished.clone();
        append_end(&mut wrong, 0, 3);
        let err = read_rows(&wrong, LOG_MAGIC, 7, 2).unwrap_err();
        assert!(err.contains("counts 3 rows, the file holds 2"), "{err}");
        let mut damaged = bytes.clone();
        let second = rows[1].offset;
        damaged[second + 10] ^= 0x40;
        let err = read_rows(&damaged, LOG_MAGIC, 7, 2).unwrap_err();
        assert!(err.starts_with(&format!("at offset {second}: ")), "{err}");
    }

    /// A reader that hands out at most `step` bytes a read, so that a stream refills its
    /// window in the middle of records.
    struct Trickle<'a> {
        bytes: &'a [u8],
        step: usize,
    }

    impl std::io::Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = buf.len().min(self.step).min(self.bytes.len());
            buf[..n].copy_from_slice(&self.bytes[..n]);
            self.bytes = &self.bytes[n..];
            Ok(n)
        }
    }

    /// A row read, as (offset, gci, kind, table, fragment, row).
    type OwnedRow = (usize, u64, u8, u32, u32, Vec<u8>);

    fn owned(r: &BackupRow<'_>) -> OwnedRow {
        (
            r.offset,
            r.gci,
            r.kind,
            r.table_id,
            r.fragment,
            r.row.to_vec(),
        )
    }

    /// What `scan_rows` reads from `bytes`, `step` bytes a read, or its error.
    fn streamed(bytes: &[u8], step: usize) -> Result<Vec<OwnedRow>, String> {
        let mut rows = Vec::new();
        let mut file = Trickle { bytes, step };
        let count = scan_rows(&mut file, LOG_MAGIC, 7, 2, &mut |r| {
            rows.push(owned(&r));
            Ok(())
        })?;
        assert_eq!(count as usize, rows.len());
        Ok(rows)
    }

    /// A file streamed a few bytes a read, or a megabyte, reads as it does whole: the same
    /// rows, and each damage named at the same offset.
    #[test]
    fn a_streamed_file_reads_as_a_whole_one() {
        let mut bytes = header(LOG_MAGIC, 7, 2);
        for i in 0..300u32 {
            let row = vec![i as u8; (i as usize * 37) % 2000];
            append_row(&mut bytes, u64::from(i) << 32, kind::PUT, 3, i % 4, &row);
        }
        append_end(&mut bytes, 300 << 32, 300);
        let whole: Vec<_> = read_rows(&bytes, LOG_MAGIC, 7, 2)
            .unwrap()
            .iter()
            .map(owned)
            .collect();
        for step in [1, 7, 4096, 1 << 20] {
            assert_eq!(streamed(&bytes, step).unwrap(), whole, "step {step}");
        }
        for at in [0, 5, 40, bytes.len() / 2, bytes.len() - 3] {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x20;
            let expected = read_rows(&damaged, LOG_MAGIC, 7, 2).unwrap_err();
            for step in [3, 1 << 20] {
                assert_eq!(streamed(&damaged, step).unwrap_err(), expected, "at {at}");
            }
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(streamed(&longer, 5)
            .unwrap_err()
            .contains("bytes after the END record"));
        let cut = &bytes[..bytes.len() - 1];
        assert_eq!(
            streamed(cut, 9).unwrap_err(),
            read_rows(cut, LOG_MAGIC, 7, 2).unwrap_err()
        );
    }
}
