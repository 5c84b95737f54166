//! ndb_mgmd: serves the config, tracks every node from the data nodes' reports, writes the
//! cluster log, and carries out `ndb_mgm`'s commands.
//!
//! One thread accepts; each connection gets a thread (at most [`CONNECTIONS_MAX`]) that reads
//! requests and answers them in order. All state is in one `State` behind a mutex, with a
//! condition variable that wakes requests waiting for nodes to stop.

pub mod arbitrator;
mod backup;
pub mod cache;
pub mod log;
pub mod metrics;
pub mod peers;
mod periodic;

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufReader;
use std::net::{SocketAddr, TcpListener, TcpStream};

use rndb_transporter::tls::io::NodeStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rndb_config::{ClusterConfig, NodeId, NodeKind};

use crate::identity::ConfigIdentity;
use crate::node_report::{BackupProgress, RestartRequest, FIGURES};
use crate::status::{ClusterStatus, NodeState, NodeStatus, NodeType, VERSION};
use crate::tls::{Screened, ServerTls};
use crate::wire::Message;
use log::{Category, ClusterLog, Event, Severity};

/// The most connections served at once; one more is answered with an error and closed.
pub const CONNECTIONS_MAX: usize = 256;
/// A data node's report link that is silent this long is a node that is gone (its reports come
/// every `node_report::REPORT_INTERVAL`).
pub const REPORT_TIMEOUT: Duration = Duration::from_secs(3);
/// A connection that is not a data node's report link may be idle this long.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a data node id given to a node that asked for any stays reserved for it.
pub const RESERVATION: Duration = Duration::from_secs(10);
/// How long STOP and RESTART wait for the nodes to be gone.
pub const STOP_WAIT: Duration = Duration::from_secs(120);
/// How long ENTER SINGLE USER MODE waits for every started data node to report the mode.
pub const SINGLE_USER_WAIT: Duration = Duration::from_secs(20);
/// How long a data node's config request waits for the report link of its previous process
/// to close (a node restarted by its angel asks again at once, and the old link's end may not
/// have been read yet).
pub const PREVIOUS_LINK_WAIT: Duration = Duration::from_secs(5);

/// What the server serves.
#[derive(Debug)]
pub struct ServerSetup {
    /// The config's text, served as is, and what it parses to.
    pub config_text: String,
    pub config: ClusterConfig,
    /// This management node's id.
    pub me: NodeId,
    pub log: ClusterLog,
}

/// The running server, shared by its threads.
#[derive(Debug)]
pub struct Server {
    config_text: String,
    config: ClusterConfig,
    me: NodeId,
    /// The identity of the config served: reports from a process or server running another
    /// config are refused (see [`crate::identity`]).
    identity: ConfigIdentity,
    state: Mutex<State>,
    /// Signalled when a data node's report link changes (a stop waits on it).
    changed: Condvar,
    /// Set by SHUTDOWN (or `<me> STOP`) once answered: `ndb_mgmd` exits.
    pub shutdown: AtomicBool,
    connections: AtomicUsize,
    /// The address this server listens on (its own SHOW line).
    address: Mutex<Option<SocketAddr>>,
    /// TLS keys and RequireTls (see [`crate::tls`]); set once, before serving.
    tls: ServerTls,
}

#[derive(Debug)]
struct State {
    data: BTreeMap<u16, DataNode>,
    /// API nodes that said they connected (version, address), by node id.
    api: BTreeMap<u16, (String, String)>,
    /// The other management servers with a live link to this one (see [`peers`]), by node id.
    mgm: BTreeMap<u16, peers::PeerLink>,
    /// The (node, config checksum) pairs whose other config was written to the cluster log: a
    /// refused node tries again every second, and is logged once.
    refusals_logged: BTreeSet<(u16, u64)>,
    log: ClusterLog,
    next_link: u64,
    /// ENTER SINGLE USER MODE (the API node) or EXIT (0) asked here, until every started data
    /// node reports it (see [`single_user_reply`]).
    single_user_asked: Option<u16>,
    /// The backup this server coordinates, or coordinated last (`backup.rs`), and when it
    /// began.
    backup: Option<(crate::backup_round::BackupRound, Instant)>,
    /// The outcomes of the rounds before it, by token (the last few), for a START BACKUP
    /// still waiting when another began.
    backup_done: Vec<(u64, backup::Outcome)>,
    /// The highest backup id this server gave.
    backup_last_id: u32,
    /// ALL RESTART without `-n`: the data nodes restarted (each with the report link it had
    /// then), told to start together once every one is back and waiting in NOT_STARTED
    /// ([`release_restarted_together`]).
    start_together: Option<StartTogether>,
}

#[derive(Debug, Default)]
struct DataNode {
    link: Option<ReportLink>,
    reserved_until: Option<Instant>,
    /// STOP asked for this node; the next report's reply says so.
    stop_requested: bool,
    /// RESTART asked for this node (how it is to start again); the next report's reply says so.
    restart_requested: Option<RestartRequest>,
    /// The STOP or RESTART is of every data node (SHUTDOWN, ALL STOP, ALL RESTART): the reply
    /// says `system: 1`, and the nodes leave together once all saved what they answered.
    system_stop: bool,
    /// START asked for this node, waiting in NOT_STARTED; the next report's reply says so.
    start_requested: bool,
}

/// A data node's live report connection and what it last said.
#[derive(Debug)]
struct ReportLink {
    id: u64,
    address: String,
    state: NodeState,
    version: String,
    pid: u32,
    /// The node runs under an angel that starts it again (RESTART is refused without one).
    angel: bool,
    connected: BTreeSet<u16>,
    data_memory_used: u64,
    data_memory_total: u64,
    /// The figures of `node_report::FIGURES` it last reported, by name (empty before the
    /// first report).
    figures: BTreeMap<&'static str, u64>,
    /// The data nodes it last reported alive.
    alive: BTreeSet<u16>,
    /// The restart it reported stopping for (asked through this server or another one).
    restarting: Option<RestartRequest>,
    /// Single user mode: the API node it reported letting in, 0 when not in that mode.
    single_user: u16,
    /// Its part of the last backup it took part in, and the highest backup id it has.
    backup: Option<BackupProgress>,
    backup_last: u32,
    /// When its memory and backup reports are next due in the cluster log.
    periodic: periodic::Periodic,
}

/// How long ALL RESTART waits, once every data node it restarted has stopped, for all to come
/// back before it starts those that did.
pub const START_TOGETHER_WAIT: Duration = Duration::from_secs(120);

/// An ALL RESTART waiting for its data nodes to come back.
#[derive(Debug)]
struct StartTogether {
    /// Each node restarted and not started yet, with the report link it had then.
    links: BTreeMap<u16, u64>,
    /// When the last of them stopped (their old links all closed).
    all_gone: Option<Instant>,
    /// The nodes back were started (all came back, or the wait ran out): each one still
    /// missing is started as it comes back.
    released: bool,
}

/// ALL RESTART: once every data node it restarted has stopped and is back (a report link other
/// than the one it had), or START_TOGETHER_WAIT after they all stopped, those waiting in
/// NOT_STARTED are told to start (their next report's reply says so); one still missing then
/// is started when it comes back. A node back in another state (its angel started it after a
/// failure) is left as it is.
fn release_restarted_together(state: &mut State, me: u16) -> Vec<Event> {
    let Some(together) = state.start_together.as_mut() else {
        return Vec::new();
    };
    let link_of = |id: &u16| (state.data.get(id)).and_then(|n| n.link.as_ref());
    // Not while one still stops: the others would start into a cluster still stopping.
    if (together.links.iter()).any(|(id, old)| link_of(id).is_some_and(|s| s.id == *old)) {
        return Vec::new();
    }
    let now = Instant::now();
    let gone = *together.all_gone.get_or_insert(now);
    let back = |id: &u16| link_of(id).is_some();
    let missing: Vec<u16> = together
        .links
        .keys()
        .copied()
        .filter(|id| !back(id))
        .collect();
    if !together.released && !missing.is_empty() && now < gone + START_TOGETHER_WAIT {
        return Vec::new();
    }
    let waiting: Vec<u16> = (together.links.keys().copied())
        .filter(|id| link_of(id).is_some_and(|s| s.state == NodeState::NotStarted))
        .collect();
    let first = !together.released;
    together.released = true;
    together.links.retain(|id, _| !back(id));
    if together.links.is_empty() {
        state.start_together = None;
    }
    for id in &waiting {
        if let Some(n) = state.data.get_mut(id) {
            n.start_requested = true;
        }
    }
    let list = |ids: &[u16]| {
        ids.iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (severity, text) = match (first, missing.is_empty()) {
        (true, true) => (
            Severity::Info,
            format!(
                "Data nodes {} restarted: starting them together",
                list(&waiting)
            ),
        ),
        (true, false) => (
            Severity::Alert,
            format!(
                "Data nodes {} did not come back within {START_TOGETHER_WAIT:?} of ALL \
                 RESTART: starting {} without them (each starts when it comes back)",
                list(&missing),
                list(&waiting)
            ),
        ),
        (false, _) if waiting.is_empty() => return Vec::new(),
        (false, _) => (
            Severity::Info,
            format!(
                "Data nodes {} came back after ALL RESTART: starting them",
                list(&waiting)
            ),
        ),
    };
    vec![Event::new(me, Category::Startup, 1, severity, text)]
}

/// START or STOP of `ids`: an ALL RESTART no longer starts them.
fn leave_start_together(state: &mut State, ids: &BTreeSet<u16>) {
    if let Some(together) = state.start_together.as_mut() {
        together.links.retain(|id, _| !ids.contains(id));
        if together.links.is_empty() {
            state.start_together = None;
        }
    }
}

/// The started data nodes, each with the API node its single user mode lets in (0: none), as
/// they last reported.
fn started_single_user(state: &State) -> impl Iterator<Item = (u16, u16)> + '_ {
    state.data.iter().filter_map(|(&id, n)| {
        let link = n.link.as_ref().filter(|s| s.state == NodeState::Started)?;
        Some((id, link.single_user))
    })
}

/// The cluster's single user mode: the API node every started data node lets in, if they all
/// report the same one.
fn single_user_mode(state: &State) -> Option<u16> {
    let mut modes = started_single_user(state).map(|(_, api)| api);
    let first = modes.next()?;
    (first != 0 && modes.all(|api| api == first)).then_some(first)
}

/// What the reply to data node `node`'s report says of single user mode: the mode asked
/// through this server until every started data node reports it; after that, to a node still
/// starting (started again since), the mode every started data node is in. `None`: nothing (a
/// started node is never told a mode nobody asked of this server: with several servers, each
/// would undo the others' requests).
fn single_user_reply(state: &mut State, node: u16) -> Option<u16> {
    if let Some(asked) = state.single_user_asked {
        let mut started = started_single_user(state).peekable();
        if started.peek().is_some() && started.all(|(_, api)| api == asked) {
            drop(started);
            state.single_user_asked = None;
        }
        return Some(asked);
    }
    let link = state.data.get(&node)?.link.as_ref()?;
    if link.state == NodeState::Started {
        return None;
    }
    let api = single_user_mode(state)?;
    (link.single_user != api).then_some(api)
}

/// NDB's checkpoint events, from the change between two reports of the master: `Global
/// checkpoint N started` (CHECKPOINT 9), `completed` (10), `Local checkpoint N started` and
/// `completed` (7). Reports come every 200 ms: a global checkpoint that started and completed
/// between two is logged by its newest number only.
fn checkpoint_events(
    node: u16,
    before: &BTreeMap<&'static str, u64>,
    now: &BTreeMap<&'static str, u64>,
) -> Vec<Event> {
    let get = |figures: &BTreeMap<&'static str, u64>, name| figures.get(name).copied();
    let mut events = Vec::new();
    let mut push = |priority, text: String| {
        events.push(Event::new(
            node,
            Category::Checkpoint,
            priority,
            Severity::Info,
            text,
        ));
    };
    let grew = |name| match (get(before, name), get(now, name)) {
        (Some(old), Some(new)) if new > old => Some(new),
        _ => None,
    };
    if let Some(gci) = grew("gci_current") {
        push(9, format!("Global checkpoint {gci} started"));
    }
    if let Some(gci) = grew("gci_restorable") {
        push(10, format!("Global checkpoint {gci} completed"));
    }
    let running = |figures| get(figures, "lcp_running") == Some(1);
    let lcp = get(now, "lcp_id").unwrap_or(0);
    let started = grew("lcp_id");
    if let Some(id) = started {
        let restorable = get(now, "gci_restorable").unwrap_or(0);
        push(
            7,
            format!("Local checkpoint {id} started. Oldest restorable GCI = {restorable}"),
        );
    }
    if !running(now) && (started.is_some() || running(before)) && lcp > 0 {
        push(7, format!("Local checkpoint {lcp} completed"));
    }
    events
}

/// NDB's `Node shutdown completed[, restarting][, no start][, initial]`.
fn shutdown_completed_text(restart: Option<RestartRequest>) -> String {
    let mut text = String::from("Node shutdown completed");
    if let Some(restart) = restart {
        text.push_str(", restarting");
        if restart.no_start {
            text.push_str(", no start");
        }
        if restart.initial {
            text.push_str(", initial");
        }
    }
    text
}

impl Server {
    pub fn new(setup: ServerSetup) -> Server {
        let data = setup
            .config
            .data_nodes
            .iter()
            .map(|n| (n.node_id.0, DataNode::default()))
            .collect();
        Server {
            identity: ConfigIdentity::of(&setup.config, &setup.config_text),
            config_text: setup.config_text,
            config: setup.config,
            me: setup.me,
            state: Mutex::new(State {
                data,
                api: BTreeMap::new(),
                mgm: BTreeMap::new(),
                refusals_logged: BTreeSet::new(),
                log: setup.log,
                next_link: 1,
                single_user_asked: None,
                backup: None,
                backup_done: Vec::new(),
                backup_last_id: 0,
                start_together: None,
            }),
            changed: Condvar::new(),
            shutdown: AtomicBool::new(false),
            connections: AtomicUsize::new(0),
            address: Mutex::new(None),
            tls: ServerTls::plain(setup.me),
        }
    }

    /// Serves `start tls` with these keys, and refuses plain clients when they require it.
    pub fn with_tls(mut self, tls: ServerTls) -> Server {
        self.tls = tls;
        self
    }

    /// This management node's id.
    pub fn me(&self) -> NodeId {
        self.me
    }

    /// The config served.
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// The identity of the config served.
    pub fn identity(&self) -> ConfigIdentity {
        self.identity
    }

    /// This server's own keys, presented when it reports to the other management servers.
    pub fn client_tls(&self) -> crate::tls::ClientTls {
        crate::tls::ClientTls::with_keys(self.tls.keys.clone(), false)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic in one connection's thread must not take the server down with it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes `event` to the cluster log.
    pub fn log(&self, event: Event) {
        self.lock().log.write(&event);
    }

    /// Accepts connections until the process exits; each is served on its own thread.
    pub fn serve(self: &Arc<Self>, listener: TcpListener) {
        *self.address.lock().unwrap_or_else(|e| e.into_inner()) = listener.local_addr().ok();
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            if self.connections.fetch_add(1, Ordering::AcqRel) >= CONNECTIONS_MAX {
                self.connections.fetch_sub(1, Ordering::AcqRel);
                let mut s = stream;
                let _ = Message::error_reply("connect", "too many connections to ndb_mgmd")
                    .write_to(&mut s);
                continue;
            }
            let server = self.clone();
            let spawned = std::thread::Builder::new()
                .name("mgm-conn".into())
                .spawn(move || {
                    server.serve_connection(stream);
                    server.connections.fetch_sub(1, Ordering::AcqRel);
                });
            if spawned.is_err() {
                self.connections.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    fn serve_connection(&self, stream: TcpStream) {
        let peer = stream
            .peer_addr()
            .map(|a| a.ip().to_string())
            .unwrap_or_default();
        let _ = stream.set_read_timeout(Some(IDLE_TIMEOUT));
        // Plain at first; `start tls` makes it TLS (see `crate::tls`).
        let mut conn = BufReader::new(NodeStream::Plain(stream));
        // The data node whose report link this connection is, once it reported.
        let mut link: Option<(u16, u64)> = None;
        loop {
            let request = match Message::read_from(&mut conn) {
                Ok(Some(request)) => request,
                Ok(None) => break,
                Err(e) => {
                    if let Some((node, _)) = link {
                        tracing::warn!("data node {node}'s report link ended: {e}");
                    } else if e.kind() == std::io::ErrorKind::InvalidData {
                        let _ = Message::error_reply("?", e).write_to(conn.get_mut());
                    }
                    break;
                }
            };
            let reply = match self.tls.screen(&request, conn, &peer) {
                Screened::Serve(served) => {
                    conn = served;
                    self.handle(&request, &peer, &mut link)
                }
                Screened::Answer(served, reply) => {
                    conn = served;
                    reply
                }
                Screened::Upgraded(upgraded) => {
                    conn = upgraded;
                    continue;
                }
                Screened::Close(answer) => {
                    if let Some((mut closing, reply)) = answer {
                        let _ = reply.write_to(closing.get_mut());
                    }
                    break;
                }
            };
            let writer = conn.get_mut();
            if link.is_some() {
                let _ = writer.socket().set_read_timeout(Some(REPORT_TIMEOUT));
            }
            if reply.write_to(writer).is_err() {
                break;
            }
            if request.command == "stop" && self.shutdown.load(Ordering::Acquire) {
                break;
            }
        }
        if let Some((node, id)) = link {
            self.link_closed(node, id);
        }
    }

    fn handle(&self, request: &Message, peer: &str, link: &mut Option<(u16, u64)>) -> Message {
        let command = request.command.as_str();
        let result = match command {
            "get config" => self.get_config(request),
            "report" => self.report(request, peer, link),
            "get status" => Ok(self.status().to_message(Message::ok_reply(command))),
            "stop" => self.stop(request),
            "restart" => self.restart(request),
            "start" => self.start(request),
            "enter single user" => self.enter_single_user(request),
            "exit single user" => self.exit_single_user(request),
            "start backup" => self.start_backup(request),
            "abort backup" => self.abort_backup(request),
            "report memoryusage" => Ok(self.memory_usage()),
            "set clusterlog" => self.set_clusterlog(request),
            "set loglevel" => self.set_loglevel(request),
            _ => Err(format!("unknown command {command:?}")),
        };
        result.unwrap_or_else(|why| Message::error_reply(command, why))
    }

    fn get_config(&self, request: &Message) -> Result<Message, String> {
        let node_id: Option<u16> = request.parse("nodeid")?;
        let source = self.config.source.display();
        let mut reply = Message::ok_reply(&request.command);
        match request.get("nodetype") {
            Some("ndbd") => {
                let mut state = self.lock();
                let id = match node_id {
                    Some(id) => {
                        if !state.data.contains_key(&id) {
                            return Err(format!(
                                "node {id} is not a data node ([ndbd] NodeId) in {source}"
                            ));
                        }
                        state = self.wait_previous_link_closed(state, id);
                        if let Some(s) = state.data.get(&id).and_then(|n| n.link.as_ref()) {
                            return Err(format!(
                                "node {id} is already connected (from {}, pid {})",
                                s.address, s.pid
                            ));
                        }
                        // Reserved so that a node asking for any id does not get this one
                        // before this node's first report (an explicit id is not refused for a
                        // reservation: a node restarted at once must get its id back).
                        if let Some(node) = state.data.get_mut(&id) {
                            node.reserved_until = Some(Instant::now() + RESERVATION);
                        }
                        id
                    }
                    None => {
                        let now = Instant::now();
                        let (&id, node) = state
                            .data
                            .iter_mut()
                            .find(|(_, n)| {
                                n.link.is_none() && n.reserved_until.is_none_or(|t| t < now)
                            })
                            .ok_or_else(|| format!("every data node id of {source} is in use"))?;
                        node.reserved_until = Some(now + RESERVATION);
                        id
                    }
                };
                reply.push("nodeid", id);
            }
            Some("api") => {
                if let Some(id) = node_id {
                    if self.config.api_slot(NodeId(id)).is_none() {
                        return Err(format!("node {id} is not an [api] slot in {source}"));
                    }
                }
            }
            Some("mgm") => {}
            other => return Err(format!("nodetype {other:?}: expected ndbd, api or mgm")),
        }
        Ok(reply.with_body(self.config_text.clone().into_bytes()))
    }

    fn report(
        &self,
        request: &Message,
        peer: &str,
        link: &mut Option<(u16, u64)>,
    ) -> Result<Message, String> {
        let node: u16 = request.parse("nodeid")?.ok_or("report without nodeid")?;
        let version = request.get("version").unwrap_or("unknown").to_string();
        if let Some(theirs) = ConfigIdentity::from_message(request)? {
            if theirs != self.identity {
                return Err(self.refuse_other_config(request, node, &theirs, peer));
            }
        }
        match request.get("nodetype") {
            Some("api") => {
                if self.config.api_slot(NodeId(node)).is_none() {
                    return Err(format!("node {node} is not an [api] slot"));
                }
                let mut state = self.lock();
                let me = self.me.0;
                state.api.insert(node, (version.clone(), peer.to_string()));
                let log = &mut state.log;
                let c = Category::Connection;
                log.write(&Event::new(
                    me,
                    c,
                    8,
                    Severity::Info,
                    format!("Node {node} Connected"),
                ));
                log.write(&Event::new(
                    me,
                    c,
                    8,
                    Severity::Info,
                    format!("Node {node}: API {version}"),
                ));
                Ok(Message::ok_reply(&request.command))
            }
            Some("ndbd") => self.data_node_report(request, node, version, peer, link),
            Some("mgm") => self.peer_report(request, node, version, peer, link),
            other => Err(format!("nodetype {other:?}: expected ndbd, api or mgm")),
        }
    }

    fn data_node_report(
        &self,
        request: &Message,
        node: u16,
        version: String,
        peer: &str,
        link: &mut Option<(u16, u64)>,
    ) -> Result<Message, String> {
        let reported = match request.get("status") {
            Some("NOT_STARTED") => NodeState::NotStarted,
            Some("STARTING") => NodeState::Starting,
            Some("STARTED") => NodeState::Started,
            Some("STOPPING") => NodeState::ShuttingDown,
            other => {
                return Err(format!(
                    "status {other:?}: expected NOT_STARTED, STARTING, STARTED or STOPPING"
                ))
            }
        };
        let connected: BTreeSet<u16> = request
            .get("connected")
            .unwrap_or("")
            .split(',')
            .filter_map(|n| n.trim().parse().ok())
            .collect();
        let alive: BTreeSet<u16> = request
            .get("alive")
            .unwrap_or("")
            .split(',')
            .filter_map(|n| n.trim().parse().ok())
            .collect();
        let single_user: u16 = request.parse("singleuser")?.unwrap_or(0);
        let mut figures = BTreeMap::new();
        for figure in FIGURES {
            if let Some(value) = request.parse::<u64>(&format!("stat.{}", figure.name))? {
                figures.insert(figure.name, value);
            }
        }
        let mut guard = self.lock();
        let state = &mut *guard;
        let me = self.me.0;
        // The master (QMGR's president: the started data node with the lowest id) reports the
        // cluster's checkpoints, as NDB's master DIH does.
        let master = state
            .data
            .iter()
            .find(|(_, n)| {
                n.link
                    .as_ref()
                    .is_some_and(|s| s.state == NodeState::Started)
            })
            .map(|(&id, _)| id);
        let record = state
            .data
            .get_mut(&node)
            .ok_or_else(|| format!("node {node} is not a data node"))?;
        match (&record.link, *link) {
            (Some(s), Some((n, id))) if n == node && s.id == id => {}
            (Some(s), _) => {
                return Err(format!(
                    "node {node} is already connected (from {}, pid {})",
                    s.address, s.pid
                ))
            }
            (None, Some((n, _))) if n != node => {
                return Err(format!("this connection reports for node {n}, not {node}"))
            }
            (None, _) => {
                let id = state.next_link;
                state.next_link += 1;
                record.link = Some(ReportLink {
                    id,
                    address: peer.to_string(),
                    state: NodeState::NoContact,
                    version: version.clone(),
                    pid: 0,
                    angel: false,
                    connected: BTreeSet::new(),
                    data_memory_used: 0,
                    data_memory_total: 0,
                    figures: BTreeMap::new(),
                    alive: BTreeSet::new(),
                    restarting: None,
                    single_user: 0,
                    backup: None,
                    backup_last: 0,
                    periodic: periodic::Periodic::default(),
                });
                record.reserved_until = None;
                *link = Some((node, id));
                let text = format!("Node {node} Connected");
                state.log.write(&Event::new(
                    me,
                    Category::Connection,
                    8,
                    Severity::Info,
                    text,
                ));
            }
        }
        let live = record.link.as_mut().ok_or("no report link")?;
        let mut events = Vec::new();
        if live.state != reported {
            let event = match reported {
                NodeState::Starting => Some((
                    Category::Startup,
                    format!("Start initiated (version {version})"),
                )),
                NodeState::Started => {
                    Some((Category::Startup, format!("Started (version {version})")))
                }
                NodeState::ShuttingDown => {
                    Some((Category::Shutdown, "Node shutdown initiated".to_string()))
                }
                _ => None,
            };
            if let Some((category, text)) = event {
                events.push(Event::new(node, category, 1, Severity::Info, text));
            }
        }
        for peer_node in connected.difference(&live.connected) {
            let text = format!("Communication to Node {peer_node} opened");
            events.push(Event::new(
                node,
                Category::Connection,
                8,
                Severity::Info,
                text,
            ));
        }
        for peer_node in live.connected.difference(&connected) {
            let text = format!("Communication to Node {peer_node} closed");
            events.push(Event::new(
                node,
                Category::Connection,
                8,
                Severity::Info,
                text,
            ));
        }
        // A started node's view of who is alive: one that leaves it has failed, as each
        // survivor reports it (NDB's Disconnected, CONNECTION 8, and NODE_FAILREP, NODERESTART
        // 8: seen with `CLUSTERLOG NODERESTART=8` or more).
        if !live.figures.is_empty() && live.state == NodeState::Started {
            for gone in live.alive.difference(&alive) {
                for (category, text) in [
                    (Category::Connection, format!("Node {gone} Disconnected")),
                    (Category::NodeRestart, format!("Node {gone} has failed")),
                ] {
                    events.push(Event::new(node, category, 8, Severity::Alert, text));
                }
            }
            if master == Some(node) && reported == NodeState::Started {
                events.extend(checkpoint_events(node, &live.figures, &figures));
            }
        }
        live.alive = alive;
        live.figures = figures;
        live.state = reported;
        live.version = version;
        live.pid = request.parse("pid")?.unwrap_or(0);
        live.angel = request.get("angel") == Some("1");
        live.single_user = single_user;
        live.backup = BackupProgress::from_message(request);
        live.backup_last = request.parse("backup.last")?.unwrap_or(0);
        live.connected = connected;
        live.data_memory_used = request.parse("datamemory.used")?.unwrap_or(0);
        live.data_memory_total = request.parse("datamemory.total")?.unwrap_or(0);
        if reported == NodeState::Started {
            let every = (self.config.data_nodes.iter())
                .find(|d| d.node_id.0 == node)
                .map_or((0, 0), |d| {
                    (d.mem_report_frequency_s, d.backup_report_frequency_s)
                });
            let usage = periodic::Usage {
                used: live.data_memory_used,
                total: live.data_memory_total,
                backup: live.backup.as_ref(),
            };
            events.extend(live.periodic.events(node, every, usage, Instant::now()));
        }
        live.restarting = (reported == NodeState::ShuttingDown
            && request.get("restart") == Some("1"))
        .then(|| RestartRequest {
            initial: request.get("initial") == Some("1"),
            no_start: request.get("nostart") == Some("1"),
        });
        let reply = Message::ok_reply(&request.command);
        let reply = match (record.stop_requested, record.restart_requested) {
            (true, _) => reply
                .field("action", "stop")
                .field("system", u8::from(record.system_stop)),
            (false, Some(restart)) => reply
                .field("action", "restart")
                .field("initial", u8::from(restart.initial))
                .field("nostart", u8::from(restart.no_start))
                .field("system", u8::from(record.system_stop)),
            (false, None) if record.start_requested && reported == NodeState::NotStarted => {
                reply.field("action", "start")
            }
            (false, None) => {
                // A START is answered once: the node reports STARTING from now on.
                record.start_requested = false;
                reply.field("action", "none")
            }
        };
        let reply = match single_user_reply(state, node) {
            Some(api) => reply.field("singleuser", api),
            None => reply,
        };
        events.extend(release_restarted_together(state, me));
        events.extend(state.backup_advance(me));
        let reply = match state.backup_command(node) {
            Some(command) => reply.field("backup", command.encode()),
            None => reply,
        };
        for event in &events {
            state.log.write(event);
        }
        drop(guard);
        self.changed.notify_all();
        Ok(reply)
    }

    /// Waits (at most [`PREVIOUS_LINK_WAIT`]) until data node `id` has no report link, if its
    /// link is one of a process that is shutting down or was asked to stop or restart.
    fn wait_previous_link_closed<'a>(
        &'a self,
        mut state: MutexGuard<'a, State>,
        id: u16,
    ) -> MutexGuard<'a, State> {
        let deadline = Instant::now() + PREVIOUS_LINK_WAIT;
        loop {
            let ending = state.data.get(&id).is_some_and(|n| {
                n.link.as_ref().is_some_and(|s| {
                    s.state == NodeState::ShuttingDown
                        || n.stop_requested
                        || n.restart_requested.is_some()
                })
            });
            let now = Instant::now();
            if !ending || now >= deadline {
                return state;
            }
            state = self
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn link_closed(&self, node: u16, id: u64) {
        let mut guard = self.lock();
        let state = &mut *guard;
        if state.mgm.get(&node).is_some_and(|p| p.id == id) {
            state.mgm.remove(&node);
            let text = format!("Node {node} Disconnected");
            let event = Event::new(self.me.0, Category::Connection, 8, Severity::Alert, text);
            state.log.write(&event);
            return;
        }
        let Some(record) = state.data.get_mut(&node) else {
            return;
        };
        if record.link.as_ref().is_none_or(|s| s.id != id) {
            return;
        }
        let link = record.link.take();
        record.stop_requested = false;
        record.system_stop = false;
        record.start_requested = false;
        // The restart asked here, or the one the node reported (asked through another server).
        let restart = record
            .restart_requested
            .take()
            .or_else(|| link.as_ref().and_then(|s| s.restarting));
        let me = self.me.0;
        if link.is_some_and(|s| s.state == NodeState::ShuttingDown || restart.is_some()) {
            let text = shutdown_completed_text(restart);
            state.log.write(&Event::new(
                node,
                Category::Shutdown,
                1,
                Severity::Info,
                text,
            ));
        }
        let text = format!("Node {node} Disconnected");
        state.log.write(&Event::new(
            me,
            Category::Connection,
            8,
            Severity::Alert,
            text,
        ));
        for event in state.backup_advance(me) {
            state.log.write(&event);
        }
        drop(guard);
        self.changed.notify_all();
    }

    /// Every connected data node's last reported figures (`node_report::FIGURES`), by node id.
    pub fn figures(&self) -> BTreeMap<u16, BTreeMap<&'static str, u64>> {
        let state = self.lock();
        state
            .data
            .iter()
            .filter_map(|(&id, n)| Some((id, n.link.as_ref()?.figures.clone())))
            .collect()
    }

    /// Every node's state now.
    pub fn status(&self) -> ClusterStatus {
        let state = self.lock();
        let master = state
            .data
            .iter()
            .find(|(_, n)| {
                n.link
                    .as_ref()
                    .is_some_and(|s| s.state == NodeState::Started)
            })
            .map(|(&id, _)| id);
        let mut nodes = Vec::new();
        for data in &self.config.data_nodes {
            let id = data.node_id.0;
            let link = state.data.get(&id).and_then(|n| n.link.as_ref());
            nodes.push(NodeStatus {
                id,
                node_type: NodeType::Ndb,
                state: link.map_or(NodeState::NoContact, |s| s.state),
                version: link.map(|s| s.version.clone()),
                address: link.map(|s| s.address.clone()),
                node_group: Some(data.node_group),
                master: master == Some(id),
                config_host: Some(data.host_name.clone()).filter(|h| !h.is_empty()),
                single_user: link.is_some_and(|s| s.single_user != 0),
            });
        }
        let my_address = self
            .address
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map(|a| a.ip().to_string());
        for mgm in &self.config.mgm_nodes {
            let me = mgm.node_id == self.me;
            // Another server is connected while its link to this one is live (see `peers`).
            let peer = state.mgm.get(&mgm.node_id.0);
            nodes.push(NodeStatus {
                id: mgm.node_id.0,
                node_type: NodeType::Mgm,
                state: if me || peer.is_some() {
                    NodeState::Connected
                } else {
                    NodeState::NoContact
                },
                version: if me {
                    Some(VERSION.to_string())
                } else {
                    peer.map(|p| p.version.clone())
                },
                address: if me {
                    my_address.clone()
                } else {
                    peer.map(|p| p.address.clone())
                },
                node_group: None,
                master: false,
                config_host: Some(mgm.host_name.clone()).filter(|h| !h.is_empty()),
                single_user: false,
            });
        }
        // An API node is connected when a live data node reports a link to it.
        let linked: BTreeSet<u16> = state
            .data
            .values()
            .filter_map(|n| n.link.as_ref())
            .flat_map(|s| s.connected.iter().copied())
            .collect();
        let single_user = single_user_mode(&state);
        for slot in &self.config.api_slots {
            let id = slot.node_id.0;
            let connected = linked.contains(&id);
            let known = state.api.get(&id).filter(|_| connected);
            nodes.push(NodeStatus {
                id,
                node_type: NodeType::Api,
                state: if connected {
                    NodeState::Connected
                } else {
                    NodeState::NoContact
                },
                version: connected.then(|| known.map_or(VERSION, |k| k.0.as_str()).to_string()),
                address: known
                    .map(|k| k.1.clone())
                    .or_else(|| connected.then(|| slot.host_name.clone().unwrap_or_default())),
                node_group: None,
                master: false,
                config_host: slot.host_name.clone(),
                single_user: single_user == Some(id),
            });
        }
        nodes.sort_by_key(|n| n.id);
        ClusterStatus { nodes }
    }

    /// STOP: `node: 2,3` or `all: 1`; `mgm: 1` stops this server and the other management
    /// servers too (SHUTDOWN); `force: 1` stops a node whose node group would be left without a
    /// started node. Another management server named is asked to stop (see [`peers`]) once the
    /// data nodes are gone; the reply names it in `mgmstopped`.
    fn stop(&self, request: &Message) -> Result<Message, String> {
        let all = request.get("all") == Some("1");
        let force = request.get("force") == Some("1");
        let with_mgm = request.get("mgm") == Some("1");
        let mut targets: BTreeSet<u16> = BTreeSet::new();
        let mut stop_me = with_mgm;
        let mut peers_named: BTreeSet<u16> = BTreeSet::new();
        for (id, kind) in self.listed_nodes(request)? {
            match kind {
                Some(NodeKind::Data) => {
                    targets.insert(id);
                }
                Some(NodeKind::Mgm) if id == self.me.0 => stop_me = true,
                Some(NodeKind::Mgm) => {
                    peers_named.insert(id);
                }
                Some(NodeKind::Api) => {
                    return Err(format!(
                        "Node {id} is an API node: stop its process instead"
                    ))
                }
                None => return Err(format!("Node {id} is not a node of the cluster")),
            }
        }
        let mut state = self.lock();
        if all {
            targets.extend(
                state
                    .data
                    .iter()
                    .filter(|(_, n)| n.link.is_some())
                    .map(|(&id, _)| id),
            );
        }
        for &id in &targets {
            if state.data.get(&id).is_none_or(|n| n.link.is_none()) && !all {
                return Err(format!("Node {id} is not connected: nothing to stop"));
            }
        }
        if let Some(id) = peers_named.iter().find(|id| !state.mgm.contains_key(id)) {
            return Err(format!(
                "Node {id} is a management server not connected to this one: nothing to stop"
            ));
        }
        // SHUTDOWN stops every management server this one is linked to.
        let peers: Vec<(u16, String)> = state
            .mgm
            .iter()
            .filter(|(id, _)| with_mgm || peers_named.contains(id))
            .map(|(&id, p)| (id, p.address.clone()))
            .collect();
        if targets.is_empty() && !stop_me && peers.is_empty() {
            return Err("no data node is connected: nothing to stop".into());
        }
        if !all && !force {
            self.check_groups_survive(&state, &targets)?;
        }
        // A stop of every data node, however named, is a system stop (the nodes leave
        // together, see `DataNode::system_stop`).
        let system = all
            || (state.data.iter())
                .filter(|(_, n)| n.link.is_some())
                .all(|(id, _)| targets.contains(id));
        for &id in &targets {
            if let Some(n) = state.data.get_mut(&id) {
                n.stop_requested = true;
                n.system_stop = system;
            }
        }
        // Stopped: an ALL RESTART waiting to start them does not any more.
        leave_start_together(&mut state, &targets);
        drop(self.wait_gone(state, &targets)?);
        peers::stop(self, &peers)?;
        let stopped: Vec<String> = targets.iter().map(u16::to_string).collect();
        let mut reply = Message::ok_reply(&request.command).field("stopped", stopped.join(","));
        if !peers.is_empty() {
            let ids: Vec<String> = peers.iter().map(|(id, _)| id.to_string()).collect();
            reply.push("mgmstopped", ids.join(","));
        }
        if stop_me {
            reply.push("mgm", self.me.0);
            self.log(Event::new(
                self.me.0,
                Category::Shutdown,
                1,
                Severity::Info,
                "Node shutdown initiated",
            ));
            self.shutdown.store(true, Ordering::Release);
        }
        Ok(reply)
    }

    /// Waits (at most [`STOP_WAIT`]) until none of `targets` has a report link. A target that
    /// reports its stop put off (the other member of its node group failed or must stop during
    /// it) ends the wait with an error: it serves on, and stops once another member serves.
    fn wait_gone<'a>(
        &'a self,
        state: MutexGuard<'a, State>,
        targets: &BTreeSet<u16>,
    ) -> Result<MutexGuard<'a, State>, String> {
        let left = |state: &State| {
            let link = |id: &u16| state.data.get(id).and_then(|n| n.link.as_ref());
            let linked = |id: &&u16| link(id).is_some();
            let put_off =
                |id: &&u16| link(id).is_some_and(|l| l.figures.get("stop_put_off") == Some(&1));
            if let Some(id) = targets.iter().filter(linked).find(put_off) {
                return Err(format!(
                    "Node {id}: Node shutdown would cause system crash: no other member of its \
                     node group serves (one failed, must stop, or still restarts), so its stop is \
                     put off; it serves on, and stops once another member of its group serves"
                ));
            }
            Ok(targets.iter().filter(linked).copied().collect())
        };
        let timed_out = |left: &str| format!("node(s) {left} did not stop within {STOP_WAIT:?}");
        self.wait_for_nodes(state, STOP_WAIT, left, timed_out)
    }

    /// Waits, at most `wait`, until `left` names no node (reports change what it sees); an
    /// error `left` gives ends the wait with it. On a timeout, the error is `timed_out` of the
    /// nodes left, comma-separated.
    fn wait_for_nodes<'a>(
        &'a self,
        mut state: MutexGuard<'a, State>,
        wait: Duration,
        left: impl Fn(&State) -> Result<Vec<u16>, String>,
        timed_out: impl Fn(&str) -> String,
    ) -> Result<MutexGuard<'a, State>, String> {
        let deadline = Instant::now() + wait;
        loop {
            let nodes = left(&state)?;
            if nodes.is_empty() {
                return Ok(state);
            }
            let now = Instant::now();
            if now >= deadline {
                let ids: Vec<String> = nodes.iter().map(u16::to_string).collect();
                return Err(timed_out(&ids.join(", ")));
            }
            state = self
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// ENTER SINGLE USER MODE: `node: 5`, an API node of the config. Every started data node
    /// is told through its report replies; answered once each reports the mode (at most
    /// [`SINGLE_USER_WAIT`]), as NDB's "Single user mode entered".
    fn enter_single_user(&self, request: &Message) -> Result<Message, String> {
        let api: u16 = request.parse("node")?.ok_or("no node id given")?;
        match self.config.node_kind(NodeId(api)) {
            Some(NodeKind::Api) => {}
            Some(_) => return Err(format!("Node {api} is not an API node")),
            None => return Err(format!("Node {api} is not a node of the cluster")),
        }
        let mut state = self.lock();
        if started_single_user(&state).next().is_none() {
            return Err("no data node is started".into());
        }
        state.single_user_asked = Some(api);
        let text = format!("Entering single user mode, access for API node {api} only");
        let event = Event::new(self.me.0, Category::Startup, 7, Severity::Info, text);
        state.log.write(&event);
        let left = |state: &State| {
            if started_single_user(state).next().is_none() {
                return Err("no data node is started".to_string());
            }
            let others = started_single_user(state).filter(|&(_, mode)| mode != api);
            Ok(others.map(|(id, _)| id).collect())
        };
        let timed_out = |left: &str| {
            format!(
                "node(s) {left} did not enter single user mode within {SINGLE_USER_WAIT:?} \
                 (they are still asked to; EXIT SINGLE USER MODE withdraws it)"
            )
        };
        let mut state = self.wait_for_nodes(state, SINGLE_USER_WAIT, left, timed_out)?;
        let text = format!("Entered single user mode, node {api} has exclusive access");
        let event = Event::new(self.me.0, Category::Startup, 7, Severity::Info, text);
        state.log.write(&event);
        Ok(Message::ok_reply(&request.command))
    }

    /// EXIT SINGLE USER MODE: every data node is told through its report replies; answered at
    /// once, as NDB's "Exiting single user mode in progress".
    fn exit_single_user(&self, request: &Message) -> Result<Message, String> {
        let mut state = self.lock();
        state.single_user_asked = Some(0);
        let event = Event::new(
            self.me.0,
            Category::Startup,
            7,
            Severity::Info,
            "Exiting single user mode".to_string(),
        );
        state.log.write(&event);
        Ok(Message::ok_reply(&request.command))
    }

    /// The node ids of a `node: 2,3` field with the kind of node each is in the config; a part
    /// that is no node id is an error naming it.
    fn listed_nodes(&self, request: &Message) -> Result<Vec<(u16, Option<NodeKind>)>, String> {
        request
            .get("node")
            .unwrap_or("")
            .split(',')
            .filter(|p| !p.is_empty())
            .map(|part| {
                let id: u16 = part
                    .trim()
                    .parse()
                    .map_err(|_| format!("{part:?} is not a node id"))?;
                Ok((id, self.config.node_kind(NodeId(id))))
            })
            .collect()
    }

    /// The data node ids of a `node: 2,3` field; anything else is an error naming it.
    fn data_node_ids(&self, request: &Message, verb: &str) -> Result<BTreeSet<u16>, String> {
        let mut ids = BTreeSet::new();
        for (id, kind) in self.listed_nodes(request)? {
            match kind {
                Some(NodeKind::Data) => {
                    ids.insert(id);
                }
                Some(NodeKind::Mgm) => {
                    return Err(format!(
                        "Node {id} is a management server: rndb's ndb_mgmd cannot {verb} it"
                    ))
                }
                Some(NodeKind::Api) => {
                    return Err(format!(
                        "Node {id} is an API node: only data nodes can be {verb}ed"
                    ))
                }
                None => return Err(format!("Node {id} is not a node of the cluster")),
            }
        }
        Ok(ids)
    }

    /// RESTART: `node: 2,3` or `all: 1`, `initial: 1` (`-i`), `nostart: 1` (`-n`), `force: 1`
    /// (`-f`). Each node stops gracefully, as on STOP, and its angel starts it again; the reply
    /// comes once every node's report link has closed. ALL RESTART is a system restart: every
    /// data node stops, each comes back waiting in NOT_STARTED (as `-n`), and once all are
    /// back they are told to start together (unless `-n`: then `ALL START` does), so that none
    /// starts into a cluster still stopping.
    fn restart(&self, request: &Message) -> Result<Message, String> {
        let all = request.get("all") == Some("1");
        let mut targets = self.data_node_ids(request, "restart")?;
        if all {
            let state = self.lock();
            targets.extend(
                (state.data.iter())
                    .filter(|(_, n)| n.link.is_some())
                    .map(|(&id, _)| id),
            );
            if targets.is_empty() {
                return Err("no data node is connected: nothing to restart".into());
            }
        }
        if targets.is_empty() {
            return Err("RESTART names no node".into());
        }
        let no_start = request.get("nostart") == Some("1");
        let restart = RestartRequest {
            initial: request.get("initial") == Some("1"),
            // A system restart: every node waits for the others before it starts.
            no_start: no_start || all,
        };
        let mut state = self.lock();
        if let Some(together) = &state.start_together {
            let ids: Vec<String> = together.links.keys().map(u16::to_string).collect();
            return Err(format!(
                "an ALL RESTART of data nodes {} is still waiting for them to come back (`ALL \
                 START` starts those waiting in NOT_STARTED)",
                ids.join(", ")
            ));
        }
        for &id in &targets {
            let node = state.data.get(&id);
            if node.is_none_or(|n| n.link.is_none()) {
                return Err(format!(
                    "Node {id} is not connected: nothing to restart (start its ndbd)"
                ));
            }
            if node.is_some_and(|n| n.stop_requested || n.restart_requested.is_some()) {
                return Err(format!("Node {id} is already stopping or restarting"));
            }
            if node.is_some_and(|n| n.link.as_ref().is_some_and(|s| !s.angel)) {
                return Err(format!(
                    "Node {id} runs without an angel (ndbd --foreground): nothing would start it \
                     again; STOP it and start its ndbd instead"
                ));
            }
        }
        if !all && request.get("force") != Some("1") {
            self.check_groups_survive(&state, &targets)?;
        }
        let links: BTreeMap<u16, u64> = (targets.iter())
            .filter_map(|&id| Some((id, state.data.get(&id)?.link.as_ref()?.id)))
            .collect();
        for &id in &targets {
            if let Some(n) = state.data.get_mut(&id) {
                n.restart_requested = Some(restart);
                n.system_stop = all;
            }
        }
        if all {
            // With -n the nodes wait for ALL START.
            state.start_together = (!no_start).then(|| StartTogether {
                links: links.clone(),
                all_gone: None,
                released: false,
            });
            let text = "Cluster system restart initiated";
            state.log.write(&Event::new(
                self.me.0,
                Category::Startup,
                1,
                Severity::Info,
                text,
            ));
            // A node may be back before the last one stops: each is gone once the link it had
            // is.
            let left = |state: &State| {
                let ids = links.iter().filter(|&(id, link)| {
                    (state.data.get(id))
                        .is_some_and(|n| n.link.as_ref().is_some_and(|s| s.id == *link))
                });
                Ok(ids.map(|(&id, _)| id).collect())
            };
            let timed_out =
                |left: &str| format!("node(s) {left} did not stop within {STOP_WAIT:?}");
            drop(self.wait_for_nodes(state, STOP_WAIT, left, timed_out)?);
        } else {
            drop(self.wait_gone(state, &targets)?);
        }
        let restarted: Vec<String> = targets.iter().map(u16::to_string).collect();
        Ok(Message::ok_reply(&request.command).field("restarted", restarted.join(",")))
    }

    /// START: `node: 2,3` or `all: 1`: data nodes waiting in NOT_STARTED start (their next
    /// report's reply says so). Answers at once, as NDB's does; a named node that is not
    /// waiting is an error.
    fn start(&self, request: &Message) -> Result<Message, String> {
        let mut targets = self.data_node_ids(request, "start")?;
        let all = request.get("all") == Some("1");
        let mut state = self.lock();
        let waiting = |n: &DataNode| {
            n.link
                .as_ref()
                .is_some_and(|s| s.state == NodeState::NotStarted)
        };
        if all {
            targets.extend(
                state
                    .data
                    .iter()
                    .filter(|(_, n)| waiting(n))
                    .map(|(&id, _)| id),
            );
            if targets.is_empty() {
                return Err("no data node is waiting in NOT_STARTED: nothing to start".into());
            }
        }
        if targets.is_empty() {
            return Err("START names no node".into());
        }
        for &id in &targets {
            let Some(node) = state.data.get(&id) else {
                continue;
            };
            match node.link.as_ref().map(|s| s.state) {
                None => {
                    return Err(format!(
                        "Node {id} is not connected: start its ndbd (with --nostart to hold it \
                         for START)"
                    ))
                }
                Some(NodeState::NotStarted) => {}
                Some(other) => {
                    return Err(format!(
                        "Node {id} is {}, not NOT_STARTED: START is for a node started with \
                         --nostart or restarted with RESTART -n",
                        other.as_str()
                    ))
                }
            }
        }
        for &id in &targets {
            if let Some(n) = state.data.get_mut(&id) {
                n.start_requested = true;
            }
        }
        // Started by hand: an ALL RESTART waiting to start them does not any more.
        let ids: BTreeSet<u16> = targets.iter().copied().collect();
        leave_start_together(&mut state, &ids);
        let started: Vec<String> = targets.iter().map(u16::to_string).collect();
        Ok(Message::ok_reply(&request.command).field("started", started.join(",")))
    }

    /// Refuses to stop the last started node of a node group (NDB: "Node shutdown would cause
    /// system crash"), unless every data node stops.
    fn check_groups_survive(&self, state: &State, targets: &BTreeSet<u16>) -> Result<(), String> {
        for group in &self.config.node_groups {
            let started_left = group.nodes.iter().any(|n| {
                !targets.contains(&n.0)
                    && state
                        .data
                        .get(&n.0)
                        .and_then(|d| d.link.as_ref())
                        .is_some_and(|s| s.state == NodeState::Started)
            });
            let stopping: Vec<u16> = group
                .nodes
                .iter()
                .map(|n| n.0)
                .filter(|n| targets.contains(n))
                .collect();
            if !stopping.is_empty() && !started_left {
                return Err(format!(
                    "Node shutdown would cause system crash: node group {} would have no started node left \
                     (stop it anyway with `{} STOP -f`, which stops every data node, or stop the whole \
                     cluster with SHUTDOWN)",
                    group.id, stopping[0]
                ));
            }
        }
        Ok(())
    }

    fn memory_usage(&self) -> Message {
        let state = self.lock();
        let mut reply = Message::ok_reply("report memoryusage");
        for (id, node) in &state.data {
            if let Some(s) = &node.link {
                reply.push(format!("node.{id}.datamemory.used"), s.data_memory_used);
                reply.push(format!("node.{id}.datamemory.total"), s.data_memory_total);
                for (name, value) in &s.figures {
                    reply.push(format!("node.{id}.{name}"), value);
                }
                if let Some(b) = &s.backup {
                    let phase = b.phase.map_or(0, |p| p as u8 + 1);
                    for (name, value) in [
                        ("backup.id", u64::from(b.id)),
                        ("backup.phase", u64::from(phase)),
                        ("backup.records", b.records),
                        ("backup.logrecords", b.log_records),
                        ("backup.bytes", b.data_bytes),
                        ("backup.logbytes", b.log_bytes),
                        ("backup.error", u64::from(b.error)),
                    ] {
                        reply.push(format!("node.{id}.{name}"), value);
                    }
                }
            }
        }
        reply
    }

    /// `severity: INFO|…` (absent: the whole log) and `mode: on|off|toggle|info`.
    fn set_clusterlog(&self, request: &Message) -> Result<Message, String> {
        let mut state = self.lock();
        let mode = request.get("mode").unwrap_or("info");
        let on = match mode {
            "on" => Some(true),
            "off" => Some(false),
            "toggle" | "info" => None,
            other => return Err(format!("mode {other:?}: expected on, off, toggle or info")),
        };
        if mode != "info" {
            match request.get("severity") {
                Some(name) => {
                    let severity = Severity::parse(name).ok_or_else(|| {
                        format!("{name:?} is not a severity (ALERT, CRITICAL, ERROR, WARNING, INFO, DEBUG)")
                    })?;
                    state.log.set_severity(severity, on);
                }
                None => state.log.enabled = on.unwrap_or(!state.log.enabled),
            }
        }
        Ok(Message::ok_reply(&request.command)
            .field("enabled", u8::from(state.log.enabled))
            .field("severities", state.log.describe_severities()))
    }

    /// `node: N|all`, `category: STARTUP`, `level: 0..15`.
    fn set_loglevel(&self, request: &Message) -> Result<Message, String> {
        let node = match request.get("node") {
            None | Some("all") => None,
            Some(n) => Some(
                n.parse::<u16>()
                    .map_err(|_| format!("{n:?} is not a node id"))?,
            ),
        };
        let name = request.get("category").unwrap_or("");
        let category = Category::parse(name).ok_or_else(|| {
            let known: Vec<&str> = Category::ALL.iter().map(|c| c.name()).collect();
            format!("{name:?} is not a category ({})", known.join(", "))
        })?;
        let level: u8 = request
            .parse("level")?
            .filter(|l| *l <= 15)
            .ok_or("the level must be 0..15")?;
        self.lock().log.set_threshold(category, node, level);
        Ok(Message::ok_reply(&request.command))
    }
}
