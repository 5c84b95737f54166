//! The io_uring link: a [`SocketLink`] (the TCP link's frames, buffers, limits and receive
//! loop) whose bytes move through an io_uring (one small ring per link, [`UringIo`]) instead of
//! `send`/`read` system calls.
//!
//! The wire is plain TCP, byte for byte what a [`TcpLink`] writes, so a
//! Uring link talks to a TCP link (the peer cannot tell). Only the data movement differs:
//!
//! - `flush` puts the whole unsent part of the send buffer in one SEND SQE, submits it and reaps
//!   its completion: one `io_uring_enter` per flush, whatever the number of frames in the batch.
//!   A partial send advances the send buffer's offset and submits the rest; EAGAIN answers
//!   [`FlushStatus::Pending`](crate::FlushStatus::Pending).
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
//! marked in flight, its buffer region is left alone, later calls peek for it (a flush that
//! reaps its completion keeps the result for the next `receive`), `input_pending` stays true so
//! the caller comes back, and `Drop` cancels it and waits for its completion before the buffer
//! is freed. A SEND is waited for in `flush` (bounded: the SEND cannot wait on
//! the socket).
//!
//! Where the kernel refuses io_uring (`io_uring_setup` fails with ENOSYS, or EPERM when
//! `kernel.io_uring_disabled=2` or a seccomp filter forbids it), [`UringLink::new`] returns
//! [`TransportError::UringUnavailable`], whose message names the fallback: a TCP link.
//! [`open_link_or_tcp`] does that fallback for the data node and the API.

use std::io;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::OnceLock;

use io_uring::{opcode, squeue, types, IoUring, Probe};

use crate::error::is_disconnect;
use crate::socket_link::{ReceiveRegion, Received, SocketIo, SocketLink};
use crate::tcp::{SyscallIo, TcpLink};
use crate::{LinkSettings, NodeId, TransportError, Transporter, TransporterKind};

/// Submission queue entries per link ring. A link has at most one data SQE and one cancel SQE
/// queued at a time; the kernel rounds the completion queue to twice this.
pub const RING_ENTRIES: u32 = 8;

/// The link's socket, registered as file 0 of its ring.
const REGISTERED_SOCKET: types::Fixed = types::Fixed(0);

/// The most RECVs one `receive` call submits: the socket link's read limit, whatever moves
/// the bytes.
pub const RECEIVE_SUBMITS_PER_CALL_MAX: usize = crate::socket_link::RECEIVE_READS_PER_CALL_MAX;

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
    // The I/O is set up before the link takes the stream, so the fallback still has it.
    match UringIo::open(&stream, peer) {
        Ok(io) => Ok(Box::new(UringLink::with_io(stream, io, peer, settings)?)),
        Err(e @ TransportError::UringUnavailable { .. }) => {
            tracing::warn!(%peer, "{e}; falling back to a TCP link for this connection");
            let io = SyscallIo::open(&stream, peer)?;
            Ok(Box::new(TcpLink::with_io(stream, io, peer, settings)?))
        }
        Err(e) => Err(e),
    }
}

/// One TCP link to one peer node whose bytes move through an io_uring.
pub type UringLink = SocketLink<UringIo>;

/// Bytes moved by SEND and RECV operations on a small io_uring of the link's own, each
/// submitted with `MSG_DONTWAIT` so that it completes during the `io_uring_enter` that submits
/// it.
pub struct UringIo {
    /// This link's ring; only this link submits to it.
    ring: IoUring,
    /// The node at the other end, for error messages; fixed.
    peer: NodeId,
    /// `Some(len)` while a RECV of `len` bytes into the region the link lent has been
    /// submitted and its completion not yet reaped: the kernel may write that region, so the
    /// link neither compacts nor frees its receive buffer until it completes.
    pub(crate) recv_in_flight: Option<usize>,
    /// A reaped RECV result (bytes or -errno) not yet acted on, with the bytes that RECV asked
    /// for. Its bytes (if any) are behind the link's `end`: until the link takes the result,
    /// it must not compact or lend the region again either.
    recv_result: Option<(i32, usize)>,
    /// A reaped SEND result (bytes or -errno) not yet acted on.
    send_result: Option<i32>,
}

impl SocketIo for UringIo {
    const KIND: TransporterKind = TransporterKind::Uring;
    const LINK_NAME: &'static str = "UringLink";

    /// Creates the ring and registers the socket with it. Returns
    /// [`TransportError::UringUnavailable`] where the kernel refuses io_uring.
    fn open(stream: &TcpStream, peer: NodeId) -> Result<UringIo, TransportError> {
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
        Ok(UringIo {
            ring,
            peer,
            recv_in_flight: None,
            recv_result: None,
            send_result: None,
        })
    }

    /// One SEND of `batch`, waited for.
    fn send(
        &mut self,
        _stream: &TcpStream,
        batch: &[u8],
    ) -> Result<io::Result<usize>, TransportError> {
        let len = u32::try_from(batch.len()).unwrap_or(u32::MAX);
        let entry = opcode::Send::new(REGISTERED_SOCKET, batch.as_ptr(), len)
            .flags(libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
            .build()
            .user_data(USER_DATA_SEND);
        // SAFETY: the SEND reads `len` bytes of `batch`, which this function borrows until the
        // completion is reaped below, so nothing writes, moves or frees them meanwhile.
        unsafe { self.submit(&entry, "send")? };
        self.reap();
        while self.send_result.is_none() {
            // Not expected with MSG_DONTWAIT (the SEND cannot wait on the socket), but the
            // buffer must not be released before the kernel is done with it.
            self.submit_queued(1, "send")?;
            self.reap();
        }
        Ok(match self.send_result.take().unwrap_or(-libc::EIO) {
            bytes @ 0.. => Ok(bytes as usize),
            errno => Err(io::Error::from_raw_os_error(-errno)),
        })
    }

    /// One RECV into `region`, submitted and peeked for (never waited for).
    fn receive(
        &mut self,
        _stream: &TcpStream,
        mut region: ReceiveRegion<'_>,
    ) -> Result<Received, TransportError> {
        debug_assert!(!self.receive_in_flight());
        let requested = region.len().min(u32::MAX as usize);
        let entry = opcode::Recv::new(REGISTERED_SOCKET, region.as_mut_ptr(), requested as u32)
            .flags(libc::MSG_DONTWAIT)
            .build()
            .user_data(USER_DATA_RECV);
        self.recv_in_flight = Some(requested);
        // SAFETY: the RECV writes at most `requested` bytes of `region`. While
        // `recv_in_flight` is set, the link that lent the region leaves it alone and keeps it
        // allocated (the contract of `ReceiveRegion::lend`): it asks `receive_completion`
        // instead of lending it again, and on drop has `cancel_receive` wait for the
        // completion or leaks the buffer.
        unsafe { self.submit(&entry, "receive")? };
        self.reap_receive()
    }

    /// Also true while a completed RECV's result waits to be taken (a flush may reap it).
    fn receive_in_flight(&self) -> bool {
        self.recv_in_flight.is_some() || self.recv_result.is_some()
    }

    fn receive_completion(&mut self) -> Result<Received, TransportError> {
        // Entering the kernel runs any task work that would post its completion.
        self.submit_queued(0, "receive")?;
        self.reap_receive()
    }

    fn cancel_receive(&mut self) -> bool {
        self.cancel_in_flight_recv()
    }
}

impl UringIo {
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
                    let requested = self.recv_in_flight.take().unwrap_or(0);
                    self.recv_result = Some((cqe.result(), requested));
                }
                USER_DATA_SEND => self.send_result = Some(cqe.result()),
                // A cancel's own result says only whether it found the RECV; the RECV's
                // completion is what matters.
                _ => {}
            }
        }
    }

    /// Reaps, and answers what the last RECV did: [`Received::Nothing`] while it is still in
    /// flight or after EAGAIN.
    fn reap_receive(&mut self) -> Result<Received, TransportError> {
        self.reap();
        let Some((result, requested)) = self.recv_result.take() else {
            return Ok(Received::Nothing);
        };
        Ok(match result {
            0 => Received::Closed,
            bytes @ 1.. => {
                debug_assert!(bytes as usize <= requested);
                Received::Bytes {
                    bytes: (bytes as usize).min(requested),
                    requested,
                }
            }
            errno if errno == -libc::EAGAIN || errno == -libc::EINTR => Received::Nothing,
            errno => {
                let e = io::Error::from_raw_os_error(-errno);
                if !is_disconnect(&e) {
                    return Err(TransportError::io(
                        format!("link to node {}: receive", self.peer),
                        e,
                    ));
                }
                Received::Closed
            }
        })
    }

    /// Cancels the RECV in flight, if any, and waits (a bounded number of times) for its
    /// completion. True when no RECV is in flight any more.
    pub(crate) fn cancel_in_flight_recv(&mut self) -> bool {
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

impl std::fmt::Debug for UringIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringIo")
            .field("ring_fd", &self.ring.as_raw_fd())
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
    use crate::frame::{self, FrameHeader};
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
        assert_eq!(link.io.recv_in_flight, None, "the RECV completed inline");
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
            assert!(link.io.recv_in_flight.is_some(), "the RECV is parked");
            assert!(link.input_pending(), "a parked RECV means come back");
            peer.write_all(&encoded_frame(request_id)).expect("write");
            assert_eq!(receive_one(&mut link), request_id);
        }
        park_a_recv(&mut link);
        assert!(
            link.io.cancel_in_flight_recv(),
            "the parked RECV is cancelled"
        );
        park_a_recv(&mut link);
        drop(link);
        // The cancelled RECV must not have consumed these bytes into freed memory: the socket
        // is closed, so the write may fail, but the process must not crash.
        let _ = peer.write_all(&encoded_frame(3));
    }

    /// A flush reaps every completion, a parked RECV's too: its bytes must still reach the
    /// next `receive` (they were lost when that receive compacted and submitted over them).
    #[test]
    fn a_receive_completion_a_flush_reaped_is_delivered() {
        let Some((mut link, mut peer)) = link_and_raw_peer() else {
            return;
        };
        park_a_recv(&mut link);
        peer.write_all(&encoded_frame(9)).expect("write");
        let deadline = Instant::now() + Duration::from_secs(5);
        while link.io.recv_in_flight.is_some() {
            assert!(Instant::now() < deadline, "the parked RECV never completed");
            link.send(&FrameHeader::default(), b"ping").expect("send");
            link.flush().expect("flush");
        }
        assert!(link.io.receive_in_flight(), "its result waits for the link");
        assert_eq!(receive_one(&mut link), 9);
    }

    fn park_a_recv(link: &mut UringLink) {
        let free = &mut link.receive.bytes[link.receive.end..];
        let requested = free.len();
        let entry = opcode::Recv::new(REGISTERED_SOCKET, free.as_mut_ptr(), requested as u32)
            .build()
            .user_data(USER_DATA_RECV);
        link.io.recv_in_flight = Some(requested);
        // SAFETY: the link owns the buffer and follows the in-flight rules from here on.
        unsafe { link.io.submit(&entry, "park") }.expect("submit");
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
