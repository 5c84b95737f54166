//! Regression tests for a peer that sends its last frames and closes at once, read by a loop
//! that waits in an edge-triggered poller (mio) as the data node's and the API's loops do.
//!
//! The data and the FIN arrive before the loop polls, so the poller reports one edge. A link
//! that stopped reading at the short read which took the data never read the EOF, and no
//! further edge came: the close went unnoticed forever. Every receive must now read until the
//! socket says WouldBlock (or say, through `input_pending`, that the caller must come back).
//!
//! Also: `send_capacity_bytes` / `encoded_frame_bytes`, which let a caller append a batch
//! all-or-nothing, agree with what `send` accepts; and `shutdown` shows the peer the close.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::RawFd;
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use rndb_transporter::tcp::TcpLink;
use rndb_transporter::uring::{uring_available, UringLink};
use rndb_transporter::{frame, FrameHeader, LinkSettings, NodeId, TransportError, Transporter};

/// Poll turns after which the close must have been reported (each waits at most 100 ms).
const POLL_TURNS_MAX: usize = 10;

fn settings() -> LinkSettings {
    LinkSettings {
        checksum: false,
        send_buffer_bytes_max: 1 << 20,
        overload_limit_bytes: 1 << 20,
        receive_buffer_bytes: 1 << 20,
    }
}

fn frame_bytes(request_id: u32, payload: &[u8]) -> Vec<u8> {
    let header = FrameHeader {
        signal: 7,
        receiver_block: 1,
        sender_block: 2,
        request_id,
    };
    let mut bytes = Vec::new();
    frame::encode_into(&mut bytes, &header, payload, false).expect("encode");
    bytes
}

/// The peer writes `frames` frames and closes before the loop first polls; the loop must get
/// every frame and then `Closed`, within a bounded number of poll turns.
fn frames_then_close_are_both_reported(mut link: Box<dyn Transporter>, mut peer: TcpStream) {
    let mut poll = Poll::new().expect("poller");
    let fd: RawFd = link.poll_fd();
    // mio registers edge-triggered (EPOLLET), like the data node's and the API's loops.
    poll.registry()
        .register(&mut SourceFd(&fd), Token(1), Interest::READABLE)
        .expect("register");
    const FRAMES: u32 = 3;
    let mut bytes = Vec::new();
    for request_id in 0..FRAMES {
        bytes.extend_from_slice(&frame_bytes(request_id, b"last words"));
    }
    peer.write_all(&bytes).expect("write frames");
    drop(peer);
    // Let data and FIN both land before the first poll.
    std::thread::sleep(Duration::from_millis(20));

    let mut events = Events::with_capacity(8);
    let mut received = Vec::new();
    for _ in 0..POLL_TURNS_MAX {
        let timeout = if link.input_pending() {
            Duration::ZERO
        } else {
            Duration::from_millis(100)
        };
        poll.poll(&mut events, Some(timeout)).expect("poll");
        if events.is_empty() && !link.input_pending() {
            continue;
        }
        match link.receive(&mut |header, _| received.push(header.request_id)) {
            Ok(_) => {}
            Err(TransportError::Closed { .. }) => {
                assert_eq!(
                    received,
                    (0..FRAMES).collect::<Vec<_>>(),
                    "every frame before the close is delivered, in order"
                );
                return;
            }
            Err(e) => panic!("unexpected receive error: {e}"),
        }
    }
    panic!(
        "the peer's close was not reported within {POLL_TURNS_MAX} poll turns \
         (frames received: {received:?})"
    );
}

#[test]
fn tcp_link_reports_frames_and_the_close_that_came_with_them() {
    let (client, server) = common::connected_streams();
    let link = TcpLink::new(server, NodeId(50), &settings()).expect("link");
    frames_then_close_are_both_reported(Box::new(link), client);
}

#[test]
fn uring_link_reports_frames_and_the_close_that_came_with_them() {
    if let Err(reason) = uring_available() {
        println!("skipped: io_uring unavailable: {reason}");
        return;
    }
    let (client, server) = common::connected_streams();
    let link = UringLink::new(server, NodeId(50), &settings()).expect("link");
    frames_then_close_are_both_reported(Box::new(link), client);
}

/// Sends until the capacity is used up, checking at every step that a frame fits exactly when
/// `send_capacity_bytes` says it does.
fn capacity_agrees_with_send(link: &mut dyn Transporter) {
    let header = FrameHeader::default();
    let payload = [0xAB; 1000];
    let frame_len = link.encoded_frame_bytes(payload.len());
    let mut sent = 0usize;
    loop {
        let capacity = link.send_capacity_bytes();
        let result = link.send(&header, &payload);
        if capacity >= frame_len {
            result.expect("a frame within the capacity is accepted");
            assert_eq!(link.send_capacity_bytes(), capacity - frame_len);
            sent += 1;
        } else {
            assert!(
                matches!(result, Err(TransportError::Overloaded { .. })),
                "a frame over the capacity is refused: {result:?}"
            );
            assert_eq!(
                link.send_capacity_bytes(),
                capacity,
                "refusal appends nothing"
            );
            break;
        }
    }
    assert!(sent > 0);
}

#[test]
fn send_capacity_agrees_with_send_on_tcp_and_uring() {
    let small = LinkSettings {
        send_buffer_bytes_max: 64 * 1024,
        overload_limit_bytes: 64 * 1024,
        ..settings()
    };
    for checksum in [false, true] {
        let settings = LinkSettings { checksum, ..small };
        let (_client, server) = common::connected_streams();
        let mut link = TcpLink::new(server, NodeId(50), &settings).expect("link");
        assert_eq!(
            link.encoded_frame_bytes(10),
            frame::encoded_len(10, checksum)
        );
        capacity_agrees_with_send(&mut link);
        if uring_available().is_ok() {
            let (_client, server) = common::connected_streams();
            let mut link = UringLink::new(server, NodeId(50), &settings).expect("link");
            capacity_agrees_with_send(&mut link);
        }
    }
}

#[test]
fn shutdown_shows_the_peer_a_close_while_the_link_is_kept() {
    let (mut client, server) = common::connected_streams();
    let mut link = TcpLink::new(server, NodeId(50), &settings()).expect("link");
    link.shutdown();
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut byte = [0u8; 1];
    assert_eq!(
        client.read(&mut byte).expect("read EOF"),
        0,
        "the peer sees EOF"
    );
    drop(link);
}
