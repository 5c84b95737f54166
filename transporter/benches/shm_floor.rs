//! Micro benchmark: the floor under rndb's SHM round trip (issue 26, part 6), and what the link
//! itself adds to it.
//!
//! Two processes, each pinned to its own CPU, both spinning:
//!
//! - `floor`: one cache line each way in a `/dev/shm` segment ([`SpinFloor`]): the pinger stores
//!   a number, the echoer sees it and stores it back. Nothing else: what the machine allows.
//! - `link`: a whole [`ShmLink`] each way, set up as a data node and an API node do (segment
//!   offered over TCP), with the frame checks of SHM's default `Checksum=1`: the pinger sends an
//!   empty frame, flushes, and spins on `receive`; the echoer spins on `receive` and sends each
//!   frame back. The difference from `floor` is the ring, the frame encoding and the CRC.
//! - `api`: the pinger sends through the API library instead ([`rndb_api::LinkPinger`]: a
//!   ping as `Cluster::ping` makes it, request registered, sent, the answer spun for and taken),
//!   to the same echo. The difference from `link` is the library's; what testread-perf's SHM
//!   ping takes beyond `api` is the data node's loop.
//!
//! Rounds alternate the cells; each prints the p50, p99 and mean of every round trip timed
//! (with one clock read each, included), pooled over the rounds. `-- --json` prints one JSON
//! document instead (scripts/bench-shm-floor reads it).
//!
//! Run: `cargo bench -p rndb-transporter --bench shm_floor`

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sched::{sched_setaffinity, CpuSet};
use nix::unistd::Pid;
use rndb_config::{LinkConfig, TransporterKind};
use rndb_transporter::shm::{self, ShmLink, SpinFloor, SHM_SEGMENT_BYTES_MIN};
use rndb_transporter::{FrameHeader, NodeId, Transporter};

/// Round trips timed per cell and round, after [`WARM_UP`] untimed ones.
const ROUND_TRIPS: usize = 200_000;
const WARM_UP: usize = 20_000;
/// Alternating repetitions of every cell.
const ROUNDS: usize = 3;
/// Set in the re-executed copy of this program: which cell it echoes for, and where.
const CHILD_CELL_ENV: &str = "RNDB_SHM_FLOOR_CELL";
/// The floor segment's path or the link's TCP address, for the child.
const CHILD_TARGET_ENV: &str = "RNDB_SHM_FLOOR_TARGET";
/// The CPU the child pins itself to.
const CHILD_CPU_ENV: &str = "RNDB_SHM_FLOOR_CPU";
/// How long either side waits for the other before it gives up.
const PEER_TIMEOUT: Duration = Duration::from_secs(10);
const CLUSTER_ID: u64 = 0x5E6_F100;
const PINGER_NODE: NodeId = NodeId(1);
const ECHOER_NODE: NodeId = NodeId(2);

/// Pins the calling thread to `cpu` (nothing, when the machine has no such CPU).
fn pin(cpu: usize) {
    let mut set = CpuSet::new();
    if set.set(cpu).is_ok() {
        let _ = sched_setaffinity(Pid::from_raw(0), &set);
    }
}

fn link_config() -> LinkConfig {
    LinkConfig {
        node1: PINGER_NODE,
        node2: ECHOER_NODE,
        kind: TransporterKind::Shm,
        explicit: true,
        send_buffer_memory_bytes: 2 << 20,
        receive_buffer_memory_bytes: 2 << 20,
        // As config/examples/single.ini, whose links testread-perf measures in the same script
        // (NDB's SHM default is a CRC-32 on every frame).
        checksum: false,
        overload_limit_bytes: 0,
        shm_size_bytes: SHM_SEGMENT_BYTES_MIN,
        shm_spintime_us: 0,
        over_tcp: None,
    }
}

const PING: FrameHeader = FrameHeader {
    signal: 1,
    receiver_block: 1,
    sender_block: 1,
    request_id: 7,
};

/// The child's side of the `floor` cell.
fn echo_floor(path: &Path) {
    let mut floor = SpinFloor::attach(path).expect("attach to the floor segment");
    floor.echo(PEER_TIMEOUT);
}

/// The child's side of the `link` cell: sends every frame back until the link closes.
fn echo_link(address: &str) {
    let stream = TcpStream::connect(address).expect("connect to the pinger");
    let mut link = shm::client_setup(stream, ECHOER_NODE, PINGER_NODE, &link_config())
        .expect("attach the SHM link");
    // As the floor's echo: the clock is read on every 4096th empty turn only, and a frame is
    // kept in buffers that are reused (an empty frame's payload allocates nothing).
    let mut last_input = Instant::now();
    let mut empty_turns = 0u32;
    let mut headers = Vec::new();
    let mut payloads = Vec::new();
    loop {
        let received = link.receive(&mut |header: &FrameHeader, payload: &[u8]| {
            headers.push((*header, payloads.len()..payloads.len() + payload.len()));
            payloads.extend_from_slice(payload);
        });
        match received {
            Ok(0) => {
                std::hint::spin_loop();
                empty_turns = empty_turns.wrapping_add(1);
                if empty_turns.is_multiple_of(4096) && last_input.elapsed() > PEER_TIMEOUT {
                    return;
                }
            }
            Ok(_) => {
                for (header, range) in headers.drain(..) {
                    link.send(&header, &payloads[range]).expect("echo a frame");
                }
                payloads.clear();
                link.flush().expect("flush the echo");
                empty_turns = 0;
                last_input = Instant::now();
            }
            Err(_) => return,
        }
    }
}

/// Children, killed and reaped when dropped (also when the benchmark panics).
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_echoer(cell: &str, target: &str, cpu: usize) -> ChildGuard {
    ChildGuard(
        Command::new(std::env::current_exe().expect("this program's path"))
            .env(CHILD_CELL_ENV, cell)
            .env(CHILD_TARGET_ENV, target)
            .env(CHILD_CPU_ENV, cpu.to_string())
            .stdin(Stdio::null())
            .spawn()
            .expect("start the echo process"),
    )
}

/// Round trip times in ns of one `floor` round.
fn measure_floor(cpus: (usize, usize)) -> Vec<u64> {
    let mut floor = SpinFloor::create(CLUSTER_ID).expect("create the floor segment");
    let path = floor.path();
    let _child = spawn_echoer("floor", path.to_str().expect("UTF-8 path"), cpus.1);
    pin(cpus.0);
    // The first ping waits for the child to start and attach.
    assert!(floor.ping(PEER_TIMEOUT), "the echo process never answered");
    floor.unlink().expect("unlink the floor segment");
    let mut times = Vec::with_capacity(ROUND_TRIPS);
    for trip in 0..WARM_UP + ROUND_TRIPS {
        let start = Instant::now();
        assert!(floor.ping(PEER_TIMEOUT), "the echo process stopped");
        if trip >= WARM_UP {
            times.push(start.elapsed().as_nanos() as u64);
        }
    }
    floor.stop_peer();
    times
}

/// Round trip times in ns of one `link` round.
fn measure_link(cpus: (usize, usize)) -> Vec<u64> {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let address = listener.local_addr().expect("address").to_string();
    let _child = spawn_echoer("link", &address, cpus.1);
    let (stream, _) = listener.accept().expect("accept the echo process");
    let mut link: ShmLink =
        shm::server_setup(stream, ECHOER_NODE, PINGER_NODE, CLUSTER_ID, &link_config())
            .expect("offer the SHM link");
    pin(cpus.0);
    let mut times = Vec::with_capacity(ROUND_TRIPS);
    for trip in 0..WARM_UP + ROUND_TRIPS {
        let start = Instant::now();
        link.send(&PING, &[]).expect("send a ping");
        link.flush().expect("flush the ping");
        // As the floor's ping: the clock is read on every 4096th empty turn only.
        let mut answered = 0;
        let mut empty_turns = 0u32;
        while answered == 0 {
            answered = link
                .receive(&mut |header: &FrameHeader, _payload: &[u8]| {
                    assert_eq!(*header, PING, "the echo changed the frame");
                })
                .expect("receive the echo");
            empty_turns = empty_turns.wrapping_add(1);
            if answered == 0 && empty_turns.is_multiple_of(4096) && start.elapsed() > PEER_TIMEOUT {
                panic!("the echo process stopped");
            }
        }
        if trip >= WARM_UP {
            times.push(start.elapsed().as_nanos() as u64);
        }
    }
    link.shutdown();
    times
}

/// Round trip times in ns of one `api` round.
fn measure_api(cpus: (usize, usize)) -> Vec<u64> {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let address = listener.local_addr().expect("address").to_string();
    let _child = spawn_echoer("link", &address, cpus.1);
    let (stream, _) = listener.accept().expect("accept the echo process");
    let link: ShmLink =
        shm::server_setup(stream, ECHOER_NODE, PINGER_NODE, CLUSTER_ID, &link_config())
            .expect("offer the SHM link");
    // Spinning, as testread-perf's API over single.ini's links (ShmSpintime=300).
    let mut pinger = rndb_api::LinkPinger::new(Box::new(link), Duration::from_micros(300))
        .expect("wrap the link");
    pin(cpus.0);
    let mut times = Vec::with_capacity(ROUND_TRIPS);
    for trip in 0..WARM_UP + ROUND_TRIPS {
        let start = Instant::now();
        pinger.ping(PEER_TIMEOUT).expect("ping through the API");
        if trip >= WARM_UP {
            times.push(start.elapsed().as_nanos() as u64);
        }
    }
    times
}

/// p50, p99 and mean of `times` (ns), in µs.
fn summary(times: &mut [u64]) -> (f64, f64, f64) {
    times.sort_unstable();
    let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize] as f64 / 1000.0;
    let mean = times.iter().sum::<u64>() as f64 / times.len() as f64 / 1000.0;
    (at(0.5), at(0.99), mean)
}

fn main() {
    if let (Ok(cell), Ok(target)) = (
        std::env::var(CHILD_CELL_ENV),
        std::env::var(CHILD_TARGET_ENV),
    ) {
        let cpu = std::env::var(CHILD_CPU_ENV)
            .ok()
            .and_then(|cpu| cpu.parse().ok())
            .unwrap_or(1);
        pin(cpu);
        match cell.as_str() {
            "floor" => echo_floor(Path::new(&target)),
            "link" => echo_link(&target),
            other => panic!("unknown cell {other}"),
        }
        return;
    }
    let json = std::env::args().any(|a| a == "--json");
    let cpu_count = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpu_count < 2 {
        eprintln!("shm_floor: only {cpu_count} CPU: two spinning processes need two cores");
    }
    let cpus = (0, cpu_count.min(2) - 1);
    let mut floor = Vec::new();
    let mut link = Vec::new();
    let mut api = Vec::new();
    for _ in 0..ROUNDS {
        floor.extend(measure_floor(cpus));
        link.extend(measure_link(cpus));
        api.extend(measure_api(cpus));
    }
    let (floor, link, api) = (summary(&mut floor), summary(&mut link), summary(&mut api));
    if json {
        let cell = |(p50, p99, mean): (f64, f64, f64)| {
            format!("{{\"p50_us\": {p50:.3}, \"p99_us\": {p99:.3}, \"mean_us\": {mean:.3}}}")
        };
        println!(
            "{{\"cpus\": [{}, {}], \"round_trips\": {}, \"floor\": {}, \"link\": {}, \"api\": {}}}",
            cpus.0,
            cpus.1,
            ROUNDS * ROUND_TRIPS,
            cell(floor),
            cell(link),
            cell(api)
        );
        return;
    }
    println!(
        "µs per round trip between two spinning processes on CPUs {} and {}, {} rounds of {}",
        cpus.0, cpus.1, ROUNDS, ROUND_TRIPS
    );
    println!("{:<44}{:>8}{:>8}{:>8}", "cell", "p50", "p99", "mean");
    for (name, (p50, p99, mean)) in [
        ("floor: one cache line each way", floor),
        ("link: ShmLink, empty frame, Checksum=1", link),
        ("api: the API's ping over the same link", api),
    ] {
        println!("{name:<44}{p50:>8.3}{p99:>8.3}{mean:>8.3}");
    }
    println!(
        "the link adds {:.3} µs at p50 ({:.2} × the floor)",
        link.0 - floor.0,
        link.0 / floor.0
    );
    println!(
        "the API library adds {:.3} µs more ({:.2} × the floor in all)",
        api.0 - link.0,
        api.0 / floor.0
    );
}
