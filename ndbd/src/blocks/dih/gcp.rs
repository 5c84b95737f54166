//! DIH's global checkpoints (NDB's GCP protocol). Every commit belongs to one epoch, a 64-bit
//! GCI whose high word is the global checkpoint and whose low word counts the epochs within
//! it. The master (the lowest live data node not being copied to) starts a new epoch every
//! TimeBetweenEpochs ms, and every TimeBetweenGlobalCheckpoints ms a new global checkpoint,
//! whose old one it then saves:
//!
//! ```text
//!  master ─GCP_PREPARE(g)──► every node: commits that have not started wait ─GCP_PREPARECONF─►
//!         ─GCP_COMMIT(g)───► every node: new commits take g; once the old epoch's commits have
//!                            all ended here ─GCP_NODEFINISH(old)─►
//!  (a new global checkpoint only:)
//!         ─GCP_SAVEREQ(old)─► every node: GCI_COMPLETED in each redo part, write, sync ─GCP_SAVECONF─►
//!         ─COPY_GCIREQ(old)─► every node: sysfile says old is restorable ─COPY_GCICONF─►
//! ```
//!
//! A node whose files could not restore the GCI (being copied to by node restart, or copied
//! and its first local checkpoint since not complete) answers GCP_SAVEREF; the master sends
//! COPY_GCIREQ only when every node group has a node that answered GCP_SAVECONF, and ends the
//! round otherwise: no durable commit answers for a GCI that no file of some group holds.
//! Such a node writes no sysfile at COPY_GCIREQ either and answers COPY_GCIREF; the GCI is
//! restorable once some node's sysfile names it, as the master tells such nodes once a
//! COPY_GCICONF came (GCP_RESTORABLE_REP). Durable commits of the GCI are answered
//! (`Gcp::durable`) only once every node the COPY_GCIREQ went to answered it, as the master
//! tells each (GCP_DURABLE_REP): a system restart that goes on without a node (a partial
//! start) comes back at what the others' sysfiles name, and a node that failed before it
//! answered may keep files whose sysfile names less. When a node failed first, or every node
//! that would have written a sysfile did, the master saves again at once.
//!
//! The wait between PREPARE and COMMIT is what makes a GCI a consistent cut: no commit starts
//! anywhere while the nodes switch, so a transaction that saw another's change never gets an
//! older GCI than it. After GCP_SAVECONF from every node, every change of the old checkpoint
//! is on every node's disk; after COPY_GCI a system restart comes back at least there.
//!
//! A node saves one GCI at a time: a GCP_SAVEREQ that comes while the syncs of another save
//! are out waits for them. A new master's first round saves (the old master's schedule went
//! with it).
//!
//! A master that fails may have started an epoch on some nodes and not on others (or on the
//! new master). The new master first asks every node which epoch it is in (MASTER_GCPREQ) and
//! starts no round before all answered (MASTER_GCPCONF); it goes on from the highest. Without
//! that, its first save could name an epoch below one some node was already committing in, and
//! that node would log those commits after the save's GCI_COMPLETED: a system restart would
//! restore such a transaction on other nodes only.
//!
//! A node that restarts (node restart) joins the rounds once the president includes it, and
//! the president then tells it the current epoch (GCP_EPOCH_REP): the epoch its START_PERMCONF
//! named may be older, and a node that coordinated a commit in a GCI the others have saved
//! would log it after their GCI_COMPLETED (seed 0xbad: a node restart then copied around the
//! change, and it was lost). A restarted node whose id is the lowest becomes master once it
//! serves: it takes over as after a failure, and the president answers its MASTER_GCPREQ
//! only once its own round has ended, so two masters' rounds never overlap.
//!
//! A coordinator that fails does not send GCP_NODEFINISH: its transactions of the epoch may be
//! committed on some survivors and not yet on others, until the master decides them (see
//! `lqh/foreign.rs`), in the epoch the coordinator gave them. So a node writes a GCI_COMPLETED
//! only when it holds no such orphan, and has itself handled every failure the master had
//! handled when it sent GCP_SAVEREQ (the signal names them): an orphan it has not found yet
//! would otherwise commit behind the record, and a system restart would restore the
//! transaction on some nodes only (NDB waits for the take-over, NF_COMPLETEREP, likewise).
//! Nor while a failure round runs (`arbit.rs`): those decisions are its side's until the side
//! goes on, and a side that stops must have saved none of them.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rndb_config::{Durability, NodeId};
use rndb_protocol::dih::GcpSignal;
use rndb_protocol::gsn;
use rndb_protocol::signals::block;

use crate::blocks::acc::TransId;
use crate::blocks::node_set::NodeSet;
use crate::blocks::{data_node_header, Kernel, Outbox, Signal};
use crate::ndbfs::format::{gci_hi, Sysfile};
use crate::ndbfs::FsOp;

use super::super::fs::FsWait;

/// The sysfile's two copies, as NDB keeps them.
pub(crate) const SYSFILES: [&str; 2] = ["D1/DBDIH/P0.sysfile", "D2/DBDIH/P0.sysfile"];

/// This node's part in global checkpoints, and the master's rounds when it is master.
#[derive(Debug)]
pub(crate) struct Gcp {
    epoch_interval: Duration,
    checkpoint_interval: Duration,
    /// The epoch commits that start now belong to.
    pub current: u64,
    /// Between GCP_PREPARE and GCP_COMMIT: commits wait in `held`.
    pub prepared: bool,
    /// The master whose GCP_PREPARE it was.
    prepared_by: NodeId,
    pub held: Vec<TransId>,
    /// Commits running, per epoch.
    running: BTreeMap<u64, u32>,
    /// Epochs that ended here, whose commits must end before the master that ended each
    /// hears of it: one per master. A failed master's GCP_COMMIT can arrive after its
    /// successor's, before this node holds it failed; had it replaced the successor's, this
    /// node would answer only the failed master, and the successor's round would wait for
    /// good (seed 0x8400039a, 3 replicas, `--durable-commits`).
    finishing: Vec<(u64, NodeId)>,
    /// Saves masters asked for that wait for this node's orphans to be decided, or for
    /// failures the master handled to be handled here, or for the save before: one per
    /// master, in the order asked. A failed master's request can arrive after its successor's,
    /// before this node holds it failed; had it replaced the successor's, this node would
    /// answer only the failed master, and the successor's round would wait for good (seed
    /// 0x6c002e14, `--durable-commits`).
    save_waiting: Vec<SaveWaiting>,
    /// The failed nodes the latest GCP_SAVEREQ named.
    pub master_failed: NodeSet,
    /// A save in progress: the GCI, the master to confirm to, syncs still to complete, and
    /// whether this node's files will restore it (GCP_SAVECONF) or not (GCP_SAVEREF).
    saving: Option<(u64, NodeId, usize, bool)>,
    /// A sysfile write in progress.
    copying: Option<Copying>,
    /// COPY_GCIREQs that came while a sysfile write was in progress: one per master, in the
    /// order asked, each carried out (or answered) once the write before is done. A failed
    /// master's request can arrive after its successor's, before this node holds it failed,
    /// as GCP_SAVEREQ and GCP_COMMIT can: it must neither take the successor's place nor
    /// write its older GCI over the successor's.
    copy_waiting: Vec<(u64, NodeId)>,
    /// The newest GCI a sysfile write of this run named (this node's sysfile names it or a
    /// newer one): a request for it or an older one is answered at once.
    copied: u64,
    /// The index in [`SYSFILES`] of the copy a save overwrites first: not the one a restart
    /// took its GCI from (see `gcp_copy`).
    pub sysfile_first: usize,
    /// The newest global checkpoint (high word) this node knows to be restorable.
    pub restorable: u32,
    /// The newest global checkpoint whose save every node the master's COPY_GCIREQ went to
    /// answered (its sysfile names it, or it has no files), as the master said
    /// (GCP_DURABLE_REP), in this run: durable commits and schema changes are answered up to
    /// it. `restorable` alone is not enough: a node whose own sysfile names a GCI may be the
    /// one a partial system restart goes on without, and the others' sysfiles bring the
    /// cluster back older.
    pub durable: u32,
    /// The live nodes whose files restore the newest GCI this node knows restorable: they
    /// answered GCP_SAVECONF to its save (as COPY_GCIREQ said), or took part in the system
    /// restart this node started from. A node leaves it when it fails. As president, a node
    /// lets a restarting node in (which then drops its files) only once its node group has
    /// another node here (`last_files_of_group`).
    pub files_restore: NodeSet,
    /// The nodes the COPY_GCIREQ of the newest GCI said confirmed its save: `files_restore`
    /// once the GCI is known restorable here (see `copy_named`).
    pub copy_saved: NodeSet,
    /// The GCI of the COPY_GCIREQ that set `copy_saved`.
    copy_saved_gci: u64,
    /// The cluster's system restarts, the last the one it last started from
    /// (`Sysfile::restarts`): set when this node starts (`finish_start`) or is let in
    /// (START_PERMCONF), and written with each save.
    pub restarts: Vec<rndb_protocol::dih::RestartId>,
    /// The master's round in progress.
    round: Option<Round>,
    next_epoch: Option<Instant>,
    last_checkpoint: Option<Instant>,
    /// As master: a node asked for a save now (GCP_SAVE_WANTED).
    save_wanted: bool,
    /// This node asked for a save and has not seen one since.
    pub asked_save: bool,
    /// As a new master: the nodes whose epoch it waits for (MASTER_GCPREQ) before any round.
    takeover: Option<NodeSet>,
    /// As a master that a restarted node of lower id took over from: the MASTER_GCPREQs
    /// answered once this node's last round has ended (the new one's must not overlap it).
    deferred: NodeSet,
    /// TimeBetweenGlobalCheckpointsTimeout: how long this node's part in a save may take.
    save_timeout: Duration,
    /// A save step the master asked of this node (GCP_SAVEREQ, COPY_GCIREQ) and not answered
    /// yet: its GCI, and since when.
    answering: Option<(u64, Instant)>,
    /// GCP stop: this node's part in saving this GCI took longer than `save_timeout`, and it
    /// asked to be stopped (`gcp_stop_check`), for good.
    pub stop_asked: Option<u64>,
}

/// A sysfile write in progress: the copies are written one after the other.
#[derive(Debug)]
struct Copying {
    gci: u64,
    /// The master to confirm to (COPY_GCICONF).
    master: NodeId,
    sysfile: Sysfile,
    /// Copies written so far (the first is `Gcp::sysfile_first`).
    written: usize,
}

#[derive(Debug)]
struct SaveWaiting {
    gci: u64,
    master: NodeId,
    /// The nodes the master had declared failed when it asked.
    failed: NodeSet,
}

#[derive(Debug)]
struct Round {
    step: u16,
    /// The epoch being started.
    gci: u64,
    /// The epoch it ends.
    old: u64,
    /// It starts a new global checkpoint, so the old one is saved.
    save: bool,
    /// The nodes the current step went to, and those still to answer it.
    asked: NodeSet,
    /// The failed nodes the current step named (GCP_SAVEREQ's).
    failed: NodeSet,
    awaiting: NodeSet,
    /// The nodes that answered the save with GCP_SAVECONF, and with GCP_SAVEREF; in the
    /// sysfile step, with COPY_GCICONF and COPY_GCIREF.
    restorable: NodeSet,
    unrestorable: NodeSet,
    /// In the sysfile step: the nodes that answered the save with GCP_SAVECONF.
    saved: NodeSet,
}

impl Gcp {
    /// A failed node rejoined (node restart): saves no longer wait for its failure to be
    /// handled here.
    pub fn forget_failed(&mut self, node: NodeId) {
        self.master_failed.remove(node);
        for waiting in &mut self.save_waiting {
            waiting.failed.remove(node);
        }
    }

    /// Starts at `restorable`'s next global checkpoint (1 on an initial start).
    pub fn new(config: &Durability, restorable: u32) -> Gcp {
        Gcp {
            epoch_interval: Duration::from_millis(u64::from(config.time_between_epochs_ms)),
            checkpoint_interval: Duration::from_millis(u64::from(
                config.time_between_global_checkpoints_ms,
            )),
            current: u64::from(restorable + 1) << 32,
            prepared: false,
            prepared_by: NodeId(0),
            held: Vec::new(),
            running: BTreeMap::new(),
            finishing: Vec::new(),
            save_waiting: Vec::new(),
            master_failed: NodeSet::new(),
            saving: None,
            copying: None,
            copy_waiting: Vec::new(),
            copied: 0,
            sysfile_first: 0,
            restorable,
            // Learned in this run only: after a system restart at G, G may be named by one
            // node's sysfile alone (another's write of it failed), and a partial restart
            // without that node comes back older (seed 0x60004d71 with --durable-commits).
            durable: 0,
            files_restore: NodeSet::new(),
            copy_saved: NodeSet::new(),
            copy_saved_gci: 0,
            restarts: Vec::new(),
            round: None,
            next_epoch: None,
            last_checkpoint: None,
            save_wanted: false,
            asked_save: false,
            takeover: None,
            deferred: NodeSet::new(),
            save_timeout: Duration::from_millis(u64::from(
                config.time_between_global_checkpoints_timeout_ms,
            )),
            answering: None,
            stop_asked: None,
        }
    }

    /// A commit starts: it belongs to the current epoch.
    pub fn commit_started(&mut self) -> u64 {
        *self.running.entry(self.current).or_default() += 1;
        self.current
    }

    /// A COPY_GCIREQ for `gci` came, saying `nodes` confirmed its save. A late one for an
    /// older GCI (from a failed master, or one a new master asked again) names no newer
    /// files: it leaves the set of the newest as it is, where it would otherwise become
    /// `files_restore` when the copy in progress ends.
    pub fn copy_named(&mut self, gci: u64, nodes: NodeSet) {
        if gci >= self.copy_saved_gci {
            self.copy_saved_gci = gci;
            self.copy_saved = nodes;
        }
    }

    /// TimeBetweenGlobalCheckpointsTimeout.
    pub fn save_timeout(&self) -> Duration {
        self.save_timeout
    }

    /// A commit of epoch `gci` ended.
    pub fn commit_ended(&mut self, gci: u64) {
        if let Some(n) = self.running.get_mut(&gci) {
            *n -= 1;
            if *n == 0 {
                self.running.remove(&gci);
            }
        }
    }
}

impl Kernel {
    /// Sends a GCP signal to `to`, through the job queue when that is this node.
    pub(crate) fn send_gcp(&mut self, to: NodeId, signal: u16, gci: u64, out: &mut dyn Outbox) {
        let failed = self.qmgr.failed();
        self.send_gcp_nodes(to, signal, gci, failed, out);
    }

    /// Sends a GCP signal that names a set of nodes (`GcpSignal::nodes`).
    fn send_gcp_nodes(
        &mut self,
        to: NodeId,
        signal: u16,
        gci: u64,
        nodes: NodeSet,
        out: &mut dyn Outbox,
    ) {
        if matches!(
            signal,
            gsn::GCP_SAVECONF | gsn::GCP_SAVEREF | gsn::COPY_GCICONF | gsn::COPY_GCIREF
        ) {
            // This node's part is done: it lags no more. One that asked to be stopped goes on
            // asking: the president may already count it out of its group.
            self.gcp.answering = None;
        }
        if to == self.me {
            if signal == gsn::COPY_GCIREQ {
                self.gcp.copy_named(gci, nodes);
            }
            self.jobs.push_back(Signal::Gcp {
                signal,
                from: self.me,
                gci,
            });
        } else if self.qmgr.is_up(to) {
            let header = data_node_header(signal, block::DBDIH, block::DBDIH);
            let nodes = nodes.words();
            self.unsent
                .send(out, to, header, &mut |b| GcpSignal { gci, nodes }.encode(b));
        }
    }

    /// The GCI the last COPY_GCIREQ named is restorable: the nodes that confirmed its save
    /// and still live have files that restore it.
    fn gcp_files_restore(&mut self) {
        let saved = self.gcp.copy_saved;
        self.gcp.files_restore = (saved.iter())
            .filter(|&n| n == self.me || self.qmgr.is_up(n))
            .collect();
        self.node_restart_group_saved(self.gcp.files_restore);
    }

    /// As master: `node` was included again while this node's GCP_SAVEREQ, which named it
    /// failed, was out. A node that included it first takes that for a new failure it has
    /// not handled yet and waits (`gcp_try_save`), for good; so the nodes still to answer
    /// are asked again without it (seed 0x60001bce with --durable-commits: node 1, president
    /// once it restarted, let node 4 in while node 2 ran its last round as master).
    pub(crate) fn gcp_included_while_saving(&mut self, node: NodeId, out: &mut dyn Outbox) {
        let failed = self.qmgr.failed();
        let Some(round) = (self.gcp.round.as_mut())
            .filter(|r| r.step == gsn::GCP_SAVEREQ && r.failed.contains(node))
        else {
            return;
        };
        round.failed = failed;
        let (awaiting, gci) = (round.awaiting, round.old);
        for to in awaiting.iter() {
            self.send_gcp_nodes(to, gsn::GCP_SAVEREQ, gci, failed, out);
        }
    }

    /// The master's timer: starts the next epoch when it is due.
    pub(crate) fn gcp_timer(&mut self, out: &mut dyn Outbox, now: Instant) {
        if !self.qmgr.started()
            || self.qmgr.master() != self.me
            || self.gcp.round.is_some()
            || self.gcp.takeover.is_some()
        {
            return;
        }
        let gcp = &mut self.gcp;
        let next_epoch = *gcp.next_epoch.get_or_insert(now + gcp.epoch_interval);
        let last_checkpoint = *gcp.last_checkpoint.get_or_insert(now);
        let save =
            gcp.save_wanted || now.duration_since(last_checkpoint) >= gcp.checkpoint_interval;
        if !save && (gcp.epoch_interval.is_zero() || now < next_epoch) {
            return;
        }
        let old = gcp.current;
        let gci = if save {
            gcp.last_checkpoint = Some(now);
            gcp.save_wanted = false;
            u64::from(gci_hi(old) + 1) << 32
        } else {
            old + 1
        };
        let mut awaiting: NodeSet = self.qmgr.peers_up().collect();
        awaiting.insert(self.me);
        self.gcp.round = Some(Round {
            step: gsn::GCP_PREPARE,
            gci,
            old,
            save,
            asked: awaiting,
            failed: NodeSet::new(),
            awaiting,
            restorable: NodeSet::new(),
            unrestorable: NodeSet::new(),
            saved: NodeSet::new(),
        });
        for node in awaiting.iter() {
            self.send_gcp(node, gsn::GCP_PREPARE, gci, out);
        }
    }

    /// A GCP signal from `from` (another data node, or this one through the job queue).
    pub(crate) fn exec_gcp_signal(
        &mut self,
        from: NodeId,
        signal: u16,
        gci: u64,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        match signal {
            gsn::GCP_PREPARE => {
                self.gcp.prepared = true;
                self.gcp.prepared_by = from;
                self.send_gcp(from, gsn::GCP_PREPARECONF, gci, out);
            }
            gsn::GCP_COMMIT => {
                let old = self.gcp.current;
                self.gcp.current = self.gcp.current.max(gci);
                self.gcp.prepared = false;
                for trans in std::mem::take(&mut self.gcp.held) {
                    self.jobs.push_back(Signal::TcContinueB(trans));
                }
                self.gcp.finishing.retain(|&(_, master)| master != from);
                self.gcp.finishing.push((old, from));
                self.gcp_check_finished(out);
            }
            gsn::GCP_SAVEREQ => {
                self.gcp.answering.get_or_insert((gci, now));
                self.gcp.asked_save = false;
                let failed = std::mem::take(&mut self.gcp.master_failed);
                self.gcp.save_waiting.retain(|w| w.master != from);
                self.gcp.save_waiting.push(SaveWaiting {
                    gci,
                    master: from,
                    failed,
                });
                self.gcp_try_save(out)
            }
            gsn::GCP_SAVE_WANTED => {
                self.gcp.save_wanted = true;
                // At once, unless a round runs (then when it ends).
                self.gcp_timer(out, now);
            }
            gsn::COPY_GCIREQ => {
                self.gcp.answering.get_or_insert((gci, now));
                self.gcp_copy(from, gci, out)
            }
            gsn::GCP_RESTORABLE_REP => self.gcp_restorable_rep(gci),
            gsn::GCP_DURABLE_REP => self.gcp_durable(gci, out),
            gsn::MASTER_GCPREQ if self.gcp.round.is_some() => {
                // This node was master until `from` started: its round ends first.
                self.gcp.deferred.insert(from);
            }
            gsn::MASTER_GCPREQ => self.gcp_answer_master(from, out),
            gsn::GCP_EPOCH_REP => self.gcp.current = self.gcp.current.max(gci),
            // This node's own report as master: every failure it handled is handled here.
            gsn::GCP_COMPLETE_REP => self.suma_epoch_completed(gci, NodeSet::new(), out),
            gsn::MASTER_GCPCONF => {
                self.gcp.current = self.gcp.current.max(gci);
                if let Some(awaiting) = self.gcp.takeover.as_mut() {
                    awaiting.remove(from);
                }
                self.gcp_takeover_done(out, now);
            }
            gsn::GCP_PREPARECONF
            | gsn::GCP_NODEFINISH
            | gsn::GCP_SAVECONF
            | gsn::GCP_SAVEREF
            | gsn::COPY_GCICONF
            | gsn::COPY_GCIREF => {
                if signal == gsn::GCP_SAVECONF {
                    self.node_restart_saved(from, gci_hi(gci));
                }
                self.gcp_master_answer(from, signal, gci, out, now)
            }
            _ => {}
        }
    }

    /// GCP stop (NDB's TimeBetweenGlobalCheckpointsTimeout): this node's part in a save (its
    /// redo log and schema log synced, its sysfile written, timed from when nothing but this
    /// node holds it up) has taken longer than the timeout: a disk that stalls. Every node's
    /// checkpoints wait for it, so it asks to be stopped (`ask_to_be_stopped`), which the
    /// cluster grants while another member of its node group serves; it stops with 2303.
    pub(crate) fn gcp_stop_check(&mut self, out: &mut dyn Outbox, now: Instant) {
        let Some((gci, since)) = self.gcp.answering else {
            return;
        };
        if !self.gcp.save_waiting.is_empty() {
            // The save waits for the master to decide the orphans of failed coordinators,
            // which waits for every survivor's answer: a survivor that hangs holds it up
            // until it is declared failed, a heartbeat bound, often longer than the
            // timeout. That lag is not this node's (seed 0x8f0d561d: node 4 asked to be
            // stopped while its group peer hung, and the group was lost). Its part is
            // timed from when the save can begin.
            self.gcp.answering = Some((gci, now));
            return;
        }
        if self.gcp.stop_asked.is_some()
            || now.saturating_duration_since(since) < self.gcp.save_timeout
        {
            return;
        }
        self.gcp.stop_asked = Some(gci);
        tracing::error!(
            gci = gci_hi(gci),
            "GCP stop: this node's part in saving global checkpoint {} has taken longer than TimeBetweenGlobalCheckpointsTimeout={} ms; it asks to be stopped",
            gci_hi(gci),
            self.gcp.save_timeout.as_millis()
        );
        self.ask_to_be_stopped(out);
    }

    /// Asks the master for a global checkpoint now (once until the next save starts here):
    /// durable commits wait for it, or the redo log is filling.
    pub(crate) fn gcp_want_save(&mut self, out: &mut dyn Outbox) {
        if !self.gcp.asked_save {
            self.gcp.asked_save = true;
            let master = self.qmgr.master();
            self.send_gcp(master, gsn::GCP_SAVE_WANTED, 0, out);
        }
    }

    /// Once every commit of an epoch that ended here has ended, the master that ended it hears
    /// of it.
    pub(crate) fn gcp_check_finished(&mut self, out: &mut dyn Outbox) {
        while let Some(at) = (self.gcp.finishing.iter())
            .position(|&(old, _)| self.gcp.running.range(..=old).next().is_none())
        {
            let (old, master) = self.gcp.finishing.remove(at);
            self.send_gcp(master, gsn::GCP_NODEFINISH, old, out);
        }
    }

    /// The save the master asked for, once nothing here may still commit in its GCI: no orphan
    /// waits for the master's decision, and every node the master had declared failed is
    /// failed here too (its orphans found).
    pub(crate) fn gcp_try_save(&mut self, out: &mut dyn Outbox) {
        let Some(waiting) = self.gcp.save_waiting.first() else {
            return;
        };
        if self.gcp.saving.is_some() {
            // A save still waits for its syncs (one a failed master asked for, and the new
            // master asked again at once): this one starts when that one is done, or the
            // syncs of the first would count for the second, which would then be confirmed
            // before its own were (seed 0xee6b2a86: a GCI was made restorable though the
            // schema log sync of its save failed on the last node of its group).
            return;
        }
        if !self.foreign.orphans.is_empty() || waiting.failed.iter().any(|n| self.qmgr.is_up(n)) {
            tracing::debug!(gci = waiting.gci, orphans = self.foreign.orphans.len(), failed = ?waiting.failed, "global checkpoint save waits for failed coordinators' transactions");
            return;
        }
        if self.arbit_round_running() {
            // What this side decided for the failed nodes' transactions (an orphan rolled
            // back here, committed there) is this side's until it knows it goes on: saved
            // now, a side that then stops has a GCI_COMPLETED the other side's differs from,
            // and a system restart restores the transaction on some nodes only (seed
            // 0xa403ba6: a split left one node on each side, each saved GCI 13 with its own
            // decision for a transaction the other had committed early, and both stopped).
            // The save goes on when the round ends with this side going on.
            tracing::debug!(
                gci = waiting.gci,
                "global checkpoint save waits for this side's arbitration"
            );
            return;
        }
        let SaveWaiting { gci, master, .. } = self.gcp.save_waiting.remove(0);
        self.gcp_save(master, gci, out);
    }

    /// GCP_SAVEREQ: every redo part gets its GCI_COMPLETED, and what is buffered is written
    /// and synced, with the schema log; then GCP_SAVECONF.
    fn gcp_save(&mut self, master: NodeId, gci: u64, out: &mut dyn Outbox) {
        let restorable = self.save_restorable(gci);
        let syncs = match self.lqh.redo.as_mut() {
            Some(redo) => redo.save(gci) + self.dict_log.save(&mut self.fs, gci),
            None => 0,
        };
        if syncs == 0 {
            self.send_gcp(master, save_answer(restorable), gci, out);
        } else {
            self.gcp.saving = Some((gci, master, syncs, restorable));
        }
    }

    /// Whether this node's files will restore `gci` once it is saved: not while it is being
    /// copied to (no redo log yet), nor until the local checkpoint it took after the copy
    /// covers `gci` (`node_restart_restorable_at`). A node without files (Diskless) confirms
    /// every save: nothing is restorable there, and its answer only orders the commits.
    fn save_restorable(&mut self, gci: u64) -> bool {
        if !self.has_files {
            return true;
        }
        // A node whose file system failed saves nothing more (seed 0xee6b2a86: the last
        // serving node of its group, its schema log's sync failed, confirmed a later save
        // whose syncs it had not been asked for, and the GCI was made restorable with no
        // file of the group holding it).
        self.fs.failed.is_none() && self.lqh.redo.is_some() && self.node_restart_restorable_at(gci)
    }

    /// COPY_GCIREQ: both copies of the sysfile name the saved GCI; then COPY_GCICONF.
    fn gcp_copy(&mut self, master: NodeId, gci: u64, out: &mut dyn Outbox) {
        // Every node the master held live had saved this GCI (a node restart's president
        // vouches for it, `node_restart_saved`).
        self.node_restart_saved(self.me, gci_hi(gci));
        if self.has_files && (self.lqh.redo.is_none() || self.sysfile_held(gci)) {
            // Being copied to, or a restarted node whose copied rows are not in a local
            // checkpoint yet: no sysfile of its own names the GCI, so nothing here makes it
            // restorable; another node's sysfile does, once written. Until the master says
            // one was (GCP_RESTORABLE_REP), durable commits here wait (seed 0x4c571f: a held
            // node answered them while the only sysfile write of its node group was still on
            // its way; seed 0x1a13bb33f: that write failed, and its node stopped).
            return self.send_gcp(master, gsn::COPY_GCIREF, gci, out);
        }
        if self.lqh.redo.is_none() {
            // Diskless: "saved" means every node's GCP_SAVECONF came, which COPY_GCIREQ says.
            self.gcp.restorable = self.gcp.restorable.max(gci_hi(gci));
            self.gcp.durable = self.gcp.durable.max(gci_hi(gci));
            self.tc_checkpoint_saved(out);
            return self.send_gcp(master, gsn::COPY_GCICONF, gci, out);
        }
        if gci <= self.gcp.copied {
            // Saved here already (a new master asking again for the GCI, or a failed
            // master's late request): the sysfile never goes back.
            return self.send_gcp(master, gsn::COPY_GCICONF, gci, out);
        }
        if self.gcp.copying.is_some() {
            self.gcp.copy_waiting.retain(|&(_, m)| m != master);
            self.gcp.copy_waiting.push((gci, master));
            return;
        }
        let sysfile = Sysfile {
            restorable_gci: gci_hi(gci),
            cut_pending: false,
            restarts: self.gcp.restarts.clone(),
        };
        // Each copy is overwritten in place and synced before the next is touched (two fsyncs,
        // where a replace through a temporary file costs four): a crash tears at most one, whose
        // CRC then fails, and a restart reads the other. The next copy is written only once
        // this one's sync has come back well (`gcp_sysfile_written`): a write or sync that
        // failed (ENOSPC, EIO) leaves the other copy as it was, where requests queued
        // together would go on to overwrite it too, and a power loss could then tear both.
        // The copy a restart took its GCI from is overwritten last (seed 0x39389997: the
        // first save's second copy was lost to a power loss, the system restart read the
        // first, the next save overwrote that first and power failed again: no copy named
        // the GCI the cluster had restarted at).
        self.write_sysfile_copy(self.gcp.sysfile_first, &sysfile, FsWait::Sysfile);
        self.gcp.copying = Some(Copying {
            gci,
            master,
            sysfile,
            written: 0,
        });
    }

    /// Overwrites copy `copy` of the sysfile with `sysfile`, and syncs it; `wait` hears of
    /// the sync.
    pub(crate) fn write_sysfile_copy(&mut self, copy: usize, sysfile: &Sysfile, wait: FsWait) {
        let path = SYSFILES[copy].to_string();
        self.fs.push(
            FsOp::Write {
                path: path.clone(),
                offset: 0,
                bytes: sysfile.file_bytes(u32::from(self.me.0)),
            },
            FsWait::Nothing,
        );
        self.fs.push(FsOp::Sync { path }, wait);
    }

    /// A sync of a save completed.
    pub(crate) fn gcp_synced(&mut self, out: &mut dyn Outbox) {
        let Some((gci, master, left, restorable)) = self.gcp.saving.as_mut() else {
            return;
        };
        *left -= 1;
        if *left == 0 {
            let (gci, master, restorable) = (*gci, *master, *restorable);
            self.gcp.saving = None;
            if let Some(why) = &self.fs.failed {
                // A write failed (in this save or before it) though every sync succeeded:
                // the disk does not hold the whole GCI, so the save is never confirmed and
                // global checkpoints stop.
                tracing::error!(gci, %why, "global checkpoint not saved: a file write failed");
                return;
            }
            self.send_gcp(master, save_answer(restorable), gci, out);
            self.gcp_try_save(out);
        }
    }

    /// A sysfile copy was written and synced: the next one is written, or, after the last,
    /// the checkpoint is saved.
    pub(crate) fn gcp_sysfile_written(&mut self, out: &mut dyn Outbox) {
        let Some(copying) = self.gcp.copying.as_mut() else {
            return;
        };
        if let Some(why) = &self.fs.failed {
            // A file request failed (this copy's write, or another): the copy may not hold
            // what its sync confirmed, so the other copy, the one a restart would read, is
            // left as it was, and this save is never confirmed: global checkpoints stop.
            tracing::error!(gci = gci_hi(copying.gci), %why, "global checkpoint not saved: a file write failed");
            return;
        }
        copying.written += 1;
        if copying.written < SYSFILES.len() {
            let copy = (self.gcp.sysfile_first + copying.written) % SYSFILES.len();
            let sysfile = copying.sysfile.clone();
            return self.write_sysfile_copy(copy, &sysfile, FsWait::Sysfile);
        }
        let (gci, master) = (copying.gci, copying.master);
        self.gcp.copying = None;
        self.gcp.copied = self.gcp.copied.max(gci);
        self.gcp.restorable = self.gcp.restorable.max(gci_hi(gci));
        self.gcp_files_restore();
        self.node_restart_sysfile_saved();
        tracing::debug!(gci = gci_hi(gci), "global checkpoint saved");
        self.lcp_promote();
        // Every node synced this checkpoint's redo before the master sent COPY_GCIREQ, and
        // this node's sysfile now names it. Durable commits still wait for the master's word
        // that every node's does (`gcp_durable`): a system restart without this node (it
        // failed during the restart) comes back at what the others' sysfiles name.
        self.send_gcp(master, gsn::COPY_GCICONF, gci, out);
        while self.gcp.copying.is_none() && !self.gcp.copy_waiting.is_empty() {
            let (gci, master) = self.gcp.copy_waiting.remove(0);
            self.gcp_copy(master, gci, out);
        }
    }

    /// GCP_RESTORABLE_REP: this node answered COPY_GCIREF, and another node's sysfile names
    /// `gci`.
    fn gcp_restorable_rep(&mut self, gci: u64) {
        if gci_hi(gci) > self.gcp.restorable {
            self.gcp.restorable = gci_hi(gci);
            self.gcp_files_restore();
            self.lcp_promote();
        }
    }

    /// GCP_DURABLE_REP: every node the save's sysfile step went to answered it (its sysfile
    /// names `gci`, or it has no files to restore from): durable commits and schema changes of
    /// it are answered.
    fn gcp_durable(&mut self, gci: u64, out: &mut dyn Outbox) {
        self.gcp_restorable_rep(gci);
        if gci_hi(gci) > self.gcp.durable {
            self.gcp.durable = gci_hi(gci);
            self.tc_checkpoint_saved(out);
        }
    }

    /// As master: a node answered the round's current step; when all have, the next step.
    fn gcp_master_answer(
        &mut self,
        from: NodeId,
        signal: u16,
        gci: u64,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        let Some(round) = self.gcp.round.as_mut() else {
            return;
        };
        let expected = match round.step {
            gsn::GCP_PREPARE => gsn::GCP_PREPARECONF,
            gsn::GCP_COMMIT => gsn::GCP_NODEFINISH,
            gsn::GCP_SAVEREQ => gsn::GCP_SAVECONF,
            _ => gsn::COPY_GCICONF,
        };
        let refused = match (signal, expected) {
            (gsn::GCP_SAVEREF, gsn::GCP_SAVECONF) | (gsn::COPY_GCIREF, gsn::COPY_GCICONF) => true,
            _ if signal == expected => false,
            _ => {
                tracing::warn!(node = %from, signal, gci, "GCP answer out of step; ignored");
                return;
            }
        };
        if matches!(expected, gsn::GCP_SAVECONF | gsn::COPY_GCICONF) && gci != round.old {
            // An answer to a save of an earlier round, which a failed master began and this
            // one began again for a later GCI: it confirms nothing of this one (seed
            // 0x26be3bb65: node 4's confirmation of GCI 1 was counted for GCI 2, which it never
            // saved, and GCI 2 was made restorable with no file of its group holding it).
            tracing::warn!(node = %from, signal, gci, round_gci = round.old, "GCP answer for another global checkpoint's save; ignored");
            return;
        }
        if refused {
            round.unrestorable.insert(from);
        } else if matches!(signal, gsn::GCP_SAVECONF | gsn::COPY_GCICONF) {
            round.restorable.insert(from);
        }
        round.awaiting.remove(from);
        if signal == gsn::GCP_NODEFINISH && gci < round.gci {
            // A node that was in a later epoch than this master knew of (a frame of a failed
            // master's that arrived after MASTER_GCPCONF) finished it: the save covers it.
            round.old = round.old.max(gci);
        }
        self.gcp_advance(out, now);
    }

    /// As master: moves the round on once nobody is awaited.
    fn gcp_advance(&mut self, out: &mut dyn Outbox, now: Instant) {
        let Some(round) = self.gcp.round.as_mut() else {
            return;
        };
        if !round.awaiting.is_empty() {
            return;
        }
        if round.step == gsn::GCP_COMMIT {
            // Every live node's commits of the old epoch have ended: SUMA may report it.
            let old = round.old;
            let failed = self.qmgr.failed();
            let mut nodes: NodeSet = self.qmgr.peers_up().collect();
            nodes.insert(self.me);
            for node in nodes.iter() {
                self.send_gcp_nodes(node, gsn::GCP_COMPLETE_REP, old, failed, out);
            }
        }
        let Some(round) = self.gcp.round.as_mut() else {
            return;
        };
        let mut copied = None;
        let (next, gci) = match round.step {
            gsn::GCP_PREPARE => (Some(gsn::GCP_COMMIT), round.gci),
            gsn::GCP_COMMIT if round.save => (Some(gsn::GCP_SAVEREQ), round.old),
            gsn::GCP_SAVEREQ => match unrestorable_group(self.qmgr.node_groups(), round) {
                None => {
                    round.saved = round.restorable;
                    (Some(gsn::COPY_GCIREQ), round.old)
                }
                Some(group) => {
                    // Every node's redo log holds the GCI, but no node of `group` could
                    // restore it: it is not made restorable, and durable commits wait for
                    // a later one.
                    tracing::debug!(gci = gci_hi(round.old), group, "global checkpoint saved in every redo log but not restorable: no node of node group {group} can restore it yet");
                    (None, 0)
                }
            },
            gsn::COPY_GCIREQ => {
                let mut answered = round.restorable;
                for node in round.unrestorable.iter() {
                    answered.insert(node);
                }
                // Durable only when no node the step went to failed first: one that did may
                // keep files whose sysfile names an older GCI (its disk failed), and a
                // partial system restart may go on from them (seed 0x61007b6f with
                // --durable-commits: node 4's sysfile write failed, it stopped, and after a
                // cluster crash the restart without node 1 came back at GCI 18, where 19 had
                // been answered durable).
                let durable = round.asked.iter().all(|n| answered.contains(n));
                copied = Some((round.old, round.unrestorable, answered, durable));
                (None, 0)
            }
            _ => (None, 0),
        };
        let Some(next) = next else {
            self.gcp.round = None;
            match copied {
                Some((gci, refused, answered, durable)) if answered != refused => {
                    // A sysfile names the GCI: restorable, also for the nodes that wrote none.
                    for node in refused.iter() {
                        self.send_gcp(node, gsn::GCP_RESTORABLE_REP, gci, out);
                    }
                    if !durable {
                        // A node failed before it answered: durable commits wait for the
                        // next save, which starts at once.
                        self.gcp.save_wanted = true;
                    }
                    // Every node the step went to answered: whichever of them a system
                    // restart goes on from, its sysfile names the GCI, or it has no files and
                    // its group restarts from another's. Told to the nodes of this round only:
                    // one that joined since has none of its files.
                    for node in answered.iter().filter(|_| durable) {
                        if node == self.me {
                            self.gcp_durable(gci, out);
                        } else {
                            self.send_gcp(node, gsn::GCP_DURABLE_REP, gci, out);
                        }
                    }
                }
                Some((gci, ..)) => {
                    // Every node that was to write its sysfile failed first: no file names
                    // the GCI. Durable commits wait for the next save, which starts at once.
                    tracing::warn!(gci = gci_hi(gci), "global checkpoint not restorable: every node that was to name it in its sysfile failed first; saving again");
                    self.gcp.save_wanted = true;
                }
                None => {}
            }
            self.gcp.next_epoch = Some(now + self.gcp.epoch_interval);
            for node in std::mem::take(&mut self.gcp.deferred).iter() {
                self.gcp_answer_master(node, out);
            }
            if self.gcp.save_wanted {
                self.gcp_timer(out, now);
            }
            return;
        };
        let mut awaiting: NodeSet = self.qmgr.peers_up().collect();
        awaiting.insert(self.me);
        round.step = next;
        round.asked = awaiting;
        round.awaiting = awaiting;
        round.restorable = NodeSet::new();
        round.unrestorable = NodeSet::new();
        let nodes = match next {
            gsn::COPY_GCIREQ => round.saved,
            _ => self.qmgr.failed(),
        };
        if next == gsn::GCP_SAVEREQ {
            round.failed = nodes;
        }
        for node in awaiting.iter() {
            self.send_gcp_nodes(node, next, gci, nodes, out);
        }
    }

    /// As the new master: once every live node said which epoch it is in, rounds go on from
    /// the highest.
    fn gcp_takeover_done(&mut self, out: &mut dyn Outbox, now: Instant) {
        if self
            .gcp
            .takeover
            .is_some_and(|awaiting| awaiting.is_empty())
        {
            self.gcp.takeover = None;
            tracing::info!(
                gci = self.gcp.current,
                "took over global checkpoints as master"
            );
            self.gcp_timer(out, now);
        }
    }

    /// MASTER_GCPCONF to a new master: the epoch commits start in here. A save some node
    /// asked this node for as master (GCP_SAVE_WANTED) and that it did not start goes with
    /// it: durable commits wait for it.
    fn gcp_answer_master(&mut self, to: NodeId, out: &mut dyn Outbox) {
        let current = self.gcp.current;
        self.send_gcp(to, gsn::MASTER_GCPCONF, current, out);
        if std::mem::take(&mut self.gcp.save_wanted) {
            self.send_gcp(to, gsn::GCP_SAVE_WANTED, 0, out);
        }
    }

    /// As a new master: asks every other live node for its epoch (MASTER_GCPREQ) and starts
    /// no round before all answered; the round this node ran as master before, if any, is
    /// over.
    fn gcp_take_over(&mut self, out: &mut dyn Outbox, now: Instant) {
        self.gcp.round = None;
        self.gcp.deferred = NodeSet::new();
        // The old master's save schedule went with it: the first round saves, so that
        // masters changing one after another never put saves off (seed 0xee6b321e: two
        // takeovers within TimeBetweenGlobalCheckpoints, and no GCI was made restorable for
        // the rest of the run, while node restarts dropped the files that held the last).
        self.gcp.save_wanted = true;
        let awaiting: NodeSet = self.qmgr.peers_up().collect();
        for peer in awaiting.iter() {
            self.send_gcp(peer, gsn::MASTER_GCPREQ, 0, out);
        }
        self.gcp.takeover = Some(awaiting);
        self.gcp_takeover_done(out, now);
    }

    /// This node started by node restart and is master now (its id is the lowest): it takes
    /// over the global checkpoints from the president, whose round in progress ends first
    /// (the president answers MASTER_GCPREQ only then). Without it, this node's first round
    /// would start from its own epoch, which may be behind the cluster's.
    pub(crate) fn gcp_started_as_master(&mut self, out: &mut dyn Outbox, now: Instant) {
        if self.qmgr.master() == self.me {
            self.gcp_take_over(out, now);
        }
    }

    /// At the president, as it includes a restarting node: the node takes the epoch commits
    /// start in now. Its START_PERMCONF named the epoch of then, and a round run since
    /// without it (the node was not included yet) may have moved on, even saved that GCI:
    /// the node must never coordinate a commit in a GCI the cluster has saved.
    pub(crate) fn gcp_include(&mut self, node: NodeId, out: &mut dyn Outbox) {
        let mut epoch = self.gcp.current;
        if let Some(round) = &self.gcp.round {
            if round.step != gsn::GCP_PREPARE {
                // GCP_COMMIT went out; this node's own may still wait in the job queue.
                epoch = epoch.max(round.gci);
            }
        }
        self.send_gcp(node, gsn::GCP_EPOCH_REP, epoch, out);
    }

    /// NODE_FAILREP in DIH: the master's round stops waiting for the failed node; when the
    /// master itself failed, commits held for its GCP_COMMIT go on in the current epoch, and
    /// the new master asks every node for its epoch before its first round.
    pub(crate) fn dih_node_failrep(&mut self, node: NodeId, out: &mut dyn Outbox, now: Instant) {
        // The failed node was the master if it is below this one, which is master now, and
        // was not being copied to (then it was never master).
        let was_master =
            node < self.me && !self.qmgr.copying.contains(node) && self.qmgr.master() == self.me;
        if let Some(awaiting) = self.gcp.takeover.as_mut() {
            awaiting.remove(node);
        }
        self.gcp.deferred.remove(node);
        self.gcp.files_restore.remove(node);
        self.gcp.copy_saved.remove(node);
        if was_master && self.qmgr.started() {
            self.gcp_take_over(out, now);
        }
        self.gcp_takeover_done(out, now);
        if let Some(round) = self.gcp.round.as_mut() {
            round.awaiting.remove(node);
            // A failed node's confirmation no longer vouches for its group: it may restart
            // without its files (seed 0x342770c7c: node 4 confirmed GCI 1's save and failed;
            // the round waited for node 3, whose disk failed, and when node 3 stopped, GCI 1
            // was made restorable on node 4's word, though node 4 had rejoined without files).
            round.restorable.remove(node);
            round.saved.remove(node);
            self.gcp_advance(out, now);
        }
        self.gcp.finishing.retain(|&(_, master)| master != node);
        self.gcp.copy_waiting.retain(|&(_, master)| master != node);
        // Nobody to confirm to: the next master saves again.
        self.gcp.save_waiting.retain(|w| w.master != node);
        if self.gcp.prepared && self.gcp.prepared_by == node {
            // Commits must not wait for a GCP_COMMIT that will never come. The next master's
            // rounds start from here.
            self.gcp.prepared = false;
            for trans in std::mem::take(&mut self.gcp.held) {
                self.jobs.push_back(Signal::TcContinueB(trans));
            }
        }
    }
}

/// True for the signals of the global checkpoint rounds and of a master's takeover of them
/// (not the start's CNTR_* signals, which share their number range): those of a node this one
/// holds failed are stale, since its failure ended every round it was in.
pub(crate) fn is_round_signal(signal: u16) -> bool {
    matches!(
        signal,
        gsn::GCP_PREPARE..=gsn::COPY_GCICONF
            | gsn::GCP_SAVE_WANTED
            | gsn::MASTER_GCPREQ..=gsn::GCP_DURABLE_REP
    )
}

/// The answer to GCP_SAVEREQ once the save is synced.
fn save_answer(restorable: bool) -> u16 {
    if restorable {
        gsn::GCP_SAVECONF
    } else {
        gsn::GCP_SAVEREF
    }
}

/// A node group none of whose nodes answered `round`'s save with GCP_SAVECONF: no file of it
/// could restore the GCI (its nodes answered GCP_SAVEREF, or failed before they answered).
fn unrestorable_group(groups: &[(u32, Vec<NodeId>)], round: &Round) -> Option<u32> {
    groups
        .iter()
        .find(|(_, nodes)| !nodes.iter().any(|&n| round.restorable.contains(n)))
        .map(|(id, _)| *id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(restorable: &[u16], unrestorable: &[u16]) -> Round {
        let set = |nodes: &[u16]| {
            let mut set = NodeSet::new();
            for &n in nodes {
                set.insert(NodeId(n));
            }
            set
        };
        Round {
            step: gsn::GCP_SAVEREQ,
            gci: 3 << 32,
            old: 2 << 32,
            save: true,
            asked: NodeSet::new(),
            failed: NodeSet::new(),
            awaiting: NodeSet::new(),
            restorable: set(restorable),
            unrestorable: set(unrestorable),
            saved: NodeSet::new(),
        }
    }

    #[test]
    fn a_save_is_restorable_only_when_every_node_group_has_a_node_that_confirmed_it() {
        let groups = vec![
            (0, vec![NodeId(1), NodeId(2)]),
            (1, vec![NodeId(3), NodeId(4)]),
        ];
        // Node 4 restarted and its local checkpoint is not complete, node 3 confirmed.
        assert_eq!(unrestorable_group(&groups, &round(&[1, 2, 3], &[4])), None);
        // Node 3 failed during the save: group 1 has only node 4, which cannot restore it.
        assert_eq!(unrestorable_group(&groups, &round(&[1, 2], &[4])), Some(1));
        // Group 0's nodes failed during the save, or never answered it (seed 0x1a13b86ed:
        // node 3's file system failed, and it stayed up as its group's last serving node
        // until node 4, restarted and included after the save began, served).
        assert_eq!(unrestorable_group(&groups, &round(&[3], &[])), Some(0));
    }
}
