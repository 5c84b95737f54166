//! The data node's side of ndb_mgmd: what the execution loop publishes for the reporting thread
//! (`rndb_mgm::node_report`) to report, read without touching the kernel.
//!
//! The execution thread stores the kernel's state into [`Probe`] every timer tick (10 ms): a few
//! relaxed stores, no lock on the data path. The reporting thread reads them, and the listener's
//! set of connected nodes, every report.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use rndb_mgm::node_report::DataNodeReport;

use crate::blocks::Kernel;
use crate::listener::Connected;

/// The kernel's state as last published by the execution thread.
#[derive(Debug, Default)]
pub struct Probe {
    started: AtomicBool,
    data_memory_used_bytes: AtomicU64,
    transactions: AtomicU64,
}

impl Probe {
    /// Called by the execution thread on its timer tick.
    pub fn publish(&self, kernel: &Kernel) {
        self.started.store(kernel.is_started(), Ordering::Relaxed);
        self.data_memory_used_bytes
            .store(kernel.memory_used_bytes(), Ordering::Relaxed);
        self.transactions
            .store(kernel.transaction_count() as u64, Ordering::Relaxed);
    }

    /// The report the reporting thread sends: this probe, DataMemory's size, and the nodes with a
    /// live link.
    pub fn report(&self, data_memory_total_bytes: u64, connected: &Connected) -> DataNodeReport {
        let mut nodes: Vec<u16> = connected
            .lock()
            .map(|set| set.iter().map(|n| n.0).collect())
            .unwrap_or_default();
        nodes.sort_unstable();
        DataNodeReport {
            started: self.started.load(Ordering::Relaxed),
            data_memory_used_bytes: self.data_memory_used_bytes.load(Ordering::Relaxed),
            data_memory_total_bytes,
            transactions: self.transactions.load(Ordering::Relaxed),
            connected: nodes,
        }
    }
}

/// Starts the reporting thread of data node `me`, reporting `probe` to the servers of
/// `setup`; it sets `shutdown` when ndb_mgmd asks the node to stop or restart.
pub fn start(
    setup: rndb_mgm::node_report::ReportSetup,
    me: u16,
    probe: Arc<Probe>,
    data_memory_total_bytes: u64,
    connected: Connected,
    shutdown: Arc<AtomicBool>,
) -> std::io::Result<()> {
    rndb_mgm::node_report::spawn(
        setup,
        me,
        Box::new(move || probe.report(data_memory_total_bytes, &connected)),
        shutdown,
    )
}
