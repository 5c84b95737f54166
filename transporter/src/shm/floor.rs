//! The floor under an SHM round trip: two processes that each spin on one cache line of a
//! segment, with no ring, frame or system call in between (issue 26, part 6). The bench
//! `shm_floor` measures it next to a whole [`super::ShmLink`] round trip, so the figures show
//! what the link adds to what the machine allows.
//!
//! The lines are the `tail` words of a real segment's two ring control blocks: the same mapping,
//! placement and cache-line layout as a link's, used as two sequence counters. [`SpinFloor::ping`]
//! stores the next number on its outbound line and spins until the peer's line shows it;
//! [`SpinFloor::echo`] spins until the inbound line moves and stores the value back.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::segment::{MappedControl, Segment, SegmentSpec};
use super::SHM_SEGMENT_BYTES_MIN;
use crate::{NodeId, TransportError};

/// The node ids written in a floor segment's header (no cluster uses them: the floor is not a
/// link, and its segment is unlinked as soon as the peer has attached).
const FLOOR_SERVER_NODE: NodeId = NodeId(1);
const FLOOR_CLIENT_NODE: NodeId = NodeId(2);

/// One side of the floor measurement: its outbound and inbound cache lines.
pub struct SpinFloor {
    outbound: MappedControl,
    inbound: MappedControl,
    segment: Arc<Segment>,
    /// The last number sent (pinger) or echoed (echoer).
    sequence: u64,
}

impl std::fmt::Debug for SpinFloor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpinFloor")
            .field("path", &self.segment.path())
            .field("sequence", &self.sequence)
            .finish_non_exhaustive()
    }
}

impl SpinFloor {
    /// Creates a floor segment in `/dev/shm` for `cluster_id` (the pinging side). The file stays
    /// until [`SpinFloor::unlink`] (or until this side is dropped, if the peer never attached).
    pub fn create(cluster_id: u64) -> Result<SpinFloor, TransportError> {
        let spec = SegmentSpec {
            cluster_id,
            server_node: FLOOR_SERVER_NODE,
            client_node: FLOOR_CLIENT_NODE,
            segment_bytes: SHM_SEGMENT_BYTES_MIN,
            checksum: false,
        };
        Ok(SpinFloor::over(Arc::new(Segment::create(&spec)?), 0))
    }

    /// Attaches to the floor segment at `path` (the echoing side).
    pub fn attach(path: &Path) -> Result<SpinFloor, TransportError> {
        let segment = Segment::attach(path, SHM_SEGMENT_BYTES_MIN)?;
        Ok(SpinFloor::over(Arc::new(segment), 1))
    }

    fn over(segment: Arc<Segment>, outbound_index: usize) -> SpinFloor {
        let (outbound, _) = Segment::ring(&segment, outbound_index);
        let (inbound, _) = Segment::ring(&segment, 1 - outbound_index);
        SpinFloor {
            outbound,
            inbound,
            segment,
            sequence: 0,
        }
    }

    /// The segment file's path (give it to the peer before it is unlinked).
    pub fn path(&self) -> PathBuf {
        self.segment.path().to_owned()
    }

    /// Removes the file once the peer has attached (both mappings stay valid).
    pub fn unlink(&mut self) -> Result<(), TransportError> {
        match Arc::get_mut(&mut self.segment) {
            Some(segment) => segment.unlink(),
            // The lines hold clones; unlink through the path instead.
            None => std::fs::remove_file(self.segment.path()).map_err(|e| {
                TransportError::io(
                    format!("unlink SHM floor segment {}", self.segment.path().display()),
                    e,
                )
            }),
        }
    }

    /// True once the peer has echoed at least one number (it attached and is spinning).
    pub fn peer_answered(&self) -> bool {
        self.inbound.tail.word.load(Ordering::Acquire) != 0
    }

    /// One round trip: stores the next number and spins until the peer echoes it. Gives up
    /// (false) after `timeout`, so a dead peer cannot hang the caller.
    pub fn ping(&mut self, timeout: Duration) -> bool {
        self.sequence += 1;
        self.outbound
            .tail
            .word
            .store(self.sequence, Ordering::Release);
        let mut turns = 0u32;
        let mut began = None;
        while self.inbound.tail.word.load(Ordering::Acquire) != self.sequence {
            std::hint::spin_loop();
            turns = turns.wrapping_add(1);
            if turns.is_multiple_of(4096) {
                let began = *began.get_or_insert_with(Instant::now);
                if began.elapsed() >= timeout {
                    return false;
                }
            }
        }
        true
    }

    /// Echoes every number the peer sends until `u64::MAX` arrives (the pinger's stop) or no
    /// number came for `idle_max`. Returns how many it echoed.
    pub fn echo(&mut self, idle_max: Duration) -> u64 {
        let mut echoed = 0;
        let mut last_seen = Instant::now();
        let mut turns = 0u32;
        loop {
            let seen = self.inbound.tail.word.load(Ordering::Acquire);
            if seen == u64::MAX {
                return echoed;
            }
            if seen != self.sequence {
                self.sequence = seen;
                self.outbound.tail.word.store(seen, Ordering::Release);
                echoed += 1;
                last_seen = Instant::now();
                continue;
            }
            std::hint::spin_loop();
            turns = turns.wrapping_add(1);
            if turns.is_multiple_of(4096) && last_seen.elapsed() >= idle_max {
                return echoed;
            }
        }
    }

    /// Tells the echoing peer to stop.
    pub fn stop_peer(&self) {
        self.outbound.tail.word.store(u64::MAX, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ping_comes_back_through_the_segment() {
        let mut pinger = SpinFloor::create(0xF100_0001).expect("create the floor segment");
        let mut echoer = SpinFloor::attach(&pinger.path()).expect("attach to it");
        pinger.unlink().expect("unlink it");
        assert!(!pinger.peer_answered());
        let echo = std::thread::spawn(move || echoer.echo(Duration::from_secs(5)));
        for _ in 0..1000 {
            assert!(pinger.ping(Duration::from_secs(5)), "the echo stopped");
        }
        assert!(pinger.peer_answered());
        pinger.stop_peer();
        assert_eq!(echo.join().expect("echo thread"), 1000);
    }

    #[test]
    fn a_ping_without_an_echo_times_out() {
        let mut pinger = SpinFloor::create(0xF100_0002).expect("create the floor segment");
        pinger.unlink().expect("unlink it");
        assert!(!pinger.ping(Duration::from_millis(20)));
    }
}
