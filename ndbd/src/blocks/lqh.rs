//! LQH: runs key operations on the fragments of this node, using ACC for the hash index and
//! locks and TUP for row images and DataMemory. Keeps, per transaction, the rows it touched, so
//! that commit and abort visit exactly those.

use std::collections::HashMap;

use rndb_protocol::{LockMode, NdbError, OperationType, Value};

use super::acc::{HashIndex, LockKind, Pending, Row, RowSlot, TransId, Waiter};
use super::dict::{Dict, Table};
use super::tup::{self, DataMemory};

/// One key operation, as TC hands it to LQH.
#[derive(Debug)]
pub struct LqhKeyReq {
    pub trans: TransId,
    /// The operation's index in its execute, echoed back to the API.
    pub op_index: u32,
    pub op_type: OperationType,
    pub lock_mode: LockMode,
    pub table_id: u32,
    pub fragment: u32,
    /// The canonical key encoding (the hash-index key).
    pub key_bytes: Box<[u8]>,
    pub key: Vec<Value>,
    pub attrs: Vec<(u16, Value)>,
}

/// LQH's answer to one operation.
#[derive(Debug)]
pub enum LqhAnswer {
    /// Done; a read carries its row.
    Conf {
        trans: TransId,
        op_index: u32,
        row: Option<Vec<Value>>,
    },
    /// Failed with an NDB error.
    Ref {
        trans: TransId,
        op_index: u32,
        error: NdbError,
    },
}

/// A row a transaction touched (locked, or queued for).
#[derive(Debug)]
struct RowRef {
    table_id: u32,
    fragment: u32,
    key: Box<[u8]>,
}

/// The LQH block with its fragments.
#[derive(Debug)]
pub struct Lqh {
    /// Per table, its fragments' hash indexes.
    fragments: HashMap<u32, Vec<HashIndex<LqhKeyReq>>>,
    /// Rows each live transaction touched.
    trans_rows: HashMap<TransId, Vec<RowRef>>,
    memory: DataMemory,
}

impl Lqh {
    pub fn new(data_memory_bytes: u64) -> Lqh {
        Lqh {
            fragments: HashMap::new(),
            trans_rows: HashMap::new(),
            memory: DataMemory::new(data_memory_bytes),
        }
    }

    pub fn create_fragments(&mut self, table_id: u32, count: u32) {
        self.fragments
            .insert(table_id, (0..count).map(|_| HashIndex::new()).collect());
    }

    /// Drops a table's fragments and frees their memory. Operations queued on its rows fail
    /// with 709.
    pub fn drop_fragments(&mut self, table_id: u32) -> Vec<LqhAnswer> {
        let mut answers = Vec::new();
        for index in self.fragments.remove(&table_id).unwrap_or_default() {
            for (key, mut slot) in index {
                self.memory.free(charged_bytes(&key, &slot));
                for req in drain_waiters(&mut slot) {
                    answers.push(refuse(
                        &req,
                        NdbError::with_detail(709, "the table was dropped"),
                    ));
                }
            }
        }
        answers
    }

    pub fn memory_used_bytes(&self) -> u64 {
        self.memory.used_bytes()
    }

    /// Runs one operation. Returns `None` when it waits for a lock; it is handed back by
    /// `commit` or `abort` of the holder when the lock is granted.
    pub fn execute(&mut self, dict: &Dict, req: LqhKeyReq) -> Option<LqhAnswer> {
        let Some(table) = dict.get(req.table_id) else {
            return Some(refuse(
                &req,
                NdbError::with_detail(709, format!("table id {}", req.table_id)),
            ));
        };
        let Some(index) = self
            .fragments
            .get_mut(&req.table_id)
            .and_then(|f| f.get_mut(req.fragment as usize))
        else {
            return Some(refuse(
                &req,
                NdbError::with_detail(
                    4000,
                    format!("table {} has no fragment {}", req.table_id, req.fragment),
                ),
            ));
        };
        let kind = match (req.op_type, req.lock_mode) {
            (OperationType::Read, LockMode::CommittedRead) => {
                let row = index
                    .get(&req.key_bytes)
                    .and_then(|s| s.visible_to(req.trans));
                return Some(read_answer(&req, row));
            }
            (OperationType::Read, LockMode::Read) => LockKind::Shared,
            _ => LockKind::Exclusive,
        };
        if !index.contains_key(&req.key_bytes) {
            if matches!(
                req.op_type,
                OperationType::Read | OperationType::Update | OperationType::Delete
            ) {
                return Some(refuse(&req, NdbError::new(626)));
            }
            if let Err(e) = self.memory.reserve(tup::slot_bytes(&req.key_bytes)) {
                return Some(refuse(&req, e));
            }
            index.insert(req.key_bytes.clone(), RowSlot::default());
        }
        let Some(slot) = index.get_mut(&req.key_bytes) else {
            return Some(refuse(&req, NdbError::with_detail(4000, "slot vanished")));
        };
        let touched = RowRef {
            table_id: req.table_id,
            fragment: req.fragment,
            key: req.key_bytes.clone(),
        };
        let rows = self.trans_rows.entry(req.trans).or_default();
        if !slot.lock.held_by(req.trans) {
            rows.push(touched);
        }
        if !slot.lock.try_acquire(req.trans, kind) {
            slot.lock.enqueue(Waiter {
                trans: req.trans,
                kind,
                work: req,
            });
            return None;
        }
        Some(apply(slot, table, &mut self.memory, &req))
    }

    /// Makes every change of `trans` the committed image and releases its locks. Returns the
    /// operations whose locks were granted, to be run again.
    pub fn commit(&mut self, trans: TransId) -> Vec<LqhKeyReq> {
        self.finish(trans, true)
    }

    /// Discards every change of `trans`, drops its queued operations and releases its locks.
    pub fn abort(&mut self, trans: TransId) -> Vec<LqhKeyReq> {
        self.finish(trans, false)
    }

    fn finish(&mut self, trans: TransId, commit: bool) -> Vec<LqhKeyReq> {
        let mut granted = Vec::new();
        for row in self.trans_rows.remove(&trans).unwrap_or_default() {
            let Some(index) = self
                .fragments
                .get_mut(&row.table_id)
                .and_then(|f| f.get_mut(row.fragment as usize))
            else {
                continue;
            };
            let Some(slot) = index.get_mut(&row.key) else {
                continue;
            };
            if slot.pending.as_ref().is_some_and(|p| p.trans == trans) {
                if let Some(pending) = slot.pending.take() {
                    let freed = if commit {
                        std::mem::replace(&mut slot.committed, pending.image)
                    } else {
                        pending.image
                    };
                    self.memory.free(freed.as_deref().map_or(0, tup::row_bytes));
                }
            }
            slot.lock.release(trans);
            granted.extend(slot.lock.grant_waiters());
            if slot.is_empty() {
                index.remove(&row.key);
                self.memory.free(tup::slot_bytes(&row.key));
            }
        }
        granted
    }
}

/// Runs an operation that holds the lock it needs.
fn apply(
    slot: &mut RowSlot<LqhKeyReq>,
    table: &Table,
    memory: &mut DataMemory,
    req: &LqhKeyReq,
) -> LqhAnswer {
    let def = &table.info.def;
    let current = slot.visible_to(req.trans);
    let image: Result<Option<Row>, NdbError> = match req.op_type {
        OperationType::Read => return read_answer(req, current),
        OperationType::Insert if current.is_some() => Err(NdbError::new(630)),
        OperationType::Insert => {
            tup::build_row(def, &table.key_columns, &req.key, &req.attrs).map(Some)
        }
        OperationType::Update | OperationType::Delete if current.is_none() => {
            Err(NdbError::new(626))
        }
        OperationType::Update | OperationType::Write if current.is_some() => {
            let mut row: Vec<Value> = current.map(|r| r.to_vec()).unwrap_or_default();
            tup::apply_attrs(def, &mut row, &req.attrs).map(|()| Some(row.into_boxed_slice()))
        }
        OperationType::Write | OperationType::Update => {
            tup::build_row(def, &table.key_columns, &req.key, &req.attrs).map(Some)
        }
        OperationType::Delete => Ok(None),
    };
    match image.and_then(|image| set_pending(slot, req.trans, image, memory)) {
        Ok(()) => LqhAnswer::Conf {
            trans: req.trans,
            op_index: req.op_index,
            row: None,
        },
        Err(error) => refuse(req, error),
    }
}

/// Records `image` as the transaction's uncommitted change, charging its memory first.
fn set_pending(
    slot: &mut RowSlot<LqhKeyReq>,
    trans: TransId,
    image: Option<Row>,
    memory: &mut DataMemory,
) -> Result<(), NdbError> {
    debug_assert!(
        slot.pending.as_ref().is_none_or(|p| p.trans == trans),
        "uncommitted change of another transaction under an exclusive lock"
    );
    memory.reserve(image.as_deref().map_or(0, tup::row_bytes))?;
    if let Some(old) = slot.pending.take() {
        memory.free(old.image.as_deref().map_or(0, tup::row_bytes));
    }
    slot.pending = Some(Pending { trans, image });
    Ok(())
}

fn read_answer(req: &LqhKeyReq, row: Option<&Row>) -> LqhAnswer {
    match row {
        Some(row) => LqhAnswer::Conf {
            trans: req.trans,
            op_index: req.op_index,
            row: Some(row.to_vec()),
        },
        None => refuse(req, NdbError::new(626)),
    }
}

fn refuse(req: &LqhKeyReq, error: NdbError) -> LqhAnswer {
    LqhAnswer::Ref {
        trans: req.trans,
        op_index: req.op_index,
        error,
    }
}

/// Bytes a slot is charged in all: key, committed image, uncommitted image.
fn charged_bytes(key: &[u8], slot: &RowSlot<LqhKeyReq>) -> u64 {
    let image = |r: Option<&Row>| r.map_or(0, |r| tup::row_bytes(r));
    tup::slot_bytes(key)
        + image(slot.committed.as_ref())
        + image(slot.pending.as_ref().and_then(|p| p.image.as_ref()))
}

/// Takes every queued operation off a slot's lock.
fn drain_waiters(slot: &mut RowSlot<LqhKeyReq>) -> Vec<LqhKeyReq> {
    let mut reqs = Vec::new();
    loop {
        let granted = slot.lock.grant_waiters();
        if granted.is_empty() {
            break;
        }
        reqs.extend(granted);
        // Release everything so the next waiters can be taken too.
        for r in &reqs {
            slot.lock.release(r.trans);
        }
    }
    reqs
}
