//! QMGR: membership. Which data nodes the cluster has, which of them this node has a live link
//! to, whether the cluster has started (every data node connected once), which node is master
//! (the lowest live id not being copied to by node restart: DICT's master, and NDB's
//! president), and node failure: when a data node's link closes, QMGR marks it failed and
//! tells every block (NODE_FAILREP), each of which cleans up its own records.
//!
//! Heartbeats find a node whose link stays open but which no longer runs (a stopped process, a
//! link that drops everything): every data node sends HEARTBEAT to every other one each
//! HeartbeatIntervalDbDb ms, and counts, per peer, the intervals in which nothing came from it.
//! At 2 it logs a missed heartbeat; at 4 it reports the peer to the president (FAIL_REP), who
//! declares it failed to every node (NODE_FAILREP, the failed one included, which stops when it
//! reads it): each closes its link to it and handles the failure as for a closed link. So a
//! failure is declared by one node, and a node that cannot hear a peer never splits the cluster
//! by itself. A node whose own loop stalled past the bound and then finds a data-node link
//! closed takes it that it was declared failed (the NODE_FAILREP can be lost with the link)
//! and stops too. API nodes are told of every failure (NODE_FAILREP) and route around the
//! node; an API node silent for 4 HeartbeatIntervalDbApi is disconnected.
//!
//! A node that has lost the last live node of a node group stops (2305): it cannot serve every
//! row, and the node group's survivors, if any, are on another side of a split (NDB's rule for
//! a side without every node group), unless that group's nodes stopped gracefully
//! (NODE_STOPPING_REP). A start that waits StartPartialTimeout goes on without missing nodes
//! when every node group has one (the master decides); a node that comes later joins by node
//! restart (`node_restart.rs`). Which side of a split goes on when each keeps every node group
//! is arbitration's (`arbit.rs`).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use rndb_config::{ClusterConfig, NodeId};
use rndb_protocol::lqh::{gsn as lgsn, ApiRegConf};
use rndb_protocol::qmgr::FailRep;
use rndb_protocol::signals::{self, block, gsn};
use rndb_protocol::NdbError;
use rndb_transporter::FrameHeader;

use super::node_set::NodeSet;
use super::tc::{self, ApiAnswer};
use super::{data_node_header, reply, Kernel, Outbox};
use crate::ndbfs::format::gci_hi;

/// Intervals without a frame from a peer after which a missed heartbeat is logged.
const MISSED_WARN: u32 = 2;
/// Intervals without a frame from a peer after which it is reported failed (NDB declares a node
/// dead after 4 missed heartbeats).
pub(crate) const MISSED_DEAD: u32 = 4;

/// The node's view of the cluster's membership.
#[derive(Debug)]
pub(crate) struct Qmgr {
    me: NodeId,
    /// Every data node of the config, this one included, in id order.
    data_nodes: Vec<NodeId>,
    /// Other data nodes with a live link.
    up: BTreeSet<NodeId>,
    /// Every data node has been connected once: the cluster serves requests.
    started: bool,
    /// Data nodes whose link dropped or that were declared failed; one comes back by node
    /// restart (`node_restart.rs`), which takes it out of this set.
    pub failed: NodeSet,
    /// Peers whose CM_REGREQ said they do not serve yet: a start without files goes on only
    /// once every peer said so (a peer that serves makes this node join by node restart).
    pub registered: NodeSet,
    /// Failed nodes with a new link whose CM_REGREQ said they restart (not in `up` yet).
    pub joining: NodeSet,
    /// Included restarting nodes whose fragments are still being copied: in every write chain,
    /// last, and read from by no one.
    pub copying: NodeSet,
    /// Nodes that rejoined by node restart, in the order they were included: they come after
    /// the others in every chain (so that a chain's primary never moves, and every node orders
    /// a chain alike).
    pub rejoined: Vec<NodeId>,
    /// This node restarts and has been let in: it sends heartbeats before it serves.
    pub beating: bool,
    /// The start waits for a restore (see `hold_start`).
    held: bool,
    /// HeartbeatIntervalDbDb.
    heartbeat_interval: Duration,
    /// When the next heartbeats go out and the intervals are counted.
    next_heartbeat: Option<Instant>,
    /// HeartbeatIntervalDbApi, and when the API nodes' silent intervals are next counted.
    api_interval: Duration,
    next_api_check: Option<Instant>,
    /// When QMGR's timer last ran, and when it last found that this node itself had not run
    /// for the heartbeat bound (a stopped process): see `node_failrep`.
    last_tick: Option<Instant>,
    woke_from_stall: Option<Instant>,
    /// The cluster declared this node failed: it does nothing more and stops.
    pub dead: bool,
    /// Per node id: intervals counted since the last frame from that node.
    silent: Vec<u32>,
    /// Node groups and their members, for the check that every group keeps a live node.
    node_groups: Vec<(u32, Vec<NodeId>)>,
    /// API nodes with a live link: told of every data node failure (NODE_FAILREP).
    apis: BTreeSet<NodeId>,
    /// Data nodes that said they stop gracefully (NODE_STOPPING_REP).
    stopping: BTreeSet<NodeId>,
    /// Those of them that stopped in a stop of every data node.
    stopping_system: BTreeSet<NodeId>,
    /// Members of this node's group that said they begin to stop alone (NODE_STOPPING_REP,
    /// byte 2): until they rejoin, they count as leaving (`graceful_stop.rs`).
    stop_begun: BTreeSet<NodeId>,
    /// StartPartialTimeout, and when this node began waiting for the others.
    partial_timeout: Duration,
    start_since: Option<Instant>,
    /// StartPartialTimeout has passed without every data node: the start may go on without
    /// the missing ones, once every node group has a live node.
    pub partial_due: bool,
    /// When a start waiting for a missing node group last said so.
    group_missing_logged: Option<Instant>,
    /// Data nodes a start does not wait for (ndbd's `--nowait-nodes`): the operator says they
    /// hold nothing newer, so a start without them is no partitioned start either.
    pub nowait: NodeSet,
    /// As president: nodes that asked to be stopped (`exec_fail_rep_self`) and were left
    /// running, as the last serving member of their node group (said once).
    pub(super) stop_refused: NodeSet,
    /// As president: nodes let stop, until their failure comes; they no longer count as
    /// serving members of their groups.
    pub(super) stop_granted: NodeSet,
    /// Data nodes whose NODE_STOPPING_REP found a full send buffer as this node stopped:
    /// sent again by its last flush (`run_jobs` once dead).
    stopping_rep_unsent: Vec<NodeId>,
    /// Let stop, this node asks its node group's live peers first (`stop_perm.rs`).
    pub(super) stop_perm: super::stop_perm::StopPerm,
}

impl Qmgr {
    pub fn new(config: &ClusterConfig, me: NodeId) -> Qmgr {
        let mut data_nodes: Vec<NodeId> = config.data_nodes.iter().map(|n| n.node_id).collect();
        data_nodes.sort_unstable();
        let started = data_nodes.iter().all(|&n| n == me);
        let (interval, api_interval, partial) =
            config.data_node(me).map_or((5000, 1500, 30000), |n| {
                (
                    n.heartbeat_interval_db_db_ms,
                    n.heartbeat_interval_db_api_ms,
                    n.start_partial_timeout_ms,
                )
            });
        Qmgr {
            me,
            data_nodes,
            up: BTreeSet::new(),
            started,
            failed: NodeSet::new(),
            registered: NodeSet::new(),
            joining: NodeSet::new(),
            copying: NodeSet::new(),
            rejoined: Vec::new(),
            beating: false,
            held: false,
            heartbeat_interval: Duration::from_millis(u64::from(interval)),
            next_heartbeat: None,
            api_interval: Duration::from_millis(u64::from(api_interval)),
            next_api_check: None,
            last_tick: None,
            woke_from_stall: None,
            dead: false,
            silent: vec![0; 256],
            node_groups: config
                .node_groups
                .iter()
                .map(|g| (g.id, g.nodes.clone()))
                .collect(),
            apis: BTreeSet::new(),
            stopping: BTreeSet::new(),
            stopping_system: BTreeSet::new(),
            stop_begun: BTreeSet::new(),
            partial_timeout: Duration::from_millis(u64::from(partial)),
            start_since: None,
            partial_due: false,
            group_missing_logged: None,
            nowait: NodeSet::new(),
            stop_refused: NodeSet::new(),
            stop_granted: NodeSet::new(),
            stopping_rep_unsent: Vec::new(),
            stop_perm: Default::default(),
        }
    }

    /// Every data node of the config, in id order.
    pub fn data_nodes(&self) -> &[NodeId] {
        &self.data_nodes
    }

    /// Each node group of the config: its id and its nodes.
    pub fn node_groups(&self) -> &[(u32, Vec<NodeId>)] {
        &self.node_groups
    }

    /// True when every data node of the config is connected to this one.
    pub fn all_connected(&self) -> bool {
        self.up.len() + 1 == self.data_nodes.len()
    }

    /// This node and the data nodes it has a live link to.
    pub fn alive(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.data_nodes
            .iter()
            .copied()
            .filter(|&n| self.is_alive(n))
    }

    /// Excludes data node `node` from a start that goes on without it: failed for good here.
    pub fn exclude(&mut self, node: NodeId) {
        if node != self.me && !self.up.contains(&node) {
            self.failed.insert(node);
        }
    }

    /// A restarting node takes the president's view of who is alive: every other data node
    /// is failed here (one with a link that said it restarts too is `joining`, as the running
    /// nodes hold it).
    pub fn adopt_alive(&mut self, alive: NodeSet) {
        for node in self.data_nodes.clone() {
            if node == self.me || alive.contains(node) {
                continue;
            }
            self.failed.insert(node);
            if self.up.remove(&node) && self.registered.contains(node) {
                self.joining.insert(node);
            }
        }
    }

    /// A restarting node included for a president that failed starts its restart over: it is
    /// failed and joining again (its link stays).
    pub fn exclude_again(&mut self, node: NodeId) {
        self.up.remove(&node);
        self.copying.remove(node);
        self.failed.insert(node);
        self.joining.insert(node);
    }

    /// A restarting data node joins: its link is live, its silence counts from now, and a
    /// graceful stop it said before is over.
    pub fn include(&mut self, node: NodeId) {
        self.up.insert(node);
        self.stopping.remove(&node);
        self.stopping_system.remove(&node);
        self.stop_begun.remove(&node);
        self.heard(node);
    }

    /// An API node's link closed.
    pub fn forget_api(&mut self, node: NodeId) {
        self.apis.remove(&node);
    }

    /// An API node's link came up: its silent intervals count from none.
    fn add_api(&mut self, node: NodeId) {
        self.apis.insert(node);
        self.heard(node);
    }

    /// True when QMGR's timer last ran more than the heartbeat bound before `now`: this node
    /// itself did not run (a stopped process), and its peers may have declared it failed.
    fn stalled_until(&self, now: Instant) -> bool {
        self.last_tick.is_some_and(|tick| {
            now.saturating_duration_since(tick) > self.heartbeat_interval * MISSED_DEAD
        })
    }

    /// True when this node did not run for the heartbeat bound and has just woken: a data
    /// node link that closes now was most likely closed because the cluster declared this
    /// node failed (the NODE_FAILREP saying so may be lost with the link).
    pub fn just_woke_from_stall(&self, now: Instant) -> bool {
        self.stalled_until(now)
            || self.woke_from_stall.is_some_and(|woke| {
                now.saturating_duration_since(woke) < self.heartbeat_interval * 2
            })
    }

    /// A frame came from `node`: it is alive.
    #[inline]
    pub fn heard(&mut self, node: NodeId) {
        if let Some(count) = self.silent.get_mut(usize::from(node.0)) {
            *count = 0;
        }
    }

    /// The master once `failed` is gone (see [`master`](Self::master)): the president that
    /// declares it failed.
    fn president_without(&self, failed: NodeId) -> NodeId {
        self.data_nodes
            .iter()
            .copied()
            .find(|&n| {
                n != failed && (n == self.me || self.up.contains(&n)) && !self.copying.contains(n)
            })
            .unwrap_or(self.me)
    }

    /// The data nodes `missing` names, but those of `--nowait-nodes`, when they hold a node of
    /// every node group: a GCI is restorable once a node of each group has it, so they may
    /// alone have saved newer ones than the others (a start without them is partitioned).
    pub fn partitioned_by(&self, missing: impl Fn(NodeId) -> bool) -> Option<Vec<NodeId>> {
        let nodes: Vec<NodeId> = (self.data_nodes.iter().copied())
            .filter(|&n| missing(n) && !self.nowait.contains(n))
            .collect();
        (self.node_groups.iter())
            .all(|(_, group)| group.iter().any(|n| nodes.contains(n)))
            .then_some(nodes)
    }

    /// A node group none of whose members is alive here, and its nodes, if any, unless every
    /// member stopped in a stop of every data node; with `graceful_ok`, unless every member
    /// stopped gracefully (an operator taking the cluster down node by node: nothing of it can
    /// be on the other side of a split). Only a node that stops itself may go on so: one that
    /// served on would answer scans without that group's rows.
    pub(super) fn group_lost(&self, graceful_ok: bool) -> Option<(u32, &[NodeId])> {
        self.node_groups
            .iter()
            .find(|(_, nodes)| {
                // In a stop of every data node, this node is about to stop too.
                let exempt = nodes.iter().all(|n| {
                    self.stopping_system.contains(n) || graceful_ok && self.stopping.contains(n)
                });
                let alive = nodes.iter().any(|&n| self.is_alive(n));
                !alive && !exempt
            })
            .map(|(id, nodes)| (*id, nodes.as_slice()))
    }

    /// True when a member of `node`'s node group other than `node` and `other` serves, as
    /// this node sees it: this node once started, another one alive here; neither being
    /// copied to by node restart, nor let stop. The group keeps its rows without them.
    pub fn group_serves_without(&self, node: NodeId, other: NodeId) -> bool {
        self.group_peers(node)
            .filter(|&n| n != other)
            .any(|n| self.serves(n))
    }

    /// True when data node `node` serves: started (alive here), not being copied to by a node
    /// restart, not let stop.
    pub fn serves(&self, node: NodeId) -> bool {
        let running = if node == self.me {
            self.started
        } else {
            self.up.contains(&node)
        };
        running && !self.copying.contains(node) && !self.stop_granted.contains(node)
    }

    /// The other members of `node`'s node group.
    pub fn group_peers(&self, node: NodeId) -> impl Iterator<Item = NodeId> + '_ {
        (self.node_groups.iter())
            .filter(move |(_, nodes)| nodes.contains(&node))
            .flat_map(|(_, nodes)| nodes.iter().copied())
            .filter(move |&n| n != node)
    }

    /// True when some node group has a node alive here and started, and every other node of
    /// it is so too or stopped gracefully (NODE_STOPPING_REP): arbitration's rule 2, as the
    /// other side of a split can have no node of that group (a node still being copied to
    /// does not hold the group's rows yet). A graceful stop is no failure: counting a node
    /// let stop (its disk full) as one that may serve elsewhere left a round at exactly half
    /// waiting for a verdict its president, outside any round, never sent (seed 0x3a69bb1b).
    pub fn group_fully_alive(&self) -> bool {
        self.node_groups.iter().any(|(_, nodes)| {
            let serves = |n: NodeId| self.is_alive(n) && !self.copying.contains(n);
            nodes.iter().any(|&n| serves(n))
                && nodes
                    .iter()
                    .all(|&n| serves(n) || self.stopping.contains(&n))
        })
    }

    /// True when data node `node` said it stops gracefully (NODE_STOPPING_REP).
    pub fn is_stopping(&self, node: NodeId) -> bool {
        self.stopping.contains(&node)
    }

    /// Data node `node` said it begins to stop alone (NODE_STOPPING_REP, byte 2).
    pub fn note_stop_begun(&mut self, node: NodeId) {
        self.stop_begun.insert(node);
    }

    /// True when data node `node` said it begins to stop, or stops (NODE_STOPPING_REP).
    pub fn stop_begun(&self, node: NodeId) -> bool {
        self.stop_begun.contains(&node) || self.stopping.contains(&node)
    }

    /// True when API node `node` has a live link here.
    pub fn is_api_up(&self, node: NodeId) -> bool {
        self.apis.contains(&node)
    }

    /// The API nodes (and management servers) with a live link here.
    pub fn apis(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.apis.iter().copied()
    }

    pub fn is_data_node(&self, node: NodeId) -> bool {
        self.data_nodes.binary_search(&node).is_ok()
    }

    pub fn started(&self) -> bool {
        self.started
    }

    /// The node has files to restore, or must agree on the restart GCI with the others: it
    /// starts when that is done ([`set_started`](Self::set_started)), not when every data
    /// node is connected.
    pub fn hold_start(&mut self) {
        self.started = false;
        self.held = true;
    }

    pub fn set_started(&mut self, now: Instant) {
        self.started = true;
        self.held = false;
        // The heartbeat clock starts with the node's service: a node that hangs before its
        // first timer tick as a started node still knows, when it wakes, that it did not run
        // (seed 0x53726efe: node 1 hung at once after a system restart, woke to find node 2
        // had closed their link, and took that for node 2's failure). It goes on from the
        // last tick before the start, when there was one.
        self.last_tick.get_or_insert(now);
    }

    /// Data nodes in the config, this one included.
    pub fn data_node_count(&self) -> usize {
        self.data_nodes.len()
    }

    /// NDB's DICT master: the live data node with the lowest id (every survivor of a failure
    /// picks the same one), but for a node still being copied to by node restart, this one
    /// included: it holds no say until it serves, and the president that lets it in stays
    /// master (and runs the global checkpoints) until then.
    pub fn master(&self) -> NodeId {
        self.data_nodes
            .iter()
            .copied()
            .find(|&n| (n == self.me || self.up.contains(&n)) && !self.copying.contains(n))
            .unwrap_or(self.me)
    }

    /// True for this node and the data nodes it has a live link to.
    pub fn is_alive(&self, node: NodeId) -> bool {
        node == self.me || self.up.contains(&node)
    }

    /// `replicas` (a partition's, in the config's order) as chains take them: the nodes that
    /// never rejoined first, then those that did, in the order they rejoined.
    pub fn chain_order(&self, replicas: &[NodeId]) -> super::dih::Replicas {
        let mut ordered = super::dih::Replicas::default();
        for &node in replicas {
            if !self.rejoined.contains(&node) {
                ordered.push(node);
            }
        }
        for &node in &self.rejoined {
            if replicas.contains(&node) {
                ordered.push(node);
            }
        }
        ordered
    }

    /// A start without files may begin: every data node is connected, and each said it does
    /// not serve yet (CM_REGREQ).
    pub fn try_start_all_registered(&mut self) {
        if !self.started && !self.held && self.all_connected() {
            let all = self.up.iter().all(|&n| self.registered.contains(n));
            if all {
                self.started = true;
                tracing::info!(data_nodes = ?self.data_nodes, "cluster started: every data node is connected");
            }
        }
    }

    /// True for a data node with a live link here: a member, or one that failed and has
    /// restarted since (its new link's CM_REGREQ said so, `joining`).
    pub fn is_linked(&self, node: NodeId) -> bool {
        self.is_up(node) || self.joining.contains(node)
    }

    /// True for another data node with a live link.
    pub fn is_up(&self, node: NodeId) -> bool {
        self.up.contains(&node)
    }

    /// The other data nodes with a live link.
    pub fn peers_up(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.up.iter().copied()
    }

    /// The data nodes this node has declared failed.
    pub fn failed(&self) -> NodeSet {
        self.failed
    }
}

impl Kernel {
    /// True when `node` is a data node of the config.
    pub fn is_data_node(&self, node: NodeId) -> bool {
        self.qmgr.is_data_node(node)
    }

    /// True once this node serves: every data node connected, and (with files) the start's
    /// restore done everywhere.
    pub fn is_started(&self) -> bool {
        self.qmgr.started()
    }

    /// The data nodes this node holds failed (seen to fail, or left out of a partial start):
    /// the listener refuses them and the connector stops dialling them.
    pub fn failed_nodes(&self) -> NodeSet {
        self.qmgr.failed()
    }

    /// True once this node serves as a full member: started, and not joining by node restart
    /// (a node restoring its own files before it joins counts as started).
    pub fn serves(&self) -> bool {
        self.qmgr.started() && !self.node_restart_joining()
    }

    /// True when this node knows a running arbitrator (one its president started, or told it
    /// of), or arbitration is off.
    pub fn knows_arbitrator(&self) -> bool {
        !self.arbit_enabled() || self.arbit_arbitrator().is_some()
    }

    /// True while data node `node` is a member here with a live link: not seen to fail since
    /// it was let in.
    pub fn holds_up(&self, node: NodeId) -> bool {
        self.qmgr.is_up(node)
    }

    /// The data nodes a start does not wait for (ndbd's `--nowait-nodes`; this node itself and
    /// ids that are no data node are ignored).
    pub fn set_nowait_nodes(&mut self, nodes: &[NodeId]) {
        for &node in nodes {
            if node != self.me && self.qmgr.is_data_node(node) {
                self.qmgr.nowait.insert(node);
            }
        }
    }

    /// True when data node `node` was seen to fail (it is never used again).
    pub fn has_failed(&self, node: NodeId) -> bool {
        self.qmgr.failed.contains(node)
    }

    /// A link came up. Each side of a data-node link first says whether it serves
    /// (CM_REGREQ). When the links complete the set of data nodes, and no peer serves, the
    /// cluster has started; a failed node's new link waits for its CM_REGREQ (it rejoins by
    /// node restart, see `node_restart.rs`).
    pub fn on_connect(&mut self, node: NodeId) {
        // A new link: what an earlier run of that node said of its stop is old news.
        self.stop_saved.remove(&node);
        if !self.qmgr.is_data_node(node) {
            self.qmgr.add_api(node);
            return;
        }
        // Whether this node served when the link came up: a start that completes before the
        // job runs must not make the peer take this node for a running cluster's.
        self.jobs.push_back(super::Signal::CmRegReq {
            node,
            started: self.qmgr.started,
        });
        if self.qmgr.failed.contains(node) {
            tracing::info!(node = %node, "data node that failed has a new link; it may rejoin by node restart");
            if !self.qmgr.started {
                self.node_restart_told_not_started(node);
            }
            return;
        }
        self.qmgr.up.insert(node);
        if self.qmgr.held {
            // A start with files goes on when every node is connected (see `restart.rs`).
            self.jobs.push_back(super::Signal::Timer);
        }
    }

    /// QMGR's timer: every HeartbeatIntervalDbDb, a HEARTBEAT to every other live data node,
    /// and one more silent interval counted for each; a peer silent for `MISSED_DEAD` intervals
    /// is reported to the president (which declares it failed at once when it is this node).
    pub(crate) fn qmgr_timer(&mut self, out: &mut dyn Outbox, now: Instant) {
        if self.qmgr.heartbeat_interval.is_zero() {
            return;
        }
        if !(self.qmgr.started || self.qmgr.beating) {
            // Not serving yet, but the clock of this node's own running goes on: a start that
            // completes right after a stall (a hung process, the master's start signal
            // waiting for it) knows the cluster may have declared it failed meanwhile (seed
            // 0x312c83fee: node 2 hung as its system restart ended, node 1 declared it failed,
            // and node 2, started on waking, took the closed link for node 1's failure).
            if self.qmgr.stalled_until(now) {
                self.qmgr.woke_from_stall = Some(now);
            }
            self.qmgr.last_tick = Some(now);
            return;
        }
        if self.qmgr.stalled_until(now) {
            tracing::warn!(
                stalled_ms = now
                    .duration_since(self.qmgr.last_tick.unwrap_or(now))
                    .as_millis(),
                "this data node did not run for longer than the heartbeat bound"
            );
            self.qmgr.woke_from_stall = Some(now);
        }
        self.qmgr.last_tick = Some(now);
        self.api_heartbeat_check(out, now);
        if !interval_due(
            &mut self.qmgr.next_heartbeat,
            self.qmgr.heartbeat_interval,
            now,
        ) {
            return;
        }
        let peers: Vec<NodeId> = self.qmgr.up.iter().copied().collect();
        for &peer in &peers {
            let frame = data_node_header(gsn::HEARTBEAT, block::QMGR, block::QMGR);
            self.unsent.send(out, peer, frame, &mut |_| {});
        }
        if self.asked_to_stop() {
            self.ask_to_be_stopped(out);
        }
        if !self.qmgr.started {
            // A node restarting sends heartbeats but judges no one: its view of the cluster is
            // the president's, and a failure reaches it as NODE_FAILREP or a closed link.
            return;
        }
        for peer in peers {
            let silent = &mut self.qmgr.silent[usize::from(peer.0)];
            *silent += 1;
            let silent = *silent;
            if silent == MISSED_WARN {
                tracing::warn!(node = %peer, intervals = silent, "missed heartbeats from data node");
            }
            if silent >= MISSED_DEAD {
                let why = format!(
                    "nothing from it for {silent} heartbeat intervals of {} ms",
                    self.qmgr.heartbeat_interval.as_millis()
                );
                self.report_failure(peer, &why, out, now);
            }
        }
    }

    /// Every HeartbeatIntervalDbApi: one more silent interval for each API node; one silent
    /// for `MISSED_DEAD` of them (its heartbeat, API_REGREQ, stopped: a stopped process, a
    /// dead link) is disconnected, which rolls its transactions back and frees their locks.
    fn api_heartbeat_check(&mut self, out: &mut dyn Outbox, now: Instant) {
        if self.qmgr.api_interval.is_zero() {
            return;
        }
        if !interval_due(&mut self.qmgr.next_api_check, self.qmgr.api_interval, now) {
            return;
        }
        let apis: Vec<NodeId> = self.qmgr.apis.iter().copied().collect();
        for api in apis {
            let Some(silent) = self.qmgr.silent.get_mut(usize::from(api.0)) else {
                continue;
            };
            *silent += 1;
            if *silent >= MISSED_DEAD {
                let why = format!(
                    "API node {api} missed {MISSED_DEAD} heartbeats (HeartbeatIntervalDbApi={} ms)",
                    self.qmgr.api_interval.as_millis()
                );
                tracing::warn!("{why}; disconnecting it");
                *silent = 0;
                out.close(api, why);
            }
        }
    }

    /// This node sees `node` fail: the president declares it failed (this node, or the one
    /// it reports to with FAIL_REP; it reports again each interval until the failure comes).
    fn report_failure(&mut self, node: NodeId, why: &str, out: &mut dyn Outbox, now: Instant) {
        let president = self.qmgr.president_without(node);
        if president == self.me {
            self.declare_failed(node, why, out, now);
        } else {
            tracing::warn!(node = %node, president = %president, "reporting a failed data node to the president: {why}");
            let frame = data_node_header(gsn::FAIL_REP, block::QMGR, block::QMGR);
            let rep = FailRep { node: node.0 };
            self.unsent
                .send(out, president, frame, &mut |b| rep.encode(b));
        }
    }

    /// As president: `node` is failed. Every live data node hears it (NODE_FAILREP), `node`
    /// too, which stops if it still runs; this node closes its link and handles the failure.
    pub(crate) fn declare_failed(
        &mut self,
        node: NodeId,
        why: &str,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        if !self.qmgr.up.contains(&node) {
            return;
        }
        tracing::error!(node = %node, "declaring data node failed: {why}");
        let rep = FailRep { node: node.0 };
        let peers: Vec<NodeId> = self.qmgr.up.iter().copied().collect();
        for peer in peers {
            let frame = data_node_header(gsn::NODE_FAILREP, block::QMGR, block::QMGR);
            self.unsent.send(out, peer, frame, &mut |b| rep.encode(b));
        }
        out.declare_failed(node, format!("declared failed: {why}"));
        self.node_failrep(node, out, now);
    }

    /// FAIL_REP: a node saw `rep.node` fail. Declared when this node is the president without
    /// it (one failed here already may begin a failure round: `arbit_failure_reported`);
    /// otherwise the reporter's view of who presides is ahead of this node's, and its own
    /// heartbeats or link will tell.
    pub(crate) fn exec_fail_rep(
        &mut self,
        from: NodeId,
        rep: FailRep,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        let node = NodeId(rep.node);
        if node == from {
            return self.exec_fail_rep_self(node, out);
        }
        if self.qmgr.president_without(node) == self.me && node != self.me {
            if self.qmgr.up.contains(&node) {
                self.declare_failed(node, &format!("reported by data node {from}"), out, now);
            } else {
                self.arbit_failure_reported(node, now);
            }
        }
    }

    /// True when this node asked to be stopped: its file system failed, or its part in a
    /// global checkpoint's save lags past TimeBetweenGlobalCheckpointsTimeout (GCP stop).
    pub(crate) fn asked_to_stop(&self) -> bool {
        self.fs.failed.is_some() || self.gcp.stop_asked.is_some()
    }

    /// True when every node of `nodes` (a node group) is alive, asked to be stopped (its file
    /// system failed or its save lags) and stays, as the group's last serving members: none
    /// can rejoin in its place, and no global checkpoint becomes restorable until an operator
    /// mends one.
    pub(crate) fn group_cannot_save(&self, nodes: &[NodeId]) -> bool {
        nodes.iter().all(|&n| match n == self.me {
            true => self.asked_to_stop(),
            false => self.qmgr.is_alive(n) && self.qmgr.stop_refused.contains(n),
        })
    }

    /// This node's file system failed (a write, sync or removal came back with ENOSPC, EIO,
    /// ...), or its part in a save lags (GCP stop): as NDB stops such a data node (2810,
    /// 2813, 2303), it asks to stop (FAIL_REP naming itself, to the node that presides
    /// without it, which lets it: `exec_fail_rep_self`), so that its node group's other
    /// members go on saving global checkpoints without it. Asked again every heartbeat
    /// interval while it runs: the president keeps it running while it is its node group's
    /// last serving member, which then serves reads and refuses writes. A node joining by
    /// node restart serves nothing until it has started: it stops at once. One in a system or
    /// initial start asks once started: stopping would stall a start that needs every node.
    /// Its restart's cut may then not be on its disk; its sysfile says so (an older restart,
    /// or the cut pending), and a later system restart past that one goes on without it
    /// (`restart.rs`; seed 0x3938b258).
    pub(crate) fn ask_to_be_stopped(&mut self, out: &mut dyn Outbox) {
        if self.qmgr.dead {
            return;
        }
        // A node restart that has not ended stops at once, included or not: the node serves
        // nothing yet, so no group needs it and nobody need let it go (seed 0x74006e67: node
        // 1, included and being copied to, asked to be stopped; its STOP_PERM_REQ was never
        // answered, it finished its restart, and, presiding on a failed disk, saved no global
        // checkpoint again).
        if !self.qmgr.started && self.node_restart_joining() {
            return self.stopped_at_own_request(None, out);
        }
        if !(self.qmgr.started || self.qmgr.beating) {
            return;
        }
        let president = self.qmgr.president_without(self.me);
        if president == self.me || self.qmgr.stop_perm.asking() {
            return;
        }
        let frame = data_node_header(gsn::FAIL_REP, block::QMGR, block::QMGR);
        let rep = FailRep { node: self.me.0 };
        self.unsent
            .send(out, president, frame, &mut |b| rep.encode(b));
    }

    /// FAIL_REP from `node` naming itself: its file system failed or its save lags. The node
    /// that presides without it lets it stop (NODE_FAILREP naming it, to it alone) while
    /// another member of its node group serves; otherwise it stays, its group's last replica,
    /// serving reads. The node then asks its group's live peers (`stop_perm.rs`: another
    /// president may have let one of them stop) and, once each confirmed, stops, as NDB's
    /// does on such an error; the cluster handles its failure as a crash's, from its closed
    /// links: declaring it failed while it still ran would have the others take over its
    /// transactions while it went on committing them. A president that asked to be stopped
    /// itself lets nobody stop: two members of a group that failed together would otherwise
    /// let each other go. Nor does a node still restarting (seed 0x380745b7: node 1, being
    /// copied to, let node 2, its group's only serving member, stop).
    fn exec_fail_rep_self(&mut self, node: NodeId, out: &mut dyn Outbox) {
        // A node still restarting has no say: its view of the cluster is the president's.
        if !self.qmgr.started
            || self.qmgr.president_without(node) != self.me
            || self.qmgr.stop_granted.contains(node)
        {
            // Let stop once: a node that stays says so (STOP_ABORT_REP, `stop_perm.rs`).
            return;
        }
        if self.arbit_round_running() {
            // Not while a failure round runs: a president that failed may have let another
            // member of the node's group stop just before, its NODE_FAILREP still on the way
            // (seed 0x5e003f9: president 1 let node 4 stop and crashed; node 2, presiding
            // next, let node 3 stop too, and node group {3, 4} was gone). Once every node on
            // this side has confirmed the failure, each holds the old president failed and
            // drops such a late grant, and one taken before has closed that member's links.
            // The node asks again every heartbeat interval.
            return;
        }
        // A president that asked to be stopped itself counts itself out of the group too
        // (seed 0x69000134, `--replicas 3 --durable-commits`: nodes 1 and 2, of group {1, 2,
        // 3}, both on failed disks, each refused the other while node 3 served, and no global
        // checkpoint was saved again).
        let without = if self.asked_to_stop() { self.me } else { node };
        if self.qmgr.group_serves_without(node, without) {
            self.qmgr.stop_refused.remove(node);
            self.qmgr.stop_granted.insert(node);
            tracing::warn!(node = %node, "data node {node} asked to be stopped (its file system failed, or its part in a global checkpoint lagged: GCP stop); its node group goes on without it: it stops");
            let frame = data_node_header(gsn::NODE_FAILREP, block::QMGR, block::QMGR);
            let rep = FailRep { node: node.0 };
            self.unsent.send(out, node, frame, &mut |b| rep.encode(b));
        } else if self.qmgr.stop_refused.insert(node) {
            tracing::error!(node = %node, "data node {node} asked to be stopped (its file system failed, or its save lags), but it is the last serving member of its node group: it goes on serving reads, and is stopped once another member serves");
        }
    }

    /// The start's timer: once StartPartialTimeout has passed without every data node, the
    /// start may go on without the missing ones (`partial_due`), if every node group has a
    /// live node; the master then decides (`cntr_start_decide`, or for a node without files
    /// `partial_start_diskless`). A start missing a whole node group waits, and says which.
    pub(crate) fn start_timer(&mut self, out: &mut dyn Outbox, now: Instant) {
        // A node that joins the running cluster by node restart starts when it is let in and
        // copied to, never by a start of its own (seed 0x9100d30: a node restarting after a
        // disk failure took itself for master of a partial start, started on its own restored
        // rows and served reads and writes outside the cluster).
        if self.qmgr.started || self.qmgr.all_connected() || self.node_restart_joining() {
            return;
        }
        // Only nodes of `--nowait-nodes` missing: no need to wait for them.
        let only_nowait_missing = (self.qmgr.data_nodes.iter())
            .all(|&n| self.qmgr.is_alive(n) || self.qmgr.nowait.contains(n));
        if !only_nowait_missing {
            if self.qmgr.partial_timeout.is_zero() {
                return;
            }
            let since = *self.qmgr.start_since.get_or_insert(now);
            if now.saturating_duration_since(since) < self.qmgr.partial_timeout {
                return;
            }
        }
        if let Some((group, nodes)) = self.qmgr.group_lost(true) {
            if self.restart.is_some() && nodes.iter().all(|&n| self.qmgr.failed.contains(n)) {
                // Every node of the group failed during this start: their next runs join only
                // by node restart, which needs a started cluster (as NDB's, the start fails).
                self.start_fails(format!(
                    "every node of node group {group} ({nodes:?}) failed during the start; \
                     start every data node again"
                ));
                return;
            }
            let quiet = self.qmgr.group_missing_logged.is_some_and(|at| {
                now.saturating_duration_since(at) < std::time::Duration::from_secs(10)
            });
            if !quiet {
                self.qmgr.group_missing_logged = Some(now);
                let missing: Vec<u16> = (self.qmgr.data_nodes.iter())
                    .filter(|&&n| !self.qmgr.is_alive(n))
                    .map(|n| n.0)
                    .collect();
                tracing::error!(
                    group,
                    ?missing,
                    "the cluster cannot start: node group {group} has no live data node \
                     (StartPartialTimeout={} ms has passed); waiting for its nodes",
                    self.qmgr.partial_timeout.as_millis()
                );
            }
            return;
        }
        if !self.qmgr.partial_due {
            self.qmgr.partial_due = true;
            if only_nowait_missing {
                tracing::warn!(
                    "only data nodes of --nowait-nodes are missing; every node group has a live \
                     node: starting without them"
                );
            } else {
                tracing::warn!(
                    "StartPartialTimeout={} ms has passed without every data node; every node \
                     group has a live node: starting without the missing ones",
                    self.qmgr.partial_timeout.as_millis()
                );
            }
        }
        if self.restart.is_some() {
            self.restart_request(out);
            self.cntr_start_decide(out);
        } else if self.qmgr.master() == self.me {
            self.partial_start_diskless(out);
        }
    }

    /// As master of a start without files: every live node starts, the missing ones
    /// excluded (CNTR_START_CONF for GCI 0, naming them failed).
    fn partial_start_diskless(&mut self, out: &mut dyn Outbox) {
        let missing: Vec<NodeId> = (self.qmgr.data_nodes.iter().copied())
            .filter(|&n| !self.qmgr.is_alive(n))
            .collect();
        for &node in &missing {
            self.qmgr.exclude(node);
        }
        tracing::warn!(
            ?missing,
            "partial start: the cluster starts without these data nodes"
        );
        let alive: Vec<NodeId> = self.qmgr.alive().collect();
        let conf = rndb_protocol::dih::CntrStartConf {
            gci: 0,
            failed: self.qmgr.failed().words(),
            restarts: vec![rndb_protocol::dih::RestartId::default()],
        };
        for node in alive {
            self.send_cntr_start_conf(node, &conf, out);
        }
    }

    /// A node with a start to make excludes the nodes the master left out of it (named
    /// failed in its CNTR_START_CONF); a node without files then starts.
    pub(crate) fn start_excluding(
        &mut self,
        excluded: NodeSet,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        for node in excluded.iter() {
            if node == self.me {
                continue;
            }
            if self.qmgr.up.contains(&node) {
                out.declare_failed(node, "left out of a partial start by the master".into());
                self.node_failrep(node, out, now);
            }
            self.qmgr.exclude(node);
        }
        if self.restart.is_none() && !self.qmgr.started && !self.node_restart_joining() {
            self.qmgr.set_started(now);
            tracing::info!(excluded = ?excluded, "cluster started without every data node (partial start)");
        }
    }

    /// This node stops gracefully (SIGTERM): every other data node hears it before its links
    /// close (NODE_STOPPING_REP), so that a node group left without a node by such stops does
    /// not make the rest stop with 2305.
    pub fn on_shutdown(&mut self, out: &mut dyn Outbox) {
        let peers: Vec<NodeId> = self.qmgr.up.iter().copied().collect();
        self.qmgr.stopping_rep_unsent = peers;
        self.send_stopping_reps(out);
    }

    /// NODE_STOPPING_REP to the peers not told yet; one that met a full buffer goes in the
    /// last flush (lost, the stop counted as a failure: seed 0x4190d51d). Its one byte is 1 in
    /// a stop of every data node (the others stop too, if not yet), else 0.
    pub(crate) fn send_stopping_reps(&mut self, out: &mut dyn Outbox) {
        let system = u8::from(self.stop_system);
        self.qmgr.stopping_rep_unsent.retain(|&peer| {
            let frame = data_node_header(gsn::NODE_STOPPING_REP, block::QMGR, block::QMGR);
            matches!(
                out.send(peer, frame, &mut |b| b.push(system)),
                Err(super::SendFailure::Overloaded)
            )
        });
    }

    /// NODE_STOPPING_REP: `from` stops gracefully (`system`: in a stop of every data node).
    pub(crate) fn exec_node_stopping_rep(&mut self, from: NodeId, system: bool) {
        tracing::info!(node = %from, system, "data node stops gracefully");
        self.qmgr.stopping.insert(from);
        if system {
            self.qmgr.stopping_system.insert(from);
        }
    }

    /// NODE_FAILREP from the president: `rep.node` is failed. This node closes its link to it
    /// and handles the failure; when it is this node, it stops (NDB's 2315).
    pub(crate) fn exec_node_failrep(
        &mut self,
        from: NodeId,
        rep: FailRep,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        let node = NodeId(rep.node);
        if node == self.me
            && from != self.qmgr.master()
            && self.arbit_enabled()
            && !self.asked_to_stop()
        {
            // Not this node's president (it is lower): the sender's side has split from this
            // one's, and closes its links. Arbitration decides which side goes on; obeying
            // would stop a side that may be the winner (a one-way cut made node 2 of two
            // declare node 1, whose side the arbitrator then chose). A node that asked to be
            // stopped obeys.
            tracing::warn!(node = %from, "data node {from}, not this node's president, declared this node failed: a split, which arbitration decides");
            return;
        }
        if node == self.me {
            if self.asked_to_stop() {
                return self.stop_perm_begin(from, out);
            }
            return self.declared_dead(format!(
                "data node {from}, the president, declared this node failed (it missed \
                 heartbeats, or its links failed)"
            ));
        }
        if self.qmgr.up.contains(&node) {
            out.declare_failed(
                node,
                format!("data node {from}, the president, declared it failed"),
            );
        } else if !self.node_restart_inclusion_begun(node) {
            // Not a member, and the president has not begun to include it here: a node this
            // node saw fail already (its link closed first), or whose declaration came late (a
            // slow link from the president) while its next run has linked and registered here. The president
            // sends INCL_NODEREQ after this on the same link, so a declaration of the new run
            // before its inclusion is this one too; such a run stops, and its link's close
            // ends it here. Taking the old run's declaration as the new one's left the new run
            // never included here, and every later restart refused (seed 0x31675).
            tracing::debug!(node = %node, "data node {node} declared failed by {from}: handled here already");
            return;
        }
        self.node_failrep(node, out, now);
    }

    /// Tells every API node that data node `node` failed (NODE_FAILREP), or, while an
    /// arbitration round holds commits, once it ends with this side going on.
    pub(crate) fn api_failrep(&mut self, node: NodeId, out: &mut dyn Outbox) {
        if self.tc.commits_held() {
            return self.arbit_hold_api_failrep(node);
        }
        let rep = FailRep { node: node.0 };
        let apis: Vec<NodeId> = self.qmgr.apis.iter().copied().collect();
        for api in apis {
            let frame = data_node_header(gsn::NODE_FAILREP, block::API, block::QMGR);
            self.unsent.send(out, api, frame, &mut |b| rep.encode(b));
        }
    }

    /// The president let this node stop at its own request (`president`), or its node
    /// restart ends: it stops with NDB's code for why it asked (2810 a full file system, 2813
    /// another file system error, 2303 a GCP stop) and handles nothing more. Let stop, it
    /// first tells every data node it stops (NODE_STOPPING_REP), as a graceful stop does: its
    /// leaving is no split, and a side left with half the nodes needs no arbitrator.
    pub(super) fn stopped_at_own_request(
        &mut self,
        president: Option<NodeId>,
        out: &mut dyn Outbox,
    ) {
        let (code, text) = match (&self.fs.failed, self.gcp.stop_asked) {
            (Some(error), _) => file_system_error(error),
            (None, gci) => (
                2303,
                format!(
                    "GCP stop detected: this node's part in saving global checkpoint {} took \
                     longer than TimeBetweenGlobalCheckpointsTimeout",
                    gci.map_or(0, gci_hi)
                ),
            ),
        };
        let how = match president {
            Some(node) => {
                format!("data node {node} let this node stop, and the cluster goes on without it")
            }
            None => "this node stops its node restart".to_string(),
        };
        let why = format!(
            "error {code}: {text}; {how}. Mend what failed (the disk), then start the node \
             again: it rejoins by node restart"
        );
        tracing::error!("{why}");
        if president.is_some() {
            self.on_shutdown(out);
        }
        self.qmgr.dead = true;
        self.jobs.clear();
        self.fatal.get_or_insert(why);
    }

    /// The cluster declared this node failed: it stops (NDB's 2315) and from now on handles
    /// nothing, so that it answers no API node with what the cluster went on without.
    fn declared_dead(&mut self, detail: String) {
        let why = format!(
            "error 2315: Node declared dead. See error log for details (Arbitration error): \
             {detail}"
        );
        tracing::error!("{why}");
        self.qmgr.dead = true;
        self.jobs.clear();
        self.fatal.get_or_insert(why);
    }

    /// A data node's link closed, or the node was declared failed (NODE_FAILREP to every
    /// block): the node is failed until it rejoins by node restart, and each block cleans up
    /// what it held with it: LQH resolves the transactions that node coordinated
    /// here, TC fails what it had out there, DICT fails a schema change or index build that
    /// waited for it. A node that is now the last of no node group stops.
    pub(crate) fn node_failrep(&mut self, node: NodeId, out: &mut dyn Outbox, now: Instant) {
        self.qmgr.stop_granted.remove(node);
        self.stop_peer_gone(node);
        self.stop_perm_node_failed(node, out);
        if !self.qmgr.up.remove(&node) {
            // Not a member: a failed node's new link, or a restarting node not included here
            // yet (its inclusion ends; it stops on the NODE_FAILREP the president sent it).
            return self.node_restart_link_lost(node);
        }
        // The live data nodes before the failure, for arbitration, those still being copied to
        // by node restart too: their president may have told the other side of a split that
        // one started and not told this side yet, and a count that left it out here would
        // let this side go on with a majority of fewer nodes while that side asks the
        // arbitrator. (The failure of a node being copied to is a failed restart, not a
        // split.)
        let restarting = self.qmgr.copying.contains(node);
        let mut before: NodeSet = self.qmgr.alive().collect();
        before.insert(node);
        self.qmgr.failed.insert(node);
        self.qmgr.registered.remove(node);
        self.node_restart_node_failed(node);
        self.node_restart_retell_started(node, out);
        self.primary_switch_node_failed(node, out, now);
        if self.qmgr.started && self.qmgr.just_woke_from_stall(now) {
            // Not a failure of `node` to handle: taking over from it would complete this
            // node's transactions on its own, after the cluster went on without it.
            return self.declared_dead(format!(
                "this node did not run for longer than {MISSED_DEAD} heartbeat intervals of {} \
                 ms, and then data node {node} closed its link: the cluster has declared this \
                 node failed",
                self.qmgr.heartbeat_interval.as_millis()
            ));
        }
        if self.qmgr.started {
            if let Some(group) = self.group_lost_here(now) {
                let why = format!(
                    "error 2305: Node lost connection to other nodes and can not form a \
                     unpartitioned cluster, please investigate if there are error(s) on other \
                     node(s) (Arbitration error): no live data node of node group {group} is \
                     left on this node's side after data node {node} failed"
                );
                tracing::error!("{why}");
                self.fatal.get_or_insert(why);
            }
        }
        self.arbit_side_lost(node);
        if restarting {
            self.arbit_copying_failed(node, now);
        } else {
            self.arbit_node_failed(node, before, now);
        }
        // The API nodes stop routing to it, even while their link to it stays open (a
        // stopped process): their connection to it fails. Only a node that serves says so: one
        // still starting (left out of a partial start, say) sees links close that the cluster
        // keeps. While arbitration decides, they hear it once this side goes on (as NDB's
        // NODE_FAILREP follows the arbitration): the arbitrator among them must keep its link
        // to either side of a split, and the losing side tells them nothing.
        if self.qmgr.started {
            self.api_failrep(node, out);
        }
        self.restart_node_failrep(out, now);
        self.dih_node_failrep(node, out, now);
        tracing::error!(node = %node, "data node failed: its partitions' backups take over, transactions touching it abort");
        self.lqh_node_failrep(node, out);
        self.gcp_try_save(out);
        self.tc_node_failrep(node);
        self.dict_node_failrep(node, out, now);
        self.arbit_off_decide(out, now);
    }

    /// API_REGREQ: whether the cluster has started.
    pub(crate) fn exec_api_regreq(
        &mut self,
        from: NodeId,
        request: &FrameHeader,
        out: &mut dyn Outbox,
    ) {
        let conf = ApiRegConf {
            started: self.qmgr.started,
            data_nodes_up: self.qmgr.up.len() as u16 + 1,
            data_nodes: self.qmgr.data_nodes.len() as u16,
        };
        reply(
            &mut self.unsent,
            out,
            from,
            request,
            lgsn::API_REGCONF,
            &mut |b| conf.encode(b),
        );
    }

    /// True when `alive` (an API node's view) names exactly the data nodes alive in this node's.
    pub(crate) fn sees_alive(&self, alive: &[u16]) -> bool {
        let mine: Vec<u16> = self
            .qmgr
            .data_nodes
            .iter()
            .filter(|&&n| self.qmgr.is_alive(n))
            .map(|n| n.0)
            .collect();
        let mut theirs = alive.to_vec();
        theirs.sort_unstable();
        theirs.dedup();
        mine == theirs
    }

    /// Before the cluster has started, an API node's transactions and scans are refused with
    /// 4009 (key operations silently: the execute that follows them is refused). True when
    /// the frame was handled so.
    pub(crate) fn refuse_before_start(
        &mut self,
        from: NodeId,
        header: &FrameHeader,
        payload: &[u8],
        out: &mut dyn Outbox,
    ) -> bool {
        let why = "the cluster has not started: not every data node is connected";
        self.refuse_api_request(from, header, payload, out, why)
    }

    /// Refuses an API node's transaction or scan with 4009 and `why` (key operations
    /// silently: the execute that follows them is refused). True when the frame was handled
    /// so.
    pub(crate) fn refuse_api_request(
        &mut self,
        from: NodeId,
        header: &FrameHeader,
        payload: &[u8],
        out: &mut dyn Outbox,
        why: &str,
    ) -> bool {
        let error = NdbError::with_detail(4009, why);
        self.refuse_api_request_with(from, header, payload, out, error)
    }

    /// Refuses an API node's transaction or scan with `error`, as [`Kernel::refuse_api_request`]
    /// does with 4009.
    pub(crate) fn refuse_api_request_with(
        &mut self,
        from: NodeId,
        header: &FrameHeader,
        payload: &[u8],
        out: &mut dyn Outbox,
        error: NdbError,
    ) -> bool {
        if self.qmgr.is_data_node(from) {
            return false;
        }
        // An operation that ends its execute (FLAG_EXECUTE, its flags' byte) is answered as
        // the execute would be.
        let ends_execute = payload
            .first()
            .is_some_and(|f| f & signals::FLAG_EXECUTE != 0);
        match header.signal {
            gsn::TCKEYREQ | gsn::TCINDXREQ if !ends_execute => {}
            gsn::TCKEYREQ | gsn::TCINDXREQ | gsn::TC_EXECUTE_REQ => {
                let trans = tc::trans_id(from, header.request_id);
                self.answer_api(
                    trans,
                    ApiAnswer::ExecuteRef {
                        error,
                        op_index: signals::OP_INDEX_NONE,
                    },
                    out,
                );
            }
            gsn::SCAN_TABREQ | gsn::SCAN_NEXTREQ => {
                tc::scan::scan_ref(&mut self.unsent, out, from, header.request_id, &error)
            }
            gsn::SUB_START_REQ => self.suma_refuse(from, header.request_id, &error, out),
            _ => return false,
        }
        true
    }
}

/// True once per `interval` (the first time one interval after the first call): `next` holds
/// when. The next interval starts at `now`, not at the one due: after a long stall of this
/// node's own loop, peers are not counted silent for the intervals it did not run.
fn interval_due(next: &mut Option<Instant>, interval: Duration, now: Instant) -> bool {
    let due = *next.get_or_insert(now + interval);
    if now < due {
        return false;
    }
    *next = Some(now + interval);
    true
}

/// NDB's code and text for a failed file request: 2810 a full file system, 2813 any other
/// file system error.
pub(crate) fn file_system_error(error: &crate::ndbfs::FsError) -> (u32, String) {
    if error.no_space {
        (2810, format!("The file system is full ({error})"))
    } else {
        (2813, format!("Unknown file system error ({error})"))
    }
}
