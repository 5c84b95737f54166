//! Proves that the `testread-perf` binary, run with `--local` against a temporary config,
//! starts its own data node, measures every requested access type, prints one JSON document
//! in the documented schema with `rows == range * iterations`, and stops its data node; that
//! `--access all` names every access type; that `--primary-node` keeps full measurements and
//! refuses a node or an access type it cannot restrict to; that `--local` refuses a data node
//! on another host; and that it refuses unknown access types with a message naming the valid
//! ones.

use std::net::TcpStream;
use std::process::{Command, Output};
use std::time::Duration;

use rndb_tests::{ndbd_path, testread_perf_path, wait_until, ClusterSpec};
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

/// Runs testread-perf with `args`, which must succeed and print one JSON document; returns the
/// document and what it wrote on stderr.
fn run_json(args: &[&str]) -> (Json, String) {
    let output = run(args);
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

/// Runs testread-perf with `args`, which it must refuse; returns its stderr.
fn run_refused(args: &[&str]) -> String {
    let output = run(args);
    assert!(!output.status.success(), "testread-perf {args:?} must fail");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn local_run_prints_the_json_schema() {
    let dir = tempfile::tempdir().expect("create a directory");
    let written = ClusterSpec::new()
        .write(dir.path())
        .expect("write the config");
    let ndbd = ndbd_path().expect("find ndbd");
    let (range, iterations) = (RANGE.to_string(), ITERATIONS.to_string());
    let (report, _) = run_json(&[
        "--local",
        "--config-file",
        written.path.to_str().expect("a UTF-8 temp path"),
        "--ndbd",
        ndbd.to_str().expect("a UTF-8 target path"),
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
    ]);
    check_report(&report);

    // The data node was stopped when testread-perf exited: its port no longer accepts.
    let addr = (
        "127.0.0.1",
        written
            .ports
            .values()
            .next()
            .copied()
            .expect("a data node port"),
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
    let dir = tempfile::tempdir().expect("create a directory");
    let written = ClusterSpec::new()
        .write(dir.path())
        .expect("write the config");
    let ndbd = ndbd_path().expect("find ndbd");
    let (report, _) = run_json(&[
        "--local",
        "--config-file",
        written.path.to_str().expect("a UTF-8 temp path"),
        "--ndbd",
        ndbd.to_str().expect("a UTF-8 target path"),
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
    ]);
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
    let dir = tempfile::tempdir().expect("create a directory");
    let written = ClusterSpec::new()
        .data_nodes(4)
        .replicas(2)
        .write(dir.path())
        .expect("write the config");
    let ndbd = ndbd_path().expect("find ndbd");
    let (report, stderr) = run_json(&[
        "--local",
        "--config-file",
        written.path.to_str().expect("a UTF-8 temp path"),
        "--ndbd",
        ndbd.to_str().expect("a UTF-8 target path"),
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
    ]);
    for id in 1..=4 {
        assert!(
            stderr.contains(&format!("data node {id} serves on")),
            "data node {id} was started:\n{stderr}"
        );
    }
    assert_eq!(report["params"]["transaction_per_row"], true);
    let results = report["results"].as_array().expect("results");
    assert_eq!(results.len(), ACCESS.len(), "every access type ran");
    for &port in written.ports.values() {
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

/// `--primary-node N` measures only rows whose primary replica is on data node N, with as many
/// rows per measurement as without it; a node the config lacks, and an access type that does
/// not read rows by key, are refused before anything starts.
#[test]
fn primary_node_measures_that_nodes_rows_and_refuses_what_it_cannot_restrict() {
    let dir = tempfile::tempdir().expect("create a directory");
    let written = ClusterSpec::new()
        .data_nodes(4)
        .replicas(2)
        .write(dir.path())
        .expect("write the config");
    let config = written.path.to_str().expect("a UTF-8 temp path");
    let ndbd = ndbd_path().expect("find ndbd");
    let ndbd = ndbd.to_str().expect("a UTF-8 target path");
    let (report, _) = run_json(&[
        "--local",
        "--config-file",
        config,
        "--ndbd",
        ndbd,
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
    ]);
    assert_eq!(report["params"]["primary_node"], 3);
    let results = report["results"].as_array().expect("results");
    assert_eq!(results.len(), 4, "every access type ran: {results:?}");
    for result in results {
        assert_eq!(result["rows"], 30, "range * iterations rows: {result}");
    }

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
