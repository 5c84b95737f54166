//! CSV as MySQL's LOAD DATA and NDB's `ndb_import` read it, with their options: fields
//! terminated by (default tab), enclosed or optionally enclosed by (default none), escaped by
//! (default backslash), lines terminated by (default newline).
//!
//! - An escape before `0 b n r t Z` is NUL, backspace, newline, carriage return, tab, ^Z;
//!   `\N` alone is NULL; before any other byte, that byte (a terminator or quote included).
//! - An enclosed field runs to its closing quote; a doubled quote inside is one quote, and
//!   terminators inside are data. With an enclosing quote set, an unquoted `NULL` is NULL.
//! - Each record knows the line (counting newline bytes, from 1) where it starts, so every
//!   error names a line. Records are read from a buffered stream a chunk at a time; one record
//!   may be at most [`RECORD_BYTES_MAX`] long.

use std::io::Read;

/// The longest record read: a longer one (an unclosed quote, say) is an error at its line.
pub const RECORD_BYTES_MAX: usize = 1 << 20;
/// Bytes read from the file at a time.
const READ_CHUNK_BYTES: usize = 256 * 1024;

const _: () = assert!(READ_CHUNK_BYTES <= RECORD_BYTES_MAX);

/// The file's format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CsvFormat {
    pub fields_terminated_by: Vec<u8>,
    /// The quote that may enclose a field (enclosed and optionally enclosed read the same).
    pub fields_enclosed_by: Option<u8>,
    pub fields_escaped_by: Option<u8>,
    pub lines_terminated_by: Vec<u8>,
}

impl Default for CsvFormat {
    /// LOAD DATA's and ndb_import's defaults.
    fn default() -> Self {
        CsvFormat {
            fields_terminated_by: b"\t".to_vec(),
            fields_enclosed_by: None,
            fields_escaped_by: Some(b'\\'),
            lines_terminated_by: b"\n".to_vec(),
        }
    }
}

/// One field: its bytes, or `None` for NULL.
pub type Field = Option<Vec<u8>>;

/// A record, or why none could be read, with the line it starts at.
#[derive(Debug, PartialEq, Eq)]
pub struct Record {
    pub line: u64,
    pub fields: Result<Vec<Field>, String>,
}

/// Reads records from `input` in `format`.
#[derive(Debug)]
pub struct CsvReader<R> {
    input: R,
    format: CsvFormat,
    buffer: Vec<u8>,
    /// Where the next record starts in `buffer`.
    start: usize,
    at_eof: bool,
    /// The line `buffer[start]` is on.
    line: u64,
    /// Bytes of the input consumed by the records returned so far.
    consumed_total: u64,
}

/// What parsing at the start of the buffer found.
enum Parsed {
    /// A record that took `consumed` bytes.
    Record { consumed: usize, fields: Vec<Field> },
    /// The record goes on past the bytes read so far.
    Incomplete,
    /// A bad record: skip `consumed` bytes and report `message`.
    Bad { consumed: usize, message: String },
}

impl<R: Read> CsvReader<R> {
    pub fn new(input: R, format: CsvFormat) -> Self {
        CsvReader {
            input,
            format,
            buffer: Vec::new(),
            start: 0,
            at_eof: false,
            line: 1,
            consumed_total: 0,
        }
    }

    /// The line the next record starts on.
    pub fn next_line(&self) -> u64 {
        self.line
    }

    /// Bytes of the input consumed by the records returned so far (for a progress bar).
    pub fn bytes_consumed(&self) -> u64 {
        self.consumed_total
    }

    /// The next record, `Ok(None)` at the end, or the read error.
    pub fn next_record(&mut self) -> std::io::Result<Option<Record>> {
        loop {
            let available = &self.buffer[self.start..];
            if available.is_empty() && self.at_eof {
                return Ok(None);
            }
            let parsed = if available.is_empty() {
                Parsed::Incomplete
            } else {
                parse_record(available, self.at_eof, &self.format)
            };
            let (consumed, fields) = match parsed {
                Parsed::Record { consumed, fields } => (consumed, Ok(fields)),
                Parsed::Bad { consumed, message } => (consumed, Err(message)),
                Parsed::Incomplete if available.len() >= RECORD_BYTES_MAX => {
                    let message = format!(
                        "a record of more than {RECORD_BYTES_MAX} bytes (an unclosed quote?)"
                    );
                    // Skip to the end of the physical line, to go on after it.
                    let consumed = available
                        .iter()
                        .position(|&b| b == b'\n')
                        .map_or(available.len(), |i| i + 1);
                    (consumed, Err(message))
                }
                Parsed::Incomplete => {
                    self.fill()?;
                    continue;
                }
            };
            let line = self.line;
            let taken = &self.buffer[self.start..self.start + consumed];
            self.line += taken.iter().filter(|&&b| b == b'\n').count() as u64;
            self.start += consumed;
            self.consumed_total += consumed as u64;
            return Ok(Some(Record { line, fields }));
        }
    }

    /// Reads another chunk, dropping the bytes already consumed.
    fn fill(&mut self) -> std::io::Result<()> {
        self.buffer.drain(..self.start);
        self.start = 0;
        let old_len = self.buffer.len();
        self.buffer.resize(old_len + READ_CHUNK_BYTES, 0);
        let read = loop {
            match self.input.read(&mut self.buffer[old_len..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.buffer.truncate(old_len);
                    return Err(e);
                }
            }
        };
        self.buffer.truncate(old_len + read);
        self.at_eof = read == 0;
        Ok(())
    }
}

/// Parses one record at the start of `bytes`.
fn parse_record(bytes: &[u8], at_eof: bool, format: &CsvFormat) -> Parsed {
    let mut fields = Vec::new();
    let mut at = 0;
    loop {
        let field = match parse_field(&bytes[at..], format) {
            FieldEnd::Incomplete if at_eof => {
                // The last record without its line terminator, or an unclosed quote.
                match parse_field_at_eof(&bytes[at..], format) {
                    Ok(field) => {
                        fields.push(field);
                        return Parsed::Record {
                            consumed: bytes.len(),
                            fields,
                        };
                    }
                    Err(message) => {
                        return Parsed::Bad {
                            consumed: bytes.len(),
                            message,
                        }
                    }
                }
            }
            FieldEnd::Incomplete => return Parsed::Incomplete,
            FieldEnd::Bad(message) => {
                // Go on after the line's terminator.
                let rest = &bytes[at..];
                return match find(rest, &format.lines_terminated_by) {
                    Some(i) => Parsed::Bad {
                        consumed: at + i + format.lines_terminated_by.len(),
                        message,
                    },
                    None if at_eof => Parsed::Bad {
                        consumed: bytes.len(),
                        message,
                    },
                    None => Parsed::Incomplete,
                };
            }
            field => field,
        };
        match field {
            FieldEnd::Field {
                value,
                consumed,
                end_of_line,
            } => {
                fields.push(value);
                at += consumed;
                if end_of_line {
                    return Parsed::Record {
                        consumed: at,
                        fields,
                    };
                }
            }
            FieldEnd::Incomplete | FieldEnd::Bad(_) => return Parsed::Incomplete,
        }
    }
}

/// How a field ended.
enum FieldEnd {
    /// A field and its terminator (`end_of_line` when that was the line terminator).
    Field {
        value: Field,
        consumed: usize,
        end_of_line: bool,
    },
    /// No terminator in the bytes read.
    Incomplete,
    Bad(String),
}

/// Parses one field and its terminator at the start of `bytes`.
fn parse_field(bytes: &[u8], format: &CsvFormat) -> FieldEnd {
    let quote = format.fields_enclosed_by;
    if let (Some(q), Some(&first)) = (quote, bytes.first()) {
        if first == q {
            return parse_enclosed(bytes, q, format);
        }
    }
    let mut value = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        if let Some(end) = terminator_at(bytes, at, format) {
            return FieldEnd::Field {
                value: unenclosed_value(value, bytes, at, format),
                consumed: at + end.len,
                end_of_line: end.end_of_line,
            };
        }
        let byte = bytes[at];
        if Some(byte) == format.fields_escaped_by {
            let Some(&next) = bytes.get(at + 1) else {
                return FieldEnd::Incomplete;
            };
            value.push(unescape(next));
            at += 2;
        } else {
            value.push(byte);
            at += 1;
        }
    }
    FieldEnd::Incomplete
}

/// The last field of a file that does not end with a line terminator.
fn parse_field_at_eof(bytes: &[u8], format: &CsvFormat) -> Result<Field, String> {
    let mut padded = bytes.to_vec();
    padded.extend_from_slice(&format.lines_terminated_by);
    match parse_field(&padded, format) {
        FieldEnd::Field { value, .. } => Ok(value),
        FieldEnd::Bad(message) => Err(message),
        FieldEnd::Incomplete => Err(match format.fields_enclosed_by {
            Some(q) if bytes.first() == Some(&q) => {
                format!("no closing {} before the end of the file", q as char)
            }
            _ => "an escape character at the end of the file".to_string(),
        }),
    }
}

/// `\N` alone, or (with an enclosing quote set) an unquoted `NULL`, is NULL.
fn unenclosed_value(value: Vec<u8>, bytes: &[u8], end: usize, format: &CsvFormat) -> Field {
    let raw = &bytes[..end];
    let escaped_null = format
        .fields_escaped_by
        .is_some_and(|e| raw.len() == 2 && raw[0] == e && raw[1] == b'N');
    let word_null = format.fields_enclosed_by.is_some() && raw == b"NULL";
    if escaped_null || word_null {
        None
    } else {
        Some(value)
    }
}

/// A field that starts with the quote `q`.
fn parse_enclosed(bytes: &[u8], q: u8, format: &CsvFormat) -> FieldEnd {
    let mut value = Vec::new();
    let mut at = 1;
    loop {
        let Some(&byte) = bytes.get(at) else {
            return FieldEnd::Incomplete;
        };
        if byte == q {
            if bytes.get(at + 1) == Some(&q) {
                value.push(q);
                at += 2;
                continue;
            }
            if at + 1 >= bytes.len() {
                return FieldEnd::Incomplete;
            }
            return match terminator_at(bytes, at + 1, format) {
                Some(end) => FieldEnd::Field {
                    value: Some(value),
                    consumed: at + 1 + end.len,
                    end_of_line: end.end_of_line,
                },
                None if partial_terminator(&bytes[at + 1..], format) => FieldEnd::Incomplete,
                None => FieldEnd::Bad(format!(
                    "a closing {} followed by {:?}, not a field or line terminator",
                    q as char,
                    bytes[at + 1] as char
                )),
            };
        }
        if Some(byte) == format.fields_escaped_by {
            let Some(&next) = bytes.get(at + 1) else {
                return FieldEnd::Incomplete;
            };
            value.push(unescape(next));
            at += 2;
            continue;
        }
        value.push(byte);
        at += 1;
    }
}

/// A terminator found at a position.
struct Terminator {
    len: usize,
    end_of_line: bool,
}

/// The field or line terminator starting at `bytes[at]`, if any (the line terminator wins when
/// both match).
fn terminator_at(bytes: &[u8], at: usize, format: &CsvFormat) -> Option<Terminator> {
    let rest = &bytes[at..];
    if rest.starts_with(&format.lines_terminated_by) {
        return Some(Terminator {
            len: format.lines_terminated_by.len(),
            end_of_line: true,
        });
    }
    if rest.starts_with(&format.fields_terminated_by) {
        return Some(Terminator {
            len: format.fields_terminated_by.len(),
            end_of_line: false,
        });
    }
    None
}

/// True when `rest` is a proper prefix of a terminator: more bytes may complete it.
fn partial_terminator(rest: &[u8], format: &CsvFormat) -> bool {
    [&format.lines_terminated_by, &format.fields_terminated_by]
        .iter()
        .any(|t| t.len() > rest.len() && t.starts_with(rest))
}

/// LOAD DATA's escape sequences.
fn unescape(byte: u8) -> u8 {
    match byte {
        b'0' => 0,
        b'b' => 8,
        b'n' => b'\n',
        b'r' => b'\r',
        b't' => b'\t',
        b'Z' => 26,
        other => other,
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// An option value as NDB's tools take it, with C escapes (`\t`, `\n`, `\r`, `\\`, `\"`,
/// `\'`, `\0`) read.
pub fn unescape_option(text: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut bytes = text.bytes();
    while let Some(byte) = bytes.next() {
        if byte != b'\\' {
            out.push(byte);
            continue;
        }
        match bytes.next() {
            Some(b'\\') | None => out.push(b'\\'),
            Some(other) => out.push(unescape(other)),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(text: &str) -> Field {
        Some(text.as_bytes().to_vec())
    }

    /// Reads `input` in `format` (with a tiny chunk, to cross chunk ends) and compares.
    fn check(input: &[u8], format: &CsvFormat, expected: &[(u64, Result<Vec<Field>, &str>)]) {
        let mut reader = CsvReader::new(input, format.clone());
        let mut got = Vec::new();
        while let Some(record) = reader.next_record().expect("read") {
            got.push(record);
        }
        assert_eq!(got.len(), expected.len(), "{got:?}");
        for (record, (line, fields)) in got.iter().zip(expected) {
            assert_eq!(record.line, *line, "{record:?}");
            match (&record.fields, fields) {
                (Ok(a), Ok(b)) => assert_eq!(a, b),
                (Err(message), Err(needle)) => assert!(message.contains(needle), "{message}"),
                _ => panic!("line {line}: got {record:?}, expected {fields:?}"),
            }
        }
    }

    fn csv() -> CsvFormat {
        CsvFormat {
            fields_terminated_by: b",".to_vec(),
            fields_enclosed_by: Some(b'"'),
            fields_escaped_by: Some(b'\\'),
            lines_terminated_by: b"\n".to_vec(),
        }
    }

    #[test]
    fn defaults_are_tab_separated_with_escapes() {
        check(
            b"1\ta b\t\\N\n2\tx\\ty\t\\\\\n",
            &CsvFormat::default(),
            &[
                (1, Ok(vec![f("1"), f("a b"), None])),
                (2, Ok(vec![f("2"), f("x\ty"), f("\\")])),
            ],
        );
    }

    #[test]
    fn quoted_fields_hold_terminators_and_doubled_quotes() {
        check(
            b"1,\"a,b\",\"say \"\"hi\"\"\"\n2,\"two\nlines\",NULL\n3,\"\",x",
            &csv(),
            &[
                (1, Ok(vec![f("1"), f("a,b"), f("say \"hi\"")])),
                (2, Ok(vec![f("2"), f("two\nlines"), None])),
                (4, Ok(vec![f("3"), f(""), f("x")])),
            ],
        );
    }

    #[test]
    fn bad_records_name_their_line_and_reading_goes_on() {
        check(
            b"1,\"a\"b,c\n2,ok\n3,\"open",
            &csv(),
            &[
                (1, Err("closing \" followed by 'b'")),
                (2, Ok(vec![f("2"), f("ok")])),
                (3, Err("no closing \"")),
            ],
        );
    }

    #[test]
    fn multi_byte_terminators() {
        let format = CsvFormat {
            fields_terminated_by: b"||".to_vec(),
            lines_terminated_by: b"\r\n".to_vec(),
            ..csv()
        };
        check(
            b"a||b\r\n\"c\"||d|e\r\n",
            &format,
            &[
                (1, Ok(vec![f("a"), f("b")])),
                (2, Ok(vec![f("c"), f("d|e")])),
            ],
        );
    }

    #[test]
    fn records_cross_chunks() {
        let mut input = Vec::new();
        for i in 0..20_000 {
            input.extend_from_slice(format!("{i},\"name {i}\"\n").as_bytes());
        }
        let mut reader = CsvReader::new(input.as_slice(), csv());
        let mut count = 0u64;
        while let Some(record) = reader.next_record().expect("read") {
            count += 1;
            assert_eq!(record.line, count);
            let fields = record.fields.expect("a good record");
            assert_eq!(fields[1], f(&format!("name {}", count - 1)));
        }
        assert_eq!(count, 20_000);
    }

    #[test]
    fn option_escapes() {
        assert_eq!(unescape_option("\\t").unwrap(), b"\t");
        assert_eq!(unescape_option("\\r\\n").unwrap(), b"\r\n");
        assert_eq!(unescape_option(",").unwrap(), b",");
    }
}
