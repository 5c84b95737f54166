//! What a run simulates: the options a user gives (workload, fault kinds) and the knobs each
//! seed draws from them (swarm testing: node and client counts, delays, fault counts and
//! rates differ from seed to seed, and some seeds leave a fault kind out).

use std::fmt;

use rndb_protocol::scan::SCAN_BATCH_ROWS_MAX;

use crate::disk::DiskKnobs;
use crate::rng::Rng;

/// Which workload the clients run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// Transfers between accounts; full reads must keep the total.
    Bank,
    /// Single-key reads and writes; the history must be linearizable.
    Registers,
    /// Inserts, deletes and reads of a set's elements (errors 630 and 626 expected); each
    /// element's history, closed by a full read of the table, must be linearizable.
    Sets,
    /// All three, on three tables, each client choosing per operation.
    All,
}

impl Workload {
    pub fn bank(self) -> bool {
        matches!(self, Workload::Bank | Workload::All)
    }
    pub fn registers(self) -> bool {
        matches!(self, Workload::Registers | Workload::All)
    }
    pub fn sets(self) -> bool {
        matches!(self, Workload::Sets | Workload::All)
    }
    pub fn name(self) -> &'static str {
        match self {
            Workload::Bank => "bank",
            Workload::Registers => "registers",
            Workload::Sets => "sets",
            Workload::All => "all",
        }
    }
}

/// One kind of fault the simulator may inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Fault {
    /// A data node crashes (its memory is gone; it does not restart). Never both replicas of a
    /// node group.
    Crash,
    /// An API client dies, possibly in the middle of a transaction.
    Client,
    /// A link becomes slow for a while.
    Slow,
    /// A link between an API client and a data node drops (in-flight frames are lost, both
    /// ends hear of it); the client reconnects later.
    ApiLink,
    /// BUGGIFY: sends sometimes find the send buffer full (1218), timer ticks come late.
    Buggify,
    /// A data node stops handling anything for a while (as under SIGSTOP), its links staying
    /// up: frames to it wait, it sends nothing. At most one HeartbeatIntervalDbDb (a quarter of
    /// the bound, leaving room for slow links), so it must only delay.
    Pause,
    /// A data node hangs (as under SIGSTOP) for 6 to 10 HeartbeatIntervalDbDb: the cluster
    /// declares it failed on missed heartbeats, and it stops when it resumes. It takes a
    /// crash's place (never both nodes of a node group).
    Hang,
    /// Data nodes are cut from each other, both ways (links drop) or one way (frames wait, as
    /// TCP resends them, until the cut heals, and past the heartbeat bound an end is declared
    /// failed). Client 0 arbitrates: a side that loses stops (2305, 2315) and, with
    /// `restart`, starts again by node restart. A cut that could take a node group off whole
    /// is not made. Off unless asked for: with crashes and hangs on top it makes double faults
    /// (a whole node group lost, the cluster stopped) that the sim does not start again from.
    Partition,
    /// Every data node loses power at once (their disks lose what was not synced, but may keep
    /// some of it, the last write torn), then all restart from their disks (a system restart)
    /// and the clients reconnect. Only in seeds whose data nodes keep files.
    CrashAll,
    /// Disk writes, replaces and syncs fail with ENOSPC or EIO: the node refuses writes with
    /// 1234 and saves nothing more, and is stopped (2810, 2813) while another member of its
    /// node group serves (with `restart`, it then starts again by node restart). Only in
    /// seeds whose data nodes keep files.
    Disk,
    /// A data node that crashed starts again a while later and rejoins the running cluster by
    /// node restart (from its disk, which it drops, or without files), copying every row from
    /// live replicas while the workload goes on. With cluster crashes (and disk faults) too: a
    /// node whose files cannot restore the restart GCI stops at the system restart and then
    /// rejoins so.
    Restart,
    /// With `--replicas 3`: a node group that lost a node to a crash loses a second one, once
    /// the first failure is handled (two heartbeat bounds later) and while another member
    /// serves, leaving one replica (with three data nodes, half of the two alive: the
    /// arbitrator decides). Nothing with two replicas. Off unless asked for.
    CrashAgain,
    /// Half the system restarts lose a data node while they run: right after it handles one
    /// of the restart's signals (its registration with the master, the restart GCI, the
    /// report that it restored, the start) or a drawn moment within the restore. Only in
    /// seeds whose crashed nodes start again (`restart`), and never a node whose node group
    /// has already lost a member in that restart. Off unless asked for.
    CrashStarting,
    /// Windows of single user mode (ndb_mgm's ENTER SINGLE USER MODE) for client 0: every
    /// data node refuses the other clients' requests with 299 and aborts their idle
    /// transactions, until the window ends (EXIT SINGLE USER MODE). A data node started
    /// meanwhile enters the mode too, as ndb_mgmd tells it. Off unless asked for.
    SingleUser,
    /// Small record limits in every data node: MaxNoOfLocalOperations (1217),
    /// MaxNoOfConcurrentIndexOperations (288) and MaxNoOfFiredTriggers (221), so that the
    /// workload runs into them (temporary errors, retried) and a record that leaked would
    /// refuse the final reads for good. Off unless asked for.
    Limits,
    /// Online backups (ndb_mgm's START BACKUP) while the workload runs, coordinated by the
    /// world as ndb_mgmd does: each that completes is read back from the data nodes' disks and
    /// checked (the bank's balances and ledger are a consistent cut: every transfer
    /// acknowledged before it began is in it, none sent after it ended, none halfway). A
    /// failure must be one a fault explains (1326 a node gone, 1325 a disk fault, 1306
    /// without files, 1302 a node still in an earlier round, 1340 the tables created as it
    /// began). Off unless asked for.
    Backup,
    /// The event API: client 0 subscribes to every workload table on every data node once
    /// the tables are ready (SUB_START_REQ), merges the streams with the library's
    /// `EventMerge`, resubscribes where a link comes back or a node refused, and the run's end
    /// checks that every acknowledged change was handed out once, in the epoch its commit
    /// named (`crate::events`). No fault of its own; off unless asked for, since its frames
    /// move every seed's schedule.
    Events,
    /// DROP TABLE under writers: client 0 creates a scratch table with the others, each
    /// transfer's first execute also writes a scratch row (so that transactions hold its rows
    /// across executes), and client 0 drops the table at a random time of the workload, again
    /// until it is gone (a failed master, 702, 4009, 711, 761). The drop must end (a hang is a
    /// liveness failure), writes to the table must fail only with 283, 709 or 241 meanwhile,
    /// and once the run ends no data node may still hold the table or a mark of its drop.
    /// Off unless asked for.
    Drop,
    /// CREATE INDEX under writers: client 0 creates a unique hash index over the bank's
    /// (balance, id) at a random time of the workload, while transfers update the balances
    /// (each update moves the account's index entry), again until it is answered (a failed
    /// master, 702, 4009, 711, 761; 721 once an unanswered attempt made it). The final check
    /// finds the index (an acknowledged create must survive every crash) and reads every
    /// account through it by its final balance. In half the seeds the index is an ordered
    /// one over the balance instead, and the final check scans the bank through it (every
    /// account once, at its final balance). In half the seeds client 0 drops the index again
    /// later (DROP INDEX under the same writers; then an acknowledged drop must last). Off
    /// unless asked for.
    Index,
    /// ndb_mgm's SHUTDOWN: with `crash-all`, a seed's first cluster crash is a graceful stop
    /// of every data node instead (each refuses new work with 280, lets its running
    /// transactions end, has a global checkpoint of what it answered saved, then leaves),
    /// followed by the same system restart. Every commit acknowledged before the stop began
    /// must be in the GCI the cluster restarts at, durable or not. With `stop` too, half of
    /// them are a SIGTERM to every data node instead: stops alone, one per node within
    /// 200 ms, which the nodes must turn into a stop of every data node (none stops with
    /// 2305, and the same check holds). Off unless asked for.
    Shutdown,
    /// ndb_mgm's STOP of one data node (a SIGTERM; with `restart`, a rolling restart): half
    /// the planned crashes are graceful stops instead. The node tells the clients
    /// (NODE_STOPPING_REP), which answer and send their new transactions to another replica's
    /// TC; it refuses new work (280) once each answered or 5 s passed, lets running
    /// transactions end, has what it answered saved, and leaves; with `restart` it starts
    /// again by node restart. Off unless asked for.
    Stop,
}

impl Fault {
    /// The faults today's cluster handles, on by default.
    pub const DEFAULT: [Fault; 8] = [
        Fault::Crash,
        Fault::Client,
        Fault::Slow,
        Fault::ApiLink,
        Fault::Buggify,
        Fault::Pause,
        Fault::Hang,
        Fault::Restart,
    ];

    /// Every fault kind the cluster handles together: the defaults, cluster crashes and disk
    /// faults (`Partition` is handled alone or with the faults that take no data node down,
    /// see `sim/tests/partition.rs`).
    pub const HANDLED: [Fault; 10] = [
        Fault::Crash,
        Fault::Client,
        Fault::Slow,
        Fault::ApiLink,
        Fault::Buggify,
        Fault::Pause,
        Fault::Hang,
        Fault::CrashAll,
        Fault::Disk,
        Fault::Restart,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::Crash => "crash",
            Fault::Client => "client",
            Fault::Slow => "slow",
            Fault::ApiLink => "api-link",
            Fault::Buggify => "buggify",
            Fault::Pause => "pause",
            Fault::Hang => "hang",
            Fault::Partition => "partition",
            Fault::CrashAll => "crash-all",
            Fault::Disk => "disk",
            Fault::Restart => "restart",
            Fault::CrashAgain => "crash-again",
            Fault::CrashStarting => "crash-starting",
            Fault::SingleUser => "single-user",
            Fault::Limits => "limits",
            Fault::Backup => "backup",
            Fault::Events => "events",
            Fault::Drop => "drop",
            Fault::Index => "index",
            Fault::Shutdown => "shutdown",
            Fault::Stop => "stop",
        }
    }
}

/// A deliberate bug in the clients, to show that the checkers fire and that a failing seed
/// replays: never on unless asked for (`--sabotage`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Sabotage {
    /// Transfers credit one unit more than they debit: the next full read sums wrong.
    Bank,
    /// Client 1 reports some of its reads with the value it read the time before (stale).
    Registers,
    /// Client 1 reports its deletes that found no row (626) as done.
    Sets,
    /// The check of a completed backup (`Fault::Backup`) restores its data files without
    /// their logs: the fuzzy scan alone, which is no consistent cut.
    Backup,
    /// The check of a completed SNAPSHOTSTART backup (`Fault::Backup`) replays its log
    /// forward to the stop GCP, as a backup without SNAPSHOTSTART restores, instead of going
    /// back to its snapshot GCP: the changes committed while it ran stay in.
    SnapshotStart,
    /// The event subscriber (`Fault::Events`) skips the first update it is handed of a row
    /// whose image it knows: a change lost, which the chain of the row's images must show.
    Events,
}

/// What the user chose for a run (the same for every seed of a `--seeds` run).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    pub workload: Workload,
    /// The fault kinds seeds may draw (sorted, no duplicates).
    pub faults: Vec<Fault>,
    /// Print every delivered frame and fault.
    pub trace: bool,
    /// A deliberate client bug (see [`Sabotage`]).
    pub sabotage: Option<Sabotage>,
    /// NoOfReplicas: 2 or 3, in one or two node groups.
    pub replicas: u16,
    /// Every commit the clients send asks to be durable (`FLAG_DURABLE_COMMIT`): an
    /// acknowledged write must then survive every cluster crash after it, whatever GCI it had.
    pub durable_commits: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            workload: Workload::All,
            faults: Fault::DEFAULT.to_vec(),
            trace: false,
            sabotage: None,
            replicas: 2,
            durable_commits: false,
        }
    }
}

impl Options {
    pub fn has(&self, fault: Fault) -> bool {
        self.faults.contains(&fault)
    }

    /// The one command that replays `seed` with these options.
    pub fn replay_command(&self, seed: u64) -> String {
        // A build with debug assertions (cargo test, a dev build) replays in one, so that a
        // kernel's `debug_assert!` that fired fires again.
        let profile = if cfg!(debug_assertions) {
            ""
        } else {
            " --release"
        };
        let mut command = format!(
            "cargo run{profile} --bin rndb-sim -- --seed {seed:#018x} --workload {}",
            self.workload.name()
        );
        let mut faults = self.faults.clone();
        faults.sort();
        if faults != Fault::DEFAULT.to_vec() {
            let names: Vec<&str> = faults.iter().map(|f| f.name()).collect();
            let list = if names.is_empty() {
                "none".to_string()
            } else {
                names.join(",")
            };
            command.push_str(&format!(" --faults {list}"));
        }
        match self.sabotage {
            Some(Sabotage::Bank) => command.push_str(" --sabotage bank"),
            Some(Sabotage::Registers) => command.push_str(" --sabotage registers"),
            Some(Sabotage::Sets) => command.push_str(" --sabotage sets"),
            Some(Sabotage::Backup) => command.push_str(" --sabotage backup"),
            Some(Sabotage::SnapshotStart) => command.push_str(" --sabotage snapshot-start"),
            Some(Sabotage::Events) => command.push_str(" --sabotage events"),
            None => {}
        }
        if self.replicas != 2 {
            command.push_str(&format!(" --replicas {}", self.replicas));
        }
        if self.durable_commits {
            command.push_str(" --durable-commits");
        }
        command
    }
}

/// Data nodes a run has at most (two node groups of NoOfReplicas=3).
pub const DATA_NODES_MAX: u16 = 6;
/// API clients a run has at most.
pub const CLIENTS_MAX: u16 = 6;
/// The first API node id (clients are 50, 51, ...).
pub const FIRST_API_NODE: u16 = 50;
/// HeartbeatIntervalDbApi: the simulated clients send no heartbeats (API_REGREQ between
/// requests), so the data nodes' bound on an API node's silence is set past any run; a
/// client's failure shows as its links closing.
const API_HEARTBEAT_MS: u32 = 4_000_000_000;

/// What one seed drew. Every field is a function of the seed and the options.
#[derive(Clone, Debug)]
pub struct Knobs {
    /// One node group or two, of `replicas` nodes each.
    pub data_nodes: u16,
    /// NoOfReplicas (`Options::replicas`).
    pub replicas: u16,
    pub clients: u16,
    /// One-way delay of a frame on a link, before slowness.
    pub delay_ns_min: u64,
    pub delay_ns_max: u64,
    /// Pause between a client's operations.
    pub think_ns_max: u64,
    /// How long clients start new operations after the tables are ready.
    pub workload_ns: u64,
    /// TransactionDeadlockDetectionTimeout.
    pub deadlock_timeout_ms: u32,
    /// MaxNoOfConcurrentOperations (small pools find overload paths).
    pub operations_max: u32,
    pub accounts: u16,
    pub register_keys: u16,
    /// Client 0 first sends CREATE TABLE to a data node that is not the DICT master and must
    /// retry on the master after 702 (issue 21, item 10).
    pub schema_to_non_master: bool,
    /// Client 0's link to the master (data node 1) comes up this long after the start (0: at
    /// once): its CREATE TABLE goes to another node, gets 702, and is retried until the link
    /// is up (issue 21 item 10).
    pub master_link_late_ns: u64,
    /// Node groups that lose one node (one crash each).
    pub crashes: u16,
    pub client_deaths: u16,
    pub slow_links: u16,
    pub api_link_drops: u16,
    /// Per-million chance that a send finds the send buffer full (BUGGIFY), 0 when off.
    pub overload_ppm: u64,
    /// Largest lateness of a timer tick (BUGGIFY), 0 when off.
    pub late_tick_ns_max: u64,
    pub partitions: u16,
    /// Elements of the set workload's key space (keys 0..set_keys).
    pub set_keys: u16,
    /// The bank's full reads are mostly table scans (SCAN_TABREQ to every data node), the
    /// final one always; otherwise they read every key.
    pub scan_reads: bool,
    /// Rows per fragment per scan batch (small, so that scans take several SCAN_NEXTREQs).
    pub scan_batch_rows: u32,
    /// Data-node pauses.
    pub pauses: u16,
    /// HeartbeatIntervalDbDb.
    pub heartbeat_ms: u32,
    /// Node groups (of those no crash took) that have a node hang past the heartbeat bound.
    pub hangs: u16,
    /// Windows of single user mode for client 0 (`Fault::SingleUser`).
    pub single_user_windows: u16,
    /// Online backups started (`Fault::Backup`).
    pub backups: u16,
    /// When, into the workload, client 0 drops the scratch table (`Fault::Drop`).
    pub drop_at_ns: Option<u64>,
    /// When, into the workload, client 0 creates the bank's index (`Fault::Index`),
    /// and drops it again (once its create ended).
    pub index_at_ns: Option<u64>,
    pub index_drop_at_ns: Option<u64>,
    /// The index is an ordered one over the balance (else a unique hash index over the
    /// balance and the id).
    pub index_ordered: bool,
    /// MaxNoOfLocalOperations, MaxNoOfConcurrentIndexOperations and MaxNoOfFiredTriggers
    /// (`Fault::Limits`); `None`: the defaults.
    pub record_limits: Option<(u32, u32, u32)>,
    /// The data nodes keep files (`Kernel::with_files`: redo log, schema log, sysfile, on
    /// simulated disks); otherwise they are made with `Kernel::new`, as Diskless.
    pub durable: bool,
    /// TimeBetweenGlobalCheckpoints and TimeBetweenEpochs (durable seeds; NDB's defaults
    /// otherwise).
    pub gcp_interval_ms: u32,
    pub epoch_interval_ms: u32,
    /// TimeBetweenLocalCheckpoints (durable seeds).
    pub lcp_log2: u32,
    /// Saves after which a data node compacts its schema log.
    pub schema_compact_after: u32,
    /// TimeBetweenGlobalCheckpointsTimeout: a quarter of the durable seeds make it short, so
    /// that a node whose part in a save lags (paused, slow, waiting for failures to be
    /// handled) asks to be stopped (GCP stop, 2303).
    pub gcp_stop_ms: u32,
    /// The disks' service times and fault rates (faults: `--faults disk`).
    pub disk: DiskKnobs,
    /// Cluster crashes, each followed by a system restart (`--faults crash-all`).
    pub cluster_crashes: u16,
    /// Crashed data nodes start again and rejoin by node restart (`--faults restart`).
    pub node_restarts: bool,
    /// Client 0 arbitrates (its slot has ArbitrationRank 1). Not in seeds with cluster
    /// crashes: a data node that crashes right after a system restart, before the president
    /// has started the arbitrator, stops a two-node cluster's survivor, as in NDB, and the
    /// sim does not start a cluster again that stopped on its own.
    pub arbitrator: bool,
    /// Each transfer also inserts a ledger row (its id, accounts and amount) in the same
    /// transaction, and the final reads check that the balances are what the ledger's
    /// transfers made of them and that no acknowledged, durable transfer is missing. Always on
    /// in seeds with cluster crashes and the bank.
    pub ledger: bool,
    /// StartPartialTimeout in ms, with `crash-starting` (0: NDB's default, 30 s): short, so
    /// that a system restart that lost a node before every node reported goes on without it
    /// (a partial start) within the time the final reads wait.
    pub start_partial_timeout_ms: u32,
}

/// Mixed into the seed of the generator that draws the knobs added after the first ones, so
/// that those keep their values (and found seeds keep their knobs).
const LATER_KNOBS_SALT: u64 = 0x5e75_0f5c_a115_2026;
/// The same for the durability knobs (files, disks, cluster crashes).
const DURABILITY_KNOBS_SALT: u64 = 0xd15c_5a1e_0f1a_5700;
/// The same for the membership knobs (heartbeats, hangs).
const MEMBERSHIP_KNOBS_SALT: u64 = 0x4ea7_b3a7_0f0d_e5d1;
/// The same for the knobs of `crash-starting`.
const START_KNOBS_SALT: u64 = 0x57a7_0ff5_c0a5_4ed1;
/// Seeds the draw of the record limits (`Fault::Limits`).
const LIMITS_KNOBS_SALT: u64 = 0x1141_75ec_0bd5_2026;
/// Seeds the draw of the single user mode windows.
const SINGLE_USER_KNOBS_SALT: u64 = 0x5191_e05e_a0de_2026;
/// Seeds the draw of the backups (`Fault::Backup`).
const BACKUP_KNOBS_SALT: u64 = 0xbac4_0b5e_ed00_2026;
/// Seeds the draw of the scratch table's drop (`Fault::Drop`).
const DROP_KNOBS_SALT: u64 = 0xd409_7ab1_e000_2026;
/// Seeds the draw of the bank index's create (`Fault::Index`).
const INDEX_KNOBS_SALT: u64 = 0x1ade_c4ea_7e00_2026;
/// Salts the generator of the backup files' service times (drawn apart, so that the other
/// knobs of a seed stay what they were before backups had a disk queue of their own).
const BACKUP_DISK_KNOBS_SALT: u64 = 0xbac4_d15c_0000_2026;

impl Knobs {
    /// Draws a seed's knobs. Each fault kind allowed by `options` is left out by about one
    /// seed in four (swarm testing).
    pub fn draw(rng: &mut Rng, options: &Options) -> Knobs {
        let replicas = options.replicas;
        let data_nodes = if rng.coin() { replicas } else { 2 * replicas };
        let groups = u64::from(data_nodes / replicas);
        let clients = rng.between(2, u64::from(CLIENTS_MAX)) as u16;
        let delay_ns_min = rng.between(20_000, 200_000);
        let delay_ns_max = delay_ns_min + rng.between(0, 2_000_000);
        let fault = |kind: Fault, rng: &mut Rng, max: u64| -> u16 {
            if options.has(kind) && rng.below(4) != 0 {
                rng.between(1, max) as u16
            } else {
                0
            }
        };
        let crashes = fault(Fault::Crash, rng, groups);
        let client_deaths = fault(Fault::Client, rng, u64::from(clients - 1));
        let slow_links = fault(Fault::Slow, rng, 4);
        let api_link_drops = fault(Fault::ApiLink, rng, 3);
        let buggify = fault(Fault::Buggify, rng, 1) > 0;
        let partitions = fault(Fault::Partition, rng, 2);
        // Drawn from a generator of their own (seeded from the next draw, which stays the
        // world's), so that adding knobs here moves no earlier draw.
        let mut later = Rng::new(rng.clone().next_u64() ^ LATER_KNOBS_SALT);
        let set_keys = later.between(3, 16) as u16;
        let scan_reads = later.coin();

        let scan_batch_rows = if later.below(4) == 0 {
            SCAN_BATCH_ROWS_MAX
        } else {
            later.between(1, 4) as u32
        };
        let pauses = if options.has(Fault::Pause) && later.below(4) != 0 {
            later.between(1, 3) as u16
        } else {
            0
        };
        let mut membership = Rng::new(rng.clone().next_u64() ^ MEMBERSHIP_KNOBS_SALT);
        let start_partial_timeout_ms = if options.has(Fault::CrashStarting) {
            Rng::new(rng.clone().next_u64() ^ START_KNOBS_SALT).between(300, 1500) as u32
        } else {
            0
        };
        let single_user_windows = if options.has(Fault::SingleUser) {
            let mut draw = Rng::new(rng.clone().next_u64() ^ SINGLE_USER_KNOBS_SALT);
            if draw.below(4) != 0 {
                draw.between(1, 3) as u16
            } else {
                0
            }
        } else {
            0
        };
        let backups = if options.has(Fault::Backup) {
            Rng::new(rng.clone().next_u64() ^ BACKUP_KNOBS_SALT).between(1, 3) as u16
        } else {
            0
        };
        // (LQH operation records, TC index operation records, fired trigger records); the
        // populate phase writes up to 16 rows, each firing one trigger, in one transaction.
        let record_limits = if options.has(Fault::Limits) {
            let mut draw = Rng::new(rng.clone().next_u64() ^ LIMITS_KNOBS_SALT);
            Some((
                draw.between(32, 96) as u32,
                draw.between(1, 2) as u32,
                draw.between(16, 24) as u32,
            ))
        } else {
            None
        };
        let heartbeat_ms = membership.between(150, 300) as u32;
        let hangs = if options.has(Fault::Hang) && membership.below(4) != 0 {
            membership.between(1, groups) as u16
        } else {
            0
        };
        let mut durability = Rng::new(rng.clone().next_u64() ^ DURABILITY_KNOBS_SALT);
        let durable = durability.below(8) != 0;
        let (gcp_interval_ms, epoch_interval_ms) = if durable {
            let gcp = durability.between(20, 300) as u32;
            let epoch = if durability.coin() {
                0
            } else {
                durability.between(5, 60) as u32
            };
            (gcp, epoch)
        } else {
            (2000, 100)
        };
        let disk = if durable {
            Knobs::draw_disk(&mut durability, options, gcp_interval_ms)
        } else {
            DiskKnobs::default()
        };
        let cluster_crashes = if durable && options.has(Fault::CrashAll) && durability.below(4) != 0
        {
            durability.between(1, 2) as u16
        } else {
            0
        };
        let ledger =
            durable && options.workload.bank() && (cluster_crashes > 0 || durability.below(4) != 0);
        // Local checkpoints every 2^6..2^13 words of redo (256 B to 32 KiB): a seed's few
        // hundred commits see several, full and partial, so crashes land during them.
        let lcp_log2 = if durable {
            durability.between(6, 13) as u32
        } else {
            20
        };
        // Half the durable seeds compact the schema log every few saves (a run saves a few
        // dozen times), so that restarts read compacted files.
        let schema_compact_after = if durable && durability.coin() {
            durability.between(1, 8) as u32
        } else {
            rndb_ndbd::blocks::dict::log::COMPACT_AFTER
        };
        let gcp_stop_ms = if durable && durability.below(4) == 0 {
            durability.between(200, 2_000) as u32
        } else {
            120_000
        };
        let mut knobs = Knobs {
            data_nodes,
            replicas,
            clients,
            delay_ns_min,
            delay_ns_max,
            think_ns_max: rng.between(0, 5_000_000),
            workload_ns: rng.between(300, 1_500) * 1_000_000,
            deadlock_timeout_ms: rng.between(50, 400) as u32,
            operations_max: if rng.coin() { 64 } else { 1024 },
            accounts: rng.between(2, 12) as u16,
            register_keys: rng.between(3, 12) as u16,
            schema_to_non_master: rng.coin(),
            master_link_late_ns: if rng.below(4) == 0 {
                rng.between(1_000_000, 200_000_000)
            } else {
                0
            },
            crashes,
            client_deaths,
            slow_links,
            api_link_drops,
            overload_ppm: if buggify {
                rng.between(1_000, 30_000)
            } else {
                0
            },
            late_tick_ns_max: if buggify {
                rng.between(0, 30_000_000)
            } else {
                0
            },
            // A split needs the arbitrator, which seeds with cluster crashes go without.
            partitions: if cluster_crashes > 0 { 0 } else { partitions },
            set_keys,
            scan_reads,
            scan_batch_rows,
            pauses,
            heartbeat_ms,
            hangs,
            single_user_windows,
            backups,
            drop_at_ns: None,
            index_at_ns: None,
            index_drop_at_ns: None,
            index_ordered: false,
            record_limits,
            durable,
            gcp_interval_ms,
            epoch_interval_ms,
            lcp_log2,
            schema_compact_after,
            gcp_stop_ms,
            disk,
            cluster_crashes,
            node_restarts: options.has(Fault::Restart),
            arbitrator: cluster_crashes == 0,
            ledger,
            start_partial_timeout_ms,
        };
        if options.has(Fault::Drop) {
            let mut draw = Rng::new(rng.clone().next_u64() ^ DROP_KNOBS_SALT);
            knobs.drop_at_ns = Some(draw.below(knobs.workload_ns * 3 / 4));
        }
        if options.has(Fault::Index) && options.workload.bank() {
            let mut draw = Rng::new(rng.clone().next_u64() ^ INDEX_KNOBS_SALT);
            let at = draw.below(knobs.workload_ns * 3 / 4);
            knobs.index_at_ns = Some(at);
            if draw.coin() {
                knobs.index_drop_at_ns = Some(at + draw.below(knobs.workload_ns - at));
            }
            knobs.index_ordered = draw.coin();
        }
        knobs
    }

    /// A durable seed's disks: writes take 5 us to 0.5 ms, syncs 0.1 to 10 ms; with `--faults
    /// disk`, three seeds in four fail some writes and syncs with ENOSPC, EIO or both. A
    /// backup's files (a queue of their own) are as fast in half the seeds; in the other half
    /// their writes take up to a quarter of a global checkpoint's interval and their syncs a
    /// quarter to twice it, so that a backup spans several global checkpoints and a
    /// SNAPSHOTSTART one has changes to take back.
    fn draw_disk(rng: &mut Rng, options: &Options, gcp_interval_ms: u32) -> DiskKnobs {
        let op_lo = rng.between(5_000, 100_000);
        let sync_lo = rng.between(100_000, 2_000_000);
        let op_ns = (op_lo, op_lo + rng.between(0, 400_000));
        let sync_ns = (sync_lo, sync_lo + rng.between(0, 8_000_000));
        let mut slow = Rng::new(rng.clone().next_u64() ^ BACKUP_DISK_KNOBS_SALT);
        let (backup_op_ns, backup_sync_ns) = if slow.coin() {
            (op_ns, sync_ns)
        } else {
            let gcp_ns = u64::from(gcp_interval_ms) * 1_000_000;
            ((op_lo, gcp_ns / 4), (gcp_ns / 4, 2 * gcp_ns))
        };
        let mut disk = DiskKnobs {
            op_ns,
            sync_ns,
            backup_op_ns,
            backup_sync_ns,
            enospc_ppm: 0,
            eio_ppm: 0,
        };
        if options.has(Fault::Disk) && rng.below(4) != 0 {
            let ppm = rng.between(200, 20_000);
            match rng.below(3) {
                0 => disk.enospc_ppm = ppm,
                1 => disk.eio_ppm = ppm,
                _ => (disk.enospc_ppm, disk.eio_ppm) = (ppm / 2, ppm / 2),
            }
        }
        disk
    }

    /// The cluster's config.ini: small pools, so that creating a kernel is cheap.
    pub fn config_ini(&self) -> String {
        let mut ini = format!(
            "[ndbd default]\nNoOfReplicas={}\nDataMemory=1M\nMaxNoOfConcurrentOperations={}\n\
             MaxNoOfConcurrentTransactions=32\nMaxNoOfConcurrentScans=2\nMaxNoOfTables=8\n\
             MaxNoOfOrderedIndexes={}\nMaxNoOfUniqueHashIndexes={}\n\
             TransactionDeadlockDetectionTimeout={}\nHeartbeatIntervalDbDb={}\n\
             HeartbeatIntervalDbApi={}\n",
            self.replicas,
            self.operations_max,
            // The bank's (`Fault::Index`), ordered or not, and the set's.
            u8::from(self.index_at_ns.is_some() && self.index_ordered),
            1 + u8::from(self.index_at_ns.is_some() && !self.index_ordered),
            self.deadlock_timeout_ms,
            self.heartbeat_ms,
            API_HEARTBEAT_MS
        );
        if self.start_partial_timeout_ms != 0 {
            ini.push_str(&format!(
                "StartPartialTimeout={}\n",
                self.start_partial_timeout_ms
            ));
        }
        if let Some((local, index, fired)) = self.record_limits {
            ini.push_str(&format!(
                "MaxNoOfLocalOperations={local}\nMaxNoOfConcurrentIndexOperations={index}\n\
                 MaxNoOfFiredTriggers={fired}\n"
            ));
        }
        if self.durable {
            ini.push_str(&format!(
                "TimeBetweenGlobalCheckpoints={}\nTimeBetweenEpochs={}\nTimeBetweenLocalCheckpoints={}\n\
                 TimeBetweenGlobalCheckpointsTimeout={}\n",
                self.gcp_interval_ms, self.epoch_interval_ms, self.lcp_log2, self.gcp_stop_ms
            ));
        }
        for id in 1..=self.data_nodes {
            ini.push_str(&format!("[ndbd]\nNodeId={id}\nHostName=127.0.0.1\n"));
        }
        for id in 0..self.clients {
            let rank = u16::from(self.arbitrator && usize::from(id) == crate::client::ARBITRATOR);
            ini.push_str(&format!(
                "[api]\nNodeId={}\nHostName=127.0.0.1\nArbitrationRank={rank}\n",
                FIRST_API_NODE + id
            ));
        }
        ini
    }
}

impl Knobs {
    /// The durability knobs, for the report.
    fn durability(&self) -> String {
        if !self.durable {
            return "no files (Kernel::new)".into();
        }
        format!(
            "files: global checkpoints every {} ms (GCP stop after {} ms), epochs every {} ms, local checkpoints every 2^{} words, disk ops {}-{} us, syncs {}-{} us, backup files' ops {}-{} us, syncs {}-{} us, ENOSPC {} ppm, EIO {} ppm, cluster crashes {}, ledger {}",
            self.gcp_interval_ms,
            self.gcp_stop_ms,
            self.epoch_interval_ms,
            self.lcp_log2,
            self.disk.op_ns.0 / 1000,
            self.disk.op_ns.1 / 1000,
            self.disk.sync_ns.0 / 1000,
            self.disk.sync_ns.1 / 1000,
            self.disk.backup_op_ns.0 / 1000,
            self.disk.backup_op_ns.1 / 1000,
            self.disk.backup_sync_ns.0 / 1000,
            self.disk.backup_sync_ns.1 / 1000,
            self.disk.enospc_ppm,
            self.disk.eio_ppm,
            self.cluster_crashes,
            self.ledger
        )
    }
}

impl fmt::Display for Knobs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} data nodes, {} clients, delay {}-{} us, workload {} ms, deadlock timeout {} ms, \
             {} operation records, {} accounts, {} register keys, schema to non-master {}, master link late {} ms, \
             crashes {}, client deaths {}, slow links {}, api link drops {}, overload {} ppm, \
             late ticks up to {} ms, partitions {}, {} set keys, scan reads {} ({} rows a batch), \
             pauses {}, heartbeats every {} ms, hangs {}, single user windows {}, backups {}, \
             drop at {:?} ms, index (ordered {}) at {:?} ms dropped at {:?} ms, record limits {:?}, {}",
            self.data_nodes,
            self.clients,
            self.delay_ns_min / 1000,
            self.delay_ns_max / 1000,
            self.workload_ns / 1_000_000,
            self.deadlock_timeout_ms,
            self.operations_max,
            self.accounts,
            self.register_keys,
            self.schema_to_non_master,
            self.master_link_late_ns / 1_000_000,
            self.crashes,
            self.client_deaths,
            self.slow_links,
            self.api_link_drops,
            self.overload_ppm,
            self.late_tick_ns_max / 1_000_000,
            self.partitions,
            self.set_keys,
            self.scan_reads,
            self.scan_batch_rows,
            self.pauses,
            self.heartbeat_ms,
            self.hangs,
            self.single_user_windows,
            self.backups,
            self.drop_at_ns.map(|ns| ns / 1_000_000),
            self.index_ordered,
            self.index_at_ns.map(|ns| ns / 1_000_000),
            self.index_drop_at_ns.map(|ns| ns / 1_000_000),
            self.record_limits,
            self.durability()
        )
    }
}
