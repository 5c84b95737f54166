//! One simulated run: the data nodes' kernels, the clients, the network, the fault plan and
//! the clock, driven event by event from one seed.
//!
//! A step pops the earliest event, sets the clock to its time, and hands it to its node: a
//! frame to `Kernel::on_frame` (then `run_jobs`) or to a client, a timer tick to `on_timer`
//! (then `run_jobs`), a closed link to `on_disconnect` (then `run_jobs`) or to the client.
//! What the step sent is scheduled on the network. Checks run where their facts appear (a
//! full read of the bank is checked when its answer arrives); the run stops at the first
//! violation, naming the seed, the step and the simulated time.

mod backup;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;
use std::time::{Duration, Instant};

use rndb_config::{ClusterConfig, DataNodeConfig, NodeId, PartitionMap};
use rndb_ndbd::blocks::Kernel;
use rndb_ndbd::ndbfs::format::Sysfile;
use rndb_transporter::FrameHeader;

use crate::check::{self, Expect, HistoryOp, RegOp, Verdict};
use crate::client::{
    Access, Client, Ctx, Outcome, Shared, Stats, TransferOutcome, ARBITRATOR, BANK,
    INITIAL_BALANCE, LEDGER, REGISTERS, SCRATCH_NAME, SETS,
};
use crate::disk::{DiskQueue, SimDisk};
use crate::durability::{self, ClusterCrash, Fate, GciClock};
use crate::events::{EventStats, Subscriber};
use crate::knobs::{Fault, Knobs, Options, FIRST_API_NODE};
use crate::net::{EventKind, Net, Queue, SimOutbox};
use crate::rng::Rng;

/// The data nodes' timer tick, as `rndb_ndbd::exec::TIMER_TICK`.
const TIMER_TICK_NS: u64 = 10_000_000;
/// How soon a data node retries final answers that met a full send buffer (as the execution
/// loop's `RETRY_FLUSH_AFTER`).
const KICK_NS: u64 = 1_000_000;
/// How long after a connection drops each end hears of it, at most.
const DETECT_NS_MAX: u64 = 1_000_000;
/// Signals after which an armed crash fires: a request from an API node, a replica's
/// prepare, its answer, a commit round and its answer, a failed coordinator's query.
const CRASH_AFTER_SIGNALS: [u16; 7] = [
    rndb_protocol::signals::gsn::TCKEYREQ,
    rndb_protocol::lqh::gsn::LQHKEYREQ,
    rndb_protocol::lqh::gsn::LQHKEYCONF,
    rndb_protocol::lqh::gsn::LQH_COMMITREQ,
    rndb_protocol::lqh::gsn::LQH_COMMITCONF,
    rndb_protocol::lqh::gsn::LQH_ABORTREQ,
    rndb_protocol::lqh::gsn::TC_FAIL_QUERY,
];
/// The system restart's signals a `crash-starting` crash may follow at the node handling it.
const CRASH_STARTING_SIGNALS: [u16; 5] = [
    rndb_protocol::gsn::CM_REGREQ,
    rndb_protocol::gsn::CNTR_START_REQ,
    rndb_protocol::gsn::CNTR_START_CONF,
    rndb_protocol::gsn::CNTR_WAITREP,
    rndb_protocol::gsn::CNTR_START_REP,
];
/// How long into a system restart a timed `crash-starting` crash may come, at most.
const CRASH_STARTING_NS_MAX: u64 = 40_000_000;
/// How soon after the first crash a second one may follow, at most, when they come together.
const CRASH_STORM_NS_MAX: u64 = 30_000_000;
/// How long the faults wait for the arbitrator to be started once the tables are ready.
const ARBITRATOR_WAIT_NS: u64 = 1_000_000_000;
/// The tables must be ready this soon.
const SETUP_NS_MAX: u64 = 30_000_000_000;
/// After the workload ends, the final reads must be done this soon.
const QUIESCE_NS_MAX: u64 = 120_000_000_000;
/// The sysfile's two copies on a node's disk (`rndb_ndbd::blocks::dih::gcp::SYSFILES`).
const SYSFILES: [&str; 2] = ["D1/DBDIH/P0.sysfile", "D2/DBDIH/P0.sysfile"];
/// Mixed into the seed of the disks' generators, so that durable seeds draw nothing more
/// from the world's.
const DISK_SALT: u64 = 0xd15c_0000_5eed_0001;
/// How long after a cluster crash its nodes restart: longer than any end takes to hear that
/// its links closed, so no such news reaches a restarted node.
const RESTART_NS_MIN: u64 = 2 * DETECT_NS_MAX;
const RESTART_NS_MAX: u64 = 200_000_000;
/// With `--faults events`: how long after the final reads end the subscriber may take to hand
/// out the epoch the data nodes were in then.
const EVENTS_CATCH_UP_NS: u64 = 20_000_000_000;
/// When a cluster crash finds the tables not yet saved (no sysfile names a GCI after their
/// creation), it waits this long and looks again.
const CLUSTER_CRASH_RETRY_NS: u64 = 20_000_000;
/// Within how long of each other the SIGTERMs of a SIGTERM to every data node arrive (see
/// `World::shutdown`): often long enough for a node's whole stop to end before another's
/// begins.
const SIGTERM_SPREAD_NS: u64 = 200_000_000;

/// A finished run.
#[derive(Clone, Debug)]
pub struct Report {
    pub seed: u64,
    pub knobs: Knobs,
    /// Simulated time at the end.
    pub sim_ns: u64,
    pub steps: u64,
    /// Frames delivered.
    pub frames: u64,
    /// A hash of every delivered frame: (time, from, to, signal, request id, payload).
    pub trace_hash: u64,
    pub stats: Stats,
    /// Register keys whose check ran out of its search budget.
    pub undecided_keys: usize,
    /// Sends that found the send buffer "full" (BUGGIFY).
    pub overloads: u64,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u64>,
    /// Each delivered frame's (step, simulated ns, trace hash after it), to find where two runs
    /// of a seed part.
    pub frame_hashes: Vec<(u64, u64, u64)>,
    /// Cluster crashes and what the durability checks made of them.
    pub durability: DurabilityReport,
    /// Things that happened and are allowed, worth a line in the report (a data node that
    /// stopped at a restart it could not make, and why that was expected).
    pub notes: Vec<String>,
    /// With `--faults events`: what the subscriber did and the checks found.
    pub events: Option<EventStats>,
}

/// The durability side of a run.
#[derive(Clone, Debug, Default)]
pub struct DurabilityReport {
    /// Each cluster crash: (simulated ns, highest restorable GCI a kernel reported, the GCI
    /// the disks let the cluster restart at).
    pub crashes: Vec<(u64, u32, u32)>,
    /// Acknowledged operations (register and set operations, transfers) found durable at the
    /// crash after them, whose outcome therefore stayed, and those that became unknown.
    pub durable_ops: u64,
    pub ops_made_unknown: u64,
    /// Of `durable_ops`, those kept only because their durable commit was answered
    /// (`--durable-commits`): the clock alone would have let the crash lose them.
    pub durable_commits_kept: u64,
    /// Transfers that the final read of the ledger had to find (acknowledged, durable), and
    /// the ledger rows it found.
    pub transfers_required: u64,
    pub ledger_rows: u64,
    /// Disk faults injected (ENOSPC, EIO), unsynced changes lost and kept by crashes, torn
    /// writes.
    pub disk_faults: u64,
    pub changes_lost: u64,
    pub changes_kept: u64,
    pub torn_writes: u64,
    /// The highest restorable GCI a kernel reported by the end.
    pub restorable_gci: u32,
}

/// A run that broke an invariant (or hung, or did not replay).
#[derive(Clone, Debug)]
pub struct Failure {
    pub seed: u64,
    pub step: u64,
    pub sim_ns: u64,
    pub what: String,
    /// The one command that replays it.
    pub replay: String,
    pub knobs: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {:#018x} failed at step {}, simulated time {:.6} ms: {}\n  knobs: {}\n  replay: {}",
            self.seed,
            self.step,
            self.sim_ns as f64 / 1e6,
            self.what,
            self.knobs,
            self.replay
        )
    }
}

/// Runs `seed` twice and compares the trace hashes: a run that does not replay itself is a
/// failure too.
pub fn run_seed_checked(seed: u64, options: &Options) -> Result<Report, Failure> {
    let first = run_seed(seed, options)?;
    let second = run_seed(seed, options)?;
    if first.trace_hash != second.trace_hash || first.steps != second.steps {
        let (index, (step, sim_ns, _)) = first
            .frame_hashes
            .iter()
            .zip(&second.frame_hashes)
            .enumerate()
            .find(|(_, (a, b))| a != b)
            .map_or(
                (first.frame_hashes.len(), (first.steps, first.sim_ns, 0)),
                |(i, (a, _))| (i, *a),
            );
        return Err(Failure {
            seed,
            step,
            sim_ns,
            what: format!(
                "determinism: two runs of the seed part at delivered frame {index}: trace hash {:#018x} in {} steps, then {:#018x} in {} steps (--trace prints both runs' frames)",
                first.trace_hash, first.steps, second.trace_hash, second.steps
            ),
            replay: options.replay_command(seed),
            knobs: first.knobs.to_string(),
        });
    }
    Ok(first)
}

/// Runs one seed.
/// Runs seeds `start..start + count`, each once: every report, or every failure in one
/// message ("N of count seeds failed", then each with its replay command), for tests.
pub fn run_seeds(start: u64, count: u64, options: &Options) -> Result<Vec<Report>, String> {
    let mut reports = Vec::new();
    let mut failures = Vec::new();
    for seed in start..start + count {
        match run_seed(seed, options) {
            Ok(report) => reports.push(report),
            Err(failure) => failures.push(failure.to_string()),
        }
    }
    if failures.is_empty() {
        Ok(reports)
    } else {
        Err(format!(
            "{} of {count} seeds failed:\n{}",
            failures.len(),
            failures.join("\n")
        ))
    }
}

pub fn run_seed(seed: u64, options: &Options) -> Result<Report, Failure> {
    let mut world = World::new(seed, options);
    // A panic in a kernel (an assertion) or in the sim is this seed's failure, reported with
    // its replay command like any other.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| world.run()))
        .unwrap_or_else(|panic| {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic without a message".into());
            Err(format!("panic: {message}"))
        });
    match result {
        Ok(()) => Ok(world.report()),
        Err(what) => Err(Failure {
            seed,
            step: world.step,
            sim_ns: world.now_ns,
            what,
            replay: options.replay_command(seed),
            knobs: world.knobs.to_string(),
        }),
    }
}

/// A fault planned at the start of the workload.
#[derive(Clone, Debug)]
enum Planned {
    /// The node crashes; with `drain`, what it sent before still arrives (a closed socket
    /// whose peer reads it to the end), otherwise it is lost with the links (a reset).
    Crash {
        node: NodeId,
        drain: bool,
    },
    /// Arms a crash of the node right after it handles its next frame carrying `signal` (a
    /// crash in the middle of a protocol: between a prepare and its answer, inside a commit).
    CrashAfter {
        node: NodeId,
        signal: u16,
        drain: bool,
    },
    ClientDies(usize),
    /// The client dies at its next moment with a request outstanding (mid-transaction).
    ClientDiesMidRequest(usize),
    Slow {
        from: NodeId,
        to: NodeId,
        factor: u64,
        for_ns: u64,
    },
    ApiLinkDrop {
        client: usize,
        node: NodeId,
        for_ns: u64,
    },
    Reconnect {
        client: usize,
        node: NodeId,
    },
    /// Every data node loses power (see `Fault::CrashAll`).
    ClusterCrash,
    /// Every data node stops gracefully (see `Fault::Shutdown`).
    Shutdown,
    /// A SIGTERM reaches a data node of a SIGTERM to every data node (`Fault::Shutdown` with
    /// `Fault::Stop`): it begins a stop alone.
    Sigterm(NodeId),
    /// Every data node restarts from its disk after a cluster crash.
    ClusterRestart,
    /// A crashed data node starts again and rejoins by node restart.
    NodeRestart(NodeId),
    /// Data nodes `side` lose their links to the others (both ways).
    Cut {
        side: Vec<NodeId>,
    },
    /// Frames from `from` to `to` vanish for a while (one way).
    OneWay {
        from: NodeId,
        to: NodeId,
        for_ns: u64,
    },
    /// The data node handles nothing for `for_ns` (its links stay up).
    Pause {
        node: NodeId,
        for_ns: u64,
    },
    /// START BACKUP (`Fault::Backup`): the world coordinates it, as ndb_mgmd does.
    Backup,
    /// The coordinator's next report round of the running backup.
    BackupReport,
    /// Every data node enters single user mode for client 0 (`Fault::SingleUser`), or leaves
    /// it (`None`).
    SingleUser(Option<NodeId>),
    /// As a pause, past the heartbeat bound (see `Fault::Hang`).
    Hang {
        node: NodeId,
        for_ns: u64,
    },
    /// A crash of a node whose group lost a node already (see `Fault::CrashAgain`).
    CrashAgain {
        node: NodeId,
        drain: bool,
    },
    /// A crash while the cluster restarts from its disks (see `Fault::CrashStarting`): now, or
    /// armed for right after the node handles a frame carrying `signal`.
    CrashStarting {
        node: NodeId,
        signal: Option<u16>,
        drain: bool,
    },
}

struct World {
    seed: u64,
    options: Options,
    knobs: Knobs,
    /// Draws of the fault plan and of detection delays.
    rng: Rng,
    now_ns: u64,
    /// The `Instant` that simulated time 0 stands for: every `now` handed to a kernel is
    /// `base + now_ns`.
    base: Instant,
    step: u64,
    queue: Queue,
    net: Net,
    config: ClusterConfig,
    /// Live data nodes.
    kernels: BTreeMap<NodeId, Kernel>,
    clients: Vec<Client>,
    shared: Shared,
    plan: Vec<Planned>,
    planned: bool,
    end_ns: Option<u64>,
    final_started: bool,
    /// Data nodes with a `Kick` scheduled.
    kicks: BTreeSet<NodeId>,
    trace_hash: u64,
    frames: u64,
    overloads: u64,
    faults: BTreeMap<&'static str, u64>,
    undecided_keys: usize,
    frame_hashes: Vec<(u64, u64, u64)>,
    /// Armed crashes: the node crashes right after it handles a frame with this signal.
    crash_after: BTreeMap<NodeId, (u16, bool)>,
    /// As `crash_after`, for crashes during a system restart (`Fault::CrashStarting`).
    crash_starting_after: BTreeMap<NodeId, (u16, bool)>,
    /// Paused data nodes, and until when: their events wait until then.
    paused: BTreeMap<NodeId, u64>,
    /// When each live end of a dropped data-node link hears it closed (`Disconnected`), keyed
    /// by (that end, the peer): a crashed node starts again only once every peer has.
    hears_closed: BTreeMap<(NodeId, NodeId), u64>,
    /// Data nodes that hung past the heartbeat bound: declared failed, they stop on waking.
    hung: BTreeSet<NodeId>,
    /// Single user mode (`Fault::SingleUser`): the API node every data node lets in alone.
    single_user: Option<NodeId>,
    /// The online backup the world coordinates (`Fault::Backup`), and the last id given.
    backup: Option<backup::SimBackup>,
    backup_ids: u32,
    /// Single user mode windows open (they may overlap).
    single_users: i32,
    /// Data nodes whose disk failed in their current run, or that stopped at their own
    /// request (a failed disk, a GCP stop): each is its node group's one failure, as the
    /// crash plans allow one per group.
    stopped_on_request: BTreeSet<NodeId>,
    /// When each data node last crashed.
    crashed_at: BTreeMap<NodeId, u64>,
    /// When each data node last stopped or crashed while it served nothing (joining by node
    /// restart): an arbitration round soon after counts it among the nodes alive before.
    failed_joining_at: BTreeMap<NodeId, u64>,
    /// A partition was made: a side that loses arbitration stops (2305), as it must.
    split: bool,
    /// Until when a partition may still get a node declared failed (a one-way cut's end, or
    /// a two-way cut's side, which runs on, started, until it finds itself alone): no other
    /// partition starts before (two at once could take a node group off whole).
    partition_until_ns: u64,
    /// The nodes that partition may get declared failed (a one-way cut's two ends, both sides
    /// of a two-way cut): until `partition_until_ns`, each counts as its node group's failure.
    partition_ends: Vec<NodeId>,
    /// Data nodes that started again after a crash (node restart).
    restarted: BTreeSet<NodeId>,
    /// Each data node's disk (durable seeds): it outlives the node's kernels.
    disks: BTreeMap<NodeId, SimDisk>,
    /// Each data node's incarnation, moved on by every crash: timers and disk completions of
    /// an earlier one are ignored.
    incarnations: BTreeMap<NodeId, u32>,
    /// The bound on the GCI of what was acknowledged (see `durability`).
    gci_clock: GciClock,
    /// The GCI bound when the tables were ready: a cluster crash waits until a sysfile names
    /// it, or the tables (whose creation is saved with global checkpoints) would be gone.
    ready_gci: u32,
    /// When the tables were first seen ready (see `arbitration_ready`).
    ready_since_ns: Option<u64>,
    /// Cluster crashes so far.
    cluster_crashes: Vec<ClusterCrash>,
    /// Data nodes whose logs stop before the cluster's (see `ClusterCrash::lagging`).
    lagging: BTreeSet<NodeId>,
    /// A cluster restart is scheduled and has not happened yet.
    restart_pending: bool,
    /// The data nodes of a SHUTDOWN (`Fault::Shutdown`) still stopping.
    shutting_down: BTreeSet<NodeId>,
    /// Data nodes stopping gracefully alone (`Fault::Stop`), until they leave.
    stopping_alone: BTreeSet<NodeId>,
    /// The SHUTDOWN that runs is a SIGTERM to every data node: each begins a stop alone, at
    /// its own moment (`Planned::Sigterm`); those not yet reached are in `sigterm_pending`.
    shutdown_sigterms: bool,
    sigterm_pending: BTreeSet<NodeId>,
    /// The data node whose graceful stop ended and which exits now (`exits_gracefully`).
    exiting: Option<NodeId>,
    /// Data nodes whose stop became, or began as, a stop of every data node by their own
    /// choice (not the world's SHUTDOWN), in the SHUTDOWN running.
    own_choice: BTreeSet<NodeId>,
    /// The GCI bound when the SHUTDOWN began: every commit acknowledged before has a GCI at
    /// most this, and the GCI the cluster restarts at must hold it, unless a node stopped
    /// otherwise or crashed meanwhile (`shutdown_disturbed`).
    shutdown_gci: u32,
    shutdown_disturbed: bool,
    /// A SHUTDOWN runs: the cluster goes down once its last member has left.
    shutdown_active: bool,
    /// The disks' faults when the SHUTDOWN began: one more during it disturbs it.
    shutdown_disk_faults: u64,
    /// When the SHUTDOWN began.
    shutdown_began_ns: u64,
    /// (began, down) of each SHUTDOWN no fault disturbed: a write acknowledged in it was
    /// saved by its TC before its node left, and survives as a durable commit does.
    shutdown_kept: Vec<(u64, u64)>,
    /// A data node crashed during the system restart that runs (`Fault::CrashStarting`).
    crashed_in_restart: bool,
    /// Node groups whose last restorable files a president let go, with the highest durable
    /// GCI known then (`World::files_given_up`).
    given_up: BTreeMap<u32, u32>,
    /// The highest GCI any kernel answers durable commits up to (`Kernel::durable_gci`: every
    /// node its save's COPY_GCIREQ went to answered it), since the last cluster crash.
    restorable_max: u32,
    durability: DurabilityReport,
    notes: Vec<String>,
    /// With `--faults events`: client 0's subscription to the workload's tables, made once
    /// they are ready (`crate::events`).
    subscriber: Option<Subscriber>,
    /// Client 0's links to data nodes as it knows them: where the subscriber may subscribe.
    events_links: BTreeSet<NodeId>,
    /// Once the final reads ended: the epoch the subscriber must hand out before the final
    /// checks, and by when.
    events_target: Option<(u64, u64)>,
}

impl World {
    fn new(seed: u64, options: &Options) -> World {
        let mut rng = Rng::new(seed);
        let knobs = Knobs::draw(&mut rng, options);
        let ini = knobs.config_ini();
        let config = match rndb_config::parse_str(&ini, Path::new("sim.ini")) {
            Ok(config) => config,
            Err(errors) => panic!("the simulator's config does not parse: {errors:?}\n{ini}"),
        };
        let data_nodes: Vec<NodeId> = config.data_nodes.iter().map(|n| n.node_id).collect();
        let client_nodes: Vec<NodeId> = (0..knobs.clients)
            .map(|i| NodeId(FIRST_API_NODE + i))
            .collect();
        let all: Vec<NodeId> = data_nodes.iter().chain(&client_nodes).copied().collect();
        let net = Net::new(
            &mut rng.fork(),
            &all,
            (knobs.delay_ns_min, knobs.delay_ns_max),
            knobs.overload_ppm,
        );
        let mut kernels = BTreeMap::new();
        let mut disks = BTreeMap::new();
        let mut disk_rng = Rng::new(seed ^ DISK_SALT);
        for node in &config.data_nodes {
            let mut kernel = if knobs.durable {
                disks.insert(node.node_id, SimDisk::new(disk_rng.fork(), knobs.disk));
                let mut kernel = Kernel::with_files(&config, node, true);
                kernel.compact_schema_log_after(knobs.schema_compact_after);
                kernel
            } else {
                Kernel::new(&config, node)
            };
            let root = backup::BACKUP_ROOT.to_string();
            kernel.set_backup_dir(root, backup::LOG_BUFFER_BYTES, 0);
            for &other in &data_nodes {
                if other != node.node_id {
                    kernel.on_connect(other);
                }
            }
            // The clients' links are up from the start, as an API node's would be before it
            // registers (the arbitrator's president needs to know it is linked), but for
            // client 0's link to the master when it comes late (below).
            for &client in &client_nodes {
                let late = knobs.master_link_late_ns > 0
                    && client == client_nodes[0]
                    && node.node_id == data_nodes[0];
                if !late {
                    kernel.on_connect(client);
                }
            }
            kernels.insert(node.node_id, kernel);
        }
        let mut client_rng = rng.fork();
        let clients = client_nodes
            .iter()
            .enumerate()
            .map(|(i, &node)| Client::new(i, node, data_nodes.clone(), client_rng.fork(), &knobs))
            .collect();
        let mut shared = Shared::new(&knobs, PartitionMap::new(&config), options.workload);
        shared.sabotage = options.sabotage;
        shared.durable_commits = options.durable_commits;
        shared.trace = options.trace;
        let mut world = World {
            seed,
            options: options.clone(),
            knobs,
            rng,
            now_ns: 0,
            // Taken after the kernels exist: whatever instant a kernel read while it was made
            // lies before every simulated `now`.
            base: Instant::now(),
            step: 0,
            queue: Queue::default(),
            net,
            config,
            kernels,
            clients,
            shared,
            plan: Vec::new(),
            planned: false,
            end_ns: None,
            final_started: false,
            kicks: BTreeSet::new(),
            trace_hash: 0,
            frames: 0,
            overloads: 0,
            faults: BTreeMap::new(),
            undecided_keys: 0,
            frame_hashes: Vec::new(),
            crash_after: BTreeMap::new(),
            crash_starting_after: BTreeMap::new(),
            paused: BTreeMap::new(),
            hears_closed: BTreeMap::new(),
            split: false,
            partition_until_ns: 0,
            partition_ends: Vec::new(),
            hung: BTreeSet::new(),
            single_user: None,
            single_users: 0,
            backup: None,
            backup_ids: 0,
            stopped_on_request: BTreeSet::new(),
            crashed_at: BTreeMap::new(),
            failed_joining_at: BTreeMap::new(),
            restarted: BTreeSet::new(),
            disks,
            incarnations: data_nodes.iter().map(|&n| (n, 0)).collect(),
            gci_clock: GciClock::default(),
            ready_gci: 0,
            ready_since_ns: None,
            cluster_crashes: Vec::new(),
            lagging: BTreeSet::new(),
            restart_pending: false,
            shutting_down: BTreeSet::new(),
            stopping_alone: BTreeSet::new(),
            shutdown_sigterms: false,
            sigterm_pending: BTreeSet::new(),
            exiting: None,
            own_choice: BTreeSet::new(),
            shutdown_gci: 0,
            shutdown_disturbed: false,
            shutdown_active: false,
            shutdown_disk_faults: 0,
            shutdown_began_ns: 0,
            shutdown_kept: Vec::new(),
            crashed_in_restart: false,
            given_up: BTreeMap::new(),
            restorable_max: 0,
            durability: DurabilityReport::default(),
            notes: Vec::new(),
            subscriber: None,
            events_links: data_nodes.iter().copied().collect(),
            events_target: None,
        };
        for &node in &data_nodes {
            let first_tick = world.rng.below(TIMER_TICK_NS);
            world
                .queue
                .push(first_tick, node.0, 0, EventKind::Timer(node, 0));
            world.take_fs_requests(node);
        }
        for i in 0..world.clients.len() {
            let start = world.rng.below(1_000_000);
            world
                .queue
                .push(start, i as u16, 0, EventKind::ClientWake { client: i });
        }
        if world.knobs.master_link_late_ns > 0 {
            // The link from client 0 to the master never came up yet; no end hears of a drop.
            let (api, master) = (world.clients[0].node, data_nodes[0]);
            world.events_links.remove(&master);
            world.net.drop_connection(api, master);
            world.clients[0].start_without_link(master);

            let at = world.knobs.master_link_late_ns;
            world.schedule_fault(
                at,
                Planned::Reconnect {
                    client: 0,
                    node: master,
                },
            );
        }
        world.log(format!("seed {:#018x}: {}", seed, world.knobs));
        world
    }

    fn run(&mut self) -> Result<(), String> {
        while let Some(event) = self.queue.pop() {
            debug_assert!(event.at_ns >= self.now_ns, "time went back");
            self.now_ns = event.at_ns;
            if let Some(until) = self.paused_target(&event.kind) {
                self.queue.defer(event, until);
                continue;
            }
            self.step += 1;
            self.handle(event.kind)?;
            if let Some(what) = self.shared.failure.take() {
                return Err(what);
            }
            self.flush_log();
            if !self.planned && self.shared.ready && self.arbitration_ready() {
                self.plan_faults();
            }
            self.poll_events()?;
            if self.shared.final_done && self.events_caught_up()? {
                return self.final_checks();
            }
            self.maybe_start_final();
            self.check_deadlines()?;
        }
        Err("the event queue ran dry before the final reads ended".into())
    }

    /// When the event is for a paused data node: until when it is paused.
    fn paused_target(&mut self, kind: &EventKind) -> Option<u64> {
        let node = match kind {
            EventKind::Deliver { to, .. } => *to,
            EventKind::Disconnected { at, .. } => *at,
            EventKind::Timer(node, _) | EventKind::Kick(node) => *node,
            EventKind::FsDone { node, .. } => *node,
            _ => return None,
        };
        let until = *self.paused.get(&node)?;
        if until > self.now_ns {
            return Some(until);
        }
        self.paused.remove(&node);
        None
    }

    fn check_deadlines(&self) -> Result<(), String> {
        match self.end_ns {
            None if self.now_ns > SETUP_NS_MAX => Err(format!(
                "liveness: the tables were not ready after {} s",
                SETUP_NS_MAX / 1_000_000_000
            )),
            Some(end) if self.now_ns > end + QUIESCE_NS_MAX => Err(format!(
                "liveness: the final reads did not end within {} s of the workload's end",
                QUIESCE_NS_MAX / 1_000_000_000
            )),
            _ => Ok(()),
        }
    }

    fn now(&self) -> Instant {
        self.base + Duration::from_nanos(self.now_ns)
    }

    fn handle(&mut self, kind: EventKind) -> Result<(), String> {
        match kind {
            EventKind::Deliver {
                from,
                to,
                epoch,
                header,
                payload,
            } => {
                if !self.net.deliverable(from, to, epoch) {
                    return Ok(());
                }
                self.deliver(from, to, header, payload)
            }
            EventKind::Disconnected {
                at,
                peer,
                generation,
            } => {
                if self.net.generation(at, peer) != generation {
                    // Both ends came back since (a cluster restart): old news.
                    return Ok(());
                }
                self.log(format!("{at} hears that its link to {peer} closed"));
                if self.kernels.contains_key(&at) {
                    self.kernel_step(at, |k, out, now| {
                        k.on_disconnect(peer, out, now);
                        k.run_jobs(out, now);
                        Ok(())
                    })
                } else {
                    self.events_link_down(at, peer);
                    self.client_step(at, |c, ctx| c.on_link_down(ctx, peer));
                    Ok(())
                }
            }
            EventKind::Timer(node, incarnation) => {
                if !self.kernels.contains_key(&node) || self.incarnation(node) != incarnation {
                    return Ok(());
                }
                let mut next = self.now_ns + TIMER_TICK_NS;
                if self.knobs.late_tick_ns_max > 0 && self.rng.below(10) == 0 {
                    next += self.rng.below(self.knobs.late_tick_ns_max);
                }
                self.queue
                    .push(next, node.0, 0, EventKind::Timer(node, incarnation));
                self.kernel_step(node, |k, out, now| {
                    k.on_timer(now);
                    k.run_jobs(out, now);
                    Ok(())
                })
            }
            EventKind::Kick(node) => {
                self.kicks.remove(&node);
                if !self.kernels.contains_key(&node) {
                    return Ok(());
                }
                self.kernel_step(node, |k, out, now| {
                    k.run_jobs(out, now);
                    Ok(())
                })
            }
            EventKind::FsDone {
                node,
                incarnation,
                queue,
            } => self.fs_done(node, incarnation, queue),
            EventKind::ClientWake { client } => {
                let node = self.clients[client].node;
                // Read only by a wake that times a request out (`Client::on_wake`).
                self.shared.saves_stuck = self.saves_stuck();
                self.shared.group_cannot_save = self.group_cannot_save();
                self.client_step(node, |c, ctx| c.on_wake(ctx));
                Ok(())
            }
            EventKind::Fault(index) => {
                let fault = self.plan[index].clone();
                self.inject(fault)
            }
            EventKind::EndWorkload => {
                self.log("workload over: faults end, links heal, clients finish".into());
                self.shared.stopping = true;
                self.net.heal(&mut self.queue, self.now_ns);
                // Disk faults end too: nodes still start again after this (node restarts),
                // and one failing then could stop as the run ends, before every node heard
                // (seed 0x1eeb81b49: the chain check saw two views of who had rejoined).
                for disk in self.disks.values_mut() {
                    disk.mend();
                }
                Ok(())
            }
        }
    }

    fn deliver(
        &mut self,
        from: NodeId,
        to: NodeId,
        header: FrameHeader,
        payload: Vec<u8>,
    ) -> Result<(), String> {
        self.frames += 1;
        let record = [
            self.now_ns,
            u64::from(from.0) << 16 | u64::from(to.0),
            u64::from(header.signal) << 32 | u64::from(header.request_id),
            xxhash_rust::xxh3::xxh3_64(&payload),
        ];
        let mut bytes = [0u8; 32];
        for (chunk, word) in bytes.chunks_exact_mut(8).zip(record) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        self.trace_hash = xxhash_rust::xxh3::xxh3_64_with_seed(&bytes, self.trace_hash);
        self.frame_hashes
            .push((self.step, self.now_ns, self.trace_hash));
        if self.options.trace {
            println!(
                "{:>14.6} ms  {from:>3} -> {to:<3} signal {:>3} request {:>6} {:>4} bytes {:016x}",
                self.now_ns as f64 / 1e6,
                header.signal,
                header.request_id,
                payload.len(),
                record[3]
            );
        }
        if self.kernels.contains_key(&to) {
            let step = self.step;
            self.kernel_step(to, |k, out, now| {
                k.on_frame(from, &header, &payload, out, now).map_err(|v| {
                    format!(
                        "data node {to} took frame (signal {}, request {}) from {from} for a protocol violation at step {step}: {}",
                        header.signal, header.request_id, v.0
                    )
                })?;
                k.run_jobs(out, now);
                Ok(())
            })?;
            match self.crash_after.get(&to) {
                Some(&(signal, drain)) if signal == header.signal && !self.shared.stopping => {
                    self.crash_after.remove(&to);
                    self.inject(Planned::Crash { node: to, drain })?;
                }
                _ => {}
            }
            match self.crash_starting_after.get(&to) {
                Some(&(signal, drain)) if signal == header.signal => {
                    self.crash_starting_after.remove(&to);
                    self.crash_starting(to, drain);
                }
                _ => {}
            }
            Ok(())
        } else {
            if let Some(subscriber) = self.subscriber.as_mut() {
                if subscriber.node == to && subscriber.owns(&header) {
                    subscriber.on_frame(self.now_ns, from, &header, &payload);
                    return Ok(());
                }
            }
            self.client_step(to, |c, ctx| c.on_frame(ctx, from, &header, &payload));
            Ok(())
        }
    }

    /// Runs `f` on data node `node`'s kernel with the sim's outbox, then closes the links it
    /// asked to close and schedules a retry of answers that met a full buffer.
    fn kernel_step(
        &mut self,
        node: NodeId,
        f: impl FnOnce(&mut Kernel, &mut SimOutbox<'_>, Instant) -> Result<(), String>,
    ) -> Result<(), String> {
        let now = self.now();
        let Some(kernel) = self.kernels.get_mut(&node) else {
            return Ok(());
        };
        // Names the node in its log lines (`--log`).
        let _span = tracing::warn_span!("node", id = node.0).entered();
        let mut out = SimOutbox {
            from: node,
            now_ns: self.now_ns,
            net: &mut self.net,
            queue: &mut self.queue,
            closes: Vec::new(),
            overloads: 0,
            buggify: true,
        };
        f(kernel, &mut out, now)?;
        // A node stops by itself when another stops with every data node (NODE_STOPPING_REP
        // STOP_EVERY_NODE, STOP_SAVED_REP).
        let stopping = (self.shutting_down.contains(&node)
            && !self.sigterm_pending.contains(&node))
            || self.stopping_alone.contains(&node)
            || (kernel.is_stopping() && self.exiting != Some(node));
        let leaves = stopping && kernel.ready_to_stop(&mut out, now);
        let stops_every_node =
            kernel.is_stopping() && !kernel.stops_alone() && self.exiting != Some(node);
        let closes = std::mem::take(&mut out.closes);
        self.overloads += out.overloads;
        if let Some(why) = kernel.take_broken_invariant() {
            return Err(format!("data node {node}: {why}"));
        }
        let unsent = kernel.has_unsent_answers();
        let fatal = kernel.take_fatal();
        let heard = kernel.system_restart_gci();
        let chosen = heard.or_else(|| kernel.is_started().then(|| kernel.restorable_gci()));
        let serves = kernel.serves();
        // A node restart's node catches up once its files can restart it, not when it
        // serves (a system restart before then finds nothing of it to restore).
        if kernel.is_started() && !kernel.files_lag() {
            self.lagging.remove(&node);
        }
        self.gci_clock.observe(self.now_ns, kernel.current_gci());
        for group in kernel.groups_files_given_up() {
            self.given_up.entry(group).or_insert(self.restorable_max);
        }
        self.restorable_max = self.restorable_max.max(kernel.durable_gci());
        self.note_restart(node, chosen, heard, serves)?;
        if unsent && self.kicks.insert(node) {
            self.queue
                .push(self.now_ns + KICK_NS, node.0, 0, EventKind::Kick(node));
        }
        for (to, reason, declared) in closes {
            self.log(format!(
                "data node {node} closes its link to {to}: {reason}"
            ));
            if declared {
                self.drop_connection_draining(node, to);
            } else {
                self.drop_connection(node, to);
            }
        }
        self.take_fs_requests(node);
        let own_choice = !self.shutting_down.contains(&node) || self.shutdown_sigterms;
        if stops_every_node && own_choice && self.own_choice.insert(node) {
            self.stops_with_every_node(node);
        }
        match fatal {
            Some(why) => self.node_stops(node, &why),
            None if leaves && self.stopping_alone.contains(&node) => self.leaves_alone(node),
            None if leaves => self.leaves_gracefully(node),
            None => Ok(()),
        }
    }

    /// The GCI the system restart after the last cluster crash chose, as data node `node`
    /// heard it (or started at): recorded once (a new master chooses it again), and never
    /// below what a kernel reported restorable before the crash. It is below what the disks
    /// named when the restart went on without the only nodes whose sysfiles named more. A
    /// restart the cluster never served after (another cluster crash came first) kept only
    /// what the next one restores (seed 0x700013f1: the first restart chose GCI 14, the
    /// second, without the only sysfile naming it, 13).
    fn note_restart(
        &mut self,
        node: NodeId,
        chosen: Option<u32>,
        heard: Option<u32>,
        serves: bool,
    ) -> Result<(), String> {
        if self.restart_pending {
            return Ok(());
        }
        let Some(last) = self.cluster_crashes.len().checked_sub(1) else {
            return Ok(());
        };
        // The first GCI a kernel hears, or a lower one a new master chose: its predecessor
        // failed with its choice heard by no other node, which then chose from their own
        // sysfiles (seed 0xf000372: node 1 chose 16, named by its sysfile alone, and crashed;
        // node 2 chose 15).
        let first = chosen.filter(|_| self.cluster_crashes[last].chosen.is_none());
        let lower = heard.filter(|&g| self.cluster_crashes[last].chosen.is_some_and(|c| g < c));
        if let Some(gci) = first.or(lower) {
            let named = self.cluster_crashes[last].restart_gci;
            self.log(format!(
                "system restart: data node {node} heard the restart GCI {gci} (the disks named up to {named})"
            ));
            if gci < named {
                self.count("system restart at an older GCI than a sysfile named (a partial start)");
            }
            for i in (0..=last).rev() {
                let crash = &mut self.cluster_crashes[i];
                if i < last && crash.served {
                    break;
                }
                crash.chosen = Some(crash.restored_gci().min(gci));
            }
        }
        if serves && !self.cluster_crashes[last].served {
            // Checked once the cluster serves: a restart that chose less and then failed
            // (2308: a node group had nothing to restore it from) lost nothing, and the next
            // one chooses again (seed 0x61007b6f with --durable-commits).
            for i in (0..=last).rev() {
                let crash = &self.cluster_crashes[i];
                if i < last && crash.served {
                    break;
                }
                let chosen = crash.restored_gci();
                if crash.restorable > chosen {
                    return Err(format!(
                        "durability: a kernel answered durable commits up to GCI {} before the cluster crash at {:.3} ms, but the cluster serves again from GCI {chosen} (the disks named up to {})",
                        crash.restorable,
                        crash.at_ns as f64 / 1e6,
                        crash.restart_gci
                    ));
                }
            }
            self.cluster_crashes[last].served = true;
        }
        Ok(())
    }

    fn incarnation(&self, node: NodeId) -> u32 {
        self.incarnations.get(&node).copied().unwrap_or(0)
    }

    /// Hands the kernel's file requests to its disk, and schedules the first completion of
    /// each of its queues that was idle.
    fn take_fs_requests(&mut self, node: NodeId) {
        let incarnation = self.incarnation(node);
        let (Some(kernel), Some(disk)) = (self.kernels.get_mut(&node), self.disks.get_mut(&node))
        else {
            return;
        };
        let requests = kernel.take_fs_requests();
        for queue in disk.submit(requests) {
            self.schedule_fs_done(node, incarnation, queue);
        }
    }

    /// Schedules the completion of the request at the head of `queue` of `node`'s disk.
    fn schedule_fs_done(&mut self, node: NodeId, incarnation: u32, queue: DiskQueue) {
        let Some(disk) = self.disks.get_mut(&node) else {
            return;
        };
        let at = self.now_ns + disk.service_ns(queue);
        let done = EventKind::FsDone {
            node,
            incarnation,
            queue,
        };
        self.queue.push(at, node.0, 0, done);
    }

    /// The disk of `node` completes the oldest request of `queue`; the kernel hears of it.
    fn fs_done(&mut self, node: NodeId, incarnation: u32, queue: DiskQueue) -> Result<(), String> {
        if !self.kernels.contains_key(&node) || self.incarnation(node) != incarnation {
            return Ok(());
        }
        let peer_failing = self.group_peer_failing(node);
        let Some(disk) = self.disks.get_mut(&node) else {
            return Ok(());
        };
        // A disk fault would stop this node (its group's other member serving, as far as
        // the cluster knows yet) while that member hangs or has just crashed: a double fault
        // in one group, which the fault plans leave out.
        disk.faults_held = peer_failing;
        let Some(conf) = disk.complete(queue) else {
            return Ok(());
        };
        if disk.busy(queue) {
            self.schedule_fs_done(node, incarnation, queue);
        }
        if let Err(error) = &conf.result {
            self.count("disk fault");
            // A backup's file (an absolute path) fails the backup, not the node.
            if !error.path.starts_with('/') {
                self.stopped_on_request.insert(node);
            }
            self.log(format!("data node {node}: file request failed: {error}"));
        }
        let mut stop = None;
        self.kernel_step(node, |k, out, now| {
            match k.on_fs_conf(conf, out, now) {
                Ok(()) => k.run_jobs(out, now),
                Err(why) => stop = Some(why),
            }
            Ok(())
        })?;
        match stop {
            Some(why) => self.node_stops(node, &why),
            None => Ok(()),
        }
    }

    /// The kernel of `node` says it must stop. Allowed only at a system restart the node
    /// could not take part in (it was down before the cluster crash and its own disk holds
    /// less than the cluster restarts at, or its files do not record the newest restart; it
    /// starts again by node restart), for a failure of its node restart (or of a start that
    /// lost its links before it learnt the cluster serves), a split it lost, a
    /// GCP stop, a hang, or in a seed whose disks failed writes (ENOSPC, EIO); anything else
    /// fails the run.
    fn node_stops(&mut self, node: NodeId, why: &str) -> Result<(), String> {
        if self.shutting_down.contains(&node) {
            let disk_faults: u64 = self.disks.values().map(|d| d.faults).sum();
            let calm = !self.shutdown_disturbed && disk_faults == self.shutdown_disk_faults;
            if self.shutdown_sigterms && calm && why.contains("2305") {
                return Err(format!(
                    "data node {node} stopped with 2305 in a SIGTERM to every data node (no \
                     fault disturbed it): {why}"
                ));
            }
            self.shutdown_disturbed = true;
        }
        self.node_stopped(node, why)?;
        self.shutdown_member_gone(node)
    }

    /// `node_stops` but for a SHUTDOWN that runs.
    fn node_stopped(&mut self, node: NodeId, why: &str) -> Result<(), String> {
        let stale = self.cluster_crashes.last().is_some_and(|c| {
            c.lagging.contains(&node) && c.own.get(&node).copied().unwrap_or(0) < c.restart_gci
        });
        let disk_faults: u64 = self.disks.values().map(|d| d.faults).sum();
        let restart_failed = ["error 2303", "error 2315"].iter().any(|e| why.contains(e));
        // Started again by node restart, it lost its links before any peer told it the
        // cluster serves, so it took its start for a system restart the failed peers could
        // hold newer checkpoints for (2308) while the others served on (seed 0xc7006d78: node
        // 2 crashed again and a partition cut node 3 off as node 1 asked to rejoin).
        let rejoin_undecided = self.restarted.contains(&node)
            && why.contains("error 2308")
            && self.kernels.get(&node).is_some_and(|k| !k.serves())
            && (self.kernels.iter()).any(|(&n, k)| n != node && k.serves());
        let system_restart_failed = self.crashed_in_restart && why.contains("error 2308");
        // The crash came as the restart ended: this node had started when it saw the failure,
        // so it stops as a started node does when a node group is gone (seeds 0xa500c10, whose
        // disk faults hid this, and 0x3d002fc2: the crashed node's partner had been left out
        // of the restart, and was joining by node restart).
        let group_lost_as_restart_ended = self.crashed_in_restart
            && why.contains("error 2305")
            && why.contains("no live data node of node group");
        let expected = if system_restart_failed {
            "a data node crashed during the system restart, and a node group has no node left to restore the restart GCI: the system restart failed (2308), and the cluster starts again from its disks"
        } else if group_lost_as_restart_ended {
            self.restart_later(node);
            "a data node crashed as the system restart ended, and no other node of its group could restore: the started nodes stop (2305), and the cluster starts again from its disks"
        } else if (self.restarted.contains(&node) && restart_failed) || rejoin_undecided {
            self.restart_later(node);
            "a data node failed while it rejoined by node restart (it starts again)"
        } else if self.split && ["error 2305", "error 2315"].iter().any(|e| why.contains(e)) {
            self.restart_later(node);
            "the data nodes were split, and this side lost (arbitration) or was declared failed; it starts again by node restart"
        } else if why.contains("GCP stop") {
            self.count("data node stopped for a GCP stop");
            self.stopped_on_request.insert(node);
            self.restart_later(node);
            "its part in a global checkpoint's save lagged past TimeBetweenGlobalCheckpointsTimeout (GCP stop), and it asked to be stopped; it starts again by node restart"
        } else if self.hung.contains(&node) {
            // Started again, as an operator (or NDB's angel) would (seed 0x1d0eae74d: a
            // restarting node of the other group waited for this one to rejoin, for good).
            self.restart_later(node);
            "it hung past the heartbeat bound and the cluster declared it failed; it starts again by node restart"
        } else if stale {
            self.restart_later(node);
            "it crashed alone before the cluster crash and never restarted since, and its disk holds less than the restart GCI; it starts again by node restart"
        } else if why.contains("that this node's files do not record")
            || why.contains("whose cut of this node's logs may not have reached the disk")
        {
            self.restart_later(node);
            "its sysfile does not name the newest system restart, or names it with its cut pending (its disk failed or it stopped as it cut its logs there), so its redo log is not trusted past it; it starts again by node restart"
        } else if disk_faults > 0 {
            if why.contains("file system") {
                self.count("data node stopped after its file system failed");
                self.stopped_on_request.insert(node);
                // It starts again once its disk is mended, as its error asks.
                if let Some(disk) = self.disks.get_mut(&node) {
                    disk.mend();
                }
                self.restart_later(node);
            }
            "the seed's disks failed writes or syncs (ENOSPC, EIO): the node asked to be stopped, and starts again, its disk mended, by node restart"
        } else {
            return Err(format!("data node {node} stopped: {why}"));
        };
        self.count("data node stopped (expected)");
        self.lagging.insert(node);
        let note = format!(
            "data node {node} stopped at {:.3} ms: {why} (expected: {expected})",
            self.now_ns as f64 / 1e6
        );
        self.log(note.clone());
        self.notes.push(note);
        // The process exits: what it queued for its disk never happens, what the disk took
        // stays (a process exit keeps the page cache), and what it sent still arrives (its
        // sockets close after the data).
        if let Some(disk) = self.disks.get_mut(&node) {
            disk.drop_queue();
        }
        self.flush_before_exit(node);
        let served = self.note_stop(node);
        self.stop_kernel(node, true);
        if system_restart_failed {
            return self.system_restart_failed();
        }
        self.last_member_stopped(served)
    }

    /// A system restart failed (2308, after a crash during it): as NDB's nodes do, every data
    /// node still running stops, and the operator starts the cluster again from its disks (a
    /// new system restart). Nothing was acknowledged since the cluster went down.
    fn system_restart_failed(&mut self) -> Result<(), String> {
        self.stop_every_node("the system restart failed");
        self.count("system restart failed");
        self.cluster_down("the system restart failed")
    }

    /// Every data node still running exits, for `why`: what it queued for its disk never
    /// happens, and its log stops here.
    fn stop_every_node(&mut self, why: &str) {
        let rest: Vec<NodeId> = self.kernels.keys().copied().collect();
        for node in rest {
            self.log(format!("data node {node} stops: {why}"));
            if let Some(disk) = self.disks.get_mut(&node) {
                disk.drop_queue();
            }
            self.lagging.insert(node);
            self.stop_kernel(node, true);
            self.paused.remove(&node);
        }
    }

    /// The last serving data node stopped (`served`: the one that just stopped served)
    /// outside a cluster crash, in a seed with partitions (a side that lost arbitration
    /// stopped, and then the other side's last node of a group crashed) or with crashes in
    /// system restarts (a group's one node able to restore crashed right after the restart
    /// served, its partner out of the restart: the others stop with 2305, seed 0xa500c10), a
    /// double fault the other faults never make, so elsewhere this stays a failure: the
    /// cluster is down as after a cluster crash, though every disk keeps what it had, and an
    /// operator starts it again (a system restart). The nodes still running serve nothing
    /// (joining by node restart, or just started again): they are stopped with the rest. (Left
    /// running, one of them outlived the last member while another node started again, and the
    /// cluster's loss of the GCIs no disk saved went unrecorded: seeds 0x89049a7, 0xa60075e.)
    fn last_member_stopped(&mut self, served: bool) -> Result<(), String> {
        let double_faults = self.knobs.partitions > 0 || self.options.has(Fault::CrashStarting);
        if !double_faults || !self.knobs.durable || self.restart_pending || !served {
            return Ok(());
        }
        if self.kernels.values().any(|k| k.serves()) {
            return Ok(());
        }
        // Their processes exit, as after their own error (2303, which they would stop with).
        self.stop_every_node("it does not serve, and no member is left");
        self.count("every data node stopped");
        self.cluster_down("every data node has stopped")
    }

    /// Runs `f` on the client of node `node` and sends what it sent.
    fn client_step(&mut self, node: NodeId, f: impl FnOnce(&mut Client, &mut Ctx<'_>)) {
        let Some(index) = node.0.checked_sub(FIRST_API_NODE).map(usize::from) else {
            return;
        };
        let Some(client) = self.clients.get_mut(index) else {
            return;
        };
        if !client.is_alive() {
            return;
        }
        let mut ctx = Ctx::new(self.now_ns, &mut self.shared);
        f(client, &mut ctx);
        let Ctx { sends, wakes, .. } = ctx;
        for (to, header, payload) in sends {
            self.net
                .send(&mut self.queue, self.now_ns, node, to, header, payload);
        }
        for at in wakes {
            self.queue
                .push(at, index as u16, 0, EventKind::ClientWake { client: index });
        }
    }

    /// Drops a connection; each live end hears of it a little later.
    fn drop_connection(&mut self, a: NodeId, b: NodeId) {
        if !self.net.drop_connection(a, b) {
            return;
        }
        let generation = self.net.generation(a, b);
        for (at, peer) in [(a, b), (b, a)] {
            if self.is_alive(at) {
                let when = self.now_ns + self.rng.between(10_000, DETECT_NS_MAX);
                self.hears_closed_at(when, at, peer, generation);
            }
        }
    }

    /// Drops the connection between `from` and `to` after what `from` sent arrives (a socket
    /// closed after its last send); `to` hears of it after that.
    fn drop_connection_draining(&mut self, from: NodeId, to: NodeId) {
        let Some(last_ns) = self.net.drop_draining(from, to) else {
            return;
        };
        let generation = self.net.generation(from, to);
        for (at, peer, after) in [(from, to, self.now_ns), (to, from, last_ns)] {
            if self.is_alive(at) {
                let when = after.max(self.now_ns) + self.rng.between(10_000, DETECT_NS_MAX);
                self.hears_closed_at(when, at, peer, generation);
            }
        }
    }

    /// `at` hears at `when` that its link to `peer` (of `generation`) closed.
    fn hears_closed_at(&mut self, when: u64, at: NodeId, peer: NodeId, generation: u64) {
        self.hears_closed.insert((at, peer), when);
        let event = EventKind::Disconnected {
            at,
            peer,
            generation,
        };
        self.queue.push(when, at.0, peer.0, event);
    }

    fn is_alive(&self, node: NodeId) -> bool {
        self.kernels.contains_key(&node)
            || node
                .0
                .checked_sub(FIRST_API_NODE)
                .and_then(|i| self.clients.get(usize::from(i)))
                .is_some_and(Client::is_alive)
    }

    /// Draws the faults of the workload phase, which starts now.
    /// Faults start once the arbitrator runs (in seeds with one), or a second after the
    /// tables were ready. A president that hangs before it has started one, and a node of the
    /// other node group soon after, leave the survivors half the nodes without an arbitrator:
    /// they stop (2305), as NDB's do, and the sim does not start a stopped cluster again
    /// (seed 0x7a20ea).
    fn arbitration_ready(&mut self) -> bool {
        if !self.knobs.arbitrator {
            return true;
        }
        let since = *self.ready_since_ns.get_or_insert(self.now_ns);
        self.clients[crate::client::ARBITRATOR].arbitrator_started()
            || self.now_ns >= since + ARBITRATOR_WAIT_NS
    }

    fn plan_faults(&mut self) {
        self.planned = true;
        let start = self.now_ns;
        let end = start + self.knobs.workload_ns;
        self.end_ns = Some(end);
        self.queue.push(end, 0, 0, EventKind::EndWorkload);
        let mut plan = self.plan_crashes();
        plan.extend(self.plan_client_deaths());
        plan.extend(self.plan_link_faults());
        plan.extend(self.plan_partitions());
        plan.extend(self.plan_pauses());
        plan.extend(self.plan_single_user());
        plan.extend(self.plan_backups());
        for i in 0..self.knobs.cluster_crashes {
            // In the first three quarters of the workload, so that it goes on after the restart.
            let at = self.rng.below(self.knobs.workload_ns * 3 / 4);
            let fault = if i == 0 && self.options.has(Fault::Shutdown) {
                Planned::Shutdown
            } else {
                Planned::ClusterCrash
            };
            plan.push((at, fault));
        }
        let again = self.plan_second_crashes(&plan);
        plan.extend(again);
        for (at, fault) in plan {
            self.schedule_fault(start + at, fault);
        }
        // What the tables' creation and rows committed in is saved once a sysfile names this.
        self.ready_gci = self.gci_clock.now();
        for disk in self.disks.values_mut() {
            disk.arm_faults();
        }
    }

    /// One element of `items`, drawn.
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.rng.below(items.len() as u64) as usize]
    }

    /// At most one crash per node group, so that every partition keeps a replica (with three
    /// replicas too: two failures in one round leave a group's survivor a minority, which
    /// stops, as NDB's does).
    fn plan_crashes(&mut self) -> Vec<(u64, Planned)> {
        let mut groups: Vec<Vec<NodeId>> = self
            .config
            .node_groups
            .iter()
            .map(|g| g.nodes.clone())
            .collect();
        let mut plan = Vec::new();
        for _ in 0..self.knobs.crashes {
            if groups.is_empty() {
                break;
            }
            let group = groups.remove(self.rng.below(groups.len() as u64) as usize);
            let node = self.pick(&group);
            let drain = self.rng.coin();
            let fault = if self.rng.coin() {
                Planned::Crash { node, drain }
            } else {
                let signal = self.pick(&CRASH_AFTER_SIGNALS);
                Planned::CrashAfter {
                    node,
                    signal,
                    drain,
                }
            };
            plan.push((self.rng.below(self.knobs.workload_ns), fault));
        }
        // Half the time a second crash follows the first closely: a failure while the
        // survivors are still handling the first.
        if plan.len() >= 2 && self.rng.coin() {
            plan[1].0 = plan[0].0 + self.rng.below(CRASH_STORM_NS_MAX);
        }
        // Hangs take node groups no crash took, from a generator of their own (the draws
        // above stay as they were).
        if self.knobs.hangs == 0 {
            return plan;
        }
        let mut rng = self.rng.fork();
        let interval_ns = u64::from(self.knobs.heartbeat_ms) * 1_000_000;
        for _ in 0..self.knobs.hangs {
            if groups.is_empty() {
                break;
            }
            let group = groups.remove(rng.below(groups.len() as u64) as usize);
            let node = group[rng.below(group.len() as u64) as usize];
            let for_ns = interval_ns * rng.between(6, 10);
            plan.push((
                rng.below(self.knobs.workload_ns),
                Planned::Hang { node, for_ns },
            ));
        }
        plan
    }

    /// With `crash-again` and three replicas, half the node groups that a planned crash takes
    /// a node from lose a second one later (`Planned::CrashAgain`). Drawn from a generator of
    /// their own, and only then: without the fault every draw stays as it was.
    fn plan_second_crashes(&mut self, plan: &[(u64, Planned)]) -> Vec<(u64, Planned)> {
        if !self.options.has(Fault::CrashAgain) || self.knobs.replicas < 3 {
            return Vec::new();
        }
        let mut rng = self.rng.fork();
        let mut again = Vec::new();
        for (at, fault) in plan {
            let (Planned::Crash { node, .. } | Planned::CrashAfter { node, .. }) = fault else {
                continue;
            };
            if !rng.coin() {
                continue;
            }
            let peers: Vec<NodeId> = self.group_peers(*node).collect();
            let peer = peers[rng.below(peers.len() as u64) as usize];
            // Put off until the first failure is handled (`crash_again`).
            let after = rng.between(1, self.knobs.workload_ns / 2);
            let drain = rng.coin();
            again.push((at + after, Planned::CrashAgain { node: peer, drain }));
        }
        again
    }

    /// Data node `node` is about to stop or crash: whether it served, and, when it did not
    /// (joining by node restart), when it failed so (`failed_joining_at`).
    fn note_stop(&mut self, node: NodeId) -> bool {
        let served = self.kernels.get(&node).is_some_and(|k| k.serves());
        if !served {
            self.failed_joining_at.insert(node, self.now_ns);
        }
        served
    }

    /// A node group's second crash (`Fault::CrashAgain`): only once the group's first failure
    /// is handled (no other member crashed within two heartbeat bounds, is paused or hangs, is
    /// cut off by a partition that may still get it declared failed, or is joining by node
    /// restart, which the crash would fail too: two failures in a round),
    /// and while another member serves; put off during a system restart, while the
    /// arbitrator is unlinked (the crash may leave half the cluster), and for two heartbeat
    /// bounds after any node failed while joining (a round counts it alive before: seed
    /// 0xb20270b, two such nodes made the survivors 2 of 5, and every node stopped).
    fn crash_again(&mut self, node: NodeId, drain: bool) {
        if !self.kernels.contains_key(&node) || self.shared.stopping {
            return;
        }
        let peer_joining =
            (self.group_peers(node)).any(|n| self.kernels.get(&n).is_some_and(|k| !k.serves()));
        let window_ns = 2 * self.heartbeat_bound_ns();
        let joiner_failed =
            (self.failed_joining_at.values()).any(|&at| self.now_ns < at.saturating_add(window_ns));
        // A member a partition may still get declared failed is a first failure not yet
        // handled (seed 0xb70033b5: node 2 crashed 4 ms after it declared node 1, cut off,
        // failed; node 3 was left 1 of the 3 nodes alive before the round, and stopped).
        let peer_cut_off = self.group_peers(node).any(|n| self.partition_may_fail(n));
        if self.restarting()
            || self.arbitrator_unlinked()
            || self.group_peer_failing(node)
            || peer_cut_off
            || peer_joining
            || joiner_failed
        {
            self.count("second crash put off");
            let at = self.now_ns + DETECT_NS_MAX;
            self.schedule_fault(at, Planned::CrashAgain { node, drain });
            return;
        }
        let serving = self.group_peers(node).any(|n| {
            !self.stopped_on_request.contains(&n)
                && self.kernels.get(&n).is_some_and(|k| k.serves())
        });
        if !serving {
            self.count("second crash left out (no other member serves)");
            return;
        }
        self.count("second crash in a node group");
        self.crash(node, drain);
    }

    /// With `crash-starting`, half the system restarts plan a crash of one data node, drawn
    /// from a generator of their own (without the fault every draw stays as it was).
    fn plan_crash_starting(&mut self) {
        if !self.options.has(Fault::CrashStarting) || !self.knobs.node_restarts {
            return;
        }
        let mut rng = self.rng.fork();
        if !rng.coin() {
            return;
        }
        let nodes: Vec<NodeId> = self.config.data_nodes.iter().map(|n| n.node_id).collect();
        let node = nodes[rng.below(nodes.len() as u64) as usize];
        let drain = rng.coin();
        let signal = rng.coin().then(|| {
            CRASH_STARTING_SIGNALS[rng.below(CRASH_STARTING_SIGNALS.len() as u64) as usize]
        });
        let at = match signal {
            Some(_) => self.now_ns,
            None => self.now_ns + rng.below(CRASH_STARTING_NS_MAX),
        };
        self.schedule_fault(
            at,
            Planned::CrashStarting {
                node,
                signal,
                drain,
            },
        );
    }

    /// A `crash-starting` crash: only while the system restart runs, before any node serves
    /// (one armed on a signal that came after it is dropped), and only of a node whose node
    /// group has lost no member since the restart began (its peers all run): one failure per
    /// group.
    fn crash_starting(&mut self, node: NodeId, drain: bool) {
        self.crash_starting_after.remove(&node);
        if !self.kernels.contains_key(&node) || self.shared.stopping {
            return;
        }
        if self.kernels.values().any(|k| k.serves())
            || self.kernels.values().all(|k| k.is_started())
        {
            self.count("crash in a system restart left out (the cluster had started)");
            return;
        }
        if self
            .group_peers(node)
            .any(|n| !self.kernels.contains_key(&n))
        {
            self.count("crash in a system restart left out (its node group lost a node)");
            return;
        }
        // Without the only sysfile naming the newest GCI, a partial start (possible with
        // several node groups) restarts at an older one, which the checks then take for the
        // restart GCI (`ClusterCrash::chosen`): the newer one was never reported restorable.
        // Not below the GCI of the tables and their first rows, though, which the workload
        // takes for saved (seeds 0x1e8859 and 0x50000e92: the bank's accounts were gone).
        let own = self.sysfile_gci(node);
        let others = (self.config.data_nodes.iter())
            .filter(|n| n.node_id != node)
            .map(|n| self.sysfile_gci(n.node_id))
            .max()
            .unwrap_or(0);
        if own > others && others < self.ready_gci && self.config.node_groups.len() > 1 {
            self.count("crash in a system restart left out (the only sysfile naming the tables)");
            return;
        }
        self.count("crash during a system restart");
        self.crashed_in_restart = true;
        self.crash(node, drain);
    }

    /// Any client but client 0, which does the final reads.
    fn plan_client_deaths(&mut self) -> Vec<(u64, Planned)> {
        let mut mortal: Vec<usize> = (1..self.clients.len()).collect();
        let mut plan = Vec::new();
        for _ in 0..self.knobs.client_deaths {
            if mortal.is_empty() {
                break;
            }
            let client = mortal.remove(self.rng.below(mortal.len() as u64) as usize);
            let fault = if self.rng.coin() {
                Planned::ClientDies(client)
            } else {
                Planned::ClientDiesMidRequest(client)
            };
            plan.push((self.rng.below(self.knobs.workload_ns), fault));
        }
        plan
    }

    /// Slow links (any direction between any two nodes) and API links that drop.
    fn plan_link_faults(&mut self) -> Vec<(u64, Planned)> {
        let data_nodes: Vec<NodeId> = self.kernels.keys().copied().collect();
        let all: Vec<NodeId> = data_nodes
            .iter()
            .copied()
            .chain(self.clients.iter().map(|c| c.node))
            .collect();
        let window = self.knobs.workload_ns;
        let mut plan = Vec::new();
        for _ in 0..self.knobs.slow_links {
            let from = self.pick(&all);
            let mut to = self.pick(&all);
            if to == from {
                to = data_nodes[usize::from(from == data_nodes[0])];
            }
            let fault = Planned::Slow {
                from,
                to,
                factor: self.rng.between(5, 100),
                for_ns: self.rng.between(10_000_000, 500_000_000),
            };
            plan.push((self.rng.below(window), fault));
        }
        for _ in 0..self.knobs.api_link_drops {
            let client = self.rng.below(self.clients.len() as u64) as usize;
            let node = self.pick(&data_nodes);
            let for_ns = self.rng.between(5_000_000, 200_000_000);
            let fault = Planned::ApiLinkDrop {
                client,
                node,
                for_ns,
            };
            plan.push((self.rng.below(window), fault));
        }
        plan
    }

    /// Two-way cuts (one data node loses its links to the others) and one-way cuts.
    fn plan_partitions(&mut self) -> Vec<(u64, Planned)> {
        let data_nodes: Vec<NodeId> = self.kernels.keys().copied().collect();
        let mut plan = Vec::new();
        for _ in 0..self.knobs.partitions {
            let at = self.rng.below(self.knobs.workload_ns);
            if self.rng.coin() {
                let mut side = vec![self.pick(&data_nodes)];
                // With three replicas, sides of up to half the nodes (with two, of one: the
                // seeds found so far replay as they were).
                if self.knobs.replicas > 2 {
                    let size = self.rng.between(1, data_nodes.len() as u64 / 2) as usize;
                    while side.len() < size {
                        let node = self.pick(&data_nodes);
                        if !side.contains(&node) {
                            side.push(node);
                        }
                    }
                }
                plan.push((at, Planned::Cut { side }));
            } else {
                let from = self.pick(&data_nodes);
                let to = *data_nodes.iter().find(|&&n| n != from).unwrap_or(&from);
                // Up to past the heartbeat bound (4 intervals of at most 300 ms).
                let for_ns = self.rng.between(10_000_000, 2_000_000_000);
                plan.push((at, Planned::OneWay { from, to, for_ns }));
            }
        }
        plan
    }

    /// Data nodes that stop for a while (from 10 ms to past the deadlock timeout).
    fn plan_pauses(&mut self) -> Vec<(u64, Planned)> {
        let data_nodes: Vec<NodeId> = self.kernels.keys().copied().collect();
        let mut plan = Vec::new();
        for _ in 0..self.knobs.pauses {
            let at = self.rng.below(self.knobs.workload_ns);
            let node = self.pick(&data_nodes);
            // Within one heartbeat interval: with a slow link's delays on top, the node stays
            // well inside the bound of 4, so a pause only delays (a hang is `Planned::Hang`).
            let longest = (u64::from(self.knobs.heartbeat_ms) * 1_000_000).min(1_000_000_000);
            let for_ns = self.rng.between(10_000_000, longest);
            plan.push((at, Planned::Pause { node, for_ns }));
        }
        plan
    }

    /// Windows of single user mode for client 0, each from 20 to 300 ms, over before the
    /// workload's last quarter (the final reads need every client).
    fn plan_single_user(&mut self) -> Vec<(u64, Planned)> {
        let api = self.clients[0].node;
        let mut plan = Vec::new();
        for _ in 0..self.knobs.single_user_windows {
            let at = self.rng.below(self.knobs.workload_ns / 2);
            let for_ns = self.rng.between(20_000_000, 300_000_000);
            let end = (at + for_ns).min(self.knobs.workload_ns * 3 / 4);
            plan.push((at, Planned::SingleUser(Some(api))));
            plan.push((end, Planned::SingleUser(None)));
        }
        plan
    }

    fn schedule_fault(&mut self, at_ns: u64, fault: Planned) {
        self.plan.push(fault);
        let index = self.plan.len() - 1;
        self.queue
            .push(at_ns, index as u16, 0, EventKind::Fault(index));
    }

    fn count(&mut self, kind: &'static str) {
        *self.faults.entry(kind).or_default() += 1;
    }

    fn inject(&mut self, fault: Planned) -> Result<(), String> {
        self.log(format!("fault: {fault:?}"));
        match fault {
            Planned::ClusterCrash => self.cluster_crash(),
            Planned::Shutdown => self.shutdown(),
            Planned::Sigterm(node) => self.sigterm(node),
            Planned::ClusterRestart => self.cluster_restart(),
            Planned::Backup => self.start_backup(),
            Planned::BackupReport => self.backup_report(),
            other => {
                self.inject_other(other);
                Ok(())
            }
        }
    }

    /// The faults that cannot fail the run where they are injected.
    fn inject_other(&mut self, fault: Planned) {
        match fault {
            // A crash during a system restart waits (`Fault::CrashStarting` makes them, and
            // the world then starts the cluster again when the restart fails).
            Planned::Crash { node, drain } if self.restarting() => {
                let at = self.now_ns + CLUSTER_CRASH_RETRY_NS;
                self.schedule_fault(at, Planned::Crash { node, drain });
            }
            // Another member of its node group stopped at its own request, or will (its disk
            // failed, or its save lagged), or does not serve: that was the group's failure,
            // and crashing this one too would be a double fault, which the crash plans leave
            // out.
            Planned::Crash { node, .. } if self.group_had_its_failure(node) => {
                self.count("crash left out (its node group's other member failed)");
            }
            Planned::Crash { node, drain } if self.arbitrator_unlinked() => {
                self.count("crash put off (a data node has no link to the arbitrator yet)");
                let at = self.now_ns + DETECT_NS_MAX;
                self.schedule_fault(at, Planned::Crash { node, drain });
            }
            Planned::Crash { node, drain } if self.stops_instead(node) => {
                self.stop_alone(node, drain)
            }
            Planned::Crash { node, drain } => self.crash(node, drain),
            Planned::CrashAgain { node, drain } => self.crash_again(node, drain),
            Planned::CrashStarting {
                node,
                signal: Some(signal),
                drain,
            } => {
                self.crash_starting_after.insert(node, (signal, drain));
            }
            Planned::CrashStarting {
                node,
                signal: None,
                drain,
            } => self.crash_starting(node, drain),
            Planned::CrashAfter {
                node,
                signal,
                drain,
            } => {
                self.crash_after.insert(node, (signal, drain));
            }
            Planned::ClientDiesMidRequest(index) => {
                let client = &self.clients[index];
                if !client.is_alive() || self.shared.stopping {
                    return;
                }
                if client.is_idle() {
                    // Looked at again soon: clients are rarely idle for long.
                    let at = self.now_ns + 100_000;
                    self.schedule_fault(at, Planned::ClientDiesMidRequest(index));
                } else {
                    self.client_dies(index);
                }
            }
            Planned::ClientDies(index) => self.client_dies(index),
            Planned::Slow {
                from,
                to,
                factor,
                for_ns,
            } => {
                self.count("slow link");
                let until = self.now_ns + for_ns;
                self.net.slow(from, to, factor, until);
            }
            Planned::ApiLinkDrop {
                client,
                node,
                for_ns,
            } => self.api_link_drop(client, node, for_ns),
            Planned::Reconnect { client, node } => {
                // A paused node accepts no connection: the client tries again once it runs
                // (and has heard of the drop, which waited for the pause too).
                if let Some(&until) = self.paused.get(&node).filter(|&&u| u > self.now_ns) {
                    let at = until + DETECT_NS_MAX + 1;
                    return self.schedule_fault(at, Planned::Reconnect { client, node });
                }
                let api = self.clients[client].node;
                if self.is_alive(api) && self.kernels.contains_key(&node) {
                    let was_down = !self.net.is_up(api, node);
                    self.net.reconnect(api, node);
                    if let Some(kernel) = self.kernels.get_mut(&node) {
                        kernel.on_connect(api);
                    }
                    // A client may not have heard yet that the old link closed (news of a
                    // crashed node waits behind what it sent on a slow link, and the
                    // reconnection makes that news stale): it hears it now, first. (A link
                    // that is up already, reconnected by an earlier restart, stays as it is.)
                    if was_down {
                        self.events_link_down(api, node);
                    }
                    if client == 0 {
                        self.events_links.insert(node);
                        if let Some(subscriber) = self.subscriber.as_mut() {
                            subscriber.link_up(node);
                        }
                    }
                    self.client_step(api, |c, ctx| {
                        if was_down {
                            c.on_link_down(ctx, node);
                        }
                        c.on_link_up(node);
                    });
                }
            }
            Planned::ClusterCrash
            | Planned::Shutdown
            | Planned::Sigterm(_)
            | Planned::ClusterRestart
            | Planned::Backup
            | Planned::BackupReport => {}
            Planned::NodeRestart(node) => self.node_restart(node),
            // A split can stop every data node (a side loses arbitration, the other side's
            // last node of a group crashes). Until a sysfile names the GCI of the tables and
            // their first rows, such a stop loses them, as NDB loses what no global
            // checkpoint saved: the split waits, as a cluster crash does.
            fault @ (Planned::Cut { .. } | Planned::OneWay { .. })
                if self.knobs.durable && self.saved_gci() < self.ready_gci =>
            {
                self.count("partition put off (the tables were not saved yet)");
                let at = self.now_ns + CLUSTER_CRASH_RETRY_NS;
                self.schedule_fault(at, fault);
            }
            Planned::Cut { side } => self.cut(&side),
            Planned::SingleUser(api) => {
                // Windows may overlap: the mode ends with the last window's end.
                let entering = api.is_some();
                self.single_users += if entering { 1 } else { -1 };
                let mode = match api {
                    Some(api) => Some(api),
                    None if self.single_users > 0 => self.single_user,
                    None => None,
                };
                self.count(if entering {
                    "single user mode entered"
                } else {
                    "single user mode left"
                });
                self.single_user = mode;
                for kernel in self.kernels.values_mut() {
                    kernel.set_single_user(mode);
                }
            }
            Planned::Pause { node, for_ns } => {
                if self.kernels.contains_key(&node) && !self.paused.contains_key(&node) {
                    self.count("pause");
                    self.paused.insert(node, self.now_ns + for_ns);
                }
            }
            Planned::Hang { node, for_ns } if !self.shutting_down.is_empty() => {
                let at = self.now_ns + CLUSTER_CRASH_RETRY_NS;
                self.schedule_fault(at, Planned::Hang { node, for_ns });
            }
            // As a crash: a hang past the heartbeat bound fails the node.
            Planned::Hang { node, .. } if self.group_had_its_failure(node) => {
                self.count("hang left out (its node group's other member failed)");
            }
            Planned::Hang { node, for_ns } if self.arbitrator_unlinked() => {
                self.count("hang put off (a data node has no link to the arbitrator yet)");
                let at = self.now_ns + DETECT_NS_MAX;
                self.schedule_fault(at, Planned::Hang { node, for_ns });
            }
            Planned::Hang { node, for_ns } => {
                if self.kernels.contains_key(&node) && !self.shared.stopping {
                    self.count("hang past the heartbeat bound");
                    self.hung.insert(node);
                    let until = self.paused.get(&node).copied().unwrap_or(0);
                    self.paused.insert(node, until.max(self.now_ns + for_ns));
                }
            }
            Planned::OneWay { from, to, for_ns } => {
                // Past the heartbeat bound either end may be declared failed: not when that
                // would leave a node group without a node (see `cut`).
                if self.now_ns < self.partition_until_ns
                    || !self.every_group_served_without(&[from])
                    || !self.every_group_served_without(&[to])
                    || self.diskless_split_could_stop_all()
                {
                    self.count("partition not made (it could split a node group off whole)");
                    return;
                }
                self.count("partition (one-way)");
                self.split = true;
                // Its end is declared failed up to a heartbeat bound after it heals.
                self.partition_until_ns = self.now_ns + for_ns + self.heartbeat_bound_ns();
                self.partition_ends = vec![from, to];
                let until = self.now_ns + for_ns;
                self.net.blackhole(from, to, until);
            }
        }
    }

    /// True when a data node of `node`'s node group other than `node` is paused or hangs, or
    /// crashed within two heartbeat bounds (the cluster may not know yet).
    fn group_peer_failing(&self, node: NodeId) -> bool {
        let failing = |n: &NodeId| {
            self.paused.get(n).is_some_and(|&until| self.now_ns < until)
                || self.crashed_at.get(n).is_some_and(|&at| {
                    self.now_ns < at.saturating_add(2 * self.heartbeat_bound_ns())
                })
        };
        self.group_peers(node).any(|n| failing(&n))
    }

    /// Some node group's live nodes all run on failed disks (or none is live): no global
    /// checkpoint can be saved until an operator starts one of its nodes again, and TC's
    /// answer to a durable commit held meanwhile (4012, twice TimeBetweenGlobalCheckpointsTimeout
    /// after it was held) may come after the client's request timeout. When it comes before,
    /// the client must have it: a durable commit whose save never comes is no hang then.
    fn saves_stuck(&self) -> bool {
        let tc_gives_up_ns = 2 * u64::from(self.knobs.gcp_stop_ms) * 1_000_000;
        // Its timer tick, and the commit's own way to its hold, come on top of the bound.
        if tc_gives_up_ns + 1_000_000_000 < crate::client::REQUEST_TIMEOUT_NS {
            return false;
        }
        self.group_cannot_save()
    }

    /// Some node group's nodes are all gone or stopped on request (their disks failed): no
    /// global checkpoint can be saved until an operator starts one of them again.
    fn group_cannot_save(&self) -> bool {
        self.config.node_groups.iter().any(|g| {
            g.nodes
                .iter()
                .all(|n| !self.kernels.contains_key(n) || self.stopped_on_request.contains(n))
        })
    }

    /// The data nodes of `node`'s node group but `node`.
    fn group_peers(&self, node: NodeId) -> impl Iterator<Item = NodeId> + '_ {
        (self.config.node_groups.iter())
            .filter(move |g| g.nodes.contains(&node))
            .flat_map(|g| g.nodes.iter().copied())
            .filter(move |&n| n != node)
    }

    /// True when a data node of `node`'s node group other than `node` stopped at its own
    /// request, or its disk failed in its current run, or it does not serve (stopped, or
    /// restarting), or a pause may make it stop, or a partition may still get it declared
    /// failed: the group had its failure.
    fn group_had_its_failure(&self, node: NodeId) -> bool {
        // A pause with more than half of TimeBetweenGlobalCheckpointsTimeout still to run
        // may well end in a GCP stop, a failure of the group's (seed 0x6b49efd1: node 3,
        // paused 282 ms against a 229 ms timeout, was let stop while its group peer hung).
        let gcp_stop_ns = u64::from(self.knobs.gcp_stop_ms) * 1_000_000;
        let stops = |n: &NodeId| {
            self.paused
                .get(n)
                .is_some_and(|&until| until > self.now_ns + gcp_stop_ns / 2)
        };
        let down = |n: &NodeId| {
            self.stopped_on_request.contains(n)
                || self.stopping_alone.contains(n)
                || stops(n)
                || self.partition_may_fail(*n)
                || !self.kernels.get(n).is_some_and(|k| k.serves())
        };
        self.group_peers(node).any(|n| down(&n))
    }

    /// True while the partition in force may still get `node` declared failed (see
    /// `partition_ends`). Seed 0x97006c36 (`--workload sets`, partitions with crashes): a
    /// one-way cut 3 → 1 got node 3 declared failed a heartbeat bound later, and node 4, its
    /// group's other node, crashed meanwhile: the cluster, without files, lost its tables.
    fn partition_may_fail(&self, node: NodeId) -> bool {
        self.now_ns < self.partition_until_ns && self.partition_ends.contains(&node)
    }

    /// In seeds with an arbitrator, while the workload runs: a serving data node that knows
    /// no running arbitrator, or that the arbitrator has no link to (it started again, and
    /// client 0 has not reconnected, or its president has not started the arbitrator again).
    /// A failure now could leave it half the cluster, unable to ask the arbitrator: it would
    /// stop (2305), as NDB's does, a double fault the sim does not recover from (seeds
    /// 0x3a69a27c, 0x3b9af1b9). Crashes and hangs wait for the arbitrator.
    fn arbitrator_unlinked(&self) -> bool {
        let api = self.clients[ARBITRATOR].node;
        self.knobs.arbitrator
            && !self.shared.stopping
            && self.is_alive(api)
            && (self.kernels.iter()).any(|(&node, k)| {
                k.serves() && (!k.knows_arbitrator() || !self.net.is_up(api, node))
            })
    }

    /// The node's kernel (its memory) is dropped; every link of it drops.
    fn crash(&mut self, node: NodeId, drain: bool) {
        // Faults end with the workload: a crash put off must not fire after it, as no node
        // restarts then (seed 0x3b9b0501).
        if !self.kernels.contains_key(&node) || self.shared.stopping {
            return;
        }
        self.count(if drain {
            "crash (sent frames drain)"
        } else {
            "crash (sent frames lost)"
        });
        if self.shutting_down.contains(&node) {
            self.shutdown_disturbed = true;
        }
        // The node lost power: its disk keeps what was synced (and drawn unsynced parts), and
        // its log stops here while the cluster's goes on.
        self.crashed_at.insert(node, self.now_ns);
        if let Some(disk) = self.disks.get_mut(&node) {
            disk.crash();
            self.lagging.insert(node);
        }
        let served = self.note_stop(node);
        self.stop_kernel(node, drain);
        self.restart_later(node);
        if let Err(why) = self.last_member_stopped(served) {
            self.shared.fail(why);
        }
        if let Err(why) = self.shutdown_member_gone(node) {
            self.shared.fail(why);
        }
    }

    /// In seeds with node restarts, `node` starts again a drawn while later.
    fn restart_later(&mut self, node: NodeId) {
        if self.knobs.node_restarts {
            let at = self.now_ns + self.rng.between(RESTART_NS_MIN, RESTART_NS_MAX);
            self.schedule_fault(at, Planned::NodeRestart(node));
        }
    }

    /// A crashed data node starts again (from its disk, or without files) and rejoins the
    /// running cluster by node restart; clients connect to it again soon after.
    fn node_restart(&mut self, node: NodeId) {
        // After a cluster crash the system restart starts every node (seed 0x1a13b9e97: a
        // node restart drawn before the crash started two nodes first, and the system
        // restart then replaced their running kernels without a power loss). A start is no
        // fault: it goes on after the workload, as an operator starts stopped nodes again
        // (seed 0x1a7319b6d: a node of the other group, stopped on a disk fault, was its
        // group's way to save again, and a restarting node waited for that).
        if self.kernels.contains_key(&node)
            || self.restart_pending
            || !self.shutting_down.is_empty()
        {
            return;
        }
        // As a data node's listener admits a node id once its old link has closed: a peer
        // that has not yet seen the crash (a slow link still draining) is waited for. One
        // that never let it in (it stopped early in its own node restart) has nothing to see.
        if self
            .kernels
            .values()
            .any(|k| !k.has_failed(node) && k.holds_up(node))
        {
            let at = self.now_ns + DETECT_NS_MAX;
            self.schedule_fault(at, Planned::NodeRestart(node));
            return;
        }
        // That holds for a peer that had not counted the node a member yet too (seed
        // 0x218714d0a: node 1 crashed while node 2 let it in, started again before node 2
        // heard of the crash over a slow link, and node 2, its old link's close then
        // dropped as news of an old generation, kept admitting the crashed run).
        if let Some(heard) = (self.hears_closed.iter())
            .filter(|&(&(at, peer), &when)| {
                peer == node && when > self.now_ns && self.kernels.contains_key(&at)
            })
            .map(|(_, &when)| when)
            .max()
        {
            self.schedule_fault(heard + 1, Planned::NodeRestart(node));
            return;
        }
        // A paused peer accepts no connection, and has not seen the old link close yet (seed
        // 0xee6c06d1: a paused president, handed the new run's link at once, kept admitting
        // the crashed run and ignored the new one for good): the start waits for the pause.
        if let Some(until) = (self.paused.iter())
            .filter(|&(&peer, &until)| peer != node && until > self.now_ns)
            .map(|(_, &until)| until)
            .max()
        {
            let at = until + DETECT_NS_MAX + 1;
            self.schedule_fault(at, Planned::NodeRestart(node));
            return;
        }
        let Some(config) = self.config.data_node(node).cloned() else {
            return;
        };
        self.count("node restart");
        self.log(format!("data node {node} starts again: node restart"));
        self.restarted.insert(node);
        let mut kernel = self.started_again(&config);
        let peers: Vec<NodeId> = self.kernels.keys().copied().collect();
        for &peer in &peers {
            self.net.reconnect(node.min(peer), node.max(peer));
            kernel.on_connect(peer);
            if let Some(other) = self.kernels.get_mut(&peer) {
                other.on_connect(node);
            }
        }
        self.kernels.insert(node, kernel);
        self.stopped_on_request.remove(&node);
        self.first_tick(node);
        for client in 0..self.clients.len() {
            let at = self.now_ns + self.rng.between(1_000_000, 50_000_000);
            self.schedule_fault(at, Planned::Reconnect { client, node });
        }
    }

    /// A data node's kernel as the process starts again: from its disk (not initial), or
    /// without files.
    fn started_again(&self, node: &DataNodeConfig) -> Kernel {
        let mut kernel = if self.knobs.durable {
            let mut kernel = Kernel::with_files(&self.config, node, false);
            kernel.compact_schema_log_after(self.knobs.schema_compact_after);
            kernel
        } else {
            Kernel::new(&self.config, node)
        };
        // This run of the node, as ndbd takes the wall clock: later runs start later (the
        // first runs, at time 0, are 0).
        kernel.set_run(self.now_ns);
        // In single user mode, ndb_mgmd tells a node that starts again to enter it too.
        kernel.set_single_user(self.single_user);
        let root = backup::BACKUP_ROOT.to_string();
        kernel.set_backup_dir(root, backup::LOG_BUFFER_BYTES, self.backup_ids);
        kernel
    }

    /// A kernel that just started: its first timer tick, and the file requests of its start.
    fn first_tick(&mut self, node: NodeId) {
        let at = self.now_ns + self.rng.below(TIMER_TICK_NS);
        let incarnation = self.incarnation(node);
        self.queue
            .push(at, node.0, 0, EventKind::Timer(node, incarnation));
        self.take_fs_requests(node);
    }

    /// Drops the node's kernel, its timers and disk completions, and every link of it.
    fn stop_kernel(&mut self, node: NodeId, drain: bool) {
        if self.kernels.remove(&node).is_none() {
            return;
        }
        self.stopping_alone.remove(&node);
        *self.incarnations.entry(node).or_default() += 1;
        let peers: Vec<NodeId> = self
            .config
            .data_nodes
            .iter()
            .map(|n| n.node_id)
            .chain(self.clients.iter().map(|c| c.node))
            .collect();
        for peer in peers {
            self.net.lose_toward(node, peer);
            if !drain {
                self.drop_connection(node, peer);
                continue;
            }
            if let Some(last_ns) = self.net.drop_draining(node, peer) {
                if self.is_alive(peer) {
                    let when = last_ns.max(self.now_ns) + self.rng.between(10_000, DETECT_NS_MAX);
                    let generation = self.net.generation(node, peer);
                    self.hears_closed_at(when, peer, node, generation);
                }
            }
        }
    }

    /// Every data node loses power at once, if the tables are saved by now (a sysfile names a
    /// GCI after their creation); the restart follows.
    fn cluster_crash(&mut self) -> Result<(), String> {
        if self.shared.stopping {
            // Faults end with the workload (a crash must not cut the final reads apart).
            self.count("cluster crash skipped (the tables were not saved in time)");
            return Ok(());
        }
        if self.restart_pending
            || !self.shutting_down.is_empty()
            || self.saved_gci() < self.ready_gci
            || self.files_given_up()
        {
            let at = self.now_ns + CLUSTER_CRASH_RETRY_NS;
            self.schedule_fault(at, Planned::ClusterCrash);
            return Ok(());
        }
        self.count("cluster crash");
        let data_nodes: Vec<NodeId> = self.config.data_nodes.iter().map(|n| n.node_id).collect();
        for &node in &data_nodes {
            if let Some(disk) = self.disks.get_mut(&node) {
                disk.crash();
            }
            self.stop_kernel(node, false);
            self.paused.remove(&node);
        }
        self.cluster_down("every data node loses power")
    }

    /// ndb_mgm's SHUTDOWN (`Fault::Shutdown`), when a cluster crash could come: every data
    /// node begins a graceful stop at once, and leaves once `Kernel::ready_to_stop` says so
    /// (`World::leaves_gracefully`).
    fn shutdown(&mut self) -> Result<(), String> {
        if self.shared.stopping {
            self.count("shutdown skipped (the tables were not saved in time)");
            return Ok(());
        }
        // Every data node serves, none paused or hung: the SHUTDOWN is the run's one fault
        // until the cluster is down (crashes and hangs wait for it).
        let calm = (self.config.data_nodes.iter())
            .all(|d| self.kernels.get(&d.node_id).is_some_and(|k| k.serves()))
            && !self.paused.values().any(|&until| until > self.now_ns)
            && self.stopping_alone.is_empty();
        if self.restart_pending
            || !calm
            || self.saved_gci() < self.ready_gci
            || self.files_given_up()
        {
            let at = self.now_ns + CLUSTER_CRASH_RETRY_NS;
            self.schedule_fault(at, Planned::Shutdown);
            return Ok(());
        }
        // With `Fault::Stop` too, half of them (drawn from the time, so that other seeds draw
        // as before) are a SIGTERM to every data node: stops alone, each at its own moment
        // within SIGTERM_SPREAD_NS, which the nodes turn into a stop of every data node.
        let sigterms = self.options.has(Fault::Stop) && (self.now_ns / 1_000).is_multiple_of(2);
        self.count(if sigterms {
            "SIGTERM to every data node (stops alone)"
        } else {
            "shutdown (every data node stops gracefully)"
        });
        self.shutdown_sigterms = sigterms;
        self.shutdown_gci = self.gci_clock.now();
        // A node whose disk failed before saves nothing more: what it holds since its last
        // save may be lost, as at a crash.
        self.shutdown_disturbed = self.kernels.values().any(|k| k.file_system_failed());
        self.shutdown_active = true;
        self.shutdown_disk_faults = self.disks.values().map(|d| d.faults).sum();
        self.shutdown_began_ns = self.now_ns;
        let nodes: Vec<NodeId> = self.kernels.keys().copied().collect();
        self.shutting_down = nodes.iter().copied().collect();
        if sigterms {
            self.sigterm_pending = self.shutting_down.clone();
            for node in nodes {
                let at = self.now_ns + self.rng.below(SIGTERM_SPREAD_NS);
                self.schedule_fault(at, Planned::Sigterm(node));
            }
            return Ok(());
        }
        for node in nodes {
            self.kernel_step(node, |kernel, _, now| {
                kernel.begin_stop(now, true);
                Ok(())
            })?;
        }
        Ok(())
    }

    /// A data node of a SIGTERM to every data node (`shutdown`) begins a stop alone, unless it
    /// stopped by now (it left, or stops with every data node already).
    fn sigterm(&mut self, node: NodeId) -> Result<(), String> {
        if !self.sigterm_pending.remove(&node) || !self.kernels.contains_key(&node) {
            return Ok(());
        }
        self.log(format!(
            "data node {node} gets SIGTERM (begins a stop alone)"
        ));
        self.kernel_step(node, |kernel, _, now| {
            kernel.begin_stop(now, false);
            Ok(())
        })
    }

    /// Data node `node` turned its stop into a stop of every data node, or began one on
    /// another's word (STOP_EVERY_NODE): from here it is a SHUTDOWN's member, and if none runs
    /// (a node stopping alone as the last of its node group), one begins now, whose check
    /// holds every commit acknowledged before.
    fn stops_with_every_node(&mut self, node: NodeId) {
        self.stopping_alone.remove(&node);
        self.sigterm_pending.remove(&node);
        self.shutting_down.insert(node);
        self.count("data node stops with every data node (its own choice)");
        if self.shutdown_active {
            return;
        }
        self.count("a stop alone became a stop of every data node");
        self.log(format!(
            "data node {node} stops with every data node: the cluster goes down gracefully"
        ));
        self.shutdown_gci = self.gci_clock.now();
        self.shutdown_disturbed = self.kernels.values().any(|k| k.file_system_failed());
        self.shutdown_active = true;
        self.shutdown_sigterms = false;
        self.shutdown_disk_faults = self.disks.values().map(|d| d.faults).sum();
        self.shutdown_began_ns = self.now_ns;
    }

    /// A node of a SHUTDOWN saved what it answered and exits (`exits_gracefully`). Once the
    /// last one left, the cluster is down, and the GCI it restarts at must hold every commit
    /// acknowledged before the SHUTDOWN.
    fn leaves_gracefully(&mut self, node: NodeId) -> Result<(), String> {
        // Out of the set first: the steps below are no longer its stop's.
        self.shutting_down.remove(&node);
        self.count("data node stopped gracefully");
        self.log(format!("data node {node} stops gracefully (SHUTDOWN)"));
        self.exits_gracefully(node)?;
        self.shutdown_member_gone(node)
    }

    /// A node whose graceful stop ended tells the others it stops (NODE_STOPPING_REP) and
    /// exits, its disk keeping what it took. Whether it served.
    fn exits_gracefully(&mut self, node: NodeId) -> Result<bool, String> {
        if let Some(disk) = self.disks.get_mut(&node) {
            disk.drop_queue();
        }
        self.flush_before_exit(node);
        self.exiting = Some(node);
        let exited = self.kernel_step(node, |kernel, out, _| {
            kernel.on_shutdown(out);
            Ok(())
        });
        self.exiting = None;
        exited?;
        self.lagging.insert(node);
        let served = self.note_stop(node);
        self.stop_kernel(node, true);
        self.paused.remove(&node);
        Ok(served)
    }

    /// With `Fault::Stop`, half the planned crashes (drawn from the time and the node, so
    /// that seeds without the fault draw as before) are graceful stops instead.
    fn stops_instead(&self, node: NodeId) -> bool {
        self.options.has(Fault::Stop) && (self.now_ns / 1_000 + u64::from(node.0)).is_multiple_of(2)
    }

    /// ndb_mgm's STOP of one data node (`Fault::Stop`) in place of a crash: it begins a
    /// graceful stop (the clients are told first) and leaves once `Kernel::ready_to_stop`
    /// says so (`leaves_alone`). A node that does not serve (it joins by node restart) crashes
    /// instead.
    fn stop_alone(&mut self, node: NodeId, drain: bool) {
        if self.shared.stopping {
            return;
        }
        if !self.kernels.get(&node).is_some_and(|k| k.serves()) {
            return self.crash(node, drain);
        }
        self.count("graceful stop of one data node (STOP)");
        self.log(format!("data node {node} begins a graceful stop (STOP)"));
        self.stopping_alone.insert(node);
        let begun = self.kernel_step(node, |kernel, _, now| {
            kernel.begin_stop(now, false);
            Ok(())
        });
        if let Err(why) = begun {
            self.shared.fail(why);
        }
    }

    /// A node stopping alone saved what it answered and exits (`exits_gracefully`); with
    /// `restart` it starts again by node restart later.
    fn leaves_alone(&mut self, node: NodeId) -> Result<(), String> {
        // Out of the set first: the steps below are no longer its stop's.
        self.stopping_alone.remove(&node);
        self.count("data node stopped gracefully (STOP)");
        self.log(format!("data node {node} stops gracefully (STOP)"));
        let served = self.exits_gracefully(node)?;
        self.restart_later(node);
        self.last_member_stopped(served)
    }

    /// A member of a running SHUTDOWN left (gracefully, or otherwise: a crash, its own
    /// error): once none runs, the cluster is down, and unless a member left otherwise or a
    /// disk failed meanwhile, the GCI it restarts at must hold every commit acknowledged
    /// before the SHUTDOWN.
    fn shutdown_member_gone(&mut self, node: NodeId) -> Result<(), String> {
        self.shutting_down.remove(&node);
        if !self.shutdown_active || !self.kernels.is_empty() {
            return Ok(());
        }
        self.shutdown_active = false;
        self.shutting_down.clear();
        self.sigterm_pending.clear();
        self.own_choice.clear();
        if self.restart_pending {
            // The last member's own stop took the cluster down (`last_member_stopped`).
            return Ok(());
        }
        let disk_faults: u64 = self.disks.values().map(|d| d.faults).sum();
        let disturbed = self.shutdown_disturbed || disk_faults > self.shutdown_disk_faults;
        self.cluster_down("SHUTDOWN: every data node stopped")?;
        let restart_gci = self.cluster_crashes.last().map_or(0, |c| c.restart_gci);
        if !disturbed {
            self.shutdown_kept
                .push((self.shutdown_began_ns, self.now_ns));
        }
        if !disturbed && restart_gci < self.shutdown_gci {
            return Err(format!(
                "graceful stop: commits were acknowledged up to GCI {} before the SHUTDOWN, but the disks' sysfiles name only {restart_gci}",
                self.shutdown_gci
            ));
        }
        Ok(())
    }

    /// No data node runs any more (a cluster crash, or the last ones stopped): what the
    /// disks' sysfiles name is the GCI the cluster restarts from, which must not be below one
    /// a kernel reported restorable; acknowledgements of later GCIs may be lost (`durability`).
    /// The system restart follows.
    fn cluster_down(&mut self, how: &str) -> Result<(), String> {
        let lagging: Vec<NodeId> = self.lagging.iter().copied().collect();
        let restorable = self.restorable_max;
        let data_nodes: Vec<NodeId> = self.config.data_nodes.iter().map(|n| n.node_id).collect();
        let own: BTreeMap<NodeId, u32> = data_nodes
            .iter()
            .map(|&n| (n, self.sysfile_gci(n)))
            .collect();
        let restart_gci = own.values().copied().max().unwrap_or(0);
        self.log(format!(
            "cluster crash: {how}; kernels reported GCI {restorable} restorable, the disks' sysfiles name {own:?}: the cluster restarts at {restart_gci}"
        ));
        if restorable > restart_gci {
            return Err(format!(
                "durability: a kernel reported GCI {restorable} restorable, but after the cluster crash no node's sysfile names more than {restart_gci}: {own:?}"
            ));
        }
        self.shared.cluster_downs += 1;
        self.durability
            .crashes
            .push((self.now_ns, restorable, restart_gci));
        self.cluster_crashes.push(ClusterCrash {
            at_ns: self.now_ns,
            restorable,
            restart_gci,
            chosen: None,
            served: false,
            own,
            lagging,
        });
        self.restart_pending = true;
        let at = self.now_ns + self.rng.between(RESTART_NS_MIN, RESTART_NS_MAX);
        self.schedule_fault(at, Planned::ClusterRestart);
        Ok(())
    }

    /// A node about to exit sends the answers it kept for full send buffers, BUGGIFY aside: a
    /// master that stops at a restart may hold the restart GCI for another node, and a system
    /// restart that lost it waits StartPartialTimeout (30 s by default, past the final reads)
    /// for a new master, so losing it to a simulated full buffer would stall the start.
    fn flush_before_exit(&mut self, node: NodeId) {
        let now = self.now();
        let Some(kernel) = self.kernels.get_mut(&node) else {
            return;
        };
        let mut out = SimOutbox {
            from: node,
            now_ns: self.now_ns,
            net: &mut self.net,
            queue: &mut self.queue,
            closes: Vec::new(),
            overloads: 0,
            buggify: false,
        };
        kernel.run_jobs(&mut out, now);
    }

    /// True from a cluster crash until every data node that restarted serves (or stopped).
    fn restarting(&self) -> bool {
        self.restart_pending
            || !self.shutting_down.is_empty()
            || (!self.cluster_crashes.is_empty() && self.kernels.values().any(|k| !k.is_started()))
    }

    /// A president let a node in while its group's other members could not save (their
    /// disks had failed, `Kernel::groups_files_given_up`), and the node dropped what may have
    /// been the group's last restorable files: until a disk of the group saves a newer GCI,
    /// a cluster crash is a third fault in that group, which the fault plans leave out (seed
    /// 0x4c003d31: after both disks of group 0 failed, it left the group nothing, 2308).
    fn files_given_up(&mut self) -> bool {
        let given_up = std::mem::take(&mut self.given_up);
        self.given_up = (given_up.into_iter())
            .filter(|&(group, gci)| {
                let nodes = self.config.node_groups.iter().filter(|g| g.id == group);
                !nodes
                    .flat_map(|g| g.nodes.iter())
                    .any(|&n| self.sysfile_gci(n) > gci)
            })
            .collect();
        !self.given_up.is_empty()
    }

    /// The highest restorable GCI a node's durable sysfile copies name (0: none).
    fn sysfile_gci(&self, node: NodeId) -> u32 {
        let Some(disk) = self.disks.get(&node) else {
            return 0;
        };
        SYSFILES
            .iter()
            .filter_map(|path| disk.durable(path))
            .filter_map(|bytes| Sysfile::from_file(bytes, u32::from(node.0)).ok())
            .map(|s| s.restorable_gci)
            .max()
            .unwrap_or(0)
    }

    /// The highest GCI the disk of a node whose files can restart it has durably saved. A
    /// lagging node's do not count (seed 0xb103776: node 1's sysfile named the tables' GCI as
    /// its node restart began, and dropping its files for the copy took it away, while node
    /// 2's disk had failed before that save; the cluster crash let in on it restarted at the
    /// GCI before the tables' rows).
    fn saved_gci(&self) -> u32 {
        self.disks
            .keys()
            .filter(|n| !self.lagging.contains(n))
            .map(|&n| self.sysfile_gci(n))
            .max()
            .unwrap_or(0)
    }

    /// Every data node starts again from its disk (`Kernel::with_files`, not initial): they
    /// connect to each other and agree on the restart GCI; clients reconnect soon after.
    fn cluster_restart(&mut self) -> Result<(), String> {
        self.restart_pending = false;
        self.crashed_in_restart = false;
        // A crash armed in a restart that a cluster crash cut short stays armed: it may come
        // in this one after another member of its group failed (seed 0x2ddb1b: the start
        // fails with 2308, and the cluster starts again).
        self.count("system restart");
        self.log("system restart: every data node starts from its disk".into());
        if let Some(subscriber) = self.subscriber.as_mut() {
            subscriber.system_restart(self.now_ns);
        }
        self.gci_clock.new_era(self.now_ns);
        self.restorable_max = 0;
        let nodes: Vec<_> = self.config.data_nodes.clone();
        let ids: Vec<NodeId> = nodes.iter().map(|n| n.node_id).collect();
        for node in &nodes {
            let kernel = self.started_again(node);
            self.kernels.insert(node.node_id, kernel);
            self.stopped_on_request.remove(&node.node_id);
        }
        for &a in &ids {
            for &b in &ids {
                if a < b {
                    self.net.reconnect(a, b);
                }
            }
        }
        for &node in &ids {
            if let Some(kernel) = self.kernels.get_mut(&node) {
                for &other in ids.iter().filter(|&&o| o != node) {
                    kernel.on_connect(other);
                }
            }
            self.first_tick(node);
        }
        for client in 0..self.clients.len() {
            for &node in &ids {
                let at = self.now_ns + self.rng.between(1_000_000, 50_000_000);
                self.schedule_fault(at, Planned::Reconnect { client, node });
            }
        }
        self.plan_crash_starting();
        Ok(())
    }

    fn client_dies(&mut self, index: usize) {
        self.count("client death");
        let node = self.clients[index].node;
        self.client_step(node, |c, ctx| c.die(ctx));
        let data_nodes: Vec<NodeId> = self.config.data_nodes.iter().map(|n| n.node_id).collect();
        for peer in data_nodes {
            self.drop_connection(node, peer);
        }
    }

    /// The link drops; the client reconnects after `for_ns` (if the data node still runs).
    fn api_link_drop(&mut self, client: usize, node: NodeId, for_ns: u64) {
        let api = self.clients[client].node;
        // The arbitrator's links stay: without it, half of a split, or the survivor of a
        // two-node cluster, stops (a double fault the sim does not recover from).
        if client == ARBITRATOR || !self.is_alive(api) || !self.net.is_up(api, node) {
            return;
        }
        self.count("api link drop");
        self.drop_connection(api, node);
        let at = self.now_ns + DETECT_NS_MAX + for_ns;
        self.schedule_fault(at, Planned::Reconnect { client, node });
    }

    /// Past this a node silent to its peers has been declared failed (4 heartbeat intervals,
    /// and one more for the report to reach the president).
    fn heartbeat_bound_ns(&self) -> u64 {
        5 * u64::from(self.knobs.heartbeat_ms) * 1_000_000
    }

    /// The data nodes of `side` lose their links to the other data nodes, both ways. A cut
    /// that would leave some node group with no started node off `side` is not made: that
    /// side would stop as it must (2305), but so would the other, and the cluster with it
    /// (as a crash of a whole node group, which the crash plans leave out too).
    fn cut(&mut self, side: &[NodeId]) {
        if self.now_ns < self.partition_until_ns
            || !self.every_group_served_without(side)
            || self.diskless_split_could_stop_all()
        {
            self.count("partition not made (it could split a node group off whole)");
            return;
        }
        self.count("partition (two-way)");
        self.split = true;
        // Seed 0x4a894 (`--faults partition,restart,slow,pause,client,api-link`): a one-way
        // cut 4 → 1 came 42 us after node 3 was cut off, while node 3 still ran started; node
        // 1 declared 4 failed, and node group {3, 4} was gone.
        self.partition_until_ns = self.now_ns + self.heartbeat_bound_ns();
        let others: Vec<NodeId> = self
            .kernels
            .keys()
            .copied()
            .filter(|n| !side.contains(n))
            .collect();
        // Either side may lose arbitration (seed 0xb00002cd: side [2] won, and its crash
        // left the cluster without node group {1, 2}).
        self.partition_ends = side.iter().chain(&others).copied().collect();
        for &a in side {
            for &b in &others {
                self.drop_connection(a, b);
            }
        }
    }

    /// In a seed without files, while a data node is joining by node restart: arbitration
    /// counts it among the nodes alive before a split, so with three data nodes each side of
    /// a cut of one could be a third, and both stop (seed 0xb504063); or while a serving node
    /// has no running arbitrator to ask (after crashes and restarts), so both halves of a
    /// split stop (seed 0xaf006e42, every fault kind at once); or while the survivors of a
    /// crash may still be deciding their side, which a split then joins: each side counts
    /// itself against every node alive before the crash (seed 0xb500012c, three replicas:
    /// node 1 crashed, a cut split nodes 2 and 3 121 ms later, and each was 1 of 3); a cluster
    /// without files that stops whole has lost its tables, a double fault the plans leave out.
    fn diskless_split_could_stop_all(&self) -> bool {
        let deciding_ns = 2 * self.heartbeat_bound_ns();
        let deciding = (self.crashed_at.values())
            .any(|&at| self.now_ns < at.saturating_add(deciding_ns))
            // A node hanging past the heartbeat bound is declared failed at some point of its
            // hang (seed 0xb5000143: a cut came 2 ms after node 2 was).
            || (self.hung.iter()).any(|n| {
                (self.paused.get(n))
                    .is_some_and(|&until| self.now_ns < until.saturating_add(deciding_ns))
            });
        !self.knobs.durable
            && (self.kernels.values().any(|k| !k.serves())
                || self.arbitrator_unlinked()
                || deciding)
    }

    /// True when every node group keeps a started, running data node outside `nodes`, and
    /// every node of `nodes` runs started: the sim does not link data nodes again when a cut
    /// heals, where a real node still starting would dial its peers again and go on.
    fn every_group_served_without(&self, nodes: &[NodeId]) -> bool {
        if !nodes
            .iter()
            .all(|n| self.kernels.get(n).is_some_and(|k| k.is_started()))
        {
            return false;
        }
        let serving = |n: &NodeId| {
            !nodes.contains(n)
                && !self.paused.contains_key(n)
                && self.kernels.get(n).is_some_and(|k| k.is_started())
        };
        self.config
            .node_groups
            .iter()
            .all(|g| g.nodes.iter().any(serving))
    }

    /// With `--faults events`: makes client 0's subscriber once the tables are ready, sends
    /// what it asks for, and stops the run at the first violation it saw.
    fn poll_events(&mut self) -> Result<(), String> {
        if !self.options.has(Fault::Events) || !self.shared.ready {
            return Ok(());
        }
        if self.subscriber.is_none() {
            let Some(tables) = self.shared.tables.as_ref() else {
                return Ok(());
            };
            let mut wanted = Vec::new();
            for which in [BANK, REGISTERS, SETS, LEDGER] {
                if let Some(info) = tables.get(which) {
                    wanted.push((which, info.clone()));
                }
            }
            let data_nodes = self.config.data_nodes.iter().map(|n| n.node_id).collect();
            let mut subscriber = Subscriber::new(
                self.clients[0].node,
                data_nodes,
                &self.shared.partitions,
                wanted,
                self.events_links.clone(),
            );
            subscriber.trace = self.options.trace;
            subscriber.sabotage = self.options.sabotage == Some(crate::Sabotage::Events);
            self.subscriber = Some(subscriber);
        }
        let Some(subscriber) = self.subscriber.as_mut() else {
            return Ok(());
        };
        let sends = subscriber.poll(self.now_ns);
        let log = std::mem::take(&mut subscriber.log);
        let failure = subscriber.failure.take();
        let api = subscriber.node;
        for (to, header, payload) in sends {
            self.net
                .send(&mut self.queue, self.now_ns, api, to, header, payload);
        }
        for line in log {
            self.log(line);
        }
        match failure {
            Some(what) => Err(what),
            None => Ok(()),
        }
    }

    /// Client 0's link to data node `peer` closed (`at` is the end that heard it).
    fn events_link_down(&mut self, at: NodeId, peer: NodeId) {
        if at != self.clients[0].node {
            return;
        }
        self.events_links.remove(&peer);
        if let Some(subscriber) = self.subscriber.as_mut() {
            subscriber.link_down(self.now_ns, peer);
        }
    }

    /// With `--faults events`, once the final reads ended: true when the subscriber has
    /// handed out the epoch the data nodes were in then (every change the final reads saw).
    fn events_caught_up(&mut self) -> Result<bool, String> {
        let Some(subscriber) = self.subscriber.as_ref() else {
            return Ok(true);
        };
        let (epoch, deadline_ns) = *self.events_target.get_or_insert_with(|| {
            let epoch = (self.kernels.values())
                .map(Kernel::current_gci)
                .max()
                .unwrap_or(0);
            (epoch, self.now_ns + EVENTS_CATCH_UP_NS)
        });
        if subscriber.caught_up(epoch) {
            return Ok(true);
        }
        let stalled = (self.kernels.values())
            .map(Kernel::current_gci)
            .max()
            .is_none_or(|now| now <= epoch);
        if self.now_ns > deadline_ns && (stalled || self.saves_stuck()) {
            // The master ended no epoch since the final reads: in seeds whose disks failed,
            // a global checkpoint that cannot be saved stops the epochs too (seeds 0xe000088,
            // 0xe0002b0 with `--faults crash,client,slow,api-link,buggify,pause,hang,restart,
            // crash-all,disk,crash-starting,events`: no GCP_COMPLETE_REP for 20 s), so the
            // subscriber cannot hand out the last changes: what it handed out is checked, not
            // the final images.
            self.count(
                "events: final images not checked (no epoch completed after the final reads)",
            );
            if let Some(subscriber) = self.subscriber.as_mut() {
                subscriber.skip_final_images();
            }
            return Ok(true);
        }
        if self.now_ns > deadline_ns {
            return Err(format!(
                "events: the subscriber had not handed out epoch {epoch:#x} (the data nodes' when the final reads ended) {} s later: {}",
                EVENTS_CATCH_UP_NS / 1_000_000_000,
                subscriber.describe()
            ));
        }
        Ok(false)
    }

    /// Once the workload is over and every live client is idle, client 0 reads everything.
    fn maybe_start_final(&mut self) {
        if self.final_started || !self.shared.stopping {
            return;
        }
        if !self.clients.iter().all(|c| !c.is_alive() || c.is_idle()) {
            return;
        }
        self.final_started = true;
        self.log("every client is idle: client 0 reads everything".into());
        let node = self.clients[0].node;
        self.client_step(node, |c, ctx| c.start_final(ctx));
    }

    /// The register and set histories, checked per key once the final reads are done, and
    /// the bank's ledger.
    fn final_checks(&mut self) -> Result<(), String> {
        if let Some(subscriber) = self.subscriber.as_mut() {
            // The GCI each system restart restored: the chosen one of the crash before it.
            let crashes = &self.cluster_crashes;
            subscriber.set_restart_gcis(|at_ns| {
                (crashes.iter().rev().find(|c| c.at_ns <= at_ns))
                    .map_or(0, |c| c.chosen.unwrap_or(c.restart_gci))
            });
            subscriber.check(&self.shared)?;
            let s = &subscriber.stats;
            self.notes.push(format!(
                "events: {} subscriptions made (refused {:?}), {} begun, {} ended with no data node linked, {} after a system restart ({} went on across one); {} changes handed out, {} inconsistent epochs ({} later gaps of a range unnamed); acknowledged writes found in their epoch {}, in no span {}; final images matched {}",
                s.subscriptions, s.refusals, s.merges_begun, s.merges_ended, s.merges_went_back, s.merges_across_restart, s.changes, s.inconsistent, s.gaps_unnamed, s.writes_found, s.writes_uncovered, s.keys_matched
            ));
        }
        self.check_chain_order()?;
        self.check_drop()?;
        self.check_index()?;
        self.forget_what_crashes_lost();
        self.check_ledger()?;
        let mut by_key: BTreeMap<(usize, u16), Vec<HistoryOp>> = BTreeMap::new();
        for record in &self.shared.history {
            let Some((op, complete_ns)) = history_op(record.access, record.outcome) else {
                continue;
            };
            by_key
                .entry((record.table, record.key))
                .or_default()
                .push(HistoryOp {
                    op,
                    client: record.client,
                    invoke_ns: record.invoke_ns,
                    complete_ns: complete_ns.then_some(record.complete_ns),
                    // A cluster crash after its invoke ended it, whatever it was.
                    deadline_ns: self
                        .cluster_crashes
                        .iter()
                        .map(|c| c.at_ns)
                        .find(|&at| at >= record.invoke_ns)
                        .filter(|_| !complete_ns),
                });
        }
        for scan in &self.shared.committed_scans {
            let (client, at_ns, rows) = (scan.client, scan.at_ns, &scan.rows);
            if let Some((id, balance)) = rows
                .iter()
                .find(|row| !self.shared.balances_written.contains(row))
            {
                return Err(format!(
                    "bank: client {client}: a committed-read scan at {:.6} ms saw account {id} at {balance}, which no transfer whose commit was sent wrote (a dirty or invented read): {rows:?}",
                    at_ns as f64 / 1e6
                ));
            }
        }
        let mut undecided = 0;
        for ((table, key), ops) in &by_key {
            match check::check_register(0, ops) {
                Ok(Verdict::Linearizable) => {}
                Ok(Verdict::Undecided) => undecided += 1,
                Err(e) if *table == SETS => {
                    return Err(format!("set: element {key} (0 absent, 1 present): {e}"))
                }
                Err(e) => return Err(format!("registers: key {key}: {e}")),
            }
        }
        self.undecided_keys = undecided;
        Ok(())
    }

    /// Every live data node that serves, with no restart or primary move under way, orders
    /// the chains alike (a node ordering them otherwise would make another primary). A node
    /// that hangs or is paused is not asked: it has not run since (seed 0xfd2cd: node 4 hung
    /// past the heartbeat bound, declared failed, still held the order from before the
    /// others moved node 1's primaries back). Nor is one that has yet to hear a link close:
    /// its view of who is alive is behind (seed 0x24820b722: node 1 stopped for its disk, and
    /// node 4 would hear of it only after the frames on a slow link from node 1, after the
    /// final reads). Counts the restarted nodes moved back to their config place.
    fn check_chain_order(&mut self) -> Result<(), String> {
        let mut first: Option<(NodeId, Vec<NodeId>)> = None;
        let mut moved = 0;
        for (&node, kernel) in &self.kernels {
            moved = moved.max(kernel.primaries_moved_back());
            let stopped = self.paused.get(&node).is_some_and(|&t| t > self.now_ns);
            let behind = (self.hears_closed.iter())
                .any(|(&(at, _), &when)| at == node && when > self.now_ns);
            if self.hung.contains(&node) || stopped || behind {
                continue;
            }
            let Some(order) = kernel.settled_chain_order() else {
                continue;
            };
            match &first {
                None => first = Some((node, order)),
                Some((other, theirs)) if *theirs != order => {
                    return Err(format!(
                        "chains: data node {node} puts rejoined nodes {order:?} last, data node {other} {theirs:?}: their primaries differ"
                    ))
                }
                Some(_) => {}
            }
        }
        for _ in 0..moved {
            self.count("primaries moved back");
        }
        Ok(())
    }

    /// The data nodes that serve and are neither hung, paused nor behind (see
    /// `check_chain_order`): those whose dictionaries the run's end compares.
    fn nodes_to_ask(&self) -> Vec<NodeId> {
        (self.kernels.iter())
            .filter(|(node, kernel)| {
                let stopped = self.paused.get(node).is_some_and(|&t| t > self.now_ns);
                let behind = (self.hears_closed.iter())
                    .any(|(&(at, _), &when)| at == **node && when > self.now_ns);
                !self.hung.contains(node) && !stopped && !behind && kernel.serves()
            })
            .map(|(&node, _)| node)
            .collect()
    }

    /// `Fault::Index`: once the run is over, every data node asked (as `check_drop`'s) agrees
    /// whether the bank's index is there, has it after its create was acknowledged and
    /// no drop was sent (the final check read every account through it), and lacks it after
    /// its drop was acknowledged.
    fn check_index(&mut self) -> Result<(), String> {
        if self.shared.index_at_ns.is_none() || self.shared.hangs_expected {
            return Ok(());
        }
        let bank = crate::client::table_def(crate::client::BANK).name;
        let holders: Vec<(NodeId, bool)> = (self.nodes_to_ask().into_iter())
            .map(|node| {
                (
                    node,
                    self.kernels[&node].has_index(&bank, crate::client::BANK_INDEX),
                )
            })
            .collect();
        let (acknowledged, dropped) = (
            self.shared.bank_index_acknowledged,
            self.shared.bank_index_dropped,
        );
        let (has, lacks) = (holders.iter().any(|h| h.1), holders.iter().any(|h| !h.1));
        let lost = acknowledged && !self.shared.bank_index_drop_sent;
        if (has && (lacks || dropped)) || (lost && lacks) {
            return Err(format!(
                "index: after the run (node, has index {}) {holders:?}, its create acknowledged: {acknowledged}, its drop: {dropped}",
                crate::client::BANK_INDEX
            ));
        }
        self.count(
            match (acknowledged, has, self.shared.bank_index_drop_sent) {
                (_, _, true) if dropped => "bank index created and dropped",
                (_, _, true) => "bank index created, drop sent",
                (true, _, false) => "bank index created",
                (false, true, false) => "bank index created, answer lost",
                (false, false, false) => "bank index not created",
            },
        );
        Ok(())
    }

    /// `Fault::Drop`: once the run is over, no data node that serves marks a table as being
    /// dropped (a drop's wait left behind refuses the table for good), after client 0's drop
    /// was acknowledged none holds the scratch table, and all agree whether it is there. Nodes hung, paused or behind are
    /// not asked (see `check_chain_order`), nor any in runs with partitions (a minority's
    /// master may be cut off mid-drop).
    fn check_drop(&mut self) -> Result<(), String> {
        if self.shared.drop_at_ns.is_none() {
            return Ok(());
        }
        // (A commit that found its rows' table dropped under it fails the seed at once:
        // `Kernel::take_broken_invariant`.)
        if self.shared.hangs_expected {
            return Ok(());
        }
        let mut holders: Vec<(NodeId, bool)> = Vec::new();
        let scratch_id = self.shared.tables.as_ref().and_then(|t| t.scratch_id);
        let parts_name = scratch_id.map(|id| {
            rndb_protocol::blob::parts_table_name(id, crate::client::SCRATCH_BLOB_COLUMN)
        });
        for node in self.nodes_to_ask() {
            let kernel = &self.kernels[&node];
            // The BLOB column's parts table comes and goes with its table.
            if let Some(parts) = &parts_name {
                if kernel.has_table(parts) != kernel.has_table(SCRATCH_NAME) {
                    return Err(format!(
                        "drop: data node {node} has table {SCRATCH_NAME}: {}, its parts table {parts}: {}",
                        kernel.has_table(SCRATCH_NAME),
                        kernel.has_table(parts)
                    ));
                }
            }
            let marked = kernel.tables_being_dropped();
            if !marked.is_empty() {
                return Err(format!(
                    "drop: data node {node} still marks tables {marked:?} as being dropped after the run"
                ));
            }
            if self.shared.scratch_dropped && kernel.has_table(SCRATCH_NAME) {
                return Err(format!(
                    "drop: data node {node} still has table {} after its DROP TABLE was acknowledged",
                    SCRATCH_NAME
                ));
            }
            holders.push((node, kernel.has_table(SCRATCH_NAME)));
        }
        // Every data node's dictionary agrees on the table, whatever the drop's answer.
        if holders.iter().any(|h| h.1) && holders.iter().any(|h| !h.1) {
            return Err(format!(
                "drop: the data nodes' dictionaries differ after the run: (node, has table {SCRATCH_NAME}) {holders:?}"
            ));
        }
        let (sent, dropped) = (self.shared.drops_sent, self.shared.scratch_dropped);
        if sent > 0 {
            self.count(match (dropped, self.shared.scratch_gone) {
                (true, _) => "scratch table dropped",
                (false, true) => "scratch table dropped, answer lost (709 when sent again)",
                (false, false) => "scratch table drop not done",
            });
            for _ in 1..sent {
                self.count("scratch table drop sent again");
            }
        }
        Ok(())
    }

    /// True when an operation acknowledged at `at_ns` came during a SHUTDOWN no fault
    /// disturbed: its TC saved it before its node left (`Kernel::ready_to_stop`).
    fn saved_by_a_shutdown(&self, at_ns: u64) -> bool {
        within_any(&self.shutdown_kept, at_ns)
    }

    /// Register and set operations acknowledged before a cluster crash that may have lost
    /// them (see `durability`): writes become unknown, reads constrain nothing.
    fn forget_what_crashes_lost(&mut self) {
        let durable_commits = self.shared.durable_commits;
        for record in &mut self.shared.history {
            if !matches!(record.outcome, Outcome::Ok(_) | Outcome::Refused(_)) {
                continue;
            }
            let (invoke, complete) = (record.invoke_ns, record.complete_ns);
            let write = matches!(
                (record.access, record.outcome),
                (Access::Write(_), _) | (Access::Insert | Access::Delete, Outcome::Ok(_))
            );
            // `saved_by_a_shutdown`, on the field: the history is borrowed mutably.
            let kept = within_any(&self.shutdown_kept, complete);
            let durable =
                (durable_commits || kept) && write && matches!(record.outcome, Outcome::Ok(_));
            let crashes = &self.cluster_crashes;
            match durability::fate(crashes, &self.gci_clock, invoke, complete, durable) {
                Fate::NoCrashAfter => {}
                Fate::Durable => self.durability.durable_ops += 1,
                Fate::DurableCommit => {
                    self.durability.durable_ops += 1;
                    self.durability.durable_commits_kept += 1;
                }
                Fate::MayBeLost => {
                    self.durability.ops_made_unknown += 1;
                    record.outcome = if write { Outcome::Info } else { Outcome::Fail };
                }
            }
        }
    }

    /// The final balances are what the transfers in the ledger made of them, and every
    /// transfer acknowledged and durable through the crashes after it is there.
    fn check_ledger(&mut self) -> Result<(), String> {
        if !self.shared.ledger {
            return Ok(());
        }
        let balances: BTreeMap<i32, i64> = self
            .shared
            .final_rows
            .iter()
            .filter(|((table, _), _)| *table == BANK)
            .map(|(&(_, id), &v)| (id, v))
            .collect();
        let mut expected = Vec::new();
        for t in &self.shared.transfers {
            let expect = match t.outcome {
                TransferOutcome::Failed => Expect::Absent,
                TransferOutcome::Acknowledged(at) => {
                    let durable = self.shared.durable_commits || self.saved_by_a_shutdown(at);
                    let (crashes, clock) = (&self.cluster_crashes, &self.gci_clock);
                    match durability::fate(crashes, clock, t.invoke_ns, at, durable) {
                        Fate::NoCrashAfter => Expect::Present,
                        Fate::Durable => {
                            self.durability.durable_ops += 1;
                            Expect::Present
                        }
                        Fate::DurableCommit => {
                            self.durability.durable_ops += 1;
                            self.durability.durable_commits_kept += 1;
                            Expect::Present
                        }
                        Fate::MayBeLost => {
                            self.durability.ops_made_unknown += 1;
                            Expect::Either
                        }
                    }
                }
                TransferOutcome::Unknown | TransferOutcome::Pending => Expect::Either,
            };
            if expect == Expect::Present {
                self.durability.transfers_required += 1;
            }
            expected.push((t.id, t.ledger_value(), expect));
        }
        self.durability.ledger_rows = self.shared.ledger_rows.len() as u64;
        check::check_ledger(
            INITIAL_BALANCE,
            &balances,
            &expected,
            &self.shared.ledger_rows,
        )
        .map_err(|e| {
            let crashes: Vec<String> = self
                .cluster_crashes
                .iter()
                .map(|c| {
                    format!(
                        "at {:.3} ms (restorable {}, restart at {}, sysfiles named {})",
                        c.at_ns as f64 / 1e6,
                        c.restorable,
                        c.restored_gci(),
                        c.restart_gci
                    )
                })
                .collect();
            format!("bank ledger: {e} (cluster crashes: {crashes:?})")
        })
    }

    fn log(&mut self, line: String) {
        if self.options.trace {
            println!("{:>14.6} ms  {line}", self.now_ns as f64 / 1e6);
        }
    }

    fn flush_log(&mut self) {
        for line in std::mem::take(&mut self.shared.log) {
            self.log(line);
        }
    }

    fn report(&mut self) -> Report {
        let mut durability = self.durability.clone();
        for disk in self.disks.values() {
            durability.disk_faults += disk.faults;
            durability.changes_lost += disk.lost_changes;
            durability.changes_kept += disk.kept_changes;
            durability.torn_writes += disk.torn_writes;
        }
        durability.restorable_gci = self.restorable_max;
        Report {
            seed: self.seed,
            knobs: self.knobs.clone(),
            sim_ns: self.now_ns,
            steps: self.step,
            frames: self.frames,
            trace_hash: self.trace_hash,
            stats: self.shared.stats.clone(),
            undecided_keys: self.undecided_keys,
            overloads: self.overloads,
            faults: self.faults.clone(),
            frame_hashes: std::mem::take(&mut self.frame_hashes),
            durability,
            notes: self.notes.clone(),
            events: self.subscriber.as_ref().map(|s| s.stats.clone()),
        }
    }
}

/// A register or set operation as the checker takes it, and whether it completed (its answer
/// came); `None` for what constrains nothing (failed operations, reads without an answer).
fn history_op(access: Access, outcome: Outcome) -> Option<(RegOp, bool)> {
    let done = match outcome {
        Outcome::Fail => return None,
        Outcome::Ok(_) | Outcome::Refused(_) => true,
        Outcome::Info | Outcome::Pending => false,
    };
    let op = match (access, outcome) {
        (Access::Read, Outcome::Ok(Some(v))) => RegOp::Read(v),
        (Access::Read, Outcome::Refused(626)) => RegOp::Read(check::ABSENT),
        (Access::Read, _) => return None,
        // Found through the index: the element was present.
        (Access::IndexRead { .. }, Outcome::Ok(Some(v))) => RegOp::Read(v),
        (Access::IndexRead { .. }, _) => return None,
        (Access::Write(v), _) => RegOp::Write(v),
        // Refused because the row was there: the insert read "present".
        (Access::Insert, Outcome::Refused(_)) => RegOp::Read(check::PRESENT),
        (Access::Insert, _) => RegOp::Insert,
        // Refused because the row was not there: the delete read "absent".
        (Access::Delete, Outcome::Refused(_)) => RegOp::Read(check::ABSENT),
        (Access::Delete, _) => RegOp::Delete,
    };
    Some((op, done))
}

/// True when `at_ns` falls in one of the (began, ended) `windows`.
fn within_any(windows: &[(u64, u64)], at_ns: u64) -> bool {
    (windows.iter()).any(|&(began, ended)| at_ns >= began && at_ns < ended)
}
