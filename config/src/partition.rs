//! The partition map (NDB's DIH distribution): which partition a key belongs to, and which
//! nodes hold each partition. Data nodes and API nodes build it from the same config, so they
//! place every key alike.
//!
//! A key's distribution hash is xxh3 (never a randomly seeded hasher) of its canonical encoding,
//! so every data node and every API node place it alike. Partitions are spread over node
//! groups; each partition has a primary replica and NoOfReplicas−1 backups inside its group,
//! primaries rotated over the group's nodes.

use crate::{ClusterConfig, NodeId};

/// Partitions each data node is the primary of: NDB 8's default (PartitionsPerNode=2, which
/// rndb's config does not read yet). More than one gives every table several fragments even on
/// one data node, so scans run in parallel over fragments and sorted scans merge.
pub const PARTITIONS_PER_NODE: usize = 2;

/// The partition map of this cluster (the same for every table).
#[derive(Debug, Clone)]
pub struct PartitionMap {
    /// For each partition: its replicas, the primary first.
    partitions: Vec<Vec<NodeId>>,
}

impl PartitionMap {
    /// [`PARTITIONS_PER_NODE`] partitions per data node, primaries rotated over each group's
    /// nodes, so that each node is the primary of as many partitions as any other.
    pub fn new(config: &ClusterConfig) -> PartitionMap {
        let mut partitions = Vec::new();
        let replicas = config.no_of_replicas.max(1) as usize;
        for _ in 0..PARTITIONS_PER_NODE {
            for rotation in 0..replicas {
                for group in &config.node_groups {
                    let mut nodes = group.nodes.clone();
                    let len = nodes.len().max(1);
                    nodes.rotate_left(rotation % len);
                    partitions.push(nodes);
                }
            }
        }
        if partitions.is_empty() {
            // A config always has a data node; this keeps the map usable all the same.
            partitions.push(
                config
                    .data_nodes
                    .iter()
                    .map(|n| n.node_id)
                    .take(1)
                    .collect(),
            );
        }
        PartitionMap { partitions }
    }

    pub fn partition_count(&self) -> u32 {
        self.partitions.len() as u32
    }

    /// The partition of a key, from its distribution hash.
    pub fn partition_of(&self, hash: u64) -> u32 {
        (hash % self.partitions.len() as u64) as u32
    }

    /// The primary replica's node of a partition.
    pub fn primary(&self, partition: u32) -> Option<NodeId> {
        self.replicas(partition).first().copied()
    }

    /// The replicas of a partition, primary first.
    pub fn replicas(&self, partition: u32) -> &[NodeId] {
        self.partitions
            .get(partition as usize)
            .map_or(&[], Vec::as_slice)
    }
}

/// The distribution hash of an encoded key.
pub fn key_hash(key_bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key_bytes)
}
