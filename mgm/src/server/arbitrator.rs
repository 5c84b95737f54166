//! ndb_mgmd as arbitrator (NDB's: a management node's ArbitrationRank, 1 by default, lets the
//! data nodes' president choose it to decide which side of a split goes on; the data nodes'
//! side is `rndb_ndbd`'s `blocks/arbit.rs`, the rule the answers follow is
//! `rndb_protocol::qmgr::ArbiterState`).
//!
//! A management node with ArbitrationRank 1 or 2 keeps one transporter link to every data node,
//! each on its own thread, redialled every [`RETRY`] while the node is unreachable:
//!
//! ```text
//!  ndb_mgmd ──HELLO (kind mgm)──► data node      the link the config has for the pair (TCP)
//!           ──API_REGREQ every HeartbeatIntervalDbApi──►   (else the data node drops the link)
//!           ◄─API_REGCONF────────
//!           ◄─ARBIT_STARTREQ(ticket)── president  ─ARBIT_STARTCONF─►
//!           ◄─ARBIT_CHOOSEREQ(ticket, side)── a side's president
//!           ─ARBIT_CHOOSECONF (first side to ask) / ARBIT_CHOOSEREF (any other)─►
//! ```
//!
//! A link that brings nothing for [`MISSED_MAX`] heartbeat intervals is dropped and dialled
//! again (a data node that hangs). Every link shares one [`ArbiterState`]: the two sides of a
//! split ask on different links. The arbitrator's events go to the cluster log in NDB's words,
//! under the data node that asked.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use rndb_config::{ClusterConfig, DataNodeConfig, NodeId};
use rndb_protocol::qmgr::{Arbit, ArbiterEvent, ArbiterState};
use rndb_protocol::signals::{block, gsn};
use rndb_transporter::frame::FrameHeader;
use rndb_transporter::tls::TlsSetup;
use rndb_transporter::Transporter;

use super::log::{Category, Event, Severity};
use super::Server;

/// How long one dial of a data node (connect and handshake) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long after a failed dial, or a closed link, the next dial comes.
pub const RETRY: Duration = Duration::from_secs(1);
/// Heartbeat intervals without a frame after which a link is dropped (NDB: 4 missed).
pub const MISSED_MAX: u32 = 4;
/// The longest one wait in the poller, so that a stop of ndb_mgmd is seen soon.
const WAIT_MAX: Duration = Duration::from_millis(100);

/// What every link thread shares.
struct Shared {
    server: Arc<Server>,
    config: ClusterConfig,
    me: NodeId,
    tls: TlsSetup,
    /// ArbitrationDelay: how long a choice waits before it is answered.
    delay: Duration,
    state: Mutex<ArbiterState>,
}

/// Starts the arbitrator's link threads when management node `me` may arbitrate
/// (ArbitrationRank 1 or 2). Returns how many data nodes it links to (0: it does not arbitrate).
pub fn spawn(
    server: Arc<Server>,
    config: ClusterConfig,
    me: NodeId,
    tls: TlsSetup,
) -> std::io::Result<usize> {
    let Some(node) = config.mgm_node(me) else {
        return Ok(0);
    };
    if !matches!(node.arbitration_rank, 1 | 2) {
        tracing::info!("ArbitrationRank=0: this management node does not arbitrate");
        return Ok(0);
    }
    let rank = node.arbitration_rank;
    let delay = Duration::from_millis(u64::from(node.arbitration_delay_ms));
    let peers: Vec<DataNodeConfig> = config.data_nodes.clone();
    let shared = Arc::new(Shared {
        server,
        config,
        me,
        tls,
        delay,
        state: Mutex::default(),
    });
    for peer in &peers {
        let shared = Arc::clone(&shared);
        let peer = peer.clone();
        std::thread::Builder::new()
            .name(format!("mgm-arbit-{}", peer.node_id))
            .spawn(move || link_thread(&shared, &peer))?;
    }
    tracing::info!(
        rank,
        "may arbitrate (ArbitrationRank {rank}): linking to {} data node(s)",
        peers.len()
    );
    Ok(peers.len())
}

/// Dials data node `peer` until ndb_mgmd stops, serving each link while it lasts.
fn link_thread(shared: &Shared, peer: &DataNodeConfig) {
    let id = peer.node_id;
    let interval = Duration::from_millis(u64::from(peer.heartbeat_interval_db_api_ms.max(1)));
    let mut last_error = String::new();
    while !stopping(shared) {
        match rndb_transporter::connect::connect_to_data_node_tls(
            &shared.config,
            shared.me,
            peer,
            None,
            CONNECT_TIMEOUT,
            &shared.tls,
        ) {
            Ok(link) => {
                tracing::info!(node = %id, "arbitration link to data node {id} up");
                last_error.clear();
                let why = serve(shared, link, interval);
                tracing::info!(node = %id, "arbitration link to data node {id} closed: {why}");
            }
            Err(e) => {
                let error = e.to_string();
                // Said once per kind of failure: a data node that is down is refused every
                // second until it starts.
                if error != last_error {
                    tracing::info!(node = %id, "cannot link to data node {id} for arbitration (trying every {} s): {error}", RETRY.as_secs());
                    last_error = error;
                }
            }
        }
        let until = Instant::now() + RETRY;
        while Instant::now() < until && !stopping(shared) {
            std::thread::sleep(WAIT_MAX);
        }
    }
}

fn stopping(shared: &Shared) -> bool {
    shared.server.shutdown.load(Ordering::Acquire)
}

/// Serves one link until it fails; returns why it ended.
fn serve(shared: &Shared, mut link: Box<dyn Transporter>, interval: Duration) -> String {
    let peer = link.peer();
    let mut poll = match Poll::new() {
        Ok(poll) => poll,
        Err(e) => return format!("create a poller: {e}"),
    };
    let fd = link.poll_fd();
    if let Err(e) = poll
        .registry()
        .register(&mut SourceFd(&fd), Token(0), Interest::READABLE)
    {
        return format!("register the link with the poller: {e}");
    }
    let mut events = Events::with_capacity(4);
    let mut next_beat = Instant::now();
    let mut heard = true;
    let mut silent = 0u32;
    loop {
        if stopping(shared) {
            link.shutdown();
            return "ndb_mgmd is stopping".into();
        }
        let now = Instant::now();
        if now >= next_beat {
            // Counted per interval, as the data node counts ours.
            silent = if heard { 0 } else { silent + 1 };
            heard = false;
            if silent >= MISSED_MAX {
                link.shutdown();
                return format!(
                    "nothing from data node {peer} for {MISSED_MAX} heartbeat intervals of {} ms",
                    interval.as_millis()
                );
            }
            if let Err(e) = send(link.as_mut(), gsn::API_REGREQ, &[]) {
                return e;
            }
            next_beat = now + interval;
        }
        let mut requests: Vec<(u16, Result<Arbit, String>)> = Vec::new();
        let mut stopping_told = false;
        let received = link.receive(&mut |header, payload| {
            if matches!(header.signal, gsn::ARBIT_STARTREQ | gsn::ARBIT_CHOOSEREQ) {
                let request = Arbit::decode(payload).map_err(|e| e.to_string());
                requests.push((header.signal, request));
            }
            stopping_told |= header.signal == gsn::NODE_STOPPING_REP;
        });
        match received {
            Err(e) => return e.to_string(),
            Ok(n) if n > 0 => heard = true,
            Ok(_) => {}
        }
        // The data node stops and waits until its API nodes know: this one starts no
        // transactions there.
        if stopping_told {
            if let Err(e) = send(link.as_mut(), gsn::NODE_STOPPING_CONF, &[]) {
                return e;
            }
        }
        for (signal, request) in requests {
            let request = match request {
                Ok(request) => request,
                Err(e) => {
                    link.shutdown();
                    return format!("malformed arbitration request: {e}");
                }
            };
            if let Err(e) = answer(shared, link.as_mut(), signal, &request) {
                return e;
            }
        }
        if !link.prepare_to_sleep() {
            continue;
        }
        let wait = next_beat
            .saturating_duration_since(Instant::now())
            .min(WAIT_MAX);
        let polled = poll.poll(&mut events, Some(wait));
        link.woke_up();
        if let Err(e) = polled {
            if e.kind() != std::io::ErrorKind::Interrupted {
                return format!("wait for the link: {e}");
            }
        }
    }
}

/// Answers arbitration request `signal` from the link's data node, and logs what it decided.
fn answer(
    shared: &Shared,
    link: &mut dyn Transporter,
    signal: u16,
    request: &Arbit,
) -> Result<(), String> {
    let from = link.peer();
    let me = shared.me;
    let decided = shared
        .state
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .answer(signal, request);
    let Some((signal, reply, event)) = decided else {
        return Ok(());
    };
    let ticket = request.ticket;
    let logged = match &event {
        ArbiterEvent::Started => Some((
            Severity::Info,
            format!("Started arbitrator node {me} [ticket={ticket:016x}]"),
        )),
        ArbiterEvent::Restarted | ArbiterEvent::Confirmed => None,
        ArbiterEvent::Chose(nodes) => Some((
            Severity::Alert,
            format!(
                "Arbitration won - positive reply from node {me}: the side of data nodes {} goes on",
                list(nodes)
            ),
        )),
        ArbiterEvent::Refused { chosen } => Some((
            Severity::Alert,
            format!(
                "Arbitration lost - negative reply from node {me}: the side of data nodes {} \
                 stops, {} went on",
                list(&request.nodes),
                list(chosen)
            ),
        )),
        ArbiterEvent::UnknownTicket => Some((
            Severity::Warning,
            format!(
                "Arbitration lost - negative reply from node {me}: ticket {ticket:016x} is not \
                 this arbitrator's"
            ),
        )),
    };
    if let Some((severity, text)) = logged {
        tracing::warn!(node = %from, "{text}");
        shared
            .server
            .log(Event::new(from.0, Category::NodeRestart, 2, severity, text));
    }
    if signal != gsn::ARBIT_STARTCONF && !shared.delay.is_zero() {
        std::thread::sleep(shared.delay);
    }
    let mut payload = Vec::new();
    reply.encode(&mut payload);
    send(link, signal, &payload)
}

/// Sends one frame to the data node's QMGR and flushes it.
fn send(link: &mut dyn Transporter, signal: u16, payload: &[u8]) -> Result<(), String> {
    let header = FrameHeader {
        signal,
        receiver_block: block::QMGR,
        sender_block: block::API,
        request_id: 0,
    };
    link.send(&header, payload)
        .and_then(|()| link.flush().map(|_| ()))
        .map_err(|e| format!("send to data node {}: {e}", link.peer()))
}

/// `1, 2` for a side's data nodes.
fn list(nodes: &[u16]) -> String {
    nodes
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
