//! SUMA: the data node's side of the event API ([docs/events.md](../../../docs/events.md)).
//!
//! An API node subscribes to a table (SUB_START_REQ) on every data node. From then on each
//! fragment of the table here logs the changes committed to it (`Fragment::events`, in LQH's
//! `finish_row`: the new image, the old one, and the commit's epoch). When an epoch is complete
//! its changes go to the subscribers, followed by SUB_GCP_COMPLETE_REP:
//!
//! ```text
//!  master DIH: GCP_COMMIT round over (every live node's commits of epoch `old` ended)
//!     ─GCP_COMPLETE_REP(old, the master's failed nodes)─► every data node's SUMA:
//!        once no failed coordinator's transaction waits here (its commit would land in an
//!        epoch already reported) and no arbitration round runs,
//!        ─SUB_TABLE_DATA × the changes of epochs ≤ old, SUB_GCP_COMPLETE_REP(old)─► subscribers
//! ```
//!
//! Every replica of a fragment sends its changes, and the API keeps one replica's per
//! fragment and epoch (NDB sends each from one node and has the others buffer them until the
//! API acknowledges the epoch; see docs/events.md). A subscription here covers the epochs from
//! its start epoch on: the first no commit here has yet reached when it is made.
//!
//! Limits (the config's): MaxNoOfSubscriptions tables subscribed and MaxNoOfSubscribers
//! subscriptions (1422 past either); MaxBufferedEpochBytes of changes of epochs not complete
//! (past it they are dropped and the next report says so, `SUB_GCP_DATA_LOST`); per subscriber
//! MaxBufferedEpochs completed epochs or MaxBufferedEpochBytes of frames not sent (a full send
//! buffer) before its link is closed, as NDB disconnects a lagging subscriber.

use std::collections::{BTreeMap, VecDeque};

use rndb_config::{DataNodeConfig, NodeId};
use rndb_protocol::error::NdbError;
use rndb_protocol::signals::{block, gsn, Refusal};
use rndb_protocol::suma::{
    ChangeKind, SubGcpCompleteRep, SubStartConf, SubStartReq, SubTableData, SUB_GCP_DATA_LOST,
};
use rndb_transporter::FrameHeader;

use super::node_set::NodeSet;
use super::tup::Row;
use super::{Kernel, Outbox};

/// Bytes a logged change is counted for beyond its images.
const CHANGE_OVERHEAD_BYTES: usize = 64;

/// The changes committed to one fragment since its last completed epoch, while the fragment's
/// table has subscribers (`Fragment::events`).
#[derive(Default)]
pub struct EventLog {
    changes: Vec<Change>,
    bytes: usize,
}

impl std::fmt::Debug for EventLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventLog")
            .field("changes", &self.changes.len())
            .field("bytes", &self.bytes)
            .finish()
    }
}

struct Change {
    gci: u64,
    kind: ChangeKind,
    after: Option<Row>,
    before: Option<Row>,
}

impl EventLog {
    /// A change committed in epoch `gci`: the row's new image (`None`: deleted) and the one it
    /// replaces (`None`: inserted).
    pub fn push(&mut self, gci: u64, after: Option<&Row>, before: Option<&Row>) {
        let kind = match (after, before) {
            (Some(_), None) => ChangeKind::Insert,
            (Some(_), Some(_)) => ChangeKind::Update,
            (None, Some(_)) => ChangeKind::Delete,
            (None, None) => return,
        };
        let bytes = |row: Option<&Row>| row.map_or(0, |r| r.encoded().len());
        self.bytes += CHANGE_OVERHEAD_BYTES + bytes(after) + bytes(before);
        self.changes.push(Change {
            gci,
            kind,
            after: after.cloned(),
            before: before.cloned(),
        });
    }

    /// Takes the changes of epochs up to `gci`, in commit order.
    fn take_through(&mut self, gci: u64) -> Vec<Change> {
        let (done, later): (Vec<Change>, Vec<Change>) = std::mem::take(&mut self.changes)
            .into_iter()
            .partition(|c| c.gci <= gci);
        self.changes = later;
        self.bytes = self.changes.iter().map(change_bytes).sum();
        done
    }
}

fn change_bytes(c: &Change) -> usize {
    let bytes = |row: &Option<Row>| row.as_ref().map_or(0, |r| r.encoded().len());
    CHANGE_OVERHEAD_BYTES + bytes(&c.after) + bytes(&c.before)
}

/// One API node's subscription to one table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Subscriber {
    api: NodeId,
    /// The request id of its SUB_START_REQ: every frame of the subscription carries it.
    request_id: u32,
    /// The first epoch it covers.
    start_gci: u64,
}

/// Frames for one API node that its send buffer did not take yet, in order.
#[derive(Debug, Default)]
struct Queue {
    /// Each frame, with the epoch it reports complete (SUB_GCP_COMPLETE_REP).
    frames: VecDeque<(FrameHeader, Vec<u8>, Option<u64>)>,
    bytes: u64,
    /// Completed epochs whose reports are queued (one per epoch, however many subscriptions
    /// the node has), and the last epoch queued and sent.
    epochs: u32,
    last_queued: u64,
    last_sent: u64,
}

/// SUMA's state.
#[derive(Debug)]
pub(crate) struct Suma {
    /// Subscriptions by table id, oldest first.
    tables: BTreeMap<u32, Vec<Subscriber>>,
    subscriptions_max: usize,
    subscribers_max: usize,
    epochs_max: u32,
    bytes_max: u64,
    queues: BTreeMap<NodeId, Queue>,
    /// The newest epoch reported complete to the subscribers.
    completed: u64,
    /// The newest epoch the master reported complete and the failed nodes it had handled,
    /// while the report waits for this node (`suma_try_complete`).
    pending: Option<(u64, NodeSet)>,
    /// Changes up to this epoch were dropped (MaxBufferedEpochBytes): reports up to it say so.
    lost_through: u64,
    /// Tables dropped while subscribed: their last changes, sent once their epochs complete,
    /// then 1417 to each subscriber.
    dropped: Vec<Dropped>,
}

/// A table dropped while it had subscribers.
#[derive(Debug)]
struct Dropped {
    subscribers: Vec<Subscriber>,
    /// Each fragment's changes not yet sent, by fragment number.
    logs: Vec<(u32, Box<EventLog>)>,
    /// The newest epoch among them: the subscriptions end once it is complete.
    through: u64,
}

impl Suma {
    pub fn new(node: &DataNodeConfig) -> Suma {
        let or = |n: u32, default: u32| if n == 0 { default } else { n } as usize;
        Suma {
            tables: BTreeMap::new(),
            subscriptions_max: or(node.max_no_of_subscriptions, node.max_no_of_tables),
            subscribers_max: or(
                node.max_no_of_subscribers,
                node.max_no_of_tables.saturating_mul(2),
            ),
            epochs_max: node.max_buffered_epochs,
            bytes_max: node.max_buffered_epoch_bytes,
            queues: BTreeMap::new(),
            completed: 0,
            pending: None,
            lost_through: 0,
            dropped: Vec::new(),
        }
    }

    /// Subscriptions in place (ndbinfo and tests), those of dropped tables still ending
    /// included.
    pub fn subscriber_count(&self) -> usize {
        let ending: usize = self.dropped.iter().map(|d| d.subscribers.len()).sum();
        self.tables.values().map(Vec::len).sum::<usize>() + ending
    }

    fn queue(&mut self, api: NodeId, signal: u16, request_id: u32, payload: Vec<u8>) {
        self.queue_reporting(api, signal, request_id, payload, None);
    }

    /// Queues a frame; `epoch` is the epoch a SUB_GCP_COMPLETE_REP reports.
    fn queue_reporting(
        &mut self,
        api: NodeId,
        signal: u16,
        request_id: u32,
        payload: Vec<u8>,
        epoch: Option<u64>,
    ) {
        let queue = self.queues.entry(api).or_default();
        queue.bytes += payload.len() as u64;
        if let Some(gci) = epoch.filter(|&g| g != queue.last_queued) {
            queue.last_queued = gci;
            queue.epochs += 1;
        }
        let header = FrameHeader {
            signal,
            receiver_block: block::API,
            sender_block: block::SUMA,
            request_id,
        };
        queue.frames.push_back((header, payload, epoch));
    }

    fn refuse(&mut self, api: NodeId, request_id: u32, error: &NdbError) {
        let mut payload = Vec::new();
        Refusal {
            code: error.code,
            detail: error.message.clone(),
        }
        .encode(&mut payload);
        self.queue(api, gsn::SUB_START_REF, request_id, payload);
    }
}

impl Kernel {
    /// SUB_START_REQ: subscribes `api` to a table's changes from the next epoch on.
    pub(crate) fn exec_sub_start_req(
        &mut self,
        api: NodeId,
        request_id: u32,
        req: SubStartReq,
        out: &mut dyn Outbox,
    ) {
        if let Err(error) = self.sub_start(api, request_id, req) {
            self.suma.refuse(api, request_id, &error);
        }
        self.suma_flush(out);
    }

    fn sub_start(
        &mut self,
        api: NodeId,
        request_id: u32,
        req: SubStartReq,
    ) -> Result<(), NdbError> {
        if self.lqh.copying {
            return Err(NdbError::with_detail(
                1405,
                format!(
                    "data node {} is being restarted and holds no complete fragment yet",
                    self.me
                ),
            ));
        }
        if let Err(e) = self.dict.for_operation(req.table_id, req.table_version) {
            return Err(NdbError::with_detail(
                1417,
                format!(
                    "table {} version {}: {}",
                    req.table_id, req.table_version, e.message
                ),
            ));
        }
        let suma = &mut self.suma;
        if suma.subscriber_count() >= suma.subscribers_max {
            return Err(NdbError::with_detail(
                1422,
                format!(
                    "MaxNoOfSubscribers ({}) subscriptions are in place",
                    suma.subscribers_max
                ),
            ));
        }
        if !suma.tables.contains_key(&req.table_id) && suma.tables.len() >= suma.subscriptions_max {
            return Err(NdbError::with_detail(
                1422,
                format!(
                    "MaxNoOfSubscriptions ({}) tables have subscribers",
                    suma.subscriptions_max
                ),
            ));
        }
        if (suma.tables.values().flatten()).any(|s| s.api == api && s.request_id == request_id) {
            return Err(NdbError::with_detail(
                1415,
                "subscription not unique: request id in use",
            ));
        }
        let subscribers = suma.tables.entry(req.table_id).or_default();
        // Every change committed here from now on is logged; none is yet in an epoch later than
        // both the one commits start in here and the newest one a commit here had.
        let start_gci = self.gcp.current.max(self.lqh.newest_committed) + 1;
        subscribers.push(Subscriber {
            api,
            request_id,
            start_gci,
        });
        if let Some(fragments) = self.lqh.fragments.get_mut(&req.table_id) {
            for fragment in fragments {
                fragment.events.get_or_insert_with(Box::default);
            }
        }
        let mut payload = Vec::new();
        SubStartConf {
            start_gci,
            restart: self.gcp.restarts.last().map_or(0, |r| r.no),
        }
        .encode(&mut payload);
        self.suma
            .queue(api, gsn::SUB_START_CONF, request_id, payload);
        tracing::debug!(api = %api, table = req.table_id, start_gci, "event subscription started");
        Ok(())
    }

    /// Refuses a SUB_START_REQ before SUMA looks at it (the node does not serve yet).
    pub(crate) fn suma_refuse(
        &mut self,
        api: NodeId,
        request_id: u32,
        error: &NdbError,
        out: &mut dyn Outbox,
    ) {
        self.suma.refuse(api, request_id, error);
        self.suma_flush(out);
    }

    /// SUB_STOP_REQ: ends the subscription (answered SUB_STOP_CONF after its last frames,
    /// whether or not it was in place).
    pub(crate) fn exec_sub_stop_req(&mut self, api: NodeId, request_id: u32, out: &mut dyn Outbox) {
        self.remove_subscribers(|s| s.api == api && s.request_id == request_id);
        self.suma
            .queue(api, gsn::SUB_STOP_CONF, request_id, Vec::new());
        self.suma_flush(out);
    }

    /// An API node's link closed: its subscriptions end.
    pub(crate) fn suma_api_gone(&mut self, api: NodeId) {
        self.suma.queues.remove(&api);
        self.remove_subscribers(|s| s.api == api);
    }

    /// A table is being dropped: its subscriptions end with 1417 once the epochs of its last
    /// changes are complete and those changes sent (its fragments' logs are kept until then).
    pub(crate) fn suma_table_dropped(&mut self, table_id: u32) {
        let Some(subscribers) = self.suma.tables.remove(&table_id) else {
            return;
        };
        let mut logs = Vec::new();
        // At least the epoch commits start in now: one of the table's changes committed here
        // in it (before the drop) is then surely sent before the subscription ends.
        let mut through = self.suma.completed.max(self.gcp.current);
        for (no, fragment) in
            (self.lqh.fragments.get_mut(&table_id).into_iter().flatten()).enumerate()
        {
            if let Some(log) = fragment.events.take() {
                through = through.max(log.changes.last().map_or(0, |c| c.gci));
                logs.push((no as u32, log));
            }
        }
        self.suma.dropped.push(Dropped {
            subscribers,
            logs,
            through,
        });
    }

    /// Removes the subscribers `gone` picks; a table left without any stops logging changes.
    fn remove_subscribers(&mut self, gone: impl Fn(&Subscriber) -> bool) {
        let mut unsubscribed = Vec::new();
        for (&table_id, subscribers) in &mut self.suma.tables {
            subscribers.retain(|s| !gone(s));
            if subscribers.is_empty() {
                unsubscribed.push(table_id);
            }
        }
        for d in &mut self.suma.dropped {
            d.subscribers.retain(|s| !gone(s));
        }
        self.suma.dropped.retain(|d| !d.subscribers.is_empty());
        for table_id in unsubscribed {
            self.suma.tables.remove(&table_id);
            if let Some(fragments) = self.lqh.fragments.get_mut(&table_id) {
                for fragment in fragments {
                    fragment.events = None;
                }
            }
        }
    }

    /// The master reports every commit of epoch `gci` and before ended on every live node
    /// (GCP_COMPLETE_REP), having handled the failures of `failed`.
    pub(crate) fn suma_epoch_completed(&mut self, gci: u64, failed: NodeSet, out: &mut dyn Outbox) {
        // The newest report's failed nodes are the master's now (a node it had failed may
        // have rejoined since: merged in, it would hold the report up for good); an older
        // report, late, adds nothing.
        if self.suma.pending.is_none_or(|(pending, _)| gci >= pending) {
            self.suma.pending = Some((gci, failed));
        }
        self.suma_try_complete(out);
    }

    /// Reports the epoch the master completed to the subscribers, once nothing here can still
    /// commit in it: no failed coordinator's transaction waits for its decision here, every
    /// node the master had failed is failed here too (its transactions found), no arbitration
    /// round runs (what this side decided is not its own until the side goes on), and this
    /// node is not stopping (a side that lost goes no further).
    pub(crate) fn suma_try_complete(&mut self, out: &mut dyn Outbox) {
        let Some((gci, failed)) = self.suma.pending else {
            return;
        };
        if !self.foreign.orphans.is_empty()
            || failed.iter().any(|n| self.qmgr.is_up(n))
            || self.arbit_round_running()
            || self.fatal.is_some()
        {
            // (A node about to stop vouches for nothing: on the losing side of a split, the
            // epoch it ended without the others' nodes goes on over there; seed 0xec021bf.)
            return;
        }
        self.suma.pending = None;
        if gci <= self.suma.completed {
            return;
        }
        let previous = self.suma.completed;
        self.suma.completed = gci;
        if self.suma.tables.is_empty() && self.suma.dropped.is_empty() {
            return;
        }
        let lost = self.suma.lost_through > previous;
        let rep = SubGcpCompleteRep {
            gci,
            flags: if lost { SUB_GCP_DATA_LOST } else { 0 },
        };
        let Kernel { suma, lqh, .. } = self;
        let tables = std::mem::take(&mut suma.tables);
        for (table_id, subscribers) in &tables {
            let fragments = lqh.fragments.get_mut(table_id).into_iter().flatten();
            for (fragment_no, fragment) in fragments.enumerate() {
                if let Some(log) = fragment.events.as_mut() {
                    send_changes(suma, subscribers, fragment_no as u32, log, gci);
                }
            }
            send_report(suma, subscribers, rep);
        }
        suma.tables = tables;
        let mut dropped = std::mem::take(&mut suma.dropped);
        for d in &mut dropped {
            for (fragment_no, log) in &mut d.logs {
                send_changes(suma, &d.subscribers, *fragment_no, log, gci);
            }
            send_report(suma, &d.subscribers, rep);
            if gci >= d.through {
                let error = NdbError::with_detail(1417, "the table was dropped");
                for s in &d.subscribers {
                    suma.refuse(s.api, s.request_id, &error);
                }
            }
        }
        dropped.retain(|d| gci < d.through);
        suma.dropped = dropped;
        self.suma_flush(out);
    }

    /// Sends what waits for each subscriber, as far as its send buffer takes; closes the link
    /// of one that lags past MaxBufferedEpochs or MaxBufferedEpochBytes.
    pub(crate) fn suma_flush(&mut self, out: &mut dyn Outbox) {
        let mut lagging = Vec::new();
        for (&api, queue) in &mut self.suma.queues {
            while let Some((header, payload, epoch)) = queue.frames.front() {
                if out
                    .send(api, *header, &mut |b| b.extend_from_slice(payload))
                    .is_err()
                {
                    break;
                }
                queue.bytes -= payload.len() as u64;
                if let Some(gci) = epoch.filter(|&g| g != queue.last_sent) {
                    queue.last_sent = gci;
                    queue.epochs = queue.epochs.saturating_sub(1);
                }
                queue.frames.pop_front();
            }
            if queue.epochs > self.suma.epochs_max || queue.bytes > self.suma.bytes_max {
                lagging.push((api, queue.epochs, queue.bytes));
            }
        }
        self.suma.queues.retain(|_, q| !q.frames.is_empty());
        for (api, epochs, bytes) in lagging {
            let reason = format!(
                "API node {api} lags behind its event subscriptions: {epochs} completed epochs \
                 ({bytes} bytes) not sent, past MaxBufferedEpochs ({}) or MaxBufferedEpochBytes \
                 ({}); its link is closed",
                self.suma.epochs_max, self.suma.bytes_max
            );
            tracing::warn!("{reason}");
            self.suma_api_gone(api);
            out.close(api, reason);
        }
    }

    /// Every timer tick: a report that waited for this node may go now; changes of epochs not
    /// complete past MaxBufferedEpochBytes are dropped (the reports that cover them say so).
    pub(crate) fn suma_timer(&mut self, out: &mut dyn Outbox) {
        self.suma_try_complete(out);
        if self.suma.tables.is_empty() {
            return;
        }
        let mut bytes = 0u64;
        let mut newest = 0u64;
        for table_id in self.suma.tables.keys() {
            for fragment in self.lqh.fragments.get(table_id).into_iter().flatten() {
                if let Some(log) = &fragment.events {
                    bytes += log.bytes as u64;
                    newest = newest.max(log.changes.last().map_or(0, |c| c.gci));
                }
            }
        }
        if bytes <= self.suma.bytes_max {
            return;
        }
        tracing::warn!(
            bytes,
            max = self.suma.bytes_max,
            "events of epochs not complete outgrew MaxBufferedEpochBytes: dropped; subscribers \
             are told these epochs are incomplete from this node"
        );
        let newest = newest.max(self.gcp.current).max(self.lqh.newest_committed);
        self.suma.lost_through = self.suma.lost_through.max(newest);
        for table_id in self.suma.tables.keys() {
            for fragment in self.lqh.fragments.get_mut(table_id).into_iter().flatten() {
                if let Some(log) = fragment.events.as_mut() {
                    log.changes.clear();
                    log.bytes = 0;
                }
            }
        }
    }
}

/// Queues the changes of epochs up to `gci` that `log` holds for fragment `fragment_no` to
/// each subscriber whose subscription covers their epoch.
fn send_changes(
    suma: &mut Suma,
    subscribers: &[Subscriber],
    fragment_no: u32,
    log: &mut EventLog,
    gci: u64,
) {
    for change in log.take_through(gci) {
        let mut payload = Vec::new();
        SubTableData {
            gci: change.gci,
            fragment: fragment_no,
            kind: change.kind,
            after: image(&change.after),
            before: image(&change.before),
        }
        .encode(&mut payload);
        for s in subscribers.iter().filter(|s| change.gci >= s.start_gci) {
            queue_frame(suma, s, gsn::SUB_TABLE_DATA, payload.clone());
        }
    }
}

/// Queues an epoch's report to each of `subscribers`.
fn send_report(suma: &mut Suma, subscribers: &[Subscriber], rep: SubGcpCompleteRep) {
    for s in subscribers {
        let mut payload = Vec::new();
        rep.encode(&mut payload);
        suma.queue_reporting(
            s.api,
            gsn::SUB_GCP_COMPLETE_REP,
            s.request_id,
            payload,
            Some(rep.gci),
        );
    }
}

/// A row image's bytes, empty for none.
fn image(row: &Option<Row>) -> &[u8] {
    row.as_ref().map_or(&[], Row::encoded)
}

fn queue_frame(suma: &mut Suma, s: &Subscriber, signal: u16, payload: Vec<u8>) {
    suma.queue(s.api, signal, s.request_id, payload);
}
