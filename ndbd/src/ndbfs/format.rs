//! The byte layouts of a data node's files (drawn in ARCHITECTURE.md). Every file is a header
//! followed by records; every header and record carries a CRC-32 (IEEE, as `crc32fast`
//! computes it) and the header the format version. Integers are little-endian.
//!
//! ```text
//! header (32 bytes):  magic[8] | version u32 | node u32 | part u32 | seq u64 | crc u32 (of bytes 0..28)
//! record (17 + len):  len u32 | crc u32 (of bytes 8..17+len) | gci u64 | kind u8 | payload[len]
//! ```
//!
//! Reading never trusts a length: a record that runs past the end of its bytes, or whose CRC
//! does not match, is reported as bad at its offset, and the caller decides whether that is a
//! torn tail (cut off) or damage (an error naming the file and offset).

use rndb_protocol::codec::{DecodeError, Reader, Writer};
use rndb_protocol::dih::{decode_restarts, encode_restarts, RestartId};

/// The format version every header carries.
pub const VERSION: u32 = 1;
/// Bytes of a file header.
pub const HEADER_BYTES: usize = 32;
/// Bytes of a record before its payload.
pub const RECORD_HEAD_BYTES: usize = 17;
/// The longest payload a record may claim: a row of at most a frame, with its key.
pub const PAYLOAD_MAX: usize = 1 << 20;

pub const REDO_MAGIC: [u8; 8] = *b"RNDBREDO";
pub const SCHEMA_MAGIC: [u8; 8] = *b"RNDBSCHM";
pub const SYSFILE_MAGIC: [u8; 8] = *b"RNDBSYSF";
pub const LCP_DATA_MAGIC: [u8; 8] = *b"RNDBLCPD";
pub const LCP_CTL_MAGIC: [u8; 8] = *b"RNDBLCPC";

/// Record kinds.
pub mod kind {
    /// A row's committed after-image: [`RowChange`](super::RowChange) with a row.
    pub const PUT: u8 = 1;
    /// A row deleted: [`RowChange`](super::RowChange) without a row.
    pub const DELETE: u8 = 2;
    /// Every change of this record's GCI and all before it precedes this record in its part
    /// (written by a global checkpoint's save, NDB's completed-GCI record). No payload.
    pub const GCI_COMPLETED: u8 = 3;
    /// The writer went on in the part's next file. No payload.
    pub const FILE_END: u8 = 4;
    /// A schema change as this node applied it: [`SchemaChange`](super::SchemaChange).
    pub const SCHEMA: u8 = 5;
    /// The sysfile's content: [`Sysfile`](super::Sysfile).
    pub const SYSFILE: u8 = 6;
    /// A local checkpoint's control record: [`LcpCtl`](super::LcpCtl).
    pub const LCP_CTL: u8 = 7;
    /// The last record of a local checkpoint's data file: how many rows it holds (u64).
    pub const LCP_END: u8 = 8;
    /// A system restart at this record's GCI cut its part here: every change before it of a
    /// later GCI was not restored, and the restarted cluster gives those GCIs again, so no
    /// later restart may apply such a change. No payload.
    pub const RESTART: u8 = 9;
    /// Only in a node restart's COPY_ROWS, never in a file: the row is as the restarting node
    /// restored it (unchanged since the GCI it restored up to): [`RowChange`](super::RowChange) without a row,
    /// the record's GCI the row's last change.
    pub const COPY_KEEP: u8 = 10;
}

/// A file's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileHeader {
    pub magic: [u8; 8],
    pub node: u32,
    /// The redo log part (0 for other files).
    pub part: u32,
    /// The file's place in its part's sequence of files (0 for other files).
    pub seq: u64,
}

impl FileHeader {
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&self.magic);
        Writer::new(out)
            .u32(VERSION)
            .u32(self.node)
            .u32(self.part)
            .u64(self.seq);
        let crc = crc32fast::hash(&out[start..]);
        Writer::new(out).u32(crc);
    }

    /// Reads the header at the start of `bytes`, which must have `magic`.
    pub fn decode(bytes: &[u8], magic: [u8; 8]) -> Result<FileHeader, String> {
        let Some(head) = bytes.get(..HEADER_BYTES) else {
            return Err(format!(
                "{} bytes, shorter than a file header ({HEADER_BYTES})",
                bytes.len()
            ));
        };
        let stored = u32::from_le_bytes([head[28], head[29], head[30], head[31]]);
        if crc32fast::hash(&head[..28]) != stored {
            return Err("the file header's CRC does not match".into());
        }
        if head[..8] != magic {
            return Err(format!(
                "not a {} file (magic {:?})",
                String::from_utf8_lossy(&magic),
                String::from_utf8_lossy(&head[..8])
            ));
        }
        let mut r = Reader::new(&head[8..28], "file header");
        let version = r.u32().map_err(|e| e.to_string())?;
        if version != VERSION {
            return Err(format!(
                "format version {version}; this ndbd reads version {VERSION}"
            ));
        }
        let (node, part, seq) = (
            r.u32().map_err(|e| e.to_string())?,
            r.u32().map_err(|e| e.to_string())?,
            r.u64().map_err(|e| e.to_string())?,
        );
        Ok(FileHeader {
            magic,
            node,
            part,
            seq,
        })
    }
}

/// Appends one record of `kind` tagged `gci`, its payload written by `payload`.
pub fn append_record(out: &mut Vec<u8>, gci: u64, kind: u8, payload: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&[0; 8]);
    Writer::new(out).u64(gci).u8(kind);
    payload(out);
    let len = (out.len() - start - RECORD_HEAD_BYTES) as u32;
    let crc = crc32fast::hash(&out[start + 8..]);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// One record as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    pub gci: u64,
    pub kind: u8,
    pub payload: &'a [u8],
    /// Where the next record starts.
    pub next: usize,
}

/// What is at an offset of a file's bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum Next<'a> {
    Record(Record<'a>),
    /// The bytes end exactly here.
    End,
    /// No valid record starts here: why.
    Bad(String),
}

/// Reads the record at `offset` of `bytes`.
pub fn read_record(bytes: &[u8], offset: usize) -> Next<'_> {
    if offset == bytes.len() {
        return Next::End;
    }
    // `offset` may come from a file (where a local checkpoint says a redo part stood): it is
    // not trusted to leave room for a head before the end of the address space either.
    let head = offset
        .checked_add(RECORD_HEAD_BYTES)
        .and_then(|head_end| bytes.get(offset..head_end));
    let Some(head) = head else {
        return Next::Bad(format!(
            "{} bytes left, shorter than a record head",
            bytes.len().saturating_sub(offset)
        ));
    };
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let stored = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    if len > PAYLOAD_MAX {
        return Next::Bad(format!("a record claims {len} bytes of payload"));
    }
    let end = offset + RECORD_HEAD_BYTES + len;
    let Some(body) = bytes.get(offset + 8..end) else {
        return Next::Bad(format!("a record of {len} bytes runs past the end"));
    };
    if crc32fast::hash(body) != stored {
        return Next::Bad("the record's CRC does not match".into());
    }
    let gci = u64::from_le_bytes([
        body[0], body[1], body[2], body[3], body[4], body[5], body[6], body[7],
    ]);
    Next::Record(Record {
        gci,
        kind: body[8],
        payload: &body[9..],
        next: end,
    })
}

/// A row change in the redo log: a PUT carries the row's whole committed image (its packed
/// values), a DELETE none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowChange<'a> {
    pub table_id: u32,
    pub table_version: u32,
    pub fragment: u32,
    /// The canonical primary key (the hash index's key).
    pub key: &'a [u8],
    pub row: Option<&'a [u8]>,
}

impl RowChange<'_> {
    /// `table_id u32 | table_version u32 | fragment u32 | key_len u32 | key | row (the rest)`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        Writer::new(out)
            .u32(self.table_id)
            .u32(self.table_version)
            .u32(self.fragment)
            .u32(self.key.len() as u32);
        out.extend_from_slice(self.key);
        if let Some(row) = self.row {
            out.extend_from_slice(row);
        }
    }

    pub fn decode(payload: &[u8], kind: u8) -> Result<RowChange<'_>, DecodeError> {
        let mut r = Reader::new(payload, "redo row change");
        let (table_id, table_version, fragment) = (r.u32()?, r.u32()?, r.u32()?);
        let key_len = r.u32()? as usize;
        let rest = r.rest();
        let Some(key) = rest.get(..key_len) else {
            return Err(r.error(format!("key of {key_len} bytes runs past the record")));
        };
        let row = &rest[key_len..];
        let row = match kind {
            kind::PUT => Some(row),
            _ if row.is_empty() => None,
            _ => return Err(r.error("a delete carries a row")),
        };
        Ok(RowChange {
            table_id,
            table_version,
            fragment,
            key,
            row,
        })
    }
}

/// A schema change as this node applied it: the request's signal and payload, and the first
/// object id the dictionary gave it (so a replay gives the same ids).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaChange {
    pub signal: u16,
    pub first_id: u32,
    pub request: Vec<u8>,
}

impl SchemaChange {
    /// `signal u16 | first_id u32 | request (the rest)`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        Writer::new(out).u16(self.signal).u32(self.first_id);
        out.extend_from_slice(&self.request);
    }

    pub fn decode(payload: &[u8]) -> Result<SchemaChange, DecodeError> {
        let mut r = Reader::new(payload, "schema change");
        let (signal, first_id) = (r.u16()?, r.u32()?);
        Ok(SchemaChange {
            signal,
            first_id,
            request: r.rest().to_vec(),
        })
    }
}

/// The sysfile (NDB's P0.sysfile, written in two copies): the newest global checkpoint this
/// node knows to be restorable cluster-wide.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sysfile {
    /// NDB's newestRestorableGCI: the high word of the newest saved GCI.
    pub restorable_gci: u32,
    /// Written by a system restart's restore before it cut its logs at its GCI, and
    /// cleared once the cut is on disk: while set, the logs may still hold, past the restart
    /// GCI, changes of GCIs the restarted cluster gave again, and this node restores no GCI
    /// past it.
    pub cut_pending: bool,
    /// The system restarts the files went through, oldest first, the last the one this node
    /// took part in (or the cluster's when it joined by node restart): the newest
    /// `RESTARTS_KEPT`. A restart chooses which nodes' logs it can trust by them (`restart.rs`),
    /// and a node restart keeps its own rows only when the cluster has not restarted since
    /// (`node_restart.rs`): a system restart gives the GCIs after its own again, to other
    /// changes.
    pub restarts: Vec<RestartId>,
}

/// The SYSFILE record's flag saying its restart's cut may not be on disk yet.
const SYSFILE_CUT_PENDING: u32 = 1;

impl Sysfile {
    /// The GCI of the last system restart named (0 when none is: an initial start's files, or
    /// none).
    pub fn restart_gci(&self) -> u32 {
        self.restarts.last().map_or(0, |r| r.gci)
    }

    /// A whole sysfile: header, then one SYSFILE record (`restorable_gci u32 | restart_gci
    /// u32 | flags u32 | restarts: count u8 | count × (no u32 | gci u32)`, flag 1
    /// `cut_pending`; `restart_gci` is the last restart's GCI, and a record where it is not
    /// reads as damaged, as does a sysfile written before the flags and the history
    /// existed).
    pub fn file_bytes(&self, node: u32) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        FileHeader {
            magic: SYSFILE_MAGIC,
            node,
            part: 0,
            seq: 0,
        }
        .encode(&mut out);
        append_record(&mut out, 0, kind::SYSFILE, |b| {
            Writer::new(b)
                .u32(self.restorable_gci)
                .u32(self.restart_gci())
                .u32(if self.cut_pending {
                    SYSFILE_CUT_PENDING
                } else {
                    0
                });
            encode_restarts(&mut Writer::new(b), &self.restarts);
        });
        out
    }

    /// Reads a whole sysfile of node `node`.
    /// Every error names the offset it is at.
    pub fn from_file(bytes: &[u8], node: u32) -> Result<Sysfile, String> {
        let header =
            FileHeader::decode(bytes, SYSFILE_MAGIC).map_err(|e| format!("at offset 0: {e}"))?;
        if header.node != node {
            return Err(format!("written by node {}, not node {node}", header.node));
        }
        if (header.part, header.seq) != (0, 0) {
            return Err(format!(
                "at offset 0: a sysfile header names part {} seq {}",
                header.part, header.seq
            ));
        }
        match read_record(bytes, HEADER_BYTES) {
            Next::Record(r) if r.kind == kind::SYSFILE && r.gci != 0 => Err(format!(
                "at offset {HEADER_BYTES}: the sysfile's record names GCI {}",
                r.gci
            )),
            Next::Record(r) if r.kind == kind::SYSFILE => {
                let mut reader = Reader::new(r.payload, "sysfile");
                let mut read = || -> Result<Sysfile, DecodeError> {
                    let restorable_gci = reader.u32()?;
                    let restart_gci = reader.u32()?;
                    let flags = reader.u32()?;
                    let restarts = decode_restarts(&mut reader)?;
                    reader.finish()?;
                    if flags & !SYSFILE_CUT_PENDING != 0 {
                        return Err(DecodeError::new(
                            "sysfile",
                            format!("unknown flags {flags:#x}"),
                        ));
                    }
                    let sysfile = Sysfile {
                        restorable_gci,
                        cut_pending: flags & SYSFILE_CUT_PENDING != 0,
                        restarts,
                    };
                    if sysfile.restart_gci() != restart_gci {
                        return Err(DecodeError::new(
                            "sysfile",
                            format!(
                                "restart GCI {restart_gci}, but its restart history ends at GCI {}",
                                sysfile.restart_gci()
                            ),
                        ));
                    }
                    Ok(sysfile)
                };
                read().map_err(|e| format!("at offset {HEADER_BYTES}: {e}"))
            }
            Next::Record(r) => Err(format!(
                "at offset {HEADER_BYTES}: a record of kind {} where the sysfile's is",
                r.kind
            )),
            Next::End => Err(format!("ends after its header, at offset {HEADER_BYTES}")),
            Next::Bad(why) => Err(format!("at offset {HEADER_BYTES}: {why}")),
        }
    }
}

/// A local checkpoint's control file (`LCP/<id>/LCP.ctl`), written once its data file is
/// synced: a checkpoint without one is incomplete and never used.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LcpCtl {
    pub lcp_id: u32,
    /// The full checkpoint this one builds on (its own id when it is full): a restore loads
    /// every checkpoint from `base_id` to `lcp_id`, in order.
    pub base_id: u32,
    /// The newest epoch any row in the data file can belong to (the epoch current when the
    /// checkpoint ended, or the newest one the node logged a change of, if later: a
    /// coordinator may commit in a GCI before this node switches to it): the checkpoint
    /// restores only at a GCI whose high word is at least this one's.
    pub max_gci: u64,
    /// Per redo part, where the log stood when the checkpoint started (file seq, offset):
    /// replay starts there.
    pub starts: Vec<(u64, u64)>,
}

impl LcpCtl {
    /// A whole control file: header, then one LCP_CTL record
    /// (`lcp_id u32 | base_id u32 | max_gci u64 | parts u32 | (seq u64 | offset u64) per part`).
    pub fn file_bytes(&self, node: u32) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + 16 * self.starts.len());
        FileHeader {
            magic: LCP_CTL_MAGIC,
            node,
            part: 0,
            seq: u64::from(self.lcp_id),
        }
        .encode(&mut out);
        append_record(&mut out, self.max_gci, kind::LCP_CTL, |b| {
            let mut w = Writer::new(b);
            w.u32(self.lcp_id)
                .u32(self.base_id)
                .u64(self.max_gci)
                .u32(self.starts.len() as u32);
            for &(seq, offset) in &self.starts {
                w.u64(seq).u64(offset);
            }
        });
        out
    }

    /// Reads a whole control file of node `node`.
    /// Every error names the offset it is at.
    pub fn from_file(bytes: &[u8], node: u32) -> Result<LcpCtl, String> {
        let header =
            FileHeader::decode(bytes, LCP_CTL_MAGIC).map_err(|e| format!("at offset 0: {e}"))?;
        if header.node != node {
            return Err(format!("written by node {}, not node {node}", header.node));
        }
        let record = match read_record(bytes, HEADER_BYTES) {
            Next::Record(r) if r.kind == kind::LCP_CTL => r,
            Next::Record(r) => {
                return Err(format!(
                    "a record of kind {} at offset {HEADER_BYTES}",
                    r.kind
                ))
            }
            Next::End => return Err(format!("ends after its header, at offset {HEADER_BYTES}")),
            Next::Bad(why) => return Err(format!("at offset {HEADER_BYTES}: {why}")),
        };
        let mut r = Reader::new(record.payload, "local checkpoint control record");
        let decode = |r: &mut Reader<'_>| -> Result<LcpCtl, DecodeError> {
            let lcp_id = r.u32()?;
            let base_id = r.u32()?;
            if u64::from(lcp_id) != header.seq || header.part != 0 {
                return Err(r.error(format!(
                    "checkpoint {lcp_id} in a file whose header names part {} checkpoint {}",
                    header.part, header.seq
                )));
            }
            if base_id > lcp_id {
                return Err(r.error(format!(
                    "checkpoint {lcp_id} builds on a later one, {base_id}"
                )));
            }
            let max_gci = r.u64()?;
            if max_gci != record.gci {
                return Err(r.error(format!(
                    "max GCI {max_gci} in a record of GCI {}",
                    record.gci
                )));
            }
            let parts = r.u32()? as usize;
            if parts > 1024 {
                return Err(r.error(format!("{parts} redo parts")));
            }
            let starts = (0..parts)
                .map(|_| Ok((r.u64()?, r.u64()?)))
                .collect::<Result<_, DecodeError>>()?;
            r.finish()?;
            Ok(LcpCtl {
                lcp_id,
                base_id,
                max_gci,
                starts,
            })
        };
        decode(&mut r).map_err(|e| format!("at offset {HEADER_BYTES}: {e}"))
    }
}

/// NDB's GCI: the global checkpoint in the high word, the epoch within it in the low word.
pub fn gci_hi(gci: u64) -> u32 {
    (gci >> 32) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_and_damage_is_seen_at_its_offset() {
        let mut bytes = Vec::new();
        FileHeader {
            magic: REDO_MAGIC,
            node: 2,
            part: 1,
            seq: 7,
        }
        .encode(&mut bytes);
        let change = RowChange {
            table_id: 3,
            table_version: 1,
            fragment: 5,
            key: b"key",
            row: Some(b"row bytes"),
        };
        append_record(&mut bytes, 9 << 32, kind::PUT, |b| change.encode(b));
        append_record(&mut bytes, 9 << 32, kind::GCI_COMPLETED, |_| {});
        let header = FileHeader::decode(&bytes, REDO_MAGIC).unwrap();
        assert_eq!((header.node, header.part, header.seq), (2, 1, 7));
        let Next::Record(first) = read_record(&bytes, HEADER_BYTES) else {
            panic!("no first record");
        };
        assert_eq!(
            RowChange::decode(first.payload, first.kind).unwrap(),
            change
        );
        let Next::Record(second) = read_record(&bytes, first.next) else {
            panic!("no second record");
        };
        assert_eq!(second.kind, kind::GCI_COMPLETED);
        assert_eq!(read_record(&bytes, second.next), Next::End);
        // Every single flipped bit of a record is caught by its CRC or its length check.
        for bit in 0..(first.next - HEADER_BYTES) * 8 {
            let mut damaged = bytes.clone();
            damaged[HEADER_BYTES + bit / 8] ^= 1 << (bit % 8);
            match read_record(&damaged, HEADER_BYTES) {
                Next::Bad(_) => {}
                other => panic!("bit {bit} flipped, read {other:?}"),
            }
        }
        // A record cut anywhere is bad, not a shorter record.
        for cut in HEADER_BYTES + 1..first.next {
            assert!(matches!(
                read_record(&bytes[..cut], HEADER_BYTES),
                Next::Bad(_)
            ));
        }
    }

    /// Regression (found for the fuzz target `lcp`): a redo position from a control file is
    /// read as an offset, and one within a record head of `usize::MAX` overflowed.
    #[test]
    fn a_record_read_at_any_offset_is_bad_not_a_panic() {
        let bytes = [0u8; 40];
        for offset in [41, usize::MAX - RECORD_HEAD_BYTES + 1, usize::MAX] {
            assert!(matches!(read_record(&bytes, offset), Next::Bad(_)));
        }
    }

    #[test]
    fn a_sysfile_reads_back_and_refuses_another_nodes() {
        let sysfile = Sysfile {
            restorable_gci: 42,
            cut_pending: true,
            restarts: vec![RestartId { no: 0, gci: 0 }, RestartId { no: 2, gci: 7 }],
        };
        let bytes = sysfile.file_bytes(3);
        assert_eq!(Sysfile::from_file(&bytes, 3).unwrap(), sysfile);
        assert!(Sysfile::from_file(&bytes, 4).is_err());
        assert!(Sysfile::from_file(&bytes[..40], 3).is_err());
    }

    #[test]
    fn a_sysfile_without_flags_and_history_or_with_unknown_flags_or_another_restart_gci_is_refused()
    {
        let with_body = |body: &[u32], tail: &[u8]| {
            let mut out = Vec::new();
            FileHeader {
                magic: SYSFILE_MAGIC,
                node: 3,
                part: 0,
                seq: 0,
            }
            .encode(&mut out);
            append_record(&mut out, 0, kind::SYSFILE, |b| {
                for word in body {
                    b.extend_from_slice(&word.to_le_bytes());
                }
                b.extend_from_slice(tail);
            });
            out
        };
        assert!(Sysfile::from_file(&with_body(&[42, 0, 0], &[0]), 3).is_ok());
        assert!(Sysfile::from_file(&with_body(&[42, 0], &[]), 3).is_err());
        // A restart GCI its history does not end at.
        let why = Sysfile::from_file(&with_body(&[42, 7, 0], &[0]), 3).unwrap_err();
        assert!(why.contains("history ends at GCI 0"), "{why}");
        let why = Sysfile::from_file(&with_body(&[42, 7, 2], &[0]), 3).unwrap_err();
        assert!(why.contains("unknown flags 0x2"), "{why}");
    }
}
