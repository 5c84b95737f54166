//! The shared-memory link: two single-producer single-consumer rings in one `/dev/shm` segment,
//! a FIFO each way for wake-up bytes, and the pair's TCP connection kept open for liveness (NDB
//! wakes through that socket; a FIFO wakes cheaper: docs/shm.md).
//!
//! - [`server_setup`] (data node side) creates the segment, offers its path over TCP, waits for
//!   the client's ack and unlinks the file at once: both processes keep their mappings, so no file
//!   outlives them. [`client_setup`] attaches, validates the header and acks.
//! - [`ShmLink`] implements [`crate::Transporter`]: `send` writes frames straight into the ring
//!   (unpublished), or into a bounded local overflow buffer when the ring is full; `flush`
//!   publishes them with one Release store and wakes a sleeping peer.
//! - The receiver spins (the caller's loop calls [`crate::Transporter::input_pending`], one atomic
//!   load), then calls `prepare_to_sleep` and sleeps in its poller on its wake-up FIFO; a sender
//!   that sees the "sleeping" flag writes one byte into that FIFO. The argument that no wake-up is
//!   lost is on `ring::Consumer::prepare_to_sleep`.
//! - [`clean_stale_segments`] removes segments left by crashed processes of an earlier run.
//!
//! # Segment layout (layout version 1)
//!
//! One file `/dev/shm/rndb-<cluster_id:016x>-<server node>-<client node>-<creator pid>-<nonce:08x>`
//! of ShmSize bytes. Integers are native-endian (little-endian on x86-64): both processes are on
//! one machine. Ring positions are monotonic byte counts; offset = position & (capacity - 1).
//!
//! ```text
//! offset        size  field
//! 0             8     magic "RNDB-SHM" (SHM_MAGIC)
//! 8             4     layout version (1)
//! 12            4     header bytes (4096)
//! 16            8     segment bytes (= ShmSize = file size)
//! 24            4     creator pid
//! 28            4     flags: bit 0 = frames carry a CRC-32 trailer (Checksum=1)
//! 32            8     cluster id
//! 40            2     server node id        42  2  client node id      44  4  reserved
//! 48            24    ring 0 descriptor: control offset u64, data offset u64, capacity u64
//! 72            24    ring 1 descriptor
//! 96            32    reserved (zero)
//! 128           64    ring 0 (server -> client) control: tail u64   (producer's cache line)
//! 192           64                                       head u64   (consumer's cache line)
//! 256           64                                       consumer sleeping u64 (0/1)
//! 320           192   ring 1 (client -> server) control, same three lines
//! 512           3584  unused (zero)
//! 4096          C     ring 0 data (C = capacity, a power of two)
//! 4096+C        C     ring 1 data
//! 4096+2C       ...   unused tail of the file (ShmSize is rarely 4096 + 2^k * 2)
//! ```
//!
//! C is the largest power of two with 4096 + 2C <= ShmSize (at most 1 GiB). Inside a data area,
//! records are whole frames (`frame.rs`, CRC trailer included when Checksum=1), each starting on
//! an 8-byte boundary; a frame never wraps the end: a length word of 0 (a wrap marker) means
//! "the rest is padding, continue at offset 0". The attaching side validates every header field against the file before use, and
//! the reader checks every index and length the peer wrote; an impossible one closes the link
//! with [`TransportError::BadFrame`](crate::TransportError::BadFrame).
//!
//! # Checking the ring with loom
//!
//! `shm::loom_tests` runs the ring's real `Producer` and `Consumer` on loom's atomics (the ring
//! is written against `sync::AtomicWord`) over every interleaving, up to a preemption bound;
//! they are ordinary unit tests of this crate (`cargo test -p rndb-transporter --lib
//! shm::loom_tests`).

mod floor;
mod link;
mod ring;
mod segment;
mod setup;
mod sync;

#[cfg(test)]
mod loom_tests;
#[cfg(test)]
mod tests;

pub use floor::SpinFloor;
pub use link::{InputProbe, ShmFault, ShmLink};
pub use setup::{client_setup, client_setup_on, server_setup, server_setup_on};

use crate::frame::FRAME_BYTES_MAX;

/// The directory segments live in (a tmpfs).
pub const SHM_DIR: &str = "/dev/shm";
/// Every segment file name starts with this.
pub const SHM_NAME_PREFIX: &str = "rndb-";
/// The first eight bytes of a segment.
pub const SHM_MAGIC: u64 = u64::from_le_bytes(*b"RNDB-SHM");
/// The segment layout this build creates and accepts.
pub const SHM_LAYOUT_VERSION: u32 = 1;
/// Bytes before the first ring's data: the header and both control blocks, one page.
pub const SHM_HEADER_BYTES: usize = 4096;
/// The smallest ring data area: four of the largest frames.
pub const SHM_RING_BYTES_MIN: usize = 128 * 1024;
/// The largest ring data area.
pub const SHM_RING_BYTES_MAX: usize = 1 << 30;
/// The smallest ShmSize a link accepts.
pub const SHM_SEGMENT_BYTES_MIN: u64 = (SHM_HEADER_BYTES + 2 * SHM_RING_BYTES_MIN) as u64;
// The config refuses a ShmSize below what a segment needs, so set-up never meets one.
const _: () = assert!(SHM_SEGMENT_BYTES_MIN == rndb_config::SHM_SIZE_BYTES_MIN);
/// The largest ShmSize a link accepts (and the most a client maps on a peer's word).
pub const SHM_SEGMENT_BYTES_MAX: u64 = (SHM_HEADER_BYTES + 2 * SHM_RING_BYTES_MAX) as u64;
/// How long each step of the set-up exchange over TCP may take.
pub const SHM_SETUP_TIMEOUT_MS: u64 = 5_000;
/// The byte a sender writes into its peer's wake-up FIFO to wake it from its sleep.
pub const SHM_WAKE_BYTE: u8 = b'W';
/// While the ring is empty, `receive` looks at the TCP socket and the wake-up FIFO (EOF) at most this
/// often, so a caller spinning on `receive` does not make a system call per turn.
pub const SHM_LIVENESS_CHECK_INTERVAL_US: u64 = 100;

const _: () = assert!(FRAME_BYTES_MAX <= SHM_RING_BYTES_MIN / 4);
const _: () = assert!(SHM_RING_BYTES_MIN.is_power_of_two() && SHM_RING_BYTES_MAX.is_power_of_two());

/// Removes `/dev/shm/rndb-<cluster_id>-…` segment files whose creator process no longer exists
/// (segments of a crashed earlier run; a clean run unlinks its files during set-up). Returns how
/// many files were removed. Call it at data node start-up, before creating segments.
pub fn clean_stale_segments(cluster_id: u64) -> usize {
    segment::clean_stale_segments(cluster_id)
}
