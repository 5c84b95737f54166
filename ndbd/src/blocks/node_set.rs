//! A set of node ids as a bitmap (NDB's `NodeBitmask`): every node id a config can name
//! (1..=255) fits, it is `Copy`, and adding, removing and testing take no allocation. TC keeps a
//! transaction's participants and the nodes a commit round waits for in these.

use rndb_config::NodeId;

/// Bits in a [`NodeSet`]: node ids 0..=255.
const BITS: usize = 256;
const WORDS: usize = BITS / 64;

/// A set of node ids, iterated in ascending order.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeSet {
    words: [u64; WORDS],
}

impl NodeSet {
    pub const fn new() -> NodeSet {
        NodeSet { words: [0; WORDS] }
    }

    /// Where `node`'s bit is; `None` for an id past the bitmap (no config names one).
    fn position(node: NodeId) -> Option<(usize, u64)> {
        let n = usize::from(node.0);
        (n < BITS).then(|| (n / 64, 1u64 << (n % 64)))
    }

    /// Adds `node`; true when it was not in the set. An id past 255 is ignored (and caught in
    /// debug builds): the config parser refuses such ids.
    pub fn insert(&mut self, node: NodeId) -> bool {
        let Some((word, bit)) = Self::position(node) else {
            debug_assert!(false, "node id {} does not fit a NodeSet", node.0);
            return false;
        };
        let new = self.words[word] & bit == 0;
        self.words[word] |= bit;
        new
    }

    /// Removes `node`; true when it was in the set.
    pub fn remove(&mut self, node: NodeId) -> bool {
        let Some((word, bit)) = Self::position(node) else {
            return false;
        };
        let had = self.words[word] & bit != 0;
        self.words[word] &= !bit;
        had
    }

    pub fn contains(&self, node: NodeId) -> bool {
        Self::position(node).is_some_and(|(word, bit)| self.words[word] & bit != 0)
    }

    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The nodes in both sets.
    pub fn intersection(&self, other: &NodeSet) -> NodeSet {
        let mut words = self.words;
        for (w, o) in words.iter_mut().zip(other.words) {
            *w &= o;
        }
        NodeSet { words }
    }

    /// The nodes of this set that are not in `other`.
    pub fn difference(&self, other: &NodeSet) -> NodeSet {
        let mut words = self.words;
        for (w, o) in words.iter_mut().zip(other.words) {
            *w &= !o;
        }
        NodeSet { words }
    }

    /// True when every node of this set is in `other`.
    pub fn is_subset(&self, other: &NodeSet) -> bool {
        self.difference(other).is_empty()
    }

    /// The bitmap as it crosses the wire (`rndb_protocol::dih::GcpSignal::nodes`): node n is
    /// bit n % 64 of word n / 64.
    pub const fn words(&self) -> [u64; WORDS] {
        self.words
    }

    pub const fn from_words(words: [u64; WORDS]) -> NodeSet {
        NodeSet { words }
    }

    /// The nodes, in ascending order.
    pub fn iter(&self) -> Iter {
        Iter {
            words: self.words,
            word: 0,
        }
    }
}

impl FromIterator<NodeId> for NodeSet {
    fn from_iter<I: IntoIterator<Item = NodeId>>(nodes: I) -> NodeSet {
        let mut set = NodeSet::new();
        for node in nodes {
            set.insert(node);
        }
        set
    }
}

impl IntoIterator for NodeSet {
    type Item = NodeId;
    type IntoIter = Iter;

    fn into_iter(self) -> Iter {
        self.iter()
    }
}

impl std::fmt::Debug for NodeSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter().map(|n| n.0)).finish()
    }
}

/// The nodes of a [`NodeSet`], in ascending order.
#[derive(Clone, Debug)]
pub struct Iter {
    words: [u64; WORDS],
    word: usize,
}

impl Iterator for Iter {
    type Item = NodeId;

    fn next(&mut self) -> Option<NodeId> {
        while self.word < WORDS {
            let w = self.words[self.word];
            if w != 0 {
                let bit = w.trailing_zeros() as usize;
                self.words[self.word] = w & (w - 1);
                return Some(NodeId((self.word * 64 + bit) as u16));
            }
            self.word += 1;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// A NodeSet behaves as an ordered set of node ids under any inserts and removes.
        #[test]
        fn behaves_as_an_ordered_set(ops in proptest::collection::vec((any::<bool>(), 0u16..256), 0..64)) {
            let mut set = NodeSet::new();
            let mut model = BTreeSet::new();
            for (insert, id) in ops {
                let node = NodeId(id);
                if insert {
                    prop_assert_eq!(set.insert(node), model.insert(id));
                } else {
                    prop_assert_eq!(set.remove(node), model.remove(&id));
                }
                prop_assert_eq!(set.contains(node), model.contains(&id));
            }
            prop_assert_eq!(set.iter().map(|n| n.0).collect::<Vec<_>>(), model.iter().copied().collect::<Vec<_>>());
            prop_assert_eq!(set.len(), model.len());
            prop_assert_eq!(set.is_empty(), model.is_empty());
            let evens: NodeSet = (0..256).step_by(2).map(NodeId).collect();
            let both: Vec<u16> = model.iter().copied().filter(|id| id % 2 == 0).collect();
            prop_assert_eq!(set.intersection(&evens).iter().map(|n| n.0).collect::<Vec<_>>(), both);
            prop_assert!(set.intersection(&evens).is_subset(&set));
            prop_assert!(set.difference(&evens).iter().all(|n| n.0 % 2 == 1));
            prop_assert_eq!(NodeSet::from_words(set.words()), set);
        }
    }
}
