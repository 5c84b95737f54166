//! Scans: a full-table or ordered-index scan read as an iterator of rows, fetched in batches.
//!
//! `Transaction::scan_table` / `scan_index` send SCAN_TABREQ to every data node (each scans
//! the fragments whose primary replica it holds) and wait for each one's first batch;
//! the iterator then hands out buffered rows and asks for the next batch (SCAN_NEXTREQ, a new
//! request id each time) only when the rows it holds are used up, so the scan holds at most one
//! batch per fragment. A sorted index scan keeps one row buffered per unfinished fragment and
//! merges them by the index columns across every node's fragments, fetching more only from the
//! fragments that ran dry.
//! Dropping a scan before its end closes it on the data node without waiting;
//! [`Scan::close`] waits for the close to be acknowledged.
//!
//! A locked scan (Read or Exclusive) fails with 4010 when the link to any part's data node
//! failed, even a part that has handed out all its rows: that node rolled its part back and
//! freed the locks, so the rows would not be one snapshot. (The API may hear of a failure
//! only later; the transaction's commit checks those nodes again, see
//! `Transaction::scan_locks_to_confirm`.)

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::sync::Arc;

use rndb_protocol::filter::{value_cmp, Filter};
use rndb_protocol::scan::{
    decode_scan_rows, KeyRange, ScanNextReq, ScanTabConf, SCAN_BATCH_BYTES_MAX,
    SCAN_BATCH_BYTES_TOTAL_MAX, SCAN_BATCH_ROWS_MAX,
};
use rndb_protocol::signals::{block, gsn, Refusal};
use rndb_protocol::{LockMode, NdbError, Value};
use rndb_transporter::FrameHeader;

use crate::connection::{Answers, Connection};
use crate::stats::ClientStat;
use crate::{Cluster, Error, Table};

/// How a scan reads. The defaults: CommittedRead, every fragment at once, the batch sizes of
/// this API node's `[api]` slot (BatchSize, BatchByteSize, MaxScanBatchSize), no filter, and
/// for index scans the whole index, unsorted, ascending.
#[derive(Clone, Debug, PartialEq)]
pub struct ScanOptions {
    /// CommittedRead never waits; Read and Exclusive lock every row returned until the
    /// transaction ends.
    pub lock: LockMode,
    /// Fragments scanned at once; 0 means all (a sorted scan always uses all).
    pub parallelism: u16,
    /// Rows per fragment per batch (1..=992); `None` takes BatchSize.
    pub batch_rows: Option<u32>,
    /// Bytes per fragment per batch; `None` takes BatchByteSize.
    pub batch_bytes: Option<u32>,
    /// A condition evaluated in the data node; only matching rows are returned.
    pub filter: Option<Filter>,
    /// Index scans: the ranges to read (empty = the whole index). They are walked in index
    /// order whatever order they are given in; a row in two overlapping ranges comes twice.
    pub ranges: Vec<KeyRange>,
    /// Index scans: return rows in index order, merged across fragments.
    pub sorted: bool,
    /// Index scans: walk from high to low keys.
    pub descending: bool,
}

impl Default for ScanOptions {
    fn default() -> Self {
        ScanOptions {
            lock: LockMode::CommittedRead,
            parallelism: 0,
            batch_rows: None,
            batch_bytes: None,
            filter: None,
            ranges: Vec::new(),
            sorted: false,
            descending: false,
        }
    }
}

/// How the rows of a sorted scan compare: by these columns, maybe reversed.
#[derive(Debug)]
struct SortKey {
    columns: Vec<usize>,
    descending: bool,
}

/// An open scan. Iterating yields rows (every column, in table order) or the error that ended
/// the scan.
#[derive(Debug)]
pub struct Scan<'c> {
    cluster: &'c Cluster,
    table: Table,
    sort: Option<SortKey>,
    /// One part per data node, each over the fragments whose primary replica it holds.
    parts: Vec<Part>,
    /// The scan locks its rows: a part whose link failed fails it (4010). Cleared once it
    /// is abandoned, which reports the failure once.
    locked: bool,
    /// A CommittedRead scan of a table with blob parts tables: what a row read again to
    /// complete its values must still meet (`crate::blob::fill_scanned`).
    fresh_check: Option<Arc<crate::blob::FreshCheck>>,
    /// Every row, made whole, of a scan in a transaction that locked rows of the table it
    /// cannot name (`Transaction::complete_scanned`): handed out from here; the data nodes'
    /// scans ended.
    completed: Option<VecDeque<Vec<Value>>>,
    /// The rows its transaction locked exclusively, read whole when it opened, and how many
    /// times it had locked rows of the table it cannot name then.
    own_rows: Option<(Arc<crate::blob::OwnRows>, u64)>,
}

/// The most bytes of rows a scan reads whole before it is returned, in a transaction that
/// locked rows of its table (one with BLOB or TEXT columns) it cannot name: an Exclusive scan
/// or an Exclusive read through a unique index (`Scan::drain_own`); past it the scan fails
/// with 4000.
pub const OWN_PARTS_SCAN_BYTES_MAX: usize = 256 * 1024 * 1024;

/// The scan of one data node's fragments.
#[derive(Debug)]
struct Part {
    connection: Arc<Connection>,
    scan_id: u32,
    /// Rows received and not handed out yet, per fragment.
    buffers: Vec<VecDeque<Vec<Value>>>,
    /// Fragments that have no more rows.
    done: Vec<bool>,
    /// The data node has freed its scan (it ran out, failed or was closed).
    finished: bool,
}

/// Batch sizes checked against NDB's limits.
pub(crate) fn batch_sizes(
    cluster: &Cluster,
    options: &ScanOptions,
) -> Result<(u32, u32, u32), Error> {
    let (rows, bytes, total) = cluster.scan_batch_defaults();
    let rows = options.batch_rows.unwrap_or(rows);
    let bytes = options.batch_bytes.unwrap_or(bytes);
    if !(1..=SCAN_BATCH_ROWS_MAX).contains(&rows) {
        return Err(Error::ndb_detail(
            4000,
            format!("batch of {rows} rows: BatchSize must be 1..={SCAN_BATCH_ROWS_MAX}"),
        ));
    }
    if !(1..=SCAN_BATCH_BYTES_MAX).contains(&bytes) {
        return Err(Error::ndb_detail(
            4000,
            format!("batch of {bytes} bytes: BatchByteSize must be 1..={SCAN_BATCH_BYTES_MAX}"),
        ));
    }
    Ok((rows, bytes, total.clamp(1, SCAN_BATCH_BYTES_TOTAL_MAX)))
}

impl<'c> Scan<'c> {
    /// A scan whose SCAN_TABREQs went out, one per data node under its scan id, before any
    /// first batch came: [`Scan::open`] waits for them (the tokio interface awaits them).
    pub(crate) fn new(
        cluster: &'c Cluster,
        table: Table,
        parts: Vec<(Arc<Connection>, u32)>,
        sort: Option<(Vec<usize>, bool)>,
        locked: bool,
    ) -> Scan<'c> {
        Scan {
            cluster,
            table,
            sort: sort.map(|(columns, descending)| SortKey {
                columns,
                descending,
            }),
            parts: parts
                .into_iter()
                .map(|(connection, scan_id)| Part {
                    connection,
                    scan_id,
                    buffers: Vec::new(),
                    done: Vec::new(),
                    finished: false,
                })
                .collect(),
            locked,
            fresh_check: None,
            completed: None,
            own_rows: None,
        }
    }

    /// What a row read again must still meet (a CommittedRead scan of a table with blob
    /// parts tables).
    pub(crate) fn set_fresh_check(&mut self, check: crate::blob::FreshCheck) {
        self.fresh_check = Some(Arc::new(check));
    }

    /// Whether it locks its rows, and what a row read again must still meet: how a row with
    /// values past their heads is completed (`crate::blob::fill_long`).
    pub(crate) fn completion(&self) -> (bool, Option<Arc<crate::blob::FreshCheck>>) {
        (self.locked, self.fresh_check.clone())
    }

    /// The rows its transaction locked exclusively, read whole (`Transaction::own_rows`).
    pub(crate) fn set_own_rows(&mut self, rows: Arc<crate::blob::OwnRows>, unnamed: u64) {
        self.own_rows = Some((rows, unnamed));
    }

    /// The rows its transaction locked exclusively, read whole when it opened.
    pub(crate) fn own_rows(&self) -> Option<(&crate::blob::OwnRows, u64)> {
        self.own_rows
            .as_ref()
            .map(|(rows, unnamed)| (&**rows, *unnamed))
    }

    /// Every row still to come, as the data nodes sent them (BLOB and TEXT values as heads),
    /// for `Transaction::complete_scanned`; 4000 past [`OWN_PARTS_SCAN_BYTES_MAX`].
    pub(crate) fn drain_own(&mut self) -> Result<Vec<Vec<Value>>, Error> {
        let mut rows = Vec::new();
        let mut bytes = 0;
        while let Some(row) = self.next_row()? {
            self.hold_own(&mut bytes, &row)?;
            rows.push(row);
        }
        Ok(rows)
    }

    /// Counts `row` into the `bytes` a scan read whole holds (its values' whole lengths):
    /// 4000 past [`OWN_PARTS_SCAN_BYTES_MAX`], the scan abandoned.
    pub(crate) fn hold_own(&mut self, bytes: &mut usize, row: &[Value]) -> Result<(), Error> {
        *bytes = (*bytes).saturating_add(crate::blob::row_bytes(&self.table, row)?);
        if *bytes > OWN_PARTS_SCAN_BYTES_MAX {
            self.abandon();
            let what = "a scan in a transaction that locked rows it cannot name";
            return Err(crate::blob::held_too_much(&self.table, what));
        }
        Ok(())
    }

    /// Hands out `rows` (made whole) from now on.
    pub(crate) fn set_completed(&mut self, rows: VecDeque<Vec<Value>>) {
        self.completed = Some(rows);
    }

    /// The next of the rows read whole (`None` at their end), when it was.
    pub(crate) fn next_completed(&mut self) -> Option<Option<Vec<Value>>> {
        self.completed.as_mut().map(VecDeque::pop_front)
    }

    #[cfg(feature = "tokio")]
    /// The (part, request id) of every part's first batch.
    pub(crate) fn first_waits(&self) -> Vec<(usize, u32)> {
        self.parts
            .iter()
            .enumerate()
            .map(|(i, part)| (i, part.scan_id))
            .collect()
    }

    /// Waits for every part's first batch of a [`Scan::new`].
    pub(crate) fn open(mut scan: Scan<'c>) -> Result<Scan<'c>, Error> {
        let cluster = scan.cluster;
        let waits: Vec<(usize, u32)> = scan
            .parts
            .iter()
            .enumerate()
            .map(|(i, part)| (i, part.scan_id))
            .collect();
        let mut first_error = None;
        for (i, request_id) in waits {
            let part = &mut scan.parts[i];
            let result = part
                .connection
                .wait(request_id, cluster.deadline())
                .and_then(|answers| part.take_batch(&scan.table, &answers));
            if let Err(e) = result {
                part.finished = true;
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            // Dropping the scan closes the parts that did open.
            Some(e) => Err(e),
            None => Ok(scan),
        }
    }

    /// The table the rows come from.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// Closes the scan on every data node and waits until each has freed it.
    pub fn close(mut self) -> Result<(), Error> {
        let mut waits = Vec::new();
        let mut first_error = None;
        for part in self.parts.iter_mut().filter(|p| !p.finished) {
            part.finished = true;
            match part.send_next(self.cluster, true, &[], Connection::register_request) {
                Ok(id) => {
                    (self.cluster.counters()).add(ClientStat::WaitScanResultCount, 1);
                    waits.push((Arc::clone(&part.connection), id));
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        // Every close sent is waited for, so that no answer stays registered.
        for (connection, request_id) in waits {
            if let Err(e) = connection.wait(request_id, self.cluster.deadline()) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Asks each listed part for its next batch of the given fragments (empty: whatever the
    /// data node picks), all at once, then files the answers.
    fn fetch(&mut self, requests: &[(usize, Vec<u16>)]) -> Result<(), Error> {
        let (waits, mut first_error) = self.send_fetch(requests, Connection::register_request);
        // Every batch asked for is waited for, so that no answer stays registered.
        for (i, request_id) in waits {
            let answers = self.parts[i]
                .connection
                .wait(request_id, self.cluster.deadline());
            if let Err(e) = self.take_answers(i, answers) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Sends the SCAN_NEXTREQs of `requests` (part, fragments), each registered with
    /// `register`; returns the (part, request id) sent and the error that stopped the rest.
    pub(crate) fn send_fetch(
        &mut self,
        requests: &[(usize, Vec<u16>)],
        register: fn(&Connection, u32),
    ) -> (Vec<(usize, u32)>, Option<Error>) {
        let mut waits = Vec::with_capacity(requests.len());
        for (i, fragments) in requests {
            match self.parts[*i].send_next(self.cluster, false, fragments, register) {
                Ok(id) => {
                    (self.cluster.counters()).add(ClientStat::WaitScanResultCount, 1);
                    waits.push((*i, id));
                }
                Err(e) => return (waits, Some(e)),
            }
        }
        (waits, None)
    }

    /// Files the answers (or the failed wait) of one batch of part `i`.
    pub(crate) fn take_answers(
        &mut self,
        i: usize,
        answers: Result<Answers, Error>,
    ) -> Result<(), Error> {
        let part = &mut self.parts[i];
        let taken = answers.and_then(|answers| part.take_batch(&self.table, &answers));
        if taken.is_err() {
            part.finished = true;
        }
        taken
    }

    #[cfg(feature = "tokio")]
    /// The cluster the scan reads.
    pub(crate) fn cluster(&self) -> &'c Cluster {
        self.cluster
    }

    #[cfg(feature = "tokio")]
    /// The link of part `i`.
    pub(crate) fn part_connection(&self, i: usize) -> Arc<Connection> {
        Arc::clone(&self.parts[i].connection)
    }

    /// The batches to ask for before the next row can be handed out: for an unsorted scan,
    /// every unfinished part's once no row is buffered; for a sorted one, the dry fragments of
    /// every unfinished part. Empty: [`Scan::take_row`] gives the next row, or `None` at the
    /// end.
    pub(crate) fn wanted(&self) -> Vec<(usize, Vec<u16>)> {
        if self.sort.is_some() {
            return self
                .parts
                .iter()
                .enumerate()
                .filter(|(_, part)| !part.finished)
                .map(|(i, part)| (i, part.dry_fragments()))
                .filter(|(_, dry)| !dry.is_empty())
                .collect();
        }
        let buffered = self
            .parts
            .iter()
            .flat_map(|p| p.buffers.iter())
            .any(|b| !b.is_empty());
        if buffered {
            return Vec::new();
        }
        (0..self.parts.len())
            .filter(|&i| !self.parts[i].finished)
            .map(|i| (i, Vec::new()))
            .collect()
    }

    /// The next buffered row: any for an unsorted scan, the smallest (or largest) head of
    /// every part's fragments for a sorted one (once [`Scan::wanted`] is empty).
    pub(crate) fn take_row(&mut self) -> Option<Vec<Value>> {
        let Some(sort) = &self.sort else {
            return self
                .parts
                .iter_mut()
                .flat_map(|p| p.buffers.iter_mut())
                .find_map(VecDeque::pop_front);
        };
        let mut best: Option<(usize, usize)> = None;
        for (p, part) in self.parts.iter().enumerate() {
            for (f, buffer) in part.buffers.iter().enumerate() {
                let Some(head) = buffer.front() else { continue };
                let better = match best.and_then(|(bp, bf)| self.parts[bp].buffers[bf].front()) {
                    None => true,
                    Some(current) => sort.compare(head, current) == Ordering::Less,
                };
                if better {
                    best = Some((p, f));
                }
            }
        }
        best.and_then(|(p, f)| self.parts[p].buffers[f].pop_front())
    }

    /// The next row, fetching batches as needed.
    fn next_row(&mut self) -> Result<Option<Vec<Value>>, Error> {
        loop {
            let requests = self.wanted();
            if requests.is_empty() {
                return self.row_or_end();
            }
            self.check_parts()?;
            self.fetch(&requests)?;
        }
    }

    /// The next buffered row (once [`Scan::wanted`] is empty); at the end of a locked scan,
    /// the failure of any part's link.
    pub(crate) fn row_or_end(&mut self) -> Result<Option<Vec<Value>>, Error> {
        match self.take_row() {
            Some(row) => Ok(Some(row)),
            None => self.check_parts().map(|()| None),
        }
    }

    /// A locked scan fails with 4010 once the link to any part's data node failed (checked
    /// before each fetch and at the end).
    pub(crate) fn check_parts(&self) -> Result<(), Error> {
        if !self.locked {
            return Ok(());
        }
        match self.parts.iter().find(|p| p.connection.is_failed()) {
            None => Ok(()),
            Some(part) => Err(Error::ndb_detail(
                4010,
                format!(
                    "the link to node {} failed: it rolled back this locked scan's part",
                    part.connection.peer
                ),
            )),
        }
    }

    /// Ends the scan after an error: every part still open is closed without waiting.
    pub(crate) fn abandon(&mut self) {
        self.locked = false;
        for part in self.parts.iter_mut() {
            part.buffers.iter_mut().for_each(VecDeque::clear);
            part.done.iter_mut().for_each(|d| *d = true);
            if !part.finished {
                part.finished = true;
                let register = Connection::register_request;
                if let Ok(id) = part.send_next(self.cluster, true, &[], register) {
                    part.connection.forget(id);
                }
            }
        }
    }
}

impl Part {
    /// Unfinished fragments with no row buffered.
    fn dry_fragments(&self) -> Vec<u16> {
        (0..self.buffers.len())
            .filter(|&f| self.buffers[f].is_empty() && !self.done[f])
            .map(|f| f as u16)
            .collect()
    }

    /// Sends SCAN_NEXTREQ under a new request id and returns it.
    fn send_next(
        &self,
        cluster: &Cluster,
        close: bool,
        fragments: &[u16],
        register: fn(&Connection, u32),
    ) -> Result<u32, Error> {
        let request_id = cluster.new_request_id();
        let mut payload = Vec::with_capacity(16);
        ScanNextReq {
            scan_id: self.scan_id,
            close,
            fragments: fragments.to_vec(),
        }
        .encode(&mut payload);
        let header = FrameHeader {
            signal: gsn::SCAN_NEXTREQ,
            receiver_block: block::DBTC,
            sender_block: block::API,
            request_id,
        };
        register(&self.connection, request_id);
        if let Err(e) = self.connection.send_batch(&[(header, &payload)]) {
            self.connection.forget(request_id);
            return Err(e);
        }
        Ok(request_id)
    }

    /// Files one batch's answers: rows into their fragments' buffers, then the fragments'
    /// states. A SCAN_TABREF ends the scan with its error; an answer that breaks the protocol
    /// gives the link up (see `Connection::protocol_violation`).
    fn take_batch(&mut self, table: &Table, answers: &Answers) -> Result<(), Error> {
        let connection = &self.connection;
        let malformed = |reason: String| connection.protocol_violation(reason);
        let mut conf = None;
        for (signal, payload) in answers.iter() {
            match signal {
                gsn::SCAN_ROWS => {}
                gsn::SCAN_TABCONF => {
                    conf = Some(ScanTabConf::decode(payload).map_err(|e| malformed(e.to_string()))?)
                }
                gsn::SCAN_TABREF => {
                    self.finished = true;
                    let r = Refusal::decode(payload).map_err(|e| malformed(e.to_string()))?;
                    return Err(Error::Ndb(NdbError::from_wire(r.code, &r.detail)));
                }
                other => {
                    return Err(malformed(format!(
                        "unexpected signal {other} in a scan batch"
                    )))
                }
            }
        }
        let Some(conf) = conf else {
            return Err(malformed("a scan batch ended without SCAN_TABCONF".into()));
        };
        let count = usize::from(conf.fragment_count);
        if self.buffers.is_empty() && self.done.is_empty() {
            self.buffers = (0..count).map(|_| VecDeque::new()).collect();
            self.done = vec![false; count];
        } else if self.buffers.len() != count {
            return Err(malformed(format!(
                "scan of {} fragments now has {count}",
                self.buffers.len()
            )));
        }
        let def = table.def();
        let mut rows = 0;
        for (signal, payload) in answers.iter() {
            if signal != gsn::SCAN_ROWS {
                continue;
            }
            let buffers = &mut self.buffers;
            decode_scan_rows(payload, def, &mut |fragment, values| {
                let reader = rndb_protocol::Reader::new(&[], "SCAN_ROWS");
                match buffers.get_mut(usize::from(fragment)) {
                    Some(buffer) => {
                        buffer.push_back(values);
                        rows += 1;
                        Ok(())
                    }
                    None => Err(reader.error(format!("fragment {fragment} of {count}"))),
                }
            })
            .map_err(|e| malformed(e.to_string()))?;
        }
        for f in &conf.fragments {
            match self.done.get_mut(usize::from(f.fragment)) {
                Some(done) => *done = f.done,
                None => {
                    return Err(malformed(format!(
                        "batch names fragment {} of {count}",
                        f.fragment
                    )))
                }
            }
        }
        self.connection.stats().with_block(|counts| {
            counts.bump(ClientStat::ScanBatchCount, conf.fragments.len() as u64);
            counts.bump(ClientStat::ReadRowCount, rows);
        });
        self.finished = conf.finished;
        if self.finished {
            self.done.iter_mut().for_each(|d| *d = true);
        }
        Ok(())
    }
}

impl SortKey {
    /// Orders two rows by the index columns (NULL first), reversed when descending.
    fn compare(&self, a: &[Value], b: &[Value]) -> Ordering {
        let mut ordering = Ordering::Equal;
        for &c in &self.columns {
            ordering = match (&a[c], &b[c]) {
                (Value::Null, Value::Null) => Ordering::Equal,
                (Value::Null, _) => Ordering::Less,
                (_, Value::Null) => Ordering::Greater,
                (x, y) => value_cmp(x, y).unwrap_or(Ordering::Equal),
            };
            if ordering != Ordering::Equal {
                break;
            }
        }
        if self.descending {
            ordering.reverse()
        } else {
            ordering
        }
    }
}

impl Iterator for Scan<'_> {
    type Item = Result<Vec<Value>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(row) = self.next_completed() {
            return row.map(Ok);
        }
        loop {
            let row = match self.next_row() {
                Ok(Some(row)) if !self.table.blobs().is_empty() => row,
                Ok(row) => return row.map(Ok),
                Err(e) => {
                    // The scan cannot go on after an error; its records are closed.
                    self.abandon();
                    return Some(Err(e));
                }
            };
            // A row with BLOB or TEXT values made whole (`crate::blob`); one deleted since
            // the scan met it is passed over.
            let how = (self.locked, self.fresh_check.as_deref(), self.own_rows());
            match crate::blob::fill_scanned(self.cluster, &self.table, row, how) {
                Ok(Some(row)) => return Some(Ok(row)),
                Ok(None) => continue,
                Err(e) => {
                    self.abandon();
                    return Some(Err(e));
                }
            }
        }
    }
}

impl Drop for Scan<'_> {
    fn drop(&mut self) {
        // Close without waiting: the answers are dropped, as nobody expects their request ids.
        self.abandon();
    }
}
