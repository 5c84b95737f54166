//! Proves TLS between nodes with real processes: `ndb_sign_keys` creates a CA and node keys,
//! lists and checks them; a cluster whose data nodes have RequireTls=1 links its data nodes and
//! API nodes over TLS and keeps a bank's total through concurrent transfers, and sets SHM links
//! up inside TLS; a plain API node
//! is refused with error 1718 and a log line naming it; a certificate for the wrong node type
//! (1719), from another CA, or expired is refused; and ndbd does not start without usable keys.
//! ndb_mgmd with RequireTls=1 serves `ndb_mgm SHOW`, `ndb_waiter`, a data node started with
//! `-c` and an API node's `connect_mgm` over TLS (`start tls`), refuses plain clients with a
//! message that says so on both sides, and refuses a data node's config to an API certificate.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use rndb_api::{
    ColumnDef, ColumnType, ConnectOptions, ExecType, LockMode, TableDef, TransporterKind, Value,
};
use rndb_config::NodeId;
use rndb_tests::ops::{insert_committed, read_with, recreate_table};
use rndb_tests::{binary_path, free_port, ndbd_path, wait_until, ClusterSpec, TestCluster};
use rndb_transporter::connect::connect_to_data_node_tls;
use rndb_transporter::tls::{NodeTls, SearchPath, TlsSetup};
use rndb_transporter::TransportError;

const ACCOUNTS: u32 = 10;
const TRANSFER_THREADS: u32 = 4;
const TRANSFER_ROUNDS: u32 = 20;

/// Runs `ndb_sign_keys` with `args`; returns its output (stdout and stderr together).
fn sign_keys(args: &[&str]) -> (bool, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = Command::new(binary_path("ndb_sign_keys").expect("find ndb_sign_keys"))
        .args(args)
        .output()
        .expect("run ndb_sign_keys");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&stdout),
        String::from_utf8_lossy(&stderr)
    );
    (status.success(), text)
}

fn sign_keys_ok(args: &[&str]) -> String {
    let (ok, text) = sign_keys(args);
    assert!(ok, "ndb_sign_keys {args:?} failed:\n{text}");
    text
}

fn text(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temporary path")
}

/// A CA in `dir/ca` and, in `dir/keys`, data node and API keys and certificates signed by it
/// (valid for `seconds`). Returns the search path `ca:keys`.
fn make_keys(dir: &Path, seconds: i64) -> String {
    let (ca, keys) = (dir.join("ca"), dir.join("keys"));
    sign_keys_ok(&["--create-CA", "--to-dir", text(&ca)]);
    for node_type in ["db", "api"] {
        sign_keys_ok(&[
            "--CA-search-path",
            text(&ca),
            "--create-key",
            "--node-type",
            node_type,
            "--duration",
            &seconds.to_string(),
            "--to-dir",
            text(&keys),
        ]);
    }
    format!("{}:{}", text(&ca), text(&keys))
}

fn tls_options(search_path: &str) -> ConnectOptions {
    ConnectOptions {
        tls_search_path: Some(search_path.to_string()),
        connect_timeout: Duration::from_secs(5),
        transporter: Some(TransporterKind::Tcp),
        ..ConnectOptions::default()
    }
}

/// A cluster of `data_nodes` with RequireTls=1 and UseShm=1 (SHM links to local API nodes).
fn tls_cluster(search_path: &str, data_nodes: u16) -> TestCluster {
    let spec = ClusterSpec::new()
        .data_nodes(data_nodes)
        .use_shm(true)
        .replicas(u32::from(data_nodes))
        .deadlock_timeout_ms(500)
        .data_node_param("RequireTls", "1")
        .ndbd_args(&["--ndb-tls-search-path", search_path]);
    TestCluster::start(spec).expect("start a cluster with RequireTls=1")
}

/// The data node's refusal of a connection, from the API's error.
fn refusal_code(e: &anyhow::Error) -> Option<u32> {
    e.chain()
        .find_map(|cause| cause.downcast_ref::<rndb_api::Error>())
        .and_then(rndb_api::Error::code)
}

#[test]
fn ndb_sign_keys_creates_lists_and_checks() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = dir.path().join("config.ini");
    std::fs::write(
        &config,
        "[ndbd default]\nNoOfReplicas=2\n[ndbd]\nNodeId=1\nHostName=127.0.0.1\n\
         [ndbd]\nNodeId=2\nHostName=127.0.0.1\n[api]\nNodeId=50\n",
    )
    .expect("write the config");
    let ca = dir.path().join("ca");
    let out = sign_keys_ok(&["--create-CA", "--to-dir", text(&ca)]);
    assert!(out.contains("NDB-Cluster-cert"), "{out}");
    let keys = dir.path().join("keys");
    let out = sign_keys_ok(&[
        "--CA-search-path",
        text(&ca),
        "--create-key",
        "-c",
        text(&config),
        "--to-dir",
        text(&keys),
    ]);
    assert!(out.contains("node ids 1, 2"), "{out}");
    for name in [
        "ndb-data-node-cert",
        "ndb-data-node-private-key",
        "ndb-api-cert",
        "ndb-api-private-key",
    ] {
        assert!(keys.join(name).is_file(), "{name} missing:\n{out}");
    }
    let search = format!("{}:{}", text(&ca), text(&keys));
    let out = sign_keys_ok(&["--ndb-tls-search-path", &search, "--list"]);
    assert!(out.contains("\"NDB Data Node "), "{out}");
    assert!(out.contains("\"NDB Node "), "{out}");
    let out = sign_keys_ok(&["--ndb-tls-search-path", &search, "--check"]);
    assert_eq!(out.matches(": OK").count(), 2, "{out}");

    // A certificate that expired, and one not from this CA, fail --check.
    let old = dir.path().join("old");
    sign_keys_ok(&[
        "--CA-search-path",
        text(&ca),
        "--create-key",
        "--node-type",
        "api",
        "--duration=-3600",
        "--to-dir",
        text(&old),
    ]);
    let (ok, out) = sign_keys(&[
        "--ndb-tls-search-path",
        &format!("{}:{}", text(&ca), text(&old)),
        "--check",
    ]);
    assert!(
        !ok && out.contains("ndb-api-cert") && out.contains("certificate expired"),
        "{out}"
    );
    let other = dir.path().join("other");
    make_keys(&other, 3600);
    let foreign = format!("{}:{}", text(&ca), text(&other.join("keys")));
    let (ok, out) = sign_keys(&["--ndb-tls-search-path", &foreign, "--check"]);
    // Both CAs have NDB's common name, so the chain fails on the signature, not the name.
    assert!(!ok && out.contains("invalid peer certificate"), "{out}");

    // A lifetime no certificate date can hold is an error, not a crash.
    let (ok, out) = sign_keys(&[
        "--CA-search-path",
        text(&ca),
        "--create-key",
        "--node-type",
        "api",
        "--duration",
        "9223372036854775807",
        "--to-dir",
        text(&dir.path().join("endless")),
    ]);
    assert!(!ok && out.contains("past the year 9999"), "{out}");

    // A garbage certificate file is an error naming it, not a crash.
    std::fs::write(keys.join("ndb-api-cert"), "not a certificate\n").expect("spoil");
    let (ok, out) = sign_keys(&["--ndb-tls-search-path", &search, "--check"]);
    assert!(
        !ok && out.contains(&format!("{}: ", text(&keys.join("ndb-api-cert")))),
        "{out}"
    );
}

#[test]
fn a_cluster_requiring_tls_keeps_the_total_and_refuses_plain_api_nodes() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let search_path = make_keys(dir.path(), 3600);
    let cluster = tls_cluster(&search_path, 2);
    let api = cluster
        .connect_with(tls_options(&search_path))
        .expect("connect over TLS");
    let table = recreate_table(&api, &table_def()).expect("create the table");
    let rows: Vec<Vec<Value>> = (0..ACCOUNTS)
        .map(|i| vec![Value::UInt32(i), Value::Int64(1000)])
        .collect();
    insert_committed(&api, &table, &rows).expect("insert");
    let committed: u32 = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..TRANSFER_THREADS)
            .map(|thread| {
                let (api, table) = (&api, &table);
                scope.spawn(move || transfers(api, table, thread))
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a transfer thread panicked"))
            .sum()
    });
    assert!(committed > 0, "no transfer committed");
    let total: i64 = (0..ACCOUNTS)
        .map(|i| {
            match read_with(&api, &table, &[Value::UInt32(i)], LockMode::CommittedRead)
                .expect("read")[1]
            {
                Value::Int64(v) => v,
                ref other => panic!("balance is {other:?}"),
            }
        })
        .sum();
    assert_eq!(
        total,
        i64::from(ACCOUNTS) * 1000,
        "transfers keep the total"
    );
    // An SHM link is set up inside TLS and reads the same rows.
    let shm = cluster
        .connect_with(ConnectOptions {
            transporter: Some(TransporterKind::Shm),
            ..tls_options(&search_path)
        })
        .expect("connect over SHM set up inside TLS");
    assert_eq!(shm.transporter_kind(), TransporterKind::Shm);
    let table = shm.get_table("accounts").expect("find the table");
    let total_over_shm: i64 = (0..ACCOUNTS)
        .map(|i| {
            match read_with(&shm, &table, &[Value::UInt32(i)], LockMode::CommittedRead)
                .expect("read over SHM")[1]
            {
                Value::Int64(v) => v,
                ref other => panic!("balance is {other:?}"),
            }
        })
        .sum();
    assert_eq!(total_over_shm, total);
    let log = cluster.log(NodeId(2));
    assert!(
        log.contains("NDB TLS 1.3 available using certificate file"),
        "{log}"
    );
    assert!(log.contains("connected to data node"), "{log}");

    // An API node without keys is refused, and both sides say why.
    let err = cluster
        .connect_with(ConnectOptions::default())
        .expect_err("a plain API node must be refused");
    assert_eq!(refusal_code(&err), Some(1718), "{err:#}");
    let message = format!("{err:#}");
    assert!(message.contains("requires TLS (RequireTls=1)"), "{message}");
    // The data node logs the refusal after it sent it.
    rndb_tests::wait_until("node 1 to log the refusal", Duration::from_secs(10), || {
        let log = cluster.log(NodeId(1));
        Ok(
            (log.contains("refused connection") && log.contains("connected without TLS"))
                .then_some(()),
        )
    })
    .expect("node 1 logs why it refused the plain API node");
}

#[test]
fn certificates_for_another_node_type_from_another_ca_or_expired_are_refused() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let search_path = make_keys(dir.path(), 3600);
    let cluster = tls_cluster(&search_path, 1);
    cluster
        .connect_with(tls_options(&search_path))
        .expect("the right keys connect");

    // An API node presenting a data node's certificate (NodeTls refuses to load it as an API
    // node's, so this goes below the API library).
    let data_keys = NodeTls::load(
        &SearchPath::parse(&search_path),
        rndb_config::NodeKind::Data,
    )
    .expect("load the data node's keys");
    let setup = TlsSetup {
        keys: Some(std::sync::Arc::new(data_keys)),
        require_tls: false,
    };
    let config = cluster.config();
    let data = &config.data_nodes[0];
    let api_id = config.api_slots[0].node_id;
    match connect_to_data_node_tls(config, api_id, data, None, Duration::from_secs(5), &setup) {
        Err(TransportError::Refused {
            code: 1719,
            message,
        }) => {
            assert!(
                message.contains("with a TLS certificate for a data node"),
                "{message}"
            )
        }
        Err(e) => panic!("a data node's certificate on an API node: {e}"),
        Ok(link) => panic!(
            "a data node's certificate on an API node: admitted, {}",
            link.kind()
        ),
    }

    // Keys signed by another CA, and an expired certificate: the TLS handshake fails.
    let foreign = make_keys(&dir.path().join("foreign"), 3600);
    let expired = dir.path().join("expired");
    let ca = search_path.split(':').next().expect("the CA directory");
    sign_keys_ok(&[
        "--CA-search-path",
        ca,
        "--create-key",
        "--node-type",
        "api",
        "--duration=-3600",
        "--to-dir",
        text(&expired),
    ]);
    let expired = format!("{ca}:{}", text(&expired));
    let refused = |path: &str| {
        let err = cluster
            .connect_with(tls_options(path))
            .expect_err("must be refused");
        format!("{err:#}")
    };
    let message = refused(&foreign);
    assert!(
        message.contains("TLS: ") && message.contains("invalid peer certificate"),
        "another CA: {message}"
    );
    let message = refused(&expired);
    assert!(message.contains("TLS: "), "expired: {message}");
    // The client may hear the refusal before the data node has logged why.
    wait_until(
        "node 1 to log the expired certificate",
        Duration::from_secs(10),
        || {
            Ok(cluster
                .log(NodeId(1))
                .contains("certificate expired")
                .then_some(()))
        },
    )
    .expect("node 1 logs the expired certificate");
}

#[test]
fn ndbd_does_not_start_without_usable_keys() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = dir.path().join("config.ini");
    std::fs::write(
        &config,
        "[ndbd default]\nNoOfReplicas=1\n[ndbd]\nNodeId=1\nHostName=127.0.0.1\nRequireTls=1\n[api]\n",
    )
    .expect("write the config");
    let ndbd = |extra: &[&str]| {
        let output = Command::new(ndbd_path().expect("find ndbd"))
            .arg("--config-file")
            .arg(&config)
            .args(["--ndb-nodeid", "1"])
            .args(extra)
            .current_dir(dir.path())
            .output()
            .expect("run ndbd");
        assert!(!output.status.success(), "ndbd started");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let stderr = ndbd(&[]);
    assert!(
        stderr.contains("RequireTls=1 but no TLS search path was given"),
        "{stderr}"
    );
    let search_path = make_keys(dir.path(), 3600);
    let cert: PathBuf = dir.path().join("keys").join("ndb-data-node-cert");
    std::fs::write(&cert, "-----BEGIN CERTIFICATE-----\nnot base64!\n").expect("spoil");
    let stderr = ndbd(&["--ndb-tls-search-path", &search_path]);
    assert!(
        stderr.contains(&format!("{}: ", cert.display())),
        "{stderr}"
    );
}

fn table_def() -> TableDef {
    TableDef::new(
        "accounts",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("v", ColumnType::Int64),
        ],
    )
}

/// One thread's transfers; returns how many committed (a lock wait timeout, 266, rolls one
/// back whole; any other error fails the test).
fn transfers(api: &rndb_api::Cluster, table: &rndb_api::Table, thread: u32) -> u32 {
    let mut committed = 0;
    for round in 0..TRANSFER_ROUNDS {
        let from = (thread * 7 + round) % ACCOUNTS;
        let to = (thread * 3 + round * 5 + 1) % ACCOUNTS;
        if from == to {
            continue;
        }
        match transfer(api, table, from, to, i64::from(round % 7 + 1)) {
            Ok(()) => committed += 1,
            Err(e) => assert_eq!(e.code(), Some(266), "transfer {from} -> {to}: {e}"),
        }
    }
    committed
}

fn transfer(
    api: &rndb_api::Cluster,
    table: &rndb_api::Table,
    from: u32,
    to: u32,
    amount: i64,
) -> Result<(), rndb_api::Error> {
    let mut tx = api.start_transaction()?;
    let a = tx.read(table, &[Value::UInt32(from)], LockMode::Exclusive)?;
    let b = tx.read(table, &[Value::UInt32(to)], LockMode::Exclusive)?;
    tx.execute(ExecType::NoCommit)?;
    let balance = |op| match tx.row(op).map(|r| r[1].clone()) {
        Some(Value::Int64(v)) => v,
        other => panic!("balance is {other:?}"),
    };
    let (from_balance, to_balance) = (balance(a), balance(b));
    tx.update(
        table,
        &[Value::UInt32(from)],
        &[(1, Value::Int64(from_balance - amount))],
    )?;
    tx.update(
        table,
        &[Value::UInt32(to)],
        &[(1, Value::Int64(to_balance + amount))],
    )?;
    tx.execute(ExecType::Commit)
}

/// Processes a test started from their binaries: killed and reaped when dropped, their output
/// in `<name>.log` in the directory (printed when the test fails).
struct Processes {
    dir: PathBuf,
    children: Vec<(String, Child)>,
}

impl Processes {
    fn spawn(&mut self, name: &str, program: &str, args: &[&str]) {
        let log = std::fs::File::create(self.dir.join(format!("{name}.log"))).expect("a log");
        let child = Command::new(binary_path(program).expect("find the binary"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone the log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {program}: {e}"));
        self.children.push((name.to_string(), child));
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default()
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            for (name, _) in &self.children {
                eprintln!("--- {name}.log:\n{}", self.log(name));
            }
        }
    }
}

/// Runs `program args` to its end: (success, stdout, stderr).
fn run_tool(program: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(binary_path(program).expect("find the binary"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn ndb_mgmd_requiring_tls_serves_tls_clients_and_refuses_plain_ones() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let search = make_keys(dir.path(), 3600);
    let ca = dir.path().join("ca");
    sign_keys_ok(&[
        "--CA-search-path",
        text(&ca),
        "--create-key",
        "--node-type",
        "mgmd",
        "--to-dir",
        text(&dir.path().join("keys")),
    ]);
    let mgm_port = free_port();
    let d = dir.path().display();
    let config = dir.path().join("config.ini");
    std::fs::write(
        &config,
        format!(
            "[ndbd default]\nNoOfReplicas=1\nDataMemory=16M\n\
             [ndb_mgmd]\nNodeId=49\nHostName=127.0.0.1\nPortNumber={mgm_port}\nDataDir={d}/mgm\n\
             RequireTls=1\n\
             [ndbd]\nNodeId=1\nHostName=127.0.0.1\nServerPort={}\nDataDir={d}/n1\n\
             [api]\nNodeId=50\n",
            free_port()
        ),
    )
    .expect("write the config");
    let cs = format!("127.0.0.1:{mgm_port}");
    let mut procs = Processes {
        dir: dir.path().to_path_buf(),
        children: Vec::new(),
    };
    procs.spawn(
        "ndb_mgmd",
        "ndb_mgmd",
        &["-f", text(&config), "--ndb-tls-search-path", &search],
    );
    wait_until("ndb_mgmd to listen", Duration::from_secs(20), || {
        Ok(std::net::TcpStream::connect(("127.0.0.1", mgm_port))
            .ok()
            .map(|_| ()))
    })
    .expect("ndb_mgmd listens");

    // A plain client is refused, and told why; the server logs it.
    let (ok, _, stderr) = run_tool("ndb_mgm", &["-c", &cs, "-e", "SHOW"]);
    assert!(!ok, "a plain SHOW was served");
    assert!(
        stderr.contains("Requires TLS") && stderr.contains("RequireTls=1"),
        "{stderr}"
    );
    assert!(
        procs
            .log("ndb_mgmd")
            .contains("refused a plain-text client"),
        "{}",
        procs.log("ndb_mgmd")
    );
    let plain = rndb_api::Cluster::connect_mgm(&cs, ConnectOptions::default())
        .expect_err("a plain API node was given the config");
    assert!(plain.to_string().contains("Requires TLS"), "{plain}");

    // A data node started with -c fetches its config and reports over TLS.
    procs.spawn(
        "ndbd-1",
        "ndbd",
        &[
            "-c",
            &cs,
            "--ndb-nodeid",
            "1",
            "--ndb-tls-search-path",
            &search,
        ],
    );
    let (ok, waited, stderr) = run_tool(
        "ndb_waiter",
        &[
            "-c",
            &cs,
            "--timeout",
            "90",
            "--ndb-tls-search-path",
            &search,
        ],
    );
    assert!(ok, "ndb_waiter over TLS: {waited}{stderr}");
    assert!(waited.contains("Node 1: STARTED"), "{waited}");
    let (ok, shown, stderr) = run_tool(
        "ndb_mgm",
        &[
            "-c",
            &cs,
            "--ndb-tls-search-path",
            &search,
            "--ndb-mgm-tls=strict",
            "-e",
            "SHOW",
        ],
    );
    assert!(ok, "SHOW over TLS: {stderr}");
    assert!(shown.contains("id=1\t@127.0.0.1"), "{shown}");
    assert!(shown.contains("id=49\t@127.0.0.1"), "{shown}");

    // An API node fetches its config over TLS and serves.
    let api = rndb_api::Cluster::connect_mgm(&cs, tls_options(&search))
        .expect("an API node connects through ndb_mgmd over TLS");
    assert_eq!(api.node_id(), NodeId(50));
    let table = recreate_table(&api, &table_def()).expect("create a table");
    let row = vec![Value::UInt32(1), Value::Int64(7)];
    insert_committed(&api, &table, std::slice::from_ref(&row)).expect("insert");
    let read =
        read_with(&api, &table, &[Value::UInt32(1)], LockMode::CommittedRead).expect("read back");
    assert_eq!(read, row);
    drop(api);

    // An API node's certificate does not get a data node's config.
    let tls = rndb_mgm::tls::ClientTls::load(Some(&search), rndb_config::NodeKind::Api, true)
        .expect("API keys load");
    let connectstring = rndb_mgm::ConnectString::parse(&cs).expect("a connectstring");
    let mut client =
        rndb_mgm::MgmClient::connect_tls(&connectstring, &tls).expect("connect over TLS");
    assert!(client.is_tls());
    let refused = client
        .fetch_config(rndb_mgm::Requester::Ndbd, Some(1))
        .expect_err("a data node's config was given to an API certificate");
    assert!(
        refused
            .to_string()
            .contains("certificate is for an API node, not for a data node"),
        "{refused}"
    );
}
