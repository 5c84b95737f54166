//! Proves that ndb_mgmd shows what each data node is doing: its `/metrics` endpoint, scraped
//! over HTTP while an API node inserts, serves every data node's figures in the OpenMetrics
//! format with counters that never go back and that grow under the load; `ALL REPORT
//! MemoryUsage` and `ALL REPORT Counters` print the record pools, locks, transporter counters
//! and checkpoint state; and the cluster log records the master's local checkpoints, each
//! node's memory usage every MemReportFrequency seconds, a node failure as the survivor saw
//! it, and the failed node's start again.

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rndb_api::{Cluster, ColumnDef, ColumnType, ConnectOptions, ExecType, TableDef, Value};
use rndb_tests::processes::{run, text, write_mgm_config, Processes};
use rndb_tests::{free_port, wait_until};

/// How long a start may take (debug builds on a shared 2-core machine).
const START_TIMEOUT: Duration = Duration::from_secs(120);
/// Scrapes taken during the load, and the pause between two.
const SCRAPES: usize = 8;
const SCRAPE_INTERVAL: Duration = Duration::from_millis(400);

fn wait_started(cs: &str) {
    let timeout = START_TIMEOUT.as_secs().to_string();
    let out = run("ndb_waiter", &["-c", cs, "--timeout", &timeout]);
    assert!(
        out.status.success(),
        "ndb_waiter: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// `GET path` on the metrics port: the status line, the headers and the body.
fn http_get(port: u16, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to /metrics");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(stream, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").expect("send the request");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read the answer");
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    (head.to_string(), body.to_string())
}

/// The samples of an OpenMetrics text: `name{labels}` → value.
fn samples(body: &str) -> BTreeMap<String, u64> {
    body.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect("a sample line");
            let value = value.parse().unwrap_or_else(|_| panic!("sample {line:?}"));
            (series.to_string(), value)
        })
        .collect()
}

fn scrape(port: u16) -> BTreeMap<String, u64> {
    let (head, body) = http_get(port, "/metrics");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(
        head.contains("Content-Type: application/openmetrics-text; version=1.0.0"),
        "{head}"
    );
    assert!(body.ends_with("# EOF\n"), "{body}");
    samples(&body)
}

fn insert_until(api: &Cluster, stop: &AtomicBool) -> u32 {
    let table = api.get_table("scraped").expect("the table");
    let mut id = 0;
    while !stop.load(Ordering::Relaxed) {
        let mut transaction = api.start_transaction().expect("start a transaction");
        for _ in 0..10 {
            transaction
                .insert(&table, &[Value::UInt32(id), Value::Int64(i64::from(id))])
                .expect("define an insert");
            id += 1;
        }
        transaction
            .execute(ExecType::Commit)
            .expect("insert 10 rows");
    }
    id
}

#[test]
fn metrics_reports_and_the_cluster_log_show_what_the_data_nodes_do() {
    let mut procs = Processes::new();
    let (config, port) = write_mgm_config(
        procs.dir.path(),
        "TimeBetweenLocalCheckpoints=10\nMemReportFrequency=1\n",
        2,
    );
    let metrics_port = free_port();
    let cs = format!("127.0.0.1:{port}");
    procs.spawn(
        "ndb_mgmd",
        "ndb_mgmd",
        &[
            "-f",
            &config.display().to_string(),
            "--metrics-port",
            &metrics_port.to_string(),
        ],
    );
    wait_until(
        "the metrics endpoint to listen",
        Duration::from_secs(20),
        || {
            Ok(TcpStream::connect(("127.0.0.1", metrics_port))
                .ok()
                .map(|_| ()))
        },
    )
    .expect("ndb_mgmd serves metrics");
    procs.spawn("ndbd-1", "ndbd", &["-c", &cs, "--ndb-nodeid", "1"]);
    procs.spawn("ndbd-2", "ndbd", &["-c", &cs, "--ndb-nodeid", "2"]);
    wait_started(&cs);
    let set = run(
        "ndb_mgm",
        &["-c", &cs, "-e", "ALL CLUSTERLOG NODERESTART=8"],
    );
    assert!(set.status.success(), "{}", text(&set.stderr));
    let (head, _) = http_get(metrics_port, "/other");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");

    let api = Cluster::connect_mgm(&cs, ConnectOptions::default()).expect("connect");
    let def = TableDef::new(
        "scraped",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("value", ColumnType::Int64),
        ],
    );
    api.create_table(&def).expect("create the table");
    let before = scrape(metrics_port);
    let stop = Arc::new(AtomicBool::new(false));
    let inserted = std::thread::scope(|scope| {
        let writer = scope.spawn(|| insert_until(&api, &stop));
        let mut scrapes = Vec::new();
        for _ in 0..SCRAPES {
            std::thread::sleep(SCRAPE_INTERVAL);
            scrapes.push(scrape(metrics_port));
        }
        stop.store(true, Ordering::Relaxed);
        let inserted = writer.join().expect("the writer");
        for pair in scrapes.windows(2) {
            for (series, value) in &pair[0] {
                if series.contains("_total{") {
                    let later = pair[1].get(series).copied().unwrap_or(0);
                    assert!(
                        later >= *value,
                        "{series} went back from {value} to {later}"
                    );
                }
            }
        }
        inserted
    });
    assert!(inserted > 0, "nothing was inserted");
    // The reports lag the nodes by at most a report interval or two.
    let after = wait_until(
        "the reports to show the inserts",
        Duration::from_secs(10),
        || {
            let after = scrape(metrics_port);
            let used = |s: &BTreeMap<String, u64>| s["ndb_data_memory_used_bytes{node_id=\"1\"}"];
            Ok((used(&after) > used(&before)).then_some(after))
        },
    )
    .expect("DataMemory use grows with the rows");
    for node in ["1", "2"] {
        for name in [
            "frames_sent_total",
            "bytes_sent_total",
            "frames_received_total",
            // Every insert runs on both replicas.
            "lqh_operations_total",
        ] {
            let series = format!("ndb_{name}{{node_id=\"{node}\"}}");
            assert!(
                after[&series] > before[&series],
                "{series} did not grow under the load: {} → {}",
                before[&series],
                after[&series]
            );
        }
    }
    // The inserts' transactions, on whichever nodes coordinated them, once reported.
    let summed = |s: &BTreeMap<String, u64>, name: &str| {
        ["1", "2"]
            .iter()
            .map(|n| s[&format!("ndb_{name}{{node_id=\"{n}\"}}")])
            .sum::<u64>()
    };
    // Ten inserts a transaction.
    let inserted = u64::from(inserted);
    let counted = [
        ("tc_writes_total", inserted),
        ("tc_transactions_total", inserted / 10),
        ("tc_commits_total", inserted / 10),
    ];
    let after_all = wait_until(
        "the reports to count every insert",
        Duration::from_secs(10),
        || {
            let now = scrape(metrics_port);
            Ok(counted
                .iter()
                .all(|&(name, grew)| summed(&now, name) >= summed(&before, name) + grew)
                .then_some(now))
        },
    );
    if let Err(e) = after_all {
        let now = scrape(metrics_port);
        let shown: Vec<String> = counted
            .iter()
            .map(|(n, _)| format!("{n}: {} → {}", summed(&before, n), summed(&now, n)))
            .collect();
        panic!("{e}; {inserted} inserts; {shown:?}");
    }
    for node in ["1", "2"] {
        for name in [
            "transactions_max",
            "operations_max",
            "data_memory_total_bytes",
        ] {
            let series = format!("ndb_{name}{{node_id=\"{node}\"}}");
            assert!(after[&series] > 0, "{series} is 0");
        }
    }

    let memory = text(&run("ndb_mgm", &["-c", &cs, "-e", "ALL REPORT MemoryUsage"]).stdout);
    // The figures are each node's last report, taken while the load may have been running.
    for node in [1, 2] {
        let lines: Vec<&str> = memory
            .lines()
            .filter(|l| l.starts_with(&format!("Node {node}: ")))
            .collect();
        assert_eq!(lines.len(), 5, "{memory}");
        for (line, (start, end)) in lines.iter().zip([
            ("Data usage is ", " 32K pages of total 512)"),
            ("Transaction record usage is ", " of total 4096)"),
            ("Operation record usage is ", " of total 32768)"),
            ("Scan records in use: ", ""),
            ("Send buffer usage: ", " bytes"),
        ]) {
            let rest = &line[format!("Node {node}: ").len()..];
            assert!(
                rest.starts_with(start) && rest.ends_with(end),
                "{line:?} in:\n{memory}"
            );
        }
    }
    let counters = text(&run("ndb_mgm", &["-c", &cs, "-e", "2 REPORT Counters"]).stdout);
    assert!(
        counters.starts_with("Node 2: Row locks held or waited for: "),
        "{counters}"
    );
    assert!(counters.contains("Node 2: Transporter: "), "{counters}");
    assert!(
        counters.contains("Node 2: Global checkpoint "),
        "{counters}"
    );
    assert!(!counters.contains("Node 1:"), "{counters}");

    let log_path = procs.path("mgm/ndb_49_cluster.log");
    let cluster_log = || fs::read_to_string(&log_path).unwrap_or_default();
    wait_until(
        "the cluster log to record a local checkpoint",
        Duration::from_secs(60),
        || {
            let log = cluster_log();
            Ok(
                (log.contains("[MgmtSrvr] INFO     -- Node 1: Local checkpoint ")
                    && log.contains(" completed\n"))
                .then_some(()),
            )
        },
    )
    .unwrap_or_else(|e| panic!("{e}:\n{}", cluster_log()));
    // MemReportFrequency=1: each node's memory usage, every second.
    wait_until(
        "the cluster log to record memory usage twice",
        Duration::from_secs(30),
        || {
            let log = cluster_log();
            let reports = |node| {
                let line = format!("[MgmtSrvr] INFO     -- Node {node}: Data usage is ");
                log.matches(&line).count()
            };
            Ok((reports(1) >= 2 && reports(2) >= 2).then_some(()))
        },
    )
    .unwrap_or_else(|e| panic!("{e}:\n{}", cluster_log()));
    assert!(
        cluster_log().contains(" 32K pages of total 512)\n"),
        "{}",
        cluster_log()
    );

    // Node 2 killed: the survivor reports its failure; started again, it rejoins.
    drop(api);
    procs.child("ndbd-2").kill().expect("kill -9 node 2");
    procs.child("ndbd-2").wait().expect("reap node 2");
    wait_until(
        "the cluster log to record node 2's failure",
        Duration::from_secs(30),
        || {
            let log = cluster_log();
            Ok(
                (log.contains("[MgmtSrvr] ALERT    -- Node 1: Node 2 Disconnected\n")
                    && log.contains("[MgmtSrvr] ALERT    -- Node 1: Node 2 has failed\n"))
                .then_some(()),
            )
        },
    )
    .unwrap_or_else(|e| panic!("{e}:\n{}", cluster_log()));
    procs.spawn("ndbd-2-again", "ndbd", &["-c", &cs, "--ndb-nodeid", "2"]);
    wait_started(&cs);
    let log = cluster_log();
    let failure = log.find("Node 1: Node 2 has failed").expect("the failure");
    assert!(
        log[failure..].contains("-- Node 2: Started (version"),
        "no start of node 2 after its failure:\n{log}"
    );
}
