//! Proves that the SHM link passes every transporter conformance test, and the SHM-specific
//! promises: a sleeping receiver is woken through its wake-up FIFO, a receive takes a long backlog
//! in slices, a corrupt ring index or length closes the link with BadFrame, mismatched configs
//! are refused, and no /dev/shm file outlives set-up.

use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use rndb_config::{LinkConfig, TransporterKind};
use rndb_transporter::conformance::{self, LinkPair, RawWriter};
use rndb_transporter::shm::{self, ShmFault, ShmLink, SHM_SEGMENT_BYTES_MIN};
use rndb_transporter::{
    FrameHeader, LinkSettings, NodeId, TransportError, Transporter, SHM_RECEIVE_SLICE_BYTES,
};

/// The longest any test here waits for progress.
const WAIT_DEADLINE: Duration = Duration::from_secs(10);

/// Node 1 (the server, which creates the segment) and node 2 (the client).
const SERVER_NODE: NodeId = NodeId(1);
const CLIENT_NODE: NodeId = NodeId(2);
const CLUSTER_ID: u64 = 0x5E6_7E57;

fn link_config(settings: LinkSettings) -> LinkConfig {
    LinkConfig {
        node1: SERVER_NODE,
        node2: CLIENT_NODE,
        kind: TransporterKind::Shm,
        explicit: true,
        send_buffer_memory_bytes: settings.send_buffer_bytes_max as u64,
        receive_buffer_memory_bytes: settings.receive_buffer_bytes as u64,
        checksum: settings.checksum,
        overload_limit_bytes: settings.overload_limit_bytes as u64,
        shm_size_bytes: SHM_SEGMENT_BYTES_MIN,
        shm_spintime_us: 0,
        over_tcp: None,
    }
}

/// Runs both set-up sides over a loopback TCP pair; the client side runs on a helper thread.
fn setup_pair(
    server_link: &LinkConfig,
    client_link: &LinkConfig,
) -> (
    Result<ShmLink, TransportError>,
    Result<ShmLink, TransportError>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let address = listener.local_addr().expect("listener address");
    let client_link = client_link.clone();
    let client = std::thread::spawn(move || {
        let stream = TcpStream::connect(address).expect("connect loopback");
        shm::client_setup(stream, CLIENT_NODE, SERVER_NODE, &client_link)
    });
    let (stream, _) = listener.accept().expect("accept loopback");
    let server = shm::server_setup(stream, CLIENT_NODE, SERVER_NODE, CLUSTER_ID, server_link);
    (server, client.join().expect("client set-up thread"))
}

fn connected_pair(settings: LinkSettings) -> (ShmLink, ShmLink) {
    let link = link_config(settings);
    let (server, client) = setup_pair(&link, &link);
    (
        server.expect("server set-up"),
        client.expect("client set-up"),
    )
}

struct Shm;

impl LinkPair for Shm {
    /// `a` is node 1's link (the server side), `b` node 2's (the client side).
    fn make(settings: LinkSettings) -> (Box<dyn Transporter>, Box<dyn Transporter>) {
        let (a, b) = connected_pair(settings);
        (Box::new(a), Box::new(b))
    }

    /// The raw writer is the peer link itself, writing unchecked records into its ring.
    fn make_raw(settings: LinkSettings) -> Option<(Box<dyn Transporter>, RawWriter)> {
        let (a, mut b) = connected_pair(settings);
        let writer: RawWriter =
            Box::new(move |bytes: &[u8]| b.send_raw_record(bytes).map_err(std::io::Error::other));
        Some((Box::new(a), writer))
    }
}

#[test]
fn ordering() {
    conformance::ordering::<Shm>();
}

#[test]
fn batches() {
    conformance::batches::<Shm>();
}

#[test]
fn large_frames() {
    conformance::large_frames::<Shm>();
}

#[test]
fn back_pressure() {
    conformance::back_pressure::<Shm>();
}

#[test]
fn peer_death() {
    conformance::peer_death::<Shm>();
}

#[test]
fn bad_frames() {
    conformance::bad_frames::<Shm>();
}

/// SHM honours `limit_receive` as the socket links do (it slices itself at
/// `SHM_RECEIVE_SLICE_BYTES` otherwise).
#[test]
fn limited_receive() {
    conformance::limited_receive::<Shm>();
}

fn header(index: u32) -> FrameHeader {
    FrameHeader {
        signal: 7,
        receiver_block: 1,
        sender_block: 2,
        request_id: index,
    }
}

/// Waits until `fd` is readable, for at most `timeout`.
fn readable_within(fd: i32, timeout: Duration) -> bool {
    let mut poller = mio::Poll::new().expect("poller");
    let mut source = mio::unix::SourceFd(&fd);
    poller
        .registry()
        .register(&mut source, mio::Token(0), mio::Interest::READABLE)
        .expect("register the socket");
    let mut events = mio::Events::with_capacity(4);
    poller.poll(&mut events, Some(timeout)).expect("poll");
    !events.is_empty()
}

/// Receives until `want` frames arrived or the deadline passes; returns the request ids.
fn receive_frames(link: &mut ShmLink, want: usize) -> Vec<u32> {
    let deadline = Instant::now() + WAIT_DEADLINE;
    let mut ids = Vec::new();
    while ids.len() < want {
        assert!(
            Instant::now() < deadline,
            "timed out with {} of {want} frames",
            ids.len()
        );
        link.receive(&mut |h: &FrameHeader, _: &[u8]| ids.push(h.request_id))
            .expect("receive");
    }
    ids
}

#[test]
fn a_sleeping_receiver_is_woken_through_its_fifo() {
    let (mut server, mut client) = connected_pair(LinkSettings::default());
    assert_eq!(client.kind(), TransporterKind::Shm);
    for round in 0..20 {
        assert!(!client.input_pending());
        assert!(
            client.prepare_to_sleep(),
            "round {round}: an empty ring lets the client sleep"
        );
        server.send(&header(round), b"wake up").expect("send");
        server.flush().expect("flush");
        assert!(
            readable_within(client.poll_fd(), Duration::from_secs(1)),
            "round {round}: the wake-up byte makes the FIFO readable"
        );
        client.woke_up();
        assert!(
            client.input_pending(),
            "round {round}: the frame is in the ring"
        );
        assert_eq!(receive_frames(&mut client, 1), vec![round]);
    }
}

#[test]
fn a_long_backlog_is_received_in_slices_in_order() {
    let (mut server, mut client) = connected_pair(LinkSettings::default());
    let payload = [5u8; 400];
    let frames = 200u32; // about 80 KiB, five slices
    for id in 0..frames {
        server.send(&header(id), &payload).expect("send");
    }
    server.flush().expect("flush");
    let mut first = Vec::new();
    client
        .receive(&mut |h: &FrameHeader, p: &[u8]| {
            assert_eq!(p, payload);
            first.push(h.request_id)
        })
        .expect("receive");
    let frame_bytes = client.encoded_frame_bytes(payload.len());
    let slice_frames = SHM_RECEIVE_SLICE_BYTES.div_ceil(frame_bytes);
    assert_eq!(first.len(), slice_frames, "one receive takes one slice");
    assert!(client.input_pending(), "the rest waits in the ring");
    let rest = receive_frames(&mut client, frames as usize - first.len());
    let all: Vec<u32> = first.into_iter().chain(rest).collect();
    assert_eq!(all, (0..frames).collect::<Vec<_>>());
    assert!(!client.input_pending());
}

#[test]
fn a_receiver_that_is_awake_gets_no_wake_up_byte() {
    let (mut server, mut client) = connected_pair(LinkSettings::default());
    server.send(&header(1), b"spin").expect("send");
    server.flush().expect("flush");
    assert!(
        client.input_pending(),
        "a spinning receiver sees the frame without a system call"
    );
    assert!(
        !client.prepare_to_sleep(),
        "data is waiting: the receiver must not sleep"
    );
    assert!(
        !readable_within(client.poll_fd(), Duration::from_millis(50)),
        "no byte was needed"
    );
    assert_eq!(receive_frames(&mut client, 1), vec![1]);
}

#[test]
fn no_segment_file_outlives_set_up() {
    let (server, client) = connected_pair(LinkSettings::default());
    assert_eq!(server.segment_path(), client.segment_path());
    assert!(server.segment_path().starts_with(shm::SHM_DIR));
    assert!(
        !server.segment_path().exists(),
        "the server unlinks the file once the client acked"
    );
}

/// Injects `fault` into the client's inbound ring after one frame arrived in it, and checks the
/// client answers BadFrame naming the server, with `reason` in it.
fn check_fault(fault: ShmFault, reason: &str) {
    let (mut server, mut client) = connected_pair(LinkSettings {
        checksum: true,
        ..Default::default()
    });
    server.send(&header(1), b"first").expect("send");
    server.flush().expect("flush");
    assert_eq!(receive_frames(&mut client, 1), vec![1]);
    server
        .send(&header(2), b"second, to be corrupted")
        .expect("send");
    server.flush().expect("flush");
    client.inject_fault(fault);
    let deadline = Instant::now() + WAIT_DEADLINE;
    loop {
        assert!(Instant::now() < deadline, "{fault:?}: no BadFrame");
        match client.receive(&mut |_: &FrameHeader, _: &[u8]| panic!("{fault:?}: frame delivered"))
        {
            Ok(_) => continue,
            Err(TransportError::BadFrame { peer, reason: why }) => {
                assert_eq!(peer, SERVER_NODE);
                assert!(why.contains(reason), "{fault:?}: {why}");
                return;
            }
            Err(e) => panic!("{fault:?}: expected BadFrame, got {e}"),
        }
    }
}

#[test]
fn corrupt_ring_indices_and_lengths_close_the_link() {
    check_fault(ShmFault::InboundTail(1 << 40), "ring tail");
    check_fault(ShmFault::InboundTail(3), "ring tail");
    check_fault(ShmFault::InboundRecordLength(u32::MAX), "exceeds the limit");
    check_fault(ShmFault::InboundRecordLength(20_000), "published tail");
    check_fault(ShmFault::InboundRecordLength(0), "wrap marker");
    check_fault(ShmFault::InboundRecordLength(24), "CRC-32");
}

#[test]
fn mismatched_configs_are_refused_on_both_sides() {
    let server_link = link_config(LinkSettings {
        checksum: true,
        ..Default::default()
    });
    let mut client_link = server_link.clone();
    client_link.checksum = false;
    let (server, client) = setup_pair(&server_link, &client_link);
    assert!(
        matches!(server, Err(TransportError::Handshake(_))),
        "{server:?}"
    );
    assert!(
        matches!(client, Err(TransportError::Handshake(_))),
        "{client:?}"
    );
    let mut client_link = server_link.clone();
    client_link.shm_size_bytes *= 2;
    let (server, client) = setup_pair(&server_link, &client_link);
    assert!(
        server.is_err() && client.is_err(),
        "ShmSize mismatch: {server:?} / {client:?}"
    );
}

#[test]
fn a_too_small_shm_size_is_an_error_not_a_panic() {
    let mut link = link_config(LinkSettings::default());
    link.shm_size_bytes = 64 * 1024;
    let (server, client) = setup_pair(&link, &link);
    assert!(server.is_err(), "{server:?}");
    assert!(
        client.is_err(),
        "the client sees the connection close: {client:?}"
    );
}
