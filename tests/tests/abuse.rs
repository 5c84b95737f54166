//! Proves that a peer abusing a data node's port costs the node bounded threads, file
//! descriptors and memory, is dropped after a bounded time, and does not stop the node serving
//! a real API node that reads and writes throughout: many connections that say nothing, a
//! handshake sent one byte a second, and a frame length of 4 GiB before and after a handshake.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rndb_api::{Cluster, ColumnDef, ColumnType, Table, TableDef, Value};
use rndb_config::NodeId;
use rndb_ndbd::limits::{EVICTIONS_IN_PROGRESS_MAX, HANDSHAKES_IN_FLIGHT_MAX, HANDSHAKE_TIMEOUT};
use rndb_tests::ops::{insert_committed, read_committed, recreate_table};
use rndb_tests::{wait_until, ClusterSpec, TestCluster, API_NODE_ID_FIRST};
use rndb_transporter::frame::{self, FrameHeader};
use rndb_transporter::handshake::{self, Hello, SIGNAL_HELLO};

/// The API slot of the real client that keeps working.
const CLIENT_SLOT: NodeId = NodeId(API_NODE_ID_FIRST);
/// A slot for the abuser that completes a handshake, and for a new client after a flood.
const SPARE_SLOT: NodeId = NodeId(API_NODE_ID_FIRST + 1);
/// A slot for a new client that connects while a flood holds every handshake slot.
const NEWCOMER_SLOT: NodeId = NodeId(API_NODE_ID_FIRST + 2);
/// The one data node.
const DATA_NODE: NodeId = NodeId(1);
/// Connections the idle abuser opens: several times what the node lets into handshakes.
const IDLE_CONNECTIONS: usize = 4 * HANDSHAKES_IN_FLIGHT_MAX;
/// Handshake threads the node may run at once: those in progress and those evicted but still
/// ending.
const HANDSHAKE_THREADS_MAX: usize = HANDSHAKES_IN_FLIGHT_MAX + EVICTIONS_IN_PROGRESS_MAX;
/// Threads and descriptors the node may use beyond its resting count and the handshakes (a new
/// client's link): the margin the checks allow.
const SLACK: usize = 8;
/// The longest the node may take to drop an abusive connection: the handshake timeout and a
/// margin for a loaded machine.
const DROP_TIMEOUT: Duration = Duration::from_secs(HANDSHAKE_TIMEOUT.as_secs() + 15);
/// Keys the real client writes in turn.
const CLIENT_KEYS: u64 = 256;
/// Operations the real client must complete while the abuse goes on.
const OPERATIONS_DURING_ABUSE: u64 = 20;

/// A data node, a real client with a table, and the client's operation count.
struct Fixture {
    cluster: TestCluster,
    client: Cluster,
    table: Table,
}

impl Fixture {
    fn start() -> Fixture {
        let cluster =
            TestCluster::start(ClusterSpec::new().api_slots(4)).expect("start the cluster");
        let client = cluster.connect_as(CLIENT_SLOT).expect("connect the client");
        let def = TableDef::new(
            "abuse",
            vec![
                ColumnDef::key("id", ColumnType::UInt64),
                ColumnDef::new("v", ColumnType::UInt64),
            ],
        );
        let table = recreate_table(&client, &def).expect("create the table");
        insert_committed(
            &client,
            &table,
            &[vec![Value::UInt64(0), Value::UInt64(42)]],
        )
        .expect("insert the first row");
        Fixture {
            cluster,
            client,
            table,
        }
    }

    fn pid(&self) -> u32 {
        self.cluster.pid(DATA_NODE).expect("the data node runs")
    }

    /// Runs `abuse` while the client inserts and reads rows on another thread; returns once
    /// `abuse` has returned and the client completed [`OPERATIONS_DURING_ABUSE`] operations
    /// after the abuse began. Panics if the client fails.
    fn serve_during(&self, abuse: impl FnOnce(&AtomicU64) + Send) {
        let operations = AtomicU64::new(0);
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let client = scope.spawn(|| {
                let mut round = 1u64;
                while !stop.load(Ordering::Acquire) {
                    // A few hundred keys written over and over: DataMemory stays bounded however
                    // long the abuse takes on a loaded machine.
                    let key = round % CLIENT_KEYS;
                    let row = vec![Value::UInt64(key), Value::UInt64(round)];
                    write_committed(&self.client, &self.table, &row)
                        .unwrap_or_else(|e| panic!("the client's write {round} failed: {e}"));
                    let read = read_committed(&self.client, &self.table, &[Value::UInt64(key)])
                        .unwrap_or_else(|e| panic!("the client's read {round} failed: {e}"));
                    assert_eq!(read[1], Value::UInt64(round));
                    operations.fetch_add(2, Ordering::AcqRel);
                    round += 1;
                }
            });
            // Stops the client even when `abuse` panics, so a failed check fails the test
            // instead of leaving it waiting for the client forever.
            let stop_client = StopOnDrop(&stop);
            abuse(&operations);
            drop(stop_client);
            client.join().expect("the client thread");
        });
    }
}

/// Sets its flag when dropped, also while a panic unwinds.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Writes (inserts or overwrites) `row` in a transaction of its own and commits.
fn write_committed(client: &Cluster, table: &Table, row: &[Value]) -> Result<(), rndb_api::Error> {
    let mut transaction = client.start_transaction()?;
    transaction.write(table, row)?;
    transaction.execute(rndb_api::ExecType::Commit)
}

/// Waits (bounded) until the client has done `count` more operations than `from`.
fn wait_for_operations(operations: &AtomicU64, from: u64, count: u64, during: &str) {
    wait_until(
        &format!("the client to complete {count} operations during {during}"),
        DROP_TIMEOUT,
        || Ok((operations.load(Ordering::Acquire) >= from + count).then_some(())),
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Entries of a folder under /proc/<pid> (threads in `task`, descriptors in `fd`).
fn proc_count(pid: u32, what: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/{what}"))
        .map(|entries| entries.count())
        .unwrap_or(0)
}

/// The threads of a process, counted again for up to 200 ms while there are more than `bound`:
/// a handshake thread gives its slot back as it returns, and on a loaded machine the thread can
/// still be listed for a few milliseconds while the kernel tears it down. One that holds a
/// handshake lives for seconds (the 5 s handshake timeout), so a real excess stays above the
/// bound through every count.
fn settled_threads(pid: u32, bound: usize) -> usize {
    let mut fewest = proc_count(pid, "task");
    for _ in 0..40 {
        if fewest <= bound {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
        fewest = fewest.min(proc_count(pid, "task"));
    }
    fewest
}

/// The resident memory of a process, in KiB.
fn resident_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// True once the node has closed `stream` (end of file or a reset); false while it is open.
/// Reads at most for `wait`.
fn closed_by_node(stream: &mut TcpStream, wait: Duration) -> bool {
    stream
        .set_read_timeout(Some(wait))
        .expect("set read timeout");
    let mut buf = [0u8; 256];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            // A HELLO_REF or other answer: read on until the close.
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return true,
        }
    }
}

/// Waits (bounded by [`DROP_TIMEOUT`]) until the node has closed every stream.
fn wait_all_closed(streams: &mut [TcpStream], what: &str) {
    let deadline = Instant::now() + DROP_TIMEOUT;
    for (index, stream) in streams.iter_mut().enumerate() {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            closed_by_node(stream, left.max(Duration::from_millis(1))),
            "connection {index} of {what} still open after {DROP_TIMEOUT:?}"
        );
    }
}

fn hello_frame(cluster: &TestCluster, from: NodeId) -> Vec<u8> {
    let hello = Hello::for_link(cluster.config(), from, DATA_NODE).expect("hello");
    let header = FrameHeader {
        signal: SIGNAL_HELLO,
        ..FrameHeader::default()
    };
    let mut bytes = Vec::new();
    frame::encode_into(&mut bytes, &header, &hello.encode(), false).expect("fits");
    bytes
}

#[test]
fn many_idle_connections_cost_bounded_threads_and_descriptors_and_are_dropped() {
    let fixture = Fixture::start();
    let pid = fixture.pid();
    let threads_before = proc_count(pid, "task");
    let fds_before = proc_count(pid, "fd");
    let (mut threads_max, mut fds_max) = (threads_before, fds_before);
    let thread_bound = threads_before + HANDSHAKE_THREADS_MAX + SLACK;
    let mut idle = Vec::new();
    fixture.serve_during(|operations| {
        let at_start = operations.load(Ordering::Acquire);
        for _ in 0..IDLE_CONNECTIONS {
            idle.push(TcpStream::connect(fixture.cluster.addr(DATA_NODE)).expect("connect"));
            threads_max = threads_max.max(settled_threads(pid, thread_bound));
            fds_max = fds_max.max(proc_count(pid, "fd"));
        }
        let at_open = operations.load(Ordering::Acquire);
        // A new client gets in while the flood holds every handshake slot: its HELLO comes at
        // once, so the handshakes that said nothing make room for it.
        let newcomer = fixture
            .cluster
            .connect_as(NEWCOMER_SLOT)
            .expect("a new client connects during the flood");
        read_committed(&newcomer, &fixture.table, &[Value::UInt64(0)])
            .expect("the newcomer reads during the flood");
        wait_for_operations(
            operations,
            at_open,
            OPERATIONS_DURING_ABUSE,
            "the idle flood",
        );
        threads_max = threads_max.max(settled_threads(pid, thread_bound));
        fds_max = fds_max.max(proc_count(pid, "fd"));
        assert!(operations.load(Ordering::Acquire) > at_start);
    });
    assert!(
        threads_max <= thread_bound,
        "{IDLE_CONNECTIONS} idle connections: the node went from {threads_before} to \
         {threads_max} threads (at most {HANDSHAKE_THREADS_MAX} handshake threads)"
    );
    // Each handshake holds its socket and a clone the acceptor shuts down to evict it.
    assert!(
        fds_max <= fds_before + 2 * HANDSHAKE_THREADS_MAX + SLACK,
        "{IDLE_CONNECTIONS} idle connections: the node went from {fds_before} to {fds_max} \
         descriptors"
    );
    wait_all_closed(&mut idle, "the idle flood");
    let log = fixture.cluster.log(DATA_NODE);
    assert!(
        log.contains("handshakes already in progress"),
        "no log line for connections closed at the limit:\n{log}"
    );
    // Once the flood is dropped the node is back to its resting threads, and a new client
    // gets in.
    wait_until("the handshake threads to end", DROP_TIMEOUT, || {
        Ok((proc_count(pid, "task") <= threads_before + 1).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let newcomer = fixture
        .cluster
        .connect_as(SPARE_SLOT)
        .expect("a new client connects after the flood");
    read_committed(&newcomer, &fixture.table, &[Value::UInt64(0)]).expect("the newcomer reads");
}

#[test]
fn a_handshake_one_byte_a_second_is_dropped_at_the_handshake_timeout() {
    let fixture = Fixture::start();
    let hello = hello_frame(&fixture.cluster, SPARE_SLOT);
    // A whole HELLO at this pace takes longer than the handshake timeout: a deadline renewed
    // by every byte would let it through.
    assert!(Duration::from_secs(hello.len() as u64) > HANDSHAKE_TIMEOUT * 2);
    let mut sent = 0;
    let mut dropped = false;
    fixture.serve_during(|operations| {
        let at_start = operations.load(Ordering::Acquire);
        let mut stream = TcpStream::connect(fixture.cluster.addr(DATA_NODE)).expect("connect");
        for byte in &hello {
            if stream.write_all(std::slice::from_ref(byte)).is_err() {
                dropped = true;
                break;
            }
            sent += 1;
            if closed_by_node(&mut stream, Duration::from_secs(1)) {
                dropped = true;
                break;
            }
        }
        wait_for_operations(
            operations,
            at_start,
            OPERATIONS_DURING_ABUSE,
            "the slow handshake",
        );
        let _ = stream.shutdown(Shutdown::Both);
    });
    assert!(
        dropped && sent < hello.len(),
        "a HELLO sent one byte a second was not dropped ({sent} of {} bytes sent)",
        hello.len()
    );
    let log = fixture.cluster.log(DATA_NODE);
    assert!(
        log.contains("timed out"),
        "the node did not log the handshake timeout:\n{log}"
    );
}

#[test]
fn a_4_gib_frame_length_is_refused_before_and_after_the_handshake() {
    let fixture = Fixture::start();
    let pid = fixture.pid();
    let resident_before = resident_kib(pid);
    fixture.serve_during(|operations| {
        let at_start = operations.load(Ordering::Acquire);
        // Before the handshake: only the four length bytes, then silence. The node refuses
        // the length at once, not when its handshake times out.
        let mut raw = TcpStream::connect(fixture.cluster.addr(DATA_NODE)).expect("connect");
        raw.write_all(&u32::MAX.to_le_bytes())
            .expect("send the length");
        assert!(
            closed_by_node(&mut raw, DROP_TIMEOUT),
            "a 4 GiB handshake length did not close the connection"
        );
        // After the handshake, as an API node: a whole header announcing 4 GiB.
        let hello =
            Hello::for_link(fixture.cluster.config(), SPARE_SLOT, DATA_NODE).expect("hello");
        let mut linked = TcpStream::connect(fixture.cluster.addr(DATA_NODE)).expect("connect");
        handshake::client_handshake(&mut linked, &hello, HANDSHAKE_TIMEOUT).expect("handshake");
        let mut header = u32::MAX.to_le_bytes().to_vec();
        header.extend_from_slice(&[0u8; 12]);
        let _ = linked.write_all(&header);
        assert!(
            closed_by_node(&mut linked, DROP_TIMEOUT),
            "a 4 GiB frame length after the handshake did not close the link"
        );
        wait_for_operations(
            operations,
            at_start,
            OPERATIONS_DURING_ABUSE,
            "the 4 GiB lengths",
        );
    });
    let log = fixture.cluster.log(DATA_NODE);
    assert!(
        log.contains("frame length 4294967295 exceeds"),
        "the node did not name the 4 GiB length:\n{log}"
    );
    // Nothing was allocated for the announced length.
    let resident_after = resident_kib(pid);
    assert!(
        resident_after < resident_before + 64 * 1024,
        "resident memory grew from {resident_before} KiB to {resident_after} KiB"
    );
}
