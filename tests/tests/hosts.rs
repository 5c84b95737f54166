//! Proves that data nodes on separate hosts (network namespaces, each with an address of its own
//! that the config names as the node's HostName) form one cluster from one config: each node
//! listens on its own host only, a committed row is on the replicas of both hosts with equal
//! contents, and a rollback leaves nothing on either; that an API node connecting from an
//! address other than its slot's HostName is refused with NDB's 1717 (and one choosing its own
//! slot takes the next), while one whose slot names a further address of its host connects
//! from that address; that a data node whose HostName is not an address of its host refuses
//! to start, saying so; and that a committed read of a READ_BACKUP table is served on the
//! reader's host.
//!
//! The hosts need root and iproute2 (`ip netns`): the tests that make them are `#[ignore]`d,
//! and `scripts/test` includes them when it runs as root, as CI does.

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use rndb_api::{
    ColumnDef, ColumnType, ConnectOptions, ExecType, LockMode, NodeId, TableDef, Value,
};
use rndb_tests::{
    assert_ndb_code, ndbd_path, ops, wait_until, ClusterSpec, Hosts, TestCluster, START_TIMEOUT,
};

const ROWS: u32 = 40;

fn table_def() -> TableDef {
    TableDef::new(
        "on_hosts",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("amount", ColumnType::UInt64),
        ],
    )
}

fn row(id: u32) -> Vec<Value> {
    vec![Value::UInt32(id), Value::UInt64(u64::from(id) * 1000 + 7)]
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test runs it as root)"]
fn data_nodes_on_two_hosts_form_one_cluster_and_replicate_to_each_other() {
    // Declared first, dropped last: the data nodes are stopped before their hosts go.
    let hosts = Hosts::new(2).expect("make two hosts (needs root and iproute2)");
    let spec = ClusterSpec::new()
        .data_nodes(2)
        .replicas(2)
        .on_hosts(&hosts);
    let cluster = TestCluster::start(spec).expect("start a data node on each host");

    // Each node listens on its own host's address, and nowhere in the test's namespace.
    for (host, id) in [(1, NodeId(1)), (2, NodeId(2))] {
        let addr = cluster.addr(id);
        assert_eq!(addr.ip(), hosts.address(host), "data node {id}'s HostName");
        let here = SocketAddr::from(([127, 0, 0, 1], addr.port()));
        assert!(
            TcpStream::connect_timeout(&here, Duration::from_millis(200)).is_err(),
            "data node {id} must not listen on this namespace's 127.0.0.1:{}",
            addr.port()
        );
    }

    let api = cluster
        .connect()
        .expect("connect from the bridge's address");
    let table = ops::recreate_table(&api, &table_def()).expect("create the table on both");
    let rows: Vec<Vec<Value>> = (0..ROWS).map(row).collect();
    ops::insert_committed(&api, &table, &rows).expect("insert and commit");

    let mut primaries = [0u32; 2];
    for id in 0..ROWS {
        let key = [Value::UInt32(id)];
        let replicas = api.replicas_of(&table, &key).expect("replicas_of");
        assert_eq!(replicas.len(), 2, "row {id} has a replica on each host");
        primaries[usize::from(replicas[0].0 - 1)] += 1;
        for (replica, node) in replicas.iter().enumerate() {
            let mut transaction = api.start_transaction().expect("start");
            let op = transaction
                .read_from_replica(&table, &key, replica)
                .expect("define a replica read");
            transaction
                .execute(ExecType::Commit)
                .unwrap_or_else(|e| panic!("read row {id} from replica {replica}: {e}"));
            assert_eq!(
                transaction.row(op),
                Some(&row(id)[..]),
                "row {id} on replica {replica} (node {node})"
            );
        }
    }
    assert!(
        primaries.iter().all(|&n| n > 0),
        "both hosts hold primaries: {primaries:?}"
    );

    // A rolled-back insert is on neither host.
    let mut transaction = api.start_transaction().expect("start");
    transaction
        .insert(&table, &row(ROWS))
        .expect("define an insert");
    transaction
        .execute(ExecType::NoCommit)
        .expect("insert without commit");
    transaction.execute(ExecType::Rollback).expect("roll back");
    let key = [Value::UInt32(ROWS)];
    for replica in 0..2 {
        let mut transaction = api.start_transaction().expect("start");
        transaction
            .read_from_replica(&table, &key, replica)
            .expect("define a replica read");
        assert_ndb_code(
            transaction.execute(ExecType::Commit),
            626,
            &format!("read the rolled-back row from replica {replica}"),
        );
    }
    let read = ops::read_with(&api, &table, &key, LockMode::Read);
    assert_ndb_code(read, 626, "read the rolled-back row from its primary");
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test runs it as root)"]
fn an_api_node_connecting_from_another_address_than_its_hostname_is_refused() {
    let hosts = Hosts::new(1).expect("make a host (needs root and iproute2)");
    // Slot 90 belongs to host 1's address; the test process connects from the bridge's.
    let spec = ClusterSpec::new()
        .on_hosts(&hosts)
        .extra(&format!("[api]\nNodeId=90\nHostName={}", hosts.address(1)));
    let cluster = TestCluster::start(spec).expect("start a data node on the host");
    let options = ConnectOptions {
        node_id: Some(NodeId(90)),
        connect_timeout: Duration::from_secs(5),
        ..ConnectOptions::default()
    };
    let refused = rndb_api::Cluster::connect(cluster.config_path(), options);
    assert_ndb_code(refused, 1717, "connect as API node 90 from the wrong host");
    // Its own slots still admit it.
    let api = cluster
        .connect()
        .expect("connect in a slot of this address");
    api.ping().expect("ping");
}

#[test]
fn a_data_node_whose_hostname_is_not_on_this_host_refuses_to_start() {
    let dir = tempfile::tempdir().expect("create a directory");
    let config = dir.path().join("config.ini");
    // TEST-NET-2: a documentation address, on no host.
    let text = format!(
        "[ndbd default]\nNoOfReplicas=1\nDataMemory=16M\nDataDir={}\n\n[ndbd]\nNodeId=1\n\
         HostName=198.51.100.7\n\n[api]\nNodeId=50\n",
        dir.path().display()
    );
    std::fs::write(&config, text).expect("write the config");
    let mut ndbd = Command::new(ndbd_path().expect("find ndbd"))
        .arg("--config-file")
        .arg(&config)
        .args(["--ndb-nodeid", "1", "--initial"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run ndbd");
    let exited = wait_until("ndbd to exit", START_TIMEOUT, || Ok(ndbd.try_wait()?));
    if exited.is_err() {
        let _ = ndbd.kill();
        let _ = ndbd.wait();
    }
    let status = exited.expect("ndbd exits at once");
    assert!(!status.success(), "ndbd must not start");
    let mut stderr = String::new();
    ndbd.stderr
        .take()
        .expect("piped stderr")
        .read_to_string(&mut stderr)
        .expect("read ndbd's stderr");
    assert!(
        stderr.contains("HostName=198.51.100.7 of node 1")
            && stderr.contains("is not an address of this host"),
        "{stderr}"
    );
}

/// An API node choosing a slot itself skips one that names another address of its host than
/// the one its connections come from (the data node refuses it with 1717), and takes the next.
#[test]
#[ignore = "needs root: network namespaces (scripts/test runs it as root)"]
fn an_api_node_skips_a_slot_of_another_of_its_addresses() {
    let hosts = Hosts::new(1).expect("make a host (needs root and iproute2)");
    // 127.0.0.1 is this host's too, but connections to the host come from the bridge address.
    let spec = ClusterSpec::new()
        .on_hosts(&hosts)
        .api_slot_first("127.0.0.1");
    let cluster = TestCluster::start(spec).expect("start a data node on the host");
    let first = cluster.api_node_ids()[0];
    let api = cluster.connect().expect("connect in the next slot");
    assert_ne!(api.node_id(), first, "the loopback slot was refused");
    assert_eq!(
        cluster
            .config()
            .api_slot(api.node_id())
            .and_then(|s| s.host_name.clone()),
        Some(hosts.bridge_address().to_string()),
        "took a slot of the bridge address"
    );
}

/// A committed read of a READ_BACKUP table is coordinated on the reader's own host, whose TC
/// reads its own replica (NDB's ReadBackup locality); a locking read, or a table without
/// READ_BACKUP, still goes to the primary replica.
#[test]
#[ignore = "needs root: network namespaces (scripts/test runs it as root)"]
fn a_committed_read_of_a_read_backup_table_stays_on_the_readers_host() {
    let hosts = Hosts::new(2).expect("make two hosts (needs root and iproute2)");
    // Slot 80 is for an API node on host 2, next to data node 2.
    let spec = ClusterSpec::new()
        .data_nodes(2)
        .replicas(2)
        .on_hosts(&hosts)
        .extra(&format!("[api]\nNodeId=80\nHostName={}", hosts.address(2)));
    let cluster = TestCluster::start(spec).expect("start a data node on each host");
    let setup = cluster
        .connect()
        .expect("connect from the bridge's address");
    let backup_table = ops::recreate_table(&setup, &table_def().with_read_backup(true))
        .expect("create a READ_BACKUP table");
    let mut plain_def = table_def();
    plain_def.name = "on_hosts_plain".to_string();
    let plain_table = ops::recreate_table(&setup, &plain_def).expect("create a plain table");
    let rows: Vec<Vec<Value>> = (0..ROWS).map(row).collect();
    ops::insert_committed(&setup, &backup_table, &rows).expect("fill the READ_BACKUP table");
    ops::insert_committed(&setup, &plain_table, &rows).expect("fill the plain table");
    let on_node_1: Vec<u32> = (0..ROWS)
        .filter(|&id| {
            let replicas = setup
                .replicas_of(&backup_table, &[Value::UInt32(id)])
                .expect("replicas_of");
            replicas[0] == NodeId(1)
        })
        .collect();
    assert!(!on_node_1.is_empty(), "node 1 is the primary of some rows");

    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                hosts.enter(2).expect("move this thread onto host 2");
                let api = cluster.connect_as(NodeId(80)).expect("connect from host 2");
                for &id in &on_node_1 {
                    let key = [Value::UInt32(id)];
                    for (table, lock, coordinator) in [
                        (&backup_table, LockMode::CommittedRead, NodeId(2)),
                        (&backup_table, LockMode::Read, NodeId(1)),
                        (&plain_table, LockMode::CommittedRead, NodeId(1)),
                    ] {
                        let mut transaction = api.start_transaction().expect("start");
                        let op = transaction.read(table, &key, lock).expect("define a read");
                        assert_eq!(
                            transaction.connected_node_id(),
                            Some(coordinator),
                            "row {id} of {} read with {lock:?}",
                            table.name()
                        );
                        transaction
                            .execute(ExecType::Commit)
                            .unwrap_or_else(|e| panic!("read row {id}: {e}"));
                        assert_eq!(transaction.row(op), Some(&row(id)[..]), "row {id}");
                    }
                }
            })
            .join()
            .expect("the reader on host 2 panicked");
    });
}

/// An API node whose slot names one of several addresses of its host connects from that
/// address, which the data node admits, even where the route would start from another.
#[test]
#[ignore = "needs root: network namespaces (scripts/test runs it as root)"]
fn an_api_node_connects_from_its_slots_address() {
    let hosts = Hosts::new(1).expect("make a host (needs root and iproute2)");
    let second = hosts
        .add_bridge_address(253)
        .expect("a second address for the test process");
    let spec = ClusterSpec::new()
        .on_hosts(&hosts)
        .extra(&format!("[api]\nNodeId=90\nHostName={second}"));
    let cluster = TestCluster::start(spec).expect("start a data node on the host");
    let api = cluster
        .connect_as(NodeId(90))
        .expect("connect as API node 90, from its HostName");
    api.ping().expect("ping");
}
