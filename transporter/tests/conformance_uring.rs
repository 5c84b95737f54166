//! Proves that the io_uring link passes every transporter conformance test (ordering, batches,
//! large frames, back-pressure, peer death, bad frames) over real loopback sockets, both between
//! two Uring links and between a Uring link and a TCP link (the bytes on the wire are the same).
//! Where the kernel refuses io_uring, each test says "skipped: io_uring unavailable: <reason>"
//! and passes: only then.

mod common;

use std::io::Write;
use std::net::TcpStream;

use rndb_transporter::conformance::{self, LinkPair, RawWriter};
use rndb_transporter::tcp::TcpLink;
use rndb_transporter::uring::{uring_available, UringLink};
use rndb_transporter::{LinkSettings, NodeId, Transporter, TransporterKind};

/// Kernel socket buffer bytes for test sockets: small, so back-pressure reaches the link's own
/// send buffer after a few hundred KiB instead of many MiB of kernel buffering.
const SOCKET_BUFFER_BYTES: usize = 128 * 1024;

/// Both ends Uring.
struct Uring;

/// `a` is a Uring link, `b` a TCP link.
struct UringToTcp;

/// `a` is a TCP link, `b` a Uring link.
struct TcpToUring;

fn small_socket_buffers(stream: &TcpStream) {
    let socket = socket2::SockRef::from(stream);
    socket
        .set_send_buffer_size(SOCKET_BUFFER_BYTES)
        .expect("set SO_SNDBUF");
    socket
        .set_recv_buffer_size(SOCKET_BUFFER_BYTES)
        .expect("set SO_RCVBUF");
}

fn uring(stream: TcpStream, peer: u16, settings: &LinkSettings) -> Box<dyn Transporter> {
    let link = UringLink::new(stream, NodeId(peer), settings).expect("a Uring link");
    assert_eq!(link.kind(), TransporterKind::Uring);
    Box::new(link)
}

fn tcp(stream: TcpStream, peer: u16, settings: &LinkSettings) -> Box<dyn Transporter> {
    Box::new(TcpLink::new(stream, NodeId(peer), settings).expect("a TCP link"))
}

type MakeLink = fn(TcpStream, u16, &LinkSettings) -> Box<dyn Transporter>;

/// `a` is node 1's link to node 2; `b` is node 2's link to node 1.
fn pair(
    settings: LinkSettings,
    make_a: MakeLink,
    make_b: MakeLink,
) -> (Box<dyn Transporter>, Box<dyn Transporter>) {
    let (client, server) = common::connected_streams();
    small_socket_buffers(&client);
    small_socket_buffers(&server);
    (make_a(client, 2, &settings), make_b(server, 1, &settings))
}

/// A Uring link that receives what the returned writer writes raw.
fn raw(settings: LinkSettings) -> Option<(Box<dyn Transporter>, RawWriter)> {
    let (client, server) = common::connected_streams();
    let link = uring(server, 1, &settings);
    let mut raw = client;
    let writer: RawWriter = Box::new(move |bytes: &[u8]| raw.write_all(bytes));
    Some((link, writer))
}

impl LinkPair for Uring {
    fn make(settings: LinkSettings) -> (Box<dyn Transporter>, Box<dyn Transporter>) {
        pair(settings, uring, uring)
    }

    fn make_raw(settings: LinkSettings) -> Option<(Box<dyn Transporter>, RawWriter)> {
        raw(settings)
    }
}

impl LinkPair for UringToTcp {
    fn make(settings: LinkSettings) -> (Box<dyn Transporter>, Box<dyn Transporter>) {
        pair(settings, uring, tcp)
    }
}

impl LinkPair for TcpToUring {
    fn make(settings: LinkSettings) -> (Box<dyn Transporter>, Box<dyn Transporter>) {
        pair(settings, tcp, uring)
    }
}

/// False (after saying why) when this kernel refuses io_uring.
fn available() -> bool {
    match uring_available() {
        Ok(()) => true,
        Err(reason) => {
            println!("skipped: io_uring unavailable: {reason}");
            false
        }
    }
}

/// One `#[test]` per conformance body and link pairing.
macro_rules! conformance_tests {
    ($($name:ident: $body:ident::<$pair:ty>;)*) => {
        $(
            #[test]
            fn $name() {
                if available() {
                    conformance::$body::<$pair>();
                }
            }
        )*
    };
}

conformance_tests! {
    ordering: ordering::<Uring>;
    batches: batches::<Uring>;
    large_frames: large_frames::<Uring>;
    back_pressure: back_pressure::<Uring>;
    peer_death: peer_death::<Uring>;
    bad_frames: bad_frames::<Uring>;
    limited_receive: limited_receive::<Uring>;
    uring_to_tcp_ordering: ordering::<UringToTcp>;
    uring_to_tcp_batches: batches::<UringToTcp>;
    uring_to_tcp_large_frames: large_frames::<UringToTcp>;
    uring_to_tcp_back_pressure: back_pressure::<UringToTcp>;
    uring_to_tcp_peer_death: peer_death::<UringToTcp>;
    tcp_to_uring_ordering: ordering::<TcpToUring>;
    tcp_to_uring_batches: batches::<TcpToUring>;
    tcp_to_uring_back_pressure: back_pressure::<TcpToUring>;
    tcp_to_uring_peer_death: peer_death::<TcpToUring>;
}

/// Where io_uring works, a fallback-capable open gives a Uring link; the helper the data node
/// and the API use is exercised end to end here.
#[test]
fn open_link_or_tcp_prefers_uring() {
    let (client, _server) = common::connected_streams();
    let link =
        rndb_transporter::uring::open_link_or_tcp(client, NodeId(2), &LinkSettings::default())
            .expect("open a link");
    let expected = if uring_available().is_ok() {
        TransporterKind::Uring
    } else {
        TransporterKind::Tcp
    };
    assert_eq!(link.kind(), expected);
}
