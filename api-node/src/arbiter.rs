//! The arbitrator: an API node whose slot has ArbitrationRank 1 or 2 decides which side of a
//! split of the data nodes goes on (NDB's arbitration; the data nodes' side is
//! `rndb_ndbd`'s `blocks/arbit.rs`). The data nodes' president makes it the arbitrator with a
//! ticket (ARBIT_STARTREQ); after a split, the president of each side that keeps exactly half
//! the data nodes asks it (ARBIT_CHOOSEREQ), and the first side to ask for the ticket goes on:
//! every other side is refused and stops.
//!
//! The requests come on the data nodes' links like answers and are answered by whichever
//! thread reads the link (a waiter, the receive thread, or the heartbeat thread, which reads
//! idle links every HeartbeatIntervalDbApi).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use rndb_config::NodeId;
use rndb_protocol::qmgr::{Arbit, ArbiterEvent, ArbiterState};
use rndb_protocol::signals::gsn;

/// The arbitrator's state, shared by every link of one [`Cluster`](crate::Cluster).
#[derive(Debug, Default)]
pub(crate) struct Arbiter {
    /// This API node's ArbitrationRank: 0 never arbitrates. Changes when the API node takes
    /// another slot ([`Arbiter::moved`]).
    rank: AtomicU32,
    state: Mutex<ArbiterState>,
}

impl Arbiter {
    pub fn new(rank: u32) -> Arbiter {
        Arbiter {
            rank: AtomicU32::new(rank),
            state: Mutex::default(),
        }
    }

    /// The API node took another slot, of ArbitrationRank `rank`: a ticket held under the old
    /// node id is no longer this node's (the data nodes choose their arbitrator again).
    pub fn moved(&self, rank: u32) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        *state = ArbiterState::default();
        self.rank.store(rank, Ordering::Relaxed);
    }

    /// The answer to arbitration request `signal` from data node `from`, or `None` when the
    /// signal is no arbitration request (or this API node may not arbitrate: the data node then
    /// waits out ArbitrationTimeout).
    pub fn answer(&self, from: NodeId, signal: u16, request: &Arbit) -> Option<(u16, Arbit)> {
        let rank = self.rank.load(Ordering::Relaxed);
        if rank == 0 {
            if matches!(signal, gsn::ARBIT_STARTREQ | gsn::ARBIT_CHOOSEREQ) {
                tracing::warn!(node = %from, "data node {from} asked this API node to arbitrate, but its ArbitrationRank is 0");
            }
            return None;
        }
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (signal, answer, event) = state.answer(signal, request)?;
        match event {
            ArbiterEvent::Started => {
                tracing::info!(node = %from, "this API node is the arbitrator (ArbitrationRank {rank})")
            }
            ArbiterEvent::Chose(nodes) => {
                tracing::warn!(node = %from, "arbitration: the side of data nodes {nodes:?} goes on; any other side stops")
            }
            ArbiterEvent::Refused { chosen } => {
                tracing::warn!(node = %from, "arbitration: the side of data nodes {:?} stops; {chosen:?} goes on", request.nodes)
            }
            ArbiterEvent::UnknownTicket => {
                tracing::warn!(node = %from, "refused an arbitration request for a ticket this API node does not hold")
            }
            ArbiterEvent::Restarted | ArbiterEvent::Confirmed => {}
        }
        Some((signal, answer))
    }
}
