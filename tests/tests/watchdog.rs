//! Proves that a serving data node whose execution thread stops making progress is stopped by
//! its watchdog, as NDB's: stuck for TimeBetweenWatchDogCheck it is warned of, naming the stage it
//! is stuck in, and past three times that the process exits with error 6050, recorded in its
//! error log. The thread is
//! stopped from outside (ptrace interrupts that one thread), so every other thread runs on.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::ptrace;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use rndb_tests::ndbd_path;

/// TimeBetweenWatchDogCheck of the test's node, ms.
const INTERVAL_MS: u64 = 500;

/// The data node process, killed and reaped however the test ends.
struct Node(Child);

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn write_config(dir: &Path) -> std::path::PathBuf {
    let port = rndb_tests::free_port_listener()
        .local_addr()
        .expect("a free port")
        .port();
    let config = dir.join("config.ini");
    std::fs::write(
        &config,
        format!(
            "[ndbd default]\nNoOfReplicas=1\nDataMemory=16M\nTimeBetweenWatchDogCheck={INTERVAL_MS}\n\
             [ndbd]\nNodeId=1\nHostName=127.0.0.1\nServerPort={port}\nDataDir={}\n[api]\nNodeId=50\n",
            dir.display()
        ),
    )
    .expect("write the config");
    config
}

#[test]
fn a_stuck_execution_thread_is_warned_of_and_then_stops_the_node_with_6050() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = write_config(dir.path());
    let log = dir.path().join("ndbd.log");
    // --foreground: the data node runs in this process, its execution loop on the main thread.
    let child = Command::new(ndbd_path().expect("find ndbd"))
        .arg("--config-file")
        .arg(&config)
        .args(["--ndb-nodeid", "1", "--foreground"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("create the log"))
        .spawn()
        .expect("start ndbd");
    let node = Node(child);
    let pid = Pid::from_raw(node.0.id() as i32);
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    rndb_tests::wait_until("the data node to start", Duration::from_secs(60), || {
        Ok(read_log()
            .contains("data node started at GCI")
            .then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e}: {}", read_log()));
    // Serving for a few intervals: no warning while the thread runs.
    std::thread::sleep(Duration::from_millis(3 * INTERVAL_MS));
    assert!(!read_log().contains("stuck"), "{}", read_log());

    // Stop the main thread alone (a ptrace stop of one thread).
    ptrace::seize(pid, ptrace::Options::empty()).expect("ptrace the execution thread");
    ptrace::interrupt(pid).expect("interrupt the execution thread");
    let stopped_at = Instant::now();
    let deadline = stopped_at + Duration::from_secs(30);
    let status = loop {
        match waitpid(pid, Some(WaitPidFlag::WNOHANG)).expect("waitpid") {
            // The ptrace stops of the interrupted thread: it stays stopped.
            WaitStatus::StillAlive | WaitStatus::PtraceEvent(..) | WaitStatus::Stopped(..) => {}
            done => break done,
        }
        assert!(Instant::now() < deadline, "still running: {}", read_log());
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = stopped_at.elapsed();
    let stderr = read_log();
    assert_eq!(status, WaitStatus::Exited(pid, 1), "{stderr}");
    assert!(
        stderr.contains("Ndb kernel thread is stuck in: "),
        "a warning first: {stderr}"
    );
    assert!(
        stderr.contains(
            "error 6050: WatchDog terminate, internal error or massive overload on the machine \
             running this node: the execution thread of data node 1 was stuck in"
        ),
        "{stderr}"
    );
    assert!(
        took >= Duration::from_millis(3 * INTERVAL_MS),
        "stopped after {took:?}, before three intervals: {stderr}"
    );
    // NDB's error log in DataDir has the entry.
    let error_log =
        std::fs::read_to_string(dir.path().join("ndb_1_error.log")).expect("the error log");
    assert!(error_log.contains("\nError: 6050\n"), "{error_log}");
    assert!(error_log.ends_with("***EOM***\n"), "{error_log}");
    // Reaped here: the guard's kill and wait find nothing.
    std::mem::forget(node);
}
