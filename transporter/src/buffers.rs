//! The buffer handling the TCP and io_uring links share: appending a frame to a bounded send
//! buffer, and delivering the whole frames of a receive buffer with the link's sticky end
//! states (peer closed, bad frame). Only how bytes reach the socket differs between the links.

use std::io;

use crate::error::is_disconnect;
use crate::frame::{self, Decoded, FrameHeader, FRAME_BYTES_MAX};
use crate::{FlushStatus, NodeId, TransportError};

/// Written bytes after which `append` moves the unsent tail to the front, when the tail is no
/// longer than what it would free. A peer that reads slowly leaves a tail behind each flush;
/// without this the buffer would creep through its whole capacity (2 MB by default), every
/// frame written to a line not in the cache, before it compacts at the end.
const COMPACT_AFTER_BYTES: usize = 64 * 1024;

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
        if self.bytes.len() + frame_len > self.bytes.capacity()
            || (self.offset >= COMPACT_AFTER_BYTES && self.offset >= pending_bytes)
        {
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

    /// Bytes `append` would still take.
    pub fn capacity_bytes(&self) -> usize {
        self.limit_bytes.saturating_sub(self.pending_bytes())
    }

    /// The bytes appended and not yet written; `None` when there are none.
    pub fn unsent(&self) -> Option<&[u8]> {
        (self.pending_bytes() > 0).then(|| &self.bytes[self.offset..])
    }

    /// Takes the outcome of one `send` of the pending bytes. `Some` ends the flush: `Done` when
    /// nothing is left (the buffer is cleared), `Pending` when the socket is full; `None` means
    /// send the rest. A closed connection is `Closed`; any other error is returned with context.
    pub fn record_send(
        &mut self,
        peer: NodeId,
        result: io::Result<usize>,
    ) -> Result<Option<FlushStatus>, TransportError> {
        match result {
            Ok(0) if self.pending_bytes() > 0 => Err(TransportError::Closed { peer }),
            Ok(sent_bytes) => {
                self.offset += sent_bytes.min(self.pending_bytes());
                if self.pending_bytes() > 0 {
                    return Ok(None);
                }
                self.clear();
                Ok(Some(FlushStatus::Done))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Some(FlushStatus::Pending)),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(None),
            Err(e) if is_disconnect(&e) => Err(TransportError::Closed { peer }),
            Err(e) => Err(TransportError::io(format!("link to node {peer}: send"), e)),
        }
    }

    /// Forgets everything (the link is being shut down).
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.offset = 0;
    }
}

/// A link's receive buffer: `bytes[start..end]` is read and not yet decoded. Never reallocated,
/// so a pointer into it (an io_uring RECV) stays valid.
#[derive(Debug)]
pub(crate) struct ReceiveBuffer {
    pub bytes: Box<[u8]>,
    /// Start of the undecoded bytes (the start of a partial frame).
    pub start: usize,
    /// End of the bytes received so far.
    pub end: usize,
    /// Set when the peer closed while frames were still being delivered; every later `receive`
    /// reports `Closed`.
    pub peer_closed: bool,
    /// Set when the peer sent a bad frame; every later `receive` reports it again.
    bad_frame_reason: Option<String>,
}

impl ReceiveBuffer {
    pub fn new(size_bytes: usize) -> ReceiveBuffer {
        ReceiveBuffer {
            bytes: vec![0u8; size_bytes].into_boxed_slice(),
            start: 0,
            end: 0,
            peer_closed: false,
            bad_frame_reason: None,
        }
    }

    /// The error every `receive` reports once the peer sent a bad frame or closed.
    pub fn sticky_error(&self, peer: NodeId) -> Result<(), TransportError> {
        if let Some(reason) = &self.bad_frame_reason {
            return Err(TransportError::BadFrame {
                peer,
                reason: reason.clone(),
            });
        }
        if self.peer_closed {
            return Err(TransportError::Closed { peer });
        }
        Ok(())
    }

    /// Moves the undecoded bytes to the front.
    pub fn compact(&mut self) {
        if self.start > 0 {
            self.bytes.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
    }

    /// Bytes read and not yet decoded.
    pub fn undecoded_bytes(&self) -> usize {
        self.end - self.start
    }

    /// Delivers every whole undecoded frame in order and returns how many. A bad frame is
    /// remembered: every later `sticky_error` reports it.
    pub fn deliver(
        &mut self,
        peer: NodeId,
        checksum: bool,
        on_frame: &mut dyn FnMut(&FrameHeader, &[u8]),
    ) -> Result<usize, TransportError> {
        match deliver_frames(&self.bytes[self.start..self.end], checksum, on_frame) {
            Ok((delivered, consumed)) => {
                self.start += consumed;
                Ok(delivered)
            }
            Err(reason) => {
                self.bad_frame_reason = Some(reason.clone());
                Err(TransportError::BadFrame { peer, reason })
            }
        }
    }
}

/// Delivers every whole frame at the front of `undecoded`, in order. Returns how many frames
/// and how many bytes it consumed, or the reason the next frame is bad.
fn deliver_frames(
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

#[cfg(test)]
mod tests {
    use super::*;

    fn header(request_id: u32) -> FrameHeader {
        FrameHeader {
            signal: 1,
            receiver_block: 2,
            sender_block: 3,
            request_id,
        }
    }

    /// A peer that takes all but the last frame of each flush leaves a short tail behind: the
    /// buffer moves it to the front once 64 KiB are written, instead of creeping through its
    /// whole capacity, and the unsent frames stay whole and in order.
    #[test]
    fn a_short_unsent_tail_moves_to_the_front() {
        let mut buffer = SendBuffer::new(2 * 1024 * 1024);
        let payload = [9u8; 1000];
        let frame_len = frame::encoded_len(payload.len(), false);
        buffer
            .append(NodeId(5), &header(0), &payload, false)
            .expect("room");
        let mut furthest = 0;
        for id in 1..1000u32 {
            buffer
                .append(NodeId(5), &header(id), &payload, false)
                .expect("room");
            furthest = furthest.max(buffer.bytes.len());
            // Everything but the frame just appended is written.
            let written = buffer.pending_bytes() - frame_len;
            assert_eq!(buffer.record_send(NodeId(5), Ok(written)).unwrap(), None);
            match frame::decode(buffer.unsent().expect("the last frame"), false) {
                Ok(Decoded::Frame { header, .. }) => assert_eq!(header.request_id, id),
                other => panic!("the unsent tail is not a whole frame: {other:?}"),
            }
        }
        assert!(
            furthest <= COMPACT_AFTER_BYTES + 2 * frame_len,
            "the buffer reached {furthest} bytes"
        );
    }
}
