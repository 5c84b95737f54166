//! Final answers that must not be lost: TC_EXECUTE_CONF/REF, a committed execute's
//! TCKEY_ROW_CONF, SCAN_TABCONF/REF, dictionary and ping answers each end a request the API
//! waits for. One that meets a full send buffer is kept and sent on the next turn, before any
//! other final answer to that node (so answers keep their order). The queue per node is bounded
//! (MaxNoOfConcurrentTransactions + MaxNoOfConcurrentScans + a few dictionary requests: what a
//! well-behaved API can have outstanding; a kept TCKEY_ROW_CONF holds one row, so the bytes are
//! bounded by that count times the largest frame); an API node past the bound does not read its
//! answers, and its link is closed.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use rndb_config::NodeId;
use rndb_transporter::FrameHeader;

use super::{Outbox, SendFailure};

/// Dictionary and ping requests an API may have outstanding besides transactions and scans.
pub const OTHER_REQUESTS_MAX: usize = 16;

/// Unsent final answers per API node.
#[derive(Debug)]
pub struct Unsent {
    /// Ordered by node, so that kept answers are retried in the same order every run (the
    /// simulator replays a seed only if nothing depends on a hasher's random seed).
    queues: BTreeMap<NodeId, VecDeque<(FrameHeader, Vec<u8>)>>,
    /// Nodes whose link is being closed: their answers are dropped.
    closing: BTreeSet<NodeId>,
    /// Answers kept per API node at most.
    max: usize,
    /// Data nodes, and how many signals are kept for one at most: a data node link carries
    /// operations, answers and commit rounds of every transaction both nodes run, up to
    /// MaxNoOfConcurrentOperations + 2 × MaxNoOfConcurrentTransactions.
    data_nodes: BTreeSet<NodeId>,
    data_node_max: usize,
}

impl Unsent {
    pub fn new(max: usize) -> Unsent {
        Unsent {
            queues: BTreeMap::new(),
            closing: BTreeSet::new(),
            max,
            data_nodes: BTreeSet::new(),
            data_node_max: max,
        }
    }

    /// Links to `nodes` keep up to `max` signals each.
    pub fn with_data_nodes(mut self, nodes: impl IntoIterator<Item = NodeId>, max: usize) -> Self {
        self.data_nodes = nodes.into_iter().collect();
        self.data_node_max = max;
        self
    }

    /// Sends a final answer, or keeps it when the node's send buffer is full (or answers
    /// before it still wait).
    pub fn send(
        &mut self,
        out: &mut dyn Outbox,
        to: NodeId,
        header: FrameHeader,
        encode: &mut dyn FnMut(&mut Vec<u8>),
    ) {
        if self.closing.contains(&to) {
            return;
        }
        if self.queues.get(&to).is_none_or(|q| q.is_empty()) {
            match out.send(to, header, encode) {
                // Gone: the link is being closed; nobody waits any more.
                Ok(()) | Err(SendFailure::Gone) => return,
                Err(SendFailure::Overloaded) => {}
            }
        }
        let max = if self.data_nodes.contains(&to) {
            self.data_node_max
        } else {
            self.max
        };
        let queue = self.queues.entry(to).or_default();
        if queue.len() >= max {
            tracing::warn!(
                node = %to,
                kept = queue.len(),
                "closing the link: the node does not read what is sent to it"
            );
            self.queues.remove(&to);
            self.closing.insert(to);
            out.close(
                to,
                format!("more than {max} answers wait for its send buffer"),
            );
            return;
        }
        let mut payload = Vec::new();
        encode(&mut payload);
        queue.push_back((header, payload));
    }

    /// Sends kept answers, in order, while the links take them.
    pub fn retry(&mut self, out: &mut dyn Outbox) {
        self.queues.retain(|&to, queue| {
            while let Some((header, payload)) = queue.front() {
                match out.send(to, *header, &mut |b| b.extend_from_slice(payload)) {
                    Ok(()) => {
                        queue.pop_front();
                    }
                    Err(SendFailure::Overloaded) => return true,
                    Err(SendFailure::Gone) => return false,
                }
            }
            false
        });
    }

    /// True when answers wait for a send buffer.
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// The node's link closed: its answers go.
    pub fn forget(&mut self, node: NodeId) {
        self.queues.remove(&node);
        self.closing.remove(&node);
    }
}
