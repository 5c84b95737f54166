//! Arbitration (NDB's, in QMGR): which side of a split goes on. When data nodes fail, each
//! survivor cannot tell a crash from a network split, so each side's president decides, by
//! NDB's rules, over the data nodes alive before the failures and the side its nodes confirmed:
//!
//! 1. a node group with no live node left: the side stops (2305, `qmgr.rs` does it);
//! 2. a node group whose every node is on this side, or stopped gracefully (one at least
//!    here): it goes on (the other side cannot have a node of that group);
//! 3. more than half of the nodes: it goes on; fewer than half: it stops (2305);
//! 4. exactly half: the side's president asks the arbitrator (ARBIT_CHOOSEREQ), and the first
//!    side to ask goes on; the other is refused and stops. No answer within
//!    ArbitrationTimeout, or no arbitrator: it stops.
//!
//! While a round runs a node serves no key operation and refuses commits (286), holds the
//! answers of commits that finished meanwhile and the commit rounds of those still running
//! (a round releases locks and shows rows: seed 0x950306a7f), saves no global checkpoint
//! (what it decided for the failed nodes' transactions is its side's: seed 0xa403ba6), and
//! tells API nodes of no failure: a side that then stops must not have shown, acknowledged
//! or saved anything the other side lacks, and the arbitrator must keep its links to both
//! sides. All of it resumes when the side goes on.
//!
//! A node is counted on a side only once it agreed to it, as NDB settles a failure at the
//! president: each side counted from its own links once took a node that had seen no failure
//! for both, and both went on (seed 0x2e3190a52). The side's president (its lowest id) asks
//! every other node it counts to confirm the side (PREP_FAILREQ naming its nodes). A node
//! that holds every one of them alive fails every other node (closing its links: it speaks to
//! them no more until they restart, so no other side can count it) and confirms
//! (PREP_FAILCONF); one that holds one of them failed says so (FAIL_REP), and the president
//! asks again without it, as it does whenever its side changes. A node that has not confirmed
//! within ArbitrationTimeout is failed too. Only then are the rules applied, and the
//! arbitrator asked, for the confirmed side. A node confirms a side only within the one it
//! confirmed before, so two sides that go on share no node, and none that counts its own
//! president as still being copied to (the sender has yet to hear that it started; the
//! request is taken again each tick for ArbitrationTimeout, as its sender may preside here
//! next). The other nodes go on only on their president's ARBIT_VERDICT (NDB's
//! COMMIT_FAILREQ) for the side they confirmed, none of whose nodes failed here since;
//! without it they stop after twice ArbitrationTimeout. One
//! in a round it confirmed nothing of reports its failures to its president (FAIL_REP) every
//! HeartbeatIntervalDbDb; a president outside a round that hears of a node it holds failed
//! already (one it was copying to) begins one.
//!
//! ```text
//!  president ─ARBIT_STARTREQ(ticket)─► a management or API node of ArbitrationRank 1 (else 2)
//!            ◄─ARBIT_STARTCONF────────
//!            ─ARBIT_PREPREQ(arbitrator, ticket)─► every data node
//!  a failure: every node holds commits (286); after one HeartbeatIntervalDbDb, so that the
//!  rest of a split shows too:
//!  side's president ─PREP_FAILREQ(side)─► the side's other nodes ─PREP_FAILCONF─►
//!  then rules 1-3 on the confirmed side; with exactly half:
//!                   ─ARBIT_CHOOSEREQ(ticket, side)─► arbitrator ─CONF/REF─►
//!                   ─ARBIT_VERDICT(go on / stop, side)─► the side's other nodes
//! ```
//!
//! After a side goes on by the arbitrator, its president starts the arbitrator again with a
//! new ticket, so that the next split is decided afresh; so does a node that becomes president
//! while the last one still runs (a lower id that rejoined), whose ticket may be stale. The
//! arbitrator still takes the ticket it replaced so, undecided, from a node the new ticket
//! has not reached (`ArbiterState`: seed 0x2d72d79b7, the new president crashed first). No
//! restarting node is let in while a round runs (`exec_start_permreq`). Graceful stops
//! (NODE_STOPPING_REP) are no failures here, and nodes still being copied to by node restart
//! count on no side (the failure of one is a failed restart), but among the nodes alive before
//! a failure (their president may have told the other side that one started).
//! `WaitExternal` goes on after ArbitrationTimeout, each node by its own count, confirming
//! nothing (an external manager is to stop one side meanwhile). With arbitration off
//! (`Arbitration=Disabled`, or no node that may arbitrate) a failure still runs a round, as
//! NDB settles every failure at the president: at once (no settle time), the side's nodes
//! confirm it, failing the nodes it lacks, and it goes on whatever its count (rule 1 aside);
//! a member waits for its president's verdict for as long as the president lives (it does
//! not stop after twice ArbitrationTimeout: a hung president is failed by heartbeats).
//! So no node serves again after a failure while another still takes the failed node's
//! signals (seed 0x13006e8: a TC that had handled a primary's failure sent a locked read to
//! the backup, which still ran the old primary's frames, and an update was lost). The arbitrator is
//! `ndb_mgmd` (`rndb_mgm::server::arbitrator`; ArbitrationRank 1 by default) or an API node
//! (`rndb_api`'s `arbiter.rs`; ArbitrationRank 0 by default).
//! Unlike NDB, a cluster whose config has no node of ArbitrationRank 1 or 2 does not
//! arbitrate (as Disabled), where NDB would stop a two-node cluster at its first failure.

use std::time::{Duration, Instant};

use rndb_config::{Arbitration, ClusterConfig, DataNodeConfig, NodeId};
use rndb_protocol::qmgr::Arbit as ArbitSignal;
use rndb_protocol::signals::{block, gsn};

use super::node_set::NodeSet;
use super::{data_node_header, Kernel, Outbox, Signal};

/// A data node's arbitration state.
#[derive(Debug)]
pub(crate) struct Arbit {
    method: Arbitration,
    /// ArbitrationTimeout.
    timeout: Duration,
    /// How long a failure round waits for the rest of a split to show (HeartbeatIntervalDbDb).
    settle: Duration,
    /// Management and API nodes that may arbitrate: ArbitrationRank 1 before 2, management
    /// nodes first, then by id.
    candidates: Vec<NodeId>,
    /// The arbitrator and its ticket, as the president last said (ARBIT_PREPREQ).
    arbitrator: Option<(NodeId, u64)>,
    /// As president: the node asked to arbitrate, with the ticket, and when.
    starting: Option<(NodeId, u64, Instant)>,
    /// As president: when ARBIT_PREPREQ last went to every data node.
    prep_sent: Option<Instant>,
    /// As president: the data nodes that ARBIT_PREPREQ last went to.
    prepped: NodeSet,
    /// Failures being decided.
    round: Option<Round>,
    /// The last ARBIT_VERDICT that said this side goes on: from whom, the PREP_FAILREQ it
    /// ends, and the data nodes its president counted on the side.
    verdict_win: Option<(NodeId, u64, NodeSet)>,
    /// Tickets made so far (a ticket is this node's id and the count).
    tickets_made: u64,
    /// PREP_FAILREQs sent so far, as a side's president (each named by this node's id and
    /// the count).
    preps_made: u64,
    /// The side's president at the last tick, and whether this node, president since, is
    /// to start the arbitrator with a ticket of its own (`arbit_timer`).
    president_seen: Option<NodeId>,
    renew: bool,
    /// Said once: arbitration is off, and why.
    logged_off: bool,
    /// The last PREP_FAILREQ ignored because it counts this node's president as still being
    /// copied to: from whom, the request, and when it came. Taken again at each tick while
    /// its sender may still wait for it (ArbitrationTimeout): once this node's president
    /// fails (it may stop as its restart fails, its start never told to the sender), the
    /// sender presides here too, and asks no more for a side that did not change.
    ignored_prep: Option<(NodeId, ArbitSignal, Instant)>,
    /// Failures the API nodes hear of once the round ends with this side going on.
    api_failreps: Vec<NodeId>,
    /// Failures that started no round here, and when: a node being copied to
    /// (`arbit_copying_failed`), or a member that failed while this node was not yet started.
    /// A round that starts within `COPYING_FAILED_COUNTED` heartbeat intervals counts them
    /// alive before.
    failed_uncounted: Vec<(NodeId, Instant)>,
}

/// Heartbeat intervals for which a node being copied to that failed still counts among the
/// nodes alive before a failure round: twice the heartbeat bound, past the spread of one
/// split's failures as its nodes detect them.
const COPYING_FAILED_COUNTED: u32 = 2 * super::qmgr::MISSED_DEAD;

/// Failures since the side was last whole.
#[derive(Debug)]
struct Round {
    /// The data nodes alive before the first failure (nodes stopping gracefully left out,
    /// also when they stop during the round: `arbit_node_failed`).
    before: NodeSet,
    since: Instant,
    /// As the side's president: when ARBIT_CHOOSEREQ went to the arbitrator, and the side it
    /// named.
    asked: Option<Instant>,
    /// As the side's president: the PREP_FAILREQ that the side's other nodes confirm.
    prep: Option<Prep>,
    /// As another node of the side: the last PREP_FAILREQ this node confirmed, until a node
    /// of its side fails here (`arbit_side_lost`).
    confirmed: Option<Confirmed>,
    /// As another node of the side: when it last told its president of the failures it saw
    /// (FAIL_REP), waiting for a PREP_FAILREQ.
    reported: Option<Instant>,
}

/// A side's president's PREP_FAILREQ: the side it names, and the nodes that confirmed it.
#[derive(Debug)]
struct Prep {
    id: u64,
    side: NodeSet,
    confirmed: NodeSet,
    sent: Instant,
}

/// A PREP_FAILREQ this node confirmed (PREP_FAILCONF): from which president, which one, the
/// side it named (this node failed every node outside it), and when.
#[derive(Debug)]
struct Confirmed {
    president: NodeId,
    id: u64,
    side: NodeSet,
    at: Instant,
}

impl Round {
    fn new(before: NodeSet, since: Instant) -> Round {
        Round {
            before,
            since,
            asked: None,
            prep: None,
            confirmed: None,
            reported: None,
        }
    }
}

/// What a failure round decided.
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    GoOn(&'static str),
    Stop(String),
    Ask,
    /// As the side's president: the side's other nodes are to confirm it (PREP_FAILREQ).
    Prepare,
    Wait,
}

impl Arbit {
    pub fn new(config: &ClusterConfig, node: &DataNodeConfig) -> Arbit {
        // By rank; at one rank management nodes before API nodes (NDB's order), then by id.
        let mgm = config
            .mgm_nodes
            .iter()
            .map(|n| (n.arbitration_rank, 0u8, n.node_id));
        let api = config
            .api_slots
            .iter()
            .map(|slot| (slot.arbitration_rank, 1u8, slot.node_id));
        let mut ranked: Vec<(u32, u8, NodeId)> = mgm
            .chain(api)
            .filter(|&(rank, _, _)| matches!(rank, 1 | 2))
            .collect();
        ranked.sort_unstable();
        Arbit {
            method: node.arbitration,
            timeout: Duration::from_millis(u64::from(node.arbitration_timeout_ms)),
            settle: Duration::from_millis(u64::from(node.heartbeat_interval_db_db_ms)),
            candidates: ranked.into_iter().map(|(_, _, id)| id).collect(),
            arbitrator: None,
            starting: None,
            prep_sent: None,
            prepped: NodeSet::new(),
            round: None,
            verdict_win: None,
            tickets_made: 0,
            preps_made: 0,
            president_seen: None,
            renew: false,
            logged_off: false,
            ignored_prep: None,
            api_failreps: Vec::new(),
            failed_uncounted: Vec::new(),
        }
    }

    /// True when failures are arbitrated: Default with a node that may arbitrate, or
    /// WaitExternal.
    fn enabled(&self) -> bool {
        match self.method {
            Arbitration::Default => !self.candidates.is_empty(),
            Arbitration::WaitExternal => true,
            Arbitration::Disabled => false,
        }
    }

    /// True when a side's nodes confirm it before it goes on (PREP_FAILREQ): always but with
    /// WaitExternal, arbitration off too, as NDB settles every failure at the president. Off,
    /// the confirmed side goes on, whatever its count; the round makes every node of it fail
    /// the failed nodes (closing their links, handling the failure) before any serves again,
    /// so no node acts on a failure while another still takes the failed node's signals
    /// (seed 0x13006e8: a lost update).
    /// How long a failure round may take when it goes well: its settle time, the side's
    /// confirmation, and a question to the arbitrator (ArbitrationTimeout), twice over.
    pub(super) fn round_max(&self) -> Duration {
        (self.settle * 2 + self.timeout) * 2
    }

    fn confirms(&self) -> bool {
        self.method != Arbitration::WaitExternal
    }
}

impl Kernel {
    /// A member data node failed here (a closed link or a NODE_FAILREP): unless it stopped
    /// gracefully, a round begins that holds commits until this side knows it may go on.
    /// `before` is this node's view of the live data nodes before the failure.
    pub(crate) fn arbit_node_failed(&mut self, node: NodeId, before: NodeSet, now: Instant) {
        // Told of the arbitrator no more: when it rejoins, it is told at once.
        self.arbit.prepped.remove(node);
        if self.qmgr.is_stopping(node) {
            // No failure either while a round runs (an operator's stop, or one the president
            // let stop for its disk): it leaves the count (seed 0x3a69a862).
            if let Some(round) = self.arbit.round.as_mut() {
                round.before.remove(node);
            }
            return;
        }
        if !self.qmgr.started() {
            // This node is joining and has no say yet, but it may be let in (and become its
            // side's president) as a split shows: a round it starts then must count the nodes
            // that failed just before among those alive before the split, or it takes half a
            // cluster for a majority (seed 0xd20032a3: node 1, copied to, lost nodes 3, 5 and
            // 6 to a two-way cut, was told it started, and as president of {1, 2, 4} counted
            // 3 of 4 and went on, while the arbitrator chose {3, 5, 6}).
            self.arbit.failed_uncounted.retain(|&(n, _)| n != node);
            self.arbit.failed_uncounted.push((node, now));
            return;
        }
        if !self.arbit.enabled() && !std::mem::replace(&mut self.arbit.logged_off, true) {
            tracing::warn!(
                "data node {node} failed and arbitration is off (Arbitration={}, no management \
                 or API node with ArbitrationRank 1 or 2): a network split would leave each side serving",
                self.arbit.method.as_str()
            );
        }
        if self.arbit.round.is_none() {
            if self.arbit.enabled() {
                tracing::warn!(node = %node, "data node {node} failed: commits wait {} ms for the rest of a possible split to show, then this side decides whether it goes on", self.arbit.settle.as_millis());
            } else {
                tracing::info!(node = %node, "data node {node} failed: commits wait until every data node of this side has failed it too");
            }
            self.arbit_round_begins(before, now);
        }
    }

    /// A round begins that counts `before`, and the failures that started none here lately
    /// (`failed_uncounted`), as the nodes alive before; commits wait until it ends.
    fn arbit_round_begins(&mut self, mut before: NodeSet, now: Instant) {
        let window = self.arbit.settle * COPYING_FAILED_COUNTED;
        self.arbit
            .failed_uncounted
            .retain(|&(_, at)| now.saturating_duration_since(at) <= window);
        for &(uncounted, _) in &self.arbit.failed_uncounted {
            before.insert(uncounted);
        }
        self.arbit.round = Some(Round::new(before, now));
        self.tc.set_commits_held(true);
    }

    /// Data node `node`, being copied to by node restart, failed: a failed restart, which
    /// starts no round (a two-node cluster's survivor would need an arbitrator for it). But
    /// it may be the first failure of a split seen here, its start told to the other side
    /// and not to this one: that side counts it among the nodes alive before, and a round
    /// here that left it out would count a minority as half (seed 0x7c02287, three data
    /// nodes: node 2, cut off, saw node 3 fail while copied to here and started there, then
    /// node 1; at half of {1, 2} it asked the arbitrator, which chose it, while {1, 3}, two
    /// of three, went on). A round that starts soon after counts it.
    pub(crate) fn arbit_copying_failed(&mut self, node: NodeId, now: Instant) {
        self.arbit.failed_uncounted.retain(|&(n, _)| n != node);
        if self.qmgr.is_stopping(node) {
            return;
        }
        self.arbit.failed_uncounted.push((node, now));
    }

    /// A data node failed here (a member, or one being copied to): a side this node confirmed
    /// with it no longer holds, and the president's verdict for that side does not count.
    /// A node that stopped gracefully (its group's live members agreed, and the president,
    /// too, counts it no more) changes no side's verdict: one for the side with it still
    /// counts (sim seed 0x500831: node 4 confirmed {1, 3, 4}, node 3 stopped for its disk
    /// before the president's verdict for that side reached node 4, which then waited for
    /// another verdict that never came, holding commits and global checkpoints until it would
    /// stop, twice ArbitrationTimeout later).
    pub(crate) fn arbit_side_lost(&mut self, node: NodeId) {
        if self.qmgr.is_stopping(node) {
            return;
        }
        if let Some(round) = self.arbit.round.as_mut() {
            if round
                .confirmed
                .as_ref()
                .is_some_and(|c| c.side.contains(node))
            {
                round.confirmed = None;
            }
        }
    }

    /// Data node `node`'s failure is told to the API nodes when the round ends.
    pub(crate) fn arbit_hold_api_failrep(&mut self, node: NodeId) {
        if !self.arbit.api_failreps.contains(&node) {
            self.arbit.api_failreps.push(node);
        }
    }

    /// True while a failure round runs here (commits held).
    pub(crate) fn arbit_round_running(&self) -> bool {
        self.arbit.round.is_some()
    }

    /// True when failures are arbitrated here (see `Arbit::enabled`).
    pub(crate) fn arbit_enabled(&self) -> bool {
        self.arbit.enabled()
    }

    /// The running arbitrator this node knows of: its API or management node.
    pub(crate) fn arbit_arbitrator(&self) -> Option<NodeId> {
        self.arbit.arbitrator.map(|(api, _)| api)
    }

    /// As a side's president: another node of the side reports the failure of `node`, which
    /// this node holds failed already. Outside a round (the node was being copied to here,
    /// so its failure began none), one begins: the reporting node took it for a member, and
    /// holds commits until its side is confirmed (PREP_FAILREQ) and goes on (ARBIT_VERDICT).
    pub(crate) fn arbit_failure_reported(&mut self, node: NodeId, now: Instant) {
        if !self.qmgr.started()
            || self.arbit.round.is_some()
            || self.arbit_president() != self.me
            || self.fatal.is_some()
        {
            return;
        }
        tracing::warn!(node = %node, "another data node reports data node {node} failed: this side confirms its members before it goes on");
        // The reporter took `node` for a member: it counts as alive before.
        let mut before = self.arbit_side();
        before.insert(node);
        self.arbit_round_begins(before, now);
    }

    /// The data nodes this node counts on its side: the live ones but those still being
    /// copied to.
    fn arbit_side(&self) -> NodeSet {
        self.qmgr
            .alive()
            .filter(|&n| !self.qmgr.copying.contains(n))
            .collect()
    }

    /// The side's president for arbitration: the lowest id on the side (`arbit_side`). A node
    /// being copied to never is, though QMGR's lowest live id may be it: it holds no say
    /// until it serves.
    fn arbit_president(&self) -> NodeId {
        self.arbit_side().iter().next().unwrap_or(self.me)
    }

    /// Every timer tick: a round whose settle time has passed is decided; the president keeps
    /// an arbitrator and tells every data node which one.
    pub(crate) fn arbit_timer(&mut self, out: &mut dyn Outbox, now: Instant) {
        // Became president while the last one runs (a lower id restarted): the last one may
        // have just started the arbitrator with its own ticket, its STARTCONF then ignored,
        // so this node's is stale (seed 0x4190d51d). Start it again with a ticket of ours.
        let president = self.arbit_president();
        if president != self.me {
            self.arbit.renew = false;
        } else if self
            .arbit
            .president_seen
            .is_some_and(|last| last != self.me && self.qmgr.is_alive(last))
        {
            self.arbit.renew = true;
        }
        self.arbit.president_seen = Some(president);
        if !self.qmgr.started() {
            return;
        }
        if let Some((from, request, received)) = self.arbit.ignored_prep.take() {
            if now < received + self.arbit.timeout {
                self.arbit_prep_failreq(from, request, received, out, now);
            }
        }
        self.arbit_decide(out, now);
        // A node that is stopping (it lost) must not start the arbitrator with a new ticket:
        // the winner's request for the current one would then be refused.
        if self.arbit_president() == self.me && self.arbit.round.is_none() && self.fatal.is_none() {
            if std::mem::take(&mut self.arbit.renew) {
                self.arbit.arbitrator = None;
                self.arbit.starting = None;
            }
            self.arbit_keep_arbitrator(out, now);
        }
    }

    /// With arbitration off, a round is settled as soon as its failure is handled here (no
    /// timer tick waited for): nothing waits for the rest of a split to show. A member only
    /// reports the failure to its president at once: its round ends with the president's
    /// verdict (settled here, it could end inside a PREP_FAILREQ it has not yet confirmed,
    /// which failed a node its president did not count: a review found it).
    pub(crate) fn arbit_off_decide(&mut self, out: &mut dyn Outbox, now: Instant) {
        if !self.qmgr.started() || self.arbit.enabled() || self.arbit.round.is_none() {
            return;
        }
        if self.arbit_member() {
            self.arbit_report(out, now);
        } else {
            self.arbit_decide(out, now);
        }
    }

    fn arbit_decide(&mut self, out: &mut dyn Outbox, now: Instant) {
        let Some(round) = &self.arbit.round else {
            return;
        };
        let member = self.arbit_member();
        // Arbitrated, the president waits for the rest of a possible split to show; off, the
        // side goes on whatever its count, as soon as its nodes confirm it.
        if !member && self.arbit.enabled() && now < round.since + self.arbit.settle {
            return;
        }
        let mut decision = self.arbit_rules(now);
        if decision == Decision::Prepare {
            self.arbit_prepare(out, now);
            decision = self.arbit_rules(now);
        }
        if member && decision == Decision::Wait {
            self.arbit_report(out, now);
        }
        match decision {
            Decision::Wait | Decision::Prepare => {}
            Decision::GoOn(why) => {
                tracing::warn!("this side of the cluster goes on: {why}");
                self.arbit_end_round(true, out);
            }
            Decision::Stop(why) => {
                let why = format!(
                    "error 2305: Node lost connection to other nodes and can not form a \
                     unpartitioned cluster, please investigate if there are error(s) on other \
                     node(s) (Arbitration error): {why}"
                );
                tracing::error!("{why}");
                self.arbit_end_round(false, out);
                self.fatal.get_or_insert(why);
            }
            Decision::Ask => self.arbit_ask(out, now),
        }
    }

    /// True when this node waits for its side's president to settle a round (any method but
    /// WaitExternal, and another node presides).
    fn arbit_member(&self) -> bool {
        self.arbit.confirms() && self.arbit_president() != self.me
    }

    /// NDB's rules over the failures of the round (module doc), applied by the side's
    /// president once every other node of the side confirmed it (PREP_FAILREQ).
    fn arbit_rules(&self, now: Instant) -> Decision {
        let Some(round) = &self.arbit.round else {
            return Decision::Wait;
        };
        let alive = self.arbit_side();
        if self.arbit_member() {
            return self.arbit_member_rules(round, now);
        }
        if self.arbit.confirms() {
            let confirmed = round.prep.as_ref().is_some_and(|prep| {
                prep.side == alive
                    && alive
                        .iter()
                        .all(|n| n == self.me || prep.confirmed.contains(n))
            });
            if !confirmed {
                return Decision::Prepare;
            }
        }
        if !self.arbit.enabled() {
            // Off: every node of the side confirmed it; it goes on (rule 1 aside, `qmgr.rs`).
            return Decision::GoOn(
                "arbitration is off, and every data node of this side confirmed it",
            );
        }
        let before = round.before.len();
        let survivors = alive.intersection(&round.before).len();
        if self.qmgr.group_fully_alive() {
            return Decision::GoOn(
                "every data node of a node group is on this side, or stopped gracefully",
            );
        }
        if 2 * survivors > before {
            return Decision::GoOn("more than half of the data nodes are on this side");
        }
        if 2 * survivors < before {
            return Decision::Stop(format!(
                "only {survivors} of the {before} data nodes alive before the failure are on \
                 this side"
            ));
        }
        // Exactly half.
        match self.arbit.method {
            Arbitration::Disabled => Decision::GoOn("Arbitration=Disabled"),
            Arbitration::WaitExternal => {
                if now >= round.since + self.arbit.settle + self.arbit.timeout {
                    Decision::GoOn("Arbitration=WaitExternal, and ArbitrationTimeout passed")
                } else {
                    Decision::Wait
                }
            }
            Arbitration::Default => match (self.arbit.arbitrator, round.asked) {
                (None, _) => Decision::Stop(
                    "half of the data nodes are on this side, and no arbitrator was running".into(),
                ),
                (Some((api, _)), None) if !self.qmgr.is_api_up(api) => Decision::Stop(format!(
                    "half of the data nodes are on this side, and the arbitrator, API \
                             node {api}, is not reachable from it"
                )),
                (Some(_), None) => Decision::Ask,
                (Some((api, _)), Some(asked)) => {
                    if now >= asked + self.arbit.timeout {
                        Decision::Stop(format!(
                            "half of the data nodes are on this side, and the arbitrator, \
                                 node {api}, did not answer within ArbitrationTimeout={} ms",
                            self.arbit.timeout.as_millis()
                        ))
                    } else {
                        Decision::Wait
                    }
                }
            },
        }
    }

    /// A node of a side that another node presides goes on only when its president says so
    /// (ARBIT_VERDICT) for the side this node confirmed (PREP_FAILCONF), none of whose nodes
    /// failed here since: its own count may be off (it may have seen the failures later or
    /// in another order), and a node it counts may have confirmed another side. It stops when
    /// its president says nothing for twice ArbitrationTimeout after the round settled or it
    /// last confirmed (the president may wait that long for other confirmations, then for
    /// the arbitrator). A round whose failed nodes have all been let in again (node restart,
    /// which a president allows only outside a round) goes on: its president's side did.
    fn arbit_member_rules(&self, round: &Round, now: Instant) -> Decision {
        let president = self.arbit_president();
        let verdict = round.confirmed.as_ref().is_some_and(|c| {
            self.arbit
                .verdict_win
                .as_ref()
                .is_some_and(|(from, id, side)| {
                    *from == c.president && *id == c.id && *side == c.side
                })
        });
        if verdict {
            return Decision::GoOn(
                "this side's president says it goes on (ARBIT_VERDICT), for the side this node \
                 confirmed",
            );
        }
        if round.confirmed.is_none() && round.before.is_subset(&self.arbit_side()) {
            // Every node that failed was let in again by node restart, which a president
            // allows only outside a round: the side it runs went on, with this node in it
            // (seed 0xb202f8b: node 3's round for node 4 outlived its president's graceful stop
            // and the restarts of nodes 4 and 1, and refused every request with 286).
            return Decision::GoOn(
                "every data node alive before the failure has been let in again by this side's \
                 president",
            );
        }
        let settled = round.since + self.arbit.settle;
        let waited_from = round
            .confirmed
            .as_ref()
            .map_or(settled, |c| c.at.max(settled));
        // With arbitration off the member waits on: its president, hung, is declared failed
        // by heartbeats, and the next one settles the round (a review found members stopping
        // first, 2305, when ArbitrationTimeout is short next to HeartbeatIntervalDbDb).
        if self.arbit.enabled() && now >= waited_from + 2 * self.arbit.timeout {
            return Decision::Stop(format!(
                "data node {president}, this side's president, said nothing of whether the side \
                 goes on within twice ArbitrationTimeout={} ms",
                self.arbit.timeout.as_millis()
            ));
        }
        Decision::Wait
    }

    /// As a node of a side another node presides, in a round it has confirmed no side of:
    /// its president hears of the failures it saw (FAIL_REP), once every
    /// HeartbeatIntervalDbDb, so that it settles them too (it may not have seen them).
    fn arbit_report(&mut self, out: &mut dyn Outbox, now: Instant) {
        let president = self.arbit_president();
        // Every live node, those being copied to too: one of them is no failure to report
        // (seed 0xf003b34: node 3 reported node 4, still being copied to as it saw it, and
        // the president failed it and stopped for the node group that left).
        let alive: NodeSet = self.qmgr.alive().collect();
        let settle = self.arbit.settle;
        let Some(round) = self.arbit.round.as_mut() else {
            return;
        };
        if round.confirmed.is_some() || round.reported.is_some_and(|at| now < at + settle) {
            return;
        }
        round.reported = Some(now);
        let failed: Vec<NodeId> = round.before.difference(&alive).iter().collect();
        for node in failed {
            self.send_to(president, gsn::FAIL_REP, Some(node), out);
        }
    }

    /// As the side's president: every other node of the side is asked to confirm it
    /// (PREP_FAILREQ naming the side), anew when the side changed. One that has not
    /// confirmed within ArbitrationTimeout is failed too (NODE_FAILREP), and the smaller side
    /// asked again.
    fn arbit_prepare(&mut self, out: &mut dyn Outbox, now: Instant) {
        let side = self.arbit_side();
        let timeout = self.arbit.timeout;
        let Some(round) = self.arbit.round.as_mut() else {
            return;
        };
        if let Some(prep) = round.prep.as_ref().filter(|p| p.side == side) {
            if now < prep.sent + timeout {
                return;
            }
            let silent: Vec<NodeId> = side
                .iter()
                .filter(|&n| n != self.me && !prep.confirmed.contains(n))
                .collect();
            for node in silent {
                let why = format!(
                    "it did not confirm this side (PREP_FAILCONF) within ArbitrationTimeout={} ms",
                    timeout.as_millis()
                );
                self.declare_failed(node, &why, out, now);
            }
            return;
        }
        self.arbit.preps_made += 1;
        let id = (u64::from(self.me.0) << 48) | self.arbit.preps_made;
        // A side asked the arbitrator about is asked about again once confirmed.
        round.asked = None;
        round.prep = Some(Prep {
            id,
            side,
            confirmed: NodeSet::new(),
            sent: now,
        });
        tracing::info!(side = ?side, "asking the other data nodes of this side to confirm it (PREP_FAILREQ)");
        // The side, then the nodes being copied to: on no side, but not failed either.
        let copying = self
            .qmgr
            .peers_up()
            .filter(|&n| self.qmgr.copying.contains(n));
        let request = ArbitSignal {
            ticket: id,
            node: side.len() as u16,
            nodes: side.iter().chain(copying).map(|n| n.0).collect(),
        };
        let me = self.me;
        for node in side.iter().filter(|&n| n != me) {
            self.arbit_send(node, gsn::PREP_FAILREQ, block::QMGR, &request, out);
        }
    }

    /// PREP_FAILREQ from `from`, the president of the side `request.nodes` (its first
    /// `request.node`; the rest are being copied to there): when this node holds every node
    /// of the side alive, it fails every node the president does not name (closing its link:
    /// it speaks to it no more until it restarts, so that no other side can count this node)
    /// and confirms (PREP_FAILCONF); the round this begins, if none runs, holds commits until
    /// the president's verdict. When it holds a node of the side failed, it tells the
    /// president (FAIL_REP), which asks again without it.
    pub(crate) fn exec_prep_failreq(
        &mut self,
        from: NodeId,
        request: ArbitSignal,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        self.arbit_prep_failreq(from, request, now, out, now);
    }

    /// `exec_prep_failreq` for a request that came at `received` (one ignored then is taken
    /// again at each tick: `arbit_timer`).
    fn arbit_prep_failreq(
        &mut self,
        from: NodeId,
        request: ArbitSignal,
        received: Instant,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        if !self.qmgr.started() || !self.arbit.confirms() || self.fatal.is_some() {
            return;
        }
        let count = usize::from(request.node).min(request.nodes.len());
        let side: NodeSet = request.nodes[..count].iter().map(|&n| NodeId(n)).collect();
        let named: NodeSet = request.nodes.iter().map(|&n| NodeId(n)).collect();
        if !side.contains(self.me) || side.iter().next() != Some(from) {
            return;
        }
        // Not a side that counts this node's president as still being copied to: it has
        // started (this node heard so), and the sender, once it hears it too, presides no more.
        // A node that confirmed both that side and its president's took the president's
        // verdict, for the side it had confirmed before, for another side's, and the other
        // sent none: commits held for good (sim seed 0x90001dc0).
        // Kept, though: should the president fail first, the sender presides here too.
        let president = self.arbit_president();
        if president != from && named.contains(president) && !side.contains(president) {
            if self.arbit.ignored_prep.is_none() {
                tracing::debug!(%from, %president, "PREP_FAILREQ counts this node's president as still being copied to: taken again each tick until its sender presides here or has heard of the start");
            }
            self.arbit.ignored_prep = Some((from, request, received));
            return;
        }
        if self
            .arbit
            .ignored_prep
            .as_ref()
            .is_some_and(|(f, _, _)| *f == from)
        {
            self.arbit.ignored_prep = None;
        }
        let gone: Vec<NodeId> = side.iter().filter(|&n| !self.qmgr.is_alive(n)).collect();
        if !gone.is_empty() {
            for node in gone {
                self.send_to(from, gsn::FAIL_REP, Some(node), out);
            }
            return;
        }
        if self.arbit.round.is_none() {
            self.arbit.round = Some(Round::new(self.arbit_side(), now));
            self.tc.set_commits_held(true);
        }
        let outside: Vec<NodeId> = self
            .qmgr
            .peers_up()
            .filter(|&n| !named.contains(n))
            .collect();
        for node in outside {
            tracing::warn!(node = %node, president = %from, "data node {from} presides over a side without data node {node}: this node fails it and confirms that side");
            out.declare_failed(
                node,
                format!("data node {from}, this node's president, settled a side without it"),
            );
            self.node_failrep(node, out, now);
        }
        if self.fatal.is_some() || self.qmgr.dead {
            return;
        }
        let Some(round) = self.arbit.round.as_mut() else {
            return;
        };
        round.confirmed = Some(Confirmed {
            president: from,
            id: request.ticket,
            side,
            at: now,
        });
        let conf = ArbitSignal {
            ticket: request.ticket,
            node: 0,
            nodes: Vec::new(),
        };
        self.arbit_send(from, gsn::PREP_FAILCONF, block::QMGR, &conf, out);
    }

    /// PREP_FAILCONF from `from`: it confirmed this president's side; once every node of it
    /// did, the round is decided at once.
    pub(crate) fn exec_prep_failconf(
        &mut self,
        from: NodeId,
        conf: ArbitSignal,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        let Some(prep) = self.arbit.round.as_mut().and_then(|r| r.prep.as_mut()) else {
            return;
        };
        if prep.id != conf.ticket || !prep.side.contains(from) {
            return;
        }
        prep.confirmed.insert(from);
        if self.qmgr.started() {
            self.arbit_decide(out, now);
        }
    }

    /// As the side's president: ask the arbitrator whether this side (confirmed by its
    /// nodes) goes on.
    fn arbit_ask(&mut self, out: &mut dyn Outbox, now: Instant) {
        let Some((api, ticket)) = self.arbit.arbitrator else {
            return;
        };
        let nodes: Vec<u16> = self.arbit_side().iter().map(|n| n.0).collect();
        tracing::warn!(arbitrator = %api, "half of the data nodes are on this side ({nodes:?}): asking the arbitrator, node {api}");
        if let Some(round) = &mut self.arbit.round {
            round.asked = Some(now);
        }
        let signal = ArbitSignal {
            ticket,
            node: 0,
            nodes,
        };
        self.arbit_send(api, gsn::ARBIT_CHOOSEREQ, block::API, &signal, out);
    }

    /// The round ends: commits go on (or the node stops). A president tells its side what it
    /// decided, and after a win by the arbitrator starts it again with a new ticket.
    fn arbit_end_round(&mut self, go_on: bool, out: &mut dyn Outbox) {
        let round = self.arbit.round.take();
        let asked = round.as_ref().is_some_and(|r| r.asked.is_some());
        // The side its nodes confirmed (one that failed since is in a round of its own).
        let (prep, side) = round
            .and_then(|r| r.prep)
            .map_or((0, self.arbit_side()), |p| (p.id, p.side));
        // A verdict is for one round: a later one must hear its own.
        self.arbit.verdict_win = None;
        self.arbit.ignored_prep = None;
        // A side that stops keeps holding them: nothing more is acknowledged on its way down
        // (sim seed 0xa20000b3: a node that had just decided to stop made and answered a
        // CREATE INDEX the other side never had).
        self.tc.set_commits_held(!go_on);
        let failed = std::mem::take(&mut self.arbit.api_failreps);
        let rounds = std::mem::take(&mut self.tc.held_rounds);
        if go_on {
            for trans in rounds {
                self.jobs.push_back(Signal::TcContinueB(trans));
            }
            // The commits whose answers the round held, and the failures the API nodes wait
            // to hear of.
            self.tc_checkpoint_saved(out);
            for node in failed {
                self.api_failrep(node, out);
            }
            // A save the round held (`gcp_try_save`).
            self.gcp_try_save(out);
        }
        if self.arbit_president() == self.me {
            self.arbit_send_verdict(prep, side, go_on, out);
            if go_on && asked {
                // The arbitrator chose this side for this ticket: a new one for the next split.
                self.arbit.arbitrator = None;
            }
        }
    }

    /// As president: ARBIT_VERDICT to every data node of the side, naming the side's nodes
    /// and the PREP_FAILREQ they confirmed (a node that counts another side, having seen
    /// other failures, waits for its own).
    fn arbit_send_verdict(&mut self, prep: u64, side: NodeSet, go_on: bool, out: &mut dyn Outbox) {
        let verdict = ArbitSignal {
            ticket: prep,
            node: u16::from(go_on),
            nodes: side.iter().map(|n| n.0).collect(),
        };
        let peers: Vec<NodeId> = self.qmgr.peers_up().collect();
        for peer in peers {
            self.arbit_send(peer, gsn::ARBIT_VERDICT, block::QMGR, &verdict, out);
        }
    }

    /// As president outside a round: a node that may arbitrate is asked to (the first
    /// by rank that is linked), and every data node hears which one every interval.
    fn arbit_keep_arbitrator(&mut self, out: &mut dyn Outbox, now: Instant) {
        if self.arbit.method != Arbitration::Default {
            return;
        }
        if let Some((api, _)) = self.arbit.arbitrator {
            if !self.qmgr.is_api_up(api) {
                tracing::warn!(arbitrator = %api, "the arbitrator, node {api}, is gone");
                self.arbit.arbitrator = None;
            }
        }
        if let Some((api, ticket)) = self.arbit.arbitrator {
            // Every interval, and at once to a node that joined (a node restart) since: a
            // failed node is told again when it rejoins (seed 0x380748c8: one that counted as
            // told heard of no arbitrator, and stopped with 2305 when this node crashed).
            let peers: NodeSet = self.qmgr.peers_up().collect();
            let due = !peers.is_subset(&self.arbit.prepped)
                || self
                    .arbit
                    .prep_sent
                    .is_none_or(|sent| now >= sent + self.arbit.settle);
            if due {
                self.arbit.prepped = peers;
                self.arbit.prep_sent = Some(now);
                self.arbit_prep(api, ticket, out);
            }
            return;
        }
        let waiting = self
            .arbit
            .starting
            .is_some_and(|(api, _, at)| self.qmgr.is_api_up(api) && now < at + self.arbit.timeout);
        if waiting {
            return;
        }
        let Some(&api) = self
            .arbit
            .candidates
            .iter()
            .find(|&&api| self.qmgr.is_api_up(api))
        else {
            return;
        };
        // ARBIT_STARTREQ makes the arbitrator forget every earlier ticket, so a ticket need
        // only differ from this president's earlier ones, those of its earlier runs too: the
        // count starts again with each run, so it starts from the run's own value (seed
        // 0x6203fcd: node 1, restarted, made its earlier run's first ticket again).
        self.arbit.tickets_made += 1;
        let ticket = (u64::from(self.me.0) << 48)
            | (self
                .node_restart_run()
                .wrapping_add(self.arbit.tickets_made)
                & ((1 << 48) - 1));
        self.arbit.starting = Some((api, ticket, now));
        let signal = ArbitSignal {
            ticket,
            node: 0,
            nodes: Vec::new(),
        };
        self.arbit_send(api, gsn::ARBIT_STARTREQ, block::API, &signal, out);
    }

    /// At the president, as it includes a restarting node: the node hears of the running
    /// arbitrator at once (ARBIT_PREPREQ), before it serves. Told by the timer only, a node
    /// whose copy took less than a tick served, then presided (its id the lowest) knowing no
    /// arbitrator, and stopped with 2305 when its partner crashed (seed 0x3807539f).
    pub(crate) fn arbit_include(&mut self, node: NodeId, out: &mut dyn Outbox) {
        if self.arbit_president() != self.me {
            return;
        }
        let Some((api, ticket)) = self.arbit.arbitrator else {
            return;
        };
        self.arbit.prepped.insert(node);
        self.arbit_prep_to(node, api, ticket, out);
    }

    /// ARBIT_PREPREQ to every other live data node.
    fn arbit_prep(&mut self, api: NodeId, ticket: u64, out: &mut dyn Outbox) {
        let peers: Vec<NodeId> = self.qmgr.peers_up().collect();
        for peer in peers {
            self.arbit_prep_to(peer, api, ticket, out);
        }
    }

    /// ARBIT_PREPREQ to `to`: arbitrator `api` runs with `ticket`.
    fn arbit_prep_to(&mut self, to: NodeId, api: NodeId, ticket: u64, out: &mut dyn Outbox) {
        let signal = ArbitSignal {
            ticket,
            node: api.0,
            nodes: Vec::new(),
        };
        self.arbit_send(to, gsn::ARBIT_PREPREQ, block::QMGR, &signal, out);
    }

    /// Sends QMGR's arbitration `signal` to `to`'s `receiver_block` (QMGR of a data node, or
    /// the arbitrator's API block), kept until it can be sent.
    fn arbit_send(
        &mut self,
        to: NodeId,
        signal: u16,
        receiver_block: u16,
        arbit: &ArbitSignal,
        out: &mut dyn Outbox,
    ) {
        let frame = data_node_header(signal, receiver_block, block::QMGR);
        self.unsent.send(out, to, frame, &mut |b| arbit.encode(b));
    }

    /// ARBIT_STARTCONF, ARBIT_CHOOSECONF or ARBIT_CHOOSEREF from the arbitrator (a management
    /// or API node).
    pub(crate) fn exec_arbit_from_api(
        &mut self,
        from: NodeId,
        signal: u16,
        arbit: ArbitSignal,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        match signal {
            gsn::ARBIT_STARTCONF => {
                let Some((api, ticket, _)) = self.arbit.starting else {
                    return;
                };
                if api != from || ticket != arbit.ticket || self.arbit_president() != self.me {
                    return;
                }
                self.arbit.starting = None;
                self.arbit.arbitrator = Some((api, ticket));
                tracing::info!(arbitrator = %api, "Started arbitrator node {api} [ticket={ticket:016x}]");
                self.arbit.prep_sent = Some(now);
                self.arbit.prepped = self.qmgr.peers_up().collect();
                self.arbit_prep(api, ticket, out);
            }
            gsn::ARBIT_CHOOSECONF | gsn::ARBIT_CHOOSEREF => {
                let asked = self.arbit.round.as_ref().is_some_and(|r| r.asked.is_some());
                let current = self
                    .arbit
                    .arbitrator
                    .is_some_and(|(api, ticket)| api == from && ticket == arbit.ticket);
                if !asked || !current {
                    return;
                }
                // A side that lost a node since it asked is confirmed again, then asks again
                // (the arbitrator confirms a side it chose): its nodes took the verdict for
                // the side they confirmed only.
                let side = self.arbit_side();
                let changed = (self.arbit.round.as_ref())
                    .is_some_and(|r| r.prep.as_ref().is_some_and(|p| p.side != side));
                if signal == gsn::ARBIT_CHOOSECONF && changed {
                    return;
                }
                if signal == gsn::ARBIT_CHOOSECONF {
                    tracing::warn!(arbitrator = %from, "the arbitrator, node {from}, chose this side: it goes on");
                    self.arbit_end_round(true, out);
                } else {
                    let why = format!(
                        "error 2305: Node lost connection to other nodes and can not form a \
                         unpartitioned cluster, please investigate if there are error(s) on \
                         other node(s) (Arbitration error): the arbitrator, node {from}, \
                         chose the other side of the split"
                    );
                    tracing::error!("{why}");
                    self.arbit_end_round(false, out);
                    self.fatal.get_or_insert(why);
                }
            }
            _ => {}
        }
    }

    /// ARBIT_PREPREQ or ARBIT_VERDICT from a data node.
    pub(crate) fn exec_arbit_from_data_node(
        &mut self,
        from: NodeId,
        signal: u16,
        arbit: ArbitSignal,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        match signal {
            gsn::ARBIT_PREPREQ if from == self.arbit_president() => {
                self.arbit.arbitrator = Some((NodeId(arbit.node), arbit.ticket));
            }
            gsn::ARBIT_VERDICT if arbit.node == 1 => {
                let side = arbit.nodes.iter().map(|&n| NodeId(n)).collect();
                self.arbit.verdict_win = Some((from, arbit.ticket, side));
                // At once: the president lets a restarting node in once its round ended, and
                // a member that took it in first would count another president.
                if self.arbit.round.is_some() && self.qmgr.started() {
                    self.arbit_decide(out, now);
                }
            }
            // A stop from the president: the arbitrator chose the other side.
            gsn::ARBIT_VERDICT if from == self.arbit_president() => {
                let why = format!(
                    "error 2305: Node lost connection to other nodes and can not form a \
                     unpartitioned cluster, please investigate if there are error(s) on other \
                     node(s) (Arbitration error): data node {from}, this side's president, \
                     says the arbitrator chose the other side"
                );
                tracing::error!("{why}");
                self.arbit.round = None;
                self.fatal.get_or_insert(why);
            }
            _ => {}
        }
    }

    /// A management or API node's link closed: if it was asked to arbitrate, the president
    /// asks another.
    pub(crate) fn arbit_api_gone(&mut self, api: NodeId) {
        if self.arbit.starting.is_some_and(|(a, _, _)| a == api) {
            self.arbit.starting = None;
        }
    }
}
