//! Proves that every example in `config/examples` parses without errors or warnings, and that
//! the examples mean what their comments say (node groups, SHM links, derived ports).

use std::fs;
use std::path::{Path, PathBuf};

use rndb_config::{parse_file, ClusterConfig, NodeId, NodeKind, TransporterKind};

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name)
}

fn parse(name: &str) -> ClusterConfig {
    let path = example(name);
    parse_file(&path).unwrap_or_else(|e| panic!("{}:\n{e}", path.display()))
}

#[test]
fn every_example_parses_cleanly() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut count = 0;
    for entry in fs::read_dir(&dir).expect("read examples") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "ini") {
            let config = parse_file(&path).unwrap_or_else(|e| panic!("{}:\n{e}", path.display()));
            assert!(
                config.warnings.is_empty(),
                "{}: {:?}",
                path.display(),
                config.warnings
            );
            count += 1;
        }
    }
    assert!(
        count >= 3,
        "expected at least three examples, found {count}"
    );
}

#[test]
fn single_has_one_data_node_and_free_slots() {
    let config = parse("single.ini");
    assert_eq!(config.no_of_replicas, 1);
    assert_eq!(config.data_nodes.len(), 1);
    assert_eq!(config.data_node_port(NodeId(1)), Some(11861));
    assert!(config.api_slots.iter().any(|s| !s.node_id_explicit));
    assert!(config
        .api_slots
        .iter()
        .any(|s| s.node_id_explicit && s.node_id.0 >= 50));
}

#[test]
fn local_uses_shm_between_api_and_data_nodes() {
    let config = parse("local.ini");
    assert_eq!(config.node_groups.len(), 1);
    assert_eq!(config.node_groups[0].nodes, vec![NodeId(1), NodeId(2)]);
    for link in &config.links {
        let kinds = (config.node_kind(link.node1), config.node_kind(link.node2));
        let expected = match kinds {
            (Some(NodeKind::Data), Some(NodeKind::Data)) => TransporterKind::Tcp,
            _ => TransporterKind::Shm,
        };
        assert_eq!(link.kind, expected, "link {}-{}", link.node1, link.node2);
    }
    assert_eq!(config.links.len(), 1 + 2 * config.api_slots.len());
}

#[test]
fn local_spin_uses_shm_everywhere_and_spins() {
    let config = parse("local-spin.ini");
    assert_eq!(config.node_groups.len(), 1);
    assert_eq!(config.node_groups[0].nodes, vec![NodeId(1), NodeId(2)]);
    assert!(config.links.iter().all(|l| l.kind == TransporterKind::Shm));
    assert_eq!(config.links.len(), 1 + 2 * config.api_slots.len());
    assert!(config.links.iter().all(|l| l.shm_spintime_us == 300));
    for node in &config.data_nodes {
        assert_eq!(node.lock_execute_thread_to_cpu, vec![1]);
    }
}

#[test]
fn four_nodes_form_two_groups_of_two() {
    let config = parse("four-nodes.ini");
    let groups: Vec<(u32, Vec<u16>)> = config
        .node_groups
        .iter()
        .map(|g| (g.id, g.nodes.iter().map(|n| n.0).collect()))
        .collect();
    assert_eq!(groups, vec![(0, vec![1, 2]), (1, vec![3, 4])]);
    assert!(config.links.iter().all(|l| l.kind == TransporterKind::Tcp));
}

#[test]
fn mgmd_has_one_management_server_on_ndbs_port() {
    let config = parse("mgmd.ini");
    assert_eq!(config.mgm_nodes.len(), 1);
    let mgm = &config.mgm_nodes[0];
    assert_eq!((mgm.node_id, mgm.port_number), (NodeId(49), 1186));
    assert_eq!(mgm.data_dir, PathBuf::from("."));
    assert_eq!(config.node_kind(NodeId(49)), Some(NodeKind::Mgm));
    assert_eq!(config.node_groups.len(), 1);
}
