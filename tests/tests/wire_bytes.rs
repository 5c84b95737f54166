//! Proves that the bytes an API node reports for its links (`Cluster::link_traffic`, which
//! testread-perf prints per row) are the bytes that crossed the wire: over TCP they equal what
//! the kernel counted for the socket, and they add up to the frame layout of ARCHITECTURE.md for
//! a single-row primary-key read of a 100-byte row committed in its execute (request plus
//! answer within 200 bytes, over TCP and over SHM with its 4-byte checksum trailer per frame)
//! and for a batch of 20 such reads (each row's answer its data plus a fixed 30 bytes).

use std::time::{Duration, Instant};

use rndb_api::{
    Cluster, ColumnDef, ColumnType, ExecType, LinkTraffic, LockMode, Table, TableDef,
    TransporterKind, Value,
};
use rndb_tests::ops::recreate_table;
use rndb_tests::{ClusterSpec, TestCluster};

/// How long the kernel may take to see the last bytes acknowledged.
const KERNEL_TIMEOUT: Duration = Duration::from_secs(10);
/// Rows read in one execute by the batch case.
const BATCH_ROWS: u32 = 20;
/// Frame header bytes (ARCHITECTURE.md: Frame); TCP links run without the CRC-32 trailer.
const HEADER: u64 = 16;
/// The CRC-32 trailer of every frame on an SHM link (NDB's default Checksum=1 there).
const SHM_TRAILER: u64 = 4;
/// TCKEYREQ: flags 1, op index 4, op type 1, lock mode 1, table id 4, version 4, replica 1,
/// key (count 2, tag 1, u32 4), attr count 2, the execute it ends 3 = 28.
const READ_REQUEST: u64 = HEADER + 28;
/// Values of the row: count 2, six tags, 4 × 4 + 8, Varbinary length 2 + 76 = 110.
const VALUES: u64 = 2 + 6 + 24 + 2 + 76;
/// TCKEY_ROW, or the TCKEY_ROW_CONF of a read-only commit (no GCI): op index 4 + values.
const ROW_ANSWER: u64 = HEADER + 4 + VALUES;

/// testread-perf's row shape at `--row-bytes 100`: 24 bytes of integers and 76 of Varbinary.
fn def() -> TableDef {
    TableDef::new(
        "wire_bytes",
        vec![
            ColumnDef::key("pk", ColumnType::UInt32),
            ColumnDef::new("a", ColumnType::UInt32),
            ColumnDef::new("b", ColumnType::UInt32),
            ColumnDef::new("c", ColumnType::UInt32),
            ColumnDef::new("d", ColumnType::UInt64),
            ColumnDef::new("e", ColumnType::Varbinary(76)),
        ],
    )
}

fn row(pk: u32) -> Vec<Value> {
    vec![
        Value::UInt32(pk),
        Value::UInt32(pk + 1),
        Value::UInt32(pk + 2),
        Value::UInt32(pk + 3),
        Value::UInt64(u64::from(pk) << 20),
        Value::Varbinary(vec![pk as u8; 76]),
    ]
}

/// The traffic of `work`, taken once the kernel's counts agree with the links' (bytes still on
/// their way, like an acknowledgement, settle within the bounded wait).
fn traffic_of(api: &Cluster, work: impl FnOnce()) -> LinkTraffic {
    let before = api.link_traffic();
    work();
    let deadline = Instant::now() + KERNEL_TIMEOUT;
    loop {
        let delta = api.link_traffic().since(&before);
        let kernel = delta.kernel_tcp.expect("a TCP link has kernel counts");
        if (kernel.bytes_acked, kernel.bytes_received) == (delta.bytes_sent, delta.bytes_received) {
            return delta;
        }
        assert!(
            Instant::now() < deadline,
            "the kernel counted {kernel:?}, the links {delta:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// One read of row 7 in its own transaction, committed in its execute.
fn read_committed(api: &Cluster, table: &Table) {
    let mut tx = api.start_transaction().expect("start");
    let op = tx
        .read(table, &[Value::UInt32(7)], LockMode::CommittedRead)
        .expect("read");
    tx.execute(ExecType::Commit).expect("execute");
    assert_eq!(tx.row(op), Some(&row(7)[..]));
    assert_eq!(tx.gci(), None, "a read-only commit names no GCI");
}

fn load(api: &Cluster) -> Table {
    let table = recreate_table(api, &def()).expect("create the table");
    let mut tx = api.start_transaction().expect("start");
    for pk in 0..BATCH_ROWS {
        tx.insert(&table, &row(pk)).expect("insert");
    }
    tx.execute(ExecType::Commit).expect("load");
    table
}

#[test]
fn reported_bytes_are_the_bytes_on_the_wire() {
    // No API heartbeat during the test: every frame counted is one the test caused. API links
    // are SHM (every node is on 127.0.0.1); the TCP case forces TCP on its link.
    let spec = ClusterSpec::new()
        .data_node_param("HeartbeatIntervalDbApi", "30000")
        .use_shm(true);
    let cluster = TestCluster::start(spec).expect("start the cluster");
    let api = cluster
        .connect_over(TransporterKind::Tcp)
        .expect("connect over TCP");
    let table = load(&api);

    // A single-row read committed in its execute: one TCKEYREQ out; one TCKEY_ROW_CONF back,
    // the row confirming the committed execute.
    let single = traffic_of(&api, || read_committed(&api, &table));
    assert_eq!(
        (single.frames_sent, single.bytes_sent),
        (1, READ_REQUEST),
        "{single:?}"
    );
    assert_eq!(
        (single.frames_received, single.bytes_received),
        (1, ROW_ANSWER),
        "{single:?}"
    );
    assert_eq!(READ_REQUEST + ROW_ANSWER, 174);

    // 20 reads in one NoCommit execute: 20 TCKEYREQs (the last ends the execute), 19 TCKEY_ROWs
    // and a TCKEY_ROW_CONF; then the rollback (TC_EXECUTE_REQ, TC_EXECUTE_CONF).
    let batch = traffic_of(&api, || {
        let mut tx = api.start_transaction().expect("start");
        let ops: Vec<_> = (0..BATCH_ROWS)
            .map(|pk| {
                tx.read(&table, &[Value::UInt32(pk)], LockMode::Read)
                    .expect("read")
            })
            .collect();
        tx.execute(ExecType::NoCommit).expect("execute");
        for (pk, op) in (0..BATCH_ROWS).zip(ops) {
            assert_eq!(tx.row(op), Some(&row(pk)[..]));
        }
        tx.execute(ExecType::Rollback).expect("roll back");
    });
    let rows = u64::from(BATCH_ROWS);
    let rollback_request = HEADER + 7;
    let rollback_answer = HEADER;
    assert_eq!(batch.frames_sent, rows + 1, "{batch:?}");
    assert_eq!(
        batch.bytes_sent,
        rows * (HEADER + 25) + 3 + rollback_request,
        "{batch:?}"
    );
    assert_eq!(batch.frames_received, rows + 1, "{batch:?}");
    assert_eq!(
        batch.bytes_received,
        rows * ROW_ANSWER + rollback_answer,
        "{batch:?}"
    );
    // A batched row's answer is its 100 bytes of data plus a fixed 30.
    assert_eq!(ROW_ANSWER, 100 + 30);

    // The same single-row read over SHM: the same two frames, each with its trailer.
    let shm = cluster
        .connect_over(TransporterKind::Shm)
        .expect("connect over SHM");
    let table = shm.get_table("wire_bytes").expect("find the table");
    // The API counts a frame when it sends or files it, so the counts are complete once the
    // execute returns.
    let before = shm.link_traffic();
    read_committed(&shm, &table);
    let single = shm.link_traffic().since(&before);
    let request = READ_REQUEST + SHM_TRAILER;
    let answer = ROW_ANSWER + SHM_TRAILER;
    assert_eq!(
        (single.frames_sent, single.bytes_sent),
        (1, request),
        "{single:?}"
    );
    assert_eq!(
        (single.frames_received, single.bytes_received),
        (1, answer),
        "{single:?}"
    );
    assert!(
        request + answer <= 200,
        "a single-row read over SHM costs {} bytes",
        request + answer
    );
}
