//! RESP, the Redis protocol: requests parsed from a connection's input buffer (arrays of bulk
//! strings, or inline commands), replies written in RESP2 or RESP3.
//!
//! Every length a client sends is checked against a limit before anything is allocated for
//! it, so a connection holds at most [`REQUEST_BYTES_MAX`] of unparsed input.

use bytes::{Bytes, BytesMut};

/// The longest bulk string a request may carry, and so the longest string value: far below
/// what would let one client exhaust memory.
pub const BULK_BYTES_MAX: usize = 1024 * 1024;
/// The most arguments one request may have.
pub const ARGS_MAX: usize = 64 * 1024;
/// The longest inline command line.
pub const INLINE_BYTES_MAX: usize = 64 * 1024;
/// The most unparsed input a connection holds: past this without a complete request, the
/// client is told so and the connection closed.
pub const REQUEST_BYTES_MAX: usize = 16 * 1024 * 1024;

const _: () = assert!(BULK_BYTES_MAX + INLINE_BYTES_MAX <= REQUEST_BYTES_MAX);

/// A request that breaks the protocol: answered with this text, then the connection closes
/// (Redis does the same: the stream cannot be resynchronised).
#[derive(Debug, PartialEq, Eq)]
pub struct ProtocolError(pub String);

/// Parses one request from the front of `input`, consuming it. `Ok(None)`: more input is
/// needed.
pub fn parse_request(input: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    if input.is_empty() {
        return Ok(None);
    }
    if input[0] != b'*' {
        return parse_inline(input);
    }
    let Some((count, mut at)) = read_number(input, 1, "multibulk length")? else {
        return Ok(None);
    };
    if count > ARGS_MAX as i64 {
        return Err(ProtocolError("invalid multibulk length".into()));
    }
    let count = count.max(0) as usize;
    let mut spans = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        if at >= input.len() {
            return Ok(None);
        }
        if input[at] != b'$' {
            return Err(ProtocolError(format!(
                "expected '$', got '{}'",
                char::from(input[at]).escape_default()
            )));
        }
        let Some((len, start)) = read_number(input, at + 1, "bulk length")? else {
            return Ok(None);
        };
        if !(0..=BULK_BYTES_MAX as i64).contains(&len) {
            return Err(ProtocolError("invalid bulk length".into()));
        }
        let end = start + len as usize;
        if input.len() < end + 2 {
            return Ok(None);
        }
        if &input[end..end + 2] != b"\r\n" {
            return Err(ProtocolError("bulk string not ended by CRLF".into()));
        }
        spans.push((start, end));
        at = end + 2;
    }
    let frame = input.split_to(at).freeze();
    Ok(Some(
        spans.into_iter().map(|(s, e)| frame.slice(s..e)).collect(),
    ))
}

/// A number ended by CRLF starting at `at`; returns it and where the next item starts.
fn read_number(input: &[u8], at: usize, what: &str) -> Result<Option<(i64, usize)>, ProtocolError> {
    let rest = &input[at.min(input.len())..];
    let Some(cr) = rest.iter().position(|&b| b == b'\r') else {
        if rest.len() > 32 {
            return Err(ProtocolError(format!("invalid {what}")));
        }
        return Ok(None);
    };
    if rest.len() < cr + 2 {
        return Ok(None);
    }
    if rest[cr + 1] != b'\n' {
        return Err(ProtocolError(format!("invalid {what}")));
    }
    let number = std::str::from_utf8(&rest[..cr])
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| ProtocolError(format!("invalid {what}")))?;
    Ok(Some((number, at + cr + 2)))
}

/// An inline command: one line of words separated by spaces (what telnet sends).
fn parse_inline(input: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    let Some(newline) = input.iter().position(|&b| b == b'\n') else {
        if input.len() > INLINE_BYTES_MAX {
            return Err(ProtocolError("too big inline request".into()));
        }
        return Ok(None);
    };
    let line = input.split_to(newline + 1).freeze();
    let text = line.slice(..newline);
    let text = text.strip_suffix(b"\r").unwrap_or(&text);
    let words = text
        .split(|b| b.is_ascii_whitespace())
        .filter(|w| !w.is_empty())
        .map(Bytes::copy_from_slice)
        .collect();
    Ok(Some(words))
}

/// A reply, written as RESP2 or RESP3.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// `+OK`
    Simple(&'static str),
    /// `-ERR …` (the text carries its own prefix word: `ERR`, `WRONGTYPE`, `EXECABORT`).
    Error(String),
    Int(i64),
    Bulk(Bytes),
    /// A missing value: `$-1` in RESP2, `_` in RESP3.
    Nil,
    Array(Vec<Reply>),
    /// Pairs: a map in RESP3, a flat array in RESP2.
    Map(Vec<(Reply, Reply)>),
}

impl Reply {
    pub fn error(text: impl Into<String>) -> Reply {
        Reply::Error(text.into())
    }

    pub fn bulk(bytes: impl Into<Bytes>) -> Reply {
        Reply::Bulk(bytes.into())
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// Appends the reply to `out` in RESP3 when `resp3`, else RESP2.
    pub fn write(&self, out: &mut BytesMut, resp3: bool) {
        match self {
            Reply::Simple(s) => put_line(out, b'+', s.as_bytes()),
            Reply::Error(e) => {
                // A line break would end the reply early: errors are one line.
                let line: String = e
                    .chars()
                    .map(|c| if c == '\r' || c == '\n' { ' ' } else { c })
                    .collect();
                put_line(out, b'-', line.as_bytes());
            }
            Reply::Int(i) => put_line(out, b':', i.to_string().as_bytes()),
            Reply::Bulk(b) => {
                put_line(out, b'$', b.len().to_string().as_bytes());
                out.extend_from_slice(b);
                out.extend_from_slice(b"\r\n");
            }
            Reply::Nil if resp3 => out.extend_from_slice(b"_\r\n"),
            Reply::Nil => out.extend_from_slice(b"$-1\r\n"),
            Reply::Array(items) => {
                put_line(out, b'*', items.len().to_string().as_bytes());
                items.iter().for_each(|r| r.write(out, resp3));
            }
            Reply::Map(pairs) => {
                if resp3 {
                    put_line(out, b'%', pairs.len().to_string().as_bytes());
                } else {
                    put_line(out, b'*', (2 * pairs.len()).to_string().as_bytes());
                }
                for (k, v) in pairs {
                    k.write(out, resp3);
                    v.write(out, resp3);
                }
            }
        }
    }
}

fn put_line(out: &mut BytesMut, tag: u8, text: &[u8]) {
    out.extend_from_slice(&[tag]);
    out.extend_from_slice(text);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &[u8], expected: Result<Option<Vec<&str>>, &str>) {
        let mut buffer = BytesMut::from(input);
        let parsed = parse_request(&mut buffer).map(|r| {
            r.map(|args| {
                args.iter()
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect::<Vec<_>>()
            })
        });
        let expected = expected
            .map(|r| r.map(|args| args.iter().map(|a| a.to_string()).collect::<Vec<_>>()))
            .map_err(|e| ProtocolError(e.to_string()));
        assert_eq!(
            parsed,
            expected,
            "input {:?}",
            String::from_utf8_lossy(input)
        );
    }

    #[test]
    fn requests_parse_or_wait_or_fail() {
        check(
            b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
            Ok(Some(vec!["GET", "k"])),
        );
        check(b"*2\r\n$3\r\nGET\r\n$1\r\n", Ok(None));
        check(b"*2\r\n$3\r\nGE", Ok(None));
        check(b"*1\r\n$4\r\nPING\r\n", Ok(Some(vec!["PING"])));
        check(b"PING\r\n", Ok(Some(vec!["PING"])));
        check(b"set  a   b\n", Ok(Some(vec!["set", "a", "b"])));
        check(b"*1\r\n$999999999999\r\n", Err("invalid bulk length"));
        check(b"*1\r\n$-5\r\n", Err("invalid bulk length"));
        check(b"*99999999\r\n", Err("invalid multibulk length"));
        check(b"*x\r\n", Err("invalid multibulk length"));
        check(b"*1\r\n+OK\r\n", Err("expected '$', got '+'"));
        check(
            b"*1\r\n$2\r\nabcd\r\n",
            Err("bulk string not ended by CRLF"),
        );
        check(&[b'*'; 100], Err("invalid multibulk length"));
    }

    #[test]
    fn replies_in_both_protocols() {
        let mut out = BytesMut::new();
        Reply::Nil.write(&mut out, false);
        Reply::Nil.write(&mut out, true);
        Reply::Map(vec![(Reply::bulk("f"), Reply::Int(1))]).write(&mut out, false);
        Reply::Map(vec![(Reply::bulk("f"), Reply::Int(1))]).write(&mut out, true);
        Reply::error("ERR a\r\nb").write(&mut out, false);
        assert_eq!(
            &out[..],
            b"$-1\r\n_\r\n*2\r\n$1\r\nf\r\n:1\r\n%1\r\n$1\r\nf\r\n:1\r\n-ERR a  b\r\n"
        );
    }
}
