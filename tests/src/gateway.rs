//! A running `rndb-redis` gateway (an API node serving the Redis protocol), for tests that
//! need an API node in a process of its own: one they can stop (SIGSTOP) and kill.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::{binary_path, TestCluster};

/// How long the gateway may take to connect and listen.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running `rndb-redis`, killed when dropped. Its log is `rndb-redis.log` in the cluster's
/// directory.
#[derive(Debug)]
pub struct Gateway {
    pub child: Child,
    /// The port it serves Redis clients on.
    pub port: u16,
    /// The API node id it took at start-up (its first line says).
    pub node_id: u16,
}

impl Gateway {
    /// Starts the gateway on a free port.
    pub fn start(cluster: &TestCluster) -> Gateway {
        Gateway::start_with(cluster, &["--port", "0"])
    }

    /// Starts the gateway with `args` after `--config-file`.
    pub fn start_with(cluster: &TestCluster, args: &[&str]) -> Gateway {
        let binary = binary_path("rndb-redis").expect("the rndb-redis binary");
        let log = std::fs::File::create(Gateway::log_path(cluster)).expect("log file");
        let mut child = Command::new(binary)
            .arg("--config-file")
            .arg(cluster.config_path())
            .args(args)
            .env("RUST_BACKTRACE", "0")
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("start rndb-redis");
        let stdout = child.stdout.take().expect("stdout");
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = sender.send(line);
            }
        });
        let line = receiver.recv_timeout(START_TIMEOUT);
        // "rndb-redis listening on 127.0.0.1:PORT as API node N"
        let parsed = line.as_deref().ok().and_then(|line| {
            let rest = line.strip_prefix("rndb-redis listening on ")?;
            let (addr, node) = rest.split_once(" as API node ")?;
            let port = addr.rsplit(':').next()?.parse().ok()?;
            Some((port, node.trim().parse().ok()?))
        });
        let Some((port, node_id)) = parsed else {
            let _ = child.kill();
            let _ = child.wait();
            let log = std::fs::read_to_string(Gateway::log_path(cluster));
            panic!("rndb-redis did not start ({line:?}); its log: {log:?}");
        };
        Gateway {
            child,
            port,
            node_id,
        }
    }

    /// Where the gateway of `cluster` logs.
    pub fn log_path(cluster: &TestCluster) -> std::path::PathBuf {
        cluster.dir().join("rndb-redis.log")
    }

    /// The gateway's address as a Redis URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
