//! Primaries moving back after a node restart (NDB's "order recomputed so the preferred
//! primary is primary again" at the end of a node's take-over). A restarted node joins every
//! write chain last (`Qmgr::rejoined`), so that no primary moves while its fragments are
//! copied; once it is started, the president runs a *switch round* that puts it back in its
//! config place, so that it is the primary of its own partitions again and the load is
//! balanced.
//!
//! Moving a primary while transactions run would break the linear commit's promise: a change
//! is committed at the backups first and at the primary last, so a committed read at the
//! primary never sees a change a later read could miss. A transaction ordered the old way
//! commits at the new primary first, and a read there could see it before the old primary
//! has it. So the round drains: while it runs no node starts a transaction (1204, temporary:
//! NDB's "Temporary failure, distribution changed"), the transactions each node's TC had when
//! the round began end, and only then does every node take the new order.
//!
//! ```text
//!  president ─PRIMARY_SWITCH_REQ(round, node, new order)─► every live data node (itself too)
//!            each refuses new transactions (1204); once its TC's transactions from before
//!            have ended ─PRIMARY_SWITCH_CONF(round)─► president
//!  president ─PRIMARY_SWITCH_COMMIT(round, apply 1, new order)─► every node: takes the order,
//!            starts transactions again
//! ```
//!
//! A round whose drain takes longer than TransactionDeadlockDetectionTimeout (a transaction
//! left open) ends with COMMIT apply 0 (nothing changes) and is tried again every
//! HeartbeatIntervalDbDb, [`ATTEMPTS_MAX`] times. A failure of the node moving back ends its
//! round (its place is set again when it rejoins). When the president fails during a round,
//! some nodes may have taken the new order and others not: a node still holding keeps holding
//! and asks the new president (PRIMARY_SWITCH_QUERY), which runs a round with no time limit
//! that sets every node to its own order (there, a transaction from before that sits idle,
//! waiting for its API, past TransactionDeadlockDetectionTimeout is aborted with 1204, so that
//! an application holding a transaction open cannot hold the round and every new transaction
//! with it for good; a node that asks while that round runs, holding for
//! another, gets the round's REQ again; a query that comes before the receiver has handled
//! the failure that makes it president is kept until it has; should that president fail too,
//! the next one is asked). Likewise a REQ from a node the receiver does not hold as its
//! president yet (it saw the old one fail first, or a split that arbitration will settle) is
//! kept until it is, and dropped if that node fails or ends the round first: two presidents'
//! rounds taken side by side would each set part of the cluster's order. A node that holds
//! confirms no node restart's inclusion (INCL_NODECONF) until its round ends, so that a copy
//! is planned only from chains every node shares. Payloads are ARBIT's (`qmgr::Arbit`):
//! ticket = round id, node = the node moving back (REQ) or apply (COMMIT), nodes = the new
//! `rejoined` order.

use std::time::{Duration, Instant};

use rndb_config::{DataNodeConfig, NodeId};
use rndb_protocol::qmgr::Arbit;
use rndb_protocol::signals::{block, gsn};
use rndb_protocol::{NdbError, TransId};

use super::node_set::NodeSet;
use super::{data_node_header, Kernel, Outbox, Signal};

/// Rounds tried for one node before its primaries stay where they are.
pub const ATTEMPTS_MAX: u32 = 10;

/// The switch rounds: the president's, and the hold this node keeps for one.
#[derive(Debug)]
pub(crate) struct PrimarySwitch {
    /// How long a round waits for the transactions from before to end
    /// (TransactionDeadlockDetectionTimeout).
    drain: Duration,
    /// How long after a round that ran out the next one starts (HeartbeatIntervalDbDb).
    retry: Duration,
    /// As president: nodes started by node restart that are to move back, in order.
    pending: Vec<NodeId>,
    /// As president: the round that runs.
    round: Option<Round>,
    /// As president: no round before this.
    not_before: Option<Instant>,
    /// As president: rounds tried for the first pending node.
    attempts: u32,
    /// Rounds made (a round id is this node's id and the count).
    rounds_made: u64,
    /// This node's part in a round: it starts no transaction until the round ends.
    hold: Option<Hold>,
    /// Nodes that asked this node to settle the order (PRIMARY_SWITCH_QUERY) before it was
    /// president: it settles it once it is.
    queried: NodeSet,
    /// A round's REQ from a live node that is not this node's president (it saw a failure
    /// this node has not seen yet): taken once it is president here, dropped when it fails or
    /// ends that round first.
    early_req: Option<(NodeId, Arbit)>,
    /// Restarted nodes moved back to their config place here.
    pub moves: u64,
}

#[derive(Debug)]
struct Round {
    id: u64,
    /// The node moving back; `None` for a round that makes every node take the president's
    /// order (after a president failed during a round).
    node: Option<NodeId>,
    order: Vec<u16>,
    awaiting: NodeSet,
    since: Instant,
}

#[derive(Debug)]
struct Hold {
    id: u64,
    president: NodeId,
    /// This TC's transactions when the round began; the CONF goes once they have ended.
    before: Vec<TransId>,
    confirmed: bool,
    /// This node's `rejoined` order when the round began: a node included after it (by a
    /// new president, the round's own having failed) is not in the round's order.
    rejoined: Vec<NodeId>,
    /// The round has no time limit (it settles the order after a president failed), and
    /// when this node began to hold for it: past the drain, idle transactions from before
    /// are aborted.
    untimed_since: Option<Instant>,
}

impl PrimarySwitch {
    pub fn new(node: &DataNodeConfig) -> PrimarySwitch {
        PrimarySwitch {
            drain: Duration::from_millis(u64::from(node.transaction_deadlock_detection_timeout_ms)),
            retry: Duration::from_millis(u64::from(node.heartbeat_interval_db_db_ms)),
            pending: Vec::new(),
            round: None,
            not_before: None,
            attempts: 0,
            rounds_made: 0,
            hold: None,
            queried: NodeSet::new(),
            early_req: None,
            moves: 0,
        }
    }
}

impl Kernel {
    /// At the president (the lowest live id, which may be `node` itself), once `node` is
    /// started by node restart: its primaries are to move back.
    pub(crate) fn primary_switch_queue(&mut self, node: NodeId) {
        if !self.primary.pending.contains(&node) {
            self.primary.pending.push(node);
        }
    }

    /// True while a switch round runs here, as president: no node restart is let in then.
    pub(crate) fn primary_switch_busy(&self) -> bool {
        self.primary.round.is_some()
    }

    /// True while this node holds for a switch round: it confirms no inclusion then.
    pub(crate) fn primary_switch_holding(&self) -> bool {
        self.primary.hold.is_some()
    }

    /// Every timer tick: a hold whose transactions from before have ended is confirmed; the
    /// president ends a round that ran out, and starts the next one.
    pub(crate) fn primary_switch_timer(&mut self, out: &mut dyn Outbox, now: Instant) {
        self.primary_hold_progress(out, now);
        if !self.qmgr.started() || self.qmgr.master() != self.me {
            return;
        }
        if let Some(round) = &self.primary.round {
            let timed = round.node.is_some();
            if timed && now >= round.since + self.primary.drain {
                let id = round.id;
                let node = round.node;
                tracing::warn!(node = ?node, "primaries of data node {node:?} not moved back: transactions did not end within TransactionDeadlockDetectionTimeout={} ms; trying again", self.primary.drain.as_millis());
                self.primary_commit(id, false, Vec::new(), out);
                self.primary.not_before = Some(now + self.primary.retry);
                self.primary.attempts += 1;
                if self.primary.attempts >= ATTEMPTS_MAX {
                    tracing::warn!(node = ?node, "primaries of data node {node:?} stay where they are after {ATTEMPTS_MAX} rounds");
                    self.primary.pending.retain(|&n| Some(n) != node);
                    self.primary.attempts = 0;
                }
            }
            return;
        }
        if self.primary_answer_early_queries(out, now) {
            return;
        }
        if self.primary.not_before.is_some_and(|t| now < t) || self.node_restart_running() {
            return;
        }
        // Nodes that failed again, or were never moved last, have nothing to move.
        let qmgr = &self.qmgr;
        self.primary.pending.retain(|&n| {
            qmgr.is_alive(n) && !qmgr.copying.contains(n) && qmgr.rejoined.contains(&n)
        });
        let Some(&node) = self.primary.pending.first() else {
            return;
        };
        let order: Vec<u16> = self
            .qmgr
            .rejoined
            .iter()
            .filter(|&&n| n != node)
            .map(|n| n.0)
            .collect();
        self.primary_start_round(Some(node), order, out, now);
    }

    fn primary_start_round(
        &mut self,
        node: Option<NodeId>,
        order: Vec<u16>,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        self.primary.rounds_made += 1;
        let id = (u64::from(self.me.0) << 48) | self.primary.rounds_made;
        let awaiting: NodeSet = self.qmgr.alive().collect();
        tracing::info!(node = ?node, round = id, "moving primaries: new transactions wait (1204) while those running end");
        let req = Arbit {
            ticket: id,
            node: node.map_or(0, |n| n.0),
            nodes: order.clone(),
        };
        self.primary.round = Some(Round {
            id,
            node,
            order,
            awaiting,
            since: now,
        });
        for peer in awaiting.iter() {
            if peer == self.me {
                self.exec_primary_switch_req(self.me, &req, out, now);
            } else {
                self.primary_send(peer, gsn::PRIMARY_SWITCH_REQ, &req, out);
            }
        }
    }

    fn primary_send(&mut self, to: NodeId, signal: u16, arbit: &Arbit, out: &mut dyn Outbox) {
        let header = data_node_header(signal, block::QMGR, block::QMGR);
        self.unsent.send(out, to, header, &mut |b| arbit.encode(b));
    }

    /// A switch round's signal from data node `from`.
    pub(crate) fn exec_primary_switch_signal(
        &mut self,
        from: NodeId,
        signal: u16,
        arbit: &Arbit,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        match signal {
            // From a president this node has seen fail (its frames drained late over a slow
            // link): its round is over, and taken now, the hold would be for a round no one
            // ends. The new president settled the order already, or will for those who ask
            // (seed 0x48007244: node 4 held for dead node 1's round after the new president's
            // round had ended, and so confirmed no inclusion again).
            gsn::PRIMARY_SWITCH_REQ if !self.qmgr.is_alive(from) => {}
            // From a node that is not this node's president: it saw this node's president fail
            // first (or a split, which arbitration settles). Taken now, the two presidents'
            // rounds would each set part of the cluster's order (seed 0xc2000a20: node 3 took
            // node 2's round, which kept it out of its config place, after it had confirmed
            // node 1's, which put it back; node 1's COMMIT came after, found no hold, and
            // nodes 1 and 3 disagreed on every chain: a scan read 3 of 9 rows).
            gsn::PRIMARY_SWITCH_REQ if self.qmgr.master() != from => {
                self.primary.early_req = Some((from, arbit.clone()));
            }
            gsn::PRIMARY_SWITCH_REQ => self.exec_primary_switch_req(from, arbit, out, now),
            gsn::PRIMARY_SWITCH_CONF => self.exec_primary_switch_conf(from, arbit.ticket, out),
            gsn::PRIMARY_SWITCH_COMMIT => {
                if (self.primary.early_req.as_ref())
                    .is_some_and(|(early, req)| *early == from && req.ticket == arbit.ticket)
                {
                    self.primary.early_req = None;
                }
                self.exec_primary_switch_commit(arbit)
            }
            // Before this node has handled the failure that makes it president (the asking
            // node heard of it first): kept until it has. Dropped, the asking node held its
            // order, unlike this node's, until the next round, and a node restart let in
            // meanwhile was copied to by a plan the two did not share (seed 0xa401e19).
            gsn::PRIMARY_SWITCH_QUERY if self.qmgr.master() != self.me => {
                self.primary.queried.insert(from);
            }
            gsn::PRIMARY_SWITCH_QUERY => {
                match &mut self.primary.round {
                    None => self.primary_resync(out, now),
                    // The node holds for another round: a failed president's REQ, drained
                    // after this one's, replaced its hold (seed 0x59683266), even after it had
                    // confirmed this one (seed 0x48007244: its CONF counted, it then held for
                    // the dead president's round, ignored this round's COMMIT, and confirmed
                    // no inclusion again). It is asked again, and awaited again.
                    Some(round) => {
                        round.awaiting.insert(from);
                        let req = Arbit {
                            ticket: round.id,
                            node: round.node.map_or(0, |n| n.0),
                            nodes: round.order.clone(),
                        };
                        self.primary_send(from, gsn::PRIMARY_SWITCH_REQ, &req, out);
                    }
                }
            }
            _ => {}
        }
    }

    /// PRIMARY_SWITCH_REQ: start no transaction until the round ends; confirm once this TC's
    /// transactions from before have ended.
    fn exec_primary_switch_req(
        &mut self,
        president: NodeId,
        req: &Arbit,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        self.primary.hold = Some(Hold {
            id: req.ticket,
            president,
            before: self.tc.running_transaction_ids(),
            confirmed: false,
            rejoined: self.qmgr.rejoined.clone(),
            // A round for no node (`node` 0) settles the order after a president failed.
            untimed_since: (req.node == 0).then_some(now),
        });
        self.tc.set_starts_held(true);
        self.primary_hold_progress(out, now);
    }

    fn primary_hold_progress(&mut self, out: &mut dyn Outbox, now: Instant) {
        let Some(hold) = &mut self.primary.hold else {
            return;
        };
        if hold.confirmed {
            return;
        }
        let tc = &mut self.tc;
        hold.before.retain(|&t| tc.is_running(t));
        if !hold.before.is_empty() {
            if hold
                .untimed_since
                .is_some_and(|since| now.saturating_duration_since(since) >= self.primary.drain)
            {
                // Transactions that wait for their lock or commit end on their own (a lock
                // wait within TransactionDeadlockDetectionTimeout); one that waits for its
                // API's next execute may never end (TransactionInactiveTimeout is unlimited by
                // default): it is aborted, and its next execute told 1204 (NDB's "Temporary
                // failure, distribution changed": the application retries).
                let error = NdbError::with_detail(
                    1204,
                    format!(
                        "aborted while idle: primaries were being moved, and the transaction \
                         held that up for TransactionDeadlockDetectionTimeout={} ms",
                        self.primary.drain.as_millis()
                    ),
                );
                for &trans in &hold.before {
                    if tc.abort_idle(trans, error.clone()) {
                        self.jobs.push_back(Signal::TcContinueB(trans));
                    }
                }
            }
            return;
        }
        hold.confirmed = true;
        let (id, president) = (hold.id, hold.president);
        let conf = Arbit {
            ticket: id,
            node: 0,
            nodes: Vec::new(),
        };
        if president == self.me {
            self.exec_primary_switch_conf(self.me, id, out);
        } else {
            self.primary_send(president, gsn::PRIMARY_SWITCH_CONF, &conf, out);
        }
    }

    /// PRIMARY_SWITCH_CONF at the president: once every node confirmed, every node takes the
    /// new order.
    fn exec_primary_switch_conf(&mut self, from: NodeId, id: u64, out: &mut dyn Outbox) {
        let Some(round) = &mut self.primary.round else {
            return;
        };
        if round.id != id {
            return;
        }
        round.awaiting.remove(from);
        if round.awaiting.is_empty() {
            let order = round.order.clone();
            self.primary_commit(id, true, order, out);
        }
    }

    /// As president: ends round `id` on every live node, applying its order or not.
    fn primary_commit(&mut self, id: u64, apply: bool, order: Vec<u16>, out: &mut dyn Outbox) {
        let Some(round) = self.primary.round.take() else {
            return;
        };
        if apply {
            if let Some(node) = round.node {
                self.primary.pending.retain(|&n| n != node);
                self.primary.attempts = 0;
            }
        }
        let commit = Arbit {
            ticket: id,
            node: u16::from(apply),
            nodes: order,
        };
        let alive: Vec<NodeId> = self.qmgr.alive().collect();
        for peer in alive {
            if peer == self.me {
                self.exec_primary_switch_commit(&commit);
            } else {
                self.primary_send(peer, gsn::PRIMARY_SWITCH_COMMIT, &commit, out);
            }
        }
    }

    /// PRIMARY_SWITCH_COMMIT: the round ends; with apply, chains take the new order.
    fn exec_primary_switch_commit(&mut self, commit: &Arbit) {
        if self
            .primary
            .hold
            .as_ref()
            .is_none_or(|h| h.id != commit.ticket)
        {
            return;
        }
        let Some(hold) = self.primary.hold.take() else {
            return;
        };
        self.tc.set_starts_held(false);
        if commit.node == 1 {
            let before = std::mem::take(&mut self.qmgr.rejoined);
            self.qmgr.rejoined = commit.nodes.iter().map(|&n| NodeId(n)).collect();
            // Nodes included here while the round held (its president failed, and a new one
            // let a node in before this COMMIT, sent earlier, came over a slow link) stay
            // last, as every node that took the COMMIT first then included them has them.
            // Dropped, this node's chains put such a node in its config place where the
            // others put it last, and the copy to it skipped the fragments each side took
            // the other to copy (seed 0x94000f6: a row inserted while the node was down
            // never reached it).
            let included_since: Vec<NodeId> = (before.iter().copied())
                .filter(|n| !hold.rejoined.contains(n) && !self.qmgr.rejoined.contains(n))
                .collect();
            self.qmgr.rejoined.extend(included_since);
            let moved: Vec<NodeId> = before
                .into_iter()
                .filter(|n| !self.qmgr.rejoined.contains(n))
                .collect();
            self.primary.moves += moved.len() as u64;
            tracing::info!(moved_back = ?moved, order = ?self.qmgr.rejoined, "primaries moved back: data nodes {moved:?} take their config place in every chain");
        }
    }

    /// Data node `node` failed: a round it took part in goes on without it, or ends when it
    /// was the node moving back; a hold whose president failed asks the new president.
    pub(crate) fn primary_switch_node_failed(
        &mut self,
        node: NodeId,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        if let Some(round) = &mut self.primary.round {
            if round.node == Some(node) {
                let id = round.id;
                self.primary_commit(id, false, Vec::new(), out);
            } else {
                round.awaiting.remove(node);
                if round.awaiting.is_empty() {
                    let (id, order) = (round.id, round.order.clone());
                    self.primary_commit(id, true, order, out);
                }
            }
        }
        self.primary_answer_early_queries(out, now);
        if let Some((from, req)) = self.primary.early_req.take() {
            if from == self.qmgr.master() {
                self.exec_primary_switch_req(from, &req, out, now);
            } else if self.qmgr.is_alive(from) {
                self.primary.early_req = Some((from, req));
            }
        }
        // Its president failed, now or before (a new president that failed too before it
        // settled the order is asked again: the hold still names the first one).
        let orphaned = self
            .primary
            .hold
            .as_ref()
            .is_some_and(|h| h.president == node || !self.qmgr.is_alive(h.president));
        if !orphaned {
            return;
        }
        // Some nodes may have taken the round's order, others not: this node keeps holding
        // until the new president sets every node to one order.
        let president = self.qmgr.master();
        tracing::warn!(failed = %node, president = %president, "the president failed during a round moving primaries: asking the new president to settle the order");
        if president == self.me {
            if self.primary.round.is_none() {
                self.primary_resync(out, now);
            }
        } else {
            let query = Arbit {
                ticket: 0,
                node: 0,
                nodes: Vec::new(),
            };
            self.primary_send(president, gsn::PRIMARY_SWITCH_QUERY, &query, out);
        }
    }

    /// As president outside a round: queries kept from before this node was president are
    /// answered with a round that settles the order. True when one began.
    fn primary_answer_early_queries(&mut self, out: &mut dyn Outbox, now: Instant) -> bool {
        let ready = self.qmgr.master() == self.me && self.primary.round.is_none();
        if !ready || self.primary.queried.is_empty() {
            return false;
        }
        self.primary.queried = NodeSet::new();
        self.primary_resync(out, now);
        true
    }

    /// As a new president: a round, with no time limit, that makes every node take this
    /// node's order.
    fn primary_resync(&mut self, out: &mut dyn Outbox, now: Instant) {
        let order: Vec<u16> = self.qmgr.rejoined.iter().map(|n| n.0).collect();
        self.primary_start_round(None, order, out, now);
    }
}
