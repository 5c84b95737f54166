//! Proves that a `Sleeper` sends a link's bytes and then sleeps until its epoll instance has an
//! event, in one call, reporting what the send did (all bytes; on a full socket WouldBlock or a
//! few) and the events it woke for; and that a link whose bytes the caller sent itself
//! (`unsent_on_socket` / `sent_by_caller`), in whole or in part, delivers every frame intact.
//! A sleep a signal interrupts returns without events, and dropping the sleeper then cancels
//! the wait still in the kernel without hanging, after which the poller reports input as
//! before.
//! Where the kernel cannot give a sleeper (no io_uring, or no EPOLL_WAIT before Linux 6.15),
//! the sleeper tests say "skipped: <reason>" and pass: only then.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Interest, Poll, Token};
use rndb_transporter::sleeper::{EpollEvent, Sleeper};
use rndb_transporter::tcp::TcpLink;
use rndb_transporter::uring::UringLink;
use rndb_transporter::{FlushStatus, FrameHeader, LinkSettings, NodeId, Transporter};

const TOKEN: Token = Token(7);

/// A poller with `stream` registered for input, and a sleeper on it; `None` (after saying why)
/// where this kernel cannot have a sleeper.
fn sleeper_on(stream: &TcpStream) -> Option<(Poll, Sleeper)> {
    let poll = Poll::new().expect("create a poller");
    poll.registry()
        .register(
            &mut SourceFd(&stream.as_raw_fd()),
            TOKEN,
            Interest::READABLE,
        )
        .expect("register the socket");
    match Sleeper::new(poll.as_raw_fd(), 16) {
        Ok(sleeper) => Some((poll, sleeper)),
        Err(reason) => {
            eprintln!("skipped: {reason}");
            None
        }
    }
}

fn collected(sleeper: &mut Sleeper) -> Vec<EpollEvent> {
    let mut events = Vec::new();
    sleeper.collect(|event| events.push(event));
    events
}

#[test]
fn sends_then_sleeps_until_the_answer_comes() {
    let (client, server) = common::connected_streams();
    let Some((_poll, mut sleeper)) = sleeper_on(&client) else {
        return;
    };
    // The peer reads the request and answers it; after 10 s it answers anyway, so that a
    // request that never arrived fails the assertions below instead of hanging the test.
    let peer = std::thread::spawn(move || {
        let mut server = server;
        server
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("set a read timeout");
        let mut request = [0u8; 5];
        let read = server.read_exact(&mut request).map(|()| request);
        server.write_all(b"answer").expect("answer");
        // The socket goes back open: its close must not be part of what the sleeper sees.
        (read, server)
    });
    let sent = sleeper
        .send_and_sleep(Some((client.as_raw_fd(), b"hello")))
        .expect("the ring works");
    assert_eq!(sent.map(|r| r.expect("the send succeeds")), Some(5));
    let (request, _server) = peer.join().expect("peer thread");
    let request = request.expect("the peer got 5 bytes");
    assert_eq!(&request, b"hello");
    let events = collected(&mut sleeper);
    assert!(
        events
            .iter()
            .any(|e| e.token == TOKEN.0 as u64 && e.is_readable() && !e.is_read_closed()),
        "woke for the answer: {events:?}"
    );
    // Collected once only.
    assert!(collected(&mut sleeper).is_empty());
}

#[test]
fn a_full_socket_takes_little_or_nothing_and_the_sleep_still_ends() {
    let (client, mut server) = common::connected_streams();
    let Some((_poll, mut sleeper)) = sleeper_on(&client) else {
        return;
    };
    socket2::SockRef::from(&client)
        .set_send_buffer_size(16 * 1024)
        .expect("set SO_SNDBUF");
    client.set_nonblocking(true).expect("non-blocking");
    let chunk = [0u8; 4096];
    let mut writer = &client;
    while writer.write(&chunk).is_ok() {}
    while writer.write(&chunk[..1]).is_ok() {}
    // Input is already waiting, so the sleep ends at once.
    server.write_all(b"x").expect("write to the client");
    let big = vec![1u8; 1 << 20];
    let sent = sleeper
        .send_and_sleep(Some((client.as_raw_fd(), &big)))
        .expect("the ring works")
        .expect("a send result");
    // The peer drains the loopback queue meanwhile, so a little may fit: never all of it, and
    // the call does not wait for room.
    match sent {
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock),
        Ok(bytes) => assert!(bytes < big.len(), "{bytes} bytes into a full socket"),
    }
    assert!(collected(&mut sleeper)
        .iter()
        .any(|e| e.token == TOKEN.0 as u64 && e.is_readable()));
}

#[test]
fn sleeping_without_sending_wakes_for_input() {
    let (client, mut server) = common::connected_streams();
    let Some((_poll, mut sleeper)) = sleeper_on(&client) else {
        return;
    };
    server.write_all(b"x").expect("write to the client");
    assert!(sleeper
        .send_and_sleep(None)
        .expect("the ring works")
        .is_none());
    assert_eq!(collected(&mut sleeper).len(), 1);
}

fn frame(i: u32) -> (FrameHeader, Vec<u8>) {
    let header = FrameHeader {
        signal: 100 + (i % 50) as u16,
        receiver_block: 1,
        sender_block: 2,
        request_id: i,
    };
    (header, i.to_le_bytes().repeat(1 + (i % 7) as usize))
}

/// Sends 200 frames from `a`: the caller writes the first `caller_writes` bytes of them itself
/// (through `a_socket`, a second descriptor of `a`'s socket), then reports that to the link;
/// `b` must receive all 200 in order.
fn caller_sends_part(
    mut a: Box<dyn Transporter>,
    a_socket: TcpStream,
    mut b: Box<dyn Transporter>,
    caller_writes: impl Fn(usize) -> usize,
) {
    const FRAMES: u32 = 200;
    for i in 0..FRAMES {
        let (header, payload) = frame(i);
        a.send(&header, &payload).expect("queue a frame");
    }
    let (_, bytes) = a.unsent_on_socket().expect("unsent bytes on a socket");
    let len = caller_writes(bytes.len());
    let written = (&a_socket).write(&bytes[..len]);
    let status = a
        .sent_by_caller(written)
        .expect("the link takes the result");
    if status == FlushStatus::Pending {
        while a.flush().expect("flush the rest") == FlushStatus::Pending {}
    }
    assert!(a.unsent_on_socket().is_none(), "nothing left unsent");
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < FRAMES as usize && Instant::now() < deadline {
        b.receive(&mut |header, payload| got.push((*header, payload.to_vec())))
            .expect("receive");
    }
    assert_eq!(got.len(), FRAMES as usize, "every frame arrived");
    for (i, (header, payload)) in got.into_iter().enumerate() {
        assert_eq!((header, payload), frame(i as u32), "frame {i} intact");
    }
}

/// A TCP link `a` with a second descriptor of its socket, and a TCP link `b` at the other end.
fn tcp_pair() -> (Box<dyn Transporter>, TcpStream, Box<dyn Transporter>) {
    let (client, server) = common::connected_streams();
    let settings = LinkSettings::default();
    let a_socket = client.try_clone().expect("duplicate the socket");
    (
        Box::new(TcpLink::new(client, NodeId(2), &settings).expect("TCP link")),
        a_socket,
        Box::new(TcpLink::new(server, NodeId(1), &settings).expect("TCP link")),
    )
}

#[test]
fn a_tcp_link_whose_bytes_the_caller_sent_delivers_every_frame() {
    let (a, a_socket, b) = tcp_pair();
    caller_sends_part(a, a_socket, b, |len| len);
}

#[test]
fn a_tcp_link_finishes_a_partial_send_of_the_caller() {
    let (a, a_socket, b) = tcp_pair();
    caller_sends_part(a, a_socket, b, |len| len / 3);
}

#[test]
fn an_io_uring_link_finishes_a_partial_send_of_the_caller() {
    if let Err(reason) = rndb_transporter::uring::uring_available() {
        eprintln!("skipped: io_uring unavailable: {reason}");
        return;
    }
    let (client, server) = common::connected_streams();
    let settings = LinkSettings::default();
    let a_socket = client.try_clone().expect("duplicate the socket");
    let a = Box::new(UringLink::new(client, NodeId(2), &settings).expect("Uring link"));
    let b = Box::new(TcpLink::new(server, NodeId(1), &settings).expect("TCP link"));
    caller_sends_part(a, a_socket, b, |len| len / 2);
}

/// A signal handler that does nothing: the signal only interrupts the sleep.
extern "C" fn ignore_signal(_: libc::c_int) {}

/// Installs `ignore_signal` for SIGUSR1 without SA_RESTART, so that a sleep it interrupts
/// returns EINTR instead of being restarted.
fn interrupt_with_sigusr1() {
    // SAFETY: a zeroed sigaction is a valid value (empty mask, no flags); the handler is an
    // `extern "C"` function that touches nothing.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = ignore_signal as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut action.sa_mask);
        assert_eq!(
            libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut()),
            0,
            "install a SIGUSR1 handler"
        );
    }
}

#[test]
fn a_sleep_a_signal_interrupts_leaves_its_wait_to_a_later_call_and_drop_cancels_it() {
    let (client, mut server) = common::connected_streams();
    if let Err(reason) = rndb_transporter::uring::uring_available() {
        eprintln!("skipped: {reason}");
        return;
    }
    interrupt_with_sigusr1();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let sleeping = std::thread::spawn(move || {
        // A sleeper is used by the thread that made it (its ring is single-issuer).
        let Some((poll, mut sleeper)) = sleeper_on(&client) else {
            let _ = done_tx.send(None);
            return None;
        };
        // SAFETY: pthread_self has no preconditions.
        tid_tx
            .send(unsafe { libc::pthread_self() })
            .expect("send the thread id");
        // Nothing is readable: only the signal ends this sleep.
        let sent = sleeper.send_and_sleep(None).expect("the ring works");
        let events = collected(&mut sleeper);
        let _ = done_tx.send(Some((sent.is_none(), events.len())));
        // The EPOLL_WAIT is still in the kernel: dropping the sleeper must cancel it and wait.
        drop(sleeper);
        Some((poll, client))
    });
    let Ok(thread) = tid_rx.recv() else {
        assert!(
            matches!(done_rx.recv(), Ok(None)),
            "the thread said why it stopped"
        );
        return;
    };
    // The thread may not be asleep yet when a signal comes: signal until the sleep ends.
    let deadline = Instant::now() + Duration::from_secs(10);
    let outcome = loop {
        // SAFETY: `thread` is alive until it sends on `done_tx`, and SIGUSR1 has a handler.
        unsafe { libc::pthread_kill(thread, libc::SIGUSR1) };
        match done_rx.recv_timeout(Duration::from_millis(20)) {
            Ok(outcome) => break outcome,
            Err(_) if Instant::now() < deadline => continue,
            Err(e) => panic!("the sleep did not end on a signal: {e}"),
        }
    };
    assert_eq!(
        outcome,
        Some((true, 0)),
        "no send, no event: the signal ended the sleep"
    );
    let (mut poll, _client) = sleeping
        .join()
        .expect("the sleeping thread")
        .expect("a sleeper");
    // The socket and the poller outlive the cancelled wait, and input now goes to the poller,
    // not into a freed buffer.
    server.write_all(b"x").expect("write to the client");
    let mut events = mio::Events::with_capacity(4);
    poll.poll(&mut events, Some(Duration::from_secs(5)))
        .expect("poll");
    assert_eq!(
        events.iter().count(),
        1,
        "the input is reported to the poller"
    );
}
