//! The limits of the data node's front door: how many connections may be in their handshake at
//! once, how long a handshake may take, how many connections wait to be accepted. Each bounds
//! what a peer that is not (yet) a node can cost: threads, file descriptors, memory, log lines.
//!
//! Limits on admitted links come from the config (SendBufferMemory, the frame limit
//! `FRAME_BYTES_MAX`, MaxNoOfConcurrentTransactions, …); these come before any config applies.

use std::time::Duration;

pub use rndb_transporter::handshake::{HANDSHAKE_FRAME_BYTES_MAX, HANDSHAKE_TIMEOUT};

/// The most handshakes in progress at once, each on its own thread with one socket and a buffer
/// of at most [`HANDSHAKE_FRAME_BYTES_MAX`]. When all are taken, a new connection closes the
/// oldest handshake whose HELLO has not been admitted yet (a real node's HELLO comes right after
/// its connect, so the oldest is the one that says nothing), with a rate-limited log line. With
/// [`HANDSHAKE_TIMEOUT`], a peer that opens connections and says nothing holds at most this many
/// threads and sockets, each for at most the timeout, and cannot lock real nodes out.
pub const HANDSHAKES_IN_FLIGHT_MAX: usize = 64;

/// The most evicted handshakes whose threads are still ending (a shut-down socket ends a
/// thread's read at once, but a loaded machine may run the thread late); past it, the acceptor
/// waits for one to end. So the handshake threads number at most
/// `HANDSHAKES_IN_FLIGHT_MAX + EVICTIONS_IN_PROGRESS_MAX`.
pub const EVICTIONS_IN_PROGRESS_MAX: usize = 8;

/// The longest the acceptor waits for an evicted handshake's thread to end before it closes the
/// new connection instead (a thread that does not end in this time is stuck, not late).
pub const EVICTION_END_WAIT_MAX: Duration = Duration::from_secs(1);

/// The listening socket's backlog: connections the kernel completes before the acceptor takes
/// them (the kernel caps it at `net.core.somaxconn`).
pub const LISTEN_BACKLOG: i32 = 1024;

/// How long the acceptor pauses after `accept` fails (out of file descriptors, say), so that a
/// lasting failure neither spins a core nor floods the log.
pub const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// The shortest time between two log lines about connections closed at the handshake limit;
/// the line counts the connections closed since the last one.
pub const OVERLOAD_LOG_INTERVAL: Duration = Duration::from_secs(1);

// A handshake thread's buffer is small, so the limit bounds handshake memory to well under a
// MiB besides the threads' stacks.
const _: () = assert!(HANDSHAKES_IN_FLIGHT_MAX * HANDSHAKE_FRAME_BYTES_MAX <= 1 << 20);
// Everything the limit lets in fits the backlog the kernel holds for the acceptor.
const _: () = assert!(HANDSHAKES_IN_FLIGHT_MAX <= LISTEN_BACKLOG as usize);
const _: () = assert!(EVICTIONS_IN_PROGRESS_MAX <= HANDSHAKES_IN_FLIGHT_MAX);
