//! Proves the SHM link works between two real processes, and that when one is killed with
//! SIGKILL the survivor's `receive` reports Closed within a second and no /dev/shm file remains.
//!
//! The child is this test binary run again with `--exact child_role` and the address to connect
//! to in [`CHILD_ADDRESS_ENV`]; without that variable `child_role` does nothing.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rndb_config::{LinkConfig, TransporterKind};
use rndb_transporter::shm::{self, ShmLink, SHM_DIR, SHM_NAME_PREFIX, SHM_SEGMENT_BYTES_MIN};
use rndb_transporter::{FrameHeader, NodeId, TransportError, Transporter};

/// Set in the child's environment: the parent's listening address.
const CHILD_ADDRESS_ENV: &str = "RNDB_SHM_TEST_CHILD_ADDRESS";
/// How long the parent waits for the child to start and connect.
const CHILD_START_DEADLINE: Duration = Duration::from_secs(20);
/// How long the child runs at most, even if the parent never kills it.
const CHILD_LIFETIME: Duration = Duration::from_secs(30);
/// How quickly the parent must see the killed child's link as Closed.
const CLOSED_DEADLINE: Duration = Duration::from_secs(1);
const FRAME_COUNT: u32 = 1000;
const CLUSTER_ID: u64 = 0x5E6_C41D;
const PARENT_NODE: NodeId = NodeId(1);
const CHILD_NODE: NodeId = NodeId(201);

fn link_config() -> LinkConfig {
    LinkConfig {
        node1: PARENT_NODE,
        node2: CHILD_NODE,
        kind: TransporterKind::Shm,
        explicit: true,
        send_buffer_memory_bytes: 2 << 20,
        receive_buffer_memory_bytes: 2 << 20,
        checksum: true,
        overload_limit_bytes: 0,
        shm_size_bytes: SHM_SEGMENT_BYTES_MIN,
        shm_spintime_us: 0,
        over_tcp: None,
    }
}

/// Kills and reaps the child when the test ends, passed or failed.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_child(address: &str) -> ChildGuard {
    let exe = std::env::current_exe().expect("the test binary's path");
    let child = Command::new(exe)
        .args(["--exact", "child_role", "--nocapture", "--test-threads=1"])
        .env(CHILD_ADDRESS_ENV, address)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn the child test process");
    ChildGuard(child)
}

/// Accepts the child's connection, failing if the child exits or the deadline passes first.
fn accept_child(listener: &TcpListener, child: &mut ChildGuard) -> TcpStream {
    listener
        .set_nonblocking(true)
        .expect("non-blocking listener");
    let deadline = Instant::now() + CHILD_START_DEADLINE;
    loop {
        match listener.accept() {
            Ok((stream, _)) => return stream,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("accept the child: {e}"),
        }
        if let Some(status) = child.0.try_wait().expect("child status") {
            panic!("the child exited before connecting: {status}");
        }
        assert!(
            Instant::now() < deadline,
            "the child did not connect in {CHILD_START_DEADLINE:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn header(index: u32) -> FrameHeader {
    FrameHeader {
        signal: 9,
        receiver_block: 3,
        sender_block: 4,
        request_id: index,
    }
}

fn payload(index: u32) -> Vec<u8> {
    (0..(index % 200) as usize)
        .map(|offset| (index as usize + offset) as u8)
        .collect()
}

/// Sends `FRAME_COUNT` frames to the child and checks each comes back, in order and intact.
fn exchange_frames(link: &mut ShmLink) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let (mut sent, mut echoed) = (0, 0);
    while echoed < FRAME_COUNT {
        assert!(
            Instant::now() < deadline,
            "only {echoed} of {FRAME_COUNT} frames came back"
        );
        while sent < FRAME_COUNT && sent < echoed + 100 {
            link.send(&header(sent), &payload(sent))
                .expect("send to the child");
            sent += 1;
        }
        link.flush().expect("flush to the child");
        link.receive(&mut |h: &FrameHeader, p: &[u8]| {
            assert_eq!(*h, header(echoed), "echo {echoed} out of order");
            assert_eq!(p, payload(echoed), "echo {echoed} corrupted");
            echoed += 1;
        })
        .expect("receive echoes");
    }
}

fn segment_files_of_this_test() -> Vec<String> {
    let prefix = format!("{SHM_NAME_PREFIX}{CLUSTER_ID:016x}-");
    std::fs::read_dir(SHM_DIR)
        .expect("list /dev/shm")
        .flatten()
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|name| name.starts_with(&prefix))
        .collect()
}

#[test]
fn a_killed_peer_process_is_seen_as_closed() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let address = listener.local_addr().expect("address").to_string();
    let mut child = spawn_child(&address);
    let stream = accept_child(&listener, &mut child);
    let mut link = shm::server_setup(stream, CHILD_NODE, PARENT_NODE, CLUSTER_ID, &link_config())
        .expect("SHM set-up with the child");
    assert!(
        !link.segment_path().exists(),
        "the segment file is unlinked after set-up"
    );
    exchange_frames(&mut link);

    child.0.kill().expect("SIGKILL the child");
    child.0.wait().expect("reap the child");
    let killed_at = Instant::now();
    loop {
        match link.receive(&mut |h: &FrameHeader, _: &[u8]| panic!("unexpected frame {h:?}")) {
            Ok(_) => {}
            Err(TransportError::Closed { peer }) => {
                assert_eq!(peer, CHILD_NODE);
                break;
            }
            Err(e) => panic!("expected Closed, got {e}"),
        }
        assert!(
            killed_at.elapsed() < CLOSED_DEADLINE,
            "no Closed within {CLOSED_DEADLINE:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(link);
    assert_eq!(
        segment_files_of_this_test(),
        Vec::<String>::new(),
        "no segment file remains"
    );
}

/// The child's side: attach, then echo every frame until the parent closes or kills us.
#[test]
fn child_role() {
    let Ok(address) = std::env::var(CHILD_ADDRESS_ENV) else {
        return;
    };
    let stream = TcpStream::connect(address).expect("child: connect to the parent");
    let mut link = shm::client_setup(stream, CHILD_NODE, PARENT_NODE, &link_config())
        .expect("child: SHM set-up");
    let deadline = Instant::now() + CHILD_LIFETIME;
    let mut echoes: Vec<(FrameHeader, Vec<u8>)> = Vec::new();
    while Instant::now() < deadline {
        let received = link.receive(&mut |h: &FrameHeader, p: &[u8]| echoes.push((*h, p.to_vec())));
        match received {
            Ok(_) => {}
            Err(TransportError::Closed { .. }) => return,
            Err(e) => panic!("child: receive: {e}"),
        }
        for (h, p) in echoes.drain(..) {
            link.send(&h, &p).expect("child: echo");
        }
        link.flush().expect("child: flush");
    }
}
