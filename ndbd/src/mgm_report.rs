//! The data node's side of ndb_mgmd: what the execution loop publishes for the reporting thread
//! (`rndb_mgm::node_report`) to report, read without touching the kernel.
//!
//! The execution thread stores the kernel's state and its links' counters into [`Probe`] every
//! timer tick (10 ms): a few relaxed stores, no lock on the data path. The reporting thread
//! reads them, and the listener's set of connected nodes, every report.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rndb_config::NodeId;
use rndb_mgm::node_report::{
    figure_index, BackupCommand, BackupProgress, DataNodeReport, FIGURES, SINGLE_USER_UNASKED,
};

use crate::blocks::Kernel;
use crate::exec::LinkCounters;
use crate::listener::Connected;

/// The kernel's state as last published by the execution thread.
#[derive(Debug)]
pub struct Probe {
    started: AtomicBool,
    /// The values of `rndb_mgm::node_report::FIGURES`, in its order.
    figures: Vec<AtomicU64>,
    /// The data nodes this node holds alive, a bitmap of node ids (below 256).
    alive: [AtomicU64; 4],
    /// The API node the kernel's single user mode lets in, 0 when not in that mode.
    single_user: AtomicU32,
    /// The single user mode a management server asked for and the kernel has not taken yet
    /// (`ReportSetup::single_user`, set by the reporting threads).
    single_user_asked: Arc<AtomicU32>,
    /// The node's part of its last backup, and the highest backup id it has.
    backup: Mutex<(Option<BackupProgress>, u32)>,
    /// The backup step a management server asked for and the kernel has not taken yet
    /// (`ReportSetup::backup`, set by the reporting threads).
    backup_asked: Arc<Mutex<Option<BackupCommand>>>,
    /// The stop a management server asked for is of every data node
    /// (`ReportSetup::system_stop`).
    system_stop: Arc<AtomicBool>,
    /// The node stopped by itself (`ReportSetup::stopped_by_itself`).
    stopped_by_itself: Arc<AtomicBool>,
}

impl Probe {
    /// A probe whose single user mode requests come through `single_user_asked`, backup
    /// steps through `backup_asked`, whether a stop is of every data node through
    /// `system_stop`, and that the node stopped by itself through `stopped_by_itself`.
    pub fn new(
        single_user_asked: Arc<AtomicU32>,
        backup_asked: Arc<Mutex<Option<BackupCommand>>>,
        system_stop: Arc<AtomicBool>,
        stopped_by_itself: Arc<AtomicBool>,
    ) -> Probe {
        Probe {
            started: AtomicBool::new(false),
            figures: FIGURES.iter().map(|_| AtomicU64::new(0)).collect(),
            alive: Default::default(),
            single_user: AtomicU32::new(0),
            single_user_asked,
            backup: Mutex::new((None, 0)),
            backup_asked,
            system_stop,
            stopped_by_itself,
        }
    }

    /// The kernel began a graceful stop by itself (another data node stopped every data
    /// node): a management server's restart asked after is still carried out.
    pub fn note_stopped_by_itself(&self) {
        self.stopped_by_itself.store(true, Ordering::Relaxed);
    }

    /// True when the stop a management server asked for is of every data node (SHUTDOWN,
    /// ALL RESTART).
    pub fn system_stop(&self) -> bool {
        self.system_stop.load(Ordering::Relaxed)
    }

    /// The backup step a management server asked for since the last call, if any.
    pub fn take_backup_command(&self) -> Option<BackupCommand> {
        self.backup_asked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// The single user mode a management server asked for since the last call, if any:
    /// `Some(None)` to leave it, `Some(Some(api))` to let API node `api` in alone.
    pub fn take_single_user_request(&self) -> Option<Option<NodeId>> {
        match self
            .single_user_asked
            .swap(SINGLE_USER_UNASKED, Ordering::Relaxed)
        {
            SINGLE_USER_UNASKED => None,
            0 => Some(None),
            api => Some(u16::try_from(api).ok().map(NodeId)),
        }
    }
}

impl Probe {
    fn set(&self, name: &str, value: u64) {
        match figure_index(name) {
            Some(index) => self.figures[index].store(value, Ordering::Relaxed),
            None => debug_assert!(false, "{name} is not a reported figure"),
        }
    }

    fn get(&self, name: &str) -> u64 {
        figure_index(name).map_or(0, |index| self.figures[index].load(Ordering::Relaxed))
    }

    /// Called by the execution thread on its timer tick, with its links' counters and the
    /// bytes waiting in their send buffers.
    pub fn publish(&self, kernel: &Kernel, links: &LinkCounters, send_buffer_bytes: u64) {
        self.started.store(kernel.is_started(), Ordering::Relaxed);
        let single_user = kernel.single_user().map_or(0, |api| u32::from(api.0));
        self.single_user.store(single_user, Ordering::Relaxed);
        {
            let mut backup = self.backup.lock().unwrap_or_else(|e| e.into_inner());
            if backup.0.as_ref() != kernel.backup_progress() {
                backup.0 = kernel.backup_progress().cloned();
            }
            backup.1 = kernel.last_backup_id();
        }
        let figures = kernel.figures();
        let values = [
            ("data_memory_used_bytes", kernel.memory_used_bytes()),
            ("transactions", kernel.transaction_count() as u64),
            ("transactions_max", u64::from(figures.transactions_max)),
            ("operations", u64::from(figures.operations)),
            ("operations_max", u64::from(figures.operations_max)),
            ("scans", kernel.scan_count() as u64),
            ("row_locks", figures.row_locks),
            ("lock_waits", figures.lock_waits_total),
            ("frames_sent", links.frames_sent),
            ("bytes_sent", links.bytes_sent),
            ("frames_received", links.frames_received),
            ("bytes_received", links.bytes_received),
            ("send_overloads", links.send_overloads),
            ("send_buffer_bytes", send_buffer_bytes),
            // The checkpoint number: a GCI's high word.
            ("gci_current", kernel.current_gci() >> 32),
            ("gci_restorable", u64::from(kernel.restorable_gci())),
            ("lcp_id", u64::from(figures.lcp_id)),
            ("lcp_restorable_id", u64::from(figures.lcp_restorable_id)),
            ("lcp_running", u64::from(figures.lcp_running)),
            ("stop_put_off", u64::from(kernel.stop_deferred())),
            ("tc_transactions", figures.tc.transactions),
            ("tc_commits", figures.tc.commits),
            ("tc_aborts", figures.tc.aborts),
            ("tc_reads", figures.tc.reads),
            ("tc_simple_reads", figures.tc.simple_reads),
            ("tc_writes", figures.tc.writes),
            ("tc_local_reads", figures.tc.local_reads),
            ("tc_local_writes", figures.tc.local_writes),
            ("tc_table_scans", figures.tc.table_scans),
            ("tc_range_scans", figures.tc.range_scans),
            ("lqh_operations", figures.lqh_operations),
        ];
        for (name, value) in values {
            self.set(name, value);
        }
        let mut alive = [0u64; 4];
        for node in kernel.alive_data_nodes().iter() {
            if let Some(word) = alive.get_mut(usize::from(node.0 / 64)) {
                *word |= 1 << (node.0 % 64);
            }
        }
        for (word, bits) in self.alive.iter().zip(alive) {
            word.store(bits, Ordering::Relaxed);
        }
    }

    /// The report the reporting thread sends: this probe, DataMemory's size, and the nodes with a
    /// live link.
    pub fn report(&self, data_memory_total_bytes: u64, connected: &Connected) -> DataNodeReport {
        let mut nodes: Vec<u16> = connected
            .lock()
            .map(|held| held.keys().map(|n| n.0).collect())
            .unwrap_or_default();
        nodes.sort_unstable();
        self.set("data_memory_total_bytes", data_memory_total_bytes);
        let (backup, backup_last) = self
            .backup
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        DataNodeReport {
            started: self.started.load(Ordering::Relaxed),
            data_memory_used_bytes: self.get("data_memory_used_bytes"),
            data_memory_total_bytes,
            transactions: self.get("transactions"),
            connected: nodes,
            alive: (0..256u16)
                .filter(|id| {
                    self.alive[usize::from(id / 64)].load(Ordering::Relaxed) & (1 << (id % 64)) != 0
                })
                .collect(),
            figures: self
                .figures
                .iter()
                .map(|v| v.load(Ordering::Relaxed))
                .collect(),
            single_user: self.single_user.load(Ordering::Relaxed) as u16,
            backup,
            backup_last,
        }
    }
}

/// Starts the reporting threads of data node `me` (one per management server of `setup`),
/// reporting `probe`; they set `shutdown` when a server asks the node to stop or restart.
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
        Arc::new(move || probe.report(data_memory_total_bytes, &connected)),
        shutdown,
    )
}
