//! Proves that the TLS link passes every transporter conformance test (ordering, batches, large
//! frames, back-pressure, peer death, bad frames inside TLS) over real loopback sockets, with
//! certificates made by the same code as `ndb_sign_keys`, and that a link starts with the frames
//! the TLS handshake read ahead.

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rndb_config::NodeKind;
use rndb_transporter::conformance::{self, LinkPair, RawWriter};
use rndb_transporter::tls::io::{tls_link, TlsStream};
use rndb_transporter::tls::pki::{self, Lifetime};
use rndb_transporter::tls::{self, NodeTls, SearchPath};
use rndb_transporter::{FrameHeader, LinkSettings, NodeId, Transporter};

const SOCKET_BUFFER_BYTES: usize = 128 * 1024;

/// A CA and a data node key and certificate in a directory that lives as long as the process.
fn keys() -> &'static NodeTls {
    static KEYS: OnceLock<(tempfile::TempDir, NodeTls)> = OnceLock::new();
    &KEYS
        .get_or_init(|| {
            let dir = tempfile::tempdir().expect("temporary directory");
            pki::create_ca(dir.path(), Lifetime::from_now(3600).expect("lifetime"))
                .expect("create the CA");
            let path = SearchPath {
                dirs: vec![PathBuf::from(dir.path())],
            };
            let ca = pki::Ca::load(&path).expect("load the CA");
            let key = pki::generate_key().expect("node key");
            let chain = ca
                .sign(
                    &key,
                    NodeKind::Data,
                    &[],
                    Lifetime::from_now(3600).expect("lifetime"),
                )
                .expect("sign");
            let kind = NodeKind::Data;
            pki::write_new(
                dir.path(),
                tls::key_file(kind),
                pki::key_pem(&key).as_bytes(),
                0o400,
            )
            .expect("write key");
            pki::write_new(dir.path(), tls::cert_file(kind), chain.as_bytes(), 0o644)
                .expect("write certificate");
            let keys = NodeTls::load(&path, kind).expect("load the node's keys");
            (dir, keys)
        })
        .1
}

/// A TLS session over a connected loopback pair: (client, server).
fn tls_streams() -> (TlsStream, TlsStream) {
    let (client, server) = common::connected_streams();
    for stream in [&client, &server] {
        let socket = socket2::SockRef::from(stream);
        socket
            .set_send_buffer_size(SOCKET_BUFFER_BYTES)
            .expect("SO_SNDBUF");
        socket
            .set_recv_buffer_size(SOCKET_BUFFER_BYTES)
            .expect("SO_RCVBUF");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let accepting = std::thread::spawn(move || TlsStream::accept(keys(), server, deadline));
    let client = TlsStream::connect(keys(), client, "127.0.0.1", deadline).expect("client TLS");
    let server = accepting.join().expect("join").expect("server TLS");
    (client, server)
}

struct Tls;

impl LinkPair for Tls {
    fn make(settings: LinkSettings) -> (Box<dyn Transporter>, Box<dyn Transporter>) {
        let (client, server) = tls_streams();
        let a = tls_link(client, NodeId(2), &settings).expect("node 1's link");
        let b = tls_link(server, NodeId(1), &settings).expect("node 2's link");
        (Box::new(a), Box::new(b))
    }

    fn make_raw(settings: LinkSettings) -> Option<(Box<dyn Transporter>, RawWriter)> {
        let (mut client, server) = tls_streams();
        let link = tls_link(server, NodeId(1), &settings).expect("node 2's link");
        let writer: RawWriter = Box::new(move |bytes: &[u8]| client.write_all(bytes));
        Some((Box::new(link), writer))
    }
}

#[test]
fn ordering() {
    conformance::ordering::<Tls>();
}

#[test]
fn batches() {
    conformance::batches::<Tls>();
}

#[test]
fn large_frames() {
    conformance::large_frames::<Tls>();
}

#[test]
fn back_pressure() {
    conformance::back_pressure::<Tls>();
}

#[test]
fn peer_death() {
    conformance::peer_death::<Tls>();
}

#[test]
fn bad_frames() {
    conformance::bad_frames::<Tls>();
}

#[test]
fn limited_receive() {
    conformance::limited_receive::<Tls>();
}

/// Frames that arrived during the handshake (read ahead into rustls) are reported as pending
/// input by the new link, and delivered by its first receive.
#[test]
fn frames_read_ahead_are_pending_at_open() {
    let (mut client, server) = tls_streams();
    let mut bytes = Vec::new();
    let header = FrameHeader {
        request_id: 7,
        ..FrameHeader::default()
    };
    rndb_transporter::frame::encode_into(&mut bytes, &header, b"early", false).expect("encode");
    client.write_all(&bytes).expect("write");
    let mut link = tls_link(server, NodeId(1), &LinkSettings::default()).expect("link");
    assert!(link.input_pending());
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut ids = Vec::new();
    while ids.is_empty() && Instant::now() < deadline {
        link.receive(&mut |h, _| ids.push(h.request_id))
            .expect("receive");
    }
    assert_eq!(ids, [7]);
}

/// A caller that sends a TLS link's unsent records itself (the data node's send-and-sleep) gets
/// whole records from `prepare_unsent`, may send only part of them, and the link sends the
/// rest with its next flush, in order.
#[test]
fn a_caller_sends_the_sealed_records_in_part() {
    let (client, server) = tls_streams();
    let mut sender = tls_link(client, NodeId(2), &LinkSettings::default()).expect("sender");
    let mut receiver = tls_link(server, NodeId(1), &LinkSettings::default()).expect("receiver");
    for id in 0..3 {
        let header = FrameHeader {
            request_id: id,
            ..FrameHeader::default()
        };
        sender.send(&header, b"sealed").expect("send");
    }
    assert!(sender.unsent_on_socket().is_none(), "nothing sealed yet");
    sender.prepare_unsent();
    let (fd, bytes) = sender.unsent_on_socket().expect("sealed records");
    let half = bytes[..bytes.len() / 2].to_vec();
    // SAFETY: the link owns `fd` and outlives this borrow.
    let socket = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let sent = socket2::SockRef::from(&socket).send(&half);
    sender.sent_by_caller(sent).expect("the rest flushed");
    sender
        .send(
            &FrameHeader {
                request_id: 3,
                ..FrameHeader::default()
            },
            b"later",
        )
        .expect("send");
    sender.flush().expect("flush");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut ids = Vec::new();
    while ids.len() < 4 && Instant::now() < deadline {
        receiver
            .receive(&mut |h, _| ids.push(h.request_id))
            .expect("receive");
    }
    assert_eq!(ids, [0, 1, 2, 3]);
}
