//! TUX: the ordered indexes of a fragment.
//!
//! Each ordered index of a fragment is a `BTreeMap` from an *entry key* to the row's slot id.
//! The entry key is the order-preserving encoding of the indexed columns followed by the row's
//! canonical primary-key encoding, so byte order is index order and entries of equal index
//! values stay distinct. An index holds an entry for the committed image of a row and one for
//! its uncommitted image when that differs: a scan finds both and keeps the one that matches
//! the image it may see.
//!
//! The order-preserving encoding of one value (NULL sorts first, as in NDB):
//! - NULL: `0x00`; any other value: `0x01`, then
//! - Int32/Int64: big-endian with the sign bit flipped; UInt32/UInt64: big-endian;
//! - Float64: big-endian bits, all bits flipped when negative, else the sign bit flipped
//!   (the order of `f64::total_cmp`);
//! - Varchar/Varbinary: the bytes with each `0x00` written `0x00 0xFF`, ended by `0x00 0x00`.
//!
//! Every encoding is prefix-free, so a tuple's encoding compares like the tuple and a bound on
//! a prefix of the columns is a byte range (see [`range_bounds`]).

use std::collections::BTreeMap;
use std::ops::Bound;

use rndb_protocol::scan::{KeyRange, RangeEnd};
use rndb_protocol::{NdbError, Value};

use super::acc::SlotId;
use super::tup::{DataMemory, Row};

/// A range of entry keys: where a key range starts and ends in an ordered index.
pub type EntryRange = (Bound<Box<[u8]>>, Bound<Box<[u8]>>);

/// Bookkeeping bytes charged per index entry on top of its key.
pub const ENTRY_OVERHEAD_BYTES: u64 = 32;

/// One ordered index of one fragment.
#[derive(Debug)]
pub struct OrderedIndex {
    pub index_id: u32,
    /// Indexed columns' positions in the table, in index order.
    pub columns: Vec<usize>,
    pub entries: BTreeMap<Box<[u8]>, SlotId>,
}

impl OrderedIndex {
    pub fn new(index_id: u32, columns: Vec<usize>) -> Self {
        OrderedIndex {
            index_id,
            columns,
            entries: BTreeMap::new(),
        }
    }

    /// The entry key of `row` (stored under primary key `pk`).
    pub fn entry_key(&self, row: &Row, pk: &[u8]) -> Box<[u8]> {
        let mut out = Vec::with_capacity(32 + pk.len());
        self.encode_entry(row, pk, &mut out);
        out.into_boxed_slice()
    }

    /// Writes the entry key of `row` into `out` (cleared first).
    pub fn encode_entry(&self, row: &Row, pk: &[u8], out: &mut Vec<u8>) {
        out.clear();
        for &c in &self.columns {
            encode_ordered(&row.value(c), out);
        }
        out.extend_from_slice(pk);
    }

    /// Adds entries for the keys not present yet, charging DataMemory for all of them first
    /// (902 and nothing added when they do not fit).
    pub fn add_all(
        &mut self,
        keys: Vec<Box<[u8]>>,
        slot: SlotId,
        memory: &mut DataMemory,
    ) -> Result<(), NdbError> {
        let new: Vec<Box<[u8]>> = keys
            .into_iter()
            .filter(|k| !self.entries.contains_key(k))
            .collect();
        let bytes: u64 = new.iter().map(|k| entry_bytes(k)).sum();
        memory
            .reserve(bytes)
            .map_err(|e| NdbError::with_detail(902, e.message))?;
        for k in new {
            self.entries.insert(k, slot);
        }
        Ok(())
    }

    /// Adds an entry whose memory the caller has charged already (it must not be present).
    pub fn insert_prepaid(&mut self, key: Box<[u8]>, slot: SlotId) {
        let old = self.entries.insert(key, slot);
        debug_assert!(old.is_none(), "prepaid entry was present");
    }

    /// Removes an entry (if present) and frees its memory.
    pub fn remove(&mut self, key: &[u8], memory: &mut DataMemory) {
        if self.entries.remove(key).is_some() {
            memory.free(entry_bytes(key));
        }
    }

    /// Removes every entry, freeing its memory.
    pub fn clear(&mut self, memory: &mut DataMemory) {
        for key in std::mem::take(&mut self.entries).into_keys() {
            memory.free(entry_bytes(&key));
        }
    }
}

/// Bytes one entry is charged.
pub fn entry_bytes(key: &[u8]) -> u64 {
    ENTRY_OVERHEAD_BYTES + key.len() as u64
}

/// Appends the order-preserving encoding of one value.
pub fn encode_ordered(value: &Value, out: &mut Vec<u8>) {
    let flip32 = |v: i32| (v as u32 ^ 0x8000_0000).to_be_bytes();
    let flip64 = |v: i64| (v as u64 ^ 0x8000_0000_0000_0000).to_be_bytes();
    match value {
        Value::Null => out.push(0),
        Value::Int32(v) => {
            out.push(1);
            out.extend_from_slice(&flip32(*v));
        }
        Value::UInt32(v) => {
            out.push(1);
            out.extend_from_slice(&v.to_be_bytes());
        }
        Value::Int64(v) => {
            out.push(1);
            out.extend_from_slice(&flip64(*v));
        }
        Value::UInt64(v) => {
            out.push(1);
            out.extend_from_slice(&v.to_be_bytes());
        }
        Value::Float64(v) => {
            let bits = v.to_bits();
            let ordered = if bits >> 63 == 1 {
                !bits
            } else {
                bits ^ (1 << 63)
            };
            out.push(1);
            out.extend_from_slice(&ordered.to_be_bytes());
        }
        Value::Varchar(s) => encode_bytes(s.as_bytes(), out),
        Value::Varbinary(b) => encode_bytes(b, out),
    }
}

fn encode_bytes(bytes: &[u8], out: &mut Vec<u8>) {
    out.push(1);
    for &b in bytes {
        out.push(b);
        if b == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0, 0]);
}

/// Encodes a prefix of index-column values.
fn encode_prefix(values: &[Value]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 * values.len());
    for v in values {
        encode_ordered(v, &mut out);
    }
    out
}

/// The entry-key range of a key range. Entries whose prefix equals `P` all lie in
/// `[enc(P), enc(P) ++ 0xFF)`: what follows a prefix starts with a value tag (0 or 1) or a
/// primary-key value tag (1..=7), never 0xFF.
pub fn range_bounds(range: &KeyRange) -> EntryRange {
    let above = |v: &[Value]| {
        let mut k = encode_prefix(v);
        k.push(0xFF);
        k.into_boxed_slice()
    };
    let low = match &range.low {
        RangeEnd::Unbounded => Bound::Unbounded,
        RangeEnd::Included(v) => Bound::Included(encode_prefix(v).into_boxed_slice()),
        RangeEnd::Excluded(v) => Bound::Included(above(v)),
    };
    let high = match &range.high {
        RangeEnd::Unbounded => Bound::Unbounded,
        RangeEnd::Included(v) => Bound::Excluded(above(v)),
        RangeEnd::Excluded(v) => Bound::Excluded(encode_prefix(v).into_boxed_slice()),
    };
    (low, high)
}

/// True when the byte range holds no key (low above high), which `BTreeMap::range` would
/// refuse with a panic.
pub fn range_is_empty(low: &Bound<&[u8]>, high: &Bound<&[u8]>) -> bool {
    use Bound::*;
    match (low, high) {
        (Included(l), Included(h)) => l > h,
        (Included(l), Excluded(h)) | (Excluded(l), Included(h)) | (Excluded(l), Excluded(h)) => {
            l >= h
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rndb_protocol::filter::value_cmp;
    use std::cmp::Ordering;
    use std::ops::RangeBounds;

    fn enc(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        encode_ordered(v, &mut out);
        out
    }

    fn check_order(a: Value, b: Value) {
        let expected = value_cmp(&a, &b).unwrap_or(Ordering::Equal);
        assert_eq!(enc(&a).cmp(&enc(&b)), expected, "{a:?} vs {b:?}");
    }

    #[test]
    fn edge_values_order() {
        check_order(Value::Int32(-1), Value::Int32(0));
        check_order(Value::Int32(i32::MIN), Value::Int32(i32::MAX));
        check_order(Value::Float64(-0.5), Value::Float64(0.25));
        check_order(Value::Float64(-2.0), Value::Float64(-1.0));
        check_order(Value::Varchar("a".into()), Value::Varchar("a\0".into()));
        check_order(Value::Varbinary(vec![0]), Value::Varbinary(vec![0, 0]));
        check_order(Value::Varbinary(vec![]), Value::Varbinary(vec![0]));
        check_order(Value::Varbinary(vec![1]), Value::Varbinary(vec![0, 255]));
        assert!(enc(&Value::Null) < enc(&Value::Int32(i32::MIN)));
    }

    #[test]
    fn prefix_bounds_cover_exactly_the_prefix() {
        let pk = [2u8, 7, 0, 0, 0];
        let entry = |a: u32, b: u32| {
            let mut k = encode_prefix(&[Value::UInt32(a), Value::UInt32(b)]);
            k.extend_from_slice(&pk);
            k.into_boxed_slice()
        };
        let range = KeyRange {
            low: RangeEnd::Excluded(vec![Value::UInt32(1)]),
            high: RangeEnd::Included(vec![Value::UInt32(2)]),
        };
        let (low, high) = range_bounds(&range);
        let inside = |k: Box<[u8]>| (low.clone(), high.clone()).contains(&k);
        assert!(!inside(entry(1, u32::MAX)));
        assert!(inside(entry(2, 0)));
        assert!(inside(entry(2, u32::MAX)));
        assert!(!inside(entry(3, 0)));
    }

    fn value_pair() -> impl Strategy<Value = (Value, Value)> {
        prop_oneof![
            (any::<i32>(), any::<i32>()).prop_map(|(a, b)| (Value::Int32(a), Value::Int32(b))),
            (any::<u32>(), any::<u32>()).prop_map(|(a, b)| (Value::UInt32(a), Value::UInt32(b))),
            (any::<i64>(), any::<i64>()).prop_map(|(a, b)| (Value::Int64(a), Value::Int64(b))),
            (any::<u64>(), any::<u64>()).prop_map(|(a, b)| (Value::UInt64(a), Value::UInt64(b))),
            (-1e9f64..1e9, -1e9f64..1e9).prop_map(|(a, b)| (Value::Float64(a), Value::Float64(b))),
            (".{0,6}", ".{0,6}").prop_map(|(a, b)| (Value::Varchar(a), Value::Varchar(b))),
            (
                proptest::collection::vec(0u8..3, 0..6),
                proptest::collection::vec(0u8..3, 0..6)
            )
                .prop_map(|(a, b)| (Value::Varbinary(a), Value::Varbinary(b))),
        ]
    }

    proptest! {
        #[test]
        fn byte_order_is_value_order((a, b) in value_pair()) {
            check_order(a, b);
        }

        #[test]
        fn tuple_order_is_lexicographic(
            (a1, b1) in value_pair(), (a2, b2) in value_pair(), swap in any::<bool>()
        ) {
            // Two tuples of the same column types: (a1, a2) vs (b1, b2).
            let (x, y) = if swap { ((b1, b2), (a1, a2)) } else { ((a1, a2), (b1, b2)) };
            let expected = value_cmp(&x.0, &y.0)
                .unwrap_or(Ordering::Equal)
                .then(value_cmp(&x.1, &y.1).unwrap_or(Ordering::Equal));
            let ex = encode_prefix(&[x.0.clone(), x.1.clone()]);
            let ey = encode_prefix(&[y.0.clone(), y.1.clone()]);
            prop_assert_eq!(ex.cmp(&ey), expected);
        }
    }
}
