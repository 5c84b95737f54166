//! QMGR: membership. Which data nodes the cluster has, which of them this node has a live link
//! to, whether the cluster has started (every data node connected once), which node is master
//! (the lowest live id: DICT's master), and node failure: when a data node's link closes, QMGR
//! marks it failed and tells every block (NDB's NODE_FAILREP), each of which cleans up its own
//! records. Heartbeats, node restart and arbitration are later steps.

use std::collections::BTreeSet;
use std::time::Instant;

use rndb_config::{ClusterConfig, NodeId};
use rndb_protocol::lqh::{gsn as lgsn, ApiRegConf};
use rndb_protocol::signals::{self, gsn};
use rndb_protocol::NdbError;
use rndb_transporter::FrameHeader;

use super::node_set::NodeSet;
use super::tc::{self, ApiAnswer};
use super::{reply, Kernel, Outbox};

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
    /// Data nodes whose link dropped: never used again (node restart is not implemented).
    failed: BTreeSet<NodeId>,
    /// The start waits for a restore (see `hold_start`).
    held: bool,
}

impl Qmgr {
    pub fn new(config: &ClusterConfig, me: NodeId) -> Qmgr {
        let mut data_nodes: Vec<NodeId> = config.data_nodes.iter().map(|n| n.node_id).collect();
        data_nodes.sort_unstable();
        let started = data_nodes.iter().all(|&n| n == me);
        Qmgr {
            me,
            data_nodes,
            up: BTreeSet::new(),
            started,
            failed: BTreeSet::new(),
            held: false,
        }
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

    pub fn set_started(&mut self) {
        self.started = true;
        self.held = false;
    }

    /// Data nodes in the config, this one included.
    pub fn data_node_count(&self) -> usize {
        self.data_nodes.len()
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
        self.failed.iter().copied().collect()
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

    /// True when data node `node` was seen to fail (it is never used again).
    pub fn has_failed(&self, node: NodeId) -> bool {
        self.qmgr.failed.contains(&node)
    }

    /// A link came up. When it completes the set of data nodes, the cluster has started.
    pub fn on_connect(&mut self, node: NodeId) {
        if !self.qmgr.is_data_node(node) {
            return;
        }
        if self.qmgr.failed.contains(&node) {
            // Its partitions here moved on without it; rejoining needs node restart (copying
            // them back), which is not implemented: the link stays unused.
            tracing::warn!(node = %node, "data node reconnected after a failure; node restart is not implemented, so it is not used again");
            return;
        }
        self.qmgr.up.insert(node);
        if self.qmgr.held {
            // A start with files goes on when every node is connected (see `restart.rs`).
            self.jobs.push_back(super::Signal::Timer);
            return;
        }
        if !self.qmgr.started && self.qmgr.up.len() + 1 == self.qmgr.data_nodes.len() {
            self.qmgr.started = true;
            tracing::info!(data_nodes = ?self.qmgr.data_nodes, "cluster started: every data node is connected");
        }
    }

    /// A data node's link closed (NDB's NODE_FAILREP, which QMGR sends every block): the node
    /// is failed for good (node restart is a later step), and each block cleans up what it held
    /// with it: LQH resolves the transactions that node coordinated here, TC fails what it had
    /// out there, DICT fails a schema change or index build that waited for it.
    pub(crate) fn node_failrep(&mut self, node: NodeId, out: &mut dyn Outbox, now: Instant) {
        if !self.qmgr.up.remove(&node) {
            // A link of a node that already failed (see `on_connect`): nothing was using it.
            return;
        }
        self.qmgr.failed.insert(node);
        self.restart_node_failrep(out);
        self.dih_node_failrep(node, out, now);
        tracing::error!(node = %node, "data node failed: its partitions' backups take over, transactions touching it abort");
        self.lqh_node_failrep(node, out);
        self.gcp_try_save(out);
        self.tc_node_failrep(node);
        self.dict_node_failrep(node, out, now);
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
        if self.qmgr.is_data_node(from) {
            return false;
        }
        let error = NdbError::with_detail(
            4009,
            "the cluster has not started: not every data node is connected",
        );
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
            _ => return false,
        }
        true
    }
}
