//! The links of one node, by peer node id, and the rules a node applies before it accepts a
//! connection.
//!
//! Admission refusals carry codes in NDB's QMGR range (1700). 1702 and 1704 are NDB's own; the
//! others are rndb's, chosen clear of NDB's 1701 (node already reserved) and 1703 (node failure
//! handling not completed):
//!
//! | code | constant | meaning |
//! |---|---|---|
//! | 1702 | [`REFUSE_ALREADY_CONNECTED`] | node already connected (NDB) |
//! | 1703 | [`REFUSE_LINK_CLOSING`] | node failure handling not completed (NDB): the same sender's earlier link is still being closed |
//! | 1704 | [`REFUSE_NODE_TYPE_MISMATCH`] | node type mismatch (NDB) |
//! | 1710 | [`REFUSE_VERSION_MISMATCH`] | protocol version differs |
//! | 1711 | [`REFUSE_CLUSTER_MISMATCH`] | cluster id differs: the two read different configs |
//! | 1712 | [`REFUSE_WRONG_NODE`] | the hello is addressed to another node |
//! | 1713 | [`REFUSE_UNKNOWN_NODE`] | the connecting node id is not in the config |
//! | 1714 | [`REFUSE_NO_LINK`] | the config has no link between the two nodes |
//! | 1715 | [`REFUSE_TRANSPORTER_MISMATCH`] | the hello wants another transporter than the config's |
//! | 1716 | [`REFUSE_CHECKSUM_MISMATCH`] | the hello's Checksum differs from the link's |
//! | 1717 | [`REFUSE_HOST_NOT_ALLOWED`] | the peer's address does not match the node's HostName |
//! | 1718 | [`REFUSE_TLS_REQUIRED`] | a plain connection where RequireTls=1 (either node) |
//! | 1719 | [`REFUSE_CERTIFICATE_MISMATCH`] | the TLS certificate is for another node type |
#![forbid(unsafe_code)]

use std::fmt;
use std::net::{IpAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use rndb_config::{ClusterConfig, LinkConfig, NodeKind};

use crate::handshake::{self, HandshakeStream, Hello, Opening, PROTOCOL_VERSION};
use crate::tls::io::{NodeStream, TlsStream};
use crate::tls::{kind_name as tls_kind_name, kind_of_certificate, TlsSetup};
use crate::{NodeId, TransportError, Transporter, TransporterKind};

/// NDB 1702: the node already has a live link to us.
pub const REFUSE_ALREADY_CONNECTED: u32 = 1702;
/// NDB 1703 (node failure handling not completed): the node id's link is held by the same
/// sender (its [`Hello::token`]), whose earlier link this node has not finished closing.
/// Temporary: the sender retries, and knows that no other took its node id.
pub const REFUSE_LINK_CLOSING: u32 = 1703;
/// NDB 1704: the hello's node kind is not the config's kind for that node id.
pub const REFUSE_NODE_TYPE_MISMATCH: u32 = 1704;
/// The peer speaks another protocol version.
pub const REFUSE_VERSION_MISMATCH: u32 = 1710;
/// The peer read a config describing another cluster.
pub const REFUSE_CLUSTER_MISMATCH: u32 = 1711;
/// The hello is addressed to another node id than ours.
pub const REFUSE_WRONG_NODE: u32 = 1712;
/// The connecting node id is not in the config.
pub const REFUSE_UNKNOWN_NODE: u32 = 1713;
/// The config has no link between the connecting node and us.
pub const REFUSE_NO_LINK: u32 = 1714;
/// The hello asks for another transporter than the link's.
pub const REFUSE_TRANSPORTER_MISMATCH: u32 = 1715;
/// The hello's Checksum setting differs from the link's.
pub const REFUSE_CHECKSUM_MISMATCH: u32 = 1716;
/// The connection comes from an address the node's HostName does not resolve to.
pub const REFUSE_HOST_NOT_ALLOWED: u32 = 1717;

/// The connection is plain TCP, but this node or the connecting one has RequireTls=1.
pub const REFUSE_TLS_REQUIRED: u32 = 1718;
/// The peer's TLS certificate is for another node type than the one it connects as.
pub const REFUSE_CERTIFICATE_MISMATCH: u32 = 1719;

/// Why a node refused a hello: an error code from the table above and a message that names the
/// node and the parameter at fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub code: u32,
    pub message: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for Refusal {}

/// The links of one node, by peer node id. At most one link per peer.
///
/// Stored densely, in node-id order: a data node's loop walks every link several times a turn
/// (and its spin looks at each ring on every check), and a walk over slots for every id up to
/// the highest in use (an API node 50, say) cost a hundred cycles where there were two links.
#[derive(Default)]
pub struct Registry {
    /// The links, sorted by peer id.
    links: Vec<(NodeId, Box<dyn Transporter>)>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Where the link to `peer` is, or where it would go.
    fn position(&self, peer: NodeId) -> Result<usize, usize> {
        self.links.binary_search_by_key(&peer, |(id, _)| *id)
    }

    /// Adds a link under its peer's id. Returns the link that was there before, if any, which
    /// the caller should treat as a bug (admission refuses a second link with 1702).
    pub fn insert(&mut self, link: Box<dyn Transporter>) -> Option<Box<dyn Transporter>> {
        let peer = link.peer();
        match self.position(peer) {
            Ok(at) => Some(std::mem::replace(&mut self.links[at].1, link)),
            Err(at) => {
                self.links.insert(at, (peer, link));
                None
            }
        }
    }

    /// Removes and returns the link to `peer`.
    pub fn remove(&mut self, peer: NodeId) -> Option<Box<dyn Transporter>> {
        let at = self.position(peer).ok()?;
        Some(self.links.remove(at).1)
    }

    /// The link to `peer`.
    pub fn get_mut(&mut self, peer: NodeId) -> Option<&mut (dyn Transporter + 'static)> {
        let at = self.position(peer).ok()?;
        Some(&mut *self.links[at].1)
    }

    /// True when a link to `peer` is registered.
    pub fn contains(&self, peer: NodeId) -> bool {
        self.position(peer).is_ok()
    }

    /// Every link, in node-id order.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (NodeId, &mut (dyn Transporter + 'static))> {
        self.links
            .iter_mut()
            .map(|(peer, link)| (*peer, &mut **link))
    }

    /// The peers with a link, in node-id order.
    pub fn peers(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.links.iter().map(|(peer, _)| *peer)
    }

    /// How many links are registered.
    pub fn len(&self) -> usize {
        self.links.len()
    }

    /// True when no link is registered.
    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("peers", &self.peers().collect::<Vec<_>>())
            .finish()
    }
}

/// Decides whether node `me` accepts `hello` from `peer_addr`, and returns the link config for
/// the pair when it does. `connected(node, token)` claims the node id for the sender of
/// [`Hello::token`] and answers `None`, or, when a link already holds it, the token of that
/// link's hello.
pub fn admit<'c>(
    config: &'c ClusterConfig,
    me: NodeId,
    hello: &Hello,
    peer_addr: IpAddr,
    connected: impl Fn(NodeId, u64) -> Option<u64>,
) -> Result<&'c LinkConfig, Refusal> {
    let from = hello.from;
    if hello.protocol_version != PROTOCOL_VERSION {
        return refuse(
            REFUSE_VERSION_MISMATCH,
            format!(
                "node {from} speaks protocol version {}, node {me} speaks {PROTOCOL_VERSION}",
                hello.protocol_version
            ),
        );
    }
    if hello.cluster_id != config.cluster_id() {
        return refuse(
            REFUSE_CLUSTER_MISMATCH,
            format!(
                "node {from} read a different cluster config (cluster id {:#018x}) than node {me} \
             ({:#018x}, from {})",
                hello.cluster_id,
                config.cluster_id(),
                config.source.display()
            ),
        );
    }
    if hello.to != me {
        return refuse(
            REFUSE_WRONG_NODE,
            format!(
                "node {from} asked for node {} but reached node {me}: check ServerPort/HostName",
                hello.to
            ),
        );
    }
    let Some(config_kind) = config.node_kind(from) else {
        return refuse(
            REFUSE_UNKNOWN_NODE,
            format!("node {from} is not in the config: no NodeId={from}"),
        );
    };
    if config_kind != hello.from_kind {
        return refuse(REFUSE_NODE_TYPE_MISMATCH, format!(
            "Node type mismatch: node {from} says it is {} but the config declares NodeId={from} as {}",
            kind_name(hello.from_kind),
            kind_name(config_kind)
        ));
    }
    let Some(link) = config.link(from, me) else {
        return refuse(
            REFUSE_NO_LINK,
            format!(
                "the config has no link between node {from} ({}) and node {me}",
                kind_name(config_kind)
            ),
        );
    };
    check_link(link, hello, me)?;
    check_host(config, from, peer_addr)?;
    match connected(from, hello.token) {
        None => {}
        Some(holder) if holder == hello.token && holder != 0 => {
            return refuse(
                REFUSE_LINK_CLOSING,
                format!(
                    "Node failure handling not completed: node {me} is still closing the earlier \
                     link of node {from} from the same sender; retry"
                ),
            )
        }
        Some(_) => {
            return refuse(
                REFUSE_ALREADY_CONNECTED,
                format!(
                    "Node already connected: node {from} already has a link to node {me}, from \
                     another sender"
                ),
            )
        }
    }
    Ok(link)
}

/// The whole server side of a handshake on an accepted stream: reads the hello, applies
/// [`admit`], and answers. A refusal is sent to the peer and returned as
/// [`TransportError::Refused`]; the caller logs it and drops the stream.
pub fn server_handshake<'c>(
    stream: &mut (impl HandshakeStream + ?Sized),
    config: &'c ClusterConfig,
    me: NodeId,
    connected: impl Fn(NodeId, u64) -> Option<u64>,
    timeout: Duration,
) -> Result<(Hello, &'c LinkConfig), TransportError> {
    let peer_addr = stream
        .socket()
        .peer_addr()
        .map_err(|e| TransportError::io("read peer address", e))?;
    let hello = handshake::server_read_hello(stream, timeout)?;
    answer_hello(
        stream,
        config,
        me,
        hello,
        Ok(()),
        peer_addr.ip(),
        connected,
        timeout,
    )
}

/// [`server_handshake`] for a node with TLS setup `tls`: a connection that opens with
/// START_TLS is upgraded (when this node has keys) before the HELLO, and [`check_tls`] decides
/// whether a plain or TLS connection may go on. Returns the connection, plain or TLS.
pub fn server_handshake_tls<'c>(
    stream: TcpStream,
    config: &'c ClusterConfig,
    me: NodeId,
    connected: impl Fn(NodeId, u64) -> Option<u64>,
    timeout: Duration,
    tls: &TlsSetup,
) -> Result<(NodeStream, Hello, &'c LinkConfig), TransportError> {
    let deadline = std::time::Instant::now() + timeout;
    let peer_addr = stream
        .peer_addr()
        .map_err(|e| TransportError::io("read peer address", e))?;
    let mut stream = NodeStream::Plain(stream);
    let hello = match handshake::server_read_opening(&mut stream, timeout)? {
        Opening::Hello(hello) => hello,
        Opening::StartTls => {
            handshake::server_answer_start_tls(&mut stream, tls.keys.is_some(), timeout)?;
            stream = match (stream, &tls.keys) {
                (NodeStream::Plain(sock), Some(keys)) => {
                    NodeStream::Tls(Box::new(TlsStream::accept(keys, sock, deadline)?))
                }
                (stream, _) => stream,
            };
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            handshake::server_read_hello(&mut stream, left)?
        }
    };
    let verdict = check_tls(config, me, &hello, &stream, tls);
    let (hello, link) = answer_hello(
        &mut stream,
        config,
        me,
        hello,
        verdict,
        peer_addr.ip(),
        connected,
        timeout,
    )?;
    Ok((stream, hello, link))
}

/// Whether a connection may go on as it is: plain only when neither node has RequireTls=1;
/// under TLS, the peer's certificate must be for the node type its HELLO says it is.
pub fn check_tls(
    config: &ClusterConfig,
    me: NodeId,
    hello: &Hello,
    stream: &NodeStream,
    tls: &TlsSetup,
) -> Result<(), Refusal> {
    let from = hello.from;
    let NodeStream::Tls(tls_stream) = stream else {
        if tls.require_tls {
            return refuse(
                REFUSE_TLS_REQUIRED,
                format!(
                    "node {me} requires TLS (RequireTls=1) and node {from} connected without TLS: give node {from} its key and certificate (--ndb-tls-search-path)"
                ),
            );
        }
        if config.tls_required(from).0 {
            return refuse(
                REFUSE_TLS_REQUIRED,
                format!("node {from} has RequireTls=1 in the config but connected without TLS"),
            );
        }
        return Ok(());
    };
    let kind = tls_stream
        .peer_certificate()
        .ok_or_else(|| "no certificate".to_string())
        .and_then(kind_of_certificate);
    match kind {
        Ok(kind) if kind == hello.from_kind => Ok(()),
        Ok(kind) => refuse(
            REFUSE_CERTIFICATE_MISMATCH,
            format!(
                "node {from} connects as {} with a TLS certificate for {}",
                tls_kind_name(hello.from_kind),
                tls_kind_name(kind)
            ),
        ),
        Err(reason) => refuse(
            REFUSE_CERTIFICATE_MISMATCH,
            format!("node {from}'s TLS certificate: {reason}"),
        ),
    }
}

/// Admits `hello` (when `verdict` allows) and answers it on `stream`.
#[allow(clippy::too_many_arguments)]
fn answer_hello<'c>(
    stream: &mut (impl HandshakeStream + ?Sized),
    config: &'c ClusterConfig,
    me: NodeId,
    hello: Hello,
    verdict: Result<(), Refusal>,
    peer_ip: IpAddr,
    connected: impl Fn(NodeId, u64) -> Option<u64>,
    timeout: Duration,
) -> Result<(Hello, &'c LinkConfig), TransportError> {
    match verdict.and_then(|()| admit(config, me, &hello, peer_ip, connected)) {
        Ok(link) => {
            handshake::server_accept(stream, me, timeout)?;
            Ok((hello, link))
        }
        Err(refusal) => {
            // The peer may already be gone; the refusal we return is what matters here.
            let _ = handshake::server_refuse(stream, refusal.code, &refusal.message, timeout);
            Err(TransportError::Refused {
                code: refusal.code,
                message: refusal.message,
            })
        }
    }
}

/// The hello must want the transporter and Checksum the config gives the pair. A pair the
/// config makes SHM may also run as plain TCP or Uring (the SHM link is set up over a TCP
/// connection anyway), and TCP and Uring links stand in for each other (both are TCP on the wire), so that
/// one config can compare transporters; a TCP or Uring link never becomes SHM.
fn check_link(link: &LinkConfig, hello: &Hello, me: NodeId) -> Result<(), Refusal> {
    let from = hello.from;
    if !transporter_allowed(link.kind, hello.transporter) {
        return refuse(
            REFUSE_TRANSPORTER_MISMATCH,
            format!(
                "node {from} wants a {} link but the config gives nodes {from} and {me} a {} link",
                hello.transporter, link.kind
            ),
        );
    }
    if link.checksum != hello.checksum {
        return refuse(
            REFUSE_CHECKSUM_MISMATCH,
            format!(
            "node {from} has Checksum={} but the config gives the link between nodes {from} and \
             {me} Checksum={}",
            u8::from(hello.checksum),
            u8::from(link.checksum)
        ),
        );
    }
    Ok(())
}

/// True when a client may ask for `wanted` on a link the config makes `configured`.
fn transporter_allowed(configured: TransporterKind, wanted: TransporterKind) -> bool {
    use TransporterKind::{Shm, Tcp, Uring};
    match (configured, wanted) {
        (Shm, Shm | Tcp | Uring) => true,
        (Tcp | Uring, Tcp | Uring) => true,
        (Tcp | Uring, Shm) => false,
    }
}

/// The peer's address must be one the node's HostName resolves to. A HostName that resolves to
/// a loopback address admits any loopback address (a local process may connect from 127.0.0.1
/// to a name that /etc/hosts maps to 127.0.1.1). An API slot without HostName admits any host.
fn check_host(config: &ClusterConfig, from: NodeId, peer_addr: IpAddr) -> Result<(), Refusal> {
    let Some(host_name) = config.host_name(from) else {
        return Ok(());
    };
    let peer_addr = peer_addr.to_canonical();
    let resolved = (host_name, 0).to_socket_addrs().map_err(|e| Refusal {
        code: REFUSE_HOST_NOT_ALLOWED,
        message: format!("cannot resolve HostName={host_name} of node {from}: {e}"),
    })?;
    let allowed = resolved
        .map(|a| a.ip().to_canonical())
        .any(|ip| ip == peer_addr || (ip.is_loopback() && peer_addr.is_loopback()));
    if allowed {
        return Ok(());
    }
    refuse(
        REFUSE_HOST_NOT_ALLOWED,
        format!("node {from} connected from {peer_addr}, which is not its HostName={host_name}"),
    )
}

fn refuse<T>(code: u32, message: String) -> Result<T, Refusal> {
    Err(Refusal { code, message })
}

fn kind_name(kind: NodeKind) -> &'static str {
    match kind {
        NodeKind::Data => "a data node ([ndbd])",
        NodeKind::Mgm => "a management node ([ndb_mgmd])",
        NodeKind::Api => "an API node ([api])",
    }
}
