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
/// The size of `redis_strings.value_more`: what a row has room for past its key, `value`, its
/// expiry and `value_rest`'s head (a row takes 2 bytes, a Varbinary its bytes and 3, an Int64
/// 9, a BLOB's head 3, its length and 256 bytes: rndb's row encoding).
const VALUE_MORE_BYTES: usize = ROW_BYTES_MAX
    - 2
    - (3 + KEY_BYTES_MAX)
    - (3 + COLUMN_BYTES_MAX)
    - 3
    - 9
    - (3 + LENGTH_BYTES + INLINE_BYTES);
/// The longest string value kept in a row's own columns (`value`, `value_more`): a GET of it
/// is one round trip; a longer one continues in `value_rest`, a LONGBLOB.
pub const VALUE_INLINE_BYTES_MAX: usize = COLUMN_BYTES_MAX + VALUE_MORE_BYTES;
/// The longest string value: a request's longest bulk string.
pub const VALUE_BYTES_MAX: usize = crate::resp::BULK_BYTES_MAX;
/// The longest hash field.
pub const FIELD_BYTES_MAX: usize = 1024;
/// The longest hash value: what a row of `redis_hashes` has room for.
pub const HASH_VALUE_BYTES_MAX: usize = 11_900;

const _: () = assert!(
    2 + (3 + KEY_BYTES_MAX) + (3 + FIELD_BYTES_MAX) + (6 + HASH_VALUE_BYTES_MAX) <= ROW_BYTES_MAX
);
const _: () = assert!(
    KEY_BYTES_MAX <= COLUMN_BYTES_MAX
        && VALUE_MORE_BYTES <= COLUMN_BYTES_MAX
        && VALUE_INLINE_BYTES_MAX < VALUE_BYTES_MAX
);

pub const STRINGS: &str = "redis_strings";
pub const HASHES: &str = "redis_hashes";
pub const HASHES_BY_KEY: &str = "redis_hashes_key";

/// Columns of `redis_strings`.
pub const STRING_VALUE: usize = 1;
pub const STRING_EXPIRES_AT: usize = 3;
pub const STRING_REST: usize = 4;
/// Columns of `redis_hashes`.
pub const HASH_FIELD: usize = 1;
pub const HASH_VALUE: usize = 2;

/// The gateway's tables.
#[derive(Debug)]
pub struct Tables {
    /// `redis_strings`, whose `value_rest` reads and writes whole values (a BLOB).
    pub strings: Table,
    /// `redis_strings` as the data node holds it (`Table::raw`): plain operations on the row
    /// alone, for values without a rest (`commands::put_strings`).
    pub strings_raw: Table,
    /// The table has `value_rest`. One made by a gateway before it did has not: its values
    /// are at most `inline_bytes`.
    pub has_rest: bool,
    /// The bytes a row holds in `value` and `value_more`.
    pub inline_bytes: usize,
    pub hashes: Table,
    /// Ordered index on `redis_hashes.key`: a hash's fields are one range of it.
    pub hashes_by_key: Index,
}

fn strings_def() -> TableDef {
    TableDef::new(
        STRINGS,
        vec![
            ColumnDef::key("key", ColumnType::Varbinary(KEY_BYTES_MAX as u16)),
            ColumnDef::new("value", ColumnType::Varbinary(COLUMN_BYTES_MAX as u16)),
            ColumnDef::new("value_more", ColumnType::Varbinary(VALUE_MORE_BYTES as u16)),
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
            ColumnDef::new(
                "value_more",
                ColumnType::Varbinary((HASH_VALUE_BYTES_MAX - COLUMN_BYTES_MAX) as u16),
            ),
        ],
    )
}

/// Whether `strings` has `value_rest`, and the bytes its `value` and `value_more` hold; an
/// error naming the table when its layout is neither this gateway's nor the one before
/// (which had no `value_rest`).
fn strings_layout(strings: &Table) -> Result<(bool, usize), Error> {
    let wanted = strings_def();
    let columns = &strings.def().columns;
    // Every column as this gateway makes it, but `value_more`, whose size only may differ
    // (4 800 before `value_rest`).
    let same = |i: usize| {
        let (found, wanted) = (&columns[i], &wanted.columns[i]);
        let types = match (found.column_type, wanted.column_type) {
            (ColumnType::Varbinary(_), ColumnType::Varbinary(_)) if i == 2 => true,
            (found, wanted) => found == wanted,
        };
        types
            && found.name == wanted.name
            && found.nullable == wanted.nullable
            && found.primary_key == wanted.primary_key
    };
    let inline = match columns.get(2).map(|c| c.column_type) {
        Some(ColumnType::Varbinary(more)) => COLUMN_BYTES_MAX + usize::from(more),
        _ => 0,
    };
    let has_rest = columns.len() == 5;
    if inline == 0 || !(4..=5).contains(&columns.len()) || !(0..columns.len()).all(same) {
        return Err(Error::Ndb(NdbError::with_detail(
            721,
            format!(
                "table {STRINGS} has a layout this gateway does not know: drop it, or serve \
                 its keys with the gateway that made it"
            ),
        )));
    }
    Ok((has_rest, inline))
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
        let (has_rest, inline_bytes) = strings_layout(&strings)?;
        if !has_rest {
            tracing::warn!(
                "table {STRINGS} has no value_rest column (made by an older rndb-redis): \
                 string values are limited to {inline_bytes} bytes"
            );
        }
        Ok(Tables {
            strings_raw: strings.raw(),
            strings,
            has_rest,
            inline_bytes,
            hashes,
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

impl Tables {
    /// The longest string value this gateway stores.
    pub fn value_bytes_max(&self) -> usize {
        if self.has_rest {
            VALUE_BYTES_MAX
        } else {
            self.inline_bytes
        }
    }

    /// The row of string `key`: `value`'s first bytes, the next ones, the expiry (0: none), and
    /// in a table with `value_rest` the rest (NULL when there is none).
    pub fn string_row(&self, key: &[u8], value: &[u8], expires_at: i64) -> Vec<Value> {
        let first = value.len().min(COLUMN_BYTES_MAX);
        let inline = value.len().min(self.inline_bytes);
        let mut row = vec![
            bytes_value(key),
            Value::Varbinary(value[..first].to_vec()),
            Value::Varbinary(value[first..inline].to_vec()),
            Value::Int64(expires_at),
        ];
        if self.has_rest {
            row.push(match &value[inline..] {
                [] => Value::Null,
                rest => Value::Varbinary(rest.to_vec()),
            });
        }
        row
    }
}

/// A value as the two columns it is stored in: its first [`COLUMN_BYTES_MAX`] bytes, and the
/// rest (often empty).
pub fn value_columns(value: &[u8]) -> [Value; 2] {
    let split = value.len().min(COLUMN_BYTES_MAX);
    [
        Value::Varbinary(value[..split].to_vec()),
        Value::Varbinary(value[split..].to_vec()),
    ]
}

/// The value stored in `row[first]` and `row[first + 1]`.
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

    /// `redis_strings` fills a row exactly, and a long value goes whole through its columns.
    #[test]
    fn a_strings_row_is_as_long_as_a_row_may_be() {
        assert_eq!(strings_def().row_bytes_max(), ROW_BYTES_MAX);
        assert!(strings_def().validate().is_ok());
        assert!(hashes_def().validate().is_ok());
    }
}
