//! The event API's signals (NDB's SUMA block): an API node subscribes to a table's committed
//! changes on every data node, and each data node sends the changes committed on its replicas,
//! epoch by epoch, each epoch closed by SUB_GCP_COMPLETE_REP once every change of it (and of
//! every epoch before) has been sent.
//!
//! ```text
//!  API ─SUB_START_REQ(table)─► SUMA ─SUB_START_CONF(start epoch)─► API       (request id = the
//!      ◄─SUB_TABLE_DATA(epoch, fragment, change)──                            subscription's,
//!      ◄─SUB_GCP_COMPLETE_REP(epoch)─────────────   once per completed epoch   for every frame)
//!  API ─SUB_STOP_REQ──────────► SUMA ─SUB_STOP_CONF─► API                     (ends the stream)
//! ```
//!
//! Every replica of a fragment sends its changes; the API keeps one replica's per fragment and
//! epoch (`rndb_api::event`). A refusal is SUB_START_REF (`signals::Refusal`).

use std::collections::BTreeMap;

use crate::codec::{DecodeError, Reader, Writer};

/// SUB_START_REQ: subscribe to the committed changes of a table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubStartReq {
    pub table_id: u32,
    pub table_version: u32,
}

impl SubStartReq {
    pub fn encode(&self, out: &mut Vec<u8>) {
        Writer::new(out).u32(self.table_id).u32(self.table_version);
    }
    pub fn decode(buf: &[u8]) -> Result<SubStartReq, DecodeError> {
        let mut r = Reader::new(buf, "SUB_START_REQ");
        let req = SubStartReq {
            table_id: r.u32()?,
            table_version: r.u32()?,
        };
        r.finish()?;
        Ok(req)
    }
}

/// SUB_START_CONF: the subscription is in place; every change committed on this node in
/// `start_gci` or later is sent. `restart` numbers the system restart the cluster last
/// started from (its sysfiles' restart history): a subscriber that sees it change knows the
/// cluster went back to its last saved epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubStartConf {
    pub start_gci: u64,
    pub restart: u32,
}

impl SubStartConf {
    pub fn encode(&self, out: &mut Vec<u8>) {
        Writer::new(out).u64(self.start_gci).u32(self.restart);
    }
    pub fn decode(buf: &[u8]) -> Result<SubStartConf, DecodeError> {
        let mut r = Reader::new(buf, "SUB_START_CONF");
        let conf = SubStartConf {
            start_gci: r.u64()?,
            restart: r.u32()?,
        };
        r.finish()?;
        Ok(conf)
    }
}

/// What a committed change did to its row (NDB's TableEvent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    Insert,
    Update,
    Delete,
}

impl ChangeKind {
    fn code(self) -> u8 {
        match self {
            ChangeKind::Insert => 1,
            ChangeKind::Update => 2,
            ChangeKind::Delete => 3,
        }
    }
}

/// SUB_TABLE_DATA: one committed change of a row of the subscribed table, in epoch `gci`, on
/// fragment `fragment` of this node. `after` is the row's new image (insert, update), `before`
/// its image before (update, delete); each all columns in column order, as
/// `schema::encode_values` writes them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubTableData<'a> {
    pub gci: u64,
    pub fragment: u32,
    pub kind: ChangeKind,
    pub after: &'a [u8],
    pub before: &'a [u8],
}

impl<'a> SubTableData<'a> {
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer::new(out);
        w.u64(self.gci).u32(self.fragment).u8(self.kind.code());
        match self.kind {
            ChangeKind::Insert => w.bytes16(self.after),
            ChangeKind::Update => w.bytes16(self.after).bytes16(self.before),
            ChangeKind::Delete => w.bytes16(self.before),
        };
    }
    pub fn decode(buf: &'a [u8]) -> Result<SubTableData<'a>, DecodeError> {
        let mut r = Reader::new(buf, "SUB_TABLE_DATA");
        let gci = r.u64()?;
        let fragment = r.u32()?;
        let (kind, after, before) = match r.u8()? {
            1 => (ChangeKind::Insert, r.bytes16()?, &[][..]),
            2 => (ChangeKind::Update, r.bytes16()?, r.bytes16()?),
            3 => (ChangeKind::Delete, &[][..], r.bytes16()?),
            other => return Err(r.error(format!("unknown change kind {other}"))),
        };
        r.finish()?;
        Ok(SubTableData {
            gci,
            fragment,
            kind,
            after,
            before,
        })
    }
}

/// SUB_GCP_COMPLETE_REP's flag: this node dropped changes of the epochs since its last report
/// (MaxBufferedEpochBytes was reached): it vouches for none of them.
pub const SUB_GCP_DATA_LOST: u32 = 1;

/// SUB_GCP_COMPLETE_REP: every change this node committed in epoch `gci` or before has been
/// sent (unless `flags` has [`SUB_GCP_DATA_LOST`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubGcpCompleteRep {
    pub gci: u64,
    pub flags: u32,
}

impl SubGcpCompleteRep {
    pub fn encode(&self, out: &mut Vec<u8>) {
        Writer::new(out).u64(self.gci).u32(self.flags);
    }
    pub fn decode(buf: &[u8]) -> Result<SubGcpCompleteRep, DecodeError> {
        let mut r = Reader::new(buf, "SUB_GCP_COMPLETE_REP");
        let rep = SubGcpCompleteRep {
            gci: r.u64()?,
            flags: r.u32()?,
        };
        r.finish()?;
        Ok(rep)
    }
}

/// A change as a subscriber holds it until its epoch is handed out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldChange {
    pub fragment: u32,
    pub kind: ChangeKind,
    pub after: Vec<u8>,
    pub before: Vec<u8>,
}

impl HeldChange {
    fn bytes(&self) -> usize {
        self.after.len() + self.before.len() + 32
    }
}

/// What [`EventMerge::take_complete`] hands out, in epoch order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Merged {
    /// A committed change, from one replica of its fragment.
    Change { epoch: u64, change: HeldChange },
    /// At `epoch` no data node covered the fragment: changes of it may be missing there (and
    /// in later epochs handed out in the same call: only the first uncovered epoch of each
    /// fragment is named). It comes before the changes of `epoch` and later epochs.
    Inconsistent { epoch: u64, fragment: u32 },
}

/// One data node's subscription, as the subscriber tracks it.
#[derive(Clone, Debug, Default)]
struct Source {
    node: u16,
    /// Its SUB_START_CONF came: the first epoch it covers.
    start_gci: Option<u64>,
    /// The newest epoch it covers so far (before its first report, the one before its start).
    reported: u64,
    /// The newest epoch it sent SUB_GCP_COMPLETE_REP for (0: none yet).
    last_report: u64,
    /// When it was asked: the newest epoch handed out or reported by any subscription. Each
    /// was complete cluster-wide, so a live node starts past it.
    asked_after: u64,
    /// Epoch spans (after, through] it reported with its changes dropped.
    lost: Vec<(u64, u64)>,
    /// It ended the subscription because the table was dropped there, after reporting the
    /// epochs of its last changes: it holds no epoch back any more.
    dropped: bool,
}

impl Source {
    /// True when it sent every change it committed in `epoch`.
    fn covers(&self, epoch: u64) -> bool {
        self.start_gci.is_some_and(|s| s <= epoch)
            && epoch <= self.reported
            && !self.lost.iter().any(|&(a, b)| a < epoch && epoch <= b)
    }

    /// The epoch spans [first, last] it covers.
    fn spans(&self) -> Vec<(u64, u64)> {
        let Some(start) = self.start_gci else {
            return Vec::new();
        };
        let mut spans = vec![(start, self.reported)];
        for &(after, through) in &self.lost {
            spans = (spans.into_iter())
                .flat_map(|(a, b)| [(a, b.min(after)), (a.max(through.saturating_add(1)), b)])
                .collect();
        }
        spans.retain(|(a, b)| a <= b);
        spans
    }
}

/// The subscriber's side of the event protocol, without I/O: it takes each data node's
/// frames and hands out complete epochs. Every replica of a fragment sends its changes; epochs
/// are handed out once every data node subscribed has reported them complete (its
/// SUB_GCP_COMPLETE_REP), with, for each fragment, the changes of the first of its replicas
/// (in the partition map's order) that covered the epoch, or still covers it after it failed
/// (what it reported before it failed stays good). An epoch span in which no replica of a
/// fragment covered it is reported by a [`Merged::Inconsistent`] at its first epoch, whether
/// or not any change of the span came. Shared by `rndb_api`'s event operations and the
/// simulator's subscriber, so that the simulator checks what the library runs.
#[derive(Clone, Debug)]
pub struct EventMerge {
    /// Each partition's replicas (data node ids), as the partition map lists them.
    replicas: Vec<Vec<u16>>,
    /// Subscriptions in place or being made, by node.
    sources: BTreeMap<u16, Source>,
    /// Subscriptions that ended (their node failed, or its link), kept while epochs they
    /// covered are not all handed out.
    retired: Vec<Source>,
    /// Changes by epoch, then by the data node that sent them.
    epochs: BTreeMap<u64, BTreeMap<u16, Vec<HeldChange>>>,
    bytes: usize,
    /// Epochs up to this one are handed out (or came before the subscription began).
    delivered: u64,
    /// `begin` returned true.
    begun: bool,
    /// The system restart the first confirmation named.
    restart: Option<u32>,
    /// See [`EventMerge::went_back`].
    went_back: Option<u16>,
}

impl EventMerge {
    /// A subscription over a cluster whose partition `p` has replicas `replicas[p]`.
    pub fn new(replicas: Vec<Vec<u16>>) -> EventMerge {
        EventMerge {
            replicas,
            sources: BTreeMap::new(),
            retired: Vec::new(),
            epochs: BTreeMap::new(),
            bytes: 0,
            delivered: 0,
            begun: false,
            restart: None,
            went_back: None,
        }
    }

    /// SUB_START_REQ went to `node`.
    pub fn subscribing(&mut self, node: u16) {
        // Epochs some node reported complete (not the one before a start, which a fresh
        // confirmation counts as reported without any report).
        let reported = (self.sources.values().chain(&self.retired))
            .map(|s| s.last_report.min(s.reported))
            .max()
            .unwrap_or(0);
        let source = Source {
            node,
            asked_after: self.delivered.max(reported),
            ..Source::default()
        };
        self.sources.insert(node, source);
    }

    /// True while `node` is subscribed or being subscribed.
    pub fn is_subscribed(&self, node: u16) -> bool {
        self.sources.contains_key(&node)
    }

    /// Nodes subscribed or being subscribed.
    pub fn nodes(&self) -> impl Iterator<Item = u16> + '_ {
        self.sources.keys().copied()
    }

    /// Nodes whose subscription covers every epoch not handed out yet (confirmed, starting
    /// at or before the next one): the loss of any one other node leaves no gap they cover.
    pub fn covering(&self) -> impl Iterator<Item = u16> + '_ {
        (self.sources.values())
            .filter(|s| {
                (s.start_gci).is_some_and(|start| start <= self.delivered.saturating_add(1))
            })
            .map(|s| s.node)
    }

    /// A node subscribed again after [`EventMerge::begin`] whose subscription starts at or
    /// below an epoch complete when it was asked (handed out, or reported by a node): the
    /// cluster went back to an older epoch (a system restart restores the last one saved),
    /// and this subscription's epochs cannot go on.
    pub fn went_back(&self) -> Option<u16> {
        self.went_back
    }

    /// Bytes of changes held.
    pub fn held_bytes(&self) -> usize {
        self.bytes
    }

    /// The newest epoch handed out.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// Hands out nothing of the epochs through `epoch`: a later start, where a subscriber
    /// that merges several subscriptions' epochs begins them all.
    pub fn skip_through(&mut self, epoch: u64) {
        self.delivered = self.delivered.max(epoch);
        self.drop_delivered();
    }

    /// True once every node subscribed at the start has confirmed and reported the epoch its
    /// subscription was made in (by then every data node commits in a later one: a change
    /// committed after this is handed out). Sets where handing out begins: changes of earlier
    /// epochs, which not every node covered, are dropped.
    pub fn begin(&mut self) -> bool {
        let Some(first) = self.sources.values().map(|s| s.start_gci).max() else {
            return false;
        };
        let Some(first) = first.filter(|_| self.sources.values().all(|s| s.start_gci.is_some()))
        else {
            return false;
        };
        if self.sources.values().any(|s| s.last_report < first - 1) {
            return false;
        }
        self.delivered = self.delivered.max(first - 1);
        self.drop_delivered();
        self.begun = true;
        true
    }

    /// Drops the changes of epochs handed out (late copies from other replicas) and the ended
    /// subscriptions no epoch to come needs.
    fn drop_delivered(&mut self) {
        while let Some(entry) = self.epochs.first_entry() {
            if *entry.key() > self.delivered {
                break;
            }
            let bytes: usize = entry
                .remove()
                .values()
                .flatten()
                .map(HeldChange::bytes)
                .sum();
            self.bytes = self.bytes.saturating_sub(bytes);
        }
        let delivered = self.delivered;
        self.retired.retain(|s| s.reported > delivered);
        for s in self.sources.values_mut() {
            s.lost.retain(|&(_, through)| through > delivered);
        }
    }

    /// One frame of `node`'s stream: SUB_START_CONF, SUB_TABLE_DATA or SUB_GCP_COMPLETE_REP
    /// (others are the caller's). Returns the bytes of changes it now holds.
    pub fn on_frame(
        &mut self,
        node: u16,
        signal: u16,
        payload: &[u8],
    ) -> Result<usize, DecodeError> {
        use crate::gsn;
        let Some(source) = self.sources.get_mut(&node) else {
            return Ok(self.bytes);
        };
        match signal {
            gsn::SUB_START_CONF => {
                let conf = SubStartConf::decode(payload)?;
                let start = conf.start_gci.max(1);
                source.start_gci = Some(start);
                source.reported = start - 1;
                // Every epoch complete when it was asked was complete on every node, which
                // then committed in a later one: a live node starts past it. A system restart
                // since the first confirmation (its number changed) went back to the last
                // saved epoch, whatever the start says.
                let restarted = *self.restart.get_or_insert(conf.restart) != conf.restart;
                if restarted || (self.begun && start <= source.asked_after) {
                    self.went_back.get_or_insert(node);
                }
            }
            gsn::SUB_TABLE_DATA => {
                let data = SubTableData::decode(payload)?;
                if data.gci > self.delivered && source.start_gci.is_some_and(|s| data.gci >= s) {
                    let change = HeldChange {
                        fragment: data.fragment,
                        kind: data.kind,
                        after: data.after.to_vec(),
                        before: data.before.to_vec(),
                    };
                    self.bytes += change.bytes();
                    let held = self.epochs.entry(data.gci).or_default();
                    held.entry(node).or_default().push(change);
                }
            }
            gsn::SUB_GCP_COMPLETE_REP => {
                let rep = SubGcpCompleteRep::decode(payload)?;
                source.last_report = source.last_report.max(rep.gci);
                if rep.gci > source.reported && source.start_gci.is_some() {
                    if rep.flags & SUB_GCP_DATA_LOST != 0 {
                        source.lost.push((source.reported, rep.gci));
                    }
                    source.reported = rep.gci;
                }
            }
            other => {
                return Err(DecodeError::new(
                    "event stream",
                    format!("signal {other} is not one of an event stream"),
                ))
            }
        }
        Ok(self.bytes)
    }

    /// `node` ended the subscription because the table was dropped there (after sending its
    /// last changes and the report of their epoch). It covers what it reported and holds no
    /// epoch back; a replica that drops the table later may still commit changes of their
    /// fragments (a commit reaching a node that dropped it changes nothing there), and covers
    /// them. A fragment all of whose replicas dropped the table has nothing after their last
    /// reports.
    pub fn table_dropped_at(&mut self, node: u16) {
        if let Some(source) = self.sources.get_mut(&node) {
            source.dropped = true;
        }
    }

    /// `node`'s stream ended or its link failed: it sends no more, and no longer holds epochs
    /// back; what it reported complete stays good for the epochs not handed out yet.
    pub fn gone(&mut self, node: u16) {
        let Some(gone) = self.sources.remove(&node) else {
            return;
        };
        let Some(start) = gone.start_gci else {
            // Never confirmed: nothing it sent was kept. (Its node's changes held under an
            // earlier, ended subscription stay.)
            return;
        };
        // What it sent of epochs it never reported complete can never be: dropped, so that a
        // later subscription of the same node adds nothing to them.
        let unreported = start.max(gone.reported.saturating_add(1));
        for (_, held) in self.epochs.range_mut(unreported..) {
            if let Some(changes) = held.remove(&node) {
                let bytes: usize = changes.iter().map(HeldChange::bytes).sum();
                self.bytes = self.bytes.saturating_sub(bytes);
            }
        }
        if gone.reported > self.delivered {
            self.retired.push(gone);
        }
    }

    /// True once [`EventMerge::begin`] returned true.
    pub fn has_begun(&self) -> bool {
        self.begun
    }

    /// True while some node's subscription is confirmed.
    pub fn has_confirmed(&self) -> bool {
        self.sources.values().any(|s| s.start_gci.is_some())
    }

    /// The sources, live first, then ended ones, that hold changes of `fragment`'s replicas.
    fn sources_of(&self, fragment: usize) -> impl Iterator<Item = &Source> + '_ {
        let replicas = &self.replicas[fragment];
        let live = replicas.iter().filter_map(|n| self.sources.get(n));
        let retired = (self.retired.iter()).filter(|s| replicas.contains(&s.node));
        live.chain(retired)
    }

    /// The first epoch of (`from`, `through`] that no source of `fragment` covers. When every
    /// replica of the fragment dropped the table, nothing of it comes after their last reports.
    fn first_uncovered(&self, fragment: usize, from: u64, through: u64) -> Option<u64> {
        let replicas = &self.replicas[fragment];
        let live: Vec<&Source> = replicas
            .iter()
            .filter_map(|n| self.sources.get(n))
            .collect();
        let through = if !live.is_empty() && live.iter().all(|s| s.dropped) {
            through.min(live.iter().map(|s| s.reported).max().unwrap_or(0))
        } else {
            through
        };
        let mut spans: Vec<(u64, u64)> =
            self.sources_of(fragment).flat_map(Source::spans).collect();
        spans.sort_unstable();
        let mut next = from.saturating_add(1);
        for (first, last) in spans {
            if first > next {
                break;
            }
            if last == u64::MAX {
                // Covered to the end (a node that ended for the table's drop).
                return None;
            }
            next = next.max(last + 1);
        }
        (next <= through).then_some(next)
    }

    /// Hands out every epoch each subscribed node has reported complete, in order.
    pub fn take_complete(&mut self, out: &mut Vec<Merged>) {
        let confirmed: Vec<&Source> = (self.sources.values())
            .filter(|s| s.start_gci.is_some())
            .collect();
        // A node that dropped the table holds nothing back; once all have, everything they
        // reported is complete.
        let complete_through = if confirmed.iter().all(|s| s.dropped) {
            confirmed.iter().map(|s| s.reported).max()
        } else {
            (confirmed.iter())
                .filter(|s| !s.dropped)
                .map(|s| s.reported)
                .min()
        };
        let Some(through) = complete_through.filter(|&t| t > self.delivered) else {
            return;
        };
        let mut gaps: Vec<(u64, u32)> = (0..self.replicas.len())
            .filter_map(|p| {
                let epoch = self.first_uncovered(p, self.delivered, through)?;
                Some((epoch, p as u32))
            })
            .collect();
        gaps.sort_unstable();
        let mut gaps = gaps.into_iter().peekable();
        let epochs: Vec<u64> = self.epochs.range(..=through).map(|(e, _)| *e).collect();
        for epoch in epochs {
            while let Some((gap, fragment)) = gaps.next_if(|&(g, _)| g <= epoch) {
                out.push(Merged::Inconsistent {
                    epoch: gap,
                    fragment,
                });
            }
            let by_node = self.epochs.remove(&epoch).unwrap_or_default();
            for p in 0..self.replicas.len() {
                let chosen = self.sources_of(p).find(|s| s.covers(epoch)).map(|s| s.node);
                let Some(held) = chosen.and_then(|n| by_node.get(&n)) else {
                    continue;
                };
                out.extend((held.iter()).filter(|c| c.fragment == p as u32).map(|c| {
                    Merged::Change {
                        epoch,
                        change: c.clone(),
                    }
                }));
            }
            let bytes: usize = by_node.values().flatten().map(HeldChange::bytes).sum();
            self.bytes = self.bytes.saturating_sub(bytes);
        }
        for (gap, fragment) in gaps {
            out.push(Merged::Inconsistent {
                epoch: gap,
                fragment,
            });
        }
        self.delivered = through;
        self.drop_delivered();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_change_kind_carries_only_its_images() {
        for kind in [ChangeKind::Insert, ChangeKind::Update, ChangeKind::Delete] {
            let data = SubTableData {
                gci: 7 << 32 | 3,
                fragment: 5,
                kind,
                after: if kind == ChangeKind::Delete {
                    b""
                } else {
                    b"new"
                },
                before: if kind == ChangeKind::Insert {
                    b""
                } else {
                    b"old"
                },
            };
            let mut bytes = Vec::new();
            data.encode(&mut bytes);
            assert_eq!(SubTableData::decode(&bytes).unwrap(), data);
            bytes.push(0);
            assert!(SubTableData::decode(&bytes).is_err(), "trailing byte");
        }
        let mut bad = Vec::new();
        Writer::new(&mut bad).u64(1).u32(0).u8(9);
        let e = SubTableData::decode(&bad).unwrap_err().to_string();
        assert!(e.contains("unknown change kind 9"), "{e}");
    }

    fn frame_of(encode: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut b = Vec::new();
        encode(&mut b);
        b
    }

    fn conf(m: &mut EventMerge, node: u16, start_gci: u64) {
        let f = frame_of(|b| {
            SubStartConf {
                start_gci,
                restart: 0,
            }
            .encode(b)
        });
        m.on_frame(node, crate::gsn::SUB_START_CONF, &f).unwrap();
    }

    fn data(m: &mut EventMerge, node: u16, gci: u64, fragment: u32, after: &[u8]) {
        let d = SubTableData {
            gci,
            fragment,
            kind: ChangeKind::Insert,
            after,
            before: b"",
        };
        let f = frame_of(|b| d.encode(b));
        m.on_frame(node, crate::gsn::SUB_TABLE_DATA, &f).unwrap();
    }

    fn rep(m: &mut EventMerge, node: u16, gci: u64, flags: u32) {
        let f = frame_of(|b| SubGcpCompleteRep { gci, flags }.encode(b));
        m.on_frame(node, crate::gsn::SUB_GCP_COMPLETE_REP, &f)
            .unwrap();
    }

    fn taken(m: &mut EventMerge) -> Vec<(u64, String)> {
        let mut out = Vec::new();
        m.take_complete(&mut out);
        out.into_iter()
            .map(|x| match x {
                Merged::Change { epoch, change } => {
                    (epoch, String::from_utf8(change.after).unwrap())
                }
                Merged::Inconsistent { epoch, fragment } => {
                    (epoch, format!("inconsistent {fragment}"))
                }
            })
            .collect()
    }

    /// Two partitions, both on nodes 1 and 2 (one node group, two replicas).
    fn two_replicas() -> EventMerge {
        let mut m = EventMerge::new(vec![vec![1, 2], vec![2, 1]]);
        m.subscribing(1);
        m.subscribing(2);
        assert!(!m.begin(), "no confirmation yet");
        conf(&mut m, 1, 10);
        conf(&mut m, 2, 11);
        assert!(
            !m.begin(),
            "node 2 has not reported the epoch it subscribed in"
        );
        rep(&mut m, 1, 10, 0);
        rep(&mut m, 2, 10, 0);
        assert!(m.begin());
        m
    }

    #[test]
    fn each_change_is_handed_out_once_from_one_replica_after_every_node_reported() {
        let mut m = two_replicas();
        // Epoch 10 is before node 2's start: node 1's change of it is not handed out.
        assert!(taken(&mut m).is_empty());
        for node in [1, 2] {
            data(&mut m, node, 11, 0, b"a");
            data(&mut m, node, 11, 1, b"b");
            data(&mut m, node, 12, 0, b"c");
        }
        rep(&mut m, 1, 12, 0);
        assert!(taken(&mut m).is_empty(), "node 2 has not reported 11");
        rep(&mut m, 2, 11, 0);
        assert_eq!(taken(&mut m), [(11, "a".into()), (11, "b".into())]);
        rep(&mut m, 2, 12, 0);
        assert_eq!(taken(&mut m), [(12, "c".into())]);
        assert_eq!(m.held_bytes(), 0, "what was not handed out is dropped");
        // A late duplicate of a handed-out epoch is not kept.
        data(&mut m, 2, 12, 0, b"c");
        assert_eq!(m.held_bytes(), 0);
    }

    #[test]
    fn a_failed_replica_leaves_its_partner_to_cover_and_a_lone_one_leaves_a_gap() {
        let mut m = two_replicas();
        data(&mut m, 1, 11, 0, b"a");
        data(&mut m, 2, 11, 0, b"a");
        data(&mut m, 2, 12, 1, b"b");
        // Node 1 fails before reporting 11: node 2 covers both fragments.
        m.gone(1);
        rep(&mut m, 2, 12, 0);
        assert_eq!(taken(&mut m), [(11, "a".into()), (12, "b".into())]);
        // Node 2 goes too: nothing covers epochs after 12.
        m.gone(2);
        m.subscribing(1);
        conf(&mut m, 1, 20);
        rep(&mut m, 1, 20, 0);
        assert_eq!(
            taken(&mut m),
            [(13, "inconsistent 0".into()), (13, "inconsistent 1".into())]
        );
        // Node 1 alone, back: partition 0's replica 2 is gone, yet node 1 covers both.
        data(&mut m, 1, 21, 0, b"x");
        rep(&mut m, 1, 21, 0);
        assert_eq!(taken(&mut m), [(21, "x".into())]);
    }

    #[test]
    fn a_report_of_dropped_changes_makes_another_replica_or_an_inconsistency_cover() {
        let mut m = two_replicas();
        data(&mut m, 2, 11, 0, b"a");
        rep(&mut m, 1, 11, SUB_GCP_DATA_LOST);
        rep(&mut m, 2, 11, 0);
        assert_eq!(taken(&mut m), [(11, "a".into())], "node 2's copy");
        data(&mut m, 1, 12, 0, b"b");
        rep(&mut m, 1, 12, 0);
        rep(&mut m, 2, 12, SUB_GCP_DATA_LOST);
        assert_eq!(taken(&mut m), [(12, "b".into())], "node 1's copy");
        data(&mut m, 1, 13, 0, b"c");
        rep(&mut m, 1, 13, SUB_GCP_DATA_LOST);
        rep(&mut m, 2, 13, SUB_GCP_DATA_LOST);
        assert_eq!(
            taken(&mut m),
            [(13, "inconsistent 0".into()), (13, "inconsistent 1".into())],
            "neither vouches for epoch 13"
        );
    }

    #[test]
    fn changes_of_epochs_before_the_beginning_are_not_handed_out() {
        let mut m = EventMerge::new(vec![vec![1, 2]]);
        m.subscribing(1);
        m.subscribing(2);
        conf(&mut m, 1, 10);
        data(&mut m, 1, 10, 0, b"early");
        conf(&mut m, 2, 11);
        rep(&mut m, 1, 10, 0);
        rep(&mut m, 2, 10, 0);
        assert!(m.begin());
        data(&mut m, 1, 11, 0, b"a");
        rep(&mut m, 1, 11, 0);
        rep(&mut m, 2, 11, 0);
        assert_eq!(
            taken(&mut m),
            [(11, "a".into())],
            "epoch 10 only node 1 covered"
        );
    }

    #[test]
    fn epochs_between_a_failed_replicas_last_report_and_its_partners_start_are_a_gap() {
        let mut m = two_replicas();
        rep(&mut m, 1, 12, 0);
        rep(&mut m, 2, 12, 0);
        assert!(taken(&mut m).is_empty());
        // Node 2 fails and comes back: its subscription covers from 20 on.
        m.gone(2);
        m.subscribing(2);
        conf(&mut m, 2, 20);
        // Node 1 reported through 14, then fails: 15..=19 no replica covered, though no
        // change of them came.
        data(&mut m, 1, 13, 0, b"a");
        rep(&mut m, 1, 14, 0);
        m.gone(1);
        rep(&mut m, 2, 21, 0);
        assert_eq!(
            taken(&mut m),
            [
                (13, "a".into()),
                (15, "inconsistent 0".into()),
                (15, "inconsistent 1".into())
            ],
            "node 1's reports stay good after it failed; the gap after them is reported"
        );
    }

    #[test]
    fn a_node_subscribed_again_below_the_epochs_handed_out_says_the_cluster_went_back() {
        let mut m = two_replicas();
        data(&mut m, 1, 11, 0, b"a");
        rep(&mut m, 1, 12, 0);
        rep(&mut m, 2, 12, 0);
        assert_eq!(taken(&mut m), [(11, "a".into())]);
        assert_eq!(
            m.went_back(),
            None,
            "node 1 started at 10, before the beginning: fine"
        );
        m.gone(2);
        m.subscribing(2);
        conf(&mut m, 2, 14);
        assert_eq!(m.went_back(), None, "a later start");
        m.gone(1);
        m.subscribing(1);
        conf(&mut m, 1, 12);
        assert_eq!(m.went_back(), Some(1), "epoch 12 was handed out already");
    }

    #[test]
    fn a_table_dropped_node_by_node_leaves_no_change_and_no_gap() {
        // Two node groups: partition 0 on nodes 1 and 2, partition 1 on nodes 3 and 4.
        let mut m = EventMerge::new(vec![vec![1, 2], vec![3, 4]]);
        for node in 1..=4 {
            m.subscribing(node);
            conf(&mut m, node, 10);
            rep(&mut m, node, 10, 0);
        }
        assert!(m.begin());
        // Node 1 drops the table first; a commit in epoch 12 then reaches only node 2's
        // replica of partition 0 (node 1 has nothing left to change).
        rep(&mut m, 1, 11, 0);
        m.table_dropped_at(1);
        data(&mut m, 2, 12, 0, b"a");
        rep(&mut m, 2, 12, 0);
        m.table_dropped_at(2);
        for node in [3, 4] {
            data(&mut m, node, 13, 1, b"b");
            rep(&mut m, node, 13, 0);
        }
        assert_eq!(
            taken(&mut m),
            [(12, "a".into()), (13, "b".into())],
            "nodes 1 and 2 hold nothing back; no gap after partition 0's drop"
        );
        m.table_dropped_at(3);
        m.table_dropped_at(4);
        assert!(taken(&mut m).is_empty());
    }

    #[test]
    fn a_refused_resubscription_keeps_what_the_nodes_ended_subscription_reported() {
        let mut m = two_replicas();
        data(&mut m, 2, 11, 0, b"a");
        rep(&mut m, 2, 11, 0);
        data(&mut m, 2, 12, 0, b"lost with node 2");
        m.gone(2);
        // Asked again and refused (it is restarting): nothing of its old reports is dropped.
        m.subscribing(2);
        m.gone(2);
        // Node 1 lost its copy of epoch 11: node 2's, reported before it went, is the one.
        rep(&mut m, 1, 11, SUB_GCP_DATA_LOST);
        assert_eq!(taken(&mut m), [(11, "a".into())]);
    }

    #[test]
    fn requests_and_reports_round_trip() {
        let req = SubStartReq {
            table_id: 3,
            table_version: 2,
        };
        let mut b = Vec::new();
        req.encode(&mut b);
        assert_eq!(SubStartReq::decode(&b).unwrap(), req);
        let conf = SubStartConf {
            start_gci: 99,
            restart: 3,
        };
        b.clear();
        conf.encode(&mut b);
        assert_eq!(SubStartConf::decode(&b).unwrap(), conf);
        let rep = SubGcpCompleteRep {
            gci: 1 << 33,
            flags: SUB_GCP_DATA_LOST,
        };
        b.clear();
        rep.encode(&mut b);
        assert_eq!(SubGcpCompleteRep::decode(&b).unwrap(), rep);
        assert!(SubGcpCompleteRep::decode(&b[..5]).is_err());
    }
}
