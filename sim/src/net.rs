//! The simulated network and the event queue.
//!
//! Every ordered pair of nodes is a link with its own generator (forked from the seed), its own
//! sequence numbers and the delivery time of its last frame. A frame's delivery time is `now` +
//! a random delay, but never before the link's previous frame: links are FIFO, as TCP and SHM
//! are, and frames reorder only across links. Events are ordered by (time, kind, the nodes,
//! sequence number), never by insertion order alone, so that two frames a kernel sends to two
//! nodes in either order make the same run.
//!
//! A connection (both directions of a pair) is up or down; dropping it bumps its epoch, and
//! frames in flight under the old epoch are discarded on arrival (lost, as a closed socket
//! loses them).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use rndb_config::NodeId;
use rndb_ndbd::blocks::{Outbox, SendFailure};
use rndb_transporter::FrameHeader;

use crate::rng::Rng;

/// What happens at one point of simulated time.
#[derive(Debug)]
pub enum EventKind {
    /// A frame arrives at `to` (discarded when the connection's epoch moved on).
    Deliver {
        from: NodeId,
        to: NodeId,
        epoch: u32,
        header: FrameHeader,
        payload: Vec<u8>,
    },
    /// `at` learns that its connection to `peer` closed; ignored when the connection has come
    /// back since (its `generation` moved on: both ends restarted and reconnected).
    Disconnected {
        at: NodeId,
        peer: NodeId,
        generation: u64,
    },
    /// A data node's 10 ms timer, for the incarnation of the node that set it (a restarted
    /// node starts a timer of its own).
    Timer(NodeId, u32),
    /// A data node's disk completes the request at the head of one of its queues (ignored
    /// when the node crashed since: its incarnation moved on).
    FsDone {
        node: NodeId,
        incarnation: u32,
        queue: crate::disk::DiskQueue,
    },
    /// A data node retries final answers that found a full send buffer.
    Kick(NodeId),
    /// A client's own timer (think time over, request deadline, retry).
    ClientWake { client: usize },
    /// A scheduled fault (index into the run's fault plan).
    Fault(usize),
    /// Clients stop starting operations; faults are over.
    EndWorkload,
}

impl EventKind {
    /// Ties at one time go: deliveries, disconnects, timers, client wake-ups, faults.
    fn rank(&self) -> u8 {
        match self {
            EventKind::Deliver { .. } => 0,
            EventKind::Disconnected { .. } => 1,
            EventKind::Timer(..) | EventKind::Kick(_) | EventKind::FsDone { .. } => 2,
            EventKind::ClientWake { .. } => 3,
            EventKind::Fault(_) => 4,
            EventKind::EndWorkload => 5,
        }
    }
}

/// An event with its place in the order.
#[derive(Debug)]
pub struct Event {
    pub at_ns: u64,
    key: (u8, u16, u16, u64),
    pub kind: EventKind,
}

impl PartialEq for Event {
    fn eq(&self, other: &Event) -> bool {
        (self.at_ns, self.key) == (other.at_ns, other.key)
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Event) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Event {
    fn cmp(&self, other: &Event) -> std::cmp::Ordering {
        (self.at_ns, self.key).cmp(&(other.at_ns, other.key))
    }
}

/// The scheduler's queue: the earliest event first.
#[derive(Debug, Default)]
pub struct Queue {
    heap: BinaryHeap<Reverse<Event>>,
    /// Sequence numbers of events that are not frames (frames use their link's).
    next_seq: u64,
}

impl Queue {
    /// Schedules an event that is not a frame: ordered after frames and by `a`, `b`.
    pub fn push(&mut self, at_ns: u64, a: u16, b: u16, kind: EventKind) {
        self.next_seq += 1;
        let key = (kind.rank(), a, b, self.next_seq);
        self.heap.push(Reverse(Event { at_ns, key, kind }));
    }

    fn push_frame(&mut self, at_ns: u64, from: NodeId, to: NodeId, seq: u64, kind: EventKind) {
        let key = (kind.rank(), from.0, to.0, seq);
        self.heap.push(Reverse(Event { at_ns, key, kind }));
    }

    /// Puts a popped event back at a later time, keeping its place among events of that time
    /// (a frame keeps its link's sequence number, so its link stays FIFO).
    pub fn defer(&mut self, mut event: Event, at_ns: u64) {
        event.at_ns = at_ns;
        self.heap.push(Reverse(event));
    }

    pub fn pop(&mut self) -> Option<Event> {
        self.heap.pop().map(|Reverse(e)| e)
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

/// One direction of a connection.
#[derive(Debug)]
struct Direction {
    rng: Rng,
    seq: u64,
    /// When its last frame arrives: the next may not arrive earlier.
    last_ns: u64,
    /// Until when the direction is slow, and how many times slower.
    slow_until_ns: u64,
    slow_factor: u64,
    /// Until when frames in this direction are held while the connection stays up (a one-way
    /// partition, which TCP's retransmissions bridge once it ends; only with `--faults
    /// partition`).
    blackhole_until_ns: u64,
    /// Frames sent under this epoch are still delivered though the connection dropped: its
    /// sender crashed after they left (the peer reads what reached its socket, then the close).
    draining: Option<u32>,
}

/// Both directions of a pair's connection.
#[derive(Debug)]
struct Connection {
    up: bool,
    epoch: u32,
    /// Counts drops and reconnects (see [`EventKind::Disconnected`]).
    generation: u64,
}

/// The network: every link's state.
#[derive(Debug)]
pub struct Net {
    connections: BTreeMap<(NodeId, NodeId), Connection>,
    directions: BTreeMap<(NodeId, NodeId), Direction>,
    delay_ns_min: u64,
    delay_ns_max: u64,
    overload_ppm: u64,
    /// Frames sent and frames lost in drops.
    pub frames_sent: u64,
}

fn pair(a: NodeId, b: NodeId) -> (NodeId, NodeId) {
    (a.min(b), a.max(b))
}

impl Net {
    /// A network where every node of `nodes` is connected to every other, each direction
    /// with a generator forked from `rng` (in node order, so the forks are the same every run).
    pub fn new(rng: &mut Rng, nodes: &[NodeId], delay: (u64, u64), overload_ppm: u64) -> Net {
        let mut connections = BTreeMap::new();
        let mut directions = BTreeMap::new();
        for &a in nodes {
            for &b in nodes {
                if a == b {
                    continue;
                }
                connections.insert(
                    pair(a, b),
                    Connection {
                        up: true,
                        epoch: 0,
                        generation: 0,
                    },
                );
                directions.insert(
                    (a, b),
                    Direction {
                        rng: rng.fork(),
                        seq: 0,
                        last_ns: 0,
                        slow_until_ns: 0,
                        slow_factor: 1,
                        blackhole_until_ns: 0,
                        draining: None,
                    },
                );
            }
        }
        Net {
            connections,
            directions,
            delay_ns_min: delay.0,
            delay_ns_max: delay.1,
            overload_ppm,
            frames_sent: 0,
        }
    }

    pub fn is_up(&self, a: NodeId, b: NodeId) -> bool {
        self.connections.get(&pair(a, b)).is_some_and(|c| c.up)
    }

    /// How many times the connection between `a` and `b` dropped or came back.
    pub fn generation(&self, a: NodeId, b: NodeId) -> u64 {
        self.connections
            .get(&pair(a, b))
            .map_or(0, |c| c.generation)
    }

    /// True when a frame sent from `from` to `to` under `epoch` still arrives: its connection
    /// is up and has not dropped since, or it drains (see [`Net::drop_draining`]).
    pub fn deliverable(&self, from: NodeId, to: NodeId, epoch: u32) -> bool {
        let live = self
            .connections
            .get(&pair(from, to))
            .is_some_and(|c| c.up && c.epoch == epoch);
        live || self
            .directions
            .get(&(from, to))
            .is_some_and(|d| d.draining == Some(epoch))
    }

    /// Sends a frame: scheduled for delivery, or lost (a connection that is down, a one-way
    /// partition). `Overloaded` only where BUGGIFY is on and the caller takes it.
    pub fn send(
        &mut self,
        queue: &mut Queue,
        now_ns: u64,
        from: NodeId,
        to: NodeId,
        header: FrameHeader,
        payload: Vec<u8>,
    ) {
        let Some(connection) = self.connections.get(&pair(from, to)) else {
            return;
        };
        if !connection.up {
            return;
        }
        let epoch = connection.epoch;
        let (min, max) = (self.delay_ns_min, self.delay_ns_max);
        let Some(direction) = self.directions.get_mut(&(from, to)) else {
            return;
        };
        let mut delay = direction.rng.between(min, max);
        if now_ns < direction.slow_until_ns {
            delay *= direction.slow_factor;
        }
        // A one-way partition under TCP: the frame is sent again until the way opens, and
        // arrives then, in order (a connection that stays up loses nothing; one that is
        // closed meanwhile loses it with the epoch).
        let sent_ns = now_ns.max(direction.blackhole_until_ns);
        let at_ns = (sent_ns + delay).max(direction.last_ns);
        direction.last_ns = at_ns;
        direction.seq += 1;
        self.frames_sent += 1;
        let seq = direction.seq;
        queue.push_frame(
            at_ns,
            from,
            to,
            seq,
            EventKind::Deliver {
                from,
                to,
                epoch,
                header,
                payload,
            },
        );
    }

    /// BUGGIFY: true when this send should find the buffer full (drawn from the link's own
    /// generator, so it does not depend on other links' traffic).
    pub fn overloaded(&mut self, from: NodeId, to: NodeId) -> bool {
        if self.overload_ppm == 0 {
            return false;
        }
        let ppm = self.overload_ppm;
        self.directions
            .get_mut(&(from, to))
            .is_some_and(|d| d.rng.chance_ppm(ppm))
    }

    /// Drops the connection between `a` and `b`: frames in flight are lost. Returns false
    /// when it was already down. The caller tells both ends.
    pub fn drop_connection(&mut self, a: NodeId, b: NodeId) -> bool {
        match self.connections.get_mut(&pair(a, b)) {
            Some(c) if c.up => {
                c.up = false;
                c.epoch += 1;
                c.generation += 1;
                true
            }
            _ => false,
        }
    }

    /// `dead` crashed: what `peer` sent it in a life of its own that still drains (`peer`
    /// crashed first) is lost, as it must not reach `dead`'s next life (seed 0xc402e: a
    /// GCP_PREPARE of a crashed master, held for a paused receiver, reached that receiver's
    /// next life, which then waited for its GCP_COMMIT forever).
    pub fn lose_toward(&mut self, dead: NodeId, peer: NodeId) {
        if let Some(direction) = self.directions.get_mut(&(peer, dead)) {
            direction.draining = None;
        }
    }

    /// Drops the connection between `dead` (which crashed) and `peer`, but what `dead` sent
    /// before still reaches `peer`. Returns when the last of it arrives, or `None` when the
    /// connection was already down.
    pub fn drop_draining(&mut self, dead: NodeId, peer: NodeId) -> Option<u64> {
        let connection = self.connections.get_mut(&pair(dead, peer))?;
        if !connection.up {
            return None;
        }
        let epoch = connection.epoch;
        connection.up = false;
        connection.epoch += 1;
        connection.generation += 1;
        let direction = self.directions.get_mut(&(dead, peer))?;
        direction.draining = Some(epoch);
        Some(direction.last_ns)
    }

    /// Brings a dropped connection back (a client reconnecting, restarted data nodes). What
    /// a crashed end sent before is no longer drained: a frame of its last life still
    /// waiting (for a paused receiver) must not reach its peer's new one.
    pub fn reconnect(&mut self, a: NodeId, b: NodeId) {
        if let Some(c) = self.connections.get_mut(&pair(a, b)) {
            if !c.up {
                c.generation += 1;
            }
            c.up = true;
        }
        for direction in [(a, b), (b, a)] {
            if let Some(d) = self.directions.get_mut(&direction) {
                d.draining = None;
            }
        }
    }

    /// Makes `from` → `to` `factor` times slower until `until_ns`.
    pub fn slow(&mut self, from: NodeId, to: NodeId, factor: u64, until_ns: u64) {
        if let Some(d) = self.directions.get_mut(&(from, to)) {
            d.slow_factor = factor;
            d.slow_until_ns = until_ns;
        }
    }

    /// Holds frames from `from` to `to` until `until_ns` (a one-way partition: past the
    /// heartbeat bound, `to` declares `from` failed).
    pub fn blackhole(&mut self, from: NodeId, to: NodeId, until_ns: u64) {
        if let Some(d) = self.directions.get_mut(&(from, to)) {
            d.blackhole_until_ns = until_ns;
        }
    }

    /// Ends every slowness and one-way partition (the heal before the final checks). Frames a
    /// one-way partition held are scheduled at the end it was set to, and every later frame
    /// of their direction behind them (links are FIFO): they go now, in order, as TCP's next
    /// retransmission would send them once the way opens. Left where they were, a way cut
    /// for longer than the run's faults stayed shut after the heal (seed 0x6200ba5: node 1
    /// heard nothing from node 3 for 600 ms after the faults ended, declared it failed, and
    /// with node 3's group peer restarting the whole cluster stopped).
    pub fn heal(&mut self, queue: &mut Queue, now_ns: u64) {
        // The held directions, each with when its last rescheduled frame arrives.
        let mut held: BTreeMap<(NodeId, NodeId), u64> = (self.directions.iter())
            .filter(|(_, d)| d.blackhole_until_ns > now_ns)
            .map(|(&key, _)| (key, 0))
            .collect();
        if !held.is_empty() {
            let (min, max) = (self.delay_ns_min, self.delay_ns_max);
            let mut events = std::mem::take(&mut queue.heap).into_vec();
            // In each held direction's order (its frames' times and sequence numbers), from
            // now on. (The heap holds `Reverse`d events: sorted as they are, the latest would
            // come first.)
            events.sort_by(|Reverse(a), Reverse(b)| a.cmp(b));
            for Reverse(event) in &mut events {
                let EventKind::Deliver { from, to, .. } = &event.kind else {
                    continue;
                };
                let (Some(last_ns), Some(direction)) = (
                    held.get_mut(&(*from, *to)),
                    self.directions.get_mut(&(*from, *to)),
                ) else {
                    continue;
                };
                let at_ns = (now_ns + direction.rng.between(min, max)).max(*last_ns);
                *last_ns = at_ns;
                event.at_ns = event.at_ns.min(at_ns);
            }
            for (key, last_ns) in held {
                if let Some(direction) = self.directions.get_mut(&key) {
                    direction.last_ns = last_ns;
                }
            }
            queue.heap = events.into();
        }
        for d in self.directions.values_mut() {
            d.slow_until_ns = 0;
            d.blackhole_until_ns = 0;
        }
    }
}

/// The sim's [`Outbox`] for one data node's step: frames are encoded and scheduled on the
/// network; links the kernel asks to close are collected for the step's end.
#[derive(Debug)]
pub struct SimOutbox<'a> {
    pub from: NodeId,
    pub now_ns: u64,
    pub net: &'a mut Net,
    pub queue: &'a mut Queue,
    /// Links the kernel closed, with its reason; `true` when it declared the peer failed
    /// (what it sent before, the NODE_FAILREP telling the peer, still arrives).
    pub closes: Vec<(NodeId, String, bool)>,
    /// Sends that found the buffer "full" (BUGGIFY).
    pub overloads: u64,
    /// BUGGIFY's full buffers apply (not to a node's last flush before it exits).
    pub buggify: bool,
}

impl Outbox for SimOutbox<'_> {
    fn send(
        &mut self,
        to: NodeId,
        header: FrameHeader,
        encode: &mut dyn FnMut(&mut Vec<u8>),
    ) -> Result<(), SendFailure> {
        if !self.net.is_up(self.from, to) {
            return Err(SendFailure::Gone);
        }
        if self.buggify && self.net.overloaded(self.from, to) {
            self.overloads += 1;
            return Err(SendFailure::Overloaded);
        }
        let mut payload = Vec::new();
        encode(&mut payload);
        self.net
            .send(self.queue, self.now_ns, self.from, to, header, payload);
        Ok(())
    }

    fn close(&mut self, to: NodeId, reason: String) {
        self.closes.push((to, reason, false));
    }

    fn declare_failed(&mut self, to: NodeId, reason: String) {
        self.closes.push((to, reason, true));
    }
}
