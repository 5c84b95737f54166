//! The loading engine of `ndb_import`: CSV records become rows, rows become insert
//! transactions of `rows_per_transaction` rows each, and up to `in_flight` of them are kept
//! going from one thread with the asynchronous executor (NDB's executeAsynchPrepare and
//! sendPollNdb).
//!
//! ```text
//! CsvReader ─► record ─(fields → values, checked)─► batch ─prepare─► AsyncExecutor ─► poll
//!                 │ bad: reject (line, reason)               ▲                        │
//!                 ▼                                          └─ temporary error: retry ┘
//!              Reject ◄──────── permanent error of a row (duplicate key, ...) ─────────┘
//! ```
//!
//! Transactions run with IgnoreError, so one bad row (a duplicate key, say) is rejected alone
//! and the rest of its transaction commits. Every row read ends up in exactly one of three
//! counts: committed, rejected (each reported with its line and reason), or unknown (its
//! transaction's answer never came: it may or may not have committed, and is reported like a
//! reject). When the import stops early (too many rejects, a read error), the transactions in
//! flight are still waited for, so the counts are exact at the end.

use std::collections::VecDeque;
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rndb_api::{AbortOption, Cluster, Error, ExecType, OpId, Table, Value};

use crate::csv::CsvReader;
use crate::values::parse_value;

/// NDB's "Time-out, most likely caused by deadlock" family ends here as 4012: the request's
/// answer never came, so whether the transaction committed is not known.
const OUTCOME_UNKNOWN: u32 = 4012;
/// How long one poll waits for a completion before it looks at its timers again.
const POLL_WAIT: Duration = Duration::from_millis(100);
/// A batch retried after a temporary error waits this long per attempt before it is sent
/// again.
const RETRY_DELAY_PER_ATTEMPT: Duration = Duration::from_millis(10);

/// How to load.
#[derive(Clone, Debug)]
pub struct ImportConfig {
    /// Rows inserted by one transaction.
    pub rows_per_transaction: usize,
    /// Transactions kept in flight (at most the executor's MaxNoOfConcurrentTransactions).
    pub in_flight: usize,
    /// Rejected rows tolerated; one more stops the import (NDB's `--rejects`).
    pub rejects_max: u64,
    /// Records skipped at the start of the file (NDB's `--ignore-lines`).
    pub ignore_lines: u64,
    /// Times a transaction failed with a temporary error is tried again before its rows are
    /// rejected (NDB's `--temperrors`).
    pub temporary_errors_max: u32,
}

/// A row that was not loaded (or may not have been), and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reject {
    /// The line of the file the row starts on.
    pub line: u64,
    /// NDB's error code when the data node refused the row, 0 for a row the file got wrong.
    pub code: u32,
    pub reason: String,
    /// True when the row's transaction may have committed after all (its answer was lost).
    pub outcome_unknown: bool,
}

/// What the import did so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Records read after the ignored lines.
    pub rows_read: u64,
    pub rows_committed: u64,
    pub rows_rejected: u64,
    /// Rows whose transaction's outcome is not known (counted in `rows_rejected` too).
    pub rows_unknown: u64,
    pub transactions_committed: u64,
    /// Transactions that failed with a temporary error and were tried again.
    pub temporary_errors: u64,
    /// Bytes of the file read and parsed.
    pub bytes_read: u64,
}

/// Why an import ended.
#[derive(Debug)]
pub enum Outcome {
    /// Every record was read, and every row committed or was rejected within the limit.
    Complete,
    /// More rows were rejected than allowed; reading stopped after this line.
    TooManyRejects { line: u64 },
    /// Reading the file or starting a transaction failed.
    Failed(String),
    /// The caller's stop flag was set (SIGINT); reading stopped after this line.
    Interrupted { line: u64 },
}

/// The rows of one transaction.
#[derive(Debug)]
struct Batch {
    rows: Vec<(u64, Vec<Value>)>,
    /// Times this batch failed with a temporary error.
    attempts: u32,
}

/// Loads every record of `reader` into `table`. `on_reject` hears of each rejected row as it
/// happens, `on_progress` of the counts after each round of completions. Once `interrupt` is
/// set, no more records are read, and the transactions in flight are still waited for.
pub fn import<R: Read>(
    cluster: &Cluster,
    table: &Table,
    reader: &mut CsvReader<R>,
    config: &ImportConfig,
    interrupt: &AtomicBool,
    on_reject: &mut dyn FnMut(&Reject),
    on_progress: &mut dyn FnMut(&Stats),
) -> (Stats, Outcome) {
    let mut run = Run {
        cluster,
        table,
        config,
        stats: Stats::default(),
        stop: None,
        retries: VecDeque::new(),
        batches: Vec::new(),
        free_tags: Vec::new(),
        on_reject,
    };
    let mut executor = cluster.async_executor();
    let in_flight = config.in_flight.clamp(1, executor.limit().max(1));
    let rows_per_transaction = config.rows_per_transaction.max(1);
    let mut at_end = false;
    let mut ignored = 0;
    loop {
        if run.stop.is_none() && interrupt.load(Ordering::Relaxed) {
            run.stop = Some(Outcome::Interrupted {
                line: reader.next_line().saturating_sub(1),
            });
        }
        while executor.len() < in_flight {
            let batch = match run.retries.pop_front() {
                Some(batch) => {
                    std::thread::sleep(RETRY_DELAY_PER_ATTEMPT * batch.attempts);
                    batch
                }
                None if at_end || run.stop.is_some() => break,
                None => {
                    let batch = run.read_batch(reader, rows_per_transaction, &mut ignored);
                    at_end = batch.is_none() || run.stop.is_some();
                    match batch {
                        Some(batch) => batch,
                        None => break,
                    }
                }
            };
            run.submit(&mut executor, batch);
        }
        if executor.is_empty() && run.retries.is_empty() && (at_end || run.stop.is_some()) {
            break;
        }
        for done in executor.send_poll(1, POLL_WAIT) {
            run.complete(done.tag, done.transaction, done.result);
        }
        run.stats.bytes_read = reader.bytes_consumed();
        on_progress(&run.stats);
    }
    run.stats.bytes_read = reader.bytes_consumed();
    on_progress(&run.stats);
    let outcome = run.stop.take().unwrap_or(Outcome::Complete);
    (run.stats, outcome)
}

/// The state of one import.
struct Run<'a, 'c> {
    cluster: &'c Cluster,
    table: &'a Table,
    config: &'a ImportConfig,
    stats: Stats,
    /// Set once: why reading stopped early.
    stop: Option<Outcome>,
    /// Batches to send again after a temporary error.
    retries: VecDeque<Batch>,
    /// The batches in flight, each with its ops, indexed by the executor's tag.
    batches: Vec<Option<(Batch, Vec<Option<OpId>>)>>,
    free_tags: Vec<usize>,
    on_reject: &'a mut dyn FnMut(&Reject),
}

impl<'c> Run<'_, 'c> {
    /// Reads up to `rows` good rows (rejecting bad records on the way); `None` at the end of
    /// the file with nothing read, or when reading failed.
    fn read_batch<R: Read>(
        &mut self,
        reader: &mut CsvReader<R>,
        rows: usize,
        ignored: &mut u64,
    ) -> Option<Batch> {
        let mut batch = Batch {
            rows: Vec::with_capacity(rows),
            attempts: 0,
        };
        while batch.rows.len() < rows && self.stop.is_none() {
            let record = match reader.next_record() {
                Ok(Some(record)) => record,
                Ok(None) => break,
                Err(e) => {
                    self.stop = Some(Outcome::Failed(format!("read the file: {e}")));
                    break;
                }
            };
            if *ignored < self.config.ignore_lines {
                *ignored += 1;
                continue;
            }
            self.stats.rows_read += 1;
            match record.fields.and_then(|fields| self.row(&fields)) {
                Ok(row) => batch.rows.push((record.line, row)),
                Err(reason) => self.reject(Reject {
                    line: record.line,
                    code: 0,
                    reason,
                    outcome_unknown: false,
                }),
            }
        }
        (!batch.rows.is_empty()).then_some(batch)
    }

    /// A record's fields as the table's row.
    fn row(&self, fields: &[crate::csv::Field]) -> Result<Vec<Value>, String> {
        let columns = &self.table.def().columns;
        if fields.len() != columns.len() {
            return Err(format!(
                "{} fields, table {} has {} columns",
                fields.len(),
                self.table.name(),
                columns.len()
            ));
        }
        columns
            .iter()
            .zip(fields)
            .map(|(column, field)| parse_value(column, field.as_deref()))
            .collect()
    }

    /// Prepares the batch's transaction in the executor.
    fn submit(&mut self, executor: &mut rndb_api::AsyncExecutor<'c>, batch: Batch) {
        let mut tx = match self.cluster.start_transaction() {
            Ok(tx) => tx,
            Err(e) => return self.batch_failed(batch, &e, "start a transaction"),
        };
        let mut ops = Vec::with_capacity(batch.rows.len());
        for (line, row) in &batch.rows {
            match tx.insert(self.table, row) {
                Ok(op) => ops.push(Some(op)),
                Err(e) => {
                    ops.push(None);
                    self.reject(Reject {
                        line: *line,
                        code: e.code().unwrap_or(0),
                        reason: e.to_string(),
                        outcome_unknown: false,
                    });
                }
            }
        }
        let tag = match self.free_tags.pop() {
            Some(tag) => tag,
            None => {
                self.batches.push(None);
                self.batches.len() - 1
            }
        };
        self.batches[tag] = Some((batch, ops));
        if let Err(e) = executor.prepare(tx, ExecType::Commit, AbortOption::IgnoreError, tag as u64)
        {
            if let Some((batch, _)) = self.take_batch(tag as u64) {
                self.batch_failed(batch, &e, "prepare a transaction");
            }
        }
    }

    fn take_batch(&mut self, tag: u64) -> Option<(Batch, Vec<Option<OpId>>)> {
        let index = usize::try_from(tag).ok()?;
        let taken = self.batches.get_mut(index)?.take();
        if taken.is_some() {
            self.free_tags.push(index);
        }
        taken
    }

    /// Files a completed transaction's rows as committed, rejected or to be retried.
    fn complete(&mut self, tag: u64, tx: rndb_api::Transaction<'c>, result: Result<(), Error>) {
        let Some((batch, ops)) = self.take_batch(tag) else {
            return;
        };
        if let Err(e) = result {
            return self.batch_failed(batch, &e, "insert");
        }
        self.stats.transactions_committed += 1;
        let mut again = Vec::new();
        for ((line, row), op) in batch.rows.into_iter().zip(ops) {
            let Some(op) = op else { continue };
            match tx.op_error(op) {
                None => self.stats.rows_committed += 1,
                Some(e) if e.is_temporary() => again.push((line, row)),
                Some(e) => self.reject(Reject {
                    line,
                    code: e.code,
                    reason: e.to_string(),
                    outcome_unknown: false,
                }),
            }
        }
        if !again.is_empty() {
            self.stats.temporary_errors += 1;
            self.retry_or_reject(Batch {
                rows: again,
                attempts: batch.attempts + 1,
            });
        }
    }

    /// A whole transaction failed: retried when the error is temporary and its outcome known,
    /// else every row is rejected with the error.
    fn batch_failed(&mut self, batch: Batch, error: &Error, doing: &str) {
        let unknown = error.code() == Some(OUTCOME_UNKNOWN);
        if error.is_temporary() && !unknown {
            self.stats.temporary_errors += 1;
            return self.retry_or_reject(Batch {
                attempts: batch.attempts + 1,
                ..batch
            });
        }
        for (line, _) in batch.rows {
            if unknown {
                self.stats.rows_unknown += 1;
            }
            self.reject(Reject {
                line,
                code: error.code().unwrap_or(0),
                reason: if unknown {
                    format!("{doing}: {error} (the row may or may not have been committed)")
                } else {
                    format!("{doing}: {error}")
                },
                outcome_unknown: unknown,
            });
        }
    }

    fn retry_or_reject(&mut self, batch: Batch) {
        if batch.attempts <= self.config.temporary_errors_max {
            self.retries.push_back(batch);
            return;
        }
        let attempts = batch.attempts;
        for (line, _) in batch.rows {
            self.reject(Reject {
                line,
                code: 0,
                reason: format!("temporary errors {attempts} times (--temperrors)"),
                outcome_unknown: false,
            });
        }
    }

    fn reject(&mut self, reject: Reject) {
        self.stats.rows_rejected += 1;
        (self.on_reject)(&reject);
        if self.stats.rows_rejected > self.config.rejects_max && self.stop.is_none() {
            self.stop = Some(Outcome::TooManyRejects { line: reject.line });
        }
    }
}

/// How long an import took, as rows per second.
pub fn rows_per_second(rows: u64, elapsed: Duration) -> f64 {
    rows as f64 / elapsed.as_secs_f64().max(1e-9)
}
