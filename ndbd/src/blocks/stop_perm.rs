//! A node let stop asks its node group's live peers before it goes (STOP_PERM_REQ, NDB's
//! name; there the master's DIH answers). The president lets a node whose file system failed
//! stop only while another member of its group serves (`exec_fail_rep_self`), but two
//! presidents can each let one member of a group stop: president 1 let node 4 stop and
//! crashed, its grant still on the way; node 2, presiding next and not knowing of it, let node
//! 3 stop, and node group {3, 4} was gone (seed 0x5e003f9, no arbitrator). So a node let stop
//! first asks every live peer of its group, and stops only once each confirmed:
//!
//! ```text
//!  node let stop ─STOP_PERM_REQ(attempt)─► each live peer of its node group
//!  peer, not asking itself ─STOP_PERM_CONF(attempt)─► node     (all confirmed: it stops)
//!  peer asking too, lower id ─STOP_PERM_REF(attempt)─► node     (it stays, asks again later)
//!  peer asking too, higher id: gives up its own attempt and confirms
//!  node that stays ─STOP_ABORT_REP─► the president that let it  (which judges it afresh)
//! ```
//!
//! A peer that stops gracefully alone confirms too, and puts its own stop off: it serves on
//! (`graceful_stop.rs`, `stop_yields_to`).
//!
//! Why no two members of a group both stop: say X and Y both stopped, X after Y's
//! confirmation of X's attempt and Y after X's of Y's. Y confirmed while not asking, so after
//! X's request was sent and before Y's own attempt began; X likewise confirmed after Y's
//! request was sent and before X's own attempt began. Each attempt then began before the
//! other, which cannot be. A confirmation counts only for the attempt it answers (the payload
//! names it), and a node whose peer fails while it asks gives up (the peer may have been its
//! group's other serving member).
//!
//! A president lets a node stop once (it sends no second grant while the node is in
//! `stop_granted`); a node that stays says so (STOP_ABORT_REP), and its next request is judged
//! afresh. So a NODE_FAILREP naming a node while it asks is no grant: the president declared
//! it failed, and it stops. Payloads are ARBIT's (`qmgr::Arbit`): ticket = the attempt, node =
//! the sender.

use rndb_config::NodeId;
use rndb_protocol::qmgr::Arbit;
use rndb_protocol::signals::{block, gsn};

use super::{data_node_header, Kernel, Outbox};

/// This node's attempt to stop, once its president let it.
#[derive(Debug, Default)]
pub(crate) struct StopPerm {
    /// Attempts made: each REQ carries its number, and only answers to the last count.
    attempts: u64,
    /// The attempt that runs: who let this node stop, and the peers yet to confirm.
    asking: Option<Asking>,
}

#[derive(Debug)]
struct Asking {
    attempt: u64,
    president: NodeId,
    awaiting: Vec<NodeId>,
}

impl StopPerm {
    /// True while this node asks its peers whether it may stop.
    pub(crate) fn asking(&self) -> bool {
        self.asking.is_some()
    }
}

impl Kernel {
    /// NODE_FAILREP naming this node, which asked to be stopped: the president let it stop,
    /// and it asks its node group's live peers first. With none live here it stays: it is
    /// its group's last member as it sees it, and its president's view was older. While it
    /// asks, the message is no grant (a president grants once) but a declaration: it stops.
    pub(crate) fn stop_perm_begin(&mut self, president: NodeId, out: &mut dyn Outbox) {
        if self.qmgr.stop_perm.asking() {
            self.qmgr.stop_perm.asking = None;
            return self.stopped_at_own_request(Some(president), out);
        }
        let awaiting: Vec<NodeId> = self
            .qmgr
            .group_peers(self.me)
            .filter(|&n| self.qmgr.is_up(n))
            .collect();
        if awaiting.is_empty() {
            tracing::warn!(president = %president, "data node {president} let this node stop, but no other member of its node group is alive here: it stays, its group's last member");
            return self.send_stop_perm(president, gsn::STOP_ABORT_REP, 0, out);
        }
        self.qmgr.stop_perm.attempts += 1;
        let attempt = self.qmgr.stop_perm.attempts;
        tracing::info!(president = %president, ?awaiting, attempt, "data node {president} let this node stop: asking its node group's live members first (STOP_PERM_REQ)");
        for &peer in &awaiting {
            self.send_stop_perm(peer, gsn::STOP_PERM_REQ, attempt, out);
        }
        self.qmgr.stop_perm.asking = Some(Asking {
            attempt,
            president,
            awaiting,
        });
    }

    /// STOP_PERM_REQ, CONF or REF, or STOP_ABORT_REP, from live data node `from`.
    pub(crate) fn exec_stop_perm_signal(
        &mut self,
        from: NodeId,
        signal: u16,
        arbit: &Arbit,
        out: &mut dyn Outbox,
    ) {
        if self.qmgr.dead {
            return;
        }
        let attempt = arbit.ticket;
        match signal {
            gsn::STOP_PERM_REQ => {
                if self.qmgr.stop_perm.asking() {
                    if self.me < from {
                        return self.send_stop_perm(from, gsn::STOP_PERM_REF, attempt, out);
                    }
                    tracing::info!(node = %from, "data node {from} of this node group asks to stop too, and has the lower id: this node stays for now");
                    self.stop_perm_abort(out);
                }
                // A rolling restart meeting a failed disk: this node serves on.
                self.stop_yields_to(from);
                self.send_stop_perm(from, gsn::STOP_PERM_CONF, attempt, out);
            }
            gsn::STOP_PERM_CONF => {
                let Some(asking) = self.qmgr.stop_perm.asking.as_mut() else {
                    return;
                };
                if asking.attempt != attempt {
                    return;
                }
                asking.awaiting.retain(|&n| n != from);
                if asking.awaiting.is_empty() {
                    let president = asking.president;
                    self.qmgr.stop_perm.asking = None;
                    self.stopped_at_own_request(Some(president), out);
                }
            }
            gsn::STOP_PERM_REF
                if self.qmgr.stop_perm.asking.as_ref().map(|a| a.attempt) == Some(attempt) =>
            {
                tracing::info!(node = %from, "data node {from} of this node group asks to stop too, and has the lower id: this node stays for now");
                self.stop_perm_abort(out);
            }
            gsn::STOP_ABORT_REP => {
                self.qmgr.stop_granted.remove(from);
            }
            _ => {}
        }
    }

    /// Data node `node` failed: an attempt to stop that waits on a peer of this node's group
    /// gives up, as that peer may have been the group's other serving member.
    pub(crate) fn stop_perm_node_failed(&mut self, node: NodeId, out: &mut dyn Outbox) {
        if !self.qmgr.stop_perm.asking() || !self.qmgr.group_peers(self.me).any(|n| n == node) {
            return;
        }
        tracing::warn!(node = %node, "data node {node} of this node group failed while this node asked to stop: it stays for now");
        self.stop_perm_abort(out);
    }

    /// This node stays: the attempt ends, and the president that let it stop hears so.
    fn stop_perm_abort(&mut self, out: &mut dyn Outbox) {
        let Some(asking) = self.qmgr.stop_perm.asking.take() else {
            return;
        };
        if self.qmgr.is_up(asking.president) {
            self.send_stop_perm(asking.president, gsn::STOP_ABORT_REP, asking.attempt, out);
        }
    }

    fn send_stop_perm(&mut self, to: NodeId, signal: u16, attempt: u64, out: &mut dyn Outbox) {
        let frame = data_node_header(signal, block::QMGR, block::QMGR);
        let arbit = Arbit {
            ticket: attempt,
            node: self.me.0,
            nodes: Vec::new(),
        };
        self.unsent.send(out, to, frame, &mut |b| arbit.encode(b));
    }
}
