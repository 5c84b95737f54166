//! The io_uring link: the TCP link's frames, buffers and limits, with the bytes moved by an
//! io_uring (one small ring per link) instead of `send`/`recv` system calls.
//!
//! The wire is plain TCP, byte for byte what a [`TcpLink`] writes, so a
//! Uring link talks to a TCP link (the peer cannot tell). Only the data movement differs:
//!
//! - `flush` puts the whole unsent part of the send buffer in one SEND SQE, submits it and reaps
//!   its completion: one `io_uring_enter` per flush, whatever the number of frames in the batch.
//!   A partial send advances the send buffer's offset and submits the rest; EAGAIN answers
//!   [`FlushStatus::Pending`].
//! - `receive` puts one RECV SQE over the free part of the receive buffer, submits it and peeks
//!   the completion queue (never `submit_and_wait`), then decodes in place as the TCP link does.
//!
//! **Every SQE carries `MSG_DONTWAIT`.** The kernel then tries the operation once, inline, during
//! `io_uring_enter`, and posts the result (bytes, or -EAGAIN) before the call returns, instead of
//! arming its internal poll and completing later. So no operation stays in flight between calls:
//! the kernel never holds our buffers while the caller runs, and readiness works exactly as for
//! the TCP link.
//!
//! **Readiness: [`Transporter::poll_fd`] is the TCP socket itself.** The caller's epoll waits on
//! it as it does for a TCP link, so a thread serving TCP, SHM and Uring links still sleeps in one
//! place. An eventfd registered with the ring (`register_eventfd`) would only be needed with a
//! RECV left outstanding across calls; that design lends the kernel the receive buffer while the
//! caller runs, needs a cancel-and-wait on every drop, and posts completions from task work that
//! runs only when the thread next enters the kernel, which is a lost-wake-up hazard next to an
//! edge-triggered epoll. With inline completions none of that arises.
//!
//! Should a completion ever not be posted by the time `submit()` returns (not expected with
//! `MSG_DONTWAIT`, but not promised by the kernel either), the link stays correct: a RECV is
//! marked in flight, its buffer region is left alone, later calls peek for it, `input_pending`
//! stays true so the caller comes back, and `Drop` cancels it and waits for its completion
//! before the buffer is freed. A SEND is waited for in `flush` (bounded: the SEND cannot wait on
//! the socket).
//!
//! Where the kernel refuses io_uring (`io_uring_setup` fails with ENOSYS, or EPERM when
//! `kernel.io_uring_disabled=2` or a seccomp filter forbids it), [`UringLink::new`] returns
//! [`TransportError::UringUnavailable`], whose message names the fallback: a TCP link.
//! [`open_link_or_tcp`] does that fallback for the data node and the API.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::OnceLock;

use io_uring::{opcode, squeue, types, IoUring, Probe};

use crate::buffers::{ReceiveBuffer, SendBuffer};
use crate::frame::{self, FrameHeader, FRAME_BYTES_MAX};
use crate::tcp::{is_disconnect, TcpLink};
use crate::{FlushStatus, LinkSettings, NodeId, TransportError, Transporter, TransporterKind};

/// Submission queue entries per link ring. A link has at most one data SQE and one cancel SQE
/// queued at a time; the kernel rounds the completion queue to twice this.
pub const RING_ENTRIES: u32 = 8;

/// The link's socket, registered as file 0 of its ring.
const REGISTERED_SOCKET: types::Fixed = types::Fixed(0);

/// The most RECVs one `receive` call submits, so one busy peer cannot starve the other links of
/// a loop that polls many. Each RECV can fill the whole free part of the receive buffer.
pub const RECEIVE_SUBMITS_PER_CALL_MAX: usize = 8;

/// How many times `Drop` waits for a cancelled RECV's completion before it gives the receive
/// buffer up (leaks it) rather than free memory the kernel might still write.
pub const DROP_WAITS_MAX: usize = 100;

/// The user_data of a RECV SQE.
const USER_DATA_RECV: u64 = 1;
/// The user_data of a SEND SQE.
const USER_DATA_SEND: u64 = 2;
/// The user_data of an ASYNC_CANCEL SQE.
const USER_DATA_CANCEL: u64 = 3;

// One SQE carries at most u32::MAX bytes; the send limit and receive buffer are far below, but a
// longer buffer would only mean a partial operation, which both paths handle.
const _: () = assert!(RING_ENTRIES >= 2);

/// Checks once per process that this kernel lets us create an io_uring and that it supports
/// SEND, RECV and ASYNC_CANCEL. `Err` holds the reason, for messages and skipped tests.
pub fn uring_available() -> Result<(), String> {
    static AVAILABLE: OnceLock<Result<(), String>> = OnceLock::new();
    AVAILABLE.get_or_init(probe_kernel).clone()
}

/// Wraps `stream` in a [`UringLink`]; where io_uring is unavailable, logs a warning that names
/// the fallback and wraps it in a [`TcpLink`] instead. The peer does not care: the bytes on the
/// wire are identical. Other errors are returned.
pub fn open_link_or_tcp(
    stream: TcpStream,
    peer: NodeId,
    settings: &LinkSettings,
) -> Result<Box<dyn Transporter>, TransportError> {
    // A second descriptor for the same socket, so the fallback still has one after `new`
    // consumed (and on failure dropped) the first. Closing the spare does not shut the socket.
    let spare = stream
        .try_clone()
        .map_err(|e| TransportError::io(format!("link to node {peer}: duplicate socket"), e))?;
    match UringLink::new(stream, peer, settings) {
        Ok(link) => Ok(Box::new(link)),
        Err(e @ TransportError::UringUnavailable { .. }) => {
            tracing::warn!(%peer, "{e}; falling back to a TCP link for this connection");
            Ok(Box::new(TcpLink::new(spare, peer, settings)?))
        }
        Err(e) => Err(e),
    }
}

/// One TCP link to one peer node whose bytes move through an io_uring.
pub struct UringLink {
    /// This link's ring; only this link submits to it.
    ring: IoUring,
    /// The connected socket, non-blocking with TCP_NODELAY from construction on. Its descriptor
    /// is what SQEs name and what the caller's poller waits on.
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
    /// `Some(len)` while a RECV of `len` bytes into `receive.bytes[receive.end..]` has been
    /// submitted and its completion not yet reaped: the kernel may write that region, so the
    /// buffer is neither compacted nor freed until it completes.
    recv_in_flight: Option<usize>,
    /// A reaped RECV result (bytes or -errno) not yet acted on.
    recv_result: Option<i32>,
    /// A reaped SEND result (bytes or -errno) not yet acted on.
    send_result: Option<i32>,
    /// Set when the last `receive` stopped at its RECV limit with the socket possibly not
    /// drained, with a RECV in flight, or after seeing the peer's close behind frames it
    /// delivered: the caller must receive again before it sleeps.
    maybe_more_input: bool,
    /// The next `receive` may stop after a short RECV (see `stop_after_short_read`).
    short_read_drains: bool,
    /// The most bytes one `receive` takes in (`limit_receive`; unbounded until then).
    receive_slice_bytes: usize,
    /// The peer's address is a loopback one (see `loopback_peer_cpu`).
    loopback: bool,
}

impl UringLink {
    /// Wraps a connected stream (after the handshake) as a link to `peer`: creates the ring,
    /// switches the socket to non-blocking with TCP_NODELAY and allocates both buffers. Returns
    /// [`TransportError::UringUnavailable`] where the kernel refuses io_uring.
    pub fn new(
        stream: TcpStream,
        peer: NodeId,
        settings: &LinkSettings,
    ) -> Result<UringLink, TransportError> {
        uring_available().map_err(|reason| TransportError::UringUnavailable { reason })?;
        let ring = IoUring::new(RING_ENTRIES).map_err(|e| TransportError::UringUnavailable {
            reason: setup_refusal(&e),
        })?;
        // The socket is registered with the ring, so each SQE names it by index and the
        // kernel skips the descriptor lookup (and its reference counting) per operation.
        ring.submitter()
            .register_files(&[stream.as_raw_fd()])
            .map_err(|e| {
                TransportError::io(
                    format!("link to node {peer}: register the socket with io_uring"),
                    e,
                )
            })?;
        stream
            .set_nonblocking(true)
            .map_err(|e| TransportError::io(format!("link to node {peer}: set non-blocking"), e))?;
        stream
            .set_nodelay(true)
            .map_err(|e| TransportError::io(format!("link to node {peer}: set TCP_NODELAY"), e))?;
        let send_limit_bytes = settings.send_limit_bytes();
        Ok(UringLink {
            ring,
            loopback: crate::tcp::is_loopback(&stream),
            stream,
            peer,
            checksum: settings.checksum,
            send_buffer: SendBuffer::new(send_limit_bytes),
            receive: ReceiveBuffer::new(settings.receive_buffer_bytes_effective()),
            recv_in_flight: None,
            recv_result: None,
            send_result: None,
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

    /// Queues `entry` and submits it (with anything else queued), without waiting.
    ///
    /// # Safety
    ///
    /// Every buffer `entry` points to must stay valid, and unused by us in the way the operation
    /// uses it (written for a RECV, read for a SEND), until its completion has been reaped.
    unsafe fn submit(&mut self, entry: &squeue::Entry, what: &str) -> Result<(), TransportError> {
        // SAFETY: the caller keeps the entry's buffers valid until its completion (see above).
        let pushed = unsafe { self.ring.submission().push(entry) };
        if pushed.is_err() {
            // At most two SQEs are ever queued and every submit drains the queue, so a full
            // queue means the ring is unusable; report it rather than spin.
            return Err(TransportError::io(
                format!("link to node {}: {what}: submission queue full", self.peer),
                io::Error::from(io::ErrorKind::Other),
            ));
        }
        self.submit_queued(0, what)
    }

    /// Submits every queued SQE and waits for `want` completions (0: does not wait).
    fn submit_queued(&mut self, want: usize, what: &str) -> Result<(), TransportError> {
        loop {
            match self.ring.submit_and_wait(want) {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // EBUSY: completions must be reaped before more can be submitted; reaping
                // happens right after, and the SQE stays queued for the next submit.
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => return Ok(()),
                Err(e) => {
                    return Err(TransportError::io(
                        format!("link to node {}: {what}: io_uring_enter", self.peer),
                        e,
                    ))
                }
            }
        }
    }

    /// Moves every posted completion into `recv_result` / `send_result`.
    fn reap(&mut self) {
        for cqe in self.ring.completion() {
            match cqe.user_data() {
                USER_DATA_RECV => {
                    self.recv_in_flight = None;
                    self.recv_result = Some(cqe.result());
                }
                USER_DATA_SEND => self.send_result = Some(cqe.result()),
                // A cancel's own result says only whether it found the RECV; the RECV's
                // completion is what matters.
                _ => {}
            }
        }
    }

    /// One SEND of the unsent bytes, waited for. Returns the bytes sent or -errno.
    fn send_once(&mut self) -> Result<i32, TransportError> {
        let unsent = &self.send_buffer.bytes[self.send_buffer.offset..];
        let len = u32::try_from(unsent.len()).unwrap_or(u32::MAX);
        let entry = opcode::Send::new(REGISTERED_SOCKET, unsent.as_ptr(), len)
            .flags(libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
            .build()
            .user_data(USER_DATA_SEND);
        // SAFETY: the SEND reads `len` bytes of `send_buffer.bytes` from `send_buffer.offset`. This function
        // holds `&mut self` until the completion is reaped below, so nothing writes, moves or
        // frees the buffer meanwhile (its capacity is reserved and never grows).
        unsafe { self.submit(&entry, "send")? };
        self.reap();
        while self.send_result.is_none() {
            // Not expected with MSG_DONTWAIT (the SEND cannot wait on the socket), but the
            // buffer must not be released before the kernel is done with it.
            self.submit_queued(1, "send")?;
            self.reap();
        }
        Ok(self.send_result.take().unwrap_or(-libc::EIO))
    }

    /// One RECV of at most `max_bytes` into the free space, or the completion of the one in
    /// flight. `Ok(None)` means nothing now (or still in flight); `Ok(Some(0))` means the peer
    /// closed. The second value is how many bytes the RECV asked for.
    fn recv_once(&mut self, max_bytes: usize) -> Result<(Option<usize>, usize), TransportError> {
        let requested = match self.recv_in_flight {
            Some(requested) => {
                // Entering the kernel runs any task work that would post its completion.
                self.submit_queued(0, "receive")?;
                requested
            }
            None => {
                self.compact_receive_buffer();
                let free = &mut self.receive.bytes[self.receive.end..];
                debug_assert!(
                    free.len() >= FRAME_BYTES_MAX,
                    "a partial frame is below the limit"
                );
                let requested = free.len().min(max_bytes).min(u32::MAX as usize);
                let entry =
                    opcode::Recv::new(REGISTERED_SOCKET, free.as_mut_ptr(), requested as u32)
                        .flags(libc::MSG_DONTWAIT)
                        .build()
                        .user_data(USER_DATA_RECV);
                self.recv_in_flight = Some(requested);
                // SAFETY: the RECV writes at most `requested` bytes at `receive.end`. While
                // `recv_in_flight` is set, nothing reads, compacts or frees that region:
                // `recv_once` skips compaction, `deliver` reads only below `receive.end`, and
                // `Drop` waits for the completion (or leaks the buffer).
                unsafe { self.submit(&entry, "receive")? };
                requested
            }
        };
        self.reap();
        let Some(result) = self.recv_result.take() else {
            return Ok((None, requested));
        };
        let outcome = match result {
            bytes @ 0.. => Some(bytes as usize),
            errno if errno == -libc::EAGAIN || errno == -libc::EINTR => None,
            errno => {
                let e = io::Error::from_raw_os_error(-errno);
                if !is_disconnect(&e) {
                    return Err(TransportError::io(
                        format!("link to node {}: receive", self.peer),
                        e,
                    ));
                }
                Some(0)
            }
        };
        debug_assert!(!matches!(outcome, Some(bytes) if bytes > requested));
        Ok((outcome.map(|bytes| bytes.min(requested)), requested))
    }

    /// Moves the undecoded bytes of the receive buffer to its front.
    fn compact_receive_buffer(&mut self) {
        debug_assert!(self.recv_in_flight.is_none());
        self.receive.compact();
    }
}

impl Transporter for UringLink {
    fn peer(&self) -> NodeId {
        self.peer
    }

    fn kind(&self) -> TransporterKind {
        TransporterKind::Uring
    }

    fn send(&mut self, header: &FrameHeader, payload: &[u8]) -> Result<(), TransportError> {
        self.send_buffer
            .append(self.peer, header, payload, self.checksum)
    }

    fn flush(&mut self) -> Result<FlushStatus, TransportError> {
        // Each round either sends at least one byte or ends the flush.
        loop {
            if self.send_buffer.pending_bytes() == 0 {
                self.send_buffer.clear();
                return Ok(FlushStatus::Done);
            }
            let sent = match self.send_once()? {
                bytes @ 0.. => Ok(bytes as usize),
                errno => Err(io::Error::from_raw_os_error(-errno)),
            };
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
        // RECV until the socket says EAGAIN, even after a short one: the poller is
        // edge-triggered, and a peer that sends its last frames and closes at once delivers
        // data and FIN together, so a short RECV that took the data leaves the EOF unread with
        // no further event to come (see the TCP link) — unless the caller's event said the peer
        // had not closed.
        let short_read_drains = std::mem::take(&mut self.short_read_drains);
        let mut submits = 0;
        let mut received_total = 0;
        loop {
            if submits == RECEIVE_SUBMITS_PER_CALL_MAX || received_total >= self.receive_slice_bytes
            {
                // Not drained: the caller must come back before it sleeps.
                self.maybe_more_input = true;
                break;
            }
            submits += 1;
            let (received, requested) =
                self.recv_once(self.receive_slice_bytes - received_total)?;
            match received {
                None => {
                    // EAGAIN, or a RECV still in flight: then the caller must come back.
                    self.maybe_more_input = self.recv_in_flight.is_some();
                    break;
                }
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
                Some(received_bytes) => {
                    received_total += received_bytes;
                    self.receive.end += received_bytes;
                    delivered += self.receive.deliver(self.peer, self.checksum, on_frame)?;
                    if short_read_drains && received_bytes < requested {
                        break;
                    }
                }
            }
        }
        Ok(delivered)
    }

    fn stop_after_short_read(&mut self) {
        self.short_read_drains = true;
    }

    fn limit_receive(&mut self, bytes: usize) {
        self.receive_slice_bytes = bytes.max(1);
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

    fn poll_fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }

    fn loopback_peer_cpu(&self) -> Option<usize> {
        crate::tcp::incoming_cpu(&self.stream, self.loopback)
    }
}

impl Drop for UringLink {
    /// A RECV still in flight may write the receive buffer: cancel it and wait for its
    /// completion before the buffer is freed. Without a confirmation, leak the buffer.
    fn drop(&mut self) {
        if !self.cancel_in_flight_recv() {
            tracing::error!(
                peer = %self.peer,
                "io_uring RECV not confirmed cancelled; leaking its receive buffer"
            );
            std::mem::forget(std::mem::take(&mut self.receive.bytes));
        }
    }
}

impl UringLink {
    /// Cancels the RECV in flight, if any, and waits (a bounded number of times) for its
    /// completion. True when no RECV is in flight any more.
    fn cancel_in_flight_recv(&mut self) -> bool {
        if self.recv_in_flight.is_none() {
            return true;
        }
        let cancel = opcode::AsyncCancel::new(USER_DATA_RECV)
            .build()
            .user_data(USER_DATA_CANCEL);
        let mut cancel_sent = false;
        for _ in 0..DROP_WAITS_MAX {
            if !cancel_sent {
                // SAFETY: ASYNC_CANCEL points at no buffer of ours; it names the RECV by
                // user_data.
                cancel_sent = unsafe { self.submit(&cancel, "cancel receive") }.is_ok();
            } else if self.submit_queued(1, "cancel receive").is_err() {
                return false;
            }
            self.reap();
            if self.recv_in_flight.is_none() {
                return true;
            }
        }
        false
    }
}

impl std::fmt::Debug for UringLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringLink")
            .field("peer", &self.peer)
            .field("fd", &self.stream.as_raw_fd())
            .field("ring_fd", &self.ring.as_raw_fd())
            .field("checksum", &self.checksum)
            .field("pending_send_bytes", &self.pending_send_bytes())
            .field("send_limit_bytes", &self.send_buffer.limit_bytes)
            .field("undecoded_bytes", &self.receive.undecoded_bytes())
            .field("recv_in_flight", &self.recv_in_flight)
            .finish()
    }
}

/// Creates a small ring and asks it which operations this kernel supports.
fn probe_kernel() -> Result<(), String> {
    let ring: IoUring = IoUring::new(2).map_err(|e| setup_refusal(&e))?;
    let mut probe = Probe::new();
    ring.submitter()
        .register_probe(&mut probe)
        .map_err(|e| format!("io_uring probe failed ({e}); kernel older than 5.6?"))?;
    for (code, name) in [
        (opcode::Send::CODE, "SEND"),
        (opcode::Recv::CODE, "RECV"),
        (opcode::AsyncCancel::CODE, "ASYNC_CANCEL"),
    ] {
        if !probe.is_supported(code) {
            return Err(format!("io_uring has no {name} operation on this kernel"));
        }
    }
    Ok(())
}

/// Says why `io_uring_setup` failed, in words an operator can act on.
pub fn setup_refusal(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ENOSYS) => {
            "io_uring_setup: ENOSYS, the kernel was built without io_uring".into()
        }
        Some(libc::EPERM) => {
            let disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".into());
            format!(
                "io_uring_setup: EPERM, refused by kernel.io_uring_disabled={disabled} or by a \
                 seccomp filter (containers often forbid io_uring)"
            )
        }
        Some(libc::ENOMEM) => {
            "io_uring_setup: ENOMEM, out of memory or over the locked-memory limit".into()
        }
        _ => format!("io_uring_setup: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;
    use std::time::{Duration, Instant};

    /// A Uring link (to node 2) and the raw socket at its other end; `None` without io_uring.
    fn link_and_raw_peer() -> Option<(UringLink, TcpStream)> {
        if let Err(reason) = uring_available() {
            println!("skipped: io_uring unavailable: {reason}");
            return None;
        }
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("address")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        let link = UringLink::new(client, NodeId(2), &LinkSettings::default()).expect("link");
        Some((link, server))
    }

    fn encoded_frame(request_id: u32) -> Vec<u8> {
        let header = FrameHeader {
            signal: 7,
            receiver_block: 1,
            sender_block: 2,
            request_id,
        };
        let mut bytes = Vec::new();
        frame::encode_into(&mut bytes, &header, b"payload", false).expect("encode");
        bytes
    }

    /// Receives until one frame arrives, failing after a few seconds.
    fn receive_one(link: &mut UringLink) -> u32 {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut request_id = None;
        while request_id.is_none() {
            assert!(Instant::now() < deadline, "no frame arrived");
            link.receive(&mut |header, _| request_id = Some(header.request_id))
                .expect("receive");
        }
        request_id.unwrap_or_default()
    }

    /// The design rests on MSG_DONTWAIT making the kernel complete a RECV during the submit:
    /// on an idle socket, `receive` must come back with nothing in flight.
    #[test]
    fn a_receive_on_an_idle_socket_leaves_nothing_in_flight() {
        let Some((mut link, mut peer)) = link_and_raw_peer() else {
            return;
        };
        assert_eq!(link.receive(&mut |_, _| {}).expect("receive"), 0);
        assert_eq!(link.recv_in_flight, None, "the RECV completed inline");
        assert!(!link.input_pending());
        peer.write_all(&encoded_frame(5)).expect("write");
        assert_eq!(receive_one(&mut link), 5);
    }

    /// A RECV left outstanding (here one submitted without MSG_DONTWAIT, so the kernel parks
    /// it) is reaped by a later `receive`, keeps `input_pending` true meanwhile, and is
    /// cancelled and waited for when the link is dropped.
    #[test]
    fn an_outstanding_receive_is_reaped_later_and_cancelled_on_drop() {
        let Some((mut link, mut peer)) = link_and_raw_peer() else {
            return;
        };
        for request_id in [1, 2] {
            park_a_recv(&mut link);
            assert_eq!(link.receive(&mut |_, _| {}).expect("receive"), 0);
            assert!(link.recv_in_flight.is_some(), "the RECV is parked");
            assert!(link.input_pending(), "a parked RECV means come back");
            peer.write_all(&encoded_frame(request_id)).expect("write");
            assert_eq!(receive_one(&mut link), request_id);
        }
        park_a_recv(&mut link);
        assert!(link.cancel_in_flight_recv(), "the parked RECV is cancelled");
        park_a_recv(&mut link);
        drop(link);
        // The cancelled RECV must not have consumed these bytes into freed memory: the socket
        // is closed, so the write may fail, but the process must not crash.
        let _ = peer.write_all(&encoded_frame(3));
    }

    fn park_a_recv(link: &mut UringLink) {
        let free = &mut link.receive.bytes[link.receive.end..];
        let requested = free.len();
        let entry = opcode::Recv::new(REGISTERED_SOCKET, free.as_mut_ptr(), requested as u32)
            .build()
            .user_data(USER_DATA_RECV);
        link.recv_in_flight = Some(requested);
        // SAFETY: the link owns the buffer and follows the in-flight rules from here on.
        unsafe { link.submit(&entry, "park") }.expect("submit");
    }

    #[test]
    fn refusals_name_their_cause() {
        let check = |errno, phrase: &str| {
            let reason = setup_refusal(&io::Error::from_raw_os_error(errno));
            assert!(reason.contains(phrase), "{reason:?} lacks {phrase:?}");
        };
        check(libc::ENOSYS, "ENOSYS");
        check(libc::EPERM, "kernel.io_uring_disabled=");
        check(libc::ENOMEM, "locked-memory");
        check(libc::EINVAL, "io_uring_setup");
    }

    #[test]
    fn the_unavailable_error_names_the_fallback() {
        let message = TransportError::UringUnavailable {
            reason: "io_uring_setup: ENOSYS".into(),
        }
        .to_string();
        assert!(message.starts_with("io_uring is not available on this kernel (io_uring_setup"));
        assert!(message.ends_with("use a TCP link (remove UseIoUring=1)"));
    }
}
