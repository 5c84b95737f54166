//! NoOfReplicas and node groups, formed as NDB forms them.
//!
//! A data node with an explicit `Nodegroup` joins that group. The others, in file order, join
//! the lowest group id that holds fewer than NoOfReplicas nodes (counting the explicit members).
//! Every group must end with exactly NoOfReplicas members.

use std::collections::BTreeMap;
use std::fmt;

use crate::error::Diag;
use crate::ids::IdRequest;
use crate::model::{DataNodeConfig, NodeGroup};
use crate::params::{find_param, ParamDefault, SectionKind};

/// A data node before its id and group are settled: what `build` reads from its section and
/// this module groups.
pub(crate) struct DataDraft {
    pub config: DataNodeConfig,
    pub id: IdRequest,
    /// The explicit Nodegroup, if any.
    pub nodegroup: Option<u32>,
    /// NoOfReplicas, or `None` when the file gave a rejected value.
    pub replicas: Option<u32>,
    /// True when neither the section nor its defaults give NoOfReplicas: `replicas` is the
    /// table's default, and messages quoting it say so.
    pub replicas_is_default: bool,
    /// The line that gave NoOfReplicas, else the section's header line.
    pub replicas_line: usize,
}

/// The cluster's NoOfReplicas and whether it is the table's default (no data node gave one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Replicas {
    pub count: u32,
    pub is_default: bool,
}

impl fmt::Display for Replicas {
    /// The count, with " (the default)" when the file did not give it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.count)?;
        if self.is_default {
            f.write_str(" (the default)")?;
        }
        Ok(())
    }
}

impl DataDraft {
    /// This node's NoOfReplicas as messages quote it, or `None` when its value was rejected.
    fn replicas(&self) -> Option<Replicas> {
        self.replicas.map(|count| Replicas {
            count,
            is_default: self.replicas_is_default,
        })
    }
}

/// The cluster's NoOfReplicas: the first data node's; every other node must agree.
///
/// `None` when a data node's value was rejected: the groups cannot be checked then, and the
/// rejected value was reported already.
pub(crate) fn check_replicas(data: &[DataDraft], diag: &mut Diag) -> Option<Replicas> {
    let Some(first) = data.first() else {
        return Some(Replicas {
            count: default_replicas(),
            is_default: true,
        });
    };
    let first_replicas = first.replicas()?;
    let mut all_known = true;
    for node in data.iter().skip(1) {
        match node.replicas() {
            None => all_known = false,
            Some(replicas) if replicas.count != first_replicas.count => {
                let given = if first_replicas.is_default {
                    "of"
                } else {
                    "given for"
                };
                let message = format!(
                    "{replicas} differs from {first_replicas} {given} data node {} (line {}); \
                     it must be the same for all data nodes",
                    first.config.node_id, first.replicas_line
                );
                let section = Some(node.id.section.as_str());
                diag.error(node.replicas_line, section, Some("NoOfReplicas"), message);
            }
            Some(_) => {}
        }
    }
    all_known.then_some(first_replicas)
}

/// The table's NoOfReplicas default.
fn default_replicas() -> u32 {
    match find_param(SectionKind::Ndbd, "NoOfReplicas").map(|p| p.default) {
        Some(ParamDefault::Int(n)) => u32::try_from(n).unwrap_or(1),
        _ => 1,
    }
}

/// Places every data node in a group and checks the group sizes (when NoOfReplicas is known).
pub(crate) fn form(
    mut data: Vec<DataDraft>,
    known_replicas: Option<Replicas>,
    diag: &mut Diag,
) -> (Vec<DataNodeConfig>, Vec<NodeGroup>) {
    let replicas = known_replicas.map_or_else(default_replicas, |r| r.count);
    let mut members: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (index, node) in data.iter().enumerate() {
        if let Some(group) = node.nodegroup {
            members.entry(group).or_default().push(index);
        }
    }
    for (index, node) in data.iter().enumerate() {
        if node.nodegroup.is_some() {
            continue;
        }
        let group = lowest_open_group(&members, replicas);
        members.entry(group).or_default().push(index);
    }
    let mut groups = Vec::with_capacity(members.len());
    for (id, mut indexes) in members {
        indexes.sort_unstable();
        for &index in &indexes {
            data[index].config.node_group = id;
        }
        let nodes = indexes.iter().map(|&i| data[i].config.node_id).collect();
        let group = NodeGroup { id, nodes };
        let first = indexes.first().and_then(|&i| data.get(i));
        let wrong_size = group.nodes.len() != replicas as usize;
        if let (Some(first), true, Some(known)) = (first, wrong_size, known_replicas) {
            report_bad_group(&group, first, known, diag);
        }
        groups.push(group);
    }
    (data.into_iter().map(|d| d.config).collect(), groups)
}

/// The lowest group id with room for one more node.
fn lowest_open_group(members: &BTreeMap<u32, Vec<usize>>, replicas: u32) -> u32 {
    // NoOfReplicas is at least 1 after the range check; `max` keeps the loop finite regardless.
    let size = replicas.max(1) as usize;
    let mut group = 0u32;
    while members.get(&group).is_some_and(|m| m.len() >= size) {
        group = group.saturating_add(1);
    }
    group
}

fn report_bad_group(group: &NodeGroup, first: &DataDraft, replicas: Replicas, diag: &mut Diag) {
    let ids: Vec<String> = group.nodes.iter().map(ToString::to_string).collect();
    let noun = if group.nodes.len() == 1 {
        "data node"
    } else {
        "data nodes"
    };
    let message = format!(
        "node group {} has {} {noun} ({}) but NoOfReplicas is {replicas}; every node group \
         needs exactly NoOfReplicas data nodes",
        group.id,
        group.nodes.len(),
        ids.join(", ")
    );
    diag.error(first.config.line, Some(&first.id.section), None, message);
}
