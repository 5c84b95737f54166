//! One connection from this API node to one data node, shared by every thread of the process.
//!
//! Sending takes the link's lock only while frames are appended and flushed. Waiting for an
//! answer follows NDB's "poll owner" design: of all threads waiting on a connection, one owns
//! the poller, reads the link and files every frame under the request id it answers; the others
//! sleep on a condition variable until their answer is complete or ownership is free.
//!
//! Lock order: `link` before `shared`. Nobody takes `link` while holding `shared`.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::Waker;
use std::thread::Thread;
use std::time::{Duration, Instant};

use hashbrown::HashMap;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use rndb_config::{NodeId, TransporterKind};
use rndb_protocol::id_hash::SequentialIds;
use rndb_protocol::qmgr::{Arbit, FailRep};
use rndb_protocol::signals::{block, gsn};
use rndb_transporter::spin::AdaptiveSpin;
use rndb_transporter::{
    FlushStatus, FrameHeader, InputProbe, TransportError, Transporter, FRAME_BYTES_MAX,
};

use crate::arbiter::Arbiter;
use crate::stats::{ClientStat, Counters};
use crate::Error;

/// The most bytes of answers one request may hold filed and not yet handed over: a bound on
/// what a misbehaving data node can make us buffer (one execute of the largest batch fits
/// easily; a streaming execute hands its answers over in slices, and its rows overwrite one
/// result per operation).
pub const REPLY_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Waiters parked at once past which the connection starts its receive thread.
const RECEIVE_THREAD_AFTER_PARKED: usize = 8;
/// How long the receive thread owns the poller in one turn before it lets a waiter have it.
const RECEIVE_THREAD_TURN: Duration = Duration::from_millis(200);
/// The request id the receive thread waits on: 0 is never given to a request.
const RECEIVE_THREAD_REQUEST_ID: u32 = 0;
/// The nice increment the receive thread asks for itself (a lower nice value is a larger share
/// of the CPU, and an earlier turn: see [`raise_receive_thread_priority`]).
const RECEIVE_THREAD_NICE_INCREMENT: i32 = -10;

/// The data nodes the cluster declared failed (QMGR's NODE_FAILREP, which every data node
/// sends its API nodes when it handles a data node's failure), shared by every connection of
/// one [`Cluster`](crate::Cluster): a connection to such a node counts as failed, so no request
/// is routed to it, and its waiters fail with 4010 instead of waiting out their deadline on a
/// link that may stay open (a stopped process). Bit n of word n / 64 is node n.
#[derive(Debug, Default)]
pub(crate) struct Declared([AtomicU64; 4]);

impl Declared {
    fn position(node: NodeId) -> Option<(usize, u64)> {
        let n = usize::from(node.0);
        (n < 256).then(|| (n / 64, 1u64 << (n % 64)))
    }

    pub fn insert(&self, node: NodeId) {
        if let Some((word, bit)) = Self::position(node) {
            self.0[word].fetch_or(bit, Ordering::AcqRel);
        }
    }

    /// `node` restarted and serves again (its new link said so): links to it work again.
    pub fn remove(&self, node: NodeId) {
        if let Some((word, bit)) = Self::position(node) {
            self.0[word].fetch_and(!bit, Ordering::AcqRel);
        }
    }

    pub fn contains(&self, node: NodeId) -> bool {
        Self::position(node)
            .is_some_and(|(word, bit)| self.0[word].load(Ordering::Acquire) & bit != 0)
    }
}

/// What every link of one [`Cluster`](crate::Cluster) shares: the data nodes the cluster
/// declared failed, this API node as the arbitrator, and its client statistics.
#[derive(Clone, Debug, Default)]
pub(crate) struct LinksShared {
    pub declared: Arc<Declared>,
    pub arbiter: Arc<Arbiter>,
    /// The cluster's client statistics.
    pub stats: Arc<Counters>,
}

/// What [`Connection::heartbeat`] saw: the frame count at its last look, and how many looks
/// in a row found no new frame.
#[derive(Debug, Default)]
struct HeartbeatState {
    frames_seen: u64,
    silent: u32,
}

/// A poll owner spinning on an SHM link reads the link (under its lock) on every this many
/// turns even when the ring looks empty, and otherwise only when it holds input.
const SPIN_READ_EVERY: u32 = 64;

/// A poll owner spinning on an SHM link's probe reads the clock (for its spin budget and
/// deadline) on every this many turns: a turn is two loads, a clock read up to 70 ns.
const SPIN_CLOCK_EVERY: u32 = 16;

/// The longest a poll owner sleeps before it looks at its deadline again.
const POLL_SLEEP_MAX: Duration = Duration::from_millis(50);

/// The longest a parked waiter sleeps before it looks again by itself. Every way its wait can
/// end unparks it (its answer filed, the poller handed to it, the link failed), so this is only
/// a backstop. It was POLL_SLEEP_MAX: with 4096 client threads whose transactions took over
/// 50 ms, every thread woke several times per transaction for nothing, and those wake-ups ate
/// the CPU the data node and the receive thread needed (issue 26).
const PARKED_SLEEP_MAX: Duration = Duration::from_secs(1);

/// The longest a poll owner sleeps while the link still holds bytes a flush could not push
/// (the socket or ring was full): it flushes again after this.
const POLL_SLEEP_SEND_PENDING: Duration = Duration::from_millis(1);

/// Bytes a request's answer buffer starts with: a key operation's row and the execute's
/// answer fit without growing it.
const REPLY_BYTES_INITIAL: usize = 128;

/// Bytes of a batch written to an SHM ring at which `send_batch` publishes them, before the
/// rest of the batch (a publish is one store, plus a wake-up only if the data node sleeps).
const SHM_PUBLISH_EARLY_BYTES: usize = 256;

/// When [`Connection::append_frames`] flushes what it appended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flush {
    /// At once.
    Now,
    /// Not: the caller owes a flush (`append_frames_deferred`).
    #[cfg(feature = "tokio")]
    Deferred,
    /// At once, unless a TCP link's poll owner is awake to flush it (`send_frames_awaited`).
    UnlessReaderAwake,
}

/// Answer bytes [`Connection::wait_streaming`] hands over at a time, while more are coming.
const STREAM_SLICE_BYTES: usize = 256;

/// The answers gathered for one request: frames as `[signal u16][length u32][payload]`.
#[derive(Debug, Default)]
struct Reply {
    frames: Vec<u8>,
    complete: bool,
    /// The thread parked waiting for this request, woken (alone) when it completes.
    waiter: Option<Thread>,
    /// Collected by [`Connection::take_async_done`] rather than by a waiting thread.
    asynchronous: bool,
    /// The task awaiting this request (the tokio interface), woken when it completes or the
    /// link fails.
    task: Option<Waker>,
    /// When a task's request is given up (forgotten, its task woken, which then fails it with
    /// 4012): checked by the link's reader (see [`Connection::expire_task_requests`]), so that
    /// an execute needs no timer of its own.
    #[cfg(feature = "tokio")]
    deadline: Option<Instant>,
    /// An event subscription's stream (`event.rs`): never complete but by its end, its
    /// frames taken as they come, at most this many bytes of them held.
    stream_max: Option<usize>,
    /// The stream outgrew `stream_max`: its data frames since are dropped.
    overflowed: bool,
}

impl Reply {
    /// A reply to fill, its buffer already sized for the usual answers (the one this thread's
    /// last answers came in, when it kept one).
    fn awaited(asynchronous: bool) -> Reply {
        let mut frames = SPARE_REPLY_BUFFER.take();
        if frames.capacity() == 0 {
            frames.reserve(REPLY_BYTES_INITIAL);
        }
        Reply {
            frames,
            asynchronous,
            ..Reply::default()
        }
    }
}

thread_local! {
    /// The buffer of the last [`Answers`] this thread dropped, emptied, for its next request's
    /// reply: a thread making one request after another then allocates none.
    static SPARE_REPLY_BUFFER: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// A reply buffer larger than this is freed rather than kept for the next request.
const SPARE_REPLY_BYTES_MAX: usize = 64 * 1024;

/// Keeps `frames` (emptied) for this thread's next reply, unless it grew large (or never
/// held anything: the spare it would replace may).
fn recycle_reply_buffer(mut frames: Vec<u8>) {
    if (1..=SPARE_REPLY_BYTES_MAX).contains(&frames.capacity()) {
        frames.clear();
        SPARE_REPLY_BUFFER.set(frames);
    }
}

/// State shared between the poll owner and the waiters.
#[derive(Debug, Default)]
struct Shared {
    /// Requests waiting for answers, by request id. Frames for ids not here are dropped (an
    /// abandoned transaction's rollback answer, for example).
    replies: HashMap<u32, Reply, SequentialIds>,
    /// A thread is reading the link; the others are parked.
    poll_owner: bool,
    /// The receive thread's turn ended with the poller kept (`poll_owner` stays set): its next
    /// turn takes it without a handover, and it gives it up when it stops.
    receiver_holds: bool,
    /// Set once the link failed; every waiter then fails with this error.
    failure: Option<String>,
    /// Why the background connector's latest attempt to link the data node again was refused
    /// (the slot taken by another API node, the configs differ): requests that fail on this
    /// failed link say so, as that is what keeps them failing.
    relink_refused: Option<String>,
    /// Parked waiters in arrival order: when the poll owner leaves, the first whose request is
    /// still open takes over. Entries of finished requests are skipped.
    parked: VecDeque<u32>,
    /// Asynchronous requests completed and not collected yet, in completion order.
    async_done: Vec<u32>,
    /// When the task requests' deadlines are next checked.
    #[cfg(feature = "tokio")]
    next_sweep: Option<Instant>,
}

impl Shared {
    /// The error requests on the link fail with once it failed (4010), with the refusal of
    /// the latest attempt to link its data node again, if there was one.
    fn lost(&self, peer: NodeId) -> Option<Error> {
        let failure = self.failure.as_deref()?;
        Some(match &self.relink_refused {
            Some(refused) => lost(
                peer,
                &format!("{failure}; linking it again was refused: {refused}"),
            ),
            None => lost(peer, failure),
        })
    }

    /// True when `request_id` is complete, has `slice_bytes` of answers filed, or is no longer
    /// registered: its waiter has something to take.
    fn progressed(&self, request_id: u32, slice_bytes: usize) -> bool {
        self.replies
            .get(&request_id)
            .is_none_or(|r| r.complete || r.frames.len() >= slice_bytes)
    }

    /// The next parked waiter whose request is still open: it becomes the poll owner (or, if
    /// another thread took ownership meanwhile, parks and registers again).
    fn next_owner(&mut self) -> Option<Thread> {
        while let Some(id) = self.parked.pop_front() {
            if let Some(reply) = self.replies.get_mut(&id) {
                if !reply.complete {
                    if let Some(thread) = reply.waiter.take() {
                        return Some(thread);
                    }
                }
            }
        }
        None
    }

    /// Registers the calling thread as parked on `request_id` (once per park).
    fn park_here(&mut self, request_id: u32) {
        let Some(reply) = self.replies.get_mut(&request_id) else {
            return;
        };
        if reply.waiter.is_some() {
            return;
        }
        reply.waiter = Some(std::thread::current());
        if request_id == RECEIVE_THREAD_REQUEST_ID {
            // The receive thread goes first: the client thread that owns the poller hands it
            // back as soon as its own request is done, not after every other waiter had a
            // turn (at thousands of threads that chain of handovers, each a wake-up and a
            // context switch, did a third of the reading; issue 26).
            self.parked.push_front(request_id);
        } else {
            self.parked.push_back(request_id);
        }
        // Entries of requests completed without a handover stay queued until popped; drop them
        // when they outnumber the open requests, so the queue stays bounded by those.
        if self.parked.len() > 2 * self.replies.len() + 64 {
            let replies = &self.replies;
            self.parked
                .retain(|id| replies.get(id).is_some_and(|r| !r.complete));
        }
    }

    /// Every parked thread (the link failed: all must see it). Tasks awaiting a request are
    /// woken here: a wake only schedules the task, it never runs it under this lock.
    fn all_waiters(&mut self) -> Vec<Thread> {
        self.parked.clear();
        self.replies
            .values_mut()
            .filter_map(|r| r.task.take())
            .for_each(Waker::wake);
        self.replies
            .values_mut()
            .filter_map(|r| r.waiter.take())
            .collect()
    }
}

/// The poller: readiness of the link's descriptor, and how long its owner spins first.
struct Poller {
    poll: Poll,
    events: Events,
    /// The spin budget, adapted to whether spinning pays off on this machine.
    spin: AdaptiveSpin,
}

/// A connection to one data node.
pub(crate) struct Connection {
    /// The data node at the other end.
    pub peer: NodeId,
    /// TCP or SHM.
    pub kind: TransporterKind,
    link: Mutex<Box<dyn Transporter>>,
    /// The link's lock-free look at its input (SHM links): what a spinning reader checks
    /// between reads.
    probe: Option<InputProbe>,
    poller: Mutex<Poller>,
    shared: Mutex<Shared>,
    /// This connection itself, for starting the receive thread.
    this: Weak<Connection>,
    /// The receive thread was started (it runs until `close`).
    receiver_started: AtomicBool,
    /// Set by `close`: the receive thread stops.
    closing: AtomicBool,
    /// Set with `Shared::failure`, so that choosing a link need not take the lock.
    failed: AtomicBool,
    /// The data node refused a transaction with 280: it is stopping gracefully, and new
    /// transactions go to another replica's TC while one is linked (a new link, after the
    /// node's restart, starts clear).
    stopping: AtomicBool,
    /// The data nodes the cluster declared failed.
    declared: Arc<Declared>,
    /// This API node as the arbitrator, shared by every link of the cluster.
    arbiter: Arc<Arbiter>,
    /// The cluster's client statistics.
    stats: Arc<Counters>,
    /// Frames read from the link so far, and what the heartbeat saw of it (see
    /// [`Connection::heartbeat`]).
    frames_received: AtomicU64,
    /// Frames and bytes through this link since it opened (see [`LinkTraffic`]), counted as
    /// the link encodes them (header, payload, CRC-32 trailer under Checksum=1). These four
    /// change only under the link's lock, through [`add_under_link_lock`].
    frames_sent: AtomicU64,
    bytes_sent: AtomicU64,
    bytes_received: AtomicU64,
    heartbeat: Mutex<HeartbeatState>,
    /// A poll owner is reading the link and flushes what the send buffer holds before it next
    /// sleeps or leaves (see [`Connection::send_frames_awaited`]). Changed and read only under
    /// the link's lock, so an append never misses the flush that follows it.
    reader_awake: AtomicBool,
    /// Frames appended by `append_frames_deferred` wait in the send buffer for a flush.
    #[cfg(feature = "tokio")]
    flush_owed: AtomicBool,
    /// A receive task (the tokio interface, TCP links) runs on some runtime; cleared when it
    /// ends, including when its runtime shuts down, so the next awaited request starts one.
    #[cfg(feature = "tokio")]
    receive_task_alive: AtomicBool,
    /// Told of every request a task registers, so that a receive task asleep on an SHM link
    /// spins (ShmSpintime) while the answer is on its way instead of waiting for a wake-up.
    #[cfg(feature = "tokio")]
    task_request_registered: tokio::sync::Notify,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("peer", &self.peer)
            .field("kind", &self.kind)
            .finish()
    }
}

/// Frames and bytes through an API node's links, counted where the link encodes and decodes
/// them: each frame's header, payload and (under Checksum=1) CRC-32 trailer. Summed over links
/// by [`crate::Cluster::link_traffic`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkTraffic {
    pub frames_sent: u64,
    pub bytes_sent: u64,
    pub frames_received: u64,
    pub bytes_received: u64,
    /// The kernel's counts for the links' TCP sockets (the wake-up socket of an SHM link);
    /// `None` when some link's socket gave none.
    pub kernel_tcp: Option<rndb_transporter::socket_link::KernelTcpBytes>,
}

impl LinkTraffic {
    /// Adds another link's counts.
    pub fn add(&mut self, other: &LinkTraffic) {
        self.frames_sent += other.frames_sent;
        self.bytes_sent += other.bytes_sent;
        self.frames_received += other.frames_received;
        self.bytes_received += other.bytes_received;
        self.kernel_tcp = match (self.kernel_tcp, other.kernel_tcp) {
            (Some(a), Some(b)) => Some(rndb_transporter::socket_link::KernelTcpBytes {
                bytes_acked: a.bytes_acked + b.bytes_acked,
                bytes_received: a.bytes_received + b.bytes_received,
                segments_out: a.segments_out + b.segments_out,
                segments_in: a.segments_in + b.segments_in,
            }),
            _ => None,
        };
    }

    /// The counts since `earlier` (a snapshot of the same links).
    pub fn since(&self, earlier: &LinkTraffic) -> LinkTraffic {
        LinkTraffic {
            frames_sent: self.frames_sent - earlier.frames_sent,
            bytes_sent: self.bytes_sent - earlier.bytes_sent,
            frames_received: self.frames_received - earlier.frames_received,
            bytes_received: self.bytes_received - earlier.bytes_received,
            kernel_tcp: match (self.kernel_tcp, earlier.kernel_tcp) {
                (Some(a), Some(b)) => Some(rndb_transporter::socket_link::KernelTcpBytes {
                    bytes_acked: a.bytes_acked - b.bytes_acked,
                    bytes_received: a.bytes_received - b.bytes_received,
                    segments_out: a.segments_out.wrapping_sub(b.segments_out),
                    segments_in: a.segments_in.wrapping_sub(b.segments_in),
                }),
                _ => None,
            },
        }
    }
}

/// The frames that answered one request, to be walked with [`Answers::iter`]. Dropped, its
/// buffer is kept for this thread's next request (see [`Reply::awaited`]).
#[derive(Debug, Default)]
pub(crate) struct Answers(Vec<u8>);

impl Drop for Answers {
    fn drop(&mut self) {
        recycle_reply_buffer(std::mem::take(&mut self.0));
    }
}

impl Answers {
    /// Every (signal, payload) in arrival order.
    pub fn iter(&self) -> impl Iterator<Item = (u16, &[u8])> {
        let mut rest = &self.0[..];
        std::iter::from_fn(move || {
            // The buffer was written by `file_frame` below, so its layout is trusted.
            let signal = u16::from_le_bytes(rest.get(0..2)?.try_into().ok()?);
            let len = u32::from_le_bytes(rest.get(2..6)?.try_into().ok()?) as usize;
            let payload = rest.get(6..6 + len)?;
            rest = &rest[6 + len..];
            Some((signal, payload))
        })
    }
}

/// True for the signal that completes a request: everything but per-operation answers and
/// scan rows (a scan batch is complete with its SCAN_TABCONF or SCAN_TABREF).
fn completes_request(signal: u16) -> bool {
    !matches!(
        signal,
        gsn::TCKEY_ROW
            | gsn::TCKEYREF
            | gsn::SCAN_ROWS
            | gsn::SUB_START_CONF
            | gsn::SUB_TABLE_DATA
            | gsn::SUB_GCP_COMPLETE_REP
    )
}

/// What an event subscription's stream collected since it was last taken.
#[derive(Debug, Default)]
pub(crate) struct StreamTake {
    pub frames: Answers,
    /// The stream ended (SUB_STOP_CONF, SUB_START_REF) or is no longer registered.
    pub ended: bool,
    /// It outgrew its bound and dropped data frames.
    pub overflowed: bool,
}

impl Connection {
    pub fn new(
        link: Box<dyn Transporter>,
        spin: Duration,
        shared: &LinksShared,
    ) -> Result<Arc<Connection>, Error> {
        let peer = link.peer();
        let kind = link.kind();
        let poll = Poll::new().map_err(|e| transport(peer, "create poller", e))?;
        let fd = link.poll_fd();
        let probe = link.input_probe();
        poll.registry()
            .register(&mut SourceFd(&fd), Token(0), Interest::READABLE)
            .map_err(|e| transport(peer, "register link with poller", e))?;
        let poller = Mutex::new(Poller {
            poll,
            events: Events::with_capacity(4),
            spin: AdaptiveSpin::new(spin),
        });
        Ok(Arc::new_cyclic(|this| Connection {
            peer,
            kind,
            link: Mutex::new(link),
            probe,
            poller,
            shared: Mutex::new(Shared::default()),
            this: this.clone(),
            receiver_started: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            declared: Arc::clone(&shared.declared),
            arbiter: Arc::clone(&shared.arbiter),
            stats: Arc::clone(&shared.stats),
            frames_received: AtomicU64::new(0),
            frames_sent: AtomicU64::new(0),
            bytes_sent: AtomicU64::new(0),
            bytes_received: AtomicU64::new(0),
            heartbeat: Mutex::new(HeartbeatState::default()),
            reader_awake: AtomicBool::new(false),
            #[cfg(feature = "tokio")]
            flush_owed: AtomicBool::new(false),
            #[cfg(feature = "tokio")]
            receive_task_alive: AtomicBool::new(false),
            #[cfg(feature = "tokio")]
            task_request_registered: tokio::sync::Notify::new(),
        }))
    }

    /// Counts `frames` of `bytes` (as encoded) appended to the link.
    /// The caller holds the link's lock.
    fn count_sent(&self, frames: u64, bytes: usize) {
        add_under_link_lock(&self.frames_sent, frames);
        add_under_link_lock(&self.bytes_sent, bytes as u64);
    }

    /// The frames and bytes through this link so far and, for a link over a TCP socket, what
    /// the kernel counted for that socket (for SHM: the socket that carries wake-ups).
    pub fn traffic(&self) -> LinkTraffic {
        let fd = self.link().poll_fd();
        LinkTraffic {
            frames_sent: self.frames_sent.load(Ordering::Relaxed),
            bytes_sent: self.bytes_sent.load(Ordering::Relaxed),
            frames_received: self.frames_received.load(Ordering::Relaxed),
            bytes_received: self.bytes_received.load(Ordering::Relaxed),
            kernel_tcp: rndb_transporter::socket_link::kernel_tcp_bytes(fd).ok(),
        }
    }

    /// Its data node said it stops gracefully (NODE_STOPPING_REP), or refused a transaction
    /// with 280.
    pub(crate) fn note_stopping(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }

    /// True once its data node said it stops (see `note_stopping`).
    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    /// The client statistics of the cluster this link belongs to.
    pub(crate) fn stats(&self) -> &Arc<Counters> {
        &self.stats
    }

    /// Its link was replaced (or left the cluster): the bytes it carried go to the cluster's
    /// retired counts, as the cluster's byte counts sum the links it has.
    pub(crate) fn retire(&self) {
        let traffic = self.traffic();
        self.stats
            .retire(ClientStat::BytesSentCount, traffic.bytes_sent);
        self.stats
            .retire(ClientStat::BytesRecvdCount, traffic.bytes_received);
    }

    /// Stops the receive thread, if one runs (the link closes when the last reference goes).
    pub fn close(&self) {
        self.closing.store(true, Ordering::Relaxed);
    }

    /// Starts the receive thread once [`RECEIVE_THREAD_AFTER_PARKED`] threads wait at once.
    /// With that many waiters, handing the poller from one finished thread to the next makes
    /// every handover wait for a thread to be scheduled among many runnable ones, and nobody
    /// reads the link meanwhile; a thread that only receives keeps reading (NDB's API starts a
    /// receive thread past a number of threads in the same way).
    fn maybe_start_receiver(&self, parked: usize) {
        if parked < RECEIVE_THREAD_AFTER_PARKED
            || self.receiver_started.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let Some(this) = self.this.upgrade() else {
            return;
        };
        let spawned = std::thread::Builder::new()
            .name(format!("rndb-recv-{}", self.peer))
            .spawn(move || this.receive_until_closed());
        if let Err(e) = spawned {
            // Waiters keep handing the poller over among themselves, as before.
            tracing::warn!(node = %self.peer, "start receive thread: {e}");
            self.receiver_started.store(false, Ordering::Release);
        }
    }

    /// The receive thread: owns the poller whenever no waiter does, in turns of
    /// [`RECEIVE_THREAD_TURN`], on a request id no request uses, until `close` or failure.
    fn receive_until_closed(self: Arc<Self>) {
        raise_receive_thread_priority(self.peer);
        while !self.closing.load(Ordering::Relaxed) {
            #[cfg(feature = "tokio")]
            self.expire_task_requests();
            self.register_request(RECEIVE_THREAD_REQUEST_ID);
            let turn = self.wait(
                RECEIVE_THREAD_REQUEST_ID,
                Instant::now() + RECEIVE_THREAD_TURN,
            );
            if let Err(e) = turn {
                if e.code() != Some(4012) {
                    break;
                }
            }
        }
        self.forget(RECEIVE_THREAD_REQUEST_ID);
        // Its last turn kept the poller: a parked waiter takes it now.
        let next = {
            let mut shared = self.shared();
            if std::mem::take(&mut shared.receiver_holds) {
                shared.poll_owner = false;
                shared.next_owner()
            } else {
                None
            }
        };
        next.iter().for_each(Thread::unpark);
    }

    fn shared(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn link(&self) -> MutexGuard<'_, Box<dyn Transporter>> {
        self.link.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers `request_id` as awaiting answers. Must happen before its signals are sent.
    pub fn register_request(&self, request_id: u32) {
        let reply = Reply::awaited(false);
        self.shared().replies.insert(request_id, reply);
    }

    /// Registers `request_id` as an event subscription's stream of at most `bytes_max` bytes
    /// not taken: whichever thread reads the link files its frames, and the subscriber takes
    /// them ([`Connection::take_stream`]), reading the link itself (`pump`) when nobody does.
    pub fn register_stream(&self, request_id: u32, bytes_max: usize) {
        let reply = Reply {
            stream_max: Some(bytes_max),
            ..Reply::default()
        };
        self.shared().replies.insert(request_id, reply);
    }

    /// Bounds what the stream `request_id` holds, not taken, to `bytes_max`.
    pub fn set_stream_max(&self, request_id: u32, bytes_max: usize) {
        if let Some(reply) = self.shared().replies.get_mut(&request_id) {
            if reply.stream_max.is_some() {
                reply.stream_max = Some(bytes_max);
            }
        }
    }

    /// Takes what the stream `request_id` collected, and has the calling thread (or `task`,
    /// when given) woken by its next SUB_GCP_COMPLETE_REP, its end, or the link's failure.
    pub(crate) fn take_stream(
        &self,
        request_id: u32,
        task: Option<&Waker>,
    ) -> Result<StreamTake, Error> {
        let mut shared = self.shared();
        if let Some(error) = shared.lost(self.peer) {
            shared.replies.remove(&request_id);
            return Err(error);
        }
        let Some(reply) = shared.replies.get_mut(&request_id) else {
            return Ok(StreamTake {
                ended: true,
                ..StreamTake::default()
            });
        };
        let take = StreamTake {
            frames: Answers(std::mem::take(&mut reply.frames)),
            ended: reply.complete,
            overflowed: reply.overflowed,
        };
        if take.ended {
            shared.replies.remove(&request_id);
        } else if let Some(task) = task {
            reply.waiter = None;
            match &mut reply.task {
                Some(waker) if waker.will_wake(task) => {}
                slot => *slot = Some(task.clone()),
            }
        } else {
            reply.task = None;
            reply.waiter = Some(std::thread::current());
        }
        Ok(take)
    }

    /// Registers `request_id` as awaiting answers that [`Connection::take_async_done`] collects.
    pub fn register_async_request(&self, request_id: u32) {
        let reply = Reply::awaited(true);
        self.shared().replies.insert(request_id, reply);
    }

    /// Registers `request_id` as awaited by a task ([`Connection::poll_reply`]), and makes sure
    /// the receive thread runs: a task never reads the link itself, so someone must.
    #[cfg(feature = "tokio")]
    pub fn register_task_request(&self, request_id: u32) {
        self.shared()
            .replies
            .insert(request_id, Reply::awaited(false));
        self.ensure_task_reader();
        self.task_request_registered.notify_one();
    }

    /// As [`Connection::register_task_request`], for a request given up at `deadline` by the
    /// link's reader rather than by a timer of the awaiting task.
    #[cfg(feature = "tokio")]
    pub fn register_task_request_until(&self, request_id: u32, deadline: Instant) {
        let mut reply = Reply::awaited(false);
        reply.deadline = Some(deadline);
        self.shared().replies.insert(request_id, reply);
        self.ensure_task_reader();
        self.task_request_registered.notify_one();
    }

    /// Gives up the task requests whose deadline passed: forgets them and wakes their tasks
    /// (which then fail with 4012). At most once per [`TASK_DEADLINE_SWEEP`].
    #[cfg(feature = "tokio")]
    pub(crate) fn expire_task_requests(&self) {
        let now = Instant::now();
        let mut shared = self.shared();
        if shared.next_sweep.is_some_and(|next| now < next) {
            return;
        }
        shared.next_sweep = Some(now + TASK_DEADLINE_SWEEP);
        let mut expired = Vec::new();
        shared.replies.retain(|_, reply| {
            let keep = reply.complete || reply.deadline.is_none_or(|d| now < d);
            if !keep {
                expired.extend(reply.task.take());
            }
            keep
        });
        drop(shared);
        expired.into_iter().for_each(Waker::wake);
    }

    /// Makes sure someone reads the link for the tasks awaiting it: over TCP and SHM a receive
    /// task on the caller's runtime, which reads the link when the runtime's reactor finds its
    /// socket readable (for SHM the wake-up socket, after a spin of ShmSpintime on the ring),
    /// so no other thread is involved and the wake-ups stay on the runtime's thread; outside
    /// a runtime (or over io_uring) the receive thread.
    #[cfg(feature = "tokio")]
    fn ensure_task_reader(&self) {
        if self.receive_task_alive.load(Ordering::Relaxed) {
            return;
        }
        if matches!(self.kind, TransporterKind::Tcp | TransporterKind::Shm) {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                if self.receive_task_alive.swap(true, Ordering::AcqRel) {
                    return;
                }
                if let Some(this) = self.this.upgrade() {
                    runtime.spawn(receive_task(this));
                    return;
                }
                self.receive_task_alive.store(false, Ordering::Release);
            }
        }
        if !self.receiver_started.load(Ordering::Relaxed) {
            self.maybe_start_receiver(RECEIVE_THREAD_AFTER_PARKED);
        }
    }

    /// True while some request is registered (a task, a thread or an executor awaits answers).
    #[cfg(feature = "tokio")]
    fn tasks_awaiting(&self) -> bool {
        !self.shared().replies.is_empty()
    }

    /// The answers of a request registered with [`Connection::register_task_request`] once
    /// complete (the request is then forgotten), or `Pending` with the task's waker kept, to be
    /// woken by whichever thread files its last answer. A request no longer registered (it was
    /// forgotten) fails with 4012, as an answer that will never come.
    #[cfg(feature = "tokio")]
    pub fn poll_reply(
        &self,
        request_id: u32,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<Answers, Error>> {
        use std::task::Poll;
        let mut shared = self.shared();
        if let Some(error) = shared.lost(self.peer) {
            shared.replies.remove(&request_id);
            return Poll::Ready(Err(error));
        }
        let Some(reply) = shared.replies.get_mut(&request_id) else {
            return Poll::Ready(Err(self.no_answer()));
        };
        if reply.complete {
            let frames = std::mem::take(&mut reply.frames);
            shared.replies.remove(&request_id);
            return Poll::Ready(Ok(Answers(frames)));
        }
        match &mut reply.task {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            task => *task = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// The asynchronous requests completed since the last call that `mine` claims (an
    /// executor takes only its own), with their answers.
    pub fn take_async_done(&self, mine: impl Fn(u32) -> bool) -> Vec<(u32, Answers)> {
        let mut shared = self.shared();
        let done = std::mem::take(&mut shared.async_done);
        let mut taken = Vec::new();
        for id in done {
            if !mine(id) {
                shared.async_done.push(id);
                continue;
            }
            if let Some(reply) = shared.replies.remove(&id) {
                taken.push((id, Answers(reply.frames)));
            }
        }
        taken
    }

    /// Reads whatever the link holds now, filing it, unless another thread owns the poller
    /// (then that thread reads). Never waits.
    pub fn pump(&self) -> Result<(), Error> {
        self.pump_count().map(|_| ())
    }

    /// As [`Connection::pump`], returning how many frames it read.
    pub(crate) fn pump_count(&self) -> Result<usize, Error> {
        {
            let mut shared = self.shared();
            if let Some(error) = shared.lost(self.peer) {
                return Err(error);
            }
            if shared.poll_owner {
                return Ok(0);
            }
            shared.poll_owner = true;
        }
        let result = self.receive_once(RECEIVE_THREAD_REQUEST_ID, usize::MAX);
        if result.is_err() {
            self.link().shutdown();
        }
        let mut shared = self.shared();
        shared.poll_owner = false;
        let (wake, outcome) = match result {
            Err(reason) => {
                let error = lost(self.peer, &reason);
                self.record_failure(&mut shared, reason);
                (shared.all_waiters(), Err(error))
            }
            Ok((delivered, _)) => (shared.next_owner().into_iter().collect(), Ok(delivered)),
        };
        drop(shared);
        wake.iter().for_each(Thread::unpark);
        outcome
    }

    /// One HeartbeatIntervalDbApi of the API's heartbeat (NDB's API_REGREQ every interval):
    /// reads what the link holds if nobody else does, counts the interval as silent when no
    /// frame came since the last one, fails the link once `missed_max` in a row were (the data
    /// node stopped, or the link drops everything: requests then fail with 4010 and go to
    /// other nodes), and asks the data node again. Nothing is done on a failed link.
    pub fn heartbeat(&self, missed_max: u32) {
        if self.is_failed() {
            return;
        }
        if self.pump().is_err() {
            return;
        }
        let received = self.frames_received.load(Ordering::Relaxed);
        let silent = {
            let mut state = self.heartbeat.lock().unwrap_or_else(|p| p.into_inner());
            if received == state.frames_seen {
                state.silent += 1;
            } else {
                state.silent = 0;
                state.frames_seen = received;
            }
            state.silent
        };
        if silent >= missed_max {
            let reason = format!(
                "no frame from data node {} for {silent} heartbeat intervals",
                self.peer
            );
            let mut link = self.link();
            link.shutdown();
            let waiters = {
                let mut shared = self.shared();
                self.record_failure(&mut shared, reason);
                shared.all_waiters()
            };
            drop(link);
            waiters.iter().for_each(Thread::unpark);
            return;
        }
        let header = FrameHeader {
            signal: rndb_protocol::lqh::gsn::API_REGREQ,
            receiver_block: rndb_protocol::signals::block::QMGR,
            sender_block: rndb_protocol::signals::block::API,
            request_id: RECEIVE_THREAD_REQUEST_ID,
        };
        // A full send buffer (4021) skips this heartbeat; a broken link fails the connection.
        let _ = self.send_batch(&[(header, &[])]);
    }

    /// True while `request_id` is registered (its answers are being collected).
    pub fn is_registered(&self, request_id: u32) -> bool {
        self.shared().replies.contains_key(&request_id)
    }

    /// The link failed for good (the first reason is kept).
    fn record_failure(&self, shared: &mut Shared, reason: String) {
        shared.failure.get_or_insert(reason);
        self.failed.store(true, Ordering::Release);
    }

    /// True once the link failed, or the cluster declared its data node failed; takes no
    /// lock.
    pub fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire) || self.declared.contains(self.peer)
    }

    /// The error every request on this connection fails with once its link failed.
    pub fn failure(&self) -> Option<Error> {
        self.shared().lost(self.peer)
    }

    /// Records why linking this failed link's data node again was refused (`None`: it was
    /// not, or is no longer): requests that fail on it name the refusal.
    pub fn note_relink_refused(&self, refusal: Option<String>) {
        self.shared().relink_refused = refusal;
    }

    /// Forgets a request (its answers, if any come, are dropped).
    pub fn forget(&self, request_id: u32) {
        self.shared().replies.remove(&request_id);
    }

    /// Appends `frames` to the link and flushes them, all or nothing: when the whole batch does
    /// not fit in the link's send buffer (after a flush of what is pending), nothing is
    /// appended and the answer is 4021 (out of send buffer space, temporary). Over SHM the
    /// batch is published in steps as it is appended (see `SHM_PUBLISH_EARLY_BYTES`). Any other
    /// failure of the link fails the connection for good (see [`Connection::fail`]).
    pub fn send_batch(&self, frames: &[(FrameHeader, &[u8])]) -> Result<(), Error> {
        self.send_frames(frames.iter().copied())
    }

    /// [`Connection::send_batch`] for frames that are not in a slice (it walks them twice: to
    /// size the batch, then to append it).
    pub fn send_frames<'a>(
        &self,
        frames: impl Iterator<Item = (FrameHeader, &'a [u8])> + Clone,
    ) -> Result<(), Error> {
        self.append_frames(frames, Flush::Now)
    }

    /// As [`Connection::send_frames`], for frames whose answers the calling thread waits for
    /// next: over TCP, while another thread owns the poller and is reading (not asleep in the
    /// poller), the frames are left in the send buffer for that reader, which flushes before
    /// each read and before it sleeps or leaves. With thousands of client threads each sending
    /// one transaction, the receive thread then pushes many in one `send` where each thread
    /// made its own (issue 26; NDB's API leaves the send to its poll owner or send thread in
    /// the same way). Otherwise, and over SHM (a spinning reader looks at its ring, not at
    /// the send buffer), the frames are flushed now.
    pub fn send_frames_awaited<'a>(
        &self,
        frames: impl Iterator<Item = (FrameHeader, &'a [u8])> + Clone,
    ) -> Result<(), Error> {
        self.append_frames(frames, Flush::UnlessReaderAwake)
    }

    /// As [`Connection::send_frames`], but leaves the frames in the link's send buffer unless
    /// they need room there: the caller owes a [`Connection::flush_owed`] soon after (the tokio
    /// interface flushes once for every execute its tasks appended in one turn of the runtime,
    /// as NDB's adaptive send coalesces many transactions' signals). Returns true when this
    /// call made the flush owed (the caller that sees true must make sure it happens).
    #[cfg(feature = "tokio")]
    pub fn append_frames_deferred<'a>(
        &self,
        frames: impl Iterator<Item = (FrameHeader, &'a [u8])> + Clone,
    ) -> Result<bool, Error> {
        self.append_frames(frames, Flush::Deferred)?;
        Ok(!self.flush_owed.swap(true, Ordering::AcqRel))
    }

    /// Flushes what [`Connection::append_frames_deferred`] left in the send buffer, unless
    /// another caller already did.
    #[cfg(feature = "tokio")]
    pub fn flush_owed(&self) -> Result<(), Error> {
        if !self.flush_owed.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        let mut link = self.link();
        match link.flush() {
            Ok(_) => Ok(()),
            Err(e) => Err(self.fail(&mut link, e)),
        }
    }

    /// Appends `frames` (all or nothing, see [`Connection::send_batch`]), then flushes them
    /// as `when` says.
    fn append_frames<'a>(
        &self,
        frames: impl Iterator<Item = (FrameHeader, &'a [u8])> + Clone,
        when: Flush,
    ) -> Result<(), Error> {
        // The flag first: the lock is taken only on a failed link, for the reason.
        if self.failed.load(Ordering::Acquire) {
            if let Some(error) = self.shared().lost(self.peer) {
                return Err(error);
            }
        }
        let mut link = self.link();
        let mut batch_bytes = 0usize;
        for (_, payload) in frames.clone() {
            let frame_bytes = link.encoded_frame_bytes(payload.len());
            if frame_bytes > FRAME_BYTES_MAX {
                return Err(Error::Transport {
                    node: self.peer,
                    source: TransportError::FrameTooLarge {
                        bytes: frame_bytes,
                        limit: FRAME_BYTES_MAX,
                    },
                });
            }
            batch_bytes += frame_bytes;
        }
        if batch_bytes > link.send_capacity_bytes() && link.pending_send_bytes() > 0 {
            // Older frames may still be buffered: push them out first to make room.
            if let Err(e) = link.flush() {
                return Err(self.fail(&mut link, e));
            }
        }
        let capacity_bytes = link.send_capacity_bytes();
        if batch_bytes > capacity_bytes {
            return Err(Error::ndb_detail(
                4021,
                format!(
                    "a batch of {batch_bytes} bytes to node {} does not fit in the {capacity_bytes} \
                     bytes of send buffer free; nothing was sent",
                    self.peer
                ),
            ));
        }
        let flush = match when {
            Flush::Now => true,
            #[cfg(feature = "tokio")]
            Flush::Deferred => false,
            Flush::UnlessReaderAwake => {
                link.kind() != TransporterKind::Tcp || !self.reader_awake.load(Ordering::Relaxed)
            }
        };
        let mut publish_early = flush && link.kind() == TransporterKind::Shm;
        for (header, payload) in frames {
            // Checked above to fit, so a failure here is the link's, not the batch's.
            if let Err(e) = link.send(&header, payload) {
                return Err(self.fail(&mut link, e));
            }
            self.count_sent(1, link.encoded_frame_bytes(payload.len()));
            // The data node, polling the ring from its own core, starts on the first
            // operations while the rest are still being written. A full ring ends that: the
            // rest waits for the final flush.
            if publish_early && link.pending_send_bytes() >= SHM_PUBLISH_EARLY_BYTES {
                match link.flush() {
                    Ok(FlushStatus::Done) => {}
                    Ok(FlushStatus::Pending) => publish_early = false,
                    Err(e) => return Err(self.fail(&mut link, e)),
                }
            }
        }
        if flush {
            if let Err(e) = link.flush() {
                return Err(self.fail(&mut link, e));
            }
        }
        Ok(())
    }

    /// Gives the link up for good: shuts its socket down, so the data node sees this API leave
    /// at once and aborts its transactions and frees its locks, and records `reason`, so every
    /// waiter and every later request fails with 4010. Takes `shared` under the held `link`
    /// lock (the lock order).
    fn fail(&self, link: &mut MutexGuard<'_, Box<dyn Transporter>>, e: TransportError) -> Error {
        link.shutdown();
        let waiters = {
            let mut shared = self.shared();
            self.record_failure(&mut shared, e.to_string());
            shared.all_waiters()
        };
        waiters.iter().for_each(Thread::unpark);
        Error::Transport {
            node: self.peer,
            source: e,
        }
    }

    /// Gives the link up because the data node broke the protocol (an answer that does not
    /// decode, or does not belong to the request it names), and returns the error for the
    /// request that found it. Nothing else that node sends can be trusted: its next frames may
    /// answer the same request id (a transaction keeps its id for every execute), so a late
    /// answer could complete a later request. As with a failed link, the socket is shut down
    /// and every waiter and later request fails with 4010. Takes `link`, then `shared`: the
    /// caller holds neither.
    pub fn protocol_violation(&self, reason: impl Into<String>) -> Error {
        let reason = reason.into();
        self.give_up(format!("protocol violation: {reason}"));
        Error::Protocol {
            node: self.peer,
            reason,
        }
    }

    /// Gives the link up for good with `reason` (the first reason a link failed with is kept):
    /// shuts its socket down, so the data node sees this API leave now, and fails every waiter
    /// and later request with 4010. Takes `link`, then `shared`: the caller holds neither.
    pub fn give_up(&self, reason: impl Into<String>) {
        self.link().shutdown();
        let waiters = {
            let mut shared = self.shared();
            self.record_failure(&mut shared, reason.into());
            shared.all_waiters()
        };
        waiters.iter().for_each(Thread::unpark);
    }

    /// Waits until the request's answer is complete, or the deadline passes (error 4012), or
    /// the link fails (error 4010).
    pub fn wait(&self, request_id: u32, deadline: Instant) -> Result<Answers, Error> {
        let taken = self.await_progress(request_id, deadline, usize::MAX, |shared| {
            shared.replies.remove(&request_id)
        });
        let reply = self.taken_or_forgotten(request_id, taken)?;
        Ok(Answers(reply.unwrap_or_default().frames))
    }

    /// What `await_progress` took, or, when the deadline passed (4012) or the link failed, the
    /// error, with the request forgotten.
    fn taken_or_forgotten<T>(
        &self,
        request_id: u32,
        taken: Result<Option<T>, Error>,
    ) -> Result<T, Error> {
        match taken {
            Ok(Some(taken)) => Ok(taken),
            failed => {
                self.forget(request_id);
                Err(failed.err().unwrap_or_else(|| self.no_answer()))
            }
        }
    }

    /// As [`Connection::wait`], but hands the answers to `on_answers` a slice at a time, as
    /// they arrive (at least [`STREAM_SLICE_BYTES`] each, but the last): a large execute's rows
    /// are decoded while the data node is still working on the rest. `on_answers` runs
    /// without any lock held.
    pub fn wait_streaming(
        &self,
        request_id: u32,
        deadline: Instant,
        on_answers: &mut dyn FnMut(&Answers),
    ) -> Result<(), Error> {
        let mut slice = Answers(Vec::new());
        loop {
            // The slice is taken under the lock that saw it, so a woken waiter locks once.
            let progress =
                self.await_progress(request_id, deadline, STREAM_SLICE_BYTES, |shared| {
                    slice.0.clear();
                    let complete = match shared.replies.get_mut(&request_id) {
                        Some(reply) => {
                            std::mem::swap(&mut reply.frames, &mut slice.0);
                            // Not parked while it decodes: a handover must not pick this thread.
                            reply.waiter = None;
                            reply.complete
                        }
                        // Forgotten: nobody expects it any more.
                        None => true,
                    };
                    if complete {
                        shared.replies.remove(&request_id);
                    }
                    complete
                });
            let complete = self.taken_or_forgotten(request_id, progress)?;
            on_answers(&slice);
            if complete {
                return Ok(());
            }
        }
    }

    fn no_answer(&self) -> Error {
        Error::ndb_detail(4012, format!("no answer from node {}", self.peer))
    }

    /// Reads the link (as poll owner, or parked while another thread is) until the request's
    /// answer is complete (true; it stays filed), the deadline passes (false), or the link
    /// fails. A request no longer registered counts as complete.
    pub fn await_reply(&self, request_id: u32, deadline: Instant) -> Result<bool, Error> {
        self.await_progress(request_id, deadline, usize::MAX, |_| ())
            .map(|taken| taken.is_some())
    }

    /// As [`Connection::await_reply`], but also returns once the request has `slice_bytes` of
    /// answers filed, complete or not, and runs `take` under the lock that saw the progress:
    /// its result, or `None` when the deadline passed. A poll owner that returns on such
    /// progress keeps the other waiters parked (it comes back for the rest at once, and hands
    /// the poller over when its request is complete); a parked waiter sees the progress when
    /// it next wakes.
    fn await_progress<T>(
        &self,
        request_id: u32,
        deadline: Instant,
        slice_bytes: usize,
        take: impl FnOnce(&mut Shared) -> T,
    ) -> Result<Option<T>, Error> {
        loop {
            let mut shared = self.shared();
            if shared.progressed(request_id, slice_bytes) {
                return Ok(Some(take(&mut shared)));
            }
            if let Some(error) = shared.lost(self.peer) {
                return Err(error);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            // The receive thread's last turn kept the poller for this one.
            let holds = request_id == RECEIVE_THREAD_REQUEST_ID
                && std::mem::take(&mut shared.receiver_holds);
            if shared.poll_owner && !holds {
                // Park until the owner completes this request or hands ownership over. A wake-up
                // that comes before the park is not lost: it makes the park return at once.
                shared.park_here(request_id);
                let parked = shared.parked.len();
                drop(shared);
                self.maybe_start_receiver(parked);
                let _counted = crate::futex_hash::parking();
                std::thread::park_timeout((deadline - now).min(PARKED_SLEEP_MAX));
                continue;
            }
            shared.poll_owner = true;
            drop(shared);
            let result = self.poll_as_owner(request_id, deadline, slice_bytes, now);
            if result.is_err() {
                // The connection is given up (below): shut the socket down so the data node
                // sees this API leave instead of keeping its transactions, locks and slot. Taken
                // before `shared` (the lock order).
                self.link().shutdown();
            }
            let mut shared = self.shared();
            shared.poll_owner = false;
            let wake = match result {
                Err(reason) => {
                    self.record_failure(&mut shared, reason);
                    shared.all_waiters()
                }
                // Back only to hand a slice over: this thread polls again right after, so
                // waking another to take the poller would only make it park again.
                Ok(())
                    if shared
                        .replies
                        .get(&request_id)
                        .is_some_and(|r| !r.complete && r.frames.len() >= slice_bytes)
                        && Instant::now() < deadline =>
                {
                    Vec::new()
                }
                // The receive thread's turn ended: it keeps the poller for its next turn, which
                // its loop starts at once. Released, the poller would go to a client thread
                // that keeps it until its own request is done (at thousands of threads, tens
                // of milliseconds of reading from a thread that is descheduled between reads).
                Ok(()) if request_id == RECEIVE_THREAD_REQUEST_ID => {
                    shared.poll_owner = true;
                    shared.receiver_holds = true;
                    Vec::new()
                }
                Ok(()) => shared.next_owner().into_iter().collect(),
            };
            // What the loop's first check would find, read under this lock rather than the
            // next one.
            if shared.progressed(request_id, slice_bytes) {
                let taken = take(&mut shared);
                drop(shared);
                wake.iter().for_each(Thread::unpark);
                return Ok(Some(taken));
            }
            drop(shared);
            wake.iter().for_each(Thread::unpark);
        }
    }

    /// Reads the link until `request_id` is complete or has `slice_bytes` of answers filed,
    /// the deadline passes or the link fails. Spins for the poller's adaptive budget after the
    /// last input, then sleeps in the poller. Frames other threads left for it to send (see
    /// [`Connection::send_frames_awaited`]) are flushed before each read, before each sleep,
    /// and when it leaves.
    fn poll_as_owner(
        &self,
        request_id: u32,
        deadline: Instant,
        slice_bytes: usize,
        began: Instant,
    ) -> Result<(), String> {
        let mut poller = self.poller.lock().unwrap_or_else(|p| p.into_inner());
        let result = self.read_until(&mut poller, request_id, deadline, slice_bytes, began);
        if self.kind != TransporterKind::Tcp {
            // Only a TCP reader is left frames to send (see `send_frames_awaited`), and its
            // last read flushed any a full ring or socket held back.
            return result;
        }
        let mut link = self.link();
        self.reader_awake.store(false, Ordering::Relaxed);
        if result.is_ok() && link.pending_send_bytes() > 0 {
            link.flush().map_err(|e| e.to_string())?;
        }
        result
    }

    /// The loop of [`Connection::poll_as_owner`], with the poller held.
    fn read_until(
        &self,
        poller: &mut Poller,
        request_id: u32,
        deadline: Instant,
        slice_bytes: usize,
        began: Instant,
    ) -> Result<(), String> {
        let mut last_input = began;
        let budget = poller.spin.budget();
        // Whether this wait's spin was judged: input while spinning, or the spin ran out. A wait
        // whose request had to wake the data node never counts as a failure: its answer is late
        // by that wake-up whether or not spinning pays. Input within the spin still counts as a
        // success, or two sides that had both stopped spinning could never start again (each
        // one's probe would wake the other, and go unjudged).
        let (woke_peer, input_pending) = {
            let mut link = self.link();
            self.reader_awake.store(true, Ordering::Relaxed);
            (link.take_woke_peer(), link.input_pending())
        };
        let mut judged = budget.is_zero();
        // The poller is edge-triggered and keeps readiness until someone waits on it, so a read
        // before the first sleep is needed only when the last reader left input behind, or to
        // spin (over SHM, only once the probe sees input: the first look below is the probe's).
        let mut read_now = input_pending || (!budget.is_zero() && self.probe.is_none());
        // When the loop last looked at the clock. Input found by a read is dated by it, at
        // most SPIN_CLOCK_EVERY turns early: a clock read costs 20-70 ns on this machine's
        // virtual CPUs, more than the rest of a spinning turn, and from an answer's arrival to
        // the caller's return every nanosecond is latency.
        let mut now = last_input;
        let mut spins = 0u32;
        loop {
            if read_now {
                let (delivered, mine_done) = self.receive_once(request_id, slice_bytes)?;
                if delivered > 0 && !judged {
                    poller.spin.record(Some(now.duration_since(last_input)));
                    judged = true;
                }
                if mine_done {
                    return Ok(());
                }
                if delivered > 0 {
                    last_input = Instant::now();
                }
            }
            // Spinning on the probe, the clock is read on every SPIN_CLOCK_EVERY-th turn.
            spins = spins.wrapping_add(1);
            let clock_due =
                self.probe.is_none() || budget.is_zero() || spins.is_multiple_of(SPIN_CLOCK_EVERY);
            if clock_due {
                now = Instant::now();
                if now >= deadline {
                    return Ok(());
                }
            }
            // Spinning, the ring is looked at without the link's lock; a whole read (which
            // also pushes out bytes a flush left behind and checks the peer is alive) comes
            // when the probe sees input, and on every SPIN_READ_EVERY-th turn regardless.
            let more = match &self.probe {
                Some(probe) => probe.input_pending() || spins.is_multiple_of(SPIN_READ_EVERY),
                None => self.link().input_pending(),
            };
            read_now = more || self.probe.is_none();
            if more {
                // Straight to the read: a PAUSE here (tens of cycles on AMD's cores) would
                // come between the answer's arrival and its reading.
                continue;
            }
            if !clock_due || now.duration_since(last_input) < budget {
                std::hint::spin_loop();
                continue;
            }
            read_now = true;
            if !judged {
                // The whole spin passed without input: spinning did not pay this time.
                if !woke_peer {
                    poller.spin.record(None);
                }
                judged = true;
            }
            // Bytes a flush left behind (socket or ring full) are pushed before the sleep; if
            // some still remain, the sleep is short, so they go out soon after room appears.
            let send_pending = {
                let mut link = self.link();
                // From here on a sender flushes for itself: this thread may be asleep.
                self.reader_awake.store(false, Ordering::Relaxed);
                if link.pending_send_bytes() > 0 {
                    link.flush().map_err(|e| e.to_string())?;
                }
                link.pending_send_bytes() > 0
            };
            if self.declared.contains(self.peer) {
                return Err(format!(
                    "the cluster declared data node {} failed (NODE_FAILREP)",
                    self.peer
                ));
            }
            {
                let mut link = self.link();
                if !link.prepare_to_sleep() {
                    self.reader_awake.store(true, Ordering::Relaxed);
                    continue;
                }
            }
            let sleep_max = if send_pending {
                POLL_SLEEP_SEND_PENDING
            } else {
                POLL_SLEEP_MAX
            };
            let timeout = (deadline - now).min(sleep_max);
            let Poller { poll, events, .. } = &mut *poller;
            let polled = poll.poll(events, Some(timeout));
            let open_event = events
                .iter()
                .any(|e| e.is_readable() && !e.is_read_closed() && !e.is_error());
            let mut link = self.link();
            link.woke_up();
            self.reader_awake.store(true, Ordering::Relaxed);
            if open_event {
                // The peer has not closed: the next read may stop once it comes up short.
                link.stop_after_short_read();
            }
            drop(link);
            if let Err(e) = polled {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(format!("poll: {e}"));
                }
            }
        }
    }

    /// One non-blocking read of the link, filing every frame and waking the threads whose
    /// requests it completed. Returns how many frames came and whether `request_id` is now
    /// complete or has `slice_bytes` of answers filed.
    fn receive_once(&self, request_id: u32, slice_bytes: usize) -> Result<(usize, bool), String> {
        let mut link = self.link();
        if link.pending_send_bytes() > 0 {
            link.flush().map_err(|e| e.to_string())?;
        }
        let mut guard = self.shared();
        let shared = &mut *guard;
        let mut overflow = None;
        // Empty until a parked thread's request completes: a lone thread's answers allocate
        // nothing here.
        let mut wake: Vec<Thread> = Vec::new();
        let mut wake_tasks: Vec<Waker> = Vec::new();
        let declared = &self.declared;
        let arbiter = &self.arbiter;
        let peer = self.peer;
        let mut arbitration: Vec<(u16, Arbit)> = Vec::new();
        let mut stopping_told = false;
        let mut payload_bytes = 0usize;
        let delivered = link
            .receive(&mut |header, payload| {
                payload_bytes += payload.len();
                if matches!(header.signal, gsn::ARBIT_STARTREQ | gsn::ARBIT_CHOOSEREQ) {
                    // Not an answer: the data nodes' president, or a side's, asks this API
                    // node to arbitrate; answered once the read is done.
                    match Arbit::decode(payload) {
                        Ok(request) => {
                            arbitration.extend(arbiter.answer(peer, header.signal, &request))
                        }
                        Err(e) => {
                            overflow.get_or_insert(format!("arbitration request: {e}"));
                        }
                    }
                    return;
                }
                if header.signal == gsn::NODE_STOPPING_REP {
                    // Not an answer: this data node stops; answered once the read is done.
                    stopping_told = true;
                    return;
                }
                if header.signal == gsn::NODE_FAILREP {
                    // Not an answer: a data node's failure, news for every connection.
                    match FailRep::decode(payload) {
                        Ok(rep) => declared.insert(NodeId(rep.node)),
                        Err(e) => {
                            overflow.get_or_insert(format!("NODE_FAILREP: {e}"));
                        }
                    }
                    return;
                }
                match file_frame(&mut shared.replies, header, payload) {
                    Ok(Some(completed)) => {
                        if completed.asynchronous {
                            shared.async_done.push(header.request_id);
                        }
                        wake.extend(completed.waiter.take());
                        wake_tasks.extend(completed.task.take());
                    }
                    Ok(None) => {}
                    Err(reason) => {
                        overflow.get_or_insert(reason);
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        if let Some(reason) = overflow {
            return Err(reason);
        }
        let mut replies: Vec<(u16, Vec<u8>)> = (arbitration.into_iter())
            .map(|(signal, answer)| {
                let mut payload = Vec::new();
                answer.encode(&mut payload);
                (signal, payload)
            })
            .collect();
        if stopping_told {
            // New transactions go to other data nodes from now on (`Cluster::tc_of_key`);
            // the data node refuses new ones once every API node said so.
            self.note_stopping();
            replies.push((gsn::NODE_STOPPING_CONF, Vec::new()));
        }
        for (signal, payload) in replies {
            let header = FrameHeader {
                signal,
                receiver_block: block::QMGR,
                sender_block: block::API,
                request_id: 0,
            };
            link.send(&header, &payload).map_err(|e| e.to_string())?;
            self.count_sent(1, link.encoded_frame_bytes(payload.len()));
            link.flush().map_err(|e| e.to_string())?;
        }
        if delivered > 0 {
            add_under_link_lock(&self.frames_received, delivered as u64);
            // Every frame's header and trailer are the same size: that of an empty frame.
            let framing_bytes = link.encoded_frame_bytes(0) * delivered;
            add_under_link_lock(&self.bytes_received, (payload_bytes + framing_bytes) as u64);
        }
        let done = shared.progressed(request_id, slice_bytes);
        drop(guard);
        drop(link);
        wake.iter().for_each(Thread::unpark);
        wake_tasks.into_iter().for_each(Waker::wake);
        Ok((delivered, done))
    }
}

/// Adds `n` to a traffic counter of a connection, whose caller holds the link's lock: the
/// lock makes it the only writer, so a plain load and store do, where `fetch_add` would be a
/// locked instruction. Right after a frame was written into a shared-memory ring, a locked
/// instruction waits until the ring's cache line has come over from the peer's core, and that
/// wait came before the frame was published (about a tenth of an SHM ping).
fn add_under_link_lock(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

/// Raises the calling thread's (the receive thread's) scheduling priority: nice
/// [`RECEIVE_THREAD_NICE_INCREMENT`] below the process's.
///
/// The receive thread runs only once many threads wait on one connection, and each of them,
/// once its answer is filed, is runnable until it has sent its next request. At the same
/// priority, the scheduler queued the receive thread behind those (thousands, with a client
/// thread per transaction on two cores), the link went unread while they ran, and the data node
/// idled: the threaded sweep fell to 0.38 of its peak at 4096 threads (issue 26). With a larger
/// share the receive thread runs as soon as answers arrive, and the pipeline stays full.
///
/// Lowering a nice value needs CAP_SYS_NICE or an RLIMIT_NICE that allows it; without either
/// the thread stays at the process's priority (said once in the log, at debug level).
fn raise_receive_thread_priority(peer: NodeId) {
    // On Linux nice() changes the calling thread only (threads are scheduled on their own).
    match rustix::process::nice(RECEIVE_THREAD_NICE_INCREMENT) {
        Ok(nice) => tracing::debug!(node = %peer, nice, "receive thread priority raised"),
        Err(e) => tracing::debug!(
            node = %peer,
            "receive thread stays at the process's priority (nice {RECEIVE_THREAD_NICE_INCREMENT} \
             refused: {e})"
        ),
    }
}

/// How often the link's reader looks for task requests past their deadline.
#[cfg(feature = "tokio")]
const TASK_DEADLINE_SWEEP: Duration = Duration::from_millis(100);

/// The longest a receive task waits for its socket to turn readable before it reads anyway
/// (a thread that owned the poller may have left input behind that no new readiness
/// announces): a period, not a timeout set anew for each wait.
#[cfg(feature = "tokio")]
const RECEIVE_TASK_BACKSTOP: Duration = Duration::from_millis(10);

/// Clears `receive_task_alive` when the receive task ends or is dropped with its runtime.
#[cfg(feature = "tokio")]
struct ReceiveTaskAlive(Arc<Connection>);

#[cfg(feature = "tokio")]
impl Drop for ReceiveTaskAlive {
    fn drop(&mut self) {
        self.0.receive_task_alive.store(false, Ordering::Release);
    }
}

/// The link's descriptor, for the runtime's reactor (the link owns it and outlives the task).
#[cfg(feature = "tokio")]
struct LinkFd(std::os::fd::RawFd);

#[cfg(feature = "tokio")]
impl std::os::fd::AsRawFd for LinkFd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0
    }
}

/// Reads a TCP or SHM link from a task of the runtime whenever it holds input, filing the
/// answers and waking the tasks awaiting them, until the link fails or closes. Reads again at
/// once while reads find frames (the socket may hold more than one read takes). After the
/// last input it polls again on every turn of the runtime for the link's spin time (ShmSpintime;
/// none for TCP) while tasks await answers, then announces its sleep (for SHM the data node
/// then writes a wake-up byte on the link's socket) and waits for the socket to turn
/// readable, clearing the readiness before reading, so input arriving after a read is always
/// announced.
#[cfg(feature = "tokio")]
async fn receive_task(connection: Arc<Connection>) {
    let alive = ReceiveTaskAlive(connection);
    let connection = &alive.0;
    let (fd, spin) = {
        let link = connection.link();
        (LinkFd(link.poll_fd()), link.spin_time())
    };
    let mut last_input = Instant::now();
    // A socket is also watched for room when a flush left bytes behind.
    let socket = connection.kind == TransporterKind::Tcp;
    let interest = if socket {
        tokio::io::Interest::READABLE | tokio::io::Interest::WRITABLE
    } else {
        tokio::io::Interest::READABLE
    };
    // Deprecated for I/O safety: the descriptor must stay open while registered. It does: the
    // link owns it, this task holds the connection (and so the link) until the registration is
    // dropped, and a link never changes its descriptor (a failed link is shut down, not
    // closed). The safe constructor is the only one a crate that forbids `unsafe` may call.
    #[allow(deprecated)]
    let registered = tokio::io::unix::AsyncFd::with_interest(fd, interest);
    let readable = match registered {
        Ok(readable) => readable,
        Err(e) => {
            tracing::warn!(node = %connection.peer, "register link with the runtime: {e}");
            connection.maybe_start_receiver(RECEIVE_THREAD_AFTER_PARKED);
            return;
        }
    };
    // One timer for the task's life, moved on only when it fires: a timer set anew before
    // every sleep costs the runtime a wake-up of its own (a write to its eventfd and one more
    // epoll_wait) whenever its deadline comes before the runtime's next one.
    let backstop = tokio::time::sleep(RECEIVE_TASK_BACKSTOP);
    tokio::pin!(backstop);
    while !connection.closing.load(Ordering::Relaxed) {
        connection.expire_task_requests();
        match connection.pump_count() {
            Err(_) => return,
            Ok(0) => {}
            Ok(_) => {
                last_input = Instant::now();
                // Let the tasks it woke run before the next read.
                tokio::task::yield_now().await;
                continue;
            }
        }
        if last_input.elapsed() < spin && connection.tasks_awaiting() {
            // Spinning through the runtime: every other task (and the reactor) runs between
            // two looks at the ring.
            tokio::task::yield_now().await;
            continue;
        }
        // Bytes the last read's flush left behind (the socket or ring was full) must not wait
        // for the next execute: every task may be awaiting answers to them. The next read
        // pushes them again, once the socket turns writable (SHM: after
        // POLL_SLEEP_SEND_PENDING).
        let send_pending = {
            let mut link = connection.link();
            if !link.prepare_to_sleep() {
                continue;
            }
            link.pending_send_bytes() > 0
        };
        let woken = tokio::select! {
            readable = readable.readable() => Some(Some(readable)),
            () = connection.task_request_registered.notified() => Some(None),
            writable = readable.writable(), if send_pending && socket => {
                if let Ok(mut guard) = writable {
                    guard.clear_ready();
                }
                None
            }
            () = tokio::time::sleep(POLL_SLEEP_SEND_PENDING), if send_pending && !socket => None,
            () = &mut backstop => {
                backstop.as_mut().reset(tokio::time::Instant::now() + RECEIVE_TASK_BACKSTOP);
                None
            }
        };
        connection.link().woke_up();
        match woken {
            Some(Some(Ok(mut guard))) => guard.clear_ready(),
            Some(Some(Err(_))) => return,
            // A request was sent: its answer is the next input, spun for as after an input.
            Some(None) => last_input = Instant::now(),
            None => {}
        }
    }
}

/// Appends one frame to the reply it answers. Returns the reply when the frame completed it.
fn file_frame<'r>(
    replies: &'r mut HashMap<u32, Reply, SequentialIds>,
    header: &FrameHeader,
    payload: &[u8],
) -> Result<Option<&'r mut Reply>, String> {
    let Some(reply) = replies.get_mut(&header.request_id) else {
        return Ok(None);
    };
    let completes = completes_request(header.signal);
    if let Some(max) = reply.stream_max {
        // An event stream: its consumer may lag, which costs its own data, never the link.
        let overflows = !reply.overflowed && reply.frames.len() + payload.len() + 6 > max;
        reply.overflowed |= overflows;
        if reply.overflowed && !completes {
            // The subscriber is woken once, to find the overflow at its next look.
            return Ok(overflows.then_some(reply));
        }
    } else if reply.frames.len() + payload.len() + 6 > REPLY_BYTES_MAX {
        return Err(format!(
            "request {} collected more than {REPLY_BYTES_MAX} bytes of answers",
            header.request_id
        ));
    }
    reply.frames.extend_from_slice(&header.signal.to_le_bytes());
    reply
        .frames
        .extend_from_slice(&(payload.len() as u32).to_le_bytes());
    reply.frames.extend_from_slice(payload);
    if !completes {
        // A stream's subscriber is woken by each completed epoch (its waiter is taken, so
        // once until it takes the stream again).
        let epoch_done = reply.stream_max.is_some() && header.signal == gsn::SUB_GCP_COMPLETE_REP;
        return Ok(epoch_done.then_some(reply));
    }
    reply.complete = true;
    Ok(Some(reply))
}

fn transport(node: NodeId, context: &str, e: std::io::Error) -> Error {
    Error::Transport {
        node,
        source: TransportError::io(context, e),
    }
}

fn lost(node: NodeId, failure: &str) -> Error {
    Error::ndb_detail(4010, format!("lost the link to node {node}: {failure}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply buffer kept from one request's answers comes back empty (and as large) for the
    /// thread's next request; one that grew past the limit is not kept.
    #[test]
    fn a_kept_reply_buffer_comes_back_empty() {
        let mut answers = Vec::with_capacity(4096);
        answers.extend_from_slice(b"stale answers");
        recycle_reply_buffer(answers);
        let reply = Reply::awaited(false);
        assert!(reply.frames.is_empty(), "{:?}", reply.frames);
        assert!(reply.frames.capacity() >= 4096, "the kept buffer is reused");

        let mut large = Vec::with_capacity(SPARE_REPLY_BYTES_MAX + 1);
        large.push(1);
        recycle_reply_buffer(large);
        let reply = Reply::awaited(false);
        assert!(reply.frames.is_empty());
        assert!(reply.frames.capacity() <= SPARE_REPLY_BYTES_MAX);
    }

    /// Dropped answers leave their buffer for the next request; answers that never held one
    /// (an empty slice of a stream) do not take the kept buffer's place.
    #[test]
    fn dropped_answers_leave_their_buffer_for_the_next_request() {
        drop(Answers(Vec::with_capacity(8192)));
        drop(Answers(Vec::new()));
        let reply = Reply::awaited(false);
        assert!(
            reply.frames.capacity() >= 8192,
            "{}",
            reply.frames.capacity()
        );
    }
}
