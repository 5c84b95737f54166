//! Proves the handshake: HELLO round-trips byte for byte, malformed hellos and garbage are
//! errors (never panics or hangs), an admitted client can send frames on the same socket at
//! once, and a refused client learns the code and the reason.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::thread;
use std::time::Duration;

use rndb_config::NodeKind;
use rndb_transporter::frame::{self, FrameHeader};
use rndb_transporter::handshake::{self, Hello, HELLO_BYTES, PROTOCOL_VERSION, SIGNAL_HELLO};
use rndb_transporter::registry::{self, REFUSE_CLUSTER_MISMATCH};
use rndb_transporter::tcp::TcpLink;
use rndb_transporter::{LinkSettings, NodeId, TransportError, Transporter, TransporterKind};

const SHORT_TIMEOUT: Duration = Duration::from_millis(300);

fn api_hello() -> Hello {
    Hello::for_link(&common::cluster(), NodeId(10), NodeId(1)).expect("node 10 links to node 1")
}

#[test]
fn hello_for_link_reads_the_config() {
    let config = common::cluster();
    let hello = Hello::for_link(&config, NodeId(11), NodeId(1)).expect("node 11 links to node 1");
    assert_eq!(hello.protocol_version, PROTOCOL_VERSION);
    assert_eq!(hello.cluster_id, config.cluster_id());
    assert_eq!(hello.from_kind, NodeKind::Api);
    assert_eq!(hello.transporter, TransporterKind::Shm);
    assert!(hello.checksum);
    assert!(
        Hello::for_link(&config, NodeId(13), NodeId(1)).is_err(),
        "no link 1-13"
    );
    assert!(
        Hello::for_link(&config, NodeId(99), NodeId(1)).is_err(),
        "no node 99"
    );
}

#[test]
fn hello_round_trips() {
    let hello = api_hello();
    let bytes = hello.encode();
    assert_eq!(&bytes[0..4], b"RNDB");
    assert_eq!(Hello::decode(&bytes).expect("decode"), hello);
}

#[test]
fn every_transporter_kind_round_trips_with_its_code() {
    for (kind, code) in [
        (TransporterKind::Tcp, 1),
        (TransporterKind::Shm, 2),
        (TransporterKind::Uring, 3),
    ] {
        let mut hello = api_hello();
        hello.transporter = kind;
        let bytes = hello.encode();
        assert_eq!(bytes[21], code, "{kind}");
        assert_eq!(Hello::decode(&bytes).expect("decode"), hello);
    }
}

fn check_decode_fails(patch: impl Fn(&mut Vec<u8>), expected: &str) {
    let mut bytes = api_hello().encode().to_vec();
    patch(&mut bytes);
    let err = Hello::decode(&bytes).expect_err("malformed hello");
    assert!(
        err.to_string().contains(expected),
        "{err} does not mention {expected:?}"
    );
}

/// A version 7 hello (23 bytes, no process token) decodes, with process 0, so that it can be
/// refused for its version (1710) rather than as malformed.
#[test]
fn a_version_7_hello_decodes_without_a_process() {
    let mut old = api_hello();
    old.protocol_version = 7;
    let bytes = old.encode();
    let decoded = Hello::decode(&bytes[..handshake::HELLO_BYTES_V7]).expect("decode");
    assert_eq!(decoded, Hello { token: 0, ..old });
}

#[test]
fn malformed_hellos_fail() {
    check_decode_fails(|b| b[0] = b'X', "bad magic");
    check_decode_fails(|b| b.truncate(HELLO_BYTES - 1), "expected 31");
    check_decode_fails(|b| b.push(0), "expected 31");
    check_decode_fails(|b| b.clear(), "expected 31");
    check_decode_fails(|b| b[20] = 0, "unknown node kind 0");
    check_decode_fails(|b| b[21] = 9, "unknown transporter kind 9");
    check_decode_fails(|b| b[22] = 2, "checksum flag 2");
}

#[test]
fn refusal_payload_round_trips_and_is_bounded() {
    let payload = handshake::encode_ref(1702, "Node already connected");
    let err = handshake::decode_ref(&payload).expect("decode");
    assert!(
        matches!(err, TransportError::Refused { code: 1702, ref message } if message == "Node already connected")
    );
    let long = "é".repeat(handshake::REFUSAL_MESSAGE_BYTES_MAX);
    let payload = handshake::encode_ref(1, &long);
    assert!(payload.len() <= 6 + handshake::REFUSAL_MESSAGE_BYTES_MAX);
    assert!(
        handshake::decode_ref(&payload).is_ok(),
        "cut at a character boundary"
    );
    assert!(handshake::decode_ref(&payload[..5]).is_err());
    assert!(handshake::decode_ref(&payload[..payload.len() - 1]).is_err());
}

#[test]
fn admitted_client_sends_frames_right_away() {
    let (mut client, mut server) = common::connected_streams();
    let server_thread = thread::spawn(move || {
        let config = common::cluster();
        let (hello, link_config) =
            registry::server_handshake(&mut server, &config, NodeId(1), |_, _| None, SHORT_TIMEOUT)
                .expect("admit node 10");
        let settings = LinkSettings::from_link(link_config);
        let mut link = TcpLink::new(server, hello.from, &settings).expect("server link");
        let mut payloads = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while payloads.is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "no frame after the handshake"
            );
            link.receive(&mut |_, payload| payloads.push(payload.to_vec()))
                .expect("receive");
        }
        (hello.from, payloads)
    });
    let accepted = handshake::client_handshake(&mut client, &api_hello(), SHORT_TIMEOUT * 10)
        .expect("node 1 admits node 10");
    assert_eq!(accepted.server_node, NodeId(1));
    let mut link = TcpLink::new(client, NodeId(1), &LinkSettings::default()).expect("client link");
    link.send(&FrameHeader::default(), b"first frame")
        .expect("send");
    link.flush().expect("flush");
    let (from, payloads) = server_thread.join().expect("server thread");
    assert_eq!(from, NodeId(10));
    assert_eq!(payloads, [b"first frame".to_vec()]);
}

#[test]
fn refused_client_gets_the_code_and_reason() {
    let (mut client, mut server) = common::connected_streams();
    let server_thread = thread::spawn(move || {
        let config = common::cluster();
        registry::server_handshake(&mut server, &config, NodeId(1), |_, _| None, SHORT_TIMEOUT)
            .map(|_| ())
    });
    let hello = Hello {
        cluster_id: 42,
        ..api_hello()
    };
    let err = handshake::client_handshake(&mut client, &hello, SHORT_TIMEOUT * 10)
        .expect_err("another cluster is refused");
    let server_err = server_thread
        .join()
        .expect("server thread")
        .expect_err("server refused");
    for err in [err, server_err] {
        match err {
            TransportError::Refused { code, message } => {
                assert_eq!(code, REFUSE_CLUSTER_MISMATCH);
                assert!(message.contains("node 10"), "{message}");
            }
            other => panic!("expected Refused, got {other:?}"),
        }
    }
}

fn server_error_after(client_bytes: &[u8]) -> TransportError {
    let (mut client, mut server) = common::connected_streams();
    client.write_all(client_bytes).expect("write");
    let err = handshake::server_read_hello(&mut server, SHORT_TIMEOUT).expect_err("must fail");
    drop(client);
    err
}

#[test]
fn garbage_oversize_and_silence_fail_the_server_side() {
    let err = server_error_after(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(err.to_string().contains("exceeds"), "{err}");
    // A frame of legal frame size but far above any handshake message fails on its header.
    let mut oversize = 4000u32.to_le_bytes().to_vec();
    oversize.extend_from_slice(&[0; 12]);
    let err = server_error_after(&oversize);
    assert!(
        err.to_string().contains("handshake frame of 4000 bytes"),
        "{err}"
    );
    let mut wrong_signal = Vec::new();
    let header = FrameHeader {
        signal: 5,
        ..FrameHeader::default()
    };
    frame::encode_into(&mut wrong_signal, &header, &api_hello().encode(), false).expect("encode");
    let err = server_error_after(&wrong_signal);
    assert!(err.to_string().contains("expected HELLO"), "{err}");
    let mut checksummed = Vec::new();
    let header = FrameHeader {
        signal: SIGNAL_HELLO,
        ..FrameHeader::default()
    };
    frame::encode_into(&mut checksummed, &header, &api_hello().encode(), true).expect("encode");
    let err = server_error_after(&checksummed);
    assert!(err.to_string().contains("checksum flag"), "{err}");
    let err = server_error_after(b"");
    assert!(err.to_string().contains("timed out"), "{err}");
    let err = server_error_after(&[16, 0]);
    assert!(err.to_string().contains("timed out"), "{err}");
}

#[test]
fn a_silent_server_times_the_client_out() {
    let (mut client, server) = common::connected_streams();
    let err = handshake::client_handshake(&mut client, &api_hello(), SHORT_TIMEOUT)
        .expect_err("no answer");
    assert!(err.to_string().contains("timed out"), "{err}");
    drop(server);
}

#[test]
fn a_server_that_hangs_up_fails_the_client() {
    let (mut client, server) = common::connected_streams();
    drop(server);
    let err: TransportError = handshake::client_handshake(&mut client, &api_hello(), SHORT_TIMEOUT)
        .expect_err("server gone");
    assert!(
        matches!(
            err,
            TransportError::Handshake(_) | TransportError::Io { .. }
        ),
        "{err:?}"
    );
}

#[test]
fn an_answer_from_the_wrong_node_fails_the_client() {
    let (mut client, mut server) = common::connected_streams();
    let server_thread = thread::spawn(move || {
        handshake::server_read_hello(&mut server, SHORT_TIMEOUT * 10).expect("hello");
        handshake::server_accept(&mut server, NodeId(2), SHORT_TIMEOUT).expect("accept");
        server
    });
    let err = handshake::client_handshake(&mut client, &api_hello(), SHORT_TIMEOUT * 10)
        .expect_err("node 2 answered for node 1");
    assert!(err.to_string().contains("node 2 answered"), "{err}");
    let _server: TcpStream = server_thread.join().expect("server thread");
}
