//! Proves the parser's rules case by case with small inline files: each case is a config text
//! and the expected summary of what it means (nodes, groups, links) or of the errors it has.

use std::path::Path;

use rndb_config::{param_table, parse_str, ClusterConfig, NodeId, SectionKind, TransporterKind};

/// A compact, stable rendering of a parsed config (or of its errors, one per line).
fn summary(text: &str) -> String {
    match parse_str(text, Path::new("t.ini")) {
        Ok(config) => render(&config),
        Err(errors) => errors
            .iter()
            .map(|e| {
                let section = e
                    .section
                    .as_ref()
                    .map(|s| format!("[{s}] "))
                    .unwrap_or_default();
                let parameter = e
                    .parameter
                    .as_ref()
                    .map(|p| format!("{p}: "))
                    .unwrap_or_default();
                format!("error {}: {section}{parameter}{}", e.line, e.message)
            })
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

fn render(config: &ClusterConfig) -> String {
    let mut lines = vec![format!("replicas {}", config.no_of_replicas)];
    for n in &config.data_nodes {
        lines.push(format!(
            "data {} {} group {}",
            n.node_id, n.host_name, n.node_group
        ));
    }
    for n in &config.mgm_nodes {
        lines.push(format!(
            "mgm {} {}:{}",
            n.node_id, n.host_name, n.port_number
        ));
    }
    for n in &config.api_slots {
        let host = n.host_name.as_deref().unwrap_or("*");
        let how = if n.node_id_explicit {
            "explicit"
        } else {
            "assigned"
        };
        lines.push(format!("api {} {host} {how}", n.node_id));
    }
    for l in &config.links {
        let how = if l.explicit { " explicit" } else { "" };
        lines.push(format!("link {}-{} {}{how}", l.node1, l.node2, l.kind));
    }
    for w in &config.warnings {
        lines.push(format!("warning {}: {}", w.line, w.message));
    }
    lines.join("\n")
}

/// Checks that `text` means `expected` (leading and trailing whitespace of lines ignored).
#[track_caller]
fn check(text: &str, expected: &str) {
    let expected: Vec<&str> = expected
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let actual = summary(text);
    assert_eq!(
        actual.lines().collect::<Vec<_>>(),
        expected,
        "\ninput:\n{text}\nactual:\n{actual}\n"
    );
}

/// Parses a file that must be valid.
#[track_caller]
fn parse(text: &str) -> ClusterConfig {
    parse_str(text, Path::new("t.ini")).unwrap_or_else(|e| panic!("unexpected errors:\n{e}"))
}

#[test]
fn one_data_node_with_free_api_slots() {
    check(
        "[ndbd]\nNodeId=1\nNoOfReplicas=1\nHostName=127.0.0.1\n[api]\n[api]\nHostName=127.0.0.1\n",
        "replicas 1
         data 1 127.0.0.1 group 0
         api 2 * assigned
         api 3 127.0.0.1 assigned
         link 1-2 TCP
         link 1-3 TCP",
    );
}

#[test]
fn shm_needs_use_shm_and_the_same_host() {
    check(
        "[ndbd default]\nNoOfReplicas=1\nUseShm=1\nHostName=h\n[ndbd]\nNodeId=1\n\
         [api]\nNodeId=10\nHostName=h\n[api]\nNodeId=11\nHostName=other\n[api]\nNodeId=12\n",
        "replicas 1
         data 1 h group 0
         api 10 h explicit
         api 11 other explicit
         api 12 * explicit
         link 1-10 SHM
         link 1-11 TCP
         link 1-12 TCP",
    );
    let config = parse("[ndbd]\nNodeId=1\nNoOfReplicas=1\nHostName=h\n[api]\nHostName=h\n");
    assert_eq!(
        config.link(NodeId(1), NodeId(2)).map(|l| l.kind),
        Some(TransporterKind::Tcp)
    );
}

#[test]
fn data_nodes_get_ids_before_api_slots() {
    check(
        "[api]\n[ndbd]\nNoOfReplicas=1\n[mgm]\nHostName=m\n",
        "replicas 1
         data 1 localhost group 0
         mgm 2 m:1186
         api 3 * assigned
         link 1-2 TCP
         link 1-3 TCP",
    );
}

#[test]
fn explicit_link_section_wins_and_keeps_its_values() {
    let config = parse(
        "[ndbd default]\nNoOfReplicas=2\n[ndbd]\nNodeId=1\n[ndbd]\nNodeId=2\n\
         [shm default]\nShmSize=1M\n[shm]\nNodeId1=1\nNodeId2=2\nShmSpintime=200\n",
    );
    let link = config.link(NodeId(2), NodeId(1)).expect("link 1-2");
    assert_eq!(link.kind, TransporterKind::Shm);
    assert!(link.explicit);
    assert!(link.checksum, "SHM checksum defaults to true, as in NDB");
    assert_eq!(link.shm_size_bytes, 1 << 20);
    assert_eq!(link.shm_spintime_us, 200);
    assert_eq!(
        link.overload_limit(),
        link.send_buffer_memory_bytes / 10 * 8
    );
}

#[test]
fn an_shm_link_opened_over_tcp_takes_the_tcp_defaults() {
    let text = "[ndbd default]\nNoOfReplicas=1\nUseShm=1\nHostName=h\n[ndbd]\nNodeId=1\n\
                [api]\nNodeId=10\nHostName=h\n[shm default]\nSendBufferMemory=4M\n";
    let config = parse(text);
    let link = config.link(NodeId(1), NodeId(10)).expect("link 1-10");
    assert_eq!(link.kind, TransporterKind::Shm);
    assert!(link.checksum);
    assert_eq!(link.send_buffer_memory_bytes, 4 << 20);
    for kind in [TransporterKind::Tcp, TransporterKind::Uring] {
        let tcp = link.opened_as(kind);
        assert_eq!(tcp.kind, TransporterKind::Tcp);
        assert!(!tcp.checksum, "NDB's TCP Checksum default is 0");
        assert_eq!(tcp.send_buffer_memory_bytes, 2 << 20);
    }
    assert_eq!(link.opened_as(TransporterKind::Shm), link);
    // The file's [tcp default] applies to it.
    let config = parse(&format!("{text}[tcp default]\nChecksum=1\n"));
    let link = config.link(NodeId(1), NodeId(10)).expect("link 1-10");
    assert!(link.opened_as(TransporterKind::Tcp).checksum);
    // A TCP link has no other settings.
    let config = parse("[ndbd]\nNodeId=1\nNoOfReplicas=1\n[api]\n");
    let link = config.link(NodeId(1), NodeId(2)).expect("link 1-2");
    assert_eq!(link.opened_as(TransporterKind::Tcp), link);
}

#[test]
fn use_io_uring_makes_tcp_links_uring() {
    check(
        "[ndbd default]\nNoOfReplicas=1\nUseShm=1\nHostName=h\n[ndbd]\nNodeId=1\n\
         [api]\nNodeId=10\nHostName=h\n[api]\nNodeId=11\n[api]\nNodeId=12\n\
         [tcp]\nNodeId1=1\nNodeId2=11\nUseIoUring=1\n",
        "replicas 1
         data 1 h group 0
         api 10 h explicit
         api 11 * explicit
         api 12 * explicit
         link 1-10 SHM
         link 1-11 URING explicit
         link 1-12 TCP",
    );
    let config = parse("[ndbd]\nNodeId=1\nNoOfReplicas=1\n[api]\n[tcp default]\nUseIoUring=yes\n");
    let link = config.link(NodeId(1), NodeId(2)).expect("link 1-2");
    assert_eq!(link.kind, TransporterKind::Uring);
    assert_eq!(link.param_value("type").as_deref(), Some("URING"));
    assert_eq!(link.param_value("UseIoUring").as_deref(), Some("1"));
    assert_eq!(
        link.param_value("ReceiveBufferMemory").as_deref(),
        Some("2097152")
    );
}

#[test]
fn defaults_apply_wherever_they_are() {
    let config = parse("[ndbd]\nNodeId=1\n[ndbd default]\nNoOfReplicas=1\nDataMemory=1G\n");
    assert_eq!(config.no_of_replicas, 1);
    assert_eq!(config.data_nodes[0].data_memory_bytes, 1 << 30);
    assert_eq!(config.data_node_port(NodeId(1)), Some(11861));
}

#[test]
fn a_node_value_overrides_the_default_section() {
    let config = parse(
        "[ndbd default]\nNoOfReplicas=1\nDataMemory=1G\n[ndbd]\nNodeId=1\nDataMemory=2M\nServerPort=3000\n",
    );
    assert_eq!(config.data_nodes[0].data_memory_bytes, 2 << 20);
    assert_eq!(config.data_node_port(NodeId(1)), Some(3000));
}

#[test]
fn every_mistake_is_reported_in_line_order() {
    check(
        "[ndbd]\nNodeId=1\nNoOfReplicas=0\nDataMemory=1T\nUseShm=perhaps\n[ndbd]\nNodeId=1\n",
        "error 3: [ndbd] NoOfReplicas: value 0 out of range 1..4
         error 4: [ndbd] DataMemory: expected a size (a number with an optional K, M or G suffix), got `1T`
         error 5: [ndbd] UseShm: expected a boolean (true/false, yes/no, y/n, on/off, 1/0), got `perhaps`
         error 7: [ndbd] NodeId: NodeId 1 is already used by [ndbd] at line 2",
    );
}

#[test]
fn rondis_server_port_is_an_api_slots_port_checked_for_range() {
    let text = "[ndbd]\nNoOfReplicas=1\n[api]\nRondisServerPort=6380\n[api]\n";
    let config = parse_str(text, Path::new("t.ini")).expect("valid");
    let ports: Vec<_> = config
        .api_slots
        .iter()
        .map(|s| s.rondis_server_port)
        .collect();
    assert_eq!(ports, [Some(6380), None]);
    check(
        "[ndbd]\nNoOfReplicas=1\n[mysqld]\nRondisServerPort=70000\n",
        "error 4: [mysqld] RondisServerPort: value 70000 out of range 0..65535",
    );
    check(
        "[ndbd]\nNoOfReplicas=1\n[api]\nRondisServerPort=redis\n",
        "error 4: [api] RondisServerPort: expected an integer, got `redis`",
    );
}

#[test]
fn a_size_too_large_for_64_bits_is_out_of_range() {
    check(
        "[ndbd]\nNoOfReplicas=1\nDataMemory=99999999999999999999G\n",
        "error 3: [ndbd] DataMemory: value 99999999999999999999G out of range 1M..16T",
    );
}

#[test]
fn group_size_must_match_replicas() {
    check(
        "[ndbd]\nNodeId=1\n[ndbd]\nNodeId=2\n[ndbd]\nNodeId=3\n",
        "error 5: [ndbd] node group 1 has 1 data node (3) but NoOfReplicas is 2 (the default); every node group needs exactly NoOfReplicas data nodes",
    );
}

#[test]
fn a_host_name_from_the_default_says_so_in_the_shm_host_error() {
    check(
        "[ndbd]\nNodeId=1\nNoOfReplicas=1\n[api]\nNodeId=50\nHostName=10.0.0.9\n[shm]\nNodeId1=1\nNodeId2=50\n",
        "error 7: [shm] shared memory joins nodes on one host, but node 1 has HostName=localhost (the default) and node 50 HostName=10.0.0.9; use [tcp]",
    );
}

#[test]
fn a_replica_count_from_the_default_says_so_when_nodes_differ() {
    check(
        "[ndbd]\nNodeId=1\n[ndbd]\nNodeId=2\nNoOfReplicas=1\n",
        "error 5: [ndbd] NoOfReplicas: 1 differs from 2 (the default) of data node 1 (line 1); it must be the same for all data nodes",
    );
    check(
        "[ndbd]\nNodeId=1\nNoOfReplicas=1\n[ndbd]\nNodeId=2\n",
        "error 4: [ndbd] NoOfReplicas: 2 (the default) differs from 1 given for data node 1 (line 3); it must be the same for all data nodes",
    );
}

#[test]
fn a_link_between_api_nodes_is_ignored_with_a_warning() {
    check(
        "[ndbd]\nNodeId=1\nNoOfReplicas=1\n[api]\nNodeId=2\n[api]\nNodeId=3\n[tcp]\nNodeId1=2\nNodeId2=3\n",
        "replicas 1
         data 1 localhost group 0
         api 2 * explicit
         api 3 * explicit
         link 1-2 TCP
         link 1-3 TCP
         warning 8: [tcp] links nodes 2 and 3, which never talk; it is ignored",
    );
}

#[test]
fn empty_input_has_no_data_node() {
    check(
        "",
        "error 0: no data node: the file needs at least one [ndbd] section",
    );
}

#[test]
fn a_missing_file_is_named_and_said_to_be_missing() {
    let path = Path::new("/nonexistent/rndb/cluster.ini");
    let errors = rndb_config::parse_file(path).expect_err("missing file");
    assert_eq!(errors.len(), 1);
    assert_eq!(
        errors.to_string(),
        "/nonexistent/rndb/cluster.ini: the config file does not exist"
    );
}

#[test]
fn cluster_id_is_stable_and_depends_on_the_cluster() {
    let a = parse("[ndbd]\nNodeId=1\nNoOfReplicas=1\n");
    let b = parse("# comment\n[ndbd]\nnodeid: 1\nnoofreplicas=1\n");
    let c = parse("[ndbd]\nNodeId=2\nNoOfReplicas=1\n");
    assert_eq!(a.cluster_id(), b.cluster_id());
    assert_ne!(a.cluster_id(), c.cluster_id());
}

#[test]
fn the_table_drives_defaults_ranges_and_configinfo() {
    let table = rndb_config::param_table();
    let data_memory = rndb_config::find_param(rndb_config::SectionKind::Ndbd, "datamemory")
        .expect("DataMemory is in the table");
    assert_eq!(data_memory.default_text(), "98M");
    assert_eq!(data_memory.range_text(), "1M..16T");
    assert!(table
        .iter()
        .any(|p| !p.implemented && p.name == "SharedGlobalMemory"));
}

#[test]
fn every_implemented_node_parameter_can_be_queried() {
    let config = parse("[ndbd]\nNodeId=1\nNoOfReplicas=1\n[ndb_mgmd]\nNodeId=2\n[api]\nNodeId=3\n");
    for (id, kind) in [
        (1, SectionKind::Ndbd),
        (2, SectionKind::Mgm),
        (3, SectionKind::Api),
    ] {
        for param in param_table()
            .iter()
            .filter(|p| p.applies_to(kind) && p.implemented)
        {
            let value = config.param_value(NodeId(id), param.name);
            assert!(value.is_some(), "[{kind}] {} cannot be queried", param.name);
        }
    }
}
