//! Little-endian encoding helpers. Every read is bounds-checked: bytes from a socket or a shared
//! memory peer can never make a reader panic or read past its slice.

/// A payload that could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed {what}: {reason}")]
pub struct DecodeError {
    /// Which field or message was being read.
    pub what: &'static str,
    /// What was wrong with it.
    pub reason: String,
}

impl DecodeError {
    pub fn new(what: &'static str, reason: impl Into<String>) -> Self {
        DecodeError {
            what,
            reason: reason.into(),
        }
    }
}

/// Appends little-endian fields to a byte vector.
#[derive(Debug)]
pub struct Writer<'a> {
    out: &'a mut Vec<u8>,
}

impl<'a> Writer<'a> {
    /// A writer that appends to `out`.
    #[inline]
    pub fn new(out: &'a mut Vec<u8>) -> Self {
        Writer { out }
    }

    #[inline]
    fn buf(&mut self) -> &mut Vec<u8> {
        self.out
    }

    #[inline]
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf().push(v);
        self
    }
    #[inline]
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.buf().extend_from_slice(&v.to_le_bytes());
        self
    }
    #[inline]
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf().extend_from_slice(&v.to_le_bytes());
        self
    }
    #[inline]
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf().extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A byte string with a u16 length prefix; callers keep strings under 64 KiB (frames are
    /// smaller still), so the length is checked, not truncated.
    pub fn bytes16(&mut self, v: &[u8]) -> &mut Self {
        let len = u16::try_from(v.len()).unwrap_or(u16::MAX);
        self.u16(len);
        self.buf().extend_from_slice(&v[..usize::from(len)]);
        self
    }
    pub fn str16(&mut self, v: &str) -> &mut Self {
        self.bytes16(v.as_bytes())
    }
}

/// Reads little-endian fields from a byte slice, failing cleanly at its end.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// A reader over `buf`; `what` names the message in errors.
    #[inline]
    pub fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, what }
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(self.short(n));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    #[inline]
    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    #[inline]
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }
    #[inline]
    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    #[inline]
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    #[inline]
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    pub fn bytes16(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = self.u16()?;
        self.take(usize::from(len))
    }
    pub fn str16(&mut self) -> Result<&'a str, DecodeError> {
        let bytes = self.bytes16()?;
        std::str::from_utf8(bytes).map_err(|e| DecodeError::new(self.what, format!("{e}")))
    }

    /// The error of a read past the end: out of line, so that the reads inline small.
    #[cold]
    #[inline(never)]
    fn short(&self, n: usize) -> DecodeError {
        DecodeError::new(
            self.what,
            format!("needs {n} more bytes, {} left", self.buf.len()),
        )
    }

    /// The bytes not read yet.
    #[inline]
    pub fn rest(&self) -> &'a [u8] {
        self.buf
    }

    /// Bytes not read yet.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    #[cold]
    #[inline(never)]
    fn trailing(&self) -> DecodeError {
        DecodeError::new(self.what, format!("{} trailing bytes", self.buf.len()))
    }

    /// Fails unless every byte was consumed: trailing garbage is a malformed message.
    #[inline]
    pub fn finish(&self) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(self.trailing())
        }
    }

    /// An error for this message.
    pub fn error(&self, reason: impl Into<String>) -> DecodeError {
        DecodeError::new(self.what, reason)
    }
}
