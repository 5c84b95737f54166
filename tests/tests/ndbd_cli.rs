//! Proves that `ndbd` started with a config file that does not exist says so, naming the file,
//! rather than reporting that the file "has errors", and that a node whose file system cannot
//! be made (its DataDir is a file) says so at start-up, naming the path, that a config file
//! that is not UTF-8 is named by line, and that a DataMemory the host cannot give fails the
//! start, naming the parameter (one larger than the host's available memory at once), and
//! that with StopOnError=0 the angel starts a failing data node process again, at most
//! MaxStartFailRetries times in a row, StartFailRetryDelay seconds apart, that a node not
//! started within StartFailureTimeout stops with 6100, and that TcpBind_INADDR_ANY=1 makes a
//! node listen on every address of its host rather than on its HostName's only.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use rndb_tests::ndbd_path;

/// Writes `dir/config.ini`: data node 1 on a free port with DataDir `data_dir`, `defaults`
/// (whole lines) in its `[ndbd default]`, and API node 50. Returns its path.
fn one_node_config(dir: &Path, defaults: &str, data_dir: &Path) -> PathBuf {
    let config = dir.join("config.ini");
    let port = rndb_tests::free_port_listener()
        .local_addr()
        .expect("a free port")
        .port();
    std::fs::write(
        &config,
        format!(
            "[ndbd default]\nNoOfReplicas=1\n{defaults}[ndbd]\nNodeId=1\nHostName=127.0.0.1\n\
             ServerPort={port}\nDataDir={}\n[api]\nNodeId=50\n",
            data_dir.display()
        ),
    )
    .expect("write the config");
    config
}

/// `ndbd --config-file <config> --ndb-nodeid 1`, then `args`.
fn ndbd(config: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(ndbd_path().expect("find ndbd"));
    command
        .arg("--config-file")
        .arg(config)
        .args(["--ndb-nodeid", "1"])
        .args(args);
    command
}

#[test]
fn a_missing_config_file_is_named_as_missing() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let missing = dir.path().join("no-such-config.ini");
    let output = ndbd(&missing, &[]).output().expect("run ndbd");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "ndbd started: {stderr}");
    assert!(
        stderr.contains(&format!(
            "{}: the config file does not exist",
            missing.display()
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("has errors"), "{stderr}");
}

#[test]
fn a_data_dir_that_cannot_hold_files_is_named_at_start_up() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let not_a_dir = dir.path().join("plain-file");
    std::fs::write(&not_a_dir, b"not a directory").expect("write a file");
    let config = one_node_config(dir.path(), "", &not_a_dir);
    let output = ndbd(&config, &[]).output().expect("run ndbd");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "ndbd started: {stderr}");
    assert!(
        stderr.contains(&not_a_dir.display().to_string()),
        "the error names the DataDir: {stderr}"
    );
}

#[test]
fn a_config_that_is_not_utf8_is_named_by_line() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = dir.path().join("config.ini");
    std::fs::write(
        &config,
        b"[ndbd default]\nNoOfReplicas=1\n[ndbd]\nNodeId=1\n# r\xe9serv\xe9\nHostName=127.0.0.1\n",
    )
    .expect("write the config");
    let output = ndbd(&config, &[]).output().expect("run ndbd");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "ndbd started: {stderr}");
    assert!(
        stderr.contains(&format!(
            "{}:5: not UTF-8: byte 4 of the line is 0xe9",
            config.display()
        )),
        "{stderr}"
    );
    assert!(
        !stderr.contains("stream did not contain valid UTF-8"),
        "{stderr}"
    );
}

#[test]
fn a_data_memory_the_host_cannot_give_fails_the_start_naming_it() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = one_node_config(dir.path(), "DataMemory=2G\n", dir.path());
    // 1.5 GiB of address space: less than the DataMemory the node must page in at start.
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg("ulimit -v 1572864 && exec \"$0\" --config-file \"$1\" --ndb-nodeid 1 --foreground")
        .arg(ndbd_path().expect("find ndbd"))
        .arg(&config);
    let stderr = failed_start(command, dir.path());
    assert!(
        stderr.contains("DataMemory=2147483648 of node 1: cannot page in"),
        "{stderr}"
    );
}

/// Runs `command`, an `ndbd` that must not start, its stderr to a log in `dir`; waits at most
/// 30 s for it to stop, asserts it failed, and returns what it wrote. Killed and reaped
/// however the test ends: a node that did start would serve for good.
fn failed_start(mut command: Command, dir: &Path) -> String {
    let log = dir.join("ndbd.log");
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("create the log"))
        .spawn()
        .expect("run ndbd");
    let mut child = KillOnDrop(child);
    let status = rndb_tests::wait_until("ndbd to stop", Duration::from_secs(30), || {
        Ok(child.0.try_wait()?)
    });
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    let status = status.unwrap_or_else(|e| panic!("{e}: {stderr}"));
    assert!(!status.success(), "ndbd started: {stderr}");
    stderr
}

/// A child process killed (SIGKILL) and reaped when dropped.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_data_memory_larger_than_the_host_has_available_fails_the_start_at_once() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = one_node_config(dir.path(), "DataMemory=8000G\n", dir.path());
    let command = ndbd(&config, &["--foreground"]);
    let stderr = failed_start(command, dir.path());
    assert!(
        stderr.contains("DataMemory=8589934592000 of node 1 is more than this host has available"),
        "{stderr}"
    );
}

#[test]
fn with_stop_on_error_0_the_angel_gives_up_after_max_start_fail_retries_failed_starts() {
    let dir = tempfile::tempdir().expect("temporary directory");
    // A DataDir that is a file: every data node process fails before it serves.
    let not_a_dir = dir.path().join("plain-file");
    std::fs::write(&not_a_dir, b"not a directory").expect("write a file");
    let config = one_node_config(
        dir.path(),
        "StopOnError=0\nMaxStartFailRetries=3\nStartFailRetryDelay=1\n",
        &not_a_dir,
    );
    let command = ndbd(&config, &[]);
    let began = std::time::Instant::now();
    let stderr = failed_start(command, dir.path());
    assert_eq!(stderr.matches("started child: ").count(), 3, "{stderr}");
    assert_eq!(
        stderr
            .matches("Angel detected startup failure, count: ")
            .count(),
        2,
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "Angel detected too many startup failures(3), not restarting again \
             (MaxStartFailRetries=3)"
        ),
        "{stderr}"
    );
    // StartFailRetryDelay=1 before each of the two tries after the first.
    assert!(began.elapsed() >= Duration::from_secs(2), "{stderr}");
}

#[test]
fn a_node_that_has_not_started_within_start_failure_timeout_stops_with_6100() {
    let dir = tempfile::tempdir().expect("temporary directory");
    // Node 2 never starts: node 1 waits for it (StartPartialTimeout) until StartFailureTimeout.
    let ports: Vec<u16> = (0..2)
        .map(|_| {
            rndb_tests::free_port_listener()
                .local_addr()
                .expect("a free port")
                .port()
        })
        .collect();
    let config = dir.path().join("config.ini");
    std::fs::write(
        &config,
        format!(
            "[ndbd default]\nNoOfReplicas=2\nDataMemory=16M\nStartPartialTimeout=60000\n\
             StartFailureTimeout=1500\nDataDir={d}\n\
             [ndbd]\nNodeId=1\nHostName=127.0.0.1\nServerPort={}\n\
             [ndbd]\nNodeId=2\nHostName=127.0.0.1\nServerPort={}\n[api]\nNodeId=50\n",
            ports[0],
            ports[1],
            d = dir.path().display()
        ),
    )
    .expect("write the config");
    let command = ndbd(&config, &["--foreground"]);
    let began = std::time::Instant::now();
    let stderr = failed_start(command, dir.path());
    assert!(
        stderr.contains(
            "error 6100: Total restart time too long, consider increasing StartFailureTimeout \
             or investigate error(s) on other node(s): not started"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("(StartFailureTimeout=1500)"), "{stderr}");
    let error_log = std::fs::read_to_string(dir.path().join("ndb_1_error.log"))
        .expect("the error log in DataDir");
    assert!(error_log.contains("\nError: 6100\n"), "{error_log}");
    assert!(began.elapsed() >= Duration::from_millis(1500), "{stderr}");
}

/// Starts the node of `config` (in `--foreground`) and returns it once its ServerPort accepts
/// on 127.0.0.1, with that port.
fn serving_node(config: &Path, dir: &Path) -> (KillOnDrop, u16) {
    let text = std::fs::read_to_string(config).expect("read the config");
    let port: u16 = text
        .lines()
        .find_map(|l| l.strip_prefix("ServerPort="))
        .and_then(|p| p.parse().ok())
        .expect("the config names ServerPort");
    let log = std::fs::File::create(dir.join("ndbd.log")).expect("create the log");
    let child = ndbd(config, &["--foreground"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("run ndbd");
    let node = KillOnDrop(child);
    rndb_tests::wait_until("the data node to listen", Duration::from_secs(60), || {
        Ok(std::net::TcpStream::connect(("127.0.0.1", port))
            .ok()
            .map(|_| ()))
    })
    .expect("ndbd listens on its HostName");
    (node, port)
}

#[test]
fn tcp_bind_inaddr_any_listens_on_every_address_of_the_host() {
    let dir = tempfile::tempdir().expect("temporary directory");
    // HostName=127.0.0.1: by default the node listens there only, not on 127.0.0.2.
    let config = one_node_config(dir.path(), "", dir.path());
    let (node, port) = serving_node(&config, dir.path());
    assert!(
        std::net::TcpStream::connect(("127.0.0.2", port)).is_err(),
        "a node without TcpBind_INADDR_ANY listens beyond its HostName"
    );
    drop(node);
    let any = tempfile::tempdir().expect("temporary directory");
    let config = one_node_config(any.path(), "TcpBind_INADDR_ANY=1\n", any.path());
    let (_node, port) = serving_node(&config, any.path());
    std::net::TcpStream::connect(("127.0.0.2", port))
        .expect("with TcpBind_INADDR_ANY=1 the node accepts on every address of its host");
}
