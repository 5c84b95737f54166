//! The tables Redis keys live in (see the crate docs for the layout), created at start-up if
//! missing.

use rndb_api::{
    ColumnDef, ColumnType, Error, Index, IndexDef, Table, TableDef, TokioCluster, Value,
};

/// The longest key: a key column's size.
pub const KEY_BYTES_MAX: usize = 1024;
/// The most bytes one Varbinary column holds: longer values continue in a second column.
pub const COLUMN_BYTES_MAX: usize = 8000;
/// The longest string value: what a row of `redis_strings` has room for.
pub const VALUE_BYTES_MAX: usize = 12_800;
/// The longest hash field.
pub const FIELD_BYTES_MAX: usize = 1024;
/// The longest hash value: what a row of `redis_hashes` has room for.
pub const HASH_VALUE_BYTES_MAX: usize = 11_900;

/// Each Varbinary column takes its bytes and 3 more; an Int64, 9 (rndb's row encoding).
/// A value is split over two columns (`value`, `value_more`), so each takes 3 bytes more.
const _: () = assert!(
    (3 + KEY_BYTES_MAX) + (6 + VALUE_BYTES_MAX) + 9 <= rndb_protocol::schema::ROW_BYTES_MAX
);
const _: () = assert!(
    (3 + KEY_BYTES_MAX) + (3 + FIELD_BYTES_MAX) + (6 + HASH_VALUE_BYTES_MAX)
        <= rndb_protocol::schema::ROW_BYTES_MAX
);
const _: () = assert!(KEY_BYTES_MAX <= COLUMN_BYTES_MAX && VALUE_BYTES_MAX > COLUMN_BYTES_MAX);

pub const STRINGS: &str = "redis_strings";
pub const HASHES: &str = "redis_hashes";
pub const HASHES_BY_KEY: &str = "redis_hashes_key";

/// Columns of `redis_strings`.
pub const STRING_VALUE: usize = 1;
pub const STRING_EXPIRES_AT: usize = 3;
/// Columns of `redis_hashes`.
pub const HASH_FIELD: usize = 1;
pub const HASH_VALUE: usize = 2;

/// The gateway's tables.
#[derive(Debug)]
pub struct Tables {
    pub strings: Table,
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
            ColumnDef::new(
                "value_more",
                ColumnType::Varbinary((VALUE_BYTES_MAX - COLUMN_BYTES_MAX) as u16),
            ),
            ColumnDef::new("expires_at_ms", ColumnType::Int64),
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
            strings,
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
