//! Per-transaction records keyed by transaction id, remembering the last one looked up.
//!
//! TC looks a transaction up four or five times for each of its operations (when it arrives,
//! when it is dispatched, when LQH checks the transaction still runs, when LQH answers, when
//! the execute may end), and the operations of one execute come one after another. The
//! records live in slots; a map finds a transaction's slot, and the last (transaction, slot)
//! found is kept, so a repeated lookup is one comparison instead of a hash and a probe.
//!
//! Invariant: `last` names a slot that holds that transaction, or no transaction
//! (`NO_TRANS`). `remove` forgets it when it removes that transaction; a slot is reused only
//! after its transaction was removed.

use std::cell::Cell;

use hashbrown::hash_map::Entry;
use hashbrown::HashMap;
use rndb_protocol::id_hash::SequentialIds;

use crate::blocks::acc::{TransId, NO_TRANS};

/// Records of type `T` by transaction id. See the module docs.
#[derive(Debug)]
pub struct TransTable<T> {
    /// Hashed in id order (`SequentialIds`): transactions start and end nearly in order.
    slot_of: HashMap<TransId, u32, SequentialIds>,
    /// Boxed: a slot is 16 bytes, so the slot array stays in the cache with thousands of
    /// transactions open, and a lookup misses at most once, on the record.
    slots: Vec<Option<(TransId, Box<T>)>>,
    free: Vec<u32>,
    last: Cell<(TransId, u32)>,
}

impl<T> Default for TransTable<T> {
    fn default() -> Self {
        TransTable {
            slot_of: HashMap::default(),
            slots: Vec::new(),
            free: Vec::new(),
            last: Cell::new((NO_TRANS, 0)),
        }
    }
}

impl<T> TransTable<T> {
    pub fn len(&self) -> usize {
        self.slot_of.len()
    }

    fn find(&self, trans: TransId) -> Option<usize> {
        let (last, slot) = self.last.get();
        if last == trans && trans != NO_TRANS {
            return Some(slot as usize);
        }
        let slot = *self.slot_of.get(&trans)?;
        self.last.set((trans, slot));
        Some(slot as usize)
    }

    pub fn contains_key(&self, trans: TransId) -> bool {
        self.find(trans).is_some()
    }

    pub fn get(&self, trans: TransId) -> Option<&T> {
        let slot = self.find(trans)?;
        self.slots[slot].as_ref().map(|(_, record)| &**record)
    }

    pub fn get_mut(&mut self, trans: TransId) -> Option<&mut T> {
        let slot = self.find(trans)?;
        self.slots[slot].as_mut().map(|(_, record)| &mut **record)
    }

    /// Adds `record` for `trans`, replacing the one it had. The map is probed once, through
    /// its entry, not looked up and then inserted into.
    pub fn insert(&mut self, trans: TransId, record: Box<T>) {
        let TransTable {
            slot_of,
            slots,
            free,
            last,
        } = self;
        let slot = match slot_of.entry(trans) {
            Entry::Occupied(entry) => {
                let slot = *entry.get();
                slots[slot as usize] = Some((trans, record));
                slot
            }
            Entry::Vacant(entry) => {
                let slot = match free.pop() {
                    Some(slot) => {
                        slots[slot as usize] = Some((trans, record));
                        slot
                    }
                    None => {
                        let slot = u32::try_from(slots.len())
                            .expect("fewer than 2^32 transactions (MaxNoOfConcurrentTransactions)");
                        slots.push(Some((trans, record)));
                        slot
                    }
                };
                *entry.insert(slot)
            }
        };
        last.set((trans, slot));
    }

    pub fn remove(&mut self, trans: TransId) -> Option<Box<T>> {
        let slot = self.slot_of.remove(&trans)?;
        if self.last.get().0 == trans {
            self.last.set((NO_TRANS, 0));
        }
        self.free.push(slot);
        self.slots[slot as usize].take().map(|(_, record)| record)
    }

    /// Every slot from `from` on, with its index, free ones too (a caller walking the table
    /// in steps counts them, and goes on from an index).
    pub fn records_from(
        &self,
        from: usize,
    ) -> impl Iterator<Item = (usize, Option<(TransId, &T)>)> {
        (self.slots.iter().enumerate().skip(from))
            .map(|(index, slot)| (index, slot.as_ref().map(|(t, record)| (*t, &**record))))
    }

    pub fn iter(&self) -> impl Iterator<Item = (TransId, &T)> {
        self.slots
            .iter()
            .flatten()
            .map(|(trans, record)| (*trans, &**record))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (TransId, &mut T)> {
        self.slots
            .iter_mut()
            .flatten()
            .map(|(trans, record)| (*trans, &mut **record))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u8, u32),
        Remove(u8),
        Get(u8),
        Bump(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (any::<u8>(), any::<u32>()).prop_map(|(t, v)| Op::Insert(t % 16, v)),
            any::<u8>().prop_map(|t| Op::Remove(t % 16)),
            any::<u8>().prop_map(|t| Op::Get(t % 16)),
            any::<u8>().prop_map(|t| Op::Bump(t % 16)),
        ]
    }

    proptest! {
        /// The table answers every lookup as a map does, whatever the order of inserts,
        /// removes and repeated lookups (the remembered slot never outlives its record).
        #[test]
        fn behaves_as_a_map(ops in proptest::collection::vec(op(), 1..200)) {
            let mut table: TransTable<u32> = TransTable::default();
            let mut model: HashMap<TransId, u32> = HashMap::new();
            for op in ops {
                match op {
                    Op::Insert(t, v) => {
                        table.insert(TransId(u64::from(t)), Box::new(v));
                        model.insert(TransId(u64::from(t)), v);
                    }
                    Op::Remove(t) => {
                        let got = table.remove(TransId(u64::from(t))).map(|b| *b);
                        prop_assert_eq!(got, model.remove(&TransId(u64::from(t))));
                    }
                    Op::Get(t) => {
                        prop_assert_eq!(table.get(TransId(u64::from(t))), model.get(&TransId(u64::from(t))));
                    }
                    Op::Bump(t) => {
                        if let Some(v) = table.get_mut(TransId(u64::from(t))) {
                            *v = v.wrapping_add(1);
                        }
                        if let Some(v) = model.get_mut(&TransId(u64::from(t))) {
                            *v = v.wrapping_add(1);
                        }
                    }
                }
                prop_assert_eq!(table.len(), model.len());
            }
            let mut all: Vec<(TransId, u32)> = table.iter().map(|(t, v)| (t, *v)).collect();
            all.sort_unstable();
            let mut expected: Vec<(TransId, u32)> = model.into_iter().collect();
            expected.sort_unstable();
            prop_assert_eq!(all, expected);
        }
    }

    #[test]
    fn no_trans_is_never_found() {
        let table: TransTable<u32> = TransTable::default();
        assert!(table.get(NO_TRANS).is_none());
    }
}
