//! TUP: row images and DataMemory.
//!
//! Every byte a fragment holds — keys, committed rows and uncommitted images — counts against
//! the node's DataMemory. An operation that would grow past it fails with NDB error 827; reads
//! and deletes never need memory, so a full node keeps serving them. Key operations stop short
//! of it by MinFreePct: the rest is kept for restores and node restart copies, which may
//! briefly hold more than the live replicas do.
//!
//! Rows are stored packed ([`Row`]): the values in their wire encoding, inside the row's slot
//! when they are short and in one allocation when not, so a read answers with one copy and a
//! row takes a few cache lines, not one per value.
//!
//! TUP also evaluates pushed-down scan filters against row images ([`RowFilter`]), and
//! checks a filter against the table before a scan starts ([`check_filter`]).

use std::rc::Rc;

use rndb_protocol::filter::Filter;
use rndb_protocol::schema::encode_values;
use rndb_protocol::{NdbError, Reader, TableDef, Value, Writer};

/// Bookkeeping bytes charged per key (slot, hash entry) on top of the key itself.
pub const SLOT_OVERHEAD_BYTES: u64 = 64;
/// Bookkeeping bytes charged per row image on top of its values.
pub const ROW_OVERHEAD_BYTES: u64 = 16;

/// DataMemory: a fixed budget and what is in use.
#[derive(Debug)]
pub struct DataMemory {
    used_bytes: u64,
    limit_bytes: u64,
    /// MinFreePct, percent.
    min_free_pct: u8,
}

impl DataMemory {
    pub fn new(limit_bytes: u64) -> DataMemory {
        DataMemory {
            used_bytes: 0,
            limit_bytes,
            min_free_pct: 0,
        }
    }

    /// Key operations may use all but `pct` percent of the budget (MinFreePct).
    pub fn set_min_free_pct(&mut self, pct: u8) {
        self.min_free_pct = pct.min(100);
    }

    /// The bytes key operations may hold: the budget less MinFreePct.
    fn operations_limit(&self) -> u64 {
        let kept = (u128::from(self.limit_bytes) * u128::from(self.min_free_pct) / 100) as u64;
        self.limit_bytes - kept
    }

    /// As [`DataMemory::reserve`], for a key operation: fails with 827 past the budget less
    /// MinFreePct.
    pub fn reserve_for_operation(&mut self, bytes: u64) -> Result<(), NdbError> {
        let limit = self.operations_limit();
        if self.used_bytes + bytes > limit {
            return Err(NdbError::with_detail(
                827,
                format!(
                    "DataMemory={} bytes less MinFreePct={} % kept for restarts: {limit} for \
                     operations, {} in use, {bytes} more needed",
                    self.limit_bytes, self.min_free_pct, self.used_bytes
                ),
            ));
        }
        self.used_bytes += bytes;
        Ok(())
    }

    /// Takes `bytes` from the budget, or fails with 827 and takes nothing.
    pub fn reserve(&mut self, bytes: u64) -> Result<(), NdbError> {
        if self.used_bytes + bytes > self.limit_bytes {
            return Err(NdbError::with_detail(
                827,
                format!(
                    "DataMemory={} bytes, {} in use, {bytes} more needed",
                    self.limit_bytes, self.used_bytes
                ),
            ));
        }
        self.used_bytes += bytes;
        Ok(())
    }

    /// Returns `bytes` to the budget.
    pub fn free(&mut self, bytes: u64) {
        debug_assert!(
            bytes <= self.used_bytes,
            "freeing {bytes} of {} bytes",
            self.used_bytes
        );
        self.used_bytes = self.used_bytes.saturating_sub(bytes);
    }

    pub fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    /// DataMemory: the bytes that may be used.
    pub fn limit_bytes(&self) -> u64 {
        self.limit_bytes
    }
}

/// A stored row image, packed: every column's value in column order, exactly as
/// [`encode_values`] writes them (a u16 count, then each value's tag and data). A read answers
/// these bytes as they are; columns are decoded when a write, a filter or an index needs them.
/// Only [`Row::pack`] makes one, so the bytes always decode.
///
/// Up to [`ROW_INLINE_BYTES`] the bytes are held in the `Row` itself, and so in the slot that
/// holds the row: a read by key then finds the row on the slot's own cache lines instead of
/// following a pointer to another miss. Longer rows are one shared allocation.
#[derive(Clone)]
pub struct Row(Packed);

/// Encoded rows up to this many bytes are held inline: a `Row` is 48 bytes either way (a
/// 5-column row of integers, testReadPerf's, encodes in 31).
pub const ROW_INLINE_BYTES: usize = 46;

#[derive(Clone)]
enum Packed {
    Inline {
        len: u8,
        bytes: [u8; ROW_INLINE_BYTES],
    },
    Shared(Rc<[u8]>),
}

const _: () = assert!(std::mem::size_of::<Row>() == 48);

impl PartialEq for Row {
    fn eq(&self, other: &Row) -> bool {
        self.encoded() == other.encoded()
    }
}

impl Eq for Row {}

impl Row {
    /// Packs a row's values (all columns, in column order).
    pub fn pack(values: &[Value]) -> Row {
        let mut bytes =
            Vec::with_capacity(2 + values.iter().map(Value::stored_bytes).sum::<usize>());
        encode_values(&mut Writer::new(&mut bytes), values);
        if bytes.len() <= ROW_INLINE_BYTES {
            let mut inline = [0; ROW_INLINE_BYTES];
            inline[..bytes.len()].copy_from_slice(&bytes);
            return Row(Packed::Inline {
                len: bytes.len() as u8,
                bytes: inline,
            });
        }
        Row(Packed::Shared(bytes.into()))
    }

    /// The values in their wire encoding: a u16 count, then each value.
    #[inline]
    pub fn encoded(&self) -> &[u8] {
        match &self.0 {
            Packed::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Packed::Shared(bytes) => bytes,
        }
    }

    /// Every column's value.
    pub fn unpack(&self) -> Vec<Value> {
        let mut values = Vec::new();
        self.unpack_prefix_into(usize::MAX, &mut values);
        values
    }

    /// The values of the first `columns` columns (fewer when the row has fewer), into `values`
    /// (cleared first).
    pub fn unpack_prefix_into(&self, columns: usize, values: &mut Vec<Value>) {
        values.clear();
        let mut r = Reader::new(self.encoded(), "stored row");
        let decoded = r.u16().and_then(|count| {
            (0..usize::from(count).min(columns))
                .try_for_each(|_| Value::decode(&mut r).map(|v| values.push(v)))
        });
        debug_assert!(
            decoded.is_ok(),
            "a packed row that does not decode: {decoded:?}"
        );
    }

    /// True when the bytes are held inline.
    #[cfg(test)]
    fn is_inline(&self) -> bool {
        matches!(self.0, Packed::Inline { .. })
    }

    /// The value of column `column` (NULL past the last column).
    pub fn value(&self, column: usize) -> Value {
        let mut r = Reader::new(self.encoded(), "stored row");
        let Ok(count) = r.u16() else {
            return Value::Null;
        };
        if column >= usize::from(count) {
            return Value::Null;
        }
        for _ in 0..column {
            if Value::skip_trusted(&mut r).is_err() {
                return Value::Null;
            }
        }
        Value::decode(&mut r).unwrap_or(Value::Null)
    }
}

impl std::fmt::Debug for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Row").field(&self.unpack()).finish()
    }
}

/// Bytes a row image is charged: its values' encoding and a fixed overhead.
pub fn row_bytes(row: &Row) -> u64 {
    // The u16 count is bookkeeping, part of the overhead.
    ROW_OVERHEAD_BYTES + (row.encoded().len() as u64).saturating_sub(2)
}

/// Bytes a key slot is charged, without its images.
pub fn slot_bytes(key: &[u8]) -> u64 {
    SLOT_OVERHEAD_BYTES + key.len() as u64
}

/// Builds a new row from key values and (column, value) pairs. Columns not given are NULL,
/// which a NOT NULL column refuses (839).
pub fn build_row(
    def: &TableDef,
    key_columns: &[usize],
    key: &[Value],
    attrs: &[(u16, Value)],
) -> Result<Row, NdbError> {
    let mut row = vec![Value::Null; def.columns.len()];
    for (&column, value) in key_columns.iter().zip(key) {
        row[column] = value.clone();
    }
    apply_attrs(def, &mut row, attrs)?;
    for (column, value) in def.columns.iter().zip(row.iter()) {
        if *value == Value::Null && !column.nullable {
            return Err(NdbError::with_detail(
                839,
                format!("column {} was not given a value", column.name),
            ));
        }
    }
    Ok(Row::pack(&row))
}

/// Sets (column, value) pairs on a row image, checking each against the definition.
pub fn apply_attrs(
    def: &TableDef,
    row: &mut [Value],
    attrs: &[(u16, Value)],
) -> Result<(), NdbError> {
    for (column, value) in attrs {
        let column = usize::from(*column);
        let Some(cdef) = def.columns.get(column) else {
            return Err(NdbError::with_detail(
                4004,
                format!("table {} has no column {column}", def.name),
            ));
        };
        if cdef.primary_key {
            return Err(NdbError::with_detail(
                4004,
                format!("column {} is part of the primary key", cdef.name),
            ));
        }
        if *value == Value::Null && !cdef.nullable {
            return Err(NdbError::with_detail(840, format!("column {}", cdef.name)));
        }
        if !value.fits(cdef.column_type) {
            return Err(NdbError::with_detail(
                4209,
                format!("column {} is {}", cdef.name, cdef.column_type),
            ));
        }
        row[column] = value.clone();
    }
    Ok(())
}

pub use rndb_protocol::schema::encode_key;

/// A scan filter ready to evaluate against packed rows (the semantics are documented with
/// [`Filter`]: a comparison with NULL is false). Only the columns up to the last one the filter
/// reads are unpacked, into a buffer reused from row to row.
#[derive(Debug)]
pub struct RowFilter<'f> {
    filter: &'f Filter,
    /// One past the highest column the filter reads.
    columns: usize,
    values: Vec<Value>,
}

impl<'f> RowFilter<'f> {
    pub fn new(filter: &'f Filter) -> Self {
        let mut read = Vec::new();
        filter.columns(&mut read);
        RowFilter {
            filter,
            columns: read.iter().max().map_or(0, |&c| usize::from(c) + 1),
            values: Vec::new(),
        }
    }

    pub fn matches(&mut self, row: &Row) -> bool {
        row.unpack_prefix_into(self.columns, &mut self.values);
        self.filter.matches(&self.values)
    }
}

pub use rndb_protocol::filter::check_filter;

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use rndb_protocol::filter::{CmpOp, Filter};

    use super::*;

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<i32>().prop_map(Value::Int32),
            any::<u32>().prop_map(Value::UInt32),
            any::<i64>().prop_map(Value::Int64),
            any::<u64>().prop_map(Value::UInt64),
            (-1e9f64..1e9).prop_map(Value::Float64),
            "[a-z]{0,12}".prop_map(Value::Varchar),
            proptest::collection::vec(any::<u8>(), 0..12).prop_map(Value::Varbinary),
        ]
    }

    /// Rows up to `ROW_INLINE_BYTES` are held inline and longer ones shared; either way they
    /// give back their values, and equal values make equal rows across the two.
    #[test]
    fn short_rows_are_inline_and_long_rows_shared() {
        let (mut inline, mut shared) = (0, 0);
        for n in 0..64 {
            let values = vec![Value::UInt32(n as u32), Value::Varbinary(vec![7; n])];
            let row = Row::pack(&values);
            assert_eq!(
                row.is_inline(),
                row.encoded().len() <= ROW_INLINE_BYTES,
                "{n} bytes"
            );
            if row.is_inline() {
                inline += 1;
            } else {
                shared += 1;
            }
            assert_eq!(row.unpack(), values);
            assert_eq!(row.clone(), row);
            let shared_copy = Row(Packed::Shared(row.encoded().into()));
            assert_eq!(shared_copy, row);
        }
        assert!(inline > 0 && shared > 0, "{inline} inline, {shared} shared");
    }

    proptest! {
        /// A packed row gives back every value, whole, by column, and as a prefix, and is
        /// charged what its values' encodings take.
        #[test]
        fn packed_rows_give_back_their_values(values in proptest::collection::vec(value(), 0..10)) {
            let row = Row::pack(&values);
            prop_assert_eq!(row.unpack(), values.clone());
            for (c, v) in values.iter().enumerate() {
                prop_assert_eq!(&row.value(c), v);
            }
            prop_assert_eq!(row.value(values.len()), Value::Null);
            let mut prefix = vec![Value::Null; 3];
            row.unpack_prefix_into(2, &mut prefix);
            prop_assert_eq!(&prefix[..], &values[..values.len().min(2)]);
            let stored: usize = values.iter().map(Value::stored_bytes).sum();
            prop_assert_eq!(row_bytes(&row), ROW_OVERHEAD_BYTES + stored as u64);
        }
    }

    /// A filter sees the columns it reads, also when they come after others.
    #[test]
    fn row_filter_reads_the_columns_it_names() {
        let row = Row::pack(&[
            Value::UInt32(7),
            Value::Varchar("x".into()),
            Value::Null,
            Value::Int64(-3),
        ]);
        let f = Filter::and(vec![
            Filter::cmp(3, CmpOp::Lt, Value::Int64(0)),
            Filter::IsNull(2),
        ]);
        assert!(RowFilter::new(&f).matches(&row));
        let f = Filter::cmp(0, CmpOp::Gt, Value::UInt32(7));
        assert!(!RowFilter::new(&f).matches(&row));
    }
}
