//! Proves that a data node survives hostile or broken peers: garbage bytes, oversized length
//! fields, malformed or refused handshakes, frames with a bad CRC and malformed signals each
//! close (at most) the one connection that carried them, while a well-behaved API node keeps
//! working and the data node keeps running.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use rndb_api::{Cluster, ColumnDef, ColumnType, Table, TableDef, Value};
use rndb_config::NodeId;
use rndb_protocol::signals::{block, gsn, TcKeyReq, FLAG_EXECUTE};
use rndb_tests::ops::{insert_committed, read_committed, recreate_table};
use rndb_tests::{wait_until, ClusterSpec, TestCluster, API_NODE_ID_FIRST};
use rndb_transporter::frame::{self, FrameHeader};
use rndb_transporter::handshake::{self, Hello, HANDSHAKE_TIMEOUT, SIGNAL_HELLO};
use rndb_transporter::TransportError;

/// The API slot of the well-behaved client.
const GOOD_SLOT: NodeId = NodeId(API_NODE_ID_FIRST);
/// An API slot whose link to data node 1 has Checksum=1 (an explicit `[tcp]` section).
const CHECKSUM_SLOT: NodeId = NodeId(API_NODE_ID_FIRST + 1);
/// An API slot with a plain link, for raw connections that complete the handshake.
const PLAIN_SLOT: NodeId = NodeId(API_NODE_ID_FIRST + 2);
/// A fourth slot for the second connection of the malformed-signal case.
const SPARE_SLOT: NodeId = NodeId(API_NODE_ID_FIRST + 3);
/// The one data node.
const DATA_NODE: NodeId = NodeId(1);
/// How long the node may take to close a bad connection: longer than the handshake timeout,
/// since a connection that stops mid-header is only closed when its handshake times out.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(15);

/// A running node, a good client, and a table with one row the client reads.
struct Fixture {
    cluster: TestCluster,
    api: Cluster,
    table: Table,
}

impl Fixture {
    fn start() -> Fixture {
        // An explicit [tcp] section gives this one link a CRC-32 on every frame.
        let checksum_link =
            format!("[tcp]\nNodeId1={DATA_NODE}\nNodeId2={CHECKSUM_SLOT}\nChecksum=1");
        let spec = ClusterSpec::new().api_slots(4).extra(&checksum_link);
        let cluster = TestCluster::start(spec).expect("start the cluster");
        assert_eq!(
            cluster
                .config()
                .link(DATA_NODE, CHECKSUM_SLOT)
                .map(|l| l.checksum),
            Some(true),
            "the harness config gives the checksum slot a checksummed link"
        );
        let api = cluster
            .connect_as(GOOD_SLOT)
            .expect("connect the good client");
        let def = TableDef::new(
            "canary",
            vec![
                ColumnDef::key("id", ColumnType::UInt32),
                ColumnDef::new("v", ColumnType::UInt64),
            ],
        );
        let table = recreate_table(&api, &def).expect("create the table");
        insert_committed(&api, &table, &[vec![Value::UInt32(1), Value::UInt64(42)]])
            .expect("insert the canary row");
        Fixture {
            cluster,
            api,
            table,
        }
    }

    /// The good client reads its row, and the data node process is alive.
    #[track_caller]
    fn assert_healthy(&mut self, after: &str) {
        let row = read_committed(&self.api, &self.table, &[Value::UInt32(1)])
            .unwrap_or_else(|e| panic!("the good client fails after {after}: {e}"));
        assert_eq!(row[1], Value::UInt64(42), "after {after}");
        assert!(
            self.cluster.is_running(DATA_NODE),
            "the data node died after {after}"
        );
    }

    fn raw_connection(&self) -> TcpStream {
        let stream = TcpStream::connect(self.cluster.addr(DATA_NODE)).expect("connect raw TCP");
        stream.set_nodelay(true).expect("set TCP_NODELAY");
        stream
    }

    /// A raw connection that completed a valid handshake as API node `from`.
    fn handshaken_connection(&self, from: NodeId) -> TcpStream {
        let hello = Hello::for_link(self.cluster.config(), from, DATA_NODE).expect("hello");
        let mut stream = self.raw_connection();
        handshake::client_handshake(&mut stream, &hello, HANDSHAKE_TIMEOUT)
            .unwrap_or_else(|e| panic!("handshake as node {from}: {e}"));
        stream
    }

    /// As [`Fixture::handshaken_connection`], retrying while the node still holds the slot
    /// for an earlier connection it has not yet seen close (bounded by [`CLOSE_TIMEOUT`]).
    fn handshaken_connection_when_free(&self, from: NodeId, what: &str) -> TcpStream {
        let hello = Hello::for_link(self.cluster.config(), from, DATA_NODE).expect("hello");
        wait_until(
            &format!("a handshake as node {from} before {what}"),
            CLOSE_TIMEOUT,
            || {
                let mut stream = self.raw_connection();
                Ok(
                    handshake::client_handshake(&mut stream, &hello, HANDSHAKE_TIMEOUT)
                        .ok()
                        .map(|_| stream),
                )
            },
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Sends `bytes` on a new raw connection and asserts that the node closes it.
    fn send_and_expect_close(&mut self, what: &str, bytes: &[u8]) {
        self.assert_healthy(&format!("(before) {what}"));
        let mut stream = self.raw_connection();
        // The node may close as soon as it has seen enough, so a failed write is fine.
        let _ = stream.write_all(bytes);
        assert_closed_by_node(&mut stream, what);
        self.assert_healthy(what);
    }
}

/// Reads (and discards, e.g. a HELLO_REF) until the node closes the connection; panics if it
/// is still open after [`CLOSE_TIMEOUT`].
#[track_caller]
fn assert_closed_by_node(stream: &mut TcpStream, what: &str) {
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("set read timeout");
    let deadline = Instant::now() + CLOSE_TIMEOUT;
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return,
        }
        assert!(
            Instant::now() < deadline,
            "the node kept the connection open after {what}"
        );
    }
}

/// Waits until the node answers on `stream` (any bytes) or closes it; panics if it does
/// neither within [`CLOSE_TIMEOUT`].
#[track_caller]
fn assert_answered_or_closed(stream: &mut TcpStream, what: &str) {
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("set read timeout");
    let deadline = Instant::now() + CLOSE_TIMEOUT;
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(_) => return, // an answer, or EOF
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return, // reset: closed
        }
        assert!(
            Instant::now() < deadline,
            "the node neither answered nor closed the connection after {what}"
        );
    }
}

/// The bytes of one frame.
fn frame_bytes(signal: u16, receiver_block: u16, payload: &[u8], checksum: bool) -> Vec<u8> {
    let header = FrameHeader {
        signal,
        receiver_block,
        sender_block: block::API,
        request_id: 1,
    };
    let mut bytes = Vec::new();
    frame::encode_into(&mut bytes, &header, payload, checksum).expect("encode a frame");
    bytes
}

/// A frame header announcing `length` bytes, without a body.
fn header_announcing(length: u32) -> Vec<u8> {
    let mut bytes = frame_bytes(SIGNAL_HELLO, 0, &[], false);
    bytes[0..4].copy_from_slice(&length.to_le_bytes());
    bytes
}

/// A HELLO frame whose payload is `payload` (well-formed or not).
fn hello_frame(payload: &[u8]) -> Vec<u8> {
    frame_bytes(SIGNAL_HELLO, 0, payload, false)
}

#[test]
fn garbage_before_the_handshake_closes_only_that_connection() {
    let mut fixture = Fixture::start();
    fixture.send_and_expect_close("64 bytes of 0xFF", &[0xFF; 64]);
    fixture.send_and_expect_close("an HTTP request", b"GET / HTTP/1.1\r\nHost: rndb\r\n\r\n");
    fixture.send_and_expect_close("a 1 GiB length field", &header_announcing(1 << 30));
    fixture.send_and_expect_close("a length below the header size", &header_announcing(3));
    fixture.send_and_expect_close(
        "a frame that is not HELLO",
        &frame_bytes(gsn::PING_REQ, block::QMGR, &[], false),
    );
    fixture.send_and_expect_close(
        "a truncated HELLO payload",
        &hello_frame(&[b'R', b'N', b'D', b'B', 1, 0]),
    );
}

#[test]
fn malformed_or_refused_handshakes_close_only_that_connection() {
    let mut fixture = Fixture::start();
    let good = Hello::for_link(fixture.cluster.config(), PLAIN_SLOT, DATA_NODE).expect("hello");
    let mut bad_magic = good.encode();
    bad_magic[0..4].copy_from_slice(b"XNDB");
    fixture.send_and_expect_close("a HELLO with a bad magic", &hello_frame(&bad_magic));
    let mut bad_kind = good.encode();
    bad_kind[20] = 9;
    fixture.send_and_expect_close("a HELLO with an unknown node kind", &hello_frame(&bad_kind));

    let refusals = [
        (
            "an unknown node id",
            Hello {
                from: NodeId(200),
                ..good
            },
            1713,
        ),
        (
            "another cluster's id",
            Hello {
                cluster_id: good.cluster_id ^ 1,
                ..good
            },
            1711,
        ),
        (
            "another protocol version",
            Hello {
                protocol_version: good.protocol_version + 1,
                ..good
            },
            1710,
        ),
        (
            "the wrong data node",
            Hello {
                to: NodeId(2),
                ..good
            },
            1712,
        ),
        (
            "a data node's kind for an API slot",
            Hello {
                from_kind: rndb_config::NodeKind::Data,
                ..good
            },
            1704,
        ),
        (
            "the wrong Checksum",
            Hello {
                checksum: !good.checksum,
                ..good
            },
            1716,
        ),
    ];
    for (what, hello, code) in refusals {
        fixture.expect_refusal(&format!("a HELLO with {what}"), &hello, code);
    }
}

impl Fixture {
    /// Sends `hello` on a new raw connection and asserts that the node refuses it with `code`
    /// and then closes the connection.
    #[track_caller]
    fn expect_refusal(&mut self, what: &str, hello: &Hello, code: u32) {
        self.assert_healthy(&format!("(before) {what}"));
        let mut stream = self.raw_connection();
        match handshake::client_handshake(&mut stream, hello, HANDSHAKE_TIMEOUT) {
            Err(TransportError::Refused { code: got, .. }) => {
                assert_eq!(got, code, "refusal code for {what}");
            }
            other => panic!("{what}: expected refusal {code}, got {other:?}"),
        }
        assert_closed_by_node(&mut stream, what);
        self.assert_healthy(what);
    }
}

#[test]
fn a_bad_crc_closes_the_link_and_frees_the_slot() {
    let mut fixture = Fixture::start();
    let mut stream = fixture.handshaken_connection(CHECKSUM_SLOT);
    let mut bytes = frame_bytes(gsn::PING_REQ, block::QMGR, &[1, 2, 3, 4], true);
    let payload_at = frame::FRAME_HEADER_BYTES;
    bytes[payload_at] ^= 0x5A;
    stream
        .write_all(&bytes)
        .expect("send a frame with a bad CRC");
    assert_closed_by_node(&mut stream, "a frame with a bad CRC");
    fixture.assert_healthy("a frame with a bad CRC");
    wait_until(
        "the node to log the bad frame",
        Duration::from_secs(5),
        || {
            let log = fixture.cluster.log(DATA_NODE).to_ascii_lowercase();
            Ok((log.contains("crc") || log.contains("checksum")).then_some(()))
        },
    )
    .expect("the node logs why it closed the link");

    // The slot is free again once the node has dropped the link: a new handshake is admitted.
    let hello = Hello::for_link(fixture.cluster.config(), CHECKSUM_SLOT, DATA_NODE).expect("hello");
    wait_until(
        "the checksum slot to be free again",
        Duration::from_secs(10),
        || {
            let mut stream = fixture.raw_connection();
            match handshake::client_handshake(&mut stream, &hello, HANDSHAKE_TIMEOUT) {
                Ok(_) => Ok(Some(())),
                // Held by this process's closed link until the node has dropped it.
                Err(TransportError::Refused { code: 1703, .. }) => Ok(None),
                Err(e) => Err(e.into()),
            }
        },
    )
    .expect("reconnect in the slot of the closed link");
}

/// A second link under a node id that has one is refused: with 1703 (node failure handling not
/// completed: retry) when the hello comes from the same process as the held link's, which
/// therefore knows no other process took its id; with 1702 (node already connected) from
/// another process. The held link and the good client go on.
#[test]
fn a_second_link_of_a_node_id_names_whose_the_first_is() {
    let mut fixture = Fixture::start();
    let mut held = fixture.handshaken_connection(PLAIN_SLOT);
    let ours = Hello::for_link(fixture.cluster.config(), PLAIN_SLOT, DATA_NODE).expect("hello");
    let theirs = Hello {
        token: ours.token.wrapping_add(1).max(1),
        ..ours
    };
    for (hello, code) in [(ours, 1703), (theirs, 1702)] {
        let mut stream = fixture.raw_connection();
        match handshake::client_handshake(&mut stream, &hello, HANDSHAKE_TIMEOUT) {
            Err(TransportError::Refused { code: got, message }) => {
                assert_eq!(got, code, "{message}")
            }
            other => panic!("a second link of {PLAIN_SLOT}: {other:?}"),
        }
    }
    fixture.assert_healthy("second links refused");
    // The held link still works: a ping is answered.
    held.write_all(&frame_bytes(gsn::PING_REQ, block::QMGR, &[], false))
        .expect("ping on the held link");
    held.set_read_timeout(Some(CLOSE_TIMEOUT)).expect("timeout");
    let mut header = [0u8; frame::FRAME_HEADER_BYTES];
    held.read_exact(&mut header).expect("the held link answers");
}

#[test]
fn an_oversized_frame_after_the_handshake_closes_the_link() {
    let mut fixture = Fixture::start();
    let mut stream = fixture.handshaken_connection(PLAIN_SLOT);
    let mut bytes = frame_bytes(gsn::PING_REQ, block::QMGR, &[], false);
    bytes[0..4].copy_from_slice(&(frame::FRAME_BYTES_MAX as u32 + 1).to_le_bytes());
    let _ = stream.write_all(&bytes);
    assert_closed_by_node(&mut stream, "a frame longer than the limit");
    fixture.assert_healthy("a frame longer than the limit");

    let mut stream = fixture.handshaken_connection(SPARE_SLOT);
    let _ = stream.write_all(&header_announcing(u32::MAX));
    assert_closed_by_node(&mut stream, "a 4 GiB length field after the handshake");
    fixture.assert_healthy("a 4 GiB length field after the handshake");
}

#[test]
fn malformed_signals_after_the_handshake_do_not_hurt_the_node() {
    let mut fixture = Fixture::start();
    // A well-formed read whose execute flag is followed by an unknown exec type.
    let mut bad_execute = Vec::new();
    TcKeyReq::first_read(1, 1, vec![Value::UInt32(1)]).encode(&mut bad_execute);
    bad_execute[0] |= FLAG_EXECUTE;
    bad_execute.extend_from_slice(&[0, 0xFF, 0]);
    let cases: [(&str, u16, u16, &[u8]); 5] = [
        (
            "a TCKEYREQ with a garbage payload",
            gsn::TCKEYREQ,
            block::DBTC,
            &[0xEE; 40],
        ),
        (
            "a TCKEYREQ whose execute has an unknown exec type",
            gsn::TCKEYREQ,
            block::DBTC,
            &bad_execute,
        ),
        (
            "a CREATE_TABLE_REQ with a truncated payload",
            gsn::CREATE_TABLE_REQ,
            block::DBDICT,
            &[5],
        ),
        ("an unknown signal number", 0x7777, block::DBTC, &[]),
        ("a signal for an unknown block", gsn::PING_REQ, 0x1234, &[]),
    ];
    for (what, signal, receiver, payload) in cases {
        // Each case on its own connection: a case that makes the node close the link must not
        // leave the next one writing to a closed socket. The slot is free again once the node
        // has seen the previous connection go.
        let mut stream = fixture.handshaken_connection_when_free(PLAIN_SLOT, what);
        stream
            .write_all(&frame_bytes(signal, receiver, payload, false))
            .unwrap_or_else(|e| panic!("send {what} on a fresh connection: {e}"));
        // The node must react: answer (a Ref) or close the link; either way it keeps serving.
        assert_answered_or_closed(&mut stream, what);
        drop(stream);
        fixture.assert_healthy(what);
    }
}

/// Three bytes of a HELLO header are no reason to close by themselves (more may follow); the
/// node closes the connection because its handshake did not complete within HANDSHAKE_TIMEOUT,
/// counted from the accept, so never sooner than that after the test began to connect.
#[test]
fn a_connection_that_stops_mid_header_is_closed_after_the_handshake_timeout() {
    let mut fixture = Fixture::start();
    let connecting = Instant::now();
    let mut stream = fixture.raw_connection();
    stream
        .write_all(&[20, 0, 0])
        .expect("send three bytes of a header");
    fixture.assert_healthy("a stalled handshake, while it stalls");
    assert_closed_by_node(&mut stream, "a handshake that stops mid-header");
    let closed_after = connecting.elapsed();
    assert!(
        closed_after >= HANDSHAKE_TIMEOUT,
        "the node closed a stalled handshake after {closed_after:?}, before its \
         HANDSHAKE_TIMEOUT of {HANDSHAKE_TIMEOUT:?}"
    );
    fixture.assert_healthy("a handshake that stops mid-header");
}
