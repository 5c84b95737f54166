//! What ndb_mgmd knows of each node, as `get status` carries it (`node.<id>.<name>: value`, as
//! NDB's mgmapi), and the text `ndb_mgm` prints from it (SHOW, STATUS).

use std::fmt::Write as _;

use crate::wire::Message;

/// The version string every rndb process reports (NDB prints `mysql-8.0.x ndb-8.0.x`).
pub const VERSION: &str = concat!("rndb-", env!("CARGO_PKG_VERSION"));

/// A node's kind, as NDB names it in SHOW.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeType {
    Ndb,
    Mgm,
    Api,
}

impl NodeType {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeType::Ndb => "NDB",
            NodeType::Mgm => "MGM",
            NodeType::Api => "API",
        }
    }

    pub fn parse(text: &str) -> Option<NodeType> {
        match text {
            "NDB" => Some(NodeType::Ndb),
            "MGM" => Some(NodeType::Mgm),
            "API" => Some(NodeType::Api),
            _ => None,
        }
    }
}

/// A node's state, with NDB's names (`ndb_mgm_get_node_status_string`). Management and API
/// nodes are `Connected` or `NoContact`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeState {
    NoContact,
    /// Connected and waiting for START (`ndbd --nostart`, `N RESTART -n`).
    NotStarted,
    Starting,
    Started,
    ShuttingDown,
    Connected,
}

impl NodeState {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::NoContact => "NO_CONTACT",
            NodeState::NotStarted => "NOT_STARTED",
            NodeState::Starting => "STARTING",
            NodeState::Started => "STARTED",
            NodeState::ShuttingDown => "SHUTTING_DOWN",
            NodeState::Connected => "CONNECTED",
        }
    }

    pub fn parse(text: &str) -> Option<NodeState> {
        [
            NodeState::NoContact,
            NodeState::NotStarted,
            NodeState::Starting,
            NodeState::Started,
            NodeState::ShuttingDown,
            NodeState::Connected,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
    }
}

/// One node of the cluster, as ndb_mgmd sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeStatus {
    pub id: u16,
    pub node_type: NodeType,
    pub state: NodeState,
    /// The version the node reported (`rndb-0.1.0`), when connected.
    pub version: Option<String>,
    /// The address it connects from, when connected and known.
    pub address: Option<String>,
    /// Data nodes: the node group.
    pub node_group: Option<u32>,
    /// Data nodes: the master (the started data node with the lowest id, as QMGR picks it).
    pub master: bool,
    /// The HostName of the node's section; `None` accepts any host.
    pub config_host: Option<String>,
    /// Single user mode: a data node in it, or the API node it lets in.
    pub single_user: bool,
}

/// Every node of the cluster, in node-id order, and the management server that answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterStatus {
    pub nodes: Vec<NodeStatus>,
}

impl ClusterStatus {
    /// The fields of a `get status` reply.
    pub fn to_message(&self, mut reply: Message) -> Message {
        reply.push("nodes", self.nodes.len());
        for n in &self.nodes {
            let key = |name: &str| format!("node.{}.{name}", n.id);
            reply.push(key("type"), n.node_type.as_str());
            reply.push(key("status"), n.state.as_str());
            if let Some(v) = &n.version {
                reply.push(key("version"), v);
            }
            if let Some(a) = &n.address {
                reply.push(key("address"), a);
            }
            if let Some(g) = n.node_group {
                reply.push(key("nodegroup"), g);
            }
            if n.master {
                reply.push(key("master"), 1);
            }
            if let Some(h) = &n.config_host {
                reply.push(key("hostname"), h);
            }
            if n.single_user {
                reply.push(key("singleuser"), 1);
            }
        }
        reply
    }

    /// Reads a `get status` reply; a node with a missing or unknown type or status is an error.
    pub fn from_message(reply: &Message) -> Result<ClusterStatus, String> {
        let mut ids: Vec<u16> = reply
            .fields
            .iter()
            .filter_map(|(name, _)| {
                name.strip_prefix("node.")?
                    .strip_suffix(".type")?
                    .parse()
                    .ok()
            })
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let mut nodes = Vec::with_capacity(ids.len());
        for id in ids {
            let get = |name: &str| reply.get(&format!("node.{id}.{name}"));
            let node_type = get("type")
                .and_then(NodeType::parse)
                .ok_or_else(|| format!("node {id}: no valid type"))?;
            let state = get("status")
                .and_then(NodeState::parse)
                .ok_or_else(|| format!("node {id}: no valid status"))?;
            let node_group = match get("nodegroup") {
                Some(g) => Some(g.parse().map_err(|_| format!("node {id}: bad nodegroup"))?),
                None => None,
            };
            nodes.push(NodeStatus {
                id,
                node_type,
                state,
                version: get("version").map(str::to_string),
                address: get("address").map(str::to_string),
                node_group,
                master: get("master") == Some("1"),
                config_host: get("hostname").map(str::to_string),
                single_user: get("singleuser") == Some("1"),
            });
        }
        Ok(ClusterStatus { nodes })
    }

    pub fn of_type(&self, node_type: NodeType) -> impl Iterator<Item = &NodeStatus> {
        self.nodes.iter().filter(move |n| n.node_type == node_type)
    }

    pub fn node(&self, id: u16) -> Option<&NodeStatus> {
        self.nodes.iter().find(|n| n.id == id)
    }
}

/// `SHOW`, in NDB's layout.
pub fn format_show(status: &ClusterStatus) -> String {
    let mut out = String::from("Cluster Configuration\n---------------------\n");
    let groups = [
        (NodeType::Ndb, "ndbd(NDB)"),
        (NodeType::Mgm, "ndb_mgmd(MGM)"),
        (NodeType::Api, "mysqld(API)"),
    ];
    for (index, (node_type, title)) in groups.into_iter().enumerate() {
        if index > 0 {
            out.push('\n');
        }
        let count = status.of_type(node_type).count();
        let _ = writeln!(out, "[{title}]\t{count} node(s)");
        for n in status.of_type(node_type) {
            out.push_str(&show_line(n));
            out.push('\n');
        }
    }
    out
}

/// One node's SHOW line: `id=1\t@127.0.0.1  (rndb-0.1.0, Nodegroup: 0, *)`, or
/// `id=2 (not connected, accepting connect from any host)`.
fn show_line(n: &NodeStatus) -> String {
    if n.state == NodeState::NoContact {
        let from = n.config_host.as_deref().unwrap_or("any host");
        return format!("id={} (not connected, accepting connect from {from})", n.id);
    }
    let mut details = vec![n.version.clone().unwrap_or_else(|| "unknown".into())];
    match n.state {
        NodeState::NotStarted => details.push("not started".into()),
        NodeState::Starting => details.push("starting".into()),
        NodeState::ShuttingDown => details.push("shutting down".into()),
        _ => {}
    }
    if n.single_user {
        details.push(match n.node_type {
            NodeType::Api => "allowed single user".into(),
            _ => "single user mode".into(),
        });
    }
    if let Some(g) = n.node_group {
        details.push(format!("Nodegroup: {g}"));
    }
    if n.master {
        details.push("*".into());
    }
    let address = n.address.as_deref().unwrap_or("");
    format!("id={}\t@{address}  ({})", n.id, details.join(", "))
}

/// `N STATUS` / `ALL STATUS` for one data node: `Node 1: started (rndb-0.1.0)`.
pub fn format_node_status(n: &NodeStatus) -> String {
    let version = n.version.as_deref().unwrap_or("unknown");
    match n.state {
        NodeState::NoContact => format!("Node {}: not connected", n.id),
        NodeState::NotStarted => format!("Node {}: not started ({version})", n.id),
        NodeState::Starting => format!("Node {}: starting ({version})", n.id),
        NodeState::Started if n.single_user => {
            format!("Node {}: single user mode ({version})", n.id)
        }
        NodeState::Started => format!("Node {}: started ({version})", n.id),
        NodeState::ShuttingDown => format!("Node {}: shutting down ({version})", n.id),
        NodeState::Connected => format!("Node {}: connected ({version})", n.id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: u16, node_type: NodeType, state: NodeState) -> NodeStatus {
        let connected = state != NodeState::NoContact;
        NodeStatus {
            id,
            node_type,
            state,
            version: connected.then(|| VERSION.to_string()),
            address: connected.then(|| "127.0.0.1".to_string()),
            node_group: (node_type == NodeType::Ndb).then_some(0),
            master: id == 1,
            config_host: (node_type != NodeType::Api).then(|| "127.0.0.1".to_string()),
            single_user: false,
        }
    }

    fn sample() -> ClusterStatus {
        ClusterStatus {
            nodes: vec![
                node(1, NodeType::Ndb, NodeState::Started),
                node(2, NodeType::Ndb, NodeState::NoContact),
                node(49, NodeType::Mgm, NodeState::Connected),
                node(50, NodeType::Api, NodeState::Connected),
                node(51, NodeType::Api, NodeState::NoContact),
            ],
        }
    }

    #[test]
    fn status_round_trips_through_a_message() {
        let status = sample();
        let message = status.to_message(Message::ok_reply("get status"));
        assert_eq!(ClusterStatus::from_message(&message), Ok(status));
    }

    #[test]
    fn show_has_ndbs_layout() {
        let expected = format!(
            "Cluster Configuration\n\
             ---------------------\n\
             [ndbd(NDB)]\t2 node(s)\n\
             id=1\t@127.0.0.1  ({VERSION}, Nodegroup: 0, *)\n\
             id=2 (not connected, accepting connect from 127.0.0.1)\n\
             \n\
             [ndb_mgmd(MGM)]\t1 node(s)\n\
             id=49\t@127.0.0.1  ({VERSION})\n\
             \n\
             [mysqld(API)]\t2 node(s)\n\
             id=50\t@127.0.0.1  ({VERSION})\n\
             id=51 (not connected, accepting connect from any host)\n"
        );
        assert_eq!(format_show(&sample()), expected);
    }

    #[test]
    fn node_status_lines_name_the_state() {
        let s = sample();
        assert_eq!(
            format_node_status(&s.nodes[0]),
            format!("Node 1: started ({VERSION})")
        );
        assert_eq!(format_node_status(&s.nodes[1]), "Node 2: not connected");
    }
}
