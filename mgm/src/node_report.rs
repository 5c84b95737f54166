//! A data node's report links with the management servers: one thread per `[ndb_mgmd]` of the
//! config, each reporting the node's state every [`REPORT_INTERVAL`] over its own connection and
//! carrying out what a reply asks (stop, restart, start), and, for a node started with
//! `--nostart`, the wait in NOT_STARTED until a server says START.
//!
//! ```text
//!   data node ── report thread ──▶ ndb_mgmd 49   each server tracks the node on its own;
//!             └─ report thread ──▶ ndb_mgmd 48   a stop asked by either is carried out once
//! ```
//!
//! A management server learns every data node's state, version, address, memory and links
//! from these reports; a report link that closes, or is silent for
//! [`crate::server::REPORT_TIMEOUT`], is a node that is gone. The data node keeps serving when a
//! server is unreachable: its thread tries again every [`RECONNECT_DELAY`], the others go on.
//!
//! Several servers may ask at once: the first stop or restart sets the node's shutdown flag and
//! records the restart; any later one finds the flag set and is not carried out again. Every
//! server then sees STOPPING (with the restart, if one is asked) and the link close.

use std::convert::Infallible;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::client::{FetchedConfig, MgmClient, MgmError, Requester, REPLY_TIMEOUT};
use crate::connectstring::{ConnectString, MgmServer};
use crate::identity::ConfigIdentity;
use crate::status::VERSION;
use crate::tls::ClientTls;
use crate::wire::Message;

/// How often a data node reports.
pub const REPORT_INTERVAL: Duration = Duration::from_millis(200);
/// How long the thread waits before connecting again after losing ndb_mgmd.
pub const RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// What a data node tells ndb_mgmd each time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DataNodeReport {
    /// The node serves (QMGR's started).
    pub started: bool,
    /// DataMemory in use and configured, bytes.
    pub data_memory_used_bytes: u64,
    pub data_memory_total_bytes: u64,
    /// Transaction records in use.
    pub transactions: u64,
    /// Nodes with a live link to this one.
    pub connected: Vec<u16>,
    /// The data nodes this node holds alive (itself included).
    pub alive: Vec<u16>,
    /// The figures of [`FIGURES`] (same order), sent as `stat.<name>` fields.
    pub figures: Vec<u64>,
    /// Single user mode: the API node it lets in, 0 when the node is not in that mode.
    pub single_user: u16,
    /// The node's part of the last online backup it took part in (START BACKUP).
    pub backup: Option<BackupProgress>,
    /// The highest backup id the node has files of or took part in (the next START BACKUP
    /// without an id takes one more).
    pub backup_last: u32,
}

/// A step of an online backup a management server asks of a data node (ndb_mgm's START
/// BACKUP, coordinated by the server that was asked: `server/backup.rs`), repeated in every
/// reply while the backup runs there, so that a node that misses one hears it again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackupCommand {
    /// Begin backup `id`: log the changes to the fragments this node backs up (each
    /// fragment's first replica among `participants`), then scan them. `token` names this
    /// round: a later START BACKUP of the same id (its files removed) is another round.
    Start {
        id: u32,
        participants: Vec<u16>,
        token: u64,
        /// SNAPSHOTSTART: the log holds each replaced row's image before the change too, so
        /// that a restore can go back to the backup's start.
        snapshot_start: bool,
    },
    /// End backup `id` at the end of global checkpoint `stop_gci`; a SNAPSHOTSTART backup
    /// restores to the end of `snapshot_gci` (every participant logged each change after it).
    Stop {
        id: u32,
        stop_gci: u32,
        snapshot_gci: Option<u32>,
    },
    /// Give backup `id` up, with NDB's error `error` (1321 asked, 1326 a node failed).
    Abort { id: u32, error: u32 },
}

impl BackupCommand {
    /// The backup it is about.
    pub fn id(&self) -> u32 {
        match self {
            BackupCommand::Start { id, .. }
            | BackupCommand::Stop { id, .. }
            | BackupCommand::Abort { id, .. } => *id,
        }
    }

    /// The reply field's value: `start 5 1,2 <token> [snapshotstart]`, `stop 5 120
    /// [snapshot 117]` or `abort 5 1326`.
    pub fn encode(&self) -> String {
        match self {
            BackupCommand::Start {
                id,
                participants,
                token,
                snapshot_start,
            } => {
                let nodes: Vec<String> = participants.iter().map(u16::to_string).collect();
                let snapshot = if *snapshot_start {
                    " snapshotstart"
                } else {
                    ""
                };
                format!("start {id} {} {token}{snapshot}", nodes.join(","))
            }
            BackupCommand::Stop {
                id,
                stop_gci,
                snapshot_gci,
            } => match snapshot_gci {
                Some(gci) => format!("stop {id} {stop_gci} snapshot {gci}"),
                None => format!("stop {id} {stop_gci}"),
            },
            BackupCommand::Abort { id, error } => format!("abort {id} {error}"),
        }
    }

    /// Reads [`encode`](Self::encode)'s text; `None` for anything else.
    pub fn parse(text: &str) -> Option<BackupCommand> {
        let mut words = text.split_whitespace();
        let (verb, id) = (words.next()?, words.next()?.parse().ok()?);
        let arg = words.next()?;
        let token = match verb {
            "start" => Some(words.next()?.parse().ok()?),
            _ => None,
        };
        let (mut snapshot_start, mut snapshot_gci) = (false, None);
        match (verb, words.next()) {
            (_, None) => {}
            ("start", Some("snapshotstart")) => snapshot_start = true,
            ("stop", Some("snapshot")) => snapshot_gci = Some(words.next()?.parse().ok()?),
            _ => return None,
        }
        if words.next().is_some() {
            return None;
        }
        match verb {
            "start" => Some(BackupCommand::Start {
                id,
                participants: arg
                    .split(',')
                    .map(|n| n.parse().ok())
                    .collect::<Option<_>>()?,
                token: token?,
                snapshot_start,
            }),
            "stop" => Some(BackupCommand::Stop {
                id,
                stop_gci: arg.parse().ok()?,
                snapshot_gci,
            }),
            "abort" => Some(BackupCommand::Abort {
                id,
                error: arg.parse().ok()?,
            }),
            _ => None,
        }
    }
}

/// Where a data node's part of a backup stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum BackupPhase {
    /// Logging changes and scanning.
    Running,
    /// Every row is in the data file (synced); changes are still logged.
    Scanned,
    /// The log and control files are written and synced.
    Completed,
    /// Given up (`BackupProgress::error`).
    Failed,
}

impl BackupPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            BackupPhase::Running => "running",
            BackupPhase::Scanned => "scanned",
            BackupPhase::Completed => "completed",
            BackupPhase::Failed => "failed",
        }
    }

    fn parse(text: &str) -> Option<BackupPhase> {
        [
            BackupPhase::Running,
            BackupPhase::Scanned,
            BackupPhase::Completed,
            BackupPhase::Failed,
        ]
        .into_iter()
        .find(|p| p.as_str() == text)
    }
}

/// A data node's part of a backup, as it reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackupProgress {
    pub id: u32,
    /// The round's token (`BackupCommand::Start`).
    pub token: u64,
    /// A fingerprint of the tables and indexes the node began with: every participant's
    /// must be the same (a schema change while the start spread would leave a table's
    /// fragments on some nodes out).
    pub schema: u64,
    pub phase: Option<BackupPhase>,
    /// The node's GCI when its part began.
    pub start_gci: u64,
    /// Once scanned: the newest GCI any row it backed up or change it logged can have (the
    /// backup stops at a global checkpoint no older).
    pub scanned_gci: u64,
    pub records: u64,
    pub log_records: u64,
    pub data_bytes: u64,
    pub log_bytes: u64,
    /// NDB's error code when failed, and what happened.
    pub error: u32,
    pub error_text: String,
}

impl BackupProgress {
    /// Adds this progress to a report as `backup.*` fields.
    pub fn add_to(&self, message: &mut Message) {
        message.push("backup.id", self.id);
        message.push("backup.token", self.token);
        message.push("backup.schema", self.schema);
        message.push(
            "backup.phase",
            self.phase.map_or("none", BackupPhase::as_str),
        );
        message.push("backup.startgci", self.start_gci);
        message.push("backup.gci", self.scanned_gci);
        message.push("backup.records", self.records);
        message.push("backup.logrecords", self.log_records);
        message.push("backup.bytes", self.data_bytes);
        message.push("backup.logbytes", self.log_bytes);
        message.push("backup.error", self.error);
        message.push("backup.errortext", &self.error_text);
    }

    /// The progress a report carries, if any (`None` also for fields that do not parse).
    pub fn from_message(message: &Message) -> Option<BackupProgress> {
        let number = |name: &str| message.get(name)?.parse::<u64>().ok();
        Some(BackupProgress {
            id: u32::try_from(number("backup.id")?).ok()?,
            token: number("backup.token")?,
            schema: number("backup.schema")?,
            phase: BackupPhase::parse(message.get("backup.phase")?),
            start_gci: number("backup.startgci")?,
            scanned_gci: number("backup.gci")?,
            records: number("backup.records")?,
            log_records: number("backup.logrecords")?,
            data_bytes: number("backup.bytes")?,
            log_bytes: number("backup.logbytes")?,
            error: u32::try_from(number("backup.error")?).ok()?,
            error_text: message.get("backup.errortext").unwrap_or("").to_string(),
        })
    }
}

/// Whether a figure only grows (from the node's start) or goes up and down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FigureKind {
    Gauge,
    Counter,
}

/// One figure a data node reports beyond memory: its name (the report field is
/// `stat.<name>`, the metric `ndb_<name>`), kind and meaning.
#[derive(Clone, Copy, Debug)]
pub struct Figure {
    pub name: &'static str,
    pub kind: FigureKind,
    pub help: &'static str,
}

const fn gauge(name: &'static str, help: &'static str) -> Figure {
    Figure {
        name,
        kind: FigureKind::Gauge,
        help,
    }
}

const fn counter(name: &'static str, help: &'static str) -> Figure {
    Figure {
        name,
        kind: FigureKind::Counter,
        help,
    }
}

/// Every figure a data node reports, in report order.
pub const FIGURES: &[Figure] = &[
    gauge("data_memory_used_bytes", "DataMemory in use, bytes"),
    gauge("data_memory_total_bytes", "DataMemory configured, bytes"),
    gauge("transactions", "TC transaction records in use"),
    gauge("transactions_max", "MaxNoOfConcurrentTransactions"),
    gauge("operations", "TC operation records in use"),
    gauge("operations_max", "MaxNoOfConcurrentOperations"),
    gauge("scans", "TC scan records in use"),
    gauge(
        "row_locks",
        "Row locks held or waited for by live transactions at LQH",
    ),
    counter(
        "lock_waits",
        "Key operations and locking scans that waited for a row lock",
    ),
    counter("frames_sent", "Frames sent on this node's links"),
    counter(
        "bytes_sent",
        "Bytes (headers and payloads) sent on this node's links",
    ),
    counter("frames_received", "Frames received on this node's links"),
    counter(
        "bytes_received",
        "Bytes (headers and payloads) received on this node's links",
    ),
    counter(
        "send_overloads",
        "Sends that found a send buffer over its overload limit",
    ),
    gauge(
        "send_buffer_bytes",
        "Bytes waiting in this node's send buffers",
    ),
    gauge("gci_current", "The global checkpoint commits go into now"),
    gauge(
        "gci_restorable",
        "The newest global checkpoint this node knows restorable",
    ),
    gauge("lcp_id", "The newest local checkpoint started"),
    gauge(
        "lcp_restorable_id",
        "The newest local checkpoint a restart would use",
    ),
    gauge("lcp_running", "1 while a local checkpoint runs"),
    gauge(
        "stop_put_off",
        "1 while a graceful stop of this node is put off: leaving would leave its node group \
         without a serving node",
    ),
    // NDB's ndbinfo.counters (DBTC's and DBLQH's), as the data node counts them.
    counter(
        "tc_transactions",
        "Transactions this node coordinated (TRANSACTIONS)",
    ),
    counter("tc_commits", "Transactions committed (COMMITS)"),
    counter("tc_aborts", "Transactions aborted (ABORTS)"),
    counter("tc_reads", "Key reads that lock (READS)"),
    counter("tc_simple_reads", "Committed key reads (SIMPLE_READS)"),
    counter(
        "tc_writes",
        "Key inserts, updates, writes and deletes (WRITES)",
    ),
    counter(
        "tc_local_reads",
        "Key reads whose primary replica is on the coordinator (LOCAL_READS)",
    ),
    counter(
        "tc_local_writes",
        "Key writes whose primary replica is on the coordinator (LOCAL_WRITES)",
    ),
    counter("tc_table_scans", "Table scans (TABLE_SCANS)"),
    counter("tc_range_scans", "Ordered index range scans (RANGE_SCANS)"),
    counter(
        "lqh_operations",
        "Key operations run here, one per replica of a write (OPERATIONS)",
    ),
];

/// The index of figure `name` in [`FIGURES`].
pub fn figure_index(name: &str) -> Option<usize> {
    FIGURES.iter().position(|f| f.name == name)
}

/// How a data node is to start again after a restart ndb_mgmd asked for (`N RESTART [-i] [-n]`):
/// its angel starts the new process this way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RestartRequest {
    /// `-i`: start from empty (`--initial`).
    pub initial: bool,
    /// `-n`: wait in NOT_STARTED until `N START` (`--nostart`).
    pub no_start: bool,
}

/// In [`ReportSetup::single_user`]: no server asked for a single user mode change.
pub const SINGLE_USER_UNASKED: u32 = u32::MAX;

/// What the reporting threads read the node's state from, once its kernel runs.
pub type ProbeFn = Arc<dyn Fn() -> DataNodeReport + Send + Sync>;

/// Where a data node's reports go and what a management server asked of it, shared by the
/// node's main thread and its reporting threads.
#[derive(Debug)]
pub struct ReportSetup {
    /// The connectstring the config was fetched with.
    pub connectstring: ConnectString,
    /// Every management server of the config ([`ConnectString::servers_of`]): the node reports
    /// to each.
    pub servers: Vec<MgmServer>,
    /// The config the node runs, sent with every report: a server serving another config
    /// refuses the reports (see [`crate::identity`]).
    pub identity: ConfigIdentity,
    /// Set (with the shutdown flag) when a server asks the node to restart; read by `ndbd`
    /// once the node has stopped, to tell its angel how to start it again.
    pub restart: Arc<Mutex<Option<RestartRequest>>>,
    /// The node runs under an angel that starts it again after a restart (not `--foreground`);
    /// reported so that ndb_mgmd refuses a RESTART nothing would carry out.
    pub restartable: bool,
    /// TLS for the report links: the data node's own keys, when it has them.
    pub tls: ClientTls,
    /// The single user mode a server's reply asked for, until the node takes it:
    /// [`SINGLE_USER_UNASKED`], 0 (leave the mode) or the API node to let in.
    pub single_user: Arc<AtomicU32>,
    /// The backup step a server's reply asked for, until the node takes it.
    pub backup: Arc<Mutex<Option<BackupCommand>>>,
    /// The stop or restart a server asked for is of every data node (SHUTDOWN, ALL RESTART:
    /// `system: 1` in its reply), set before the shutdown flag.
    pub system_stop: Arc<AtomicBool>,
    /// Replies the reporting threads have had, from any server (see [`Self::hear_out`]).
    pub replies: Arc<AtomicU64>,
    /// Set by the node, before the shutdown flag, when it began a graceful stop by itself
    /// (another data node stopped every data node): unlike a signalled node, it still takes
    /// the first restart a server asks for (ALL RESTART, which a peer told it of first).
    pub stopped_by_itself: Arc<AtomicBool>,
    /// The reporting threads, once started (by [`wait_for_start`] or [`spawn`]): the same
    /// links from NOT_STARTED to the stop.
    reporters: Option<Arc<Reporters>>,
}

impl ReportSetup {
    /// Reports for a node whose config `fetched` came with `connectstring`.
    pub fn new(connectstring: ConnectString, fetched: &FetchedConfig) -> ReportSetup {
        ReportSetup {
            servers: connectstring.servers_of(&fetched.config),
            connectstring,
            identity: fetched.identity(),
            restart: Arc::new(Mutex::new(None)),
            restartable: false,
            tls: ClientTls::plain(),
            single_user: Arc::new(AtomicU32::new(SINGLE_USER_UNASKED)),
            backup: Arc::new(Mutex::new(None)),
            system_stop: Arc::new(AtomicBool::new(false)),
            replies: Arc::new(AtomicU64::new(0)),
            stopped_by_itself: Arc::new(AtomicBool::new(false)),
            reporters: None,
        }
    }

    /// The restart a server asked for, if one asked.
    pub fn restart_requested(&self) -> Option<RestartRequest> {
        *self.restart.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// For a node that stopped by itself (another data node stopped every data node): waits,
    /// at most `limit`, until each server has answered two more reports, so that a stop or
    /// restart a server asked for meanwhile (ALL RESTART) is recorded before the node exits:
    /// its peer may have told it first.
    pub fn hear_out(replies: &AtomicU64, servers: usize, limit: Duration) {
        let until = replies.load(Ordering::Relaxed) + 2 * servers as u64;
        let deadline = Instant::now() + limit;
        while replies.load(Ordering::Relaxed) < until && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Starts one reporting thread per server (once); `probe` is the kernel's state, `None`
    /// while the node waits in NOT_STARTED.
    fn start_reporters(
        &mut self,
        node_id: u16,
        shutdown: Arc<AtomicBool>,
        probe: Option<ProbeFn>,
    ) -> std::io::Result<Arc<Reporters>> {
        if let Some(reporters) = &self.reporters {
            if let Some(probe) = probe {
                *reporters.probe.lock().unwrap_or_else(|e| e.into_inner()) = Some(probe);
            }
            return Ok(reporters.clone());
        }
        let reporters = Arc::new(Reporters {
            node_id,
            restartable: self.restartable,
            identity: self.identity,
            tls: self.tls.clone(),
            restart: self.restart.clone(),
            single_user: self.single_user.clone(),
            backup: self.backup.clone(),
            system_stop: self.system_stop.clone(),
            replies: self.replies.clone(),
            stopped_by_itself: self.stopped_by_itself.clone(),
            shutdown,
            probe: Mutex::new(probe),
            start: AtomicBool::new(false),
            asked: AtomicBool::new(false),
        });
        for server in &self.servers {
            let (reporters, server) = (reporters.clone(), server.clone());
            std::thread::Builder::new()
                .name("mgm-report".into())
                .spawn(move || reporters.report_to(&server))?;
        }
        self.reporters = Some(reporters.clone());
        Ok(reporters)
    }
}

/// What the reporting threads share.
struct Reporters {
    node_id: u16,
    restartable: bool,
    identity: ConfigIdentity,
    tls: ClientTls,
    restart: Arc<Mutex<Option<RestartRequest>>>,
    /// See [`ReportSetup::single_user`].
    single_user: Arc<AtomicU32>,
    /// See [`ReportSetup::backup`].
    backup: Arc<Mutex<Option<BackupCommand>>>,
    /// See [`ReportSetup::system_stop`].
    system_stop: Arc<AtomicBool>,
    /// See [`ReportSetup::replies`].
    replies: Arc<AtomicU64>,
    /// See [`ReportSetup::stopped_by_itself`].
    stopped_by_itself: Arc<AtomicBool>,
    /// A server's stop or restart was carried out (`obey`).
    asked: AtomicBool,
    /// The node's graceful-stop flag (SIGTERM sets it too).
    shutdown: Arc<AtomicBool>,
    /// The kernel's state; `None` while the node waits in NOT_STARTED.
    probe: Mutex<Option<ProbeFn>>,
    /// A server said START to the node waiting in NOT_STARTED.
    start: AtomicBool,
}

impl fmt::Debug for Reporters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reporters")
            .field("node_id", &self.node_id)
            .field("identity", &self.identity)
            .field("start", &self.start)
            .finish_non_exhaustive()
    }
}

/// What a server's reply to a report asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    None,
    Stop,
    Restart(RestartRequest),
    Start,
}

fn action_of(reply: &Message) -> Action {
    match reply.get("action") {
        Some("stop") => Action::Stop,
        Some("start") => Action::Start,
        Some("restart") => Action::Restart(RestartRequest {
            initial: reply.get("initial") == Some("1"),
            no_start: reply.get("nostart") == Some("1"),
        }),
        _ => Action::None,
    }
}

impl Reporters {
    /// One server's reporting thread: connects, reports until the link fails, and connects
    /// again after [`RECONNECT_DELAY`], for as long as the process lives. A refusal (another
    /// config, an id already reporting there) is logged once, and tried again: the server may
    /// be restarted with the right config, or the other link may close.
    fn report_to(&self, server: &MgmServer) {
        let mut last_refusal: Option<String> = None;
        loop {
            let lost = MgmClient::connect_to(&server.address, &self.tls).and_then(|mut client| {
                tracing::info!("reporting to {server}");
                self.report_until_lost(&mut client, server, &mut last_refusal)
            });
            match lost {
                Err(MgmError::Refused(why)) => {
                    if last_refusal.as_deref() != Some(why.as_str()) {
                        tracing::error!("{server} refused this node's reports: {why}");
                    }
                    last_refusal = Some(why);
                }
                Err(MgmError::Unreachable(why)) => tracing::debug!("{server}: {why}"),
                Err(e) => tracing::warn!("lost {server}: {e}; reconnecting"),
                Ok(never) => match never {},
            }
            std::thread::sleep(RECONNECT_DELAY);
        }
    }

    /// Reports every [`REPORT_INTERVAL`] until the connection fails or the server refuses.
    fn report_until_lost(
        &self,
        client: &mut MgmClient,
        server: &MgmServer,
        last_refusal: &mut Option<String>,
    ) -> Result<Infallible, MgmError> {
        loop {
            let reply = client.call(&self.report_message(), REPLY_TIMEOUT)?;
            self.replies.fetch_add(1, Ordering::Relaxed);
            if last_refusal.take().is_some() {
                tracing::info!("{server} accepts this node's reports again");
            }
            if let Some(api) = reply.get("singleuser").and_then(|v| v.parse::<u16>().ok()) {
                self.single_user.store(u32::from(api), Ordering::Relaxed);
            }
            if let Some(command) = reply.get("backup").and_then(BackupCommand::parse) {
                *self.backup.lock().unwrap_or_else(|e| e.into_inner()) = Some(command);
            }
            let system = reply.get("system") == Some("1");
            if !self.obey(action_of(&reply), system, server) {
                std::thread::sleep(REPORT_INTERVAL);
            }
        }
    }

    fn report_message(&self) -> Message {
        let probe = self.probe.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let stopping = self.shutdown.load(Ordering::Relaxed);
        let (status, report) = match probe {
            Some(probe) => {
                let report = probe();
                let status = match (stopping, report.started) {
                    (true, _) => "STOPPING",
                    (false, true) => "STARTED",
                    (false, false) => "STARTING",
                };
                (status, report)
            }
            None => {
                let status = match (stopping, self.start.load(Ordering::Relaxed)) {
                    (true, _) => "STOPPING",
                    (false, true) => "STARTING",
                    (false, false) => "NOT_STARTED",
                };
                (status, DataNodeReport::default())
            }
        };
        let mut message = report_message(self.node_id, status, self.restartable, &report);
        self.identity.add_to(&mut message);
        if stopping {
            // Every server, not only the one that asked, learns that the stop is a restart.
            if let Some(restart) = *self.restart.lock().unwrap_or_else(|e| e.into_inner()) {
                message.push("restart", 1);
                message.push("initial", u8::from(restart.initial));
                message.push("nostart", u8::from(restart.no_start));
            }
        }
        message
    }

    /// Carries out what `server` asked: START for a node waiting in NOT_STARTED; a stop or
    /// restart records the restart and sets the same shutdown flag SIGTERM sets (the graceful
    /// stop), unless the node is already stopping (asked by another server, or signalled; one
    /// that stopped by itself still records the first server's restart, for the angel). True
    /// when this call started the stop.
    fn obey(&self, action: Action, system: bool, server: &MgmServer) -> bool {
        let restart = match action {
            Action::None => return false,
            Action::Start => {
                let waiting = self
                    .probe
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .is_none();
                if waiting && !self.start.swap(true, Ordering::Relaxed) {
                    tracing::info!("{server} said START: starting");
                }
                return false;
            }
            Action::Stop => None,
            Action::Restart(request) => Some(request),
        };
        // The lock orders two servers asking at once: one carries out its request, the other
        // finds the flag set.
        let mut recorded = self.restart.lock().unwrap_or_else(|e| e.into_inner());
        if self.shutdown.load(Ordering::Relaxed) {
            let by_itself = self.stopped_by_itself.load(Ordering::Relaxed);
            if by_itself && restart.is_some() && !self.asked.swap(true, Ordering::Relaxed) {
                tracing::info!("{server} asked this node, already stopping, to restart");
                *recorded = restart;
            } else {
                tracing::trace!("{server} asked {action:?}; the node is already stopping");
            }
            return false;
        }
        self.asked.store(true, Ordering::Relaxed);
        match restart {
            None => tracing::info!("{server} asked this node to stop: stopping gracefully"),
            Some(request) => {
                tracing::info!(
                    initial = request.initial,
                    no_start = request.no_start,
                    "{server} asked this node to restart: stopping gracefully, the angel starts it again"
                );
                *recorded = Some(request);
            }
        }
        // Seen by whoever sees the shutdown flag (Acquire in ndbd's loop).
        self.system_stop.store(system, Ordering::Relaxed);
        self.shutdown.store(true, Ordering::Release);
        true
    }
}

/// For a node started with `--nostart`: starts the reporting threads, which report NOT_STARTED
/// to every server, and waits until one says START (`true`), or the node is to stop or restart
/// instead, or `shutdown` is set (`false`). The threads go on reporting for the started node.
pub fn wait_for_start(
    setup: &mut ReportSetup,
    node_id: u16,
    shutdown: &Arc<AtomicBool>,
) -> std::io::Result<bool> {
    tracing::info!("--nostart: waiting in NOT_STARTED for ndb_mgmd's START");
    let reporters = setup.start_reporters(node_id, shutdown.clone(), None)?;
    loop {
        if shutdown.load(Ordering::Relaxed) {
            return Ok(false);
        }
        if reporters.start.load(Ordering::Relaxed) {
            return Ok(true);
        }
        std::thread::sleep(START_POLL);
    }
}

/// How often [`wait_for_start`] looks whether a START came.
const START_POLL: Duration = Duration::from_millis(20);

/// Starts the reporting threads of data node `node_id` (or hands the running ones of
/// [`wait_for_start`] the kernel's state). `probe` reads the node's state; a thread sets
/// `shutdown` when its server asks the node to stop or restart (the same graceful stop as
/// SIGTERM), and every thread reports `STOPPING` once `shutdown` is set, whoever set it. The
/// links are TLS when `setup.tls` has keys (the data node's own).
pub fn spawn(
    mut setup: ReportSetup,
    node_id: u16,
    probe: ProbeFn,
    shutdown: Arc<AtomicBool>,
) -> std::io::Result<()> {
    setup
        .start_reporters(node_id, shutdown, Some(probe))
        .map(|_| ())
}

fn report_message(node_id: u16, status: &str, angel: bool, report: &DataNodeReport) -> Message {
    let connected: Vec<String> = report.connected.iter().map(u16::to_string).collect();
    let alive: Vec<String> = report.alive.iter().map(u16::to_string).collect();
    let mut message = Message::new("report")
        .field("nodetype", Requester::Ndbd.as_str())
        .field("nodeid", node_id)
        .field("status", status)
        .field("version", VERSION)
        .field("pid", std::process::id())
        .field("angel", u8::from(angel))
        .field("connected", connected.join(","))
        .field("alive", alive.join(","))
        .field("datamemory.used", report.data_memory_used_bytes)
        .field("datamemory.total", report.data_memory_total_bytes)
        .field("transactions", report.transactions)
        .field("singleuser", report.single_user)
        .field("backup.last", report.backup_last);
    if let Some(backup) = &report.backup {
        backup.add_to(&mut message);
    }
    for (figure, value) in FIGURES.iter().zip(&report.figures) {
        message.push(format!("stat.{}", figure.name), value);
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connectstring::MgmAddress;

    fn reporters() -> Reporters {
        Reporters {
            node_id: 1,
            restartable: true,
            identity: ConfigIdentity {
                cluster_id: 1,
                checksum: 2,
            },
            tls: ClientTls::plain(),
            restart: Arc::new(Mutex::new(None)),
            single_user: Arc::new(AtomicU32::new(SINGLE_USER_UNASKED)),
            backup: Arc::new(Mutex::new(None)),
            system_stop: Arc::new(AtomicBool::new(false)),
            replies: Arc::new(AtomicU64::new(0)),
            stopped_by_itself: Arc::new(AtomicBool::new(false)),
            asked: AtomicBool::new(false),
            shutdown: Arc::new(AtomicBool::new(false)),
            probe: Mutex::new(None),
            start: AtomicBool::new(false),
        }
    }

    fn server(id: u16) -> MgmServer {
        MgmServer {
            node_id: Some(id),
            address: MgmAddress {
                host: "127.0.0.1".into(),
                port: 1186 + id,
            },
        }
    }

    #[test]
    fn the_first_stop_or_restart_asked_is_carried_out_once() {
        let r = reporters();
        let initial = RestartRequest {
            initial: true,
            no_start: false,
        };
        assert!(r.obey(Action::Restart(initial), false, &server(49)));
        // Asked again, through the other server or the same: the stop under way stands.
        assert!(!r.obey(Action::Stop, false, &server(48)));
        let no_start = RestartRequest {
            initial: false,
            no_start: true,
        };
        assert!(!r.obey(Action::Restart(no_start), false, &server(48)));
        assert_eq!(*r.restart.lock().unwrap(), Some(initial));
        assert!(r.shutdown.load(Ordering::Relaxed));
        // Every server is told the node stops for that restart.
        let report = r.report_message();
        assert_eq!(report.get("status"), Some("STOPPING"));
        assert_eq!(report.get("restart"), Some("1"));
        assert_eq!(report.get("initial"), Some("1"));
        assert_eq!(report.get("nostart"), Some("0"));
        assert_eq!(report.get("clusterid"), Some("0000000000000001"));
    }

    #[test]
    fn backup_steps_and_progress_read_back_and_nothing_else_parses() {
        for command in [
            BackupCommand::Start {
                id: 3,
                participants: vec![1, 2, 4],
                token: 77,
                snapshot_start: false,
            },
            BackupCommand::Start {
                id: 3,
                participants: vec![1],
                token: 78,
                snapshot_start: true,
            },
            BackupCommand::Stop {
                id: 3,
                stop_gci: 77,
                snapshot_gci: None,
            },
            BackupCommand::Stop {
                id: 3,
                stop_gci: 77,
                snapshot_gci: Some(75),
            },
            BackupCommand::Abort { id: 3, error: 1326 },
        ] {
            assert_eq!(BackupCommand::parse(&command.encode()), Some(command));
        }
        for bad in [
            "",
            "start 3 1",
            "start x 1 7",
            "start 3 1,x 7",
            "start 3 1 x",
            "stop 3 1 2",
            "stop 3 1 snapshot",
            "stop 3 1 snapshot x",
            "start 3 1 7 snapshotend",
            "abort 3 1 snapshot 2",
            "halt 3 1",
        ] {
            assert_eq!(BackupCommand::parse(bad), None, "{bad:?}");
        }
        let progress = BackupProgress {
            id: 3,
            token: 77,
            schema: 0xfeed,
            phase: Some(BackupPhase::Scanned),
            start_gci: 5 << 32,
            scanned_gci: 9 << 32 | 4,
            records: 10,
            log_records: 2,
            data_bytes: 400,
            log_bytes: 120,
            error: 0,
            error_text: String::new(),
        };
        let mut message = Message::new("report");
        progress.add_to(&mut message);
        assert_eq!(BackupProgress::from_message(&message), Some(progress));
        assert_eq!(BackupProgress::from_message(&Message::new("report")), None);
    }

    #[test]
    fn a_node_that_stopped_by_itself_takes_the_first_restart_asked() {
        let r = reporters();
        r.stopped_by_itself.store(true, Ordering::Relaxed);
        r.shutdown.store(true, Ordering::Relaxed);
        let initial = RestartRequest {
            initial: true,
            no_start: false,
        };
        assert!(!r.obey(Action::Restart(initial), true, &server(49)));
        assert!(!r.obey(
            Action::Restart(RestartRequest::default()),
            true,
            &server(50)
        ));
        assert_eq!(*r.restart.lock().unwrap(), Some(initial));
        assert_eq!(r.report_message().get("restart"), Some("1"));
    }

    #[test]
    fn a_signalled_node_obeys_no_later_restart() {
        let r = reporters();
        r.shutdown.store(true, Ordering::Relaxed);
        assert!(!r.obey(
            Action::Restart(RestartRequest::default()),
            false,
            &server(49)
        ));
        assert_eq!(*r.restart.lock().unwrap(), None);
        assert_eq!(r.report_message().get("restart"), None);
    }

    #[test]
    fn start_from_any_server_ends_not_started() {
        let r = reporters();
        assert_eq!(r.report_message().get("status"), Some("NOT_STARTED"));
        assert!(!r.obey(Action::Start, false, &server(48)));
        assert!(r.start.load(Ordering::Relaxed));
        assert_eq!(r.report_message().get("status"), Some("STARTING"));
        let started: ProbeFn = Arc::new(|| DataNodeReport {
            started: true,
            ..DataNodeReport::default()
        });
        *r.probe.lock().unwrap() = Some(started);
        assert_eq!(r.report_message().get("status"), Some("STARTED"));
        assert!(!r.shutdown.load(Ordering::Relaxed));
    }
}
