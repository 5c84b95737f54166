//! Helpers shared by the integration tests: a hand-built cluster config and connected sockets.
#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;

use rndb_config::{
    ApiSlotConfig, ClusterConfig, DataNodeConfig, LinkConfig, MgmNodeConfig, NodeGroup, NodeId,
    TransporterKind,
};

/// A connected pair of loopback sockets: (client, server).
pub fn connected_streams() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let client = TcpStream::connect(listener.local_addr().expect("listener address"))
        .expect("connect to the listener");
    let (server, _) = listener.accept().expect("accept the client");
    (client, server)
}

pub fn data_node(id: u16, host_name: &str) -> DataNodeConfig {
    DataNodeConfig {
        node_id: NodeId(id),
        host_name: host_name.to_string(),
        server_port: None,
        data_dir: PathBuf::from("."),
        node_group: 0,
        data_memory_bytes: 98 << 20,
        min_free_pct: 5,
        max_no_of_concurrent_operations: 32 * 1024,
        max_no_of_local_operations: 36044,
        max_no_of_local_scans: 2050,
        max_no_of_concurrent_transactions: 4096,
        max_no_of_concurrent_scans: 256,
        max_dml_operations_per_transaction: u32::MAX,
        max_no_of_concurrent_index_operations: 8 * 1024,
        max_no_of_fired_triggers: 4000,
        stop_on_error: true,
        max_start_fail_retries: 3,
        start_fail_retry_delay_s: 0,
        time_between_watchdog_check_ms: 6000,
        start_failure_timeout_ms: 0,
        max_no_of_saved_messages: 25,
        max_no_of_subscriptions: 0,
        max_no_of_subscribers: 0,
        max_buffered_epochs: 100,
        max_buffered_epoch_bytes: 26_214_400,
        mem_report_frequency_s: 0,
        backup_report_frequency_s: 0,
        tcp_bind_inaddr_any: false,
        batch_size_per_local_scan: 256,
        max_no_of_tables: 128,
        max_no_of_ordered_indexes: 128,
        max_no_of_unique_hash_indexes: 64,
        max_no_of_attributes: 1000,
        transaction_deadlock_detection_timeout_ms: 1200,
        transaction_inactive_timeout_ms: u32::MAX,
        heartbeat_interval_db_db_ms: 5000,
        heartbeat_interval_db_api_ms: 1500,
        start_partial_timeout_ms: 30000,
        lock_pages_in_main_memory: 0,
        arbitration: Default::default(),
        arbitration_timeout_ms: 7500,
        durability: Default::default(),
        use_shm: false,
        max_no_of_execution_threads: 1,
        scheduler_spin_timer_us: 0,
        lock_execute_thread_to_cpu: Vec::new(),
        require_tls: false,
        require_certificate: false,
        line: 1,
    }
}

pub fn api_slot(id: u16, host_name: Option<&str>) -> ApiSlotConfig {
    ApiSlotConfig {
        node_id: NodeId(id),
        node_id_explicit: true,
        host_name: host_name.map(str::to_string),
        batch_size: 256,
        batch_byte_size: 16 * 1024,
        max_scan_batch_size: 256 * 1024,
        rondis_server_port: None,
        require_tls: false,
        arbitration_rank: 0,
        line: 1,
    }
}

pub fn link(node1: u16, node2: u16, kind: TransporterKind, checksum: bool) -> LinkConfig {
    LinkConfig {
        node1: NodeId(node1),
        node2: NodeId(node2),
        kind,
        explicit: false,
        send_buffer_memory_bytes: 2 << 20,
        receive_buffer_memory_bytes: 2 << 20,
        checksum,
        overload_limit_bytes: 0,
        shm_size_bytes: 4 << 20,
        shm_spintime_us: 0,
        over_tcp: None,
    }
}

/// Data nodes 1 (localhost) and 2 (192.0.2.10, a documentation address no test connects from);
/// management node 49 (localhost); API slots 10 (any host), 11 (localhost, SHM with checksum to
/// node 1), 12 (192.0.2.20) and 13 (any host, linked to node 2 only).
pub fn cluster() -> ClusterConfig {
    use TransporterKind::{Shm, Tcp};
    ClusterConfig {
        source: PathBuf::from("test-cluster.ini"),
        no_of_replicas: 2,
        data_nodes: vec![data_node(1, "localhost"), data_node(2, "192.0.2.10")],
        mgm_nodes: vec![MgmNodeConfig {
            node_id: NodeId(49),
            host_name: "localhost".to_string(),
            port_number: 1186,
            data_dir: PathBuf::from("."),
            arbitration_rank: 1,
            arbitration_delay_ms: 0,
            require_tls: false,
            require_certificate: false,
            line: 1,
        }],
        api_slots: vec![
            api_slot(10, None),
            api_slot(11, Some("localhost")),
            api_slot(12, Some("192.0.2.20")),
            api_slot(13, None),
        ],
        node_groups: vec![NodeGroup {
            id: 0,
            nodes: vec![NodeId(1), NodeId(2)],
        }],
        links: vec![
            link(1, 2, Tcp, false),
            link(1, 10, Tcp, false),
            link(1, 11, Shm, true),
            link(1, 12, Tcp, false),
            link(1, 49, Tcp, false),
            link(2, 10, Tcp, false),
            link(2, 13, Tcp, false),
        ],
        warnings: Vec::new(),
    }
}
