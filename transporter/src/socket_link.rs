//! The socket link: one link to one peer over a connected TCP socket, generic over how its bytes
//! move ([`SocketIo`]): plain system calls ([`crate::tcp::SyscallIo`], the TCP link) or an
//! io_uring ([`crate::uring::UringIo`], the io_uring link). The frames, buffers, limits and the
//! receive loop are this module's; an I/O only moves bytes between the socket and a buffer.
//!
//! The I/O is a type parameter, not a trait object, so every call into it is resolved at
//! compile time and inlined: a frame costs no indirect call beyond the one the caller already
//! makes through [`Transporter`]. A simulated I/O (bytes moved in memory, faults injected by a
//! seeded random source) fits the same seam.
//!
//! Sending appends whole frames to the send buffer; `flush` hands the I/O everything from the
//! send buffer's offset to its end and advances that offset over what the kernel took. The
//! buffer is compacted (the unsent tail moved to the front) only when an append would not fit
//! behind it, so partial writes cost no copying. Receiving reads into the free space behind the
//! undecoded bytes, delivers every whole frame, and moves the partial frame left over (less
//! than [`FRAME_BYTES_MAX`]) to the front.
//!
//! **The receive region may outlive the call.** An I/O may leave a receive in flight
//! ([`SocketIo::receive_in_flight`]): the kernel may then still write the region it was given.
//! While one is in flight the link neither compacts nor reads past the undecoded bytes, asks
//! the I/O for the outcome ([`SocketIo::receive_completion`]) instead of lending a new region,
//! and on drop has the I/O cancel it ([`SocketIo::cancel_receive`]), leaking the receive buffer
//! when the I/O cannot confirm that. The plain-syscall I/O never leaves one in flight.

use std::io;
use std::marker::PhantomData;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};

use crate::buffers::{ReceiveBuffer, SendBuffer};
use crate::frame::{self, FrameHeader, FRAME_BYTES_MAX};
use crate::{FlushStatus, LinkSettings, NodeId, TransportError, Transporter, TransporterKind};

/// The most reads one `receive` call makes, so one busy peer cannot starve the other links of
/// a loop that polls many. Each read can fill the whole free part of the receive buffer.
pub const RECEIVE_READS_PER_CALL_MAX: usize = 8;

/// How a [`SocketLink`]'s bytes move between its socket and its buffers: the link's whole
/// contact with the kernel. Each operation is tried once and never blocks; readiness comes
/// from the caller's poller on [`Transporter::poll_fd`] (the socket), as for every link.
pub trait SocketIo: Send + Sized + std::fmt::Debug {
    /// The kind of link this I/O makes.
    const KIND: TransporterKind;
    /// The link's name in `Debug` output.
    const LINK_NAME: &'static str;
    /// The socket carries the frames as they are, so a caller may send the unsent bytes on it
    /// itself ([`Transporter::unsent_on_socket`]). False for TLS, whose socket carries records.
    const SOCKET_CARRIES_FRAMES: bool = true;

    /// Sets the I/O up for the connected `stream` to `peer`, before the link switches the
    /// socket to non-blocking. [`TransportError::UringUnavailable`] means the kernel refuses
    /// this I/O; the caller may fall back to another one on the same stream.
    fn open(stream: &TcpStream, peer: NodeId) -> Result<Self, TransportError>;

    /// One send of `batch` (whole frames: the unsent part of the send buffer, in one piece)
    /// on `stream`, without waiting for room and without SIGPIPE. The inner result is the
    /// send's: bytes taken (maybe fewer than given), or its error (`WouldBlock` when the socket
    /// is full), which the link interprets. `Err` means the I/O itself failed. The kernel is
    /// done with `batch` when this returns.
    fn send(
        &mut self,
        stream: &TcpStream,
        batch: &[u8],
    ) -> Result<io::Result<usize>, TransportError>;

    /// One receive from `stream` into `region`. Called only while no receive is in flight.
    /// May leave the receive in flight (the kernel then keeps `region` until
    /// [`SocketIo::receive_in_flight`] turns false) and answer [`Received::Nothing`].
    fn receive(
        &mut self,
        stream: &TcpStream,
        region: ReceiveRegion<'_>,
    ) -> Result<Received, TransportError>;

    /// Called when the link has handed every byte to `send`: pushes what the I/O still holds
    /// (TLS records), `Pending` while the socket cannot take it.
    #[inline(always)]
    fn finish_send(&mut self, _stream: &TcpStream) -> Result<FlushStatus, TransportError> {
        Ok(FlushStatus::Done)
    }

    /// Bytes (or, for TLS, a nonzero marker) the I/O took from `send` but has not yet written.
    #[inline(always)]
    fn pending_bytes(&self) -> usize {
        0
    }

    /// True when the I/O holds input no readiness event will report (TLS: frames the
    /// handshake read ahead).
    #[inline(always)]
    fn input_buffered(&self) -> bool {
        false
    }

    /// For an I/O whose socket does not carry the frames as they are (TLS): turns the front of
    /// `batch` into the bytes the socket carries, kept for [`SocketIo::sealed`], and returns
    /// how many bytes of `batch` it took.
    fn seal(&mut self, batch: &[u8]) -> usize {
        let _ = batch;
        0
    }

    /// The sealed bytes not yet sent (see [`SocketIo::seal`]).
    fn sealed(&self) -> &[u8] {
        &[]
    }

    /// What the caller's send of [`SocketIo::sealed`] did: bytes written, or its error.
    fn sealed_sent(&mut self, result: &io::Result<usize>) {
        let _ = result;
    }

    /// True while a receive this I/O started has not completed: its region is the kernel's.
    fn receive_in_flight(&self) -> bool {
        false
    }

    /// The outcome of the receive in flight, once it has completed; [`Received::Nothing`]
    /// while it has not. Called only while one is in flight.
    fn receive_completion(&mut self) -> Result<Received, TransportError> {
        Ok(Received::Nothing)
    }

    /// Cancels the receive in flight, if any, and waits (a bounded time) for its completion.
    /// True when none is in flight any more; false means the region may still be written, so
    /// its memory must never be freed.
    fn cancel_receive(&mut self) -> bool {
        true
    }
}

/// What one receive did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received {
    /// Nothing to read now (the socket said EAGAIN), or the receive is still in flight.
    Nothing,
    /// The peer closed, or the connection broke in a way that means it is gone.
    Closed,
    /// `bytes` (at least one) were written at the front of a region of `requested` bytes.
    Bytes { bytes: usize, requested: usize },
}

/// The free part of a link's receive buffer, lent to its I/O for one receive. Safe code can
/// only write it within the call ([`ReceiveRegion::bytes`]); an I/O that hands it to the kernel
/// ([`ReceiveRegion::as_mut_ptr`]) may let the kernel write it until its receive completes,
/// which the link allows for (see the module's documentation).
#[derive(Debug)]
pub struct ReceiveRegion<'a> {
    pointer: *mut u8,
    len: usize,
    _buffer: PhantomData<&'a mut [u8]>,
}

impl<'a> ReceiveRegion<'a> {
    /// Lends `bytes` to an I/O.
    ///
    /// # Safety
    ///
    /// When the I/O leaves its receive in flight, the memory of `bytes` must stay allocated and
    /// unaccessed by anyone but that I/O's kernel operation until the I/O's
    /// [`SocketIo::receive_in_flight`] turns false, and must be leaked if
    /// [`SocketIo::cancel_receive`] cannot confirm that it did.
    unsafe fn lend(bytes: &'a mut [u8]) -> ReceiveRegion<'a> {
        ReceiveRegion {
            pointer: bytes.as_mut_ptr(),
            len: bytes.len(),
            _buffer: PhantomData,
        }
    }

    /// The region's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty region (never lent by a link: it keeps room for a whole frame).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The region, to be written during the call it was lent for.
    pub fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: `pointer` and `len` come from a `&'a mut [u8]` (see `lend`), and this borrow
        // of `self` cannot outlive `'a`.
        unsafe { std::slice::from_raw_parts_mut(self.pointer, self.len) }
    }

    /// The region's start, for an I/O that hands the region to the kernel. The kernel may
    /// write `len` bytes there until the I/O's receive completes (see `lend`).
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.pointer
    }
}

/// One link to one peer node over a connected TCP socket, its bytes moved by `I`.
pub struct SocketLink<I: SocketIo> {
    /// How bytes move between the socket and the buffers; fixed.
    pub(crate) io: I,
    /// The connected socket, non-blocking with TCP_NODELAY from construction on. Its descriptor
    /// is what the caller's poller waits on.
    stream: TcpStream,
    /// The node at the other end; fixed.
    peer: NodeId,
    /// Checksum=1 on this link: frames out carry a CRC-32 trailer, frames in must.
    checksum: bool,
    /// Encoded frames not yet taken by the kernel, bounded by the send limit. Its capacity is
    /// reserved at construction and never grows, so a pointer into it stays valid.
    send_buffer: SendBuffer,
    /// Bytes read and not yet decoded, and the sticky end states (peer closed, bad frame).
    /// Never reallocated; the part behind `end` is lent to the I/O for each receive.
    pub(crate) receive: ReceiveBuffer,
    /// Set when the last `receive` stopped at its read limit with the socket possibly not
    /// drained, left a receive in flight, or saw the peer's close behind frames it delivered:
    /// an edge-triggered poller will not report any of these again, so the caller must receive
    /// again before it sleeps.
    maybe_more_input: bool,
    /// The next `receive` may stop after a short read (see `stop_after_short_read`).
    short_read_drains: bool,
    /// The most bytes one `receive` reads (`limit_receive`; unbounded until then).
    receive_slice_bytes: usize,
    /// The peer's address is a loopback one (see `loopback_peer_cpu`).
    loopback: bool,
}

impl<I: SocketIo> SocketLink<I> {
    /// Wraps a connected stream (after the handshake) as a link to `peer`: sets the I/O up,
    /// switches the socket to non-blocking with TCP_NODELAY and allocates both buffers.
    /// [`TransportError::UringUnavailable`] where the kernel refuses the I/O.
    pub fn new(
        stream: TcpStream,
        peer: NodeId,
        settings: &LinkSettings,
    ) -> Result<SocketLink<I>, TransportError> {
        let io = I::open(&stream, peer)?;
        SocketLink::with_io(stream, io, peer, settings)
    }

    /// [`SocketLink::new`] with an I/O already set up for `stream`.
    pub(crate) fn with_io(
        stream: TcpStream,
        io: I,
        peer: NodeId,
        settings: &LinkSettings,
    ) -> Result<SocketLink<I>, TransportError> {
        stream
            .set_nonblocking(true)
            .map_err(|e| TransportError::io(format!("link to node {peer}: set non-blocking"), e))?;
        stream
            .set_nodelay(true)
            .map_err(|e| TransportError::io(format!("link to node {peer}: set TCP_NODELAY"), e))?;
        Ok(SocketLink {
            io,
            loopback: is_loopback(&stream),
            stream,
            peer,
            checksum: settings.checksum,
            send_buffer: SendBuffer::new(settings.send_limit_bytes()),
            receive: ReceiveBuffer::new(settings.receive_buffer_bytes_effective()),
            maybe_more_input: false,
            short_read_drains: false,
            receive_slice_bytes: usize::MAX,
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

    /// One receive of at most `max_bytes` into the free space, or the outcome of the one in
    /// flight.
    fn receive_once(&mut self, max_bytes: usize) -> Result<Received, TransportError> {
        if self.io.receive_in_flight() {
            // The region behind `end` is the kernel's: neither compact nor lend it again.
            return self.io.receive_completion();
        }
        self.receive.compact();
        let end = self.receive.end;
        debug_assert!(
            self.receive.bytes.len() - end >= FRAME_BYTES_MAX,
            "a partial frame is below the limit"
        );
        let limit = self.receive.bytes.len().min(end.saturating_add(max_bytes));
        // SAFETY: the receive buffer is a `Box<[u8]>` that is never reallocated. While the I/O
        // has a receive in flight, this link leaves `bytes[end..]` alone: it compacts and lends
        // only when none is (above), moves `end` only by what a completed receive wrote,
        // delivers only below `end`, and `Drop` has the I/O cancel the receive or leaks the
        // buffer.
        let region = unsafe { ReceiveRegion::lend(&mut self.receive.bytes[end..limit]) };
        self.io.receive(&self.stream, region)
    }
}

impl<I: SocketIo> Transporter for SocketLink<I> {
    fn peer(&self) -> NodeId {
        self.peer
    }

    fn peer_address(&self) -> Option<std::net::SocketAddr> {
        self.stream.peer_addr().ok()
    }

    fn is_encrypted(&self) -> bool {
        // A socket that carries records rather than frames carries TLS.
        !I::SOCKET_CARRIES_FRAMES
    }

    fn kind(&self) -> TransporterKind {
        I::KIND
    }

    fn send(&mut self, header: &FrameHeader, payload: &[u8]) -> Result<(), TransportError> {
        let appended = self
            .send_buffer
            .append(self.peer, header, payload, self.checksum);
        match appended {
            // The I/O's own unsent bytes (TLS records) count as pending too.
            Err(TransportError::Overloaded {
                peer,
                pending_bytes,
                limit_bytes,
            }) => Err(TransportError::Overloaded {
                peer,
                pending_bytes: pending_bytes + self.io.pending_bytes(),
                limit_bytes,
            }),
            other => other,
        }
    }

    fn flush(&mut self) -> Result<FlushStatus, TransportError> {
        // Each round either sends at least one byte or ends the flush.
        loop {
            if self.send_buffer.pending_bytes() == 0 {
                self.send_buffer.clear();
                return self.io.finish_send(&self.stream);
            }
            let batch = &self.send_buffer.bytes[self.send_buffer.offset..];
            let sent = self.io.send(&self.stream, batch)?;
            if let Some(status) = self.send_buffer.record_send(self.peer, sent)? {
                return Ok(status);
            }
        }
    }

    fn prepare_unsent(&mut self) {
        if I::SOCKET_CARRIES_FRAMES || self.send_buffer.pending_bytes() == 0 {
            return;
        }
        let taken = self
            .io
            .seal(&self.send_buffer.bytes[self.send_buffer.offset..]);
        if taken > 0 {
            // Taken whole into the sealed bytes: a write of `taken` cannot fail here.
            let _ = self.send_buffer.record_send(self.peer, Ok(taken));
        }
    }

    fn unsent_on_socket(&self) -> Option<(RawFd, &[u8])> {
        if !I::SOCKET_CARRIES_FRAMES {
            let sealed = self.io.sealed();
            return (!sealed.is_empty()).then_some((self.stream.as_raw_fd(), sealed));
        }
        Some((self.stream.as_raw_fd(), self.send_buffer.unsent()?))
    }

    fn sent_by_caller(&mut self, result: io::Result<usize>) -> Result<FlushStatus, TransportError> {
        if !I::SOCKET_CARRIES_FRAMES {
            // The sealed bytes' outcome; the flush sends what remains (sealed bytes first).
            self.io.sealed_sent(&result);
            return match result {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(FlushStatus::Pending),
                Err(e) if e.kind() != io::ErrorKind::Interrupted => {
                    self.send_buffer.record_send(self.peer, Err(e))?;
                    self.flush()
                }
                _ => self.flush(),
            };
        }
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
        // Read until the socket says EAGAIN, even after a short read: the poller is
        // edge-triggered, and a peer that sends its last frames and closes at once delivers
        // data and FIN together, so a short read that took the data leaves the EOF unread with
        // no further event to come. The price is one more read (EAGAIN) per receive with
        // input, saved when the caller's event said the peer had not closed.
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
            match self.receive_once(self.receive_slice_bytes - read_bytes_total)? {
                Received::Nothing => {
                    // EAGAIN, or a receive still in flight: then the caller must come back.
                    self.maybe_more_input = self.io.receive_in_flight();
                    break;
                }
                Received::Closed => {
                    self.receive.peer_closed = true;
                    if delivered == 0 {
                        return Err(TransportError::Closed { peer: self.peer });
                    }
                    // The frames before the close go out now, the close on the next call,
                    // which the caller makes without waiting for the poller.
                    self.maybe_more_input = true;
                    break;
                }
                Received::Bytes { bytes, requested } => {
                    read_bytes_total += bytes;
                    self.receive.end += bytes;
                    delivered += self.receive.deliver(self.peer, self.checksum, on_frame)?;
                    if short_read_drains && bytes < requested {
                        break;
                    }
                }
            }
        }
        Ok(delivered)
    }

    fn pending_send_bytes(&self) -> usize {
        self.send_buffer.pending_bytes() + self.io.pending_bytes()
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
        self.maybe_more_input || self.io.input_buffered()
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
        if !self.loopback {
            return None;
        }
        socket2::SockRef::from(&self.stream).cpu_affinity().ok()
    }
}

impl<I: SocketIo> Drop for SocketLink<I> {
    /// A receive still in flight may write the receive buffer: the I/O cancels it and waits
    /// for its completion before the buffer is freed. Without a confirmation, leak the buffer.
    fn drop(&mut self) {
        if !self.io.cancel_receive() {
            tracing::error!(
                peer = %self.peer,
                "{} receive not confirmed cancelled; leaking its receive buffer",
                I::LINK_NAME
            );
            std::mem::forget(std::mem::take(&mut self.receive.bytes));
        }
    }
}

impl<I: SocketIo> std::fmt::Debug for SocketLink<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(I::LINK_NAME)
            .field("peer", &self.peer)
            .field("fd", &self.stream.as_raw_fd())
            .field("checksum", &self.checksum)
            .field("pending_send_bytes", &self.pending_send_bytes())
            .field("send_limit_bytes", &self.send_buffer.limit_bytes)
            .field("undecoded_bytes", &self.receive.undecoded_bytes())
            .field("io", &self.io)
            .finish()
    }
}

/// True when `stream`'s peer has a loopback address.
fn is_loopback(stream: &TcpStream) -> bool {
    stream.peer_addr().is_ok_and(|a| a.ip().is_loopback())
}

/// The link over a scripted I/O: the seam a simulated I/O uses, and the receive loop's rules
/// checked without a kernel's timing.
#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::net::TcpListener;

    use super::*;

    /// One scripted answer to a receive.
    #[derive(Debug)]
    enum Step {
        Bytes(Vec<u8>),
        Nothing,
        Closed,
    }

    /// Answers receives from a script (then EAGAIN) and takes at most `send_bytes_max` bytes
    /// per send (0: the socket is full).
    #[derive(Debug, Default)]
    struct ScriptedIo {
        steps: VecDeque<Step>,
        sent: Vec<u8>,
        send_bytes_max: usize,
        receive_calls: usize,
    }

    impl SocketIo for ScriptedIo {
        const KIND: TransporterKind = TransporterKind::Tcp;
        const LINK_NAME: &'static str = "ScriptedLink";

        fn open(_stream: &TcpStream, _peer: NodeId) -> Result<ScriptedIo, TransportError> {
            Ok(ScriptedIo::default())
        }

        fn send(
            &mut self,
            _stream: &TcpStream,
            batch: &[u8],
        ) -> Result<io::Result<usize>, TransportError> {
            if self.send_bytes_max == 0 {
                return Ok(Err(io::ErrorKind::WouldBlock.into()));
            }
            let taken = batch.len().min(self.send_bytes_max);
            self.sent.extend_from_slice(&batch[..taken]);
            Ok(Ok(taken))
        }

        fn receive(
            &mut self,
            _stream: &TcpStream,
            mut region: ReceiveRegion<'_>,
        ) -> Result<Received, TransportError> {
            self.receive_calls += 1;
            let requested = region.len();
            match self.steps.pop_front().unwrap_or(Step::Nothing) {
                Step::Bytes(mut bytes) => {
                    if bytes.len() > requested {
                        self.steps
                            .push_front(Step::Bytes(bytes.split_off(requested)));
                    }
                    region.bytes()[..bytes.len()].copy_from_slice(&bytes);
                    Ok(Received::Bytes {
                        bytes: bytes.len(),
                        requested,
                    })
                }
                Step::Nothing => Ok(Received::Nothing),
                Step::Closed => Ok(Received::Closed),
            }
        }
    }

    fn scripted_link(steps: Vec<Step>, send_bytes_max: usize) -> SocketLink<ScriptedIo> {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let stream = TcpStream::connect(listener.local_addr().expect("address")).expect("connect");
        let io = ScriptedIo {
            steps: steps.into(),
            send_bytes_max,
            ..ScriptedIo::default()
        };
        SocketLink::with_io(stream, io, NodeId(9), &LinkSettings::default()).expect("link")
    }

    fn frame_bytes(request_id: u32) -> Vec<u8> {
        let header = FrameHeader {
            request_id,
            ..FrameHeader::default()
        };
        let mut bytes = Vec::new();
        frame::encode_into(&mut bytes, &header, b"payload", false).expect("encode");
        bytes
    }

    fn receive_ids(link: &mut SocketLink<ScriptedIo>) -> Result<Vec<u32>, TransportError> {
        let mut ids = Vec::new();
        link.receive(&mut |header, _| ids.push(header.request_id))?;
        Ok(ids)
    }

    /// A frame split over two reads is delivered once, whole, and the loop reads on to EAGAIN.
    #[test]
    fn a_frame_split_over_reads_is_delivered_once_whole() {
        let mut bytes = frame_bytes(1);
        let tail = bytes.split_off(5);
        let mut link = scripted_link(vec![Step::Bytes(bytes), Step::Bytes(tail)], 0);
        assert_eq!(receive_ids(&mut link).expect("receive"), [1]);
        assert_eq!(link.io.receive_calls, 3, "two reads and the EAGAIN");
        assert!(!link.input_pending());
    }

    /// After a readiness event without the peer's close, a short read ends the receive.
    #[test]
    fn a_short_read_ends_the_receive_only_when_asked() {
        let steps = || vec![Step::Bytes(frame_bytes(1)), Step::Bytes(frame_bytes(2))];
        let mut link = scripted_link(steps(), 0);
        link.stop_after_short_read();
        assert_eq!(receive_ids(&mut link).expect("receive"), [1]);
        assert_eq!(receive_ids(&mut link).expect("receive"), [2]);
        let mut link = scripted_link(steps(), 0);
        assert_eq!(receive_ids(&mut link).expect("receive"), [1, 2]);
    }

    /// Frames before a close are delivered, the caller is told to come back, and then sees
    /// Closed, every time after.
    #[test]
    fn frames_before_a_close_come_first_then_closed_sticks() {
        let mut link = scripted_link(vec![Step::Bytes(frame_bytes(4)), Step::Closed], 0);
        assert_eq!(receive_ids(&mut link).expect("receive"), [4]);
        assert!(
            link.input_pending(),
            "the close is reported on the next call"
        );
        for _ in 0..2 {
            assert!(matches!(
                receive_ids(&mut link),
                Err(TransportError::Closed { peer: NodeId(9) })
            ));
        }
    }

    /// One receive makes at most RECEIVE_READS_PER_CALL_MAX reads, then says come back.
    #[test]
    fn a_receive_stops_at_its_read_limit() {
        let steps = (0..RECEIVE_READS_PER_CALL_MAX as u32 + 2)
            .map(|id| Step::Bytes(frame_bytes(id)))
            .collect();
        let mut link = scripted_link(steps, 0);
        let ids = receive_ids(&mut link).expect("receive");
        assert_eq!(ids.len(), RECEIVE_READS_PER_CALL_MAX);
        assert!(link.input_pending());
        assert_eq!(receive_ids(&mut link).expect("receive").len(), 2);
        assert!(!link.input_pending());
        assert!(link.io.steps.is_empty());
    }

    /// Partial sends are finished within one flush; a full socket leaves the rest Pending.
    #[test]
    fn a_flush_finishes_partial_sends_and_stops_at_a_full_socket() {
        let mut link = scripted_link(Vec::new(), 7);
        for id in 0..3 {
            link.send(&FrameHeader::default(), &frame_bytes(id))
                .expect("send");
        }
        let pending = link.pending_send_bytes();
        assert_eq!(link.flush().expect("flush"), FlushStatus::Done);
        assert_eq!(link.io.sent.len(), pending);
        link.send(&FrameHeader::default(), b"later").expect("send");
        link.io.send_bytes_max = 0;
        assert_eq!(link.flush().expect("flush"), FlushStatus::Pending);
        assert!(link.pending_send_bytes() > 0);
    }
}

/// What the kernel counted for one TCP socket since it was connected (Linux `TCP_INFO`): the
/// stream bytes the peer acknowledged and the stream bytes received (TCP payload, without IP
/// and TCP headers), and the segments each way (each carries 52 bytes of IPv4 and TCP headers
/// with timestamps on loopback).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelTcpBytes {
    /// `tcpi_bytes_acked`: bytes sent and acknowledged by the peer (on the connecting side the
    /// SYN counts as one).
    pub bytes_acked: u64,
    /// `tcpi_bytes_received`: bytes received in order.
    pub bytes_received: u64,
    /// `tcpi_segs_out`: segments sent, acknowledgements and retransmissions included.
    pub segments_out: u32,
    /// `tcpi_segs_in`: segments received.
    pub segments_in: u32,
}

/// Offsets in Linux's `struct tcp_info` (include/uapi/linux/tcp.h): 8 single-byte fields, 24
/// `u32` fields, `tcpi_pacing_rate` and `tcpi_max_pacing_rate` (u64), then the four read here
/// (since Linux 4.1 and 4.2). libc's glibc `tcp_info` stops before them.
const TCPI_BYTES_ACKED_OFFSET: usize = 120;
const TCPI_BYTES_RECEIVED_OFFSET: usize = 128;
const TCPI_SEGS_OUT_OFFSET: usize = 136;
const TCPI_SEGS_IN_OFFSET: usize = 140;
const TCPI_BYTES_NEEDED: usize = 144;

/// The kernel's byte and segment counts for the TCP socket `fd` (`getsockopt(TCP_INFO)`).
/// Fails when `fd` is not a TCP socket, or on a kernel too old to count bytes.
pub fn kernel_tcp_bytes(fd: RawFd) -> io::Result<KernelTcpBytes> {
    // Room for today's whole struct (about 250 bytes) and growth; u64s for alignment.
    let mut info = [0u64; 64];
    let mut len = std::mem::size_of_val(&info) as libc::socklen_t;
    // SAFETY: `info` is writable for `len` bytes and outlives the call; the kernel writes at
    // most `len` bytes and stores the length it wrote in `len`. A bad `fd` is an error return.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast::<libc::c_void>(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    if (len as usize) < TCPI_BYTES_NEEDED {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("TCP_INFO is {len} bytes, without byte counts (needs {TCPI_BYTES_NEEDED})"),
        ));
    }
    let bytes: Vec<u8> = info.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let u64_at = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[at..at + 8]);
        u64::from_ne_bytes(b)
    };
    let u32_at = |at: usize| {
        let mut b = [0u8; 4];
        b.copy_from_slice(&bytes[at..at + 4]);
        u32::from_ne_bytes(b)
    };
    Ok(KernelTcpBytes {
        bytes_acked: u64_at(TCPI_BYTES_ACKED_OFFSET),
        bytes_received: u64_at(TCPI_BYTES_RECEIVED_OFFSET),
        segments_out: u32_at(TCPI_SEGS_OUT_OFFSET),
        segments_in: u32_at(TCPI_SEGS_IN_OFFSET),
    })
}

#[cfg(test)]
mod kernel_tcp_bytes_tests {
    //! The kernel's counts read through `TCP_INFO` are the bytes written and read on a real
    //! loopback connection, at the offsets this module assumes.

    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    use super::kernel_tcp_bytes;

    #[test]
    fn counts_the_bytes_written_and_read() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        // The kernel counts the SYN as an acknowledged byte: compare against the start.
        let start = kernel_tcp_bytes(client.as_raw_fd()).unwrap();
        client.write_all(&[7u8; 1234]).unwrap();
        let mut got = vec![0u8; 1234];
        server.read_exact(&mut got).unwrap();
        server.write_all(&[9u8; 56]).unwrap();
        let mut back = [0u8; 56];
        client.read_exact(&mut back).unwrap();
        // The client read the server's 56 bytes, so the server's data acknowledged the 1234.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let now = kernel_tcp_bytes(client.as_raw_fd()).unwrap();
            let counts = (
                now.bytes_acked - start.bytes_acked,
                now.bytes_received - start.bytes_received,
            );
            if counts.0 == 1234 || std::time::Instant::now() > deadline {
                assert_eq!(counts, (1234, 56), "{now:?} since {start:?}");
                assert!(now.segments_out > start.segments_out);
                assert!(now.segments_in > start.segments_in);
                break;
            }
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_descriptor_that_is_no_tcp_socket_is_an_error() {
        let file = std::fs::File::open("/dev/null").unwrap();
        assert!(kernel_tcp_bytes(file.as_raw_fd()).is_err());
    }
}
