//! The hash index of a fragment's slots: key hash → slot id, in one flat array.
//!
//! Linear probing over a power-of-two array of `u64` entries, each the low 32 bits of the key's
//! hash (its *tag*) and a slot id. A lookup's first probe is `entries[hash & mask]`, a place
//! known from the hash alone, so a warm-up can touch the entries of many keys before it reads
//! any of them, and their cache misses overlap (see `Lqh::warm`). A SwissTable (hashbrown)
//! reads a control group and then a bucket elsewhere: two dependent misses per key.
//!
//! The tag is the hash's low 32 bits, so an entry's home (`tag & mask`) is known without the
//! key: growth re-places entries without rehashing keys, and removal shifts later entries of
//! the probe run back (no tombstones). The table holds at most 3/4 of its entries, and fewer
//! than 2^32 (the mask must fit in the tag).
//!
//! Equal tags do not mean equal keys: callers compare the slot's key (`SlotStore::id_of`).

/// The slot id of a row in its fragment: stable while the slot exists.
pub type SlotId = u32;

/// An unused entry. No entry in use equals it: slot id `u32::MAX` is never stored.
const EMPTY: u64 = u64::MAX;

/// Entries in a new table's array.
const ENTRIES_MIN: usize = 16;

#[derive(Clone)]
pub struct SlotIndex {
    entries: Vec<u64>,
    len: usize,
}

impl Default for SlotIndex {
    fn default() -> Self {
        SlotIndex {
            entries: vec![EMPTY; ENTRIES_MIN],
            len: 0,
        }
    }
}

impl std::fmt::Debug for SlotIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotIndex")
            .field("len", &self.len)
            .field("entries", &self.entries.len())
            .finish()
    }
}

fn entry(hash: u64, id: SlotId) -> u64 {
    (u64::from(hash as u32) << 32) | u64::from(id)
}

fn tag_of(entry: u64) -> u32 {
    (entry >> 32) as u32
}

fn id_of(entry: u64) -> SlotId {
    entry as u32
}

impl SlotIndex {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn mask(&self) -> usize {
        self.entries.len() - 1
    }

    /// The entries a lookup of `hash` reads first.
    fn home(&self, hash: u64) -> usize {
        hash as u32 as usize & self.mask()
    }

    /// Reads the entry a lookup of `hash` starts at: brings it into the cache.
    pub fn touch(&self, hash: u64) -> u64 {
        self.entries[self.home(hash)]
    }

    /// Asks the CPU to bring in the entry a lookup of `hash` reads first, and goes on at once.
    /// A load would do the same but hold up everything after it once the CPU's window fills,
    /// which a miss of ~100 ns does; a prefetch instruction retires without waiting. The data
    /// node's only `unsafe`.
    #[allow(unsafe_code)]
    pub fn prefetch(&self, hash: u64) {
        let entry: *const u64 = &self.entries[self.home(hash)];
        #[cfg(target_arch = "x86_64")]
        // SAFETY: PREFETCHT0 is a hint: it changes no memory and no register the program can
        // see, and it does not fault; `entry` points into `entries` anyway.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(entry.cast());
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = entry;
    }

    /// The first slot id whose tag matches `hash` and for which `is_key` holds.
    pub fn find(&self, hash: u64, mut is_key: impl FnMut(SlotId) -> bool) -> Option<SlotId> {
        let mask = self.mask();
        let mut at = self.home(hash);
        loop {
            let e = self.entries[at];
            if e == EMPTY {
                return None;
            }
            if tag_of(e) == hash as u32 && is_key(id_of(e)) {
                return Some(id_of(e));
            }
            at = (at + 1) & mask;
        }
    }

    /// Adds slot `id` under `hash`. `id` must not be `u32::MAX`.
    pub fn insert(&mut self, hash: u64, id: SlotId) {
        debug_assert_ne!(id, SlotId::MAX, "slot id u32::MAX is the empty entry");
        if (self.len + 1) * 4 > self.entries.len() * 3 {
            self.grow();
        }
        self.place(entry(hash, id));
        self.len += 1;
    }

    /// Removes slot `id` stored under `hash`. False when it was not there.
    pub fn remove(&mut self, hash: u64, id: SlotId) -> bool {
        let mask = self.mask();
        let wanted = entry(hash, id);
        let mut at = self.home(hash);
        loop {
            let e = self.entries[at];
            if e == EMPTY {
                return false;
            }
            if e == wanted {
                break;
            }
            at = (at + 1) & mask;
        }
        // Backward shift: move each later entry of the run into the hole when the hole lies
        // between its home and its place (cyclically), so every entry stays reachable.
        let mut hole = at;
        let mut next = (hole + 1) & mask;
        loop {
            let e = self.entries[next];
            if e == EMPTY {
                break;
            }
            let home = tag_of(e) as usize & mask;
            let distance_now = next.wrapping_sub(home) & mask;
            let distance_hole = hole.wrapping_sub(home) & mask;
            if distance_hole <= distance_now {
                self.entries[hole] = e;
                hole = next;
            }
            next = (next + 1) & mask;
        }
        self.entries[hole] = EMPTY;
        self.len -= 1;
        true
    }

    pub fn clear(&mut self) {
        self.entries.clear();
        self.entries.resize(ENTRIES_MIN, EMPTY);
        self.len = 0;
    }

    fn place(&mut self, e: u64) {
        let mask = self.mask();
        let mut at = tag_of(e) as usize & mask;
        while self.entries[at] != EMPTY {
            at = (at + 1) & mask;
        }
        self.entries[at] = e;
    }

    fn grow(&mut self) {
        let size = self.entries.len() * 2;
        assert!(
            size <= 1 << 32,
            "slot index past 2^32 entries (DataMemory bounds the slots long before)"
        );
        let old = std::mem::replace(&mut self.entries, vec![EMPTY; size]);
        for e in old.into_iter().filter(|&e| e != EMPTY) {
            self.place(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u64),
        Remove(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Few distinct low bits, so that tags collide and probe runs wrap and interleave.
        prop_oneof![
            (0u64..64).prop_map(|h| Op::Insert(h.wrapping_mul(0x9e37_79b9_0000_0001))),
            (0u64..200).prop_map(|h| Op::Insert(h << 20)),
            any::<usize>().prop_map(Op::Remove),
        ]
    }

    proptest! {
        /// Whatever the inserts and removals, every id stored is found under its hash, and
        /// nothing removed is.
        #[test]
        fn agrees_with_a_map(ops in prop::collection::vec(op(), 1..400)) {
            let mut index = SlotIndex::default();
            let mut model: HashMap<SlotId, u64> = HashMap::new();
            let mut next_id = 0;
            for op in ops {
                match op {
                    Op::Insert(hash) => {
                        index.insert(hash, next_id);
                        model.insert(next_id, hash);
                        next_id += 1;
                    }
                    Op::Remove(pick) if !model.is_empty() => {
                        let mut ids: Vec<_> = model.keys().copied().collect();
                        ids.sort_unstable();
                        let id = ids[pick % ids.len()];
                        let hash = model.remove(&id).expect("picked from the model");
                        prop_assert!(index.remove(hash, id));
                        prop_assert!(!index.remove(hash, id));
                    }
                    Op::Remove(_) => {}
                }
                prop_assert_eq!(index.len(), model.len());
                for (&id, &hash) in &model {
                    prop_assert_eq!(index.find(hash, |i| i == id), Some(id));
                }
            }
            index.clear();
            prop_assert!(index.is_empty());
            for (&id, &hash) in &model {
                prop_assert_eq!(index.find(hash, |i| i == id), None);
            }
        }
    }

    #[test]
    fn a_tag_match_is_not_a_key_match() {
        let mut index = SlotIndex::default();
        index.insert(7, 1);
        index.insert(7 | (1 << 40), 2);
        assert_eq!(index.find(7, |_| true), Some(1));
        assert_eq!(index.find(7, |id| id == 2), Some(2));
        assert_eq!(index.find(7, |_| false), None);
        assert_eq!(index.find(8, |_| true), None);
    }
}
