//! LQH's half of a scan: one batch of one fragment, walking the slot store (a full-table scan)
//! or an ordered index (TUX), checking each row's visible image, evaluating the pushed-down
//! filter (TUP) and, for locking scans, taking the row lock.
//!
//! A CommittedRead scan never waits: it returns the image the scan's transaction may see (its
//! own change, else the committed row). A Read or Exclusive scan first checks the visible image
//! without a lock, so rows the filter refuses are never locked; a candidate is then locked, the
//! image checked again under the lock and returned. When the lock is taken by another
//! transaction the scan parks in the lock's queue, its cursor on that row, and is resumed when
//! the lock is granted. Locks are held until the transaction ends, as for key operations.

use std::ops::Bound;

use rndb_protocol::filter::Filter;
use rndb_protocol::{LockMode, NdbError};

use crate::blocks::acc::{LockKind, Row, RowSlot, SlotId, SlotStore, TransId, Waiter};
use crate::blocks::lqh::{Lqh, LqhWork, RowRef, ScanKey};
use crate::blocks::tup::RowFilter;
use crate::blocks::tux::{range_is_empty, EntryRange, OrderedIndex};

/// What a scan is, as every batch of every fragment needs it.
#[derive(Debug)]
pub struct ScanDef {
    pub key: ScanKey,
    pub trans: TransId,
    pub table_id: u32,
    /// The ordered index walked; `None` walks the slot store.
    pub index_id: Option<u32>,
    pub lock: LockMode,
    pub descending: bool,
    /// Entry-key ranges, in walking order.
    pub ranges: Vec<EntryRange>,
    pub filter: Option<Filter>,
}

/// Where a fragment's scan stands: always on the next entry not yet looked at.
#[derive(Debug, Clone)]
pub enum Cursor {
    /// The next slot id of a full-table scan.
    Slot(SlotId),
    /// The current range of an index scan and the bound that continues it.
    Index {
        range: usize,
        from: Bound<Box<[u8]>>,
    },
}

/// How much one batch of one fragment may return and examine.
#[derive(Debug, Clone, Copy)]
pub struct BatchLimits {
    pub rows: u32,
    pub bytes: u32,
    /// Rows looked at before the batch ends even without results, so that a filter that
    /// matches nothing cannot hold the execution thread for a whole fragment.
    pub examined: u32,
}

/// What a batch has returned so far (kept across a lock wait).
#[derive(Debug, Clone, Copy, Default)]
pub struct Progress {
    pub rows: u32,
    pub bytes: u32,
    pub examined: u32,
}

/// Why a fragment's batch stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchEnd {
    /// A limit was reached; the fragment has more.
    More,
    /// The fragment has no more rows.
    Done,
    /// Parked in a lock queue; resumed when granted.
    Wait,
}

/// What a scan does with one row.
enum Visit<'a> {
    Emit(&'a Row),
    Skip,
    Wait,
    /// The row needs a lock and no operation record is free.
    NoRecord,
}

impl Progress {
    fn full(&self, limits: &BatchLimits) -> bool {
        self.rows >= limits.rows || self.bytes >= limits.bytes || self.examined >= limits.examined
    }
}

impl Lqh {
    /// Runs one fragment's batch from `cursor`, calling `emit` with each row to return (it
    /// answers with the bytes the row took). Each row a locking scan locks (or queues for)
    /// takes one of the `records` free operation records (MaxNoOfConcurrentOperations), which
    /// its transaction holds until it ends. Fails with 709 when the table is gone, 4243 when
    /// the index is, and 234 when a row needs a lock and no record is free.
    #[allow(clippy::too_many_arguments)]
    pub fn scan_batch(
        &mut self,
        def: &ScanDef,
        fragment: u32,
        cursor: &mut Cursor,
        limits: BatchLimits,
        progress: &mut Progress,
        records: &mut u32,
        emit: &mut dyn FnMut(&Row) -> usize,
    ) -> Result<BatchEnd, NdbError> {
        let Lqh {
            fragments,
            trans_rows,
            records_held,
            lock_waits_total,
            ..
        } = self;
        let Some(frag) = fragments
            .get_mut(&def.table_id)
            .and_then(|f| f.get_mut(fragment as usize))
        else {
            return Err(NdbError::with_detail(709, "the scanned table was dropped"));
        };
        let rows = &mut frag.rows;
        // The rows a locking scan locks are recorded for its transaction's commit or abort; the
        // list is looked up once per batch, not once per row.
        let mut locked = match def.lock {
            LockMode::CommittedRead => None,
            LockMode::Read | LockMode::Exclusive => Some(trans_rows.entry(def.trans).or_default()),
        };
        // The rows locked take LQH operation records too (only TC's records limit them).
        let locked_before = locked.as_ref().map_or(0, |rows| rows.len());
        let mut out_of_records = false;
        let mut filter = def.filter.as_ref().map(RowFilter::new);
        // Looks at one row unless the batch is full; `None` means stop here with that end.
        let mut visit = |id: SlotId,
                         slot: Option<&mut RowSlot<LqhWork>>,
                         index: Option<(&OrderedIndex, &[u8])>| {
            if progress.full(&limits) {
                return Some(BatchEnd::More);
            }
            progress.examined += 1;
            let slot = slot?;
            match visit_row(
                id,
                slot,
                def,
                fragment,
                index,
                locked.as_deref_mut(),
                records,
                filter.as_mut(),
            ) {
                Visit::Emit(row) => {
                    progress.rows += 1;
                    progress.bytes += emit(row) as u32;
                    None
                }
                Visit::Skip => None,
                Visit::Wait => {
                    *lock_waits_total += 1;
                    Some(BatchEnd::Wait)
                }
                Visit::NoRecord => {
                    out_of_records = true;
                    Some(BatchEnd::More)
                }
            }
        };
        let end = match cursor {
            Cursor::Slot(next) => 'walk: {
                while *next < rows.id_end() {
                    if let Some(end) = visit(*next, rows.slot_mut(*next), None) {
                        break 'walk end;
                    }
                    *next += 1;
                }
                BatchEnd::Done
            }
            Cursor::Index { range, from } => {
                let index_id = def.index_id.unwrap_or_default();
                let Some(index) = frag.ordered.iter().find(|i| i.index_id == index_id) else {
                    return Err(NdbError::with_detail(4243, "the scanned index was dropped"));
                };
                walk_index(index, rows, def, range, from, &mut visit)
            }
        };
        let locked_now = locked.map_or(0, |rows| rows.len());
        *records_held += locked_now.saturating_sub(locked_before) as u64;
        if out_of_records {
            return Err(NdbError::with_detail(
                234,
                "no operation record is free for the rows a locking scan locks \
                 (MaxNoOfConcurrentOperations)",
            ));
        }
        Ok(end)
    }
}

/// Looks at one row (if the slot exists) of an index entry (if any); `Some` stops the batch
/// with that end.
type RowVisitor<'a> = dyn FnMut(SlotId, Option<&mut RowSlot<LqhWork>>, Option<(&OrderedIndex, &[u8])>) -> Option<BatchEnd>
    + 'a;

/// Walks an ordered index's ranges from the cursor (`range`, `from`), visiting each entry's
/// row, until `visit` stops the batch or the ranges end.
fn walk_index(
    index: &OrderedIndex,
    rows: &mut SlotStore<LqhWork>,
    def: &ScanDef,
    range: &mut usize,
    from: &mut Bound<Box<[u8]>>,
    visit: &mut RowVisitor<'_>,
) -> BatchEnd {
    while *range < def.ranges.len() {
        let (low, high) = &def.ranges[*range];
        let (mut low, mut high) = (as_ref(low), as_ref(high));
        let from_ref = as_ref(from);
        if !matches!(from_ref, Bound::Unbounded) {
            if def.descending {
                high = from_ref;
            } else {
                low = from_ref;
            }
        }
        if !range_is_empty(&low, &high) {
            let mut entries = index.entries.range::<[u8], _>((low, high));
            loop {
                let next = if def.descending {
                    entries.next_back()
                } else {
                    entries.next()
                };
                let Some((entry, &id)) = next else {
                    break;
                };
                let slot = rows.slot_mut(id);
                debug_assert!(slot.is_some(), "index entry without a row");
                if let Some(end) = visit(id, slot, Some((index, entry))) {
                    *from = Bound::Included(entry.clone());
                    return end;
                }
            }
        }
        *range += 1;
        *from = Bound::Unbounded;
    }
    BatchEnd::Done
}

fn as_ref(bound: &Bound<Box<[u8]>>) -> Bound<&[u8]> {
    match bound {
        Bound::Included(k) => Bound::Included(k),
        Bound::Excluded(k) => Bound::Excluded(k),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// Decides what the scan does with one row (slot `id`), taking its lock when the scan locks.
#[allow(clippy::too_many_arguments)]
fn visit_row<'s>(
    id: SlotId,
    slot: &'s mut RowSlot<LqhWork>,
    def: &ScanDef,
    fragment: u32,
    index: Option<(&OrderedIndex, &[u8])>,
    locked: Option<&mut Vec<RowRef>>,
    records: &mut u32,
    mut filter: Option<&mut RowFilter<'_>>,
) -> Visit<'s> {
    // Without an uncommitted image the only entries of a row are its committed image's, so
    // only a row with one needs its entry checked against the image the scan sees.
    let check_entry = slot.pending.is_some();
    let mut qualifies = |row: &Row, pk: &[u8]| {
        index.is_none_or(|(ix, entry)| {
            !check_entry || {
                let mut scratch = Vec::with_capacity(entry.len());
                ix.encode_entry(row, pk, &mut scratch);
                scratch == entry
            }
        }) && filter.as_deref_mut().is_none_or(|f| f.matches(row))
    };
    let kind = match def.lock {
        LockMode::CommittedRead => {
            return match slot.visible_to(def.trans) {
                Some(row) if qualifies(row, &slot.key) => Visit::Emit(row),
                _ => Visit::Skip,
            }
        }
        LockMode::Read => LockKind::Shared,
        LockMode::Exclusive => LockKind::Exclusive,
    };
    if !slot.lock.held_by(def.trans) {
        if !slot
            .visible_to(def.trans)
            .is_some_and(|row| qualifies(row, &slot.key))
        {
            return Visit::Skip;
        }
        let Some(locked) = locked else {
            debug_assert!(false, "a locking scan without its row list");
            return Visit::Skip;
        };
        if *records == 0 {
            return Visit::NoRecord;
        }
        *records -= 1;
        // A scan runs on the fragment's primary: its locks go with the primary's rows.
        locked.push(RowRef {
            table_id: def.table_id,
            fragment,
            slot: id,
            backup: false,
        });
    }
    if !slot.lock.try_acquire(def.trans, kind) {
        slot.lock.enqueue(Waiter {
            trans: def.trans,
            kind,
            work: LqhWork::Scan {
                scan: def.key,
                fragment,
            },
        });
        return Visit::Wait;
    }
    match slot.visible_to(def.trans) {
        Some(row) if qualifies(row, &slot.key) => Visit::Emit(row),
        _ => Visit::Skip,
    }
}
