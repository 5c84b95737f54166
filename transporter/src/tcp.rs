//! The TCP link: a non-blocking socket with TCP_NODELAY, one contiguous bounded send buffer that
//! a flush pushes with as few `send` calls as the kernel allows, and a fixed receive buffer that
//! is decoded in place.
//!
//! Sending appends whole frames to the send buffer; `flush` writes from the send buffer's offset to the end
//! and advances that offset over what the kernel took. The buffer is compacted (the unsent tail
//! moved to the front) only when an append would not fit behind it, so partial writes cost no
//! copying. Receiving reads into the free space behind the undecoded bytes, delivers every whole
//! frame, and moves the partial frame left over (less than [`FRAME_BYTES_MAX`]) to the front.
#![forbid(unsafe_code)]

use std::io::{self, Read};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};

use socket2::SockRef;

use crate::buffers::{ReceiveBuffer, SendBuffer};
use crate::frame::{self, FrameHeader, FRAME_BYTES_MAX};
use crate::{FlushStatus, LinkSettings, NodeId, TransportError, Transporter, TransporterKind};

/// The most reads one `receive` call makes, so one busy peer cannot starve the other links of
/// a loop that polls many. Each read can fill the whole free part of the receive buffer.
pub const RECEIVE_READS_PER_CALL_MAX: usize = 8;

/// One TCP link to one peer node.
pub struct TcpLink {
    /// The connected socket, non-blocking with TCP_NODELAY from construction on.
    stream: TcpStream,
    /// The node at the other end; fixed.
    peer: NodeId,
    /// Checksum=1 on this link: frames out carry a CRC-32 trailer, frames in must.
    checksum: bool,
    /// Encoded frames not yet taken by the kernel, bounded by the send limit. Its capacity is
    /// reserved at construction and never grows, so a pointer into it stays valid.
    send_buffer: SendBuffer,
    /// Bytes read and not yet decoded, and the sticky end states (peer closed, bad frame).
    receive: ReceiveBuffer,
    /// Set when the last `receive` stopped at its read limit with the socket possibly not
    /// drained, or saw the peer's close behind frames it delivered: an edge-triggered poller
    /// will not report either again, so the caller must receive again before it sleeps.
    maybe_more_input: bool,
    /// The next `receive` may stop after a short read (see `stop_after_short_read`).
    short_read_drains: bool,
    /// The most bytes one `receive` reads (`limit_receive`; unbounded until then).
    receive_slice_bytes: usize,
    /// The peer's address is a loopback one (see `loopback_peer_cpu`).
    loopback: bool,
}

impl TcpLink {
    /// Wraps a connected stream (after the handshake) as a link to `peer`. Switches the socket to
    /// non-blocking with TCP_NODELAY and allocates both buffers.
    pub fn new(
        stream: TcpStream,
        peer: NodeId,
        settings: &LinkSettings,
    ) -> Result<TcpLink, TransportError> {
        stream
            .set_nonblocking(true)
            .map_err(|e| TransportError::io(format!("link to node {peer}: set non-blocking"), e))?;
        stream
            .set_nodelay(true)
            .map_err(|e| TransportError::io(format!("link to node {peer}: set TCP_NODELAY"), e))?;
        let send_limit_bytes = settings.send_limit_bytes();
        Ok(TcpLink {
            peer,
            checksum: settings.checksum,
            send_buffer: SendBuffer::new(send_limit_bytes),
            receive: ReceiveBuffer::new(settings.receive_buffer_bytes_effective()),
            maybe_more_input: false,
            short_read_drains: false,
            receive_slice_bytes: usize::MAX,
            loopback: is_loopback(&stream),
            stream,
        })
    }

    /// The local address of the socket.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.stream.local_addr()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.stream.peer_addr()
    }

    /// The pending-bytes limit this link enforces.
    pub fn send_limit_bytes(&self) -> usize {
        self.send_buffer.limit_bytes
    }

    /// One read of at most `max_bytes` into the free space. `Ok(None)` means the socket has
    /// nothing now; `Ok(Some(0))` means the peer closed.
    fn read_once(&mut self, max_bytes: usize) -> Result<Option<usize>, TransportError> {
        let end = self.receive.end;
        let limit = self.receive.bytes.len().min(end.saturating_add(max_bytes));
        loop {
            match self.stream.read(&mut self.receive.bytes[end..limit]) {
                Ok(read_bytes) => return Ok(Some(read_bytes)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if is_disconnect(&e) => return Ok(Some(0)),
                Err(e) => {
                    return Err(TransportError::io(
                        format!("link to node {}: read", self.peer),
                        e,
                    ))
                }
            }
        }
    }
}

impl Transporter for TcpLink {
    fn peer(&self) -> NodeId {
        self.peer
    }

    fn kind(&self) -> TransporterKind {
        TransporterKind::Tcp
    }

    fn send(&mut self, header: &FrameHeader, payload: &[u8]) -> Result<(), TransportError> {
        self.send_buffer
            .append(self.peer, header, payload, self.checksum)
    }

    fn flush(&mut self) -> Result<FlushStatus, TransportError> {
        let socket = SockRef::from(&self.stream);
        loop {
            if self.send_buffer.pending_bytes() == 0 {
                self.send_buffer.clear();
                return Ok(FlushStatus::Done);
            }
            let sent = socket.send_with_flags(
                &self.send_buffer.bytes[self.send_buffer.offset..],
                libc::MSG_NOSIGNAL,
            );
            if let Some(status) = self.send_buffer.record_send(self.peer, sent)? {
                return Ok(status);
            }
        }
    }

    fn unsent_on_socket(&self) -> Option<(RawFd, &[u8])> {
        Some((self.stream.as_raw_fd(), self.send_buffer.unsent()?))
    }

    fn sent_by_caller(&mut self, result: io::Result<usize>) -> Result<FlushStatus, TransportError> {
        match self.send_buffer.record_send(self.peer, result)? {
            Some(status) => Ok(status),
            None => self.flush(),
        }
    }

    fn receive(
        &mut self,
        on_frame: &mut dyn FnMut(&FrameHeader, &[u8]),
    ) -> Result<usize, TransportError> {
        self.receive.sticky_error(self.peer)?;
        let mut delivered = 0;
        self.maybe_more_input = false;
        // Read until the socket says WouldBlock, even after a short read: the poller is
        // edge-triggered, and a peer that sends its last frames and closes at once delivers
        // data and FIN together, so a short read that took the data leaves the EOF unread with
        // no further event to come. The price is one more `read` (EAGAIN) per receive with
        // input — saved when the caller's event said the peer had not closed.
        let short_read_drains = std::mem::take(&mut self.short_read_drains);
        let mut reads = 0;
        let mut read_bytes_total = 0;
        loop {
            if reads == RECEIVE_READS_PER_CALL_MAX || read_bytes_total >= self.receive_slice_bytes {
                // Not drained: the caller must come back before it sleeps.
                self.maybe_more_input = true;
                break;
            }
            reads += 1;
            self.receive.compact();
            debug_assert!(
                self.receive.bytes.len() - self.receive.end >= FRAME_BYTES_MAX,
                "a partial frame is below the limit"
            );
            match self.read_once(self.receive_slice_bytes - read_bytes_total)? {
                None => break,
                Some(0) => {
                    self.receive.peer_closed = true;
                    if delivered == 0 {
                        return Err(TransportError::Closed { peer: self.peer });
                    }
                    // The frames before the close go out now, the close on the next call,
                    // which the caller makes without waiting for the poller.
                    self.maybe_more_input = true;
                    break;
                }
                Some(read_bytes) => {
                    let free = (self.receive.bytes.len() - self.receive.end)
                        .min(self.receive_slice_bytes - read_bytes_total);
                    read_bytes_total += read_bytes;
                    self.receive.end += read_bytes;
                    delivered += self.receive.deliver(self.peer, self.checksum, on_frame)?;
                    if short_read_drains && read_bytes < free {
                        break;
                    }
                }
            }
        }
        Ok(delivered)
    }

    fn pending_send_bytes(&self) -> usize {
        self.send_buffer.pending_bytes()
    }

    fn send_capacity_bytes(&self) -> usize {
        self.send_buffer.capacity_bytes()
    }

    fn encoded_frame_bytes(&self, payload_bytes: usize) -> usize {
        frame::encoded_len(payload_bytes, self.checksum)
    }

    fn shutdown(&mut self) {
        // NotConnected (the peer is already gone) is as good as done.
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }

    fn input_pending(&self) -> bool {
        self.maybe_more_input
    }

    fn stop_after_short_read(&mut self) {
        self.short_read_drains = true;
    }

    fn limit_receive(&mut self, bytes: usize) {
        self.receive_slice_bytes = bytes.max(1);
    }

    fn poll_fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }

    fn loopback_peer_cpu(&self) -> Option<usize> {
        incoming_cpu(&self.stream, self.loopback)
    }
}

/// True when `stream`'s peer has a loopback address.
pub(crate) fn is_loopback(stream: &TcpStream) -> bool {
    stream.peer_addr().is_ok_and(|a| a.ip().is_loopback())
}

/// See [`Transporter::loopback_peer_cpu`], for TCP and io_uring links alike.
pub(crate) fn incoming_cpu(stream: &TcpStream, loopback: bool) -> Option<usize> {
    if !loopback {
        return None;
    }
    socket2::SockRef::from(stream).cpu_affinity().ok()
}

impl std::fmt::Debug for TcpLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpLink")
            .field("peer", &self.peer)
            .field("fd", &self.stream.as_raw_fd())
            .field("checksum", &self.checksum)
            .field("pending_send_bytes", &self.pending_send_bytes())
            .field("send_limit_bytes", &self.send_buffer.limit_bytes)
            .field("undecoded_bytes", &self.receive.undecoded_bytes())
            .finish()
    }
}

/// True for the errors that mean the peer is gone rather than that we misused the socket.
pub(crate) fn is_disconnect(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::NotConnected
            | io::ErrorKind::UnexpectedEof
    )
}
