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
//! the probe run back (no tombstones, but in an array being emptied by growth). The table holds
//! at most 3/4 of its entries, and fewer than 2^32 (the mask must fit in the tag).
//!
//! Growth is incremental, as NDB's ACC grows its linear hash a bucket at a time: the array
//! twice the size is allocated zeroed (an unused entry is 0, so memory fresh from the OS needs
//! no writing), and every insert and removal after it moves the next `MOVES_PER_CHANGE`
//! places of the old array into it. Re-placing every entry at once held up every request for
//! as long as it took (with the slots' vector doubling, the longest batch of 1000 inserts
//! loading 300 000 rows took up to 112 ms; `cargo bench -p rndb-ndbd --bench key_path`). The new
//! array's pages may be touched for the first time as entries land in them: on this
//! machine's VM guest a fresh 2 MiB page cost 5-17 ms, a stall `ndbd` avoids by paging its
//! DataMemory in at start (`ndbd/src/data_memory.rs`, as NDB's). While the old array is emptied
//! a lookup looks in the new one, then in the old one's places not yet moved; a removal from
//! the old array leaves a tombstone there (a backward shift could move an entry behind the
//! mover). The old array is dropped once every place is moved, long before the new one fills.
//!
//! Equal tags do not mean equal keys: callers compare the slot's key (`SlotStore::id_of`).

/// The slot id of a row in its fragment: stable while the slot exists.
pub type SlotId = u32;

/// An unused entry: zero, so a new array is a zeroed allocation. No entry in use is zero: its
/// low word is the slot id plus one, and slot id `u32::MAX` is never stored.
const EMPTY: u64 = 0;

/// A removed entry in an array being emptied by growth: not empty (probe runs go on past it),
/// and no entry's (its low word, slot id plus one, is zero).
const TOMBSTONE: u64 = 1 << 32;

/// Entries in a new table's array.
const ENTRIES_MIN: usize = 16;

/// Places of the old array moved by each insert or removal while the index grows. The old
/// array has half the new one's places, and the new one fills to 3/4 (the next growth) only
/// after more than half its places' worth of inserts, so two per change would do. Moving more
/// ends the growth sooner, and with it the second look into the old array that each lookup of
/// a missing key (every insert's) makes: with 4, loading 300 000 rows took 10 % longer a batch
/// than with one re-placing at once; with 64, the same. A place of the old array goes to the
/// same place of the new one or to that place plus the old size, so the moves read one array
/// and write two in order (~0.1 µs a change).
const MOVES_PER_CHANGE: usize = 64;

#[derive(Clone)]
pub struct SlotIndex {
    entries: Vec<u64>,
    /// Entries in use, in both arrays.
    len: usize,
    /// While growing: the array before, and how many of its places were moved.
    old: Option<Moving>,
    /// [`MOVES_PER_CHANGE`], or fewer in tests (so that changes meet a growth half done).
    moves_per_change: usize,
}

impl Default for SlotIndex {
    fn default() -> Self {
        SlotIndex {
            entries: vec![EMPTY; ENTRIES_MIN],
            len: 0,
            old: None,
            moves_per_change: MOVES_PER_CHANGE,
        }
    }
}

#[derive(Clone)]
struct Moving {
    entries: Vec<u64>,
    /// Places `0..moved` were moved (what they still hold is stale).
    moved: usize,
}

impl std::fmt::Debug for SlotIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotIndex")
            .field("len", &self.len)
            .field("entries", &self.entries.len())
            .field("growing", &self.old.as_ref().map(|o| o.moved))
            .finish()
    }
}

fn entry(hash: u64, id: SlotId) -> u64 {
    debug_assert_ne!(id, SlotId::MAX, "slot id u32::MAX is never stored");
    (u64::from(hash as u32) << 32) | u64::from(id + 1)
}

fn tag_of(entry: u64) -> u32 {
    (entry >> 32) as u32
}

fn id_of(entry: u64) -> SlotId {
    (entry as u32).wrapping_sub(1)
}

/// The place of `hash`'s first probe in `entries` (a power of two of them).
fn home(entries: &[u64], hash: u64) -> usize {
    hash as u32 as usize & (entries.len() - 1)
}

/// Puts `e` in the first unused place of its probe run.
fn place(entries: &mut [u64], e: u64) {
    let mask = entries.len() - 1;
    let mut at = tag_of(e) as usize & mask;
    while entries[at] != EMPTY {
        at = (at + 1) & mask;
    }
    entries[at] = e;
}

/// The place of the first entry of `hash`'s probe run in `entries` that `is_key` takes.
fn find_in(entries: &[u64], hash: u64, is_key: &mut impl FnMut(SlotId) -> bool) -> Option<usize> {
    probe::<false>(entries, 0, hash, is_key)
}

/// As [`find_in`], in an array being emptied by growth: only its places from `from` on (not
/// moved yet), past tombstones.
fn find_in_old(
    entries: &[u64],
    from: usize,
    hash: u64,
    is_key: &mut impl FnMut(SlotId) -> bool,
) -> Option<usize> {
    probe::<true>(entries, from, hash, is_key)
}

/// The probe loop of both: `OLD` adds the old array's checks, which the new array's lookups
/// (every lookup's first) go without.
fn probe<const OLD: bool>(
    entries: &[u64],
    from: usize,
    hash: u64,
    is_key: &mut impl FnMut(SlotId) -> bool,
) -> Option<usize> {
    let mask = entries.len() - 1;
    let mut at = home(entries, hash);
    loop {
        let e = entries[at];
        if e == EMPTY {
            return None;
        }
        let live = !OLD || (at >= from && e != TOMBSTONE);
        if live && tag_of(e) == hash as u32 && is_key(id_of(e)) {
            return Some(at);
        }
        at = (at + 1) & mask;
    }
}

impl SlotIndex {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Reads the entry a lookup of `hash` starts at: brings it into the cache.
    pub fn touch(&self, hash: u64) -> u64 {
        self.entries[home(&self.entries, hash)]
    }

    /// Asks the CPU to bring in the entry a lookup of `hash` reads first, and goes on at once.
    /// A load would do the same but hold up everything after it once the CPU's window fills,
    /// which a miss of ~100 ns does; a prefetch instruction retires without waiting. The data
    /// node's only `unsafe`.
    #[allow(unsafe_code)]
    pub fn prefetch(&self, hash: u64) {
        let entry: *const u64 = &self.entries[home(&self.entries, hash)];
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
        if let Some(at) = find_in(&self.entries, hash, &mut is_key) {
            return Some(id_of(self.entries[at]));
        }
        let old = self.old.as_ref()?;
        let at = find_in_old(&old.entries, old.moved, hash, &mut is_key)?;
        Some(id_of(old.entries[at]))
    }

    /// Adds slot `id` under `hash`. `id` must not be `u32::MAX`.
    pub fn insert(&mut self, hash: u64, id: SlotId) {
        if (self.len + 1) * 4 > self.entries.len() * 3 {
            self.grow();
        }
        place(&mut self.entries, entry(hash, id));
        self.len += 1;
        self.move_some();
    }

    /// Removes slot `id` stored under `hash`. False when it was not there.
    pub fn remove(&mut self, hash: u64, id: SlotId) -> bool {
        let wanted = entry(hash, id);
        let removed = if let Some(at) = find_in(&self.entries, hash, &mut |i| i == id) {
            debug_assert_eq!(self.entries[at], wanted);
            remove_at(&mut self.entries, at);
            true
        } else if let Some(old) = self.old.as_mut() {
            match find_in_old(&old.entries, old.moved, hash, &mut |i| i == id) {
                Some(at) => {
                    old.entries[at] = TOMBSTONE;
                    true
                }
                None => false,
            }
        } else {
            false
        };
        if removed {
            self.len -= 1;
            self.move_some();
        }
        removed
    }

    pub fn clear(&mut self) {
        self.entries.clear();
        self.entries.resize(ENTRIES_MIN, EMPTY);
        self.len = 0;
        self.old = None;
    }

    /// Starts moving every entry into an array twice the size (after finishing the growth
    /// before, if one still runs: not with two moves or more a change).
    fn grow(&mut self) {
        while self.old.is_some() {
            self.move_some();
        }
        let size = self.entries.len() * 2;
        assert!(
            size <= 1 << 32,
            "slot index past 2^32 entries (DataMemory bounds the slots long before)"
        );
        let old = std::mem::replace(&mut self.entries, vec![EMPTY; size]);
        self.old = Some(Moving {
            entries: old,
            moved: 0,
        });
    }

    /// Moves the next places of the old array, if the index grows; drops the old array once
    /// every place is moved.
    fn move_some(&mut self) {
        let Some(old) = self.old.as_mut() else {
            return;
        };
        let end = (old.moved + self.moves_per_change).min(old.entries.len());
        for &e in &old.entries[old.moved..end] {
            if e != EMPTY && e != TOMBSTONE {
                place(&mut self.entries, e);
            }
        }
        old.moved = end;
        if end == old.entries.len() {
            self.old = None;
        }
    }
}

/// Empties place `at` of a probe run with a backward shift: each later entry of the run moves
/// into the hole when the hole lies between its home and its place (cyclically), so every
/// entry stays reachable.
fn remove_at(entries: &mut [u64], at: usize) {
    let mask = entries.len() - 1;
    let mut hole = at;
    let mut next = (hole + 1) & mask;
    loop {
        let e = entries[next];
        if e == EMPTY {
            break;
        }
        let home = tag_of(e) as usize & mask;
        let distance_now = next.wrapping_sub(home) & mask;
        let distance_hole = hole.wrapping_sub(home) & mask;
        if distance_hole <= distance_now {
            entries[hole] = e;
            hole = next;
        }
        next = (next + 1) & mask;
    }
    entries[hole] = EMPTY;
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
        fn agrees_with_a_map(ops in prop::collection::vec(op(), 1..400), moves in 1usize..5) {
            // Few moves a change (one: growth may still run when the next one is due), so
            // that many changes meet a growth half done.
            let mut index = SlotIndex { moves_per_change: moves, ..SlotIndex::default() };
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

    /// While an index grows, entries still in the old array are found, removed (leaving
    /// tombstones) and moved, and the old array goes once every place has moved.
    #[test]
    fn growth_moves_entries_a_few_at_a_time() {
        let mut index = SlotIndex::default();
        let hash = |id: SlotId| u64::from(id).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        // Grown from an array with more places than a change moves.
        let mut next: SlotId = 0;
        while index
            .old
            .as_ref()
            .is_none_or(|o| o.entries.len() <= MOVES_PER_CHANGE)
        {
            index.insert(hash(next), next);
            next += 1;
        }
        let moving = index.old.as_ref().expect("growing");
        assert_eq!(index.entries.len(), 2 * moving.entries.len());
        assert_eq!(moving.moved, MOVES_PER_CHANGE);
        let in_old: Vec<SlotId> = (0..next)
            .filter(|&id| {
                find_in_old(&moving.entries, moving.moved, hash(id), &mut |i| i == id).is_some()
            })
            .collect();
        assert!(in_old.len() >= 4, "entries left to move: {in_old:?}");
        let removed = &in_old[..2];
        for &id in removed {
            assert!(index.remove(hash(id), id));
            assert!(!index.remove(hash(id), id));
        }
        let kept: Vec<SlotId> = (0..next).filter(|id| !removed.contains(id)).collect();
        for &id in &kept {
            assert_eq!(index.find(hash(id), |i| i == id), Some(id));
        }
        assert_eq!(index.len(), kept.len());
        let grown_at = next;
        while index.old.is_some() {
            index.insert(hash(next), next);
            next += 1;
        }
        assert!(next - grown_at <= (index.entries.len() / 2 / MOVES_PER_CHANGE) as SlotId);
        for &id in removed {
            assert_eq!(index.find(hash(id), |i| i == id), None);
        }
        for id in kept.into_iter().chain(grown_at..next) {
            assert_eq!(index.find(hash(id), |i| i == id), Some(id));
        }
        assert_eq!(index.len(), (next - 2) as usize);
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
