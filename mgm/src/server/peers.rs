//! The management servers' links to each other: each ndb_mgmd reports to every other
//! `[ndb_mgmd]` of the config every [`REPORT_INTERVAL`] (`report`, nodetype mgm, with the
//! identity of the config it serves), over one connection kept open, as a data node does.
//!
//! ```text
//!  ndb_mgmd 49 ── report (mgm 49, cluster id, checksum) ──▶ ndb_mgmd 48
//!              ◀── report (mgm 48, cluster id, checksum) ──
//! ```
//!
//! A live incoming link is what SHOW shows as the other server connected (with the address it
//! comes from); one that closes, or is silent for [`super::REPORT_TIMEOUT`], is the other
//! server gone (`Node 48 Disconnected` in the cluster log). A server serving another config
//! refuses the reports, and both write why. The servers share nothing else: each tracks the
//! nodes from their own reports to it. SHUTDOWN (and `<id> STOP` of another management node)
//! through one server asks the others to stop with a `stop` request.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use rndb_config::NodeId;

use super::Server;
use crate::client::{MgmClient, MgmError, Requester, REPLY_TIMEOUT};
use crate::connectstring::MgmAddress;
use crate::node_report::{RECONNECT_DELAY, REPORT_INTERVAL};
use crate::status::VERSION;
use crate::wire::Message;

/// Starts one thread per other management server of the config, reporting to it until this
/// server shuts down.
pub fn spawn(server: &Arc<Server>) -> std::io::Result<()> {
    let me = server.me();
    for node in server.config().mgm_nodes.iter().filter(|n| n.node_id != me) {
        let host = if node.host_name.is_empty() {
            "localhost".to_string()
        } else {
            node.host_name.clone()
        };
        let address = MgmAddress {
            host,
            port: node.port_number,
        };
        let (server, peer) = (server.clone(), node.node_id);
        std::thread::Builder::new()
            .name("mgm-peer".into())
            .spawn(move || report_to_peer(&server, peer, &address))?;
    }
    Ok(())
}

/// What this server tells another each time.
fn peer_report(server: &Server) -> Message {
    let mut message = Message::new("report")
        .field("nodetype", Requester::Mgm.as_str())
        .field("nodeid", server.me().0)
        .field("version", VERSION);
    server.identity().add_to(&mut message);
    message
}

fn report_to_peer(server: &Server, peer: NodeId, address: &MgmAddress) {
    let mut last_refusal: Option<String> = None;
    let mut connected = false;
    while !server.shutdown.load(Ordering::Acquire) {
        let lost = MgmClient::connect_to(address, &server.client_tls()).and_then(|mut client| {
            while !server.shutdown.load(Ordering::Acquire) {
                client.call(&peer_report(server), REPLY_TIMEOUT)?;
                if !connected {
                    tracing::info!("reporting to ndb_mgmd {peer} at {address}");
                    connected = true;
                }
                last_refusal = None;
                std::thread::sleep(REPORT_INTERVAL);
            }
            Ok(())
        });
        match lost {
            Ok(()) => return,
            Err(MgmError::Refused(why)) => {
                if last_refusal.as_deref() != Some(why.as_str()) {
                    tracing::error!("ndb_mgmd {peer} at {address} refused this server: {why}");
                }
                last_refusal = Some(why);
            }
            Err(e) if connected => {
                tracing::warn!("lost ndb_mgmd {peer} at {address}: {e}");
                connected = false;
            }
            Err(e) => tracing::debug!("ndb_mgmd {peer}: {e}"),
        }
        std::thread::sleep(RECONNECT_DELAY);
    }
}

/// Asks management servers `peers` (each with a live link to this one, from `address`) to
/// stop; an error names the first that could not be asked.
pub fn stop(server: &Server, peers: &[(u16, String)]) -> Result<(), String> {
    for (peer, seen_at) in peers {
        let node = server
            .config()
            .mgm_node(NodeId(*peer))
            .ok_or_else(|| format!("node {peer} is not a management node"))?;
        let host = if node.host_name.is_empty() {
            seen_at.clone()
        } else {
            node.host_name.clone()
        };
        let address = MgmAddress {
            host,
            port: node.port_number,
        };
        MgmClient::connect_to(&address, &server.client_tls())
            .and_then(|mut client| {
                client.call(&Message::new("stop").field("node", peer), REPLY_TIMEOUT)
            })
            .map_err(|e| format!("could not stop ndb_mgmd {peer} at {address}: {e}"))?;
    }
    Ok(())
}
