//! rndb-transporter: every byte between two rndb nodes moves through here.
//!
//! - [`frame`]: the wire frame (header, payload, optional CRC-32 trailer), its encoder and its
//!   validating decoder.
//! - [`Transporter`]: the trait every link implements; a node's execution loop only sees this.
//! - [`socket_link`]: the one link over a TCP socket (non-blocking, TCP_NODELAY, one contiguous
//!   bounded send buffer pushed with as few sends as the kernel allows, a fixed receive buffer
//!   decoded in place), generic over its I/O ([`socket_link::SocketIo`]): how bytes move
//!   between the socket and the buffers.
//! - [`tcp`]: the TCP link, [`tcp::TcpLink`]: a socket link whose I/O is plain system calls
//!   ([`tcp::SyscallIo`]).
//! - [`uring`]: the io_uring link (`UseIoUring=1` on a TCP link), [`uring::UringLink`]: a socket
//!   link whose I/O ([`uring::UringIo`]) is one SEND SQE per flush round and one RECV SQE per
//!   read, each submitted with `MSG_DONTWAIT` so it completes inline; readiness still comes from
//!   epoll on the socket. Where the kernel refuses io_uring, [`uring::open_link_or_tcp`] falls
//!   back to a TCP link.
//! - [`tls`]: TLS on node links: keys and certificates on a search path, and the TLS link,
//!   [`tls::io::TlsLink`], a socket link whose I/O ([`tls::io::TlsIo`]) drives rustls over
//!   the socket.
//! - [`shm`]: the shared-memory link (two SPSC rings in `/dev/shm`), set up over a TCP
//!   connection that stays open as its liveness and wake-up channel.
//! - [`spin`]: adaptive spin-then-sleep budgets for receive loops.
//! - [`sleeper`]: a loop's last send and its sleep in one `io_uring_enter`, so that a peer
//!   sharing the core, woken by the send, does not preempt the sender.
//! - [`handshake`]: the first exchange on a new connection (version, cluster identity, node ids).
//! - [`registry`]: node id → link, and the admission rules a data node applies to a handshake.
//! - [`settings`]: [`LinkSettings`], the per-link limits (Checksum, SendBufferMemory,
//!   OverloadLimit, ReceiveBufferMemory) every link kind reads from the config.
//! - [`conformance`]: test bodies every link kind must pass, generic over a factory of connected
//!   pairs ([`conformance::LinkPair`]); each transporter's integration test runs them.
//!
//! A frame's path: the caller [`Transporter::send`]s a header and payload, which the link encodes
//! into its bounded send buffer (or answers Overloaded, NDB 1218); [`Transporter::flush`] pushes
//! the whole batch in as few system calls as possible; on the peer, [`Transporter::receive`]
//! reads what arrived, validates each frame with [`frame::decode`] and hands it to a callback.
//! Every link kind starts as a TCP connection, which runs the [`handshake`]; a data node checks
//! the peer's hello with [`registry::admit`] and keeps the resulting link in its
//! [`registry::Registry`].
//!
//! **Architecture Invariant:** this crate knows nothing of tables, rows or transactions; it moves
//! opaque payloads tagged with a signal number.
//!
//! **Architecture Invariant:** `unsafe` lives only in [`shm`], [`uring`], [`sleeper`] and
//! [`socket_link`] (which lends its receive buffer to an I/O that may hand it to the kernel),
//! each block with a `// SAFETY:` comment; every other module says `#![forbid(unsafe_code)]`.

mod buffers;
pub mod conformance;
pub mod connect;
pub mod frame;
pub mod handshake;
pub mod registry;
pub mod settings;
pub mod shm;
pub mod sleeper;
pub mod socket_link;
pub mod spin;
pub mod tcp;
pub mod tls;
pub mod uring;

mod error;

pub use error::TransportError;
pub use frame::{FrameHeader, FRAME_BYTES_MAX, FRAME_HEADER_BYTES};
pub use rndb_config::{NodeId, TransporterKind};
pub use settings::LinkSettings;
pub use shm::InputProbe;

use std::io;
use std::os::fd::RawFd;

/// What a flush achieved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushStatus {
    /// The send buffer is empty.
    Done,
    /// The socket (or ring) is full; bytes remain buffered. Flush again when it is writable.
    Pending,
}

/// Frame bytes a data node takes from one socket link (TCP, io_uring) per turn of its loop, asked
/// for with [`Transporter::limit_receive`]; API nodes' socket links read all they can. A bounded
/// turn runs its transactions while their records are still in the cache, and lets the node
/// answer the start of a burst while the client still sends the rest.
pub const RECEIVE_SLICE_BYTES: usize = 8 * 1024;

/// Frame bytes an SHM `receive` delivers at most, on both sides, unless
/// [`Transporter::limit_receive`] asks for less. Larger than [`RECEIVE_SLICE_BYTES`]: the
/// sockets' slice gave SHM batched reads a much worse tail, for a cause not yet known.
pub const SHM_RECEIVE_SLICE_BYTES: usize = 16 * 1024;

/// One link to one peer node. Frames go out through a bounded send buffer and a flush; frames
/// come in through `receive`, which never blocks.
pub trait Transporter: Send {
    /// The node at the other end.
    fn peer(&self) -> NodeId;

    /// Which kind of link this is.
    fn kind(&self) -> TransporterKind;

    /// Appends one frame to the send buffer. Nothing is written to the peer until `flush`.
    /// A full send buffer returns [`TransportError::Overloaded`] (NDB error 1218) and leaves the
    /// buffer as it was; a payload over the frame limit returns [`TransportError::FrameTooLarge`].
    fn send(&mut self, header: &FrameHeader, payload: &[u8]) -> Result<(), TransportError>;

    /// Pushes the send buffer to the peer in as few system calls as possible.
    fn flush(&mut self) -> Result<FlushStatus, TransportError>;

    /// For a link whose flush is a `send` on one socket (TCP and io_uring links): that socket
    /// and the unsent bytes, so that the caller can send them itself, in the same system call
    /// as its sleep ([`sleeper::Sleeper`]). The caller then reports what its send did with
    /// [`Transporter::sent_by_caller`] before it uses the link again. `None` when nothing is
    /// unsent, or when only the link itself can flush (SHM).
    fn unsent_on_socket(&self) -> Option<(RawFd, &[u8])> {
        None
    }

    /// Makes the unsent frames ready for [`Transporter::unsent_on_socket`] where that takes a
    /// step: a TLS link encrypts them into records the caller can send. Others need nothing.
    fn prepare_unsent(&mut self) {}

    /// What the caller's send of the bytes from [`Transporter::unsent_on_socket`] did: bytes
    /// written, or its error. Returns what `flush` would have (a partial send is finished
    /// with a flush).
    fn sent_by_caller(&mut self, result: io::Result<usize>) -> Result<FlushStatus, TransportError> {
        // Links that hand out no bytes were sent nothing: just flush.
        debug_assert!(result.is_err(), "bytes sent on a link that handed none out");
        self.flush()
    }

    /// Reads what has arrived, without blocking, and calls `on_frame` for every complete,
    /// validated frame in order. A link may stop after a slice of what is waiting (SHM does,
    /// after [`SHM_RECEIVE_SLICE_BYTES`]); [`Transporter::input_pending`] then stays true. Returns the number of
    /// frames delivered. A peer that closed returns [`TransportError::Closed`]; a bad frame
    /// returns [`TransportError::BadFrame`], after which the link must be dropped.
    fn receive(
        &mut self,
        on_frame: &mut dyn FnMut(&FrameHeader, &[u8]),
    ) -> Result<usize, TransportError>;

    /// Bytes appended by `send` but not yet accepted by the peer's socket or ring.
    fn pending_send_bytes(&self) -> usize;

    /// How many more encoded bytes `send` accepts before it answers Overloaded: a batch of
    /// frames whose [`Transporter::encoded_frame_bytes`] add up to at most this is appended
    /// whole. A caller that must send a batch all-or-nothing checks this first.
    fn send_capacity_bytes(&self) -> usize {
        usize::MAX
    }

    /// The bytes a frame with `payload_bytes` of payload takes in this link's send buffer
    /// (header, payload and, with Checksum=1, the CRC-32 trailer).
    fn encoded_frame_bytes(&self, payload_bytes: usize) -> usize {
        frame::encoded_len(payload_bytes, false)
    }

    /// Shuts the connection down in both directions (the socket stays open until the link is
    /// dropped), so the peer sees the close now, even while this side keeps the link. Used
    /// when this side has given the link up; every later call may fail.
    fn shutdown(&mut self) {}

    /// The descriptor a poller waits on for this link's input (for SHM: the liveness/wake-up
    /// TCP socket).
    fn poll_fd(&self) -> RawFd;

    /// True when input may be ready without the descriptor becoming readable (an SHM ring that
    /// holds frames). A loop that spins checks this instead of making a system call.
    fn input_pending(&self) -> bool {
        false
    }

    /// A handle that tells, without the link (and so without its lock), whether input may be
    /// waiting: SHM links give one, so a thread spinning for an answer looks at the ring with
    /// two atomic loads a turn instead of locking the link to read it. `None` for links whose
    /// input only a read or the poller can find.
    fn input_probe(&self) -> Option<InputProbe> {
        None
    }

    /// Called by a loop that is about to sleep in the poller. Returns false when input arrived
    /// meanwhile (the caller must not sleep). SHM links announce "I am going to sleep" here.
    fn prepare_to_sleep(&mut self) -> bool {
        true
    }

    /// Called after the loop wakes from the poller.
    fn woke_up(&mut self) {}

    /// From now on one `receive` call reads at most about `bytes` (it stops after the read that
    /// reaches them, and [`Transporter::input_pending`] stays true). A data node bounds its
    /// socket links to [`RECEIVE_SLICE_BYTES`] so, as the SHM link bounds itself.
    fn limit_receive(&mut self, bytes: usize) {
        let _ = bytes;
    }

    /// The next `receive` answers a readiness event that did not report the peer's close: a
    /// read shorter than the free buffer has then drained the socket, and anything arriving
    /// later (the close included) brings a new event, so `receive` may stop there instead of
    /// reading once more to see EAGAIN. Without this hint it reads until EAGAIN.
    fn stop_after_short_read(&mut self) {}

    /// True (once) when a flush since the last call found the peer asleep and woke it: the
    /// peer's answer is then late by a wake-up, which says nothing about whether spinning pays.
    fn take_woke_peer(&mut self) -> bool {
        false
    }

    /// On a loopback TCP connection, the CPU that last ran the peer's sends into this link
    /// (SO_INCOMING_CPU: loopback delivers a packet on its sender's CPU). `None` for other
    /// links and remote peers (there it names the CPU of the network interrupt).
    fn loopback_peer_cpu(&self) -> Option<usize> {
        None
    }

    /// How long a loop serving this link should spin after its last input before it sleeps
    /// (ShmSpintime for SHM links; TCP links ask for none).
    fn spin_time(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }

    /// The peer's address on the link's socket (`None` when the socket cannot say).
    fn peer_address(&self) -> Option<std::net::SocketAddr> {
        None
    }

    /// True when the link's bytes are encrypted (TLS).
    fn is_encrypted(&self) -> bool {
        false
    }
}
