//! Proves that `rndb-redis` serves the Redis protocol over rndb tables: the real `redis-cli` and
//! `redis-benchmark` and a Redis client library (the `redis` crate) work against it, values it
//! stores read back through the rndb API, MULTI/EXEC is one transaction across node groups (a
//! reader never sees half of a writer's EXEC), the port comes from the API slot's
//! RondisServerPort or `--port`, pipelines of many clients writing the same keys
//! on two replicas never deadlock, TTLs expire keys, values of any length up to a request's
//! longest bulk string (1 MiB) are stored whole, in the row or past it in a LONGBLOB, with no
//! parts left behind by any command, a table made before that column keeps its limit, INCRs
//! racing to create a key all count, writes of more rows than one batch holds succeed, and
//! garbage, huge lengths and unknown commands get
//! errors while other clients are served, and an HDEL of short fields on its own is one round
//! trip (INFO's NDB client statistics).
//! Over spinning shared memory the gateway keeps off the CPU its data node is bound to.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use redis::Commands;
use rndb_api::{LockMode, NodeId, Value};
use rndb_tests::binary_path;
use rndb_tests::gateway::{Gateway, START_TIMEOUT};
use rndb_tests::ops::read_with;
use rndb_tests::{wait_until, ClusterSpec, TestCluster};

/// How long a raw-protocol read may wait for a reply.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// A client of the gateway (the `redis` crate).
fn client(gateway: &Gateway) -> redis::Connection {
    redis::Client::open(gateway.url())
        .expect("client")
        .get_connection()
        .expect("connect to the gateway")
}

/// A tool of redis-tools; CI installs them (.ci/run).
fn tool(name: &str) -> Command {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "{name} is not installed: `apt-get install -y redis-tools` (.ci/run does)"
    );
    Command::new(name)
}

/// Runs `redis-cli -p <port> args…` and returns its output, trimmed.
fn redis_cli(gateway: &Gateway, args: &[&str]) -> String {
    let output = tool("redis-cli")
        .args(["-p", &gateway.port.to_string()])
        .args(args)
        .output()
        .expect("run redis-cli");
    assert!(output.status.success(), "redis-cli {args:?}: {output:?}");
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

#[test]
fn redis_cli_and_redis_benchmark_work_against_the_gateway() {
    let cluster = TestCluster::start(ClusterSpec::new()).expect("start the cluster");
    let gateway = Gateway::start(&cluster);
    assert_eq!(redis_cli(&gateway, &["PING"]), "PONG");
    assert_eq!(redis_cli(&gateway, &["SET", "greeting", "hello"]), "OK");
    assert_eq!(redis_cli(&gateway, &["GET", "greeting"]), "hello");
    assert_eq!(redis_cli(&gateway, &["APPEND", "greeting", " world"]), "11");
    assert_eq!(redis_cli(&gateway, &["STRLEN", "greeting"]), "11");
    assert_eq!(redis_cli(&gateway, &["INCRBY", "counter", "5"]), "5");
    assert_eq!(redis_cli(&gateway, &["DECR", "counter"]), "4");
    assert_eq!(redis_cli(&gateway, &["HSET", "h", "a", "1", "b", "2"]), "2");
    assert_eq!(redis_cli(&gateway, &["HGETALL", "h"]).lines().count(), 4);
    assert_eq!(
        redis_cli(&gateway, &["-3", "HGET", "h", "b"]),
        "2",
        "over RESP3"
    );
    assert_eq!(redis_cli(&gateway, &["ECHO", "hi there"]), "hi there");
    assert_eq!(
        redis_cli(&gateway, &["HMGET", "h", "b", "zz", "a"]),
        "2\n\n1"
    );
    assert_eq!(redis_cli(&gateway, &["EXPIRE", "greeting", "1000"]), "1");
    let ttl: i64 = redis_cli(&gateway, &["TTL", "greeting"])
        .parse()
        .expect("TTL");
    assert!((999..=1000).contains(&ttl), "ttl {ttl}");
    assert_eq!(redis_cli(&gateway, &["EXPIRE", "missing", "10"]), "0");
    let count: usize = redis_cli(&gateway, &["COMMAND", "COUNT"])
        .parse()
        .expect("COMMAND COUNT");
    assert!(count >= 30, "COMMAND COUNT {count}");
    assert_eq!(redis_cli(&gateway, &["SELECT", "0"]), "OK");
    assert!(redis_cli(&gateway, &["INFO"]).contains("redis_version"));
    let unknown = redis_cli(&gateway, &["NOSUCHCOMMAND"]);
    assert!(unknown.contains("unknown command"), "{unknown}");
    let large = "x".repeat(20_000);
    assert_eq!(redis_cli(&gateway, &["SET", "large", &large]), "OK");
    assert_eq!(redis_cli(&gateway, &["GET", "large"]), large);
    let long_key = "k".repeat(1025);
    let refused = redis_cli(&gateway, &["SET", &long_key, "v"]);
    assert!(refused.contains("key longer than 1024"), "{refused}");

    let port = gateway.port.to_string();
    let benchmark = tool("redis-benchmark")
        .args([
            "-p", &port, "-t", "get,set", "-n", "2000", "-c", "4", "-P", "8", "-q",
        ])
        .output()
        .expect("run redis-benchmark");
    let report = String::from_utf8_lossy(&benchmark.stdout);
    assert!(benchmark.status.success(), "redis-benchmark: {benchmark:?}");
    assert!(
        report.contains("SET") && report.contains("GET"),
        "redis-benchmark: {report}"
    );
    // Every reply was right: the benchmark's keys are there.
    assert_eq!(redis_cli(&gateway, &["EXISTS", "key:__rand_int__"]), "1");
}

/// The CPUs a thread may run on, from /proc (`Cpus_allowed_list`, as `0-1,3`).
fn allowed_cpus(pid: u32) -> Vec<usize> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list")
        .trim()
        .to_string();
    list.split(',')
        .flat_map(|range| match range.split_once('-') {
            Some((a, b)) => (a.parse().unwrap()..=b.parse().unwrap()).collect::<Vec<usize>>(),
            None => vec![range.parse().unwrap()],
        })
        .collect()
}

#[test]
fn over_spinning_shared_memory_the_gateway_keeps_off_the_data_node_cpu() {
    if std::thread::available_parallelism().map_or(1, usize::from) < 2 {
        eprintln!("skipped: one CPU, none to keep off");
        return;
    }
    let spec = ClusterSpec::new()
        .use_shm(true)
        .data_node_param("LockExecuteThreadToCPU", "1")
        .extra("[shm default]\nShmSpintime=300");
    let cluster = TestCluster::start(spec).expect("start the cluster");
    let gateway = Gateway::start(&cluster);
    assert_eq!(redis_cli(&gateway, &["SET", "k", "v"]), "OK");
    assert_eq!(redis_cli(&gateway, &["GET", "k"]), "v");
    // The runtime runs on the main thread, whose id is the process's.
    let cpus = allowed_cpus(gateway.child.id());
    assert!(
        !cpus.is_empty() && !cpus.contains(&1),
        "the gateway runs on CPUs {cpus:?}"
    );
    let log = std::fs::read_to_string(cluster.dir().join("rndb-redis.log")).expect("log");
    assert!(
        log.contains("serving from the CPUs the local data nodes leave free"),
        "{log}"
    );
}

#[test]
fn a_client_library_reads_and_writes_and_the_api_sees_the_rows() {
    let cluster = TestCluster::start(ClusterSpec::new().data_nodes(2).replicas(2))
        .expect("start the cluster");
    let gateway = Gateway::start(&cluster);
    let mut client = client(&gateway);

    let _: () = client.set("alpha", "one").expect("set");
    let _: () = client
        .mset(&[("beta", "two"), ("gamma", "three")])
        .expect("mset");
    let values: Vec<Option<String>> = client
        .mget(&["alpha", "beta", "missing", "gamma"])
        .expect("mget");
    assert_eq!(
        values,
        vec![
            Some("one".into()),
            Some("two".into()),
            None,
            Some("three".into())
        ]
    );
    assert_eq!(client.exists::<_, i64>(&["alpha", "missing"]).unwrap(), 1);
    assert_eq!(client.incr::<_, _, i64>("n", 41).unwrap(), 41);
    assert_eq!(client.incr::<_, _, i64>("n", 1).unwrap(), 42);
    let not_integer = client.incr::<_, _, i64>("alpha", 1);
    assert!(not_integer.is_err(), "{not_integer:?}");

    // SET's options.
    let nx: Option<String> = redis::cmd("SET")
        .arg("alpha")
        .arg("other")
        .arg("NX")
        .query(&mut client)
        .unwrap();
    assert_eq!(nx, None, "NX on an existing key");
    let xx: Option<String> = redis::cmd("SET")
        .arg("fresh")
        .arg("v")
        .arg("XX")
        .query(&mut client)
        .unwrap();
    assert_eq!(xx, None, "XX on a missing key");
    assert_eq!(client.get::<_, Option<String>>("fresh").unwrap(), None);

    // Hashes.
    assert_eq!(
        client
            .hset_multiple::<_, _, _, ()>("user", &[("name", "ada"), ("lang", "rust")])
            .map(|_| ()),
        Ok(())
    );
    assert_eq!(client.hget::<_, _, String>("user", "name").unwrap(), "ada");
    assert_eq!(
        client.hincr::<_, _, _, i64>("user", "visits", 3).unwrap(),
        3
    );
    let all: std::collections::HashMap<String, String> = client.hgetall("user").unwrap();
    assert_eq!(all.len(), 3, "{all:?}");
    assert_eq!(
        client.hdel::<_, _, i64>("user", &["lang", "nope"]).unwrap(),
        1
    );
    assert_eq!(
        client.del::<_, i64>(&["user", "beta", "missing"]).unwrap(),
        2
    );
    assert_eq!(client.hgetall::<_, Vec<String>>("user").unwrap().len(), 0);

    // TTLs: an expiring key disappears.
    let _: () = client.set_ex("ephemeral", "soon", 100).unwrap();
    let ttl: i64 = client.ttl("ephemeral").unwrap();
    assert!((99..=100).contains(&ttl), "ttl {ttl}");
    assert_eq!(client.persist::<_, i64>("ephemeral").unwrap(), 1);
    assert_eq!(client.ttl::<_, i64>("ephemeral").unwrap(), -1);
    assert_eq!(client.ttl::<_, i64>("missing").unwrap(), -2);
    let _: () = redis::cmd("SET")
        .arg("ephemeral")
        .arg("soon")
        .arg("PX")
        .arg(50)
        .query(&mut client)
        .unwrap();
    wait_until("the key to expire", Duration::from_secs(10), || {
        Ok(client
            .get::<_, Option<String>>("ephemeral")?
            .is_none()
            .then_some(()))
    })
    .expect("expired");
    assert_eq!(client.exists::<_, i64>("ephemeral").unwrap(), 0);
    // The read that found it expired deleted its row.
    let api = cluster.connect().expect("connect");
    let strings = api.get_table("redis_strings").expect("the strings table");
    rndb_tests::assert_ndb_code(
        read_with(
            &api,
            &strings,
            &[Value::Varbinary(b"ephemeral".to_vec())],
            LockMode::CommittedRead,
        ),
        626,
        "read the expired key's row",
    );

    // A pipeline: its GETs and SETs go in one execute each.
    let mut pipe = redis::pipe();
    for i in 0..100 {
        pipe.set(format!("p{i}"), i).ignore();
    }
    for i in 0..100 {
        pipe.get(format!("p{i}"));
    }
    let got: Vec<i64> = pipe.query(&mut client).unwrap();
    assert_eq!(got, (0..100).collect::<Vec<i64>>());

    // RESP3, through HELLO 3.
    let hello: redis::Value = redis::cmd("HELLO").arg(3).query(&mut client).unwrap();
    assert!(format!("{hello:?}").contains("proto"), "{hello:?}");
    assert_eq!(client.get::<_, Option<String>>("missing").unwrap(), None);
    assert_eq!(client.get::<_, String>("alpha").unwrap(), "one");

    // What the gateway wrote is an ordinary row.
    let row = read_with(
        &api,
        &strings,
        &[Value::Varbinary(b"alpha".to_vec())],
        LockMode::CommittedRead,
    )
    .expect("read alpha");
    assert_eq!(row[1], Value::Varbinary(b"one".to_vec()));
    assert_eq!(row[2], Value::Varbinary(Vec::new()), "value_more");
    assert_eq!(row[3], Value::Int64(0), "no expiry");
}

#[test]
fn the_async_client_pipelines_through_the_gateway() {
    let cluster = TestCluster::start(ClusterSpec::new()).expect("start the cluster");
    let gateway = Gateway::start(&cluster);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let client = redis::Client::open(gateway.url()).expect("client");
        let mut connection = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let mut pipe = redis::pipe();
        for i in 0..50 {
            pipe.set(format!("a{i}"), format!("v{i}")).ignore();
        }
        pipe.get("a7").get("a49");
        let (a7, a49): (String, String) = pipe.query_async(&mut connection).await.unwrap();
        assert_eq!((a7.as_str(), a49.as_str()), ("v7", "v49"));
    });
}

#[test]
fn the_port_comes_from_the_api_slot_and_a_bad_one_is_refused_by_name() {
    let port = rndb_tests::free_port();
    let slot = format!("[api]\nNodeId=60\nHostName=127.0.0.1\nRondisServerPort={port}");
    let cluster = TestCluster::start(ClusterSpec::new().extra(&slot)).expect("start the cluster");
    let gateway = Gateway::start_with(&cluster, &["--ndb-nodeid", "60"]);
    assert_eq!(gateway.port, port, "RondisServerPort of slot 60");
    assert_eq!(redis_cli(&gateway, &["PING"]), "PONG");
    drop(gateway);
    // --port overrides the slot's.
    let gateway = Gateway::start_with(&cluster, &["--ndb-nodeid", "60", "--port", "0"]);
    assert_ne!(gateway.port, port);
    drop(gateway);

    let config = std::fs::read_to_string(cluster.config_path()).expect("read config.ini");
    let bad = cluster.dir().join("bad-port.ini");
    let text = config.replace(
        &format!("RondisServerPort={port}"),
        "RondisServerPort=70000",
    );
    std::fs::write(&bad, text).expect("write the bad config");
    let output = Command::new(binary_path("rndb-redis").expect("the rndb-redis binary"))
        .arg("--config-file")
        .arg(&bad)
        .output()
        .expect("run rndb-redis");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{output:?}");
    assert!(
        stderr.contains("RondisServerPort") && stderr.contains("out of range"),
        "{stderr}"
    );
}

#[test]
fn pipelines_from_many_clients_on_shared_keys_never_deadlock() {
    // Over shared memory, which the example configs use (the other tests link over TCP): the
    // gateway's runtime reads the rings itself.
    let spec = ClusterSpec::new().data_nodes(2).replicas(2).use_shm(true);
    let cluster = TestCluster::start(spec).expect("start the cluster");
    let gateway = Gateway::start(&cluster);
    const CLIENTS: usize = 12;
    const ROUNDS: usize = 15;
    const KEYS: usize = 30;
    // Each client writes every key in each pipeline, in orders that differ: had a
    // pipeline's SETs shared one transaction, two of them would wait for each other's locks
    // until TransactionDeadlockDetectionTimeout ended one with 266.
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let url = gateway.url();
            std::thread::spawn(move || {
                let mut connection = redis::Client::open(url)?.get_connection()?;
                for round in 0..ROUNDS {
                    let mut pipe = redis::pipe();
                    // Each pipeline starts at another key (and so, often, at another
                    // coordinator), half of them going backwards.
                    let mut keys: Vec<usize> = (0..KEYS).collect();
                    keys.rotate_left((client * 7 + round * 3) % KEYS);
                    if client % 2 == 1 {
                        keys.reverse();
                    }
                    for key in keys {
                        pipe.set(format!("shared{key}"), format!("{client}:{round}"))
                            .ignore();
                    }
                    pipe.incr(format!("count{client}"), 1).ignore();
                    pipe.query::<()>(&mut connection)?;
                }
                Ok::<(), redis::RedisError>(())
            })
        })
        .collect();
    for (client, handle) in clients.into_iter().enumerate() {
        let result = handle.join().expect("client thread");
        assert!(result.is_ok(), "client {client}: {result:?}");
    }
    let mut client = client(&gateway);
    for key in 0..KEYS {
        let value: String = client.get(format!("shared{key}")).expect("get");
        assert!(value.ends_with(&format!(":{}", ROUNDS - 1)), "{value}");
    }
    for c in 0..CLIENTS {
        let count: usize = client.get(format!("count{c}")).expect("count");
        assert_eq!(count, ROUNDS, "client {c}'s INCRs");
    }

    // What redis-benchmark does: 50 clients pipelining SETs of random keys.
    let benchmark = tool("redis-benchmark")
        .args(["-p", &gateway.port.to_string()])
        .args([
            "-t", "set", "-n", "20000", "-c", "50", "-P", "20", "-r", "1000",
        ])
        .args(["-q"])
        .output()
        .expect("run redis-benchmark");
    let report = String::from_utf8_lossy(&benchmark.stdout);
    assert!(
        benchmark.status.success() && report.contains("SET") && !report.contains("rror"),
        "redis-benchmark: {benchmark:?}"
    );
}

/// Two keys whose rows live in different node groups of `cluster`'s four data nodes.
fn keys_in_two_node_groups(cluster: &TestCluster) -> (String, String) {
    let api = cluster.connect().expect("connect");
    let strings = wait_until("the gateway's tables", START_TIMEOUT, || {
        Ok(api.get_table("redis_strings").ok())
    })
    .expect("the strings table");
    let group_of = |key: &str| {
        let replicas = api
            .replicas_of(&strings, &[Value::Varbinary(key.as_bytes().to_vec())])
            .expect("replicas");
        replicas.iter().min().copied().map(|n: NodeId| n.0 <= 2)
    };
    let first = "k0".to_string();
    let first_group = group_of(&first);
    let second = (1..1000)
        .map(|i| format!("k{i}"))
        .find(|k| group_of(k) != first_group)
        .expect("a key in the other node group");
    (first, second)
}

#[test]
fn multi_exec_is_one_transaction_across_node_groups() {
    let cluster = TestCluster::start(ClusterSpec::new().data_nodes(4).replicas(2))
        .expect("start the cluster");
    let gateway = Gateway::start(&cluster);
    let (k1, k2) = keys_in_two_node_groups(&cluster);
    let mut client = client(&gateway);
    let _: () = client.mset(&[(&k1, 0), (&k2, 0)]).unwrap();

    let writer_url = gateway.url();
    let (w1, w2) = (k1.clone(), k2.clone());
    let writer = std::thread::spawn(move || {
        let mut writer = redis::Client::open(writer_url)
            .unwrap()
            .get_connection()
            .unwrap();
        for _ in 0..200 {
            let (a, b): (i64, i64) = redis::pipe()
                .atomic()
                .incr(&w1, 1)
                .incr(&w2, 1)
                .query(&mut writer)
                .expect("MULTI INCR INCR EXEC");
            assert_eq!(a, b);
        }
    });
    let started = Instant::now();
    let mut reads = 0;
    while !writer.is_finished() && started.elapsed() < Duration::from_secs(120) {
        let (a, b): (i64, i64) = redis::pipe()
            .atomic()
            .get(&k1)
            .get(&k2)
            .query(&mut client)
            .expect("MULTI GET GET EXEC");
        assert_eq!(a, b, "a reader saw half of an EXEC");
        reads += 1;
    }
    writer.join().expect("writer");
    assert!(reads > 0);
    let (a, b): (i64, i64) = redis::pipe().get(&k1).get(&k2).query(&mut client).unwrap();
    assert_eq!((a, b), (200, 200));

    // A command refused while queued discards the whole EXEC, as in Redis: nothing applies.
    let long_key = "k".repeat(1025);
    let discarded: redis::RedisResult<()> = redis::pipe()
        .atomic()
        .set(&k1, "changed")
        .set(&long_key, "v")
        .query(&mut client);
    assert!(discarded.is_err(), "{discarded:?}");
    assert_eq!(client.get::<_, i64>(&k1).unwrap(), 200);
}

/// Sends `request` on a raw connection and reads what comes back until a reply line ends (or
/// the connection closes); returns it and whether the connection closed.
fn raw_exchange(stream: &mut TcpStream, request: &[u8]) -> (String, bool) {
    stream.write_all(request).expect("send");
    stream
        .set_read_timeout(Some(REPLY_TIMEOUT))
        .expect("read timeout");
    let mut reply = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return (String::from_utf8_lossy(&reply).into_owned(), true),
            Ok(n) => {
                reply.extend_from_slice(&buffer[..n]);
                if reply.ends_with(b"\r\n") {
                    return (String::from_utf8_lossy(&reply).into_owned(), false);
                }
            }
            Err(e) => panic!("read a reply to {request:?}: {e} (so far {reply:?})"),
        }
    }
}

fn connection_closes(stream: &mut TcpStream) -> bool {
    let mut buffer = [0u8; 64];
    matches!(stream.read(&mut buffer), Ok(0) | Err(_))
}

#[test]
fn bad_protocol_input_gets_errors_and_others_are_served() {
    let cluster = TestCluster::start(ClusterSpec::new()).expect("start the cluster");
    let gateway = Gateway::start(&cluster);
    let mut bystander = client(&gateway);
    let connect = || TcpStream::connect(("127.0.0.1", gateway.port)).expect("connect");

    // Unknown commands and garbage lines are errors; the connection goes on.
    let mut stream = connect();
    let (reply, _) = raw_exchange(&mut stream, b"*1\r\n$6\r\nFOOBAR\r\n");
    assert!(reply.starts_with("-ERR unknown command"), "{reply}");
    let (reply, _) = raw_exchange(&mut stream, b"\x01\x02\xfe garbage\r\n");
    assert!(reply.starts_with("-ERR unknown command"), "{reply}");
    let (reply, _) = raw_exchange(&mut stream, b"PING\r\n");
    assert_eq!(reply, "+PONG\r\n");

    // A huge bulk length, a huge argument count, a broken frame: an error, then the close.
    for request in [
        &b"*1\r\n$99999999999\r\n"[..],
        b"*2000000000\r\n",
        b"*1\r\n+OK\r\n",
        b"*1\r\n$2\r\nabcdef\r\n",
    ] {
        let mut stream = connect();
        let (reply, _) = raw_exchange(&mut stream, request);
        assert!(
            reply.starts_with("-ERR Protocol error"),
            "{request:?}: {reply}"
        );
        assert!(connection_closes(&mut stream), "{request:?}: still open");
    }

    // A client that sends half a request and leaves.
    let mut stream = connect();
    stream
        .write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk")
        .expect("send");
    drop(stream);

    let _: () = bystander.set("still", "served").expect("set");
    assert_eq!(bystander.get::<_, String>("still").unwrap(), "served");
    let (reply, _) = raw_exchange(&mut connect(), b"GET still\r\n");
    assert_eq!(reply, "$6\r\nserved\r\n");
}

/// The rows of `redis_strings.value_rest`'s parts table, as (key, part number).
fn rest_parts(api: &rndb_api::Cluster) -> Vec<(Vec<u8>, u32)> {
    parts_of(api, "redis_strings")
}

/// The rows of `table.value_rest`'s parts table, as (primary key's bytes, part number).
fn parts_of(api: &rndb_api::Cluster, table: &str) -> Vec<(Vec<u8>, u32)> {
    let keyed = api.get_table(table).expect("the table");
    let (_, parts) = keyed
        .blob_parts_tables()
        .into_iter()
        .next()
        .expect("value_rest's parts table");
    let mut tx = api.start_transaction().expect("start");
    let scan = tx
        .scan_table(&parts, &rndb_api::ScanOptions::default())
        .expect("scan");
    let mut found: Vec<(Vec<u8>, u32)> = scan
        .map(|row| {
            // The row's key columns (a string's key; a hash's key and field), the part
            // number, the part.
            let row = row.expect("a parts row");
            let mut key = Vec::new();
            for value in &row {
                match value {
                    Value::Varbinary(bytes) => key.extend_from_slice(bytes),
                    Value::UInt32(part) => return (key, *part),
                    _ => break,
                }
            }
            panic!("a parts row of {} values with no part number", row.len())
        })
        .collect();
    found.sort();
    found
}

/// `len` bytes that differ from one position to the next.
fn long_value(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect()
}

/// Values from empty to 1 MiB go whole through every string command; the parts of a value's
/// rest follow it (a shorter value, DEL, EXPIRE in the past and an expired key's purge leave
/// none behind); a value in the row is an ordinary row to the API.
#[test]
fn values_past_the_row_are_stored_whole_and_leave_no_parts_behind() {
    let cluster = TestCluster::start(ClusterSpec::new().data_nodes(2).replicas(2))
        .expect("start the cluster");
    let gateway = Gateway::start(&cluster);
    let mut client = client(&gateway);
    let api = cluster.connect().expect("connect");
    let inline = 12_689;
    for (i, len) in [0, 100, inline, inline + 1, 100_000, 1024 * 1024]
        .into_iter()
        .enumerate()
    {
        let key = format!("v{len}");
        let value = long_value(len, i as u8);
        let _: () = client.set(&key, &value).expect("set");
        let got: Vec<u8> = client.get(&key).expect("get");
        assert!(got == value, "{len} bytes read back as {}", got.len());
        assert_eq!(client.strlen::<_, usize>(&key).unwrap(), len);
    }
    // Each value past the row has parts of 8 000 bytes past its rest's 256-byte head.
    let parts_of = |len: usize| (len - inline).saturating_sub(256).div_ceil(8_000);
    let expected = parts_of(inline + 1) + parts_of(100_000) + parts_of(1024 * 1024);
    assert_eq!(rest_parts(&api).len(), expected);

    // Shorter values over longer ones, through SET, MSET and SETEX: no parts left.
    let _: () = client.set("v100000", "short").unwrap();
    let _: () = client
        .mset(&[("v1048576", "a"), (&format!("v{}", inline + 1), "b")])
        .unwrap();
    assert_eq!(rest_parts(&api), Vec::new());
    assert_eq!(client.get::<_, String>("v100000").unwrap(), "short");

    // APPEND grows a value into and past its rest; GETs see it whole.
    let mut grown = b"short".to_vec();
    for n in [10_000, 50_000] {
        let more = long_value(n, 3);
        grown.extend_from_slice(&more);
        let len: usize = client.append("v100000", &more).unwrap();
        assert_eq!(len, grown.len());
    }
    assert!(client.get::<_, Vec<u8>>("v100000").unwrap() == grown);
    assert!(!rest_parts(&api).is_empty());
    // Past 1 MiB, APPEND is refused and the value stays.
    let refused: redis::RedisResult<usize> = client.append("v100000", long_value(1_000_000, 4));
    let e = refused.expect_err("too long");
    assert!(format!("{e}").contains("exceeds the limit"), "{e}");
    assert_eq!(client.strlen::<_, usize>("v100000").unwrap(), grown.len());

    // EXPIRE, TTL, PERSIST keep the value whole; INCR on it is refused.
    assert!(client.expire::<_, bool>("v100000", 100).unwrap());
    assert!((99..=100).contains(&client.ttl::<_, i64>("v100000").unwrap()));
    assert!(client.persist::<_, bool>("v100000").unwrap());
    assert!(client.get::<_, Vec<u8>>("v100000").unwrap() == grown);
    assert!(client.incr::<_, _, i64>("v100000", 1).is_err());

    // MULTI: a long SET and its GET in one transaction.
    let long = long_value(300_000, 9);
    let (_, got): ((), Vec<u8>) = redis::pipe()
        .atomic()
        .set("m", &long)
        .get("m")
        .query(&mut client)
        .unwrap();
    assert!(got == long);
    // And a short value over it, inside MULTI.
    let (_, got): ((), String) = redis::pipe()
        .atomic()
        .set("m", "short")
        .get("m")
        .query(&mut client)
        .unwrap();
    assert_eq!(got, "short");
    let _: () = client.set("m", &long).unwrap();

    // DEL, and an expiry in the past, take the parts with the rows.
    assert_eq!(client.del::<_, i64>(&["v100000", "v100000"]).unwrap(), 1);
    let _: () = client.set("gone", long_value(40_000, 1)).unwrap();
    assert!(client.expire::<_, bool>("gone", -1).unwrap());
    let _: () = redis::cmd("SET")
        .arg("ephemeral")
        .arg(long_value(40_000, 2))
        .arg("PX")
        .arg(50)
        .query(&mut client)
        .unwrap();
    wait_until("the key to expire", Duration::from_secs(10), || {
        Ok(client
            .get::<_, Option<Vec<u8>>>("ephemeral")?
            .is_none()
            .then_some(()))
    })
    .expect("expired");
    let _: () = client.set("m", "x").unwrap();
    assert_eq!(rest_parts(&api), Vec::new(), "no parts of values gone");

    // The row of a value that fits: its columns as the API reads them, no rest.
    let strings = api.get_table("redis_strings").expect("the strings table");
    let row = read_with(
        &api,
        &strings,
        &[Value::Varbinary(b"m".to_vec())],
        LockMode::CommittedRead,
    )
    .expect("read m");
    assert_eq!(row[1], Value::Varbinary(b"x".to_vec()));
    assert_eq!(row[4], Value::Null, "value_rest");
}

/// Hash values from empty to 1 MiB go whole through every hash command, and their rests'
/// parts follow them (a shorter value, HDEL and DEL leave none behind).
#[test]
fn hash_values_past_the_row_are_stored_whole_and_leave_no_parts_behind() {
    let cluster = TestCluster::start(ClusterSpec::new().data_nodes(2).replicas(2))
        .expect("start the cluster");
    let gateway = Gateway::start(&cluster);
    let mut client = client(&gateway);
    let api = cluster.connect().expect("connect");
    let inline = 11_671;
    let lengths = [0, 100, inline, inline + 1, 100_000, 1024 * 1024];
    let values: Vec<(String, Vec<u8>)> = (lengths.iter().enumerate())
        .map(|(i, &len)| (format!("f{len}"), long_value(len, i as u8)))
        .collect();
    let _: () = client.hset_multiple("h", &values).unwrap();
    for (field, value) in &values {
        let got: Vec<u8> = client.hget("h", field).expect("hget");
        assert!(&got == value, "{field} read back as {} bytes", got.len());
    }
    let all: std::collections::HashMap<String, Vec<u8>> = client.hgetall("h").unwrap();
    assert_eq!(all.len(), values.len());
    assert!(values.iter().all(|(f, v)| all.get(f) == Some(v)), "HGETALL");
    let got: Vec<Option<Vec<u8>>> = redis::cmd("HMGET")
        .arg("h")
        .arg("f100000")
        .arg("nope")
        .query(&mut client)
        .unwrap();
    assert!(got == vec![Some(values[4].1.clone()), None], "HMGET");
    assert!(client.hincr::<_, _, _, i64>("h", "f100000", 1).is_err());
    // Each value past the row has parts of 8 000 bytes past its rest's 256-byte head.
    let parts = |len: usize| (len - inline).saturating_sub(256).div_ceil(8_000);
    let expected = parts(inline + 1) + parts(100_000) + parts(1024 * 1024);
    assert_eq!(parts_of(&api, "redis_hashes").len(), expected);
    // A short value over a long one, HDEL of a long one (and a missing one, and the same
    // twice), DEL of the hash: no parts left.
    assert_eq!(
        client
            .hset::<_, _, _, i64>("h", "f100000", "short")
            .unwrap(),
        0
    );
    assert_eq!(
        client.hget::<_, _, String>("h", "f100000").unwrap(),
        "short"
    );
    let deleted: i64 = redis::cmd("HDEL")
        .arg("h")
        .arg("f1048576")
        .arg("nope")
        .arg("f1048576")
        .query(&mut client)
        .unwrap();
    assert_eq!(deleted, 1);
    assert_eq!(parts_of(&api, "redis_hashes"), Vec::new());
    let _: () = client.hset_multiple("h", &values[3..5]).unwrap();
    assert_eq!(parts_of(&api, "redis_hashes").len(), parts(100_000));
    assert_eq!(client.del::<_, i64>("h").unwrap(), 1);
    assert_eq!(parts_of(&api, "redis_hashes"), Vec::new());
    assert_eq!(client.hgetall::<_, Vec<String>>("h").unwrap().len(), 0);
    // Inside MULTI: fields written, one long, then the hash deleted and counted.
    let (_, _, exists, deleted): (i64, i64, i64, i64) = redis::pipe()
        .atomic()
        .hset("h", "long", &values[4].1)
        .hset("h", "short", "s")
        .exists("h")
        .del("h")
        .query(&mut client)
        .unwrap();
    assert_eq!((exists, deleted), (1, 1));
    assert_eq!(parts_of(&api, "redis_hashes"), Vec::new());
    assert_eq!(client.exists::<_, i64>("h").unwrap(), 0);
}

/// An MSET or HSET whose rows pass what one batch of the link's send buffer holds (200 values
/// of 11 600 bytes: 2.3 MB) succeeds, alone and inside MULTI, and so does one that meets a
/// value with a rest after its first batches were sent (it runs again as BLOB writes), and
/// ones of many short pairs (30 000, and HSET, HMGET, HDEL, MGET, EXISTS, DEL of 15 000
/// fields or keys). Each once failed whole with 4021.
#[test]
fn writes_of_more_rows_than_one_batch_holds_succeed() {
    let cluster =
        TestCluster::start(ClusterSpec::new().data_memory("64M")).expect("start the cluster");
    let gateway = Gateway::start(&cluster);
    let mut client = client(&gateway);
    let api = cluster.connect().expect("connect");
    let values: Vec<(String, Vec<u8>)> = (0..200)
        .map(|i| (format!("k{i}"), long_value(11_600, i as u8)))
        .collect();
    let _: () = client.mset(&values).expect("MSET of 2.3 MB");
    let keys: Vec<&String> = values.iter().map(|(k, _)| k).collect();
    let got: Vec<Vec<u8>> = client.mget(&keys).unwrap();
    assert!(got.iter().zip(&values).all(|(g, (_, v))| g == v));

    // Key 150 has a rest: the MSET's first batches go before its conditional write fails.
    let _: () = client.set("k150", long_value(100_000, 7)).unwrap();
    assert!(!rest_parts(&api).is_empty());
    let again: Vec<(String, Vec<u8>)> = (0..200)
        .map(|i| (format!("k{i}"), long_value(11_600, i as u8 + 1)))
        .collect();
    let _: () = client.mset(&again).expect("MSET over a long value");
    let got: Vec<Vec<u8>> = client.mget(&keys).unwrap();
    assert!(got.iter().zip(&again).all(|(g, (_, v))| g == v));
    assert_eq!(rest_parts(&api), Vec::new());

    let fields: Vec<(String, Vec<u8>)> = (0..200)
        .map(|i| (format!("f{i}"), long_value(11_600, i as u8)))
        .collect();
    let added: i64 = (redis::cmd("HSET").arg("h").arg(&fields))
        .query(&mut client)
        .expect("HSET of 2.3 MB");
    assert_eq!(added, 200);
    let all: std::collections::HashMap<String, Vec<u8>> = client.hgetall("h").unwrap();
    assert_eq!(all.len(), 200);
    assert!(fields.iter().all(|(f, v)| all.get(f) == Some(v)));

    // Inside MULTI, both at once.
    let (_, added): ((), i64) = redis::pipe()
        .atomic()
        .mset(&values)
        .cmd("HSET")
        .arg("h2")
        .arg(&fields)
        .query(&mut client)
        .expect("EXEC of 4.6 MB");
    assert_eq!(added, 200);
    let got: Vec<Vec<u8>> = client.mget(&keys).unwrap();
    assert!(got.iter().zip(&values).all(|(g, (_, v))| g == v));
    let all: std::collections::HashMap<String, Vec<u8>> = client.hgetall("h2").unwrap();
    assert_eq!(all.len(), 200);

    // Many short pairs: what each operation's frame adds to them fills the batch first.
    let pairs: Vec<(String, String)> = (0..30_000)
        .map(|i| (format!("short{i}"), "v".to_string()))
        .collect();
    let _: () = client.mset(&pairs).expect("MSET of 30 000 short pairs");
    assert_eq!(client.get::<_, String>("short29999").unwrap(), "v");
    // 15 000 fields of 80-byte names: their reads alone are 2 MB of frames.
    let fields: Vec<(String, String)> = (0..15_000)
        .map(|i| (format!("{i:080}"), "v".to_string()))
        .collect();
    let added: i64 = (redis::cmd("HSET").arg("h3").arg(&fields))
        .query(&mut client)
        .expect("HSET of 15 000 fields");
    assert_eq!(added, 15_000);
    let names: Vec<&String> = fields.iter().map(|(f, _)| f).collect();
    let got: Vec<String> = (redis::cmd("HMGET").arg("h3").arg(&names))
        .query(&mut client)
        .expect("HMGET of 15 000 fields");
    assert!(got.iter().all(|v| v == "v"));

    // Reads and deletes of as many keys (review): MGET, EXISTS, HDEL, DEL.
    let _: () = client.mset(&fields).expect("MSET of 15 000 pairs");
    let got: Vec<String> = (redis::cmd("MGET").arg(&names))
        .query(&mut client)
        .expect("MGET of 15 000 keys");
    assert!(got.iter().all(|v| v == "v"));
    let exists: i64 = (redis::cmd("EXISTS").arg(&names))
        .query(&mut client)
        .expect("EXISTS of 15 000 keys");
    assert_eq!(exists, 15_000);
    let hdel: i64 = (redis::cmd("HDEL").arg("h3").arg(&names))
        .query(&mut client)
        .expect("HDEL of 15 000 fields");
    assert_eq!(hdel, 15_000);
    let del: i64 = (redis::cmd("DEL").arg(&names))
        .query(&mut client)
        .expect("DEL of 15 000 keys");
    assert_eq!(del, 15_000);
}

/// HDEL counts each field it deleted once, whether the fields were all there with values in
/// their rows (one conditional delete each, in one round trip), one was missing, or one had
/// a rest (read first, then deleted with its parts), alone or inside MULTI.
#[test]
fn hdel_counts_the_fields_it_deleted() {
    let cluster = TestCluster::start(ClusterSpec::new()).expect("start the cluster");
    let gateway = Gateway::start(&cluster);
    let mut client = client(&gateway);
    let api = cluster.connect().expect("connect");
    let long = long_value(20_000, 3);
    let fields: [(&str, &[u8]); 5] = [
        ("a", b"1"),
        ("b", b"2"),
        ("c", &long),
        ("d", b"4"),
        ("e", b"5"),
    ];
    let added: i64 = (redis::cmd("HSET").arg("h").arg(&fields[..]))
        .query(&mut client)
        .unwrap();
    assert_eq!(added, 5);
    let hdel = |client: &mut redis::Connection, fields: &[&str]| -> i64 {
        (redis::cmd("HDEL").arg("h").arg(fields))
            .query(client)
            .unwrap()
    };
    assert_eq!(hdel(&mut client, &["a", "a"]), 1, "a field given twice");
    assert_eq!(hdel(&mut client, &["b", "zz"]), 1, "with a missing field");
    assert!(!parts_of(&api, "redis_hashes").is_empty());
    assert_eq!(hdel(&mut client, &["c"]), 1, "a field with a rest");
    assert_eq!(parts_of(&api, "redis_hashes"), Vec::new());
    assert_eq!(hdel(&mut client, &["a", "b"]), 0, "none there");
    let (n,): (i64,) = redis::pipe()
        .atomic()
        .cmd("HDEL")
        .arg("h")
        .arg(&["d", "d", "zz"][..])
        .query(&mut client)
        .unwrap();
    assert_eq!(n, 1, "inside MULTI");
    let left: std::collections::HashMap<String, String> = client.hgetall("h").unwrap();
    assert_eq!(
        left.into_iter().collect::<Vec<_>>(),
        vec![("e".into(), "5".into())]
    );
    // On its own, an HDEL of short fields that are there is one round trip.
    let _: i64 = (redis::cmd("HSET")
        .arg("h")
        .arg(&[("x", "1"), ("y", "2")][..]))
    .query(&mut client)
    .unwrap();
    let before = round_trips(&mut client);
    assert_eq!(hdel(&mut client, &["x", "y"]), 2);
    assert_eq!(round_trips(&mut client) - before, 1, "HDEL x y");
}

/// The gateway's executes so far: its INFO's ndb_api_wait_exec_complete_count (NDB's
/// WaitExecCompleteCount).
fn round_trips(client: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").query(client).unwrap();
    let line = info
        .lines()
        .find_map(|l| l.strip_prefix("ndb_api_wait_exec_complete_count:"))
        .unwrap_or_else(|| panic!("no round trip count in INFO: {info}"));
    line.trim().parse().expect("a count")
}

/// With DataMemory full, an EXEC whose MSET cannot write a new key aborts whole: the MSET's
/// other key keeps its value (a failed write among the ignored failures of conditional writes
/// was once let through, and the EXEC answered OK with the MSET half applied).
#[test]
fn an_exec_whose_write_fails_applies_nothing() {
    let cluster = TestCluster::start(ClusterSpec::new()).expect("start the cluster");
    let gateway = Gateway::start(&cluster);
    let mut client = client(&gateway);
    let filler = long_value(12_000, 1);
    let mut filled = 0;
    while client
        .set::<_, _, ()>(format!("fill{filled}"), &filler)
        .is_ok()
    {
        filled += 1;
    }
    assert!(filled > 0);
    // Past the row by a few bytes: a rest within its head, no parts.
    let new = long_value(12_800, 2);
    let exec: redis::RedisResult<((),)> = redis::pipe()
        .atomic()
        .mset(&[("new".as_bytes(), &new[..]), (b"fill0", b"changed")])
        .query(&mut client);
    assert!(exec.is_err(), "{exec:?}");
    assert_eq!(client.strlen::<_, usize>("new").unwrap(), 0);
    assert!(client.get::<_, Vec<u8>>("fill0").unwrap() == filler);
}

/// Clients racing to INCR a key none of them found each count, on their own and inside
/// MULTI, and racing long SETs inside MULTI all succeed: an insert that lost the race (630)
/// runs the command, or the EXEC, again.
#[test]
fn increments_racing_to_create_a_key_all_count() {
    let cluster = TestCluster::start(ClusterSpec::new().data_nodes(2).replicas(2))
        .expect("start the cluster");
    let gateway = Gateway::start(&cluster);
    const CLIENTS: usize = 4;
    const KEYS: usize = 20;
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let url = gateway.url();
            std::thread::spawn(move || {
                let mut connection = redis::Client::open(url)?.get_connection()?;
                for key in 0..KEYS {
                    let _: i64 = connection.incr(format!("race{key}"), 1)?;
                    let (_,): (i64,) = redis::pipe()
                        .atomic()
                        .incr(format!("multi{key}"), 1)
                        .query(&mut connection)?;
                    let _: () = redis::pipe()
                        .atomic()
                        .set(format!("long{key}"), long_value(30_000, key as u8))
                        .query(&mut connection)?;
                }
                Ok::<(), redis::RedisError>(())
            })
        })
        .collect();
    for handle in clients {
        let result = handle.join().expect("client thread");
        assert!(result.is_ok(), "{result:?}");
    }
    let mut client = client(&gateway);
    for key in 0..KEYS {
        let count: usize = client.get(format!("race{key}")).expect("get");
        assert_eq!(count, CLIENTS, "race{key}");
        let count: usize = client.get(format!("multi{key}")).expect("get");
        assert_eq!(count, CLIENTS, "multi{key}");
        let long: Vec<u8> = client.get(format!("long{key}")).expect("get");
        assert!(long == long_value(30_000, key as u8), "long{key}");
    }
}

/// A `redis_strings` and a `redis_hashes` made before `value_rest` (four columns) are served as
/// they are, their values limited to what their rows hold; a table of another layout is
/// refused by name.
#[test]
fn a_strings_table_without_a_rest_keeps_its_limit() {
    let cluster = TestCluster::start(ClusterSpec::new()).expect("start the cluster");
    let api = cluster.connect().expect("connect");
    let varbinary = |n| rndb_api::ColumnType::Varbinary(n);
    let old = rndb_api::TableDef::new(
        "redis_strings",
        vec![
            rndb_api::ColumnDef::key("key", varbinary(1024)),
            rndb_api::ColumnDef::new("value", varbinary(8000)),
            rndb_api::ColumnDef::new("value_more", varbinary(4800)),
            rndb_api::ColumnDef::new("expires_at_ms", rndb_api::ColumnType::Int64),
        ],
    );
    api.create_table(&old).expect("create the old layout");
    let old_hashes = rndb_api::TableDef::new(
        "redis_hashes",
        vec![
            rndb_api::ColumnDef::key("key", varbinary(1024)),
            rndb_api::ColumnDef::key("field", varbinary(1024)),
            rndb_api::ColumnDef::new("value", varbinary(8000)),
            rndb_api::ColumnDef::new("value_more", varbinary(3900)),
        ],
    );
    api.create_table(&old_hashes)
        .expect("create the old hashes layout");
    let gateway = Gateway::start(&cluster);
    let mut client = client(&gateway);
    let fits = long_value(12_800, 1);
    let _: () = client.set("k", &fits).unwrap();
    assert!(client.get::<_, Vec<u8>>("k").unwrap() == fits);
    let _: () = client.set("k", "short").unwrap();
    assert_eq!(client.incr::<_, _, i64>("n", 2).unwrap(), 2);
    let refused: redis::RedisResult<()> = client.set("k", long_value(12_801, 1));
    let e = refused.expect_err("past the row");
    assert!(format!("{e}").contains("at most 12800 bytes"), "{e}");
    assert_eq!(client.get::<_, String>("k").unwrap(), "short");
    let fits = long_value(11_900, 2);
    assert_eq!(client.hset::<_, _, _, i64>("h", "f", &fits).unwrap(), 1);
    assert!(client.hget::<_, _, Vec<u8>>("h", "f").unwrap() == fits);
    let refused: redis::RedisResult<i64> = client.hset("h", "f", long_value(11_901, 2));
    let e = refused.expect_err("past the row");
    assert!(format!("{e}").contains("at most 11900 bytes"), "{e}");
    assert_eq!(client.hincr::<_, _, _, i64>("h", "n", 5).unwrap(), 5);
    assert_eq!(client.hdel::<_, _, i64>("h", "f").unwrap(), 1);
    drop(gateway);

    // Another layout: the gateway does not start, and says why.
    api.drop_table("redis_strings").expect("drop");
    let other = rndb_api::TableDef::new(
        "redis_strings",
        vec![
            rndb_api::ColumnDef::key("key", varbinary(64)),
            rndb_api::ColumnDef::new("v", varbinary(64)),
        ],
    );
    api.create_table(&other).expect("create another layout");
    let log = Gateway::log_path(&cluster);
    let mut child = std::process::Command::new(binary_path("rndb-redis").expect("rndb-redis"))
        .arg("--config-file")
        .arg(cluster.config_path())
        .args(["--port", "0"])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("run rndb-redis");
    let exited = wait_until(
        "rndb-redis to exit",
        START_TIMEOUT,
        || Ok(child.try_wait()?),
    );
    let _ = child.kill();
    let _ = child.wait();
    assert!(!exited.expect("exited").success());
    let said = std::fs::read_to_string(&log).expect("read the log");
    assert!(said.contains("redis_strings has a layout"), "{said}");
}
