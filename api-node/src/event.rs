//! The event API (NDB's NdbEventOperation): a table's committed changes, epoch by epoch
//! ([docs/events.md](../../docs/events.md)).
//!
//! [`Cluster::create_event_operation`] subscribes on every data node linked (SUB_START_REQ).
//! Each sends the changes committed on its replicas, and closes each completed epoch with
//! SUB_GCP_COMPLETE_REP; whichever thread reads the link files them into the subscription's
//! stream (the subscriber itself when no other does).
//! [`EventOperation::poll_events`] takes the streams and hands out epochs once every data node
//! subscribed has reported them complete: for each fragment, the changes of one data node
//! holding a replica of it that covered the epoch (every replica sends them; one is kept; the
//! merge is `rndb_protocol::suma::EventMerge`). A span of epochs no replica of a fragment
//! covered is an [`EventType::Inconsistent`] event (NDB's TE_INCONSISTENT): its changes may be
//! missing.
//!
//! A data node whose link fails drops out; when it is linked again (it restarted), the
//! subscription is made there again and counts from its start epoch on. With no data node
//! linked, or after a system restart, the operation fails (4009, as NDB's TE_CLUSTER_FAILURE
//! ends one).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::{Duration, Instant};

use rndb_config::NodeId;
use rndb_protocol::codec::Reader;
use rndb_protocol::error::NdbError;
use rndb_protocol::schema::Value;
use rndb_protocol::signals::{block, gsn, Refusal};
use rndb_protocol::suma::{ChangeKind, EventMerge, HeldChange, Merged, SubStartReq};
use rndb_transporter::FrameHeader;

use crate::connection::Connection;
use crate::event_def::TableEvents;
use crate::event_merge::{self, EpochParts};
use crate::stats::ClientStat;
use crate::{Cluster, Error, Table};

/// Bytes of events an operation holds, not yet handed out, by default (its
/// [`EventOperation::set_buffer_max`]); past them it fails (4734).
pub const EVENT_BUFFER_BYTES_DEFAULT: usize = 64 * 1024 * 1024;

/// How often a data node that refused the subscription, or that was linked again, is asked
/// again.
const RESUBSCRIBE_EVERY: Duration = Duration::from_millis(100);

/// How often the operation's pump thread reads links no other thread is reading, so that
/// events flow into the streams (bounded by the buffer) even while the application does not
/// poll, and the data nodes never find the subscriber lagging for want of a reader.
const PUMP_EVERY: Duration = Duration::from_millis(5);

/// How long [`EventOperation::poll_events`] sleeps at most between looks at its streams; a
/// stream's epoch report wakes it earlier.
const POLL_SLEEP_MAX: Duration = Duration::from_millis(50);

/// How often an operation being made looks whether its subscriptions have begun.
pub(crate) const BEGIN_POLL: Duration = Duration::from_millis(10);

/// How long a SUB_STOP_REQ may wait for a full send buffer.
const STOP_SEND_WAIT: Duration = Duration::from_secs(1);

/// What a change did, or what an epoch lacks (NDB's TableEvent values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// TE_INSERT: `values` is the new row.
    Insert,
    /// TE_UPDATE: `values` the new row, `pre_values` the row before.
    Update,
    /// TE_DELETE: `pre_values` the row deleted.
    Delete,
    /// TE_INCONSISTENT: changes of this epoch (and, for a gap after a failure, of epochs up
    /// to it) may be missing: no data node that held a fragment's replica covered it.
    Inconsistent,
    /// TE_DROP: the table was dropped; the operation ends.
    Drop,
}

/// One event: a committed change of a row, or an epoch's inconsistency, or the table's drop.
#[derive(Clone, Debug, PartialEq)]
pub struct EventData {
    pub event_type: EventType,
    /// The epoch (NDB's GCI: the global checkpoint in the high word, the epoch within it in
    /// the low word) the change committed in.
    pub epoch: u64,
    /// The fragment (partition) of the row.
    pub fragment: u32,
    /// Every column's new value (insert, update).
    pub values: Option<Vec<Value>>,
    /// Every column's value before (update, delete).
    pub pre_values: Option<Vec<Value>>,
    /// Of a merged operation ([`Cluster::create_event_operation_merged`]): the BLOB and TEXT
    /// columns whose values this event does not carry (NDB's `NdbBlob::getDefined` of -1): a
    /// value with parts that an update left as it was, or one whose parts a gap in its parts
    /// table's epochs lost (an [`EventType::Inconsistent`] event says so). Their entries in
    /// `values` and `pre_values` are NULL, which they need not be. Empty otherwise.
    pub blobs_undefined: Vec<usize>,
}

/// The subscription's stream on one data node.
#[derive(Debug)]
struct NodeStream {
    connection: Arc<Connection>,
    request_id: u32,
}

/// A subscription to one table's committed changes (NDB's NdbEventOperation, executed).
/// Dropped, it unsubscribes.
pub struct EventOperation<'c> {
    cluster: &'c Cluster,
    table: Table,
    nodes: BTreeMap<NodeId, NodeStream>,
    /// When each data node not subscribed is asked next.
    retry_at: BTreeMap<NodeId, Instant>,
    /// The epochs' changes as they come, handed out once complete.
    merge: EventMerge,
    buffer_max: usize,
    ready: VecDeque<EventData>,
    /// The table was dropped, or the cluster failed: nothing more comes.
    ended: Option<Error>,
    /// The last data node's refusal of the subscription (SUB_START_REF).
    refused: Option<Error>,
    /// The data nodes that ended the subscription because the table was dropped (1417), and
    /// their error.
    dropped_by: Vec<NodeId>,
    dropped: Option<Error>,
    /// Reads the subscribed links while nothing else does.
    pumped: Pumper,
    /// A merged operation's subscriptions to the parts tables, and its events.
    merging: Option<Box<Merging<'c>>>,
    /// The kinds of change handed out (a named event's, `crate::event_def`).
    reported: TableEvents,
    /// The task an awaited look is for (the tokio interface's `poll_events`): each stream's
    /// next completed epoch, its end or its link's failure wakes it, not the calling thread.
    task: Option<Waker>,
}

/// What a merged operation adds (see `crate::event_merge`).
struct Merging<'c> {
    /// Each parted BLOB or TEXT column, and the subscription to its parts table.
    parts: Vec<(usize, EventOperation<'c>)>,
    /// Merged events, handed out.
    ready: VecDeque<EventData>,
    /// Every subscription begins at the same epoch (see `EventOperation::begun`).
    aligned: bool,
}

/// A thread that reads, every [`PUMP_EVERY`], the links of an operation's streams that no
/// other thread is reading (`Connection::pump` leaves a link another thread reads alone).
#[derive(Debug)]
struct Pumper {
    shared: Arc<PumpShared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct PumpShared {
    links: Mutex<Vec<Arc<Connection>>>,
    stop: AtomicBool,
}

impl Pumper {
    fn start() -> Pumper {
        let shared = Arc::new(PumpShared::default());
        let mine = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name("rndb-events".into())
            .spawn(move || {
                while !mine.stop.load(Ordering::Acquire) {
                    let links = mine.links.lock().unwrap_or_else(|p| p.into_inner()).clone();
                    for link in links {
                        let _ = link.pump();
                    }
                    std::thread::park_timeout(PUMP_EVERY);
                }
            });
        // Without the thread, the streams are read while the application polls.
        let thread = spawned
            .map_err(|e| tracing::warn!("start the event pump thread: {e}"))
            .ok();
        Pumper { shared, thread }
    }

    /// The links to read from now on.
    fn set(&self, links: Vec<Arc<Connection>>) {
        *self.shared.links.lock().unwrap_or_else(|p| p.into_inner()) = links;
    }
}

impl Drop for Pumper {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for EventOperation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventOperation")
            .field("table", &self.table.name())
            .field("nodes", &self.nodes.keys().collect::<Vec<_>>())
            .field("held_bytes", &self.merge.held_bytes())
            .finish()
    }
}

impl Cluster {
    /// Subscribes to `table`'s committed changes on every data node linked (NDB's
    /// `Ndb::createEventOperation` and `NdbEventOperation::execute`), waiting for each to
    /// confirm and then for the epoch it subscribed in to complete: every change of a
    /// transaction that begins its commit after this returns is handed out, and none of an
    /// epoch some node's subscription did not cover from its start.
    pub fn create_event_operation(&self, table: &Table) -> Result<EventOperation<'_>, Error> {
        self.start_event_operation(table)?.wait_begun()
    }

    /// An operation of `table`, subscribed on every data node linked, not yet begun
    /// ([`EventOperation::begun`]).
    pub(crate) fn start_event_operation(&self, table: &Table) -> Result<EventOperation<'_>, Error> {
        let map = self.partition_map();
        let replicas = (0..map.partition_count())
            .map(|p| map.replicas(p).iter().map(|n| n.0).collect())
            .collect();
        let mut op = EventOperation {
            cluster: self,
            table: table.clone(),
            nodes: BTreeMap::new(),
            retry_at: BTreeMap::new(),
            merge: EventMerge::new(replicas),
            buffer_max: EVENT_BUFFER_BYTES_DEFAULT,
            ready: VecDeque::new(),
            ended: None,
            refused: None,
            dropped_by: Vec::new(),
            dropped: None,
            pumped: Pumper::start(),
            merging: None,
            reported: TableEvents::ALL,
            task: None,
        };
        let linked: Vec<Arc<Connection>> = self.linked().filter(|c| !c.is_failed()).collect();
        for connection in linked {
            op.subscribe(connection)?;
        }
        if op.nodes.is_empty() {
            return Err(Error::ndb_detail(4009, "no data node is linked"));
        }
        Ok(op)
    }

    /// As [`Cluster::create_event_operation`], with NDB's `mergeEvents(true)`: the changes of
    /// an epoch to the same primary key come as one event (an insert then an update is an
    /// insert; an insert then a delete nothing; a delete then an insert an update), and BLOB
    /// and TEXT values come whole, assembled from the events of their parts tables, which it
    /// subscribes to as well. A value with parts that an update left as it was is not in the
    /// epoch: [`EventData::blobs_undefined`] names its column. A span of epochs a parts
    /// table's subscription did not cover is an [`EventType::Inconsistent`] event of the
    /// operation's (naming the parts table's fragment).
    pub fn create_event_operation_merged(
        &self,
        table: &Table,
    ) -> Result<EventOperation<'_>, Error> {
        self.start_event_operation_merged(table)?.wait_begun()
    }

    /// A merged operation of `table`: its subscriptions made, not yet begun.
    pub(crate) fn start_event_operation_merged(
        &self,
        table: &Table,
    ) -> Result<EventOperation<'_>, Error> {
        crate::blob::check_parts(table)?;
        let mut op = self.start_event_operation(table)?;
        let mut parts = Vec::new();
        for (column, parts_table) in table.blob_parts_tables() {
            parts.push((column, self.start_event_operation(&parts_table)?));
        }
        op.merging = Some(Box::new(Merging {
            parts,
            ready: VecDeque::new(),
            aligned: false,
        }));
        Ok(op)
    }
}

impl<'c> EventOperation<'c> {
    /// The table subscribed to.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// One look at whether the operation has begun: every data node subscribed has confirmed
    /// and reported the epoch it subscribed in (by then every data node commits in a later
    /// one), and for a merged operation so have the parts tables' subscriptions, which then
    /// all hand out from the first epoch every one covers. A data node's refusal fails the
    /// whole operation (as NDB's execute), which, dropped, unsubscribes on the others; past
    /// `deadline` it fails with 4012.
    pub(crate) fn begun(&mut self, deadline: Instant) -> Result<bool, Error> {
        let mut begun = self.begun_alone()?;
        if let Some(merging) = self.merging.as_mut() {
            for (_, parts) in &mut merging.parts {
                begun &= parts.begun_alone()?;
            }
            if begun && !merging.aligned {
                let start = (merging.parts.iter().map(|(_, p)| p.merge.delivered()))
                    .fold(self.merge.delivered(), u64::max);
                self.merge.skip_through(start);
                for (_, parts) in &mut merging.parts {
                    parts.merge.skip_through(start);
                }
                merging.aligned = true;
            }
        }
        if !begun && Instant::now() >= deadline {
            return Err(Error::ndb_detail(
                4012,
                "no data node confirmed the subscription and completed its epoch in time",
            ));
        }
        Ok(begun)
    }

    /// Waits (blocking) until the operation has begun (`begun`).
    pub(crate) fn wait_begun(mut self) -> Result<Self, Error> {
        let deadline = self.cluster.deadline();
        while !self.begun(deadline)? {
            std::thread::park_timeout(BEGIN_POLL);
        }
        Ok(self)
    }

    /// `begun` for this subscription alone.
    fn begun_alone(&mut self) -> Result<bool, Error> {
        if self.merge.has_begun() {
            return Ok(true);
        }
        self.take_streams()?;
        if let Some(e) = self.refused.take().or_else(|| self.ended.take()) {
            return Err(e);
        }
        if self.nodes.is_empty() {
            return Err(Error::ndb_detail(4009, "no data node is linked"));
        }
        Ok(self.merge.begin())
    }

    /// Hands out only the changes of `kinds` (a named event's).
    pub(crate) fn report_only(&mut self, kinds: TableEvents) {
        self.reported = kinds;
    }

    /// The data nodes whose subscription covers every epoch not handed out yet: each sends
    /// every change of its replicas from there on. One that failed is subscribed again once it
    /// is back, and counts here once the epochs before its new subscription are handed out.
    /// Of a merged operation: those whose subscriptions to the table and to every parts table
    /// cover them.
    pub fn data_nodes(&self) -> Vec<NodeId> {
        let parts = self.merging.iter().flat_map(|m| m.parts.iter());
        let parts: Vec<Vec<NodeId>> = parts.map(|(_, p)| p.data_nodes()).collect();
        (self.merge.covering().map(NodeId))
            .filter(|n| parts.iter().all(|p| p.contains(n)))
            .collect()
    }

    /// Bytes of events held before they are handed out, at most (NDB's
    /// `ndb_eventbuffer_max_alloc`); past it [`EventOperation::poll_events`] fails with 4734.
    /// A merged operation holds this much for the table and as much for each parts table.
    pub fn set_buffer_max(&mut self, bytes: usize) {
        self.buffer_max = bytes;
        for stream in self.nodes.values() {
            stream.connection.set_stream_max(stream.request_id, bytes);
        }
        for (_, parts) in self.merging.iter_mut().flat_map(|m| m.parts.iter_mut()) {
            parts.set_buffer_max(bytes);
        }
    }

    /// Waits up to `timeout` for a complete epoch (NDB's `Ndb::pollEvents`): returns the newest
    /// epoch whose events [`EventOperation::next_event`] now hands out, or `None` when none
    /// completed in time.
    pub fn poll_events(&mut self, timeout: Duration) -> Result<Option<u64>, Error> {
        // The calling thread is woken, whatever a look for a task left (`look_for`).
        self.task = None;
        self.poll_streams(timeout)
    }

    /// `poll_events`, waking `self.task` (when set) rather than the calling thread.
    fn poll_streams(&mut self, timeout: Duration) -> Result<Option<u64>, Error> {
        let deadline = Instant::now() + timeout;
        loop {
            self.take_streams()?;
            self.resubscribe();
            self.deliver()?;
            if self.merging.is_some() {
                self.merge_complete()?;
            }
            // A merged operation filters its table's changes before it merges them (as NDB
            // checks each change against its event's kinds first).
            let reported = self.reported;
            if self.merging.is_none() && reported != TableEvents::ALL {
                self.ready.retain(|e| reported.reports(e.event_type));
            }
            let ready = match &self.merging {
                Some(merging) => &merging.ready,
                None => &self.ready,
            };
            if let Some(last) = ready.back() {
                return Ok(Some(last.epoch));
            }
            // A merged operation's events of its last epochs may wait for its parts tables'.
            if let Some(e) = self.ended.take_if(|_| self.ready.is_empty()) {
                self.ended = Some(clone_error(&e));
                return Err(e);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            // Woken by a stream's next completed epoch; the timeout bounds a resubscription's
            // delay.
            std::thread::park_timeout((deadline - now).min(POLL_SLEEP_MAX));
        }
    }

    /// One look at the streams for the task `task` (an awaited `poll_events`): as
    /// `poll_events(Duration::ZERO)`, with the streams' next completed epochs waking `task`.
    #[cfg(feature = "tokio")]
    pub(crate) fn look_for(&mut self, task: &Waker) -> Result<Option<u64>, Error> {
        self.task = Some(task.clone());
        let looked = self.poll_streams(Duration::ZERO);
        self.task = None;
        looked
    }

    /// The next event of the epochs [`EventOperation::poll_events`] completed (NDB's
    /// `Ndb::nextEvent`), in epoch order.
    pub fn next_event(&mut self) -> Option<EventData> {
        match &mut self.merging {
            Some(merging) => merging.ready.pop_front(),
            None => self.ready.pop_front(),
        }
    }

    /// A merged operation: takes what its parts tables' subscriptions handed out, and merges
    /// the epochs every subscription has handed out into events (`crate::event_merge`). A
    /// parts table's subscription that failed fails the operation; one that ended with the
    /// table's drop holds no epoch back.
    fn merge_complete(&mut self) -> Result<(), Error> {
        let Some(mut merging) = self.merging.take() else {
            return Ok(());
        };
        if self.ended.is_some() && !self.was_dropped() {
            // The table's subscription failed (4009, 4734, a bad change): what it handed out
            // and was not merged yet goes, with the parts tables' subscriptions; the error
            // follows the events merged before.
            self.ready.clear();
            merging.parts.clear();
            self.merging = Some(merging);
            return Ok(());
        }
        let merged = self.merge_parts(&mut merging);
        if let Err(e) = &merged {
            // Nothing more is merged: what is held goes, with every subscription.
            self.ended.get_or_insert_with(|| clone_error(e));
            self.unsubscribe();
            self.ready.clear();
            merging.parts.clear();
        }
        self.merging = Some(merging);
        merged
    }

    fn merge_parts(&mut self, merging: &mut Merging<'c>) -> Result<(), Error> {
        let mut through = self.handed_through();
        for (_, parts) in &mut merging.parts {
            parts.task.clone_from(&self.task);
            let took = parts.take_streams();
            parts.task = None;
            took?;
            parts.resubscribe();
            parts.deliver()?;
            if let Some(e) = parts.ended.as_ref().filter(|_| !parts.was_dropped()) {
                return Err(clone_error(e));
            }
            through = through.min(parts.handed_through());
        }
        // The epochs every subscription handed out, in order: each epoch's gaps first (a gap
        // of a parts table is one of the operation's), then its changes.
        let mut epochs: BTreeMap<u64, Epoch> = BTreeMap::new();
        let reported = self.reported;
        for event in take_through(&mut self.ready, through) {
            if reported.reports(event.event_type) {
                epochs.entry(event.epoch).or_default().changes.push(event);
            }
        }
        for (column, sub) in &mut merging.parts {
            for event in take_through(&mut sub.ready, through) {
                let epoch = epochs.entry(event.epoch).or_default();
                match event.event_type {
                    EventType::Inconsistent => epoch.gaps.push(event),
                    EventType::Drop => {}
                    _ => epoch.parts.entry(*column).or_default().push(event),
                }
            }
        }
        for epoch in epochs.into_values() {
            merging.ready.extend(epoch.gaps);
            if epoch.changes.is_empty() {
                // Parts changed with no row of theirs (written through a raw handle).
                continue;
            }
            let mut parts = HashMap::new();
            for (column, events) in epoch.parts {
                let Some((_, sub)) = merging.parts.iter().find(|(c, _)| *c == column) else {
                    continue;
                };
                parts.insert(column, EpochParts::of(&self.table, &sub.table, events)?);
            }
            for mut event in event_merge::merge_same_keys(&self.table, epoch.changes) {
                event_merge::assemble(&self.table, &mut event, &parts)?;
                merging.ready.push_back(event);
            }
        }
        Ok(())
    }

    /// Epochs through this one are handed out (into `ready`), or, after the table's drop,
    /// every epoch that will be.
    fn handed_through(&self) -> u64 {
        if self.was_dropped() {
            u64::MAX
        } else {
            self.merge.delivered()
        }
    }

    /// The table was dropped: the operation handed out its last changes and a Drop event.
    fn was_dropped(&self) -> bool {
        self.ended.as_ref().and_then(Error::code) == Some(1417)
    }

    /// Subscribes on the data node at the end of `connection`.
    fn subscribe(&mut self, connection: Arc<Connection>) -> Result<(), Error> {
        let request_id = self.cluster.new_stream_request_id();
        connection.register_stream(request_id, self.buffer_max);
        let mut payload = Vec::new();
        SubStartReq {
            table_id: self.table.id(),
            table_version: self.table.version(),
        }
        .encode(&mut payload);
        let header = header(gsn::SUB_START_REQ, request_id);
        if let Err(e) = connection.send_frames(std::iter::once((header, &payload[..]))) {
            connection.forget(request_id);
            return Err(e);
        }
        self.merge.subscribing(connection.peer.0);
        self.nodes.insert(
            connection.peer,
            NodeStream {
                connection,
                request_id,
            },
        );
        self.links_changed();
        Ok(())
    }

    /// Subscribes again on data nodes linked and not subscribed (restarted, or that refused
    /// while they were being restarted), at most every [`RESUBSCRIBE_EVERY`] each.
    fn resubscribe(&mut self) {
        if self.ended.is_some() {
            return;
        }
        let now = Instant::now();
        let linked: Vec<Arc<Connection>> = self
            .cluster
            .linked()
            .filter(|c| !c.is_failed() && !self.nodes.contains_key(&c.peer))
            .collect();
        for connection in linked {
            let at = self.retry_at.entry(connection.peer).or_insert(now);
            if now < *at {
                continue;
            }
            *at = now + RESUBSCRIBE_EVERY;
            let node = connection.peer;
            if let Err(e) = self.subscribe(connection) {
                tracing::debug!(%node, "subscribe again: {e}");
            }
        }
    }

    /// Takes what each data node's stream collected.
    fn take_streams(&mut self) -> Result<(), Error> {
        let nodes: Vec<NodeId> = self.nodes.keys().copied().collect();
        for node in nodes {
            let Some(stream) = self.nodes.get(&node) else {
                continue;
            };
            if stream.connection.is_failed() && !self.dropped_by.contains(&node) {
                // Its link failed, or the cluster declared the node failed (NODE_FAILREP):
                // it holds back no epoch while the link's own failure is detected.
                self.node_gone(node);
                continue;
            }
            // Reads what the link holds unless another thread is reading it (then that thread
            // files the stream's frames, and wakes this one on an epoch's report).
            let _ = stream.connection.pump();
            match (stream.connection).take_stream(stream.request_id, self.task.as_ref()) {
                Ok(take) => {
                    let overflowed = take.overflowed;
                    let ended = take.ended;
                    for (signal, payload) in take.frames.iter() {
                        self.file(node, signal, payload)?;
                    }
                    if overflowed {
                        return Err(self.overflow(format!(
                            "data node {node}'s events outgrew the buffer ({} bytes) before \
                             they were taken",
                            self.buffer_max
                        )));
                    }
                    // A node that ended it for the table's drop still counts: its last reports
                    // complete the epochs before the drop.
                    if ended && !self.dropped_by.contains(&node) {
                        self.node_gone(node);
                    }
                }
                Err(e) => {
                    tracing::debug!(%node, "event stream lost: {e}");
                    self.node_gone(node);
                }
            }
        }
        if let Some(error) = self.dropped.take() {
            if self.nodes.keys().all(|n| self.dropped_by.contains(n)) {
                // Every node sent its last changes: those epochs, then the drop.
                let before = self.merge.delivered();
                self.deliver()?;
                let epoch = self.ready.back().map_or(before, |e| e.epoch);
                self.ready.push_back(EventData {
                    event_type: EventType::Drop,
                    epoch,
                    fragment: 0,
                    values: None,
                    pre_values: None,
                    blobs_undefined: Vec::new(),
                });
                self.ended = Some(error);
                self.unsubscribe();
                return Ok(());
            }
            self.dropped = Some(error);
        }
        // Ended when no data node's subscription is left (every stream failed at once, as in
        // a system restart, whose epochs may repeat those handed out): NDB's
        // TE_CLUSTER_FAILURE.
        let alone = if self.merge.has_begun() {
            !self.merge.has_confirmed()
        } else {
            self.nodes.is_empty()
        };
        if alone && self.ended.is_none() {
            self.ended = Some(Error::ndb_detail(
                4009,
                "cluster failure: no data node sends this subscription's events",
            ));
        }
        Ok(())
    }

    /// One frame of `node`'s stream.
    fn file(&mut self, node: NodeId, signal: u16, payload: &[u8]) -> Result<(), Error> {
        let Some(stream) = self.nodes.get(&node) else {
            return Ok(());
        };
        let connection = Arc::clone(&stream.connection);
        let kind = if signal == gsn::SUB_TABLE_DATA {
            ClientStat::DataEventsRecvdCount
        } else {
            ClientStat::NonDataEventsRecvdCount
        };
        self.cluster.counters().with_block(|counts| {
            counts.bump(kind, 1);
            counts.bump(ClientStat::EventBytesRecvdCount, payload.len() as u64);
        });
        let malformed = |e: &dyn std::fmt::Display| {
            connection.protocol_violation(format!("signal {signal}: {e}"))
        };
        match signal {
            gsn::SUB_START_CONF | gsn::SUB_TABLE_DATA | gsn::SUB_GCP_COMPLETE_REP => {
                let held =
                    (self.merge.on_frame(node.0, signal, payload)).map_err(|e| malformed(&e))?;
                if let Some(node) = self.merge.went_back() {
                    // A system restart: the epochs start again below those handed out (NDB's
                    // TE_CLUSTER_FAILURE ends an operation likewise).
                    self.unsubscribe();
                    self.ended = Some(Error::ndb_detail(
                        4009,
                        format!(
                            "cluster failure: data node {node} restarted at an epoch already \
                             handed out (a system restart); create the operation again"
                        ),
                    ));
                    return Ok(());
                }
                if held > self.buffer_max {
                    return Err(self.overflow(format!(
                        "more than {} bytes of events not handed out",
                        self.buffer_max
                    )));
                }
            }
            gsn::SUB_STOP_CONF => {}
            gsn::SUB_START_REF => {
                let r = Refusal::decode(payload).map_err(|e| malformed(&e))?;
                let error = Error::Ndb(NdbError::from_wire(r.code, &r.detail));
                if r.code == 1417 {
                    // The table was dropped: this node sent its last changes and the report
                    // of their epoch first. The operation ends once every node has.
                    self.dropped_by.push(node);
                    self.merge.table_dropped_at(node.0);
                    self.dropped = Some(error);
                    return Ok(());
                }
                tracing::debug!(%node, "subscription refused: {error}");
                self.refused = Some(error);
            }
            other => {
                return Err(malformed(&format!(
                    "unexpected signal {other} on an event stream"
                )));
            }
        }
        Ok(())
    }

    /// `node`'s stream ended or its link failed: it no longer counts.
    fn node_gone(&mut self, node: NodeId) {
        let Some(gone) = self.nodes.remove(&node) else {
            return;
        };
        gone.connection.forget(gone.request_id);
        self.merge.gone(node.0);
        self.links_changed();
        self.retry_at
            .insert(node, Instant::now() + RESUBSCRIBE_EVERY);
    }

    /// The pump thread reads the links of the streams in place.
    fn links_changed(&self) {
        let links = self.nodes.values().map(|s| Arc::clone(&s.connection));
        self.pumped.set(links.collect());
    }

    /// Hands out every epoch that every subscribed data node has reported complete.
    /// A change that does not decode ends the operation: its epoch is handed out already.
    fn deliver(&mut self) -> Result<(), Error> {
        let mut merged = Vec::new();
        self.merge.take_complete(&mut merged);
        let handed = self.hand_out(merged);
        if let Err(e) = &handed {
            self.ended = Some(clone_error(e));
            self.unsubscribe();
        }
        handed
    }

    /// Decodes merged changes into events.
    fn hand_out(&mut self, merged: Vec<Merged>) -> Result<(), Error> {
        for m in merged {
            let event = match m {
                Merged::Change { epoch, change } => self.decode(epoch, &change)?,
                Merged::Inconsistent { epoch, fragment } => EventData {
                    event_type: EventType::Inconsistent,
                    epoch,
                    fragment,
                    values: None,
                    pre_values: None,
                    blobs_undefined: Vec::new(),
                },
            };
            self.ready.push_back(event);
        }
        Ok(())
    }

    /// A change's rows, by the table's columns. A row that does not decode is the data
    /// nodes' fault; the operation fails (its streams are not tied to one link any more).
    fn decode(&self, epoch: u64, b: &HeldChange) -> Result<EventData, Error> {
        let def = self.table.def();
        let row = |bytes: &[u8]| -> Result<Vec<Value>, Error> {
            let mut values = Vec::new();
            let mut r = Reader::new(bytes, "SUB_TABLE_DATA row");
            def.decode_row_into(&mut r, &mut values)
                .and_then(|()| r.finish())
                .map_err(|e| Error::ndb_detail(4009, format!("an event's row: {e}")))?;
            Ok(values)
        };
        let (event_type, values, pre_values) = match b.kind {
            ChangeKind::Insert => (EventType::Insert, Some(row(&b.after)?), None),
            ChangeKind::Update => (
                EventType::Update,
                Some(row(&b.after)?),
                Some(row(&b.before)?),
            ),
            ChangeKind::Delete => (EventType::Delete, None, Some(row(&b.before)?)),
        };
        Ok(EventData {
            event_type,
            epoch,
            fragment: b.fragment,
            values,
            pre_values,
            blobs_undefined: Vec::new(),
        })
    }

    /// The operation outgrew its buffer: it ends (4734).
    fn overflow(&mut self, detail: String) -> Error {
        self.unsubscribe();
        let error = Error::ndb_detail(4734, detail);
        self.ended = Some(clone_error(&error));
        error
    }

    /// Asks every data node to end the subscription and forgets its streams.
    /// A send buffer that stays full this long makes it give a stop up (the data node ends the
    /// subscription when the link closes).
    fn unsubscribe(&mut self) {
        for stream in std::mem::take(&mut self.nodes).into_values() {
            let header = header(gsn::SUB_STOP_REQ, stream.request_id);
            let connection = &stream.connection;
            let deadline = Instant::now() + STOP_SEND_WAIT;
            loop {
                match connection.send_frames(std::iter::once((header, &[][..]))) {
                    Err(e) if e.code() == Some(4021) && Instant::now() < deadline => {
                        // The send buffer is full: the link drains as it is read.
                        let _ = connection.pump();
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(e) => {
                        tracing::warn!(node = %connection.peer, "SUB_STOP_REQ not sent: {e}");
                        break;
                    }
                    Ok(()) => break,
                }
            }
            connection.forget(stream.request_id);
        }
        self.pumped.set(Vec::new());
        self.merge = EventMerge::new(Vec::new());
    }
}

impl Drop for EventOperation<'_> {
    fn drop(&mut self) {
        self.unsubscribe();
    }
}

fn header(signal: u16, request_id: u32) -> FrameHeader {
    FrameHeader {
        signal,
        receiver_block: block::SUMA,
        sender_block: block::API,
        request_id,
    }
}

/// One epoch of a merged operation, as it is merged.
#[derive(Default)]
struct Epoch {
    gaps: Vec<EventData>,
    /// The table's changes (and its Drop event).
    changes: Vec<EventData>,
    /// Each parted column's parts table's changes.
    parts: BTreeMap<usize, Vec<EventData>>,
}

/// The events of `ready` up to epoch `through`, in order.
fn take_through(ready: &mut VecDeque<EventData>, through: u64) -> Vec<EventData> {
    let count = ready.iter().take_while(|e| e.epoch <= through).count();
    ready.drain(..count).collect()
}

/// The same error again (an ended operation fails every later poll alike).
fn clone_error(e: &Error) -> Error {
    match e {
        Error::Ndb(n) => Error::Ndb(n.clone()),
        other => Error::ndb_detail(4009, other),
    }
}
