//! Hashing for maps keyed by request ids and transaction ids, which are handed out in sequence.
//!
//! A map of the transactions in flight is filled and emptied nearly in order: an API node
//! numbers its requests one after another, and they end mostly in the order they began. A
//! general hash scatters consecutive ids over the whole table, so with thousands in flight every
//! lookup lands on a line out of the cache. [`SequentialIds`] keeps the order instead: an id's
//! bucket is the id itself plus an offset, so consecutive ids take neighbouring buckets and the
//! table is walked like an array (NDB indexes its transaction records by number for the same
//! reason). hashbrown takes a bucket from a hash's low bits and a 7-bit tag from its top bits;
//! the tag comes from a multiplicative hash of the key, so the 16 neighbours a probe compares
//! still differ.
//!
//! A key of two parts (an API node and its request id, `(NodeId, u32)` or a `TransId`) is
//! placed by its low 32 bits (the request id) plus an offset drawn from its high part, so two
//! API nodes' sequences do not overlap. The offset is salted per map, so nobody outside the
//! process can choose ids that collide. Keys are meant to be integers; any other key is folded
//! eight bytes at a time, which is correct but not spread.
//!
//! ```text
//! hash = tag (bits 57..64, from key × φ) | low 32 bits: request id + salt + high part × 0x9E3779B9
//! ```

use std::hash::{BuildHasher, Hasher};

/// The top 7 bits: hashbrown's tag.
const TAG_BITS: u64 = 0xFE00_0000_0000_0000;
/// 2^64 / φ, the multiplier of Fibonacci hashing.
const PHI_64: u64 = 0x9E37_79B9_7F4A_7C15;
/// 2^32 / φ.
const PHI_32: u32 = 0x9E37_79B9;

/// Builds [`IdHasher`]s sharing one salt: the hasher of a map keyed by sequential ids.
#[derive(Clone, Copy, Debug)]
pub struct SequentialIds {
    salt: u32,
}

impl Default for SequentialIds {
    /// A salt drawn from the standard library's per-process random keys.
    fn default() -> Self {
        let mut seed = std::collections::hash_map::RandomState::new().build_hasher();
        seed.write_u8(0);
        SequentialIds {
            salt: seed.finish() as u32,
        }
    }
}

impl SequentialIds {
    /// A fixed salt, for tests that check where keys land.
    pub fn with_salt(salt: u32) -> SequentialIds {
        SequentialIds { salt }
    }
}

impl BuildHasher for SequentialIds {
    type Hasher = IdHasher;

    fn build_hasher(&self) -> IdHasher {
        IdHasher {
            key: 0,
            salt: self.salt,
        }
    }
}

/// See the module docs. Each integer written shifts the key so far up by 32 bits, so a pair
/// written as (u16, u32) has the same key as `(high << 32) | low`.
#[derive(Clone, Copy, Debug)]
pub struct IdHasher {
    key: u64,
    salt: u32,
}

impl IdHasher {
    fn push(&mut self, part: u64) {
        self.key = self.key.rotate_left(32) ^ part;
    }
}

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.push(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.push(u64::from(i));
    }

    fn write_u16(&mut self, i: u16) {
        self.push(u64::from(i));
    }

    fn write_u32(&mut self, i: u32) {
        self.push(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        self.push(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.push(i as u64);
    }

    fn finish(&self) -> u64 {
        let low = self.key as u32;
        let high = (self.key >> 32) as u32;
        let place = low
            .wrapping_add(self.salt)
            .wrapping_add(high.wrapping_mul(PHI_32));
        (self.key.wrapping_mul(PHI_64) & TAG_BITS) | u64::from(place)
    }
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::*;

    /// Consecutive ids take consecutive buckets of any table up to 2^32 buckets, and their tags
    /// spread over most of the 128 values.
    #[test]
    fn consecutive_ids_are_neighbours_with_varied_tags() {
        let ids = SequentialIds::with_salt(0xDEAD_BEEF);
        let first = u32::MAX - 500; // across the wrap of the id counter too
        let mut tags = std::collections::HashSet::new();
        for step in 0..1000u32 {
            let id = first.wrapping_add(step);
            let (this, next) = (ids.hash_one(id), ids.hash_one(id.wrapping_add(1)));
            assert_eq!(
                (next as u32).wrapping_sub(this as u32),
                1,
                "id {id}: {this:#x} then {next:#x}"
            );
            tags.insert(this >> 57);
        }
        assert!(tags.len() >= 100, "only {} tags", tags.len());
    }

    /// A (node, id) pair hashes as the transaction id `(node << 32) | id` does, and two nodes'
    /// sequences start far apart.
    #[test]
    fn pairs_hash_as_transaction_ids_and_nodes_are_apart() {
        let ids = SequentialIds::with_salt(7);
        for (node, id) in [(1u16, 5u32), (50, 1_000_000), (255, u32::MAX)] {
            let trans = (u64::from(node) << 32) | u64::from(id);
            assert_eq!(ids.hash_one((node, id)), ids.hash_one(trans));
        }
        let gap =
            (ids.hash_one((51u16, 9u32)) as u32).wrapping_sub(ids.hash_one((50u16, 9u32)) as u32);
        assert!(
            (1 << 20..u32::MAX - (1 << 20)).contains(&gap),
            "gap {gap:#x}"
        );
    }

    /// Different salts place the same id in different buckets.
    #[test]
    fn the_salt_moves_the_buckets() {
        let a = SequentialIds::with_salt(1).hash_one(42u32);
        let b = SequentialIds::with_salt(2).hash_one(42u32);
        assert_ne!(a as u32, b as u32);
        assert_eq!(a & TAG_BITS, b & TAG_BITS);
    }
}
