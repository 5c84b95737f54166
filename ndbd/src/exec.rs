//! The execution loop: one thread that polls every link, runs the kernel's blocks, and sleeps
//! in one place.
//!
//! Each turn: wait for input (spinning for SchedulerSpinTimer µs after the last work, then
//! sleeping in the poller until input, a new link or the next timer tick), read every ready
//! link into the inbox, hand each frame to the kernel, run the job queue, run timers, flush
//! every link that has output, and close links that failed. A link that fails is closed alone;
//! the loop goes on serving the others. The poller is a system call: a turn skips it while a
//! link already has input (up to `POLLS_SKIPPED_MAX` turns in a row), and a spin looks at the
//! shared-memory rings `RING_CHECKS_PER_POLL` times between two polls. Where several data
//! nodes' execution threads share one CPU (`Settings::shares_cpu`), a turn that ends with output
//! for one API node's socket link leaves it to `wait`, which sends it in the same system call that puts the
//! loop to sleep (`rndb_transporter::sleeper`), so that the client it wakes does not preempt
//! the loop on its way to sleep; a timerfd then bounds those sleeps by the timer tick. Such a
//! loop, spinning, yields the CPU (`sched_yield`) on every turn that finds no input, once
//! `SHARED_CPU_YIELD_GRACE` has passed since its last work: the other loop runs at once instead
//! of at the end of this one's time slice, so a message between two spinning data nodes on one
//! CPU costs a context switch (config/examples/local-spin.ini).

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use rndb_config::NodeId;
use rndb_transporter::registry::Registry;
use rndb_transporter::sleeper::{EpollEvent, Sleeper};
use rndb_transporter::spin::AdaptiveSpin;
use rndb_transporter::{
    FlushStatus, FrameHeader, TransportError, Transporter, FRAME_BYTES_MAX, RECEIVE_SLICE_BYTES,
};

use crate::blocks::dbinfo::LinkInfo;
use crate::blocks::node_set::NodeSet;
use crate::blocks::{Kernel, Outbox, SendFailure};
use crate::listener::Connected;
use crate::ndbfs::{FsConf, FsRequest};
use crate::watchdog;

/// The loop's [`LinkOutbox`] over its own fields (a macro, not a method: the kernel, also a
/// field, is borrowed beside it).
macro_rules! link_outbox {
    ($exec:expr) => {
        LinkOutbox {
            registry: &mut $exec.registry,
            scratch: &mut $exec.scratch,
            dirty: &mut $exec.dirty,
            broken: &mut $exec.broken,
            stalled: &mut $exec.stalled,
            counters: &mut $exec.counters,
            link_stats: &mut $exec.link_stats,
        }
    };
}

/// The poller token of the wake-up that announces new links.
pub const WAKER_TOKEN: Token = Token(usize::MAX - 1);
/// The poller token of the timer that ends a sleep in the sleeper (which has no timeout).
const TICKER_TOKEN: Token = Token(usize::MAX - 2);
/// Events one poll or sleep takes at most.
const EVENTS_MAX: usize = 1024;
/// How often timers (lock-wait and inactivity timeouts) run.
pub const TIMER_TICK: Duration = Duration::from_millis(10);
/// The longest sleep while a link has output the kernel would not take yet.
const RETRY_FLUSH_AFTER: Duration = Duration::from_millis(1);
/// Turns in a row that may skip the poller because a link already has input (see
/// `ExecLoop::wait`); then sockets are polled even while shared-memory rings stay busy.
const POLLS_SKIPPED_MAX: u32 = 8;
/// The most output a turn leaves to be sent with the sleep (the sleeper sends a copy): a larger
/// answer, a scan batch say, is flushed as usual.
const SLEEP_SEND_BYTES_MAX: usize = 16 * 1024;
/// While spinning with shared-memory links, how many times the rings are looked at before each
/// poll of the sockets. A zero-timeout poll is a system call (about 0.2 µs here) that a frame
/// arriving in a ring waits out; looking at a ring is a load from a cache line.
const RING_CHECKS_PER_POLL: u32 = 32;
/// A spinning loop that shares its CPU with another data node's looks at its rings this many
/// times between two yields: the other loop's frames wait for one such turn.
const RING_CHECKS_PER_YIELD: u32 = 4;
/// How long after its last work a loop that shares its CPU spins without yielding it: a
/// client that answers at once (the next request of a serial run, the commit after a read)
/// finds it running instead of behind the other loop's turn.
const SHARED_CPU_YIELD_GRACE: Duration = Duration::from_micros(5);

/// How the loop waits.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// SchedulerSpinTimer.
    pub spin: Duration,
    /// The execution thread shares its CPU with other data nodes' (and so with their clients):
    /// an answer to one link is sent in the call that puts the loop to sleep (see
    /// `rndb_transporter::sleeper`), so that the client it wakes does not preempt the loop.
    pub shares_cpu: bool,
}

/// The loop's state. Lives on the execution thread.
pub struct ExecLoop {
    kernel: Kernel,
    registry: Registry,
    poll: Poll,
    events: Events,
    /// What the poller (or the sleeper) reported this turn.
    ready: Vec<Ready>,
    new_links: Receiver<Box<dyn Transporter>>,
    connected: Connected,
    /// Data nodes seen to fail, shared with the listener, which refuses them.
    /// SchedulerSpinTimer.
    spin_base: Duration,
    /// How long to spin after the last work, at most SchedulerSpinTimer or the longest
    /// ShmSpintime of the live links (recomputed when links come and go), less when spinning
    /// has not been paying off (see `rndb_transporter::spin`).
    spin: AdaptiveSpin,
    shutdown: Arc<AtomicBool>,
    /// Payload bytes of the frames read this turn.
    inbox: Vec<u8>,
    /// The frames read this turn: sender, header, payload range in `inbox`.
    inbox_frames: Vec<(NodeId, FrameHeader, Range<usize>)>,
    /// New links, which may hold input that arrived before they were registered.
    hot: Vec<NodeId>,
    /// Links with output not yet taken by the kernel (a bitmap: every frame sent marks its
    /// link, and hashing showed in profiles).
    dirty: NodeSet,
    /// Links to close this turn: the node, the reason, and whether this node chose to close
    /// it (its peer broke the protocol or does not read) rather than the peer being gone.
    broken: Vec<(NodeId, String, bool)>,
    /// Set when this node must stop (see `close_broken`).
    fatal: Option<String>,
    /// `fatal` came from the kernel, and a restart cures it (`Kernel::fatal_cured_by_rejoin`).
    rejoin: bool,
    /// The graceful stop began in the kernel (another data node stopped every data node), not
    /// from the shutdown flag.
    stopped_by_itself: bool,
    /// Reused payload buffer for outgoing frames.
    scratch: Vec<u8>,
    /// Links not to flush early again this turn (see `LinkOutbox::stalled`).
    stalled: Vec<NodeId>,
    /// Frames and bytes through the links since the start (reported to ndb_mgmd).
    counters: LinkCounters,
    /// Each node's link, by node id (ndbinfo.transporters).
    link_stats: Vec<LinkStat>,
    /// Turns since the poller last ran (see `POLLS_SKIPPED_MAX`).
    polls_skipped: u32,
    /// Some link is a shared-memory link (recomputed when links come and go).
    has_shm_links: bool,
    /// Sends a lone link's answer and sleeps in one system call, where io_uring allows (see
    /// `rndb_transporter::sleeper`), with the ticker that bounds its sleeps; `None` sleeps in
    /// the poller after a plain flush.
    sleeper: Option<(Sleeper, TimerFd)>,
    /// Another data node's execution thread shares this one's CPU: a spinning turn that finds
    /// no input, past `SHARED_CPU_YIELD_GRACE`, yields the CPU (`sched_yield`), so that the
    /// other loop runs now, not at the end of this one's time slice.
    yields_when_spinning: bool,
    /// The one link with output at the end of the last turn, left for `wait` to send with its
    /// sleep (or to flush, when it does not sleep).
    deferred: Option<NodeId>,
    /// The NDBFS thread: file requests to it, completions from it (`None`: no files).
    ndbfs: Option<(Sender<FsRequest>, Receiver<FsConf>)>,
    /// Where the kernel's state is published for ndb_mgmd's report link every tick (`None`: no
    /// management server).
    probe: Option<Arc<crate::mgm_report::Probe>>,
    /// Called once, at the first tick that finds the node serving (the angel's report).
    on_started: Option<Box<dyn FnOnce() + Send>>,
    /// Each stage of a turn, marked for the watchdog.
    watched: Arc<crate::watchdog::Watched>,
    /// StartFailureTimeout: the node stops (6100) if it does not serve this long after the
    /// loop began (`None`: no limit).
    start_failure_timeout: Option<Duration>,
}

impl std::fmt::Debug for ExecLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecLoop")
            .field("links", &self.registry)
            .field("spin", &self.spin.configured())
            .field("spin_base", &self.spin_base)
            .finish()
    }
}

impl ExecLoop {
    /// A loop over `kernel`. Make it on the thread that will run it: with `shares_cpu` its
    /// sleeper's ring accepts calls from the thread that made it only.
    pub fn new(
        kernel: Kernel,
        poll: Poll,
        new_links: Receiver<Box<dyn Transporter>>,
        connected: Connected,
        settings: Settings,
        shutdown: Arc<AtomicBool>,
    ) -> ExecLoop {
        let Settings { spin, shares_cpu } = settings;
        let sleeper = if shares_cpu {
            new_sleeper(&poll)
                .inspect_err(|reason| {
                    tracing::warn!("answers are sent before sleeping, not with it: {reason}");
                })
                .ok()
        } else {
            None
        };
        ExecLoop {
            kernel,
            registry: Registry::new(),
            poll,
            events: Events::with_capacity(EVENTS_MAX),
            ready: Vec::with_capacity(EVENTS_MAX),
            new_links,
            connected,
            spin_base: spin,
            spin: AdaptiveSpin::new(spin),
            shutdown,
            inbox: Vec::with_capacity(1 << 20),
            inbox_frames: Vec::with_capacity(4096),
            hot: Vec::new(),
            dirty: NodeSet::new(),
            broken: Vec::new(),
            fatal: None,
            rejoin: false,
            stopped_by_itself: false,
            scratch: Vec::with_capacity(1 << 16),
            stalled: Vec::new(),
            counters: LinkCounters::default(),
            link_stats: vec![LinkStat::default(); NODE_IDS],
            polls_skipped: 0,
            has_shm_links: false,
            sleeper,
            yields_when_spinning: shares_cpu,
            deferred: None,
            ndbfs: None,
            probe: None,
            on_started: None,
            watched: Arc::default(),
            start_failure_timeout: None,
        }
    }

    /// Carries out the kernel's file requests on the NDBFS thread behind these channels.
    pub fn with_ndbfs(mut self, requests: Sender<FsRequest>, confs: Receiver<FsConf>) -> ExecLoop {
        self.ndbfs = Some((requests, confs));
        self
    }

    /// Stops the node (6100) if it does not serve `limit` after the loop began.
    pub fn with_start_failure_timeout(mut self, limit: Duration) -> ExecLoop {
        self.start_failure_timeout = Some(limit);
        self
    }

    /// Marks each stage of a turn in `watched`, for the watchdog.
    pub fn with_watched(mut self, watched: Arc<crate::watchdog::Watched>) -> ExecLoop {
        self.watched = watched;
        self
    }

    /// Calls `on_started` once, at the first timer tick that finds the node serving.
    pub fn with_on_started(mut self, on_started: Box<dyn FnOnce() + Send>) -> ExecLoop {
        self.on_started = Some(on_started);
        self
    }

    /// Publishes the kernel's state into `probe` every timer tick (for ndb_mgmd).
    pub fn with_probe(mut self, probe: Arc<crate::mgm_report::Probe>) -> ExecLoop {
        self.probe = Some(probe);
        self
    }

    /// Hands the kernel the file requests that completed, and NDBFS the kernel's new ones.
    fn pump_files(&mut self, now: Instant) -> bool {
        if self.ndbfs.is_none() {
            return false;
        }
        let mut worked = false;
        // A reason to stop the kernel already has goes first, with whether a restart cures it.
        self.take_kernel_fatal();
        let Some((requests, confs)) = &self.ndbfs else {
            return false;
        };
        let mut out = link_outbox!(self);
        while let Ok(conf) = confs.try_recv() {
            worked = true;
            if let Err(why) = self.kernel.on_fs_conf(conf, &mut out, now) {
                // The kernel says, as it fails, whether a restart cures this.
                stop_for_kernel(&mut self.fatal, &mut self.rejoin, &self.kernel, why);
            }
        }
        if worked {
            self.kernel.run_jobs(&mut out, now);
        }
        for request in self.kernel.take_fs_requests() {
            if requests.send(request).is_err() {
                self.fatal.get_or_insert("the NDBFS thread stopped".into());
            }
        }
        self.take_kernel_fatal();
        worked
    }

    /// The kernel's reason to stop, if it has one and none came before; whether a restart
    /// cures it is taken with it (`rejoin`).
    fn take_kernel_fatal(&mut self) {
        if let Some(why) = self.kernel.take_fatal() {
            stop_for_kernel(&mut self.fatal, &mut self.rejoin, &self.kernel, why);
        }
    }

    /// After `run` failed: true when the node stopped because its files cannot restore the
    /// GCI of the system restart the others run (`Kernel::fatal_cured_by_rejoin`).
    pub fn rejoin_cures(&self) -> bool {
        self.rejoin
    }

    /// After `run`: true when the kernel began the stop by itself (see `stopped_by_itself`).
    pub fn stopped_by_itself(&self) -> bool {
        self.stopped_by_itself
    }

    /// Runs until the shutdown flag is set and the kernel's graceful stop has saved what this
    /// node answered (`Kernel::ready_to_stop`). Fails when this node had to stop itself.
    pub fn run(&mut self) -> Result<(), String> {
        let began = Instant::now();
        let mut served = false;
        let mut idle = Idle::new(began, self.spin.budget());
        let mut next_tick = idle.since + TIMER_TICK;
        let mut stop_begun = false;
        loop {
            // Acquire: a management server's stop sets whether it is of every data node first.
            // The kernel stops by itself when another data node stops with every data node
            // (`Kernel::exec_stop_saved_rep`).
            if self.shutdown.load(Ordering::Acquire) || self.kernel.is_stopping() {
                let now = Instant::now();
                if !stop_begun {
                    stop_begun = true;
                    // For the threads that watch it (the report link to ndb_mgmd), after saying
                    // whether the kernel began the stop itself.
                    self.stopped_by_itself = !self.shutdown.load(Ordering::Acquire);
                    if let (true, Some(probe)) = (self.stopped_by_itself, &self.probe) {
                        probe.note_stopped_by_itself();
                    }
                    self.shutdown.store(true, Ordering::Release);
                    let system = self.probe.as_ref().is_some_and(|p| p.system_stop());
                    self.kernel.begin_stop(now, system);
                }
                let mut out = link_outbox!(self);
                if self.kernel.ready_to_stop(&mut out, now) {
                    break;
                }
            }
            self.watched.at(watchdog::POLLING);
            let (slept, waited_from) = self.wait(&mut idle, next_tick);
            // A turn that did not sleep takes its time from the start of its wait, at most a
            // spin of a few ring checks and a zero-timeout poll ago: a clock read costs ~20 ns
            // on this machine's virtual CPUs, on the way from a request's arrival to its answer.
            let now = if slept { Instant::now() } else { waited_from };
            self.watched.at(watchdog::READING_LINKS);
            let mut worked = self.read_links(slept);
            self.watched.at(watchdog::EXECUTING_SIGNALS);
            worked |= self.dispatch(now);
            if now >= next_tick {
                self.watched.at(watchdog::TIMERS_AND_JOBS);
                self.kernel.on_timer(now);
                next_tick = now + TIMER_TICK;
                if let Some(probe) = &self.probe {
                    if let Some(single_user) = probe.take_single_user_request() {
                        self.kernel.set_single_user(single_user);
                    }
                    if let Some(command) = probe.take_backup_command() {
                        self.kernel.backup_command(command, now);
                    }
                    let send_buffer_bytes: usize = self
                        .registry
                        .iter_mut()
                        .map(|(_, link)| link.pending_send_bytes())
                        .sum();
                    probe.publish(&self.kernel, &self.counters, send_buffer_bytes as u64);
                }
                self.publish_links();
                if !served && self.kernel.is_started() {
                    served = true;
                    self.watched.serving();
                    if let Some(on_started) = self.on_started.take() {
                        on_started();
                    }
                }
                if let Some(limit) = self.start_failure_timeout {
                    if !served && now.duration_since(began) > limit {
                        self.fatal.get_or_insert(format!(
                            "error 6100: Total restart time too long, consider increasing \
                             StartFailureTimeout or investigate error(s) on other node(s): not \
                             started {} ms after the start began (StartFailureTimeout={})",
                            now.duration_since(began).as_millis(),
                            limit.as_millis()
                        ));
                    }
                }
                worked |= self.run_jobs(now);
            }
            self.watched.at(watchdog::FILE_COMPLETIONS);
            worked |= self.pump_files(now);
            self.watched.at(watchdog::SENDING);
            self.flush_links(true);
            worked |= self.close_broken(now);
            // A kernel that must stop says so after any step (a start that cannot restore, a
            // node declared failed, a node group lost), with or without files.
            self.take_kernel_fatal();
            if self.fatal.is_some() {
                break;
            }
            if worked {
                if !idle.slept && !idle.recorded && !idle.budget.is_zero() {
                    self.spin.record(Some(now.duration_since(idle.since)));
                }
                idle = Idle::new(now, self.spin.budget());
                // An answer that had to wake its peer comes back late by that wake-up: a spin
                // that runs out in this idle period says nothing about whether spinning pays,
                // so it is not counted as a failure (input within it still counts as a
                // success: see `AdaptiveSpin`).
                idle.woke_peer = self.took_woke_peer();
            }
        }
        tracing::info!("execution loop stopped");
        if self.fatal.is_none() {
            let mut out = link_outbox!(self);
            self.kernel.on_shutdown(&mut out);
        }
        self.flush_links(false);
        self.fatal.take().map_or(Ok(()), Err)
    }

    /// Waits for input: spins (a zero-timeout poll) while the last work is recent, sleeps
    /// otherwise. Returns whether it slept, and when it began.
    fn wait(&mut self, idle: &mut Idle, next_tick: Instant) -> (bool, Instant) {
        let now = Instant::now();
        let spinning = now.duration_since(idle.since) < idle.budget;
        if !spinning && !idle.budget.is_zero() && !idle.recorded {
            // The whole spin passed without input: spinning did not pay this time.
            if !idle.woke_peer {
                self.spin.record(None);
            }
            idle.recorded = true;
        }
        // Sharing its CPU, a loop yields it only once its own client had a moment to send the
        // next request (within the grace), and between yields looks at its rings a few times.
        let yields = self.yields_when_spinning
            && spinning
            && now.duration_since(idle.since) >= SHARED_CPU_YIELD_GRACE;
        let ring_checks = if yields {
            RING_CHECKS_PER_YIELD
        } else {
            RING_CHECKS_PER_POLL
        };
        let deferred = self.deferred.take();
        let mut input_waiting = !self.hot.is_empty() || self.any_input_pending();
        if spinning && !input_waiting && self.has_shm_links {
            input_waiting = (1..ring_checks).any(|_| {
                std::hint::spin_loop();
                self.any_input_pending()
            });
        }
        let mut timeout = if spinning || input_waiting {
            Duration::ZERO
        } else {
            next_tick.saturating_duration_since(now)
        };
        // Output waiting for room is retried soon (and not left to the sleeper, whose sleep
        // lasts until the next tick of its timer).
        let retrying = !self.dirty.is_empty() || self.kernel.has_unsent_answers();
        if retrying {
            timeout = timeout.min(RETRY_FLUSH_AFTER);
        }
        // Input is already waiting (frames in a shared-memory ring, a link that stopped at its
        // read limit, a new link): the poller's system call would only delay it. A loop that
        // yields its shared CPU skips the poll too, and yields: the other loop's turn is then a
        // look at its rings and a yield, and a frame for this loop waits that long. Sockets are
        // still polled every `POLLS_SKIPPED_MAX` turns, so busy rings cannot starve them.
        if (input_waiting || yields) && self.polls_skipped < POLLS_SKIPPED_MAX {
            if let Some(node) = deferred {
                self.flush_link(node);
            }
            self.polls_skipped += 1;
            self.ready.clear();
            if !input_waiting {
                let _ = nix::sched::sched_yield();
            }
            return (false, now);
        }
        self.polls_skipped = 0;
        let sleeping = !timeout.is_zero() && self.prepare_to_sleep();
        if !sleeping {
            timeout = Duration::ZERO;
        }
        self.ready.clear();
        if sleeping && !retrying && deferred.is_some() && self.sleeper.is_some() {
            self.send_and_sleep(deferred);
        } else {
            if let Some(node) = deferred {
                self.flush_link(node);
            }
            if let Err(e) = self.poll.poll(&mut self.events, Some(timeout)) {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    tracing::error!("poll: {e}");
                }
            }
            self.ready.extend(self.events.iter().map(|event| Ready {
                token: event.token(),
                readable: event.is_readable(),
                read_closed: event.is_read_closed(),
                error: event.is_error(),
            }));
        }
        if let Some((sleeper, ticker)) = self.sleeper.as_mut() {
            // Events a wait that a signal interrupted collected since.
            sleeper.collect(|event| self.ready.push(Ready::from(event)));
            if self.ready.iter().any(|r| r.token == TICKER_TOKEN) {
                // A periodic timerfd is armed again only when read (EAGAIN is fine).
                let _ = ticker.wait();
            }
        }
        if sleeping {
            idle.slept = true;
            for (_, link) in self.registry.iter_mut() {
                link.woke_up();
            }
        }
        // Last, once the deferred output is out and the sockets were looked at: the turn after
        // the yield begins with a look at the rings, where the other loop's frames arrive.
        if yields && !input_waiting && self.ready.is_empty() {
            let _ = nix::sched::sched_yield();
        }
        (sleeping, now)
    }

    /// Sends the `deferred` link's output (if any) and sleeps in the sleeper until the poller
    /// has events, in one system call. A ring that fails closes that link (whether its bytes
    /// went out is unknown) and is not used again.
    fn send_and_sleep(&mut self, deferred: Option<NodeId>) {
        let Some((sleeper, _)) = self.sleeper.as_mut() else {
            return;
        };
        let mut link = deferred.and_then(|node| Some((node, self.registry.get_mut(node)?)));
        let send = link.as_ref().and_then(|(_, link)| link.unsent_on_socket());
        match sleeper.send_and_sleep(send) {
            Ok(sent) => {
                if let (Some(sent), Some((node, link))) = (sent, link.as_mut()) {
                    match link.sent_by_caller(sent) {
                        Ok(FlushStatus::Done) => {}
                        Ok(FlushStatus::Pending) => {
                            self.dirty.insert(*node);
                        }
                        Err(e) => self.broken.push((*node, format!("flush: {e}"), false)),
                    }
                }
            }
            Err(e) => {
                tracing::error!(
                    "io_uring send and sleep failed: {e}; sleeping in the poller from now on"
                );
                if let Some((node, _)) = link {
                    self.broken
                        .push((node, format!("send through io_uring: {e}"), false));
                }
                self.sleeper = None;
                return;
            }
        }
        sleeper.collect(|event| self.ready.push(Ready::from(event)));
    }

    /// True when some link has input it can deliver without the poller.
    fn any_input_pending(&mut self) -> bool {
        self.registry
            .iter_mut()
            .any(|(_, link)| link.input_pending())
    }

    /// Tells every link the loop is about to sleep; false if one has input meanwhile.
    fn prepare_to_sleep(&mut self) -> bool {
        self.registry
            .iter_mut()
            .all(|(_, link)| link.prepare_to_sleep())
    }

    /// Reads every link that may have input into the inbox. Returns true if any frame came.
    fn read_links(&mut self, slept: bool) -> bool {
        // A bitmap: in node order, each once, and no allocation per turn.
        let mut ready = NodeSet::new();
        for node in self.hot.drain(..) {
            ready.insert(node);
        }
        for event in &self.ready {
            if event.token == WAKER_TOKEN || event.token == TICKER_TOKEN {
                continue;
            }
            let node = NodeId(event.token.0 as u16);
            ready.insert(node);
            // The peer has not closed: a short read drains the link.
            if event.readable && !event.read_closed && !event.error {
                if let Some(link) = self.registry.get_mut(node) {
                    link.stop_after_short_read();
                }
            }
        }
        if self.ready.iter().any(|e| e.token == WAKER_TOKEN) {
            self.accept_new_links();
            for node in self.hot.drain(..) {
                ready.insert(node);
            }
        }
        for (node, link) in self.registry.iter_mut() {
            if link.input_pending() || (slept && link.kind() == rndb_config::TransporterKind::Shm) {
                ready.insert(node);
            }
        }
        self.inbox.clear();
        self.inbox_frames.clear();
        for node in ready {
            let Some(link) = self.registry.get_mut(node) else {
                continue;
            };
            let (inbox, frames) = (&mut self.inbox, &mut self.inbox_frames);
            let before = (inbox.len(), frames.len());
            let received = link.receive(&mut |header, payload| {
                let start = inbox.len();
                inbox.extend_from_slice(payload);
                frames.push((node, *header, start..inbox.len()));
            });
            if let Some(stat) = self.link_stats.get_mut(usize::from(node.0)) {
                stat.bytes_received += (inbox.len() - before.0
                    + (frames.len() - before.1) * rndb_transporter::FRAME_HEADER_BYTES)
                    as u64;
            }
            match received {
                Ok(_) => {}
                Err(TransportError::Closed { .. }) => {
                    self.broken
                        .push((node, "peer closed the link".into(), false))
                }
                Err(e @ TransportError::BadFrame { .. }) => {
                    self.broken.push((node, e.to_string(), true))
                }
                Err(e) => self.broken.push((node, e.to_string(), false)),
            }
        }
        let frames = self.inbox_frames.len() as u64;
        self.counters.frames_received += frames;
        self.counters.bytes_received +=
            self.inbox.len() as u64 + frames * rndb_transporter::FRAME_HEADER_BYTES as u64;
        !self.inbox_frames.is_empty()
    }

    /// Hands the inbox to the kernel, then runs its jobs.
    fn dispatch(&mut self, now: Instant) -> bool {
        if self.inbox_frames.is_empty() {
            return self.run_jobs(now);
        }
        let frames = std::mem::take(&mut self.inbox_frames);
        let mut out = link_outbox!(self);
        for (node, header, range) in &frames {
            if let Err(violation) =
                self.kernel
                    .on_frame(*node, header, &self.inbox[range.clone()], &mut out, now)
            {
                out.broken
                    .push((*node, format!("protocol violation: {}", violation.0), true));
            }
        }
        self.inbox_frames = frames;
        self.run_jobs(now);
        true
    }

    fn run_jobs(&mut self, now: Instant) -> bool {
        let mut out = link_outbox!(self);
        self.kernel.run_jobs(&mut out, now);
        !self.dirty.is_empty()
    }

    /// Flushes every link with output. With `defer`, a lone API link with output whose flush is
    /// one socket send is left for `wait`, which sends it with its sleep.
    fn flush_links(&mut self, defer: bool) {
        self.stalled.clear();
        if let Some(node) = self.deferred.take() {
            self.flush_link(node);
        }
        if defer && self.sleeper.is_some() && self.dirty.len() == 1 {
            // Only an answer to an API node: a data node it wakes (a replica in a write's
            // chain) answers back, and this loop, if preempted, resumes to find that answer.
            let node = self.dirty.iter().next();
            if let Some(node) = node.filter(|&node| {
                !self.kernel.is_data_node(node)
                    && self
                        .registry
                        .get_mut(node)
                        .and_then(|link| {
                            // A TLS link hands out records only once it made them.
                            if link.unsent_on_socket().is_none() {
                                link.prepare_unsent();
                            }
                            link.unsent_on_socket()
                        })
                        .is_some_and(|(_, bytes)| bytes.len() <= SLEEP_SEND_BYTES_MAX)
            }) {
                self.dirty = NodeSet::new();
                self.deferred = Some(node);
                return;
            }
        }
        let dirty = std::mem::take(&mut self.dirty);
        for node in dirty {
            if defer
                && self
                    .registry
                    .get_mut(node)
                    .is_some_and(|link| answers_wait_for_the_burst(&*link))
            {
                self.dirty.insert(node);
                continue;
            }
            self.flush_link(node);
        }
    }

    fn flush_link(&mut self, node: NodeId) {
        let Some(link) = self.registry.get_mut(node) else {
            return;
        };
        match link.flush() {
            Ok(FlushStatus::Done) => {}
            Ok(FlushStatus::Pending) => {
                self.dirty.insert(node);
            }
            Err(e) => self.broken.push((node, format!("flush: {e}"), false)),
        }
    }

    /// Closes failed links; the kernel aborts their transactions.
    fn close_broken(&mut self, now: Instant) -> bool {
        if self.broken.is_empty() {
            return false;
        }
        let broken = std::mem::take(&mut self.broken);
        for (node, reason, ours) in broken {
            if ours && self.kernel.is_data_node(node) && self.fatal.is_none() {
                // The peer may still run and still see this node: each would take the other
                // for failed and route the same partitions to different primaries. This node
                // stops instead, so that every survivor sees the same failure (NDB shuts a
                // node down on such an inconsistency too).
                let fatal = format!(
                    "closed the link to data node {node}, which may still run ({reason}): \
                     stopping this data node so that the cluster agrees on who failed"
                );
                tracing::error!("{fatal}");
                self.fatal = Some(fatal);
                self.shutdown.store(true, Ordering::Relaxed);
            }
            let Some(link) = self.registry.remove(node) else {
                continue;
            };
            let _ = self
                .poll
                .registry()
                .deregister(&mut SourceFd(&link.poll_fd()));
            drop(link);
            self.hot.retain(|&n| n != node);
            self.dirty.remove(node);
            self.connected
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&node);
            tracing::info!(node = %node, "link closed: {reason}");
            let mut out = link_outbox!(self);
            self.kernel.on_disconnect(node, &mut out, Instant::now());
        }
        self.update_spin();
        self.run_jobs(now);
        self.flush_links(false);
        true
    }

    fn accept_new_links(&mut self) {
        while let Ok(mut link) = self.new_links.try_recv() {
            if link.kind() != rndb_config::TransporterKind::Shm {
                // An SHM link slices itself (rndb_transporter::SHM_RECEIVE_SLICE_BYTES).
                link.limit_receive(RECEIVE_SLICE_BYTES);
            }
            let node = link.peer();
            let address = link.peer_address();
            let fd = link.poll_fd();
            if let Err(e) = self.poll.registry().register(
                &mut SourceFd(&fd),
                Token(usize::from(node.0)),
                Interest::READABLE,
            ) {
                tracing::warn!(node = %node, "register link with poller: {e}");
                self.connected
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&node);
                continue;
            }
            if let Some(old) = self.registry.insert(link) {
                // Admission reserves the node id, so this cannot happen; keep the new link.
                tracing::error!(node = %node, "replaced an existing link");
                drop(old);
            }
            if let Some(stat) = self.link_stats.get_mut(usize::from(node.0)) {
                *stat = LinkStat {
                    address,
                    connect_count: stat.connect_count + 1,
                    ..LinkStat::default()
                };
            }
            // Input may have arrived before registration.
            self.hot.push(node);
            self.kernel.on_connect(node);
        }
        self.update_spin();
    }

    /// Hands the kernel its links' state, for ndbinfo.transporters: every node linked now or
    /// before.
    fn publish_links(&mut self) {
        let (registry, stats) = (&mut self.registry, &self.link_stats);
        self.kernel.set_links(&mut |links| {
            for (index, stat) in stats.iter().enumerate() {
                if stat.connect_count == 0 {
                    continue;
                }
                let node = NodeId(index as u16);
                let mut info = LinkInfo::blank(node);
                info.connect_count = stat.connect_count;
                info.overload_count = stat.overload_count;
                if let Some(link) = registry.get_mut(node) {
                    info.connected = true;
                    info.address = stat.address;
                    info.kind = Some(link.kind());
                    info.encrypted = link.is_encrypted();
                    info.bytes_sent = stat.bytes_sent;
                    info.bytes_received = stat.bytes_received;
                    info.overloaded = link.send_capacity_bytes() < FRAME_BYTES_MAX;
                    info.send_buffer_bytes = link.pending_send_bytes() as u64;
                }
                links.push(info);
            }
        });
    }

    /// True when a flush since the last call woke a sleeping peer (flags of every link taken).
    fn took_woke_peer(&mut self) -> bool {
        let mut woke = false;
        for (_, link) in self.registry.iter_mut() {
            woke |= link.take_woke_peer();
        }
        woke
    }

    fn update_spin(&mut self) {
        self.has_shm_links = self
            .registry
            .iter_mut()
            .any(|(_, link)| link.kind() == rndb_config::TransporterKind::Shm);
        let links_spin = self
            .registry
            .iter_mut()
            .map(|(_, link)| link.spin_time())
            .max();
        self.spin
            .set_configured(links_spin.unwrap_or_default().max(self.spin_base));
    }
}

/// One registration the poller reported ready.
#[derive(Clone, Copy, Debug)]
struct Ready {
    token: Token,
    readable: bool,
    read_closed: bool,
    error: bool,
}

impl From<EpollEvent> for Ready {
    fn from(event: EpollEvent) -> Ready {
        Ready {
            token: Token(event.token as usize),
            readable: event.is_readable(),
            read_closed: event.is_read_closed(),
            error: event.is_error(),
        }
    }
}

/// A sleeper on `poll`'s epoll instance, and a timer in it that ends each sleep by the next
/// tick at the latest (the sleeper's wait has no timeout of its own).
fn new_sleeper(poll: &Poll) -> Result<(Sleeper, TimerFd), String> {
    use std::os::fd::{AsFd, AsRawFd};
    let sleeper = Sleeper::new(poll.as_raw_fd(), EVENTS_MAX)?;
    let ticker = TimerFd::new(
        ClockId::CLOCK_MONOTONIC,
        TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
    )
    .map_err(|e| format!("timerfd_create: {e}"))?;
    ticker
        .set(
            Expiration::Interval(TimeSpec::from_duration(TIMER_TICK)),
            TimerSetTimeFlags::empty(),
        )
        .map_err(|e| format!("timerfd_settime: {e}"))?;
    poll.registry()
        .register(
            &mut SourceFd(&ticker.as_fd().as_raw_fd()),
            TICKER_TOKEN,
            Interest::READABLE,
        )
        .map_err(|e| format!("register the tick timer with the poller: {e}"))?;
    Ok((sleeper, ticker))
}

/// The loop's state between two pieces of work.
#[derive(Debug)]
struct Idle {
    /// When the last work ended.
    since: Instant,
    /// How long this idle period may spin.
    budget: Duration,
    /// The loop slept in the poller during this idle period.
    slept: bool,
    /// The outcome of this period's spin was recorded.
    recorded: bool,
    /// The work that began this period woke a sleeping peer: a spin that runs out is not a
    /// failure.
    woke_peer: bool,
}

impl Idle {
    fn new(since: Instant, budget: Duration) -> Idle {
        Idle {
            since,
            budget,
            slept: false,
            recorded: false,
            woke_peer: false,
        }
    }
}

/// Unsent bytes at which a link is flushed in the middle of a run of jobs (see
/// [`Outbox::flush_early`]). An SHM flush is a store to the ring, worth it for a few rows: the
/// peer, polling from its own core, decodes them while this node works on the rest. A socket's
/// is a system call, worth it for one of NDB's 32 KiB send buffer pages.
const FLUSH_EARLY_SHM_BYTES: usize = 256;
const FLUSH_EARLY_SOCKET_BYTES: usize = 32 * 1024;

/// The kernel's reason `why` to stop becomes the loop's, unless it has one already; then
/// `rejoin` says whether a restart cures it (`Kernel::fatal_cured_by_rejoin`). Fields, not
/// `&mut ExecLoop`: the caller may hold the links' outbox.
fn stop_for_kernel(fatal: &mut Option<String>, rejoin: &mut bool, kernel: &Kernel, why: String) {
    if fatal.is_none() {
        *rejoin = kernel.fatal_cured_by_rejoin();
        *fatal = Some(why);
    }
}

/// True when a frame about to be sent on `link` is published as soon as it is written, rather
/// than at the end of the loop's turn: the first frame of a burst on an SHM link whose peer
/// spins (ShmSpintime > 0). Such a peer polls the ring from its own core and takes the frame
/// at once; held back, the frame's ring lines, which the peer had read (they hold the last
/// frames), wait in the store buffer for their cache-line transfers while the rest of the turn
/// runs, and the tail is published only after them: the transfers come one after the other
/// instead of overlapping (issue 26; the figures are in docs/shm.md). Later frames of the
/// burst wait for [`FLUSH_EARLY_SHM_BYTES`] or the turn's end, as before, so a batch's answers
/// cost one publish (a locked instruction) per few rows, not one per frame. A peer whose spin
/// ran out and that sleeps is woken by this publish, mid-turn rather than at the turn's end
/// (with `local-spin.ini`'s two data nodes on one CPU, Redis SET latency did not change).
fn publishes_first_frame_at_once(link: &dyn Transporter) -> bool {
    link.kind() == rndb_config::TransporterKind::Shm
        && !link.spin_time().is_zero()
        && link.pending_send_bytes() == 0
}

/// True when the peer of a loopback socket link last sent from the CPU this thread runs on
/// (never for SHM links, which name no CPU).
fn peer_on_this_cpu(link: &dyn Transporter) -> bool {
    link.loopback_peer_cpu()
        .is_some_and(|cpu| nix::sched::sched_getcpu().ok() == Some(cpu))
}

/// True when a socket link's answers should wait for the next turn: its peer runs on this CPU
/// (never true of an SHM link, which names no CPU) and has more requests waiting in the link
/// (this turn took a slice of a burst). The peer
/// could read the answers only by preempting this loop, two context switches for no overlap;
/// they go out when the burst is read, or once they fill NDB's 32 KiB page. (Across cores
/// they go at once, so that the peer works on them while this node reads the rest.)
fn answers_wait_for_the_burst(link: &dyn Transporter) -> bool {
    link.input_pending()
        && link.pending_send_bytes() < FLUSH_EARLY_SOCKET_BYTES
        && peer_on_this_cpu(link)
}

/// The kernel's view of the links: frames are appended to their send buffers and flushed at
/// the end of the turn, or earlier by `flush_early`.
struct LinkOutbox<'a> {
    registry: &'a mut Registry,
    scratch: &'a mut Vec<u8>,
    dirty: &'a mut NodeSet,
    broken: &'a mut Vec<(NodeId, String, bool)>,
    /// Links whose early flush found the socket or ring full this turn, or whose peer runs on
    /// this CPU: not tried again before the end-of-turn flush.
    stalled: &'a mut Vec<NodeId>,
    counters: &'a mut LinkCounters,
    link_stats: &'a mut [LinkStat],
}

/// Node ids a link may have (`NodeId` below 256).
const NODE_IDS: usize = 256;

/// One node's link (ndbinfo.transporters): its peer's address, bytes through the link now up,
/// times a link came up, and times the link now up went into overload (a send found its send
/// buffer over the overload limit after one that did not).
#[derive(Clone, Copy, Debug, Default)]
struct LinkStat {
    address: Option<std::net::SocketAddr>,
    bytes_sent: u64,
    bytes_received: u64,
    connect_count: u64,
    overload_count: u64,
    overloaded: bool,
}

/// Frames and bytes (headers and payloads) through this node's links since it started, and the
/// sends that found a send buffer over its overload limit.
#[derive(Clone, Copy, Debug, Default)]
pub struct LinkCounters {
    pub frames_sent: u64,
    pub bytes_sent: u64,
    pub frames_received: u64,
    pub bytes_received: u64,
    pub send_overloads: u64,
}

impl Outbox for LinkOutbox<'_> {
    fn send(
        &mut self,
        to: NodeId,
        header: FrameHeader,
        encode: &mut dyn FnMut(&mut Vec<u8>),
    ) -> Result<(), SendFailure> {
        self.scratch.clear();
        encode(self.scratch);
        let Some(link) = self.registry.get_mut(to) else {
            return Err(SendFailure::Gone);
        };
        let first_of_burst = publishes_first_frame_at_once(&*link);
        let mut result = link.send(&header, self.scratch);
        if let Err(TransportError::Overloaded { .. }) = result {
            self.counters.send_overloads += 1;
            if let Some(stat) = self.link_stats.get_mut(usize::from(to.0)) {
                stat.overload_count += u64::from(!stat.overloaded);
                stat.overloaded = true;
            }
            // Make room by pushing what is buffered, then try once more.
            if let Err(e) = link.flush() {
                self.broken.push((to, format!("flush: {e}"), false));
                return Err(SendFailure::Gone);
            }
            result = link.send(&header, self.scratch);
        }
        match result {
            Ok(()) => {
                if first_of_burst {
                    if let Err(e) = link.flush() {
                        self.broken.push((to, format!("flush: {e}"), false));
                        return Err(SendFailure::Gone);
                    }
                }
                self.dirty.insert(to);
                let bytes = (self.scratch.len() + rndb_transporter::FRAME_HEADER_BYTES) as u64;
                self.counters.frames_sent += 1;
                self.counters.bytes_sent += bytes;
                if let Some(stat) = self.link_stats.get_mut(usize::from(to.0)) {
                    stat.bytes_sent += bytes;
                    stat.overloaded = false;
                }
                Ok(())
            }
            Err(TransportError::Overloaded { .. }) => {
                self.dirty.insert(to);
                Err(SendFailure::Overloaded)
            }
            Err(e) => {
                self.broken.push((to, format!("send: {e}"), false));
                Err(SendFailure::Gone)
            }
        }
    }

    fn close(&mut self, to: NodeId, reason: String) {
        self.broken.push((to, reason, true));
    }

    fn declare_failed(&mut self, to: NodeId, reason: String) {
        if let Some(link) = self.registry.get_mut(to) {
            // Best effort: the NODE_FAILREP queued for it goes out before the link closes.
            let _ = link.flush();
        }
        self.broken.push((to, reason, false));
    }

    fn flush_early(&mut self) {
        for node in self.dirty.iter() {
            let Some(link) = self.registry.get_mut(node) else {
                continue;
            };
            let threshold = match link.kind() {
                rndb_config::TransporterKind::Shm => FLUSH_EARLY_SHM_BYTES,
                _ => FLUSH_EARLY_SOCKET_BYTES,
            };
            if link.pending_send_bytes() >= threshold && !self.stalled.contains(&node) {
                if peer_on_this_cpu(&*link) {
                    // The peer could only read the answers by preempting this loop, on this
                    // CPU: two context switches, no overlap. They go at the end of the turn.
                    self.stalled.push(node);
                    continue;
                }
                match link.flush() {
                    Ok(FlushStatus::Done) => {}
                    Ok(FlushStatus::Pending) => self.stalled.push(node),
                    Err(e) => self.broken.push((node, format!("flush: {e}"), false)),
                }
            }
        }
    }
}
