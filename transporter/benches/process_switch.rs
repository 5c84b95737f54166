//! Micro benchmark: what it costs this machine to hand one core to a different process on each
//! round trip, with no database code at all. It is the floor under issue 6's four-node read:
//! four data nodes and a client share one CPU, and each read goes to the node holding its row,
//! so the core switches to one of four processes in turn.
//!
//! A client thread and N echo servers (64-byte messages over loopback TCP, TCP_NODELAY,
//! blocking `read`/`write`) are all pinned to one CPU. The client sends to the servers in turn
//! and waits for each answer. Four servers are measured as processes and as threads of one
//! process, against one server of each kind: the difference between the two kinds is the
//! address-space switch. Two server processes show whether the cost comes with a third address
//! space already. Last, one and four server processes that each read one cache line in each of
//! [`PAGES_TOUCHED`] 4 KiB pages per message, as a data node touches its code and data: what
//! every page a server touches costs more when the core has been to the other servers since.
//! Rounds alternate the cells; the table gives each cell's median.
//!
//! Run: `cargo bench -p rndb-transporter --bench process_switch`

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command};
use std::time::Instant;

use nix::sched::{sched_setaffinity, CpuSet};
use nix::unistd::Pid;

/// Bytes per message, each way.
const MESSAGE_BYTES: usize = 64;
/// Round trips timed per cell, after [`WARM_UP`] untimed ones.
const ROUND_TRIPS: usize = 100_000;
const WARM_UP: usize = 10_000;
/// Alternating repetitions of every cell.
const ROUNDS: usize = 3;
/// Set in a re-executed copy of this program: the address its echo server connects to.
const ECHO_ADDRESS_ENV: &str = "RNDB_PROCESS_SWITCH_ECHO";
/// Set with [`ECHO_ADDRESS_ENV`]: the CPU the echo server pins itself to.
const ECHO_CPU_ENV: &str = "RNDB_PROCESS_SWITCH_CPU";
/// Set with [`ECHO_ADDRESS_ENV`]: the pages the echo server touches per message.
const ECHO_PAGES_ENV: &str = "RNDB_PROCESS_SWITCH_PAGES";
/// Pages a server touches per message in the last two cells.
const PAGES_TOUCHED: usize = 256;
const PAGE_BYTES: usize = 4096;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Processes,
    Threads,
}

/// Pins the calling thread to `cpu`.
fn pin(cpu: usize) {
    let mut set = CpuSet::new();
    set.set(cpu).expect("CPU index within the CPU set");
    sched_setaffinity(Pid::from_raw(0), &set).expect("sched_setaffinity");
}

/// Connects to `address` and answers every message with itself until the client closes,
/// reading one byte of each of `pages` pages of its own before each answer.
fn echo(address: &str, cpu: usize, pages: usize) {
    pin(cpu);
    // A different cache line of each page, so that the lines do not all fall in one set.
    let memory = vec![1u8; pages * PAGE_BYTES];
    let offsets: Vec<usize> = (0..pages)
        .map(|p| p * PAGE_BYTES + (p * 64) % PAGE_BYTES)
        .collect();
    let mut stream = TcpStream::connect(address).expect("echo server: connect");
    stream.set_nodelay(true).expect("TCP_NODELAY");
    let mut message = [0u8; MESSAGE_BYTES];
    while stream.read_exact(&mut message).is_ok() {
        let mut sum = 0u8;
        for &offset in &offsets {
            sum = sum.wrapping_add(memory[offset]);
        }
        std::hint::black_box(sum);
        if stream.write_all(&message).is_err() {
            break;
        }
    }
}

/// Child processes, killed and reaped when dropped (also when the benchmark panics).
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Times round trips to `servers` echo servers of `kind`, sent to each in turn; returns the
/// median and the mean in µs.
fn measure(kind: Kind, servers: usize, pages: usize, cpu: usize) -> (f64, f64) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let address = listener.local_addr().expect("address").to_string();
    let mut children = Children(Vec::new());
    let mut threads = Vec::new();
    for _ in 0..servers {
        match kind {
            Kind::Processes => children.0.push(
                Command::new(std::env::current_exe().expect("this program's path"))
                    .env(ECHO_ADDRESS_ENV, &address)
                    .env(ECHO_CPU_ENV, cpu.to_string())
                    .env(ECHO_PAGES_ENV, pages.to_string())
                    .spawn()
                    .expect("start an echo process"),
            ),
            Kind::Threads => {
                let address = address.clone();
                threads.push(std::thread::spawn(move || echo(&address, cpu, pages)));
            }
        }
    }
    let mut streams: Vec<TcpStream> = (0..servers)
        .map(|_| {
            let (stream, _) = listener.accept().expect("accept an echo server");
            stream.set_nodelay(true).expect("TCP_NODELAY");
            stream
        })
        .collect();
    pin(cpu);
    let mut message = [0u8; MESSAGE_BYTES];
    let mut times = Vec::with_capacity(ROUND_TRIPS);
    for trip in 0..WARM_UP + ROUND_TRIPS {
        let stream = &mut streams[trip % servers];
        let start = Instant::now();
        stream.write_all(&message).expect("send");
        stream.read_exact(&mut message).expect("receive");
        if trip >= WARM_UP {
            times.push(start.elapsed().as_secs_f64() * 1e6);
        }
    }
    // Closing the streams ends the echo threads; the processes are killed by `children`.
    drop(streams);
    for thread in threads {
        thread.join().expect("echo thread");
    }
    let mean = times.iter().sum::<f64>() / times.len() as f64;
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], mean)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    if let Ok(address) = std::env::var(ECHO_ADDRESS_ENV) {
        let number = |name| {
            std::env::var(name)
                .ok()
                .and_then(|value| value.parse().ok())
                .unwrap_or(0)
        };
        echo(&address, number(ECHO_CPU_ENV), number(ECHO_PAGES_ENV));
        return;
    }
    // The last CPU, as the benchmarks put data nodes there (CPU 1 on a 2-CPU machine).
    let cpu = std::thread::available_parallelism().map_or(1, |n| n.get()) - 1;
    let touching_one = format!("1 process, {PAGES_TOUCHED} pages");
    let touching_four = format!("4 processes, {PAGES_TOUCHED} pages");
    let cells = [
        (Kind::Processes, 1, 0, "1 process"),
        (Kind::Processes, 2, 0, "2 processes in turn"),
        (Kind::Processes, 4, 0, "4 processes in turn"),
        (Kind::Threads, 1, 0, "1 thread"),
        (Kind::Threads, 4, 0, "4 threads in turn"),
        (Kind::Processes, 1, PAGES_TOUCHED, &touching_one),
        (Kind::Processes, 4, PAGES_TOUCHED, &touching_four),
    ];
    let mut p50s = vec![Vec::new(); cells.len()];
    let mut means = vec![Vec::new(); cells.len()];
    for _ in 0..ROUNDS {
        for (i, &(kind, servers, pages, _)) in cells.iter().enumerate() {
            let (p50, mean) = measure(kind, servers, pages, cpu);
            p50s[i].push(p50);
            means[i].push(mean);
        }
    }
    println!(
        "µs per {MESSAGE_BYTES}-byte round trip, client and echo servers on CPU {cpu}, \
         median of {ROUNDS} rounds of {ROUND_TRIPS}"
    );
    println!("{:<24}{:>10}{:>10}", "servers", "p50", "mean");
    let mut p50 = Vec::new();
    for (i, &(_, _, _, name)) in cells.iter().enumerate() {
        p50.push(median(&mut p50s[i]));
        println!("{name:<24}{:>10.2}{:>10.2}", p50[i], median(&mut means[i]));
    }
    let (one, two, four) = (p50[0], p50[1], p50[2]);
    let (one_thread, four_threads) = (p50[3], p50[4]);
    let (one_touching, four_touching) = (p50[5], p50[6]);
    println!(
        "switching among 4 processes adds {:.2} µs at p50 ({:.2} ×); among 2 processes {:.2} µs; \
         among 4 threads {:.2} µs",
        four - one,
        four / one,
        two - one,
        four_threads - one_thread
    );
    println!(
        "each page a server touches costs {:.1} ns more among 4 processes than with 1",
        ((four_touching - one_touching) - (four - one)) * 1000.0 / PAGES_TOUCHED as f64
    );
}
