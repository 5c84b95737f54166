//! Values as text: how `ndb_select_all` prints them and how `ndb_import` reads them.
//!
//! Printed: integers and doubles in decimal (a double in the shortest form that reads back
//! the same), Varchar as its text, Varbinary as `0x` and hex digits, NULL as NDB's `[NULL]`;
//! with `--useHexFormat`, integers as NDB's `H'` and hex digits. Read: the same forms, each
//! checked against its column's type and length; a CHAR's text is padded with spaces and a
//! BINARY's bytes with zero bytes to the column's length, a FLOAT rounded to a single. DECIMAL
//! and TIME as MySQL writes them (`-12.50`, `-01:30:00.5`).

use std::fmt::Write;

use rndb_api::{ColumnDef, ColumnType, Value};

/// How `ndb_select_all` prints integers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntegerFormat {
    Decimal,
    /// NDB's `--useHexFormat`: `H'` and the hex digits, zero-padded to the type's width.
    Hex,
}

/// Appends `value`, of `column`, as `ndb_select_all` prints it.
pub fn format_value(out: &mut String, value: &Value, column: &ColumnDef, integers: IntegerFormat) {
    let column_type = column.column_type;
    if let Some(text) = column.text_of(value) {
        // DECIMAL, TIME, ENUM and SET, as MySQL writes them.
        out.push_str(&text);
        return;
    }
    let hex = integers == IntegerFormat::Hex;
    // The hex digits of a 32-bit carrier's type: 2 for TINYINT, 4 SMALLINT, 6 MEDIUMINT.
    let digits = match column_type {
        ColumnType::Int8 | ColumnType::UInt8 => 2,
        ColumnType::Int16 | ColumnType::UInt16 => 4,
        ColumnType::Int24 | ColumnType::UInt24 => 6,
        _ => 8,
    };
    let mask = |v: u32| u64::from(v) & ((1u64 << (4 * digits)) - 1);
    // Writing to a String cannot fail.
    let _ = match value {
        Value::Null => write!(out, "[NULL]"),
        Value::Int32(v) if hex => write!(out, "H'{:0digits$x}", mask(*v as u32)),
        Value::UInt32(v) if hex => write!(out, "H'{:0digits$x}", mask(*v)),
        Value::Int64(v) if hex => write!(out, "H'{:016x}", *v as u64),
        Value::UInt64(v) if hex => write!(out, "H'{v:016x}"),
        Value::Int32(v) => write!(out, "{v}"),
        Value::UInt32(v) => write!(out, "{v}"),
        Value::Int64(v) => write!(out, "{v}"),
        Value::UInt64(v) => write!(out, "{v}"),
        // A single's shortest form (0.1, not its double's 0.10000000149011612).
        Value::Float64(v) if column_type == ColumnType::Float32 => write!(out, "{}", *v as f32),
        Value::Float64(v) => write!(out, "{v}"),
        Value::Varchar(s) => write!(out, "{s}"),
        Value::Varbinary(bytes) => {
            out.push_str("0x");
            for byte in bytes {
                let _ = write!(out, "{byte:02x}");
            }
            Ok(())
        }
    };
}

/// Reads a CSV field (its bytes, unescaped) as a value of `column`. `None` is SQL NULL (`\N`
/// in the file). The error says what is wrong, naming the column.
pub fn parse_value(column: &ColumnDef, field: Option<&[u8]>) -> Result<Value, String> {
    let Some(bytes) = field else {
        if column.nullable {
            return Ok(Value::Null);
        }
        return Err(format!("column {}: NULL in a NOT NULL column", column.name));
    };
    if let ColumnType::Varbinary(max) | ColumnType::Binary(max) = column.column_type {
        return parse_varbinary(column, bytes, max).map(|v| column.column_type.padded(v));
    }
    if let Some(size) = rndb_protocol::blob::size_of(column.column_type) {
        return parse_blob(column, bytes, size);
    }
    let text = std::str::from_utf8(bytes).map_err(|e| {
        format!(
            "column {}: not UTF-8 (byte {} of the field)",
            column.name,
            e.valid_up_to() + 1
        )
    })?;
    let number = |kind: &str, e: &dyn std::fmt::Display| {
        format!("column {}: {text:?} is not {kind} ({e})", column.name)
    };
    match column.column_type {
        t if t.is_integer() || matches!(t, ColumnType::Year | ColumnType::Bit(_)) => {
            let kind = integer_kind(t);
            let v: i128 = text.parse().map_err(|e| number(kind, &e))?;
            if !t.admits(v) {
                return Err(number(kind, &"out of range"));
            }
            // In range, so each conversion holds.
            Ok(match t.value_tag() {
                1 => Value::Int32(v as i32),
                2 => Value::UInt32(v as u32),
                3 => Value::Int64(v as i64),
                _ => Value::UInt64(v as u64),
            })
        }
        ColumnType::Float64 => match text.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(Value::Float64(v)),
            Ok(_) => Err(format!("column {}: {text:?} is not finite", column.name)),
            Err(e) => Err(number("a DOUBLE", &e)),
        },
        // As MySQL: the text read as a double, then rounded to a single.
        ColumnType::Float32 => match text.parse::<f64>().map(|v| v as f32) {
            Ok(v) if v.is_finite() => Ok(Value::Float64(f64::from(v))),
            Ok(_) => Err(format!(
                "column {}: {text:?} is not a finite FLOAT",
                column.name
            )),
            Err(e) => Err(number("a FLOAT", &e)),
        },
        ColumnType::Char(n) if text.len() > usize::from(n) => Err(format!(
            "column {}: {} bytes, CHAR({n}) holds at most {n}",
            column.name,
            text.len()
        )),
        ColumnType::Char(_) => Ok(column.column_type.padded(Value::Varchar(text.to_string()))),
        ColumnType::Decimal(..)
        | ColumnType::Time(_)
        | ColumnType::Enum(_)
        | ColumnType::Set(_) => column
            .value_of_text(text)
            .map_err(|e| format!("column {}: {e}", column.name)),
        ColumnType::Varchar(max) if text.len() > usize::from(max) => Err(format!(
            "column {}: {} bytes, VARCHAR({max}) holds at most {max}",
            column.name,
            text.len()
        )),
        ColumnType::Varchar(_) => Ok(Value::Varchar(text.to_string())),
        t @ (ColumnType::Date | ColumnType::Datetime(_) | ColumnType::Timestamp(_)) => {
            if t.admits_text(text) {
                Ok(Value::Varchar(text.to_string()))
            } else {
                Err(format!(
                    "column {}: {text:?} is not a {} ({})",
                    column.name,
                    sql_name(t),
                    temporal_form(t)
                ))
            }
        }
        t => unreachable!("{t} is read above"),
    }
}

/// A date or time type's SQL name.
fn sql_name(t: ColumnType) -> String {
    match t {
        ColumnType::Date => "DATE".into(),
        ColumnType::Datetime(fsp) => format!("DATETIME({fsp})"),
        ColumnType::Timestamp(fsp) => format!("TIMESTAMP({fsp})"),
        t => t.to_string(),
    }
}

/// The one text form of a date or time type.
fn temporal_form(t: ColumnType) -> String {
    match t {
        ColumnType::Date => "YYYY-MM-DD".into(),
        ColumnType::Datetime(0) | ColumnType::Timestamp(0) => "YYYY-MM-DD hh:mm:ss".into(),
        ColumnType::Datetime(fsp) | ColumnType::Timestamp(fsp) => {
            format!("YYYY-MM-DD hh:mm:ss.{}", "f".repeat(usize::from(fsp)))
        }
        _ => String::new(),
    }
}

/// An integer type's SQL name, with its article.
fn integer_kind(t: ColumnType) -> &'static str {
    match t {
        ColumnType::Int8 => "a TINYINT",
        ColumnType::UInt8 => "a TINYINT UNSIGNED",
        ColumnType::Int16 => "a SMALLINT",
        ColumnType::UInt16 => "a SMALLINT UNSIGNED",
        ColumnType::Int24 => "a MEDIUMINT",
        ColumnType::UInt24 => "a MEDIUMINT UNSIGNED",
        ColumnType::Int32 => "an INT",
        ColumnType::UInt32 => "an INT UNSIGNED",
        ColumnType::Int64 => "a BIGINT",
        ColumnType::Year => "a YEAR (1901 to 2155, or 0)",
        ColumnType::Bit(_) => "a BIT value",
        _ => "a BIGINT UNSIGNED",
    }
}

/// A Varbinary or Binary field: `0x` and hex digits, or else the bytes as they are.
fn parse_varbinary(column: &ColumnDef, bytes: &[u8], max: u16) -> Result<Value, String> {
    let value = match bytes.strip_prefix(b"0x") {
        Some(hex) => decode_hex(hex)
            .ok_or_else(|| format!("column {}: bad hex digits after 0x", column.name))?,
        None => bytes.to_vec(),
    };
    if value.len() > usize::from(max) {
        let sql = match column.column_type {
            ColumnType::Binary(_) => "BINARY",
            _ => "VARBINARY",
        };
        return Err(format!(
            "column {}: {} bytes, {sql}({max}) holds at most {max}",
            column.name,
            value.len()
        ));
    }
    Ok(Value::Varbinary(value))
}

/// A BLOB field (`0x` and hex digits, or the bytes as they are) or a TEXT field (UTF-8), at
/// most its size's longest; a JSON field a JSON document.
fn parse_blob(column: &ColumnDef, bytes: &[u8], size: rndb_api::BlobSize) -> Result<Value, String> {
    let value = match column.column_type {
        ColumnType::Text(_) | ColumnType::Json => {
            let text = String::from_utf8(bytes.to_vec())
                .map_err(|e| format!("column {}: not UTF-8 ({e})", column.name))?;
            if column.column_type == ColumnType::Json {
                rndb_api::check_json(&text).map_err(|e| format!("column {}: {e}", column.name))?;
            }
            Value::Varchar(text)
        }
        _ => match bytes.strip_prefix(b"0x") {
            Some(hex) => Value::Varbinary(
                decode_hex(hex)
                    .ok_or_else(|| format!("column {}: bad hex digits after 0x", column.name))?,
            ),
            None => Value::Varbinary(bytes.to_vec()),
        },
    };
    let len = match &value {
        Value::Varchar(s) => s.len(),
        Value::Varbinary(b) => b.len(),
        _ => 0,
    };
    if len as u64 > size.max_bytes() {
        return Err(format!(
            "column {}: {len} bytes, {} holds at most {}",
            column.name,
            column.column_type,
            size.max_bytes()
        ));
    }
    Ok(value)
}

fn decode_hex(hex: &[u8]) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    hex.chunks(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(column_type: ColumnType) -> ColumnDef {
        ColumnDef::nullable("c", column_type)
    }

    fn check(column_type: ColumnType, field: Option<&[u8]>, expected: Result<Value, &str>) {
        let got = parse_value(&column(column_type), field);
        match (&got, &expected) {
            (Ok(v), Ok(e)) => assert_eq!(v, e),
            (Err(message), Err(needle)) => assert!(message.contains(needle), "{message}"),
            _ => panic!("{column_type} {field:?}: got {got:?}, expected {expected:?}"),
        }
    }

    #[test]
    fn parsing() {
        check(ColumnType::Int32, Some(b"-7"), Ok(Value::Int32(-7)));
        check(
            ColumnType::UInt32,
            Some(b"-7"),
            Err("is not an INT UNSIGNED"),
        );
        check(ColumnType::UInt32, Some(b"4294967296"), Err("out of range"));
        check(ColumnType::Int8, Some(b"-128"), Ok(Value::Int32(-128)));
        check(
            ColumnType::Int8,
            Some(b"128"),
            Err("\"128\" is not a TINYINT (out of range)"),
        );
        check(ColumnType::UInt16, Some(b"65535"), Ok(Value::UInt32(65535)));
        check(ColumnType::UInt16, Some(b"65536"), Err("SMALLINT UNSIGNED"));
        check(
            ColumnType::Int24,
            Some(b"-8388608"),
            Ok(Value::Int32(-8388608)),
        );
        check(
            ColumnType::UInt24,
            Some(b"16777216"),
            Err("MEDIUMINT UNSIGNED"),
        );
        check(
            ColumnType::Date,
            Some(b"2024-02-29"),
            Ok(Value::Varchar("2024-02-29".into())),
        );
        check(
            ColumnType::Date,
            Some(b"2023-02-29"),
            Err("\"2023-02-29\" is not a DATE (YYYY-MM-DD)"),
        );
        check(
            ColumnType::Datetime(2),
            Some(b"2023-02-28 10:00:00"),
            Err("not a DATETIME(2) (YYYY-MM-DD hh:mm:ss.ff)"),
        );
        check(ColumnType::Int64, Some(b"x"), Err("\"x\" is not a BIGINT"));
        check(
            ColumnType::UInt64,
            Some(b"18446744073709551615"),
            Ok(Value::UInt64(u64::MAX)),
        );
        check(ColumnType::Float64, Some(b"2.5"), Ok(Value::Float64(2.5)));
        let blob = ColumnType::Blob(rndb_api::BlobSize::Tiny);
        check(blob, Some(b"0x0aff"), Ok(Value::Varbinary(vec![10, 255])));
        check(
            blob,
            Some(&[7u8; 256]),
            Err("256 bytes, Blob(256,0,0) holds at most 255"),
        );
        let text = ColumnType::Text(rndb_api::BlobSize::Blob);
        check(text, Some("é".as_bytes()), Ok(Value::Varchar("é".into())));
        check(text, Some(b"\xff"), Err("not UTF-8"));
        check(ColumnType::Float64, Some(b"inf"), Err("not finite"));
        check(
            ColumnType::Varchar(3),
            Some(b"abc"),
            Ok(Value::Varchar("abc".into())),
        );
        check(
            ColumnType::Varchar(3),
            Some(b"abcd"),
            Err("4 bytes, VARCHAR(3)"),
        );
        check(
            ColumnType::Varchar(9),
            Some(b"a\xffb"),
            Err("not UTF-8 (byte 2"),
        );
        check(
            ColumnType::Varbinary(2),
            Some(b"0x0aff"),
            Ok(Value::Varbinary(vec![10, 255])),
        );
        check(ColumnType::Varbinary(2), Some(b"0xzz"), Err("bad hex"));
        check(
            ColumnType::Varbinary(2),
            Some(b"\xff"),
            Ok(Value::Varbinary(vec![255])),
        );
        check(ColumnType::Int32, None, Ok(Value::Null));
        let not_null = ColumnDef::new("n", ColumnType::Int32);
        assert!(parse_value(&not_null, None).is_err());
    }

    #[test]
    fn fixed_types_padded_and_ranged() {
        let char4 = ColumnType::Char(4);
        check(char4, Some(b"ab"), Ok(Value::Varchar("ab  ".into())));
        check(char4, Some(b"abcd"), Ok(Value::Varchar("abcd".into())));
        check(
            char4,
            Some(b"abcde"),
            Err("5 bytes, CHAR(4) holds at most 4"),
        );
        let binary3 = ColumnType::Binary(3);
        check(binary3, Some(b"0x0a"), Ok(Value::Varbinary(vec![10, 0, 0])));
        check(binary3, Some(b"0x01020304"), Err("4 bytes, BINARY(3)"));
        check(
            ColumnType::Float32,
            Some(b"0.1"),
            Ok(Value::Float64(f64::from(0.1f32))),
        );
        check(
            ColumnType::Float32,
            Some(b"1e39"),
            Err("not a finite FLOAT"),
        );
        check(ColumnType::Year, Some(b"2155"), Ok(Value::UInt32(2155)));
        check(ColumnType::Year, Some(b"0"), Ok(Value::UInt32(0)));
        check(
            ColumnType::Year,
            Some(b"1900"),
            Err("not a YEAR (1901 to 2155, or 0) (out of range)"),
        );
        check(ColumnType::Bit(3), Some(b"7"), Ok(Value::UInt64(7)));
        check(ColumnType::Bit(3), Some(b"8"), Err("out of range"));
        check(
            ColumnType::Bit(64),
            Some(b"18446744073709551615"),
            Ok(Value::UInt64(u64::MAX)),
        );
        for (column_type, input, text) in [
            (ColumnType::Decimal(6, 2), "-1234.567", "-1234.57"),
            (ColumnType::Time(1), "-1:30:00.5", "-01:30:00.5"),
        ] {
            let value = parse_value(&column(column_type), Some(input.as_bytes())).expect("a value");
            let mut out = String::new();
            format_value(&mut out, &value, &column(column_type), IntegerFormat::Hex);
            assert_eq!(out, text);
        }
        check(
            ColumnType::Decimal(6, 2),
            Some(b"12345"),
            Err("column c: \"12345\" is out of range for DECIMAL(6,2)"),
        );
        check(
            ColumnType::Time(0),
            Some(b"12:00"),
            Err("column c: \"12:00\" is not a TIME(0)"),
        );
        let mut out = String::new();
        format_value(
            &mut out,
            &Value::Float64(f64::from(0.1f32)),
            &column(ColumnType::Float32),
            IntegerFormat::Decimal,
        );
        assert_eq!(out, "0.1");
    }

    /// A JSON field is read as its text once it is one JSON document.
    #[test]
    fn json_fields_are_checked() {
        let doc = ColumnDef::nullable("doc", ColumnType::Json);
        assert_eq!(
            parse_value(&doc, Some(br#"{"a": [1, 2]}"#)),
            Ok(Value::Varchar(r#"{"a": [1, 2]}"#.into()))
        );
        let e = parse_value(&doc, Some(b"{a: 1}")).expect_err("not JSON");
        assert!(e.starts_with("column doc: Invalid JSON text: "), "{e}");
    }

    /// ENUM and SET values read and print by name, as MySQL writes them.
    #[test]
    fn enum_and_set_read_and_print_names() {
        let colour = ColumnDef::enumeration("colour", &["red", "green", "blue"]);
        let tags = ColumnDef::set("tags", &["a", "b", "c"]);
        for (column, input, value, text) in [
            (&colour, "green", Value::UInt32(2), "green"),
            (&tags, "c,a", Value::UInt64(0b101), "a,c"),
            (&tags, "", Value::UInt64(0), ""),
        ] {
            assert_eq!(
                parse_value(column, Some(input.as_bytes())),
                Ok(value.clone())
            );
            let mut out = String::new();
            format_value(&mut out, &value, column, IntegerFormat::Decimal);
            assert_eq!(out, text);
        }
        let e = parse_value(&colour, Some(b"Red")).expect_err("not an element");
        assert!(e.contains("column colour") && e.contains("\"Red\""), "{e}");
        let e = parse_value(&tags, Some(b"a,d")).expect_err("not a member");
        assert!(e.contains("\"d\" is not a member"), "{e}");
    }

    #[test]
    fn printing_reads_back() {
        let cases = [
            (Value::Int32(-7), ColumnType::Int32, "-7"),
            (
                Value::UInt64(u64::MAX),
                ColumnType::UInt64,
                "18446744073709551615",
            ),
            (Value::Float64(0.1), ColumnType::Float64, "0.1"),
            (Value::Varchar("a b".into()), ColumnType::Varchar(8), "a b"),
            (
                Value::Varbinary(vec![0, 171]),
                ColumnType::Varbinary(8),
                "0x00ab",
            ),
        ];
        for (value, column_type, text) in cases {
            let mut out = String::new();
            format_value(
                &mut out,
                &value,
                &column(column_type),
                IntegerFormat::Decimal,
            );
            assert_eq!(out, text);
            assert_eq!(
                parse_value(&column(column_type), Some(out.as_bytes())),
                Ok(value)
            );
        }
        for (value, column_type, text) in [
            (Value::Int32(-1), ColumnType::Int32, "H'ffffffff"),
            (Value::Int32(-1), ColumnType::Int8, "H'ff"),
            (Value::UInt32(258), ColumnType::UInt16, "H'0102"),
            (Value::Int32(-2), ColumnType::Int24, "H'fffffe"),
        ] {
            let mut out = String::new();
            format_value(&mut out, &value, &column(column_type), IntegerFormat::Hex);
            assert_eq!(out, text);
        }
    }

    #[test]
    fn a_float_is_rounded_as_mysql_stores_it() {
        // MySQL reads a FLOAT's text as a double, then rounds that to a single (as
        // `ColumnType::padded` does): 1.00000005960464478 reads as the double 1 + 2^-24, a tie
        // between two singles, which rounds to even, 1.0. Rounding the text straight to a
        // single gives 1 + 2^-23 instead.
        let text = "1.00000005960464478";
        let mysql = ColumnType::Float32.padded(Value::Float64(text.parse().expect("a double")));
        assert_eq!(mysql, Value::Float64(1.0));
        check(ColumnType::Float32, Some(text.as_bytes()), Ok(mysql));
    }
}
