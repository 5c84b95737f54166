//! Choosing an API slot and opening a link to every data node.

use std::time::{Duration, Instant};

use rndb_config::{ClusterConfig, DataNodeConfig, NodeId, NodeKind};
use rndb_transporter::connect::is_this_host;
use rndb_transporter::registry::{REFUSE_HOST_NOT_ALLOWED, REFUSE_LINK_CLOSING};
use rndb_transporter::tls::{SearchPath, TlsSetup};
use rndb_transporter::{TransportError, Transporter};

use crate::reconnect::SLOT_TAKEN_GRACE;
use crate::{ConnectOptions, Error};

/// NDB's "Node already connected": the slot is taken, try the next one.
const NODE_ALREADY_CONNECTED: u32 = 1702;

/// Takes an API slot and connects to every data node with it, the HELLOs carrying `token`
/// (this connection's: see `rndb_transporter::handshake::Hello::token`). Returns the slot's
/// node id and one link per data node, in config order.
pub(crate) fn connect_all(
    config: &ClusterConfig,
    options: &ConnectOptions,
    token: u64,
) -> Result<(NodeId, Vec<Box<dyn Transporter>>), Error> {
    connect_first_free(config, options, token, &|| false)
}

/// [`connect_all`], giving up (with the last error) once `stop` says so between slots.
pub(crate) fn connect_first_free(
    config: &ClusterConfig,
    options: &ConnectOptions,
    token: u64,
    stop: &dyn Fn() -> bool,
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
    let mut refused = Vec::new();
    for &me in &candidates {
        if stop() {
            return Err(Error::NoFreeSlot("the API node is closing".into()));
        }
        if config.api_slot(me).is_none() {
            return Err(Error::NoFreeSlot(format!(
                "node {me} is not an [api] slot of {}",
                config.source.display()
            )));
        }
        let tls = tls_setup(config, me, options)?;
        match connect_as_fixed(config, me, options, &tls, token, stop) {
            Ok(links) => return Ok((me, links)),
            // Held by another process, or (when this process takes another slot) by its own
            // earlier link, not yet closed: try the next.
            Err(Error::Ndb(e))
                if (e.code == NODE_ALREADY_CONNECTED || e.code == REFUSE_LINK_CLOSING)
                    && options.node_id.is_none() =>
            {
                taken.push(me.to_string());
            }
            // The slot's HostName is another address of this host than the one the
            // connection came from: try the next slot.
            Err(Error::Ndb(e))
                if e.code == REFUSE_HOST_NOT_ALLOWED && options.node_id.is_none() =>
            {
                refused.push(me.to_string());
            }
            Err(e) => return Err(e),
        }
    }
    Err(Error::NoFreeSlot(format!(
        "every [api] slot of {} that admits this host is in use (node ids {}) or names another \
         of its addresses than the one it connects from (node ids {}, refused with {})",
        config.source.display(),
        taken.join(", "),
        refused.join(", "),
        REFUSE_HOST_NOT_ALLOWED
    )))
}

/// True when an [api] slot with this HostName may be taken by a process on this host: no
/// HostName, or one that names this host ([`is_this_host`]). The data node checks again: it
/// refuses a peer whose address does not match (1717).
fn slot_admits_this_host(host_name: Option<&str>) -> bool {
    host_name.is_none_or(is_this_host)
}

/// [`connect_as`]; with a node id given (`--ndb-nodeid`), a slot refused as taken (1702) or
/// as closing (1703) is asked for again for [`SLOT_TAKEN_GRACE`]: a process that held it and
/// just ended leaves its link for the data node to see close, moments later (NDB's API retries
/// its connect likewise).
fn connect_as_fixed(
    config: &ClusterConfig,
    me: NodeId,
    options: &ConnectOptions,
    tls: &TlsSetup,
    token: u64,
    stop: &dyn Fn() -> bool,
) -> Result<Vec<Box<dyn Transporter>>, Error> {
    let since = Instant::now();
    loop {
        match connect_as(config, me, options, tls, token) {
            Err(Error::Ndb(e))
                if (e.code == NODE_ALREADY_CONNECTED || e.code == REFUSE_LINK_CLOSING)
                    && options.node_id.is_some()
                    && since.elapsed() < SLOT_TAKEN_GRACE
                    && !stop() =>
            {
                std::thread::sleep(SLOT_TAKEN_RETRY);
            }
            result => return result,
        }
    }
}

/// How often a fixed slot refused as taken is asked for again.
const SLOT_TAKEN_RETRY: Duration = Duration::from_millis(50);

/// Connects as node `me` to every data node that can be reached, as NDB's API does (its
/// `wait_until_ready` then tells whether all are up). A data node that refuses (its slot is
/// taken, the configs differ) fails the whole connect; one that cannot be reached is left out
/// with a warning, unless none can be.
fn connect_as(
    config: &ClusterConfig,
    me: NodeId,
    options: &ConnectOptions,
    tls: &TlsSetup,
    token: u64,
) -> Result<Vec<Box<dyn Transporter>>, Error> {
    let mut links = Vec::new();
    let mut unreachable = None;
    for data in &config.data_nodes {
        match connect_one(config, me, data, options, tls, token) {
            Ok(link) => links.push(link),
            Err(e @ Error::Connect { .. }) => {
                tracing::warn!(
                    "data node {} is not reachable; going on without it: {e}",
                    data.node_id
                );
                unreachable.get_or_insert(e);
            }
            Err(e) => return Err(e),
        }
    }
    match unreachable {
        Some(e) if links.is_empty() => Err(e),
        _ => Ok(links),
    }
}

/// The TLS setup of API node `me`: the keys on the options' search path (loaded once per
/// call) and the slot's RequireTls.
pub(crate) fn tls_setup(
    config: &ClusterConfig,
    me: NodeId,
    options: &ConnectOptions,
) -> Result<TlsSetup, Error> {
    let search_path = options.tls_search_path.as_deref().map(SearchPath::parse);
    let (require_tls, _) = config.tls_required(me);
    TlsSetup::for_node(search_path.as_ref(), NodeKind::Api, require_tls, false)
        .map_err(|e| Error::Tls(format!("API node {me}: {}", tls_reason(e))))
}

fn tls_reason(e: TransportError) -> String {
    match e {
        TransportError::Tls(reason) => reason,
        e => e.to_string(),
    }
}

pub(crate) fn connect_one(
    config: &ClusterConfig,
    me: NodeId,
    data: &DataNodeConfig,
    options: &ConnectOptions,
    tls: &TlsSetup,
    token: u64,
) -> Result<Box<dyn Transporter>, Error> {
    let peer = data.node_id;
    rndb_transporter::connect::connect_to_data_node_as(
        config,
        me,
        data,
        options.transporter,
        options.connect_timeout,
        tls,
        token,
    )
    .map_err(|e| match e {
        TransportError::Refused { code, message } => {
            Error::ndb_detail(code, format!("node {peer} refused node {me}: {message}"))
        }
        TransportError::Tls(reason) => Error::Tls(format!("node {me} to node {peer}: {reason}")),
        e => Error::Connect {
            node: peer,
            reason: e.to_string(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::slot_admits_this_host;

    #[test]
    fn a_slot_admits_this_hosts_addresses_only() {
        assert!(slot_admits_this_host(None), "a slot without HostName");
        assert!(slot_admits_this_host(Some("127.0.0.1")));
        assert!(slot_admits_this_host(Some("localhost")));
        // TEST-NET-2: documentation addresses, on no host.
        assert!(!slot_admits_this_host(Some("198.51.100.7")));
        assert!(!slot_admits_this_host(Some("no-such-host.invalid")));
        assert!(
            !slot_admits_this_host(Some("0.0.0.0")),
            "the unspecified address"
        );
        assert!(
            !slot_admits_this_host(Some("224.0.0.1")),
            "a multicast address"
        );
    }
}
