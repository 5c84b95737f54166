//! The event API's check (`--faults events`): a subscriber on client 0's API node takes every
//! workload table's committed changes from every data node, merges them with the library's
//! own merge (`rndb_protocol::suma::EventMerge`, which `rndb_api`'s event operations run),
//! checks what it hands out against a model of its own, and the run's end checks what it
//! handed out against what the clients know.
//!
//! ```text
//!  tables ready ─► SUB_START_REQ(table) to every data node linked (request id per node, table)
//!  SUB_START_CONF / SUB_TABLE_DATA / SUB_GCP_COMPLETE_REP ─► the model, EventMerge::on_frame
//!      └► begin() once ─► take_complete ─► checked against the model as it comes
//!  link closed, SUB_START_REF ─► EventMerge::gone; asked again 100 ms later, once linked
//!  no data node subscribed and none linked (a cluster crash), or a confirmation at an epoch
//!      already handed out (went_back: a system restart) ─► the merge ends (as the API's
//!      operation ends with 4009; SUB_STOP_REQ to the nodes still subscribed); the next is a
//!      new one, with a begin() of its own
//! ```
//!
//! The model: each data node's subscription covers the epochs [start, newest reported]
//! (without those a report flagged `SUB_GCP_DATA_LOST`); one that ended keeps covering what it
//! reported while those epochs are not all handed out (its changes are used). Each take hands
//! out (delivered, through], `through` the newest epoch every confirmed live node reported;
//! for each fragment the first epoch of it no subscription (live or ended) of one of the
//! fragment's replicas covers must come as exactly one `Inconsistent { epoch, fragment }`,
//! before the changes of that epoch and later ones, and no other `Inconsistent` may come. A
//! change must be of a fragment and epoch some subscription covers.
//!
//! `went_back()` must name a node only after a system restart came since the merge was made
//! (the simulator knows when one did): a confirmation that comes late, after the merge handed
//! out later epochs without it, is none, and taking it for one (the API's 4009) fails the seed.
//!
//! As changes come: epochs never go back; per key, each change starts from the image the
//! change before it left (an insert from no row, an update or delete from the row's image), so
//! a change lost or handed out twice shows. After an `Inconsistent` of a fragment, its keys'
//! images are unknown until the end of that take's range (the merge reports one gap per
//! fragment and range).
//!
//! A span is the run of epochs (lo, hi] of one merge that it handed out, with each fragment's
//! holes (from an `Inconsistent` to the end of its range). At the end (after the subscriber
//! has handed out the epoch the data nodes were in when the final reads ended): every register
//! write and ledger insert acknowledged with a commit GCI inside a span and outside its key's
//! fragment's holes is there exactly once, in that epoch; none of a failed one is there; none
//! is there twice; each set insert or delete acknowledged so is there in its epoch; and each
//! key's image, followed through the last span, is what the final reads found.

use std::collections::{BTreeMap, BTreeSet};

use rndb_config::{key_hash, NodeId, PartitionMap};
use rndb_protocol::signals::{block, gsn, Refusal, TableInfo};
use rndb_protocol::suma::{
    ChangeKind, EventMerge, Merged, SubGcpCompleteRep, SubStartConf, SubStartReq, SUB_GCP_DATA_LOST,
};
use rndb_protocol::{Reader, Value, Writer};
use rndb_transporter::FrameHeader;

use crate::client::{Access, Outcome, Shared, TransferOutcome, BANK, LEDGER, REGISTERS, SETS};

/// How soon a data node whose subscription ended (refused, or its link closed) is asked
/// again, as `rndb_api::event` does.
const RESUBSCRIBE_NS: u64 = 100_000_000;
/// The subscriber's request ids start here, far above any client's.
const REQUEST_ID_FIRST: u32 = 0xe000_0000;
/// Refusals a subscription may meet: the node does not serve yet (4009), is being copied to
/// in its node restart (1405), or still holds the subscriptions of a link it has not yet
/// seen closed (1422).
const REFUSALS_EXPECTED: [u32; 3] = [4009, 1405, 1422];

/// One change the subscriber handed out: a row of table `table` (the clients' table number)
/// with id `key`, its value before and after (`None`: no row).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Change {
    pub table: usize,
    pub key: i32,
    /// The merge's era (see `Subscriber::era_at`).
    pub era: u32,
    pub epoch: u64,
    pub before: Option<i64>,
    pub after: Option<i64>,
}

/// Epochs (lo, hi] of table `table` that a merge of era `era` handed out, but for its holes:
/// (fragment, first, last) epochs whose changes of the fragment may be missing.
#[derive(Clone, Debug)]
struct Span {
    table: usize,
    era: u32,
    lo: u64,
    hi: u64,
    holes: Vec<(u32, u64, u64)>,
}

impl Span {
    /// True when the span covers `table`'s `fragment` in `epoch` (of the span's era).
    fn covers(&self, table: usize, fragment: u32, epoch: u64) -> bool {
        self.table == table
            && self.lo < epoch
            && epoch <= self.hi
            && !(self.holes.iter()).any(|&(f, a, b)| f == fragment && a <= epoch && epoch <= b)
    }
}

/// Counts for the report.
#[derive(Clone, Debug, Default)]
pub struct EventStats {
    pub subscriptions: u64,
    pub refusals: BTreeMap<u32, u64>,
    pub changes: u64,
    pub inconsistent: u64,
    /// Merges that ended because no data node was subscribed or linked, merges that ended
    /// because a confirmation came at an epoch already handed out (a system restart), and
    /// merges begun.
    pub merges_ended: u64,
    pub merges_went_back: u64,
    /// Confirmations after a system restart that a merge made before it took (went_back()
    /// said nothing: the subscription's start was after every epoch handed out).
    pub merges_across_restart: u64,
    pub merges_begun: u64,
    /// Ranges handed out in which a fragment had a second run of uncovered epochs after the
    /// first (which alone an `Inconsistent` names).
    pub gaps_unnamed: u64,
    /// Acknowledged writes found in their epoch, and those whose epoch no span covered.
    pub writes_found: u64,
    pub writes_uncovered: u64,
    /// Keys whose image, followed through the last span, matched the final reads.
    pub keys_matched: u64,
}

/// One data node's subscription as the check models it.
#[derive(Clone, Debug)]
struct Source {
    node: u16,
    /// Its SUB_START_CONF's start epoch (at least 1).
    start: Option<u64>,
    /// The newest epoch it reported complete (before its first report, the one before its
    /// start).
    reported: u64,
    /// Epoch spans (after, through] it reported with changes dropped.
    lost: Vec<(u64, u64)>,
}

impl Source {
    /// The epochs [first, last] it vouches for.
    fn spans(&self) -> Vec<(u64, u64)> {
        let Some(start) = self.start else {
            return Vec::new();
        };
        let mut spans = vec![(start, self.reported)];
        for &(after, through) in &self.lost {
            let mut cut = Vec::new();
            for (a, b) in spans {
                // Epochs after+1..=through are not vouched for.
                if b <= after || a > through {
                    cut.push((a, b));
                    continue;
                }
                if a <= after {
                    cut.push((a, after));
                }
                if through < b {
                    cut.push((through + 1, b));
                }
            }
            spans = cut;
        }
        spans.retain(|&(a, b)| a <= b);
        spans
    }

    fn covers(&self, epoch: u64) -> bool {
        self.spans().iter().any(|&(a, b)| a <= epoch && epoch <= b)
    }
}

/// One merge of one table's streams: the library's [`EventMerge`], and the check's model of
/// it.
#[derive(Debug)]
struct Merge {
    merge: EventMerge,
    /// The number of system restarts before it was made (epochs restart lower after one).
    era: u32,
    /// Subscriptions in place or being made, by node.
    live: BTreeMap<u16, Source>,
    /// Subscriptions that ended with epochs reported and not handed out yet.
    retired: Vec<Source>,
    begun: bool,
    /// The epoch `begin()` said handing out starts after: nothing of it or before may come.
    begin_after: u64,
    /// Epochs up to this one were handed out.
    delivered: u64,
    /// Each fragment's epochs [first, last] whose changes may be missing.
    holes: Vec<(u32, u64, u64)>,
    /// Each key's fragment and image as the changes since its fragment's last hole left it
    /// (`None`: no row).
    rows: BTreeMap<i32, (u32, Option<i64>)>,
    /// Per fragment: changes of epochs up to this one may be missing.
    uncertain: BTreeMap<u32, u64>,
    last_epoch: u64,
}

impl Merge {
    fn new(era: u32, replicas: Vec<Vec<u16>>) -> Merge {
        Merge {
            merge: EventMerge::new(replicas),
            era,
            live: BTreeMap::new(),
            retired: Vec::new(),
            begun: false,
            begin_after: 0,
            delivered: 0,
            holes: Vec::new(),
            rows: BTreeMap::new(),
            uncertain: BTreeMap::new(),
            last_epoch: 0,
        }
    }

    /// The newest epoch every confirmed live node reported.
    fn complete_through(&self) -> Option<u64> {
        (self.live.values())
            .filter(|s| s.start.is_some())
            .map(|s| s.reported)
            .min()
    }

    /// The subscriptions, live and ended, of `replicas`' nodes.
    fn sources_of<'a>(&'a self, replicas: &'a [u16]) -> impl Iterator<Item = &'a Source> + 'a {
        let live = (self.live.values()).filter(|s| replicas.contains(&s.node));
        let retired = (self.retired.iter()).filter(|s| replicas.contains(&s.node));
        live.chain(retired)
    }

    /// The runs of epochs [first, last] of (`from`, `through`] that no subscription of
    /// `replicas` covers.
    fn uncovered(&self, replicas: &[u16], from: u64, through: u64) -> Vec<(u64, u64)> {
        let mut spans: Vec<(u64, u64)> =
            self.sources_of(replicas).flat_map(|s| s.spans()).collect();
        spans.sort_unstable();
        let mut runs = Vec::new();
        let mut next = from + 1;
        for (first, last) in spans {
            if next > through {
                break;
            }
            if first > next {
                runs.push((next, (first - 1).min(through)));
            }
            next = next.max(last.saturating_add(1));
        }
        if next <= through {
            runs.push((next, through));
        }
        runs
    }

    /// Tracks `node`'s frame in the model.
    fn model_frame(&mut self, node: u16, signal: u16, payload: &[u8]) -> Result<(), String> {
        let Some(source) = self.live.get_mut(&node) else {
            return Ok(());
        };
        match signal {
            gsn::SUB_START_CONF => {
                let conf = SubStartConf::decode(payload).map_err(|e| e.to_string())?;
                let start = conf.start_gci.max(1);
                source.start = Some(start);
                source.reported = start - 1;
            }
            gsn::SUB_GCP_COMPLETE_REP => {
                let rep = SubGcpCompleteRep::decode(payload).map_err(|e| e.to_string())?;
                if source.start.is_some() && rep.gci > source.reported {
                    if rep.flags & SUB_GCP_DATA_LOST != 0 {
                        source.lost.push((source.reported, rep.gci));
                    }
                    source.reported = rep.gci;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// `node`'s subscription ended: what it reported and is not handed out yet stays good.
    fn model_gone(&mut self, node: u16) {
        if let Some(gone) = self.live.remove(&node) {
            if gone.start.is_some() && gone.reported > self.delivered {
                self.retired.push(gone);
            }
        }
    }

    /// Epochs up to `delivered` are handed out: ended subscriptions that cover none after
    /// are forgotten.
    fn model_delivered(&mut self, delivered: u64) {
        self.delivered = self.delivered.max(delivered);
        let d = self.delivered;
        self.retired.retain(|s| s.reported > d);
    }

    fn span(&self, table: usize) -> Span {
        Span {
            table,
            era: self.era,
            lo: self.begin_after,
            hi: self.delivered.max(self.begin_after),
            holes: self.holes.clone(),
        }
    }
}

/// One workload table's subscription.
#[derive(Debug)]
struct TableSub {
    which: usize,
    info: TableInfo,
    merge: Option<Merge>,
    /// Data nodes subscribed or being subscribed, with the request id.
    requests: BTreeMap<NodeId, u32>,
}

/// Why a merge ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    /// No data node subscribed and none linked.
    NoDataNode,
    /// A confirmation at an epoch already handed out (a system restart).
    WentBack(u16),
}

/// The subscriber: client 0's API node subscribed to every workload table.
#[derive(Debug)]
pub struct Subscriber {
    pub node: NodeId,
    data_nodes: Vec<NodeId>,
    partitions: PartitionMap,
    replicas: Vec<Vec<u16>>,
    tables: Vec<TableSub>,
    links_up: BTreeSet<NodeId>,
    /// When (table index, data node) is asked again at the earliest.
    retry_at: BTreeMap<(usize, NodeId), u64>,
    /// Request id → (table index, data node).
    by_request: BTreeMap<u32, (usize, NodeId)>,
    /// When each subscription was asked for (by request id): its confirmation is of that
    /// time's era, whenever it arrives.
    asked_ns: BTreeMap<u32, u64>,
    next_request_id: u32,
    /// Frames to send at the next poll (SUB_STOP_REQ of a merge that ended).
    pending: Vec<(NodeId, FrameHeader, Vec<u8>)>,
    /// When each system restart happened: a merge's era, and an acknowledgement's, is the
    /// number of them before it.
    restarts_ns: Vec<u64>,
    /// The GCI each system restart restored (by `restarts_ns`'s order; set before the checks):
    /// epochs up to it are the same in the era before and after.
    restart_gcis: Vec<u32>,
    changes: Vec<Change>,
    spans: Vec<Span>,
    pub stats: EventStats,
    /// The first violation seen as changes came.
    pub failure: Option<String>,
    /// Lines for `--trace`.
    pub log: Vec<String>,
    /// `--trace`: also log every frame and change.
    pub trace: bool,
    /// The final images are compared with the final reads (see `skip_final_images`).
    final_images: bool,
    /// `Sabotage::Events`: the first update of a row whose image is known is dropped.
    pub sabotage: bool,
}

impl Subscriber {
    /// A subscriber on API node `node` to the workload's tables, its links to `links_up` up.
    pub fn new(
        node: NodeId,
        data_nodes: Vec<NodeId>,
        partitions: &PartitionMap,
        tables: Vec<(usize, TableInfo)>,
        links_up: BTreeSet<NodeId>,
    ) -> Subscriber {
        let replicas = (0..partitions.partition_count())
            .map(|p| partitions.replicas(p).iter().map(|n| n.0).collect())
            .collect();
        Subscriber {
            node,
            data_nodes,
            partitions: partitions.clone(),
            replicas,
            tables: (tables.into_iter())
                .map(|(which, info)| TableSub {
                    which,
                    info,
                    merge: None,
                    requests: BTreeMap::new(),
                })
                .collect(),
            links_up,
            retry_at: BTreeMap::new(),
            by_request: BTreeMap::new(),
            asked_ns: BTreeMap::new(),
            next_request_id: REQUEST_ID_FIRST,
            pending: Vec::new(),
            restarts_ns: Vec::new(),
            restart_gcis: Vec::new(),
            changes: Vec::new(),
            spans: Vec::new(),
            stats: EventStats::default(),
            failure: None,
            log: Vec::new(),
            trace: false,
            final_images: true,
            sabotage: false,
        }
    }

    /// True for a frame of one of the subscriber's subscriptions.
    pub fn owns(&self, header: &FrameHeader) -> bool {
        header.request_id >= REQUEST_ID_FIRST
            && matches!(
                header.signal,
                gsn::SUB_START_CONF
                    | gsn::SUB_START_REF
                    | gsn::SUB_TABLE_DATA
                    | gsn::SUB_GCP_COMPLETE_REP
                    | gsn::SUB_STOP_CONF
            )
    }

    /// A system restart began at `now_ns`: merges made from now on are of a new era.
    pub fn system_restart(&mut self, now_ns: u64) {
        self.restarts_ns.push(now_ns);
    }

    fn era_at(&self, at_ns: u64) -> u32 {
        self.restarts_ns.iter().filter(|&&t| t <= at_ns).count() as u32
    }

    /// Sets the GCI each system restart restored: `gci_of(at_ns)` for the restart that began
    /// at `at_ns`.
    pub fn set_restart_gcis(&mut self, gci_of: impl Fn(u64) -> u32) {
        self.restart_gcis = self.restarts_ns.iter().map(|&t| gci_of(t)).collect();
    }

    /// The era in which `epoch` of era `era` was committed: an epoch the restarts since an
    /// earlier era restored is that era's (the restart brought it back, not made it again).
    fn era_of(&self, mut era: u32, epoch: u64) -> u32 {
        while era > 0 {
            let restored = self
                .restart_gcis
                .get(era as usize - 1)
                .copied()
                .unwrap_or(0);
            if (epoch >> 32) as u32 > restored {
                break;
            }
            era -= 1;
        }
        era
    }

    /// The link to `node` closed: every subscription there ends; a merge with no data node
    /// subscribed and none linked ends.
    pub fn link_down(&mut self, now_ns: u64, node: NodeId) {
        self.links_up.remove(&node);
        for t in 0..self.tables.len() {
            self.gone(now_ns, t, node);
            self.end_if_alone(now_ns, t);
        }
    }

    /// The link to `node` is up again.
    pub fn link_up(&mut self, node: NodeId) {
        self.links_up.insert(node);
    }

    /// Subscribes where a linked data node has no subscription and its retry time has come;
    /// returns the frames to send.
    pub fn poll(&mut self, now_ns: u64) -> Vec<(NodeId, FrameHeader, Vec<u8>)> {
        let mut sends = std::mem::take(&mut self.pending);
        let era = self.era_at(now_ns);
        for t in 0..self.tables.len() {
            for &node in &self.data_nodes {
                let due = self.retry_at.get(&(t, node)).is_none_or(|&at| at <= now_ns);
                if !due
                    || !self.links_up.contains(&node)
                    || self.tables[t].requests.contains_key(&node)
                {
                    continue;
                }
                let request_id = self.next_request_id;
                self.next_request_id += 1;
                self.by_request.insert(request_id, (t, node));
                self.asked_ns.insert(request_id, now_ns);
                self.retry_at.insert((t, node), now_ns + RESUBSCRIBE_NS);
                let table = &mut self.tables[t];
                table.requests.insert(node, request_id);
                let merge =
                    (table.merge).get_or_insert_with(|| Merge::new(era, self.replicas.clone()));
                merge.merge.subscribing(node.0);
                merge.live.insert(
                    node.0,
                    Source {
                        node: node.0,
                        start: None,
                        reported: 0,
                        lost: Vec::new(),
                    },
                );
                let mut payload = Vec::new();
                SubStartReq {
                    table_id: table.info.table_id,
                    table_version: table.info.table_version,
                }
                .encode(&mut payload);
                let header = FrameHeader {
                    signal: gsn::SUB_START_REQ,
                    receiver_block: block::SUMA,
                    sender_block: block::API,
                    request_id,
                };
                sends.push((node, header, payload));
                self.stats.subscriptions += 1;
                self.log.push(format!(
                    "events: subscribing to table {} at data node {node} (request {request_id:#x})",
                    table.which
                ));
            }
        }
        sends
    }

    /// A frame of a subscription from data node `from`.
    pub fn on_frame(&mut self, now_ns: u64, from: NodeId, header: &FrameHeader, payload: &[u8]) {
        let Some(&(t, node)) = self.by_request.get(&header.request_id) else {
            return;
        };
        if node != from || self.tables[t].requests.get(&node) != Some(&header.request_id) {
            return;
        }
        if header.signal == gsn::SUB_START_REF {
            return self.refused(now_ns, t, node, payload);
        }
        if header.signal == gsn::SUB_STOP_CONF {
            return;
        }
        if self.trace && header.signal != gsn::SUB_TABLE_DATA {
            let what = match header.signal {
                gsn::SUB_START_CONF => format!("{:x?}", SubStartConf::decode(payload)),
                _ => format!("{:x?}", SubGcpCompleteRep::decode(payload)),
            };
            self.log.push(format!(
                "events: table {}: from data node {node}: {what}",
                self.tables[t].which
            ));
        }
        let which = self.tables[t].which;
        // A confirmation is of the era its subscription was asked in; every other frame is of
        // the era of the confirmation before it on its link. (Taken as of the era it arrived
        // in, a frame a crashed node sent before a cluster crash, delivered late by a slow
        // link after the system restart began, moved a merge into the new era, which then
        // counted the old era's epochs handed out as covering the new era's: seed 0x33000ad2.)
        let asked = self.asked_ns.get(&header.request_id).copied();
        let era_now = match (header.signal, asked) {
            (gsn::SUB_START_CONF, Some(asked)) => self.era_at(asked),
            _ => 0,
        };
        let Some(merge) = self.tables[t].merge.as_mut() else {
            return;
        };
        if let Err(e) = merge.model_frame(node.0, header.signal, payload) {
            return self.fail(format!(
                "events: data node {node} sent a malformed frame (signal {}): {e}",
                header.signal
            ));
        }
        if let Err(e) = merge.merge.on_frame(node.0, header.signal, payload) {
            return self.fail(format!(
                "events: EventMerge refused data node {node}'s frame (signal {}): {e}",
                header.signal
            ));
        }
        // The cluster went back (EventMerge::went_back(), and the API's operation ends with
        // 4009) only when a system restart came since the merge was made: a confirmation comes
        // only on a subscription asked for since its link last came up. One that comes late
        // (a slow link, a hung node), after the merge handed out later epochs without it, is
        // no restart.
        let restarted = era_now > merge.era;
        match merge.merge.went_back() {
            Some(back) if restarted => return self.end_merge(now_ns, t, Ended::WentBack(back)),
            Some(back) => {
                let what = format!(
                    "events: table {which}: after data node {node}'s frame (signal {}), EventMerge::went_back() said data node {back} went back below the epochs handed out (through {:#x}): the operation would end with 4009, though no system restart came (subscriptions {:x?}, ended {:x?})",
                    header.signal, merge.delivered, merge.live, merge.retired
                );
                return self.fail(what);
            }
            None if restarted => {
                if header.signal == gsn::SUB_START_CONF && merge.begun {
                    self.stats.merges_across_restart += 1;
                    self.log.push(format!(
                        "events: table {which}: data node {node} confirmed after a system restart, and the merge goes on (delivered {:#x})",
                        merge.delivered
                    ));
                }
                // Every frame since the restart is of the new era (the links all closed
                // with the cluster), and the merge goes on: what it hands out from now on is
                // of that era (seed 0xfa02230: a merge made between two system restarts got
                // its first confirmation after the second, and handed out only its changes).
                merge.era = era_now;
            }
            None => {}
        }
        if !merge.begun {
            if !merge.merge.begin() {
                return;
            }
            merge.begun = true;
            let first = (merge.live.values())
                .filter_map(|s| s.start)
                .max()
                .unwrap_or(1);
            merge.begin_after = first - 1;
            merge.model_delivered(first - 1);
            self.stats.merges_begun += 1;
            if merge.merge.delivered() != merge.delivered {
                let library = merge.merge.delivered();
                let what = format!(
                    "events: table {which}: begin() set delivered to {library:#x}, the model to {:#x}",
                    merge.delivered
                );
                return self.fail(what);
            }
            self.log.push(format!(
                "events: table {which}: the subscription began; every change after epoch {:#x} is handed out",
                first - 1
            ));
        }
        self.take(t);
    }

    fn refused(&mut self, now_ns: u64, t: usize, node: NodeId, payload: &[u8]) {
        let code = match Refusal::decode(payload) {
            Ok(r) => r.code,
            Err(e) => return self.fail(format!("events: SUB_START_REF from {node}: {e}")),
        };
        *self.stats.refusals.entry(code).or_default() += 1;
        self.log.push(format!(
            "events: data node {node} refused the subscription to table {} with {code}",
            self.tables[t].which
        ));
        if !REFUSALS_EXPECTED.contains(&code) {
            return self.fail(format!(
                "events: data node {node} refused the subscription to table {} with {code}",
                self.tables[t].which
            ));
        }
        self.gone(now_ns, t, node);
        self.end_if_alone(now_ns, t);
    }

    /// Table `t`'s subscription at `node` ended: the merge no longer waits for it (what it
    /// reported stays good), and it is asked again later.
    fn gone(&mut self, now_ns: u64, t: usize, node: NodeId) {
        let table = &mut self.tables[t];
        let Some(request_id) = table.requests.remove(&node) else {
            return;
        };
        self.by_request.remove(&request_id);
        self.asked_ns.remove(&request_id);
        self.retry_at.insert((t, node), now_ns + RESUBSCRIBE_NS);
        let Some(merge) = table.merge.as_mut() else {
            return;
        };
        merge.model_gone(node.0);
        merge.merge.gone(node.0);
        self.take(t);
    }

    /// With no data node of table `t`'s merge confirmed once it began (or, before, none
    /// subscribed and none linked), the merge ends (the API's operation ends with 4009).
    fn end_if_alone(&mut self, now_ns: u64, t: usize) {
        let alone = (self.tables[t].merge.as_ref()).is_some_and(|m| {
            (m.begun && !m.merge.has_confirmed())
                || (m.merge.nodes().next().is_none() && self.links_up.is_empty())
        });
        if alone {
            self.end_merge(now_ns, t, Ended::NoDataNode);
        }
    }

    /// Table `t`'s merge ends: the subscriptions still in place are stopped, and a new merge
    /// is made a while later on every data node linked then, as an application would.
    fn end_merge(&mut self, now_ns: u64, t: usize, why: Ended) {
        let table = &mut self.tables[t];
        let Some(merge) = table.merge.take() else {
            return;
        };
        for (node, request_id) in std::mem::take(&mut table.requests) {
            self.by_request.remove(&request_id);
            self.asked_ns.remove(&request_id);
            if self.links_up.contains(&node) {
                let header = FrameHeader {
                    signal: gsn::SUB_STOP_REQ,
                    receiver_block: block::SUMA,
                    sender_block: block::API,
                    request_id,
                };
                self.pending.push((node, header, Vec::new()));
            }
        }
        for &n in &self.data_nodes {
            self.retry_at.insert((t, n), now_ns + RESUBSCRIBE_NS);
        }
        let which = table.which;
        match why {
            Ended::NoDataNode => self.stats.merges_ended += 1,
            Ended::WentBack(_) => self.stats.merges_went_back += 1,
        }
        if merge.begun {
            self.spans.push(merge.span(which));
        }
        self.log.push(format!(
            "events: table {which}: the subscription ends after epoch {:#x} ({why:?})",
            merge.delivered
        ));
    }

    /// Hands out table `t`'s complete epochs and checks them against the model as they come.
    fn take(&mut self, t: usize) {
        let which = self.tables[t].which;
        let def = self.tables[t].info.def.clone();
        let partitions = &self.partitions;
        let fragment_of = |key: i32| fragment_of(partitions, key);
        let Some(merge) = self.tables[t].merge.as_mut() else {
            return;
        };
        if !merge.begun {
            return;
        }
        let from = merge.delivered;
        let through = merge.complete_through().filter(|&through| through > from);
        // Each fragment's first epoch of (from, through] that no subscription of its
        // replicas, live or ended, covers.
        let mut expected = Vec::new();
        let mut unnamed = Vec::new();
        if let Some(through) = through {
            for (p, replicas) in self.replicas.iter().enumerate() {
                let runs = merge.uncovered(replicas, from, through);
                if let Some(&(first, _)) = runs.first() {
                    expected.push((first, p as u32));
                }
                if runs.len() > 1 {
                    unnamed.push((p, runs));
                }
            }
        }
        expected.sort_unstable();
        let mut out = Vec::new();
        merge.merge.take_complete(&mut out);
        let mut failure = None;
        let mut log = Vec::new();
        for (p, runs) in unnamed {
            self.stats.gaps_unnamed += 1;
            log.push(format!(
                "events: table {which}: fragment {p} was uncovered in epochs {runs:x?} of ({from:#x}, {:#x}]: one Inconsistent names the first",
                through.unwrap_or(from)
            ));
        }
        let said: Vec<(u64, u32)> = (out.iter())
            .filter_map(|m| match *m {
                Merged::Inconsistent { epoch, fragment } => Some((epoch, fragment)),
                Merged::Change { .. } => None,
            })
            .collect();
        if said != expected {
            failure.get_or_insert(format!(
                "events: table {which}: epochs ({from:#x}, {:#x}] handed out with Inconsistent (epoch, fragment) {said:x?}, but the model expects {expected:x?} (subscriptions {:x?}, ended {:x?})",
                through.unwrap_or(from), merge.live, merge.retired
            ));
        }
        let through = through.unwrap_or(from);
        // Epoch order, each Inconsistent before the changes of its epoch.
        let mut last = (0, 0);
        for m in out {
            let at = match &m {
                Merged::Inconsistent { epoch, .. } => (*epoch, 0),
                Merged::Change { epoch, .. } => (*epoch, 1),
            };
            if at < last || at.0 <= from || at.0 > through {
                failure.get_or_insert(format!(
                    "events: table {which}: {m:x?} handed out out of order or outside ({from:#x}, {through:#x}] (after {last:x?}; begin() said handing out starts after {:#x})",
                    merge.begin_after
                ));
                continue;
            }
            last = at;
            match m {
                Merged::Inconsistent { epoch, fragment } => {
                    self.stats.inconsistent += 1;
                    // The fragment's changes from here to the range's end may be missing
                    // (a later uncovered run of the range is not named).
                    merge.holes.push((fragment, epoch, through));
                    let u = merge.uncertain.entry(fragment).or_default();
                    *u = (*u).max(through);
                    merge.rows.retain(|_, (f, _)| *f != fragment);
                    if self.trace {
                        log.push(format!(
                            "events: table {which}: Inconsistent from epoch {epoch:#x} (fragment {fragment}) through {through:#x}"
                        ));
                    }
                }
                Merged::Change { epoch, change } => {
                    self.stats.changes += 1;
                    let image = |bytes: &[u8]| -> Result<Option<(i32, i64)>, String> {
                        if bytes.is_empty() {
                            return Ok(None);
                        }
                        let mut values = Vec::new();
                        let mut r = Reader::new(bytes, "SUB_TABLE_DATA row");
                        def.decode_row_into(&mut r, &mut values)
                            .and_then(|()| r.finish())
                            .map_err(|e| e.to_string())?;
                        match values.as_slice() {
                            [Value::Int32(id), Value::Int64(v)] => Ok(Some((*id, *v))),
                            other => Err(format!("a row of {other:?}")),
                        }
                    };
                    let (before, after) = match (image(&change.before), image(&change.after)) {
                        (Ok(b), Ok(a)) => (b, a),
                        (Err(e), _) | (_, Err(e)) => {
                            failure.get_or_insert(format!("events: table {which}: {e}"));
                            continue;
                        }
                    };
                    let Some(key) = after.or(before).map(|(id, _)| id) else {
                        continue;
                    };
                    let fragment = change.fragment;
                    if fragment_of(key) != fragment {
                        failure.get_or_insert(format!(
                            "events: table {which}: key {key}'s change in epoch {epoch:#x} came as fragment {fragment}, but the key is of fragment {}",
                            fragment_of(key)
                        ));
                    }
                    let covered = (self.replicas.get(fragment as usize))
                        .is_some_and(|r| merge.sources_of(r).any(|s| s.covers(epoch)));
                    if !covered {
                        failure.get_or_insert(format!(
                            "events: table {which}: key {key}'s change in epoch {epoch:#x} (fragment {fragment}) handed out, though no subscription of a replica of the fragment covered the epoch (subscriptions {:x?}, ended {:x?})",
                            merge.live, merge.retired
                        ));
                    }
                    let kind_fits = match change.kind {
                        ChangeKind::Insert => before.is_none() && after.is_some(),
                        ChangeKind::Update => before.is_some() && after.is_some(),
                        ChangeKind::Delete => before.is_some() && after.is_none(),
                    };
                    let (before, after) = (before.map(|(_, v)| v), after.map(|(_, v)| v));
                    let uncertain = merge.uncertain.get(&fragment).is_some_and(|&u| epoch <= u);
                    if self.sabotage
                        && change.kind == ChangeKind::Update
                        && !uncertain
                        && merge.rows.contains_key(&key)
                    {
                        self.sabotage = false;
                        continue;
                    }
                    if !kind_fits || epoch < merge.last_epoch {
                        failure.get_or_insert(format!(
                            "events: table {which}: key {key}: {:?} {before:?} -> {after:?} in epoch {epoch:#x}, after epoch {:#x} was handed out",
                            change.kind, merge.last_epoch
                        ));
                    }
                    merge.last_epoch = epoch;
                    if uncertain {
                        merge.rows.remove(&key);
                    } else {
                        if let Some(&(_, known)) = merge.rows.get(&key) {
                            if known != before {
                                failure.get_or_insert(format!(
                                    "events: table {which}: key {key}: a {:?} from {before:?} to {after:?} in epoch {epoch:#x}, but the changes handed out before left {known:?} (a change lost or handed out twice)",
                                    change.kind
                                ));
                            }
                        }
                        merge.rows.insert(key, (fragment, after));
                    }
                    if self.trace {
                        log.push(format!(
                            "events: table {which}: key {key}: {:?} {before:?} -> {after:?} in epoch {epoch:#x} (fragment {fragment})",
                            change.kind
                        ));
                    }
                    self.changes.push(Change {
                        table: which,
                        key,
                        era: merge.era,
                        epoch,
                        before,
                        after,
                    });
                }
            }
        }
        // Ended subscriptions count for the changes above; then those that cover no epoch
        // after the ones handed out are forgotten.
        merge.model_delivered(through);
        if merge.merge.delivered() != merge.delivered {
            failure.get_or_insert(format!(
                "events: table {which}: take_complete handed out through {:#x}, the model through {:#x} (subscriptions {:x?}, ended {:x?})",
                merge.merge.delivered(), merge.delivered, merge.live, merge.retired
            ));
        }
        self.log.extend(log);
        if let Some(what) = failure {
            self.fail(what);
        }
    }

    fn fail(&mut self, what: String) {
        self.failure.get_or_insert(what);
    }

    /// True once every table's subscription runs and has handed out epoch `epoch`.
    pub fn caught_up(&self, epoch: u64) -> bool {
        (self.tables.iter())
            .all(|t| (t.merge.as_ref()).is_some_and(|m| m.begun && m.delivered >= epoch))
    }

    /// The final images are not compared: the subscriber could not hand out the last epochs.
    pub fn skip_final_images(&mut self) {
        self.final_images = false;
    }

    /// Where each table's subscription is, for a failure's message.
    pub fn describe(&self) -> String {
        let tables: Vec<String> = (self.tables.iter())
            .map(|t| match &t.merge {
                None => format!("table {}: no subscription", t.which),
                Some(m) => format!(
                    "table {}: begun {}, handed out ({:#x}, {:#x}], subscriptions {:x?}, ended {:x?}, subscribed at {:?}",
                    t.which,
                    m.begun,
                    m.begin_after,
                    m.delivered,
                    m.live,
                    m.retired,
                    t.requests.keys().collect::<Vec<_>>()
                ),
            })
            .collect();
        format!("{tables:?}, links up {:?}", self.links_up)
    }

    /// The end-of-run checks against what the clients know (see the module's doc).
    pub fn check(&mut self, shared: &Shared) -> Result<(), String> {
        if let Some(what) = self.failure.take() {
            return Err(what);
        }
        // The open merges' spans count as closed here.
        for t in &self.tables {
            if let Some(m) = t.merge.as_ref().filter(|m| m.begun) {
                self.spans.push(m.span(t.which));
            }
        }
        self.check_duplicates()?;
        self.check_history(shared)?;
        self.check_ledger(shared)?;
        if !self.final_images {
            return Ok(());
        }
        self.check_final_rows(shared)
    }

    /// True when a span covers `table`'s row `key` in `epoch` of era `era`.
    fn covered(&self, table: usize, era: u32, key: i32, epoch: u64) -> bool {
        let fragment = fragment_of(&self.partitions, key);
        let era = self.era_of(era, epoch);
        (self.spans.iter())
            .any(|s| self.era_of(s.era, epoch) == era && s.covers(table, fragment, epoch))
    }
    /// Changes of `table`'s row `key`, by (era, epoch).
    fn changes_of(&self, table: usize, key: i32) -> impl Iterator<Item = &Change> + '_ {
        (self.changes.iter()).filter(move |c| c.table == table && c.key == key)
    }

    /// Registers, set elements and ledger rows carry values written once: none of their
    /// changes is handed out twice.
    fn check_duplicates(&self) -> Result<(), String> {
        let mut seen = BTreeSet::new();
        for c in self.changes.iter().filter(|c| c.table != BANK) {
            if !seen.insert(c) {
                return Err(format!("events: a change handed out twice: {c:?}"));
            }
        }
        Ok(())
    }

    /// `what`, acknowledged (`Some(gci)`) or failed (`None`) or unknown, written `value` to
    /// `table`'s row `key`: the changes that wrote it.
    fn check_write(
        &mut self,
        what: &str,
        table: usize,
        key: i32,
        value: i64,
        outcome: WriteOutcome,
    ) -> Result<(), String> {
        let found: Vec<(u32, u64)> = self
            .changes_of(table, key)
            .filter(|c| c.after == Some(value))
            .map(|c| (self.era_of(c.era, c.epoch), c.epoch))
            .collect();
        match outcome {
            WriteOutcome::Failed if !found.is_empty() => Err(format!(
                "events: {what} failed, yet its change was handed out in (era, epoch) {found:x?}"
            )),
            _ if found.len() > 1 => Err(format!(
                "events: {what}: its change was handed out {} times: {found:x?}",
                found.len()
            )),
            WriteOutcome::Acknowledged { era, gci } => {
                let era = self.era_of(era, gci);
                if !found.is_empty() && found != [(era, gci)] {
                    return Err(format!(
                        "events: {what} committed in epoch {gci:#x} (era {era}), but its change was handed out in (era, epoch) {found:x?}"
                    ));
                }
                if self.covered(table, era, key, gci) {
                    if found.is_empty() {
                        return Err(format!(
                            "events: {what} committed in epoch {gci:#x} (era {era}), which the subscription covered, but its change was never handed out"
                        ));
                    }
                    self.stats.writes_found += 1;
                } else {
                    self.stats.writes_uncovered += 1;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Register writes (unique values) and set inserts and deletes.
    fn check_history(&mut self, shared: &Shared) -> Result<(), String> {
        for r in &shared.history {
            let outcome = match (r.outcome, r.gci) {
                (Outcome::Ok(_), Some(gci)) => WriteOutcome::Acknowledged {
                    era: self.era_at(r.complete_ns),
                    gci,
                },
                (Outcome::Fail, _) => WriteOutcome::Failed,
                _ => WriteOutcome::Unknown,
            };
            let key = i32::from(r.key);
            match (r.table, r.access) {
                (REGISTERS, Access::Write(v)) => {
                    let what = format!("client {}'s write of {v:#x} to register {key}", r.client);
                    self.check_write(&what, REGISTERS, key, v, outcome)?;
                }
                (SETS, Access::Insert | Access::Delete) => {
                    let WriteOutcome::Acknowledged { era, gci } = outcome else {
                        continue;
                    };
                    if !self.covered(SETS, era, key, gci) {
                        self.stats.writes_uncovered += 1;
                        continue;
                    }
                    let insert = r.access == Access::Insert;
                    let era = self.era_of(era, gci);
                    let found = self.changes_of(SETS, key).any(|c| {
                        self.era_of(c.era, c.epoch) == era
                            && c.epoch == gci
                            && c.before.is_none() == insert
                    });
                    if !found {
                        return Err(format!(
                            "events: client {}'s {:?} of set element {key} committed in epoch {gci:#x} (era {era}), which the subscription covered, but no such change was handed out in it",
                            r.client, r.access
                        ));
                    }
                    self.stats.writes_found += 1;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Each transfer's ledger row (a unique id).
    fn check_ledger(&mut self, shared: &Shared) -> Result<(), String> {
        for t in &shared.transfers {
            let outcome = match (t.outcome, t.gci) {
                (TransferOutcome::Acknowledged(at), Some(gci)) => WriteOutcome::Acknowledged {
                    era: self.era_at(at),
                    gci,
                },
                (TransferOutcome::Failed, _) => WriteOutcome::Failed,
                _ => WriteOutcome::Unknown,
            };
            let what = format!("transfer {:#x}'s ledger row", t.id);
            self.check_write(&what, LEDGER, t.id, t.ledger_value(), outcome)?;
        }
        Ok(())
    }

    /// Each key's image, followed through the last span of each table's open merge, is what
    /// the final reads found.
    fn check_final_rows(&mut self, shared: &Shared) -> Result<(), String> {
        let mut matched = 0;
        for t in &self.tables {
            let Some(merge) = t.merge.as_ref().filter(|m| m.begun) else {
                continue;
            };
            for (&key, &(_, image)) in &merge.rows {
                let final_value = match t.which {
                    BANK | REGISTERS => match shared.final_rows.get(&(t.which, key)) {
                        Some(&v) => Some(v),
                        None => continue,
                    },
                    SETS => shared.final_rows.get(&(SETS, key)).copied(),
                    LEDGER => match shared.ledger_rows.get(&key) {
                        Some(&v) => Some(v),
                        // Read only for transfers of the ledger's list: a row not read.
                        None if !shared.transfers.iter().any(|x| x.id == key) => continue,
                        None => None,
                    },
                    _ => continue,
                };
                if final_value != image {
                    return Err(format!(
                        "events: table {}: key {key}: the changes handed out leave {image:?}, the final reads found {final_value:?} (subscription: {})",
                        t.which,
                        self.describe()
                    ));
                }
                matched += 1;
            }
        }
        self.stats.keys_matched = matched;
        Ok(())
    }
}

/// What a client knows of a write.
#[derive(Clone, Copy, Debug)]
enum WriteOutcome {
    Acknowledged { era: u32, gci: u64 },
    Failed,
    Unknown,
}

/// The fragment of a workload table's row with id `key` (its partition).
fn fragment_of(partitions: &PartitionMap, key: i32) -> u32 {
    let mut bytes = Vec::new();
    Value::Int32(key).encode(&mut Writer::new(&mut bytes));
    partitions.partition_of(key_hash(&bytes))
}
