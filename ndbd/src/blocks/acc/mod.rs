//! ACC: the primary-key hash index of a fragment and the row locks.
//!
//! Each key maps to a [`RowSlot`]: the committed row image, at most one uncommitted image (owned
//! by the transaction holding the exclusive lock), and the lock with its FIFO queue of waiting
//! operations. A slot exists while it has a row, an uncommitted change, a lock holder or a
//! waiter; it is removed as soon as it has none.
//!
//! Slots live in a slab ([`SlotStore`]): pages of slots (`pages`: ids and addresses are stable,
//! and growing copies no slot) with a free list, and a hash index of (32-bit hash tag, slot id)
//! entries (`slot_index`): a lookup compares the tag before it looks at the slot's key, and no
//! key is stored twice. A full-table scan walks the slab by slot id, so its cursor is one
//! integer that stays valid while rows come and go (NDB's TUP scans by page and row id); an
//! ordered index (TUX) refers to rows by slot id too.

pub mod pages;
pub mod slot_index;

use std::collections::VecDeque;

use pages::Pages;
pub use slot_index::SlotId;
use slot_index::SlotIndex;

/// A transaction as the kernel names it (the API node id in the high bits and the API's request
/// id in the low 32).
pub use rndb_protocol::TransId;

pub use crate::blocks::tup::Row;

/// How strongly a row is locked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockKind {
    Shared,
    Exclusive,
}

/// An operation queued behind a lock, with what it needs to run when granted.
#[derive(Debug)]
pub struct Waiter<W> {
    pub trans: TransId,
    pub kind: LockKind,
    pub work: W,
}

/// No transaction, in a [`Lock`]'s holder fields and as `TransTable`'s empty key. Never a
/// transaction id: those are an API node id (16 bits) over a request id (32 bits), and a data
/// node's frames naming another are refused as protocol violations.
pub(crate) const NO_TRANS: TransId = TransId(u64::MAX);

/// A row lock: one exclusive holder or any number of shared holders, and a FIFO queue.
///
/// 24 bytes, since every row slot has one: the exclusive holder and the first shared holder
/// inline (most locks have at most one holder and nobody waiting), further shared holders and
/// the waiters in a box that exists only while there are some.
#[derive(Debug)]
pub struct Lock<W> {
    exclusive: TransId,
    shared_first: TransId,
    rest: Option<Box<LockRest<W>>>,
}

/// The rarely needed part of a lock.
#[derive(Debug)]
struct LockRest<W> {
    /// Shared holders after the first.
    shared_more: Vec<TransId>,
    waiters: VecDeque<Waiter<W>>,
}

impl<W> Default for Lock<W> {
    fn default() -> Self {
        Lock {
            exclusive: NO_TRANS,
            shared_first: NO_TRANS,
            rest: None,
        }
    }
}

impl<W> Lock<W> {
    /// True when `trans` holds the lock in any mode.
    pub fn held_by(&self, trans: TransId) -> bool {
        self.exclusive == trans || self.shares(trans)
    }

    fn shares(&self, trans: TransId) -> bool {
        self.shared_first == trans
            || self
                .rest
                .as_ref()
                .is_some_and(|r| r.shared_more.contains(&trans))
    }

    fn shared_by_other_than(&self, trans: TransId) -> bool {
        (self.shared_first != NO_TRANS && self.shared_first != trans)
            || self
                .rest
                .as_ref()
                .is_some_and(|r| r.shared_more.iter().any(|&t| t != trans))
    }

    fn has_waiters(&self) -> bool {
        self.rest.as_ref().is_some_and(|r| !r.waiters.is_empty())
    }

    fn rest_mut(&mut self) -> &mut LockRest<W> {
        self.rest.get_or_insert_with(|| {
            Box::new(LockRest {
                shared_more: Vec::new(),
                waiters: VecDeque::new(),
            })
        })
    }

    /// Frees the box once it holds nothing.
    fn trim(&mut self) {
        if self
            .rest
            .as_ref()
            .is_some_and(|r| r.shared_more.is_empty() && r.waiters.is_empty())
        {
            self.rest = None;
        }
    }

    /// Grants the lock if it is compatible. A transaction that already holds the lock is never
    /// queued behind other transactions' waiters (it would wait for itself), but one with an
    /// operation of its own queued here waits behind that: a transaction's operations on a
    /// row run in order (a read after an update queued as an upgrade must see the update).
    /// Anyone else waits its turn.
    pub fn try_acquire(&mut self, trans: TransId, kind: LockKind) -> bool {
        if self.has_waiters() && (!self.held_by(trans) || self.waits(trans)) {
            return false;
        }
        self.grant_if_compatible(trans, kind)
    }

    /// True when `trans` has an operation queued here.
    fn waits(&self, trans: TransId) -> bool {
        (self.rest.as_ref()).is_some_and(|r| r.waiters.iter().any(|w| w.trans == trans))
    }

    fn grant_if_compatible(&mut self, trans: TransId, kind: LockKind) -> bool {
        debug_assert_ne!(trans, NO_TRANS, "a transaction id equal to NO_TRANS");
        if self.exclusive != NO_TRANS {
            return self.exclusive == trans;
        }
        match kind {
            LockKind::Exclusive => {
                if self.shared_by_other_than(trans) {
                    false
                } else {
                    self.exclusive = trans;
                    true
                }
            }
            LockKind::Shared => {
                if self.shared_first == NO_TRANS {
                    self.shared_first = trans;
                } else if !self.shares(trans) {
                    self.rest_mut().shared_more.push(trans);
                }
                true
            }
        }
    }

    /// Queues an operation until the lock can be granted. Behind its own transaction's last
    /// queued operation, if it has one (they run in order); else an upgrade (a current shared
    /// holder asking for the exclusive lock) goes to the front: the waiters behind it wait for
    /// the upgrader anyway, and queued behind them it would wait for them: a needless deadlock.
    pub fn enqueue(&mut self, waiter: Waiter<W>) {
        let upgrade = self.held_by(waiter.trans);
        let waiters = &mut self.rest_mut().waiters;
        if let Some(last) = waiters.iter().rposition(|w| w.trans == waiter.trans) {
            waiters.insert(last + 1, waiter);
        } else if upgrade {
            waiters.push_front(waiter);
        } else {
            waiters.push_back(waiter);
        }
    }

    /// Releases whatever `trans` holds and drops its queued operations.
    pub fn release(&mut self, trans: TransId) {
        if self.exclusive == trans {
            self.exclusive = NO_TRANS;
        }
        if let Some(rest) = self.rest.as_mut() {
            if self.shared_first == trans {
                self.shared_first = rest.shared_more.pop().unwrap_or(NO_TRANS);
            } else {
                rest.shared_more.retain(|&t| t != trans);
            }
            rest.waiters.retain(|w| w.trans != trans);
            self.trim();
        } else if self.shared_first == trans {
            self.shared_first = NO_TRANS;
        }
    }

    /// Grants queued operations in FIFO order while they are compatible, and returns them to be
    /// run.
    pub fn grant_waiters(&mut self) -> Vec<W> {
        self.grant_live_waiters(&|_| true)
    }

    /// As [`grant_waiters`](Self::grant_waiters), but a waiter whose transaction is no longer
    /// `live` (its commit or abort has started) is never granted: it is dropped with whatever
    /// that transaction holds here, so its work cannot run after its transaction ended and the
    /// waiters behind it move up.
    pub fn grant_live_waiters(&mut self, live: &dyn Fn(TransId) -> bool) -> Vec<W> {
        let mut granted = Vec::new();
        while let Some(front) = self.rest.as_ref().and_then(|r| r.waiters.front()) {
            let (trans, kind) = (front.trans, front.kind);
            if !live(trans) {
                self.release(trans);
                continue;
            }
            if !self.grant_if_compatible(trans, kind) {
                break;
            }
            if let Some(waiter) = self.rest.as_mut().and_then(|r| r.waiters.pop_front()) {
                granted.push(waiter.work);
            }
        }
        self.trim();
        granted
    }

    /// Takes every queued operation off the lock, in queue order, without granting them.
    pub fn take_waiters(&mut self) -> Vec<W> {
        let taken = self
            .rest
            .as_mut()
            .map(|r| r.waiters.drain(..).map(|w| w.work).collect())
            .unwrap_or_default();
        self.trim();
        taken
    }

    /// Who holds the lock (the exclusive holder, or the shared ones), then who waits for it in
    /// queue order with the work each waits to run (`None` for a holder).
    pub fn entries(&self) -> Vec<(TransId, LockKind, Option<&W>)> {
        let mut entries = Vec::new();
        if self.exclusive != NO_TRANS {
            entries.push((self.exclusive, LockKind::Exclusive, None));
        }
        // A transaction that upgraded its shared lock holds it once, exclusively.
        let shared = |t: TransId| t != NO_TRANS && t != self.exclusive;
        if shared(self.shared_first) {
            entries.push((self.shared_first, LockKind::Shared, None));
        }
        if let Some(rest) = &self.rest {
            let more = rest.shared_more.iter().filter(|&&t| shared(t));
            entries.extend(more.map(|&t| (t, LockKind::Shared, None)));
            entries.extend(
                rest.waiters
                    .iter()
                    .map(|w| (w.trans, w.kind, Some(&w.work))),
            );
        }
        entries
    }

    /// True when nobody holds or waits for the lock.
    pub fn is_idle(&self) -> bool {
        self.exclusive == NO_TRANS && self.shared_first == NO_TRANS && self.rest.is_none()
    }
}

/// An uncommitted change: the new image (None = deleted) and the transaction that made it.
#[derive(Debug)]
pub struct Pending {
    pub trans: TransId,
    pub image: Option<Row>,
}

/// Keys up to this many bytes live inside their slot.
const KEY_INLINE_BYTES: usize = 22;

/// A slot's key: inside the slot when short (a lookup then compares it on the cache line it
/// already loaded to reach the slot, with no pointer to follow), on the heap when longer.
#[derive(Clone, PartialEq, Eq)]
pub enum SlotKey {
    Inline {
        len: u8,
        bytes: [u8; KEY_INLINE_BYTES],
    },
    Heap(Box<[u8]>),
}

impl SlotKey {
    pub fn new(key: &[u8]) -> SlotKey {
        if key.len() <= KEY_INLINE_BYTES {
            let mut bytes = [0; KEY_INLINE_BYTES];
            fill_inline(&mut bytes, key);
            SlotKey::Inline {
                len: key.len() as u8,
                bytes,
            }
        } else {
            SlotKey::Heap(key.into())
        }
    }
}

/// Writes `key` (at most [`KEY_INLINE_BYTES`] long) into `bytes`, zero-padded, in fixed-size
/// pieces that may overlap: a copy of a variable length was a call to `memcpy` per key
/// operation, whose small-size stores the next load of the key could not forward from.
#[inline]
fn fill_inline(bytes: &mut [u8; KEY_INLINE_BYTES], key: &[u8]) {
    fn piece<const W: usize>(to: &mut [u8], from: &[u8], at: usize) {
        to[at..at + W].copy_from_slice(&from[at..at + W]);
    }
    *bytes = [0; KEY_INLINE_BYTES];
    let n = key.len();
    match n {
        0..4 => bytes[..n].iter_mut().zip(key).for_each(|(b, k)| *b = *k),
        4..8 => {
            piece::<4>(bytes, key, 0);
            piece::<4>(bytes, key, n - 4);
        }
        8..=16 => {
            piece::<8>(bytes, key, 0);
            piece::<8>(bytes, key, n - 8);
        }
        _ => {
            piece::<16>(bytes, key, 0);
            piece::<8>(bytes, key, n - 8);
        }
    }
}

impl std::ops::Deref for SlotKey {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            SlotKey::Inline { len, bytes } => &bytes[..usize::from(*len)],
            SlotKey::Heap(bytes) => bytes,
        }
    }
}

impl std::fmt::Debug for SlotKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SlotKey({:02x?})", &**self)
    }
}

/// Everything the fragment knows about one key.
///
/// Two whole cache lines (128 bytes, aligned): the key, the committed row (inline when short,
/// see [`Row`]) and the lock, which a read by key all touches, are on lines whose addresses are
/// known as soon as the slot id is, so their misses overlap. The uncommitted image, which only
/// writes have, is boxed to keep the slot to two lines.
#[derive(Debug)]
#[repr(C, align(64))]
pub struct RowSlot<W> {
    /// The canonical key encoding.
    pub key: SlotKey,
    pub committed: Option<Row>,
    pub lock: Lock<W>,
    pub pending: Option<Box<Pending>>,
    /// The GCI (high word) of the committed image's last change: set by every commit, every
    /// restored or copied image. A node restart copies only rows changed after the restarting
    /// node's restorable GCI (`node_restart.rs`); a value above the true one only copies more.
    pub gci: u32,
    /// Restored from this node's own files during its node restart and not yet confirmed by
    /// the copy (a COPY_ROWS image or "unchanged" mark) or a live commit: the image may be
    /// stale, and the row gone at the live replicas. Such rows are removed when the copy ends.
    pub restored: bool,
}

const _: () = assert!(std::mem::size_of::<Option<RowSlot<()>>>() == 128);

impl<W> RowSlot<W> {
    /// An empty slot for `key`.
    pub fn new(key: &[u8]) -> Self {
        RowSlot {
            key: SlotKey::new(key),
            committed: None,
            pending: None,
            lock: Lock::default(),
            gci: 0,
            restored: false,
        }
    }

    /// The image `trans` sees: its own uncommitted change if it made one, else the committed row.
    pub fn visible_to(&self, trans: TransId) -> Option<&Row> {
        match &self.pending {
            Some(p) if p.trans == trans => p.image.as_ref(),
            _ => self.committed.as_ref(),
        }
    }

    /// True when the slot holds nothing worth keeping.
    pub fn is_empty(&self) -> bool {
        self.committed.is_none() && self.pending.is_none() && self.lock.is_idle()
    }
}

/// The slots of one fragment and its hash index (encoded primary key → slot id).
pub struct SlotStore<W> {
    /// Slots by id; `None` is a free id (listed in `free`).
    slots: Pages<RowSlot<W>>,
    /// Free slot ids, reused last-freed first.
    free: Vec<SlotId>,
    /// Every slot's id by the hash of its key.
    index: SlotIndex,
}

impl<W> std::fmt::Debug for SlotStore<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotStore")
            .field("slots", &self.index.len())
            .field("free", &self.free.len())
            .finish()
    }
}

impl<W> Default for SlotStore<W> {
    fn default() -> Self {
        SlotStore {
            slots: Pages::default(),
            free: Vec::new(),
            index: SlotIndex::default(),
        }
    }
}

/// A key's hash in its fragment's index (see [`KeyHash::of`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyHash(u64);

impl KeyHash {
    pub fn of(key: &[u8]) -> KeyHash {
        KeyHash(index_hash(key))
    }
}

/// An operation's key: its canonical encoding and the encoding's distribution hash (xxh3,
/// `dih::key_hash`), computed once when the operation is built. The index hash derives from
/// it, so an operation's key is hashed once however often it is looked up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpKey {
    bytes: SlotKey,
    hash: u64,
}

impl OpKey {
    pub fn new(bytes: &[u8]) -> OpKey {
        OpKey::with_hash(bytes, xxhash_rust::xxh3::xxh3_64(bytes))
    }

    /// The empty key (hash 0), to be replaced.
    #[inline]
    pub fn blank() -> OpKey {
        OpKey {
            bytes: SlotKey::Inline {
                len: 0,
                bytes: [0; KEY_INLINE_BYTES],
            },
            hash: 0,
        }
    }

    /// Makes this key `key`, whose distribution hash is `hash`, in place: the request it
    /// belongs to is filled in its box, and a key built apart and moved in was read back with
    /// loads of other widths than its stores (a stall per operation).
    pub fn set(&mut self, key: &[u8], hash: u64) {
        debug_assert_eq!(hash, xxhash_rust::xxh3::xxh3_64(key), "not the key's hash");
        self.hash = hash;
        match &mut self.bytes {
            SlotKey::Inline { len, bytes } if key.len() <= KEY_INLINE_BYTES => {
                *len = key.len() as u8;
                fill_inline(bytes, key);
            }
            other => *other = SlotKey::new(key),
        }
    }

    /// `hash` must be `bytes`' distribution hash (the caller computed it for the partition).
    pub fn with_hash(bytes: &[u8], hash: u64) -> OpKey {
        let mut key = OpKey::blank();
        key.set(bytes, hash);
        key
    }

    /// The key's hash in its fragment's index.
    pub fn index_hash(&self) -> KeyHash {
        KeyHash(remix(self.hash))
    }
}

impl std::ops::Deref for OpKey {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

/// The hash-index hash of a key: xxh3 (as the distribution hash), remixed so that its low bits,
/// which pick the bucket, do not repeat the bits that picked the key's partition.
fn index_hash(key: &[u8]) -> u64 {
    remix(xxhash_rust::xxh3::xxh3_64(key))
}

fn remix(h: u64) -> u64 {
    // splitmix64's finalizer.
    let h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

impl<W> SlotStore<W> {
    /// The slot id `key` probably has, by its hash alone, without reading the slot: the
    /// first stage of warming the cache for a lookup (see `Lqh::warm`).
    pub fn candidate(&self, hash: KeyHash) -> Option<SlotId> {
        self.index.find(hash.0, |_| true)
    }

    /// Starts bringing in the index entry where a lookup of `hash` starts, without waiting for
    /// it (see `SlotIndex::prefetch`).
    pub fn prefetch_index(&self, hash: KeyHash) {
        self.index.prefetch(hash.0);
    }

    /// Reads the index entry where a lookup of `hash` starts: brings it into the cache. The
    /// stage before [`Self::candidate`].
    pub fn touch_index(&self, hash: KeyHash) -> u64 {
        self.index.touch(hash.0)
    }

    /// Reads a byte of slot `id`'s key and of its lock (the slot spans several cache lines,
    /// and a key operation reads both): brings them into the cache.
    pub fn touch_slot(&self, id: SlotId) -> u8 {
        match self.slots.get(id as usize) {
            Some(Some(slot)) => {
                slot.key.first().copied().unwrap_or(0) ^ u8::from(slot.lock.is_idle())
            }
            _ => 0,
        }
    }

    /// Reads one byte of slot `id`'s committed row: brings it into the cache.
    pub fn touch_row(&self, id: SlotId) -> u8 {
        match self.slots.get(id as usize) {
            Some(Some(RowSlot {
                committed: Some(row),
                ..
            })) => row.encoded().first().copied().unwrap_or(0),
            _ => 0,
        }
    }

    /// The slot id of `key`, if it has a slot.
    pub fn id_of(&self, key: &[u8]) -> Option<SlotId> {
        self.id_of_hashed(KeyHash::of(key), key)
    }

    /// The slot id of `key`, whose index hash is `hash`, if it has a slot.
    pub fn id_of_hashed(&self, hash: KeyHash, key: &[u8]) -> Option<SlotId> {
        let KeyHash(hash) = hash;
        let slots = &self.slots;
        self.index.find(hash, |id| {
            slots
                .get(id as usize)
                .and_then(Option::as_ref)
                .is_some_and(|s| &*s.key == key)
        })
    }

    pub fn get(&self, key: &[u8]) -> Option<&RowSlot<W>> {
        self.slot(self.id_of(key)?)
    }

    /// The slot id of an operation's key, from the hash it carries.
    pub fn id_of_op(&self, key: &OpKey) -> Option<SlotId> {
        self.id_of_hashed(key.index_hash(), key)
    }

    pub fn get_op(&self, key: &OpKey) -> Option<&RowSlot<W>> {
        self.slot(self.id_of_op(key)?)
    }

    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut RowSlot<W>> {
        let id = self.id_of(key)?;
        self.slot_mut(id)
    }

    pub fn slot(&self, id: SlotId) -> Option<&RowSlot<W>> {
        self.slots.get(id as usize)?.as_ref()
    }

    pub fn slot_mut(&mut self, id: SlotId) -> Option<&mut RowSlot<W>> {
        self.slots.get_mut(id as usize)?.as_mut()
    }

    /// One past the highest slot id in use or free: a scan's end.
    pub fn id_end(&self) -> SlotId {
        self.slots.len() as SlotId
    }

    /// Keys with a slot.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Creates an empty slot for `key` (which must not have one) and returns its id.
    pub fn insert(&mut self, key: &[u8]) -> SlotId {
        debug_assert!(self.id_of(key).is_none(), "key already has a slot");
        let hash = index_hash(key);
        let slot = RowSlot::new(key);
        let id = match self.free.pop() {
            Some(id) => {
                let Some(place) = self.slots.get_mut(id as usize) else {
                    unreachable!("free slot id {id} past the slots");
                };
                debug_assert!(place.is_none(), "free slot in use");
                *place = Some(slot);
                id
            }
            None => self.slots.push(Some(slot)) as SlotId,
        };
        self.index.insert(hash, id);
        id
    }

    /// Removes the slot with id `id` and returns it.
    pub fn remove(&mut self, id: SlotId) -> Option<RowSlot<W>> {
        let slot = self.slots.get_mut(id as usize)?.take()?;
        let hash = index_hash(&slot.key);
        self.index.remove(hash, id);
        self.free.push(id);
        Some(slot)
    }

    /// Every slot, emptying the store.
    pub fn drain(&mut self) -> impl Iterator<Item = RowSlot<W>> + '_ {
        self.index.clear();
        self.free.clear();
        self.slots.drain().flatten()
    }

    /// Every occupied slot with its id.
    pub fn iter(&self) -> impl Iterator<Item = (SlotId, &RowSlot<W>)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(id, s)| Some((id as SlotId, s.as_ref()?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key length, inline or not, reads back as given, and a key set over a longer one
    /// equals the same key made fresh (the inline bytes past its end are zero again).
    #[test]
    fn keys_of_every_length_are_kept_whole() {
        let long: Vec<u8> = (100..130).collect();
        let prior = &long[..KEY_INLINE_BYTES];
        for n in 0..=KEY_INLINE_BYTES + 8 {
            let key: Vec<u8> = (1..=n as u8).collect();
            let hash = xxhash_rust::xxh3::xxh3_64(&key);
            assert_eq!(&*SlotKey::new(&key), &key[..], "length {n}");
            let mut reused = OpKey::blank();
            reused.set(prior, xxhash_rust::xxh3::xxh3_64(prior));
            reused.set(&key, hash);
            assert_eq!(reused, OpKey::with_hash(&key, hash), "length {n}");
            assert_eq!(&*reused, &key[..], "length {n}");
        }
    }

    fn waiter(trans: TransId, kind: LockKind) -> Waiter<TransId> {
        Waiter {
            trans,
            kind,
            work: trans,
        }
    }

    #[test]
    fn shared_locks_coexist_and_exclusive_waits_fifo() {
        let mut lock: Lock<TransId> = Lock::default();
        assert!(lock.try_acquire(TransId(1), LockKind::Shared));
        assert!(lock.try_acquire(TransId(2), LockKind::Shared));
        assert!(!lock.try_acquire(TransId(3), LockKind::Exclusive));
        lock.enqueue(waiter(TransId(3), LockKind::Exclusive));
        // A newcomer queues behind the waiter even though a shared lock would be compatible.
        assert!(!lock.try_acquire(TransId(4), LockKind::Shared));
        lock.enqueue(waiter(TransId(4), LockKind::Shared));
        lock.release(TransId(1));
        assert!(lock.grant_waiters().is_empty());
        lock.release(TransId(2));
        assert_eq!(lock.grant_waiters(), vec![TransId(3)]);
        lock.release(TransId(3));
        assert_eq!(lock.grant_waiters(), vec![TransId(4)]);
        lock.release(TransId(4));
        assert!(lock.is_idle());
    }

    #[test]
    fn a_holder_upgrades_and_never_waits_for_itself() {
        let mut lock: Lock<TransId> = Lock::default();
        assert!(lock.try_acquire(TransId(1), LockKind::Shared));
        lock.enqueue(waiter(TransId(2), LockKind::Exclusive));
        assert!(lock.try_acquire(TransId(1), LockKind::Exclusive));
        assert!(lock.try_acquire(TransId(1), LockKind::Shared));
        lock.release(TransId(1));
        assert_eq!(lock.grant_waiters(), vec![TransId(2)]);
    }

    #[test]
    fn an_upgrade_goes_ahead_of_waiters_that_wait_for_it() {
        let mut lock: Lock<TransId> = Lock::default();
        assert!(lock.try_acquire(TransId(1), LockKind::Shared));
        assert!(lock.try_acquire(TransId(2), LockKind::Shared));
        assert!(!lock.try_acquire(TransId(3), LockKind::Exclusive));
        lock.enqueue(waiter(TransId(3), LockKind::Exclusive));
        assert!(!lock.try_acquire(TransId(1), LockKind::Exclusive));
        lock.enqueue(waiter(TransId(1), LockKind::Exclusive));
        lock.release(TransId(2));
        assert_eq!(lock.grant_waiters(), vec![TransId(1)], "the upgrader first");
        lock.release(TransId(1));
        assert_eq!(lock.grant_waiters(), vec![TransId(3)]);
    }

    /// Seen by a review: T1 and T2 share the lock; T1's update waits as an upgrade, and T1's
    /// read of the same row in the same execute must wait behind it, not read the row before
    /// T1's own update.
    #[test]
    fn a_transactions_operations_on_a_row_run_in_order() {
        let mut lock: Lock<TransId> = Lock::default();
        assert!(lock.try_acquire(TransId(1), LockKind::Shared));
        assert!(lock.try_acquire(TransId(2), LockKind::Shared));
        assert!(!lock.try_acquire(TransId(3), LockKind::Exclusive));
        lock.enqueue(waiter(TransId(3), LockKind::Exclusive));
        assert!(!lock.try_acquire(TransId(1), LockKind::Exclusive));
        lock.enqueue(Waiter {
            work: TransId(11),
            ..waiter(TransId(1), LockKind::Exclusive)
        });
        assert!(
            !lock.try_acquire(TransId(1), LockKind::Shared),
            "the read waits behind its own transaction's update"
        );
        lock.enqueue(Waiter {
            work: TransId(12),
            ..waiter(TransId(1), LockKind::Shared)
        });
        lock.release(TransId(2));
        assert_eq!(
            lock.grant_waiters(),
            vec![TransId(11), TransId(12)],
            "the update, then the read, then nobody else"
        );
        lock.release(TransId(1));
        assert_eq!(lock.grant_waiters(), vec![TransId(3)]);
    }

    #[test]
    fn waiters_of_ended_transactions_are_never_granted() {
        let mut lock: Lock<TransId> = Lock::default();
        assert!(lock.try_acquire(TransId(1), LockKind::Exclusive));
        lock.enqueue(waiter(TransId(2), LockKind::Exclusive));
        lock.enqueue(waiter(TransId(3), LockKind::Shared));
        lock.release(TransId(1));
        assert_eq!(
            lock.grant_live_waiters(&|t| t != TransId(2)),
            vec![TransId(3)]
        );
        assert!(!lock.held_by(TransId(2)));
    }

    #[test]
    fn slot_ids_are_stable_and_reused() {
        let mut store: SlotStore<TransId> = SlotStore::default();
        let a = store.insert(b"a"[..].into());
        let b = store.insert(b"b"[..].into());
        assert_ne!(a, b);
        assert_eq!(store.id_of(b"b"), Some(b));
        assert!(store.remove(a).is_some());
        assert_eq!(store.id_of(b"a"), None);
        assert_eq!(store.id_of(b"b"), Some(b), "other ids do not move");
        let c = store.insert(b"c"[..].into());
        assert_eq!(c, a, "a freed id is reused");
        assert_eq!(store.len(), 2);
        assert_eq!(store.iter().count(), 2);
    }

    #[test]
    fn short_and_long_keys_are_found_and_removed() {
        let mut store: SlotStore<TransId> = SlotStore::default();
        // Distinct first bytes; lengths from 1 to twice what fits inline.
        let keys: Vec<Vec<u8>> = (0..200u8)
            .map(|i| {
                let mut key = vec![i];
                key.resize(1 + usize::from(i) % (2 * KEY_INLINE_BYTES), 0xab);
                key
            })
            .collect();
        let ids: Vec<SlotId> = keys.iter().map(|k| store.insert(k[..].into())).collect();
        for (key, &id) in keys.iter().zip(&ids) {
            assert_eq!(store.id_of(key), Some(id));
            assert_eq!(&*store.slot(id).expect("slot").key, &key[..]);
        }
        for &id in ids.iter().step_by(2) {
            store.remove(id);
        }
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(store.id_of(key).is_some(), i % 2 == 1, "key {i}");
        }
        assert_eq!(store.len(), 100);
    }

    #[test]
    fn release_drops_the_transactions_own_waiters() {
        let mut lock: Lock<TransId> = Lock::default();
        assert!(lock.try_acquire(TransId(1), LockKind::Exclusive));
        lock.enqueue(waiter(TransId(2), LockKind::Shared));
        lock.enqueue(waiter(TransId(3), LockKind::Shared));
        lock.release(TransId(2));
        lock.release(TransId(1));
        assert_eq!(lock.grant_waiters(), vec![TransId(3)]);
    }

    /// Shared holders past the first live in the lock's box; releasing them in any order
    /// leaves the right holders, and the lock idle (its box freed) once all are gone.
    #[test]
    fn many_shared_holders_release_in_any_order() {
        for order in [[1, 2, 3, 4], [4, 3, 2, 1], [2, 4, 1, 3]] {
            let mut lock: Lock<TransId> = Lock::default();
            for t in 1..=4 {
                assert!(lock.try_acquire(TransId(t), LockKind::Shared));
                assert!(
                    lock.try_acquire(TransId(t), LockKind::Shared),
                    "again, as a holder"
                );
            }
            assert!(!lock.try_acquire(TransId(5), LockKind::Exclusive));
            let mut left: Vec<TransId> = vec![TransId(1), TransId(2), TransId(3), TransId(4)];
            for t in order {
                lock.release(TransId(t));
                left.retain(|&h| h != TransId(t));
                for h in 1..=4 {
                    assert_eq!(
                        lock.held_by(TransId(h)),
                        left.contains(&TransId(h)),
                        "{order:?} after {t}"
                    );
                }
            }
            assert!(lock.is_idle());
            assert!(lock.rest.is_none(), "the box is freed");
            assert!(lock.try_acquire(TransId(5), LockKind::Exclusive));
        }
    }
}
