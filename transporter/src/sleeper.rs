//! Sending a link's last bytes and going to sleep in one system call.
//!
//! A loop that answers a request and then sleeps makes two calls: `send` on the socket, which
//! wakes the peer, then `epoll_wait`. When both processes share a core (four data nodes and a
//! client on one CPU, say), the woken peer preempts the sender on its way back from `send`: the
//! sender is switched out involuntarily, and is later switched back in only to call
//! `epoll_wait` and sleep, one more pair of context switches per request on the shared core.
//!
//! A [`Sleeper`] puts the SEND and an EPOLL_WAIT on the loop's epoll instance into one
//! `io_uring_enter`, which sends, then waits for the EPOLL_WAIT to harvest events. The kernel
//! does not preempt inside that call, so the thread goes to sleep in the call that woke its
//! peer, and the scheduler hands the core over without a preemption. The events land in the
//! sleeper's buffer, so waking costs no second call either.
//!
//! The wait has no timeout: a timed `io_uring_enter` costs more per sleep than `epoll_wait`
//! does. A loop that must wake at a time puts a timer
//! (a timerfd) in its epoll set, or sleeps in `epoll_wait` instead.
//!
//! The SEND carries `MSG_DONTWAIT`, so the kernel tries it once, inline, during the call, as the
//! io_uring link's SENDs do ([`crate::uring`]). It sends a copy of the caller's bytes that the
//! sleeper owns, and the EPOLL_WAIT writes into a buffer the sleeper owns: neither is touched or
//! freed while the kernel may use it. An EPOLL_WAIT interrupted by a signal stays in the kernel;
//! its events are delivered by a later call ([`Sleeper::collect`]), and `Drop` cancels it.

use std::io;
use std::os::fd::RawFd;

use io_uring::{opcode, squeue, types, IoUring};

use crate::uring::{setup_refusal, uring_available};

/// The user_data of the SEND SQE.
const USER_DATA_SEND: u64 = 1;
/// The user_data of the EPOLL_WAIT SQE.
const USER_DATA_WAIT: u64 = 2;
/// The user_data of an ASYNC_CANCEL SQE.
const USER_DATA_CANCEL: u64 = 3;
/// Entries of the ring: a SEND, an EPOLL_WAIT and a cancel at most are ever queued.
const RING_ENTRIES: u32 = 4;
/// How many times `Drop` waits for a cancelled EPOLL_WAIT before it leaks the event buffer.
const DROP_WAITS_MAX: usize = 100;

/// One event from the epoll instance: the registration's token and its `EPOLL*` flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpollEvent {
    pub token: u64,
    pub flags: u32,
}

impl EpollEvent {
    /// Input (or an end) to read, as mio's `is_readable`.
    pub fn is_readable(&self) -> bool {
        self.flags & (libc::EPOLLIN | libc::EPOLLPRI) as u32 != 0
    }

    /// The peer closed its side, as mio's `is_read_closed`.
    pub fn is_read_closed(&self) -> bool {
        self.flags & libc::EPOLLHUP as u32 != 0
            || (self.flags & libc::EPOLLIN as u32 != 0 && self.flags & libc::EPOLLRDHUP as u32 != 0)
    }

    /// The descriptor has an error, as mio's `is_error`.
    pub fn is_error(&self) -> bool {
        self.flags & libc::EPOLLERR as u32 != 0
    }
}

/// An io_uring that sends one buffer and then sleeps on an epoll instance, in one call.
pub struct Sleeper {
    ring: IoUring,
    /// The epoll instance slept on.
    epoll_fd: RawFd,
    /// Where the EPOLL_WAIT writes events. Not touched while `wait_in_flight`.
    events: Box<[libc::epoll_event]>,
    /// An EPOLL_WAIT was submitted and its completion not yet reaped.
    wait_in_flight: bool,
    /// Events of a completed EPOLL_WAIT not yet collected.
    events_ready: usize,
    /// The bytes of the last SEND. Not touched while `send_in_flight`.
    send_copy: Vec<u8>,
    /// A SEND was submitted and its completion not yet reaped: the kernel may read `send_copy`.
    send_in_flight: bool,
    /// The reaped result of the last SEND (bytes or -errno).
    send_result: Option<i32>,
    /// `io_uring_enter` failed: SQEs may sit unsubmitted in the queue, and submitting them
    /// later could send stale bytes on a descriptor reused since. Nothing is submitted again.
    failed: bool,
}

impl Sleeper {
    /// A sleeper on the epoll instance `epoll_fd`, harvesting up to `events_max` events per
    /// sleep. `Err` says why this kernel cannot have one (no io_uring, or one without
    /// EPOLL_WAIT, which came with Linux 6.15). Only the calling thread may use it: its ring is
    /// single-issuer, and a call from another thread fails (EEXIST) as a ring failure.
    pub fn new(epoll_fd: RawFd, events_max: usize) -> Result<Sleeper, String> {
        uring_available()?;
        // One thread submits, and completions are only wanted when it waits: the kernel then
        // wakes the waiter directly instead of interrupting it with task work.
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(RING_ENTRIES)
            .map_err(|e| setup_refusal(&e))?;
        let mut probe = io_uring::Probe::new();
        ring.submitter()
            .register_probe(&mut probe)
            .map_err(|e| format!("io_uring probe: {e}"))?;
        if !probe.is_supported(opcode::EpollWait::CODE) {
            return Err("this kernel's io_uring has no EPOLL_WAIT (Linux 6.15)".into());
        }
        Ok(Sleeper {
            ring,
            epoll_fd,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; events_max.max(1)]
                .into_boxed_slice(),
            wait_in_flight: false,
            events_ready: 0,
            send_copy: Vec::new(),
            send_in_flight: false,
            send_result: None,
            failed: false,
        })
    }

    /// Sends `send`'s bytes on its socket (once, without waiting for room), then sleeps until
    /// the epoll instance has events, which [`Sleeper::collect`] then hands out. Returns what
    /// the send did: the bytes written (maybe fewer than given), or its error (`WouldBlock` when
    /// the socket was full). Returns early, maybe without events, when a signal interrupts.
    ///
    /// `Err` means the ring itself failed; the caller cannot know whether the bytes went out,
    /// must treat that link as broken, and should stop using this sleeper.
    pub fn send_and_sleep(
        &mut self,
        send: Option<(RawFd, &[u8])>,
    ) -> io::Result<Option<io::Result<usize>>> {
        self.reap();
        if self.failed || self.send_in_flight {
            return Err(io::Error::other("this io_uring failed earlier"));
        }
        let mut want = 0;
        if let Some((socket, bytes)) = send {
            self.send_copy.clear();
            self.send_copy.extend_from_slice(bytes);
            let len = u32::try_from(self.send_copy.len()).unwrap_or(u32::MAX);
            let entry = opcode::Send::new(types::Fd(socket), self.send_copy.as_ptr(), len)
                .flags(libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
                .build()
                .user_data(USER_DATA_SEND);
            // SAFETY: the SEND reads `len` bytes of `send_copy`, which nothing writes, moves or
            // frees while `send_in_flight` is set: this function waits for the completion before
            // it returns, a later call refuses to start while it is set, and `Drop` waits for
            // it or leaks the buffer.
            unsafe { self.push(&entry)? };
            self.send_in_flight = true;
            want += 1;
        }
        if !self.wait_in_flight && self.events_ready == 0 {
            let max_events = u32::try_from(self.events.len()).unwrap_or(u32::MAX);
            let entry = opcode::EpollWait::new(
                types::Fd(self.epoll_fd),
                self.events.as_mut_ptr().cast::<types::epoll_event>(),
                max_events,
            )
            .build()
            .user_data(USER_DATA_WAIT);
            // SAFETY: the EPOLL_WAIT writes at most `max_events` entries of `events`, which
            // nothing reads, moves or frees while `wait_in_flight` is set: `collect` reads it
            // only after the completion, and `Drop` cancels the wait and waits for it or leaks
            // the buffer.
            unsafe { self.push(&entry)? };
            self.wait_in_flight = true;
        }
        if self.wait_in_flight {
            want += 1;
        }
        // A signal (EINTR) or completions to reap first (EBUSY) end the call early: what was
        // not submitted is submitted below (the SEND) or by the next call (the wait).
        self.enter(want)?;
        self.wait_for_send()?;
        Ok(self.send_result.take().map(|result| {
            if result >= 0 {
                Ok(result as usize)
            } else {
                Err(io::Error::from_raw_os_error(-result))
            }
        }))
    }

    /// Hands out the events of a completed wait (also of one a signal interrupted, completed
    /// since), once each. Costs no system call.
    pub fn collect(&mut self, mut on_event: impl FnMut(EpollEvent)) {
        self.reap();
        if self.wait_in_flight {
            return;
        }
        for event in &self.events[..self.events_ready] {
            // A copy: the kernel's struct is packed on x86-64.
            let libc::epoll_event { events, u64 } = *event;
            on_event(EpollEvent {
                token: u64,
                flags: events,
            });
        }
        self.events_ready = 0;
    }

    /// Queues one SQE.
    ///
    /// # Safety
    ///
    /// Every buffer `entry` points to must stay valid until its completion has been reaped.
    unsafe fn push(&mut self, entry: &squeue::Entry) -> io::Result<()> {
        // SAFETY: the caller keeps the entry's buffers valid until its completion (see above).
        let pushed = unsafe { self.ring.submission().push(entry) };
        pushed.map_err(|_| {
            // Not expected (at most three entries are ever queued), but an entry queued before
            // this one must then never be submitted: a SEND could go out on a descriptor the
            // caller has closed and reused by then.
            self.failed = true;
            io::Error::other("io_uring submission queue full")
        })
    }

    /// Moves every posted completion into the sleeper's state.
    fn reap(&mut self) {
        for cqe in self.ring.completion() {
            match cqe.user_data() {
                USER_DATA_SEND => {
                    self.send_in_flight = false;
                    self.send_result = Some(cqe.result());
                }
                USER_DATA_WAIT => {
                    self.wait_in_flight = false;
                    // A negative result (cancelled, interrupted) delivers no events.
                    self.events_ready = usize::try_from(cqe.result())
                        .unwrap_or(0)
                        .min(self.events.len());
                }
                _ => {}
            }
        }
    }

    /// Waits until the SEND in flight (if any) has completed. Not expected to wait: with
    /// `MSG_DONTWAIT` the SEND completes during the call that submitted it.
    fn wait_for_send(&mut self) -> io::Result<()> {
        while self.send_in_flight && !self.failed {
            self.enter(1)?;
        }
        Ok(())
    }

    /// Submits what is queued, waits for `want` completions (less after a signal) and reaps
    /// them.
    fn enter(&mut self, want: usize) -> io::Result<()> {
        match self.ring.submit_and_wait(want) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => {}
            Err(e) => {
                self.failed = true;
                return Err(e);
            }
        }
        self.reap();
        Ok(())
    }

    /// Cancels the EPOLL_WAIT in flight and waits (a bounded number of times) for its
    /// completion. True when nothing is in flight any more.
    fn cancel_wait(&mut self) -> bool {
        if self.wait_in_flight && !self.failed {
            let cancel = opcode::AsyncCancel::new(USER_DATA_WAIT)
                .build()
                .user_data(USER_DATA_CANCEL);
            // SAFETY: ASYNC_CANCEL points at no buffer of ours; it names the wait by user_data.
            if unsafe { self.push(&cancel) }.is_ok() {
                for _ in 0..DROP_WAITS_MAX {
                    if !self.wait_in_flight || self.enter(1).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = self.wait_for_send();
        !self.wait_in_flight && !self.send_in_flight
    }
}

impl Drop for Sleeper {
    /// The kernel may still write `events` or read `send_copy`: cancel and wait, or leak them.
    fn drop(&mut self) {
        if !self.cancel_wait() {
            tracing::error!("io_uring sleep not confirmed cancelled; leaking its buffers");
            std::mem::forget(std::mem::take(&mut self.events));
            std::mem::forget(std::mem::take(&mut self.send_copy));
        }
    }
}

impl std::fmt::Debug for Sleeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sleeper")
            .field("epoll_fd", &self.epoll_fd)
            .field("wait_in_flight", &self.wait_in_flight)
            .field("events_ready", &self.events_ready)
            .field("send_in_flight", &self.send_in_flight)
            .field("failed", &self.failed)
            .finish()
    }
}
