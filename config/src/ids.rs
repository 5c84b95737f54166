//! Node ids: duplicates are errors, and nodes without one get the lowest id left free.
//!
//! Order of assignment: every explicit NodeId is taken first (whatever its kind or place in the
//! file); then data nodes without NodeId get the lowest free id in 1..=144, in file order; then
//! management nodes in 1..=255; then API slots in 1..=255.

use std::collections::BTreeMap;

use crate::error::Diag;
use crate::model::{NodeId, NodeKind};

/// What one node section asks for.
#[derive(Clone, Debug)]
pub(crate) struct IdRequest {
    pub kind: NodeKind,
    /// The NodeId the file gives (already range-checked for the kind).
    pub explicit: Option<u16>,
    /// True when the file gave a NodeId that was rejected: the node gets no id (no invented
    /// one either), so the error is not followed by misleading ones.
    pub rejected: bool,
    /// The line of NodeId, else of the section header.
    pub line: usize,
    /// The section as written, for messages.
    pub section: String,
    /// True when neither the section nor its defaults give HostName, so that a message quoting
    /// the node's HostName can say it is the default.
    pub host_name_is_default: bool,
}

/// The id of each request, in the same order; `None` where no id could be given (reported).
pub(crate) fn assign(requests: &[&IdRequest], diag: &mut Diag) -> Vec<Option<NodeId>> {
    let mut used: BTreeMap<u16, &IdRequest> = BTreeMap::new();
    let mut assigned: Vec<Option<NodeId>> = vec![None; requests.len()];
    for (slot, request) in assigned.iter_mut().zip(requests) {
        let Some(id) = request.explicit else { continue };
        if let Some(first) = used.get(&id) {
            let message = format!(
                "NodeId {id} is already used by [{}] at line {}",
                first.section, first.line
            );
            diag.error(
                request.line,
                Some(&request.section),
                Some("NodeId"),
                message,
            );
            continue;
        }
        used.insert(id, request);
        *slot = Some(NodeId(id));
    }
    for kind in [NodeKind::Data, NodeKind::Mgm, NodeKind::Api] {
        let max = if kind == NodeKind::Data {
            NodeId::DATA_MAX
        } else {
            NodeId::MAX
        };
        for (slot, request) in assigned.iter_mut().zip(requests) {
            if request.kind != kind || request.explicit.is_some() || request.rejected {
                continue;
            }
            match (1..=max).find(|id| !used.contains_key(id)) {
                Some(id) => {
                    used.insert(id, request);
                    *slot = Some(NodeId(id));
                }
                None => diag.error(
                    request.line,
                    Some(&request.section),
                    Some("NodeId"),
                    format!("no free node id left in 1..{max}"),
                ),
            }
        }
    }
    assigned
}
