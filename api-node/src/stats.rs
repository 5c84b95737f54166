//! NDB's client statistics (`Ndb::getClientStat`, which mysqld shows as its `Ndb_api_*` status
//! variables): counts of what an API node asked of the data nodes, by
//! [`Cluster::client_stats`](crate::Cluster::client_stats).
//!
//! ```text
//! thread A ──► its Block for this cluster ──┐  (each written by one thread only: a load and a
//! thread B ──► its Block for this cluster ──┤   store, no locked instruction on the hot path)
//!                                           ├─► Counters::snapshot sums the blocks, the
//! retired (blocks of threads gone, links  ──┘   retired counts and the links' bytes
//!          replaced; atomic adds)
//! ```
//!
//! A counter is kept per thread because six locked adds would cost a serial read over shared
//! memory ~30 ns of its ~600 (on this machine's virtual CPUs: 5 ns each, against 0.3 for a load
//! and a store), where NDB keeps them per `Ndb` object, which one thread uses at a time. A
//! look-up of the thread's block takes ~2 ns; a transaction of one execute makes three (its
//! start, its execute with the rows and the commit, its close). An A/B of serial_pk over
//! spinning SHM (`scripts/ab`, 15 alternated rounds) moved by 1-3 %, within the noise.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// One of NDB's client statistics, in NDB's order. Those rndb does not keep are left out:
/// `WaitNanosCount` (two clock reads per wait, 20-70 ns each here), `PrunedScanCount` (a scan
/// is never pruned to one partition), `TransLocalReadRowCount` (the API does not learn which
/// node read a row) and the three send counts (rndb's sends are not NDB's forced, unforced
/// and deferred sends).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClientStat {
    /// Executes sent and waited for: one per round trip of a transaction, including those a
    /// BLOB or TEXT value, a scan's lock check or an asynchronous execute takes.
    WaitExecCompleteCount,
    /// Scan requests waited for: each part's first batch, each next batch, each close.
    WaitScanResultCount,
    /// Requests to the dictionary and other single requests waited for: pings, ndbinfo
    /// pages, and the background connector's API_REGREQ (so it grows with no application
    /// request too).
    WaitMetaRequestCount,
    /// Bytes sent to data nodes, as the links encode them (headers, payloads, trailers), over
    /// the links a slot held (a link refused before it took its slot is not counted).
    BytesSentCount,
    /// Bytes received from data nodes, as the links decode them.
    BytesRecvdCount,
    /// Transactions started.
    TransStartCount,
    /// Transactions committed.
    TransCommitCount,
    /// Transactions rolled back or aborted after they sent something.
    TransAbortCount,
    /// Transactions closed (dropped).
    TransCloseCount,
    /// Operations by primary key sent, including those on BLOB and TEXT parts tables.
    PkOpCount,
    /// Operations through a unique hash index sent.
    UkOpCount,
    /// Table scans started.
    TableScanCount,
    /// Ordered-index scans started.
    RangeScanCount,
    /// Batches of scanned rows received, one per fragment a batch answered for.
    ScanBatchCount,
    /// Rows read, by key and by scans.
    ReadRowCount,
    /// Row changes received by event operations (from each data node that sent them).
    DataEventsRecvdCount,
    /// Other event signals received: epochs completed, subscriptions started and stopped.
    NonDataEventsRecvdCount,
    /// Bytes of event signals received.
    EventBytesRecvdCount,
}

/// How many [`ClientStat`]s there are.
const COUNT: usize = ClientStat::ALL.len();

impl ClientStat {
    /// Every statistic, in NDB's order.
    pub const ALL: [ClientStat; 18] = [
        ClientStat::WaitExecCompleteCount,
        ClientStat::WaitScanResultCount,
        ClientStat::WaitMetaRequestCount,
        ClientStat::BytesSentCount,
        ClientStat::BytesRecvdCount,
        ClientStat::TransStartCount,
        ClientStat::TransCommitCount,
        ClientStat::TransAbortCount,
        ClientStat::TransCloseCount,
        ClientStat::PkOpCount,
        ClientStat::UkOpCount,
        ClientStat::TableScanCount,
        ClientStat::RangeScanCount,
        ClientStat::ScanBatchCount,
        ClientStat::ReadRowCount,
        ClientStat::DataEventsRecvdCount,
        ClientStat::NonDataEventsRecvdCount,
        ClientStat::EventBytesRecvdCount,
    ];

    /// NDB's name for it (`Ndb::ClientStatistics`).
    pub fn name(self) -> &'static str {
        self.names().0
    }

    /// The name of mysqld's status variable for it (the server-wide one).
    pub fn status_variable(self) -> &'static str {
        self.names().1
    }

    fn names(self) -> (&'static str, &'static str) {
        match self {
            ClientStat::WaitExecCompleteCount => {
                ("WaitExecCompleteCount", "Ndb_api_wait_exec_complete_count")
            }
            ClientStat::WaitScanResultCount => {
                ("WaitScanResultCount", "Ndb_api_wait_scan_result_count")
            }
            ClientStat::WaitMetaRequestCount => {
                ("WaitMetaRequestCount", "Ndb_api_wait_meta_request_count")
            }
            ClientStat::BytesSentCount => ("BytesSentCount", "Ndb_api_bytes_sent_count"),
            ClientStat::BytesRecvdCount => ("BytesRecvdCount", "Ndb_api_bytes_received_count"),
            ClientStat::TransStartCount => ("TransStartCount", "Ndb_api_trans_start_count"),
            ClientStat::TransCommitCount => ("TransCommitCount", "Ndb_api_trans_commit_count"),
            ClientStat::TransAbortCount => ("TransAbortCount", "Ndb_api_trans_abort_count"),
            ClientStat::TransCloseCount => ("TransCloseCount", "Ndb_api_trans_close_count"),
            ClientStat::PkOpCount => ("PkOpCount", "Ndb_api_pk_op_count"),
            ClientStat::UkOpCount => ("UkOpCount", "Ndb_api_uk_op_count"),
            ClientStat::TableScanCount => ("TableScanCount", "Ndb_api_table_scan_count"),
            ClientStat::RangeScanCount => ("RangeScanCount", "Ndb_api_range_scan_count"),
            ClientStat::ScanBatchCount => ("ScanBatchCount", "Ndb_api_scan_batch_count"),
            ClientStat::ReadRowCount => ("ReadRowCount", "Ndb_api_read_row_count"),
            ClientStat::DataEventsRecvdCount => {
                ("DataEventsRecvdCount", "Ndb_api_event_data_count")
            }
            ClientStat::NonDataEventsRecvdCount => {
                ("NonDataEventsRecvdCount", "Ndb_api_event_nondata_count")
            }
            ClientStat::EventBytesRecvdCount => {
                ("EventBytesRecvdCount", "Ndb_api_event_bytes_count")
            }
        }
    }
}

/// A snapshot of an API node's client statistics since it connected
/// ([`Cluster::client_stats`](crate::Cluster::client_stats)). Two snapshots'
/// [`ClientStats::since`] is what the work between them took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientStats([u64; COUNT]);

impl ClientStats {
    /// One statistic's count.
    pub fn get(&self, stat: ClientStat) -> u64 {
        self.0[stat as usize]
    }

    /// The counts since `earlier`, a snapshot of the same API node.
    pub fn since(&self, earlier: &ClientStats) -> ClientStats {
        ClientStats(std::array::from_fn(|i| {
            self.0[i].saturating_sub(earlier.0[i])
        }))
    }

    /// Every statistic with its count, in NDB's order.
    pub fn iter(&self) -> impl Iterator<Item = (ClientStat, u64)> + '_ {
        ClientStat::ALL.iter().map(|&stat| (stat, self.get(stat)))
    }

    pub(crate) fn add(&mut self, stat: ClientStat, n: u64) {
        self.0[stat as usize] += n;
    }
}

impl std::ops::Index<ClientStat> for ClientStats {
    type Output = u64;

    fn index(&self, stat: ClientStat) -> &u64 {
        &self.0[stat as usize]
    }
}

/// One thread's counts for one cluster.
#[derive(Debug, Default)]
pub(crate) struct Block([AtomicU64; COUNT]);

impl Block {
    /// Adds `n` to `stat`. Only the block's own thread calls this: a load and a store, which
    /// readers may see late but never torn.
    pub fn bump(&self, stat: ClientStat, n: u64) {
        let counter = &self.0[stat as usize];
        counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }

    /// Adds every count of `other` (atomically: the retired counts have many writers).
    fn fold(&self, other: &Block) {
        for (mine, theirs) in self.0.iter().zip(&other.0) {
            mine.fetch_add(theirs.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
}

/// A thread keeps the blocks of this many clusters it counted for; a block for one more
/// drops the one registered first (its counts go to its cluster's retired counts when that
/// cluster next registers a block).
const THREAD_BLOCKS_MAX: usize = 8;

thread_local! {
    /// This thread's blocks, by the id of the cluster they count for.
    static BLOCKS: RefCell<Vec<(u64, Arc<Block>)>> = const { RefCell::new(Vec::new()) };
}

/// The ids of clusters' counters (never reused, so a thread's block of a dropped cluster is
/// never taken for another's).
static NEXT_COUNTERS_ID: AtomicU64 = AtomicU64::new(1);

/// One cluster's client statistics: a block per thread that counted, and the counts of those
/// gone.
#[derive(Debug)]
pub(crate) struct Counters {
    id: u64,
    blocks: Mutex<Vec<Arc<Block>>>,
    retired: Block,
    /// Held while a link's bytes move to the retired counts and the slot swaps it out, and
    /// while `Cluster::client_stats` sums the retired counts and the links', so that a
    /// replaced link's bytes are counted once, never zero times.
    links: Mutex<()>,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            id: NEXT_COUNTERS_ID.fetch_add(1, Ordering::Relaxed),
            blocks: Mutex::new(Vec::new()),
            retired: Block::default(),
            links: Mutex::new(()),
        }
    }
}

impl Counters {
    /// Adds `n` to `stat` for the calling thread.
    pub fn add(&self, stat: ClientStat, n: u64) {
        self.with_block(|block| block.bump(stat, n));
    }

    /// Runs `count` on the calling thread's block (several counts at one look-up).
    pub fn with_block(&self, count: impl FnOnce(&Block)) {
        let mut count = Some(count);
        let counted = BLOCKS.try_with(|blocks| {
            let Ok(mut blocks) = blocks.try_borrow_mut() else {
                return;
            };
            let block = match blocks.iter().position(|(id, _)| *id == self.id) {
                Some(i) => &blocks[i].1,
                None => {
                    if blocks.len() == THREAD_BLOCKS_MAX {
                        blocks.remove(0);
                    }
                    let block = self.register();
                    blocks.push((self.id, block));
                    &blocks[blocks.len() - 1].1
                }
            };
            if let Some(count) = count.take() {
                count(block);
            }
        });
        // The thread is exiting (its blocks are gone) or counting already: straight to the
        // retired counts.
        if let (Some(count), _) = (count.take(), counted) {
            let block = Block::default();
            count(&block);
            self.retired.fold(&block);
        }
    }

    /// Holds the links' bytes still: see `Counters::links`.
    pub fn links_held(&self) -> std::sync::MutexGuard<'_, ()> {
        self.links.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds `n` to `stat`'s retired count (counts of something gone: a replaced link's bytes).
    pub fn retire(&self, stat: ClientStat, n: u64) {
        self.retired.0[stat as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// A new block for the calling thread, filed; the blocks no thread holds any more have
    /// their counts moved to the retired ones.
    fn register(&self) -> Arc<Block> {
        let block = Arc::new(Block::default());
        let mut blocks = self.blocks.lock().unwrap_or_else(|p| p.into_inner());
        blocks.retain_mut(|held| match Arc::get_mut(held) {
            Some(gone) => {
                self.retired.fold(gone);
                false
            }
            None => true,
        });
        blocks.push(Arc::clone(&block));
        block
    }

    /// Every count so far: each thread's and the retired ones.
    pub fn snapshot(&self) -> ClientStats {
        let blocks = self.blocks.lock().unwrap_or_else(|p| p.into_inner());
        let mut stats = ClientStats::default();
        for block in blocks.iter().map(|b| &**b).chain([&self.retired]) {
            for (total, counter) in stats.0.iter_mut().zip(&block.0) {
                *total += counter.load(Ordering::Relaxed);
            }
        }
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_of_threads_gone_and_dropped_blocks_stay() {
        let counters = Arc::new(Counters::default());
        counters.add(ClientStat::PkOpCount, 2);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let counters = Arc::clone(&counters);
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        counters.add(ClientStat::ReadRowCount, 1);
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        // More clusters than a thread keeps blocks for: the first one's block is dropped.
        let others: Vec<Counters> = (0..THREAD_BLOCKS_MAX)
            .map(|_| Counters::default())
            .collect();
        others.iter().for_each(|c| c.add(ClientStat::UkOpCount, 1));
        counters.add(ClientStat::PkOpCount, 1);
        counters.retire(ClientStat::BytesSentCount, 7);
        let stats = counters.snapshot();
        assert_eq!(stats[ClientStat::ReadRowCount], 4000);
        assert_eq!(stats[ClientStat::PkOpCount], 3);
        assert_eq!(stats[ClientStat::BytesSentCount], 7);
        assert_eq!(stats[ClientStat::UkOpCount], 0);
        assert!(others
            .iter()
            .all(|c| c.snapshot()[ClientStat::UkOpCount] == 1));
        // The blocks of the exited threads were folded into the retired counts.
        assert!(counters.blocks.lock().unwrap().len() <= 2);
    }

    #[test]
    fn names_follow_ndb() {
        assert_eq!(ClientStat::ALL.len(), COUNT);
        for (i, stat) in ClientStat::ALL.iter().enumerate() {
            assert_eq!(*stat as usize, i);
        }
        assert_eq!(ClientStat::BytesRecvdCount.name(), "BytesRecvdCount");
        assert_eq!(
            ClientStat::BytesRecvdCount.status_variable(),
            "Ndb_api_bytes_received_count"
        );
    }
}
