//! Local checkpoints (NDB's LCP, written by LQH and BACKUP): every committed row of this node's
//! fragments goes to disk in the background, a step of rows at a time between other work, so
//! traffic never stops; then the redo log before the checkpoint's start can be reused.
//!
//! A checkpoint starts once 4 × 2^TimeBetweenLocalCheckpoints bytes of redo were written since
//! the last one started, or at once after the last one while a quarter of the log is in use.
//! It notes where every redo part stands, scans the fragments (a fuzzy scan: rows change while
//! it runs), writes `LCP/<id>/ALL.Data` (DELETE and PUT records, then LCP_END), syncs it, and
//! then writes `LCP/<id>/LCP.ctl` with the parts' start positions and the newest epoch a row in
//! it can belong to (`max_gci`). A restart loads the checkpoint and replays the
//! redo from those positions: every change applied after the start was logged after them, so
//! the replay brings every row to its last logged image.
//!
//! A checkpoint may hold a row changed in an epoch that is not yet saved cluster-wide, so it
//! is only used once its `max_gci` is restorable: until then the one before it (and the redo
//! from that one's start) stays. When it becomes restorable (this node's sysfile names a
//! checkpoint at least as new), the redo before its start is released and older checkpoints
//! are removed.
//!
//! Checkpoints are partial, as NDB 7.6's are: a fragment remembers which rows changed and
//! which keys were deleted since the scan last passed ([`Changes`]), and a partial checkpoint
//! writes only those (deletes first, as DELETE records, then the changed rows). A restore loads
//! the last full checkpoint and every partial one after it, in order. A checkpoint is full when
//! the chain since the last full one has grown to `CHAIN_MAX` or its partial files together
//! outweigh the full one (so a restore reads at most about twice the data), and the first one
//! after a restart is full (what changed before it is not known).
//!
//! Writes go out at most `WRITES_IN_FLIGHT_MAX` at a time, so the scan runs at the speed the
//! disk takes them.

use crate::blocks::fs::FsWait;

use crate::blocks::acc::SlotId;
use crate::blocks::{Kernel, Outbox, Signal};
use crate::ndbfs::format::{self, gci_hi, kind, FileHeader, LcpCtl, RowChange};
use crate::ndbfs::FsOp;

/// Rows one step of the scan writes at most.
const ROWS_PER_STEP: usize = 2048;
/// Bytes one step of the scan writes at most.
const BYTES_PER_STEP: usize = 256 * 1024;
/// Writes of a checkpoint out at once, at most.
const WRITES_IN_FLIGHT_MAX: usize = 2;
/// Checkpoints in a chain (a full one and the partial ones after it), at most.
pub(crate) const CHAIN_MAX: u32 = 8;

/// What changed in a fragment since the local checkpoint scan last passed: slots (a bitmap by
/// slot id) and deleted keys.
#[derive(Debug, Default)]
pub struct Changes {
    slots: Vec<u64>,
    deleted: Vec<Box<[u8]>>,
}

impl Changes {
    /// The row in slot `id` was committed with a new image.
    pub fn changed(&mut self, id: SlotId) {
        let (word, bit) = (id as usize / 64, id % 64);
        if self.slots.len() <= word {
            self.slots.resize(word + 1, 0);
        }
        self.slots[word] |= 1 << bit;
    }

    /// The row with this key was deleted.
    pub fn deleted(&mut self, key: &[u8]) {
        self.deleted.push(key.into());
    }

    /// True when slot `id` changed; forgets it.
    fn take(&mut self, id: SlotId) -> bool {
        let (word, bit) = (id as usize / 64, id % 64);
        match self.slots.get_mut(word) {
            Some(w) if *w & (1 << bit) != 0 => {
                *w &= !(1 << bit);
                true
            }
            _ => false,
        }
    }
}

/// The directory of local checkpoint `id`.
pub(crate) fn lcp_dir(id: u32) -> String {
    format!("LCP/{id}")
}

/// The data file of local checkpoint `id`.
pub(crate) fn lcp_data(id: u32) -> String {
    format!("LCP/{id}/ALL.Data")
}

/// The control file of local checkpoint `id`.
pub(crate) fn lcp_ctl(id: u32) -> String {
    format!("LCP/{id}/LCP.ctl")
}

/// What a completed file request of a checkpoint was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LcpIo {
    Write,
    Sync,
    Ctl,
}

/// This node's local checkpoints.
#[derive(Debug, Default)]
pub(crate) struct Lcps {
    /// The newest checkpoint id used (complete or running).
    pub last_id: u32,
    /// Redo bytes appended when the last checkpoint started.
    redo_at_start: u64,
    /// Redo bytes that start the next checkpoint.
    trigger_bytes: u64,
    running: Option<Running>,
    /// Complete checkpoints waiting for their `max_gci` to be restorable, oldest first.
    waiting: Vec<LcpCtl>,
    /// Checkpoints up to this id are removed from disk.
    removed_through: u32,
    /// The chain the next checkpoint may extend: its full checkpoint's id and bytes, and the
    /// partial ones' bytes (`None`: the next one is full).
    chain: Option<Chain>,
    /// Start a checkpoint at the next timer, whatever redo was written (a node restart's
    /// first, which makes the copied rows restorable).
    pub start_now: bool,
    /// The newest checkpoint a restart would use (promoted), 0 before any.
    pub promoted: u32,
}

#[derive(Clone, Copy, Debug)]
struct Chain {
    base: u32,
    base_bytes: u64,
    partial_bytes: u64,
    length: u32,
}

#[derive(Debug)]
struct Running {
    id: u32,
    /// The full checkpoint it builds on (itself when full).
    base: u32,
    full: bool,
    starts: Vec<(u64, u64)>,
    /// Tables to scan, in id order, and where the scan is: table index, fragment, slot.
    tables: Vec<u32>,
    table: usize,
    fragment: u32,
    slot: u32,
    /// Bytes of the data file handed to NDBFS.
    written: u64,
    writes_in_flight: usize,
    rows: u64,
    /// The newest GCI a record written so far carries: a row copied by a node restart keeps
    /// the GCI of its last change at the live replica, which may be past this node's epoch.
    max_gci: u64,
    scanned: bool,
    /// A step is queued (so a write completion does not queue another).
    step_queued: bool,
}

impl Lcps {
    /// Checkpoints after `last_id` (the newest one a restart found; `oldest` the oldest on
    /// disk), started every 4 × 2^`time_between` bytes of redo.
    pub fn new(time_between: u32, oldest: u32, last_id: u32) -> Lcps {
        Lcps {
            last_id,
            trigger_bytes: 4u64 << time_between.min(31),
            removed_through: oldest.saturating_sub(1),
            ..Lcps::default()
        }
    }

    pub fn is_running(&self) -> bool {
        self.running.is_some()
    }
}

impl Kernel {
    /// Starts a local checkpoint when enough redo was written since the last one; asks the
    /// master for a global checkpoint now when the redo log is half full and a complete local
    /// checkpoint waits for one to release it.
    pub(crate) fn lcp_timer(&mut self, out: &mut dyn Outbox) {
        let Some(redo) = self.lqh.redo.as_ref() else {
            return;
        };
        if !self.lcps.waiting.is_empty() && redo.fill() > 0.5 {
            self.gcp_want_save(out);
        }
        let Some(redo) = self.lqh.redo.as_ref() else {
            return;
        };
        if self.restart.is_some() || self.lcps.is_running() {
            return;
        }
        // As NDB's EnableRedoControl: once a quarter of the log is in use, checkpoints run back
        // to back whatever TimeBetweenLocalCheckpoints says, so that a steady write load that
        // the disk keeps up with never fills the log.
        let written = redo.appended() - self.lcps.redo_at_start;
        let due = written >= self.lcps.trigger_bytes || (written > 0 && redo.fill() > 0.25);
        if !due && !std::mem::take(&mut self.lcps.start_now) {
            return;
        }
        let id = self.lcps.last_id + 1;
        self.lcps.last_id = id;
        self.lcps.redo_at_start = redo.appended();
        let starts = redo.positions();
        let chain = self
            .lcps
            .chain
            .filter(|c| c.length < CHAIN_MAX && c.partial_bytes < c.base_bytes);
        let (full, base) = match chain {
            Some(c) => (false, c.base),
            None => (true, id),
        };
        tracing::info!(
            lcp = id,
            full,
            keep_gci = gci_hi(self.gcp.current),
            oldest_restorable_gci = self.gcp.restorable,
            "local checkpoint {id} started"
        );
        let mut header = Vec::new();
        FileHeader {
            magic: format::LCP_DATA_MAGIC,
            node: u32::from(self.me.0),
            part: 0,
            seq: u64::from(id),
        }
        .encode(&mut header);
        self.lcps.running = Some(Running {
            id,
            base,
            full,
            starts,
            tables: self.dict.table_ids(),
            table: 0,
            fragment: 0,
            slot: 0,
            written: 0,
            writes_in_flight: 0,
            rows: 0,
            max_gci: 0,
            scanned: false,
            step_queued: true,
        });
        self.lcp_write(header);
        self.jobs.push_back(Signal::LcpStep);
    }

    /// Hands bytes of the running checkpoint's data file to NDBFS.
    fn lcp_write(&mut self, bytes: Vec<u8>) {
        let Some(run) = self.lcps.running.as_mut() else {
            return;
        };
        let len = bytes.len() as u64;
        self.fs.push(
            FsOp::Write {
                path: lcp_data(run.id),
                offset: run.written,
                bytes,
            },
            FsWait::Lcp(LcpIo::Write),
        );
        run.written += len;
        run.writes_in_flight += 1;
    }

    /// One step of the scan: up to a step's rows, from where the last one stopped.
    pub(crate) fn lcp_step(&mut self) {
        let Some(run) = self.lcps.running.as_mut() else {
            return;
        };
        run.step_queued = false;
        if run.scanned || run.writes_in_flight >= WRITES_IN_FLIGHT_MAX {
            // Resumed when a write completes.
            return;
        }
        let gci = self.gcp.current;
        let mut out = Vec::with_capacity(BYTES_PER_STEP + 4096);
        let mut rows = 0;
        while rows < ROWS_PER_STEP && out.len() < BYTES_PER_STEP {
            let Some(&table_id) = run.tables.get(run.table) else {
                run.scanned = true;
                break;
            };
            let Some(fragment) = self
                .lqh
                .fragments
                .get_mut(&table_id)
                .and_then(|f| f.get_mut(run.fragment as usize))
            else {
                // Past the table's last fragment (or the table was dropped): the next table.
                run.table += 1;
                run.fragment = 0;
                run.slot = 0;
                continue;
            };
            if run.slot == 0 {
                // Entering the fragment: the keys deleted since the last pass go first (a
                // full checkpoint needs none: a restore starts from it).
                let deleted = std::mem::take(&mut fragment.lcp.deleted);
                if !run.full {
                    for key in &deleted {
                        let change = RowChange {
                            table_id,
                            table_version: 0,
                            fragment: run.fragment,
                            key,
                            row: None,
                        };
                        format::append_record(&mut out, gci, kind::DELETE, |b| change.encode(b));
                    }
                }
            }
            if run.slot >= fragment.rows.id_end() {
                run.fragment += 1;
                run.slot = 0;
                continue;
            }
            let changed = fragment.lcp.take(run.slot);
            if run.full || changed {
                if let Some(image) = fragment
                    .rows
                    .slot(run.slot)
                    .and_then(|slot| Some((&slot.key, slot.committed.as_ref()?, slot.gci)))
                {
                    let change = RowChange {
                        table_id,
                        table_version: 0,
                        fragment: run.fragment,
                        key: image.0,
                        row: Some(image.1.encoded()),
                    };
                    // At or after the row's last change, which may be of a GCI this node has
                    // not switched to yet.
                    let row_gci = gci.max(u64::from(image.2) << 32);
                    run.max_gci = run.max_gci.max(row_gci);
                    format::append_record(&mut out, row_gci, kind::PUT, |b| change.encode(b));
                    rows += 1;
                }
            }
            run.slot += 1;
        }
        run.rows += rows as u64;
        if run.scanned {
            let total = run.rows;
            format::append_record(&mut out, gci, kind::LCP_END, |b| {
                b.extend_from_slice(&total.to_le_bytes())
            });
        }
        let (scanned, id) = (run.scanned, run.id);
        if !out.is_empty() {
            self.lcp_write(out);
        }
        if scanned {
            self.fs
                .push(FsOp::Sync { path: lcp_data(id) }, FsWait::Lcp(LcpIo::Sync));
        } else if let Some(run) = self.lcps.running.as_mut() {
            if run.writes_in_flight < WRITES_IN_FLIGHT_MAX {
                run.step_queued = true;
                self.jobs.push_back(Signal::LcpStep);
            }
        }
    }

    /// A file request of the running checkpoint completed.
    pub(crate) fn lcp_io_done(&mut self, io: LcpIo) {
        let me = u32::from(self.me.0);
        let Some(run) = self.lcps.running.as_mut() else {
            return;
        };
        match io {
            LcpIo::Write => {
                run.writes_in_flight -= 1;
                if !run.scanned && !run.step_queued {
                    run.step_queued = true;
                    self.jobs.push_back(Signal::LcpStep);
                }
            }
            LcpIo::Sync => {
                // Every row written was committed in this epoch or before, or in a later one
                // a coordinator had switched to first, whose change was logged here (seed
                // 0xd6945dcb: a row of GCI 3 committed at a node still in epoch 2 went into
                // a checkpoint a restart at GCI 2 then restored), or committed unlogged
                // while this node was copied to: a delete of GCI 9 left no record in the
                // first checkpoint after the copy, taken while this node's epoch still said
                // 8 (a slow link from the master), and a restart at GCI 8 restored the
                // checkpoint without the row (seed 0xc400254).
                let newest_logged = self.lqh.redo.as_ref().map_or(0, |r| r.newest_logged);
                let newest = newest_logged.max(self.lqh.newest_committed);
                let ctl = LcpCtl {
                    lcp_id: run.id,
                    base_id: run.base,
                    max_gci: self.gcp.current.max(newest).max(run.max_gci),
                    starts: run.starts.clone(),
                };
                self.fs.push(
                    FsOp::Replace {
                        path: lcp_ctl(run.id),
                        bytes: ctl.file_bytes(me),
                    },
                    FsWait::Lcp(LcpIo::Ctl),
                );
                self.lcps.waiting.push(ctl);
            }
            LcpIo::Ctl => {
                tracing::info!(
                    lcp = run.id,
                    full = run.full,
                    rows = run.rows,
                    bytes = run.written,
                    "local checkpoint {} completed",
                    run.id
                );
                self.lcps.chain = Some(match self.lcps.chain {
                    Some(c) if !run.full => Chain {
                        partial_bytes: c.partial_bytes + run.written,
                        length: c.length + 1,
                        ..c
                    },
                    _ => Chain {
                        base: run.id,
                        base_bytes: run.written,
                        partial_bytes: 0,
                        length: 1,
                    },
                });
                self.lcps.running = None;
                self.lcp_promote();
            }
        }
    }

    /// Once a complete checkpoint's rows are all restorable, a restart uses it: the redo
    /// before its start is released, and older checkpoints go.
    pub(crate) fn lcp_promote(&mut self) {
        self.lcp_promote_upto(self.gcp.restorable);
    }

    /// As [`lcp_promote`](Self::lcp_promote), with `restorable` for the newest restorable
    /// global checkpoint.
    pub(crate) fn lcp_promote_upto(&mut self, restorable: u32) {
        let running = self.lcps.running.as_ref().map(|r| r.id);
        let Some(at) = self
            .lcps
            .waiting
            .iter()
            .rposition(|ctl| gci_hi(ctl.max_gci) <= restorable && Some(ctl.lcp_id) != running)
        else {
            return;
        };
        let ctl = self.lcps.waiting.remove(at);
        self.lcps.waiting.drain(..at);
        self.lcps.promoted = self.lcps.promoted.max(ctl.lcp_id);
        if let Some(redo) = self.lqh.redo.as_mut() {
            redo.release_before(&ctl.starts);
        }
        // Every checkpoint before its chain goes (complete, superseded, or left incomplete by
        // a crash).
        for id in self.lcps.removed_through + 1..ctl.base_id {
            self.fs
                .push(FsOp::Remove { path: lcp_dir(id) }, FsWait::Nothing);
        }
        self.lcps.removed_through = self.lcps.removed_through.max(ctl.base_id.saturating_sub(1));
        tracing::debug!(
            lcp = ctl.lcp_id,
            "local checkpoint is restorable; older redo released"
        );
    }
}
