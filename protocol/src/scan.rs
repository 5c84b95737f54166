//! Scan signals: SCAN_TABREQ starts a scan inside a transaction, SCAN_NEXTREQ asks for the next
//! batch (or closes the scan), SCAN_ROWS carries rows, SCAN_TABCONF / SCAN_TABREF end one batch.
//!
//! A scan has its own request ids: SCAN_TABREQ's frame request id names the scan (its *scan
//! id*) and is answered with the first batch; every SCAN_NEXTREQ comes with a fresh request id,
//! answered with that batch. A batch answer is any number of SCAN_ROWS frames (which do not
//! complete a request) and exactly one SCAN_TABCONF or SCAN_TABREF (which does). The API asks
//! for the next batch only when it has consumed the last one, so each side holds at most one
//! batch per fragment: a scan of any size runs in bounded memory.

use std::ops::Bound;

use crate::codec::{DecodeError, Reader, Writer};
use crate::filter::Filter;
use crate::schema::{decode_values, encode_values, LockMode, TableDef, Value, COLUMNS_MAX};

/// The most rows a fragment returns in one batch (NDB's BatchSize maximum).
pub const SCAN_BATCH_ROWS_MAX: u32 = 992;
/// The most bytes a fragment returns in one batch (NDB's BatchByteSize maximum).
pub const SCAN_BATCH_BYTES_MAX: u32 = 1024 * 1024;
/// The most bytes one batch of a scan holds over all its fragments (NDB's MaxScanBatchSize
/// maximum).
pub const SCAN_BATCH_BYTES_TOTAL_MAX: u32 = 16 * 1024 * 1024;
/// The most ranges one index scan may carry.
pub const SCAN_RANGES_MAX: usize = 512;
/// The largest SCAN_ROWS payload a data node builds; it stays under the transporter's frame
/// payload limit with room for one row of the largest size.
pub const SCAN_ROWS_PAYLOAD_BYTES_MAX: usize = 32 * 1024 - 64;

/// Flag on `ScanTabReq`: the scan's transaction starts here.
pub const SCAN_FLAG_START_TRANSACTION: u8 = 1;
/// Flag on `ScanTabReq`: walk the index from high to low keys.
pub const SCAN_FLAG_DESCENDING: u8 = 2;
/// Flag on `ScanTabReq`: this node is not the transaction's coordinator; the scan is one part
/// of a scan the API sends to every data node.
pub const SCAN_FLAG_PART: u8 = 4;
/// Most data nodes a `ScanTabReq` names as alive.
pub const SCAN_ALIVE_NODES_MAX: usize = 144;

/// One end of a range: a prefix of the index columns' values, inclusive or exclusive.
#[derive(Clone, Debug, PartialEq)]
pub enum RangeEnd {
    Unbounded,
    Included(Vec<Value>),
    Excluded(Vec<Value>),
}

impl RangeEnd {
    fn encode(&self, w: &mut Writer<'_>) {
        match self {
            RangeEnd::Unbounded => {
                w.u8(0);
            }
            RangeEnd::Included(v) => {
                w.u8(1);
                encode_values(w, v);
            }
            RangeEnd::Excluded(v) => {
                w.u8(2);
                encode_values(w, v);
            }
        }
    }
    fn decode(r: &mut Reader<'_>) -> Result<RangeEnd, DecodeError> {
        Ok(match r.u8()? {
            0 => RangeEnd::Unbounded,
            1 => RangeEnd::Included(decode_values(r, COLUMNS_MAX)?),
            2 => RangeEnd::Excluded(decode_values(r, COLUMNS_MAX)?),
            t => return Err(r.error(format!("unknown range end {t}"))),
        })
    }
    /// As a `std::ops::Bound` over the prefix values.
    pub fn as_bound(&self) -> Bound<&[Value]> {
        match self {
            RangeEnd::Unbounded => Bound::Unbounded,
            RangeEnd::Included(v) => Bound::Included(v),
            RangeEnd::Excluded(v) => Bound::Excluded(v),
        }
    }
}

/// A range of an ordered index: rows whose index-column prefix lies between `low` and `high`.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyRange {
    pub low: RangeEnd,
    pub high: RangeEnd,
}

/// NDB's bound types for `setBound`, named as NDB names them: the name reads "bound value
/// *op* column", so `LE` and `LT` are lower bounds and `GE` and `GT` upper bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BoundType {
    /// bound ≤ column: an inclusive lower bound.
    LE,
    /// bound < column: an exclusive lower bound.
    LT,
    /// bound ≥ column: an inclusive upper bound.
    GE,
    /// bound > column: an exclusive upper bound.
    GT,
    /// bound = column: both ends, inclusive.
    EQ,
}

impl KeyRange {
    /// Every row of the index.
    pub fn all() -> KeyRange {
        KeyRange {
            low: RangeEnd::Unbounded,
            high: RangeEnd::Unbounded,
        }
    }

    /// Rows whose index-column prefix equals `prefix`.
    pub fn eq(prefix: Vec<Value>) -> KeyRange {
        KeyRange::all().bound(BoundType::EQ, prefix)
    }

    /// Sets one end (or both, for EQ) to the prefix `values`, in NDB's `setBound` terms.
    pub fn bound(mut self, bound: BoundType, values: Vec<Value>) -> KeyRange {
        match bound {
            BoundType::LE => self.low = RangeEnd::Included(values),
            BoundType::LT => self.low = RangeEnd::Excluded(values),
            BoundType::GE => self.high = RangeEnd::Included(values),
            BoundType::GT => self.high = RangeEnd::Excluded(values),
            BoundType::EQ => {
                self.low = RangeEnd::Included(values.clone());
                self.high = RangeEnd::Included(values);
            }
        }
        self
    }
}

/// Starts a scan (frame request id = the scan id).
#[derive(Clone, Debug, PartialEq)]
pub struct ScanTabReq {
    /// `SCAN_FLAG_*`.
    pub flags: u8,
    /// The request id of the transaction the scan belongs to.
    pub trans_request_id: u32,
    pub table_id: u32,
    pub table_version: u32,
    /// The ordered index to walk; 0 scans the whole table.
    pub index_id: u32,
    pub index_version: u32,
    pub lock_mode: LockMode,
    /// Fragments scanned at once (0 = all).
    pub parallelism: u16,
    /// Rows per fragment per batch.
    pub batch_rows: u32,
    /// Bytes per fragment per batch.
    pub batch_bytes: u32,
    /// Bytes per batch over all fragments.
    pub batch_bytes_total: u32,
    /// Index ranges (empty = the whole index); only for index scans.
    pub ranges: Vec<KeyRange>,
    pub filter: Option<Filter>,
    /// The data nodes the API scans, which it believes alive: each scans the fragments it is
    /// the live primary of, and refuses when its own view differs (rows would be missed).
    pub alive: Vec<u16>,
}

impl ScanTabReq {
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer::new(out);
        w.u8(self.flags)
            .u32(self.trans_request_id)
            .u32(self.table_id)
            .u32(self.table_version)
            .u32(self.index_id)
            .u32(self.index_version)
            .u8(self.lock_mode.to_u8())
            .u16(self.parallelism)
            .u32(self.batch_rows)
            .u32(self.batch_bytes)
            .u32(self.batch_bytes_total)
            .u16(self.ranges.len() as u16);
        for range in &self.ranges {
            range.low.encode(&mut w);
            range.high.encode(&mut w);
        }
        match &self.filter {
            None => {
                w.u8(0);
            }
            Some(f) => {
                w.u8(1);
                f.encode(&mut w);
            }
        }
        w.u16(self.alive.len() as u16);
        for node in &self.alive {
            w.u16(*node);
        }
    }

    pub fn decode(buf: &[u8]) -> Result<ScanTabReq, DecodeError> {
        let mut r = Reader::new(buf, "SCAN_TABREQ");
        let flags = r.u8()?;
        let trans_request_id = r.u32()?;
        let table_id = r.u32()?;
        let table_version = r.u32()?;
        let index_id = r.u32()?;
        let index_version = r.u32()?;
        let lock_mode = LockMode::from_u8(r.u8()?).ok_or_else(|| r.error("unknown lock mode"))?;
        let parallelism = r.u16()?;
        let batch_rows = r.u32()?;
        let batch_bytes = r.u32()?;
        let batch_bytes_total = r.u32()?;
        let range_count = usize::from(r.u16()?);
        if range_count > SCAN_RANGES_MAX {
            return Err(r.error(format!("{range_count} ranges, at most {SCAN_RANGES_MAX}")));
        }
        let mut ranges = Vec::with_capacity(range_count);
        for _ in 0..range_count {
            let low = RangeEnd::decode(&mut r)?;
            let high = RangeEnd::decode(&mut r)?;
            ranges.push(KeyRange { low, high });
        }
        let filter = match r.u8()? {
            0 => None,
            1 => Some(Filter::decode(&mut r)?),
            t => return Err(r.error(format!("unknown filter flag {t}"))),
        };
        let alive_count = usize::from(r.u16()?);
        if alive_count > SCAN_ALIVE_NODES_MAX {
            return Err(r.error(format!("{alive_count} alive nodes")));
        }
        let alive = (0..alive_count)
            .map(|_| r.u16())
            .collect::<Result<_, _>>()?;
        r.finish()?;
        Ok(ScanTabReq {
            flags,
            trans_request_id,
            table_id,
            table_version,
            index_id,
            index_version,
            lock_mode,
            parallelism,
            batch_rows,
            batch_bytes,
            batch_bytes_total,
            ranges,
            filter,
            alive,
        })
    }
}

/// Asks for the next batch of a scan, or closes it (frame request id = a fresh id that the
/// answer echoes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanNextReq {
    pub scan_id: u32,
    /// Close the scan now and free its resources on the data node.
    pub close: bool,
    /// Fragments to fetch from; empty means every unfinished fragment the scan's parallelism
    /// allows.
    pub fragments: Vec<u16>,
}

impl ScanNextReq {
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer::new(out);
        w.u32(self.scan_id)
            .u8(u8::from(self.close))
            .u16(self.fragments.len() as u16);
        for f in &self.fragments {
            w.u16(*f);
        }
    }
    pub fn decode(buf: &[u8]) -> Result<ScanNextReq, DecodeError> {
        let mut r = Reader::new(buf, "SCAN_NEXTREQ");
        let scan_id = r.u32()?;
        let close = match r.u8()? {
            0 => false,
            1 => true,
            t => return Err(r.error(format!("unknown close flag {t}"))),
        };
        let count = usize::from(r.u16()?);
        if count > r.remaining() / 2 {
            return Err(r.error(format!("{count} fragments announced")));
        }
        let fragments = (0..count).map(|_| r.u16()).collect::<Result<_, _>>()?;
        r.finish()?;
        Ok(ScanNextReq {
            scan_id,
            close,
            fragments,
        })
    }
}

/// What one fragment did in a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragmentBatch {
    pub fragment: u16,
    /// Rows this fragment sent in the batch.
    pub rows: u32,
    /// The fragment has no more rows.
    pub done: bool,
}

/// Ends a batch: what each fragment sent, and whether the scan is over (its record is then
/// already freed on the data node).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanTabConf {
    pub fragment_count: u16,
    pub finished: bool,
    pub fragments: Vec<FragmentBatch>,
}

impl ScanTabConf {
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer::new(out);
        w.u16(self.fragment_count)
            .u8(u8::from(self.finished))
            .u16(self.fragments.len() as u16);
        for f in &self.fragments {
            w.u16(f.fragment).u32(f.rows).u8(u8::from(f.done));
        }
    }
    pub fn decode(buf: &[u8]) -> Result<ScanTabConf, DecodeError> {
        let mut r = Reader::new(buf, "SCAN_TABCONF");
        let fragment_count = r.u16()?;
        let finished = r.u8()? != 0;
        let count = usize::from(r.u16()?);
        if count > usize::from(fragment_count) {
            return Err(r.error(format!("{count} fragments of {fragment_count}")));
        }
        let mut fragments = Vec::with_capacity(count);
        for _ in 0..count {
            let fragment = r.u16()?;
            let rows = r.u32()?;
            let done = r.u8()? != 0;
            if fragment >= fragment_count {
                return Err(r.error(format!("fragment {fragment} of {fragment_count}")));
            }
            fragments.push(FragmentBatch {
                fragment,
                rows,
                done,
            });
        }
        r.finish()?;
        Ok(ScanTabConf {
            fragment_count,
            finished,
            fragments,
        })
    }
}

/// Appends one row to a SCAN_ROWS payload: fragment u16 · values. A payload is a sequence of
/// such rows, read to its end.
pub fn encode_scan_row(out: &mut Vec<u8>, fragment: u16, values: &[Value]) {
    let mut w = Writer::new(out);
    w.u16(fragment);
    encode_values(&mut w, values);
}

/// As [`encode_scan_row`], for values already encoded as [`encode_values`] writes them.
pub fn encode_scan_row_encoded(out: &mut Vec<u8>, fragment: u16, encoded_values: &[u8]) {
    out.extend_from_slice(&fragment.to_le_bytes());
    out.extend_from_slice(encoded_values);
}

/// Decodes a SCAN_ROWS payload of rows of table `def`, calling `row` for each (fragment,
/// values). A row that does not fit the table (see [`TableDef::decode_row_into`]) is a decode
/// error.
pub fn decode_scan_rows(
    buf: &[u8],
    def: &TableDef,
    row: &mut dyn FnMut(u16, Vec<Value>) -> Result<(), DecodeError>,
) -> Result<(), DecodeError> {
    let mut r = Reader::new(buf, "SCAN_ROWS");
    while r.remaining() > 0 {
        let fragment = r.u16()?;
        let mut values = Vec::new();
        def.decode_row_into(&mut r, &mut values)?;
        row(fragment, values)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::CmpOp;
    use crate::schema::{ColumnDef, ColumnType};

    #[test]
    fn scan_req_round_trips() {
        let req = ScanTabReq {
            flags: SCAN_FLAG_START_TRANSACTION | SCAN_FLAG_DESCENDING,
            trans_request_id: 9,
            table_id: 3,
            table_version: 1,
            index_id: 4,
            index_version: 1,
            lock_mode: LockMode::Read,
            parallelism: 2,
            batch_rows: 16,
            batch_bytes: 4096,
            batch_bytes_total: 65536,
            ranges: vec![
                KeyRange {
                    low: RangeEnd::Included(vec![Value::UInt32(1)]),
                    high: RangeEnd::Excluded(vec![Value::UInt32(5), Value::Null]),
                },
                KeyRange {
                    low: RangeEnd::Unbounded,
                    high: RangeEnd::Unbounded,
                },
            ],
            filter: Some(Filter::and(vec![
                Filter::cmp(1, CmpOp::Ge, Value::Int64(-3)),
                Filter::IsNull(2),
            ])),
            alive: vec![1, 2],
        };
        let mut buf = Vec::new();
        req.encode(&mut buf);
        assert_eq!(ScanTabReq::decode(&buf), Ok(req));
        assert!(ScanTabReq::decode(&buf[..buf.len() - 1]).is_err());
    }

    #[test]
    fn next_conf_and_rows_round_trip() {
        let next = ScanNextReq {
            scan_id: 7,
            close: false,
            fragments: vec![0, 3],
        };
        let mut buf = Vec::new();
        next.encode(&mut buf);
        assert_eq!(ScanNextReq::decode(&buf), Ok(next));
        let conf = ScanTabConf {
            fragment_count: 4,
            finished: true,
            fragments: vec![FragmentBatch {
                fragment: 3,
                rows: 10,
                done: true,
            }],
        };
        buf.clear();
        conf.encode(&mut buf);
        assert_eq!(ScanTabConf::decode(&buf), Ok(conf));
        buf.clear();
        encode_scan_row(&mut buf, 1, &[Value::UInt32(1)]);
        encode_scan_row(&mut buf, 2, &[Value::Null]);
        let mut rows = Vec::new();
        decode_scan_rows(&buf, &one_nullable_column(), &mut |f, v| {
            rows.push((f, v));
            Ok(())
        })
        .expect("decode rows");
        assert_eq!(
            rows,
            vec![(1, vec![Value::UInt32(1)]), (2, vec![Value::Null])]
        );
    }

    fn one_nullable_column() -> TableDef {
        let mut column = ColumnDef::new("v", ColumnType::UInt32);
        column.nullable = true;
        TableDef::new("t", vec![column])
    }

    proptest::proptest! {
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let _ = ScanTabReq::decode(&bytes);
            let _ = ScanNextReq::decode(&bytes);
            let _ = ScanTabConf::decode(&bytes);
            let _ = decode_scan_rows(&bytes, &one_nullable_column(), &mut |_, _| Ok(()));
        }
    }
}
