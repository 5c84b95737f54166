//! The limits of the data node's front door: how many connections may be in their handshake at
//! once, how long a handshake may take, how many connections wait to be accepted. Each bounds
//! what a peer that is not (yet) a node can cost: threads, file descriptors, memory, log lines.
//!
//! Limits on admitted links come from the config (SendBufferMemory, the frame limit
//! `FRAME_BYTES_MAX`, MaxNoOfConcurrentTransactions, …); these come before any config applies.

use std::time::Duration;

pub use rndb_transporter::handshake::{HANDSHAKE_FRAME_BYTES_MAX, HANDSHAKE_TIMEOUT};

/// The most handshakes in progress at once, each on its own thread with one socket and a buffer
/// of at most [`HANDSHAKE_FRAME_BYTES_MAX`]. A connection beyond it is closed at once, with a log
/// line. With [`HANDSHAKE_TIMEOUT`], a peer that opens connections and says nothing holds at most
/// this many threads and sockets, each for at most the timeout. NDB nodes connect once each, so
/// the largest cluster (255 nodes) starting at once fits a few rounds of it.
pub const HANDSHAKES_IN_FLIGHT_MAX: usize = 64;

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
