//! The listening socket and the handshakes of new connections.
//!
//! Handshakes run on short-lived threads, never on the execution thread, so a peer that
//! connects and then says nothing costs the node nothing but a thread for at most
//! [`HANDSHAKE_TIMEOUT`], and at most [`HANDSHAKES_IN_FLIGHT_MAX`] of them at once: beyond that
//! a new connection closes the oldest handshake not yet admitted (see `InFlight` and
//! [`crate::limits`]). An admitted link is handed to the execution thread through a channel and
//! a poller wake-up.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rndb_config::{ClusterConfig, LinkConfig, NodeId, TransporterKind};
use rndb_transporter::registry::server_handshake_tls;
use rndb_transporter::tcp::TcpLink;
use rndb_transporter::tls::io::{tls_link, NodeStream, TlsStream};
use rndb_transporter::tls::TlsSetup;
use rndb_transporter::{shm, LinkSettings, TransportError, Transporter};

use crate::limits::{
    ACCEPT_ERROR_PAUSE, EVICTIONS_IN_PROGRESS_MAX, EVICTION_END_WAIT_MAX, HANDSHAKES_IN_FLIGHT_MAX,
    HANDSHAKE_TIMEOUT, LISTEN_BACKLOG, OVERLOAD_LOG_INTERVAL,
};

/// Node ids with a live (or being admitted) link to this node, each with the token of its hello
/// (`Hello::token`; 0 for a link this node opened); the execution thread removes an id when its link
/// closes.
pub type Connected = Arc<Mutex<HashMap<NodeId, u64>>>;

/// How long binding the node's port waits for it to be released when it is in use.
const PREVIOUS_PROCESS_EXIT_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Binds the data node's port: ServerPort, or the derived port, on the address its HostName
/// resolves to (every address with TcpBind_INADDR_ANY). A port still in use after
/// `PREVIOUS_PROCESS_EXIT_WAIT` is a fatal error that says which.
pub fn bind(config: &ClusterConfig, me: NodeId) -> anyhow::Result<TcpListener> {
    let node = config.data_node(me).with_context(|| {
        format!(
            "node {me} is not a data node in {}",
            config.source.display()
        )
    })?;
    let port = config.data_node_port(me).unwrap_or_default();
    let host = node.host_name.as_str();
    let addr: SocketAddr = (host, port)
        .to_socket_addrs()
        .with_context(|| format!("resolve HostName={host} of node {me}"))?
        .min_by_key(|a| a.is_ipv6())
        .with_context(|| format!("HostName={host} of node {me} resolves to no address"))?;
    // TcpBind_INADDR_ANY: every address of the host, of HostName's family.
    let addr = if node.tcp_bind_inaddr_any {
        let any: std::net::IpAddr = if addr.is_ipv6() {
            std::net::Ipv6Addr::UNSPECIFIED.into()
        } else {
            std::net::Ipv4Addr::UNSPECIFIED.into()
        };
        SocketAddr::new(any, port)
    } else {
        addr
    };
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )
    .context("create listening socket")?;
    // Lets a restarted node bind while old connections linger in TIME_WAIT.
    socket.set_reuse_address(true).context("set SO_REUSEADDR")?;
    let mut bound = socket.bind(&addr.into());
    // The previous process of this node, killed with its angel (which the kernel then kills,
    // see `angel.rs`), may not have exited yet: its port is free within moments.
    let deadline = std::time::Instant::now() + PREVIOUS_PROCESS_EXIT_WAIT;
    while bound
        .as_ref()
        .is_err_and(|e| e.kind() == std::io::ErrorKind::AddrInUse)
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(50));
        bound = socket.bind(&addr.into());
    }
    if let Err(e) = bound {
        let what = if node.server_port.is_some() {
            "ServerPort"
        } else {
            "derived port (11860 + NodeId)"
        };
        if e.kind() == std::io::ErrorKind::AddrInUse {
            bail!("port {port} ({what} of node {me} in {}) is already in use on {host}: is another ndbd running?", config.source.display());
        }
        if e.kind() == std::io::ErrorKind::AddrNotAvailable {
            bail!(
                "HostName={host} of node {me} in {} is not an address of this host ({}): start \
                 node {me} on the host the config names",
                config.source.display(),
                addr.ip()
            );
        }
        bail!("bind {addr} ({what} of node {me}): {e}");
    }
    socket.listen(LISTEN_BACKLOG).context("listen")?;
    Ok(socket.into())
}

/// Accepts connections for ever, admitting each on its own thread.
// Each argument is one shared handle the handshake threads get a clone of.
#[allow(clippy::too_many_arguments)]
pub fn spawn_acceptor(
    listener: TcpListener,
    config: Arc<ClusterConfig>,
    me: NodeId,
    connected: Connected,
    links: Sender<Box<dyn Transporter>>,
    waker: Arc<mio::Waker>,
    tls: Arc<TlsSetup>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let in_flight = InFlight::default();
    let mut overload = OverloadLog::default();
    std::thread::Builder::new()
        .name("acceptor".into())
        .spawn(move || loop {
            let (stream, addr) = match listener.accept() {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, say: pause, so a lasting failure neither spins a
                    // core nor floods the log; the backlog keeps the waiting connections.
                    tracing::warn!("accept: {e}; retrying in {ACCEPT_ERROR_PAUSE:?}");
                    std::thread::sleep(ACCEPT_ERROR_PAUSE);
                    continue;
                }
            };
            let Some(slot) = in_flight.enter(&stream, addr, &mut overload) else {
                drop(stream);
                continue;
            };
            let job = Handshake {
                config: config.clone(),
                me,
                connected: connected.clone(),
                links: links.clone(),
                waker: waker.clone(),
                slot: slot.clone(),
                tls: tls.clone(),
            };
            let slot_id = slot.id;
            let in_flight_job = in_flight.clone();
            let spawned = std::thread::Builder::new()
                .name("handshake".into())
                .spawn(move || {
                    job.run(stream, addr);
                    in_flight_job.leave(&slot);
                });
            match spawned {
                Ok(thread) => in_flight.attach(slot_id, thread),
                Err(e) => {
                    // The closure (and the slot it would have given back) is gone with the error.
                    in_flight.remove(slot_id);
                    tracing::warn!(%addr, "closed connection: spawn handshake thread: {e}");
                }
            }
        })
}

/// A handshake in progress as the acceptor holds it: its state, a clone of its socket (to shut
/// it down when it is evicted) and its thread. The slot goes only once that thread has exited,
/// so the slots bound the threads, not just the handshakes.
#[derive(Debug)]
struct Slot {
    state: Arc<SlotState>,
    /// Dropped when the handshake ends, so that a connection the handshake closed is closed.
    socket: Option<TcpStream>,
    /// `None` until the thread is spawned.
    thread: Option<JoinHandle<()>>,
}

/// One handshake in progress, as its thread and the acceptor share it.
#[derive(Debug)]
struct SlotState {
    /// Names the slot in [`InFlight`]; fixed.
    id: u64,
    /// Set once the peer's HELLO was admitted: from then on the handshake is never evicted.
    admitted: AtomicBool,
    /// Set when the acceptor evicted this handshake to make room: its thread then logs nothing
    /// (the acceptor's rate-limited line counts it).
    evicted: AtomicBool,
    /// Set by the thread when its handshake has ended; the slot goes when the thread exits.
    left: AtomicBool,
}

/// The handshakes in progress, oldest first. When [`HANDSHAKES_IN_FLIGHT_MAX`] of them are not
/// yet admitted, a new connection evicts the oldest (its socket is shut down, so its thread's
/// read ends at once): a peer that holds connections open and says nothing cannot lock real
/// nodes out, since their HELLO comes right after connect and is admitted within a round trip.
/// Threads stay bounded: evicted handshakes count until their threads end, and at most
/// [`EVICTIONS_IN_PROGRESS_MAX`] may be ending at once, past which the acceptor waits (at most
/// [`EVICTION_END_WAIT_MAX`]) for one to end; new connections wait in the backlog meanwhile.
#[derive(Clone, Debug, Default)]
struct InFlight {
    /// Each handshake in progress, oldest first, with a clone of its socket to shut it down;
    /// the condition variable is notified whenever one ends.
    slots: Arc<(Mutex<VecDeque<Slot>>, Condvar)>,
    /// The id the next slot gets.
    next_id: Arc<AtomicU64>,
}

impl InFlight {
    /// Takes a slot for `stream`, evicting the oldest handshake not yet admitted when all are
    /// taken; `None` when the connection must be closed at once (logged through `overload`):
    /// every handshake in progress was admitted, or evicted threads did not end in time.
    fn enter(
        &self,
        stream: &TcpStream,
        addr: SocketAddr,
        overload: &mut OverloadLog,
    ) -> Option<Arc<SlotState>> {
        let (lock, ended) = &*self.slots;
        let mut slots = lock.lock().unwrap_or_else(|p| p.into_inner());
        let deadline = Instant::now() + EVICTION_END_WAIT_MAX;
        loop {
            // Slots whose thread has exited go.
            slots.retain(|slot| {
                !(slot.state.left.load(Ordering::Acquire)
                    && slot.thread.as_ref().is_some_and(|t| t.is_finished()))
            });
            let live = slots
                .iter()
                .filter(|slot| {
                    !slot.state.evicted.load(Ordering::Acquire)
                        && !slot.state.left.load(Ordering::Acquire)
                })
                .count();
            let threads_free = slots.len() < HANDSHAKES_IN_FLIGHT_MAX + EVICTIONS_IN_PROGRESS_MAX;
            if live < HANDSHAKES_IN_FLIGHT_MAX && threads_free {
                break;
            }
            if live >= HANDSHAKES_IN_FLIGHT_MAX {
                let oldest = slots.iter().find(|slot| {
                    let state = &slot.state;
                    !state.evicted.load(Ordering::Acquire)
                        && !state.left.load(Ordering::Acquire)
                        && !state.admitted.load(Ordering::Acquire)
                });
                let Some(slot) = oldest else {
                    overload.closed(addr);
                    return None;
                };
                slot.state.evicted.store(true, Ordering::Release);
                if let Some(socket) = &slot.socket {
                    let _ = socket.shutdown(Shutdown::Both);
                }
                overload.evicted(addr);
                continue;
            }
            // Too many threads still ending (a loaded machine schedules them late): the new
            // connection waits for one to exit, rather than being closed for their slowness. A
            // thread exits just after it says it left, so the wait looks again every
            // millisecond.
            let now = Instant::now();
            if now >= deadline {
                overload.closed(addr);
                return None;
            }
            let step = (deadline - now).min(Duration::from_millis(1));
            slots = ended
                .wait_timeout(slots, step)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let Ok(socket) = stream.try_clone() else {
            overload.closed(addr);
            return None;
        };
        let state = Arc::new(SlotState {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            admitted: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            left: AtomicBool::new(false),
        });
        slots.push_back(Slot {
            state: state.clone(),
            socket: Some(socket),
            thread: None,
        });
        Some(state)
    }

    /// Keeps the thread of slot `id`, so the slot goes only once the thread has exited.
    fn attach(&self, id: u64, thread: JoinHandle<()>) {
        let (lock, _) = &*self.slots;
        let mut slots = lock.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = slots.iter_mut().find(|slot| slot.state.id == id) {
            slot.thread = Some(thread);
        }
    }

    /// Called by a handshake's thread when the handshake has ended: the slot stops counting as
    /// a handshake, and goes once the thread has exited.
    fn leave(&self, state: &SlotState) {
        let (lock, ended) = &*self.slots;
        let mut slots = lock.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = slots.iter_mut().find(|slot| slot.state.id == state.id) {
            slot.socket = None;
        }
        state.left.store(true, Ordering::Release);
        ended.notify_all();
    }

    /// Gives slot `id` back at once (its thread could not be spawned).
    fn remove(&self, id: u64) {
        let (lock, ended) = &*self.slots;
        lock.lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|slot| slot.state.id != id);
        ended.notify_all();
    }
}

/// Log lines about connections closed or evicted at the handshake limit: the first at once,
/// then at most one per [`OVERLOAD_LOG_INTERVAL`] with the counts since the last, so a flood of
/// connections cannot flood the log.
#[derive(Debug, Default)]
struct OverloadLog {
    /// When the last line was written; `None` before the first.
    logged_at: Option<Instant>,
    /// New connections closed at once since the last line.
    closed_count: u64,
    /// Handshakes evicted to make room since the last line.
    evicted_count: u64,
}

impl OverloadLog {
    fn closed(&mut self, addr: SocketAddr) {
        self.closed_count += 1;
        self.log(addr);
    }

    fn evicted(&mut self, addr: SocketAddr) {
        self.evicted_count += 1;
        self.log(addr);
    }

    fn log(&mut self, addr: SocketAddr) {
        let now = Instant::now();
        if self
            .logged_at
            .is_some_and(|at| now.duration_since(at) < OVERLOAD_LOG_INTERVAL)
        {
            return;
        }
        tracing::warn!(
            %addr,
            "{HANDSHAKES_IN_FLIGHT_MAX} handshakes already in progress (HANDSHAKES_IN_FLIGHT_MAX): \
             since the last such line, {} oldest handshakes closed to make room and {} new \
             connections closed at once",
            self.evicted_count,
            self.closed_count
        );
        self.logged_at = Some(now);
        self.closed_count = 0;
        self.evicted_count = 0;
    }
}

/// How long the connector waits between attempts to reach a data node that was never up.
const CONNECT_RETRY: std::time::Duration = std::time::Duration::from_millis(50);
/// How long it waits between attempts to reach one whose link was lost (it may restart).
const RECONNECT_RETRY: std::time::Duration = std::time::Duration::from_millis(250);

/// Connects to every data node with a lower node id (those with higher ids connect to this
/// one), for as long as the process runs: a lower node whose link was lost is dialled again,
/// so that it can rejoin by node restart when it comes back.
pub fn spawn_connector(
    config: Arc<ClusterConfig>,
    me: NodeId,
    connected: Connected,
    links: Sender<Box<dyn Transporter>>,
    waker: Arc<mio::Waker>,
    tls: Arc<TlsSetup>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let lower: Vec<NodeId> = config
        .data_nodes
        .iter()
        .map(|n| n.node_id)
        .filter(|&n| n < me)
        .collect();
    std::thread::Builder::new()
        .name("connector".into())
        .spawn(move || {
            let mut attempts = 0u64;
            let mut reached: HashSet<NodeId> = HashSet::new();
            loop {
                let linked = connected.lock().unwrap_or_else(|p| p.into_inner()).clone();
                let mut waiting_first = false;
                for &peer in lower.iter().filter(|p| !linked.contains_key(p)) {
                    if connect_peer(
                        &config, me, peer, &connected, &links, &waker, attempts, &tls,
                    ) {
                        reached.insert(peer);
                    } else if !reached.contains(&peer) {
                        waiting_first = true;
                    }
                }
                attempts += 1;
                std::thread::sleep(if waiting_first {
                    CONNECT_RETRY
                } else {
                    RECONNECT_RETRY
                });
            }
        })
}

/// One attempt to reach data node `peer`. True when the link is up (or the node is gone).
#[allow(clippy::too_many_arguments)]
fn connect_peer(
    config: &ClusterConfig,
    me: NodeId,
    peer: NodeId,
    connected: &Connected,
    links: &Sender<Box<dyn Transporter>>,
    waker: &mio::Waker,
    attempt: u64,
    tls: &TlsSetup,
) -> bool {
    let Some(data) = config.data_node(peer) else {
        return true;
    };
    let link = rndb_transporter::connect::connect_to_data_node_tls(
        config,
        me,
        data,
        None,
        HANDSHAKE_TIMEOUT,
        tls,
    );
    match link {
        Ok(link) => {
            // A link this node opened: the peer's token is not known (0).
            let fresh = match connected
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(peer)
            {
                Entry::Occupied(_) => false,
                Entry::Vacant(free) => {
                    free.insert(0);
                    true
                }
            };
            if !fresh {
                tracing::warn!(node = %peer, "data node already has a link; dropping the second");
                return true;
            }
            tracing::info!(node = %peer, kind = %link.kind(), "connected to data node");
            if links.send(link).is_err() || waker.wake().is_err() {
                tracing::warn!(node = %peer, "execution thread gone; dropping the new link");
            }
            true
        }
        Err(e @ TransportError::Tls(_)) => {
            if attempt.is_multiple_of(100) {
                tracing::error!(node = %peer, "cannot connect to data node: {e}");
            }
            false
        }
        Err(TransportError::Refused { code, message }) => {
            // A mismatched config never heals, but the peer may be restarted with the right
            // one: keep trying, and say why it fails.
            if attempt.is_multiple_of(100) {
                tracing::error!(node = %peer, code, "data node refused this node: {message}");
            }
            false
        }
        Err(e) => {
            if attempt.is_multiple_of(100) {
                tracing::info!(node = %peer, "waiting for data node: {e}");
            }
            false
        }
    }
}

/// Everything one handshake thread needs.
struct Handshake {
    config: Arc<ClusterConfig>,
    me: NodeId,
    connected: Connected,
    links: Sender<Box<dyn Transporter>>,
    waker: Arc<mio::Waker>,
    /// This handshake's place among those in progress.
    slot: Arc<SlotState>,
    /// This node's TLS keys and RequireTls.
    tls: Arc<TlsSetup>,
}

impl Handshake {
    fn run(self, stream: TcpStream, addr: SocketAddr) {
        let reserved = std::cell::Cell::new(None);
        let claim = |id: NodeId, token: u64| {
            let mut connected = self.connected.lock().unwrap_or_else(|p| p.into_inner());
            match connected.entry(id) {
                Entry::Occupied(held) => return Some(*held.get()),
                Entry::Vacant(free) => free.insert(token),
            };
            reserved.set(Some(id));
            // Admission asks last whether the node is connected: the HELLO passed every other
            // check, so this handshake is a node's, and is no longer evicted.
            self.slot.admitted.store(true, Ordering::Release);
            None
        };
        let handshake = server_handshake_tls(
            stream,
            &self.config,
            self.me,
            claim,
            HANDSHAKE_TIMEOUT,
            &self.tls,
        );
        // A data node the cluster declared failed is admitted too: it rejoins by node restart
        // (the kernel decides, from its CM_REGREQ).
        let result = handshake.and_then(|(stream, hello, link)| {
            self.open_link(stream, hello.from, hello.transporter, link)
        });
        match result {
            Ok(link) => {
                tracing::info!(%addr, node = %link.peer(), kind = %link.kind(), "node connected");
                if self.links.send(link).is_ok() && self.waker.wake().is_ok() {
                    return;
                }
                tracing::warn!(%addr, "execution thread gone; dropping the new link");
            }
            Err(TransportError::Refused { code, message }) => {
                tracing::warn!(%addr, code, "refused connection: {message}");
            }
            // The acceptor logged the eviction (rate-limited); the error is its consequence.
            Err(_) if self.slot.evicted.load(Ordering::Acquire) => {}
            Err(e) => tracing::warn!(%addr, "closed connection during handshake: {e}"),
        }
        if let Some(id) = reserved.get() {
            self.connected
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
        }
    }
}

impl Handshake {
    /// An admitted TLS connection as a link: TCP and io_uring links carry TLS records (moved by
    /// plain system calls), an SHM link is set up inside TLS.
    fn open_tls_link(
        &self,
        stream: TlsStream,
        peer: NodeId,
        kind: TransporterKind,
        link: &LinkConfig,
    ) -> Result<Box<dyn Transporter>, TransportError> {
        tracing::info!(node = %peer, "TLS link");
        match kind {
            TransporterKind::Tcp | TransporterKind::Uring => Ok(Box::new(tls_link(
                stream,
                peer,
                &LinkSettings::from_link(link),
            )?)),
            TransporterKind::Shm => Ok(Box::new(shm::server_setup_on(
                NodeStream::Tls(Box::new(stream)),
                peer,
                self.me,
                self.config.cluster_id(),
                link,
            )?)),
        }
    }

    /// Turns an admitted connection into the link the peer asked for. An SHM link is set up over
    /// the same connection, which then stays open as its liveness and wake-up channel.
    fn open_link(
        &self,
        stream: NodeStream,
        peer: NodeId,
        kind: TransporterKind,
        link: &LinkConfig,
    ) -> Result<Box<dyn Transporter>, TransportError> {
        let link = link.opened_as(kind);
        let stream = match stream {
            NodeStream::Plain(stream) => stream,
            NodeStream::Tls(tls) => return self.open_tls_link(*tls, peer, kind, link),
        };
        match kind {
            TransporterKind::Tcp => Ok(Box::new(TcpLink::new(
                stream,
                peer,
                &LinkSettings::from_link(link),
            )?)),
            // Where io_uring is unavailable this logs a warning naming the fallback and makes a
            // TCP link; the peer cannot tell, the bytes on the wire are the same.
            TransporterKind::Uring => rndb_transporter::uring::open_link_or_tcp(
                stream,
                peer,
                &LinkSettings::from_link(link),
            ),
            TransporterKind::Shm => {
                let cluster_id = self.config.cluster_id();
                Ok(Box::new(shm::server_setup(
                    stream, peer, self.me, cluster_id, link,
                )?))
            }
        }
    }
}
