//! The client side of a link: connect to a data node's port, handshake, and open the link the
//! config (or the caller) chooses. API nodes connect to every data node this way, and a data
//! node connects to every data node with a lower node id.

use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use rndb_config::{ClusterConfig, DataNodeConfig, LinkConfig, NodeId, TransporterKind};

use crate::handshake::{self, Hello};
use crate::settings::LinkSettings;
use crate::tcp::TcpLink;
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
    let link = config.link(me, peer.node_id).ok_or_else(|| {
        TransportError::Handshake(format!(
            "the config has no link between nodes {me} and {}",
            peer.node_id
        ))
    })?;
    let kind = kind.unwrap_or(link.kind);
    let addr = resolve(peer, config)?;
    let mut stream = connect_from(own_address(config, me, addr), addr, timeout)?;
    let mut hello = Hello::for_link(config, me, peer.node_id)?;
    hello.transporter = kind;
    handshake::client_handshake(&mut stream, &hello, timeout)?;
    open_link(stream, me, peer.node_id, link, kind)
}

fn open_link(
    stream: TcpStream,
    me: NodeId,
    peer: NodeId,
    link: &LinkConfig,
    kind: TransporterKind,
) -> Result<Box<dyn Transporter>, TransportError> {
    let link = link.opened_as(kind);
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
/// another of this host's own ([`is_own_address`]). A name that does not resolve is not this
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
