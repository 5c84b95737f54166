//! The tables Redis keys live in (see the crate docs for the layout), created at start-up if
//! missing.

use rndb_api::{
    BlobSize, ColumnDef, ColumnType, Error, Index, IndexDef, Table, TableDef, TokioCluster, Value,
};
use rndb_protocol::blob::{INLINE_BYTES, LENGTH_BYTES};
use rndb_protocol::schema::ROW_BYTES_MAX;
use rndb_protocol::NdbError;

/// The longest key: a key column's size.
pub const KEY_BYTES_MAX: usize = 1024;
/// The most bytes one Varbinary column holds: longer values continue in a second column.
pub const COLUMN_BYTES_MAX: usize = 8000;
/// The longest hash field.
pub const FIELD_BYTES_MAX: usize = 1024;
/// Bytes a row takes for a LONGBLOB's head: the value's tag and length, its length, 256 bytes.
const REST_HEAD_BYTES: usize = 3 + LENGTH_BYTES + INLINE_BYTES;
/// The size of `redis_strings.value_more`: what a row has room for past its key, `value`, its
/// expiry and `value_rest`'s head (a row takes 2 bytes, a Varbinary its bytes and 3, an Int64
/// 9: rndb's row encoding).
const STRING_MORE_BYTES: usize =
    ROW_BYTES_MAX - 2 - (3 + KEY_BYTES_MAX) - (3 + COLUMN_BYTES_MAX) - 3 - 9 - REST_HEAD_BYTES;
/// The size of `redis_hashes.value_more`: what a row has room for past its key, field,
/// `value` and `value_rest`'s head.
const HASH_MORE_BYTES: usize = ROW_BYTES_MAX
    - 2
    - (3 + KEY_BYTES_MAX)
    - (3 + FIELD_BYTES_MAX)
    - (3 + COLUMN_BYTES_MAX)
    - 3
    - REST_HEAD_BYTES;
/// The longest string value kept in a row's own columns (`value`, `value_more`): a GET of it
/// is one round trip; a longer one continues in `value_rest`, a LONGBLOB.
pub const VALUE_INLINE_BYTES_MAX: usize = COLUMN_BYTES_MAX + STRING_MORE_BYTES;
/// The longest hash value kept in a row's own columns.
pub const HASH_VALUE_INLINE_BYTES_MAX: usize = COLUMN_BYTES_MAX + HASH_MORE_BYTES;
/// The longest string or hash value: a request's longest bulk string.
pub const VALUE_BYTES_MAX: usize = crate::resp::BULK_BYTES_MAX;

const _: () = assert!(
    KEY_BYTES_MAX <= COLUMN_BYTES_MAX
        && STRING_MORE_BYTES <= COLUMN_BYTES_MAX
        && HASH_MORE_BYTES <= COLUMN_BYTES_MAX
        && VALUE_INLINE_BYTES_MAX < VALUE_BYTES_MAX
);

pub const STRINGS: &str = "redis_strings";
pub const HASHES: &str = "redis_hashes";
pub const HASHES_BY_KEY: &str = "redis_hashes_key";

/// Columns of `redis_strings`.
pub const STRING_VALUE: usize = 1;
pub const STRING_EXPIRES_AT: usize = 3;
/// Columns of `redis_hashes`.
pub const HASH_FIELD: usize = 1;
pub const HASH_VALUE: usize = 2;
/// `value_rest`, in both tables.
pub const REST: usize = 4;

/// One of the gateway's tables, whose values go in `value` and `value_more`, and past them in
/// `value_rest` (a LONGBLOB) when the table has it.
#[derive(Debug)]
pub struct Store {
    /// The table, whose `value_rest` reads and writes whole values (a BLOB).
    pub cooked: Table,
    /// The table as the data node holds it (`Table::raw`): plain operations on the row alone,
    /// for values without a rest.
    pub raw: Table,
    /// The table has `value_rest`. One made by a gateway before it did has not: its values are
    /// at most `inline_bytes`.
    pub has_rest: bool,
    /// The bytes a row holds in `value` and `value_more`.
    pub inline_bytes: usize,
    /// The column of `value` (`value_more` follows it).
    pub value: usize,
}

impl Store {
    /// The longest value the table takes.
    pub fn value_bytes_max(&self) -> usize {
        if self.has_rest {
            VALUE_BYTES_MAX
        } else {
            self.inline_bytes
        }
    }

    /// A row: `before` (the key columns), `value` over `value`, `value_more` and (in a table
    /// with it) `value_rest` (NULL when it has no rest), with `between` (the expiry of a
    /// string) before the rest.
    pub fn row(&self, before: Vec<Value>, value: &[u8], between: Option<Value>) -> Vec<Value> {
        let first = value.len().min(COLUMN_BYTES_MAX);
        let inline = value.len().min(self.inline_bytes);
        let mut row = before;
        row.push(Value::Varbinary(value[..first].to_vec()));
        row.push(Value::Varbinary(value[first..inline].to_vec()));
        row.extend(between);
        if self.has_rest {
            row.push(match &value[inline..] {
                [] => Value::Null,
                rest => Value::Varbinary(rest.to_vec()),
            });
        }
        row
    }

    /// The value a row read through `cooked` holds, whole.
    pub fn value_of(&self, row: &[Value]) -> Option<Vec<u8>> {
        let mut value = value_of(row, self.value)?;
        if let Some(Value::Varbinary(rest)) = row.get(REST) {
            value.extend_from_slice(rest);
        }
        Some(value)
    }

    /// Whether a row, read through either handle, has a rest (parts to delete when it is
    /// written or deleted).
    pub fn has_rest(row: &[Value]) -> bool {
        matches!(row.get(REST), Some(Value::Varbinary(_)))
    }

    /// Its definition's table, checked: whether it has `value_rest`, and the bytes its row
    /// holds; an error naming the table when its layout is neither `wanted` nor `wanted`
    /// without `value_rest` (a gateway's before it), `value_more` of any size.
    fn open(cooked: Table, wanted: &TableDef, value: usize) -> Result<Store, Error> {
        let columns = &cooked.def().columns;
        let more = value + 1;
        let same = |i: usize| {
            let (found, wanted) = (&columns[i], &wanted.columns[i]);
            let types = match (found.column_type, wanted.column_type) {
                (ColumnType::Varbinary(_), ColumnType::Varbinary(_)) if i == more => true,
                (found, wanted) => found == wanted,
            };
            types
                && found.name == wanted.name
                && found.nullable == wanted.nullable
                && found.primary_key == wanted.primary_key
        };
        let inline = match columns.get(more).map(|c| c.column_type) {
            Some(ColumnType::Varbinary(more)) => COLUMN_BYTES_MAX + usize::from(more),
            _ => 0,
        };
        let count = wanted.columns.len();
        let has_rest = columns.len() == count;
        if inline == 0 || !(count - 1..=count).contains(&columns.len()) {
            return Err(unknown_layout(&wanted.name));
        }
        if !(0..columns.len()).all(same) {
            return Err(unknown_layout(&wanted.name));
        }
        if !has_rest {
            tracing::warn!(
                "table {} has no value_rest column (made by an older rndb-redis): its values \
                 are limited to {inline} bytes",
                wanted.name
            );
        }
        Ok(Store {
            raw: cooked.raw(),
            cooked,
            has_rest,
            inline_bytes: inline,
            value,
        })
    }
}

fn unknown_layout(table: &str) -> Error {
    Error::Ndb(NdbError::with_detail(
        721,
        format!(
            "table {table} has a layout this gateway does not know: drop it, or serve its keys \
             with the gateway that made it"
        ),
    ))
}

/// The gateway's tables.
#[derive(Debug)]
pub struct Tables {
    pub strings: Store,
    pub hashes: Store,
    /// Ordered index on `redis_hashes.key`: a hash's fields are one range of it.
    pub hashes_by_key: Index,
    /// The same through `hashes.raw`: a hash's fields with rests' heads, no parts read.
    pub hashes_by_key_raw: Index,
}

fn strings_def() -> TableDef {
    TableDef::new(
        STRINGS,
        vec![
            ColumnDef::key("key", ColumnType::Varbinary(KEY_BYTES_MAX as u16)),
            ColumnDef::new("value", ColumnType::Varbinary(COLUMN_BYTES_MAX as u16)),
            ColumnDef::new(
                "value_more",
                ColumnType::Varbinary(STRING_MORE_BYTES as u16),
            ),
            ColumnDef::new("expires_at_ms", ColumnType::Int64),
            ColumnDef::nullable("value_rest", ColumnType::Blob(BlobSize::Long)),
        ],
    )
}

fn hashes_def() -> TableDef {
    TableDef::new(
        HASHES,
        vec![
            ColumnDef::key("key", ColumnType::Varbinary(KEY_BYTES_MAX as u16)),
            ColumnDef::key("field", ColumnType::Varbinary(FIELD_BYTES_MAX as u16)),
            ColumnDef::new("value", ColumnType::Varbinary(COLUMN_BYTES_MAX as u16)),
            ColumnDef::new("value_more", ColumnType::Varbinary(HASH_MORE_BYTES as u16)),
            ColumnDef::nullable("value_rest", ColumnType::Blob(BlobSize::Long)),
        ],
    )
}

impl Tables {
    /// Looks the tables up, creating those missing (another gateway may create them at the
    /// same time: then its table is taken).
    pub async fn open(db: TokioCluster<'_>) -> Result<Tables, Error> {
        let strings = get_or_create(db, &strings_def()).await?;
        let hashes = get_or_create(db, &hashes_def()).await?;
        let hashes_by_key = match db.get_index(&hashes, HASHES_BY_KEY).await {
            Ok(index) => index,
            Err(e) if e.code() == Some(4243) => {
                let def = IndexDef::ordered(HASHES_BY_KEY, &["key"]);
                match db.create_index(&hashes, &def).await {
                    Err(e) if e.code() == Some(721) => db.get_index(&hashes, HASHES_BY_KEY).await?,
                    created => created?,
                }
            }
            Err(e) => return Err(e),
        };
        Ok(Tables {
            strings: Store::open(strings, &strings_def(), STRING_VALUE)?,
            hashes: Store::open(hashes, &hashes_def(), HASH_VALUE)?,
            hashes_by_key_raw: hashes_by_key.raw(),
            hashes_by_key,
        })
    }
}

async fn get_or_create(db: TokioCluster<'_>, def: &TableDef) -> Result<Table, Error> {
    match db.get_table(&def.name).await {
        Err(e) if e.code() == Some(709) => match db.create_table(def).await {
            Err(e) if e.code() == Some(721) => db.get_table(&def.name).await,
            created => created,
        },
        found => found,
    }
}

/// A key or field as a column value.
pub fn bytes_value(bytes: &[u8]) -> Value {
    Value::Varbinary(bytes.to_vec())
}

/// The bytes stored in `row[first]` and `row[first + 1]`.
pub fn value_of(row: &[Value], first: usize) -> Option<Vec<u8>> {
    match (row.get(first)?, row.get(first + 1)?) {
        (Value::Varbinary(head), Value::Varbinary(rest)) => {
            let mut value = Vec::with_capacity(head.len() + rest.len());
            value.extend_from_slice(head);
            value.extend_from_slice(rest);
            Some(value)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each table fills a row exactly.
    #[test]
    fn a_row_of_each_table_is_as_long_as_a_row_may_be() {
        for def in [strings_def(), hashes_def()] {
            assert_eq!(def.row_bytes_max(), ROW_BYTES_MAX, "{}", def.name);
            assert!(def.validate().is_ok(), "{}", def.name);
        }
        assert_eq!(VALUE_INLINE_BYTES_MAX, 12_689);
        assert_eq!(HASH_VALUE_INLINE_BYTES_MAX, 11_671);
    }
}
