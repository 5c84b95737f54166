//! [`Processes`]: management-side processes a test starts by name (ndb_mgmd, data nodes started
//! with a connectstring), each writing to its own log file, killed and reaped when dropped;
//! [`run`] runs a tool (ndb_mgm, ndb_waiter) to its end.

use std::fs;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::Duration;

use crate::{binary_path, free_port, wait_until};

/// Processes a test started: killed (SIGKILL) and reaped when dropped, however the test ends;
/// their logs are printed when the test panics.
#[derive(Debug)]
pub struct Processes {
    /// Holds each process's `<name>.log` and whatever the test puts there (configs, DataDirs).
    pub dir: tempfile::TempDir,
    /// The processes, by the name they were started under.
    pub children: Vec<(String, Child)>,
}

impl Processes {
    pub fn new() -> Processes {
        Processes {
            dir: tempfile::tempdir().expect("temporary directory"),
            children: Vec::new(),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Starts `program args`, its output to `<name>.log` in the directory.
    pub fn spawn(&mut self, name: &str, program: &str, args: &[&str]) {
        let log = fs::File::create(self.path(&format!("{name}.log"))).expect("create a log");
        let child = Command::new(binary_path(program).expect("find the binary"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone the log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {program}: {e}"));
        self.children.push((name.to_string(), child));
    }

    /// What process `name` has written so far.
    pub fn log(&self, name: &str) -> String {
        fs::read_to_string(self.path(&format!("{name}.log"))).unwrap_or_default()
    }

    /// The process started as `name`.
    pub fn child(&mut self, name: &str) -> &mut Child {
        &mut self
            .children
            .iter_mut()
            .find(|(n, _)| n == name)
            .expect("a started process")
            .1
    }

    /// Kills process `name` with SIGKILL and reaps it.
    pub fn kill(&mut self, name: &str) {
        let child = self.child(name);
        child.kill().unwrap_or_else(|e| panic!("kill {name}: {e}"));
        child.wait().unwrap_or_else(|e| panic!("reap {name}: {e}"));
    }

    /// Waits (bounded) for process `name` to exit by itself.
    pub fn wait_exit(&mut self, name: &str, timeout: Duration) -> ExitStatus {
        let child = self.child(name);
        let exited = wait_until(
            &format!("{name} to exit"),
            timeout,
            || Ok(child.try_wait()?),
        );
        exited.unwrap_or_else(|e| panic!("{e}; its log:\n{}", self.log(name)))
    }
}

impl Default for Processes {
    fn default() -> Processes {
        Processes::new()
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            for (name, _) in &self.children {
                eprintln!("--- {name}.log:\n{}", self.log(name));
            }
        }
    }
}

/// Runs a management program to its end.
pub fn run(program: &str, args: &[&str]) -> Output {
    Command::new(binary_path(program).expect("find the binary"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"))
}

/// A process's output as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Writes `dir/config.ini`: one management server (node 49), two data nodes in one node group
/// and API slots 50.., every port free a moment ago, with `defaults` (lines ending in `\n`)
/// added to `[ndbd default]`; returns its path and the management port.
pub fn write_mgm_config(dir: &Path, defaults: &str, api_slots: u16) -> (PathBuf, u16) {
    let (path, ports) = write_config(dir, defaults, &[(49, "mgm")], api_slots);
    (path, ports[0])
}

/// Starts ndb_mgmd (as `ndb_mgmd`) on the config of [`write_mgm_config`] (two data nodes,
/// `defaults` in `[ndbd default]`, `api_slots` API slots from 50), and waits until it listens;
/// returns its connectstring.
pub fn start_mgmd(procs: &mut Processes, defaults: &str, api_slots: u16) -> String {
    let (config, port) = write_mgm_config(procs.dir.path(), defaults, api_slots);
    procs.spawn(
        "ndb_mgmd",
        "ndb_mgmd",
        &["-f", &config.display().to_string()],
    );
    wait_until("ndb_mgmd to listen", Duration::from_secs(20), || {
        Ok(TcpStream::connect(("127.0.0.1", port)).ok().map(|_| ()))
    })
    .expect("ndb_mgmd listens");
    format!("127.0.0.1:{port}")
}

/// Writes `dir/config.ini` as [`write_mgm_config`] does, with two management servers, nodes 49
/// and 48 (in that order), each with its own PortNumber and DataDir (`mgm49`, `mgm48`);
/// returns its path and the two ports, 49's first.
pub fn write_two_mgm_config(dir: &Path, defaults: &str, api_slots: u16) -> (PathBuf, [u16; 2]) {
    let (path, ports) = write_config(dir, defaults, &[(49, "mgm49"), (48, "mgm48")], api_slots);
    (path, [ports[0], ports[1]])
}

/// Writes the config of [`write_mgm_config`] with a management server per `(NodeId, DataDir
/// under dir)`; returns its path and their ports, in that order.
fn write_config(
    dir: &Path,
    defaults: &str,
    mgm_nodes: &[(u16, &str)],
    api_slots: u16,
) -> (PathBuf, Vec<u16>) {
    let d = dir.display();
    let mut ports = Vec::new();
    let mut config = format!("[ndbd default]\nNoOfReplicas=2\nDataMemory=16M\n{defaults}");
    for (id, data_dir) in mgm_nodes {
        let port = free_port();
        ports.push(port);
        config.push_str(&format!(
            "[ndb_mgmd]\nNodeId={id}\nHostName=127.0.0.1\nPortNumber={port}\nDataDir={d}/{data_dir}\n"
        ));
    }
    config.push_str(&format!(
        "[ndbd]\nNodeId=1\nHostName=127.0.0.1\nServerPort={}\nDataDir={d}/n1\n\
         [ndbd]\nNodeId=2\nHostName=127.0.0.1\nServerPort={}\nDataDir={d}/n2\n",
        free_port(),
        free_port()
    ));
    for id in 50..50 + api_slots {
        config.push_str(&format!("[api]\nNodeId={id}\n"));
    }
    let path = dir.join("config.ini");
    fs::write(&path, config).expect("write the config");
    (path, ports)
}

/// Waits (bounded) until something listens on 127.0.0.1:`port`.
pub fn wait_listening(port: u16) {
    wait_until(
        &format!("a server to listen on port {port}"),
        Duration::from_secs(20),
        || {
            Ok(std::net::TcpStream::connect(("127.0.0.1", port))
                .ok()
                .map(|_| ()))
        },
    )
    .expect("the server listens");
}
