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

use std::sync::Mutex;

use rndb_config::NodeId;
use rndb_protocol::qmgr::Arbit;
use rndb_protocol::signals::gsn;

/// The arbitrator's state, shared by every link of one [`Cluster`](crate::Cluster).
#[derive(Debug, Default)]
pub(crate) struct Arbiter {
    /// This API node's ArbitrationRank: 0 never arbitrates.
    rank: u32,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The ticket of the last ARBIT_STARTREQ, once one came.
    ticket: Option<u64>,
    /// The data nodes of the side chosen for the ticket, once one asked.
    chosen: Option<Vec<u16>>,
}

impl Arbiter {
    pub fn new(rank: u32) -> Arbiter {
        Arbiter {
            rank,
            state: Mutex::default(),
        }
    }

    /// The answer to an arbitration request `signal` from data node `from`, or `None` when the
    /// signal is no arbitration request.
    pub fn answer(&self, from: NodeId, signal: u16, request: &Arbit) -> Option<(u16, Arbit)> {
        let reply = |signal| {
            Some((
                signal,
                Arbit {
                    ticket: request.ticket,
                    node: 0,
                    nodes: Vec::new(),
                },
            ))
        };
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match signal {
            gsn::ARBIT_STARTREQ => {
                if self.rank == 0 {
                    tracing::warn!(node = %from, "data node {from} asked this API node to arbitrate, but its ArbitrationRank is 0");
                    return None;
                }
                if state.ticket != Some(request.ticket) {
                    tracing::info!(node = %from, "this API node is the arbitrator (ArbitrationRank {})", self.rank);
                }
                *state = State {
                    ticket: Some(request.ticket),
                    chosen: None,
                };
                reply(gsn::ARBIT_STARTCONF)
            }
            gsn::ARBIT_CHOOSEREQ => {
                if self.rank == 0 || state.ticket != Some(request.ticket) {
                    tracing::warn!(node = %from, "refused an arbitration request for a ticket this API node does not hold");
                    return reply(gsn::ARBIT_CHOOSEREF);
                }
                // Sides of a split share no data node: a request naming one of the chosen
                // side's nodes is that side asking again (its president may have changed).
                let same_side =
                    |chosen: &Vec<u16>| request.nodes.iter().any(|node| chosen.contains(node));
                match &state.chosen {
                    None => {
                        tracing::warn!(node = %from, "arbitration: the side of data nodes {:?} goes on; any other side stops", request.nodes);
                        state.chosen = Some(request.nodes.clone());
                        reply(gsn::ARBIT_CHOOSECONF)
                    }
                    Some(chosen) if same_side(chosen) => reply(gsn::ARBIT_CHOOSECONF),
                    Some(chosen) => {
                        tracing::warn!(node = %from, "arbitration: the side of data nodes {:?} stops; {chosen:?} goes on", request.nodes);
                        reply(gsn::ARBIT_CHOOSEREF)
                    }
                }
            }
            _ => None,
        }
    }
}
