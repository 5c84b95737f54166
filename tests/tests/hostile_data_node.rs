//! Proves that the API library survives a hostile or broken data node: a fake data node
//! (`rndb_tests::fake_data_node`, a thread that speaks the real handshake and frames) answers
//! the API's requests with truncated or garbage payloads, operation indexes outside the batch,
//! unexpected signals, invalid frames, a close in the middle of an answer, silence, a flood, or
//! answers to requests nobody made, and every call returns the expected typed error (or, for
//! stray answers, the right result) within its request timeout, never a panic or a hang; a
//! link that carried a violation is given up, so later calls fail cleanly with 4010. A data
//! node whose link closes while the API connects does not fail the connect.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::{Duration, Instant};

use rndb_api::{
    Cluster, ColumnDef, ColumnType, Error, ExecType, LockMode, OpId, ScanOptions, Table, TableDef,
    Value,
};
use rndb_protocol::lqh;
use rndb_protocol::scan::{encode_scan_row, FragmentBatch, ScanTabConf};
use rndb_protocol::signals::{
    gsn, ListTablesConf, ListedObject, ObjectKind, TableInfo, TcExecuteRef, TcKeyRef, TcKeyRow,
};
use rndb_tests::assert_ndb_code;
use rndb_tests::fake_data_node::{FakeDataNode, Peer, DATA_NODE, REQUEST_TIMEOUT};
use rndb_transporter::frame::FRAME_BYTES_MAX;

/// The longest one API call may take: its request timeout and a margin for a loaded machine.
/// Longer is a hang.
const CALL_LIMIT: Duration = Duration::from_secs(4);
/// How long the flooding case sends rows: past the request timeout, so the API must give up
/// while rows still come.
const FLOOD_DURATION: Duration = Duration::from_secs(3);

/// The one table the fake node knows.
const TABLE_NAME: &str = "t";
const TABLE_ID: u32 = 7;
const TABLE_VERSION: u32 = 1;

/// A signal number no rndb node uses.
const SIGNAL_UNKNOWN: u16 = 0x7777;

// ----------------------------------------------------------------------------------------
// The API side.

/// The one table the fake node serves.
fn table_info() -> TableInfo {
    TableInfo {
        table_id: TABLE_ID,
        table_version: TABLE_VERSION,
        def: table_def(),
    }
}

fn table_def() -> TableDef {
    TableDef::new(
        TABLE_NAME,
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("v", ColumnType::UInt64),
        ],
    )
}

/// The row the fake node holds under key 1.
fn stored_row() -> Vec<Value> {
    vec![Value::UInt32(1), Value::UInt64(42)]
}

/// Runs one API call, checking that it returned within [`CALL_LIMIT`]; returns its result and
/// how long it took.
#[track_caller]
fn timed<T>(what: &str, call: impl FnOnce() -> T) -> (T, Duration) {
    let started = Instant::now();
    let result = call();
    let took = started.elapsed();
    assert!(
        took <= CALL_LIMIT,
        "{what} took {took:?}: more than its request timeout and a margin"
    );
    (result, took)
}

fn get_table(cluster: &Cluster) -> Table {
    cluster
        .get_table(TABLE_NAME)
        .expect("get the table from the fake node")
}

/// What one execute did.
#[derive(Debug)]
struct Executed {
    result: Result<(), Error>,
    took: Duration,
    /// The row each read found, in key order.
    rows: Vec<Option<Vec<Value>>>,
    /// The GCI the commit reported.
    gci: Option<u64>,
}

/// Reads `keys` in one new transaction with one execute (Commit), the execute the fake node
/// answers.
fn execute_reads(cluster: &Cluster, table: &Table, keys: &[u32]) -> Executed {
    let mut tx = cluster.start_transaction().expect("start a transaction");
    let ops: Vec<OpId> = keys
        .iter()
        .map(|&k| {
            tx.read(table, &[Value::UInt32(k)], LockMode::Read)
                .expect("define a read")
        })
        .collect();
    let (result, took) = timed("execute", || tx.execute(ExecType::Commit));
    let rows = ops
        .iter()
        .map(|&op| tx.row(op).map(<[Value]>::to_vec))
        .collect();
    Executed {
        result,
        took,
        rows,
        gci: tx.gci(),
    }
}

/// Gets the table and reads key 1 in one execute.
fn read_one(cluster: &Cluster) -> Executed {
    let table = get_table(cluster);
    execute_reads(cluster, &table, &[1])
}

/// Every kind of call, after the link failed: each must fail with 4010 at once.
fn later_calls(cluster: &Cluster, table: &Table) -> Vec<(&'static str, Result<(), Error>)> {
    vec![
        ("ping", timed("ping", || cluster.ping()).0),
        (
            "get_table",
            timed("get_table", || cluster.get_table(TABLE_NAME).map(|_| ())).0,
        ),
        ("execute", execute_reads(cluster, table, &[1]).result),
        ("scan", scan_all(cluster, table).map(|_| ())),
    ]
}

/// Scans the whole table in a new transaction, collecting every row.
fn scan_all(cluster: &Cluster, table: &Table) -> Result<Vec<Vec<Value>>, Error> {
    let mut tx = cluster.start_transaction().expect("start a transaction");
    let (result, _) = timed("scan", || {
        tx.scan_table(table, &ScanOptions::default())
            .and_then(|scan| scan.collect::<Result<Vec<_>, _>>())
    });
    result
}

#[track_caller]
fn assert_all_lost(calls: Vec<(&'static str, Result<(), Error>)>, after: &str) {
    for (what, result) in calls {
        assert_ndb_code(result, 4010, &format!("{what} after {after}"));
    }
}

/// Asserts a protocol error from the data node whose reason contains `naming`.
#[track_caller]
fn assert_protocol<T: Debug>(result: Result<T, Error>, naming: &str, what: &str) {
    match result {
        Err(Error::Protocol { node, reason }) => {
            assert_eq!(node, DATA_NODE, "{what}: the node the error names");
            assert!(
                reason.contains(naming),
                "{what}: the protocol error should name {naming:?}, got {reason:?}"
            );
        }
        other => panic!("{what}: expected a protocol error naming {naming:?}, got {other:?}"),
    }
}

/// A fake node that serves the table, then answers the API's first execute with `answers`,
/// each (signal, payload) under the execute's request id.
fn answering_execute(answers: Vec<(u16, Vec<u8>)>) -> FakeDataNode {
    FakeDataNode::start(move |peer| {
        peer.serve_table(&table_info());
        let execute = peer.read_execute();
        for (signal, payload) in &answers {
            peer.answer(&execute, *signal, payload);
        }
    })
}

/// The API reads key 1 from a node answering with `answers`; the execute must fail with a
/// protocol error naming `naming`, and the link is then given up (later calls get 4010).
#[track_caller]
fn check_execute_protocol_violation(answers: Vec<(u16, Vec<u8>)>, naming: &str, what: &str) {
    let fake = answering_execute(answers);
    let (executed, later) = fake.run(|cluster| {
        let table = get_table(cluster);
        let executed = execute_reads(cluster, &table, &[1]);
        (executed, later_calls(cluster, &table))
    });
    assert_protocol(executed.result, naming, what);
    assert_all_lost(later, what);
    fake.finish();
}

fn row_payload(op_index: u32, values: &[Value]) -> Vec<u8> {
    let mut payload = Vec::new();
    TcKeyRow::encode_parts(&mut payload, op_index, values);
    payload
}

fn key_ref_payload(op_index: u32, code: u32) -> Vec<u8> {
    let mut payload = Vec::new();
    TcKeyRef { op_index, code }.encode(&mut payload);
    payload
}

fn execute_ref_payload(code: u32, op_index: u32) -> Vec<u8> {
    let mut payload = Vec::new();
    TcExecuteRef {
        code,
        op_index,
        detail: String::new(),
    }
    .encode(&mut payload);
    payload
}

fn conf() -> (u16, Vec<u8>) {
    (gsn::TC_EXECUTE_CONF, Vec::new())
}

// ----------------------------------------------------------------------------------------
// Case 0: the fake node itself behaves: a read gets its row. Every other case departs from
// this exchange in one place.

/// The API reads key 1 from a node answering with `answers`: the execute succeeds with the
/// stored row.
fn check_read_succeeds(answers: Vec<(u16, Vec<u8>)>) {
    let fake = answering_execute(answers);
    let executed = fake.run(read_one);
    executed.result.expect("the execute succeeds");
    assert_eq!(executed.rows, vec![Some(stored_row())]);
    fake.finish();
}

#[test]
fn a_well_formed_answer_completes_the_execute() {
    check_read_succeeds(vec![
        (gsn::TCKEY_ROW, row_payload(0, &stored_row())),
        conf(),
    ]);
}

/// A row that also confirms its execute (TCKEY_ROW_CONF) completes the execute with that row.
#[test]
fn a_row_that_confirms_the_execute_completes_it() {
    check_read_succeeds(vec![(gsn::TCKEY_ROW_CONF, row_payload(0, &stored_row()))]);
}

/// A TCKEY_ROW_CONF that ends a commit with the commit's GCI after the row completes the
/// execute with that row and reports that GCI; one without a GCI reports none.
#[test]
fn a_row_that_confirms_a_commit_reports_its_gci() {
    let gci = 5u64 << 32 | 2;
    for (tail, reported) in [(gci.to_le_bytes().to_vec(), Some(gci)), (Vec::new(), None)] {
        let payload = [row_payload(0, &stored_row()), tail].concat();
        let fake = answering_execute(vec![(gsn::TCKEY_ROW_CONF, payload)]);
        let executed = fake.run(read_one);
        executed.result.expect("the execute succeeds");
        assert_eq!(executed.rows, vec![Some(stored_row())]);
        assert_eq!(executed.gci, reported);
        fake.finish();
    }
}

/// A TCKEY_ROW_CONF whose GCI is cut short, is 0, or runs on fails the execute like any
/// answer that does not decode.
#[test]
fn a_malformed_gci_after_a_confirming_row_fails_the_execute() {
    for tail in [vec![1, 2, 3], vec![0; 8], vec![1; 9]] {
        let payload = [row_payload(0, &stored_row()), tail].concat();
        check_execute_protocol_violation(
            vec![(gsn::TCKEY_ROW_CONF, payload)],
            "TCKEY_ROW_CONF",
            "a malformed GCI after the row",
        );
    }
}

/// A TCKEY_ROW_CONF whose row does not decode fails the execute like a bad TCKEY_ROW.
#[test]
fn a_truncated_row_that_confirms_the_execute_fails_it() {
    let mut row = row_payload(0, &stored_row());
    row.truncate(row.len() - 3);
    check_execute_protocol_violation(
        vec![(gsn::TCKEY_ROW_CONF, row)],
        "TCKEY_ROW",
        "a truncated TCKEY_ROW_CONF",
    );
}

/// A TC_EXECUTE_CONF whose GCI is cut short, is 0, or runs on fails the execute like any
/// answer that does not decode.
#[test]
fn a_malformed_gci_in_the_execute_conf_fails_the_execute() {
    for payload in [vec![1, 2, 3], vec![0; 8], vec![1; 9]] {
        check_execute_protocol_violation(
            vec![
                (gsn::TCKEY_ROW, row_payload(0, &stored_row())),
                (gsn::TC_EXECUTE_CONF, payload),
            ],
            "TC_EXECUTE_CONF",
            "a malformed GCI",
        );
    }
}

// ----------------------------------------------------------------------------------------
// Case 1: TCKEY_ROW payloads that do not decode.

#[test]
fn a_truncated_row_fails_the_execute() {
    let mut row = row_payload(0, &stored_row());
    row.truncate(row.len() - 3);
    check_execute_protocol_violation(
        vec![(gsn::TCKEY_ROW, row), conf()],
        "TCKEY_ROW",
        "a truncated TCKEY_ROW",
    );
}

#[test]
fn a_garbage_row_fails_the_execute() {
    // Operation 0, then a value count of 0xFFFF and bytes that are no values.
    let mut row = 0u32.to_le_bytes().to_vec();
    row.extend_from_slice(&[0xFF; 40]);
    check_execute_protocol_violation(
        vec![(gsn::TCKEY_ROW, row), conf()],
        "TCKEY_ROW",
        "a garbage TCKEY_ROW",
    );
}

#[test]
fn a_row_of_the_wrong_width_fails_the_execute() {
    // Well-formed values, one column short and one column over: an application indexing the
    // row by the table's columns would otherwise find too few, or take extra ones for its own.
    for values in [vec![Value::UInt32(1)], {
        let mut wide = stored_row();
        wide.push(Value::UInt32(7));
        wide
    }] {
        check_execute_protocol_violation(
            vec![(gsn::TCKEY_ROW, row_payload(0, &values)), conf()],
            "TCKEY_ROW",
            "a TCKEY_ROW of the wrong width",
        );
    }
}

#[test]
fn a_row_of_the_wrong_types_fails_the_execute() {
    // The right width, but a value of another type than its column's, or NULL in a NOT NULL
    // column: an application would otherwise get a value its table cannot hold.
    for (values, naming) in [
        (
            vec![Value::UInt32(1), Value::Int32(42)],
            "column v is UInt64, got Int32(42)",
        ),
        (
            vec![Value::UInt32(1), Value::Null],
            "NULL in NOT NULL column v",
        ),
        (
            vec![Value::Varchar("1".into()), Value::UInt64(42)],
            "column id is UInt32, got Varchar(\"1\")",
        ),
    ] {
        check_execute_protocol_violation(
            vec![(gsn::TCKEY_ROW, row_payload(0, &values)), conf()],
            naming,
            "a TCKEY_ROW of the wrong types",
        );
    }
}

#[test]
fn an_empty_row_fails_the_execute() {
    check_execute_protocol_violation(
        vec![(gsn::TCKEY_ROW, Vec::new()), conf()],
        "TCKEY_ROW",
        "an empty TCKEY_ROW",
    );
}

// ----------------------------------------------------------------------------------------
// Case 2: answers naming an operation the execute did not send.

#[test]
fn a_row_for_an_operation_outside_the_batch_fails_the_execute() {
    check_execute_protocol_violation(
        vec![(gsn::TCKEY_ROW, row_payload(5, &stored_row())), conf()],
        "operation 5 of a batch of 1",
        "a TCKEY_ROW for operation 5",
    );
}

#[test]
fn a_key_ref_for_an_operation_outside_the_batch_fails_the_execute() {
    check_execute_protocol_violation(
        vec![(gsn::TCKEYREF, key_ref_payload(u32::MAX - 1, 626)), conf()],
        "operation 4294967294 of a batch of 1",
        "a TCKEYREF for operation 2^32-2",
    );
}

#[test]
fn an_execute_ref_for_an_operation_outside_the_batch_fails_the_execute() {
    check_execute_protocol_violation(
        vec![(gsn::TC_EXECUTE_REF, execute_ref_payload(626, 1))],
        "operation 1 of a batch of 1",
        "a TC_EXECUTE_REF for operation 1",
    );
}

// ----------------------------------------------------------------------------------------
// Case 3: TC_EXECUTE_REF payloads that do not decode.

#[test]
fn a_truncated_execute_ref_fails_the_execute() {
    let mut payload = execute_ref_payload(626, 0);
    payload.truncate(6);
    check_execute_protocol_violation(
        vec![(gsn::TC_EXECUTE_REF, payload)],
        "TC_EXECUTE_REF",
        "a truncated TC_EXECUTE_REF",
    );
}

#[test]
fn an_execute_ref_with_a_detail_that_is_not_utf8_fails_the_execute() {
    // Code, operation, then a detail of 2 bytes that are no UTF-8.
    let mut payload = execute_ref_payload(626, 0);
    payload.truncate(8);
    payload.extend_from_slice(&[2, 0, 0xC3, 0x28]);
    check_execute_protocol_violation(
        vec![(gsn::TC_EXECUTE_REF, payload)],
        "TC_EXECUTE_REF",
        "a TC_EXECUTE_REF whose detail is not UTF-8",
    );
}

/// The contrast to case 3: a well-formed TC_EXECUTE_REF is the data node's NDB error, and the
/// link stays up.
#[test]
fn a_well_formed_execute_ref_is_the_ndb_error() {
    let fake = FakeDataNode::start(|peer| {
        peer.serve_table(&table_info());
        let execute = peer.read_execute();
        peer.answer(&execute, gsn::TCKEYREF, &key_ref_payload(0, 626));
        peer.answer(&execute, gsn::TC_EXECUTE_REF, &execute_ref_payload(626, 0));
        let ping = peer.expect(gsn::PING_REQ).0;
        peer.answer(&ping, gsn::PING_CONF, &[]);
    });
    let (executed, ping) = fake.run(|cluster| (read_one(cluster), cluster.ping()));
    assert_ndb_code(executed.result, 626, "a read refused with 626");
    ping.expect("a ping after an NDB error");
    fake.finish();
}

// ----------------------------------------------------------------------------------------
// Case 4: signals that do not belong in the answer.

#[test]
fn an_unknown_signal_fails_the_execute() {
    check_execute_protocol_violation(
        vec![(SIGNAL_UNKNOWN, vec![1, 2, 3])],
        &format!("unexpected signal {SIGNAL_UNKNOWN}"),
        "an unknown signal",
    );
}

#[test]
fn a_ping_answer_to_an_execute_fails_it() {
    check_execute_protocol_violation(
        vec![(gsn::PING_CONF, Vec::new())],
        &format!("unexpected signal {}", gsn::PING_CONF),
        "PING_CONF in answer to an execute",
    );
}

#[test]
fn scan_rows_in_an_execute_answer_fail_it() {
    // SCAN_ROWS does not complete a request, so the execute's own CONF ends it.
    let mut rows = Vec::new();
    encode_scan_row(&mut rows, 0, &stored_row());
    check_execute_protocol_violation(
        vec![(gsn::SCAN_ROWS, rows), conf()],
        &format!("unexpected signal {}", gsn::SCAN_ROWS),
        "SCAN_ROWS in answer to an execute",
    );
}

#[test]
fn a_wrong_signal_in_answer_to_a_ping_fails_it() {
    let fake = FakeDataNode::start(|peer| {
        let ping = peer.expect(gsn::PING_REQ).0;
        peer.answer(&ping, gsn::TC_EXECUTE_CONF, &[]);
    });
    let ping = fake.run(|cluster| timed("ping", || cluster.ping()).0);
    assert_protocol(ping, "PING", "TC_EXECUTE_CONF in answer to a ping");
    fake.finish();
}

#[test]
fn a_garbage_table_info_fails_get_table() {
    let fake = FakeDataNode::start(|peer| {
        let (request, _) = peer.expect(gsn::GET_TABINFO_REQ);
        peer.answer(&request, gsn::GET_TABINFO_CONF, &[9, 9, 9, 9, 9]);
    });
    let (table, ping) = fake.run(|cluster| {
        let table = timed("get_table", || cluster.get_table(TABLE_NAME).map(|_| ())).0;
        (table, cluster.ping())
    });
    assert_protocol(table, "TableInfo", "a garbage GET_TABINFO_CONF");
    assert_ndb_code(ping, 4010, "a ping after a garbage GET_TABINFO_CONF");
    fake.finish();
}

#[test]
fn a_garbage_refusal_fails_create_table() {
    let fake = FakeDataNode::start(|peer| {
        let (request, _) = peer.expect(gsn::CREATE_TABLE_REQ);
        peer.answer(&request, gsn::CREATE_TABLE_REF, &[1]);
    });
    let created = fake.run(|cluster| {
        timed("create_table", || {
            cluster.create_table(&table_def()).map(|_| ())
        })
        .0
    });
    assert_protocol(created, "Ref", "a garbage CREATE_TABLE_REF");
    fake.finish();
}

#[test]
fn a_garbage_registration_answer_fails_the_connect() {
    let fake = FakeDataNode::start_raw(|peer| {
        let (request, _) = peer.expect(lqh::gsn::API_REGREQ);
        peer.answer(&request, lqh::gsn::API_REGCONF, &[1]);
    });
    assert_protocol(fake.try_connect(), "API_REGREQ", "a truncated API_REGCONF");
    fake.finish();
}

// ----------------------------------------------------------------------------------------
// Case 5: bytes that are not a frame fail the link.

/// The fake node answers the API's execute with `bytes`; the execute fails with 4010, and so
/// does every later call.
#[track_caller]
fn check_bad_frame(bytes: Vec<u8>, naming: &str, what: &str) {
    let fake = FakeDataNode::start(move |peer| {
        peer.serve_table(&table_info());
        peer.read_execute();
        peer.send_raw(&bytes);
    });
    let (executed, later) = fake.run(|cluster| {
        let table = get_table(cluster);
        let executed = execute_reads(cluster, &table, &[1]);
        (executed, later_calls(cluster, &table))
    });
    let error = executed.result.expect_err(what);
    assert_eq!(error.code(), Some(4010), "{what}: {error}");
    assert!(error.is_temporary(), "{what}: a lost link is temporary");
    assert!(
        error.to_string().contains(naming),
        "{what}: the error should name {naming:?}: {error}"
    );
    assert_all_lost(later, what);
    fake.finish();
}

#[test]
fn a_frame_longer_than_the_limit_fails_the_link() {
    let mut bytes = ((FRAME_BYTES_MAX as u32) * 1024).to_le_bytes().to_vec();
    bytes.extend_from_slice(&[0; 60]);
    check_bad_frame(bytes, "exceeds the limit", "a length field of 32 MiB");
}

#[test]
fn a_frame_shorter_than_its_header_fails_the_link() {
    let mut bytes = 3u32.to_le_bytes().to_vec();
    bytes.extend_from_slice(&[0; 12]);
    check_bad_frame(bytes, "below the minimum", "a length field of 3");
}

#[test]
fn a_header_with_unknown_flags_fails_the_link() {
    // A 16-byte frame whose flags have every bit set.
    let mut bytes = 16u32.to_le_bytes().to_vec();
    bytes.extend_from_slice(&gsn::TC_EXECUTE_CONF.to_le_bytes());
    bytes.extend_from_slice(&u16::MAX.to_le_bytes());
    bytes.extend_from_slice(&[0; 8]);
    check_bad_frame(bytes, "unknown flag bits", "a header with unknown flags");
}

#[test]
fn a_garbage_header_fails_the_link() {
    check_bad_frame(vec![0xAB; 64], "bad frame", "64 bytes of 0xAB");
}

// ----------------------------------------------------------------------------------------
// Case 6: the node closes the connection in the middle of an answer.

#[test]
fn a_close_in_the_middle_of_an_answer_fails_the_execute() {
    let fake = FakeDataNode::start(|peer| {
        peer.serve_table(&table_info());
        let execute = peer.read_execute();
        // The first of two rows, then the connection goes.
        peer.answer(&execute, gsn::TCKEY_ROW, &row_payload(0, &stored_row()));
        peer.close();
    });
    let (executed, later) = fake.run(|cluster| {
        let table = get_table(cluster);
        let executed = execute_reads(cluster, &table, &[1, 2]);
        (executed, later_calls(cluster, &table))
    });
    assert_ndb_code(executed.result, 4010, "an execute whose answer was cut");
    assert_all_lost(later, "a close");
    fake.finish();
}

#[test]
fn a_close_in_the_middle_of_a_frame_fails_the_execute() {
    let fake = FakeDataNode::start(|peer| {
        peer.serve_table(&table_info());
        let execute = peer.read_execute();
        let bytes = peer.frame(
            execute.request_id,
            gsn::TCKEY_ROW,
            &row_payload(0, &stored_row()),
        );
        // Half a frame, then the connection goes.
        peer.send_raw(&bytes[..bytes.len() / 2]);
        peer.close();
    });
    let executed = fake.run(read_one);
    assert_ndb_code(executed.result, 4010, "an execute whose frame was cut");
    fake.finish();
}

// ----------------------------------------------------------------------------------------
// Case 7: the node never answers, or never finishes answering.

#[test]
fn no_answer_fails_the_execute_with_4012_after_the_request_timeout() {
    let fake = FakeDataNode::start(|peer| {
        peer.serve_table(&table_info());
        peer.read_execute();
        // Silence; then, once the API gave up, the link still carries a ping.
        let ping = peer.expect_skipping(gsn::PING_REQ);
        peer.answer(&ping, gsn::PING_CONF, &[]);
    });
    let (executed, again, ping) = fake.run(|cluster| {
        let table = get_table(cluster);
        let mut tx = cluster.start_transaction().expect("start a transaction");
        tx.read(&table, &[Value::UInt32(1)], LockMode::Read)
            .expect("define a read");
        let (executed, took) = timed("execute", || tx.execute(ExecType::NoCommit));
        let again = tx.execute(ExecType::Commit);
        drop(tx);
        ((executed, took), again, timed("ping", || cluster.ping()).0)
    });
    let (result, took) = executed;
    let error = result.expect_err("an execute nobody answers");
    assert_eq!(error.code(), Some(4012), "{error}");
    assert!(error.is_temporary(), "4012 is temporary");
    assert!(
        took >= REQUEST_TIMEOUT,
        "4012 came after {took:?}, before the request timeout of {REQUEST_TIMEOUT:?}"
    );
    assert_ndb_code(again, 4114, "an execute after the timed-out one");
    ping.expect("a ping after a timeout: the link still works");
    fake.finish();
}

#[test]
fn rows_repeated_for_one_operation_fail_the_execute() {
    // A flood of rows for operation 0, never the execute's CONF: a data node answers each
    // operation once, so the second row is already a violation. The execute fails with it at
    // once rather than at the request timeout, and rows are not kept piling up meanwhile.
    let fake = FakeDataNode::start(|peer| {
        peer.serve_table(&table_info());
        let execute = peer.read_execute();
        let row = row_payload(0, &stored_row());
        let started = Instant::now();
        while started.elapsed() < FLOOD_DURATION && !peer.stopped() {
            for _ in 0..64 {
                peer.answer(&execute, gsn::TCKEY_ROW, &row);
            }
        }
    });
    let (executed, later) = fake.run(|cluster| {
        let table = get_table(cluster);
        (
            execute_reads(cluster, &table, &[1]),
            later_calls(cluster, &table),
        )
    });
    assert_protocol(
        executed.result,
        "a second TCKEY_ROW for operation 0",
        "rows repeated for ever",
    );
    assert!(
        executed.took < REQUEST_TIMEOUT,
        "the violation ends the execute before its timeout, took {:?}",
        executed.took
    );
    assert_all_lost(later, "rows repeated for ever");
    fake.finish();
}

/// Three executes in flight at once from the asynchronous executor; the node answers the
/// first and the last. Those two complete with their rows, and the middle one, older than the
/// last, still fails alone with 4012 once its request timeout has passed.
#[test]
fn an_unanswered_execute_in_flight_fails_alone_with_4012() {
    let fake = FakeDataNode::start(|peer| {
        peer.serve_table(&table_info());
        let executes = [
            peer.read_execute(),
            peer.read_execute(),
            peer.read_execute(),
        ];
        for execute in [&executes[0], &executes[2]] {
            peer.answer(execute, gsn::TCKEY_ROW, &row_payload(0, &stored_row()));
            let (signal, payload) = conf();
            peer.answer(execute, signal, &payload);
        }
    });
    let outcomes = fake.run(|cluster| {
        let table = get_table(cluster);
        let mut executor = cluster.async_executor();
        let mut ops = Vec::new();
        for tag in 0..3 {
            let mut tx = cluster.start_transaction().expect("start a transaction");
            let op = tx
                .read(&table, &[Value::UInt32(1)], LockMode::Read)
                .expect("define a read");
            ops.push(op);
            executor
                .prepare(
                    tx,
                    ExecType::Commit,
                    rndb_api::AbortOption::AbortOnError,
                    tag,
                )
                .expect("prepare");
        }
        let started = Instant::now();
        let mut outcomes = BTreeMap::new();
        while !executor.is_empty() && started.elapsed() < CALL_LIMIT {
            for done in executor.send_poll(1, CALL_LIMIT) {
                let row = done
                    .transaction
                    .row(ops[done.tag as usize])
                    .map(<[Value]>::to_vec);
                outcomes.insert(done.tag, (done.result, row, started.elapsed()));
            }
        }
        outcomes
    });
    assert_eq!(outcomes.len(), 3, "every execute completes: {outcomes:?}");
    for tag in [0, 2] {
        let (result, row, took) = &outcomes[&tag];
        assert!(result.is_ok(), "execute {tag}: {result:?}");
        assert_eq!(
            row.as_deref(),
            Some(&stored_row()[..]),
            "execute {tag}'s row"
        );
        assert!(
            *took < REQUEST_TIMEOUT,
            "execute {tag} waited {took:?} for the unanswered one"
        );
    }
    let (result, row, took) = &outcomes[&1];
    assert_eq!(
        result.as_ref().err().and_then(Error::code),
        Some(4012),
        "{result:?}"
    );
    assert_eq!(row, &None, "the unanswered read has no row");
    assert!(
        *took >= REQUEST_TIMEOUT,
        "4012 after {took:?}, before the request timeout"
    );
    fake.finish();
}

// ----------------------------------------------------------------------------------------
// Case 8: answers to requests the API never made, or already finished, are dropped.

#[test]
fn answers_to_other_requests_are_ignored() {
    let fake = FakeDataNode::start(|peer| {
        peer.serve_table(&table_info());
        let execute = peer.read_execute();
        let finished = peer.registration_request_id();
        let never_sent = execute.request_id.wrapping_add(1000);
        // A conclusion and a garbage row for a request nobody made, a refusal and an unknown
        // signal for the finished registration, a conclusion under request id 0 (which no
        // request uses)...
        peer.send(never_sent, gsn::TC_EXECUTE_CONF, &[]);
        peer.send(never_sent, gsn::TCKEY_ROW, &[0xFF; 9]);
        peer.send(finished, gsn::TC_EXECUTE_REF, &execute_ref_payload(626, 0));
        peer.send(finished, SIGNAL_UNKNOWN, &[]);
        peer.send(0, gsn::TC_EXECUTE_CONF, &[]);
        // ...then the real answer.
        peer.answer(&execute, gsn::TCKEY_ROW, &row_payload(0, &stored_row()));
        peer.answer(&execute, gsn::TC_EXECUTE_CONF, &[]);
        let ping = peer.expect_skipping(gsn::PING_REQ);
        peer.answer(&ping, gsn::PING_CONF, &[]);
    });
    let (executed, ping) = fake.run(|cluster| (read_one(cluster), cluster.ping()));
    executed
        .result
        .expect("the execute completes with its own answer");
    assert_eq!(executed.rows, vec![Some(stored_row())]);
    ping.expect("a ping after stray answers: the link still works");
    fake.finish();
}

// ----------------------------------------------------------------------------------------
// Case 9: malformed scan batches.

fn scan_conf(fragment_count: u16, finished: bool, fragments: Vec<FragmentBatch>) -> Vec<u8> {
    let mut payload = Vec::new();
    ScanTabConf {
        fragment_count,
        finished,
        fragments,
    }
    .encode(&mut payload);
    payload
}

fn scan_rows(rows: &[(u16, Vec<Value>)]) -> Vec<u8> {
    let mut payload = Vec::new();
    for (fragment, values) in rows {
        encode_scan_row(&mut payload, *fragment, values);
    }
    payload
}

/// The fake node answers the API's scan's first batch with `answers`; the scan must fail with
/// a protocol error naming `naming`, and the link is then given up.
#[track_caller]
fn check_scan_protocol_violation(answers: Vec<(u16, Vec<u8>)>, naming: &str, what: &str) {
    let fake = FakeDataNode::start(move |peer| {
        peer.serve_table(&table_info());
        let (scan, _) = peer.expect(gsn::SCAN_TABREQ);
        for (signal, payload) in &answers {
            peer.answer(&scan, *signal, payload);
        }
    });
    let (scanned, later) = fake.run(|cluster| {
        let table = get_table(cluster);
        (scan_all(cluster, &table), later_calls(cluster, &table))
    });
    assert_protocol(scanned, naming, what);
    assert_all_lost(later, what);
    fake.finish();
}

#[test]
fn a_truncated_scan_row_fails_the_scan() {
    let mut rows = scan_rows(&[(0, stored_row())]);
    rows.truncate(rows.len() - 2);
    check_scan_protocol_violation(
        vec![
            (gsn::SCAN_ROWS, rows),
            (gsn::SCAN_TABCONF, scan_conf(2, true, Vec::new())),
        ],
        "SCAN_ROWS",
        "a truncated SCAN_ROWS",
    );
}

#[test]
fn a_scan_row_of_a_fragment_outside_the_scan_fails_the_scan() {
    check_scan_protocol_violation(
        vec![
            (gsn::SCAN_ROWS, scan_rows(&[(9, stored_row())])),
            (gsn::SCAN_TABCONF, scan_conf(2, true, Vec::new())),
        ],
        "fragment 9 of 2",
        "a row of fragment 9 of 2",
    );
}

#[test]
fn a_scan_row_of_the_wrong_width_fails_the_scan() {
    check_scan_protocol_violation(
        vec![
            (gsn::SCAN_ROWS, scan_rows(&[(0, vec![Value::UInt32(1)])])),
            (gsn::SCAN_TABCONF, scan_conf(2, true, Vec::new())),
        ],
        "row of 1 values, table t has 2 columns",
        "a row of 1 column",
    );
}

#[test]
fn a_scan_row_of_the_wrong_types_fails_the_scan() {
    check_scan_protocol_violation(
        vec![
            (
                gsn::SCAN_ROWS,
                scan_rows(&[(0, vec![Value::UInt32(1), Value::Float64(0.5)])]),
            ),
            (gsn::SCAN_TABCONF, scan_conf(2, true, Vec::new())),
        ],
        "column v is UInt64, got Float64(0.5)",
        "a row with a Float64 in a UInt64 column",
    );
}

#[test]
fn a_truncated_scan_conf_fails_the_scan() {
    let mut payload = scan_conf(
        2,
        false,
        vec![FragmentBatch {
            fragment: 0,
            rows: 0,
            done: true,
        }],
    );
    payload.truncate(payload.len() - 1);
    check_scan_protocol_violation(
        vec![(gsn::SCAN_TABCONF, payload)],
        "SCAN_TABCONF",
        "a truncated SCAN_TABCONF",
    );
}

#[test]
fn a_scan_batch_without_scan_conf_fails_the_scan() {
    check_scan_protocol_violation(
        vec![
            (gsn::SCAN_ROWS, scan_rows(&[(0, stored_row())])),
            (gsn::TC_EXECUTE_CONF, Vec::new()),
        ],
        &format!("unexpected signal {}", gsn::TC_EXECUTE_CONF),
        "a scan batch ended by TC_EXECUTE_CONF",
    );
}

#[test]
fn a_later_scan_batch_with_another_fragment_count_fails_the_scan() {
    let fake = FakeDataNode::start(|peer| {
        peer.serve_table(&table_info());
        let (scan, _) = peer.expect(gsn::SCAN_TABREQ);
        // A good first batch: one row of two fragments, more to come.
        peer.answer(&scan, gsn::SCAN_ROWS, &scan_rows(&[(0, stored_row())]));
        peer.answer(&scan, gsn::SCAN_TABCONF, &scan_conf(2, false, Vec::new()));
        // The next batch suddenly has three fragments.
        let (next, _) = peer.expect(gsn::SCAN_NEXTREQ);
        peer.answer(&next, gsn::SCAN_TABCONF, &scan_conf(3, true, Vec::new()));
    });
    let (first, rest, ping) = fake.run(|cluster| {
        let table = get_table(cluster);
        let mut tx = cluster.start_transaction().expect("start a transaction");
        let mut scan = timed("scan_table", || {
            tx.scan_table(&table, &ScanOptions::default())
        })
        .0
        .expect("the first batch is well formed");
        let first = scan.next();
        let (rest, _) = timed("the next batch", || scan.next());
        drop(scan);
        (first, rest, cluster.ping())
    });
    assert_eq!(
        first.map(|r| r.expect("the first row")),
        Some(stored_row()),
        "the first batch's row"
    );
    let rest = rest.expect("the scan reports its error rather than ending");
    assert_protocol(rest, "now has 3", "a second batch of 3 fragments");
    assert_ndb_code(ping, 4010, "a ping after a malformed scan batch");
    fake.finish();
}

#[test]
fn a_garbage_table_list_fails_list_tables() {
    let fake = FakeDataNode::start(|peer| {
        let (request, _) = peer.expect(gsn::LIST_TABLES_REQ);
        peer.answer(&request, gsn::LIST_TABLES_CONF, &[1, 0, 9]);
    });
    let (listed, ping) = fake.run(|cluster| {
        let listed = timed("list_tables", || cluster.list_tables()).0;
        (listed, cluster.ping())
    });
    assert_protocol(listed, "LIST_TABLES_CONF", "a garbage LIST_TABLES_CONF");
    assert_ndb_code(ping, 4010, "a ping after a garbage LIST_TABLES_CONF");
    fake.finish();
}

#[test]
fn a_table_list_that_goes_backwards_fails_list_tables() {
    let page = |from_id: u32, more: bool| {
        let mut payload = Vec::new();
        ListTablesConf {
            objects: vec![ListedObject {
                id: from_id,
                kind: ObjectKind::UserTable,
                parent_id: 0,
                name: TABLE_NAME.into(),
            }],
            more,
        }
        .encode(&mut payload);
        payload
    };
    let fake = FakeDataNode::start(move |peer| {
        let (request, _) = peer.expect(gsn::LIST_TABLES_REQ);
        peer.answer(&request, gsn::LIST_TABLES_CONF, &page(5, true));
        // Asked from 6 on, it answers an object before it again.
        let (request, _) = peer.expect(gsn::LIST_TABLES_REQ);
        peer.answer(&request, gsn::LIST_TABLES_CONF, &page(5, false));
    });
    let listed = fake.run(|cluster| timed("list_tables", || cluster.list_tables()).0);
    assert_protocol(
        listed,
        "went backwards",
        "a LIST_TABLES_CONF page before the last",
    );
    fake.finish();
}

/// Of two data nodes, the second closes its link when the API node registers (API_REGREQ: it
/// stops or restarts just then): the connect goes on with the first, which serves, and leaves
/// the second to the background connector (it failed with 4010 before).
#[test]
fn a_data_node_leaving_while_the_api_connects_does_not_fail_the_connect() {
    let fake = FakeDataNode::start_several(vec![
        Box::new(|peer: &mut Peer| {
            peer.register_api();
            let (ping, _) = peer.expect(gsn::PING_REQ);
            peer.answer(&ping, gsn::PING_CONF, &[]);
        }),
        Box::new(|peer: &mut Peer| {
            peer.expect(lqh::gsn::API_REGREQ);
            peer.close();
        }),
    ]);
    let cluster = fake
        .try_connect()
        .expect("the connect goes on without the data node that left");
    cluster.ping().expect("the data node that serves answers");
    drop(cluster);
    fake.finish();
}

/// An event stream that carries a change cut short, a report that does not decode, or a
/// signal no stream carries fails the subscription with a protocol error naming it (within
/// the call's bound, no panic), and the link is given up.
#[test]
fn a_malformed_event_stream_fails_the_subscription() {
    use rndb_protocol::suma::{SubGcpCompleteRep, SubStartConf};
    let start = 5u64 << 32 | 1;
    let cases: [(u16, Vec<u8>, &str); 3] = [
        (gsn::SUB_TABLE_DATA, vec![1, 2, 3], "SUB_TABLE_DATA"),
        (
            gsn::SUB_GCP_COMPLETE_REP,
            vec![9; 3],
            "SUB_GCP_COMPLETE_REP",
        ),
        (gsn::TCKEY_ROW, Vec::new(), "unexpected signal"),
    ];
    for (signal, payload, naming) in cases {
        let fake = FakeDataNode::start(move |peer| {
            peer.serve_table(&table_info());
            let subscribe = peer.expect_skipping(gsn::SUB_START_REQ);
            let mut conf = Vec::new();
            SubStartConf {
                start_gci: start,
                restart: 0,
            }
            .encode(&mut conf);
            peer.answer(&subscribe, gsn::SUB_START_CONF, &conf);
            let mut rep = Vec::new();
            SubGcpCompleteRep {
                gci: start,
                flags: 0,
            }
            .encode(&mut rep);
            peer.answer(&subscribe, gsn::SUB_GCP_COMPLETE_REP, &rep);
            peer.answer(&subscribe, signal, &payload);
            peer.linger();
        });
        let (result, later) = fake.run(|cluster| {
            let table = get_table(cluster);
            let polled = timed("an event stream", || {
                let mut op = cluster.create_event_operation(&table)?;
                op.poll_events(Duration::from_secs(2))
            })
            .0;
            (polled, later_calls(cluster, &table))
        });
        assert_protocol(result, naming, naming);
        assert_all_lost(later, naming);
        fake.finish();
    }
}

/// A data node that names the largest epoch there is, in its confirmation and its report,
/// cannot make the library panic or hang: the subscription is made or refused in time.
#[test]
fn an_event_stream_at_the_last_epoch_neither_panics_nor_hangs() {
    use rndb_protocol::suma::{SubGcpCompleteRep, SubStartConf};
    let fake = FakeDataNode::start(move |peer| {
        peer.serve_table(&table_info());
        let subscribe = peer.expect_skipping(gsn::SUB_START_REQ);
        let mut conf = Vec::new();
        SubStartConf {
            start_gci: u64::MAX,
            restart: u32::MAX,
        }
        .encode(&mut conf);
        peer.answer(&subscribe, gsn::SUB_START_CONF, &conf);
        for gci in [0, u64::MAX - 1, u64::MAX] {
            let mut rep = Vec::new();
            SubGcpCompleteRep { gci, flags: 1 }.encode(&mut rep);
            peer.answer(&subscribe, gsn::SUB_GCP_COMPLETE_REP, &rep);
        }
        peer.linger();
    });
    let (result, took) = fake.run(|cluster| {
        let table = get_table(cluster);
        timed("an event stream at the last epoch", || {
            let mut op = cluster.create_event_operation(&table)?;
            op.poll_events(Duration::from_millis(200)).map(|_| ())
        })
    });
    assert!(took < CALL_LIMIT, "took {took:?}: {result:?}");
    fake.finish();
}
