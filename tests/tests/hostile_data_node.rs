//! Proves that the API library survives a hostile or broken data node: a fake data node (a
//! thread that speaks the real handshake and frames) answers the API's requests with truncated
//! or garbage payloads, operation indexes outside the batch, unexpected signals, invalid frames,
//! a close in the middle of an answer, silence, a flood, or answers to requests nobody made, and
//! every call returns the expected typed error (or, for stray answers, the right result) within
//! its request timeout, never a panic or a hang; a link that carried a violation is given up,
//! so later calls fail cleanly with 4010.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rndb_api::{
    Cluster, ColumnDef, ColumnType, ConnectOptions, Error, ExecType, LockMode, NodeId, OpId,
    ScanOptions, Table, TableDef, TransporterKind, Value,
};
use rndb_protocol::lqh::{self, ApiRegConf};
use rndb_protocol::scan::{encode_scan_row, FragmentBatch, ScanTabConf};
use rndb_protocol::signals::{
    block, gsn, TableInfo, TcExecuteRef, TcKeyRef, TcKeyReqView, TcKeyRow,
};
use rndb_tests::{
    assert_ndb_code, free_port_listener, ClusterSpec, API_NODE_ID_FIRST, DATA_NODE_ID_FIRST,
};
use rndb_transporter::frame::{self, Decoded, FrameHeader, FRAME_BYTES_MAX};
use rndb_transporter::handshake::{self, HANDSHAKE_TIMEOUT};
use tempfile::TempDir;

/// The fake data node's id: the one data node of the config.
const DATA_NODE: NodeId = NodeId(DATA_NODE_ID_FIRST);
/// The API node's slot.
const API_NODE: NodeId = NodeId(API_NODE_ID_FIRST);
/// The API's request timeout (4012 after this).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// The API's connect timeout (TCP connect, handshake, and waiting for the cluster to start).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest one API call may take: its request timeout and a margin for a loaded machine.
/// Longer is a hang.
const CALL_LIMIT: Duration = Duration::from_secs(4);
/// The longest a whole case's API side may take (connect and a few calls); past it the test
/// fails as hung rather than wait for ever.
const RUN_LIMIT: Duration = Duration::from_secs(15);
/// How long the fake node waits for the API (to connect, or for its next frame) before it
/// gives up, so that its thread always ends.
const FAKE_WAIT_LIMIT: Duration = Duration::from_secs(10);
/// How often the fake node's blocking socket calls wake to look at its stop flag.
const FAKE_POLL: Duration = Duration::from_millis(20);
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
// The fake data node.

/// A data node that is a test thread: it accepts one API connection on a port of its own,
/// runs the server side of the handshake, and then a script of what to answer. It ends (and is
/// joined) when the test ends, even when the test fails.
struct FakeNode {
    /// Holds config.ini.
    _dir: TempDir,
    config_path: PathBuf,
    /// Set when the test is done with the node: its thread stops within [`FAKE_POLL`].
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FakeNode {
    /// A node that does what a data node does on connect (HELLO_CONF, then API_REGCONF saying
    /// the cluster has started), then runs `script`, then keeps the link open (reading and
    /// dropping whatever comes) until the API closes it or the test ends.
    fn start(script: impl FnOnce(&mut Peer) + Send + 'static) -> FakeNode {
        FakeNode::start_raw(move |peer| {
            peer.register_api();
            script(peer);
        })
    }

    /// As [`FakeNode::start`], but `script` runs right after the handshake: it answers
    /// API_REGREQ itself.
    fn start_raw(script: impl FnOnce(&mut Peer) + Send + 'static) -> FakeNode {
        let dir = tempfile::tempdir().expect("create a temporary directory");
        // The port stays bound: the fake node accepts on this very socket.
        let listener = free_port_listener();
        let port = listener
            .local_addr()
            .expect("read the bound address")
            .port();
        let config_path = dir.path().join("config.ini");
        let ports = BTreeMap::from([(DATA_NODE, port)]);
        let config = ClusterSpec::new().api_slots(1).render(dir.path(), &ports);
        std::fs::write(&config_path, config).expect("write config.ini");
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = stop.clone();
        let thread = std::thread::Builder::new()
            .name("fake-ndbd".into())
            .spawn(move || {
                let mut peer = Peer::accept(&listener, thread_stop);
                script(&mut peer);
                peer.linger();
            })
            .expect("spawn the fake data node");
        FakeNode {
            _dir: dir,
            config_path,
            stop,
            thread: Some(thread),
        }
    }

    /// Connects an API node to the fake node and runs `api` with it on a thread of its own,
    /// failing the test if that does not return within [`RUN_LIMIT`] (the API hangs) and
    /// raising its panic here if it panics.
    fn run<T: Send + 'static>(&self, api: impl FnOnce(&Cluster) -> T + Send + 'static) -> T {
        let config_path = self.config_path.clone();
        bounded(move || {
            let cluster = connect(&config_path).expect("connect to the fake data node");
            api(&cluster)
        })
    }

    /// Connects an API node to the fake node (bounded as [`FakeNode::run`]) and returns what
    /// the connect returned.
    fn try_connect(&self) -> Result<Cluster, Error> {
        let config_path = self.config_path.clone();
        bounded(move || connect(&config_path))
    }

    /// Stops the fake node and raises its script's panic, if any: the API did not send what
    /// the script expected.
    fn finish(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            if let Err(panic) = thread.join() {
                std::panic::resume_unwind(panic);
            }
        }
    }
}

impl Drop for FakeNode {
    /// Stops and joins the thread (each of its waits looks at the stop flag every
    /// [`FAKE_POLL`]); a panic of its script is left to the test's own failure.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The fake node's end of the API's connection.
struct Peer {
    /// Blocking, with read and write timeouts of [`FAKE_POLL`].
    stream: TcpStream,
    /// The link's Checksum setting, as the API's HELLO says.
    checksum: bool,
    /// Bytes read and not decoded yet.
    received: Vec<u8>,
    /// The request id of the API's API_REGREQ, answered and finished.
    registration_request_id: u32,
    stop: Arc<AtomicBool>,
}

impl Peer {
    /// Waits (bounded) for the API to connect and admits it, as a data node's listener does.
    fn accept(listener: &TcpListener, stop: Arc<AtomicBool>) -> Peer {
        listener
            .set_nonblocking(true)
            .expect("make the listener non-blocking");
        let deadline = Instant::now() + FAKE_WAIT_LIMIT;
        let mut stream = loop {
            match listener.accept() {
                Ok((stream, _)) => break stream,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    assert!(
                        !stop.load(Ordering::Relaxed) && Instant::now() < deadline,
                        "the API never connected"
                    );
                    std::thread::sleep(FAKE_POLL);
                }
                Err(e) => panic!("accept the API's connection: {e}"),
            }
        };
        stream
            .set_nonblocking(false)
            .expect("make the stream blocking");
        let hello = handshake::server_read_hello(&mut stream, HANDSHAKE_TIMEOUT)
            .expect("read the API's HELLO");
        assert_eq!(
            (hello.from, hello.to),
            (API_NODE, DATA_NODE),
            "HELLO's node ids"
        );
        assert_eq!(hello.transporter, TransporterKind::Tcp, "HELLO's link kind");
        handshake::server_accept(&mut stream, DATA_NODE, HANDSHAKE_TIMEOUT)
            .expect("send HELLO_CONF");
        stream
            .set_read_timeout(Some(FAKE_POLL))
            .expect("set the read timeout");
        stream
            .set_write_timeout(Some(FAKE_POLL))
            .expect("set the write timeout");
        Peer {
            stream,
            checksum: hello.checksum,
            received: Vec::new(),
            registration_request_id: 0,
            stop,
        }
    }

    /// Answers the API_REGREQ that `Cluster::connect` sends: the cluster has started.
    fn register_api(&mut self) {
        let (request, _) = self.expect(lqh::gsn::API_REGREQ);
        let mut conf = Vec::new();
        ApiRegConf {
            started: true,
            data_nodes_up: 1,
            data_nodes: 1,
        }
        .encode(&mut conf);
        self.answer(&request, lqh::gsn::API_REGCONF, &conf);
        self.registration_request_id = request.request_id;
    }

    /// The API's next frame; `None` once the API closed the connection, the test ended, or
    /// nothing came for [`FAKE_WAIT_LIMIT`].
    fn read_frame(&mut self) -> Option<(FrameHeader, Vec<u8>)> {
        let deadline = Instant::now() + FAKE_WAIT_LIMIT;
        let mut chunk = [0u8; 4096];
        loop {
            let decoded =
                frame::decode(&self.received, self.checksum).expect("the API sends valid frames");
            if let Decoded::Frame {
                header,
                payload,
                frame_len,
            } = decoded
            {
                let payload = payload.to_vec();
                self.received.drain(..frame_len);
                return Some((header, payload));
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.received.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) =>
                {
                    if self.stop.load(Ordering::Relaxed) || Instant::now() >= deadline {
                        return None;
                    }
                }
                // Reset: the API is gone.
                Err(_) => return None,
            }
        }
    }

    /// The API's next frame, which must carry `signal`.
    #[track_caller]
    fn expect(&mut self, signal: u16) -> (FrameHeader, Vec<u8>) {
        let Some((header, payload)) = self.read_frame() else {
            panic!("the fake node expected signal {signal}, but the API sent nothing more");
        };
        assert_eq!(header.signal, signal, "the signal the API sent");
        (header, payload)
    }

    /// The API's next frame with `signal`, dropping any others before it (a rollback a dropped
    /// transaction sends, say).
    #[track_caller]
    fn expect_skipping(&mut self, signal: u16) -> FrameHeader {
        loop {
            match self.read_frame() {
                Some((header, _)) if header.signal == signal => return header,
                Some(_) => {}
                None => {
                    panic!("the fake node expected signal {signal}, but the API sent nothing more")
                }
            }
        }
    }

    /// Reads an execute: TCKEYREQ frames, the last with FLAG_EXECUTE (or a TC_EXECUTE_REQ
    /// after them), and returns the header of the frame that ended it.
    #[track_caller]
    fn read_execute(&mut self) -> FrameHeader {
        loop {
            let Some((header, payload)) = self.read_frame() else {
                panic!("the fake node expected an execute, but the API sent nothing more");
            };
            match header.signal {
                gsn::TCKEYREQ => {
                    let req = TcKeyReqView::decode(&payload).expect("a TCKEYREQ that decodes");
                    if req.execute().is_some() {
                        return header;
                    }
                }
                gsn::TC_EXECUTE_REQ => return header,
                other => panic!("expected TCKEYREQ or TC_EXECUTE_REQ, got signal {other}"),
            }
        }
    }

    /// Answers GET_TABINFO_REQ with the one table.
    fn serve_table(&mut self) {
        let (request, _) = self.expect(gsn::GET_TABINFO_REQ);
        let mut info = Vec::new();
        TableInfo {
            table_id: TABLE_ID,
            table_version: TABLE_VERSION,
            def: table_def(),
        }
        .encode(&mut info);
        self.answer(&request, gsn::GET_TABINFO_CONF, &info);
    }

    /// Sends `signal` with `payload` in answer to `request` (its request id, blocks swapped),
    /// as a data node answers.
    fn answer(&mut self, request: &FrameHeader, signal: u16, payload: &[u8]) {
        self.send(request.request_id, signal, payload);
    }

    /// Sends one well-formed frame to the API under `request_id`.
    fn send(&mut self, request_id: u32, signal: u16, payload: &[u8]) {
        let bytes = self.frame(request_id, signal, payload);
        self.send_raw(&bytes);
    }

    /// The bytes of one well-formed frame to the API under `request_id`, from TC.
    fn frame(&self, request_id: u32, signal: u16, payload: &[u8]) -> Vec<u8> {
        let header = FrameHeader {
            signal,
            receiver_block: block::API,
            sender_block: block::DBTC,
            request_id,
        };
        let mut bytes = Vec::new();
        frame::encode_into(&mut bytes, &header, payload, self.checksum)
            .expect("encode a frame for the API");
        bytes
    }

    /// Writes bytes as they are, all of them unless the test ends first: a write that times
    /// out (the API is not reading) goes on from where it stopped, so no frame is cut by
    /// accident. A failure is ignored: the API may have given the link up already, and each
    /// test asserts on what the API saw.
    fn send_raw(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() && !self.stop.load(Ordering::Relaxed) {
            match self.stream.write(bytes) {
                Ok(0) => return,
                Ok(written) => bytes = &bytes[written..],
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) => {}
                Err(_) => return,
            }
        }
    }

    /// Closes the connection in both directions (the API sees EOF).
    fn close(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }

    /// Reads and drops frames until the API closes the connection or the test ends.
    fn linger(&mut self) {
        while self.read_frame().is_some() {}
    }
}

/// Runs `f` on a thread of its own and returns its result, failing the test when it takes
/// longer than [`RUN_LIMIT`]. A thread that hangs cannot be stopped; it ends with the test
/// process.
fn bounded<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, result) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("api".into())
        .spawn(move || {
            let _ = done.send(f());
        })
        .expect("spawn the API thread");
    match result.recv_timeout(RUN_LIMIT) {
        Ok(value) => {
            let _ = thread.join();
            value
        }
        Err(RecvTimeoutError::Timeout) => {
            panic!("the API side did not return within {RUN_LIMIT:?}: it hangs")
        }
        Err(RecvTimeoutError::Disconnected) => match thread.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the API thread ended without a result"),
        },
    }
}

// ----------------------------------------------------------------------------------------
// The API side.

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

fn connect(config_path: &Path) -> Result<Cluster, Error> {
    Cluster::connect(
        config_path,
        ConnectOptions {
            node_id: Some(API_NODE),
            connect_timeout: CONNECT_TIMEOUT,
            transporter: Some(TransporterKind::Tcp),
            request_timeout: REQUEST_TIMEOUT,
            ..ConnectOptions::default()
        },
    )
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
    Executed { result, took, rows }
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
fn answering_execute(answers: Vec<(u16, Vec<u8>)>) -> FakeNode {
    FakeNode::start(move |peer| {
        peer.serve_table();
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
    let fake = FakeNode::start(|peer| {
        peer.serve_table();
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
    let fake = FakeNode::start(|peer| {
        let ping = peer.expect(gsn::PING_REQ).0;
        peer.answer(&ping, gsn::TC_EXECUTE_CONF, &[]);
    });
    let ping = fake.run(|cluster| timed("ping", || cluster.ping()).0);
    assert_protocol(ping, "PING", "TC_EXECUTE_CONF in answer to a ping");
    fake.finish();
}

#[test]
fn a_garbage_table_info_fails_get_table() {
    let fake = FakeNode::start(|peer| {
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
    let fake = FakeNode::start(|peer| {
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
    let fake = FakeNode::start_raw(|peer| {
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
    let fake = FakeNode::start(move |peer| {
        peer.serve_table();
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
    let fake = FakeNode::start(|peer| {
        peer.serve_table();
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
    let fake = FakeNode::start(|peer| {
        peer.serve_table();
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
    let fake = FakeNode::start(|peer| {
        peer.serve_table();
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
    let fake = FakeNode::start(|peer| {
        peer.serve_table();
        let execute = peer.read_execute();
        let row = row_payload(0, &stored_row());
        let started = Instant::now();
        while started.elapsed() < FLOOD_DURATION && !peer.stop.load(Ordering::Relaxed) {
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
    let fake = FakeNode::start(|peer| {
        peer.serve_table();
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
    let fake = FakeNode::start(|peer| {
        peer.serve_table();
        let execute = peer.read_execute();
        let finished = peer.registration_request_id;
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
    let fake = FakeNode::start(move |peer| {
        peer.serve_table();
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
    let fake = FakeNode::start(|peer| {
        peer.serve_table();
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
