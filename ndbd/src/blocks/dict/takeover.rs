//! A new DICT master's takeover, as NDB's DICT_TAKEOVER_REQ: the master passes each schema
//! change on to the other data nodes one message at a time, so when it fails, some may have
//! the change and others not. The data node that becomes master by that failure (or by its
//! node restart, as the lowest id: then only so that every node holds it master first) asks
//! every other for the last change it handled (its `seq`, the change, and its id counter),
//! and makes them agree before it runs a change of its own:
//!
//! - a DROP TABLE or DROP INDEX some node applied is finished on the nodes behind (rolled
//!   forward: a drop cannot be undone; the API's retry finds the object gone, 709 or 4243);
//! - a CREATE that some node lacks (it is behind, refused it, or its unique index's build
//!   failed) is taken back on every node that handled it (rolled back; a node that never
//!   applied it refuses the drop, which is logged): no API got its CONF, which waits for
//!   every node's answer, index build included.
//!
//! The master waits for every node's answer to an undo before its next change, so no node is
//! more than one change behind. The correcting change goes only to the nodes it corrects, each
//! answering. Until every node answered and the correction ended, schema changes queue and
//! node restarts wait. A node answers only a master it knows as such: one that has not yet
//! handled the old master's failure answers once it has (the request is also sent again every
//! second). A takeover ends when this node is no longer master (a lower node's node restart,
//! which this node took for still running, ended), and starts afresh when a lower node fails
//! during it; a higher node that fails only leaves it.
//!
//! A correction is logged in a later GCI than the change it corrects was on the nodes that
//! had it (they saved that GCI since), so a system restart to a GCI between the two restores
//! dictionaries that differ (so does the undo of a create some node refused, and a create
//! only the failed master logged); the restart then drops on every node what some node lacks,
//! the side each correction takes (`dict/agree.rs`).
//!
//! ```text
//! DICT_TAKEOVER_REQ:   (no payload)
//! DICT_TAKEOVER_CONF:  seq u64 | next_id u32 | applied u8 | signal u16 (0: no change kept)
//!                      | change (PassedChange::encode, when signal is not 0)
//! ```

use std::time::{Duration, Instant};

use rndb_config::NodeId;
use rndb_protocol::signals::{self, gsn};
use rndb_transporter::FrameHeader;

use super::schema::{check_id_counter, check_seq, is_schema_request, undo_of, PassedChange};
use crate::blocks::{reply, Kernel, Outbox, ProtocolViolation};

/// How often DICT_TAKEOVER_REQ goes again to the nodes that have not answered.
const TAKEOVER_RESEND: Duration = Duration::from_secs(1);

/// A node's last change, as DICT_TAKEOVER_CONF tells it.
#[derive(Debug)]
struct Answer {
    node: NodeId,
    seq: u64,
    applied: bool,
    change: Option<PassedChange>,
}

/// A new master's takeover, until every node agrees on the last change.
#[derive(Debug)]
pub(crate) struct Takeover {
    request_id: u32,
    /// The nodes whose DICT_TAKEOVER_CONF has not come.
    awaiting: Vec<NodeId>,
    /// The other nodes' answers.
    answers: Vec<Answer>,
    /// When DICT_TAKEOVER_REQ last went to the nodes in `awaiting`.
    sent: Instant,
    /// Once every node answered: the nodes whose answer to the correcting change has not come.
    correcting: Option<Vec<NodeId>>,
}

impl Kernel {
    /// A data node failed: when this node became DICT master by it, the takeover begins
    /// (not while the cluster starts: no schema change runs then, and the dictionaries are
    /// being restored).
    pub(crate) fn dict_takeover_start(
        &mut self,
        failed: NodeId,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        if failed > self.me
            || !self.qmgr.started()
            || self.qmgr.master() != self.me
            || self.schema.runs_change()
        {
            return;
        }
        // A takeover that runs starts afresh: the failed node may have answered it.
        self.dict_takeover_begin(&format!("data node {failed} failed"), out, now);
    }

    /// This node ended its node restart as the lowest id: DICT master by no failure. It takes
    /// over all the same, so that no change of its own starts before every node holds it as
    /// master: a node that had not yet heard of its start refused its DROP INDEX (702) after
    /// the others applied it, and the dictionaries differed for good (sim seeds 0xc0001b01,
    /// 0xb6000fbb). The nodes answer once they do (DICT_TAKEOVER_REQ comes every second).
    pub(crate) fn dict_takeover_after_restart(&mut self, out: &mut dyn Outbox, now: Instant) {
        if self.qmgr.master() != self.me
            || self.schema.runs_change()
            || self.qmgr.peers_up().next().is_none()
        {
            return;
        }
        self.dict_takeover_begin("this node's node restart made it master", out, now);
    }

    fn dict_takeover_begin(&mut self, why: &str, out: &mut dyn Outbox, now: Instant) {
        let request_id = self.new_schema_request_id();
        let awaiting: Vec<NodeId> = self.qmgr.peers_up().collect();
        tracing::info!(why, peers = ?awaiting, "DICT master takeover: asking the data nodes for the last schema change they handled");
        self.send_takeover_req(&awaiting, request_id, out);
        self.schema.takeover = Some(Takeover {
            request_id,
            awaiting,
            answers: Vec::new(),
            sent: now,
            correcting: None,
        });
        self.dict_takeover_decide(out, now);
    }

    fn send_takeover_req(&mut self, peers: &[NodeId], request_id: u32, out: &mut dyn Outbox) {
        self.dict_send(peers, gsn::DICT_TAKEOVER_REQ, request_id, out, &mut |_| {});
    }

    /// Every timer tick: DICT_TAKEOVER_REQ again to the nodes that have not answered.
    pub(crate) fn dict_takeover_timer(&mut self, out: &mut dyn Outbox, now: Instant) {
        let Some(takeover) = self.schema.takeover.as_mut() else {
            return;
        };
        if self.qmgr.master() != self.me {
            // A node restart that ended made a lower node master; its own failure handling
            // runs the takeover that counts.
            tracing::info!(master = %self.qmgr.master(), "DICT master takeover ended: this node is not the master any more");
            self.schema.takeover = None;
            self.schema_refuse_queued(out);
            return;
        }
        if takeover.awaiting.is_empty() || now.duration_since(takeover.sent) < TAKEOVER_RESEND {
            return;
        }
        takeover.sent = now;
        let (awaiting, request_id) = (takeover.awaiting.clone(), takeover.request_id);
        self.send_takeover_req(&awaiting, request_id, out);
    }

    /// DICT_TAKEOVER_REQ: the last change this node handled, to the master that asks.
    pub(crate) fn exec_dict_takeover_req(
        &mut self,
        from: NodeId,
        header: &FrameHeader,
        out: &mut dyn Outbox,
    ) {
        if from != self.qmgr.master() {
            tracing::info!(node = %from, master = %self.qmgr.master(), "DICT_TAKEOVER_REQ from a data node that is not the DICT master here (yet): answered once it is");
            self.schema.takeover_asked = Some((from, *header));
            return;
        }
        self.schema.takeover_asked = None;
        let (seq, next_id) = (self.schema.seq, self.dict.next_id());
        // A build still running here may yet fail: not applied (no CONF went to the master).
        let applied = u8::from(self.schema.last_applied && !self.follower_build_running());
        let last = self.schema.last.clone();
        reply(
            &mut self.unsent,
            out,
            from,
            header,
            gsn::DICT_TAKEOVER_CONF,
            &mut |b| {
                b.extend_from_slice(&seq.to_le_bytes());
                b.extend_from_slice(&next_id.to_le_bytes());
                b.push(applied);
                match &last {
                    Some(change) => {
                        b.extend_from_slice(&change.signal.to_le_bytes());
                        change.encode(b);
                    }
                    None => b.extend_from_slice(&0u16.to_le_bytes()),
                }
            },
        );
    }

    /// After a node failure was handled here: a DICT_TAKEOVER_REQ that came too early is
    /// answered when its sender is now the master.
    pub(crate) fn dict_takeover_answer_asked(&mut self, out: &mut dyn Outbox) {
        if let Some((from, header)) = self.schema.takeover_asked {
            if from == self.qmgr.master() {
                self.exec_dict_takeover_req(from, &header, out);
            }
        }
    }

    /// DICT_TAKEOVER_CONF: a node's last change.
    pub(crate) fn exec_dict_takeover_conf(
        &mut self,
        from: NodeId,
        header: &FrameHeader,
        payload: &[u8],
        out: &mut dyn Outbox,
        now: Instant,
    ) -> Result<(), ProtocolViolation> {
        let malformed = || {
            ProtocolViolation(format!(
                "DICT_TAKEOVER_CONF of {} bytes, not seq u64 | next_id u32 | applied u8 | signal u16 | change",
                payload.len()
            ))
        };
        let (seq, rest) = payload.split_first_chunk::<8>().ok_or_else(malformed)?;
        let (next_id, rest) = rest.split_first_chunk::<4>().ok_or_else(malformed)?;
        let (&[applied], rest) = rest.split_first_chunk::<1>().ok_or_else(malformed)?;
        let (signal, rest) = rest.split_first_chunk::<2>().ok_or_else(malformed)?;
        let next_id = u32::from_le_bytes(*next_id);
        check_id_counter(next_id)?;
        let seq = u64::from_le_bytes(*seq);
        check_seq(seq)?;
        if applied > 1 {
            return Err(malformed());
        }
        let change = match u16::from_le_bytes(*signal) {
            0 if rest.is_empty() => None,
            0 => return Err(malformed()),
            signal if is_schema_request(signal) => Some(PassedChange::decode(signal, rest)?),
            signal => {
                return Err(ProtocolViolation(format!(
                    "DICT_TAKEOVER_CONF names signal {signal}, not a schema change"
                )))
            }
        };
        let Some(takeover) = self.schema.takeover.as_mut() else {
            return Ok(());
        };
        if header.request_id != takeover.request_id || !takeover.awaiting.contains(&from) {
            return Ok(());
        }
        takeover.awaiting.retain(|&n| n != from);
        takeover.answers.push(Answer {
            node: from,
            seq,
            applied: applied == 1,
            change,
        });
        // The next objects get ids past every node's: a node ahead of this one holds more.
        self.dict.advance_next_id(next_id);
        self.dict_takeover_decide(out, now);
        Ok(())
    }

    /// Once every node answered: the correcting change, or the end of the takeover.
    fn dict_takeover_decide(&mut self, out: &mut dyn Outbox, now: Instant) {
        let Some(takeover) = self.schema.takeover.as_ref() else {
            return;
        };
        if !takeover.awaiting.is_empty() || takeover.correcting.is_some() {
            return;
        }
        // This node's own answer, as it stands now.
        let own = Answer {
            node: self.me,
            seq: self.schema.seq,
            applied: self.schema.last_applied && !self.follower_build_running(),
            change: self.schema.last.clone(),
        };
        let answers: Vec<&Answer> = takeover.answers.iter().chain([&own]).collect();
        let top = answers.iter().map(|a| a.seq).max().unwrap_or(0);
        // Whatever happens next, this node's next change comes after every node's last.
        self.schema.seq = self.schema.seq.max(top);
        let at_top: Vec<NodeId> = (answers.iter().filter(|a| a.seq == top))
            .map(|a| a.node)
            .collect();
        let behind: Vec<NodeId> = (answers.iter().filter(|a| a.seq < top))
            .map(|a| a.node)
            .collect();
        // A node that kept no change (it restarted since) lacks nothing of it.
        let lacking = !behind.is_empty()
            || (answers.iter()).any(|a| a.seq == top && !a.applied && a.change.is_some());
        if !lacking {
            return self.dict_takeover_end(out, now);
        }
        let last = answers
            .iter()
            .find_map(|a| a.change.clone().filter(|c| c.seq == top));
        let Some(last) = last else {
            tracing::warn!(top, ?behind, "DICT master takeover: the nodes differ on the last schema change, and no node kept it");
            return self.dict_takeover_end(out, now);
        };
        let (change, targets) = if matches!(last.signal, gsn::DROP_TABLE_REQ | gsn::DROP_INDEX_REQ)
        {
            if behind.is_empty() {
                // Refused somewhere (what it drops was not there): nothing to finish.
                return self.dict_takeover_end(out, now);
            }
            (last, behind)
        } else {
            let Some((undo, request)) = undo_of(last.signal, &last.request) else {
                tracing::warn!(signal = last.signal, "DICT master takeover: a change applied on some nodes only, which cannot be taken back");
                return self.dict_takeover_end(out, now);
            };
            let undo = PassedChange {
                seq: top + 1,
                signal: undo,
                first_id: self.dict.next_id(),
                gci: self.gcp.current,
                request,
            };
            (undo, at_top)
        };
        tracing::warn!(
            signal = gsn::name(change.signal).unwrap_or("?"),
            seq = change.seq,
            nodes = ?targets,
            "DICT master takeover: the old master's last schema change reached some data nodes only; finishing or taking it back on the others"
        );
        let mut peers = targets;
        if let Some(at) = peers.iter().position(|&n| n == self.me) {
            peers.remove(at);
            self.apply_passed(None, change.clone(), out, now);
        }
        self.schema.seq = self.schema.seq.max(change.seq);
        if peers.is_empty() {
            return self.dict_takeover_end(out, now);
        }
        let request_id = self.schema.takeover.as_ref().map_or(0, |t| t.request_id);
        self.pass_on(&peers, request_id, &change, out);
        if let Some(takeover) = self.schema.takeover.as_mut() {
            takeover.correcting = Some(peers);
        }
    }

    /// A node's answer to the takeover's correcting change; true when it was one.
    pub(crate) fn dict_takeover_answer(
        &mut self,
        from: NodeId,
        header: &FrameHeader,
        payload: &[u8],
        out: &mut dyn Outbox,
        now: Instant,
    ) -> bool {
        let Some(takeover) = self.schema.takeover.as_mut() else {
            return false;
        };
        let Some(correcting) = takeover.correcting.as_mut() else {
            return false;
        };
        if header.request_id != takeover.request_id || !correcting.contains(&from) {
            return false;
        }
        correcting.retain(|&n| n != from);
        let refused = matches!(
            header.signal,
            gsn::CREATE_TABLE_REF
                | gsn::DROP_TABLE_REF
                | gsn::CREATE_INDEX_REF
                | gsn::DROP_INDEX_REF
        );
        if refused {
            if let Ok(refusal) = signals::Refusal::decode(payload) {
                tracing::info!(node = %from, code = refusal.code, "DICT master takeover: the correcting change was refused there ({})", refusal.detail);
            }
        }
        if correcting.is_empty() {
            self.dict_takeover_end(out, now);
        }
        true
    }

    /// A data node failed during the takeover: it is not waited for.
    pub(crate) fn dict_takeover_node_lost(
        &mut self,
        node: NodeId,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        let Some(takeover) = self.schema.takeover.as_mut() else {
            return;
        };
        takeover.awaiting.retain(|&n| n != node);
        takeover.answers.retain(|a| a.node != node);
        match takeover.correcting.as_mut() {
            Some(correcting) => {
                correcting.retain(|&n| n != node);
                if correcting.is_empty() {
                    self.dict_takeover_end(out, now);
                }
            }
            None => self.dict_takeover_decide(out, now),
        }
    }

    fn dict_takeover_end(&mut self, out: &mut dyn Outbox, now: Instant) {
        if self.schema.takeover.take().is_some() {
            tracing::info!(seq = self.schema.seq, "DICT master takeover done");
        }
        self.next_schema_op(out, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A change passed on decodes to itself; a payload short of the prefix, whose request is
    /// not the signal's, or whose id counter or number is at its end, is a protocol violation.
    #[test]
    fn a_passed_change_round_trips_and_a_short_one_is_refused() {
        let mut request = Vec::new();
        signals::encode_name(&mut request, "t");
        let change = PassedChange {
            seq: 7,
            signal: gsn::DROP_TABLE_REQ,
            first_id: 12,
            gci: 9 << 32 | 3,
            request,
        };
        let mut b = Vec::new();
        change.encode(&mut b);
        assert_eq!(
            PassedChange::decode(gsn::DROP_TABLE_REQ, &b).unwrap(),
            change
        );
        assert!(PassedChange::decode(gsn::DROP_TABLE_REQ, &b[..19]).is_err());
        assert!(PassedChange::decode(gsn::DROP_TABLE_REQ, &b[..b.len() - 1]).is_err());
        assert!(PassedChange::decode(gsn::CREATE_TABLE_REQ, &b).is_err());
        for (first_id, seq) in [(u32::MAX, 7), (12, u64::MAX)] {
            let mut b = Vec::new();
            PassedChange {
                first_id,
                seq,
                ..change.clone()
            }
            .encode(&mut b);
            assert!(
                PassedChange::decode(gsn::DROP_TABLE_REQ, &b).is_err(),
                "no id or number would be left"
            );
        }
    }
}
