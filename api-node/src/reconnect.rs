//! The background connector: links to the data nodes this API node has no working link to,
//! as NDB's API keeps connecting to missing data nodes from a thread of its own. That is a
//! data node that could not be reached when the API node connected, and one whose link failed
//! or that the cluster declared failed: once it restarts and serves again (node restart), the
//! new link replaces the failed one and requests go to it again.
//!
//! Without it, an API node that started while a data node was not yet listening never used
//! that node: when the missing node was the DICT master (the lowest data node id), every schema
//! request went to a node that refused it (702) until the process exited. And an API node never
//! used a data node again after it failed once, so a rolling restart of a node group left it
//! without any replica of that group.
//!
//! A link is handed to the [`Cluster`](crate::Cluster) only once its data node says the cluster
//! has started (API_REGREQ), so no request meets a node that cannot serve it yet. Each data node
//! has a [`Slot`], read without a lock on the hot path; only the connector's thread replaces a
//! link, and only one that has failed.
//!
//! An API node takes the first free `[api]` slot when it connects, and the data nodes know it
//! by that id only while it has a link. While it has none to any data node (a system restart,
//! or every link lost), another API node connecting takes the same slot, and the data nodes then
//! refuse this one with 1702 (node already connected) for as long as the other lives. So when a
//! data node has refused it so for [`SLOT_TAKEN_GRACE`] and it has no working link, it takes
//! another free slot as it did at connect, unless the application chose the node id
//! ([`ConnectOptions::node_id`]): then its requests fail with 4010 naming the refusal. A data
//! node tells this API node's own earlier link, not yet closed, from another's by the token of
//! each HELLO, drawn per connection (`rndb_transporter::handshake::Hello::token`): it refuses
//! the former with 1703 (node failure handling not completed), which never counts as taken,
//! however long the data node takes to close the link (a system restart loading its
//! checkpoints stalls it for seconds). (NDB avoids the clash by ndb_mgmd reserving each API
//! node's id; an API node here may run without ndb_mgmd.)

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use rndb_config::{ClusterConfig, NodeId};

use crate::connection::{Connection, LinksShared};
use crate::{api_reg_conf, connect, open_connection, ConnectOptions, Error};
use rndb_transporter::registry::{REFUSE_ALREADY_CONNECTED, REFUSE_LINK_CLOSING};

/// The pause after a round of connect attempts that left some data node missing: NDB's
/// connect loop tries every 100 ms.
pub(crate) const RECONNECT_INTERVAL_FIRST: Duration = Duration::from_millis(100);
/// The longest pause between rounds: the pause doubles after each round up to this (NDB's
/// ConnectBackoffMaxTime caps its back-off the same way), so a data node that stays away costs
/// a connect attempt a second, and one that starts is linked within about a second.
pub(crate) const RECONNECT_INTERVAL_MAX: Duration = Duration::from_secs(1);

const _: () = assert!(RECONNECT_INTERVAL_FIRST.as_millis() <= RECONNECT_INTERVAL_MAX.as_millis());

/// The pause between looks at the links while every data node has a working one: a link that
/// fails is worked on within this (a restarting data node takes longer than this to serve).
pub(crate) const IDLE_LOOK_INTERVAL: Duration = RECONNECT_INTERVAL_MAX;

/// How long a data node must refuse this API node's slot as taken by another process (1702),
/// while it has no working link, before it takes another slot: a few connect rounds, short
/// next to a system restart.
pub(crate) const SLOT_TAKEN_GRACE: Duration = Duration::from_secs(2);

/// This API node's id: the `[api]` slot it holds, changed only by the connector when another
/// API node took the slot while this one had no link ([module docs](self)).
#[derive(Debug)]
pub(crate) struct OwnId(AtomicU16);

impl OwnId {
    pub fn new(id: NodeId) -> OwnId {
        OwnId(AtomicU16::new(id.0))
    }

    pub fn get(&self) -> NodeId {
        NodeId(self.0.load(Ordering::Acquire))
    }

    fn set(&self, id: NodeId) {
        self.0.store(id.0, Ordering::Release);
    }
}

/// Called with the slot the API node holds each time it takes another (tells ndb_mgmd).
pub(crate) type SlotReport = Arc<dyn Fn(NodeId) + Send + Sync>;

/// One slot per data node, in config order.
pub(crate) type Slots = Arc<[Slot]>;

/// A data node's link: none until the first one is made, then the latest. A failed link stays
/// until a new one replaces it, so that requests to that node fail with its failure (4010)
/// rather than find no link at all.
#[derive(Debug, Default)]
pub(crate) struct Slot(ArcSwapOption<Connection>);

impl Slot {
    /// The slot's link, if it has one.
    pub fn get(&self) -> Option<Arc<Connection>> {
        self.0.load_full()
    }

    /// True when the slot has a link that has not failed.
    pub fn works(&self) -> bool {
        self.0.load().as_ref().is_some_and(|c| !c.is_failed())
    }

    /// Puts `link` in the slot, returning the one it replaces (whose bytes go to the
    /// retired counts).
    pub fn set(&self, link: Arc<Connection>) -> Option<Arc<Connection>> {
        let stats = Arc::clone(link.stats());
        let _held = stats.links_held();
        let old = self.0.swap(Some(link));
        old.inspect(|old| old.retire())
    }

    /// Empties the slot, returning its link (whose bytes go to the retired counts).
    pub fn take(&self) -> Option<Arc<Connection>> {
        let stats = Arc::clone(self.0.load().as_ref()?.stats());
        let _held = stats.links_held();
        self.0.swap(None).inspect(|old| old.retire())
    }
}

/// The handle of the connector's thread, held by the [`Cluster`](crate::Cluster): dropping it
/// stops the thread and waits for it.
#[derive(Debug)]
pub(crate) struct Connector {
    state: Arc<State>,
    thread: Option<JoinHandle<()>>,
}

/// What the connector's thread and the cluster's threads share.
#[derive(Debug, Default)]
struct State {
    flags: Mutex<Flags>,
    /// Notified when the thread fills a slot, stops, or is asked to stop.
    changed: Condvar,
}

#[derive(Debug, Default)]
struct Flags {
    /// Set by [`Connector::drop`]: the thread ends at its next look.
    stopping: bool,
    /// Set by the thread when it ends (it was stopped).
    finished: bool,
}

/// What the thread needs to connect as this API node.
struct Job {
    config: ClusterConfig,
    me: Arc<OwnId>,
    /// This connection's HELLO token (`Hello::token`), the same for every slot it takes.
    token: u64,
    options: ConnectOptions,
    /// This API node's TLS keys and RequireTls, as at connect.
    tls: rndb_transporter::tls::TlsSetup,
    slots: Slots,
    /// What every link of the cluster shares.
    shared: LinksShared,
    report: Option<SlotReport>,
}

/// The thread's work on one data node: its new link once connected, until that node says the
/// cluster has started.
#[derive(Default)]
struct Pending {
    link: Option<Arc<Connection>>,
    /// A refusal was logged as a warning (once: the next ones go to the debug log).
    warned: bool,
    /// Since when the data node has refused this API node's slot as taken (1702), unbroken.
    taken_since: Option<Instant>,
}

impl Connector {
    /// Starts the thread that links the data nodes of `slots` without a working link, for as
    /// long as the connector lives; `None` (with a warning) when no thread can be started: the
    /// API node goes on with the links it has.
    // Each argument is one piece of the connection the thread works for.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        config: ClusterConfig,
        me: Arc<OwnId>,
        token: u64,
        options: ConnectOptions,
        slots: Slots,
        shared: LinksShared,
        report: Option<SlotReport>,
    ) -> Option<Connector> {
        let tls = match connect::tls_setup(&config, me.get(), &options) {
            Ok(tls) => tls,
            Err(e) => {
                tracing::warn!("not connecting the missing data nodes in the background: {e}");
                return None;
            }
        };
        let state = Arc::new(State::default());
        let mut job = Job {
            config,
            me,
            token,
            options,
            tls,
            slots,
            shared,
            report,
        };
        let thread_state = Arc::clone(&state);
        let spawned = std::thread::Builder::new()
            .name("rndb-connect".into())
            .spawn(move || {
                job.run(&thread_state);
                thread_state.flags().finished = true;
                thread_state.changed.notify_all();
            });
        match spawned {
            Ok(thread) => Some(Connector {
                state,
                thread: Some(thread),
            }),
            Err(e) => {
                tracing::warn!(
                    "start the background connect thread: {e}; data nodes not reached at \
                     connect, and those that fail, stay unused"
                );
                None
            }
        }
    }

    /// Waits until `ready` holds, the connector's thread has ended, or `deadline` passes;
    /// `ready` is checked under the lock the thread notifies under, so no fill is missed.
    pub fn wait_until(&self, deadline: Instant, ready: impl Fn() -> bool) {
        let mut flags = self.state.flags();
        loop {
            let now = Instant::now();
            if ready() || flags.finished || now >= deadline {
                return;
            }
            flags = self
                .state
                .changed
                .wait_timeout(flags, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

impl Drop for Connector {
    /// Stops the thread and waits for it: an attempt under way finishes first (at most the
    /// connect timeout for the connect, and again for its API_REGREQ), and a link it makes is
    /// closed rather than used.
    fn drop(&mut self) {
        self.state.flags().stopping = true;
        self.state.changed.notify_all();
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::warn!("the background connect thread panicked");
            }
        }
    }
}

impl State {
    fn flags(&self) -> MutexGuard<'_, Flags> {
        self.flags.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn stopping(&self) -> bool {
        self.flags().stopping
    }

    /// Sleeps for `pause` unless asked to stop first; true when asked to stop.
    fn pause(&self, pause: Duration) -> bool {
        let deadline = Instant::now() + pause;
        let mut flags = self.flags();
        loop {
            let now = Instant::now();
            if flags.stopping || now >= deadline {
                return flags.stopping;
            }
            flags = self
                .changed
                .wait_timeout(flags, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

impl Job {
    /// Rounds of attempts on every data node without a working link, a growing pause apart
    /// while some stay without one, until the connector is stopped.
    fn run(&mut self, state: &State) {
        let mut pending: Vec<Pending> = self.slots.iter().map(|_| Pending::default()).collect();
        let mut pause = RECONNECT_INTERVAL_FIRST;
        loop {
            let mut missing = false;
            for (index, work) in pending.iter_mut().enumerate() {
                if state.stopping() {
                    return;
                }
                if self.slots[index].works() {
                    // Linked meanwhile is impossible (only this thread links); a link kept from
                    // an earlier round is dropped, as the slot no longer needs it.
                    work.link = None;
                    continue;
                }
                missing = true;
                if self.advance(index, work) {
                    // Notified under the lock, so a waiter that checked the slots before this
                    // fill is already waiting and wakes.
                    let _flags = state.flags();
                    state.changed.notify_all();
                }
            }
            if self.slot_taken(&pending) {
                self.take_another_slot(&mut pending, state);
            }
            let wait = if missing { pause } else { IDLE_LOOK_INTERVAL };
            if state.pause(wait) {
                return;
            }
            pause = if missing {
                (pause * 2).min(RECONNECT_INTERVAL_MAX)
            } else {
                RECONNECT_INTERVAL_FIRST
            };
        }
    }

    /// One step for data node `index`, which has no working link: give up a failed link (so
    /// the data node sees this API node leave it), connect if there is no new link, then ask
    /// whether the cluster has started; puts the new link in the slot (true) when it has.
    fn advance(&self, index: usize, work: &mut Pending) -> bool {
        let data = &self.config.data_nodes[index];
        let old = self.slots[index].get();
        if let Some(old) = &old {
            // A link the cluster declared failed may still be open (a stopped process): shut
            // it, or the data node, once it runs again, would refuse the new link as a second
            // one from this API node.
            old.give_up(format!(
                "the cluster declared data node {} failed",
                data.node_id
            ));
        }
        // What the cluster declared of the node was of the run whose link just failed for
        // good: a new link must not count as failed for it. A late NODE_FAILREP of that run
        // (read from another data node's link after this) fails the new link, and the next
        // round links again.
        self.shared.declared.remove(data.node_id);
        if work.link.as_ref().is_some_and(|link| link.is_failed()) {
            work.link = None;
        }
        if work.link.is_none() {
            let opened = connect::connect_one(
                &self.config,
                self.me.get(),
                data,
                &self.options,
                &self.tls,
                self.token,
            )
            .and_then(|link| open_connection(link, self.options.spin_us, &self.shared));
            match opened {
                Ok(link) => {
                    work.link = Some(link);
                    if let Some(old) = &old {
                        old.note_relink_refused(None);
                    }
                }
                // Not listening yet (connect warned once already): the usual case, not news.
                Err(e @ Error::Connect { .. }) => {
                    tracing::debug!(node = %data.node_id, "background connect: {e}");
                    work.taken_since = None;
                    if let Some(old) = &old {
                        old.note_relink_refused(None);
                    }
                    return false;
                }
                // This API node's own earlier link, not closed yet: the usual case too.
                Err(Error::Ndb(e)) if e.code == REFUSE_LINK_CLOSING => {
                    tracing::debug!(node = %data.node_id, "background connect: {e}");
                    work.taken_since = None;
                    return false;
                }
                // Refused (the slot taken by another, the configs differ): say so once, and on
                // the failed link, whose requests then name it.
                Err(e) => {
                    if !std::mem::replace(&mut work.warned, true) {
                        tracing::warn!(node = %data.node_id, "background connect: {e}");
                    } else {
                        tracing::debug!(node = %data.node_id, "background connect: {e}");
                    }
                    if matches!(&e, Error::Ndb(n) if n.code == REFUSE_ALREADY_CONNECTED) {
                        work.taken_since.get_or_insert_with(Instant::now);
                    } else {
                        work.taken_since = None;
                    }
                    if let Some(old) = &old {
                        old.note_relink_refused(Some(e.to_string()));
                    }
                    return false;
                }
            }
        }
        work.taken_since = None;
        let Some(link) = work.link.take() else {
            return false;
        };
        // The link is this thread's alone until its slot is filled, so any request id is free
        // on it; a link whose request got no answer is dropped, as a late answer could complete
        // a later request with the same id.
        match api_reg_conf(&link, REGREQ_REQUEST_ID, self.options.connect_timeout) {
            Ok(conf) if conf.started => {
                work.warned = false;
                if old.is_some() {
                    tracing::info!(
                        node = %data.node_id,
                        "linked to data node {} again: it restarted and serves",
                        data.node_id
                    );
                } else {
                    tracing::info!(
                        node = %data.node_id,
                        "linked to data node {}, which was not reachable when this API node \
                         connected",
                        data.node_id
                    );
                }
                self.slots[index].set(link);
                true
            }
            Ok(_) => {
                work.link = Some(link);
                false
            }
            Err(e) => {
                tracing::debug!(node = %data.node_id, "background connect: API_REGREQ: {e}");
                false
            }
        }
    }
}

impl Job {
    /// True when this API node should take another slot: it chose none itself, it has no
    /// working link, and a data node has refused its slot as taken by another API node for
    /// [`SLOT_TAKEN_GRACE`] at least. (Links other data nodes accepted and that wait for the
    /// cluster to start are dropped with the slot: this API node needs every data node.)
    fn slot_taken(&self, pending: &[Pending]) -> bool {
        self.options.node_id.is_none()
            && !self.slots.iter().any(Slot::works)
            && pending
                .iter()
                .filter_map(|w| w.taken_since)
                .any(|since| since.elapsed() >= SLOT_TAKEN_GRACE)
    }

    /// Takes the first free slot this host may take, as at connect, and hands its links to
    /// `pending`, where the next rounds finish them as any new link (API_REGREQ, then the
    /// slot). Nothing is lost: with no working link, this API node has no request in flight
    /// that a link could still answer. Fails with a warning when no slot is free.
    fn take_another_slot(&mut self, pending: &mut [Pending], state: &State) {
        let old = self.me.get();
        // Links of the old slot still waiting for the cluster to start would hold it at their
        // data nodes: closed first.
        for work in pending.iter_mut() {
            *work = Pending::default();
        }
        let stop = || state.stopping();
        let (me, links) =
            match connect::connect_first_free(&self.config, &self.options, self.token, &stop) {
                Ok(taken) => taken,
                Err(e) => {
                    if !state.stopping() {
                        tracing::warn!(
                            "API node {old}: another API node took its slot while it had no \
                             link; no other slot could be taken: {e}"
                        );
                    }
                    return;
                }
            };
        let tls = match connect::tls_setup(&self.config, me, &self.options) {
            Ok(tls) => tls,
            Err(e) => {
                tracing::warn!("API node {old}: cannot take slot {me}: {e}");
                return;
            }
        };
        let rank = self
            .config
            .api_slots
            .iter()
            .find(|slot| slot.node_id == me)
            .map_or(0, |slot| slot.arbitration_rank);
        self.shared.arbiter.moved(rank);
        self.me.set(me);
        self.tls = tls;
        // The old slot's refusals no longer hold.
        for slot in self.slots.iter() {
            if let Some(link) = slot.get() {
                link.note_relink_refused(None);
            }
        }
        for link in links {
            let Some(index) = self
                .config
                .data_nodes
                .iter()
                .position(|data| data.node_id == link.peer())
            else {
                continue;
            };
            match open_connection(link, self.options.spin_us, &self.shared) {
                Ok(link) => pending[index].link = Some(link),
                Err(e) => tracing::warn!("API node {me}: {e}"),
            }
        }
        if me != old {
            tracing::warn!(
                "API node {old}: another API node took its slot while it had no link to any data \
                 node (refused with 1702 for {SLOT_TAKEN_GRACE:?}); it is API node {me} from now \
                 on"
            );
            if let Some(report) = &self.report {
                // Telling ndb_mgmd may take seconds (each server's connect and reply): not on
                // this thread, which reads nothing meanwhile.
                let report = Arc::clone(report);
                let spawned = std::thread::Builder::new()
                    .name("rndb-slot-report".into())
                    .spawn(move || report(me));
                if let Err(e) = spawned {
                    tracing::warn!("API node {me}: could not tell ndb_mgmd of the new slot: {e}");
                }
            }
        }
    }
}

/// The request id of the connector's API_REGREQ on a link not yet handed over (never 0, the
/// receive thread's).
const REGREQ_REQUEST_ID: u32 = 1;

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, TcpListener};
    use std::path::Path;

    use super::*;

    /// A connector whose data node does not listen keeps its slot empty, lets a waiter go at its
    /// deadline, and stops when dropped (the test hangs otherwise).
    #[test]
    fn a_connector_to_a_silent_data_node_fills_nothing_and_stops_when_dropped() {
        // A port nothing listens on: bound, read, released.
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .expect("bind a free port")
            .port();
        let text = format!(
            "[ndbd default]\nNoOfReplicas=1\nDataDir=.\nHostName=127.0.0.1\n\
             [ndbd]\nNodeId=1\nServerPort={port}\n[api]\nNodeId=50\n"
        );
        let config = rndb_config::parse_str(&text, Path::new("test.ini")).expect("a valid config");
        let slots: Slots = vec![Slot::default()].into();
        let connector = Connector::start(
            config,
            Arc::new(OwnId::new(NodeId(50))),
            1,
            ConnectOptions::default(),
            Arc::clone(&slots),
            LinksShared::default(),
            None,
        )
        .expect("start the connector thread");
        let filled = || slots[0].get().is_some();
        connector.wait_until(Instant::now() + Duration::from_millis(300), filled);
        assert!(!filled(), "nothing listens, so nothing is linked");
        drop(connector);
        assert!(!filled());
        assert_eq!(Arc::strong_count(&slots), 1, "the thread let its slots go");
    }
}
