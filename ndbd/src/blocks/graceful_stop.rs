//! A graceful stop's last steps (ndbd's SIGTERM, ndb_mgm's STOP, RESTART, SHUTDOWN and ALL
//! RESTART): before the node leaves, every commit its TC acknowledged is saved in a global
//! checkpoint, so that a stop of every data node loses none (NDB's system stop likewise waits
//! for its transactions, then forces a global checkpoint: NDBCNTR's WAIT_GCP_REQ
//! CompleteForceStart).
//!
//! ```text
//! begin_stop ─► a node stopping alone tells the live members of its group (NODE_STOPPING_REP
//!               STOP_BEGINS; they answer NODE_STOPPING_CONF); if none of them serves on,
//!               its stop becomes a stop of every data node (below)
//!            ─► a node stopping alone first tells every linked API node (NODE_STOPPING_REP)
//!               and serves on until each has answered (NODE_STOPPING_CONF: its new
//!               transactions go to other data nodes) or STOP_API_MAX passed (NDB's
//!               STOPPING_1); a stop of every data node skips this, and tells every live
//!               data node instead (NODE_STOPPING_REP STOP_EVERY_NODE), which stops too
//!            ─► refuse new work from API nodes (280); let their open transactions end
//!               (those still open STOP_DRAIN_MAX later are aborted)
//!            ─► once TC coordinates nothing running: note the epoch commits take now (g),
//!               ask the master for a save at once (GCP_SAVE_WANTED)
//!            ─► once g is durable (GCP_DURABLE_REP): stop (NODE_STOPPING_REP, exit)
//!               a stop of every data node (SHUTDOWN, ALL RESTART: the management server's
//!               reply says `system`) first tells every live data node (STOP_SAVED_REP) and
//!               waits until each other live one has said the same
//! ```
//!
//! Commits that started before the stop run to their end; no commit starts at this TC after,
//! so each one it answered has an epoch at most g. A save needs a live node of every node
//! group, so in a stop of every data node none leaves before all have saved: one that left
//! first could take its group's last node with it while another node's commits still wait
//! for their save. A node stopping alone needs no such wait (its group has other nodes, or
//! the cluster cannot save anyway).
//!
//! A node not started, or without files (Diskless), stops at once, and so does one that can
//! save nothing more: its file system failed, a node group has no live node, or, stopping
//! alone or as the last live data node, an arbitration round holds commits (otherwise, in a
//! stop of every data node, the save waits for the round's verdict, at most as long as a
//! round takes when it goes well). Transactions still open
//! [`STOP_DRAIN_MAX`] after the node began refusing are aborted, scans with them. One whose
//! wait passes [`STOP_FLUSH_MAX`] stops anyway and says so.
//!
//! An API node reads NODE_STOPPING_REP when it next reads the link (an idle one at its next
//! heartbeat); a transaction it chose this node for just before, but sent after its
//! NODE_STOPPING_CONF, is still refused (280, temporary).
//!
//! A node stopping alone puts its stop off, and serves on, when the other member of its node
//! group must stop (its file system failed: STOP_PERM_REQ) or failed during the stop:
//! leaving too would leave the group without a live node (NDB refuses such a stop:
//! NodeShutdownWouldCauseSystemCrash). The stop goes on once another member serves again
//! (its node restart ended). A node that does not stop itself never serves on without a node
//! group (`group_lost_here`).
//!
//! A node stopping alone leaves alone only while a member of its group that does not stop
//! serves on. When none does (a SIGTERM to every data node at once, each a stop alone; one
//! replica; the peer down already), leaving would take the group's last node, and with it
//! every save not yet made: the others would stop with 2305, their last commits lost (NDB
//! counts that a system crash). So its stop becomes a stop of every data node, as if ndb_mgm
//! had said SHUTDOWN: every node saves what it answered before any leaves, and the cluster
//! goes down with nothing acknowledged lost. Of two members that begin to stop at once, one
//! at least knows of the other before it decides: each decides only once every live member
//! answered its STOP_BEGINS, and a member that began first sent its own STOP_BEGINS before
//! that answer.

use std::time::{Duration, Instant};

use rndb_config::NodeId;
use rndb_protocol::gsn;
use rndb_protocol::scan::{ScanTabReq, SCAN_FLAG_PART};
use rndb_protocol::signals::block;
use rndb_protocol::NdbError;

use super::{data_node_header, Kernel, Outbox};
use crate::ndbfs::format::gci_hi;

/// The longest a graceful stop waits for its transactions, its save and, in a stop of every
/// data node, the others' saves.
pub const STOP_FLUSH_MAX: Duration = Duration::from_secs(30);

/// The longest a node stopping alone serves on while its API nodes learn that it stops (NDB's
/// STOPPING_1, to which NDB's management server gives 5 s: `StopReq::apiTimeout`). It ends
/// sooner once every linked API node has answered NODE_STOPPING_CONF (an idle one reads its
/// links at its next heartbeat, HeartbeatIntervalDbApi).
pub const STOP_API_MAX: Duration = Duration::from_secs(5);

/// How long a graceful stop lets the transactions open when it began to refuse new ones end
/// by themselves (an application may hold one open between executes, or leave a scan open
/// and unread): past it, every transaction not in the middle of an execute is aborted (280),
/// its scans with it.
pub const STOP_DRAIN_MAX: Duration = Duration::from_secs(5);

/// NODE_STOPPING_REP's byte from a data node that begins to stop alone, to the live members of
/// its node group (0 and 1 say that the sender leaves now).
pub(super) const STOP_BEGINS: u8 = 2;

/// NODE_STOPPING_REP's byte from a data node in a stop of every data node, to every live data
/// node as the stop begins: stop too.
pub(super) const STOP_EVERY_NODE: u8 = 3;

/// How long a node stopping alone waits for a member's answer to STOP_BEGINS before it sends
/// it again (a full send buffer may have refused either frame).
const STOP_BEGINS_AGAIN: Duration = Duration::from_millis(100);

/// A graceful stop in its last steps.
#[derive(Debug)]
pub(crate) struct Stopping {
    began: Instant,
    /// Since when API nodes' new work is refused (280); `None` while they are still being
    /// told that this node stops (NDB's STOPPING_1).
    refusing_since: Option<Instant>,
    /// API nodes told that this node stops (NODE_STOPPING_REP), and those that answered.
    apis_told: std::collections::BTreeSet<NodeId>,
    apis_moved: std::collections::BTreeSet<NodeId>,
    /// Every data node stops (SHUTDOWN, ALL RESTART).
    system: bool,
    /// The epoch whose save the stop waits for, once TC coordinates nothing running.
    saving: Option<u64>,
    /// This node saved what it answered (and said so in its log).
    saved: bool,
    /// In a stop of every data node: the data nodes told that it saved (STOP_SAVED_REP); one
    /// that comes up later (a node restart ending) is told then.
    told: std::collections::BTreeSet<NodeId>,
    /// The other members of this node's group alive when the stop began (or went on after
    /// being put off): only their failure puts it off.
    group_at_begin: std::collections::BTreeSet<NodeId>,
    /// Why the stop is put off (leaving would leave this node's group without a live
    /// node): the node serves on, and the stop goes on once another member serves.
    deferred: Option<String>,
    /// The member of this node's group whose stop (its disk failed) put this one off, until
    /// its link closes: it serves no more, though it may look so until then.
    deferred_for: Option<NodeId>,
    /// Members of this node's group told that it begins to stop alone (NODE_STOPPING_REP,
    /// `STOP_BEGINS`), when, and those that answered (NODE_STOPPING_CONF).
    group_told: std::collections::BTreeMap<NodeId, Instant>,
    group_answered: std::collections::BTreeSet<NodeId>,
    /// In a stop of every data node: the data nodes told so (`STOP_EVERY_NODE`).
    every_told: std::collections::BTreeSet<NodeId>,
    /// Since when an arbitration round has held commits while the stop waits for its save.
    held_since: Option<Instant>,
}

impl Kernel {
    /// A graceful stop begins (`system`: of every data node). A node stopping alone first
    /// tells its API nodes and serves on until they have moved (at most `STOP_API_MAX`); then
    /// API nodes' new work is refused (280) while their open transactions end.
    /// `Kernel::ready_to_stop` drives it and says when the node may go.
    pub fn begin_stop(&mut self, now: Instant, system: bool) {
        if self.stopping.is_some() {
            return;
        }
        // Said to the other data nodes as this node leaves (NODE_STOPPING_REP).
        self.stop_system = system;
        if !self.qmgr.started() || !self.has_files {
            return;
        }
        tracing::info!(
            system,
            "stopping: {}refusing new transactions, then saving a global checkpoint of every \
             commit this node answered",
            if system { "" } else { "telling API nodes, " }
        );
        self.stopping = Some(Stopping {
            began: now,
            refusing_since: None,
            apis_told: Default::default(),
            apis_moved: Default::default(),
            system,
            saving: None,
            saved: false,
            told: Default::default(),
            group_at_begin: self.group_peers_alive(),
            deferred: None,
            deferred_for: None,
            group_told: Default::default(),
            group_answered: Default::default(),
            every_told: Default::default(),
            held_since: None,
        });
        if system {
            // Every data node stops: API nodes have nowhere else to go.
            self.begin_refusing(now);
        }
    }

    /// API nodes' new work is refused (280) from now on; their open transactions go on (for
    /// at most `STOP_DRAIN_MAX`).
    fn begin_refusing(&mut self, now: Instant) {
        if let Some(stopping) = &mut self.stopping {
            stopping.refusing_since = Some(now);
        }
    }

    /// While API nodes are told that this node stops (NDB's STOPPING_1): tells each linked
    /// one not yet told (again on the next look, if its send buffer was full), and once each
    /// has answered, or `STOP_API_MAX` passed, begins refusing their new work. True while
    /// it lasts.
    fn telling_api_nodes(&mut self, out: &mut dyn Outbox, now: Instant) -> bool {
        let Some(stopping) = &mut self.stopping else {
            return false;
        };
        if stopping.refusing_since.is_some() {
            return false;
        }
        for api in self.qmgr.apis() {
            if !stopping.apis_told.contains(&api) {
                let header = data_node_header(gsn::NODE_STOPPING_REP, block::API, block::QMGR);
                if out.send(api, header, &mut |_| {}).is_ok() {
                    stopping.apis_told.insert(api);
                }
            }
        }
        let waiting = (self.qmgr.apis())
            .filter(|a| !stopping.apis_moved.contains(a))
            .count();
        let past = now.saturating_duration_since(stopping.began) >= STOP_API_MAX;
        if waiting > 0 && !past {
            return true;
        }
        if waiting > 0 {
            tracing::warn!(
                "{waiting} API nodes did not answer NODE_STOPPING_REP within {} s; refusing \
                 their new transactions (280) now",
                STOP_API_MAX.as_secs()
            );
        } else {
            tracing::info!("every API node was told; refusing new transactions (280) from now on");
        }
        self.begin_refusing(now);
        false
    }

    /// NODE_STOPPING_CONF: API node `from` read this node's NODE_STOPPING_REP and sends its
    /// new transactions elsewhere; or data node `from`, a member of this node's group, knows
    /// that this node begins to stop.
    pub(super) fn exec_node_stopping_conf(&mut self, from: NodeId) {
        let data_node = self.qmgr.is_data_node(from);
        if let Some(stopping) = &mut self.stopping {
            if data_node {
                stopping.group_answered.insert(from);
            } else {
                stopping.apis_moved.insert(from);
            }
        }
    }

    /// NODE_STOPPING_REP with `STOP_BEGINS`: data node `from`, a member of this node's group,
    /// begins to stop alone. Answered at once (NODE_STOPPING_CONF): `from` leaves alone only
    /// once it knows whether this node stops too.
    pub(super) fn exec_stop_begins_rep(&mut self, from: NodeId, out: &mut dyn Outbox) {
        if !self.qmgr.stop_begun(from) {
            tracing::info!(node = %from, "data node {from} of this node's group begins to stop");
        }
        self.qmgr.note_stop_begun(from);
        let header = data_node_header(gsn::NODE_STOPPING_CONF, block::QMGR, block::QMGR);
        // One a full send buffer refuses is sent again when `from` asks again.
        let _ = out.send(from, header, &mut |_| {});
    }

    /// A node stopping alone tells each live member of its group that it begins to stop
    /// (`STOP_BEGINS`), again every `STOP_BEGINS_AGAIN` until it answers. True once every
    /// live member has answered.
    fn group_knows(&mut self, out: &mut dyn Outbox, now: Instant) -> bool {
        let Some(stopping) = &mut self.stopping else {
            return true;
        };
        let peers: Vec<NodeId> = (self.qmgr.group_peers(self.me))
            .filter(|&n| self.qmgr.is_alive(n))
            .collect();
        for &peer in &peers {
            let due = match stopping.group_told.get(&peer) {
                None => true,
                Some(&at) => {
                    !stopping.group_answered.contains(&peer)
                        && now.saturating_duration_since(at) >= STOP_BEGINS_AGAIN
                }
            };
            if due {
                let header = data_node_header(gsn::NODE_STOPPING_REP, block::QMGR, block::QMGR);
                if out.send(peer, header, &mut |b| b.push(STOP_BEGINS)).is_ok() {
                    stopping.group_told.insert(peer, now);
                }
            }
        }
        peers.iter().all(|n| stopping.group_answered.contains(n))
    }

    /// In a stop of every data node: tells each live data node not told yet
    /// (NODE_STOPPING_REP, `STOP_EVERY_NODE`), which stops too (`exec_stop_every_node`): one
    /// whose stop began alone, or that ndb_mgmd's SHUTDOWN did not reach.
    fn tell_every_node(&mut self, out: &mut dyn Outbox) {
        let Some(stopping) = &mut self.stopping else {
            return;
        };
        for peer in self.qmgr.peers_up() {
            if !stopping.every_told.contains(&peer) {
                let header = data_node_header(gsn::NODE_STOPPING_REP, block::QMGR, block::QMGR);
                if out
                    .send(peer, header, &mut |b| b.push(STOP_EVERY_NODE))
                    .is_ok()
                {
                    stopping.every_told.insert(peer);
                }
            }
        }
    }

    /// Turns a stop alone into a stop of every data node (as ndb_mgm's SHUTDOWN): this node
    /// tells every live data node, which stops too (`tell_every_node`), and leaves only once
    /// each other live data node saved what it answered (STOP_SAVED_REP).
    fn stop_every_node(&mut self, now: Instant, why: &str) {
        let Some(stopping) = &mut self.stopping else {
            return;
        };
        if stopping.system {
            return;
        }
        tracing::warn!(
            "{why}: this node's stop becomes a stop of every data node (as ndb_mgm's \
             SHUTDOWN), in which no node leaves before every node saved the commits it answered"
        );
        stopping.system = true;
        stopping.began = now;
        stopping.refusing_since.get_or_insert(now);
        stopping.saved = false;
        stopping.deferred = None;
        stopping.deferred_for = None;
        self.stop_system = true;
    }

    /// True once a graceful stop may end: every commit this node's TC answered is in a
    /// durable global checkpoint (and, in a stop of every data node, every other live data
    /// node said so of its own), or it can save nothing more, or `STOP_FLUSH_MAX` passed.
    pub fn ready_to_stop(&mut self, out: &mut dyn Outbox, now: Instant) -> bool {
        let Some(stopping) = &self.stopping else {
            return true;
        };
        if self.qmgr.dead || !self.qmgr.started() {
            return true;
        }
        let (began, system, saving, saved, deferred) = (
            stopping.began,
            stopping.system,
            stopping.saving,
            stopping.saved,
            stopping.deferred.is_some(),
        );
        // A member alive when the stop began that failed since (not one that stopped).
        let peers_failed = (stopping.group_at_begin.iter())
            .any(|&n| !self.qmgr.is_alive(n) && !self.qmgr.is_stopping(n));
        if deferred {
            let waiting_for_peer = stopping.deferred_for.is_some();
            if waiting_for_peer || !self.qmgr.group_serves_without(self.me, self.me) {
                return false;
            }
            tracing::info!("another member of this node's group serves again: the stop goes on");
            let alive = self.group_peers_alive();
            if let Some(stopping) = &mut self.stopping {
                stopping.deferred = None;
                stopping.began = now;
                stopping.group_at_begin = alive;
            }
            return false;
        }
        if !system && !self.group_peer_alive() && peers_failed {
            self.defer_stop(
                "the other members of this node's group failed while it stopped".into(),
                None,
            );
            return false;
        }
        // Leaving alone needs a member of the group to serve on after this node: when every
        // live member stops too (a SIGTERM to every data node), or none is left, the group
        // would go with it, and every node not yet saved with it (those not stopping stop with
        // 2305). Then every node stops, as in ndb_mgm's SHUTDOWN: each saves what it answered
        // before any leaves. Decided once every live member answered STOP_BEGINS: of two
        // members stopping at once, one at least then knows of the other.
        let system = system || {
            let group_knows = self.group_knows(out, now);
            let stays = |n: NodeId| !self.qmgr.stop_begun(n);
            let group_stays =
                (self.qmgr.group_peers(self.me)).any(|n| self.qmgr.serves(n) && stays(n));
            // A member still joining by node restart serves once its copy ends (from this
            // node, perhaps): the stop waits for it.
            let restarting = (self.qmgr.group_peers(self.me))
                .find(|&n| self.qmgr.is_alive(n) && !self.qmgr.serves(n) && stays(n));
            if let (true, false, Some(member)) = (group_knows, group_stays, restarting) {
                self.defer_stop(
                    format!(
                        "data node {member} of this node's group is still joining by node restart"
                    ),
                    None,
                );
                return false;
            }
            if group_knows && !group_stays {
                self.stop_every_node(
                    now,
                    "no other member of this node's node group serves on after it",
                );
            }
            !self.stops_alone()
        };
        if system {
            self.tell_every_node(out);
        }
        let (began, saved) =
            (self.stopping.as_ref()).map_or((began, saved), |s| (s.began, s.saved));
        if let Some(why) = self.cannot_save(!system) {
            tracing::warn!(
                "stopping without waiting for a saved global checkpoint of this node's last \
                 commits: {why}"
            );
            return true;
        }
        let held = self.tc.commits_held();
        let held_since = (self.stopping.as_mut()).and_then(|s| {
            s.held_since = held.then(|| s.held_since.unwrap_or(now));
            s.held_since
        });
        // A stop of every data node waits for a round that holds commits (its save cannot go
        // on meanwhile) at most as long as a round takes when it goes well: one may not end
        // (seed 0x49633, three replicas; its nodes then leave unsaved, as at STOP_FLUSH_MAX).
        let round_max = self.arbit.round_max();
        if held_since.is_some_and(|since| now.saturating_duration_since(since) >= round_max) {
            tracing::warn!(
                "stopping without a saved global checkpoint of this node's last commits: an \
                 arbitration round has held commits for {} ms",
                round_max.as_millis()
            );
            return true;
        }
        if now.saturating_duration_since(began) >= STOP_FLUSH_MAX {
            tracing::warn!(
                "stopping without a saved global checkpoint of this node's last commits: none \
                 came within {} s",
                STOP_FLUSH_MAX.as_secs()
            );
            return true;
        }
        if self.telling_api_nodes(out, now) {
            return false;
        }
        let refusing_since = (self.stopping.as_ref())
            .and_then(|s| s.refusing_since)
            .unwrap_or(began);
        let gci = match saving {
            Some(gci) => gci,
            None if self.tc.coordinates_running() => {
                if now.saturating_duration_since(refusing_since) >= STOP_DRAIN_MAX {
                    self.abort_for_stop();
                }
                return false;
            }
            None => {
                let gci = self.gcp.current;
                if let Some(stopping) = &mut self.stopping {
                    stopping.saving = Some(gci);
                }
                gci
            }
        };
        // A node stopping alone needs its commits in a GCI some sysfile names (restorable):
        // the rest of the cluster serves on, and a later system restart goes on from the
        // highest. A node restarted by node restart whose files cannot restore anything yet
        // never hears one durable (seed 0xec15 with `--faults stop`: its stop waited the
        // whole STOP_FLUSH_MAX). A stop of every data node waits for durable: whichever
        // nodes a system restart then finds, they restore it.
        let saved_up_to = if system {
            self.gcp.durable
        } else {
            self.gcp.durable.max(self.gcp.restorable)
        };
        if gci_hi(gci) > saved_up_to {
            // Asked once until the next save starts: a save of an older checkpoint running
            // now is followed by one that covers this epoch.
            self.gcp_want_save(out);
            return false;
        }
        if !saved {
            tracing::info!(
                gci = gci_hi(gci),
                "global checkpoint {} saved: every commit this node answered is durable",
                gci_hi(gci)
            );
            if let Some(stopping) = &mut self.stopping {
                stopping.saved = true;
            }
        }
        if !system {
            // Alone, once every live member of the group knows (and one serves on).
            return self.group_knows(out, now);
        }
        let untold: Vec<NodeId> = (self.qmgr.peers_up())
            .filter(|n| self.stopping.as_ref().is_some_and(|s| !s.told.contains(n)))
            .collect();
        for peer in untold {
            let header = data_node_header(gsn::STOP_SAVED_REP, block::QMGR, block::QMGR);
            // A full send buffer refuses it: sent again on the next look.
            if out.send(peer, header, &mut |_| {}).is_ok() {
                if let Some(stopping) = &mut self.stopping {
                    stopping.told.insert(peer);
                }
            }
        }
        // Every other live data node saved too (one that left is no longer up).
        self.qmgr.peers_up().all(|n| self.stop_saved.contains(&n))
    }

    /// True once this node's file system failed: it saves nothing more.
    pub fn file_system_failed(&self) -> bool {
        self.fs.failed.is_some()
    }

    /// STOP_SAVED_REP: data node `from`, in a stop of every data node, saved what it answered.
    /// It leaves gracefully next, even if its NODE_STOPPING_REP is lost to a full send buffer:
    /// its group's leaving is no failure (no 2305 for a node still waiting for the others).
    /// This node stops with it, if not yet (`exec_stop_every_node`).
    pub(super) fn exec_stop_saved_rep(&mut self, from: NodeId, now: Instant) {
        if self.stop_saved.insert(from) {
            self.exec_node_stopping_rep(from, true);
        }
        self.exec_stop_every_node(from, now);
    }

    /// NODE_STOPPING_REP with `STOP_EVERY_NODE` (or STOP_SAVED_REP): data node `from` stops
    /// with every data node, and this node stops too, if not yet: one stopping alone turns its
    /// stop into one of every node, one put off included; one not stopping begins (as at
    /// ndb_mgm's SHUTDOWN, which a node without a report link to ndb_mgmd does not hear). A
    /// node not started, or without files, goes on: it holds nothing to save.
    pub(super) fn exec_stop_every_node(&mut self, from: NodeId, now: Instant) {
        let why = format!("data node {from} stops with every data node");
        if !self.qmgr.started() && self.node_restart_joining() {
            // The others wait for this node's word; it could only serve without them.
            return self.node_restart_fails(format!("{why}, and this node's restart cannot end"));
        }
        if self.stopping.is_none() && self.qmgr.started() && self.has_files {
            tracing::warn!("{why}: so does this one");
            self.begin_stop(now, true);
        } else {
            self.stop_every_node(now, &why);
        }
    }

    /// Past `STOP_DRAIN_MAX`: aborts every API node's transaction that runs no execute, those
    /// with a scan open too (the scan's next batch fails).
    fn abort_for_stop(&mut self) {
        let error = NdbError::with_detail(
            280,
            format!(
                "this data node is stopping; the transaction was still open {} s after it began \
                 to refuse new ones",
                STOP_DRAIN_MAX.as_secs()
            ),
        );
        for trans in (self.tc).abort_idle_except(NodeId(0), &error, &|_| false) {
            self.jobs.push_back(super::Signal::TcContinueB(trans));
        }
    }

    /// Why no save can come any more, if none can: this node's file system failed, or a node
    /// group has no live node; or an arbitration round holds commits (its verdict may stop
    /// this side; a round a lost NODE_STOPPING_REP started may not end soon: seed 0x1aa34)
    /// and this node stops `alone` (another member of its group serves on, and holds its
    /// commits) or is the last live data node. Otherwise, in a stop of every data node, the
    /// save waits for the verdict: leaving at once took a node group's last member, and the
    /// others' saves, with it (seed 0x492).
    fn cannot_save(&self, alone: bool) -> Option<&'static str> {
        if self.fs.failed.is_some() {
            return Some("its file system failed, and it saves nothing more");
        }
        let group_gone = (self.qmgr.node_groups().iter())
            .any(|(_, nodes)| !nodes.iter().any(|&n| self.qmgr.is_alive(n)));
        if group_gone {
            return Some("a node group has no live node, so no global checkpoint can be saved");
        }
        let last = self.qmgr.peers_up().next().is_none();
        if (alone || last) && self.tc.commits_held() {
            return Some("an arbitration round holds commits, and its verdict may stop this side");
        }
        None
    }

    /// API node `node`'s link closed: one it opens again is told anew.
    pub(super) fn stop_api_gone(&mut self, node: NodeId) {
        if let Some(stopping) = &mut self.stopping {
            stopping.apis_told.remove(&node);
            stopping.apis_moved.remove(&node);
        }
    }

    /// Puts this node's graceful stop off (its leaving would leave its node group without a
    /// live node: NDB refuses such a stop, NodeShutdownWouldCauseSystemCrash): it serves on,
    /// new work included, and the stop goes on, from telling the API nodes again, once
    /// another member of its group serves (`ready_to_stop`).
    fn defer_stop(&mut self, why: String, peer_stopping: Option<NodeId>) {
        let Some(stopping) = &mut self.stopping else {
            return;
        };
        stopping.deferred_for = stopping.deferred_for.or(peer_stopping);
        if stopping.system || stopping.deferred.is_some() {
            return;
        }
        tracing::error!(
            "graceful stop put off: {why}, and leaving too would leave the group without a \
             live node (NDB: node shutdown would cause system crash); this node serves on and \
             stops once another member of its group serves"
        );
        stopping.deferred = Some(why);
        stopping.refusing_since = None;
        stopping.saving = None;
        stopping.saved = false;
    }

    /// True while a graceful stop runs (put off or not).
    pub fn is_stopping(&self) -> bool {
        self.stopping.is_some()
    }

    /// True once a graceful stop saved every commit this node answered.
    #[cfg(test)]
    pub(super) fn saved_for_stop(&self) -> bool {
        (self.stopping.as_ref()).is_some_and(|s| s.saved)
    }

    /// True while a graceful stop is put off (see `defer_stop`).
    pub fn stop_deferred(&self) -> bool {
        (self.stopping.as_ref()).is_some_and(|s| s.deferred.is_some())
    }

    /// STOP_PERM_REQ from data node `peer` (its file system failed, or its save lags), which
    /// this node is about to let go: when this node stops alone, is in `peer`'s group and no
    /// third member serves, its stop is put off.
    pub(super) fn stop_yields_to(&mut self, peer: NodeId) {
        let in_group = self.qmgr.group_peers(self.me).any(|n| n == peer);
        if self.stops_alone() && in_group && !self.qmgr.group_serves_without(peer, self.me) {
            self.defer_stop(
                format!(
                    "data node {peer} of this node's group must stop (its file system failed, \
                     or its part in a global checkpoint lags)"
                ),
                Some(peer),
            );
        }
    }

    /// Data node `node`'s link closed: a stop put off for its own stop waits from now on for
    /// another member to serve (`node` again, once its node restart ends).
    pub(super) fn stop_peer_gone(&mut self, node: NodeId) {
        if let Some(stopping) = &mut self.stopping {
            if stopping.deferred_for == Some(node) {
                stopping.deferred_for = None;
            }
            // Told again if it rejoins.
            stopping.group_told.remove(&node);
            stopping.group_answered.remove(&node);
        }
    }

    /// True while another member of this node's group is alive.
    fn group_peer_alive(&self) -> bool {
        (self.qmgr.group_peers(self.me)).any(|n| self.qmgr.is_alive(n))
    }

    /// The other members of this node's group alive now.
    fn group_peers_alive(&self) -> std::collections::BTreeSet<NodeId> {
        (self.qmgr.group_peers(self.me))
            .filter(|&n| self.qmgr.is_alive(n))
            .collect()
    }

    /// True while this node stops gracefully alone (not in a stop of every data node).
    pub fn stops_alone(&self) -> bool {
        (self.stopping.as_ref()).is_some_and(|s| !s.system)
    }

    /// A data node failed or left: the node group left without a live node, for which this
    /// node must stop (2305), if any. A node that stops gracefully itself goes on with its
    /// stop when the group's members all left gracefully too (an operator taking the cluster
    /// down node by node), refusing new work from then on: a scan would miss that group's
    /// rows. A node that serves on (a stop put off included) never goes on without a group.
    pub(super) fn group_lost_here(&mut self, now: Instant) -> Option<u32> {
        if self.stopping.is_none() || self.stop_deferred() {
            return self.qmgr.group_lost(false).map(|(group, _)| group);
        }
        if let Some((group, _)) = self.qmgr.group_lost(true) {
            return Some(group);
        }
        if self.qmgr.group_lost(false).is_some() && !self.refusing() {
            tracing::warn!(
                "a node group's last node left gracefully: refusing new transactions (280) \
                 from now on"
            );
            self.begin_refusing(now);
        }
        None
    }

    /// True once a graceful stop refuses API nodes' new work.
    pub(super) fn refusing(&self) -> bool {
        (self.stopping.as_ref()).is_some_and(|s| s.refusing_since.is_some())
    }

    /// While a graceful stop refuses new work: refuses with 280 a request of API node `from`
    /// that would start work (see `refuse_new_work`): a new transaction, a scan this node
    /// would coordinate, or a schema change. The next execute of a transaction TC holds open goes on, as NDB's STOPPING_2
    /// lets transactions end (for its `transactionTimeout`). True when the frame was handled.
    pub(super) fn refuse_while_stopping(
        &mut self,
        from: NodeId,
        header: &rndb_transporter::FrameHeader,
        payload: &[u8],
        out: &mut dyn Outbox,
    ) -> bool {
        if !self.refusing() {
            return false;
        }
        let open = matches!(
            header.signal,
            gsn::TCKEYREQ | gsn::TCINDXREQ | gsn::TC_EXECUTE_REQ
        ) && self.tc.knows(super::tc::trans_id(from, header.request_id));
        // A scan another node coordinates reads this node's fragments as one of its parts:
        // refused, every scan of the cluster would fail until this node left. It holds the
        // stop no longer than its batch (a part is no transaction of this TC's).
        let part = header.signal == gsn::SCAN_TABREQ
            && ScanTabReq::decode(payload).is_ok_and(|r| r.flags & SCAN_FLAG_PART != 0);
        !open && !part && self.refuse_new_work(from, header, payload, out, stop_error())
    }
}

/// NDB's 280, for work refused or aborted by a node that stops.
fn stop_error() -> NdbError {
    NdbError::with_detail(280, "this data node is stopping")
}
