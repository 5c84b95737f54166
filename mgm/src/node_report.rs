//! A data node's report link with ndb_mgmd: a thread that reports the node's state every
//! [`REPORT_INTERVAL`] over one connection and carries out what the reply asks (stop, restart),
//! and, for a node started with `--nostart`, the wait in NOT_STARTED until ndb_mgmd says START.
//!
//! ndb_mgmd learns every data node's state, version, address, memory and links from these
//! reports; a report link that closes, or is silent for [`crate::server::REPORT_TIMEOUT`], is a
//! node that is gone. The data node keeps serving when ndb_mgmd is unreachable: the thread tries
//! again every [`RECONNECT_DELAY`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::client::{MgmClient, MgmError, Requester, REPLY_TIMEOUT};
use crate::connectstring::ConnectString;
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

/// Where a data node's reports go and what ndb_mgmd asked of it, shared by the node's main
/// thread and its reporting thread.
#[derive(Debug)]
pub struct ReportSetup {
    pub connectstring: ConnectString,
    /// A connection already reporting for this node (the one it waited in NOT_STARTED on), so
    /// that ndb_mgmd sees one report link from NOT_STARTED to the stop.
    pub client: Option<MgmClient>,
    /// Set (with the shutdown flag) when ndb_mgmd asks the node to restart; read by `ndbd`
    /// once the node has stopped, to tell its angel how to start it again.
    pub restart: Arc<Mutex<Option<RestartRequest>>>,
    /// The node runs under an angel that starts it again after a restart (not `--foreground`);
    /// reported so that ndb_mgmd refuses a RESTART nothing would carry out.
    pub restartable: bool,
    /// TLS for the report link: the data node's own keys, when it has them.
    pub tls: ClientTls,
}

impl ReportSetup {
    pub fn new(connectstring: ConnectString) -> ReportSetup {
        ReportSetup {
            connectstring,
            client: None,
            restart: Arc::new(Mutex::new(None)),
            restartable: false,
            tls: ClientTls::plain(),
        }
    }

    /// The restart ndb_mgmd asked for, if it asked for one.
    pub fn restart_requested(&self) -> Option<RestartRequest> {
        *self.restart.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What ndb_mgmd's reply to a report asks for.
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

/// Carries out a stop or restart: records the restart and sets the same shutdown flag SIGTERM
/// sets (the graceful stop). True when the node is to stop.
fn obey(
    action: Action,
    setup_restart: &Mutex<Option<RestartRequest>>,
    shutdown: &AtomicBool,
) -> bool {
    match action {
        Action::Stop => {
            tracing::info!("ndb_mgmd asked this node to stop: stopping gracefully");
        }
        Action::Restart(request) => {
            tracing::info!(
                initial = request.initial,
                no_start = request.no_start,
                "ndb_mgmd asked this node to restart: stopping gracefully, the angel starts it again"
            );
            *setup_restart.lock().unwrap_or_else(|e| e.into_inner()) = Some(request);
        }
        Action::None | Action::Start => return false,
    }
    shutdown.store(true, Ordering::Relaxed);
    true
}

/// For a node started with `--nostart`: reports NOT_STARTED every [`REPORT_INTERVAL`] until
/// ndb_mgmd says START (`Ok(true)`; the connection is kept in `setup.client` for the reporting
/// thread), or the node is to stop or restart instead, or `shutdown` is set (`Ok(false)`).
/// ndb_mgmd unreachable is tried again every [`RECONNECT_DELAY`], as the reporting thread does.
pub fn wait_for_start(
    setup: &mut ReportSetup,
    node_id: u16,
    shutdown: &AtomicBool,
) -> Result<bool, MgmError> {
    tracing::info!("--nostart: waiting in NOT_STARTED for ndb_mgmd's START");
    while !shutdown.load(Ordering::Relaxed) {
        let mut client = match MgmClient::connect_tls(&setup.connectstring, &setup.tls) {
            Ok(client) => client,
            Err(e) => {
                tracing::debug!("ndb_mgmd not reachable: {e}");
                std::thread::sleep(RECONNECT_DELAY);
                continue;
            }
        };
        loop {
            let request = report_message(
                node_id,
                "NOT_STARTED",
                setup.restartable,
                &DataNodeReport::default(),
            );
            let action = match client.call(&request, REPLY_TIMEOUT) {
                Ok(reply) => action_of(&reply),
                Err(MgmError::Refused(why)) => return Err(MgmError::Refused(why)),
                Err(e) => {
                    tracing::warn!("lost ndb_mgmd: {e}; reconnecting");
                    break;
                }
            };
            if action == Action::Start {
                tracing::info!("ndb_mgmd said START: starting");
                setup.client = Some(client);
                return Ok(true);
            }
            if obey(action, &setup.restart, shutdown) || shutdown.load(Ordering::Relaxed) {
                return Ok(false);
            }
            std::thread::sleep(REPORT_INTERVAL);
        }
        std::thread::sleep(RECONNECT_DELAY);
    }
    Ok(false)
}

/// Starts the reporting thread of data node `node_id`. `probe` reads the node's state; the
/// thread sets `shutdown` when ndb_mgmd asks the node to stop or restart (the same graceful stop
/// as SIGTERM), and reports `STOPPING` once `shutdown` is set, whoever set it. The link is TLS
/// when `setup.tls` has keys (the data node's own).
pub fn spawn(
    mut setup: ReportSetup,
    node_id: u16,
    probe: Box<dyn Fn() -> DataNodeReport + Send>,
    shutdown: Arc<AtomicBool>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("mgm-report".into())
        .spawn(move || loop {
            let client = match setup.client.take() {
                Some(client) => Ok(client),
                None => MgmClient::connect_tls(&setup.connectstring, &setup.tls),
            };
            match client {
                Ok(mut client) => {
                    match report_until_lost(&mut client, node_id, &*probe, &setup, &shutdown) {
                        Err(MgmError::Refused(why)) => {
                            tracing::error!("ndb_mgmd refused this node's reports: {why}");
                            return;
                        }
                        Err(e) => tracing::warn!("lost ndb_mgmd: {e}; reconnecting"),
                        Ok(()) => return,
                    }
                }
                Err(e) => tracing::debug!("ndb_mgmd not reachable: {e}"),
            }
            std::thread::sleep(RECONNECT_DELAY);
        })
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
        .field("transactions", report.transactions);
    for (figure, value) in FIGURES.iter().zip(&report.figures) {
        message.push(format!("stat.{}", figure.name), value);
    }
    message
}

/// Reports every [`REPORT_INTERVAL`] until the connection fails.
fn report_until_lost(
    client: &mut MgmClient,
    node_id: u16,
    probe: &dyn Fn() -> DataNodeReport,
    setup: &ReportSetup,
    shutdown: &AtomicBool,
) -> Result<(), MgmError> {
    tracing::info!(server = %client.server(), "reporting to ndb_mgmd");
    loop {
        let report = probe();
        let stopping = shutdown.load(Ordering::Relaxed);
        let status = match (stopping, report.started) {
            (true, _) => "STOPPING",
            (false, true) => "STARTED",
            (false, false) => "STARTING",
        };
        let request = report_message(node_id, status, setup.restartable, &report);
        let reply = client.call(&request, REPLY_TIMEOUT)?;
        if !stopping && obey(action_of(&reply), &setup.restart, shutdown) {
            continue;
        }
        std::thread::sleep(REPORT_INTERVAL);
    }
}
