//! Micro benchmark: µs per frame for batches of 1, 20 and 1000 frames of 64-byte payloads over a
//! loopback pair of TCP links and of Uring links, in the same run (compare the ratios, not the
//! absolute numbers, across runs). One thread sends a batch, flushes once and receives on the
//! other end until the whole batch has arrived, so the figure is the per-frame CPU cost of the
//! link (system calls, copies, decoding) without any wake-up latency.
//!
//! Run: `cargo bench -p rndb-transporter --bench uring_vs_tcp`

use std::hint::black_box;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use rndb_transporter::tcp::TcpLink;
use rndb_transporter::uring::{uring_available, UringLink};
use rndb_transporter::{FrameHeader, LinkSettings, NodeId, Transporter};

/// Payload bytes per frame.
const PAYLOAD_BYTES: usize = 64;
/// Frames per batch measured.
const BATCH_SIZES: [usize; 3] = [1, 20, 1000];
/// How long each (kind, batch) cell runs.
const CELL_DURATION: Duration = Duration::from_millis(700);
/// Repetitions of the whole table; the best of them is reported, to shed noise.
const ROUNDS: usize = 3;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Tcp,
    Uring,
}

fn connected_streams() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let client = TcpStream::connect(listener.local_addr().expect("address")).expect("connect");
    let (server, _) = listener.accept().expect("accept");
    (client, server)
}

fn make(kind: Kind, stream: TcpStream, peer: u16) -> Box<dyn Transporter> {
    let settings = LinkSettings::default();
    match kind {
        Kind::Tcp => Box::new(TcpLink::new(stream, NodeId(peer), &settings).expect("TCP link")),
        Kind::Uring => {
            Box::new(UringLink::new(stream, NodeId(peer), &settings).expect("Uring link"))
        }
    }
}

/// Sends batches of `batch` frames from one link to the other for about [`CELL_DURATION`];
/// returns µs per frame.
fn measure(kind: Kind, batch: usize) -> f64 {
    let (client, server) = connected_streams();
    let mut a = make(kind, client, 2);
    let mut b = make(kind, server, 1);
    let payload = [7u8; PAYLOAD_BYTES];
    let mut frames = 0usize;
    let start = Instant::now();
    while start.elapsed() < CELL_DURATION {
        for index in 0..batch {
            let header = FrameHeader {
                signal: 1,
                receiver_block: 2,
                sender_block: 3,
                request_id: index as u32,
            };
            a.send(&header, &payload).expect("send");
        }
        let mut received = 0;
        while received < batch {
            a.flush().expect("flush");
            received += b
                .receive(&mut |header, payload| {
                    black_box((header, payload));
                })
                .expect("receive");
        }
        frames += batch;
    }
    start.elapsed().as_secs_f64() * 1e6 / frames as f64
}

fn main() {
    let uring = match uring_available() {
        Ok(()) => true,
        Err(reason) => {
            println!("io_uring unavailable ({reason}): measuring TCP only");
            false
        }
    };
    let kinds: &[(Kind, &str)] = if uring {
        &[(Kind::Tcp, "TCP"), (Kind::Uring, "URING")]
    } else {
        &[(Kind::Tcp, "TCP")]
    };
    let mut best = vec![f64::INFINITY; kinds.len() * BATCH_SIZES.len()];
    for _ in 0..ROUNDS {
        for (k, (kind, _)) in kinds.iter().enumerate() {
            for (i, &batch) in BATCH_SIZES.iter().enumerate() {
                let cell = &mut best[k * BATCH_SIZES.len() + i];
                *cell = cell.min(measure(*kind, batch));
            }
        }
    }
    println!(
        "µs per frame, {PAYLOAD_BYTES}-byte payloads, best of {ROUNDS} runs of {CELL_DURATION:?}"
    );
    println!(
        "{:<8}{:>12}{:>12}{:>12}",
        "link", "batch 1", "batch 20", "batch 1000"
    );
    for (k, (_, name)) in kinds.iter().enumerate() {
        let row = &best[k * BATCH_SIZES.len()..(k + 1) * BATCH_SIZES.len()];
        println!("{name:<8}{:>12.3}{:>12.3}{:>12.3}", row[0], row[1], row[2]);
    }
}
