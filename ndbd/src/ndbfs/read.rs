//! Whole-file readers of the record files a restart reads: a redo log file, the schema log and
//! a local checkpoint's data file. Each walks the records after the header as [`Entry`]s,
//! checking that every record is of a kind its file holds and that its payload decodes, and
//! stops at the first bytes that are not a valid record with a [`ReadError`] naming the offset.
//! Whether such a stop is a torn tail (cut off) or damage is the caller's decision
//! (`blocks/restart.rs`); the reader only says which kind of stop it is.
//!
//! Reading never trusts a length: a record's length is checked against [`format::PAYLOAD_MAX`]
//! and the bytes left before anything is sliced, nothing is allocated from a length field, and
//! every record advances the offset by at least [`format::RECORD_HEAD_BYTES`], so a walk ends.
//! A file read whole ([`read_file`]) encodes back to the same bytes ([`encode_file`]).

use std::fmt;

use rndb_protocol::codec::Reader;

use super::format::{
    self, kind, FileHeader, Next, RowChange, SchemaChange, HEADER_BYTES, LCP_DATA_MAGIC,
    REDO_MAGIC, SCHEMA_MAGIC,
};

/// Which record file is read: it fixes the magic and the record kinds the file may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// A redo log part's file (`D<8+part>/DBLQH/S<n>.FragLog`): PUT, DELETE, GCI_COMPLETED,
    /// FILE_END and RESTART records.
    Redo,
    /// The schema log (`D1/DBDICT/P0.SchemaLog`): SCHEMA, GCI_COMPLETED and RESTART records.
    SchemaLog,
    /// A local checkpoint's data file (`LCP/<id>/T0.Data`): PUT and DELETE records, then one
    /// LCP_END record counting the PUTs.
    LcpData,
}

impl FileKind {
    /// The magic of this kind's header.
    pub fn magic(self) -> [u8; 8] {
        match self {
            FileKind::Redo => REDO_MAGIC,
            FileKind::SchemaLog => SCHEMA_MAGIC,
            FileKind::LcpData => LCP_DATA_MAGIC,
        }
    }

    fn holds(self, record_kind: u8) -> bool {
        match self {
            FileKind::Redo => matches!(
                record_kind,
                kind::PUT | kind::DELETE | kind::GCI_COMPLETED | kind::FILE_END | kind::RESTART
            ),
            FileKind::SchemaLog => matches!(
                record_kind,
                kind::SCHEMA | kind::GCI_COMPLETED | kind::RESTART
            ),
            FileKind::LcpData => matches!(record_kind, kind::PUT | kind::DELETE | kind::LCP_END),
        }
    }
}

/// What one record says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body<'a> {
    /// PUT or DELETE.
    Row(RowChange<'a>),
    Schema(SchemaChange),
    GciCompleted,
    FileEnd,
    Restart,
    /// The end of a local checkpoint's data file, with the count of PUT records before it.
    LcpEnd {
        rows: u64,
    },
}

impl Body<'_> {
    /// The record kind this body is written as.
    pub fn kind(&self) -> u8 {
        match self {
            Body::Row(change) if change.row.is_some() => kind::PUT,
            Body::Row(_) => kind::DELETE,
            Body::Schema(_) => kind::SCHEMA,
            Body::GciCompleted => kind::GCI_COMPLETED,
            Body::FileEnd => kind::FILE_END,
            Body::Restart => kind::RESTART,
            Body::LcpEnd { .. } => kind::LCP_END,
        }
    }

    /// Appends the record's payload.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Body::Row(change) => change.encode(out),
            Body::Schema(change) => change.encode(out),
            Body::LcpEnd { rows } => out.extend_from_slice(&rows.to_le_bytes()),
            Body::GciCompleted | Body::FileEnd | Body::Restart => {}
        }
    }
}

/// One record as read: where it starts and ends, its GCI and what it says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    pub offset: usize,
    pub gci: u64,
    pub body: Body<'a>,
    /// Where the next record starts.
    pub next: usize,
}

/// Why a walk stopped before the end of its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadError {
    /// Where the record (or header, at 0) that could not be read starts.
    pub offset: usize,
    pub why: String,
    /// No whole record starts here (too short, a length past the end, or a CRC mismatch): what
    /// a write cut short by a crash leaves. False for a whole record whose content is wrong
    /// (a kind its file does not hold, a payload that does not decode), which is damage.
    pub torn: bool,
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "offset {}: {}", self.offset, self.why)
    }
}

impl std::error::Error for ReadError {}

/// Reads the header of a `file` file at the start of `bytes` (an error at offset 0).
pub fn header(bytes: &[u8], file: FileKind) -> Result<FileHeader, ReadError> {
    FileHeader::decode(bytes, file.magic()).map_err(|why| ReadError {
        offset: 0,
        why,
        torn: false,
    })
}

/// The records of a `file` file from `offset` on (a record boundary: [`HEADER_BYTES`], or where
/// a local checkpoint says a redo part stood). The walk yields each record and ends at the end
/// of the bytes, or with the first error.
pub fn entries(bytes: &[u8], file: FileKind, offset: usize) -> Entries<'_> {
    Entries {
        bytes,
        file,
        offset,
        puts: 0,
        done: false,
    }
}

/// An iterator over a file's records; see [`entries`].
#[derive(Debug)]
pub struct Entries<'a> {
    bytes: &'a [u8],
    file: FileKind,
    offset: usize,
    /// PUT records read so far (checked against an LCP_END record's count).
    puts: u64,
    done: bool,
}

impl<'a> Entries<'a> {
    /// Where the next record would start: after the walk, where the valid records end.
    pub fn offset(&self) -> usize {
        self.offset
    }

    fn entry(&mut self) -> Option<Result<Entry<'a>, ReadError>> {
        let offset = self.offset;
        let record = match format::read_record(self.bytes, offset) {
            Next::End => return None,
            Next::Bad(why) => {
                return Some(Err(ReadError {
                    offset,
                    why,
                    torn: true,
                }))
            }
            Next::Record(record) => record,
        };
        let damaged = |why: String| ReadError {
            offset,
            why,
            torn: false,
        };
        if !self.file.holds(record.kind) {
            return Some(Err(damaged(format!(
                "a record of kind {} in a {:?} file",
                record.kind, self.file
            ))));
        }
        let body = match record.kind {
            kind::PUT | kind::DELETE => RowChange::decode(record.payload, record.kind)
                .map(Body::Row)
                .map_err(|e| damaged(e.to_string())),
            kind::SCHEMA => SchemaChange::decode(record.payload)
                .map(Body::Schema)
                .map_err(|e| damaged(e.to_string())),
            kind::LCP_END => self.lcp_end(record.payload).map_err(damaged),
            other => {
                let body = match other {
                    kind::GCI_COMPLETED => Body::GciCompleted,
                    kind::FILE_END => Body::FileEnd,
                    _ => Body::Restart,
                };
                if record.payload.is_empty() {
                    Ok(body)
                } else {
                    Err(damaged(format!(
                        "a record of kind {other} carries {} bytes; it has none",
                        record.payload.len()
                    )))
                }
            }
        };
        Some(body.map(|body| {
            if body.kind() == kind::PUT {
                self.puts += 1;
            }
            self.offset = record.next;
            Entry {
                offset,
                gci: record.gci,
                body,
                next: record.next,
            }
        }))
    }

    /// An LCP_END record: the count of PUT records before it, which must be the count read.
    fn lcp_end(&self, payload: &[u8]) -> Result<Body<'a>, String> {
        let mut r = Reader::new(payload, "LCP_END record");
        let rows = r.u64().map_err(|e| e.to_string())?;
        r.finish().map_err(|e| e.to_string())?;
        if rows != self.puts {
            return Err(format!(
                "LCP_END counts {rows} rows, and {} precede it",
                self.puts
            ));
        }
        Ok(Body::LcpEnd { rows })
    }
}

impl<'a> Iterator for Entries<'a> {
    type Item = Result<Entry<'a>, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = self.entry();
        if !matches!(item, Some(Ok(_))) {
            self.done = true;
        }
        item
    }
}

/// A record file read whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileRead<'a> {
    pub header: FileHeader,
    pub entries: Vec<Entry<'a>>,
    /// Where the valid records end: the file's length, or where `stop` is.
    pub end: usize,
    /// What stopped the walk before the end of the bytes.
    pub stop: Option<ReadError>,
}

/// Reads a whole `file` file: its header (an error when it is not valid), then every record up
/// to the end or the first that cannot be read (`stop`). A local checkpoint's data file must
/// also end with its LCP_END record, and nothing may follow that.
pub fn read_file(bytes: &[u8], file: FileKind) -> Result<FileRead<'_>, ReadError> {
    let header = header(bytes, file)?;
    let mut walk = entries(bytes, file, HEADER_BYTES);
    let mut read = Vec::new();
    let mut stop = None;
    for entry in walk.by_ref() {
        match entry {
            Ok(entry) => {
                let last = matches!(entry.body, Body::LcpEnd { .. });
                read.push(entry);
                if last {
                    break;
                }
            }
            Err(e) => stop = Some(e),
        }
    }
    let end = walk.offset();
    if file == FileKind::LcpData && stop.is_none() {
        let why = if end < bytes.len() {
            Some(format!(
                "{} bytes follow the LCP_END record",
                bytes.len() - end
            ))
        } else if !read
            .last()
            .is_some_and(|e| matches!(e.body, Body::LcpEnd { .. }))
        {
            Some("the file ends without its LCP_END record".to_string())
        } else {
            None
        };
        stop = why.map(|why| ReadError {
            offset: end,
            why,
            torn: false,
        });
    }
    Ok(FileRead {
        header,
        entries: read,
        end,
        stop,
    })
}

/// The bytes of a file with `header` and `entries`: what the data node's writers make.
pub fn encode_file(header: &FileHeader, entries: &[Entry<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    header.encode(&mut out);
    for entry in entries {
        format::append_record(&mut out, entry.gci, entry.body.kind(), |b| {
            entry.body.encode(b)
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redo_header() -> FileHeader {
        FileHeader {
            magic: REDO_MAGIC,
            node: 1,
            part: 0,
            seq: 0,
        }
    }

    #[test]
    fn a_redo_file_reads_back_and_encodes_to_its_bytes() {
        let mut bytes = Vec::new();
        redo_header().encode(&mut bytes);
        let change = RowChange {
            table_id: 2,
            table_version: 1,
            fragment: 0,
            key: b"k",
            row: Some(b"v"),
        };
        format::append_record(&mut bytes, 5 << 32, kind::PUT, |b| change.encode(b));
        format::append_record(&mut bytes, 5 << 32, kind::GCI_COMPLETED, |_| {});
        let read = read_file(&bytes, FileKind::Redo).unwrap();
        assert_eq!(read.stop, None);
        assert_eq!(read.entries.len(), 2);
        assert_eq!(read.entries[0].body, Body::Row(change));
        assert_eq!(encode_file(&read.header, &read.entries), bytes);
        // A torn tail stops the walk where it starts, as torn.
        let whole = bytes.len();
        bytes.extend_from_slice(&[7; 10]);
        let read = read_file(&bytes, FileKind::Redo).unwrap();
        let stop = read.stop.unwrap();
        assert_eq!((stop.offset, stop.torn, read.end), (whole, true, whole));
    }

    #[test]
    fn a_record_of_another_file_or_with_a_payload_it_lacks_is_damage_at_its_offset() {
        let mut bytes = Vec::new();
        redo_header().encode(&mut bytes);
        format::append_record(&mut bytes, 0, kind::SCHEMA, |b| b.push(1));
        let stop = read_file(&bytes, FileKind::Redo).unwrap().stop.unwrap();
        assert_eq!((stop.offset, stop.torn), (HEADER_BYTES, false));
        assert!(stop
            .to_string()
            .starts_with("offset 32: a record of kind 5"));

        let mut bytes = Vec::new();
        redo_header().encode(&mut bytes);
        format::append_record(&mut bytes, 0, kind::GCI_COMPLETED, |b| b.push(1));
        let stop = read_file(&bytes, FileKind::Redo).unwrap().stop.unwrap();
        assert!(!stop.torn, "{stop}");
    }

    #[test]
    fn a_checkpoint_data_file_must_count_its_rows_and_end_with_lcp_end() {
        let header = FileHeader {
            magic: LCP_DATA_MAGIC,
            node: 1,
            part: 0,
            seq: 3,
        };
        let change = RowChange {
            table_id: 2,
            table_version: 0,
            fragment: 0,
            key: b"k",
            row: Some(b"v"),
        };
        let file = |rows: u64, end: bool| {
            let mut bytes = Vec::new();
            header.encode(&mut bytes);
            format::append_record(&mut bytes, 1, kind::PUT, |b| change.encode(b));
            if end {
                format::append_record(&mut bytes, 1, kind::LCP_END, |b| {
                    b.extend_from_slice(&rows.to_le_bytes())
                });
            }
            bytes
        };
        let good = file(1, true);
        let read = read_file(&good, FileKind::LcpData).unwrap();
        assert_eq!(read.stop, None);
        assert_eq!(encode_file(&read.header, &read.entries), good);
        for (bytes, why) in [
            (file(2, true), "LCP_END counts 2 rows, and 1 precede it"),
            (file(1, false), "the file ends without its LCP_END record"),
            (
                [good.clone(), vec![0]].concat(),
                "1 bytes follow the LCP_END record",
            ),
        ] {
            let stop = read_file(&bytes, FileKind::LcpData).unwrap().stop.unwrap();
            assert_eq!(stop.why, why);
        }
    }
}
