//! [`ShmLink`]: the [`Transporter`] over a segment's two rings, two wake-up FIFOs and the pair's TCP socket.
#![forbid(unsafe_code)]

use std::fmt;
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rndb_config::LinkConfig;

use super::ring::{Consumer, Producer, RingBytes, RingError};
use super::segment::{MappedBytes, MappedControl, Segment};
use super::{SHM_LIVENESS_CHECK_INTERVAL_US, SHM_WAKE_BYTE};
use crate::error::is_disconnect;
use crate::frame::{self, Decoded, FRAME_BYTES_MAX};
use crate::settings::LinkSettings;
use crate::{
    FlushStatus, FrameHeader, NodeId, TransportError, Transporter, TransporterKind,
    SHM_RECEIVE_SLICE_BYTES,
};

/// Which end of the link this process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// Created the segment; sends on ring 0, receives on ring 1.
    Server,
    /// Attached to it; sends on ring 1, receives on ring 0.
    Client,
}

/// Wake-up bytes (or liveness-check bytes) read per system call.
const WAKE_DRAIN_BYTES: usize = 64;

/// A corruption a test can inject into this link's inbound ring, to check that the receiver
/// answers [`TransportError::BadFrame`] instead of misbehaving. Writes are atomic stores, so a
/// fault is memory-safe even while the peer runs.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShmFault {
    /// Overwrites the inbound ring's published tail.
    InboundTail(u64),
    /// Overwrites the length word of the next unread inbound record (it must have arrived).
    InboundRecordLength(u32),
}

/// Empty `receive` calls between two clock reads for the socket check (a spinning caller makes
/// one every few dozen nanoseconds, so the check still comes within microseconds of its time).
const EMPTY_RECEIVES_PER_CLOCK_READ: u32 = 16;

/// Looks at an SHM link's inbound ring without the link: true when the peer has published
/// bytes the link has not consumed (or may have: a tail the link will find corrupt also
/// counts). Two atomic loads on the ring's control words; the link's `receive` still does the
/// reading and every check.
#[derive(Clone, Debug)]
pub struct InputProbe {
    control: MappedControl,
    bytes: MappedBytes,
}

impl InputProbe {
    /// True when input may be waiting in the ring. Each look also prefetches the next record's
    /// first lines, as the link's own `receive` does: a spinning reader then has them on their
    /// way while the tail's line comes, where otherwise the read after a look that saw input
    /// would wait for them in turn (~40 ns of a ~0.4 µs ping on the AMD EPYC guest).
    pub fn input_pending(&self) -> bool {
        // Acquire on the tail pairs with the producer's Release; the head is this side's own
        // (stored by the consumer after each record), so it is never ahead of what was read.
        let head = self.control.head.word.load(Ordering::Relaxed);
        let mask = self.bytes.capacity_bytes() as u64 - 1;
        self.bytes.prefetch((head & mask) as usize);
        self.control.tail.word.load(Ordering::Acquire) != head
    }
}

/// One SHM link to one peer. Frames go through the segment's rings; wake-up bytes through two
/// FIFOs (see `setup.rs`), whose end of file, like the TCP socket's, tells that the peer
/// process is gone or shut the link down.
pub struct ShmLink {
    peer: NodeId,
    /// The pair's TCP connection, non-blocking: carries nothing after set-up; EOF = peer gone.
    stream: TcpStream,
    /// The FIFO the peer writes our wake-up bytes into (non-blocking): what the caller's poller
    /// sleeps on ([`Transporter::poll_fd`]). End of file = the peer's write end is closed.
    wake_in: File,
    /// The FIFO we write the peer's wake-up bytes into; closed by `shutdown`, which the peer
    /// sees as end of file.
    wake_out: Option<File>,
    /// Our outbound ring (ring 0 for the server, ring 1 for the client).
    producer: Producer<MappedControl, MappedBytes>,
    /// Our inbound ring.
    consumer: Consumer<MappedControl, MappedBytes>,
    /// Kept for fault injection: the inbound ring's data area.
    inbound_bytes: MappedBytes,
    /// Kept for fault injection and [`InputProbe`]: the inbound ring's control block.
    inbound_control: MappedControl,
    /// Checksum=1: frames carry (and must carry) a CRC-32 trailer.
    checksum: bool,
    /// Pending send bytes (unpublished ring bytes + overflow) above which `send` answers 1218.
    send_limit_bytes: usize,
    /// ShmSpintime: how long the caller's loop should spin before sleeping.
    spintime_us: u32,
    /// One encoded frame on its way into the ring; capacity kept, so sending does not allocate.
    scratch: Vec<u8>,
    /// Frame bytes written into the ring since the last publish (slot padding not counted).
    unpublished_frame_bytes: usize,
    /// Encoded frames that did not fit in the ring, oldest first, from `overflow_start`.
    overflow: Vec<u8>,
    overflow_start: usize,
    /// The frame being delivered: copied out of the ring before it is validated, so the peer
    /// cannot change bytes between the check and the use.
    receive_frame: Box<[u8]>,
    /// Frame bytes one `receive` delivers at most ([`SHM_RECEIVE_SLICE_BYTES`] unless
    /// `limit_receive` asked for less).
    receive_slice_bytes: usize,
    /// Set when we may have slept (a wake-up byte may be waiting in the FIFO); cleared by
    /// `drain_wakes`.
    socket_check_due: bool,
    /// Set when a publish found the peer asleep and wrote it a wake-up byte; taken by
    /// `take_woke_peer`.
    woke_peer: bool,
    last_socket_check: Instant,
    /// `receive` calls that found the ring empty since the clock was last read for the socket
    /// check.
    empty_receives: u32,
    /// The socket reported EOF; every further `receive` returns `Closed`.
    peer_closed: bool,
    segment_path: PathBuf,
}

impl ShmLink {
    pub(crate) fn new(
        stream: TcpStream,
        peer: NodeId,
        segment: Arc<Segment>,
        role: Role,
        link: &LinkConfig,
        wake_in: File,
        wake_out: File,
    ) -> Result<ShmLink, TransportError> {
        stream
            .set_read_timeout(None)
            .and_then(|()| stream.set_write_timeout(None))
            .and_then(|()| stream.set_nonblocking(true))
            .and_then(|()| stream.set_nodelay(true))
            .map_err(|e| {
                TransportError::io(format!("SHM link to node {peer}: configure socket"), e)
            })?;
        let (outbound_index, inbound_index) = match role {
            Role::Server => (0, 1),
            Role::Client => (1, 0),
        };
        let (out_control, out_bytes) = Segment::ring(&segment, outbound_index);
        let (in_control, in_bytes) = Segment::ring(&segment, inbound_index);
        let (inbound_control, inbound_bytes) = Segment::ring(&segment, inbound_index);
        Ok(ShmLink {
            peer,
            stream,
            wake_in,
            wake_out: Some(wake_out),
            producer: Producer::new(out_control, out_bytes, FRAME_BYTES_MAX),
            consumer: Consumer::new(in_control, in_bytes, FRAME_BYTES_MAX),
            inbound_bytes,
            inbound_control,
            checksum: link.checksum,
            send_limit_bytes: LinkSettings::from_link(link).send_limit_bytes(),
            spintime_us: link.shm_spintime_us,
            scratch: Vec::with_capacity(FRAME_BYTES_MAX),
            unpublished_frame_bytes: 0,
            overflow: Vec::new(),
            overflow_start: 0,
            receive_frame: vec![0u8; FRAME_BYTES_MAX].into_boxed_slice(),
            receive_slice_bytes: SHM_RECEIVE_SLICE_BYTES,
            socket_check_due: true,
            woke_peer: false,
            last_socket_check: Instant::now(),
            empty_receives: 0,
            peer_closed: false,
            segment_path: segment.path().to_owned(),
        })
    }

    /// ShmSpintime: how long the caller's loop should spin on `input_pending` before it calls
    /// `prepare_to_sleep` and sleeps in its poller.
    pub fn spintime(&self) -> Duration {
        Duration::from_micros(u64::from(self.spintime_us))
    }

    /// The segment file's path (already unlinked once set-up finished; for logs and tests).
    pub fn segment_path(&self) -> &Path {
        &self.segment_path
    }

    /// Corrupts the inbound ring as `fault` says (tests only).
    #[doc(hidden)]
    pub fn inject_fault(&mut self, fault: ShmFault) {
        use std::sync::atomic::Ordering;
        match fault {
            ShmFault::InboundTail(tail) => {
                self.inbound_control
                    .tail
                    .word
                    .store(tail, Ordering::Release);
            }
            ShmFault::InboundRecordLength(length) => {
                let head = self.inbound_control.head.word.load(Ordering::Acquire);
                let offset = (head % self.inbound_bytes_capacity() as u64) as usize;
                self.inbound_bytes.store_word(offset, length);
            }
        }
    }

    /// Writes `bytes` into the outbound ring as one record, exactly as given (they need not be a
    /// valid frame), and publishes it: a test plays a broken peer with it. Fails with
    /// `Overloaded` when the ring has no room or frames are still waiting to be flushed.
    #[doc(hidden)]
    pub fn send_raw_record(&mut self, bytes: &[u8]) -> Result<(), TransportError> {
        let padded_len = bytes.len().max(super::ring::RECORD_BYTES_MIN);
        let mut record = bytes.to_vec();
        record.resize(padded_len, 0);
        let written = self.pending_send_bytes() == 0
            && self
                .producer
                .try_write_bytes(&record)
                .map_err(|e| self.ring_error(e))?;
        if !written {
            return Err(TransportError::Overloaded {
                peer: self.peer,
                pending_bytes: self.pending_send_bytes(),
                limit_bytes: self.send_limit_bytes,
            });
        }
        if self.producer.publish() {
            self.wake_peer()?;
        }
        Ok(())
    }

    fn inbound_bytes_capacity(&self) -> usize {
        self.inbound_bytes.capacity_bytes()
    }

    fn bad_frame(&self, reason: impl Into<String>) -> TransportError {
        TransportError::BadFrame {
            peer: self.peer,
            reason: reason.into(),
        }
    }

    fn ring_error(&self, error: RingError) -> TransportError {
        self.bad_frame(format!("SHM ring: {}", error.reason))
    }

    /// Copies whole frames from the overflow buffer into the ring while they fit.
    fn drain_overflow(&mut self) -> Result<(), TransportError> {
        while self.overflow_start < self.overflow.len() {
            let rest = &self.overflow[self.overflow_start..];
            let frame_len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            match self.producer.try_write(&rest[..frame_len]) {
                Ok(true) => {
                    self.overflow_start += frame_len;
                    self.unpublished_frame_bytes += frame_len;
                }
                Ok(false) => break,
                Err(error) => return Err(self.ring_error(error)),
            }
        }
        if self.overflow_start == self.overflow.len() {
            self.overflow.clear();
            self.overflow_start = 0;
        }
        Ok(())
    }

    /// Appends the frame in `scratch` to the overflow buffer, compacting it first when more than
    /// half of it is already sent.
    fn push_overflow(&mut self) {
        if self.overflow_start > 0 && self.overflow_start * 2 >= self.overflow.len() {
            self.overflow.drain(..self.overflow_start);
            self.overflow_start = 0;
        }
        self.overflow.extend_from_slice(&self.scratch);
    }

    /// Writes one wake-up byte into the peer's FIFO. A full FIFO already holds unread wake-up
    /// bytes, so `WouldBlock` is fine; an interrupted write wrote nothing and is retried, or the
    /// sleeper would never wake. A closed reader (EPIPE) is a peer gone.
    fn wake_peer(&mut self) -> Result<(), TransportError> {
        self.woke_peer = true;
        let Some(wake_out) = self.wake_out.as_ref() else {
            return Err(TransportError::Closed { peer: self.peer });
        };
        loop {
            return match (&*wake_out).write(&[SHM_WAKE_BYTE]) {
                Ok(_) => Ok(()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if is_disconnect(&e) => Err(TransportError::Closed { peer: self.peer }),
                Err(e) => Err(TransportError::io(
                    format!("wake node {} through its FIFO", self.peer),
                    e,
                )),
            };
        }
    }

    /// Reads and discards wake-up bytes from our FIFO; notes end of file (the peer's write end
    /// closed: the process is gone or shut the link down). A read shorter than the buffer
    /// emptied the FIFO, so the usual wake-up costs one system call.
    fn drain_wakes(&mut self) -> Result<(), TransportError> {
        self.socket_check_due = false;
        let mut bytes = [0u8; WAKE_DRAIN_BYTES];
        loop {
            match (&self.wake_in).read(&mut bytes) {
                Ok(0) => {
                    self.peer_closed = true;
                    return Ok(());
                }
                Ok(read_bytes) => {
                    if bytes[..read_bytes].iter().any(|&b| b != SHM_WAKE_BYTE) {
                        return Err(self.bad_frame("unexpected bytes in the SHM wake-up FIFO"));
                    }
                    if read_bytes < bytes.len() {
                        return Ok(());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(TransportError::io(
                        format!("read SHM wake-ups from node {}", self.peer),
                        e,
                    ))
                }
            }
        }
    }

    /// Looks at the TCP socket, which carries nothing after set-up: notes EOF (the peer
    /// process is gone), and at the FIFO, for the same.
    fn check_liveness(&mut self) -> Result<(), TransportError> {
        self.last_socket_check = Instant::now();
        let mut bytes = [0u8; WAKE_DRAIN_BYTES];
        loop {
            match (&self.stream).read(&mut bytes) {
                Ok(0) => {
                    self.peer_closed = true;
                    return Ok(());
                }
                Ok(_) => {
                    return Err(self.bad_frame("unexpected bytes on the SHM link's TCP socket"));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if is_disconnect(&e) => {
                    self.peer_closed = true;
                    return Ok(());
                }
                Err(e) => {
                    return Err(TransportError::io(
                        format!("check the SHM link to node {}", self.peer),
                        e,
                    ))
                }
            }
        }
        self.drain_wakes()
    }

    /// Delivers the records published when the call began, up to `receive_slice_bytes`.
    fn receive_ring(
        &mut self,
        on_frame: &mut dyn FnMut(&FrameHeader, &[u8]),
    ) -> Result<usize, TransportError> {
        match self.consumer.refresh() {
            Ok(true) => {}
            Ok(false) => return Ok(0),
            Err(error) => return Err(self.ring_error(error)),
        }
        let mut delivered_count = 0;
        let mut delivered_bytes = 0;
        loop {
            if delivered_bytes >= self.receive_slice_bytes {
                return Ok(delivered_count);
            }
            let record_len = match self.consumer.pop_into(&mut self.receive_frame) {
                Ok(Some(record_len)) => record_len,
                Ok(None) => return Ok(delivered_count),
                Err(error) => return Err(self.ring_error(error)),
            };
            let record = &self.receive_frame[..record_len];
            match frame::decode(record, self.checksum) {
                Ok(Decoded::Frame {
                    header,
                    payload,
                    frame_len,
                }) if frame_len == record_len => {
                    on_frame(&header, payload);
                    delivered_count += 1;
                    delivered_bytes += record_len;
                }
                Ok(_) => return Err(self.bad_frame("SHM record length disagrees with its frame")),
                Err(error) => return Err(self.bad_frame(error.to_string())),
            }
        }
    }
}

impl Transporter for ShmLink {
    fn peer(&self) -> NodeId {
        self.peer
    }

    fn peer_address(&self) -> Option<std::net::SocketAddr> {
        // The socket the segment was agreed on, which stays open for wake-ups.
        self.stream.peer_addr().ok()
    }

    fn spin_time(&self) -> Duration {
        self.spintime()
    }

    fn take_woke_peer(&mut self) -> bool {
        std::mem::take(&mut self.woke_peer)
    }

    fn kind(&self) -> TransporterKind {
        TransporterKind::Shm
    }

    fn send(&mut self, header: &FrameHeader, payload: &[u8]) -> Result<(), TransportError> {
        let frame_len = frame::encoded_len(payload.len(), self.checksum);
        if frame_len > FRAME_BYTES_MAX {
            return Err(TransportError::FrameTooLarge {
                bytes: frame_len,
                limit: FRAME_BYTES_MAX,
            });
        }
        let pending_bytes = self.pending_send_bytes();
        if pending_bytes + frame_len > self.send_limit_bytes {
            return Err(TransportError::Overloaded {
                peer: self.peer,
                pending_bytes,
                limit_bytes: self.send_limit_bytes,
            });
        }
        self.scratch.clear();
        frame::encode_into(&mut self.scratch, header, payload, self.checksum)?;
        // Frames stay in order: while older frames wait in the overflow buffer, new ones queue
        // behind them.
        if self.overflow_start == self.overflow.len() {
            match self.producer.try_write(&self.scratch) {
                Ok(true) => {
                    self.unpublished_frame_bytes += frame_len;
                    return Ok(());
                }
                Ok(false) => {}
                Err(error) => return Err(self.ring_error(error)),
            }
        }
        self.push_overflow();
        Ok(())
    }

    fn flush(&mut self) -> Result<FlushStatus, TransportError> {
        self.drain_overflow()?;
        self.unpublished_frame_bytes = 0;
        if self.producer.publish() {
            self.wake_peer()?;
        }
        if self.overflow.is_empty() {
            Ok(FlushStatus::Done)
        } else {
            Ok(FlushStatus::Pending)
        }
    }

    fn receive(
        &mut self,
        on_frame: &mut dyn FnMut(&FrameHeader, &[u8]),
    ) -> Result<usize, TransportError> {
        if self.peer_closed {
            return Err(TransportError::Closed { peer: self.peer });
        }
        let delivered_count = self.receive_ring(on_frame)?;
        // A caller spinning on `receive` reads the clock for the socket check only every few
        // empty turns: a clock read costs as much as the rest of an empty turn, and the turn
        // that finds an answer comes that much later.
        let clock_due = delivered_count == 0 && {
            self.empty_receives += 1;
            self.empty_receives >= EMPTY_RECEIVES_PER_CLOCK_READ
        };
        let check_interval = Duration::from_micros(SHM_LIVENESS_CHECK_INTERVAL_US);
        let liveness_check_due = clock_due && {
            self.empty_receives = 0;
            self.last_socket_check.elapsed() >= check_interval
        };
        if liveness_check_due {
            self.check_liveness()?;
        } else if self.socket_check_due {
            // After a sleep: the wake-up bytes (and the end of file of a peer gone).
            self.drain_wakes()?;
        }
        if self.peer_closed && delivered_count == 0 {
            return Err(TransportError::Closed { peer: self.peer });
        }
        Ok(delivered_count)
    }

    fn pending_send_bytes(&self) -> usize {
        self.unpublished_frame_bytes + (self.overflow.len() - self.overflow_start)
    }

    fn send_capacity_bytes(&self) -> usize {
        self.send_limit_bytes
            .saturating_sub(self.pending_send_bytes())
    }

    fn encoded_frame_bytes(&self, payload_bytes: usize) -> usize {
        frame::encoded_len(payload_bytes, self.checksum)
    }

    fn shutdown(&mut self) {
        // NotConnected (the peer is already gone) is as good as done.
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        // The peer, asleep on its FIFO, sees the end of file.
        self.wake_out = None;
    }

    fn poll_fd(&self) -> RawFd {
        self.wake_in.as_raw_fd()
    }

    fn limit_receive(&mut self, bytes: usize) {
        self.receive_slice_bytes = bytes.clamp(1, SHM_RECEIVE_SLICE_BYTES);
    }

    fn input_pending(&self) -> bool {
        self.peer_closed || self.consumer.input_pending()
    }

    fn prepare_to_sleep(&mut self) -> bool {
        // After a sleep a wake-up byte may wait in the FIFO: look at it on the next receive.
        self.socket_check_due = true;
        self.consumer.prepare_to_sleep()
    }

    fn woke_up(&mut self) {
        self.consumer.woke_up();
    }

    fn input_probe(&self) -> Option<InputProbe> {
        Some(InputProbe {
            control: self.inbound_control.clone(),
            bytes: self.inbound_bytes.clone(),
        })
    }
}

impl fmt::Debug for ShmLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShmLink")
            .field("peer", &self.peer)
            .field("segment_path", &self.segment_path)
            .field("pending_send_bytes", &self.pending_send_bytes())
            .field("peer_closed", &self.peer_closed)
            .finish_non_exhaustive()
    }
}
