//! The management protocol's messages: text, as NDB's mgmapi is.
//!
//! ```text
//!  get config\n                 a command line
//!  nodetype: ndbd\n             fields, `name: value`, in any order
//!  nodeid: 1\n
//!  \n                           an empty line ends the header
//!  [body]                       only with a `content-length: N` field: N bytes
//! ```
//!
//! A reply's command line is the request's with ` reply` appended (`get config reply`) and its
//! first field is `result: Ok` or `result: Error: <why>`. Every line is UTF-8 and ends with `\n`;
//! a line, a header and a body each have a bound ([`LINE_BYTES_MAX`], [`FIELDS_MAX`],
//! [`BODY_BYTES_MAX`]), and a peer that exceeds one is a protocol error, never an allocation.

use std::io::{self, BufRead, Read, Write};

/// The longest line (command or field) in bytes, newline included.
pub const LINE_BYTES_MAX: usize = 4096;
/// The most fields one message holds (a status of 255 nodes takes 8 each).
pub const FIELDS_MAX: usize = 4096;
/// The longest body: a config.ini.
pub const BODY_BYTES_MAX: usize = 4 << 20;

/// The field naming a body's length.
const CONTENT_LENGTH: &str = "content-length";

/// One request or reply.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Message {
    /// The command line (`get status`, `get status reply`).
    pub command: String,
    /// Fields in the order they were added or read.
    pub fields: Vec<(String, String)>,
    /// The body (a config file's text); empty for most messages.
    pub body: Vec<u8>,
}

impl Message {
    pub fn new(command: impl Into<String>) -> Message {
        Message {
            command: command.into(),
            ..Message::default()
        }
    }

    /// A reply to `request` that says `result: Ok`.
    pub fn ok_reply(request: &str) -> Message {
        Message::new(format!("{request} reply")).field("result", "Ok")
    }

    /// A reply to `request` that says `result: Error: <why>`.
    pub fn error_reply(request: &str, why: impl std::fmt::Display) -> Message {
        Message::new(format!("{request} reply")).field("result", format!("Error: {why}"))
    }

    /// Adds a field (a newline in the value would end the line early: it becomes a space).
    pub fn field(mut self, name: impl Into<String>, value: impl ToString) -> Message {
        self.push(name, value);
        self
    }

    pub fn push(&mut self, name: impl Into<String>, value: impl ToString) {
        let value = value.to_string().replace(['\n', '\r'], " ");
        self.fields.push((name.into(), value));
    }

    pub fn with_body(mut self, body: Vec<u8>) -> Message {
        self.body = body;
        self
    }

    /// The first field called `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The field `name` parsed as `T`, `None` when absent; an error naming it when malformed.
    pub fn parse<T: std::str::FromStr>(&self, name: &str) -> Result<Option<T>, String> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v
                .parse()
                .map(Some)
                .map_err(|_| format!("field {name}: {v:?} is not valid")),
        }
    }

    /// The reply's result: `Ok(())` for `result: Ok`, the reason otherwise.
    pub fn result(&self) -> Result<(), String> {
        match self.get("result") {
            Some("Ok") => Ok(()),
            Some(other) => Err(other.strip_prefix("Error: ").unwrap_or(other).to_string()),
            None => Err(format!("the reply {:?} has no result", self.command)),
        }
    }

    /// Writes the message in one `write_all`.
    pub fn write_to(&self, out: &mut impl Write) -> io::Result<()> {
        let mut bytes = Vec::with_capacity(64 + self.body.len());
        bytes.extend_from_slice(self.command.as_bytes());
        bytes.push(b'\n');
        for (name, value) in &self.fields {
            bytes.extend_from_slice(format!("{name}: {value}\n").as_bytes());
        }
        if !self.body.is_empty() {
            bytes.extend_from_slice(format!("{CONTENT_LENGTH}: {}\n", self.body.len()).as_bytes());
        }
        bytes.push(b'\n');
        bytes.extend_from_slice(&self.body);
        out.write_all(&bytes)?;
        out.flush()
    }

    /// Reads one message; `Ok(None)` when the peer closed the connection before its first
    /// byte. A malformed or oversized message is an `InvalidData` error saying what is wrong.
    pub fn read_from(input: &mut impl BufRead) -> io::Result<Option<Message>> {
        let Some(command) = read_line(input)? else {
            return Ok(None);
        };
        if command.is_empty() {
            return Err(invalid("a message starts with an empty line"));
        }
        let mut message = Message::new(command);
        loop {
            let line = read_line(input)?.ok_or_else(|| {
                io::Error::new(io::ErrorKind::UnexpectedEof, "the message ends early")
            })?;
            if line.is_empty() {
                break;
            }
            if message.fields.len() == FIELDS_MAX {
                return Err(invalid(format!("more than {FIELDS_MAX} fields")));
            }
            let (name, value) = line
                .split_once(':')
                .ok_or_else(|| invalid(format!("a field without ':': {line:?}")))?;
            message
                .fields
                .push((name.trim().to_string(), value.trim().to_string()));
        }
        if let Some(length) = message.get(CONTENT_LENGTH) {
            let length: usize = length
                .parse()
                .map_err(|_| invalid(format!("{CONTENT_LENGTH} {length:?} is not a number")))?;
            if length > BODY_BYTES_MAX {
                return Err(invalid(format!(
                    "a body of {length} bytes is over the limit of {BODY_BYTES_MAX}"
                )));
            }
            let mut body = vec![0; length];
            input.read_exact(&mut body)?;
            message.body = body;
            message.fields.retain(|(n, _)| n != CONTENT_LENGTH);
        }
        Ok(Some(message))
    }
}

fn invalid(why: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.into())
}

/// One line without its `\n` (or `\r\n`), at most [`LINE_BYTES_MAX`] bytes; `None` at the end
/// of the input before any byte.
fn read_line(input: &mut impl BufRead) -> io::Result<Option<String>> {
    let mut line = Vec::new();
    let read = input
        .take(LINE_BYTES_MAX as u64)
        .read_until(b'\n', &mut line)?;
    if read == 0 {
        return Ok(None);
    }
    if line.last() != Some(&b'\n') {
        return Err(if read == LINE_BYTES_MAX {
            invalid(format!("a line longer than {LINE_BYTES_MAX} bytes"))
        } else {
            io::Error::new(io::ErrorKind::UnexpectedEof, "the message ends mid-line")
        });
    }
    line.pop();
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    String::from_utf8(line)
        .map(Some)
        .map_err(|_| invalid("a line that is not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(message: &Message) -> Message {
        let mut bytes = Vec::new();
        message.write_to(&mut bytes).expect("write");
        Message::read_from(&mut bytes.as_slice())
            .expect("read")
            .expect("a message")
    }

    #[test]
    fn messages_round_trip_with_and_without_a_body() {
        let plain = Message::new("get status").field("nodeid", 3);
        assert_eq!(round_trip(&plain), plain);
        let with_body = Message::ok_reply("get config").with_body(b"[ndbd]\nNodeId=1\n".to_vec());
        assert_eq!(round_trip(&with_body), with_body);
        assert_eq!(with_body.result(), Ok(()));
        let refused = Message::error_reply("stop", "node 7 is not a data node");
        assert_eq!(refused.result(), Err("node 7 is not a data node".into()));
    }

    fn check_bad(bytes: &[u8], expected: &str) {
        let err = Message::read_from(&mut &bytes[..]).expect_err("a bad message");
        assert!(err.to_string().contains(expected), "{err} for {bytes:?}");
    }

    #[test]
    fn malformed_messages_are_errors_that_say_why() {
        check_bad(b"\n", "empty line");
        check_bad(b"get status\nno colon\n\n", "without ':'");
        check_bad(b"get status\nnodeid: 1\n", "ends early");
        check_bad(b"get\ncontent-length: x\n\n", "not a number");
        check_bad(b"get\ncontent-length: 99999999999\n\n", "over the limit");
        check_bad(b"get\ncontent-length: 10\n\nabc", "fill whole buffer");
        check_bad(&[b'x'; LINE_BYTES_MAX + 10], "longer than");
        check_bad(b"get \xff\n\n", "not UTF-8");
        assert!(Message::read_from(&mut &b""[..]).expect("eof").is_none());
    }
}
