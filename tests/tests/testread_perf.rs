//! Proves that the `testread-perf` binary, run with `--local` against a temporary config,
//! starts its own data node, measures every requested access type, prints one JSON document
//! in the documented schema with `rows == range * iterations`, and stops its data node; that
//! `--access all` names every access type; that `--primary-node` keeps full measurements,
//! touches only rows whose primary replica is on that node, and refuses a node or an access
//! type it cannot restrict to; that `--local` refuses a data node on another host; and that it
//! refuses unknown access types with a message naming the valid ones.

use std::io::{PipeReader, PipeWriter, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use rndb_api::{Cluster, ExecType, LockMode, NodeId, ScanOptions, Table, TransporterKind, Value};
use rndb_tests::{ndbd_path, testread_perf_path, wait_until, ClusterSpec, TestCluster};
use serde_json::Value as Json;

const RANGE: u64 = 10;
const ITERATIONS: u64 = 3;
const ACCESS: [&str; 10] = [
    "ping",
    "serial_pk",
    "batch_pk",
    "serial_unique",
    "batch_unique",
    "index_eq",
    "index_range",
    "index_ordered",
    "scan_filter",
    "serial_write",
];
/// The access types that make one execute (one scan, or one batch) per measurement.
const ONE_EXECUTE_PER_MEASUREMENT: [&str; 5] = [
    "batch_pk",
    "batch_unique",
    "index_range",
    "index_ordered",
    "scan_filter",
];

fn run(args: &[&str]) -> Output {
    let exe = testread_perf_path().expect("find testread-perf");
    Command::new(exe)
        .args(args)
        .output()
        .expect("run testread-perf")
}

/// The JSON document of testread-perf's `output` (which must be a success) and its stderr.
fn json_of(args: &[&str], output: Output) -> (Json, String) {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "testread-perf {args:?} failed: {}\n{stderr}",
        output.status
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("stdout is one JSON document ({e}):\n{stdout}"));
    (report, stderr)
}

/// How many times [`run_local_json`] writes its config again, with fresh ports.
const PORT_TAKEN_TRIES: usize = 3;

/// Runs `testread-perf --local` on a config written from `spec` (with `args` after), as
/// [`run_json`], and returns the data nodes' ports too. The ports are free when picked, but another process may take one before
/// testread-perf starts its data node there (it then refuses to run): the config is written
/// again with fresh ports, at most [`PORT_TAKEN_TRIES`] times.
fn run_local_json(spec: ClusterSpec, args: &[&str]) -> (Json, String, Vec<u16>) {
    let ndbd = ndbd_path().expect("find ndbd");
    let ndbd = ndbd.to_str().expect("a UTF-8 target path");
    let mut attempt = 1;
    loop {
        let dir = tempfile::tempdir().expect("create a directory");
        let written = spec.clone().write(dir.path()).expect("write the config");
        let config = written.path.to_str().expect("a UTF-8 temp path");
        let mut all = vec!["--local", "--config-file", config, "--ndbd", ndbd];
        all.extend_from_slice(args);
        let output = run(&all);
        let port_taken = !output.status.success()
            && String::from_utf8_lossy(&output.stderr).contains("already listens on");
        if !port_taken || attempt == PORT_TAKEN_TRIES {
            let (report, stderr) = json_of(&all, output);
            return (report, stderr, written.ports.values().copied().collect());
        }
        attempt += 1;
    }
}

/// Runs testread-perf with `args`, which it must refuse; returns its stderr.
fn run_refused(args: &[&str]) -> String {
    let output = run(args);
    assert!(!output.status.success(), "testread-perf {args:?} must fail");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn local_run_prints_the_json_schema() {
    let (range, iterations) = (RANGE.to_string(), ITERATIONS.to_string());
    let (report, _, ports) = run_local_json(
        ClusterSpec::new(),
        &[
            "--size",
            "200",
            "--range",
            &range,
            "--iterations",
            &iterations,
            "--access",
            "all",
            "--transporter",
            "tcp",
            "--format",
            "json",
            "--seed",
            "7",
        ],
    );
    check_report(&report);

    // The data node was stopped when testread-perf exited: its port no longer accepts.
    let addr = (
        "127.0.0.1",
        ports.first().copied().expect("a data node port"),
    );
    wait_until(
        "the local data node to be stopped",
        Duration::from_secs(10),
        || Ok(TcpStream::connect(addr).is_err().then_some(())),
    )
    .expect("testread-perf stops its data nodes");
}

fn check_report(report: &Json) {
    assert_eq!(report["tool"], "testread-perf");
    assert_eq!(report["version"], 1);
    let params = &report["params"];
    assert_eq!(params["range"], RANGE);
    assert_eq!(params["iterations"], ITERATIONS);
    assert_eq!(params["size"], 200);
    assert_eq!(params["seed"], 7);
    let results = report["results"].as_array().expect("results is an array");
    assert_eq!(
        results.len(),
        ACCESS.len(),
        "one result per access type: {results:?}"
    );
    for access in ACCESS {
        let result = results
            .iter()
            .find(|r| r["access"] == access)
            .unwrap_or_else(|| panic!("no result for {access}: {results:?}"));
        assert_eq!(result["transporter"], "tcp");
        assert_eq!(
            result["rows"],
            RANGE * ITERATIONS,
            "{access}: rows == range * iterations"
        );
        let executes = result["executes"].as_u64().expect("executes is a count");
        let expected = if ONE_EXECUTE_PER_MEASUREMENT.contains(&access) {
            ITERATIONS
        } else {
            RANGE * ITERATIONS
        };
        assert_eq!(executes, expected, "{access}: executes");
        for field in [
            "us_per_row",
            "rows_per_sec",
            "p50_us",
            "p90_us",
            "p99_us",
            "p999_us",
        ] {
            let figure = result[field]
                .as_f64()
                .unwrap_or_else(|| panic!("{access}.{field}"));
            assert!(
                figure > 0.0 && figure.is_finite(),
                "{access}.{field} = {figure}"
            );
        }
        let quantiles: Vec<f64> = ["p50_us", "p90_us", "p99_us", "p999_us"]
            .iter()
            .filter_map(|field| result[field].as_f64())
            .collect();
        assert!(
            quantiles.windows(2).all(|w| w[0] <= w[1]),
            "{access}: p50 <= p90 <= p99 <= p99.9, got {quantiles:?}"
        );
    }
}

#[test]
fn unknown_access_types_are_refused_with_the_valid_names() {
    let stderr = run_refused(&["--access", "serial_pk,bogus"]);
    for name in [
        "bogus",
        "serial_pk",
        "batch_pk",
        "index_range",
        "scan_filter",
    ] {
        assert!(stderr.contains(name), "the error names {name}:\n{stderr}");
    }
}

#[test]
fn a_range_larger_than_the_table_is_refused() {
    let stderr = run_refused(&["--size", "10", "--range", "20"]);
    assert!(
        stderr.contains("--range 20 is larger than --size 10"),
        "{stderr}"
    );
}

#[test]
fn the_concurrency_sweep_reports_every_level_with_its_concurrency() {
    for mode in ["threads", "async"] {
        sweep_reports_every_level(mode);
    }
}

/// One sweep with transactions kept in flight by `mode` (`--in-flight`).
fn sweep_reports_every_level(mode: &str) {
    let (report, _, _) = run_local_json(
        ClusterSpec::new(),
        &[
            "--size",
            "200",
            "--concurrency",
            "1,8",
            "--duration-ms",
            "200",
            "--write-ratio",
            "0.5",
            "--in-flight",
            mode,
            "--transporter",
            "tcp",
            "--format",
            "json",
        ],
    );
    assert_eq!(report["params"]["in_flight"], mode);
    let results = report["results"].as_array().expect("a results array");
    let levels: Vec<u64> = results
        .iter()
        .filter_map(|r| r["concurrency"].as_u64())
        .collect();
    assert_eq!(levels, vec![1, 8], "one result per level, in order");
    for result in results {
        assert_eq!(result["transporter"], "tcp");
        assert_eq!(result["access"], "serial_pk");
        assert!(
            result["rows"].as_u64().is_some_and(|n| n > 0),
            "transactions committed: {result}"
        );
        let (p50, p99, p999) = (&result["p50_us"], &result["p99_us"], &result["p999_us"]);
        assert!(
            p50.as_f64() <= p99.as_f64() && p99.as_f64() <= p999.as_f64(),
            "{result}"
        );
    }
}

#[test]
fn a_concurrency_past_the_limit_is_refused() {
    let stderr = run_refused(&["--concurrency", "1,5000"]);
    assert!(
        stderr.contains("5000"),
        "the refusal names the value: {stderr}"
    );
}

/// `--local` starts every data node of a multi-node config, and the cluster serves every
/// access type, reads placed by their key (`--transaction-per-row`) and replicated writes.
#[test]
fn local_run_starts_every_data_node_of_the_config() {
    let (report, stderr, ports) = run_local_json(
        ClusterSpec::new().data_nodes(4).replicas(2),
        &[
            "--size",
            "200",
            "--range",
            "10",
            "--iterations",
            "3",
            "--access",
            "all",
            "--transaction-per-row",
            "--transporter",
            "tcp",
            "--format",
            "json",
        ],
    );
    for id in 1..=4 {
        assert!(
            stderr.contains(&format!("data node {id} serves on")),
            "data node {id} was started:\n{stderr}"
        );
    }
    assert_eq!(report["params"]["transaction_per_row"], true);
    let results = report["results"].as_array().expect("results");
    assert_eq!(results.len(), ACCESS.len(), "every access type ran");
    for &port in &ports {
        wait_until(
            "every local data node to be stopped",
            Duration::from_secs(10),
            || {
                Ok(TcpStream::connect(("127.0.0.1", port))
                    .is_err()
                    .then_some(()))
            },
        )
        .expect("testread-perf stops its data nodes");
    }
}

/// `--primary-node N` measures as many rows per measurement as without it (that they are all
/// rows of node N is checked by the trap test below); a node the config lacks, and an access
/// type that does not read rows by key, are refused before anything starts.
#[test]
fn primary_node_measures_that_nodes_rows_and_refuses_what_it_cannot_restrict() {
    let spec = ClusterSpec::new().data_nodes(4).replicas(2);
    let (report, _, _) = run_local_json(
        spec.clone(),
        &[
            "--size",
            "200",
            "--range",
            "10",
            "--iterations",
            "3",
            "--access",
            "ping,serial_pk,batch_pk,serial_write",
            "--transaction-per-row",
            "--primary-node",
            "3",
            "--transporter",
            "tcp",
            "--format",
            "json",
        ],
    );
    assert_eq!(report["params"]["primary_node"], 3);
    let results = report["results"].as_array().expect("results");
    assert_eq!(results.len(), 4, "every access type ran: {results:?}");
    for result in results {
        assert_eq!(result["rows"], 30, "range * iterations rows: {result}");
    }

    // Refused before anything starts: a config with its ports will do.
    let dir = tempfile::tempdir().expect("create a directory");
    let written = spec.write(dir.path()).expect("write the config");
    let config = written.path.to_str().expect("a UTF-8 temp path");
    let stderr = run_refused(&["--config-file", config, "--primary-node", "9"]);
    assert!(
        stderr.contains("--primary-node 9") && stderr.contains("has no data node 9"),
        "{stderr}"
    );
    let stderr = run_refused(&[
        "--config-file",
        config,
        "--primary-node",
        "1",
        "--access",
        "serial_pk,index_range",
    ]);
    assert!(
        stderr.contains("index_range does not read rows by primary key"),
        "{stderr}"
    );
}

/// The lock wait of the cluster `--primary-node`'s rows are checked on: short, so that a
/// measurement that touches a trapped row fails soon.
const TRAP_DEADLOCK_TIMEOUT_MS: u32 = 500;
/// The data node whose rows `--primary-node` measures in the trap test.
const TRAP_NODE: NodeId = NodeId(3);
/// Rows testread-perf loads in the trap test.
const TRAP_SIZE: u32 = 200;
/// How long testread-perf may take to create and load its table.
const LOAD_TIMEOUT: Duration = Duration::from_secs(60);

/// `--primary-node N` with a transaction per row reads and writes only rows whose primary
/// replica is on data node N. Checked with a trap: every other row of the table is locked
/// exclusively by another API node while testread-perf measures with shared-lock reads and
/// writes, so touching one of them waits, fails with 266 and fails the run. The locks are taken
/// after testread-perf loaded its table and before it measures: on stderr it says it connected,
/// loads, then says it loaded, and the test lets the first line through and holds the second
/// back (stderr is a pipe the test filled but for the first line) until the locks are in place.
#[test]
fn primary_node_reads_and_writes_only_rows_whose_primary_is_that_node() {
    let spec = ClusterSpec::new()
        .data_nodes(4)
        .replicas(2)
        .deadlock_timeout_ms(TRAP_DEADLOCK_TIMEOUT_MS);
    let cluster = TestCluster::start(spec).expect("start four data nodes");
    // Connected first, so that it and testread-perf never ask for one API slot at once.
    let api = cluster.connect().expect("connect the trap's API node");
    // What testread-perf writes before its load (see `connect` in its main.rs); its API node
    // is the second of this cluster, so its id has two digits like this one's.
    let connected = format!(
        "testread-perf: connected as API node {} over {}\n",
        api.node_id(),
        TransporterKind::Tcp
    );
    let (stderr_reader, stderr_writer, filler_bytes) = stderr_passing(connected.len());
    let config = cluster.config_path().to_str().expect("a UTF-8 temp path");
    let mut child = Command::new(testread_perf_path().expect("find testread-perf"))
        .args([
            "--config-file",
            config,
            "--size",
            &TRAP_SIZE.to_string(),
            "--range",
            "10",
            "--iterations",
            "3",
            "--access",
            "ping,serial_pk,batch_pk,serial_write",
            "--transaction-per-row",
            "--lock",
            "read",
            "--primary-node",
            &TRAP_NODE.to_string(),
            "--transporter",
            "tcp",
            "--format",
            "json",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(stderr_writer))
        .spawn()
        .expect("start testread-perf");

    let loaded = wait_until("testread-perf to load its table", LOAD_TIMEOUT, || {
        let Ok(table) = api.get_table("testread_perf") else {
            return Ok(None);
        };
        Ok((scan_count(&api, &table) == Some(TRAP_SIZE as usize)).then_some(table))
    });
    let table = match loaded {
        Ok(table) => table,
        Err(e) => {
            let _ = child.kill();
            panic!(
                "{e}; testread-perf said: {}",
                drain(stderr_reader, filler_bytes)
            );
        }
    };
    let (on_node, elsewhere): (Vec<u32>, Vec<u32>) = (0..TRAP_SIZE).partition(|&pk| {
        let replicas = api
            .replicas_of(&table, &[Value::UInt32(pk)])
            .expect("place a row");
        replicas[0] == TRAP_NODE
    });
    assert!(
        on_node.len() >= 10 && !elsewhere.is_empty(),
        "node {TRAP_NODE} is the primary of {} rows",
        on_node.len()
    );
    let mut trap = api.start_transaction().expect("start");
    for &pk in &elsewhere {
        trap.read(&table, &[Value::UInt32(pk)], LockMode::Exclusive)
            .expect("define");
    }
    trap.execute(ExecType::NoCommit)
        .expect("lock the rows of the other nodes");
    assert_trapped(&api, &table, elsewhere[0], on_node[0]);

    let stderr = std::thread::spawn(move || drain(stderr_reader, filler_bytes));
    let output = child.wait_with_output().expect("wait for testread-perf");
    let stderr = stderr.join().expect("the stderr reader did not panic");
    assert!(
        output.status.success(),
        "testread-perf touched a row whose primary is not node {TRAP_NODE}, or failed: {}\n{stderr}",
        output.status
    );
    let report: Json = serde_json::from_slice(&output.stdout).expect("one JSON document");
    assert_eq!(report["params"]["primary_node"], TRAP_NODE.0);
    assert_eq!(report["params"]["lock"], "read");
    let results = report["results"].as_array().expect("results");
    assert_eq!(results.len(), 4, "every access type ran: {results:?}");
    for result in results {
        assert_eq!(result["rows"], 30, "range * iterations rows: {result}");
    }
    // The trap held all along: its transaction was never aborted, and still commits.
    assert_trapped(&api, &table, elsewhere[0], on_node[0]);
    trap.execute(ExecType::Commit)
        .expect("the trap's transaction held its locks to the end");
}

/// Rows in a full-table scan of `table`, or `None` if the scan fails (the table is being made).
fn scan_count(api: &Cluster, table: &Table) -> Option<usize> {
    let mut transaction = api.start_transaction().ok()?;
    let rows = transaction
        .scan_table(table, &ScanOptions::default())
        .ok()?
        .collect::<Result<Vec<_>, _>>()
        .ok()?;
    Some(rows.len())
}

/// Asserts that a shared-lock read of row `trapped` waits and fails with 266, while one of row
/// `free` succeeds.
#[track_caller]
fn assert_trapped(api: &Cluster, table: &Table, trapped: u32, free: u32) {
    let read = |pk: u32| {
        let mut transaction = api.start_transaction()?;
        transaction.read(table, &[Value::UInt32(pk)], LockMode::Read)?;
        transaction.execute(ExecType::Commit)
    };
    let error = read(trapped).expect_err("a read of a trapped row waits, then fails");
    assert_eq!(
        error.code(),
        Some(266),
        "read trapped row {trapped}: {error}"
    );
    read(free).unwrap_or_else(|e| panic!("read row {free} of node {TRAP_NODE}: {e}"));
}

/// Pages of a pipe and bytes of a page: Linux's default pipe capacity on x86-64.
const PIPE_PAGES: usize = 16;
const PAGE_BYTES: usize = 4096;
/// How long writing the filler into a new pipe may take: at once, unless the pipe is smaller
/// than [`PIPE_PAGES`] pages.
const FILLER_TIMEOUT: Duration = Duration::from_secs(5);

/// A pipe for a child's stderr that lets the child's first `pass` bytes through and blocks its
/// next write until the test reads: the test first fills the pipe but for `pass` bytes of its
/// last page. A write that fits in the last page is appended there, and any other waits for a
/// free page, of which there is none. Returns the reading end and the filler's length.
fn stderr_passing(pass: usize) -> (PipeReader, PipeWriter, usize) {
    assert!(pass < PAGE_BYTES);
    let (reader, writer) = std::io::pipe().expect("make a pipe");
    let filler_bytes = PIPE_PAGES * PAGE_BYTES - pass;
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut writer = writer;
        let written = writer.write_all(&vec![b'.'; filler_bytes]);
        let _ = done_tx.send(written.map(|()| writer));
    });
    let writer = done_rx
        .recv_timeout(FILLER_TIMEOUT)
        .expect("the filler fits in a pipe of 16 pages")
        .expect("write the filler");
    (reader, writer, filler_bytes)
}

/// Reads `reader` to its end and returns what followed the first `skip` bytes, as text.
fn drain(mut reader: PipeReader, skip: usize) -> String {
    let mut bytes = Vec::new();
    reader
        .read_to_end(&mut bytes)
        .expect("read the child's stderr");
    String::from_utf8_lossy(bytes.get(skip..).unwrap_or_default()).into_owned()
}

/// `--local` starts every data node here, so it refuses a config that puts one on another host.
#[test]
fn local_refuses_a_data_node_on_another_host() {
    let dir = tempfile::tempdir().expect("create a directory");
    let config = dir.path().join("config.ini");
    // TEST-NET-2: a documentation address, on no host.
    std::fs::write(
        &config,
        "[ndbd default]\nNoOfReplicas=1\n[ndbd]\nNodeId=1\nHostName=198.51.100.7\n[api]\n",
    )
    .expect("write the config");
    let ndbd = ndbd_path().expect("find ndbd");
    let stderr = run_refused(&[
        "--local",
        "--config-file",
        config.to_str().expect("a UTF-8 temp path"),
        "--ndbd",
        ndbd.to_str().expect("a UTF-8 target path"),
    ]);
    assert!(
        stderr.contains("data node 1's HostName=198.51.100.7")
            && stderr.contains("is not an address of this host"),
        "{stderr}"
    );
}

/// `--workload tpcc` runs every consistency setting asked for at every level, prints its
/// figures as JSON, and reports the consistency checks it ran after each setting.
#[test]
fn the_tpcc_workload_reports_every_setting_level_and_check() {
    let (report, stderr, _) = run_local_json(
        ClusterSpec::new(),
        &[
            "--workload",
            "tpcc",
            "--tpcc-items",
            "100",
            "--tpcc-customers",
            "10",
            "--concurrency",
            "1,4",
            "--duration-ms",
            "200",
            "--consistency",
            "committed,durable",
            "--transporter",
            "tcp",
            "--format",
            "json",
        ],
    );
    assert_eq!(report["workload"], "tpcc");
    let results = report["results"].as_array().expect("a results array");
    let seen: Vec<(String, u64)> = results
        .iter()
        .map(|r| {
            (
                r["consistency"].as_str().expect("consistency").to_string(),
                r["in_flight"].as_u64().expect("in_flight"),
            )
        })
        .collect();
    let expected: Vec<(String, u64)> = [
        ("committed", 1),
        ("committed", 4),
        ("durable", 1),
        ("durable", 4),
    ]
    .iter()
    .map(|(c, n)| (c.to_string(), *n))
    .collect();
    assert_eq!(seen, expected);
    let count = |r: &Json, field: &str| r[field].as_u64().expect("a count");
    for r in results {
        // A durable level of 200 ms may commit only a handful, all of one kind.
        assert!(count(r, "new_orders") + count(r, "payments") > 0, "{r}");
        assert!(r["tx_per_sec"].as_f64().is_some_and(|x| x > 0.0), "{r}");
        assert!(r["p99_us"]
            .as_f64()
            .is_some_and(|x| x >= r["p50_us"].as_f64().unwrap_or(0.0)));
    }
    assert!(results.iter().map(|r| count(r, "new_orders")).sum::<u64>() > 0);
    assert!(results.iter().map(|r| count(r, "payments")).sum::<u64>() > 0);
    let checks = report["checks"].as_array().expect("a checks array");
    assert_eq!(checks.len(), 2, "{checks:?}");
    for (check, setting) in checks.iter().zip(["committed", "durable"]) {
        assert_eq!(check["consistency"], setting);
        let orders: u64 = results
            .iter()
            .filter(|r| r["consistency"] == setting)
            .map(|r| r["new_orders"].as_u64().unwrap_or(0))
            .sum();
        assert_eq!(check["orders"].as_u64(), Some(orders), "{check}");
    }
    assert!(stderr.contains("consistency checks passed"), "{stderr}");
}
