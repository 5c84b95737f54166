//! Tables, columns, values and the small enums every operation carries.

pub use crate::blob::BlobSize;
use crate::codec::{DecodeError, Reader, Writer};
use crate::error::NdbError;
use std::fmt;

/// The largest declared length of a Varchar or Varbinary column, in bytes.
pub const COLUMN_BYTES_MAX: u16 = 8000;
/// The largest encoded row (NDB's classic limit of 14 000 bytes per row), so that a key request
/// carrying a whole row always fits in one frame.
pub const ROW_BYTES_MAX: usize = 14_000;
/// The most columns a table may have.
pub const COLUMNS_MAX: usize = 128;
/// The longest table or column name, in bytes.
pub const NAME_BYTES_MAX: usize = 128;

/// A column's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ColumnType {
    /// NDB's Tinyint (MySQL TINYINT): -128..=127, carried by [`Value::Int32`].
    Int8,
    /// NDB's Tinyunsigned (TINYINT UNSIGNED): 0..=255, carried by [`Value::UInt32`].
    UInt8,
    /// NDB's Smallint (SMALLINT), carried by [`Value::Int32`].
    Int16,
    /// NDB's Smallunsigned (SMALLINT UNSIGNED), carried by [`Value::UInt32`].
    UInt16,
    /// NDB's Mediumint (MEDIUMINT): -8388608..=8388607, carried by [`Value::Int32`].
    Int24,
    /// NDB's Mediumunsigned (MEDIUMINT UNSIGNED): 0..=16777215, carried by [`Value::UInt32`].
    UInt24,
    Int32,
    UInt32,
    Int64,
    UInt64,
    Float64,
    /// UTF-8 text of at most `n` bytes, compared as bytes (a binary collation).
    Varchar(u16),
    /// MySQL DATE, carried by [`Value::Varchar`] as `YYYY-MM-DD`: a real day of the years
    /// 1000 to 9999. Text in that one form orders as the dates do.
    Date,
    /// MySQL DATETIME(fsp), carried by [`Value::Varchar`] as `YYYY-MM-DD hh:mm:ss`, then a
    /// point and exactly `fsp` (0..=6) digits when `fsp` > 0.
    Datetime(u8),
    /// MySQL TIMESTAMP(fsp): a DATETIME(fsp) in UTC from `1970-01-01 00:00:01` to
    /// `2038-01-19 03:14:07` (the application converts from its time zone).
    Timestamp(u8),
    /// Bytes, at most `n` of them.
    Varbinary(u16),
    /// NDB's Float (MySQL FLOAT): an IEEE single, carried by [`Value::Float64`] holding a
    /// value a single represents exactly (`f64::from(x as f32)`).
    Float32,
    /// NDB's Char (MySQL CHAR(n), binary collation): UTF-8 text of exactly `n` bytes (1..=255),
    /// padded with spaces, carried by [`Value::Varchar`]. Padded text compares as MySQL's PAD
    /// SPACE collations do.
    Char(u16),
    /// NDB's Binary (MySQL BINARY(n)): exactly `n` bytes (1..=255), padded with zero bytes,
    /// carried by [`Value::Varbinary`].
    Binary(u16),
    /// NDB's Year (MySQL YEAR): 1901..=2155, or 0 (MySQL's `0000`), carried by
    /// [`Value::UInt32`].
    Year,
    /// NDB's Bit(n) (MySQL BIT(n), `n` 1..=64): carried by [`Value::UInt64`], below 2^n.
    Bit(u8),
    /// NDB's Decimal (MySQL DECIMAL(p, s), `p` 1..=65 digits, `s` 0..=30 of them after the
    /// point): carried by [`Value::Varbinary`] in MySQL's binary form, which orders as the
    /// numbers do (see [`crate::decimal`]; [`ColumnType::value_of_text`] makes one).
    Decimal(u8, u8),
    /// NDB's Time2 (MySQL TIME(fsp)): microseconds, ±838:59:59, a multiple of 10^(6 − fsp),
    /// carried by [`Value::Int64`] (see [`crate::time`]).
    Time(u8),
    /// NDB's Blob (MySQL TINYBLOB, BLOB, MEDIUMBLOB, LONGBLOB): bytes, up to the size's
    /// longest. The row holds a head (its length and first 256 bytes) carried by
    /// [`Value::Varbinary`], a parts table the rest ([`crate::blob`]); the API node reads and
    /// writes whole values as `Varbinary`.
    Blob(BlobSize),
    /// NDB's Text (MySQL TINYTEXT … LONGTEXT): as [`ColumnType::Blob`], of UTF-8 text; the API
    /// node reads and writes whole values as `Varchar`.
    Text(BlobSize),
    /// MySQL JSON: a document's text, stored as a LONGTEXT is ([`crate::blob`], 4 GiB at
    /// most), that the API node checks is JSON before it writes it. NDB stores MySQL's binary
    /// form in a blob likewise; rndb keeps the text as written.
    Json,
    /// MySQL ENUM of `n` elements (1..=65535), their names in [`ColumnDef::elements`]: the
    /// element's number, 1..=n, carried by [`Value::UInt32`], ordered by it (as MySQL orders
    /// an ENUM). NDB stores it likewise, as the number in 1 or 2 bytes.
    Enum(u16),
    /// MySQL SET of `n` members (1..=64), their names in [`ColumnDef::elements`]: a bit per
    /// member (bit 0 the first), carried by [`Value::UInt64`] below 2^n.
    Set(u8),
}

impl fmt::Display for ColumnType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ColumnType::Int8 => write!(f, "Int8"),
            ColumnType::UInt8 => write!(f, "UInt8"),
            ColumnType::Int16 => write!(f, "Int16"),
            ColumnType::UInt16 => write!(f, "UInt16"),
            ColumnType::Int24 => write!(f, "Int24"),
            ColumnType::UInt24 => write!(f, "UInt24"),
            ColumnType::Int32 => write!(f, "Int32"),
            ColumnType::UInt32 => write!(f, "UInt32"),
            ColumnType::Int64 => write!(f, "Int64"),
            ColumnType::UInt64 => write!(f, "UInt64"),
            ColumnType::Float64 => write!(f, "Float64"),
            ColumnType::Varchar(n) => write!(f, "Varchar({n})"),
            ColumnType::Varbinary(n) => write!(f, "Varbinary({n})"),
            // As NDB's ndb_desc: inline bytes, part bytes, (no) striping.
            ColumnType::Blob(size) => write!(f, "Blob(256,{},0)", size.part_bytes()),
            ColumnType::Text(size) => write!(f, "Text(256,{},0)", size.part_bytes()),
            ColumnType::Date => write!(f, "Date"),
            ColumnType::Datetime(fsp) => write!(f, "Datetime({fsp})"),
            ColumnType::Timestamp(fsp) => write!(f, "Timestamp({fsp})"),
            ColumnType::Float32 => write!(f, "Float32"),
            ColumnType::Char(n) => write!(f, "Char({n})"),
            ColumnType::Binary(n) => write!(f, "Binary({n})"),
            ColumnType::Year => write!(f, "Year"),
            ColumnType::Bit(n) => write!(f, "Bit({n})"),
            ColumnType::Decimal(p, s) => write!(f, "Decimal({p},{s})"),
            ColumnType::Time(fsp) => write!(f, "Time({fsp})"),
            ColumnType::Json => write!(f, "Json"),
            ColumnType::Enum(n) => write!(f, "Enum({n})"),
            ColumnType::Set(n) => write!(f, "Set({n})"),
        }
    }
}

impl ColumnType {
    /// The tag of the [`Value`] variant that carries this type's values: the integers up to 32
    /// bits go as `Int32` (1) or `UInt32` (2), and must lie in the type's range.
    #[inline]
    pub fn value_tag(self) -> u8 {
        match self {
            ColumnType::Int8 | ColumnType::Int16 | ColumnType::Int24 | ColumnType::Int32 => 1,
            ColumnType::UInt8
            | ColumnType::UInt16
            | ColumnType::UInt24
            | ColumnType::UInt32
            | ColumnType::Year
            | ColumnType::Enum(_) => 2,
            ColumnType::Int64 | ColumnType::Time(_) => 3,
            ColumnType::UInt64 | ColumnType::Bit(_) | ColumnType::Set(_) => 4,
            ColumnType::Float64 | ColumnType::Float32 => 5,
            ColumnType::Varchar(_)
            | ColumnType::Date
            | ColumnType::Datetime(_)
            | ColumnType::Timestamp(_)
            | ColumnType::Char(_) => 6,
            ColumnType::Varbinary(_)
            | ColumnType::Binary(_)
            | ColumnType::Decimal(..)
            | ColumnType::Blob(_)
            | ColumnType::Text(_)
            | ColumnType::Json => 7,
        }
    }

    /// The least and greatest value of an integer type; `None` for the others (YEAR, BIT,
    /// ENUM and SET too: no auto-increment or interpreted arithmetic, as in MySQL).
    pub fn integer_bounds(self) -> Option<(i128, i128)> {
        Some(match self {
            ColumnType::Int8 => (i8::MIN.into(), i8::MAX.into()),
            ColumnType::UInt8 => (0, u8::MAX.into()),
            ColumnType::Int16 => (i16::MIN.into(), i16::MAX.into()),
            ColumnType::UInt16 => (0, u16::MAX.into()),
            ColumnType::Int24 => (-(1 << 23), (1 << 23) - 1),
            ColumnType::UInt24 => (0, (1 << 24) - 1),
            ColumnType::Int32 => (i32::MIN.into(), i32::MAX.into()),
            ColumnType::UInt32 => (0, u32::MAX.into()),
            ColumnType::Int64 => (i64::MIN.into(), i64::MAX.into()),
            ColumnType::UInt64 => (0, u64::MAX.into()),
            ColumnType::Float64
            | ColumnType::Varchar(_)
            | ColumnType::Varbinary(_)
            | ColumnType::Date
            | ColumnType::Datetime(_)
            | ColumnType::Timestamp(_)
            | ColumnType::Float32
            | ColumnType::Char(_)
            | ColumnType::Binary(_)
            | ColumnType::Year
            | ColumnType::Bit(_)
            | ColumnType::Decimal(..)
            | ColumnType::Time(_)
            | ColumnType::Blob(_)
            | ColumnType::Text(_)
            | ColumnType::Json
            | ColumnType::Enum(_)
            | ColumnType::Set(_) => return None,
        })
    }

    /// True for the integer types.
    pub fn is_integer(self) -> bool {
        self.integer_bounds().is_some()
    }

    /// True when integer `v` is a value of this integer, YEAR, BIT, ENUM or SET type (false
    /// for the other types).
    #[inline]
    pub fn admits(self, v: i128) -> bool {
        match self {
            ColumnType::Year => v == 0 || (YEAR_FIRST..=YEAR_LAST).contains(&v),
            ColumnType::Bit(n) | ColumnType::Set(n) => n <= BIT_MAX && (0..1i128 << n).contains(&v),
            ColumnType::Enum(n) => (1..=i128::from(n)).contains(&v),
            t => t
                .integer_bounds()
                .is_some_and(|(least, greatest)| (least..=greatest).contains(&v)),
        }
    }

    /// The longest text of a date or time type (`None` for the others).
    pub fn temporal_bytes(self) -> Option<u16> {
        match self {
            ColumnType::Date => Some(10),
            ColumnType::Datetime(fsp) | ColumnType::Timestamp(fsp) => {
                Some(19 + if fsp > 0 { 1 + u16::from(fsp) } else { 0 })
            }
            _ => None,
        }
    }

    /// True when `text` is a value of this date, time or CHAR type, in its one form.
    pub fn admits_text(self, text: &str) -> bool {
        if let ColumnType::Char(n) = self {
            return text.len() == usize::from(n);
        }
        let b = text.as_bytes();
        if self.temporal_bytes().map(usize::from) != Some(b.len()) || !is_date(&b[..10]) {
            return false;
        }
        match self {
            ColumnType::Date => true,
            ColumnType::Datetime(_) | ColumnType::Timestamp(_) => {
                let whole = b[10] == b' '
                    && is_time(&b[11..19])
                    && (b.len() == 19 || b[19] == b'.' && b[20..].iter().all(u8::is_ascii_digit));
                // Fixed-width text compares as the instants do.
                whole
                    && (!matches!(self, ColumnType::Timestamp(_))
                        || (TIMESTAMP_FIRST..=TIMESTAMP_LAST).contains(&&text[..19]))
            }
            _ => false,
        }
    }

    /// True for the integer types narrower than their carrier (8, 16 and 24 bits, YEAR, ENUM),
    /// whose values need a range check.
    #[inline]
    fn is_narrow(self) -> bool {
        matches!(
            self,
            ColumnType::Int8
                | ColumnType::UInt8
                | ColumnType::Int16
                | ColumnType::UInt16
                | ColumnType::Int24
                | ColumnType::UInt24
                | ColumnType::Year
                | ColumnType::Enum(_)
        )
    }

    /// `value` in this type's one form where a user might write another: text for a CHAR
    /// padded with spaces to its length, bytes for a BINARY padded with zero bytes, a number
    /// for a FLOAT rounded to the nearest single (as MySQL stores them). Any other value is
    /// returned as it is (a value too long stays too long, and is refused with 4209).
    pub fn padded(self, value: Value) -> Value {
        match (self, value) {
            (ColumnType::Char(n), Value::Varchar(mut text)) => {
                let n = usize::from(n);
                if text.len() < n {
                    text.extend(std::iter::repeat_n(' ', n - text.len()));
                }
                Value::Varchar(text)
            }
            (ColumnType::Binary(n), Value::Varbinary(mut bytes)) => {
                let n = usize::from(n);
                if bytes.len() < n {
                    bytes.resize(n, 0);
                }
                Value::Varbinary(bytes)
            }
            // A finite double past a single's range stays as it is (refused), not +-inf.
            (ColumnType::Float32, Value::Float64(v))
                if !v.is_finite() || (v as f32).is_finite() =>
            {
                Value::Float64(f64::from(v as f32))
            }
            (_, value) => value,
        }
    }

    /// The value of a DECIMAL or TIME written as MySQL writes it (`-12.50`, `-838:59:59.5`;
    /// a DECIMAL's extra fraction digits rounded, as MySQL does); for another type, an error.
    pub fn value_of_text(self, text: &str) -> Result<Value, String> {
        match self {
            ColumnType::Decimal(p, s) => {
                crate::decimal::from_text(text, p, s).map(Value::Varbinary)
            }
            ColumnType::Time(fsp) => crate::time::from_text(text, fsp).map(Value::Int64),
            t => Err(format!("{t} values are not read from text")),
        }
    }

    /// The text of a DECIMAL's or TIME's value, as MySQL writes it; `None` for other types and
    /// for a value not of this type.
    pub fn text_of(self, value: &Value) -> Option<String> {
        match (self, value) {
            (ColumnType::Decimal(p, s), Value::Varbinary(b)) => crate::decimal::to_text(b, p, s),
            (ColumnType::Time(fsp), &Value::Int64(v)) if crate::time::is_value(v, fsp) => {
                Some(crate::time::to_text(v, fsp))
            }
            _ => None,
        }
    }
}

/// MySQL's YEAR range (and 0).
const YEAR_FIRST: i128 = 1901;
const YEAR_LAST: i128 = 2155;
/// The longest BIT, CHAR and BINARY columns, and the most members of a SET (MySQL's).
pub const BIT_MAX: u8 = 64;
/// The longest name of an ENUM's element or a SET's member, in bytes (MySQL: 255 characters).
pub const ELEMENT_BYTES_MAX: usize = 255;
/// The most bytes the names of a table's ENUM elements and SET members take, each with its
/// two-byte length, all columns together: a table's definition stays within one frame.
pub const ELEMENTS_BYTES_MAX: usize = 8192;
pub const FIXED_BYTES_MAX: u16 = 255;

/// The first and last TIMESTAMP (to the second), as MySQL's.
const TIMESTAMP_FIRST: &str = "1970-01-01 00:00:01";
const TIMESTAMP_LAST: &str = "2038-01-19 03:14:07";
/// The most fraction digits of a DATETIME or TIMESTAMP (MySQL's).
pub const FSP_MAX: u8 = 6;

/// `YYYY-MM-DD`, a real day of the years 1000 to 9999.
fn is_date(b: &[u8]) -> bool {
    let number = |digits: &[u8]| {
        digits.iter().try_fold(0u32, |n, &d| {
            d.is_ascii_digit().then(|| n * 10 + u32::from(d - b'0'))
        })
    };
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let (Some(year), Some(month), Some(day)) =
        (number(&b[0..4]), number(&b[5..7]), number(&b[8..10]))
    else {
        return false;
    };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1000..=9999).contains(&year) && (1..=days).contains(&day)
}

/// `hh:mm:ss`, a time of day.
fn is_time(b: &[u8]) -> bool {
    let two = |at: usize, below: u8| {
        b[at].is_ascii_digit()
            && b[at + 1].is_ascii_digit()
            && (b[at] - b'0') * 10 + (b[at + 1] - b'0') < below
    };
    b.len() == 8 && b[2] == b':' && b[5] == b':' && two(0, 24) && two(3, 60) && two(6, 60)
}

/// One column of a table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColumnDef {
    pub name: String,
    pub column_type: ColumnType,
    pub nullable: bool,
    /// Part of the primary key (primary-key columns are never nullable).
    pub primary_key: bool,
    /// Its values come from the table's auto-increment counter (NDB's `setAutoIncrement`;
    /// the API's `Cluster::auto_increment_value`): an integer column, one per table at most.
    pub auto_increment: bool,
    /// An ENUM's elements or a SET's members, in order (empty for the other types): ENUM
    /// value `i` is `elements[i - 1]`, SET bit `i` is `elements[i]`.
    pub elements: Vec<String>,
}

impl ColumnDef {
    /// A NOT NULL column outside the primary key.
    pub fn new(name: &str, column_type: ColumnType) -> Self {
        ColumnDef {
            name: name.to_string(),
            column_type,
            nullable: false,
            primary_key: false,
            auto_increment: false,
            elements: Vec::new(),
        }
    }
    /// A primary-key column.
    pub fn key(name: &str, column_type: ColumnType) -> Self {
        ColumnDef {
            primary_key: true,
            ..ColumnDef::new(name, column_type)
        }
    }
    /// The same column, its values from the table's auto-increment counter.
    pub fn with_auto_increment(mut self) -> Self {
        self.auto_increment = true;
        self
    }
    /// A nullable column.
    pub fn nullable(name: &str, column_type: ColumnType) -> Self {
        ColumnDef {
            nullable: true,
            ..ColumnDef::new(name, column_type)
        }
    }
    /// The same column as a primary-key column of a table made from this one (a unique
    /// index's hidden table, a blob parts table): its name, type and names only.
    pub fn as_key(&self) -> Self {
        ColumnDef {
            elements: self.elements.clone(),
            ..ColumnDef::key(&self.name, self.column_type)
        }
    }
    /// A NOT NULL ENUM column of these elements (MySQL's `ENUM('a', 'b')`); more than 65535
    /// make an ENUM of 65535, which the table's validation refuses.
    pub fn enumeration(name: &str, elements: &[&str]) -> Self {
        let n = u16::try_from(elements.len()).unwrap_or(u16::MAX);
        ColumnDef {
            elements: elements.iter().map(|e| e.to_string()).collect(),
            ..ColumnDef::new(name, ColumnType::Enum(n))
        }
    }
    /// A NOT NULL SET column of these members (MySQL's `SET('a', 'b')`); more than 64 are
    /// refused by the table's validation.
    pub fn set(name: &str, members: &[&str]) -> Self {
        let n = u8::try_from(members.len()).unwrap_or(u8::MAX);
        ColumnDef {
            elements: members.iter().map(|e| e.to_string()).collect(),
            ..ColumnDef::new(name, ColumnType::Set(n))
        }
    }
    /// The same column, nullable.
    pub fn or_null(mut self) -> Self {
        self.nullable = true;
        self
    }

    /// The value of an ENUM element or a SET's members, as MySQL writes them: an element's
    /// name, or member names separated by commas (any order; a name given twice counts once;
    /// the empty text is the empty set). Names match exactly (a binary collation). For a column of
    /// another type, its type's [`ColumnType::value_of_text`].
    pub fn value_of_text(&self, text: &str) -> Result<Value, String> {
        let position = |name: &str| self.elements.iter().position(|e| e == name);
        // Digits that name no element are a number, as MySQL reads them: an ENUM's element's
        // (1 the first), a SET's bits.
        let number = || {
            (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
                .then(|| text.parse::<u64>().ok())
                .flatten()
        };
        match self.column_type {
            t @ ColumnType::Enum(_) => match (position(text), number()) {
                (Some(i), _) => Ok(Value::UInt32(i as u32 + 1)),
                (None, Some(n)) if t.admits(i128::from(n)) => Ok(Value::UInt32(n as u32)),
                _ => Err(format!(
                    "{text:?} is not an element of ENUM column {} (nor the number of one, \
                     1..={})",
                    self.name,
                    self.elements.len()
                )),
            },
            t @ ColumnType::Set(_) if position(text).is_none() && number().is_some() => {
                match number() {
                    Some(bits) if t.admits(i128::from(bits)) => Ok(Value::UInt64(bits)),
                    _ => Err(format!(
                        "{text:?} is not a member of SET column {} (nor bits of its {} members)",
                        self.name,
                        self.elements.len()
                    )),
                }
            }
            ColumnType::Set(_) => {
                let mut bits = 0u64;
                for name in text.split(',').filter(|_| !text.is_empty()) {
                    let Some(bit) = position(name).and_then(|i| 1u64.checked_shl(i as u32)) else {
                        return Err(format!(
                            "{name:?} is not a member of SET column {}",
                            self.name
                        ));
                    };
                    bits |= bit;
                }
                Ok(Value::UInt64(bits))
            }
            t => t.value_of_text(text),
        }
    }

    /// The text of an ENUM's or a SET's value, as MySQL writes it (an element's name; member
    /// names in definition order, separated by commas), or of a DECIMAL's or TIME's
    /// ([`ColumnType::text_of`]); `None` for other types and for a value not of this column.
    pub fn text_of(&self, value: &Value) -> Option<String> {
        match (self.column_type, value) {
            (t @ ColumnType::Enum(_), &Value::UInt32(v)) if t.admits(v.into()) => {
                self.elements.get(v as usize - 1).cloned()
            }
            (t @ ColumnType::Set(_), &Value::UInt64(v)) if t.admits(v.into()) => {
                let members: Vec<&str> = (self.elements.iter().enumerate())
                    .filter(|(i, _)| v.checked_shr(*i as u32).is_some_and(|b| b & 1 == 1))
                    .map(|(_, e)| e.as_str())
                    .collect();
                Some(members.join(","))
            }
            (t, value) => t.text_of(value),
        }
    }

    /// Checks an ENUM's elements or a SET's members against its type: as many as it says,
    /// each 1..=[`ELEMENT_BYTES_MAX`] bytes (a SET's without a comma), no two alike; none for
    /// another type.
    fn validate_elements(&self) -> Result<(), (u32, String)> {
        let (n, what, most) = match self.column_type {
            ColumnType::Enum(n) => (usize::from(n), "ENUM element", usize::from(u16::MAX)),
            ColumnType::Set(n) => (usize::from(n), "SET member", usize::from(BIT_MAX)),
            _ if self.elements.is_empty() => return Ok(()),
            t => {
                return Err((
                    4000,
                    format!("column {}: a {t} column has no elements", self.name),
                ))
            }
        };
        let name = &self.name;
        if !(1..=most).contains(&n) {
            return Err((
                738,
                format!("column {name}: 1..={most} of {what}s, not {n}"),
            ));
        }
        if self.elements.len() != n {
            let got = self.elements.len();
            return Err((
                4000,
                format!("column {name}: {n} {what}s declared, {got} named"),
            ));
        }
        for (i, e) in self.elements.iter().enumerate() {
            if e.is_empty() || e.len() > ELEMENT_BYTES_MAX {
                return Err((
                    738,
                    format!("column {name}: {what} {i}: 1..={ELEMENT_BYTES_MAX} bytes"),
                ));
            }
            if matches!(self.column_type, ColumnType::Set(_)) && e.contains(',') {
                return Err((4000, format!("column {name}: {what} {e:?} holds a comma")));
            }
            if self.elements[..i].contains(e) {
                return Err((721, format!("column {name}: {what} {e:?} is named twice")));
            }
        }
        Ok(())
    }
}

/// A table: a name and its columns in order. The primary key is the columns marked
/// `primary_key`, in column order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableDef {
    pub name: String,
    pub columns: Vec<ColumnDef>,
    /// NDB's READ_BACKUP table option: a CommittedRead may be served by any replica of the
    /// row's partition, the coordinator's own node when it holds one (else the primary).
    pub read_backup: bool,
}

/// Table flag bits on the wire.
const TABLE_FLAG_READ_BACKUP: u8 = 1;

impl TableDef {
    pub fn new(name: &str, columns: Vec<ColumnDef>) -> Self {
        TableDef {
            name: name.to_string(),
            columns,
            read_backup: false,
        }
    }

    /// Sets the READ_BACKUP option (see [`TableDef::read_backup`]).
    pub fn with_read_backup(mut self, read_backup: bool) -> Self {
        self.read_backup = read_backup;
        self
    }

    /// Positions of the primary-key columns, in column order.
    pub fn key_columns(&self) -> Vec<usize> {
        (0..self.columns.len())
            .filter(|&i| self.columns[i].primary_key)
            .collect()
    }

    /// The position of the column called `name`.
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    /// Decodes a whole row of this table received from another node (a u16 count, then the
    /// values, as [`encode_values`] writes them) onto the end of `values`, and checks it as it
    /// goes: one value per column, each of its column's type (a Varchar or Varbinary no longer
    /// than the column allows), NULL only in a nullable column. A row that does not fit is a
    /// decode error that says what does not match; `values` may then hold part of it.
    pub fn decode_row_into(
        &self,
        r: &mut Reader<'_>,
        values: &mut Vec<Value>,
    ) -> Result<(), DecodeError> {
        let count = usize::from(r.u16()?);
        if count != self.columns.len() {
            return Err(r.error(format!(
                "row of {count} values, table {} has {} columns",
                self.name,
                self.columns.len()
            )));
        }
        values.reserve_exact(count);
        for column in &self.columns {
            // Checked inside the decode's own match on the tag: checking the built value between
            // its decode and its push sent it through memory and cost TCP batch_pk 1000 ~14 %.
            values.push(Value::decode_for(r, column)?);
        }
        Ok(())
    }

    /// Checks the definition itself: names, lengths, a non-empty primary key that is not
    /// nullable. Returns NDB's error code and a message.
    pub fn validate(&self) -> Result<(), (u32, String)> {
        if self.name.is_empty() || self.name.len() > NAME_BYTES_MAX {
            return Err((
                4241,
                format!("table name must be 1..={NAME_BYTES_MAX} bytes"),
            ));
        }
        if self.columns.is_empty() || self.columns.len() > COLUMNS_MAX {
            return Err((4317, format!("a table needs 1..={COLUMNS_MAX} columns")));
        }
        for (i, c) in self.columns.iter().enumerate() {
            if c.name.is_empty() || c.name.len() > NAME_BYTES_MAX {
                return Err((
                    4241,
                    format!("column {i}: name must be 1..={NAME_BYTES_MAX} bytes"),
                ));
            }
            if self.columns[..i].iter().any(|o| o.name == c.name) {
                return Err((721, format!("column name {} is used twice", c.name)));
            }
            if let ColumnType::Varchar(n) | ColumnType::Varbinary(n) = c.column_type {
                if n == 0 || n > COLUMN_BYTES_MAX {
                    return Err((
                        738,
                        format!("column {}: length must be 1..={COLUMN_BYTES_MAX}", c.name),
                    ));
                }
            }
            if let ColumnType::Char(n) | ColumnType::Binary(n) = c.column_type {
                if n == 0 || n > FIXED_BYTES_MAX {
                    return Err((
                        738,
                        format!("column {}: length must be 1..={FIXED_BYTES_MAX}", c.name),
                    ));
                }
            }
            if let ColumnType::Bit(n) = c.column_type {
                if n == 0 || n > BIT_MAX {
                    return Err((738, format!("column {}: BIT of 1..={BIT_MAX} bits", c.name)));
                }
            }
            if let ColumnType::Decimal(p, s) = c.column_type {
                if !crate::decimal::valid_type(p, s) {
                    return Err((
                        738,
                        format!(
                            "column {}: DECIMAL({p},{s}): precision 1..={}, scale 0..={} and at most the precision",
                            c.name,
                            crate::decimal::PRECISION_MAX,
                            crate::decimal::SCALE_MAX
                        ),
                    ));
                }
            }
            if let ColumnType::Datetime(fsp) | ColumnType::Timestamp(fsp) | ColumnType::Time(fsp) =
                c.column_type
            {
                if fsp > FSP_MAX {
                    return Err((
                        738,
                        format!(
                            "column {}: at most {FSP_MAX} fraction digits, not {fsp}",
                            c.name
                        ),
                    ));
                }
            }
            c.validate_elements()?;
            if c.auto_increment
                && (!c.column_type.is_integer()
                    || self.columns[..i].iter().any(|o| o.auto_increment))
            {
                return Err((
                    4335,
                    format!(
                        "column {}: only one auto-increment column per table, of an integer type",
                        c.name
                    ),
                ));
            }
            if c.primary_key && crate::blob::size_of(c.column_type).is_some() {
                return Err((
                    4264,
                    format!(
                        "column {} is {} and cannot be in the primary key",
                        c.name, c.column_type
                    ),
                ));
            }
            if c.primary_key && c.nullable {
                return Err((
                    740,
                    format!("Nullable primary key not supported: column {}", c.name),
                ));
            }
        }
        if !self.columns.iter().any(|c| c.primary_key) {
            return Err((4327, "a table needs a primary key".to_string()));
        }
        let elements_bytes: usize = (self.columns.iter())
            .flat_map(|c| &c.elements)
            .map(|e| 2 + e.len())
            .sum();
        if elements_bytes > ELEMENTS_BYTES_MAX {
            return Err((
                738,
                format!(
                    "the ENUM elements' and SET members' names take {elements_bytes} bytes, \
                     at most {ELEMENTS_BYTES_MAX} (2 each and their lengths)"
                ),
            ));
        }
        if self.row_bytes_max() > ROW_BYTES_MAX {
            return Err((
                738,
                format!(
                    "Record too big: at most {} bytes, limit {ROW_BYTES_MAX}",
                    self.row_bytes_max()
                ),
            ));
        }
        Ok(())
    }

    /// The largest encoded size of one row of this table.
    pub fn row_bytes_max(&self) -> usize {
        2 + self
            .columns
            .iter()
            .map(|c| Value::encoded_bytes_max(c.column_type))
            .sum::<usize>()
    }

    pub fn encode(&self, w: &mut Writer<'_>) {
        w.str16(&self.name).u16(self.columns.len() as u16);
        for c in &self.columns {
            let (tag, len) = match c.column_type {
                ColumnType::Int8 => (8, 0),
                ColumnType::UInt8 => (9, 0),
                ColumnType::Int16 => (10, 0),
                ColumnType::UInt16 => (11, 0),
                ColumnType::Int24 => (12, 0),
                ColumnType::UInt24 => (13, 0),
                ColumnType::Int32 => (1, 0),
                ColumnType::UInt32 => (2, 0),
                ColumnType::Int64 => (3, 0),
                ColumnType::UInt64 => (4, 0),
                ColumnType::Float64 => (5, 0),
                ColumnType::Varchar(n) => (6, n),
                ColumnType::Varbinary(n) => (7, n),
                ColumnType::Date => (14, 0),
                ColumnType::Datetime(fsp) => (15, u16::from(fsp)),
                ColumnType::Timestamp(fsp) => (16, u16::from(fsp)),
                ColumnType::Float32 => (17, 0),
                ColumnType::Char(n) => (18, n),
                ColumnType::Binary(n) => (19, n),
                ColumnType::Year => (20, 0),
                ColumnType::Bit(n) => (21, u16::from(n)),
                ColumnType::Decimal(p, s) => (22, u16::from(p) << 8 | u16::from(s)),
                ColumnType::Time(fsp) => (23, u16::from(fsp)),
                ColumnType::Blob(size) => (24, size.code()),
                ColumnType::Text(size) => (25, size.code()),
                ColumnType::Enum(n) => (26, n),
                ColumnType::Json => (28, 0),
                ColumnType::Set(n) => (27, u16::from(n)),
            };
            let flags = u8::from(c.nullable)
                | (u8::from(c.primary_key) << 1)
                | (u8::from(c.auto_increment) << 2);
            w.str16(&c.name).u8(tag).u16(len).u8(flags);
            // An ENUM's or SET's names: as many as its length says, which decode reads (a
            // definition that has more or fewer is refused by `validate`, which every path
            // runs before it sends or stores one; here it stays decodable).
            if matches!(tag, 26 | 27) {
                for i in 0..usize::from(len) {
                    w.str16(c.elements.get(i).map_or("", String::as_str));
                }
            }
        }
        w.u8(if self.read_backup {
            TABLE_FLAG_READ_BACKUP
        } else {
            0
        });
    }

    pub fn decode(r: &mut Reader<'_>) -> Result<TableDef, DecodeError> {
        let name = r.str16()?.to_string();
        let count = usize::from(r.u16()?);
        if count > COLUMNS_MAX {
            return Err(r.error(format!("{count} columns, at most {COLUMNS_MAX}")));
        }
        let mut columns = Vec::with_capacity(count);
        for _ in 0..count {
            let name = r.str16()?.to_string();
            let tag = r.u8()?;
            let len = r.u16()?;
            let flags = r.u8()?;
            let column_type = match tag {
                1 => ColumnType::Int32,
                2 => ColumnType::UInt32,
                3 => ColumnType::Int64,
                4 => ColumnType::UInt64,
                5 => ColumnType::Float64,
                6 => ColumnType::Varchar(len),
                7 => ColumnType::Varbinary(len),
                8 => ColumnType::Int8,
                9 => ColumnType::UInt8,
                10 => ColumnType::Int16,
                11 => ColumnType::UInt16,
                12 => ColumnType::Int24,
                13 => ColumnType::UInt24,
                14 => ColumnType::Date,
                15 | 16 => {
                    let fsp = u8::try_from(len)
                        .ok()
                        .filter(|&f| f <= FSP_MAX)
                        .ok_or_else(|| r.error(format!("{len} fraction digits")))?;
                    if tag == 15 {
                        ColumnType::Datetime(fsp)
                    } else {
                        ColumnType::Timestamp(fsp)
                    }
                }
                17 => ColumnType::Float32,
                18 => ColumnType::Char(len),
                19 => ColumnType::Binary(len),
                20 => ColumnType::Year,
                21 => ColumnType::Bit(
                    u8::try_from(len)
                        .ok()
                        .filter(|n| (1..=BIT_MAX).contains(n))
                        .ok_or_else(|| r.error(format!("BIT of {len} bits")))?,
                ),
                22 => {
                    let [p, s] = len.to_be_bytes();
                    if !crate::decimal::valid_type(p, s) {
                        return Err(r.error(format!("DECIMAL({p},{s})")));
                    }
                    ColumnType::Decimal(p, s)
                }
                23 => ColumnType::Time(
                    u8::try_from(len)
                        .ok()
                        .filter(|&f| f <= FSP_MAX)
                        .ok_or_else(|| r.error(format!("{len} fraction digits")))?,
                ),
                24 | 25 => {
                    let size = BlobSize::from_code(len)
                        .ok_or_else(|| r.error(format!("blob size code {len}")))?;
                    if tag == 24 {
                        ColumnType::Blob(size)
                    } else {
                        ColumnType::Text(size)
                    }
                }
                26 => ColumnType::Enum(len),
                27 => ColumnType::Set(
                    u8::try_from(len)
                        .ok()
                        .filter(|n| *n <= BIT_MAX)
                        .ok_or_else(|| r.error(format!("SET of {len} members")))?,
                ),
                28 => ColumnType::Json,
                t => return Err(r.error(format!("unknown column type tag {t}"))),
            };
            if flags & !7 != 0 {
                return Err(r.error(format!("unknown column flags {flags:#x}")));
            }
            let mut elements = Vec::new();
            if matches!(tag, 26 | 27) {
                // Each name takes two bytes at least: a count past the bytes left is refused
                // before anything is reserved for it.
                if usize::from(len) * 2 > r.remaining() {
                    return Err(r.error(format!("{len} names in {} bytes", r.remaining())));
                }
                elements.reserve_exact(usize::from(len));
                for _ in 0..len {
                    elements.push(r.str16()?.to_string());
                }
            }
            columns.push(ColumnDef {
                name,
                column_type,
                nullable: flags & 1 != 0,
                primary_key: flags & 2 != 0,
                auto_increment: flags & 4 != 0,
                elements,
            });
        }
        let flags = r.u8()?;
        if flags & !TABLE_FLAG_READ_BACKUP != 0 {
            return Err(r.error(format!("unknown table flags {flags:#x}")));
        }
        Ok(TableDef {
            name,
            columns,
            read_backup: flags & TABLE_FLAG_READ_BACKUP != 0,
        })
    }
}

/// One column value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Int32(i32),
    UInt32(u32),
    Int64(i64),
    UInt64(u64),
    Float64(f64),
    Varchar(String),
    Varbinary(Vec<u8>),
}

impl Value {
    /// The largest encoding of a value of type `t` (tag included).
    pub fn encoded_bytes_max(t: ColumnType) -> usize {
        match t {
            ColumnType::Varchar(n)
            | ColumnType::Varbinary(n)
            | ColumnType::Char(n)
            | ColumnType::Binary(n) => 3 + usize::from(n),
            ColumnType::Decimal(p, s) => 3 + crate::decimal::bin_size(p, s),
            ColumnType::Blob(_) | ColumnType::Text(_) | ColumnType::Json => {
                3 + crate::blob::LENGTH_BYTES + crate::blob::INLINE_BYTES
            }
            // By the carrier: 4 or 8 bytes, or a date or time type's text.
            t => match t.value_tag() {
                1 | 2 => 5,
                3..=5 => 9,
                _ => 3 + usize::from(t.temporal_bytes().unwrap_or(0)),
            },
        }
    }

    /// True when this value may be stored in a column of type `t` (NULL is checked separately).
    pub fn fits(&self, t: ColumnType) -> bool {
        match (self, t) {
            (Value::Null, _) => true,
            (Value::Int32(v), t) if t.value_tag() == 1 => t.admits(i128::from(*v)),
            (Value::UInt32(v), t) if t.value_tag() == 2 => t.admits(i128::from(*v)),
            (Value::Int64(_), ColumnType::Int64)
            | (Value::UInt64(_), ColumnType::UInt64)
            | (Value::Float64(_), ColumnType::Float64) => true,
            (Value::UInt64(v), t @ (ColumnType::Bit(_) | ColumnType::Set(_))) => {
                t.admits(i128::from(*v))
            }
            (&Value::Int64(v), ColumnType::Time(fsp)) => crate::time::is_value(v, fsp),
            (Value::Varbinary(b), ColumnType::Decimal(p, s)) => crate::decimal::is_value(b, p, s),
            // Bits, so that a NaN a single holds fits too.
            (Value::Float64(v), ColumnType::Float32) => {
                f64::from(*v as f32).to_bits() == v.to_bits()
            }
            (Value::Varchar(s), ColumnType::Varchar(n)) => s.len() <= usize::from(n),
            (Value::Varchar(s), t) if t.value_tag() == 6 => t.admits_text(s),
            (Value::Varbinary(b), ColumnType::Varbinary(n)) => b.len() <= usize::from(n),
            (Value::Varbinary(b), ColumnType::Binary(n)) => b.len() == usize::from(n),
            (
                Value::Varbinary(b),
                t @ (ColumnType::Blob(_) | ColumnType::Text(_) | ColumnType::Json),
            ) => crate::blob::size_of(t)
                .is_some_and(|size| crate::blob::head_length(b, size).is_some()),
            _ => false,
        }
    }

    /// Appends the value: a tag byte, then fixed-width little-endian data, or a u16 length and
    /// bytes for Varchar/Varbinary.
    pub fn encode(&self, w: &mut Writer<'_>) {
        match self {
            Value::Null => w.u8(0),
            Value::Int32(v) => w.u8(1).u32(*v as u32),
            Value::UInt32(v) => w.u8(2).u32(*v),
            Value::Int64(v) => w.u8(3).u64(*v as u64),
            Value::UInt64(v) => w.u8(4).u64(*v),
            Value::Float64(v) => w.u8(5).u64(v.to_bits()),
            Value::Varchar(s) => w.u8(6).str16(s),
            Value::Varbinary(b) => w.u8(7).bytes16(b),
        };
    }

    /// Decodes one value of `column`: a value of another type, a longer one than the column
    /// allows, or NULL in a NOT NULL column is an error that says so.
    #[inline]
    pub fn decode_for(r: &mut Reader<'_>, column: &ColumnDef) -> Result<Value, DecodeError> {
        let tag = r.u8()?;
        Ok(match (tag, column.column_type) {
            (0, _) if column.nullable => Value::Null,
            (1, ColumnType::Int32) => Value::Int32(r.u32()? as i32),
            (2, ColumnType::UInt32) => Value::UInt32(r.u32()?),
            (1 | 2, t) if t.is_narrow() && t.value_tag() == tag => {
                let raw = r.u32()?;
                let value = if tag == 1 {
                    Value::Int32(raw as i32)
                } else {
                    Value::UInt32(raw)
                };
                if !value.fits(t) {
                    return Err(r.error(misfit(column, &value)));
                }
                value
            }
            (3, ColumnType::Int64) => Value::Int64(r.u64()? as i64),
            (4, ColumnType::UInt64) => Value::UInt64(r.u64()?),
            (5, ColumnType::Float64) => Value::Float64(f64::from_bits(r.u64()?)),
            (6, ColumnType::Varchar(n)) => {
                let text = r.str16()?;
                if text.len() > usize::from(n) {
                    return Err(r.error(misfit(column, &Value::Varchar(text.to_string()))));
                }
                Value::Varchar(text.to_string())
            }
            (6, t) if t.value_tag() == 6 => {
                let text = r.str16()?;
                if !t.admits_text(text) {
                    return Err(r.error(misfit(column, &Value::Varchar(text.to_string()))));
                }
                Value::Varchar(text.to_string())
            }
            (7, ColumnType::Varbinary(n)) => {
                let bytes = r.bytes16()?;
                if bytes.len() > usize::from(n) {
                    return Err(r.error(misfit(column, &Value::Varbinary(bytes.to_vec()))));
                }
                Value::Varbinary(bytes.to_vec())
            }
            (tag, t) if t.value_tag() == tag => {
                // FLOAT, BINARY, BIT, DECIMAL, TIME: their carrier holds values they do not.
                let value = Value::decode_tagged(tag, r)?;
                if !value.fits(t) {
                    return Err(r.error(misfit(column, &value)));
                }
                value
            }
            (tag, _) => {
                let value = Value::decode_tagged(tag, r)?;
                return Err(r.error(misfit(column, &value)));
            }
        })
    }

    #[inline]
    pub fn decode(r: &mut Reader<'_>) -> Result<Value, DecodeError> {
        let tag = r.u8()?;
        Value::decode_tagged(tag, r)
    }

    /// The value whose tag, `tag`, was just read.
    #[inline]
    fn decode_tagged(tag: u8, r: &mut Reader<'_>) -> Result<Value, DecodeError> {
        Ok(match tag {
            0 => Value::Null,
            1 => Value::Int32(r.u32()? as i32),
            2 => Value::UInt32(r.u32()?),
            3 => Value::Int64(r.u64()? as i64),
            4 => Value::UInt64(r.u64()?),
            5 => Value::Float64(f64::from_bits(r.u64()?)),
            6 => Value::Varchar(r.str16()?.to_string()),
            7 => Value::Varbinary(r.bytes16()?.to_vec()),
            t => return Err(r.error(format!("unknown value tag {t}"))),
        })
    }

    /// Moves past one encoded value without building it, checking it as [`Value::decode`]
    /// would (so a value `skip` accepts, `decode` accepts).
    pub fn skip(r: &mut Reader<'_>) -> Result<(), DecodeError> {
        Value::skip_checking(r, true)
    }

    /// As [`Value::skip`], for bytes this process encoded from values itself (a stored row):
    /// a Varchar's UTF-8 is not checked again.
    pub fn skip_trusted(r: &mut Reader<'_>) -> Result<(), DecodeError> {
        Value::skip_checking(r, false)
    }

    fn skip_checking(r: &mut Reader<'_>, check_utf8: bool) -> Result<(), DecodeError> {
        match r.u8()? {
            0 => {}
            1 | 2 => {
                r.u32()?;
            }
            3..=5 => {
                r.u64()?;
            }
            6 if check_utf8 => {
                r.str16()?;
            }
            6 | 7 => {
                r.bytes16()?;
            }
            t => return Err(r.error(format!("unknown value tag {t}"))),
        }
        Ok(())
    }

    /// Bytes this value occupies in storage (its encoding).
    pub fn stored_bytes(&self) -> usize {
        match self {
            Value::Null => 1,
            Value::Int32(_) | Value::UInt32(_) => 5,
            Value::Int64(_) | Value::UInt64(_) | Value::Float64(_) => 9,
            Value::Varchar(s) => 3 + s.len(),
            Value::Varbinary(b) => 3 + b.len(),
        }
    }
}

/// Encodes a list of values with a u16 count.
pub fn encode_values(w: &mut Writer<'_>, values: &[Value]) {
    w.u16(values.len() as u16);
    for v in values {
        v.encode(w);
    }
}

/// Moves past a list written by [`encode_values`] (at most `max` values), checking every value
/// as [`decode_values`] would, and returns its bytes.
pub fn skip_values<'a>(r: &mut Reader<'a>, max: usize) -> Result<&'a [u8], DecodeError> {
    let start = r.rest();
    let count = usize::from(r.u16()?);
    if count > max {
        return Err(r.error(format!("{count} values, at most {max}")));
    }
    for _ in 0..count {
        Value::skip(r)?;
    }
    Ok(&start[..start.len() - r.rest().len()])
}

/// The canonical key of an encoded key (a list as [`encode_values`] writes it, already checked
/// by [`skip_values`]), borrowed from it: the values' bytes without the count. It accepts and
/// refuses exactly what [`encode_key`] does with the decoded values (4116 for the wrong number
/// of values, 4209 for a NULL or a value of the wrong type or length), and the bytes are the
/// ones `encode_key` writes.
pub fn canonical_key<'k>(
    def: &TableDef,
    key_columns: &[usize],
    encoded: &'k [u8],
) -> Result<&'k [u8], NdbError> {
    let malformed = || NdbError::with_detail(4000, "malformed key values");
    let mut r = Reader::new(encoded, "key");
    let count = usize::from(r.u16().map_err(|_| malformed())?);
    if count != key_columns.len() {
        return Err(NdbError::with_detail(
            4116,
            format!(
                "table {} has {} key columns, got {count}",
                def.name,
                key_columns.len(),
            ),
        ));
    }
    for &column in key_columns {
        let cdef = &def.columns[column];
        let wrong = || {
            NdbError::with_detail(
                4209,
                format!("key column {} is {}", cdef.name, cdef.column_type),
            )
        };
        let tag = r.u8().map_err(|_| malformed())?;
        let fits = match (tag, cdef.column_type) {
            (1, ColumnType::Int32) | (2, ColumnType::UInt32) => r.u32().is_ok(),
            (1, t) if t.is_narrow() && t.value_tag() == 1 => {
                r.u32().is_ok_and(|v| t.admits(i128::from(v as i32)))
            }
            (2, t) if t.is_narrow() && t.value_tag() == 2 => {
                r.u32().is_ok_and(|v| t.admits(i128::from(v)))
            }
            (3, ColumnType::Int64) | (4, ColumnType::UInt64) | (5, ColumnType::Float64) => {
                r.u64().is_ok()
            }
            (6, ColumnType::Varchar(n)) => r.str16().is_ok_and(|s| s.len() <= usize::from(n)),
            (6, t) if t.value_tag() == 6 => r.str16().is_ok_and(|s| t.admits_text(s)),
            (7, ColumnType::Varbinary(n)) => r.bytes16().is_ok_and(|b| b.len() <= usize::from(n)),
            (tag, t) if t.value_tag() == tag => {
                Value::decode_tagged(tag, &mut r).is_ok_and(|v| v.fits(t))
            }
            _ => false,
        };
        if !fits {
            return Err(wrong());
        }
    }
    r.finish().map_err(|_| malformed())?;
    Ok(&encoded[2..])
}

/// Decodes a list written by [`encode_values`], at most `max` values.
#[inline]
pub fn decode_values(r: &mut Reader<'_>, max: usize) -> Result<Vec<Value>, DecodeError> {
    let mut values = Vec::new();
    decode_values_into(r, max, &mut values)?;
    Ok(values)
}

/// Why `value` does not fit `column` (see [`TableDef::decode_row_into`]).
#[cold]
fn misfit(column: &ColumnDef, value: &Value) -> String {
    if matches!(value, Value::Null) {
        format!("NULL in NOT NULL column {}", column.name)
    } else {
        format!(
            "column {} is {}, got {value:?}",
            column.name, column.column_type
        )
    }
}

/// [`decode_values`] appending to `values` where it lies (an API node's result slot): a `Vec`
/// returned by value was copied into place by loads wider than the stores that had just
/// written it, a store-forwarding stall per row.
#[inline]
pub fn decode_values_into(
    r: &mut Reader<'_>,
    max: usize,
    values: &mut Vec<Value>,
) -> Result<(), DecodeError> {
    let count = usize::from(r.u16()?);
    if count > max {
        return Err(r.error(format!("{count} values, at most {max}")));
    }
    values.reserve_exact(count);
    for _ in 0..count {
        values.push(Value::decode(r)?);
    }
    Ok(())
}

macro_rules! wire_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $num:expr),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vmeta])* $variant = $num),+ }

        impl $name {
            /// The wire byte.
            pub fn to_u8(self) -> u8 { self as u8 }
            /// From the wire byte, `None` when unknown.
            pub fn from_u8(v: u8) -> Option<Self> {
                match v { $($num => Some($name::$variant),)+ _ => None }
            }
        }
    };
}

wire_enum!(
    /// How a read locks the row (NDB's LockMode).
    LockMode {
        /// Reads the last committed value; takes no lock and never waits.
        CommittedRead = 0,
        /// A shared lock held until the transaction ends.
        Read = 1,
        /// An exclusive lock held until the transaction ends.
        Exclusive = 2,
    }
);

wire_enum!(
    /// What `execute` does after sending the operations (NDB's ExecType).
    ExecType {
        /// Run the operations, keep locks and changes private to the transaction.
        NoCommit = 0,
        /// Run the operations and commit the transaction.
        Commit = 1,
        /// Undo everything the transaction did and release its locks.
        Rollback = 2,
    }
);

wire_enum!(
    /// What an operation error does to the transaction (NDB's AbortOption).
    AbortOption {
        /// The first failed operation aborts the whole transaction.
        AbortOnError = 0,
        /// A failed operation reports its error; the others go on.
        IgnoreError = 1,
    }
);

wire_enum!(
    /// The kind of a key operation.
    OperationType {
        Read = 0,
        Insert = 1,
        Update = 2,
        /// Insert, or overwrite if the row exists (NDB's writeTuple).
        Write = 3,
        Delete = 4,
    }
);

wire_enum!(
    /// The kind of a secondary index.
    IndexKind {
        /// A unique hash index: a hidden table keyed by the indexed columns.
        Unique = 1,
        /// An ordered index: one ordered structure per fragment, for range scans.
        Ordered = 2,
    }
);

/// Checks key values against the key columns' types (the API checks too; the node never trusts
/// it) and encodes them canonically: the encoding is the hash-index key and the distribution
/// key.
pub fn encode_key(
    def: &TableDef,
    key_columns: &[usize],
    key: &[Value],
    out: &mut Vec<u8>,
) -> Result<(), NdbError> {
    if key.len() != key_columns.len() {
        return Err(NdbError::with_detail(
            4116,
            format!(
                "table {} has {} key columns, got {}",
                def.name,
                key_columns.len(),
                key.len()
            ),
        ));
    }
    let mut w = Writer::new(out);
    for (&column, value) in key_columns.iter().zip(key) {
        let cdef = &def.columns[column];
        if *value == Value::Null || !value.fits(cdef.column_type) {
            return Err(NdbError::with_detail(
                4209,
                format!("key column {} is {}", cdef.name, cdef.column_type),
            ));
        }
        value.encode(&mut w);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def() -> TableDef {
        let mut note = ColumnDef::new("note", ColumnType::Varchar(4));
        note.nullable = true;
        TableDef::new(
            "t",
            vec![
                ColumnDef::key("id", ColumnType::UInt32),
                ColumnDef::new("n", ColumnType::Int64),
                note,
            ],
        )
    }

    fn decode_row(t: &TableDef, row: &[Value]) -> Result<Vec<Value>, String> {
        let mut bytes = Vec::new();
        encode_values(&mut Writer::new(&mut bytes), row);
        let mut r = Reader::new(&bytes, "row");
        let mut values = Vec::new();
        t.decode_row_into(&mut r, &mut values)
            .map_err(|e| e.reason)?;
        r.finish().map_err(|e| e.reason)?;
        Ok(values)
    }

    /// Validates `def`, encodes it, decodes it back the same; returns the encoding.
    fn valid_and_round_trips(def: &TableDef) -> Vec<u8> {
        assert_eq!(def.validate(), Ok(()));
        let mut bytes = Vec::new();
        def.encode(&mut Writer::new(&mut bytes));
        assert_eq!(
            TableDef::decode(&mut Reader::new(&bytes, "TableDef")).as_ref(),
            Ok(def)
        );
        bytes
    }

    #[test]
    fn a_row_of_the_table_decodes() {
        let t = def();
        for row in [
            vec![
                Value::UInt32(1),
                Value::Int64(-2),
                Value::Varchar("abcd".into()),
            ],
            vec![Value::UInt32(1), Value::Int64(-2), Value::Null],
        ] {
            assert_eq!(decode_row(&t, &row), Ok(row));
        }
    }

    #[test]
    fn a_row_that_does_not_fit_says_why() {
        let t = def();
        let cases: [(&[Value], &str); 4] = [
            (
                &[Value::UInt32(1)],
                "row of 1 values, table t has 3 columns",
            ),
            (
                &[Value::UInt32(1), Value::UInt64(2), Value::Null],
                "column n is Int64, got UInt64(2)",
            ),
            (
                &[Value::Null, Value::Int64(2), Value::Null],
                "NULL in NOT NULL column id",
            ),
            (
                &[
                    Value::UInt32(1),
                    Value::Int64(2),
                    Value::Varchar("abcde".into()),
                ],
                "column note is Varchar(4), got Varchar(\"abcde\")",
            ),
        ];
        for (row, message) in cases {
            assert_eq!(decode_row(&t, row), Err(message.to_string()));
        }
    }

    #[test]
    fn dates_and_times_in_their_one_form() {
        let fits = |t: ColumnType, text: &str| Value::Varchar(text.into()).fits(t);
        for ok in [
            "1000-01-01",
            "9999-12-31",
            "2024-02-29",
            "2000-02-29",
            "2023-12-01",
        ] {
            assert!(fits(ColumnType::Date, ok), "{ok}");
        }
        for bad in [
            "0999-12-31",
            "2023-02-29",
            "1900-02-29",
            "2023-13-01",
            "2023-00-10",
            "2023-04-31",
            "2023-4-30",
            "2023-04-30 ",
            "2023/04/30",
            "",
            "２０２３-04-30",
        ] {
            assert!(!fits(ColumnType::Date, bad), "{bad:?}");
        }
        assert!(fits(ColumnType::Datetime(0), "2023-04-30 23:59:59"));
        assert!(fits(ColumnType::Datetime(3), "2023-04-30 00:00:00.120"));
        assert!(!fits(ColumnType::Datetime(3), "2023-04-30 00:00:00.12"));
        assert!(!fits(ColumnType::Datetime(0), "2023-04-30 00:00:00.1"));
        assert!(!fits(ColumnType::Datetime(0), "2023-04-30 24:00:00"));
        assert!(!fits(ColumnType::Datetime(0), "2023-04-30T10:00:00"));
        assert!(!fits(ColumnType::Datetime(0), "2023-04-30 10:60:00"));
        assert!(fits(ColumnType::Timestamp(0), "1970-01-01 00:00:01"));
        assert!(fits(ColumnType::Timestamp(6), "2038-01-19 03:14:07.999999"));
        assert!(!fits(ColumnType::Timestamp(0), "1970-01-01 00:00:00"));
        assert!(!fits(ColumnType::Timestamp(0), "2038-01-19 03:14:08"));
        assert!(!Value::Int32(1).fits(ColumnType::Date));
        // The definition round-trips; 7 fraction digits is refused.
        let def = TableDef::new(
            "times",
            vec![
                ColumnDef::key("d", ColumnType::Date),
                ColumnDef::new("t", ColumnType::Datetime(6)),
                ColumnDef::nullable("s", ColumnType::Timestamp(0)),
            ],
        );
        valid_and_round_trips(&def);
        let seven = TableDef::new(
            "t7",
            vec![
                ColumnDef::key("d", ColumnType::Date),
                ColumnDef::new("t", ColumnType::Datetime(7)),
            ],
        );
        assert_eq!(seven.validate().map_err(|(code, _)| code), Err(738));
    }

    /// ENUM and SET: numbers and bits in range fit, the names round-trip with the definition
    /// and name the values, and a definition whose names do not match its type is refused.
    #[test]
    fn enum_and_set_columns() {
        let size = ColumnDef::enumeration("size", &["s", "m", "l"]);
        let tags = ColumnDef::set("tags", &["a", "b", "c"]).or_null();
        assert!(Value::UInt32(3).fits(size.column_type));
        assert!(!Value::UInt32(0).fits(size.column_type));
        assert!(!Value::UInt32(4).fits(size.column_type));
        assert!(!Value::Varchar("s".into()).fits(size.column_type));
        assert!(Value::UInt64(0b111).fits(tags.column_type));
        assert!(!Value::UInt64(0b1000).fits(tags.column_type));
        assert!(Value::UInt64(u64::MAX).fits(ColumnType::Set(64)));
        assert_eq!(size.value_of_text("m"), Ok(Value::UInt32(2)));
        assert_eq!(size.text_of(&Value::UInt32(3)).as_deref(), Some("l"));
        assert_eq!(size.text_of(&Value::UInt32(4)), None);
        assert_eq!(tags.value_of_text("c,a"), Ok(Value::UInt64(0b101)));
        assert_eq!(tags.value_of_text(""), Ok(Value::UInt64(0)));
        // Digits that name no element are a number, as MySQL reads them.
        assert_eq!(size.value_of_text("3"), Ok(Value::UInt32(3)));
        assert!(size.value_of_text("0").is_err());
        assert!(size.value_of_text("4").is_err());
        assert!(size.value_of_text("99999999999999999999999").is_err());
        assert_eq!(tags.value_of_text("5"), Ok(Value::UInt64(0b101)));
        assert!(tags.value_of_text("8").is_err());
        let numbered = ColumnDef::enumeration("n", &["10", "20"]);
        assert_eq!(
            numbered.value_of_text("20"),
            Ok(Value::UInt32(2)),
            "a name first"
        );
        assert_eq!(numbered.value_of_text("1"), Ok(Value::UInt32(1)));
        assert!(tags.value_of_text("a,,b").is_err());
        assert_eq!(tags.text_of(&Value::UInt64(0b110)).as_deref(), Some("b,c"));
        let def = TableDef::new(
            "shirts",
            vec![ColumnDef::key("id", ColumnType::UInt32), size.clone(), tags],
        );
        let bytes = valid_and_round_trips(&def);
        // Cut anywhere, the definition is refused, not misread.
        for cut in 0..bytes.len() {
            assert!(TableDef::decode(&mut Reader::new(&bytes[..cut], "TableDef")).is_err());
        }
        let refused = |column: ColumnDef| {
            let t = TableDef::new("t", vec![ColumnDef::key("id", ColumnType::UInt32), column]);
            t.validate().map_err(|(code, _)| code)
        };
        assert_eq!(refused(ColumnDef::enumeration("e", &[])), Err(738));
        assert_eq!(refused(ColumnDef::enumeration("e", &["x", "x"])), Err(721));
        assert_eq!(refused(ColumnDef::enumeration("e", &["x", ""])), Err(738));
        assert_eq!(refused(ColumnDef::set("e", &["x,y"])), Err(4000));
        let many: Vec<String> = (0..65).map(|i| format!("m{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(refused(ColumnDef::set("e", &many)), Err(738));
        // Before validation: no member past bit 63 is read, and the names encoded are as many
        // as the type says.
        assert!(ColumnDef::set("e", &many).value_of_text("m64").is_err());
        let mut short = ColumnDef::set("e", &["a", "b"]);
        short.elements.pop();
        let t = TableDef::new("t", vec![ColumnDef::key("id", ColumnType::UInt32), short]);
        let mut bytes = Vec::new();
        t.encode(&mut Writer::new(&mut bytes));
        let back = TableDef::decode(&mut Reader::new(&bytes, "TableDef")).expect("decodes");
        assert_eq!(back.columns[1].elements, ["a", ""]);
        assert!(!back.read_backup);
        let mut unnamed = size;
        unnamed.elements.pop();
        assert_eq!(refused(unnamed), Err(4000));
        let mut named = ColumnDef::new("n", ColumnType::UInt8);
        named.elements.push("x".into());
        assert_eq!(refused(named), Err(4000));
        let long: Vec<String> = (0..40).map(|i| format!("{i:0>250}")).collect();
        let long: Vec<&str> = long.iter().map(String::as_str).collect();
        assert_eq!(refused(ColumnDef::enumeration("e", &long)), Err(738));
    }

    /// JSON is a LONGTEXT to the data node: a head in the row, its tag round-trips.
    #[test]
    fn json_columns_are_longtext_to_the_data_node() {
        assert_eq!(crate::blob::size_of(ColumnType::Json), Some(BlobSize::Long));
        let head = crate::blob::head_of(&[b'1'; 300]);
        assert!(Value::Varbinary(head).fits(ColumnType::Json));
        assert!(!Value::Varchar("{}".into()).fits(ColumnType::Json));
        let def = TableDef::new(
            "docs",
            vec![
                ColumnDef::key("id", ColumnType::UInt32),
                ColumnDef::nullable("doc", ColumnType::Json),
            ],
        );
        valid_and_round_trips(&def);
        let keyed = TableDef::new("k", vec![ColumnDef::key("doc", ColumnType::Json)]);
        assert_eq!(keyed.validate().map_err(|(code, _)| code), Err(4264));
    }

    #[test]
    fn mysql_types_in_their_one_form() {
        let def = TableDef::new(
            "fixed",
            vec![
                ColumnDef::key("c", ColumnType::Char(4)),
                ColumnDef::key("y", ColumnType::Year),
                ColumnDef::new("f", ColumnType::Float32),
                ColumnDef::new("b", ColumnType::Binary(2)),
                ColumnDef::nullable("bits", ColumnType::Bit(5)),
            ],
        );
        valid_and_round_trips(&def);
        let good = [
            Value::Varchar("ab  ".into()),
            Value::UInt32(1901),
            Value::Float64(f64::from(0.1f32)),
            Value::Varbinary(vec![1, 0]),
            Value::UInt64(31),
        ];
        assert_eq!(decode_row(&def, &good), Ok(good.to_vec()));
        // Each value one step out of its type's form, refused in a row and (the first two, key
        // columns) in a key.
        let bad: [(usize, Value, &str); 7] = [
            (0, Value::Varchar("ab".into()), "column c is Char(4)"),
            (1, Value::UInt32(1900), "column y is Year"),
            (1, Value::UInt32(2156), "column y is Year"),
            (2, Value::Float64(0.1), "column f is Float32"),
            (3, Value::Varbinary(vec![1]), "column b is Binary(2)"),
            (4, Value::UInt64(32), "column bits is Bit(5)"),
            (4, Value::UInt32(1), "column bits is Bit(5)"),
        ];
        for (column, value, message) in bad {
            let mut row = good.to_vec();
            row[column] = value.clone();
            let got = decode_row(&def, &row);
            assert!(
                got.as_ref().is_err_and(|e| e.contains(message)),
                "{value:?}: {got:?}"
            );
            if column < 2 {
                let mut key = vec![good[0].clone(), good[1].clone()];
                key[column] = value;
                let mut encoded = Vec::new();
                encode_values(&mut Writer::new(&mut encoded), &key);
                let refused = canonical_key(&def, &[0, 1], &encoded).map_err(|e| e.code);
                assert_eq!(refused, Err(4209));
                assert_eq!(
                    encode_key(&def, &[0, 1], &key, &mut Vec::new()).map_err(|e| e.code),
                    Err(4209)
                );
            }
        }
        assert!(Value::UInt32(0).fits(ColumnType::Year));
        assert!(Value::Float64(f64::NAN).fits(ColumnType::Float32));
        assert!(!Value::Float64(1e39).fits(ColumnType::Float32));
        assert!(Value::UInt64(u64::MAX).fits(ColumnType::Bit(64)));
        // `padded` writes the one form.
        let t = ColumnType::Char(4);
        assert_eq!(t.padded(Value::Varchar("ab".into())), good[0]);
        assert_eq!(
            ColumnType::Binary(2).padded(Value::Varbinary(vec![1])),
            good[3]
        );
        assert_eq!(ColumnType::Float32.padded(Value::Float64(0.1)), good[2]);
        // Padded text orders as PAD SPACE compares: "a" after "a\t".
        assert!(b"a   ".as_slice() > b"a\t  ".as_slice());
        // DECIMAL and TIME: their text makes their one form; others are refused.
        let dec = ColumnType::Decimal(5, 2);
        let price = dec.value_of_text("-123.456").expect("in range");
        assert_eq!(dec.text_of(&price).as_deref(), Some("-123.46"));
        assert!(price.fits(dec) && !Value::Varbinary(vec![0; 3]).fits(dec));
        assert!(dec.value_of_text("1000").is_err());
        let time = ColumnType::Time(1);
        let at = time.value_of_text("-10:00:00.5").expect("a time");
        assert_eq!(at, Value::Int64(-36_000_500_000));
        assert_eq!(time.text_of(&at).as_deref(), Some("-10:00:00.5"));
        assert!(!Value::Int64(1).fits(time) && time.text_of(&Value::Int64(1)).is_none());
        let def = TableDef::new(
            "money",
            vec![
                ColumnDef::key("d", dec),
                ColumnDef::new("t", time),
                ColumnDef::new("big", ColumnType::Decimal(65, 30)),
            ],
        );
        valid_and_round_trips(&def);
        // Lengths past MySQL's, and a BIT of 0 or 65 bits, are refused.
        for t in [
            ColumnType::Decimal(66, 0),
            ColumnType::Decimal(5, 6),
            ColumnType::Decimal(40, 31),
            ColumnType::Time(7),
            ColumnType::Char(256),
            ColumnType::Binary(0),
            ColumnType::Bit(0),
            ColumnType::Bit(65),
        ] {
            let d = TableDef::new(
                "t",
                vec![
                    ColumnDef::key("k", ColumnType::Int32),
                    ColumnDef::new("x", t),
                ],
            );
            assert_eq!(d.validate().map_err(|(code, _)| code), Err(738), "{t}");
        }
    }

    #[test]
    fn padding_a_float_out_of_a_singles_range_does_not_make_an_infinity() {
        // 1e39 is no single (refused as it is); rounding it must not turn it into +inf, which
        // a FLOAT column would then take (MySQL refuses it, or clamps it to ±FLT_MAX).
        for v in [1e39, -1e39, f64::MAX] {
            let padded = ColumnType::Float32.padded(Value::Float64(v));
            assert!(
                !padded.fits(ColumnType::Float32),
                "{v} padded to {padded:?}"
            );
        }
        // An infinity and the largest single stay as they are.
        for v in [f64::INFINITY, f64::from(f32::MAX)] {
            assert_eq!(
                ColumnType::Float32.padded(Value::Float64(v)),
                Value::Float64(v)
            );
        }
    }
}
