//! Proves that the TCP link passes every transporter conformance test (ordering, batches, large
//! frames, back-pressure, peer death, bad frames) over real loopback sockets.

mod common;

use std::io::Write;
use std::net::TcpStream;

use rndb_transporter::conformance::{self, LinkPair, RawWriter};
use rndb_transporter::tcp::TcpLink;
use rndb_transporter::{LinkSettings, NodeId, Transporter};

/// Kernel socket buffer bytes for test sockets: small, so back-pressure reaches the link's own
/// send buffer after a few hundred KiB instead of many MiB of kernel buffering.
const SOCKET_BUFFER_BYTES: usize = 128 * 1024;

struct Tcp;

fn small_socket_buffers(stream: &TcpStream) {
    let socket = socket2::SockRef::from(stream);
    socket
        .set_send_buffer_size(SOCKET_BUFFER_BYTES)
        .expect("set SO_SNDBUF");
    socket
        .set_recv_buffer_size(SOCKET_BUFFER_BYTES)
        .expect("set SO_RCVBUF");
}

impl LinkPair for Tcp {
    /// `a` is node 1's link to node 2; `b` is node 2's link to node 1.
    fn make(settings: LinkSettings) -> (Box<dyn Transporter>, Box<dyn Transporter>) {
        let (client, server) = common::connected_streams();
        small_socket_buffers(&client);
        small_socket_buffers(&server);
        let a = TcpLink::new(client, NodeId(2), &settings).expect("node 1's link");
        let b = TcpLink::new(server, NodeId(1), &settings).expect("node 2's link");
        (Box::new(a), Box::new(b))
    }

    fn make_raw(settings: LinkSettings) -> Option<(Box<dyn Transporter>, RawWriter)> {
        let (client, server) = common::connected_streams();
        let link = TcpLink::new(server, NodeId(1), &settings).expect("node 2's link");
        let mut raw = client;
        let writer: RawWriter = Box::new(move |bytes: &[u8]| raw.write_all(bytes));
        Some((Box::new(link), writer))
    }
}

#[test]
fn ordering() {
    conformance::ordering::<Tcp>();
}

#[test]
fn batches() {
    conformance::batches::<Tcp>();
}

#[test]
fn large_frames() {
    conformance::large_frames::<Tcp>();
}

#[test]
fn back_pressure() {
    conformance::back_pressure::<Tcp>();
}

#[test]
fn peer_death() {
    conformance::peer_death::<Tcp>();
}

#[test]
fn bad_frames() {
    conformance::bad_frames::<Tcp>();
}

#[test]
fn limited_receive() {
    conformance::limited_receive::<Tcp>();
}
