//! A client process a test can kill: the running test executable started again with
//! `--exact <test>`, so that the child is an ordinary test function that does nothing unless its
//! environment variable is set. The child is killed and reaped when the handle drops, however
//! the test ends.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};

/// A child test process; killed (SIGKILL) and reaped on drop.
#[derive(Debug)]
pub struct ChildTest {
    child: Child,
    /// Lines the child printed, read by a thread so a wait can be bounded.
    lines: mpsc::Receiver<String>,
}

impl ChildTest {
    /// Starts test `test` of this test executable with `env` set, its stdout captured.
    pub fn spawn(test: &str, env: (&str, &OsStr)) -> Result<ChildTest> {
        let exe = std::env::current_exe().context("find this test executable")?;
        let mut child = Command::new(exe)
            .args(["--exact", test, "--nocapture", "--test-threads", "1"])
            .env(env.0, env.1)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("spawn the child test {test}"))?;
        let stdout = child.stdout.take().context("the child's stdout is piped")?;
        let (lines_tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(ChildTest { child, lines })
    }

    /// Waits, at most `timeout` per line, until the child prints a line containing `marker`
    /// (libtest prints "test name ... " without a newline first, so the marker may be preceded
    /// by other text).
    pub fn wait_for_line(&mut self, marker: &str, timeout: Duration) -> Result<()> {
        loop {
            let line = self
                .lines
                .recv_timeout(timeout)
                .map_err(|e| anyhow!("the child did not print {marker:?}: {e}"))?;
            if line.contains(marker) {
                return Ok(());
            }
        }
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the child with SIGKILL and reaps it.
    pub fn kill(&mut self) -> Result<()> {
        self.child.kill().context("kill -9 the child")?;
        self.child.wait().context("reap the child")?;
        Ok(())
    }
}

impl Drop for ChildTest {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
