//! DIH: the partition map of this cluster, shared with API nodes (see
//! [`rndb_config::partition`]), under the block's NDB name, and which of a partition's replicas
//! are alive (DIH's answer to TC's DIGETNODESREQ: the map with failed nodes left out).

pub mod gcp;

pub use rndb_config::partition::{key_hash, PartitionMap as Dih};

use rndb_config::NodeId;
use rndb_protocol::lqh;

use super::Kernel;

/// A partition's replicas, primary first: at most [`lqh::REPLICAS_MAX`] node ids, kept inline
/// (every key operation looks them up, so they cost no allocation).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Replicas {
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
    pub(crate) fn push(&mut self, node: NodeId) {
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

impl Kernel {
    /// The replicas of `partition` that are alive and can be read, primary first: the
    /// partition map with failed nodes and nodes still copying (a node restart) left out, and
    /// rejoined nodes last (see `Qmgr::chain_order`).
    pub(crate) fn live_replicas(&self, partition: u32) -> Replicas {
        let mut live = Replicas::default();
        for node in self.qmgr.chain_order(self.dih.replicas(partition)) {
            if self.qmgr.is_alive(node) && !self.qmgr.copying.contains(node) {
                live.push(node);
            }
        }
        live
    }
}
