//! The buffer handling the TCP and io_uring links share: appending a frame to a bounded send
//! buffer, and delivering the whole frames of a receive buffer. Only how bytes reach the socket
//! differs between the two links.

use crate::frame::{self, Decoded, FrameHeader, FRAME_BYTES_MAX};
use crate::{NodeId, TransportError};

/// A link's send buffer: encoded frames, of which `offset` bytes are already written. Its
/// capacity is reserved at construction and never grows.
#[derive(Debug)]
pub(crate) struct SendBuffer {
    pub bytes: Vec<u8>,
    pub offset: usize,
    /// Pending bytes above which `append` answers Overloaded (NDB error 1218); fixed.
    pub limit_bytes: usize,
}

impl SendBuffer {
    pub fn new(limit_bytes: usize) -> SendBuffer {
        SendBuffer {
            bytes: Vec::with_capacity(limit_bytes),
            offset: 0,
            limit_bytes,
        }
    }

    /// Bytes appended and not yet written.
    pub fn pending_bytes(&self) -> usize {
        self.bytes.len() - self.offset
    }

    /// Appends one frame. Over the frame limit it is FrameTooLarge, past the send limit
    /// Overloaded; either way the buffer is left as it was.
    pub fn append(
        &mut self,
        peer: NodeId,
        header: &FrameHeader,
        payload: &[u8],
        checksum: bool,
    ) -> Result<(), TransportError> {
        let frame_len = frame::encoded_len(payload.len(), checksum);
        if frame_len > FRAME_BYTES_MAX {
            return Err(TransportError::FrameTooLarge {
                bytes: frame_len,
                limit: FRAME_BYTES_MAX,
            });
        }
        let pending_bytes = self.pending_bytes();
        if pending_bytes + frame_len > self.limit_bytes {
            return Err(TransportError::Overloaded {
                peer,
                pending_bytes,
                limit_bytes: self.limit_bytes,
            });
        }
        if self.bytes.len() + frame_len > self.bytes.capacity() {
            self.compact();
        }
        frame::encode_into(&mut self.bytes, header, payload, checksum)?;
        debug_assert!(self.pending_bytes() <= self.limit_bytes);
        Ok(())
    }

    /// Moves the unsent tail to the front.
    pub fn compact(&mut self) {
        self.bytes.copy_within(self.offset.., 0);
        self.bytes.truncate(self.bytes.len() - self.offset);
        self.offset = 0;
    }

    /// Forgets everything (the link is being shut down).
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.offset = 0;
    }
}

/// Delivers every whole frame at the front of `undecoded`, in order. Returns how many frames
/// and how many bytes it consumed, or the reason the next frame is bad.
pub(crate) fn deliver_frames(
    undecoded: &[u8],
    checksum: bool,
    on_frame: &mut dyn FnMut(&FrameHeader, &[u8]),
) -> Result<(usize, usize), String> {
    let (mut delivered, mut consumed) = (0, 0);
    loop {
        match frame::decode(&undecoded[consumed..], checksum) {
            Ok(Decoded::Frame {
                header,
                payload,
                frame_len,
            }) => {
                on_frame(&header, payload);
                consumed += frame_len;
                delivered += 1;
            }
            Ok(Decoded::NeedMore) => return Ok((delivered, consumed)),
            Err(e) => return Err(e.to_string()),
        }
    }
}
