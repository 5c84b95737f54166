//! rndb-tests: the harness that starts real rndb clusters of real processes, for the
//! integration tests in `tests/`.
//!
//! - [`ClusterSpec`] describes a small cluster (data nodes, API slots, the few parameters tests
//!   vary) and writes its config.ini with free ports and data directories in a temporary
//!   directory.
//! - [`TestCluster`] starts one `ndbd` process per data node, waits (bounded) until each accepts
//!   TCP connections, connects API nodes to it, kills nodes on request, reads their logs, and
//!   stops every process when it drops, even when the test panics.
//! - [`Hosts`]: separate hosts (network namespaces with their own addresses) for data nodes
//!   whose HostNames differ ([`ClusterSpec::on_hosts`]).
//! - [`ops`]: one-transaction helpers (read, insert, recreate a table, compare rows).
//! - [`processes`]: ndb_mgmd and data nodes started by name with their own logs, and the
//!   management tools run to their end (`ndb_mgm -e`, `ndb_waiter`).
//! - [`ndbd_path`] and [`testread_perf_path`] find the workspace binaries a test runs, building
//!   them first when the test runs under cargo (see the `binaries` module for why and how).
//!
//! A test reads: start a cluster, connect, do operations, assert on values and NDB error codes;
//! every wait is a bounded poll ([`wait_until`]), never a sleep that hopes.
#![forbid(unsafe_code)]

pub mod bank;
mod binaries;
mod child;
mod cluster;
pub mod fake_data_node;
pub mod gateway;
mod hosts;
pub mod ops;
pub mod processes;
mod spec;

use std::fmt::Debug;
use std::io::{self, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

pub use binaries::{binary_path, ndbd_path, testread_perf_path};
pub use child::ChildTest;
pub use cluster::{restorable_gci, TestCluster, START_TIMEOUT, STOP_GRACE};
pub use hosts::{Hosts, HOSTS_MAX};
pub use spec::{
    data_dir, ClusterSpec, WrittenConfig, API_NODE_ID_FIRST, API_SLOT_COUNT_MAX,
    DATA_NODE_COUNT_MAX, DATA_NODE_ID_FIRST,
};

/// How often [`wait_until`] checks its condition.
pub const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// A TCP port that was free a moment ago: binds 127.0.0.1:0, reads the port the kernel chose,
/// and closes the socket. Another process may take it before the caller binds it;
/// [`TestCluster::start`] retries with new ports when that happens.
pub fn free_port() -> u16 {
    free_port_listener()
        .local_addr()
        .expect("read the bound address")
        .port()
}

/// A socket bound to a free port of 127.0.0.1 (the port is free again once it is dropped).
pub fn free_port_listener() -> TcpListener {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0")
}

/// A wait this long or longer is reported on stderr, even for a test that passes: a test
/// that passes slowly says where its time went.
const SLOW_WAIT: Duration = Duration::from_secs(10);

/// Reports a wait of `SLOW_WAIT` or more straight to stderr, past the test harness's
/// capture, so that CI's log shows it.
pub fn report_slow_wait(what: &str, took: Duration) {
    if took >= SLOW_WAIT {
        let test = std::thread::current().name().unwrap_or("?").to_string();
        let _ = writeln!(io::stderr(), "rndb-tests: {test}: {what} took {took:?}");
    }
}

/// Calls `check` every [`POLL_INTERVAL`] until it returns `Some`, an error, or `timeout` has
/// passed; `what` names the awaited event in the timeout error ("data node 1 to listen").
pub fn wait_until<T>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let start = Instant::now();
    let deadline = start + timeout;
    loop {
        if let Some(value) = check()? {
            report_slow_wait(what, start.elapsed());
            return Ok(value);
        }
        if Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// Asserts that `result` failed with NDB error `code`, naming `what` was attempted otherwise.
#[track_caller]
pub fn assert_ndb_code<T: Debug>(result: Result<T, rndb_api::Error>, code: u32, what: &str) {
    match result {
        Ok(value) => panic!("{what}: expected NDB error {code}, got success {value:?}"),
        Err(e) => assert_eq!(
            e.code(),
            Some(code),
            "{what}: expected NDB error {code}, got {e}"
        ),
    }
}
