//! Links: one per pair of nodes that talk (data↔data, API↔data, management↔data).
//!
//! An explicit `[tcp]`/`[shm]` section for a pair wins, with its own values over the
//! `[tcp default]`/`[shm default]` ones; an `[shm]` section between two nodes on different
//! hosts is an error (shared memory joins nodes on one host). Otherwise data↔data is TCP;
//! API↔data is SHM when the data node has `UseShm=1` and the API slot has a HostName naming
//! the data node's host; everything else is TCP. Two HostNames name one host when they are
//! equal but for case, or both loopback. Implicit links take the `default` section values of
//! their kind.
//! A TCP link (explicit or implicit) to which `UseIoUring=1` applies, from its own `[tcp]`
//! section or `[tcp default]`, becomes a Uring link: TCP on the wire, io_uring in the process.
//! A node may still open an SHM link over TCP or io_uring (testread-perf compares them); such a
//! link takes the `[tcp default]` values, as an implicit TCP link would.

use std::collections::{BTreeMap, BTreeSet};

use crate::error::Diag;
use crate::layered::{Defaults, Layered};
use crate::model::{same_host, ClusterConfig, LinkConfig, NodeId, NodeKind, TransporterKind};
use crate::params::SectionKind;

/// The links of `config`, from the explicit link sections and the rules above;
/// `default_host_names` are the nodes whose HostName is the table's default, for messages.
pub(crate) fn choose(
    config: &ClusterConfig,
    sections: &[Layered<'_>],
    defaults: &Defaults,
    default_host_names: &BTreeSet<NodeId>,
    diag: &mut Diag,
) -> Vec<LinkConfig> {
    let explicit = explicit_pairs(config, sections, default_host_names, diag);
    let mut links = Vec::new();
    for (node1, node2) in talking_pairs(config) {
        let chosen = match explicit.get(&(node1, node2)) {
            Some(section) => link(node1, node2, section, true),
            None => {
                let kind = implicit_kind(config, node1, node2);
                let layered = Layered::new(section_of(kind), None, defaults);
                link(node1, node2, &layered, false)
            }
        };
        let over_tcp = (chosen.kind == TransporterKind::Shm).then(|| {
            let layered = Layered::new(SectionKind::Tcp, None, defaults);
            let tcp = link(node1, node2, &layered, chosen.explicit);
            Box::new(LinkConfig {
                kind: TransporterKind::Tcp,
                ..tcp
            })
        });
        links.push(LinkConfig { over_tcp, ..chosen });
    }
    links
}

/// Every pair that talks, `node1 < node2`, sorted.
fn talking_pairs(config: &ClusterConfig) -> Vec<(NodeId, NodeId)> {
    let others = config
        .data_nodes
        .iter()
        .map(|n| n.node_id)
        .chain(config.api_slots.iter().map(|n| n.node_id))
        .chain(config.mgm_nodes.iter().map(|n| n.node_id));
    let mut pairs: Vec<(NodeId, NodeId)> = Vec::new();
    for other in others {
        for data in config.data_nodes.iter().map(|n| n.node_id) {
            if other != data {
                pairs.push((data.min(other), data.max(other)));
            }
        }
    }
    pairs.sort_unstable();
    pairs.dedup();
    pairs
}

fn implicit_kind(config: &ClusterConfig, node1: NodeId, node2: NodeId) -> TransporterKind {
    let pick = |data: NodeId, api: NodeId| {
        let data = config.data_node(data)?;
        let host = config.api_slot(api)?.host_name.as_deref()?;
        let same_host = !host.is_empty() && same_host(host, &data.host_name);
        (data.use_shm && same_host).then_some(TransporterKind::Shm)
    };
    pick(node1, node2)
        .or_else(|| pick(node2, node1))
        .unwrap_or(TransporterKind::Tcp)
}

fn section_of(kind: TransporterKind) -> SectionKind {
    match kind {
        TransporterKind::Tcp | TransporterKind::Uring => SectionKind::Tcp,
        TransporterKind::Shm => SectionKind::Shm,
    }
}

/// The explicit link sections by pair, after checking that each names two distinct nodes of
/// the file that talk, and that no pair has two sections.
fn explicit_pairs<'a>(
    config: &ClusterConfig,
    sections: &[Layered<'a>],
    default_host_names: &BTreeSet<NodeId>,
    diag: &mut Diag,
) -> BTreeMap<(NodeId, NodeId), Layered<'a>> {
    let mut pairs: BTreeMap<(NodeId, NodeId), Layered<'a>> = BTreeMap::new();
    for section in sections {
        let Some((a, b)) = section_pair(config, section, diag) else {
            continue;
        };
        let key = (a.min(b), a.max(b));
        if let Some(first) = pairs.get(&key) {
            let message = format!(
                "a link between nodes {} and {} is already given by [{}] at line {}",
                key.0,
                key.1,
                first.section_name().unwrap_or_default(),
                first.line()
            );
            diag.error(section.line(), section.section_name(), None, message);
            continue;
        }
        if section.kind == SectionKind::Shm {
            if let (Some(host_a), Some(host_b)) = (config.host_name(a), config.host_name(b)) {
                if !same_host(host_a, host_b) {
                    let quote = |id: NodeId, host: &str| {
                        let default = default_host_names.contains(&id);
                        format!(
                            "HostName={host}{}",
                            if default { " (the default)" } else { "" }
                        )
                    };
                    let message = format!(
                        "shared memory joins nodes on one host, but node {a} has {} and node \
                         {b} {}; use [tcp]",
                        quote(a, host_a),
                        quote(b, host_b)
                    );
                    diag.error(section.line(), section.section_name(), None, message);
                    continue;
                }
            }
        }
        if !talks(config, a, b) {
            diag.warn(
                section.line(),
                format!(
                    "[{}] links nodes {a} and {b}, which never talk; it is ignored",
                    section_name(section)
                ),
            );
            continue;
        }
        pairs.insert(key, *section);
    }
    pairs
}

fn section_name<'a>(section: &Layered<'a>) -> &'a str {
    section.section_name().unwrap_or_default()
}

/// NodeId1 and NodeId2 of a link section, when both are given and name distinct nodes.
fn section_pair(
    config: &ClusterConfig,
    section: &Layered<'_>,
    diag: &mut Diag,
) -> Option<(NodeId, NodeId)> {
    let mut ends = Vec::with_capacity(2);
    for name in ["NodeId1", "NodeId2"] {
        // A missing end was reported by the required-parameter check.
        let Some(setting) = section.setting(name) else {
            continue;
        };
        let id = NodeId(u16::try_from(section.int(name)).unwrap_or(0));
        if config.node_kind(id).is_none() {
            let message = format!("node {id} is not defined in this file");
            diag.error(setting.line, section.section_name(), Some(name), message);
            continue;
        }
        ends.push(id);
    }
    match ends.as_slice() {
        [a, b] if a == b => {
            let message = format!("NodeId1 and NodeId2 are both {a}; a link joins two nodes");
            diag.error(
                section.line_of("NodeId2"),
                section.section_name(),
                Some("NodeId2"),
                message,
            );
            None
        }
        [a, b] => Some((*a, *b)),
        _ => None,
    }
}

/// True when `a` and `b` exchange signals: at least one is a data node.
fn talks(config: &ClusterConfig, a: NodeId, b: NodeId) -> bool {
    let is_data = |id| config.node_kind(id) == Some(NodeKind::Data);
    a != b && (is_data(a) || is_data(b))
}

fn link(node1: NodeId, node2: NodeId, l: &Layered<'_>, explicit: bool) -> LinkConfig {
    let kind = match l.kind {
        SectionKind::Shm => TransporterKind::Shm,
        _ if l.bool("UseIoUring") => TransporterKind::Uring,
        _ => TransporterKind::Tcp,
    };
    LinkConfig {
        node1,
        node2,
        kind,
        explicit,
        send_buffer_memory_bytes: l.int("SendBufferMemory"),
        receive_buffer_memory_bytes: other_kind_int(l, SectionKind::Tcp, "ReceiveBufferMemory"),
        checksum: l.bool("Checksum"),
        overload_limit_bytes: l.int("OverloadLimit"),
        shm_size_bytes: other_kind_int(l, SectionKind::Shm, "ShmSize"),
        shm_spintime_us: u32::try_from(other_kind_int(l, SectionKind::Shm, "ShmSpintime"))
            .unwrap_or(u32::MAX),
        over_tcp: None,
    }
}

/// A value that only `owner` links use: from `l` when it is of that kind, else the table's
/// default (the value is unused on the other kind of link).
fn other_kind_int(l: &Layered<'_>, owner: SectionKind, name: &str) -> u64 {
    if l.kind == owner {
        l.int(name)
    } else {
        Layered {
            kind: owner,
            own: None,
            defaults: None,
            defaults_rejected: None,
        }
        .int(name)
    }
}
