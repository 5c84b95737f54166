//! DIH: the partition map of this cluster, shared with API nodes (see
//! [`rndb_config::partition`]), under the block's NDB name.

pub use rndb_config::partition::{key_hash, PartitionMap as Dih};
