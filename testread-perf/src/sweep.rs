//! The concurrency sweep: for each level N, N transactions are kept in flight — each a
//! primary-key read (or, with `--write-ratio`, an update) and its commit — for a fixed time,
//! either by N client threads sharing one API connection, each blocked on its own transaction
//! while the connection's poll owner serves them all (`--in-flight threads`), or by one thread
//! with the asynchronous executor (`--in-flight async`: prepare N, send them together, and
//! replace each as it completes). With `--durable-commit` each commit returns only once its
//! global checkpoint is saved.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rndb_api::{AbortOption, AsyncExecutor, Cluster, ExecType, LockMode, Table, Value};

use crate::local::Shutdown;

/// Stack size of a sweep thread: they only run short transactions, and 4096 of them must fit.
const THREAD_STACK_BYTES: usize = 256 * 1024;
/// The asynchronous sweep refills once 1/this of its transactions have completed.
const ASYNC_POLL_FRACTION: usize = 8;
/// The most threads one level may ask for.
pub const CONCURRENCY_MAX: u32 = 4096;

/// What one level of the sweep measured.
#[derive(Debug)]
pub struct Level {
    pub concurrency: u32,
    /// Committed transactions.
    pub transactions: u64,
    /// Transactions that failed with a temporary error (retried by the next iteration).
    pub temporary_errors: u64,
    pub elapsed: Duration,
    /// Latency of each committed transaction, in ns.
    pub latency_ns: Histogram<u64>,
}

/// The parameters every thread of a level shares.
#[derive(Debug)]
pub struct Sweep<'a> {
    pub cluster: &'a Cluster,
    pub table: &'a Table,
    pub size: u32,
    pub lock: LockMode,
    pub write_ratio: f64,
    /// Every commit waits for its global checkpoint to be saved (`--durable-commit`).
    pub durable_commit: bool,
    pub duration: Duration,
    pub seed: u64,
    pub shutdown: &'a Shutdown,
}

impl Sweep<'_> {
    /// Runs one level: `concurrency` threads for `duration`, started together.
    pub fn level(&self, concurrency: u32) -> Result<Level> {
        if concurrency == 0 || concurrency > CONCURRENCY_MAX {
            bail!("concurrency {concurrency} is outside 1..={CONCURRENCY_MAX}");
        }
        disable_huge_pages();
        let start = Barrier::new(concurrency as usize + 1);
        let results: Vec<Result<Thread>> = std::thread::scope(|scope| {
            let mut handles = Vec::with_capacity(concurrency as usize);
            for index in 0..concurrency {
                let start = &start;
                let spawned = std::thread::Builder::new()
                    .name(format!("sweep-{index}"))
                    .stack_size(THREAD_STACK_BYTES)
                    .spawn_scoped(scope, move || self.thread(index, start));
                match spawned {
                    Ok(handle) => handles.push(handle),
                    Err(e) => {
                        // The threads already started wait at the barrier: let them go, they
                        // see the deadline passed at once.
                        return vec![Err(anyhow::anyhow!("start sweep thread {index}: {e}"))];
                    }
                }
            }
            start.wait();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| bail!("a sweep thread panicked"))
                })
                .collect()
        });
        merge(concurrency, results)
    }

    /// One client thread: transactions back to back until the deadline.
    fn thread(&self, index: u32, start: &Barrier) -> Result<Thread> {
        let mut rng = StdRng::seed_from_u64(self.seed ^ u64::from(index).wrapping_mul(0x9E37_79B9));
        // Latencies are kept as a list and counted into the level's histogram once every thread
        // is done: a histogram each (220 KiB for 1 ns..60 s at 3 digits) made 4096 threads
        // fault in and zero some 900 MiB while they were being measured.
        let mut latency_ns = Vec::new();
        let (mut committed, mut temporary) = (0u64, 0u64);
        // One untimed transaction first, as testReadPerf warms up each access type: a new
        // thread's first one also makes its allocator's thread heap and faults in its first
        // pages (at 4096 new threads, most of the level's time went to zeroing those pages).
        // A temporary error is as good a warm-up; any other error ends the thread after the
        // barrier, which the others must pass.
        let warm_up = {
            let key = Value::UInt32(rng.gen_range(0..self.size));
            let write = rng.gen_bool(self.write_ratio);
            self.transaction(key, write, &mut rng)
        };
        start.wait();
        if let Err(e) = warm_up {
            if !e.is_temporary() {
                return Err(e).context(format!("sweep thread {index}: warm-up transaction"));
            }
        }
        let begun = Instant::now();
        let deadline = begun + self.duration;
        while Instant::now() < deadline && !self.shutdown.requested() {
            let key = Value::UInt32(rng.gen_range(0..self.size));
            let write = rng.gen_bool(self.write_ratio);
            let t0 = Instant::now();
            match self.transaction(key, write, &mut rng) {
                Ok(()) => {
                    committed += 1;
                    latency_ns.push(t0.elapsed().as_nanos() as u64);
                }
                Err(e) if e.is_temporary() => temporary += 1,
                Err(e) => return Err(e).context(format!("sweep thread {index}")),
            }
        }
        Ok(Thread {
            committed,
            temporary,
            elapsed: begun.elapsed(),
            latency_ns: Latencies::Each(latency_ns),
        })
    }

    fn transaction(
        &self,
        key: Value,
        write: bool,
        rng: &mut StdRng,
    ) -> Result<(), rndb_api::Error> {
        self.define(key, write, rng)?.execute(ExecType::Commit)
    }

    /// A transaction with the sweep's one operation defined.
    fn define(
        &self,
        key: Value,
        write: bool,
        rng: &mut StdRng,
    ) -> Result<rndb_api::Transaction<'_>, rndb_api::Error> {
        let mut tx = self.cluster.start_transaction()?;
        tx.set_durable_commit(self.durable_commit);
        if write {
            let column = self.table.def().columns.len() - 1;
            tx.update(self.table, &[key], &[(column, Value::UInt64(rng.gen()))])?;
        } else {
            tx.read(self.table, &[key], self.lock)?;
        }
        Ok(tx)
    }

    /// Runs one level with the asynchronous executor: one thread keeps `concurrency`
    /// transactions in flight for `duration`, replacing each as it completes.
    pub fn level_async(&self, concurrency: u32) -> Result<Level> {
        let mut executor = self.cluster.async_executor();
        if concurrency as usize > executor.limit() {
            bail!(
                "{concurrency} transactions in flight exceed MaxNoOfConcurrentTransactions={}",
                executor.limit()
            );
        }
        let mut rng = StdRng::seed_from_u64(self.seed);
        let mut latency_ns = Histogram::new_with_bounds(1, 60_000_000_000, 3)?;
        let (mut committed, mut temporary) = (0u64, 0u64);
        let begun = Instant::now();
        let deadline = begun + self.duration;
        for _ in 0..concurrency {
            self.prepare_one(&mut executor, &mut rng, 0)?;
        }
        while !executor.is_empty() {
            // Waiting for an eighth of what is in flight (at least one) before refilling makes
            // each send carry many transactions, as flexAsynch's send-all-poll-all does, while
            // the rest stay in flight.
            let min = (executor.len() / ASYNC_POLL_FRACTION).max(1);
            let completions = executor.send_poll(min, Duration::from_millis(100));
            // One clock read per poll: it ends the transactions it completed and starts their
            // replacements, which go out with the next send.
            let now = Instant::now();
            let now_ns = nanos_since(begun, now);
            let refill = now < deadline && !self.shutdown.requested();
            // Read in place (moving each completion out of the list copied it twice), and
            // dropped before their replacements are made, which can then reuse their memory.
            for done in &completions {
                match &done.result {
                    Ok(()) => {
                        committed += 1;
                        latency_ns.saturating_record(now_ns.saturating_sub(done.tag));
                    }
                    Err(e) if e.is_temporary() => temporary += 1,
                    Err(e) => bail!("an asynchronous sweep transaction: {e}"),
                }
            }
            let replace = if refill { completions.len() } else { 0 };
            drop(completions);
            for _ in 0..replace {
                self.prepare_one(&mut executor, &mut rng, now_ns)?;
            }
        }
        merge(
            concurrency,
            vec![Ok(Thread {
                committed,
                temporary,
                elapsed: begun.elapsed(),
                latency_ns: Latencies::Counted(latency_ns),
            })],
        )
    }

    /// Starts one more sweep transaction in `executor`, timed from `start_ns` (nanoseconds
    /// since the level began). The start travels as the completion's tag, so timing a
    /// transaction needs no map (flexAsynch keeps start times by transaction slot, for the
    /// same reason).
    fn prepare_one<'s>(
        &'s self,
        executor: &mut AsyncExecutor<'s>,
        rng: &mut StdRng,
        start_ns: u64,
    ) -> Result<()> {
        let key = Value::UInt32(rng.gen_range(0..self.size));
        let write = rng.gen_bool(self.write_ratio);
        let tx = self.define(key, write, rng)?;
        executor.prepare(tx, ExecType::Commit, AbortOption::AbortOnError, start_ns)?;
        Ok(())
    }
}

/// Stops transparent huge pages for this process's later page faults (PR_SET_THP_DISABLE),
/// before a level of client threads starts. mimalloc asks for huge pages for its arenas, and
/// every new thread takes fresh pages of its own there for each size it allocates, so each of
/// thousands of threads faulted in and zeroed whole 2 MiB pages where it used a few KiB: at 4096
/// threads, a quarter to half of the level's CPU time went to clearing pages (perf). Set only
/// here, after `--local` started its data nodes (children inherit the flag), and only for the
/// threaded sweep; an error (an old kernel) leaves huge pages on.
fn disable_huge_pages() {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| {
        if let Err(e) = nix::sys::prctl::set_thp_disable(true) {
            eprintln!("testread-perf: PR_SET_THP_DISABLE: {e} (huge pages stay on)");
        }
    });
}

/// Nanoseconds from `begun` to `now`, saturating (a level lasts seconds, far from `u64::MAX`).
fn nanos_since(begun: Instant, now: Instant) -> u64 {
    u64::try_from(now.duration_since(begun).as_nanos()).unwrap_or(u64::MAX)
}

/// What one thread measured.
#[derive(Debug)]
struct Thread {
    committed: u64,
    temporary: u64,
    elapsed: Duration,
    /// The latency of each committed transaction, in ns.
    latency_ns: Latencies,
}

/// A thread's latencies: each one (client threads), or counted already (the asynchronous
/// sweep's one thread).
#[derive(Debug)]
enum Latencies {
    Each(Vec<u64>),
    Counted(Histogram<u64>),
}

fn merge(concurrency: u32, results: Vec<Result<Thread>>) -> Result<Level> {
    let mut level = Level {
        concurrency,
        transactions: 0,
        temporary_errors: 0,
        elapsed: Duration::ZERO,
        latency_ns: Histogram::new_with_bounds(1, 60_000_000_000, 3)?,
    };
    for result in results {
        let thread = result?;
        level.transactions += thread.committed;
        level.temporary_errors += thread.temporary;
        level.elapsed = level.elapsed.max(thread.elapsed);
        match &thread.latency_ns {
            Latencies::Each(each) => each
                .iter()
                .for_each(|&ns| level.latency_ns.saturating_record(ns)),
            Latencies::Counted(counted) => level
                .latency_ns
                .add(counted)
                .context("merge latency histograms")?,
        }
    }
    Ok(level)
}
