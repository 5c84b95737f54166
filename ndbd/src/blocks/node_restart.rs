//! Node restart (NDB's): a data node the cluster declared failed comes back while the cluster
//! serves, takes the dictionary from the president and the rows of its fragments from live
//! replicas, and serves again. With files (not `--initial`) it first restores its own local
//! checkpoint and redo log up to its restorable GCI g, and the live replicas then send whole
//! only the rows changed after g; the others go as their key alone ("unchanged"), and what N
//! restored that the copy neither sent nor confirmed was deleted since and is removed. One node
//! restarts at a time; the president (the master: the lowest live id not being copied to)
//! lets it in, and stays master until N serves.
//! (docs/node-restart.md has the byte layouts and the cost.)
//!
//! ```text
//!  N ─CM_REGREQ(not started)─► every node; a started one answers CM_REGREQ(started)
//!  N restores its own files up to g (the system restart's code), marks those rows restored
//!  N ─START_PERMREQ─► P ─START_PERMCONF(epoch, restart GCI, live nodes, dictionary)─► N
//!      replays it, keeping its restored rows of every table that is unchanged
//!  N ─START_INFOCONF(g, kept tables)─► P ─INCL_NODEREQ(N)─► every live node: N joins every
//!      write chain, last, and global checkpoints; once the node's transactions from before
//!      have ended ─INCL_NODECONF─► P
//!  P ─COPY_FRAGREQ(N, g, kept tables)─► every live node: for each fragment where it precedes
//!      N in the chain, COPY_ROWS (PUT: committed rows changed after g or of a table not kept;
//!      COPY_KEEP: the key of a row unchanged since g) ... ─COPY_FRAGCONF─► N
//!  N (every COPY_FRAGCONF in; rows still marked restored removed) ─START_COPYCONF─► P
//!      ─NODE_STARTED_REP(N)─► all: N is read from
//! ```
//!
//! Why the copy is right with writes going on:
//! - A write that began before the inclusion does not reach N, and none is left when the copy
//!   starts: each node confirms the inclusion only once its own transactions from before have
//!   ended, so they are all committed (or aborted) before any row is copied.
//! - A write that began after the inclusion reaches N as the last replica, from the node before
//!   it in the chain, and that is the node that copies the fragment: its COPY_ROWS and its
//!   LQHKEYREQs travel on one link, in order.
//! - A row with an uncommitted change at the source is not copied until the change commits or
//!   aborts (its committed image is then sent). So N never receives an image older than a
//!   change it has seen.
//! - While copying, N takes an update or delete of a row it does not have as done (NDB's
//!   AC_IGNORED): the copy brings the row, with that change, later.
//! - Every commit records its GCI in the row, so a row of GCI ≤ g at the source is as N
//!   restored it. A write to a row N still holds marked restored means the source's walk has
//!   not passed it (or, an insert, that the row was deleted there since): the copy brings its
//!   image later, or the insert builds it afresh; the commit clears the mark. A row deleted at
//!   the source since g is never mentioned and stays marked: it goes when the copy ends.
//!
//! Any data node that fails during the restart stops N (NDB's 2303); it can be started again.
//! N stays last in every chain while it is copied to, so no partition's primary moves then;
//! once it serves, the president moves its primaries back in a drained round (`primary.rs`).
//!
//! With files, N drops its old files once restored (they are older than what the cluster
//! holds; the sysfile is zeroed durably first) and keeps none while the copy runs. Then it starts a redo log and a local checkpoint; its
//! schema log and sysfile are written only once that checkpoint is restorable. Until then a
//! system restart finds nothing to restore on N, and starts without it.

use std::time::{Duration, Instant};

use rndb_config::NodeId;
use rndb_protocol::dih::RestartId;
use rndb_protocol::gsn;
use rndb_protocol::qmgr::{
    CmRegReq, CopyFragReq, FailRep, InclNodeReq, StartPermConf, StartPermRef,
};
use rndb_protocol::signals::block;
use rndb_transporter::frame::FRAME_PAYLOAD_BYTES_MAX;
use rndb_transporter::FrameHeader;

use super::acc::{RowSlot, SlotId, TransId};
use super::dict::log::{DictLog, SCHEMA_LOG};
use super::dih::gcp::SYSFILES;
use super::fs::FsWait;
use super::lqh::lcp::Lcps;
use super::lqh::redo::{part_dir, Redo};
use super::lqh::{Fragment, LqhWork};
use super::node_set::NodeSet;
use super::{data_node_header, Kernel, Outbox, ProtocolViolation, SendFailure, Signal};
use crate::ndbfs::format::{self, gci_hi, kind, Next, RowChange, SchemaChange, Sysfile};
use crate::ndbfs::FsOp;

/// Bytes of rows after which a COPY_ROWS frame is sent (a record that would not fit the frame
/// goes in the next one).
const COPY_FRAME_BYTES: usize = FRAME_PAYLOAD_BYTES_MAX / 2;
/// COPY_ROWS frames one step of a copy sends at most (then other work runs).
const COPY_FRAMES_PER_STEP: usize = 4;
/// How long a restarting node waits before asking the president again.
const ASK_AGAIN: Duration = Duration::from_millis(500);

/// The node restarts this node takes part in.
#[derive(Debug, Default)]
pub(crate) struct NodeRestarts {
    /// This node restarts: its progress.
    me: Option<Joining>,
    /// This node had files when it began to restart: it keeps them again after the copy.
    files: bool,
    /// This node restored its own files, or set them aside unrestored (not `--initial`), and
    /// is not let in yet: they stay on disk as they were (a crash meanwhile finds them again)
    /// and go at START_PERMCONF. What their sysfile names besides its GCI: the restart history,
    /// and whether that restart's cut of the logs was pending (`Sysfile::cut_pending`).
    files_kept: Option<Sysfile>,
    /// After the copy: the sysfile and schema log wait until a local checkpoint with at least
    /// this id is restorable.
    hold: Option<u32>,
    /// This node dropped its files to rejoin, and no sysfile has named a GCI since: a system
    /// restart would find nothing of it to restore.
    unsaved: bool,
    /// This node restarted, and this president held it started (NODE_STARTED_REP). Should
    /// that president fail, every live node hears it again from this node: the president
    /// may have failed before telling them all (`node_restart_retell_started`).
    let_in_by: Option<NodeId>,
    /// As president: the node being let in.
    admit: Option<Admit>,
    /// Inclusions this node works on (INCL_NODEREQ).
    incl: Vec<Incl>,
    /// Fragment copies this node runs for a restarting node.
    copies: Vec<Copy>,
    /// A COPY_FRAGREQ that waits until this node has handled every failure the president
    /// had when it sent it (`copy_fragreq_progress`).
    copy_waiting: Option<CopyFragReq>,
    /// For each data node whose failure this node handled: the newest GCI this node then
    /// knew the node had saved with it (restorable cluster-wide, or saved by the node for this
    /// node as master, `saved_by`). A GCI the node saved after that may be of its own side of
    /// a split (its side, with its own master, may complete a global checkpoint that the
    /// surviving side gives other changes): as president, a restarting node's own rows are
    /// kept only up to this GCI.
    saved_with: std::collections::BTreeMap<NodeId, u32>,
    /// As GCP master: the newest GCI each data node confirmed saved (GCP_SAVECONF); under
    /// this node's own id, the newest GCI a COPY_GCIREQ named here.
    saved_by: std::collections::BTreeMap<NodeId, u32>,
    /// Failed nodes that asked to rejoin (CM_REGREQ) while this node did not serve yet (a
    /// system restart without them): told that it serves once it does
    /// (`node_restart_tell_waiting`), or, when this node joins by node restart itself, taken
    /// as joining once it is let in (`exec_start_permconf`).
    asked_before_start: NodeSet,
    /// Failed nodes whose new link came up while this node did not serve yet: its CM_REGREQ
    /// to them said "not started", and it says "started" when one asks to rejoin.
    told_not_started: NodeSet,
    /// This process's run, in its CM_REGREQ: larger than any earlier run of this node had
    /// (`Kernel::set_run`).
    my_run: u64,
    /// The run each peer's CM_REGREQ on its live link named (forgotten when the link closes).
    runs: std::collections::BTreeMap<NodeId, u64>,
    /// As president: node groups whose last restorable files this node let go (it let a
    /// node in while the group's other members could not save: `last_files_of_group`), until
    /// a save names a node of the group again (`node_restart_group_saved`). Meanwhile one more
    /// fault, a cluster crash, leaves the group nothing to restore.
    pub(crate) files_given_up: std::collections::BTreeSet<u32>,
}

/// What letting a node in would do to the files that restore its node group
/// (`Kernel::last_files_of_group`).
#[derive(Clone, Copy)]
enum GroupFiles {
    /// Another live node of the group has files that restore (or nodes keep no files).
    Restored,
    /// The node's files may be the group's last: it waits.
    Last(u32),
    /// They may be, but the group's other nodes cannot save: it is let in, and they go.
    GivenUp(u32),
}

#[derive(Debug)]
struct Joining {
    /// Peers that said they serve (CM_REGREQ).
    started_peers: NodeSet,
    /// The last START_PERMREQ: to whom, when.
    asked: Option<(NodeId, Instant)>,
    /// The node a refusal named president: asked next.
    next_ask: Option<NodeId>,
    /// The president that let it in, and the nodes whose COPY_FRAGCONF is still to come.
    president: Option<NodeId>,
    awaiting_copy: NodeSet,
    /// Every COPY_FRAGCONF came; START_COPYCONF went to the president.
    copied: bool,
    /// The node may ask to be let in: its own files are restored (or it has none to).
    ready: bool,
    /// The node restored its own files: up to this GCI, saved when the cluster had last
    /// started from the second one (the last restart of the sysfile's history).
    restored: Option<(u32, Option<RestartId>)>,
    /// What the copy did: rows whose image came, and rows kept as restored ("unchanged").
    rows_copied: u64,
    rows_kept: u64,
}

#[derive(Debug)]
struct Admit {
    node: NodeId,
    step: u16,
    /// What the node restored (START_INFOCONF): passed on in COPY_FRAGREQ.
    copy: CopyFragReq,
    /// The nodes whose INCL_NODECONF is still to come.
    awaiting: NodeSet,
    /// The run of the node let in (INCL_NODEREQ's): an INCL_NODECONF for an earlier run is
    /// not for this inclusion.
    run: u64,
}

#[derive(Debug)]
struct Incl {
    node: NodeId,
    /// The run of the node the president let in.
    run: u64,
    president: NodeId,
    included: bool,
    /// This node's transactions when the inclusion came: their chains lack the node.
    before: Vec<TransId>,
}

/// A copy of this node's fragments to a restarting node.
#[derive(Debug)]
struct Copy {
    node: NodeId,
    /// (table, fragment) this node copies, and where the walk is.
    fragments: Vec<(u32, u32)>,
    at: usize,
    slot: SlotId,
    /// Rows passed over while a change of them was uncommitted.
    deferred: Vec<(u32, u32, SlotId)>,
    /// The COPY_ROWS payload being filled.
    frame: Vec<u8>,
    /// The GCI the node restored its own files up to, and the tables whose restored rows it
    /// kept (sorted): in those, a row not changed after that GCI goes as its key alone.
    gci: u32,
    kept_tables: Vec<u32>,
    /// Rows sent whole, and rows sent as "unchanged".
    rows: u64,
    unchanged: u64,
}

impl Copy {
    /// The GCI after which rows of `table_id` changed are sent whole (the others as
    /// "unchanged"), or None when the table is copied whole.
    fn since(&self, table_id: u32) -> Option<u32> {
        (self.gci > 0 && self.kept_tables.binary_search(&table_id).is_ok()).then_some(self.gci)
    }
}

/// Where a copy's walk stood before a frame was filled: a frame the send buffer cannot take
/// is dropped and its rows read again later, since a row's image must be read when it is sent
/// (a write forwarded meanwhile must not reach the node before an older image).
struct Mark {
    at: usize,
    slot: SlotId,
    deferred: Vec<(u32, u32, SlotId)>,
    rows: u64,
    unchanged: u64,
}

impl Kernel {
    /// This process's run, which its CM_REGREQ names (0 until set): a value larger than any
    /// earlier run of this node had, so that an inclusion of an earlier run is told from one of
    /// this run (`InclNodeReq`). `ndbd` sets the wall clock in nanoseconds at its start, the
    /// simulator its simulated time.
    pub fn set_run(&mut self, run: u64) {
        self.node_restart.my_run = run;
    }

    /// This process's run (see [`Kernel::set_run`]).
    pub(crate) fn node_restart_run(&self) -> u64 {
        self.node_restart.my_run
    }

    /// Data node `node`'s run as its CM_REGREQ named it (this node's own for itself), or
    /// `lqh::RUN_UNKNOWN` once its link closed: LQHKEYREQ names each replica's, so that a
    /// node that restarted since drops an operation meant for its earlier run.
    pub(crate) fn run_of(&self, node: NodeId) -> u64 {
        if node == self.me {
            return self.node_restart.my_run;
        }
        let run = self.node_restart.runs.get(&node).copied();
        run.unwrap_or(rndb_protocol::lqh::RUN_UNKNOWN)
    }

    /// Sends CM_REGREQ on a new data-node link: whether this node served when it came up.
    pub(crate) fn send_cm_regreq(&mut self, to: NodeId, started: bool, out: &mut dyn Outbox) {
        let req = CmRegReq {
            started,
            run: self.node_restart.my_run,
        };
        let header = data_node_header(gsn::CM_REGREQ, block::QMGR, block::QMGR);
        self.unsent.send(out, to, header, &mut |b| req.encode(b));
    }

    /// A node restart's signals.
    pub(crate) fn exec_node_restart_signal(
        &mut self,
        from: NodeId,
        header: &FrameHeader,
        payload: &[u8],
        out: &mut dyn Outbox,
        now: Instant,
    ) -> Result<(), ProtocolViolation> {
        let node = |payload: &[u8]| -> Result<NodeId, ProtocolViolation> {
            Ok(NodeId(FailRep::decode(payload)?.node))
        };
        let from_member = self.qmgr.is_up(from);
        match header.signal {
            // From a president or member whose failure this node has not handled yet (its
            // last frames, after it stopped): the restart they were about ended with it.
            gsn::INCL_NODEREQ if !from_member => {
                InclNodeReq::decode(payload)?;
            }
            gsn::INCL_NODECONF if !from_member => {
                InclNodeReq::decode_conf(payload)?;
            }
            gsn::NODE_STARTED_REP if !from_member => {
                node(payload)?;
            }
            gsn::COPY_FRAGREQ if !from_member => {
                CopyFragReq::decode(payload)?;
            }
            gsn::CM_REGREQ => self.exec_cm_regreq(from, CmRegReq::decode(payload)?, out, now),
            gsn::START_PERMREQ => self.exec_start_permreq(from, out),
            gsn::START_PERMREF => {
                let refusal = StartPermRef::decode(payload)?;
                tracing::info!(asked = %from, "node restart: not let in yet ({}); asking again", refusal.reason);
                let president = NodeId(refusal.president);
                if !self.qmgr.is_linked(president)
                    && self.node_restart.asked_before_start.remove(president)
                {
                    // Its new run's CM_REGREQ came before this node began its node restart,
                    // the failure of its run before only after: held failed, it was never
                    // asked, and it never heard this node wants in (seed 0x630055eb with
                    // --durable-commits: nodes 1 and 4 restarted together, node 1 was let in
                    // first and presided, and node 4 asked node 2 for good). The refusal says
                    // it presides: its link is up.
                    self.qmgr.failed.remove(president);
                    self.qmgr.include(president);
                }
                let linked = self.qmgr.is_linked(president);
                if let Some(me) = self.node_restart.me.as_mut() {
                    if president != from && linked {
                        // Asked at once: the president is the node the refusal names.
                        me.next_ask = Some(president);
                        me.asked = None;
                        self.node_restart_timer(out, now);
                    }
                }
            }
            gsn::START_PERMCONF => {
                self.exec_start_permconf(from, StartPermConf::decode(payload)?, out, now)
            }
            gsn::START_INFOCONF => {
                self.exec_start_infoconf(from, CopyFragReq::decode(payload)?, out)
            }
            gsn::INCL_NODEREQ => self.exec_incl_nodereq(from, InclNodeReq::decode(payload)?, out),
            gsn::INCL_NODECONF => {
                self.exec_incl_nodeconf(from, InclNodeReq::decode_conf(payload)?, out)
            }
            gsn::COPY_FRAGREQ => {
                let req = CopyFragReq::decode(payload)?;
                // Only for a node included here and still copied to: a request of a president
                // that failed since, arriving late, is for a run that ended (seed 0x92888).
                if self.qmgr.copying.contains(NodeId(req.node)) {
                    self.node_restart.copy_waiting = Some(req);
                    self.copy_fragreq_progress();
                }
            }
            gsn::COPY_ROWS => self.exec_copy_rows(from, payload)?,
            gsn::COPY_FRAGCONF => self.exec_copy_fragconf(from, out),
            gsn::START_COPYCONF => self.exec_start_copyconf(from, out, now),
            gsn::NODE_STARTED_REP => self.exec_node_started_rep(node(payload)?, out, now),
            other => return Err(ProtocolViolation(format!("unknown signal {other}"))),
        }
        Ok(())
    }

    /// CM_REGREQ: whether the peer serves. A start without files waits for every peer's; a
    /// node that does not serve and hears one that does joins by node restart; a failed node
    /// that says it restarts may be let in; one that says it serves was declared failed
    /// without knowing it, and is told so.
    fn exec_cm_regreq(&mut self, from: NodeId, req: CmRegReq, out: &mut dyn Outbox, now: Instant) {
        self.node_restart.runs.insert(from, req.run);
        if self.qmgr.failed.contains(from) {
            if !self.qmgr.started() && self.node_restart.me.is_none() {
                self.node_restart.asked_before_start.insert(from);
                return;
            }
            if req.started {
                let why = "the cluster declared it failed, and it still takes itself for a member";
                self.tell_failed(from, why, out);
            } else {
                tracing::info!(node = %from, "data node restarts and asks to rejoin");
                self.qmgr.joining.insert(from);
                // This node's own CM_REGREQ said "not started" when it came up while this
                // node still restored (seed 0xee6b7fc5): the joiner would wait for a system
                // restart for good. It hears that this node serves. (Only then, and only from
                // a node that serves: a node restarting itself says nothing, or the joiner,
                // which holds it failed, would take it for a stale member and stop it.)
                if self.node_restart.told_not_started.remove(from) && self.qmgr.started() {
                    self.send_cm_regreq(from, true, out);
                }
                self.incl_progress(out);
            }
            return;
        }
        if !self.qmgr.is_up(from) {
            return;
        }
        if !req.started {
            if let Some(me) = self.node_restart.me.as_mut() {
                me.started_peers.remove(from);
            }
            self.qmgr.registered.insert(from);
            self.qmgr.try_start_all_registered();
            return;
        }
        if self.qmgr.started() {
            return;
        }
        if self.node_restart.me.is_none() {
            self.begin_node_restart(from);
        }
        if let Some(me) = self.node_restart.me.as_mut() {
            me.started_peers.insert(from);
        }
        self.node_restart_timer(out, now);
    }

    /// This node serves after a system restart: every failed node that asked to rejoin
    /// meanwhile hears it (CM_REGREQ), and joins by node restart; its request counts as made
    /// now. Left waiting, such a node (started again while the others restored without it)
    /// would wait for good for a system restart that had gone on without it.
    pub(crate) fn node_restart_tell_waiting(&mut self) {
        for node in self.node_restart_take_waiting().iter() {
            self.jobs.push_back(Signal::CmRegReq {
                node,
                started: true,
            });
        }
    }

    /// The failed nodes that asked to rejoin while this node did not serve yet are joining
    /// from now on (their CM_REGREQ will not come again); which they are.
    fn node_restart_take_waiting(&mut self) -> NodeSet {
        let mut joining = NodeSet::new();
        let waiting = std::mem::take(&mut self.node_restart.asked_before_start);
        for node in waiting.iter().filter(|&n| self.qmgr.failed.contains(n)) {
            tracing::info!(node = %node, "data node restarts and asks to rejoin");
            self.qmgr.joining.insert(node);
            joining.insert(node);
        }
        joining
    }

    /// This node learnt that the cluster serves: it joins by node restart. With files (and
    /// not `--initial`), it first restores them up to its own restorable GCI, as a system
    /// restart would, and then has only what changed since copied; without, everything is.
    fn begin_node_restart(&mut self, peer: NodeId) {
        let own = self
            .restart
            .as_ref()
            .is_some_and(|r| !r.initial && r.gci.is_none() && r.restorable != Some(0));
        self.qmgr.hold_start();
        self.node_restart.me = Some(Joining {
            started_peers: NodeSet::new(),
            asked: None,
            next_ask: None,
            president: None,
            awaiting_copy: NodeSet::new(),
            copied: false,
            ready: !own,
            restored: None,
            rows_copied: 0,
            rows_kept: 0,
        });
        if own {
            tracing::warn!(node = %peer, "data node {peer} serves: this node joins the running cluster by node restart (restoring its own files first, then copying what changed since)");
            if let Some(restart) = self.restart.as_mut() {
                restart.node_restart = true;
                if restart.restorable.is_some() {
                    self.node_restart_own_restore();
                }
            }
        } else {
            tracing::warn!(node = %peer, "data node {peer} serves: this node joins the running cluster by node restart (copying every row from live replicas)");
            self.node_restart_set_files_aside();
        }
    }

    /// Nothing of this node's files is restored: every row is copied. With `--initial` the
    /// files go at once. Otherwise they stay on disk until the node is let in, as restored
    /// ones do: a sysfile that names no restorable GCI does not make a schema log and redo
    /// log useless to a system restart (seed 0x21e6703ea: node 4, which had restored its
    /// group's rows from them in the last system restart without a sysfile, dropped them
    /// when it started again, while the group's other node had no restorable checkpoint
    /// yet; a cluster crash followed, and the group had nothing to restore).
    fn node_restart_set_files_aside(&mut self) {
        let initial = self.restart.as_ref().is_some_and(|r| r.initial);
        let had_files = self.node_restart_forget_files();
        match had_files {
            // Nothing was read: the files go, named by no restart.
            Some(_) if initial => self.node_restart_remove_files(Sysfile::default()),
            _ => self.node_restart.files_kept = had_files,
        }
    }

    /// The restore is over: the files' state in memory goes (a new redo log and local
    /// checkpoint start after the copy). What their sysfile names, with no GCI: the restart
    /// history, and whether the cut of the logs at that restart was pending; `None` when
    /// there were none.
    fn node_restart_forget_files(&mut self) -> Option<Sysfile> {
        let restart = self.restart.take()?;
        self.node_restart.files = true;
        self.lqh.redo = None;
        self.dict_log = DictLog::default();
        self.lcps = Lcps::default();
        Some(Sysfile {
            restorable_gci: 0,
            cut_pending: restart.cut_pending,
            restarts: restart.restarts,
        })
    }

    /// The files on disk go: once the president let this node in after it restored them
    /// (they are older than the cluster's rows, and may be the last that restore its node
    /// group's: the president lets it in only when another node's would, see
    /// `last_files_of_group`), or at once when nothing of them is kept. First both sysfile
    /// copies are overwritten with one that names no restorable GCI, and synced: a removal is
    /// durable only once its directory is synced, and a crash must never leave the old
    /// sysfile beside a redo log that this run began anew (the next start would restore from
    /// it). That sysfile names what `own`, the files' own sysfile, named but its GCI: until
    /// they are gone, their local checkpoints and redo log may hold GCIs of an era a later
    /// system restart gave again, which only a sysfile naming that restart lets a start trust
    /// (it once named the cluster's history beside the files' own restart GCI, and a start
    /// would have counted such files as current: `restart.rs`'s `standing` reads the
    /// history), and, when the files' restart had not cut their logs yet, so says it (seed
    /// 0xf10001ed: node 2 crashed in a system restart at GCI 14 before its cut, restored its
    /// own files up to 14 in a node restart, and its disk filled before they went; a sysfile
    /// naming no GCI and no pending cut let the next system restart, at GCI 15, replay its
    /// uncut redo log's GCI 15 of the era before the first: half a bank transfer).
    /// NDBFS runs the requests one after the other, and none after one failed (`FailStop`):
    /// the second copy is touched only once the first is synced, as a save's are
    /// (`gcp_copy`). Then the schema log, the local checkpoints and the redo log go, and both
    /// copies are written again, naming the cluster's restart history as far as known
    /// (`Gcp::restarts`: still empty with `--initial`, before START_PERMCONF;
    /// `write_empty_sysfile`). The copies stay where they are, so that at every moment one of
    /// them is whole (seed 0x2a77ea335: node 2 had stopped at a system restart it could not
    /// take part in; its empty sysfile, naming that restart, was written and a crash came
    /// before its old files went, and the next system restart took its checkpoint of GCI 4
    /// from before that restart, a GCI given again since).
    fn node_restart_remove_files(&mut self, own: Sysfile) {
        self.node_restart.files_kept = None;
        self.node_restart.unsaved = true;
        self.write_empty_sysfile(own.restarts, own.cut_pending);
        let parts = self.durability.no_of_fragment_log_parts;
        let schema_dir = SCHEMA_LOG
            .rsplit_once('/')
            .map_or(SCHEMA_LOG, |(dir, _)| dir);
        let dirs = [schema_dir.to_string(), "LCP".to_string()];
        for path in dirs.into_iter().chain((0..parts).map(|p| {
            let dir = part_dir(p);
            dir.split('/').next().unwrap_or_default().to_string()
        })) {
            self.fs.push(FsOp::Remove { path }, FsWait::Nothing);
        }
        self.write_empty_sysfile(self.gcp.restarts.clone(), false);
    }

    /// Both sysfile copies name no GCI, each synced in turn, the restart history `restarts`,
    /// and `cut_pending`: the cluster's history and no cut, once this node's files hold
    /// nothing of GCIs its last restart gave again, so that a system restart counts them in
    /// (seed 0x1a13bbc21: a node whose checkpoint after its copy covered the restart GCI was
    /// taken for stale, its sysfile naming no restart, and its group could not restart).
    fn write_empty_sysfile(&mut self, restarts: Vec<RestartId>, cut_pending: bool) {
        let nothing = Sysfile {
            restorable_gci: 0,
            cut_pending,
            restarts,
        }
        .file_bytes(u32::from(self.me.0));
        // The copy the restart did not read first, as a save does (seed 0x248204582: the
        // other copy was damaged, and a crash tore this write of the good one).
        for i in 0..SYSFILES.len() {
            let path = SYSFILES[(self.gcp.sysfile_first + i) % SYSFILES.len()].to_string();
            self.fs.push(
                FsOp::Write {
                    path: path.clone(),
                    offset: 0,
                    bytes: nothing.clone(),
                },
                FsWait::Nothing,
            );
            self.fs.push(FsOp::Sync { path }, FsWait::Nothing);
        }
    }

    /// The sysfile is read and the node restarts: it restores its schema log, local
    /// checkpoint and redo log up to its own restorable GCI (or, with none, sets its files
    /// aside and has everything copied).
    pub(crate) fn node_restart_own_restore(&mut self) {
        let Some(restart) = self.restart.as_mut() else {
            return;
        };
        let gci = restart.restorable.unwrap_or(0);
        if gci == 0 {
            tracing::info!("node restart: this node has nothing restorable; every row is copied");
            self.node_restart_set_files_aside();
            if let Some(me) = self.node_restart.me.as_mut() {
                me.ready = true;
            }
            return;
        }
        restart.gci = Some(gci);
        tracing::info!(gci, "node restart: restoring this node's own schema, local checkpoint and redo log up to its restorable GCI {gci}");
        self.read_schema_log();
    }

    /// The node's own files are restored up to `gci`: the files go (a new redo log and local
    /// checkpoint start after the copy), every row restored is marked as such until the copy
    /// confirms it, and the node asks to be let in.
    pub(crate) fn node_restart_restored(&mut self, gci: u32, out: &mut dyn Outbox, now: Instant) {
        self.node_restart.files_kept = self.node_restart_forget_files();
        let own = (self.node_restart.files_kept.as_ref()).and_then(|s| s.restarts.last().copied());
        let rows = self.lqh.mark_restored();
        tracing::info!(
            gci,
            rows,
            "node restart: own files restored up to GCI {gci} ({rows} rows); asking to be let in"
        );
        if let Some(me) = self.node_restart.me.as_mut() {
            me.restored = Some((gci, own));
            me.ready = true;
        }
        self.node_restart_timer(out, now);
    }

    /// The timer: a restarting node not let in yet asks the lowest started node it knows (the
    /// president, once it knows them all); a copy waiting for rows to commit or for room in a
    /// send buffer goes on; an inclusion waiting for transactions to end checks them.
    pub(crate) fn node_restart_timer(&mut self, out: &mut dyn Outbox, now: Instant) {
        if let Some(me) = self.node_restart.me.as_mut() {
            let due = me.asked.is_none_or(|(_, at)| now >= at + ASK_AGAIN);
            if me.president.is_none() && due && me.ready {
                let next = me.next_ask.take().filter(|&n| self.qmgr.is_linked(n));
                if let Some(president) = next.or_else(|| me.started_peers.iter().next()) {
                    me.asked = Some((president, now));
                    let header = data_node_header(gsn::START_PERMREQ, block::QMGR, block::QMGR);
                    self.unsent.send(out, president, header, &mut |_| {});
                }
            }
        }
        if !self.node_restart.incl.is_empty() {
            self.incl_progress(out);
        }
        if !self.node_restart.copies.is_empty() {
            self.jobs.push_back(Signal::CopyStep);
        }
    }

    /// Sends QMGR's `signal` to data node `to`, with a `FailRep` payload naming `node`.
    pub(crate) fn send_to(
        &mut self,
        to: NodeId,
        signal: u16,
        node: Option<NodeId>,
        out: &mut dyn Outbox,
    ) {
        let header = data_node_header(signal, block::QMGR, block::QMGR);
        let rep = node.map(|n| FailRep { node: n.0 });
        self.unsent.send(out, to, header, &mut |b| {
            if let Some(rep) = rep {
                rep.encode(b)
            }
        });
    }

    /// START_PERMREQ at the president: let `from` in, unless something else runs.
    fn exec_start_permreq(&mut self, from: NodeId, out: &mut dyn Outbox) {
        let files = self.last_files_of_group(from);
        let busy = if !self.qmgr.started() || self.qmgr.master() != self.me {
            Some(format!(
                "data node {} is not the president; ask data node {}",
                self.me,
                self.qmgr.master()
            ))
        } else if !self.qmgr.joining.contains(from) && !self.qmgr.copying.contains(from) {
            Some("its CM_REGREQ has not come here".to_string())
        } else if let Some(admit) = &self.node_restart.admit {
            (admit.node != from).then(|| format!("data node {} restarts now", admit.node))
        } else if self.arbit_round_running() {
            // As NDB's president is busy for CM_REGREQ during node failure handling: a node
            // let in during a round counts on no side of it (seed 0x3b9af6bf).
            Some("a node failure is being arbitrated".to_string())
        } else if self.schema_busy() {
            Some("a schema change runs".to_string())
        } else if self.primary_switch_busy() {
            Some("primaries are moving back to a restarted node".to_string())
        } else if let GroupFiles::Last(group) = files {
            // Once let in, the node drops its files: they may be the only ones left that
            // restore its group's rows (seed 0x1a13b8850: the group's other node had been
            // copied to, and its first local checkpoint since was not restorable yet).
            Some(format!(
                "no other data node of node group {group} has files that restore the cluster's \
                 global checkpoints yet (a node restarted and its first local checkpoint since \
                 is not restorable, or no save has completed since data node {} became \
                 president): data node {from} keeps its files until one has",
                self.me
            ))
        } else if self.dict_log.records().len() + 256 > FRAME_PAYLOAD_BYTES_MAX {
            // Not sent in pieces yet: the restart cannot go on (the node asks again, and this
            // node's log says why).
            let why = format!(
                "the dictionary ({} bytes) does not fit one START_PERMCONF frame; node restart \
                 of a cluster with this many schema objects is not supported yet",
                self.dict_log.records().len()
            );
            tracing::error!(node = %from, "{why}");
            Some(why)
        } else {
            None
        };
        if let Some(why) = busy {
            let refusal = StartPermRef {
                president: self.qmgr.master().0,
                reason: why,
            };
            let header = data_node_header(gsn::START_PERMREF, block::QMGR, block::QMGR);
            self.unsent
                .send(out, from, header, &mut |b| refusal.encode(b));
            return;
        }
        if self.node_restart.admit.is_some() {
            return;
        }
        if self.qmgr.copying.contains(from) {
            // Included here for a president that failed before its restart ended (its
            // INCL_NODEREQ came late): it starts over as a joining node.
            self.qmgr.exclude_again(from);
        }
        if let GroupFiles::GivenUp(group) = files {
            tracing::warn!(node = %from, group, "node restart of data node {from}: no other node of node group {group} has files that restore the cluster's global checkpoints, but those nodes cannot save (each runs with a failed disk or a stalled save, and stops only once this node serves): it is let in, and its files, which may be the last that restore its group's rows, go");
            self.node_restart.files_given_up.insert(group);
        }
        let alive: NodeSet = self.qmgr.alive().collect();
        tracing::info!(node = %from, "node restart of data node {from}: letting it in");
        self.node_restart.admit = Some(Admit {
            node: from,
            step: gsn::START_PERMCONF,
            copy: CopyFragReq::default(),
            awaiting: NodeSet::new(),
            run: 0,
        });
        let conf = StartPermConf {
            gci: self.gcp.current,
            restarts: self.gcp.restarts.clone(),
            alive: alive.words(),
            files_restore: self.gcp.files_restore.words(),
            rejoined: self.qmgr.rejoined.iter().map(|n| n.0).collect(),
            schema_seq: self.schema.seq(),
            dict_next_id: self.dict.next_id(),
            dictionary: self.dict_log.records().to_vec(),
        };
        let header = data_node_header(gsn::START_PERMCONF, block::QMGR, block::QMGR);
        self.unsent.send(out, from, header, &mut |b| conf.encode(b));
    }

    /// The node group of `node` when no other live node of it is known to have files that
    /// restore the cluster's restorable global checkpoints (`Gcp::files_restore`); `None`
    /// without files (Diskless), and when every other live node of its group (one at least)
    /// asked to be stopped (its file system failed, or GCP stop) and stays as the group's last
    /// serving member: those can stop only once this node serves, and the group saves again only
    /// then (seed 0x1d0eb29fe); it is let in, and its files go. Stuck nodes of another group
    /// do not let it in: nothing it does makes that group save again, and its files may be
    /// the last that restore its own group's rows (seed 0x2482036f6: let in so, node 3
    /// dropped them, and a cluster crash left group 1 nothing to restore, 2308). It waits,
    /// serving nothing; API nodes do not use a data node before it serves (API_REGREQ).
    fn last_files_of_group(&self, node: NodeId) -> GroupFiles {
        if !self.has_files {
            return GroupFiles::Restored;
        }
        let Some((group, nodes)) =
            (self.qmgr.node_groups().iter()).find(|(_, n)| n.contains(&node))
        else {
            return GroupFiles::Restored;
        };
        let restores = |&n: &NodeId| n != node && self.gcp.files_restore.contains(n);
        if nodes.iter().any(restores) {
            return GroupFiles::Restored;
        }
        // Others that are down save nothing either, and do not keep it out (seed 0x77001e98,
        // 3 replicas: node 2 served alone on a failed disk, its first local checkpoint since
        // its own restart not restorable; nodes 1 and 3 each asked to be let in, and each was
        // refused because the other was down).
        let others: Vec<NodeId> = (nodes.iter().copied())
            .filter(|&n| n != node && self.qmgr.is_alive(n))
            .collect();
        if !others.is_empty() && self.group_cannot_save(&others) {
            return GroupFiles::GivenUp(*group);
        }
        GroupFiles::Last(*group)
    }

    /// A save named `saved` (`Gcp::files_restore`): the node groups with a node among them
    /// have files that restore again.
    pub(crate) fn node_restart_group_saved(&mut self, saved: NodeSet) {
        if self.node_restart.files_given_up.is_empty() {
            return;
        }
        let groups = self.qmgr.node_groups();
        let saved_group = |g: &u32| {
            groups
                .iter()
                .any(|(group, nodes)| group == g && nodes.iter().any(|&n| saved.contains(n)))
        };
        self.node_restart.files_given_up.retain(|g| !saved_group(g));
    }

    /// START_PERMCONF at the restarting node: it replays the dictionary and joins the epoch.
    fn exec_start_permconf(
        &mut self,
        from: NodeId,
        conf: StartPermConf,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        let Some(me) = self.node_restart.me.as_ref() else {
            return;
        };
        if me.president.is_some() {
            return;
        }
        // With rows of its own, the node sets them aside, takes the president's dictionary as
        // a node without files does, then keeps the rows of each table the dictionary still
        // has unchanged (a table dropped, created or changed meanwhile is copied whole).
        let restored = me.restored;
        // The cluster's restart history: the sysfiles this node writes from now on name it.
        self.gcp.restarts = conf.restarts.clone();
        if let Some(own) = self.node_restart.files_kept.take() {
            self.node_restart_remove_files(own);
        } else if self.node_restart.files {
            // Dropped before this node asked: the sysfile names the cluster's restart now.
            self.write_empty_sysfile(conf.restarts.clone(), false);
        }
        // The same restart, by number and GCI: two restarts can share a GCI, and the second
        // gives the GCIs after it again as the first did.
        let cluster = conf.restarts.last().copied();
        let history_kept = restored.is_some_and(|(_, own)| own.is_some() && own == cluster);
        if let (Some((gci, own)), false) = (restored, history_kept) {
            let cluster_restart_gci = cluster.map_or(0, |r| r.gci);
            tracing::warn!(gci, ?own, ?cluster, "node restart: the cluster restarted from GCI {cluster_restart_gci} since this node saved its files (its GCIs after that were given again to other changes); every row is copied");
        }
        let set_aside = restored.map(|_| {
            let empty = self.dict.emptied();
            (
                std::mem::replace(&mut self.dict, empty),
                std::mem::take(&mut self.lqh.fragments),
            )
        });
        let mut offset = 0;
        let mut tables = 0;
        loop {
            match format::read_record(&conf.dictionary, offset) {
                Next::Record(record) if record.kind == kind::SCHEMA => {
                    let replayed = SchemaChange::decode(record.payload)
                        .map_err(|e| e.to_string())
                        .and_then(|change| {
                            self.replay_schema_change(&change, out, now)
                                .map_err(|e| e.to_string())
                        });
                    if let Err(why) = replayed {
                        return self.node_restart_fails(format!(
                            "the dictionary from data node {from}, at byte {offset}: {why}"
                        ));
                    }
                    tables += 1;
                    offset = record.next;
                }
                Next::End => break,
                Next::Record(record) => {
                    return self.node_restart_fails(format!(
                    "the dictionary from data node {from}, at byte {offset}: a record of kind {}",
                    record.kind
                ))
                }
                Next::Bad(why) => {
                    return self.node_restart_fails(format!(
                        "the dictionary from data node {from}, at byte {offset}: {why}"
                    ))
                }
            }
        }
        let mut awaiting = NodeSet::from_words(conf.alive);
        awaiting.remove(self.me);
        // A node this one saw fail, that restarted since (a new link, `joining`) and that the
        // president holds alive, rejoined meanwhile (seed 0x537274b6: the president itself).
        for node in awaiting.iter() {
            if self.qmgr.failed.contains(node) && self.qmgr.joining.contains(node) {
                self.qmgr.joining.remove(node);
                self.qmgr.failed.remove(node);
                self.qmgr.include(node);
            }
        }
        if let Some(gone) = awaiting.iter().find(|&n| self.qmgr.failed.contains(n)) {
            return self.node_restart_fails(format!(
                "data node {from} lets this node in with data node {gone}, which failed here"
            ));
        }
        self.qmgr.adopt_alive(awaiting);
        // A failed node that asked to rejoin before this node began its own restart (both
        // started again during a system restart without them) is joining: the president may
        // include it later (seed 0x1a13b8cca: this node never confirmed that inclusion).
        self.node_restart_take_waiting();
        tracing::info!(president = %from, schema_changes = tables, copy_from = ?awaiting, "node restart: dictionary copied; waiting to be included");
        let mut info = CopyFragReq {
            node: self.me.0,
            ..CopyFragReq::default()
        };
        if let (Some((old_dict, old_fragments)), Some((gci, _))) = (set_aside, restored) {
            let kept = self.keep_restored_tables(&old_dict, old_fragments, history_kept);
            if !kept.is_empty() {
                info.gci = gci;
                info.tables = kept;
            }
        }
        self.gcp.current = self.gcp.current.max(conf.gci);
        self.gcp.files_restore = NodeSet::from_words(conf.files_restore);
        // Chains as every other node orders them: the nodes that rejoined before, then this
        // one, last; and this node reads nothing of its own until it is started.
        self.qmgr.rejoined = conf.rejoined.iter().map(|&n| NodeId(n)).collect();
        self.qmgr.rejoined.retain(|&n| n != self.me);
        self.qmgr.rejoined.push(self.me);
        self.qmgr.copying.insert(self.me);
        // The dictionary as this node's own schema records: what it sends a node that
        // restarts after it, and what its schema log will hold.
        self.dict_log.set_records(conf.dictionary);
        self.schema.set_seq(conf.schema_seq);
        // The president's counter, past the copied changes' ids where a system restart dropped
        // an object some node had made: this node, master next, gave the next index the ids
        // the others had given it before, and their builds never met (sim seed 0x600012a0).
        self.dict.advance_next_id(conf.dict_next_id);
        self.lqh.copying = true;
        self.qmgr.beating = true;
        if let Some(me) = self.node_restart.me.as_mut() {
            me.president = Some(from);
            me.awaiting_copy = awaiting;
        }
        let header = data_node_header(gsn::START_INFOCONF, block::QMGR, block::QMGR);
        self.unsent.send(out, from, header, &mut |b| info.encode(b));
    }

    /// After the president's dictionary is replayed: the restored fragments of every table
    /// it has with the same id, version and definition as restored replace the new, empty
    /// ones (with `history_kept`; else none does); the rest are freed. Returns the tables
    /// kept, sorted.
    fn keep_restored_tables(
        &mut self,
        old_dict: &super::dict::Dict,
        mut old_fragments: hashbrown::HashMap<u32, Vec<Fragment>>,
        history_kept: bool,
    ) -> Vec<u32> {
        let mut kept = Vec::new();
        let mut spare: Vec<Fragment> = Vec::new();
        for table_id in self.dict.table_ids() {
            let same = self
                .dict
                .get(table_id)
                .zip(old_dict.get(table_id))
                .is_some_and(|(new, old)| {
                    new.info == old.info
                        && new.fragment_count == old.fragment_count
                        && new.hidden_for == old.hidden_for
                });
            if !history_kept || !same {
                continue;
            }
            let Some(mut fragments) = old_fragments.remove(&table_id) else {
                continue;
            };
            // The ordered indexes are built again over every row once the copy ends.
            for fragment in &mut fragments {
                for index in &mut fragment.ordered {
                    index.clear(&mut self.lqh.memory);
                }
                fragment.ordered.clear();
            }
            spare.extend(
                self.lqh
                    .fragments
                    .insert(table_id, fragments)
                    .into_iter()
                    .flatten(),
            );
            kept.push(table_id);
        }
        let gone: Vec<u32> = old_fragments.keys().copied().collect();
        let rows_dropped: usize = (old_fragments.values().flatten())
            .map(|f| f.rows.len())
            .sum();
        spare.extend(old_fragments.into_values().flatten());
        self.lqh.free_fragments(spare);
        let copied_whole: Vec<u32> = (self.dict.table_ids().into_iter())
            .filter(|id| kept.binary_search(id).is_err())
            .collect();
        tracing::info!(kept = ?kept, copied_whole = ?copied_whole, dropped = ?gone, rows_dropped, "node restart: restored rows kept for {} tables; {} tables are copied whole (created, changed or dropped since, or a history the cluster dropped)", kept.len(), copied_whole.len());
        kept
    }

    /// START_INFOCONF at the president: every live node includes the restarting one. What
    /// it restored goes to the copying nodes later, in COPY_FRAGREQ.
    fn exec_start_infoconf(&mut self, from: NodeId, info: CopyFragReq, out: &mut dyn Outbox) {
        let alive: NodeSet = self.qmgr.alive().collect();
        let Some(admit) = self.node_restart.admit.as_mut() else {
            return;
        };
        if admit.node != from || admit.step != gsn::START_PERMCONF {
            return;
        }
        let saved_with = self.node_restart.saved_with.get(&from).copied();
        admit.copy = if info.gci > 0 && saved_with.is_none_or(|gci| info.gci > gci) {
            // Rows it restored from GCIs this node cannot vouch for: everything is sent whole
            // (what it restored that the copy does not send is removed when the copy ends).
            tracing::warn!(node = %from, restored_gci = info.gci, saved_with = ?saved_with, "node restart of data node {from}: it restored its own files up to GCI {}, newer than the last GCI this node knows it saved with the cluster; every row is copied", info.gci);
            CopyFragReq {
                node: from.0,
                ..CopyFragReq::default()
            }
        } else {
            CopyFragReq {
                node: from.0,
                ..info
            }
        };
        // The run let in: START_PERMREQ came on the link its CM_REGREQ came on (admission
        // needs that CM_REGREQ, and a closed link ends the admission).
        let run = (self.node_restart.runs.get(&from).copied()).unwrap_or_default();
        admit.step = gsn::INCL_NODEREQ;
        admit.awaiting = alive;
        admit.run = run;
        let req = InclNodeReq { node: from.0, run };
        for node in alive.iter() {
            if node == self.me {
                self.exec_incl_nodereq(self.me, req, out);
            } else {
                let header = data_node_header(gsn::INCL_NODEREQ, block::QMGR, block::QMGR);
                self.unsent.send(out, node, header, &mut |b| req.encode(b));
            }
        }
    }

    /// INCL_NODEREQ: include `node` once its link is here, and confirm once this node's
    /// transactions from before have ended.
    fn exec_incl_nodereq(&mut self, president: NodeId, req: InclNodeReq, out: &mut dyn Outbox) {
        let node = NodeId(req.node);
        if node == self.me {
            return;
        }
        // A durable commit waiting only to answer is over: its rows are in every replica,
        // and the copy takes them (waited for, it could wait on a save that this node
        // restart is the group's way to (its partner's disk failed), for good).
        let before = self.tc.running_transaction_ids();
        self.node_restart.incl.push(Incl {
            node,
            run: req.run,
            president,
            included: false,
            before,
        });
        self.incl_progress(out);
    }

    /// Inclusions go on: a node whose link and CM_REGREQ are here joins the chains; a node
    /// included here whose transactions from before have ended is confirmed.
    fn incl_progress(&mut self, out: &mut dyn Outbox) {
        let mut confirmed = Vec::new();
        let mut incl = std::mem::take(&mut self.node_restart.incl);
        incl.retain_mut(|i| {
            let run = self.node_restart.runs.get(&i.node).copied();
            if !i.included && run.is_some_and(|run| run > i.run) {
                // A later run of the node registered here: the run the president let in is
                // gone, and its inclusion with it. (Seed 0x5504ec7: president 1 included node
                // 4 and stopped; node 4 then stopped (2303) and started again, and the request
                // reached node 2 over a slow link after the new run's CM_REGREQ. Taken for
                // the new run, node 4 was a member at node 2 that never knew it, and the next
                // restart, node 1's, waited for its copy for good.)
                tracing::warn!(node = %i.node, president = %i.president, "the inclusion of an earlier run of data node {}; dropped", i.node);
                return false;
            }
            if !i.included && self.qmgr.copying.contains(i.node) && self.qmgr.is_up(i.node) {
                // Included already (an inclusion that a failed president began).
                i.included = true;
            }
            if !i.included && self.qmgr.joining.contains(i.node) && run == Some(i.run) {
                i.included = true;
                // The transactions from before are those running now: one that began after
                // the INCL_NODEREQ came and before its node's link did (a slow link) has
                // chains without the node too, and its change may reach the node by neither
                // its chain nor the copy that follows the confirmation (seed 0x8003c3f).
                i.before = self.tc.running_transaction_ids();
                let node = i.node;
                self.qmgr.joining.remove(node);
                self.qmgr.failed.remove(node);
                self.qmgr.copying.insert(node);
                self.qmgr.rejoined.retain(|&n| n != node);
                self.qmgr.rejoined.push(node);
                self.qmgr.include(node);
                self.gcp.forget_failed(node);
                self.gcp_included_while_saving(node, out);
                if i.president == self.me {
                    self.gcp_include(node, out);
                    self.arbit_include(node, out);
                }
                tracing::info!(node = %node, "data node {node} included: it takes writes (last in every chain) and global checkpoints while its fragments are copied");
            }
            i.before.retain(|&t| self.tc.is_running(t));
            // Transactions the node's earlier run coordinated, with work here, are decided
            // first: the node must not start while one may still commit or abort (seed
            // 0x31df3: an orphan reported late stayed undecided for good).
            let orphans = self.foreign.orphans.values().any(|o| o.tc_node == i.node);
            // Nor while this node holds for a round moving primaries: its chains may then
            // differ from the president's (a round of a failed president that this node has
            // not taken, and the president has), and the copy that follows the confirmation
            // is planned from every node's chains: a fragment each side took the other to
            // copy would reach the node from no one. The round ends first (the new president
            // settles the order for a node that asks).
            let holding = self.primary_switch_holding();
            if i.included && i.before.is_empty() && !orphans && !holding {
                confirmed.push((
                    i.president,
                    InclNodeReq {
                        node: i.node.0,
                        run: i.run,
                    },
                ));
                return false;
            }
            true
        });
        incl.append(&mut self.node_restart.incl);
        self.node_restart.incl = incl;
        for (president, conf) in confirmed {
            if president == self.me {
                self.exec_incl_nodeconf(self.me, conf, out);
            } else {
                let header = data_node_header(gsn::INCL_NODECONF, block::QMGR, block::QMGR);
                self.unsent
                    .send(out, president, header, &mut |b| conf.encode(b));
            }
        }
    }

    /// INCL_NODECONF at the president: once every live node included the node, each copies
    /// its fragments to it.
    fn exec_incl_nodeconf(&mut self, from: NodeId, conf: InclNodeReq, out: &mut dyn Outbox) {
        let node = NodeId(conf.node);
        let Some(admit) = self.node_restart.admit.as_mut() else {
            return;
        };
        // Of the run let in only: a confirmation of an earlier run's inclusion (the node
        // failed during it and was let in again) can arrive late over a held link, and taken
        // for this one it started the copy while a transaction from before this inclusion
        // still ran at `from`; its change reached the node by neither its chain nor the copy
        // (seed 0x8905db8).
        if admit.node != node || admit.step != gsn::INCL_NODEREQ || admit.run != conf.run {
            return;
        }
        admit.awaiting.remove(from);
        if !admit.awaiting.is_empty() {
            return;
        }
        admit.step = gsn::COPY_FRAGREQ;
        let req = admit.copy.clone();
        tracing::info!(node = %node, restored_gci = req.gci, kept_tables = req.tables.len(), "node restart of data node {node}: every node included it; copying its fragments");
        let alive: NodeSet = self.qmgr.alive().collect();
        let req = CopyFragReq {
            alive: alive.words(),
            ..req
        };
        let sources: Vec<NodeId> = alive.iter().filter(|&n| n != node).collect();
        for source in sources {
            if source == self.me {
                self.exec_copy_fragreq(req.clone());
            } else {
                let header = data_node_header(gsn::COPY_FRAGREQ, block::QMGR, block::QMGR);
                self.unsent
                    .send(out, source, header, &mut |b| req.encode(b));
            }
        }
    }

    /// A waiting COPY_FRAGREQ goes on once every node alive here was alive at the president
    /// when it sent it: a node planned by the chains of a view that still held a node the
    /// president had seen fail, and left the fragments where that node came before the
    /// restarting one to it, a dead node (seed 0xb102a7c: node 4 heard of node 5's graceful
    /// stop over a slow link only after node 6's copy; two thirds of group {4, 5, 6}'s
    /// fragments were never copied, and node 6 removed rows it had restored).
    fn copy_fragreq_progress(&mut self) {
        let Some(req) = &self.node_restart.copy_waiting else {
            return;
        };
        if !self.qmgr.copying.contains(NodeId(req.node)) {
            self.node_restart.copy_waiting = None;
            return;
        }
        let at_president = NodeSet::from_words(req.alive);
        if let Some(ahead) = self.qmgr.alive().find(|&n| !at_president.contains(n)) {
            tracing::debug!(node = %ahead, "COPY_FRAGREQ waits until this node has handled the failure of data node {ahead}, as the president had");
            return;
        }
        if let Some(req) = self.node_restart.copy_waiting.take() {
            self.exec_copy_fragreq(req);
        }
    }

    /// COPY_FRAGREQ: copy to the node every fragment where this node precedes it in the
    /// chain (of the tables it kept, only what changed after the GCI it restored).
    fn exec_copy_fragreq(&mut self, req: CopyFragReq) {
        let node = NodeId(req.node);
        let mut kept_tables = req.tables;
        kept_tables.sort_unstable();
        let mut fragments = Vec::new();
        for table_id in self.dict.table_ids() {
            let count = self.lqh.fragments.get(&table_id).map_or(0, Vec::len) as u32;
            for fragment in 0..count {
                let chain: Vec<NodeId> = self
                    .qmgr
                    .chain_order(self.dih.replicas(fragment))
                    .into_iter()
                    .filter(|&n| self.qmgr.is_alive(n))
                    .collect();
                let before = chain
                    .iter()
                    .position(|&n| n == node)
                    .and_then(|at| at.checked_sub(1).and_then(|p| chain.get(p).copied()));
                if before == Some(self.me) {
                    fragments.push((table_id, fragment));
                }
            }
        }
        tracing::info!(node = %node, fragments = fragments.len(), restored_gci = req.gci, kept_tables = kept_tables.len(), "copying fragments to restarting data node {node}");
        self.node_restart.copies.push(Copy {
            node,
            fragments,
            at: 0,
            slot: 0,
            deferred: Vec::new(),
            frame: Vec::new(),
            gci: req.gci,
            kept_tables,
            rows: 0,
            unchanged: 0,
        });
        self.jobs.push_back(Signal::CopyStep);
    }

    /// One step of every copy: up to a few COPY_ROWS frames each. A copy whose frame finds
    /// the send buffer full, or whose last rows wait for a commit, goes on at the next timer.
    pub(crate) fn copy_step(&mut self, out: &mut dyn Outbox) {
        let mut copies = std::mem::take(&mut self.node_restart.copies);
        copies.retain_mut(|copy| self.copy_some(copy, out));
        copies.append(&mut self.node_restart.copies);
        self.node_restart.copies = copies;
    }

    /// Goes on with one copy; false once it is done (or its node is gone).
    fn copy_some(&mut self, copy: &mut Copy, out: &mut dyn Outbox) -> bool {
        for _ in 0..COPY_FRAMES_PER_STEP {
            let mark = Mark {
                at: copy.at,
                slot: copy.slot,
                deferred: copy.deferred.clone(),
                rows: copy.rows,
                unchanged: copy.unchanged,
            };
            let walked = self.fill_copy_frame(copy);
            if !copy.frame.is_empty() {
                let header = data_node_header(gsn::COPY_ROWS, block::DBLQH, block::DBLQH);
                let frame = std::mem::take(&mut copy.frame);
                match out.send(copy.node, header, &mut |b| b.extend_from_slice(&frame)) {
                    Ok(()) => {}
                    Err(SendFailure::Overloaded) => {
                        // Read again at the next timer.
                        copy.at = mark.at;
                        copy.slot = mark.slot;
                        copy.deferred = mark.deferred;
                        copy.rows = mark.rows;
                        copy.unchanged = mark.unchanged;
                        return true;
                    }
                    Err(SendFailure::Gone) => return false,
                }
                continue;
            }
            if walked {
                if !copy.deferred.is_empty() {
                    // Rows with uncommitted changes: again at the next timer.
                    return true;
                }
                tracing::info!(node = %copy.node, rows_copied = copy.rows, rows_unchanged = copy.unchanged, "fragments copied to restarting data node {}: {} rows sent whole, {} as unchanged since GCI {}", copy.node, copy.rows, copy.unchanged, copy.gci);
                self.send_to(copy.node, gsn::COPY_FRAGCONF, None, out);
                return false;
            }
        }
        self.jobs.push_back(Signal::CopyStep);
        true
    }

    /// Fills the copy's frame with committed rows from where its walk stopped, then with the
    /// deferred rows whose change has ended. True when the walk has passed every row.
    fn fill_copy_frame(&mut self, copy: &mut Copy) -> bool {
        while copy.frame.len() < COPY_FRAME_BYTES {
            let Some(&(table_id, fragment)) = copy.fragments.get(copy.at) else {
                break;
            };
            let Some(rows) = self
                .lqh
                .fragments
                .get(&table_id)
                .and_then(|f| f.get(fragment as usize))
                .map(|f| &f.rows)
            else {
                copy.at += 1;
                copy.slot = 0;
                continue;
            };
            if copy.slot >= rows.id_end() {
                copy.at += 1;
                copy.slot = 0;
                continue;
            }
            let id = copy.slot;
            let Some(slot) = rows.slot(id) else {
                copy.slot += 1;
                continue;
            };
            if slot.pending.is_some() {
                copy.deferred.push((table_id, fragment, id));
            } else if !append_slot(copy, table_id, fragment, slot) {
                break;
            }
            copy.slot += 1;
        }
        if copy.at < copy.fragments.len() {
            return false;
        }
        let mut deferred = std::mem::take(&mut copy.deferred);
        deferred.retain(|&(table_id, fragment, id)| {
            if copy.frame.len() >= COPY_FRAME_BYTES {
                return true;
            }
            let Some(slot) = self
                .lqh
                .fragments
                .get(&table_id)
                .and_then(|f| f.get(fragment as usize))
                .and_then(|f| f.rows.slot(id))
            else {
                return false;
            };
            slot.pending.is_some() || !append_slot(copy, table_id, fragment, slot)
        });
        copy.deferred = deferred;
        true
    }

    /// COPY_ROWS at the restarting node: each row's committed image is installed (with the
    /// GCI of its last change); a row sent as unchanged is confirmed as restored.
    fn exec_copy_rows(&mut self, from: NodeId, payload: &[u8]) -> Result<(), ProtocolViolation> {
        let Some(me) = &self.node_restart.me else {
            return Err(ProtocolViolation(format!(
                "COPY_ROWS from data node {from}, and this node does not restart"
            )));
        };
        if !me.awaiting_copy.contains(from) {
            // Rows of a copy this run was not let in for (see `exec_copy_fragconf`).
            return Ok(());
        }
        let mut offset = 0;
        let (mut copied, mut kept) = (0, 0);
        loop {
            match format::read_record(payload, offset) {
                Next::Record(record) if matches!(record.kind, kind::PUT | kind::COPY_KEEP) => {
                    let change = RowChange::decode(record.payload, record.kind)?;
                    let applied = if record.kind == kind::PUT {
                        copied += 1;
                        self.lqh.restore_change(&self.dict, &change, record.gci)
                    } else {
                        kept += 1;
                        (self.lqh).confirm_restored(change.table_id, change.fragment, change.key)
                    };
                    if let Err(e) = applied {
                        self.node_restart_fails(format!(
                            "a row copied from data node {from} (table {}, fragment {}): {e}",
                            change.table_id, change.fragment
                        ));
                        return Ok(());
                    }
                    offset = record.next;
                }
                Next::End => {
                    if let Some(me) = self.node_restart.me.as_mut() {
                        me.rows_copied += copied;
                        me.rows_kept += kept;
                    }
                    return Ok(());
                }
                Next::Record(record) => {
                    return Err(ProtocolViolation(format!(
                        "COPY_ROWS: a record of kind {} at byte {offset}",
                        record.kind
                    )))
                }
                Next::Bad(why) => {
                    return Err(ProtocolViolation(format!(
                        "COPY_ROWS: at byte {offset}: {why}"
                    )))
                }
            }
        }
    }

    /// COPY_FRAGCONF at the restarting node: once every source is done, the president hears
    /// it. The ordered indexes are built over the copied rows, and (with files) a redo log and
    /// a local checkpoint start.
    fn exec_copy_fragconf(&mut self, from: NodeId, out: &mut dyn Outbox) {
        let Some(me) = self.node_restart.me.as_mut() else {
            return;
        };
        if !me.awaiting_copy.contains(from) {
            // A copy this run was not let in for (an earlier run's, asked by a president
            // that failed since): it ends nothing (seed 0x92888).
            return;
        }
        me.awaiting_copy.remove(from);
        if !me.awaiting_copy.is_empty() || me.copied {
            return;
        }
        me.copied = true;
        let president = me.president.unwrap_or(from);
        let (restored, copied, kept) = (me.restored, me.rows_copied, me.rows_kept);
        // What the copy neither sent nor confirmed was deleted at the live replicas after the
        // restored GCI.
        let removed = self.lqh.remove_unconfirmed();
        match restored {
            Some((gci, _)) => tracing::info!(path = "own files, then changes copied", restored_gci = gci, rows_copied = copied, rows_kept = kept, rows_removed = removed, "node restart: every fragment copied: {copied} rows copied, {kept} kept from this node's own files (unchanged since GCI {gci}), {removed} removed (deleted since)"),
            None => tracing::info!(path = "full copy", rows_copied = copied, rows_kept = 0, rows_removed = 0, "node restart: every fragment copied: {copied} rows copied, 0 kept"),
        }
        self.lqh.copying = false;
        if let Err(e) = self.lqh.rebuild_ordered_indexes(&self.dict) {
            return self.node_restart_fails(format!("building the ordered indexes: {e}"));
        }
        if self.node_restart.files {
            let me = u32::from(self.me.0);
            self.lqh.redo = Some(Redo::new(me, &self.durability, &[]));
            self.lcps = Lcps::new(self.durability.time_between_local_checkpoints, 0, 0);
            self.lcps.start_now = true;
            self.node_restart.hold = Some(1);
            tracing::info!("node restart: every fragment copied; a redo log and a local checkpoint start (the schema log and sysfile are written once it is restorable)");
        } else {
            tracing::info!("node restart: every fragment copied");
        }
        self.send_to(president, gsn::START_COPYCONF, None, out);
    }

    /// START_COPYCONF at the president: the node is started, everywhere.
    fn exec_start_copyconf(&mut self, from: NodeId, out: &mut dyn Outbox, now: Instant) {
        if self
            .node_restart
            .admit
            .as_ref()
            .is_none_or(|a| a.node != from)
        {
            return;
        }
        self.node_restart.admit = None;
        let alive: Vec<NodeId> = self.qmgr.alive().collect();
        for node in alive {
            if node == self.me {
                self.exec_node_started_rep(from, out, now);
            } else {
                self.send_to(node, gsn::NODE_STARTED_REP, Some(from), out);
            }
        }
    }

    /// NODE_STARTED_REP: `node` restarted; it is read from like any replica. (Heard again
    /// from the node itself when its president failed: then it may be known here already.)
    fn exec_node_started_rep(&mut self, node: NodeId, out: &mut dyn Outbox, now: Instant) {
        if !self.qmgr.copying.remove(node) {
            return;
        }
        if self.qmgr.master() == self.me {
            // The president now (the restarted node itself when its id is the lowest, which
            // then takes over the global checkpoints, `gcp_started_as_master`) moves its
            // primaries back.
            self.primary_switch_queue(node);
        }
        if node == self.me {
            let Some(me) = self.node_restart.me.take() else {
                return;
            };
            self.node_restart.let_in_by = me.president;
            self.qmgr.set_started(now);
            tracing::info!(
                gci = self.gcp.current,
                "node restart complete: data node {node} started"
            );
            self.gcp_started_as_master(out, now);
            self.dict_takeover_after_restart(out, now);
        } else if node != self.me {
            tracing::info!(node = %node, "data node {node} started (node restart)");
        }
    }

    /// COPY_GCIREQ at a restarted node whose copied rows are not yet in a restorable local
    /// checkpoint: no sysfile is written (a system restart must not take this node's files
    /// for a copy of the cluster's). True when the sysfile waits so.
    pub(crate) fn sysfile_held(&mut self, gci: u64) -> bool {
        let Some(first) = self.node_restart.hold else {
            return false;
        };
        // The master made the GCI restorable; this node knows it is once the sysfiles of the
        // others name it (GCP_RESTORABLE_REP).
        self.lcp_promote_upto(gci_hi(gci));
        if self.lcps.promoted >= first {
            self.node_restart_hold_ends();
        }
        true
    }

    /// GCP_SAVEREQ at a node that holds its sysfile after a node restart's copy: true when
    /// its files will restore `gci` once the save is done, because the local checkpoint it
    /// took after the copy is complete and covers no GCI past `gci`. The hold then ends here,
    /// before the save's syncs, so that the schema log is saved with this GCI and
    /// COPY_GCIREQ writes the sysfile. Until then the node answers GCP_SAVEREF, and a GCI
    /// that no node of its group confirmed is not made restorable: a group whose other
    /// members failed meanwhile has acknowledged no durable commit that its files lack.
    pub(crate) fn node_restart_restorable_at(&mut self, gci: u64) -> bool {
        let Some(first) = self.node_restart.hold else {
            return true;
        };
        self.lcp_promote_upto(gci_hi(gci));
        if self.lcps.promoted < first {
            return false;
        }
        self.node_restart_hold_ends();
        true
    }

    /// The local checkpoint after the copy is restorable: the schema log and the sysfile are
    /// written with each save from here on.
    fn node_restart_hold_ends(&mut self) {
        self.node_restart.hold = None;
        let records = self.dict_log.records().to_vec();
        self.dict_log = DictLog::with_records(u32::from(self.me.0), records);
        self.dict_log.set_compact_after(self.schema_compact_after);
        tracing::info!(lcp = self.lcps.promoted, "node restart: the local checkpoint after the copy is restorable; its schema log and sysfile are written with each save from here on");
    }

    /// GCP_SAVECONF at the GCP master: `node` saved global checkpoint `gci` with this node's
    /// cluster (its redo log holds it whole). For this node itself: a COPY_GCIREQ named `gci`,
    /// so every node its master held live saved it.
    pub(crate) fn node_restart_saved(&mut self, node: NodeId, gci: u32) {
        let saved = self.node_restart.saved_by.entry(node).or_default();
        *saved = (*saved).max(gci);
    }

    /// True while the president must not let a node in: a schema change or index build runs.
    fn schema_busy(&self) -> bool {
        self.schema.is_busy() || !self.builds.running.is_empty()
    }

    /// True while a node restart runs here as president (schema changes wait: NDB's 711).
    pub(crate) fn node_restart_running(&self) -> bool {
        self.node_restart.admit.is_some()
    }

    /// The restart cannot go on: this node stops, and may be started again.
    pub(super) fn node_restart_fails(&mut self, why: String) {
        let why = format!("error 2303: System error, node killed during node restart: {why}");
        tracing::error!("{why}");
        self.fatal.get_or_insert(why);
    }

    /// A data node failed (NODE_FAILREP in QMGR): a restart it took part in ends.
    pub(crate) fn node_restart_node_failed(&mut self, node: NodeId) {
        // What this node knew the failed node had saved: confirmed to this node as GCP
        // master, restorable here if its files restore that GCI (`files_restore`), or named by
        // a COPY_GCIREQ that came here before the failure and said it confirmed the save (a
        // master sends the NODE_FAILREP of a node it leaves out first), and never less than
        // what was known at its last failure. A node that failed while being copied to, or
        // before its first local checkpoint since, saved nothing with the cluster: its files
        // are still those of its last failure (seed 0x720d30f: node 2, on the losing side of a
        // split, had saved GCI 14 of its own; its restart failed as its disk filled, before
        // it could drop those files; counted as having saved the cluster's restorable GCI, its
        // next restart kept its own rows of GCIs 12 to 14, and a register went back to 0).
        let saved_by = self.node_restart.saved_by.remove(&node).unwrap_or(0);
        let restorable = match self.gcp.files_restore.contains(node) {
            true => self.gcp.restorable,
            false => 0,
        };
        let copied = match self.gcp.copy_saved.contains(node) {
            true => (self.node_restart.saved_by.get(&self.me).copied()).unwrap_or(0),
            false => 0,
        };
        let before = self.node_restart.saved_with.get(&node).copied();
        let known = saved_by
            .max(restorable)
            .max(copied)
            .max(before.unwrap_or(0));
        self.node_restart.saved_with.insert(node, known);
        // An inclusion the failed node asked for as president and that has not begun here
        // ends with it (the restarting node stops too): kept, it would include that node's
        // next run, which no president let in, as soon as that run's link came (seed
        // 0x713fcd90: node 2 then named it a copy source, and no restart finished again).
        self.node_restart
            .incl
            .retain(|i| i.president != node || i.included);
        if let Some(me) = &self.node_restart.me {
            // Once every fragment is copied and START_COPYCONF went out, the president decides:
            // it either held this node started on that message (NODE_STARTED_REP, perhaps
            // still on its way here) or ends the restart itself (it declares this node failed).
            // Stopping here as well would lose a node group the president counts on: it let
            // node 4 stop for its disk because node 3, its group peer, had started, while
            // NODE_STARTED_REP still crossed a slow link to node 3 (seed 0x4190b11a).
            if !me.copied || me.president.is_none_or(|p| p == node) {
                return self.node_restart_fails(format!(
                    "data node {node} failed while this node restarted; start it again"
                ));
            }
            tracing::info!(failed = %node, "data node {node} failed after this node's fragments were copied: its president decides whether this node started");
        }
        self.node_restart_link_lost(node);
        self.copy_fragreq_progress();
        if let Some(admit) = self.node_restart.admit.take() {
            // Another node failed during the restart: its copy or inclusion may never come.
            // The restarting node is declared failed too, and may be started again.
            tracing::warn!(node = %admit.node, failed = %node, "node restart of data node {} ends: data node {node} failed", admit.node);
            self.jobs.push_back(Signal::AbortNodeRestart(admit.node));
        }
    }

    /// Data node `failed` failed: when it was the president that held this node started after
    /// its node restart, every live node hears NODE_STARTED_REP from this node again. The
    /// president may have failed with the report still on its way to some of them (seed
    /// 0x8f0d3a9c: node 2 never heard that node 3 started, counted it on no side when node 4,
    /// node 3's group peer, crashed next, and stopped its side with 2305).
    pub(crate) fn node_restart_retell_started(&mut self, failed: NodeId, out: &mut dyn Outbox) {
        if self.node_restart.let_in_by != Some(failed) {
            return;
        }
        self.node_restart.let_in_by = None;
        let alive: Vec<NodeId> = self.qmgr.alive().filter(|&n| n != self.me).collect();
        tracing::info!(president = %failed, "data node {failed}, the president that held this node started after its node restart, failed: every live node hears again that it started");
        for node in alive {
            self.send_to(node, gsn::NODE_STARTED_REP, Some(self.me), out);
        }
    }

    /// As president: a node restart that cannot finish ends with the restarting node declared
    /// failed (it stops, NDB's 2315, and may be started again).
    pub(crate) fn abort_node_restart(&mut self, node: NodeId, out: &mut dyn Outbox, now: Instant) {
        let why = "a data node failed during its node restart";
        if self.qmgr.is_up(node) {
            return self.declare_failed(node, why, out, now);
        }
        self.tell_failed(node, why, out);
    }

    /// Tells a data node that is not a member here that the cluster holds it failed
    /// (NODE_FAILREP naming it: it stops), and closes its link after that; what waited for
    /// the link ends.
    fn tell_failed(&mut self, node: NodeId, why: &str, out: &mut dyn Outbox) {
        let rep = FailRep { node: node.0 };
        let header = data_node_header(gsn::NODE_FAILREP, block::QMGR, block::QMGR);
        self.unsent.send(out, node, header, &mut |b| rep.encode(b));
        out.declare_failed(node, why.into());
        self.node_restart_link_lost(node);
    }

    /// True once the president's inclusion of `node` (a node restarting) has reached this
    /// node: an INCL_NODEREQ waits or was done here.
    pub(crate) fn node_restart_inclusion_begun(&self, node: NodeId) -> bool {
        self.qmgr.copying.contains(node) || self.node_restart.incl.iter().any(|i| i.node == node)
    }

    /// True while this node's files cannot restart it: it dropped them to rejoin the running
    /// cluster by node restart, and its sysfile has named no GCI since (a system restart then
    /// finds nothing of it to restore).
    pub fn files_lag(&self) -> bool {
        self.node_restart.unsaved
    }

    /// This node's CM_REGREQ on `node`'s new link says "not started".
    pub(crate) fn node_restart_told_not_started(&mut self, node: NodeId) {
        self.node_restart.told_not_started.insert(node);
    }

    /// A sysfile naming a GCI was written.
    pub(crate) fn node_restart_sysfile_saved(&mut self) {
        self.node_restart.unsaved = false;
    }

    /// True while this node joins the running cluster by node restart.
    pub(crate) fn node_restart_joining(&self) -> bool {
        self.node_restart.me.is_some()
    }

    /// A data node's link closed: what waited for it ends (an inclusion, a copy to it, its
    /// admission).
    pub(crate) fn node_restart_link_lost(&mut self, node: NodeId) {
        self.node_restart.runs.remove(&node);
        // It served when it said so; it says so again on its next link if it still does (a
        // peer that failed and restarts would otherwise be asked, and refuse, for good).
        if let Some(me) = self.node_restart.me.as_mut() {
            me.started_peers.remove(node);
        }
        self.node_restart.asked_before_start.remove(node);
        self.node_restart.told_not_started.remove(node);
        self.qmgr.joining.remove(node);
        self.qmgr.copying.remove(node);
        self.node_restart.incl.retain(|i| i.node != node);
        self.node_restart.copies.retain(|c| c.node != node);
        if let Some(admit) = self.node_restart.admit.as_ref().filter(|a| a.node == node) {
            tracing::warn!(node = %node, "node restart of data node {node} ends: its link closed");
            if admit.step != gsn::START_PERMCONF {
                self.jobs.push_back(Signal::InclusionEnded(node));
            }
            self.node_restart.admit = None;
        }
    }

    /// As president: the inclusion of `node` ended with its link, after INCL_NODEREQ went
    /// out. A node that heard the link close before the request arrived keeps the request,
    /// and would take the node's next run for included on its CM_REGREQ alone, before any
    /// president let it in (seed 0x3e366ac32: node 3 did, crashed, and node 4 served rows
    /// restored from an old GCI; an acknowledged insert was gone). NODE_FAILREP follows the
    /// request on the same link and ends it there (`exec_node_failrep`).
    pub(crate) fn inclusion_ended(&mut self, node: NodeId, out: &mut dyn Outbox) {
        let peers: Vec<NodeId> = (self.qmgr.alive())
            .filter(|&n| n != self.me && n != node)
            .collect();
        for peer in peers {
            self.send_to(peer, gsn::NODE_FAILREP, Some(node), out);
        }
    }
}

/// Appends a committed row to a copy's COPY_ROWS payload: its image in a PUT record, or, when
/// the restarting node holds it as it is (a kept table, and no change after the GCI it
/// restored), its key alone in a COPY_KEEP record. Each record carries the row's GCI. False
/// (nothing appended) when the record would not fit a frame with what the payload holds.
/// A slot without a committed row (its insert was undone) adds nothing.
fn append_slot(copy: &mut Copy, table_id: u32, fragment: u32, slot: &RowSlot<LqhWork>) -> bool {
    let Some(row) = slot.committed.as_ref() else {
        return true;
    };
    // GCI 0 is a row whose last change is not known: it is sent whole.
    let unchanged = copy
        .since(table_id)
        .is_some_and(|gci| slot.gci != 0 && slot.gci <= gci);
    let change = RowChange {
        table_id,
        table_version: 0,
        fragment,
        key: &slot.key,
        row: (!unchanged).then(|| row.encoded()),
    };
    let record_kind = if unchanged {
        kind::COPY_KEEP
    } else {
        kind::PUT
    };
    let start = copy.frame.len();
    format::append_record(
        &mut copy.frame,
        u64::from(slot.gci) << 32,
        record_kind,
        |b| change.encode(b),
    );
    if copy.frame.len() > FRAME_PAYLOAD_BYTES_MAX && start > 0 {
        copy.frame.truncate(start);
        return false;
    }
    if unchanged {
        copy.unchanged += 1;
    } else {
        copy.rows += 1;
    }
    true
}
