//! Proves TCP-specific link behaviour the conformance suite cannot express generically: a reset
//! connection reads as Closed, sending into a dead peer ends in Closed, a bad frame stays
//! reported, the link exposes its socket to the poller, and a loopback link names the CPU its
//! peer sends from.

mod common;

use std::io::Write;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use rndb_transporter::tcp::TcpLink;
use rndb_transporter::{FrameHeader, LinkSettings, NodeId, TransportError, Transporter};

const DEADLINE: Duration = Duration::from_secs(10);

fn receive_until_error(link: &mut TcpLink) -> TransportError {
    let deadline = Instant::now() + DEADLINE;
    loop {
        match link.receive(&mut |_, _| {}) {
            Ok(_) => assert!(Instant::now() < deadline, "no error within {DEADLINE:?}"),
            Err(e) => return e,
        }
        std::thread::yield_now();
    }
}

#[test]
fn idle_link_receives_nothing_and_exposes_its_socket() {
    let (client, _server) = common::connected_streams();
    let fd = client.as_raw_fd();
    let mut link = TcpLink::new(client, NodeId(2), &LinkSettings::default()).expect("link");
    assert_eq!(link.poll_fd(), fd);
    assert_eq!(
        link.receive(&mut |_, _| panic!("no frame was sent"))
            .expect("receive"),
        0
    );
    assert_eq!(link.peer(), NodeId(2));
    assert!(link.peer_addr().expect("peer address").ip().is_loopback());
    assert!(format!("{link:?}").contains("peer"));
}

#[test]
fn connection_reset_reads_as_closed() {
    let (client, server) = common::connected_streams();
    // SO_LINGER of zero makes close() send a reset instead of a FIN.
    socket2::SockRef::from(&client)
        .set_linger(Some(Duration::ZERO))
        .expect("set SO_LINGER");
    let mut link = TcpLink::new(server, NodeId(7), &LinkSettings::default()).expect("link");
    drop(client);
    let err = receive_until_error(&mut link);
    assert!(
        matches!(err, TransportError::Closed { peer: NodeId(7) }),
        "got {err:?}"
    );
}

#[test]
fn sending_into_a_dead_peer_ends_in_closed() {
    let (client, server) = common::connected_streams();
    let mut link = TcpLink::new(client, NodeId(3), &LinkSettings::default()).expect("link");
    drop(server);
    let deadline = Instant::now() + DEADLINE;
    let header = FrameHeader::default();
    let err = loop {
        assert!(
            Instant::now() < deadline,
            "sending never noticed the dead peer"
        );
        match link
            .send(&header, b"anyone there?")
            .and_then(|()| link.flush())
        {
            Ok(_) => std::thread::yield_now(),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(err, TransportError::Closed { peer: NodeId(3) }),
        "got {err:?}"
    );
}

#[test]
fn a_bad_frame_stays_reported() {
    let (mut client, server) = common::connected_streams();
    let mut link = TcpLink::new(server, NodeId(4), &LinkSettings::default()).expect("link");
    client.write_all(&[0xFF; 16]).expect("write garbage");
    let first = receive_until_error(&mut link);
    assert!(
        matches!(
            first,
            TransportError::BadFrame {
                peer: NodeId(4),
                ..
            }
        ),
        "got {first:?}"
    );
    let second = link
        .receive(&mut |_, _| {})
        .expect_err("the link stays failed");
    assert_eq!(first.to_string(), second.to_string());
}

#[test]
fn frames_before_a_close_are_delivered_then_closed() {
    let (client, server) = common::connected_streams();
    let settings = LinkSettings::default();
    let mut sender = TcpLink::new(client, NodeId(1), &settings).expect("sender");
    let mut receiver = TcpLink::new(server, NodeId(2), &settings).expect("receiver");
    for request_id in 0..3 {
        let header = FrameHeader {
            request_id,
            ..FrameHeader::default()
        };
        sender.send(&header, b"last words").expect("send");
    }
    assert_eq!(
        sender.flush().expect("flush"),
        rndb_transporter::FlushStatus::Done
    );
    drop(sender);
    let mut request_ids = Vec::new();
    let err = loop {
        match receiver.receive(&mut |header, _| request_ids.push(header.request_id)) {
            Ok(_) => std::thread::yield_now(),
            Err(e) => break e,
        }
    };
    assert_eq!(request_ids, [0, 1, 2]);
    assert!(
        matches!(err, TransportError::Closed { peer: NodeId(2) }),
        "got {err:?}"
    );
}

/// A loopback link reports the CPU its peer last sent from (SO_INCOMING_CPU): the data node
/// skips early flushes to a peer on its own CPU, which could only read them by preempting it.
#[test]
fn a_loopback_link_names_the_cpu_its_peer_sends_from() {
    use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    let allowed = sched_getaffinity(Pid::from_raw(0)).expect("this thread's CPUs");
    let cpus: Vec<usize> = (0..CpuSet::count())
        .filter(|&cpu| allowed.is_set(cpu).unwrap_or(false))
        .collect();
    let (client, server) = common::connected_streams();
    let settings = LinkSettings::default();
    let mut receiver = TcpLink::new(server, NodeId(1), &settings).expect("receiving link");
    let mut sender = TcpLink::new(client, NodeId(2), &settings).expect("sending link");
    for &cpu in cpus.iter().take(2) {
        sender = std::thread::spawn(move || {
            let mut set = CpuSet::new();
            set.set(cpu).expect("a CPU of this machine");
            sched_setaffinity(Pid::from_raw(0), &set).expect("pin the sending thread");
            let header = FrameHeader {
                signal: 1,
                receiver_block: 0,
                sender_block: 0,
                request_id: 7,
            };
            sender.send(&header, b"where am I").expect("send");
            sender.flush().expect("flush");
            sender
        })
        .join()
        .expect("the sending thread");
        let deadline = Instant::now() + DEADLINE;
        let mut got = 0;
        while got == 0 {
            got = receiver.receive(&mut |_, _| {}).expect("receive");
            assert!(Instant::now() < deadline, "no frame within {DEADLINE:?}");
        }
        assert_eq!(receiver.loopback_peer_cpu(), Some(cpu));
    }
}
