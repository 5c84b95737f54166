//! The client side of a link: connect to a data node's port, handshake, and open the link the
//! config (or the caller) chooses. API nodes connect to every data node this way, and a data
//! node connects to every data node with a lower node id.

use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use rndb_config::{ClusterConfig, DataNodeConfig, LinkConfig, NodeId, NodeKind, TransporterKind};

use crate::handshake::{self, Hello};
use crate::settings::LinkSettings;
use crate::tcp::TcpLink;
use crate::tls::io::{tls_link, NodeStream, TlsStream};
use crate::tls::{kind_name, kind_of_certificate, TlsSetup};
use crate::{shm, TransportError, Transporter};

/// Connects node `me` to data node `peer` over the link the config defines between them (or
/// `kind`, when given), within `timeout` for the TCP connect and the handshake. A refusal comes
/// back as [`TransportError::Refused`] with the peer's code and reason.
pub fn connect_to_data_node(
    config: &ClusterConfig,
    me: NodeId,
    peer: &DataNodeConfig,
    kind: Option<TransporterKind>,
    timeout: Duration,
) -> Result<Box<dyn Transporter>, TransportError> {
    connect_to_data_node_tls(config, me, peer, kind, timeout, &TlsSetup::plain())
}

/// [`connect_to_data_node`] for a node with TLS setup `tls`: with keys, it asks for TLS
/// (START_TLS) and runs the HELLO inside it. A data node without keys answers START_TLS_REF;
/// then the connection goes on in plain text unless either node has RequireTls=1, which is an
/// error that says so. The data node's certificate must be a data node's.
pub fn connect_to_data_node_tls(
    config: &ClusterConfig,
    me: NodeId,
    peer: &DataNodeConfig,
    kind: Option<TransporterKind>,
    timeout: Duration,
    tls: &TlsSetup,
) -> Result<Box<dyn Transporter>, TransportError> {
    let token = handshake::process_token();
    connect_to_data_node_as(config, me, peer, kind, timeout, tls, token)
}

/// [`connect_to_data_node_tls`] with the HELLO's [`Hello::token`] given: an API node's own,
/// drawn per connection (a process may hold several API slots).
pub fn connect_to_data_node_as(
    config: &ClusterConfig,
    me: NodeId,
    peer: &DataNodeConfig,
    kind: Option<TransporterKind>,
    timeout: Duration,
    tls: &TlsSetup,
    token: u64,
) -> Result<Box<dyn Transporter>, TransportError> {
    let deadline = Instant::now() + timeout;
    let link = config.link(me, peer.node_id).ok_or_else(|| {
        TransportError::Handshake(format!(
            "the config has no link between nodes {me} and {}",
            peer.node_id
        ))
    })?;
    let kind = kind.unwrap_or(link.kind);
    let addr = resolve(peer, config)?;
    let stream = connect_from(own_address(config, me, addr), addr, timeout)?;
    let mut stream = start_tls(stream, config, me, peer, tls, deadline)?;
    let mut hello = Hello::for_link(config, me, peer.node_id)?;
    hello.transporter = kind;
    hello.token = token;
    let left = deadline.saturating_duration_since(Instant::now());
    handshake::client_handshake(&mut stream, &hello, left)?;
    open_link(stream, me, peer.node_id, link, kind)
}

/// START_TLS and the TLS handshake, when this node has keys; the connection as it goes on.
fn start_tls(
    stream: TcpStream,
    config: &ClusterConfig,
    me: NodeId,
    peer: &DataNodeConfig,
    tls: &TlsSetup,
    deadline: Instant,
) -> Result<NodeStream, TransportError> {
    let mut stream = NodeStream::Plain(stream);
    let Some(keys) = &tls.keys else {
        return Ok(stream);
    };
    let to = peer.node_id;
    let left = deadline.saturating_duration_since(Instant::now());
    if !handshake::client_start_tls(&mut stream, to, left)? {
        let required = if tls.require_tls {
            Some(me)
        } else {
            config.tls_required(to).0.then_some(to)
        };
        if let Some(node) = required {
            return Err(TransportError::Tls(format!(
                "data node {to} has no TLS key and certificate (it answered START_TLS_REF), and node {node} requires TLS (RequireTls=1)"
            )));
        }
        return Ok(stream);
    }
    let NodeStream::Plain(sock) = stream else {
        return Ok(stream);
    };
    let upgraded = TlsStream::connect(keys, sock, &peer.host_name, deadline)
        .map_err(|e| TransportError::Tls(format!("with data node {to}: {e}")))?;
    let kind = upgraded
        .peer_certificate()
        .ok_or_else(|| "no certificate".to_string())
        .and_then(kind_of_certificate)
        .map_err(|e| TransportError::Tls(format!("data node {to}'s certificate: {e}")))?;
    if kind != NodeKind::Data {
        return Err(TransportError::Tls(format!(
            "node {to} presented a TLS certificate for {}, not for a data node",
            kind_name(kind)
        )));
    }
    Ok(NodeStream::Tls(Box::new(upgraded)))
}

fn open_link(
    stream: NodeStream,
    me: NodeId,
    peer: NodeId,
    link: &LinkConfig,
    kind: TransporterKind,
) -> Result<Box<dyn Transporter>, TransportError> {
    let link = link.opened_as(kind);
    let stream = match stream {
        NodeStream::Plain(stream) => stream,
        NodeStream::Tls(tls) => return open_tls_link(*tls, me, peer, link, kind),
    };
    match kind {
        TransporterKind::Tcp => Ok(Box::new(TcpLink::new(
            stream,
            peer,
            &LinkSettings::from_link(link),
        )?)),
        TransporterKind::Shm => Ok(Box::new(shm::client_setup(stream, me, peer, link)?)),
        // Where io_uring is unavailable this warns, naming the fallback, and makes a TCP link;
        // the peer cannot tell, the bytes on the wire are the same.
        TransporterKind::Uring => {
            crate::uring::open_link_or_tcp(stream, peer, &LinkSettings::from_link(link))
        }
    }
}

/// The link over a TLS connection: TCP and io_uring links become a [`TlsLink`]-kind link
/// (TLS records moved by plain system calls), SHM is set up inside TLS.
pub(crate) fn open_tls_link(
    stream: TlsStream,
    me: NodeId,
    peer: NodeId,
    link: &LinkConfig,
    kind: TransporterKind,
) -> Result<Box<dyn Transporter>, TransportError> {
    match kind {
        TransporterKind::Tcp | TransporterKind::Uring => Ok(Box::new(tls_link(
            stream,
            peer,
            &LinkSettings::from_link(link),
        )?)),
        TransporterKind::Shm => Ok(Box::new(shm::client_setup_on(
            NodeStream::Tls(Box::new(stream)),
            me,
            peer,
            link,
        )?)),
    }
}

/// The address node `me` connects from: its HostName's, when that names one of this host's
/// own non-loopback addresses of `peer`'s family. The peer admits a node only from its
/// HostName (1717), and on a host with several addresses the route to `peer` may start from
/// another one. `None` leaves the choice to the route (no HostName, a loopback one, or one
/// that is not this host's).
fn own_address(config: &ClusterConfig, me: NodeId, peer: SocketAddr) -> Option<IpAddr> {
    (config.host_name(me)?, 0)
        .to_socket_addrs()
        .ok()?
        .map(|a| a.ip())
        .find(|&ip| ip.is_ipv4() == peer.is_ipv4() && !ip.is_loopback() && is_own_address(ip))
}

/// A TCP connection to `peer` within `timeout`, from `local` when given.
fn connect_from(
    local: Option<IpAddr>,
    peer: SocketAddr,
    timeout: Duration,
) -> Result<TcpStream, TransportError> {
    let what = || match local {
        Some(ip) => format!("TCP connect to {peer} from {ip}"),
        None => format!("TCP connect to {peer}"),
    };
    let Some(ip) = local else {
        return TcpStream::connect_timeout(&peer, timeout)
            .map_err(|e| TransportError::io(what(), e));
    };
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(peer),
        socket2::Type::STREAM,
        None,
    )
    .map_err(|e| TransportError::io(what(), e))?;
    socket
        .bind(&SocketAddr::new(ip, 0).into())
        .map_err(|e| TransportError::io(what(), e))?;
    socket
        .connect_timeout(&peer.into(), timeout)
        .map_err(|e| TransportError::io(what(), e))?;
    Ok(socket.into())
}

/// True when `host_name` names this host: one of its addresses is a loopback address or
/// another of this host's own (`is_own_address`). A name that does not resolve is not this
/// host.
pub fn is_this_host(host_name: &str) -> bool {
    match (host_name, 0).to_socket_addrs() {
        Ok(mut addrs) => addrs.any(|a| a.ip().is_loopback() || is_own_address(a.ip())),
        Err(_) => false,
    }
}

/// True when `ip` is a unicast address of this host: one a socket can bind here (only this
/// host's own addresses allow that, unless the `net.ipv4.ip_nonlocal_bind` sysctl is set).
fn is_own_address(ip: IpAddr) -> bool {
    !ip.is_unspecified() && !ip.is_multicast() && std::net::UdpSocket::bind((ip, 0)).is_ok()
}

/// The address of a data node's port: its HostName, IPv4 preferred (NDB configs name hosts
/// like "localhost", and data nodes bind IPv4).
pub fn resolve(
    data: &DataNodeConfig,
    config: &ClusterConfig,
) -> Result<SocketAddr, TransportError> {
    let port = config.data_node_port(data.node_id).unwrap_or(0);
    let mut addrs: Vec<SocketAddr> = (data.host_name.as_str(), port)
        .to_socket_addrs()
        .map_err(|e| {
            TransportError::io(
                format!(
                    "resolve HostName {} of node {}",
                    data.host_name, data.node_id
                ),
                e,
            )
        })?
        .collect();
    addrs.sort_by_key(|a| matches!(a.ip(), IpAddr::V6(_)));
    addrs.into_iter().next().ok_or_else(|| {
        TransportError::Handshake(format!(
            "HostName {} of node {} resolves to no address",
            data.host_name, data.node_id
        ))
    })
}
