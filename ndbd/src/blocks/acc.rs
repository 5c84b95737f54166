//! ACC: the primary-key hash index of a fragment and the row locks.
//!
//! Each key maps to a [`RowSlot`]: the committed row image, at most one uncommitted image (owned
//! by the transaction holding the exclusive lock), and the lock with its FIFO queue of waiting
//! operations. A slot exists while it has a row, an uncommitted change, a lock holder or a
//! waiter; it is removed as soon as it has none.

use std::collections::{HashMap, VecDeque};

use rndb_protocol::Value;

/// A transaction as the kernel names it: the API node id in the high bits and the API's
/// request id in the low 32.
pub type TransId = u64;

/// A stored row: every column, in column order.
pub type Row = Box<[Value]>;

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

/// A row lock: one exclusive holder or any number of shared holders, and a FIFO queue.
#[derive(Debug)]
pub struct Lock<W> {
    exclusive: Option<TransId>,
    shared: Vec<TransId>,
    waiters: VecDeque<Waiter<W>>,
}

impl<W> Default for Lock<W> {
    fn default() -> Self {
        Lock {
            exclusive: None,
            shared: Vec::new(),
            waiters: VecDeque::new(),
        }
    }
}

impl<W> Lock<W> {
    /// True when `trans` holds the lock in any mode.
    pub fn held_by(&self, trans: TransId) -> bool {
        self.exclusive == Some(trans) || self.shared.contains(&trans)
    }

    /// Grants the lock if it is compatible. A transaction that already holds the lock is never
    /// queued behind waiters (it would wait for itself); anyone else waits its turn.
    pub fn try_acquire(&mut self, trans: TransId, kind: LockKind) -> bool {
        if !self.held_by(trans) && !self.waiters.is_empty() {
            return false;
        }
        self.grant_if_compatible(trans, kind)
    }

    fn grant_if_compatible(&mut self, trans: TransId, kind: LockKind) -> bool {
        match kind {
            LockKind::Exclusive => {
                let others_share = self.shared.iter().any(|&t| t != trans);
                match self.exclusive {
                    Some(holder) => holder == trans,
                    None if others_share => false,
                    None => {
                        self.exclusive = Some(trans);
                        true
                    }
                }
            }
            LockKind::Shared => match self.exclusive {
                Some(holder) => holder == trans,
                None => {
                    if !self.shared.contains(&trans) {
                        self.shared.push(trans);
                    }
                    true
                }
            },
        }
    }

    /// Queues an operation until the lock can be granted.
    pub fn enqueue(&mut self, waiter: Waiter<W>) {
        self.waiters.push_back(waiter);
    }

    /// Releases whatever `trans` holds and drops its queued operations.
    pub fn release(&mut self, trans: TransId) {
        if self.exclusive == Some(trans) {
            self.exclusive = None;
        }
        self.shared.retain(|&t| t != trans);
        self.waiters.retain(|w| w.trans != trans);
    }

    /// Grants queued operations in FIFO order while they are compatible, and returns them to be
    /// run.
    pub fn grant_waiters(&mut self) -> Vec<W> {
        let mut granted = Vec::new();
        while let Some(front) = self.waiters.front() {
            let (trans, kind) = (front.trans, front.kind);
            if !self.grant_if_compatible(trans, kind) {
                break;
            }
            if let Some(waiter) = self.waiters.pop_front() {
                granted.push(waiter.work);
            }
        }
        granted
    }

    /// True when nobody holds or waits for the lock.
    pub fn is_idle(&self) -> bool {
        self.exclusive.is_none() && self.shared.is_empty() && self.waiters.is_empty()
    }
}

/// An uncommitted change: the new image (None = deleted) and the transaction that made it.
#[derive(Debug)]
pub struct Pending {
    pub trans: TransId,
    pub image: Option<Row>,
}

/// Everything the fragment knows about one key.
#[derive(Debug)]
pub struct RowSlot<W> {
    pub committed: Option<Row>,
    pub pending: Option<Pending>,
    pub lock: Lock<W>,
}

impl<W> Default for RowSlot<W> {
    fn default() -> Self {
        RowSlot {
            committed: None,
            pending: None,
            lock: Lock::default(),
        }
    }
}

impl<W> RowSlot<W> {
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

/// The hash index of one fragment: encoded primary key → slot.
pub type HashIndex<W> = HashMap<Box<[u8]>, RowSlot<W>>;

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(lock.try_acquire(1, LockKind::Shared));
        assert!(lock.try_acquire(2, LockKind::Shared));
        assert!(!lock.try_acquire(3, LockKind::Exclusive));
        lock.enqueue(waiter(3, LockKind::Exclusive));
        // A newcomer queues behind the waiter even though a shared lock would be compatible.
        assert!(!lock.try_acquire(4, LockKind::Shared));
        lock.enqueue(waiter(4, LockKind::Shared));
        lock.release(1);
        assert!(lock.grant_waiters().is_empty());
        lock.release(2);
        assert_eq!(lock.grant_waiters(), vec![3]);
        lock.release(3);
        assert_eq!(lock.grant_waiters(), vec![4]);
        lock.release(4);
        assert!(lock.is_idle());
    }

    #[test]
    fn a_holder_upgrades_and_never_waits_for_itself() {
        let mut lock: Lock<TransId> = Lock::default();
        assert!(lock.try_acquire(1, LockKind::Shared));
        lock.enqueue(waiter(2, LockKind::Exclusive));
        assert!(lock.try_acquire(1, LockKind::Exclusive));
        assert!(lock.try_acquire(1, LockKind::Shared));
        lock.release(1);
        assert_eq!(lock.grant_waiters(), vec![2]);
    }

    #[test]
    fn release_drops_the_transactions_own_waiters() {
        let mut lock: Lock<TransId> = Lock::default();
        assert!(lock.try_acquire(1, LockKind::Exclusive));
        lock.enqueue(waiter(2, LockKind::Shared));
        lock.enqueue(waiter(3, LockKind::Shared));
        lock.release(2);
        lock.release(1);
        assert_eq!(lock.grant_waiters(), vec![3]);
    }
}
