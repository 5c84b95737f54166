//! Choosing an API slot and opening a link to every data node.

use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};

use rndb_config::{ClusterConfig, DataNodeConfig, LinkConfig, NodeId, TransporterKind};
use rndb_transporter::handshake::{self, Hello};
use rndb_transporter::settings::LinkSettings;
use rndb_transporter::tcp::TcpLink;
use rndb_transporter::{shm, TransportError, Transporter};

use crate::{ConnectOptions, Error};

/// NDB's "Node already connected": the slot is taken, try the next one.
const NODE_ALREADY_CONNECTED: u32 = 1702;

/// Takes an API slot and connects to every data node with it. Returns the slot's node id and
/// one link per data node, in config order.
pub(crate) fn connect_all(
    config: &ClusterConfig,
    options: &ConnectOptions,
) -> Result<(NodeId, Vec<Box<dyn Transporter>>), Error> {
    if config.data_nodes.is_empty() {
        return Err(Error::NoFreeSlot(format!(
            "{} has no data node",
            config.source.display()
        )));
    }
    let candidates: Vec<NodeId> = match options.node_id {
        Some(id) => vec![id],
        None => config
            .api_slots
            .iter()
            .filter(|s| slot_admits_this_host(s.host_name.as_deref()))
            .map(|s| s.node_id)
            .collect(),
    };
    if candidates.is_empty() {
        return Err(Error::NoFreeSlot(format!(
            "{} has no [api] slot this host may take (add an [api] section without HostName, or with this host's name)",
            config.source.display()
        )));
    }
    let mut taken = Vec::new();
    for &me in &candidates {
        if config.api_slot(me).is_none() {
            return Err(Error::NoFreeSlot(format!(
                "node {me} is not an [api] slot of {}",
                config.source.display()
            )));
        }
        match connect_as(config, me, options) {
            Ok(links) => return Ok((me, links)),
            Err(Error::Ndb(e)) if e.code == NODE_ALREADY_CONNECTED && options.node_id.is_none() => {
                taken.push(me.to_string());
            }
            Err(e) => return Err(e),
        }
    }
    Err(Error::NoFreeSlot(format!(
        "every [api] slot of {} that admits this host is in use (node ids {})",
        config.source.display(),
        taken.join(", ")
    )))
}

/// True when an [api] slot with this HostName may be taken by a process on this host: no
/// HostName, or one that resolves to a local (loopback) address. Multi-host checks are the data
/// node's job; it refuses a peer whose address does not match.
fn slot_admits_this_host(host_name: Option<&str>) -> bool {
    let Some(host) = host_name else { return true };
    match (host, 0).to_socket_addrs() {
        Ok(mut addrs) => addrs.any(|a| a.ip().is_loopback()),
        Err(_) => false,
    }
}

/// Connects as node `me` to every data node; all or nothing.
fn connect_as(
    config: &ClusterConfig,
    me: NodeId,
    options: &ConnectOptions,
) -> Result<Vec<Box<dyn Transporter>>, Error> {
    config
        .data_nodes
        .iter()
        .map(|data| connect_one(config, me, data, options))
        .collect()
}

fn connect_one(
    config: &ClusterConfig,
    me: NodeId,
    data: &DataNodeConfig,
    options: &ConnectOptions,
) -> Result<Box<dyn Transporter>, Error> {
    let peer = data.node_id;
    let fail = |reason: String| Error::Connect { node: peer, reason };
    let link = config.link(me, peer).ok_or_else(|| {
        fail(format!(
            "the config has no link between nodes {me} and {peer}"
        ))
    })?;
    let kind = options.transporter.unwrap_or(link.kind);
    let addr = resolve(data, config)?;
    let mut stream = TcpStream::connect_timeout(&addr, options.connect_timeout)
        .map_err(|e| fail(format!("TCP connect to {addr}: {e}")))?;
    let mut hello = Hello::for_link(config, me, peer).map_err(|e| fail(e.to_string()))?;
    hello.transporter = kind;
    match handshake::client_handshake(&mut stream, &hello, options.connect_timeout) {
        Ok(_) => {}
        Err(TransportError::Refused { code, message }) => {
            return Err(Error::ndb_detail(
                code,
                format!("node {peer} refused node {me}: {message}"),
            ));
        }
        Err(e) => return Err(fail(format!("handshake: {e}"))),
    }
    open_link(stream, me, peer, link, kind).map_err(|e| fail(e.to_string()))
}

fn open_link(
    stream: TcpStream,
    me: NodeId,
    peer: NodeId,
    link: &LinkConfig,
    kind: TransporterKind,
) -> Result<Box<dyn Transporter>, TransportError> {
    match kind {
        TransporterKind::Tcp => Ok(Box::new(TcpLink::new(
            stream,
            peer,
            &LinkSettings::from_link(link),
        )?)),
        TransporterKind::Shm => Ok(Box::new(shm::client_setup(stream, me, peer, link)?)),
        // Where io_uring is unavailable this warns, naming the fallback, and makes a TCP link;
        // the data node cannot tell, the bytes on the wire are the same.
        TransporterKind::Uring => {
            rndb_transporter::uring::open_link_or_tcp(stream, peer, &LinkSettings::from_link(link))
        }
    }
}

fn resolve(data: &DataNodeConfig, config: &ClusterConfig) -> Result<SocketAddr, Error> {
    let port = config.data_node_port(data.node_id).unwrap_or(0);
    let addrs = (data.host_name.as_str(), port)
        .to_socket_addrs()
        .map_err(|e| Error::Connect {
            node: data.node_id,
            reason: format!("resolve HostName {}: {e}", data.host_name),
        })?;
    let mut addrs: Vec<SocketAddr> = addrs.collect();
    // Prefer IPv4: NDB configs name hosts like "localhost", and data nodes bind IPv4.
    addrs.sort_by_key(|a| matches!(a.ip(), IpAddr::V6(_)));
    addrs.into_iter().next().ok_or_else(|| Error::Connect {
        node: data.node_id,
        reason: format!("HostName {} resolves to no address", data.host_name),
    })
}
