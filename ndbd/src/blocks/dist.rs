//! The kernel across data nodes: membership, routing operations to the replicas that run them,
//! replication along each partition's replicas, and the rounds of commit and abort.
//!
//! ```text
//!  API ─TCKEYREQ─► TC (node A) ─LQHKEYREQ─► LQH primary (node P) ─LQHKEYREQ─► LQH backup (B)
//!                     ▲                                                          │
//!                     └──────────────────────── LQHKEYCONF ──────────────────────┘
//!  commit: TC ─LQH_COMMITREQ─► nodes holding backup replicas ─CONF─► TC
//!             ─LQH_COMMITREQ─► the other participants (the primaries) ─CONF─► TC ─► API
//! ```
//!
//! - TC sends an operation to its partition's primary replica (a CommittedRead may go to the
//!   replica the API asked for). A write carries the chain of backups: each replica runs it and
//!   passes it on, and the last one answers TC, so TC hears of a write only once every replica
//!   holds it (locked, uncommitted).
//! - A node that runs an operation for another node's TC records the transaction as *foreign*
//!   until that TC's commit or abort arrives; the record is what keeps its queued work alive.
//!   Foreign transactions that ended are remembered for a while, so that an operation arriving
//!   late (the abort overtook it) is refused instead of taking locks nobody would release.
//! - Commit goes first to the nodes holding backup replicas, then to the others (NDB's linear
//!   commit, primary last); the API hears of it when every participant confirmed. Abort goes to
//!   every participant at once. This node is always a participant of its own transactions.
//! - The same code runs whether the next hop is this node (a job) or another (a frame): only
//!   routing differs.
//!
//! Node failure is not handled yet beyond keeping the survivors consistent and serving: a data
//! node whose link drops is marked failed; transactions touching it abort with 286, operations
//! sent to it fail with 4010, and its foreign transactions here are rolled back.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Instant;

use hashbrown::HashMap;

use rndb_config::{ClusterConfig, NodeId};
use rndb_protocol::lqh::{
    self, gsn as lgsn, ApiRegConf, FiredChange, LqhKeyConf, LqhKeyRef, TransSignal,
};
use rndb_protocol::signals::{block, REPLICA_PRIMARY};
use rndb_protocol::{LockMode, NdbError, OperationType};
use rndb_transporter::FrameHeader;

use super::acc::{OpKey, Row, TransId};
use super::lqh::{IndexChange, LqhAnswer, LqhKeyReq, OpRole};
use super::node_set::NodeSet;
use super::tc::ApiAnswer;
use super::{reply, Kernel, Outbox, ProtocolViolation, SendFailure, Signal};

/// An operation out on another node, as this node's TC remembers it.
#[derive(Debug)]
struct RemoteOp {
    role: OpRole,
    /// The node it was sent to.
    to: NodeId,
    op_index: u32,
    /// It was sent with the order to commit at that (last) replica.
    commit_at_last: bool,
}

/// Foreign transactions remembered after they end here.
const ENDED_REMEMBERED: usize = 64 * 1024;

/// The node's view of the cluster and of work crossing nodes.
#[derive(Debug)]
pub(super) struct Dist {
    me: NodeId,
    /// Every data node of the config, this one included, in id order.
    data_nodes: Vec<NodeId>,
    /// Other data nodes with a live link.
    up: BTreeSet<NodeId>,
    /// Every data node has been connected once: the cluster serves requests.
    started: bool,
    /// Data nodes whose link dropped: never used again (node restart is not implemented).
    failed: BTreeSet<NodeId>,
    /// Operations this node's TC sent to another node, by transaction and token: the role TC
    /// keeps for the answer, and the node the operation went to.
    remote_ops: BTreeMap<(TransId, u32), RemoteOp>,
    next_token: u32,
    /// Transactions of other nodes' TCs that hold or wait for rows here, with their TC.
    foreign: HashMap<TransId, NodeId>,
    /// Foreign transactions that ended here, and whether they committed.
    ended: HashMap<TransId, bool>,
    ended_order: VecDeque<TransId>,
    /// Foreign transactions whose coordinator failed, waiting for the other survivors to say
    /// whether any of them committed it: (the failed coordinator, nodes yet to answer,
    /// committed somewhere).
    resolving: HashMap<TransId, (NodeId, Vec<NodeId>, bool)>,
    /// Queries about transactions of a coordinator whose failure this node has not handled
    /// yet (its last frames may still be queued here): (asking node, transaction, coordinator).
    deferred_queries: Vec<(NodeId, TransId, NodeId)>,
}

impl Dist {
    pub fn new(config: &ClusterConfig, me: NodeId) -> Dist {
        let mut data_nodes: Vec<NodeId> = config.data_nodes.iter().map(|n| n.node_id).collect();
        data_nodes.sort_unstable();
        let started = data_nodes.iter().all(|&n| n == me);
        Dist {
            me,
            data_nodes,
            up: BTreeSet::new(),
            started,
            failed: BTreeSet::new(),
            remote_ops: BTreeMap::new(),
            next_token: 1,
            foreign: HashMap::new(),
            ended: HashMap::new(),
            ended_order: VecDeque::new(),
            resolving: HashMap::new(),
            deferred_queries: Vec::new(),
        }
    }

    pub fn is_data_node(&self, node: NodeId) -> bool {
        self.data_nodes.binary_search(&node).is_ok()
    }

    pub fn started(&self) -> bool {
        self.started
    }

    /// NDB's DICT master: the live data node with the lowest id (every survivor of a failure
    /// picks the same one).
    pub fn master(&self) -> NodeId {
        self.data_nodes
            .iter()
            .copied()
            .find(|&n| n == self.me || self.up.contains(&n))
            .unwrap_or(self.me)
    }

    /// True for this node and the data nodes it has a live link to.
    pub fn is_alive(&self, node: NodeId) -> bool {
        node == self.me || self.up.contains(&node)
    }

    /// The other data nodes with a live link.
    pub fn peers_up(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.up.iter().copied()
    }

    /// True while `trans` is another node's transaction with work here.
    pub fn is_foreign(&self, trans: TransId) -> bool {
        self.foreign.contains_key(&trans)
    }

    /// Forgets the operations of a transaction that ended (answers that come late are dropped).
    pub fn forget_operations_of(&mut self, trans: TransId) {
        let keys: Vec<(TransId, u32)> = self
            .remote_ops
            .range((trans, 0)..=(trans, u32::MAX))
            .map(|(k, _)| *k)
            .collect();
        for key in keys {
            self.remote_ops.remove(&key);
        }
    }

    fn stash(&mut self, trans: TransId, req: &LqhKeyReq, to: NodeId) -> u32 {
        let token = self.next_token;
        self.next_token = self.next_token.wrapping_add(1).max(1);
        let op = RemoteOp {
            role: req.role.clone(),
            to,
            op_index: req.op_index,
            commit_at_last: req.commit_at_last,
        };
        self.remote_ops.insert((trans, token), op);
        token
    }

    /// Another node's transaction ended here (or was told to end before any of its work came):
    /// its record goes, and it is remembered, with how it ended, so that late work of it is
    /// refused and survivors of its coordinator's failure can ask.
    fn end_foreign(&mut self, trans: TransId, committed: bool) {
        self.foreign.remove(&trans);
        if self.ended.insert(trans, committed).is_none() {
            self.ended_order.push_back(trans);
        }
        while self.ended_order.len() > ENDED_REMEMBERED {
            if let Some(old) = self.ended_order.pop_front() {
                self.ended.remove(&old);
            }
        }
    }

    /// How `trans` stands here, for a survivor of its coordinator's failure.
    fn outcome(&self, trans: TransId) -> lqh::TransOutcome {
        match self.ended.get(&trans) {
            Some(true) => lqh::TransOutcome::Committed,
            Some(false) => lqh::TransOutcome::Aborted,
            None => lqh::TransOutcome::Open,
        }
    }
}

/// True while work of `trans` may run in LQH here: its TC (this node's) is running executes,
/// or another node's TC has not ended it yet.
pub(super) fn live(tc: &super::tc::Tc, dist: &Dist, trans: TransId) -> bool {
    tc.is_active(trans) || dist.is_foreign(trans)
}

fn is_committed_read(req_type: OperationType, lock: LockMode) -> bool {
    req_type == OperationType::Read && lock == LockMode::CommittedRead
}

/// A partition's replicas, primary first: at most [`lqh::REPLICAS_MAX`] node ids, kept inline
/// (every key operation looks them up, so they cost no allocation).
#[derive(Clone, Copy, Debug)]
pub(super) struct Replicas {
    nodes: [NodeId; lqh::REPLICAS_MAX],
    len: usize,
}

impl Default for Replicas {
    fn default() -> Self {
        Replicas {
            nodes: [NodeId(0); lqh::REPLICAS_MAX],
            len: 0,
        }
    }
}

impl Replicas {
    /// Appends `node`; the config allows no more than `REPLICAS_MAX` replicas, so a partition
    /// map never holds more (one past that is ignored, and caught in debug builds).
    fn push(&mut self, node: NodeId) {
        debug_assert!(
            self.len < self.nodes.len(),
            "more than REPLICAS_MAX replicas"
        );
        if let Some(slot) = self.nodes.get_mut(self.len) {
            *slot = node;
            self.len += 1;
        }
    }
}

impl std::ops::Deref for Replicas {
    type Target = [NodeId];

    fn deref(&self) -> &[NodeId] {
        &self.nodes[..self.len]
    }
}

impl IntoIterator for Replicas {
    type Item = NodeId;
    type IntoIter = std::iter::Take<std::array::IntoIter<NodeId, { lqh::REPLICAS_MAX }>>;

    fn into_iter(self) -> Self::IntoIter {
        self.nodes.into_iter().take(self.len)
    }
}

fn header(signal: u16, receiver_block: u16, sender_block: u16) -> FrameHeader {
    FrameHeader {
        signal,
        receiver_block,
        sender_block,
        request_id: 0,
    }
}

impl Kernel {
    /// True when `node` is a data node of the config.
    pub fn is_data_node(&self, node: NodeId) -> bool {
        self.dist.is_data_node(node)
    }

    /// True when data node `node` was seen to fail (it is never used again).
    pub fn has_failed(&self, node: NodeId) -> bool {
        self.dist.failed.contains(&node)
    }

    /// A link came up. When it completes the set of data nodes, the cluster has started.
    pub fn on_connect(&mut self, node: NodeId) {
        if !self.dist.is_data_node(node) {
            return;
        }
        if self.dist.failed.contains(&node) {
            // Its partitions here moved on without it; rejoining needs node restart (copying
            // them back), which is not implemented: the link stays unused.
            tracing::warn!(node = %node, "data node reconnected after a failure; node restart is not implemented, so it is not used again");
            return;
        }
        self.dist.up.insert(node);
        if !self.dist.started && self.dist.up.len() + 1 == self.dist.data_nodes.len() {
            self.dist.started = true;
            tracing::info!(data_nodes = ?self.dist.data_nodes, "cluster started: every data node is connected");
        }
    }

    /// A data node's link closed: what it held for this node's transactions is lost, and what
    /// its transactions held here is rolled back.
    pub(super) fn on_data_node_lost(&mut self, node: NodeId, out: &mut dyn Outbox, now: Instant) {
        if !self.dist.up.remove(&node) {
            // A link of a node that already failed (see `on_connect`): nothing was using it.
            return;
        }
        self.dist.failed.insert(node);
        tracing::error!(node = %node, "data node failed: transactions touching it abort (node failure handling is not implemented yet)");
        // Its transactions' rows here: committed if any survivor committed them (the commit
        // round reached it before the coordinator died), else rolled back. Every survivor asks
        // every other, so all decide alike.
        let mut orphans: Vec<TransId> = self
            .dist
            .foreign
            .iter()
            .filter(|(_, tc)| **tc == node)
            .map(|(t, _)| *t)
            .collect();
        // Sorted: a hash map's order differs from run to run, and the queries go out in it.
        orphans.sort_unstable();
        let survivors: Vec<NodeId> = self.dist.up.iter().copied().collect();
        for trans in orphans {
            self.dist
                .resolving
                .insert(trans, (node, survivors.clone(), false));
            let query = lqh::TcFailQuery {
                trans,
                tc_node: node.0,
            };
            for &peer in &survivors {
                let frame = header(lgsn::TC_FAIL_QUERY, block::DBLQH, block::DBLQH);
                self.unsent.send(out, peer, frame, &mut |b| query.encode(b));
            }
            self.resolve_if_answered(trans, out);
        }
        // Queries that waited for this node to handle the failure: everything the dead
        // coordinator sent here has run now.
        let (ready, still): (Vec<_>, Vec<_>) = std::mem::take(&mut self.dist.deferred_queries)
            .into_iter()
            .partition(|&(_, _, tc)| tc == node);
        self.dist.deferred_queries = still;
        for (asker, trans, _) in ready {
            self.answer_tc_fail_query(asker, trans, out);
        }
        // Resolutions that waited for the node that failed now.
        let mut waiting: Vec<TransId> = self
            .dist
            .resolving
            .iter()
            .filter(|(_, (_, awaiting, _))| awaiting.contains(&node))
            .map(|(t, _)| *t)
            .collect();
        waiting.sort_unstable();
        for trans in waiting {
            if let Some((_, awaiting, _)) = self.dist.resolving.get_mut(&trans) {
                awaiting.retain(|&n| n != node);
            }
            self.resolve_if_answered(trans, out);
        }
        // Operations out on it.
        let lost: Vec<((TransId, u32), u32)> = self
            .dist
            .remote_ops
            .iter()
            .filter(|(_, op)| op.to == node)
            .map(|(k, op)| (*k, op.op_index))
            .collect();
        for ((trans, token), op_index) in &lost {
            let answer = LqhAnswer::Ref {
                trans: *trans,
                op_index: *op_index,
                error: NdbError::with_detail(4010, format!("data node {node} failed")),
                role: OpRole::Remote {
                    tc_node: self.me,
                    token: *token,
                },
                // What other replicas hold of it may differ: the transaction aborts.
                backup: true,
            };
            self.jobs.push_back(Signal::LqhAnswer(Box::new(answer)));
        }
        // This TC's transactions with rows there.
        let error = NdbError::with_detail(286, format!("data node {node} failed"));
        for trans in self.tc.fail_participant(node, &error) {
            self.jobs.push_back(Signal::TcRound(trans));
        }
        for trans in self.tc.awaiting_node(node) {
            self.jobs.push_back(Signal::RoundDone { trans, node });
        }
        self.schema_node_lost(node, out, now);
        self.builds_node_lost(node, out, now);
    }

    /// Ends a transaction whose coordinator failed once every survivor has said how it stands
    /// there: committed if any committed it, else rolled back.
    fn resolve_if_answered(&mut self, trans: TransId, out: &mut dyn Outbox) {
        let Some((tc_node, awaiting, committed)) = self.dist.resolving.get(&trans) else {
            return;
        };
        if !awaiting.is_empty() {
            return;
        }
        let (tc_node, committed) = (*tc_node, *committed);
        self.dist.resolving.remove(&trans);
        tracing::info!(trans, node = %tc_node, committed, "ended a transaction whose coordinator failed");
        self.lqh_finish(trans, tc_node, committed, out);
    }

    /// Says how `trans` stands here to `asker`, a survivor of its coordinator's failure.
    fn answer_tc_fail_query(&mut self, asker: NodeId, trans: TransId, out: &mut dyn Outbox) {
        let answer = lqh::TcFailAnswer {
            trans,
            outcome: self.dist.outcome(trans),
        };
        let frame = header(lgsn::TC_FAIL_ANSWER, block::DBLQH, block::DBLQH);
        self.unsent
            .send(out, asker, frame, &mut |b| answer.encode(b));
    }

    /// API_REGREQ: whether the cluster has started.
    pub(super) fn api_reg(&mut self, from: NodeId, request: &FrameHeader, out: &mut dyn Outbox) {
        let conf = ApiRegConf {
            started: self.dist.started,
            data_nodes_up: self.dist.up.len() as u16 + 1,
            data_nodes: self.dist.data_nodes.len() as u16,
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

    /// TC: sends an operation to the replica that runs it (`replica` chooses one for a
    /// CommittedRead; everything else runs on the primary) and records the nodes that will
    /// hold its rows.
    pub(super) fn dispatch(&mut self, mut req: Box<LqhKeyReq>, replica: u8, out: &mut dyn Outbox) {
        // The partition's replicas that are alive, primary first: when a primary has failed,
        // its first live backup takes over (it holds every committed row, as replication is
        // synchronous). Walked in place rather than collected into a `Replicas`: the copy was
        // written two bytes at a time and read back sixteen, a store-forwarding stall on every
        // key operation.
        let dist = &self.dist;
        let live = self
            .dih
            .replicas(req.fragment)
            .iter()
            .copied()
            .filter(|&node| dist.is_alive(node));
        let Some(primary) = live.clone().next() else {
            let error = NdbError::with_detail(
                4010,
                format!("every replica of partition {} has failed", req.fragment),
            );
            let answer = LqhAnswer::Ref {
                trans: req.trans,
                op_index: req.op_index,
                error,
                role: req.role,
                backup: false,
            };
            return self.jobs.push_back(Signal::LqhAnswer(Box::new(answer)));
        };
        let committed_read = is_committed_read(req.op_type, req.lock_mode);
        let read_backup = committed_read
            && replica == REPLICA_PRIMARY
            && live.clone().any(|node| node == self.me)
            && self
                .dict
                .get(req.table_id)
                .is_some_and(|t| t.info.def.read_backup);
        let target = if read_backup {
            // READ_BACKUP: the nearest replica is this node's.
            self.me
        } else if committed_read {
            live.clone().nth(usize::from(replica)).unwrap_or(primary)
        } else {
            primary
        };
        if req.op_type != OperationType::Read {
            for (i, node) in live.clone().enumerate() {
                self.tc.add_participant(req.trans, node, i > 0);
            }
            req.chain = live.skip(1).collect();
        } else if !committed_read {
            self.tc.add_participant(req.trans, primary, false);
        }
        if target == self.me {
            self.prefetch_if_alone(&req);
            self.jobs.push_back(Signal::LqhKeyReq(req));
        } else {
            self.send_lqh_key_req(target, *req, out);
        }
    }

    /// Starts the miss of `req`'s hash-index entry when `req` is about to be the only job
    /// queued, so that it overlaps the rest of the turn's work (SHM serial_pk p50 −3 %): a key
    /// read, a unique index's lookup, the base row it found, or a replica's operation. A run of
    /// queued operations is warmed in stages instead (`Lqh::warm`).
    fn prefetch_if_alone(&self, req: &LqhKeyReq) {
        if self.jobs.is_empty() {
            self.lqh
                .prefetch_key(req.table_id, req.fragment, &req.key_bytes);
        }
    }

    /// True when `alive` (an API node's view) names exactly the data nodes alive in this node's.
    pub(super) fn sees_alive(&self, alive: &[u16]) -> bool {
        let mine: Vec<u16> = self
            .dist
            .data_nodes
            .iter()
            .filter(|&&n| self.dist.is_alive(n))
            .map(|n| n.0)
            .collect();
        let mut theirs = alive.to_vec();
        theirs.sort_unstable();
        theirs.dedup();
        mine == theirs
    }

    /// The replicas of `partition` that are alive, primary first: the partition map with failed
    /// nodes left out.
    pub(super) fn live_replicas(&self, partition: u32) -> Replicas {
        let mut live = Replicas::default();
        for &node in self.dih.replicas(partition) {
            if self.dist.is_alive(node) {
                live.push(node);
            }
        }
        live
    }

    /// LQH: runs an operation here; a write that succeeded goes on to the next replica of its
    /// chain, anything else is answered.
    pub(super) fn run_lqh_key_req(
        &mut self,
        req: Box<LqhKeyReq>,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        let committed_read = is_committed_read(req.op_type, req.lock_mode);
        let remote = matches!(req.role, OpRole::Remote { .. });
        // A CommittedRead for another node takes no lock and belongs to no transaction here.
        let exempt = committed_read && remote;
        if !exempt && !live(&self.tc, &self.dist, req.trans) {
            // Its transaction's commit or abort started while the operation was queued (a
            // second hop, index maintenance, a granted lock, a replica's turn): it must not run
            // any more.
            let (tc, dist) = (&self.tc, &self.dist);
            let granted = self.lqh.drop_work(&req, &|t| live(tc, dist, t));
            self.resume(granted);
            return;
        }
        if req.op_type != OperationType::Read && self.builds.locks(req.table_id) {
            // NDB builds an index under a table lock: the build's entries must not race the
            // index maintenance of writes.
            let answer = LqhAnswer::Ref {
                trans: req.trans,
                op_index: req.op_index,
                error: NdbError::with_detail(
                    701,
                    format!("a unique index of table {} is being built", req.table_id),
                ),
                role: req.role,
                backup: req.backup,
            };
            return self.jobs.push_back(Signal::LqhAnswer(Box::new(answer)));
        }
        let forward = (!req.chain.is_empty()).then(|| req.clone());
        let commit_here = req.commit_at_last && req.chain.is_empty();
        let (trans, role_is_local) = (req.trans, !remote);
        // Matched where `execute` wrote it: moving the answer into a tuple with `forward`
        // first copied it whole, with loads wider than the stores that had just written it
        // (a store-forwarding stall per operation).
        match self.lqh.execute(&self.dict, req) {
            // Waits for a lock; it runs again, chain and all, when granted.
            None => {}
            Some(LqhAnswer::Conf { fired, .. }) if forward.is_some() => {
                let Some(mut next) = forward else { return };
                let to = next.chain.remove(0);
                next.backup = true;
                if next.chain.is_empty() && role_is_local && fired.is_empty() {
                    // This node's TC coordinates: when the transaction's fate now hangs
                    // only on this write's last replica, that replica commits at once,
                    // saving the commit round trip.
                    let replicas: NodeSet = [self.me, to]
                        .into_iter()
                        .chain(next.chain.iter().copied())
                        .collect();
                    next.commit_at_last = self.tc.start_early_commit(trans, &replicas);
                }
                self.send_lqh_key_req(to, *next, out);
            }
            Some(LqhAnswer::Conf {
                trans,
                op_index,
                row,
                role,
                fired,
                ..
            }) if commit_here => {
                let tc_node = match role {
                    OpRole::Remote { tc_node, .. } => tc_node,
                    _ => self.me,
                };
                self.commit_here(trans, tc_node);
                self.jobs
                    .push_back(Signal::LqhAnswer(Box::new(LqhAnswer::Conf {
                        trans,
                        op_index,
                        row,
                        role,
                        fired,
                        committed: true,
                    })));
            }
            Some(LqhAnswer::Conf {
                trans,
                op_index,
                row: Some(row),
                role: OpRole::Api,
                fired,
                committed: false,
            }) if fired.is_empty() => {
                // NDB's TRANSID_AI: a read's row goes from LQH straight to the API, while it
                // is still in the cache, and TC counts the operation as answered in the same
                // step (all it would do with the answer). This is safe because the `live`
                // check above ran in this same call: the transaction is Active, so TC would
                // have sent the row too; and the execute completes only when every operation
                // is counted, so another operation's answer still queued holds it back, and
                // its CONF or REF follows the row on the same link.
                //
                // When this row ends a NoCommit execute, it confirms the execute too: one frame
                // (TCKEY_ROW_CONF) instead of the row and a TC_EXECUTE_CONF. Only once that
                // frame is sent is the execute concluded; a row that does not fit goes the
                // usual way (its lost answer fails the execute with 1218).
                if self.tc.count_read_answer(trans)
                    && self.send_row_conf(trans, op_index, &row, out)
                {
                    let concluded = self.tc.try_complete(trans, now);
                    debug_assert!(
                        matches!(concluded, Some(Ok(ApiAnswer::ExecuteConf))),
                        "the row confirmed the execute: {concluded:?}"
                    );
                } else {
                    self.answer_api(trans, ApiAnswer::Row { op_index, row }, out);
                    self.complete(trans, out, now);
                }
            }
            Some(answer) => self.jobs.push_back(Signal::LqhAnswer(Box::new(answer))),
        }
    }

    /// The last replica's early commit: everything the transaction holds here is committed
    /// without waiting for TC's commit round (TC will not send one here).
    fn commit_here(&mut self, trans: TransId, tc_node: NodeId) {
        if tc_node != self.me {
            self.dist.end_foreign(trans, true);
        }
        let (tc, dist) = (&self.tc, &self.dist);
        let granted = self.lqh.commit(trans, &|t| live(tc, dist, t));
        self.resume(granted);
    }

    /// Sends an operation to node `to`'s LQH. Its role stays with this node's TC (under a
    /// token) unless another node's TC already keeps it.
    fn send_lqh_key_req(&mut self, to: NodeId, req: LqhKeyReq, out: &mut dyn Outbox) {
        let (tc_node, token) = match req.role {
            OpRole::Remote { tc_node, token } => (tc_node, token),
            _ => (self.me, self.dist.stash(req.trans, &req, to)),
        };
        let wire = lqh::LqhKeyReq {
            trans: req.trans,
            tc_node: tc_node.0,
            token,
            op_index: req.op_index,
            op_type: req.op_type,
            lock_mode: req.lock_mode,
            table_id: req.table_id,
            fragment: req.fragment,
            key_bytes: req.key_bytes.to_vec(),
            key: req.key,
            attrs: req.attrs,
            chain: req.chain.iter().map(|n| n.0).collect(),
            flags: if req.commit_at_last {
                lqh::LQHKEY_COMMIT_AT_LAST_REPLICA
            } else {
                0
            } | if req.backup { lqh::LQHKEY_BACKUP } else { 0 },
        };
        // A node that failed is never sent to again, even if it reconnected.
        let sent = if self.dist.up.contains(&to) {
            out.send(
                to,
                header(lgsn::LQHKEYREQ, block::DBLQH, block::DBTC),
                &mut |b| wire.encode(b),
            )
        } else {
            Err(SendFailure::Gone)
        };
        if let Err(failure) = sent {
            let error = match failure {
                SendFailure::Gone => {
                    NdbError::with_detail(4010, format!("data node {to} is not connected"))
                }
                SendFailure::Overloaded => NdbError::with_detail(
                    1218,
                    format!("the send buffer to data node {to} is full"),
                ),
            };
            let answer = LqhAnswer::Ref {
                trans: wire.trans,
                op_index: wire.op_index,
                error,
                role: OpRole::Remote { tc_node, token },
                backup: req.backup,
            };
            self.jobs.push_back(Signal::LqhAnswer(Box::new(answer)));
        }
    }

    /// An answer whose TC is elsewhere goes there; one whose role this node's TC keeps gets
    /// it back. Returns the answer for this node's TC, if any.
    pub(super) fn route_answer(
        &mut self,
        answer: LqhAnswer,
        out: &mut dyn Outbox,
    ) -> Option<LqhAnswer> {
        let (trans, role) = match &answer {
            LqhAnswer::Conf { trans, role, .. } | LqhAnswer::Ref { trans, role, .. } => {
                (*trans, role)
            }
        };
        let OpRole::Remote { tc_node, token } = *role else {
            return Some(answer);
        };
        if tc_node == self.me {
            // Stale when the transaction ended meanwhile.
            let role = self.dist.remote_ops.remove(&(trans, token))?.role;
            return Some(match answer {
                LqhAnswer::Conf {
                    trans,
                    op_index,
                    row,
                    fired,
                    committed,
                    ..
                } => LqhAnswer::Conf {
                    trans,
                    op_index,
                    row,
                    role,
                    fired,
                    committed,
                },
                LqhAnswer::Ref {
                    trans,
                    op_index,
                    error,
                    backup,
                    ..
                } => LqhAnswer::Ref {
                    trans,
                    op_index,
                    error,
                    role,
                    backup,
                },
            });
        }
        // Kept until it can be sent (a TC waits for it, and a lost one would hold its locks); a
        // TC that is gone hears nothing, and its transactions here are rolled back when its
        // link's loss is handled.
        match answer {
            LqhAnswer::Conf {
                trans,
                op_index,
                row,
                fired,
                committed,
                ..
            } => {
                let conf = LqhKeyConf {
                    flags: if committed {
                        lqh::LQHKEYCONF_COMMITTED
                    } else {
                        0
                    },
                    trans,
                    token,
                    op_index,
                    row: row.map(|r| r.unpack()),
                    fired: fired
                        .into_iter()
                        .map(|c| FiredChange {
                            hidden_table_id: c.hidden_table_id,
                            op_type: c.op_type,
                            key: c.key,
                            pk: c.pk.into_vec(),
                        })
                        .collect(),
                };
                self.unsent.send(
                    out,
                    tc_node,
                    header(lgsn::LQHKEYCONF, block::DBTC, block::DBLQH),
                    &mut |b| conf.encode(b),
                )
            }
            LqhAnswer::Ref {
                trans,
                op_index,
                error,
                backup,
                ..
            } => {
                let refusal = LqhKeyRef {
                    flags: if backup { lqh::LQHKEYREF_BACKUP } else { 0 },
                    trans,
                    token,
                    op_index,
                    code: error.code,
                    detail: error.message,
                };
                self.unsent.send(
                    out,
                    tc_node,
                    header(lgsn::LQHKEYREF, block::DBTC, block::DBLQH),
                    &mut |b| refusal.encode(b),
                )
            }
        }
        None
    }

    /// Frames of the data-node protocol. Only data nodes may send them.
    pub(super) fn on_data_node_frame(
        &mut self,
        from: NodeId,
        header: &FrameHeader,
        payload: &[u8],
        out: &mut dyn Outbox,
    ) -> Result<(), ProtocolViolation> {
        if !self.dist.is_data_node(from) {
            return Err(ProtocolViolation(format!(
                "signal {} is for data nodes, and node {from} is not one",
                header.signal
            )));
        }
        match header.signal {
            lgsn::LQHKEYREQ => self.on_remote_key_req(lqh::LqhKeyReq::decode(payload)?)?,
            lgsn::LQHKEYCONF => {
                let conf = LqhKeyConf::decode(payload)?;
                // The last replica committed on its own: no commit round goes there. Believed
                // only for an operation this TC sent to that very node with the order to.
                let committed = conf.flags & lqh::LQHKEYCONF_COMMITTED != 0
                    && self
                        .dist
                        .remote_ops
                        .get(&(conf.trans, conf.token))
                        .is_some_and(|op| op.to == from && op.commit_at_last);
                if committed {
                    self.tc.participant_committed(conf.trans, from);
                }
                let answer = LqhAnswer::Conf {
                    committed,
                    trans: conf.trans,
                    op_index: conf.op_index,
                    row: conf.row.map(|values| Row::pack(&values)),
                    role: OpRole::Remote {
                        tc_node: self.me,
                        token: conf.token,
                    },
                    fired: conf
                        .fired
                        .into_iter()
                        .map(|c| IndexChange {
                            hidden_table_id: c.hidden_table_id,
                            op_type: c.op_type,
                            key: c.key,
                            pk: c.pk.into_boxed_slice(),
                        })
                        .collect(),
                };
                self.jobs.push_back(Signal::LqhAnswer(Box::new(answer)));
            }
            lgsn::LQHKEYREF => {
                let r = LqhKeyRef::decode(payload)?;
                let answer = LqhAnswer::Ref {
                    trans: r.trans,
                    op_index: r.op_index,
                    error: NdbError::from_wire(r.code, &r.detail),
                    role: OpRole::Remote {
                        tc_node: self.me,
                        token: r.token,
                    },
                    backup: r.flags & lqh::LQHKEYREF_BACKUP != 0,
                };
                self.jobs.push_back(Signal::LqhAnswer(Box::new(answer)));
            }
            lgsn::LQH_COMMITREQ | lgsn::LQH_ABORTREQ => {
                let trans = TransSignal::decode(payload)?.trans;
                let owner = self.dist.foreign.get(&trans).copied();
                let own = self.tc.knows(trans) && !self.tc.is_scan_part(trans);
                if owner.is_some_and(|tc| tc != from) || (owner.is_none() && own) {
                    // Not that node's transaction here: nothing of it is touched.
                    tracing::warn!(node = %from, trans, "commit or abort of a transaction another TC runs; ignored");
                    return Ok(());
                }
                self.jobs
                    .push_back(if header.signal == lgsn::LQH_COMMITREQ {
                        Signal::LqhCommit {
                            trans,
                            tc_node: from,
                        }
                    } else {
                        Signal::LqhAbort {
                            trans,
                            tc_node: from,
                        }
                    });
            }
            lgsn::TC_FAIL_QUERY => {
                let query = lqh::TcFailQuery::decode(payload)?;
                let tc_node = NodeId(query.tc_node);
                if self.dist.up.contains(&tc_node) {
                    // Not handled here yet: its last frames may still be queued.
                    self.dist
                        .deferred_queries
                        .push((from, query.trans, tc_node));
                } else {
                    self.answer_tc_fail_query(from, query.trans, out);
                }
            }
            lgsn::TC_FAIL_ANSWER => {
                let answer = lqh::TcFailAnswer::decode(payload)?;
                if let Some((_, awaiting, committed)) = self.dist.resolving.get_mut(&answer.trans) {
                    awaiting.retain(|&n| n != from);
                    *committed |= answer.outcome == lqh::TransOutcome::Committed;
                }
                self.resolve_if_answered(answer.trans, out);
            }
            lgsn::LQH_COMMITCONF | lgsn::LQH_ABORTCONF => {
                let trans = TransSignal::decode(payload)?.trans;
                self.jobs.push_back(Signal::RoundDone { trans, node: from });
            }
            other => return Err(ProtocolViolation(format!("unknown signal {other}"))),
        }
        Ok(())
    }

    fn on_remote_key_req(&mut self, wire: lqh::LqhKeyReq) -> Result<(), ProtocolViolation> {
        let tc_node = NodeId(wire.tc_node);
        let chain: Vec<NodeId> = wire.chain.iter().map(|&n| NodeId(n)).collect();
        if let Some(bad) = std::iter::once(tc_node)
            .chain(chain.iter().copied())
            .find(|&n| !self.dist.is_data_node(n))
        {
            return Err(ProtocolViolation(format!(
                "LQHKEYREQ names node {bad}, which is not a data node"
            )));
        }
        // A transaction id is an API node id over a request id (`tc::trans_id`); anything
        // wider would collide with the row lock's "no holder" value.
        let (api, request_id) = super::tc::trans_parts(wire.trans);
        if super::tc::trans_id(api, request_id) != wire.trans {
            return Err(ProtocolViolation(format!(
                "LQHKEYREQ names transaction {:#x}, which no API node can have",
                wire.trans
            )));
        }
        let req = LqhKeyReq {
            trans: wire.trans,
            op_index: wire.op_index,
            op_type: wire.op_type,
            lock_mode: wire.lock_mode,
            table_id: wire.table_id,
            fragment: wire.fragment,
            key_bytes: OpKey::new(&wire.key_bytes),
            key: wire.key,
            attrs: wire.attrs,
            role: OpRole::Remote {
                tc_node,
                token: wire.token,
            },
            chain,
            // Only another node's TC orders an early commit here (never this node's own).
            commit_at_last: tc_node != self.me
                && wire.flags & lqh::LQHKEY_COMMIT_AT_LAST_REPLICA != 0,
            backup: wire.flags & lqh::LQHKEY_BACKUP != 0,
        };
        if tc_node != self.me && !self.dist.up.contains(&tc_node) {
            // Its coordinator failed: nobody would commit, abort or hear of it.
            return Ok(());
        }
        if tc_node != self.me && !is_committed_read(req.op_type, req.lock_mode) {
            if self.dist.ended.contains_key(&req.trans) {
                // The transaction's abort overtook this operation: refused, so that it takes
                // no lock nobody would release. (Its TC no longer waits for the answer.)
                let answer = LqhAnswer::Ref {
                    trans: req.trans,
                    op_index: req.op_index,
                    error: NdbError::with_detail(4010, "the transaction already ended here"),
                    role: req.role,
                    backup: req.backup,
                };
                self.jobs.push_back(Signal::LqhAnswer(Box::new(answer)));
                return Ok(());
            }
            self.dist.foreign.entry(req.trans).or_insert(tc_node);
        }
        self.prefetch_if_alone(&req);
        self.jobs.push_back(Signal::LqhKeyReq(Box::new(req)));
        Ok(())
    }

    /// TC: the next round of a commit or an abort, or the end of the transaction when every
    /// round is done.
    pub(super) fn tc_round(&mut self, trans: TransId, out: &mut dyn Outbox) {
        let commit = self.tc.is_committing(trans);
        let nodes = self.tc.next_round(trans);
        if nodes.is_empty() {
            return self.finish_transaction(trans, out);
        }
        for node in nodes {
            if node == self.me && self.dist.is_foreign(trans) {
                // This node's own record of another node's transaction (its scans attached
                // it here): that TC commits or aborts what the transaction holds here.
                self.jobs.push_back(Signal::RoundDone { trans, node });
            } else if node == self.me {
                self.jobs.push_back(if commit {
                    Signal::LqhCommit {
                        trans,
                        tc_node: node,
                    }
                } else {
                    Signal::LqhAbort {
                        trans,
                        tc_node: node,
                    }
                });
            } else if !self.dist.up.contains(&node) {
                // Nothing of it can be reached there any more.
                self.jobs.push_back(Signal::RoundDone { trans, node });
            } else {
                let signal = if commit {
                    lgsn::LQH_COMMITREQ
                } else {
                    lgsn::LQH_ABORTREQ
                };
                self.send_trans_signal(node, signal, block::DBLQH, trans, out);
            }
        }
    }

    /// Sends a commit or abort signal naming `trans`, kept until it can be sent (a commit round
    /// must not be lost to a full send buffer).
    fn send_trans_signal(
        &mut self,
        to: NodeId,
        signal: u16,
        receiver_block: u16,
        trans: TransId,
        out: &mut dyn Outbox,
    ) {
        let sender_block = if receiver_block == block::DBLQH {
            block::DBTC
        } else {
            block::DBLQH
        };
        self.unsent.send(
            out,
            to,
            header(signal, receiver_block, sender_block),
            &mut |b| TransSignal { trans }.encode(b),
        );
    }

    /// LQH: commits or undoes what `trans` holds here and confirms to its TC.
    pub(super) fn lqh_finish(
        &mut self,
        trans: TransId,
        tc_node: NodeId,
        commit: bool,
        out: &mut dyn Outbox,
    ) {
        if tc_node != self.me {
            // First, so that none of its own queued work is granted.
            self.dist.end_foreign(trans, commit);
        }
        let (tc, dist) = (&self.tc, &self.dist);
        let granted = if commit {
            self.lqh.commit(trans, &|t| live(tc, dist, t))
        } else {
            self.lqh.abort(trans, &|t| live(tc, dist, t))
        };
        self.resume(granted);
        if tc_node == self.me {
            self.jobs.push_back(Signal::RoundDone {
                trans,
                node: self.me,
            });
        } else if self.dist.up.contains(&tc_node) {
            let signal = if commit {
                lgsn::LQH_COMMITCONF
            } else {
                lgsn::LQH_ABORTCONF
            };
            self.send_trans_signal(tc_node, signal, block::DBTC, trans, out);
        }
    }
}
