//! Micro benchmark: the cheapest a send and a receive of one small message can be through
//! io_uring on this kernel, against the two plain system calls, with no rndb code in the way.
//! It is the floor under issue 7's "io_uring batch_pk ≤ TCP": a batch_pk execute is one
//! message each way, so an io_uring link can at best fold its send, its wait and its receive
//! into fewer kernel entries; if even that costs more than TCP's system calls, no link design
//! can make the exchange cheaper than TCP.
//!
//! One thread, a connected loopback TCP pair with TCP_NODELAY; each round sends 64 bytes on one
//! end and receives them on the other (no wake-up involved: the bytes are queued by the time
//! the receive runs). Measured four ways:
//!
//! - `send` + `recv`: two system calls.
//! - two `io_uring_enter`s: a SEND, submitted and reaped, then a RECV.
//! - one `io_uring_enter`: the SEND and the RECV submitted together, in that order (the kernel
//!   issues a batch's SQEs in order, so the RECV finds the bytes; the result check says so).
//! - one `io_uring_enter` with the two linked (IOSQE_IO_LINK), as a link would have to do it to
//!   be sure of the order.
//!
//! Every SQE carries MSG_DONTWAIT, as rndb's links do, so each completes inline.
//!
//! Then a ping-pong between two threads pinned to one CPU (as testread-perf's client and the
//! data node are), where waking the other side is part of every round trip:
//!
//! - blocking `send` + `recv` on each side: two system calls per side, the least possible;
//! - `send`, then `recv` on a non-blocking socket and `epoll_wait` until it is readable, as
//!   rndb's TCP link and loops do;
//! - io_uring at its best: each side makes one `io_uring_enter` per round trip that submits its
//!   SEND and a RECV for the next message (without MSG_DONTWAIT, so the kernel arms it) and
//!   sleeps until that RECV completes;
//! - the same with `IORING_SETUP_DEFER_TASKRUN`, so the RECV completes when its thread waits
//!   rather than by interrupting it.
//!
//! Rounds alternate the cells; the table gives each one's median.
//!
//! Run: `cargo bench -p rndb-transporter --bench uring_floor`

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use io_uring::{opcode, squeue, types, IoUring};
use nix::sched::{sched_setaffinity, CpuSet};
use nix::unistd::Pid;

const MESSAGE_BYTES: usize = 64;
const CELL_DURATION: Duration = Duration::from_millis(500);
const ROUNDS: usize = 5;

fn pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let client = TcpStream::connect(listener.local_addr().expect("address")).expect("connect");
    let (server, _) = listener.accept().expect("accept");
    for stream in [&client, &server] {
        stream.set_nodelay(true).expect("TCP_NODELAY");
    }
    (client, server)
}

/// Runs `round` for [`CELL_DURATION`]; returns µs per round.
fn time(mut round: impl FnMut()) -> f64 {
    let mut rounds = 0u64;
    let start = Instant::now();
    while start.elapsed() < CELL_DURATION {
        for _ in 0..100 {
            round();
        }
        rounds += 100;
    }
    start.elapsed().as_secs_f64() * 1e6 / rounds as f64
}

fn syscalls() -> f64 {
    let (mut a, mut b) = pair();
    let out = [7u8; MESSAGE_BYTES];
    let mut into = [0u8; MESSAGE_BYTES];
    time(|| {
        a.write_all(&out).expect("send");
        b.read_exact(&mut into).expect("recv");
    })
}

/// Submits what is queued, waits for `want` completions and checks every result is a whole
/// message.
fn enter(ring: &mut IoUring, want: usize) {
    ring.submit_and_wait(want).expect("io_uring_enter");
    let mut seen = 0;
    for cqe in ring.completion() {
        assert_eq!(
            cqe.result(),
            MESSAGE_BYTES as i32,
            "operation {}",
            cqe.user_data()
        );
        seen += 1;
    }
    assert_eq!(seen, want, "completions posted inline");
}

/// How the SEND and the RECV are submitted.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Submit {
    Separately,
    Together,
    Linked,
}

fn uring(how: Submit) -> f64 {
    let (a, b) = pair();
    let mut ring = IoUring::new(8).expect("io_uring_setup");
    ring.submitter()
        .register_files(&[a.as_raw_fd(), b.as_raw_fd()])
        .expect("register the sockets");
    let out = [7u8; MESSAGE_BYTES];
    let mut into = [0u8; MESSAGE_BYTES];
    let send = opcode::Send::new(types::Fixed(0), out.as_ptr(), MESSAGE_BYTES as u32)
        .flags(libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
        .build()
        .user_data(1);
    let recv = opcode::Recv::new(types::Fixed(1), into.as_mut_ptr(), MESSAGE_BYTES as u32)
        .flags(libc::MSG_DONTWAIT)
        .build()
        .user_data(2);
    let linked_send = send.clone().flags(squeue::Flags::IO_LINK);
    let figure = time(|| {
        // SAFETY: `out` and `into` outlive the ring's use of them: every operation is reaped
        // (inside `enter`) before this closure returns, and nothing else touches them.
        unsafe {
            if how != Submit::Separately {
                let mut sq = ring.submission();
                let first = if how == Submit::Linked {
                    &linked_send
                } else {
                    &send
                };
                sq.push(first).expect("room for the SEND");
                sq.push(&recv).expect("room for the RECV");
                drop(sq);
                enter(&mut ring, 2);
            } else {
                ring.submission().push(&send).expect("room for the SEND");
                enter(&mut ring, 1);
                ring.submission().push(&recv).expect("room for the RECV");
                enter(&mut ring, 1);
            }
        }
    });
    drop(ring);
    std::hint::black_box(&into);
    figure
}

/// Pins the calling thread to `cpu`.
fn pin(cpu: usize) {
    let mut set = CpuSet::new();
    set.set(cpu).expect("CPU index within the CPU set");
    sched_setaffinity(Pid::from_raw(0), &set).expect("sched_setaffinity");
}

/// One side of an io_uring ping-pong: each round trip is one `io_uring_enter` that sends (but
/// for the echo side's first) and waits for the RECV of the next message.
struct UringSide {
    ring: IoUring,
    out: [u8; MESSAGE_BYTES],
    into: [u8; MESSAGE_BYTES],
}

impl UringSide {
    /// With `deferred`, completions are posted only when the thread waits for them
    /// (`IORING_SETUP_DEFER_TASKRUN`, with `SINGLE_ISSUER`), not by interrupting it.
    fn new(stream: &TcpStream, deferred: bool) -> Box<UringSide> {
        let mut builder = IoUring::builder();
        if deferred {
            builder.setup_single_issuer().setup_defer_taskrun();
        }
        let ring = builder.build(8).expect("io_uring_setup");
        ring.submitter()
            .register_files(&[stream.as_raw_fd()])
            .expect("register the socket");
        Box::new(UringSide {
            ring,
            out: [7u8; MESSAGE_BYTES],
            into: [0u8; MESSAGE_BYTES],
        })
    }

    /// Sends (if `send`) and receives one message in one `io_uring_enter`; false when the peer
    /// closed.
    fn trip(&mut self, send: bool) -> bool {
        let send_entry =
            opcode::Send::new(types::Fixed(0), self.out.as_ptr(), MESSAGE_BYTES as u32)
                .flags(libc::MSG_NOSIGNAL)
                .build()
                .user_data(1);
        let recv_entry = opcode::Recv::new(
            types::Fixed(0),
            self.into.as_mut_ptr(),
            MESSAGE_BYTES as u32,
        )
        .flags(libc::MSG_WAITALL)
        .build()
        .user_data(2);
        // SAFETY: `out` and `into` live in this boxed side and are not touched until both
        // operations are reaped below, before this function returns.
        unsafe {
            let mut sq = self.ring.submission();
            if send {
                sq.push(&send_entry).expect("room for the SEND");
            }
            sq.push(&recv_entry).expect("room for the RECV");
        }
        let want = 1 + usize::from(send);
        let mut reaped = 0;
        let mut open = true;
        while reaped < want {
            self.ring
                .submit_and_wait(want - reaped)
                .expect("io_uring_enter");
            for cqe in self.ring.completion() {
                reaped += 1;
                if cqe.user_data() == 2 && cqe.result() != MESSAGE_BYTES as i32 {
                    open = false;
                }
            }
        }
        open
    }
}

/// One side of a ping-pong as rndb's TCP link and loop do it: a non-blocking socket, `send`,
/// then `epoll_wait` until the answer is readable, then `recv`.
struct EpollSide {
    stream: mio::net::TcpStream,
    poll: mio::Poll,
    events: mio::Events,
}

impl EpollSide {
    fn new(stream: TcpStream) -> EpollSide {
        stream.set_nonblocking(true).expect("non-blocking");
        let mut stream = mio::net::TcpStream::from_std(stream);
        let poll = mio::Poll::new().expect("epoll_create");
        poll.registry()
            .register(&mut stream, mio::Token(0), mio::Interest::READABLE)
            .expect("epoll_ctl");
        EpollSide {
            stream,
            poll,
            events: mio::Events::with_capacity(4),
        }
    }

    /// Sends `out` (if given) and receives a whole message into `into`; false when the peer
    /// closed.
    fn trip(&mut self, out: Option<&[u8]>, into: &mut [u8]) -> bool {
        if let Some(out) = out {
            if self.stream.write_all(out).is_err() {
                return false;
            }
        }
        let mut got = 0;
        while got < into.len() {
            match self.stream.read(&mut into[got..]) {
                Ok(0) => return false,
                Ok(bytes) => got += bytes,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    self.poll.poll(&mut self.events, None).expect("epoll_wait");
                }
                Err(_) => return false,
            }
        }
        true
    }
}

/// How a ping-pong side moves its bytes.
#[derive(Clone, Copy)]
enum Side {
    Blocking,
    Epoll,
    Uring { deferred: bool },
}

/// A ping-pong between two threads on `cpu`; returns µs per round trip.
fn ping_pong(kind: Side, cpu: usize) -> f64 {
    let (mut client, mut server) = pair();
    let shut = client
        .try_clone()
        .expect("a second descriptor for the client");
    let echo = std::thread::spawn(move || {
        pin(cpu);
        let mut message = [0u8; MESSAGE_BYTES];
        match kind {
            Side::Blocking => {
                while server.read_exact(&mut message).is_ok() {
                    if server.write_all(&message).is_err() {
                        break;
                    }
                }
            }
            Side::Epoll => {
                let mut side = EpollSide::new(server);
                // The first trip only receives; each later one answers and receives the next.
                let mut open = side.trip(None, &mut message);
                while open {
                    let out = message;
                    open = side.trip(Some(&out), &mut message);
                }
            }
            Side::Uring { deferred } => {
                let mut side = UringSide::new(&server, deferred);
                let mut open = side.trip(false);
                while open {
                    open = side.trip(true);
                }
            }
        }
    });
    pin(cpu);
    let out = [7u8; MESSAGE_BYTES];
    let mut into = [0u8; MESSAGE_BYTES];
    let figure = match kind {
        Side::Blocking => time(|| {
            client.write_all(&out).expect("send");
            client.read_exact(&mut into).expect("recv");
        }),
        Side::Epoll => {
            let mut side = EpollSide::new(client);
            time(|| assert!(side.trip(Some(&out), &mut into), "echo side closed"))
        }
        Side::Uring { deferred } => {
            let mut side = UringSide::new(&client, deferred);
            time(|| assert!(side.trip(true), "echo side closed"))
        }
    };
    let client = shut;
    // The echo side's next RECV sees the close and ends its loop.
    client
        .shutdown(std::net::Shutdown::Both)
        .expect("shut the client down");
    echo.join().expect("echo thread");
    figure
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Prints `rows` (name, µs), each also as a multiple of the first.
fn print_table(rows: &[(&str, f64)]) {
    let base = rows[0].1;
    for (name, figure) in rows {
        println!("{name:<42}{figure:>8.3}{:>8.2} ×", figure / base);
    }
}

fn main() {
    if let Err(reason) = rndb_transporter::uring::uring_available() {
        println!("io_uring unavailable ({reason}): nothing to compare");
        return;
    }
    let cpu = std::thread::available_parallelism().map_or(1, |n| n.get()) - 1;
    // One thread, then the ping-pong; each table's first cell is its baseline.
    let one_thread: [(&str, &dyn Fn() -> f64); 4] = [
        ("send + recv (2 system calls)", &syscalls),
        ("SEND, then RECV (2 io_uring_enter)", &|| {
            uring(Submit::Separately)
        }),
        ("SEND and RECV (1 io_uring_enter)", &|| {
            uring(Submit::Together)
        }),
        ("SEND and RECV linked (1 io_uring_enter)", &|| {
            uring(Submit::Linked)
        }),
    ];
    let ping_pongs: [(&str, &dyn Fn() -> f64); 4] = [
        ("send + recv, blocking", &|| ping_pong(Side::Blocking, cpu)),
        ("send, epoll_wait, recv (as the TCP link)", &|| {
            ping_pong(Side::Epoll, cpu)
        }),
        ("one io_uring_enter per side", &|| {
            ping_pong(Side::Uring { deferred: false }, cpu)
        }),
        ("the same, DEFER_TASKRUN", &|| {
            ping_pong(Side::Uring { deferred: true }, cpu)
        }),
    ];
    let cells: Vec<_> = one_thread.iter().chain(&ping_pongs).collect();
    let mut figures = vec![Vec::new(); cells.len()];
    for _ in 0..ROUNDS {
        for (figure, (_, measure)) in figures.iter_mut().zip(&cells) {
            figure.push(measure());
        }
    }
    let rows: Vec<(&str, f64)> = cells
        .iter()
        .zip(&mut figures)
        .map(|((name, _), figure)| (*name, median(figure)))
        .collect();
    println!(
        "µs per {MESSAGE_BYTES}-byte send and receive on loopback TCP, one thread, \
         median of {ROUNDS} rounds of {CELL_DURATION:?}"
    );
    print_table(&rows[..one_thread.len()]);
    println!("µs per round trip, ping-pong between two threads on CPU {cpu}");
    print_table(&rows[one_thread.len()..]);
}
