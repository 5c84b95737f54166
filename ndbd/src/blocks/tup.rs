//! TUP: row images and DataMemory.
//!
//! Every byte a fragment holds — keys, committed rows and uncommitted images — counts against
//! the node's DataMemory. An operation that would grow past it fails with NDB error 827; reads
//! and deletes never need memory, so a full node keeps serving them.
//!
//! TUP also evaluates pushed-down scan filters against row images ([`filter_matches`]), and
//! checks a filter against the table before a scan starts ([`check_filter`]).

use rndb_protocol::filter::Filter;
use rndb_protocol::{NdbError, TableDef, Value};

use super::acc::Row;

/// Bookkeeping bytes charged per key (slot, hash entry) on top of the key itself.
pub const SLOT_OVERHEAD_BYTES: u64 = 64;
/// Bookkeeping bytes charged per row image on top of its values.
pub const ROW_OVERHEAD_BYTES: u64 = 16;

/// DataMemory: a fixed budget and what is in use.
#[derive(Debug)]
pub struct DataMemory {
    used_bytes: u64,
    limit_bytes: u64,
}

impl DataMemory {
    pub fn new(limit_bytes: u64) -> DataMemory {
        DataMemory {
            used_bytes: 0,
            limit_bytes,
        }
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
}

/// Bytes a row image is charged.
pub fn row_bytes(row: &[Value]) -> u64 {
    ROW_OVERHEAD_BYTES + row.iter().map(|v| v.stored_bytes() as u64).sum::<u64>()
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
    Ok(Row::from(row))
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

/// Evaluates a scan filter against a row image (the semantics are documented with
/// [`Filter`]: a comparison with NULL is false).
pub fn filter_matches(filter: &Filter, row: &[Value]) -> bool {
    filter.matches(row)
}

/// Checks a filter against a table: every column exists and every constant fits its column's
/// type (4004 and 4209 otherwise), so evaluation never meets a type mismatch.
pub fn check_filter(def: &TableDef, filter: &Filter) -> Result<(), NdbError> {
    match filter {
        Filter::Cmp { column, value, .. } => {
            let Some(cdef) = def.columns.get(usize::from(*column)) else {
                return Err(NdbError::with_detail(
                    4004,
                    format!("filter names column {column} of table {}", def.name),
                ));
            };
            if *value == Value::Null || !value.fits(cdef.column_type) {
                return Err(NdbError::with_detail(
                    4209,
                    format!(
                        "filter compares column {} ({}) with {value:?}",
                        cdef.name, cdef.column_type
                    ),
                ));
            }
            Ok(())
        }
        Filter::IsNull(column) | Filter::IsNotNull(column) => {
            if def.columns.get(usize::from(*column)).is_none() {
                return Err(NdbError::with_detail(
                    4004,
                    format!("filter names column {column} of table {}", def.name),
                ));
            }
            Ok(())
        }
        Filter::Group { children, .. } => children.iter().try_for_each(|c| check_filter(def, c)),
    }
}
