//! One connection from this API node to one data node, shared by every thread of the process.
//!
//! Sending takes the link's lock only while frames are appended and flushed. Waiting for an
//! answer follows NDB's "poll owner" design: of all threads waiting on a connection, one owns
//! the poller, reads the link and files every frame under the request id it answers; the others
//! sleep on a condition variable until their answer is complete or ownership is free.
//!
//! Lock order: `link` before `shared`. Nobody takes `link` while holding `shared`.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use rndb_config::{NodeId, TransporterKind};
use rndb_protocol::signals::gsn;
use rndb_transporter::spin::AdaptiveSpin;
use rndb_transporter::{FrameHeader, TransportError, Transporter, FRAME_BYTES_MAX};

use crate::Error;

/// The most bytes of answers one request may collect before it is complete: a bound on what a
/// misbehaving data node can make us buffer (one execute of the largest batch fits easily).
pub const REPLY_BYTES_MAX: usize = 64 * 1024 * 1024;

/// The longest a poll owner sleeps before it looks at its deadline again.
const POLL_SLEEP_MAX: Duration = Duration::from_millis(50);

/// The longest a poll owner sleeps while the link still holds bytes a flush could not push
/// (the socket or ring was full): it flushes again after this.
const POLL_SLEEP_SEND_PENDING: Duration = Duration::from_millis(1);

/// The answers gathered for one request: frames as `[signal u16][length u32][payload]`.
#[derive(Debug, Default)]
struct Reply {
    frames: Vec<u8>,
    complete: bool,
}

/// State shared between the poll owner and the waiters.
#[derive(Debug, Default)]
struct Shared {
    /// Requests waiting for answers, by request id. Frames for ids not here are dropped (an
    /// abandoned transaction's rollback answer, for example).
    replies: HashMap<u32, Reply>,
    /// A thread is reading the link; the others wait on the condition variable.
    poll_owner: bool,
    /// Set once the link failed; every waiter then fails with this error.
    failure: Option<String>,
    /// Threads sleeping on the condition variable.
    waiters: usize,
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
    poller: Mutex<Poller>,
    shared: Mutex<Shared>,
    answered: Condvar,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("peer", &self.peer)
            .field("kind", &self.kind)
            .finish()
    }
}

/// The frames that answered one request, to be walked with [`Answers::iter`].
#[derive(Debug)]
pub(crate) struct Answers(Vec<u8>);

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
    !matches!(signal, gsn::TCKEY_ROW | gsn::TCKEYREF | gsn::SCAN_ROWS)
}

impl Connection {
    pub fn new(link: Box<dyn Transporter>, spin: Duration) -> Result<Connection, Error> {
        let peer = link.peer();
        let kind = link.kind();
        let poll = Poll::new().map_err(|e| transport(peer, "create poller", e))?;
        let fd = link.poll_fd();
        poll.registry()
            .register(&mut SourceFd(&fd), Token(0), Interest::READABLE)
            .map_err(|e| transport(peer, "register link with poller", e))?;
        Ok(Connection {
            peer,
            kind,
            link: Mutex::new(link),
            poller: Mutex::new(Poller {
                poll,
                events: Events::with_capacity(4),
                spin: AdaptiveSpin::new(spin),
            }),
            shared: Mutex::new(Shared::default()),
            answered: Condvar::new(),
        })
    }

    fn shared(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn link(&self) -> MutexGuard<'_, Box<dyn Transporter>> {
        self.link.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers `request_id` as awaiting answers. Must happen before its signals are sent.
    pub fn expect(&self, request_id: u32) {
        self.shared().replies.insert(request_id, Reply::default());
    }

    /// Forgets a request (its answers, if any come, are dropped).
    pub fn forget(&self, request_id: u32) {
        self.shared().replies.remove(&request_id);
    }

    /// Appends `frames` to the link and flushes them in one go, all or nothing: when the whole
    /// batch does not fit in the link's send buffer (after a flush of what is pending), nothing
    /// is appended and the answer is 4021 (out of send buffer space, temporary). Any other
    /// failure of the link fails the connection for good (see [`Connection::fail`]).
    pub fn send_batch(&self, frames: &[(FrameHeader, &[u8])]) -> Result<(), Error> {
        if let Some(failure) = &self.shared().failure {
            return Err(lost(self.peer, failure));
        }
        let mut link = self.link();
        let mut batch_bytes = 0usize;
        for (_, payload) in frames {
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
        for (header, payload) in frames {
            // Checked above to fit, so a failure here is the link's, not the batch's.
            if let Err(e) = link.send(header, payload) {
                return Err(self.fail(&mut link, e));
            }
        }
        if let Err(e) = link.flush() {
            return Err(self.fail(&mut link, e));
        }
        Ok(())
    }

    /// Gives the link up for good: shuts its socket down, so the data node sees this API leave
    /// at once and aborts its transactions and frees its locks, and records `reason`, so every
    /// waiter and every later request fails with 4010. Takes `shared` under the held `link`
    /// lock (the lock order).
    fn fail(&self, link: &mut MutexGuard<'_, Box<dyn Transporter>>, e: TransportError) -> Error {
        link.shutdown();
        let waiting = {
            let mut shared = self.shared();
            shared.failure.get_or_insert_with(|| e.to_string());
            shared.waiters > 0
        };
        if waiting {
            self.answered.notify_all();
        }
        Error::Transport {
            node: self.peer,
            source: e,
        }
    }

    /// Waits until the request's answer is complete, or the deadline passes (error 4012), or
    /// the link fails (error 4010).
    pub fn wait(&self, request_id: u32, deadline: Instant) -> Result<Answers, Error> {
        loop {
            let mut shared = self.shared();
            if let Some(reply) = shared.replies.get(&request_id) {
                if reply.complete {
                    let reply = shared.replies.remove(&request_id).unwrap_or_default();
                    return Ok(Answers(reply.frames));
                }
            }
            if let Some(failure) = shared.failure.clone() {
                shared.replies.remove(&request_id);
                return Err(lost(self.peer, &failure));
            }
            let now = Instant::now();
            if now >= deadline {
                shared.replies.remove(&request_id);
                return Err(Error::ndb_detail(
                    4012,
                    format!("no answer from node {}", self.peer),
                ));
            }
            if shared.poll_owner {
                let timeout = (deadline - now).min(POLL_SLEEP_MAX);
                shared.waiters += 1;
                let (mut shared, _) = self
                    .answered
                    .wait_timeout(shared, timeout)
                    .unwrap_or_else(|p| p.into_inner());
                shared.waiters -= 1;
                continue;
            }
            shared.poll_owner = true;
            drop(shared);
            let result = self.poll_as_owner(request_id, deadline);
            if result.is_err() {
                // The connection is given up (below): shut the socket down so the data node
                // sees this API leave instead of keeping its transactions, locks and slot. Taken
                // before `shared` (the lock order).
                self.link().shutdown();
            }
            let mut shared = self.shared();
            shared.poll_owner = false;
            if let Err(reason) = result {
                shared.failure.get_or_insert(reason);
            }
            let waiting = shared.waiters > 0;
            drop(shared);
            if waiting {
                self.answered.notify_all();
            }
        }
    }

    /// Reads the link until `request_id` is complete, the deadline passes or the link fails.
    /// Spins for the poller's adaptive budget after the last input, then sleeps in the poller.
    fn poll_as_owner(&self, request_id: u32, deadline: Instant) -> Result<(), String> {
        let mut poller = self.poller.lock().unwrap_or_else(|p| p.into_inner());
        let mut last_input = Instant::now();
        let budget = poller.spin.budget();
        // Whether this wait's spin was judged: input while spinning, or the spin ran out.
        let mut judged = budget.is_zero();
        // The poller is edge-triggered and keeps readiness until someone waits on it, so a read
        // before the first sleep is needed only when the last reader left input behind, or to
        // spin.
        let mut read_now = self.link().input_pending() || !budget.is_zero();
        loop {
            if read_now {
                let (delivered, mine_done) = self.receive_once(request_id)?;
                if delivered > 0 {
                    self.wake_waiters();
                    if !judged {
                        poller.spin.record(Some(last_input.elapsed()));
                        judged = true;
                    }
                    last_input = Instant::now();
                }
                if mine_done {
                    return Ok(());
                }
            }
            read_now = true;
            let now = Instant::now();
            if now >= deadline {
                return Ok(());
            }
            if now.duration_since(last_input) < budget || self.link().input_pending() {
                std::hint::spin_loop();
                continue;
            }
            if !judged {
                // The whole spin passed without input: spinning did not pay this time.
                poller.spin.record(None);
                judged = true;
            }
            // Bytes a flush left behind (socket or ring full) are pushed before the sleep; if
            // some still remain, the sleep is short, so they go out soon after room appears.
            let send_pending = {
                let mut link = self.link();
                if link.pending_send_bytes() > 0 {
                    link.flush().map_err(|e| e.to_string())?;
                }
                link.pending_send_bytes() > 0
            };
            if !self.link().prepare_to_sleep() {
                continue;
            }
            let sleep_max = if send_pending {
                POLL_SLEEP_SEND_PENDING
            } else {
                POLL_SLEEP_MAX
            };
            let timeout = (deadline - now).min(sleep_max);
            let Poller { poll, events, .. } = &mut *poller;
            let polled = poll.poll(events, Some(timeout));
            self.link().woke_up();
            if let Err(e) = polled {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(format!("poll: {e}"));
                }
            }
        }
    }

    /// Wakes threads waiting for answers, if there are any: a condition variable's notify is a
    /// system call even with nobody waiting.
    fn wake_waiters(&self) {
        if self.shared().waiters > 0 {
            self.answered.notify_all();
        }
    }

    /// One non-blocking read of the link, filing every frame. Returns how many frames came and
    /// whether `request_id` is now complete.
    fn receive_once(&self, request_id: u32) -> Result<(usize, bool), String> {
        let mut link = self.link();
        if link.pending_send_bytes() > 0 {
            link.flush().map_err(|e| e.to_string())?;
        }
        let mut shared = self.shared();
        let mut overflow = None;
        let delivered = link
            .receive(&mut |header, payload| {
                if let Err(reason) = file_frame(&mut shared.replies, header, payload) {
                    overflow.get_or_insert(reason);
                }
            })
            .map_err(|e| e.to_string())?;
        if let Some(reason) = overflow {
            return Err(reason);
        }
        let done = shared.replies.get(&request_id).is_none_or(|r| r.complete);
        Ok((delivered, done))
    }
}

/// Appends one frame to the reply it answers.
fn file_frame(
    replies: &mut HashMap<u32, Reply>,
    header: &FrameHeader,
    payload: &[u8],
) -> Result<(), String> {
    let Some(reply) = replies.get_mut(&header.request_id) else {
        return Ok(());
    };
    if reply.frames.len() + payload.len() + 6 > REPLY_BYTES_MAX {
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
    if completes_request(header.signal) {
        reply.complete = true;
    }
    Ok(())
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
