//! The angel: NDB's parent process that starts the data node process and starts it again when
//! it stops asking to be restarted (`ndb_mgm -e "N RESTART [-i] [-n]"`), or, with
//! StopOnError=0, when it fails.
//!
//! ```text
//!  ndbd (angel) ── spawns ──> ndbd --angel-pid P --allocated-nodeid N --report-fd F
//!     ▲                          [--angel-start KIND]
//!     │                          │ its exit code says what next: 0 stop, 64 + NDB's
//!     └──────────────────────────┘ NdbRestartType restart, other (or a signal): error
//! ```
//!
//! - The angel forwards SIGTERM and SIGINT to the data node process (a graceful stop) and exits
//!   with its exit code. After an error exit or a crash it exits with it too (StopOnError=1,
//!   NDB's default), or, with StopOnError=0, starts the node again (never `--initial`, which
//!   would lose its files). A node whose files cannot restore the GCI the others' system
//!   restart chose (it stopped before they saved it) exits with [`REJOIN_EXIT_CODE`] and is
//!   started again whatever StopOnError says: it joins by node restart.
//! - The data node process writes `started` to the pipe `--report-fd` once it serves. A
//!   process that failed before it did counts as a failed start: after MaxStartFailRetries of
//!   them in a row (0: no limit) the angel gives up, and it waits StartFailRetryDelay seconds
//!   before each new try, as NDB's.
//! - The data node process asks the kernel to kill it when the angel dies
//!   (`PR_SET_PDEATHSIG`), so a SIGKILL of the angel leaves no data node running, and it exits
//!   at once if the angel is gone before it asked.
//! - `--foreground` runs the data node process itself, without an angel, as NDB's does.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rndb_config::DataNodeConfig;
use rndb_mgm::node_report::RestartRequest;

/// How often the angel looks at its child and at the signals it got.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// Restart exit codes are NDB's `NdbRestartType` plus this, so that none is an error exit (1),
/// a panic (101) or a signal's (128 + n).
const RESTART_EXIT_CODE_BASE: i32 = 64;

/// The exit code of a data node process whose files cannot restore the GCI of the system
/// restart the other data nodes run (`rndb_ndbd::RejoinNeeded`): the angel starts it again
/// whatever StopOnError says, as a failed start (MaxStartFailRetries, StartFailRetryDelay), and
/// it joins by node restart once they serve. Not one of NDB's codes.
pub const REJOIN_EXIT_CODE: i32 = RESTART_EXIT_CODE_BASE + 8;

/// NDB's `NdbRestartType` values.
const NRT_NO_START_RESTART: i32 = 1;
const NRT_DO_START_RESTART: i32 = 2;
const NRT_NO_START_INITIAL_START: i32 = 3;
const NRT_DO_START_INITIAL_START: i32 = 4;

/// How the angel starts its child again (`--angel-start`).
pub const START_KINDS: [&str; 4] = ["restart", "nostart", "initial", "initial-nostart"];

/// The exit code a data node process under an angel exits with to be started again as
/// `request` says.
pub fn restart_exit_code(request: RestartRequest) -> i32 {
    RESTART_EXIT_CODE_BASE
        + match (request.initial, request.no_start) {
            (false, true) => NRT_NO_START_RESTART,
            (false, false) => NRT_DO_START_RESTART,
            (true, true) => NRT_NO_START_INITIAL_START,
            (true, false) => NRT_DO_START_INITIAL_START,
        }
}

fn restart_of_exit_code(code: i32) -> Option<RestartRequest> {
    let (initial, no_start) = match code - RESTART_EXIT_CODE_BASE {
        NRT_NO_START_RESTART => (false, true),
        NRT_DO_START_RESTART => (false, false),
        NRT_NO_START_INITIAL_START => (true, true),
        NRT_DO_START_INITIAL_START => (true, false),
        _ => return None,
    };
    Some(RestartRequest { initial, no_start })
}

/// The `--angel-start` value for `request`, and back.
fn start_kind(request: RestartRequest) -> &'static str {
    match (request.initial, request.no_start) {
        (false, false) => START_KINDS[0],
        (false, true) => START_KINDS[1],
        (true, false) => START_KINDS[2],
        (true, true) => START_KINDS[3],
    }
}

pub fn parse_start_kind(kind: &str) -> Option<RestartRequest> {
    let index = START_KINDS.iter().position(|k| *k == kind)?;
    Some(RestartRequest {
        initial: index >= 2,
        no_start: index % 2 == 1,
    })
}

/// In the data node process started by an angel: dies with the angel (SIGKILL when it exits),
/// and refuses to run if the angel `angel_pid` is gone already.
pub fn watch_angel(angel_pid: u32) -> anyhow::Result<()> {
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
        .context("ask to be killed when the angel exits (PR_SET_PDEATHSIG)")?;
    // The angel may have died before the request above: then this process was handed to
    // another parent and would never get the signal.
    let parent = nix::unistd::getppid();
    anyhow::ensure!(
        i64::from(parent.as_raw()) == i64::from(angel_pid),
        "the angel (pid {angel_pid}) is gone: not starting"
    );
    Ok(())
}

/// What the data node process writes to its `--report-fd` once it serves.
const STARTED_REPORT: &[u8] = b"started\n";

/// What the angel does when its data node process fails: NDB's StopOnError,
/// MaxStartFailRetries and StartFailRetryDelay.
#[derive(Clone, Copy, Debug)]
pub struct OnError {
    pub stop_on_error: bool,
    pub max_start_fail_retries: u32,
    pub start_fail_retry_delay: Duration,
}

impl OnError {
    pub fn of(node: &DataNodeConfig) -> OnError {
        OnError {
            stop_on_error: node.stop_on_error,
            max_start_fail_retries: node.max_start_fail_retries,
            start_fail_retry_delay: Duration::from_secs(u64::from(node.start_fail_retry_delay_s)),
        }
    }
}

/// In the data node process started by an angel: tells the angel, through the pipe it passed
/// as `--report-fd`, that the node serves (a later failure is not a failed start). Best effort:
/// an angel that cannot hear it counts a failure as a failed start.
pub fn report_started(report_fd: i32) {
    let path = format!("/proc/self/fd/{report_fd}");
    let written = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .and_then(|mut pipe| pipe.write_all(STARTED_REPORT));
    if let Err(e) = written {
        tracing::warn!("could not tell the angel the node started ({path}): {e}");
    }
}

/// Runs the angel of data node `node_id`: starts the data node process with this process's
/// arguments and starts it again whenever it exits asking for a restart, or, as `on_error`
/// says, after it failed. Returns the exit code the angel exits with (the data node process's
/// last).
pub fn run(node_id: u16, on_error: OnError) -> anyhow::Result<i32> {
    let terminate = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, terminate.clone())
            .context("install the angel's signal handler")?;
    }
    let exe = std::env::current_exe().context("find the ndbd executable")?;
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let mut start: Option<RestartRequest> = None;
    let mut failed_starts = 0u32;
    loop {
        let (report, report_child) = report_pipe()?;
        let mut command = Command::new(&exe);
        command
            .args(&args)
            .arg("--angel-pid")
            .arg(std::process::id().to_string())
            .arg("--allocated-nodeid")
            .arg(node_id.to_string())
            .arg("--report-fd")
            .arg(report_child.as_raw_fd().to_string());
        if let Some(request) = start {
            command.arg("--angel-start").arg(start_kind(request));
        }
        let mut child = command.spawn().context("start the data node process")?;
        // Only the child holds the write end now: its exit closes the pipe.
        drop(report_child);
        tracing::info!(
            "Angel pid: {} started child: {}",
            std::process::id(),
            child.id()
        );
        let status = wait(&mut child, &terminate)?;
        let failed = match status.code() {
            Some(0) => {
                tracing::info!("Angel shutting down");
                return Ok(0);
            }
            Some(code) => match restart_of_exit_code(code) {
                Some(_) if terminate.load(Ordering::Relaxed) => {
                    tracing::info!("Angel shutting down (signalled while the node restarted)");
                    return Ok(0);
                }
                Some(request) => {
                    tracing::info!(
                        initial = request.initial,
                        no_start = request.no_start,
                        "Angel restarting child process"
                    );
                    start = Some(request);
                    failed_starts = 0;
                    continue;
                }
                None if code == REJOIN_EXIT_CODE => {
                    tracing::info!(
                        "Angel: the data node process cannot restore the others' restart GCI: \
                         starting it again, to join by node restart"
                    );
                    code
                }
                None => {
                    tracing::info!("Angel: the data node process exited with code {code}");
                    code
                }
            },
            None => {
                let signal = std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0);
                tracing::error!("Angel: the data node process was killed by signal {signal}");
                128 + signal
            }
        };
        let rejoin = failed == REJOIN_EXIT_CODE;
        if (on_error.stop_on_error && !rejoin) || terminate.load(Ordering::Relaxed) {
            return Ok(failed);
        }
        // StopOnError=0: start it again, restoring its files (never --initial).
        let mut delay = Duration::ZERO;
        if started(report) {
            failed_starts = 0;
        } else {
            failed_starts += 1;
            let max = on_error.max_start_fail_retries;
            if max > 0 && failed_starts >= max {
                tracing::error!(
                    "Angel detected too many startup failures({failed_starts}), not restarting \
                     again (MaxStartFailRetries={max})"
                );
                return Ok(failed);
            }
            tracing::info!("Angel detected startup failure, count: {failed_starts}");
            delay = on_error.start_fail_retry_delay;
        }
        tracing::info!(
            "Child has terminated (pid {}). Angel restarting child process",
            child.id()
        );
        if !sleep_unless(delay, &terminate) {
            tracing::info!("Angel shutting down (signalled before the restart)");
            return Ok(failed);
        }
        start = Some(RestartRequest {
            initial: false,
            no_start: false,
        });
    }
}

/// A pipe for the data node process's reports: the angel's read end (non-blocking, not
/// inherited) and the end the child inherits.
fn report_pipe() -> anyhow::Result<(OwnedFd, OwnedFd)> {
    let (read, write) = nix::unistd::pipe().context("create the angel's report pipe")?;
    fcntl(read.as_raw_fd(), FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))
        .and_then(|_| fcntl(read.as_raw_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK)))
        .context("set up the angel's report pipe")?;
    Ok((read, write))
}

/// True when the data node process that just exited had reported that it served.
fn started(report: OwnedFd) -> bool {
    let mut said = Vec::new();
    // Non-blocking: what the child wrote before it exited is there.
    let _ = std::fs::File::from(report).read_to_end(&mut said);
    said.windows(STARTED_REPORT.len())
        .any(|w| w == STARTED_REPORT)
}

/// Sleeps `delay`, returning false early if the angel was asked to stop.
fn sleep_unless(delay: Duration, terminate: &AtomicBool) -> bool {
    let until = Instant::now() + delay;
    loop {
        if terminate.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        if now >= until {
            return true;
        }
        std::thread::sleep(POLL_INTERVAL.min(until - now));
    }
}

/// Waits for `child` to exit, passing a SIGTERM or SIGINT the angel got on as SIGTERM (once).
fn wait(child: &mut Child, terminate: &AtomicBool) -> anyhow::Result<ExitStatus> {
    let pid = Pid::from_raw(i32::try_from(child.id()).context("child pid")?);
    let mut forwarded = false;
    loop {
        if let Some(status) = child.try_wait().context("wait for the data node process")? {
            return Ok(status);
        }
        if terminate.load(Ordering::Relaxed) && !forwarded {
            forwarded = true;
            tracing::info!("Angel: stopping the data node process (SIGTERM)");
            let _ = kill(pid, Signal::SIGTERM);
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_kinds_round_trip_through_exit_codes_and_arguments() {
        for initial in [false, true] {
            for no_start in [false, true] {
                let request = RestartRequest { initial, no_start };
                let code = restart_exit_code(request);
                assert!(code > 1 && code < 101, "{code}");
                assert_eq!(restart_of_exit_code(code), Some(request));
                assert_eq!(parse_start_kind(start_kind(request)), Some(request));
            }
        }
        for code in [0, 1, 2, 63, 69, REJOIN_EXIT_CODE, 101, 137] {
            assert_eq!(restart_of_exit_code(code), None, "{code}");
        }
        assert_eq!(parse_start_kind("bogus"), None);
    }
}
