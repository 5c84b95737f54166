//! The background connector: links to the data nodes that could not be reached when the API
//! node connected, as NDB's API keeps connecting to missing data nodes from a thread of its own.
//!
//! Without it, an API node that started while a data node was not yet listening never used
//! that node: when the missing node was the DICT master (the lowest data node id), every schema
//! request went to a node that refused it (702) until the process exited.
//!
//! A link is handed to the [`Cluster`](crate::Cluster) only once its data node says the cluster
//! has started (API_REGREQ), so no request meets a node that cannot serve it yet. Each data node
//! slot is filled once ([`OnceLock`]): readers on the hot path take no lock.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rndb_config::{ClusterConfig, NodeId};

use crate::connection::{Connection, Declared};
use crate::{api_reg_conf, connect, open_connection, ConnectOptions, Error};

/// The pause after a round of connect attempts that left some data node missing: NDB's
/// connect loop tries every 100 ms.
pub(crate) const RECONNECT_INTERVAL_FIRST: Duration = Duration::from_millis(100);
/// The longest pause between rounds: the pause doubles after each round up to this (NDB's
/// ConnectBackoffMaxTime caps its back-off the same way), so a data node that stays away costs
/// a connect attempt a second, and one that starts is linked within about a second.
pub(crate) const RECONNECT_INTERVAL_MAX: Duration = Duration::from_secs(1);

const _: () = assert!(RECONNECT_INTERVAL_FIRST.as_millis() <= RECONNECT_INTERVAL_MAX.as_millis());

/// One slot per data node, in config order, holding its link once there is one.
pub(crate) type Slots = Arc<[OnceLock<Arc<Connection>>]>;

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
    /// Set by the thread when it ends (every slot it worked on is filled, or it was stopped).
    finished: bool,
}

/// What the thread needs to connect as this API node.
struct Job {
    config: ClusterConfig,
    me: NodeId,
    options: ConnectOptions,
    /// This API node's TLS keys and RequireTls, as at connect.
    tls: rndb_transporter::tls::TlsSetup,
    slots: Slots,
    /// Indexes of the slots to fill (the data nodes not reached at connect).
    missing: Vec<usize>,
    /// The data nodes the cluster declared failed, shared with every connection.
    declared: Arc<Declared>,
}

/// A data node the thread is working on: its link once connected, until that node says the
/// cluster has started.
struct Pending {
    index: usize,
    link: Option<Arc<Connection>>,
    /// A refusal was logged as a warning (once: the next ones go to the debug log).
    warned: bool,
}

impl Connector {
    /// Starts the thread that fills slots `missing` of `slots`; `None` (with a warning) when no
    /// thread can be started: the API node goes on with the links it has, as before.
    pub fn start(
        config: ClusterConfig,
        me: NodeId,
        options: ConnectOptions,
        slots: Slots,
        missing: Vec<usize>,
        declared: Arc<Declared>,
    ) -> Option<Connector> {
        let tls = match connect::tls_setup(&config, me, &options) {
            Ok(tls) => tls,
            Err(e) => {
                tracing::warn!("not connecting the missing data nodes in the background: {e}");
                return None;
            }
        };
        let state = Arc::new(State::default());
        let job = Job {
            config,
            me,
            options,
            tls,
            slots,
            missing,
            declared,
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
                    "start the background connect thread: {e}; \
                     the data nodes not reached at connect stay unused"
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
    /// Rounds of attempts, a growing pause apart, until every missing slot is filled or the
    /// connector is stopped.
    fn run(&self, state: &State) {
        let mut pending: Vec<Pending> = self
            .missing
            .iter()
            .map(|&index| Pending {
                index,
                link: None,
                warned: false,
            })
            .collect();
        let mut pause = RECONNECT_INTERVAL_FIRST;
        loop {
            for work in &mut pending {
                if state.stopping() {
                    return;
                }
                if self.advance(work) {
                    // Notified under the lock, so a waiter that checked the slots before this
                    // fill is already waiting and wakes.
                    let _flags = state.flags();
                    state.changed.notify_all();
                }
            }
            pending.retain(|work| self.slots[work.index].get().is_none());
            if pending.is_empty() || state.pause(pause) {
                return;
            }
            pause = (pause * 2).min(RECONNECT_INTERVAL_MAX);
        }
    }

    /// One step for one missing data node: connect if there is no link, then ask whether the
    /// cluster has started; fills its slot (true) when it has.
    fn advance(&self, work: &mut Pending) -> bool {
        let data = &self.config.data_nodes[work.index];
        if work.link.as_ref().is_some_and(|link| link.is_failed()) {
            work.link = None;
        }
        if work.link.is_none() {
            let opened =
                connect::connect_one(&self.config, self.me, data, &self.options, &self.tls)
                    .and_then(|link| open_connection(link, self.options.spin_us, &self.declared));
            match opened {
                Ok(link) => work.link = Some(link),
                // Not listening yet (connect warned once already): the usual case, not news.
                Err(e @ Error::Connect { .. }) => {
                    tracing::debug!(node = %data.node_id, "background connect: {e}");
                    return false;
                }
                // Refused (the slot is taken, the configs differ): say so once.
                Err(e) => {
                    if !std::mem::replace(&mut work.warned, true) {
                        tracing::warn!(node = %data.node_id, "background connect: {e}");
                    } else {
                        tracing::debug!(node = %data.node_id, "background connect: {e}");
                    }
                    return false;
                }
            }
        }
        let Some(link) = work.link.take() else {
            return false;
        };
        // The link is this thread's alone until its slot is filled, so any request id is free
        // on it; a link whose request got no answer is dropped, as a late answer could complete
        // a later request with the same id.
        match api_reg_conf(&link, REGREQ_REQUEST_ID, self.options.connect_timeout) {
            Ok(conf) if conf.started => {
                tracing::info!(
                    node = %data.node_id,
                    "linked to data node {}, which was not reachable when this API node connected",
                    data.node_id
                );
                // Only this thread fills the slots it was given, so the slot is empty.
                let _ = self.slots[work.index].set(link);
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
        let slots: Slots = vec![OnceLock::new()].into();
        let connector = Connector::start(
            config,
            NodeId(50),
            ConnectOptions::default(),
            Arc::clone(&slots),
            vec![0],
            Arc::default(),
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
