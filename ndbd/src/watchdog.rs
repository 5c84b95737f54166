//! The watchdog: NDB's thread that stops a data node whose execution thread no longer makes
//! progress (TimeBetweenWatchDogCheck).
//!
//! The execution loop marks each stage of its turn in [`Watched`] (one relaxed store). Every
//! [`CHECK_EVERY`] the watchdog thread takes the mark and puts 0 in its place: a 0 found means
//! no stage began since the last check. After TimeBetweenWatchDogCheck without one it warns,
//! naming the stage the thread is stuck in, and again each interval after; past three
//! intervals it stops the process with NDB's error 6050 (an error exit, which an angel with
//! StopOnError=0 starts again). The loop never sleeps longer than its timer tick, so an idle
//! node still marks a turn every few milliseconds.
//!
//! A node that does not serve yet is only warned of: a system restart loads each local
//! checkpoint file in one step, which for a large DataMemory may take longer than three
//! intervals, and stopping it would only start the same restore again.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rndb_config::NodeId;

/// How often the watchdog looks (NDB's: 100 ms), or each TimeBetweenWatchDogCheck if shorter.
pub const CHECK_EVERY: Duration = Duration::from_millis(100);

/// The stages of a turn of the execution loop, as the watchdog names them.
pub const POLLING: u32 = 1;
pub const READING_LINKS: u32 = 2;
pub const EXECUTING_SIGNALS: u32 = 3;
pub const TIMERS_AND_JOBS: u32 = 4;
pub const FILE_COMPLETIONS: u32 = 5;
pub const SENDING: u32 = 6;

fn stage_name(stage: u32) -> &'static str {
    match stage {
        POLLING => "polling its links",
        READING_LINKS => "reading its links",
        EXECUTING_SIGNALS => "executing signals",
        TIMERS_AND_JOBS => "timers and jobs",
        FILE_COMPLETIONS => "file completions",
        SENDING => "sending",
        _ => "starting",
    }
}

/// The execution thread's last stage, 0 once the watchdog has seen it, and whether the node
/// serves.
#[derive(Debug, Default)]
pub struct Watched {
    stage: AtomicU32,
    serving: AtomicBool,
}

impl Watched {
    /// The execution thread begins `stage`.
    #[inline]
    pub fn at(&self, stage: u32) {
        self.stage.store(stage, Ordering::Relaxed);
    }

    /// The node serves: from now on a stuck execution thread stops it.
    pub fn serving(&self) {
        self.serving.store(true, Ordering::Relaxed);
    }
}

/// Starts the watchdog of node `me` over `watched`, checking against `interval`
/// (TimeBetweenWatchDogCheck) until `stop` is set.
/// A stop is recorded in the error log `error_log` names (DataDir, MaxNoOfSavedMessages).
pub fn spawn(
    me: NodeId,
    watched: Arc<Watched>,
    interval: Duration,
    stop: Arc<AtomicBool>,
    error_log: (PathBuf, u32),
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("watchdog".into())
        .spawn(move || run(me, &watched, interval, &stop, &error_log))
}

fn run(
    me: NodeId,
    watched: &Watched,
    interval: Duration,
    stop: &AtomicBool,
    error_log: &(PathBuf, u32),
) {
    let check = CHECK_EVERY.min(interval);
    let mut last_check = Instant::now();
    let mut progress = last_check;
    let mut last_stage = 0;
    let mut warn_at = interval;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(check);
        let now = Instant::now();
        let slept = now.duration_since(last_check);
        last_check = now;
        let stage = watched.stage.swap(0, Ordering::Relaxed);
        if stage != 0 {
            (progress, last_stage, warn_at) = (now, stage, interval);
            continue;
        }
        if slept > interval {
            // This thread did not run either (the host paused, or starved it): what the
            // execution thread did meanwhile is unknown, so the count starts again.
            tracing::warn!(
                "Watchdog: Warning overslept {} ms, expected {} ms",
                slept.as_millis(),
                check.as_millis()
            );
            (progress, warn_at) = (now, interval);
            continue;
        }
        let stuck = now.duration_since(progress);
        let action = stage_name(last_stage);
        if stuck > 3 * interval && watched.serving.load(Ordering::Relaxed) {
            let why = format!(
                "error 6050: WatchDog terminate, internal error or massive overload on the \
                 machine running this node: the execution thread of data node {me} was stuck \
                 in {action} for {} ms (3 × TimeBetweenWatchDogCheck={})",
                stuck.as_millis(),
                interval.as_millis()
            );
            tracing::error!("{why}");
            crate::error_log::record(&error_log.0, me, &why, error_log.1);
            eprintln!("ndbd: error: {why}");
            std::process::exit(1);
        }
        if stuck >= warn_at {
            let starting = if watched.serving.load(Ordering::Relaxed) {
                ""
            } else {
                " (not stopped: the node is starting)"
            };
            tracing::warn!(
                "Ndb kernel thread is stuck in: {action} elapsed={}{starting}",
                stuck.as_millis()
            );
            warn_at += interval;
        }
    }
}
