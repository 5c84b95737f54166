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

use super::log::{Category, Event, Severity};
use super::Server;
use crate::client::{MgmClient, MgmError, Requester, REPLY_TIMEOUT};
use crate::connectstring::MgmAddress;
use crate::identity::ConfigIdentity;
use crate::node_report::{RECONNECT_DELAY, REPORT_INTERVAL};
use crate::status::VERSION;
use crate::wire::Message;

/// Another management server's live link to this one (in the server's state).
#[derive(Debug)]
pub(super) struct PeerLink {
    pub(super) id: u64,
    /// The address its link comes from (its SHOW line).
    pub(super) address: String,
    pub(super) version: String,
}

impl Server {
    /// The refusal of a report whose sender runs another config than this server serves;
    /// written to the cluster log (once per node and config) and the server's log.
    pub(super) fn refuse_other_config(
        &self,
        request: &Message,
        node: u16,
        theirs: &ConfigIdentity,
        peer: &str,
    ) -> String {
        let kind = match request.get("nodetype") {
            Some("mgm") => "management node",
            Some("api") => "API node",
            _ => "data node",
        };
        let why = format!(
            "config mismatch: {kind} {node} (at {peer}) runs another config than ndb_mgmd {} \
             serves ({}): {}; it runs {theirs}, this server serves {}. Start every ndb_mgmd of \
             the cluster from the same config.ini (`ndb_mgmd --reload` replaces a cached config)",
            self.me,
            self.config.source.display(),
            theirs.difference(&self.identity),
            self.identity
        );
        let mut state = self.lock();
        if state.refusals_logged.insert((node, theirs.checksum)) {
            tracing::error!("{why}");
            let event = Event::new(self.me.0, Category::Error, 2, Severity::Critical, &why);
            state.log.write(&event);
        }
        why
    }

    /// A report of another management server: its link shows it connected.
    pub(super) fn peer_report(
        &self,
        request: &Message,
        node: u16,
        version: String,
        peer: &str,
        link: &mut Option<(u16, u64)>,
    ) -> Result<Message, String> {
        if node == self.me.0 || self.config.mgm_node(NodeId(node)).is_none() {
            return Err(format!(
                "node {node} is not another management node ([ndb_mgmd] NodeId) of {}",
                self.config.source.display()
            ));
        }
        let mut guard = self.lock();
        let state = &mut *guard;
        match (state.mgm.get_mut(&node), *link) {
            (Some(p), Some((n, id))) if n == node && p.id == id => p.version = version,
            (Some(p), _) => {
                return Err(format!(
                    "management node {node} is already connected (from {})",
                    p.address
                ))
            }
            (None, Some((n, _))) if n != node => {
                return Err(format!("this connection reports for node {n}, not {node}"))
            }
            (None, _) => {
                let id = state.next_link;
                state.next_link += 1;
                let address = peer.to_string();
                state.mgm.insert(
                    node,
                    PeerLink {
                        id,
                        address,
                        version,
                    },
                );
                *link = Some((node, id));
                let text = format!("Node {node} Connected");
                let event = Event::new(self.me.0, Category::Connection, 8, Severity::Info, text);
                state.log.write(&event);
            }
        }
        Ok(Message::ok_reply(&request.command).field("nodeid", self.me.0))
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::log::ClusterLog;
    use crate::server::ServerSetup;
    use crate::status::NodeState;

    const CONFIG: &str = "[ndbd default]\nNoOfReplicas=1\n\
                          [ndb_mgmd]\nNodeId=49\nHostName=127.0.0.1\nPortNumber=2000\n\
                          [ndb_mgmd]\nNodeId=48\nHostName=127.0.0.1\nPortNumber=2001\n\
                          [ndbd]\nNodeId=1\nHostName=127.0.0.1\n";

    fn server(dir: &std::path::Path) -> Server {
        let config = rndb_config::parse_str(CONFIG, std::path::Path::new("config.ini"))
            .expect("a valid config");
        let log = ClusterLog::open(dir, 49, time::UtcOffset::UTC).expect("open the log");
        Server::new(ServerSetup {
            config_text: CONFIG.to_string(),
            config,
            me: NodeId(49),
            log,
        })
    }

    fn report(nodetype: &str, node: u16, identity: ConfigIdentity) -> Message {
        let mut message = Message::new("report")
            .field("nodetype", nodetype)
            .field("nodeid", node)
            .field("version", VERSION)
            .field("status", "STARTED");
        identity.add_to(&mut message);
        message
    }

    fn mgm_48(server: &Server) -> NodeState {
        server.status().node(48).expect("node 48").state
    }

    #[test]
    fn another_servers_link_shows_it_connected_until_it_closes() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let server = server(dir.path());
        assert_eq!(mgm_48(&server), NodeState::NoContact);
        let mut link = None;
        let reply = server.handle(&report("mgm", 48, server.identity()), "10.0.0.2", &mut link);
        assert_eq!(reply.result(), Ok(()));
        assert_eq!(reply.get("nodeid"), Some("49"));
        let status = server.status();
        let node = status.node(48).expect("node 48");
        assert_eq!(node.state, NodeState::Connected);
        assert_eq!(node.address.as_deref(), Some("10.0.0.2"));
        // A second link for the same server is refused while the first lives.
        let again = server.handle(&report("mgm", 48, server.identity()), "10.0.0.3", &mut None);
        assert!(again
            .result()
            .is_err_and(|e| e.contains("already connected")));
        let (node, id) = link.expect("the connection is 48's link");
        server.link_closed(node, id);
        assert_eq!(mgm_48(&server), NodeState::NoContact);
        // Itself, or a node that is no management node, is no peer.
        for node in [49, 1] {
            let reply = server.handle(&report("mgm", node, server.identity()), "h", &mut None);
            assert!(reply.result().is_err(), "{node}");
        }
        let log = std::fs::read_to_string(dir.path().join("ndb_49_cluster.log")).expect("log");
        assert!(log.contains("-- Node 49: Node 48 Connected\n"), "{log}");
        assert!(log.contains("-- Node 49: Node 48 Disconnected\n"), "{log}");
    }

    #[test]
    fn a_report_of_another_config_is_refused_and_logged_once() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let server = server(dir.path());
        let mine = server.identity();
        let settings = ConfigIdentity {
            checksum: mine.checksum ^ 1,
            ..mine
        };
        // Other nodes or links come with another text, so another checksum.
        let nodes = ConfigIdentity {
            cluster_id: mine.cluster_id ^ 1,
            checksum: mine.checksum ^ 2,
        };
        for (nodetype, node, theirs, expected) in [
            (
                "mgm",
                48,
                settings,
                "management node 48 (at h) runs another config than ndb_mgmd 49",
            ),
            ("ndbd", 1, settings, "but other settings"),
            ("ndbd", 1, nodes, "its nodes or links differ"),
        ] {
            for _ in 0..2 {
                let reply = server.handle(&report(nodetype, node, theirs), "h", &mut None);
                let error = reply.result().expect_err("a refusal");
                assert!(error.contains("config mismatch: "), "{error}");
                assert!(error.contains(expected), "{error}");
            }
        }
        assert_eq!(mgm_48(&server), NodeState::NoContact);
        assert_eq!(
            server.status().node(1).map(|n| n.state),
            Some(NodeState::NoContact)
        );
        let log = std::fs::read_to_string(dir.path().join("ndb_49_cluster.log")).expect("log");
        assert_eq!(log.matches("config mismatch").count(), 3, "{log}");
        assert!(log.contains("CRITICAL -- Node 49: config mismatch: data node 1 (at h)"));
    }
}
