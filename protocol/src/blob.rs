//! BLOB and TEXT columns, stored as NDB stores them: the row holds a *head* (the value's
//! length and its first [`INLINE_BYTES`] bytes), and the rest goes, cut into parts of the
//! type's part size, into a *parts table* of its own, `NDB$BLOB_<table id>_<column>`, whose
//! primary key is the row's primary key and the part's number (`NDB$PART`), and whose other
//! column (`NDB$DATA`) holds the part. The data node sees a head as a `Varbinary` and the
//! parts as rows of a table; the API node writes and reads the parts in the same transaction
//! as the row (`api-node`'s `blob.rs`).
//!
//! ```text
//! head:  length u64 (little-endian) | the value's first min(length, 256) bytes
//! part:  NDB$BLOB_<t>_<c> row (key columns of t…, NDB$PART u32, NDB$DATA varbinary(part size))
//!        part i holds the bytes 256 + i × part size .. of the value (the last one shorter)
//! ```

use crate::schema::{ColumnDef, ColumnType, TableDef, Value};

/// The bytes of a value the row itself holds (NDB's inline size).
pub const INLINE_BYTES: usize = 256;
/// The head's length field.
pub const LENGTH_BYTES: usize = 8;
/// The parts table's part number column.
pub const PART_COLUMN: &str = "NDB$PART";
/// The parts table's data column.
pub const DATA_COLUMN: &str = "NDB$DATA";
/// The name prefix of every parts table: no user table may take it.
pub const PARTS_PREFIX: &str = "NDB$BLOB_";

/// MySQL's four sizes of BLOB and TEXT.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlobSize {
    /// TINYBLOB, TINYTEXT: at most 255 bytes, all in the row (no parts table).
    Tiny,
    /// BLOB, TEXT: at most 65 535 bytes, parts of 2 000.
    Blob,
    /// MEDIUMBLOB, MEDIUMTEXT: at most 16 777 215 bytes, parts of 4 000.
    Medium,
    /// LONGBLOB, LONGTEXT: at most 4 294 967 295 bytes, parts of 8 000.
    Long,
}

impl BlobSize {
    /// The longest value, in bytes.
    pub fn max_bytes(self) -> u64 {
        match self {
            BlobSize::Tiny => 255,
            BlobSize::Blob => 65_535,
            BlobSize::Medium => 16_777_215,
            BlobSize::Long => 4_294_967_295,
        }
    }

    /// The bytes of one part (0: no parts table).
    pub fn part_bytes(self) -> u16 {
        match self {
            BlobSize::Tiny => 0,
            BlobSize::Blob => 2_000,
            BlobSize::Medium => 4_000,
            BlobSize::Long => 8_000,
        }
    }

    /// The size's code in a table definition.
    pub fn code(self) -> u16 {
        match self {
            BlobSize::Tiny => 0,
            BlobSize::Blob => 1,
            BlobSize::Medium => 2,
            BlobSize::Long => 3,
        }
    }

    pub fn from_code(code: u16) -> Option<BlobSize> {
        Some(match code {
            0 => BlobSize::Tiny,
            1 => BlobSize::Blob,
            2 => BlobSize::Medium,
            3 => BlobSize::Long,
            _ => return None,
        })
    }

    /// MySQL's name of the size's type: `TINY`, ``, `MEDIUM`, `LONG` before BLOB or TEXT.
    pub fn prefix(self) -> &'static str {
        match self {
            BlobSize::Tiny => "TINY",
            BlobSize::Blob => "",
            BlobSize::Medium => "MEDIUM",
            BlobSize::Long => "LONG",
        }
    }

    /// The parts a value of `length` bytes has.
    pub fn parts(self, length: u64) -> u64 {
        let part = u64::from(self.part_bytes());
        let rest = length.saturating_sub(INLINE_BYTES as u64);
        if part == 0 {
            0
        } else {
            rest.div_ceil(part)
        }
    }
}

/// The head of `value`: its length, then its first bytes.
pub fn head_of(value: &[u8]) -> Vec<u8> {
    let inline = value.len().min(INLINE_BYTES);
    let mut head = Vec::with_capacity(LENGTH_BYTES + inline);
    head.extend_from_slice(&(value.len() as u64).to_le_bytes());
    head.extend_from_slice(&value[..inline]);
    head
}

/// The length a head names, when it is one of a `size` value (the length within the size,
/// and exactly the inline bytes it implies).
pub fn head_length(head: &[u8], size: BlobSize) -> Option<u64> {
    let (length, inline) = head.split_at_checked(LENGTH_BYTES)?;
    let length = u64::from_le_bytes(length.try_into().ok()?);
    let expected = usize::try_from(length.min(INLINE_BYTES as u64)).ok()?;
    (length <= size.max_bytes() && inline.len() == expected).then_some(length)
}

/// The name of the parts table of column `column` of table `table_id`.
pub fn parts_table_name(table_id: u32, column: usize) -> String {
    format!("{PARTS_PREFIX}{table_id}_{column}")
}

/// The size of a BLOB, TEXT or JSON column type (`None` for the other types): JSON's is
/// LONGTEXT's.
pub fn size_of(t: ColumnType) -> Option<BlobSize> {
    match t {
        ColumnType::Blob(size) | ColumnType::Text(size) => Some(size),
        ColumnType::Json => Some(BlobSize::Long),
        _ => None,
    }
}

/// The columns of `def` that have a parts table (BLOB and TEXT but the TINY ones).
pub fn parted_columns(def: &TableDef) -> impl Iterator<Item = usize> + '_ {
    (def.columns.iter().enumerate())
        .filter(|(_, c)| size_of(c.column_type).is_some_and(|s| s.part_bytes() > 0))
        .map(|(i, _)| i)
}

/// The parts table of column `column` of `def`, which has id `table_id`: the key columns as
/// they are, the part number, the data.
pub fn parts_def(def: &TableDef, table_id: u32, column: usize) -> Option<TableDef> {
    let size = size_of(def.columns.get(column)?.column_type)?;
    if size.part_bytes() == 0 {
        return None;
    }
    let mut columns: Vec<ColumnDef> = (def.columns.iter())
        .filter(|c| c.primary_key)
        .map(ColumnDef::as_key)
        .collect();
    columns.push(ColumnDef::key(PART_COLUMN, ColumnType::UInt32));
    columns.push(ColumnDef::new(
        DATA_COLUMN,
        ColumnType::Varbinary(size.part_bytes()),
    ));
    Some(
        TableDef::new(&parts_table_name(table_id, column), columns)
            .with_read_backup(def.read_backup),
    )
}

/// The bytes of a whole value of a BLOB (`Varbinary`) or TEXT (`Varchar`) column.
pub fn value_bytes(value: &Value) -> Option<&[u8]> {
    match value {
        Value::Varbinary(b) => Some(b),
        Value::Varchar(s) => Some(s.as_bytes()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_names_the_length_and_holds_the_first_bytes() {
        let value: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        let head = head_of(&value);
        assert_eq!(head.len(), LENGTH_BYTES + INLINE_BYTES);
        assert_eq!(head_length(&head, BlobSize::Blob), Some(1000));
        assert_eq!(&head[LENGTH_BYTES..], &value[..INLINE_BYTES]);
        assert_eq!(head_length(&head_of(b"ab"), BlobSize::Tiny), Some(2));
        // Not a head: too short, inline bytes other than the length implies, past the size.
        assert_eq!(head_length(&head[..7], BlobSize::Blob), None);
        assert_eq!(head_length(&head[..100], BlobSize::Blob), None);
        assert_eq!(head_length(&head, BlobSize::Tiny), None);
        assert_eq!(BlobSize::Blob.parts(1000), 1);
        assert_eq!(BlobSize::Blob.parts(256), 0);
        assert_eq!(BlobSize::Blob.parts(2256), 1);
        assert_eq!(BlobSize::Blob.parts(2257), 2);
        assert_eq!(BlobSize::Tiny.parts(255), 0);
    }

    #[test]
    fn the_parts_table_has_the_key_the_part_and_the_data() {
        let def = TableDef::new(
            "t",
            vec![
                ColumnDef::new("b", ColumnType::Blob(BlobSize::Medium)),
                ColumnDef::key("k", ColumnType::Int32),
                ColumnDef::new("tiny", ColumnType::Text(BlobSize::Tiny)),
            ],
        );
        assert_eq!(parted_columns(&def).collect::<Vec<_>>(), vec![0]);
        let parts = parts_def(&def, 7, 0).expect("a parts table");
        assert_eq!(parts.name, "NDB$BLOB_7_0");
        assert_eq!(parts.key_columns(), vec![0, 1]);
        assert_eq!(parts.columns[2].column_type, ColumnType::Varbinary(4000));
        assert!(parts.validate().is_ok());
        assert!(parts_def(&def, 7, 2).is_none(), "TINYTEXT has none");
    }
}
