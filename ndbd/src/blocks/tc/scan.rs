//! TC's half of a scan: the scan records (bounded by MaxNoOfConcurrentScans), which fragments
//! a batch covers, and the answers (SCAN_ROWS frames, then SCAN_TABCONF or SCAN_TABREF).
//!
//! A batch request names fragments (or lets the scan's parallelism choose them). Each runs in
//! LQH ([`Lqh::scan_batch`](crate::blocks::lqh::Lqh::scan_batch)) until it reaches its row, byte or
//! examined-rows limit, runs out, or waits for a row lock. Rows are encoded straight into a
//! SCAN_ROWS payload, sent whenever it is nearly full; when no fragment of the request waits
//! any more, the last rows and the SCAN_TABCONF go out. A scan whose every fragment is done
//! frees its record with its last answer; closing early frees it at once; its transaction's
//! end, or its API node's departure, frees it too.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::ops::Bound;
use std::time::Instant;

use rndb_config::NodeId;
use rndb_protocol::scan::{
    encode_scan_row_encoded, FragmentBatch, KeyRange, RangeEnd, ScanNextReq, ScanTabConf,
    ScanTabReq, SCAN_BATCH_BYTES_MAX, SCAN_BATCH_BYTES_TOTAL_MAX, SCAN_BATCH_ROWS_MAX,
    SCAN_FLAG_DESCENDING, SCAN_FLAG_PART, SCAN_FLAG_START_TRANSACTION, SCAN_ROWS_PAYLOAD_BYTES_MAX,
};
use rndb_protocol::schema::ROW_BYTES_MAX;
use rndb_protocol::signals::{gsn, Refusal};
use rndb_protocol::{IndexKind, NdbError};
use rndb_transporter::frame::FRAME_PAYLOAD_BYTES_MAX;
use rndb_transporter::FrameHeader;

use crate::blocks::acc::{Row, TransId};
use crate::blocks::answers::Unsent;
use crate::blocks::dict::Dict;
use crate::blocks::lqh::scan::{BatchEnd, BatchLimits, Cursor, Progress, ScanDef};
use crate::blocks::lqh::ScanKey;
use crate::blocks::{api_header, tc, tup, tux, Kernel, Outbox};

/// A SCAN_ROWS payload is sent once it holds this many bytes, so one more row of the largest
/// size still fits in a frame.
const ROWS_FLUSH_BYTES: usize = SCAN_ROWS_PAYLOAD_BYTES_MAX - ROW_BYTES_MAX - 16;
const _: () = assert!(SCAN_ROWS_PAYLOAD_BYTES_MAX <= FRAME_PAYLOAD_BYTES_MAX);
const _: () = assert!(ROWS_FLUSH_BYTES > ROW_BYTES_MAX);

/// Rows one fragment looks at in one batch before answering, matches or not: bounds the time
/// one batch holds the execution thread.
pub const SCAN_EXAMINED_ROWS_MAX: u32 = 32 * 1024;

/// One fragment of a scan.
#[derive(Debug)]
struct FragmentState {
    cursor: Cursor,
    /// What the current batch returned so far.
    progress: Progress,
    done: bool,
    /// Parked in a lock queue.
    waiting: bool,
}

/// One open scan.
#[derive(Debug)]
pub struct ScanRecord {
    api: NodeId,
    def: ScanDef,
    /// The fragments this node scans (those it holds the primary replica of; the API scans
    /// every data node), by their number in this scan, which answers use.
    fragment_ids: Vec<u32>,
    fragments: Vec<FragmentState>,
    /// Fragments a batch request without a list covers.
    parallelism: usize,
    /// Per-fragment batch limits.
    limits: BatchLimits,
    /// The request id being answered, while a batch is running.
    request: Option<u32>,
    /// The fragments of the running batch.
    in_request: Vec<u16>,
    /// Fragments of the running batch parked in lock queues.
    waiting: u32,
    /// The SCAN_ROWS payload being filled.
    rows_out: Vec<u8>,
    /// The batch failed: answered with SCAN_TABREF, and the scan closes.
    failure: Option<NdbError>,
}

/// The scan records of this node's TC.
#[derive(Debug)]
pub struct Scans {
    records: HashMap<ScanKey, ScanRecord>,
    /// MaxNoOfConcurrentScans.
    scans_max: u32,
    /// MaxNoOfLocalScans: the fragment scans the open scans may run at once (each takes its
    /// parallelism's worth, NDB's scanfrag records, while it is open).
    fragment_scans_max: u32,
}

impl Scans {
    pub fn new(scans_max: u32) -> Scans {
        Scans {
            records: HashMap::new(),
            scans_max,
            fragment_scans_max: u32::MAX,
        }
    }

    /// Open scans run at most `max` fragment scans at once (MaxNoOfLocalScans).
    pub fn with_fragment_scans_max(mut self, max: u32) -> Scans {
        self.fragment_scans_max = max;
        self
    }

    /// The fragment scans the open scans hold.
    fn fragment_scans(&self) -> usize {
        self.records.values().map(|r| r.parallelism).sum()
    }

    pub fn count(&self) -> usize {
        self.records.len()
    }

    /// Scan records in use and MaxNoOfConcurrentScans; fragment scans held and
    /// MaxNoOfLocalScans.
    pub fn pools(&self) -> (usize, u32, usize, u32) {
        (
            self.records.len(),
            self.scans_max,
            self.fragment_scans(),
            self.fragment_scans_max,
        )
    }

    /// True while `trans` has a scan open here.
    pub fn open_in(&self, trans: TransId) -> bool {
        self.records.values().any(|r| r.def.trans == trans)
    }

    /// The transactions with a scan open here.
    pub fn transactions(&self) -> std::collections::HashSet<TransId> {
        self.records.values().map(|r| r.def.trans).collect()
    }
}

/// Names a scan by its API node and scan id.
pub fn scan_key(api: NodeId, scan_id: u32) -> ScanKey {
    ScanKey { api, scan_id }
}

impl Kernel {
    /// SCAN_TABREQ: checks the scan, opens its record and runs its first batch.
    pub(crate) fn exec_scan_tabreq(
        &mut self,
        from: NodeId,
        header: &FrameHeader,
        req: ScanTabReq,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        let key = scan_key(from, header.request_id);
        let trans = tc::trans_id(from, req.trans_request_id);
        match self.open_scan(from, key, trans, &req, now) {
            Ok(()) => {
                if req.flags & SCAN_FLAG_PART == 0 {
                    match req.index_id {
                        0 => self.tc.counters.table_scans += 1,
                        _ => self.tc.counters.range_scans += 1,
                    }
                }
                self.start_batch(key, header.request_id, &[], out, now)
            }
            Err(e) => scan_ref(&mut self.unsent, out, from, header.request_id, &e),
        }
    }

    fn open_scan(
        &mut self,
        from: NodeId,
        key: ScanKey,
        trans: TransId,
        req: &ScanTabReq,
        now: Instant,
    ) -> Result<(), NdbError> {
        if self.scans.records.contains_key(&key) {
            return Err(NdbError::with_detail(4000, "scan id already in use"));
        }
        // The transaction is attached first, so that whatever else fails, the API knows its
        // transaction exists (as a key operation that fails still starts one).
        let start = req.flags & SCAN_FLAG_START_TRANSACTION != 0;
        let part = req.flags & SCAN_FLAG_PART != 0;
        self.tc.attach_scan(trans, start, part, now)?;
        if self.tc.starts_held() {
            // Which node scans which partition changes with the primaries: a scan begun now
            // could read a partition twice, or miss one, beside parts begun before.
            return Err(NdbError::with_detail(
                1204,
                "primaries are moving back to a restarted data node; retry",
            ));
        }
        if !req.alive.is_empty() && !self.sees_alive(&req.alive) {
            // Each node scans the partitions it is the live primary of: with another view of
            // who is alive, some partitions would be scanned twice or not at all.
            return Err(NdbError::with_detail(
                4010,
                format!(
                    "the API scans data nodes {:?}, but data node {} sees another membership; retry",
                    req.alive, self.me
                ),
            ));
        }
        if self.scans.records.len() >= self.scans.scans_max as usize {
            return Err(NdbError::with_detail(
                245,
                format!("MaxNoOfConcurrentScans={}", self.scans.scans_max),
            ));
        }
        let (def, table_fragments) = build_scan_def(&self.dict, key, trans, req)?;
        // The partitions whose live primary is this node (its own, and those of failed
        // primaries it took over).
        let fragment_ids: Vec<u32> = (0..self.dih.partition_count())
            .filter(|&f| (f as usize) < table_fragments)
            .filter(|&f| self.live_replicas(f).first() == Some(&self.me))
            .collect();
        let fragment_count = fragment_ids.len();
        let parallelism = match usize::from(req.parallelism) {
            0 => fragment_count,
            p => p.min(fragment_count),
        };
        let held = self.scans.fragment_scans();
        if held + parallelism > self.scans.fragment_scans_max as usize {
            return Err(NdbError::with_detail(
                291,
                format!(
                    "MaxNoOfLocalScans={}: the open scans hold {held} fragment scans, this one \
                     needs {parallelism}",
                    self.scans.fragment_scans_max
                ),
            ));
        }
        let start_cursor = match def.index_id {
            None => Cursor::Slot(0),
            Some(_) => Cursor::Index {
                range: 0,
                from: Bound::Unbounded,
            },
        };
        let total = req.batch_bytes_total.clamp(1, SCAN_BATCH_BYTES_TOTAL_MAX);
        let limits = BatchLimits {
            rows: req.batch_rows.clamp(1, SCAN_BATCH_ROWS_MAX),
            bytes: req
                .batch_bytes
                .min(total / parallelism.max(1) as u32)
                .clamp(1, SCAN_BATCH_BYTES_MAX),
            examined: SCAN_EXAMINED_ROWS_MAX,
        };
        let fragments = (0..fragment_count)
            .map(|_| FragmentState {
                cursor: start_cursor.clone(),
                progress: Progress::default(),
                done: false,
                waiting: false,
            })
            .collect();
        let record = ScanRecord {
            api: from,
            def,
            fragment_ids,
            fragments,
            parallelism,
            limits,
            request: None,
            in_request: Vec::new(),
            waiting: 0,
            rows_out: Vec::with_capacity(SCAN_ROWS_PAYLOAD_BYTES_MAX),
            failure: None,
        };
        self.scans.records.insert(key, record);
        Ok(())
    }

    /// SCAN_NEXTREQ: the next batch, or closing the scan.
    pub(crate) fn exec_scan_nextreq(
        &mut self,
        from: NodeId,
        header: &FrameHeader,
        req: ScanNextReq,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        let key = scan_key(from, req.scan_id);
        let Some(record) = self.scans.records.get(&key) else {
            let error = NdbError::with_detail(4120, format!("no open scan {}", req.scan_id));
            return scan_ref(&mut self.unsent, out, from, header.request_id, &error);
        };
        if record.request.is_some() {
            let error = NdbError::with_detail(4000, "next batch asked while one is running");
            return scan_ref(&mut self.unsent, out, from, header.request_id, &error);
        }
        let trans = record.def.trans;
        if req.close {
            let fragment_count = record.fragments.len() as u16;
            self.scans.records.remove(&key);
            return scan_conf(
                &mut self.unsent,
                out,
                from,
                header.request_id,
                fragment_count,
                true,
                Vec::new(),
            );
        }
        if let Err(e) = self.tc.touch(trans, now) {
            self.scans.records.remove(&key);
            return scan_ref(&mut self.unsent, out, from, header.request_id, &e);
        }
        self.start_batch(key, header.request_id, &req.fragments, out, now);
    }

    /// Starts a batch of `fragments` (empty: as many unfinished ones as the parallelism
    /// allows) answering `request_id`.
    fn start_batch(
        &mut self,
        key: ScanKey,
        request_id: u32,
        fragments: &[u16],
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        let Some(record) = self.scans.records.get_mut(&key) else {
            return;
        };
        let chosen: Vec<u16> = if fragments.is_empty() {
            (0..record.fragments.len())
                .filter(|&f| !record.fragments[f].done)
                .take(record.parallelism)
                .map(|f| f as u16)
                .collect()
        } else {
            let mut list = fragments.to_vec();
            list.sort_unstable();
            list.dedup();
            let bad = list
                .iter()
                .find(|&&f| record.fragments.get(usize::from(f)).is_none_or(|s| s.done));
            if let Some(f) = bad {
                let error = NdbError::with_detail(4000, format!("fragment {f} is done or unknown"));
                return scan_ref(&mut self.unsent, out, record.api, request_id, &error);
            }
            list
        };
        record.request = Some(request_id);
        record.in_request = chosen.clone();
        for f in chosen {
            self.run_fragment(key, f, now, out);
        }
        self.end_batch_if_ready(key, out);
    }

    /// Runs one fragment's batch until a limit, its end or a lock wait.
    fn run_fragment(&mut self, key: ScanKey, fragment: u16, now: Instant, out: &mut dyn Outbox) {
        let Some(record) = self.scans.records.get_mut(&key) else {
            return;
        };
        let ScanRecord {
            api,
            def,
            fragment_ids,
            fragments,
            limits,
            request,
            waiting,
            rows_out,
            failure,
            ..
        } = record;
        let (api, request_id) = (*api, request.unwrap_or_default());
        let (Some(state), Some(&fragment_id)) = (
            fragments.get_mut(usize::from(fragment)),
            fragment_ids.get(usize::from(fragment)),
        ) else {
            return;
        };
        let mut emit = |row: &Row| {
            let before = rows_out.len();
            encode_scan_row_encoded(rows_out, fragment, row.encoded());
            let bytes = rows_out.len() - before;
            if rows_out.len() >= ROWS_FLUSH_BYTES {
                send_rows(out, api, request_id, rows_out, failure);
            }
            bytes
        };
        let free = self.tc.operations_free();
        let mut records = free;
        let end = self.lqh.scan_batch(
            def,
            fragment_id,
            &mut state.cursor,
            *limits,
            &mut state.progress,
            &mut records,
            &mut emit,
        );
        // The rows it locked hold operation records until the transaction ends.
        self.tc.take_scan_records(def.trans, free - records);
        match end {
            Ok(BatchEnd::More) => {}
            Ok(BatchEnd::Done) => state.done = true,
            Ok(BatchEnd::Wait) => {
                state.waiting = true;
                *waiting += 1;
                self.tc.scan_wait_started(def.trans, now);
            }
            Err(e) => {
                state.done = true;
                failure.get_or_insert(e);
            }
        }
    }

    /// A lock a scan waited for was granted: the fragment's batch goes on.
    pub(crate) fn resume_scan(
        &mut self,
        key: ScanKey,
        fragment_id: u32,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        let Some(record) = self.scans.records.get_mut(&key) else {
            return;
        };
        let Some(fragment) = record.fragment_ids.iter().position(|&f| f == fragment_id) else {
            return;
        };
        let Some(state) = record.fragments.get_mut(fragment) else {
            return;
        };
        if !state.waiting {
            return;
        }
        let trans = record.def.trans;
        if !self.tc.is_active(trans) {
            // The transaction's commit or abort started: the scan takes no more locks (its
            // record goes when the transaction ends).
            return;
        }
        state.waiting = false;
        record.waiting -= 1;
        self.tc.scan_wait_ended(trans);
        self.run_fragment(key, fragment as u16, now, out);
        self.end_batch_if_ready(key, out);
        self.complete(trans, out, now);
    }

    /// Answers the running batch once no fragment of it waits.
    fn end_batch_if_ready(&mut self, key: ScanKey, out: &mut dyn Outbox) {
        let Some(record) = self.scans.records.get_mut(&key) else {
            return;
        };
        let Some(request_id) = record.request else {
            return;
        };
        if record.waiting > 0 {
            return;
        }
        let api = record.api;
        if record.failure.is_none() {
            send_rows(
                out,
                api,
                request_id,
                &mut record.rows_out,
                &mut record.failure,
            );
        }
        if let Some(error) = record.failure.take() {
            self.scans.records.remove(&key);
            return scan_ref(&mut self.unsent, out, api, request_id, &error);
        }
        let batches = std::mem::take(&mut record.in_request)
            .into_iter()
            .map(|f| {
                let state = &mut record.fragments[usize::from(f)];
                let rows = std::mem::take(&mut state.progress).rows;
                FragmentBatch {
                    fragment: f,
                    rows,
                    done: state.done,
                }
            })
            .collect();
        record.request = None;
        let finished = record.fragments.iter().all(|f| f.done);
        let fragment_count = record.fragments.len() as u16;
        if finished {
            self.scans.records.remove(&key);
        }
        scan_conf(
            &mut self.unsent,
            out,
            api,
            request_id,
            fragment_count,
            finished,
            batches,
        );
    }

    /// Closes the scans of a transaction that ended; a running batch is refused with the error
    /// `error` makes (built only when there is such a batch).
    pub(crate) fn close_scans_of(
        &mut self,
        trans: TransId,
        error: &dyn Fn() -> NdbError,
        out: &mut dyn Outbox,
    ) {
        let mut keys: Vec<ScanKey> = self
            .scans
            .records
            .iter()
            .filter(|(_, r)| r.def.trans == trans)
            .map(|(k, _)| *k)
            .collect();
        if keys.is_empty() {
            return;
        }
        // In key order: the records' map has a random order, and the refusals go out in it.
        keys.sort_unstable();
        let error = error();
        for key in keys {
            if let Some(record) = self.scans.records.remove(&key) {
                if let Some(request_id) = record.request {
                    scan_ref(&mut self.unsent, out, record.api, request_id, &error);
                }
            }
        }
    }

    /// An API node left: its scans go without answers.
    pub(crate) fn abandon_scans(&mut self, api: NodeId) {
        self.scans.records.retain(|_, r| r.api != api);
    }
}

/// Checks a scan request against the dictionary and builds its definition; returns it with
/// the table's fragment count.
fn build_scan_def(
    dict: &Dict,
    key: ScanKey,
    trans: TransId,
    req: &ScanTabReq,
) -> Result<(ScanDef, usize), NdbError> {
    let table = dict.for_operation(req.table_id, req.table_version)?;
    if let Some(filter) = &req.filter {
        tup::check_filter(&table.info.def, filter)?;
    }
    let descending = req.flags & SCAN_FLAG_DESCENDING != 0;
    let (index_id, ranges) = if req.index_id == 0 {
        if !req.ranges.is_empty() {
            return Err(NdbError::with_detail(4259, "bounds on a full-table scan"));
        }
        (None, Vec::new())
    } else {
        let index = dict.index_for_operation(req.index_id, req.index_version)?;
        if index.info.kind != IndexKind::Ordered || index.info.table_id != req.table_id {
            return Err(NdbError::with_detail(
                4243,
                format!("{} is not an ordered index of this table", index.info.name),
            ));
        }
        let columns: Vec<_> = index
            .columns
            .iter()
            .map(|&c| table.info.def.columns[c].column_type)
            .collect();
        let mut ranges = Vec::with_capacity(req.ranges.len().max(1));
        for range in &req.ranges {
            check_range(range, &columns)?;
            ranges.push(tux::range_bounds(range));
        }
        if req.ranges.is_empty() {
            ranges.push((Bound::Unbounded, Bound::Unbounded));
        }
        order_ranges(&mut ranges, descending);
        (Some(index.info.index_id), ranges)
    };
    let def = ScanDef {
        key,
        trans,
        table_id: req.table_id,
        index_id,
        lock: req.lock_mode,
        descending,
        ranges,
        filter: req.filter.clone(),
    };
    Ok((def, table.fragment_count.max(1) as usize))
}

/// A bound's values must be a prefix of the index columns, each fitting its column (NULL
/// allowed: it sorts first): 4259 otherwise.
fn check_range(range: &KeyRange, columns: &[rndb_protocol::ColumnType]) -> Result<(), NdbError> {
    for end in [&range.low, &range.high] {
        let values = match end {
            RangeEnd::Unbounded => continue,
            RangeEnd::Included(v) | RangeEnd::Excluded(v) => v,
        };
        if values.len() > columns.len() {
            return Err(NdbError::with_detail(
                4259,
                format!(
                    "a bound of {} values on an index of {}",
                    values.len(),
                    columns.len()
                ),
            ));
        }
        if let Some((v, t)) = values.iter().zip(columns).find(|(v, t)| !v.fits(**t)) {
            return Err(NdbError::with_detail(
                4259,
                format!("bound value {v:?} for a {t} column"),
            ));
        }
    }
    Ok(())
}

/// Orders ranges in walking order: by low end ascending, or by high end descending.
fn order_ranges(ranges: &mut [tux::EntryRange], descending: bool) {
    fn key(b: &Bound<Box<[u8]>>, unbounded: Ordering) -> (Ordering, &[u8]) {
        match b {
            Bound::Unbounded => (unbounded, &[]),
            Bound::Included(k) | Bound::Excluded(k) => (Ordering::Equal, k),
        }
    }
    if descending {
        ranges.sort_by(|a, b| key(&b.1, Ordering::Greater).cmp(&key(&a.1, Ordering::Greater)));
    } else {
        ranges.sort_by(|a, b| key(&a.0, Ordering::Less).cmp(&key(&b.0, Ordering::Less)));
    }
}

/// Sends the rows gathered so far as one SCAN_ROWS frame.
fn send_rows(
    out: &mut dyn Outbox,
    api: NodeId,
    request_id: u32,
    rows: &mut Vec<u8>,
    failure: &mut Option<NdbError>,
) {
    if rows.is_empty() {
        return;
    }
    let sent = out.send(api, api_header(gsn::SCAN_ROWS, request_id), &mut |b| {
        b.extend_from_slice(rows)
    });
    rows.clear();
    if sent.is_err() {
        failure.get_or_insert(NdbError::with_detail(
            1218,
            format!("scan rows for node {api} do not fit its send buffer"),
        ));
    }
}

fn scan_conf(
    unsent: &mut Unsent,
    out: &mut dyn Outbox,
    api: NodeId,
    request_id: u32,
    fragment_count: u16,
    finished: bool,
    fragments: Vec<FragmentBatch>,
) {
    let conf = ScanTabConf {
        fragment_count,
        finished,
        fragments,
    };
    // The batch's answer ends the API's request: kept until it can be sent.
    unsent.send(
        out,
        api,
        api_header(gsn::SCAN_TABCONF, request_id),
        &mut |b| conf.encode(b),
    );
}

pub(crate) fn scan_ref(
    unsent: &mut Unsent,
    out: &mut dyn Outbox,
    api: NodeId,
    request_id: u32,
    error: &NdbError,
) {
    let refusal = Refusal {
        code: error.code,
        detail: error.message.clone(),
    };
    unsent.send(
        out,
        api,
        api_header(gsn::SCAN_TABREF, request_id),
        &mut |b| refusal.encode(b),
    );
}
