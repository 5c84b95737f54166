//! NDBCNTR's start: how a data node with files comes up. It reads its sysfile (the newest
//! global checkpoint it knows to be restorable); once every data node is connected, each tells
//! the master (CNTR_START_REQ), which answers every node with the highest (CNTR_START_CONF):
//! a system restart brings the whole cluster back at that one GCI. Each node then replays its
//! schema log and its redo log up to it, cuts off what follows (a torn tail, and changes of
//! checkpoints never saved everywhere), builds its ordered indexes, and tells the master
//! (CNTR_WAITREP); once every live node has, the master tells all to start (CNTR_START_REP).
//! Until then no node serves and no global checkpoint runs: a node still restoring would
//! answer another's LQHKEYREQ from half its rows, and save checkpoints it has no log for.
//!
//! After StartPartialTimeout the master may start without missing nodes (a partial start),
//! but not when they hold a node of every node group: a GCI is restorable once a node of each
//! group has it, so such nodes may alone have saved newer ones (NDB's partitioned start;
//! ndbd's `--nowait-nodes` names nodes the operator says hold nothing newer, and a start waits
//! neither for them nor StartPartialTimeout when only they are missing). A
//! failed node comes back only by node restart, which needs a started cluster: when the nodes
//! that failed during the start hold a node of every group, or a group's only nodes able to
//! restore the chosen GCI failed, the master stops with 2308 and every node must be started
//! again, as in NDB. A node that heard the restart GCI from a master that then failed names
//! that restart to the new one (`restart_request`), which chooses it again.
//!
//! A record that is damaged before the restart GCI's GCI_COMPLETED record in its part is an
//! error naming the file and offset: that part cannot give back what it promised. A damaged
//! record after it is the torn tail of a write the crash interrupted, and is cut off.
//! Changes of later GCIs logged before that record are skipped, and a RESTART record at the
//! cut keeps every later restart from applying them: the restarted cluster gives their GCIs
//! again, to other changes. For the same reason every local checkpoint after the one restored
//! is removed (its rows may be of those GCIs).
//! Before it cuts its logs, a node names the restart in its sysfile (restorable and restart
//! GCI both the restart's) with the cut pending, and once the cut is on disk, again without;
//! then it tells the master. A node whose sysfile says the cut is pending restores no GCI past
//! that restart: its logs may still hold changes of the GCIs the restart gave again.
//! Each restart is numbered (one past the newest any node names), and each sysfile keeps the
//! node's last `RESTARTS_KEPT` restarts, which each CNTR_START_REQ carries. A node that missed
//! restarts the newest history holds may hold, uncut, changes of GCIs they gave again (its
//! disk failed as it cut its logs, or it was left out), so it counts and restores no further
//! than the lowest GCI of those; past that it stops and joins by node restart (`standing`).
//! The master waits while a node group has no node that can restore the restart GCI, and
//! sends the new history (CNTR_START_CONF), which every node's sysfile names from then on.
//! A new master that chooses again the GCI its failed predecessor chose numbers the restart
//! anew; a node that restored already names the new number in its sysfile before it tells
//! the master so (CNTR_WAITREP names the number it restored for, and the master counts only
//! its own; until it numbers the restart anew, the number its predecessor sent), so no node
//! serves under a number its sysfile lacks. Before CNTR_WAITREP a node names its tables and
//! indexes to the master, which, before CNTR_START_REP, names those some node lacks: every
//! node drops them (`dict/agree.rs`).
//! A node started with `--initial` (or with no files) restores nothing; when the cluster
//! restarts at a GCI it cannot reach, it stops with an error; started again once the others
//! serve, it joins by node restart (`node_restart.rs`). Should every node of a node group stop
//! so, or fail, during the restore, the others stop too (2308): started, they would serve
//! without that group's rows.
//! A node that hears, while it starts, that the others serve already (`Restart::node_restart`)
//! runs the same restore up to its own restorable GCI instead of the cluster's, sends no
//! CNTR_START_REQ or CNTR_WAITREP, and goes on with the node restart (`start_done`).

use std::collections::BTreeMap;
use std::time::Instant;

use rndb_config::NodeId;
use rndb_protocol::dih::{CntrStartConf, CntrStartReq, RestartId, RESTARTS_KEPT};
use rndb_protocol::gsn;
use rndb_protocol::signals::block;

use super::dict::agree::{lacked_by_some, Object};
use super::dict::log::{DictLog, SCHEMA_LOG};
use super::dih::gcp::{Gcp, SYSFILES};
use super::fs::FsWait;
use super::lqh::lcp::{lcp_ctl, lcp_data, lcp_dir, Lcps};
use super::lqh::redo::{part_dir, part_file, Redo, Resume};
use super::{data_node_header, Kernel, Outbox, Signal};
use crate::ndbfs::format::{self, gci_hi, kind, FileHeader, LcpCtl, Next, Sysfile};
use crate::ndbfs::read::{self, Body, Entry, FileKind};
use crate::ndbfs::{FsData, FsOp};

/// A read a restart waits for.
#[derive(Debug)]
pub(crate) enum StartRead {
    /// A copy of the sysfile.
    Sysfile,
    /// A sync of a sysfile copy that was read (see `restart_read`).
    SysfileSync,
    SchemaLog,
    /// The files of a redo part's directory.
    PartList(u32),
    /// One file of a redo part.
    PartFile(u32, String),
    /// The local checkpoints' directory.
    LcpList,
    /// A local checkpoint's control file.
    LcpCtl(u32),
    /// The data file of the checkpoint the restore uses.
    LcpData(u32),
}

/// A start in progress.
#[derive(Debug, Default)]
pub(crate) struct Restart {
    /// The sysfile copies read so far.
    sysfiles: Vec<Option<Vec<u8>>>,
    /// This node's newest restorable GCI, once its sysfile is read (0: none named).
    pub(crate) restorable: Option<u32>,
    /// Started with `--initial`: there is nothing to restore.
    pub(crate) initial: bool,
    /// The sysfile read names no GCI, as a node restart writes it when it drops the node's
    /// files: the redo log begins at that restart's copy, and the rows copied then are only
    /// in the local checkpoints taken since.
    files_dropped: bool,
    /// The cluster serves already: this node restores its own files up to its own restorable
    /// GCI (`restorable`), takes no part in a system restart, and then joins by node restart.
    pub(crate) node_restart: bool,
    /// The sysfile read was written by a system restart's restore at its last restart's GCI
    /// before it cut the logs, and the cut may not have reached the disk: no GCI past it is
    /// restored.
    pub(crate) cut_pending: bool,
    /// The restart history the sysfile read names (`Sysfile::restarts`).
    pub(crate) restarts: Vec<RestartId>,
    /// The cluster's restart history, this restart last, once the master said.
    pub(crate) history: Vec<RestartId>,
    /// The master CNTR_START_REQ was sent to.
    requested: Option<NodeId>,
    /// As master: what each node's sysfile names (its newest restorable GCI, and the system
    /// restart it last took part in), and whether the restart GCI went out.
    answers: BTreeMap<NodeId, Named>,
    conf_sent: bool,
    /// As master: a node group whose every node is stale was logged.
    stale_group_logged: bool,
    /// As master: a partial start refused because the missing nodes could be a cluster of
    /// their own was logged.
    partitioned_logged: bool,
    /// The GCI the cluster restarts at, once the master said.
    pub(crate) gci: Option<u32>,
    /// Redo files read, per part: (name, bytes), and reads still out.
    part_files: BTreeMap<u32, Vec<(String, Vec<u8>)>>,
    reads_out: usize,
    /// Where the schema log goes on, and the SCHEMA records replayed from it (as written).
    schema_written: u64,
    schema_records: Vec<u8>,
    /// Files found damaged and passed over (a sysfile copy, a checkpoint's control file),
    /// named in the error should the restore fail for want of them.
    damaged: Vec<String>,
    /// Local checkpoints found: control files still to read, those read (usable or not), the
    /// one restored, and the oldest and newest ids on disk.
    lcp_reads_out: usize,
    lcp_ctls: Vec<LcpCtl>,
    lcp: Option<LcpCtl>,
    /// The checkpoints of the chain still to load, last first.
    lcp_chain: Vec<u32>,
    lcp_ids: (u32, u32),
    /// What the restore removes from this node's files, once its sysfile names the restart
    /// (`restore_done`): the logs past the restart GCI, with a RESTART record at each cut, and
    /// the local checkpoints after the one restored.
    cut: Vec<FsOp>,
    /// The cut went to NDBFS.
    cut_sent: bool,
    /// Copies of the sysfile written to name the restart, once the restore is done: first
    /// both with the cut pending, then, once the cut is on disk, both without.
    sysfile_written: usize,
    /// This node's restore is done, and the master it told (CNTR_WAITREP).
    restored: Option<NodeId>,
    /// A sysfile copy without the cut pending went to disk naming the restart by a number a
    /// new master has since replaced (`exec_cntr_start_conf`): both are written again before
    /// this node tells the master it restored.
    renumbered: bool,
    /// As master: the number of the restart its CNTR_START_CONF named, once sent; the nodes
    /// whose restore is done, each under the restart number it named (`counted_no`), and
    /// whether CNTR_START_REP went out.
    conf_no: Option<u32>,
    waited: BTreeMap<NodeId, u32>,
    /// As master: the tables and indexes each node holds once restored, and its id counter
    /// (`dict/agree.rs`).
    schemas: BTreeMap<NodeId, (Vec<Object>, u32)>,
    start_sent: bool,
}

/// What a node's sysfile names, as it tells the master in its CNTR_START_REQ.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Named {
    /// The newest global checkpoint restorable from its files.
    pub restorable: u32,
    /// The system restarts its files went through (`Sysfile::restarts`): the last is the one
    /// it took part in (its restore done and its logs cut there, see `restore_done`), or the
    /// cluster's when it last joined by node restart.
    pub restarts: Vec<RestartId>,
}

impl Named {
    fn from_req(req: CntrStartReq) -> Named {
        Named {
            restorable: req.restorable,
            restarts: req.restarts,
        }
    }

    /// The GCI of the last restart it took part in (0 when its files name none).
    pub fn restart(&self) -> u32 {
        self.restarts.last().map_or(0, |r| r.gci)
    }
}

/// The restart history of the newest system restart any node names: the one whose last
/// restart has the highest number (of two with the same number, from attempts that did not
/// hear of each other, the higher GCI's).
pub(crate) fn newest_history(answers: &BTreeMap<NodeId, Named>) -> Vec<RestartId> {
    (answers.values())
        .filter_map(|n| n.restarts.last().map(|last| (*last, &n.restarts)))
        .max_by_key(|(last, _)| *last)
        .map(|(_, history)| history.clone())
        .unwrap_or_default()
}

/// Where a node whose sysfile names `named` stands against the newest restart history
/// `newest`: what it counts towards the restart GCI, and the highest GCI it can restore. A
/// node that took part in the newest restart counts its restorable GCI and may restore any
/// (its redo log may hold a GCI its sysfile does not name yet). A node that missed later
/// restarts counts, and restores, no further than the lowest GCI of those: its redo log may
/// hold, uncut, changes of GCIs they gave again (its disk failed while it cut its logs, or it
/// was left out). Counting up to the newest restart's GCI alone was not enough: node 2 of seed
/// 0x7a0001db, which missed the restarts at 16 and 17, restored its own old GCI 17 at the
/// next restart at 17. A node whose last restart is not in the history (older than it keeps,
/// or of another history) cannot take part: `None`.
fn standing(named: &Named, newest: &[RestartId]) -> Option<(u32, u32)> {
    let last = named.restarts.last()?;
    let at = newest.iter().position(|r| r == last)?;
    match newest[at + 1..].iter().map(|r| r.gci).min() {
        None => Some((named.restorable, u32::MAX)),
        Some(missed) => Some((named.restorable.min(missed), missed)),
    }
}

/// A system restart's GCI, from what each node's sysfile names, and the newest restart
/// history (see [`standing`]).
pub(crate) fn restart_gci(answers: &BTreeMap<NodeId, Named>) -> (u32, Vec<RestartId>) {
    let newest = newest_history(answers);
    let gci = (answers.values())
        .filter_map(|n| standing(n, &newest).map(|(counted, _)| counted))
        .max()
        .unwrap_or(0);
    (gci, newest)
}

/// True when a node whose sysfile names `named` can restore the cluster's restart at `gci`,
/// the newest restart history any node names being `newest` (see [`standing`]).
pub(crate) fn can_restore(named: &Named, gci: u32, newest: &[RestartId]) -> bool {
    standing(named, newest).is_some_and(|(_, limit)| gci <= limit)
}

/// The restart number a master counts CNTR_WAITREPs under: the one its CNTR_START_CONF
/// named, or, before it sent one (it became master by the failure of the one that chose the
/// restart GCI), the number that one sent, under which the nodes that heard it restored (their
/// sysfiles name it, as this node's does). Once this node numbers the restart anew, only
/// restores under the new number count.
fn counted_no(restart: &Restart) -> Option<u32> {
    let chosen = || restart.gci.and(restart.history.last().map(|r| r.no));
    restart.conf_no.or_else(chosen)
}

/// CNTR_WAITREP's word: the restart GCI, and in the high word the number of the restart the
/// node restored for (which its sysfile names).
fn waitrep(gci: u32, no: u32) -> u64 {
    u64::from(no) << 32 | u64::from(gci)
}

/// `history` with the restart `next` appended, the oldest dropped past `RESTARTS_KEPT`.
fn with_restart(history: &[RestartId], next: RestartId) -> Vec<RestartId> {
    let keep = history.len().min(RESTARTS_KEPT - 1);
    let mut restarts = history[history.len() - keep..].to_vec();
    restarts.push(next);
    restarts
}

impl Restart {
    /// The files passed over as damaged, for an error.
    pub fn damaged(&self) -> String {
        self.damaged.join("; ")
    }
}

impl Kernel {
    /// Starts reading this node's files (a start without `--initial`), or (`initial`) starts
    /// with nothing to restore; either way the cluster's restart GCI is agreed before this
    /// node serves.
    pub(crate) fn begin_start(&mut self, initial: bool) {
        let mut restart = Restart {
            initial,
            ..Restart::default()
        };
        if initial {
            restart.restorable = Some(0);
            restart.restarts = vec![RestartId::default()];
        } else {
            for path in SYSFILES {
                self.fs.push(
                    FsOp::Read {
                        path: path.to_string(),
                    },
                    FsWait::Start(StartRead::Sysfile),
                );
            }
        }
        self.restart = Some(restart);
        self.jobs.push_back(Signal::Timer);
    }

    /// A read of the start completed.
    pub(crate) fn restart_read(
        &mut self,
        read: StartRead,
        data: FsData,
        out: &mut dyn Outbox,
        now: Instant,
    ) -> Result<(), String> {
        let Some(restart) = self.restart.as_mut() else {
            return Ok(());
        };
        match (read, data) {
            (StartRead::Sysfile, FsData::File(bytes)) => {
                restart.sysfiles.push(bytes);
                if restart.sysfiles.len() == SYSFILES.len() {
                    // What was read may be only in the page cache: the process stopped (or
                    // its sync failed) after a write, and the machine did not crash. Before
                    // anything overwrites the other copy, what was read is made durable, or
                    // a power loss could tear both (seed 0x34e639530: a sysfile whose sync
                    // had failed was read, the empty sysfile of the node restart went to the
                    // other copy, and a cluster crash left neither readable). Files that do
                    // not exist are not synced (a sync would create them).
                    let read: Vec<bool> = restart.sysfiles.iter().map(Option::is_some).collect();
                    for (path, _) in SYSFILES.iter().zip(read).filter(|(_, read)| *read) {
                        self.fs.push(
                            FsOp::Sync {
                                path: path.to_string(),
                            },
                            FsWait::Start(StartRead::SysfileSync),
                        );
                    }
                    let sysfile = self.sysfile_gci()?;
                    let restorable = sysfile.restorable_gci;
                    tracing::info!(
                        restorable_gci = restorable,
                        "read the sysfile{}",
                        if restorable == 0 {
                            ": no files, nothing to restore"
                        } else {
                            ""
                        }
                    );
                    if let Some(restart) = self.restart.as_mut() {
                        restart.restorable = Some(restorable);
                        restart.cut_pending = sysfile.cut_pending;
                        restart.restarts = sysfile.restarts;
                        if restart.node_restart {
                            self.node_restart_own_restore();
                            return Ok(());
                        }
                    }
                    self.restart_request(out);
                }
            }
            (StartRead::SchemaLog, FsData::File(bytes)) => {
                self.replay_schema_log(bytes.as_deref().unwrap_or_default(), out, now)?;
                self.fs.push(
                    FsOp::List { path: "LCP".into() },
                    FsWait::Start(StartRead::LcpList),
                );
            }
            (StartRead::LcpList, FsData::Names(names)) => {
                let ids: Vec<u32> = names.iter().filter_map(|n| n.parse().ok()).collect();
                restart.lcp_ids = (
                    ids.iter().copied().min().unwrap_or(0),
                    ids.iter().copied().max().unwrap_or(0),
                );
                restart.lcp_reads_out = ids.len();
                for id in &ids {
                    self.fs.push(
                        FsOp::Read { path: lcp_ctl(*id) },
                        FsWait::Start(StartRead::LcpCtl(*id)),
                    );
                }
                if ids.is_empty() {
                    self.restart_choose_lcp()?;
                }
            }
            (StartRead::LcpCtl(id), FsData::File(bytes)) => {
                restart.lcp_reads_out -= 1;
                match bytes.map(|b| LcpCtl::from_file(&b, u32::from(self.me.0))) {
                    Some(Ok(ctl)) if ctl.lcp_id == id => restart.lcp_ctls.push(ctl),
                    Some(Ok(_)) => {
                        let why = format!("{} names another checkpoint", lcp_ctl(id));
                        tracing::warn!(lcp = id, "{why}; not used");
                        restart.damaged.push(why);
                    }
                    // Incomplete (the crash came before its control file): not used.
                    None => {}
                    Some(Err(why)) => {
                        let why = format!("{}: {why}", lcp_ctl(id));
                        tracing::warn!(lcp = id, "{why}; not used");
                        restart.damaged.push(why);
                    }
                }
                if restart.lcp_reads_out == 0 {
                    self.restart_choose_lcp()?;
                }
            }
            (StartRead::LcpData(id), FsData::File(bytes)) => {
                let bytes = bytes.ok_or_else(|| {
                    format!(
                        "{}: missing, though {} says the checkpoint is complete",
                        lcp_data(id),
                        lcp_ctl(id)
                    )
                })?;
                self.restore_lcp(id, &bytes)?;
                self.restart_load_next_lcp();
            }
            (StartRead::PartList(part), FsData::Names(names)) => {
                let files: Vec<&String> =
                    names.iter().filter(|n| n.ends_with(".FragLog")).collect();
                restart.part_files.insert(part, Vec::new());
                restart.reads_out += files.len();
                for name in files {
                    let path = format!("{}/{name}", part_dir(part));
                    self.fs.push(
                        FsOp::Read { path: path.clone() },
                        FsWait::Start(StartRead::PartFile(part, path)),
                    );
                }
                self.restart_replay_if_read()?;
            }
            (StartRead::PartFile(part, path), FsData::File(bytes)) => {
                restart.reads_out -= 1;
                if let Some(bytes) = bytes {
                    restart
                        .part_files
                        .entry(part)
                        .or_default()
                        .push((path, bytes));
                }
                self.restart_replay_if_read()?;
            }
            (StartRead::SysfileSync, FsData::Done) => {}
            (read, data) => {
                return Err(format!("restart: {read:?} answered with {data:?}"));
            }
        }
        Ok(())
    }

    /// The sysfile copy with the newest restorable GCI (GCI 0 when neither exists).
    fn sysfile_gci(&mut self) -> Result<Sysfile, String> {
        let me = u32::from(self.me.0);
        let copies = self
            .restart
            .as_mut()
            .map(|r| std::mem::take(&mut r.sysfiles))
            .unwrap_or_default();
        let mut best: Option<Sysfile> = None;
        let mut errors = Vec::new();
        for (index, (path, bytes)) in SYSFILES.iter().zip(&copies).enumerate() {
            let Some(bytes) = bytes else { continue };
            match Sysfile::from_file(bytes, me) {
                Ok(sysfile) => {
                    // Of two copies naming the same GCI, the one naming a newer restart, and
                    // then the one whose cut is done, was written last (`restore_done`).
                    let key = |s: &Sysfile| {
                        (s.restorable_gci, s.restarts.last().copied(), !s.cut_pending)
                    };
                    if best.as_ref().is_none_or(|b| key(b) < key(&sysfile)) {
                        best = Some(sysfile);
                        // The next save overwrites the other copy first, this one last.
                        self.gcp.sysfile_first = (index + 1) % SYSFILES.len();
                    }
                }
                Err(why) => {
                    tracing::warn!(file = path, "{why}; using the other copy");
                    if let Some(restart) = self.restart.as_mut() {
                        restart.damaged.push(format!("{path}: {why}"));
                    }
                    errors.push(format!("{path}: {why}"));
                }
            }
        }
        // A save completes only once both copies are synced: one copy damaged and the other
        // missing is the very first save, cut short (by the crash, or a failed write before
        // it). Nothing was restorable yet.
        let first_save_cut = errors.len() == 1 && copies.iter().any(Option::is_none);
        match best {
            Some(sysfile) => {
                if sysfile.restorable_gci == 0 {
                    // Written so only when a node restart dropped the node's files.
                    if let Some(restart) = self.restart.as_mut() {
                        restart.files_dropped = true;
                    }
                }
                Ok(sysfile)
            }
            // Nothing saved yet: the files went through the initial start only.
            None if errors.is_empty() => Ok(Sysfile {
                restarts: vec![RestartId::default()],
                ..Sysfile::default()
            }),
            None if first_save_cut => {
                tracing::warn!("the first sysfile write was cut short: nothing was saved yet");
                Ok(Sysfile {
                    restarts: vec![RestartId::default()],
                    ..Sysfile::default()
                })
            }
            None => Err(format!(
                "no readable sysfile: {}. Start with --initial to begin empty",
                errors.join("; ")
            )),
        }
    }

    /// Once this node knows what it can restore and every data node is connected, it tells
    /// the master.
    pub(crate) fn restart_request(&mut self, out: &mut dyn Outbox) {
        let ready = self.qmgr.all_connected() || self.qmgr.partial_due;
        let master = self.qmgr.master();
        let Some(restart) = self.restart.as_mut() else {
            return;
        };
        let (Some(restorable), true, false) = (restart.restorable, ready, restart.node_restart)
        else {
            return;
        };
        // Again when the master changed (a lower node connected during a partial start, or
        // the master failed).
        if restart.requested == Some(master) {
            return;
        }
        restart.requested = Some(master);
        let req = match restart.gci {
            // The old master chose the restart GCI, and this node restores it (its logs may be
            // cut there already): it names that restart, so the new master chooses it again
            // (`restart_gci`; seed 0x223: the old master failed after its CNTR_START_CONF
            // reached one node, and the new one waited for that node's request for good).
            Some(gci) => CntrStartReq {
                restorable: gci,
                restarts: restart.history.clone(),
            },
            None => CntrStartReq {
                restorable,
                restarts: restart.restarts.clone(),
            },
        };
        if master == self.me {
            self.jobs.push_back(Signal::CntrStartReq {
                from: master,
                req: Box::new(req),
            });
        } else if self.qmgr.is_up(master) {
            let header = data_node_header(gsn::CNTR_START_REQ, block::DBDIH, block::DBDIH);
            self.unsent
                .send(out, master, header, &mut |b| req.encode(b));
        }
    }

    /// CNTR_START_REQ at the master: when every data node has said, all hear the restart GCI.
    pub(crate) fn exec_cntr_start_req(
        &mut self,
        from: NodeId,
        req: CntrStartReq,
        out: &mut dyn Outbox,
    ) {
        let Some(restart) = self.restart.as_mut() else {
            return;
        };
        restart.answers.insert(from, Named::from_req(req));
        self.cntr_start_decide(out);
    }

    /// As master: the restart GCI goes to every node that asked, once every data node has, or
    /// (a partial start, after StartPartialTimeout) every live one has and every node group
    /// has one; the others are named failed in the CNTR_START_CONF and left out. Every node
    /// group needs a node that can restore the restart GCI (see [`restart_gci`]); the stale
    /// ones hear the newest restart too (the CONF's high word), and stop.
    pub(crate) fn cntr_start_decide(&mut self, out: &mut dyn Outbox) {
        if self.qmgr.master() != self.me {
            return;
        }
        let count = self.qmgr.data_node_count();
        let alive: Vec<NodeId> = self.qmgr.alive().collect();
        let partial_due = self.qmgr.partial_due;
        let Some(restart) = self.restart.as_mut() else {
            return;
        };
        if restart.conf_sent || restart.node_restart {
            return;
        }
        if restart.answers.len() < count {
            let all_alive_asked = alive.iter().all(|n| restart.answers.contains_key(n));
            if !partial_due || !all_alive_asked {
                return;
            }
            // Missing nodes that hold a node of every group may alone have saved newer GCIs
            // than any node here (the nodes here failed before them): starting without them
            // would lose those. As NDB's partitioned start, this waits for them. (A master told
            // the restart GCI by the one before it, which chose it from every node's answer or
            // from a start that was not partitioned, chooses it again.)
            let partitioned = (restart.gci.is_none())
                .then(|| {
                    self.qmgr
                        .partitioned_by(|n| !restart.answers.contains_key(&n))
                })
                .flatten();
            if let Some(missing) = partitioned {
                if !restart.partitioned_logged {
                    restart.partitioned_logged = true;
                    tracing::error!(
                        ?missing,
                        "the cluster cannot start without data nodes {missing:?}: they hold a \
                         node of every node group, so they may have saved global checkpoints \
                         newer than any node here (a partitioned start); waiting for them"
                    );
                }
                return;
            }
        }
        let (restart_gci, newest) = self::restart_gci(&restart.answers);
        let answers = &restart.answers;
        let unrestorable = self.qmgr.node_groups().iter().find(|(_, nodes)| {
            !nodes.iter().any(|n| {
                answers
                    .get(n)
                    .is_some_and(|named| can_restore(named, restart_gci, &newest))
            })
        });
        if let Some((group, nodes)) = unrestorable {
            // Its nodes that have not said all failed during this start: their next runs join
            // by node restart, so no node of the group will come to restore it.
            let unheard: Vec<NodeId> = (nodes.iter().copied())
                .filter(|n| !answers.contains_key(n))
                .collect();
            if !unheard.is_empty() && unheard.iter().all(|&n| self.qmgr.failed.contains(n)) {
                self.start_fails(format!(
                    "no node of node group {group} ({nodes:?}) is left to restore GCI \
                     {restart_gci} (those that did not say failed: {unheard:?}), so the \
                     cluster cannot start there; start every data node again"
                ));
                return;
            }
            if !restart.stale_group_logged {
                restart.stale_group_logged = true;
                let newest_restart = newest.last().map_or(0, |r| r.gci);
                tracing::error!(
                    group,
                    ?nodes,
                    gci = restart_gci,
                    newest_restart,
                    "the cluster cannot restart at GCI {restart_gci}: no node of node group \
                     {group} that has said can restore it (its sysfile does not name the \
                     system restart at GCI {newest_restart}, or it missed restarts at lower \
                     GCIs, or it is missing); waiting for its nodes"
                );
            }
            return;
        }
        restart.conf_sent = true;
        let stale: Vec<NodeId> = (answers.iter())
            .filter(|(_, named)| !can_restore(named, restart_gci, &newest))
            .map(|(&node, _)| node)
            .collect();
        if !stale.is_empty() {
            tracing::warn!(gci = restart_gci, ?newest, ?stale, "system restart: these data nodes' files do not record every system restart since theirs, up to GCI {restart_gci}: they stop, and join by node restart once the cluster has started");
        }
        let nodes: Vec<NodeId> = restart.answers.keys().copied().collect();
        if nodes.len() < count {
            let missing: Vec<NodeId> = (self.qmgr.data_nodes().iter().copied())
                .filter(|n| !nodes.contains(n))
                .collect();
            for &node in &missing {
                self.qmgr.exclude(node);
            }
            tracing::warn!(gci = restart_gci, nodes = ?nodes, ?missing, "partial system restart: starting without the missing data nodes");
        } else {
            tracing::info!(gci = restart_gci, nodes = ?restart.answers, "system restart: every data node reported its newest restorable GCI");
        }
        // This restart is numbered one past the newest any node names (the initial start
        // is number 0), and goes on that one's history.
        let restarts = match restart_gci {
            0 => vec![RestartId::default()],
            gci => with_restart(
                &newest,
                RestartId {
                    no: newest.last().map_or(0, |r| r.no) + 1,
                    gci,
                },
            ),
        };
        restart.conf_no = restarts.last().map(|r| r.no);
        let conf = CntrStartConf {
            gci: restart_gci,
            failed: self.qmgr.failed().words(),
            restarts,
        };
        for node in nodes {
            self.send_cntr_start_conf(node, &conf, out);
        }
    }

    /// CNTR_START_CONF to `node` (this one through the job queue).
    pub(crate) fn send_cntr_start_conf(
        &mut self,
        node: NodeId,
        conf: &CntrStartConf,
        out: &mut dyn Outbox,
    ) {
        if node == self.me {
            self.jobs.push_back(Signal::CntrStartConf {
                from: node,
                conf: Box::new(conf.clone()),
            });
        } else if self.qmgr.is_up(node) {
            let header = data_node_header(gsn::CNTR_START_CONF, block::DBDIH, block::DBDIH);
            self.unsent.send(out, node, header, &mut |b| conf.encode(b));
        }
    }

    /// CNTR_START_CONF: the cluster restarts at `conf.gci`, with the restart history
    /// `conf.restarts` (this restart last); restore up to it.
    pub(crate) fn exec_cntr_start_conf(
        &mut self,
        conf: CntrStartConf,
        out: &mut dyn Outbox,
    ) -> Result<(), String> {
        let gci = conf.gci;
        let Some(restart) = self.restart.as_mut().filter(|r| !r.node_restart) else {
            return Ok(());
        };
        match restart.gci {
            // A new master's answer to the restart this node named (`restart_request`): the
            // same GCI, numbered anew; the sysfiles this node writes from now on name the new
            // number, as every other node's do. One it wrote already names the old number,
            // while its redo log will hold the new restart's GCIs: at the next system restart
            // it would count as having missed the new restart, and restore no GCI past it
            // (seed 0x1400846: the cluster crashed again after the new master saved GCI 15,
            // and no node of its group could restore it). So it is written again before this
            // node tells the new master it restored (CNTR_WAITREP carries the number, which
            // the master checks).
            Some(chosen) if chosen == gci => {
                restart.history = conf.restarts;
                let copies = SYSFILES.len();
                if restart.sysfile_written > copies {
                    restart.renumbered = true;
                }
                if restart.restored.take().is_some() {
                    self.restore_done(gci, out);
                }
                return Ok(());
            }
            Some(chosen) => {
                return Err(format!(
                    "the new master restarts the cluster at GCI {gci}, but the failed master \
                     chose GCI {chosen}, which this node restores"
                ))
            }
            None => {}
        }
        let named = Named {
            restorable: restart.restorable.unwrap_or(0),
            restarts: restart.restarts.clone(),
        };
        let newest = &conf.restarts[..conf.restarts.len().saturating_sub(1)];
        let newest_restart = newest.last().map_or(0, |r| r.gci);
        let fits = can_restore(&named, gci, newest);
        restart.gci = Some(gci);
        restart.history = conf.restarts;
        if gci == 0 {
            // Nothing anywhere: an initial start.
            self.lqh.redo = Some(Redo::new(u32::from(self.me.0), &self.durability, &[]));
            self.dict_log = DictLog::new(true, u32::from(self.me.0), 0);
            self.dict_log.set_compact_after(self.schema_compact_after);
            self.jobs.push_back(Signal::StartDone { gci: 0 });
            return Ok(());
        }
        // A node whose sysfile names no GCI may still hold the restart GCI in its redo log:
        // every node saves a GCI (GCP_SAVEREQ) before any writes its sysfile (COPY_GCIREQ), so
        // a crash between two nodes' sysfile writes of the first global checkpoint leaves one
        // without. Its redo log tells (`replay_part` fails when the GCI is not there).
        let refusal = if named.restorable == 0 && restart.initial {
            Some(format!(
                "the cluster restarts at GCI {gci}, and this node has nothing to restore (it was \
                 started with --initial or has no files); start it again once the cluster has \
                 started: it joins by node restart"
            ))
        } else if restart.cut_pending && gci > named.restart() {
            Some(format!(
                "the cluster restarts at GCI {gci}, past the system restart at GCI {} whose cut \
                 of this node's logs may not have reached the disk (the node stopped while it \
                 cut them), so its redo log past GCI {} cannot be trusted; start it again once \
                 the cluster has started: it joins by node restart",
                named.restart(),
                named.restart()
            ))
        } else if !fits {
            Some(format!(
                "the cluster restarts at GCI {gci}, past a system restart that this node's files \
                 do not record (its sysfile names the restart at GCI {}, the newest is at GCI \
                 {newest_restart}: its disk failed while it cut its logs at a later one, or it \
                 was left out of it), so its redo log past that restart cannot be trusted; start \
                 it again once the cluster has started: it joins by node restart",
                named.restart()
            ))
        } else {
            None
        };
        if let Some(why) = refusal {
            // Starting again cures each refusal of the restart GCI, the node then joining by
            // node restart, when another node of its group restores the group.
            self.rejoin_cures = self.fatal.is_none() && self.group_restored_without_me();
            return Err(why);
        }
        tracing::info!(gci, "system restart: restoring the schema and the redo log");
        self.read_schema_log();
        Ok(())
    }

    /// Restores from the schema log on: then the local checkpoint and the redo log, up to
    /// the restart's GCI.
    pub(crate) fn read_schema_log(&mut self) {
        if let Some(restart) = self.restart.as_mut() {
            restart.cut.clear();
        }
        self.fs.push(
            FsOp::Read {
                path: SCHEMA_LOG.into(),
            },
            FsWait::Start(StartRead::SchemaLog),
        );
    }

    /// Replays the schema changes up to the restart GCI.
    /// True when this node runs a system restart at `gci` (not its own node restart) and its
    /// sysfile names an older restorable GCI: it stopped before the others saved `gci`, so its
    /// logs may well end before it, and started again it joins by node restart.
    fn restore_gci_unsaved(&self, gci: u32) -> bool {
        self.restart
            .as_ref()
            .is_some_and(|r| !r.node_restart && r.restorable.unwrap_or(0) < gci)
            && self.group_restored_without_me()
    }

    /// True when another node of this node's group is alive in this start: it restores the
    /// group's fragments, and this node, started again, copies them from it. Without one the
    /// group is lost with this node (the others stop, 2308), and no restart of it cures that.
    fn group_restored_without_me(&self) -> bool {
        (self.qmgr.node_groups().iter())
            .find(|(_, nodes)| nodes.contains(&self.me))
            .is_some_and(|(_, nodes)| {
                (nodes.iter()).any(|&n| n != self.me && self.qmgr.is_alive(n))
            })
    }

    /// The error of a log (`file`) that has no GCI_COMPLETED record for `gci`. When this node
    /// stopped before the others saved `gci`, starting again cures it (`rejoin_cures`);
    /// otherwise the log is damaged or lost a write, and no restart cures that.
    fn gci_not_saved(&mut self, file: &str, gci: u32) -> String {
        if self.restore_gci_unsaved(gci) {
            self.rejoin_cures = self.fatal.is_none();
            format!(
                "{file}: no GCI_COMPLETED record for GCI {gci}: this node stopped before the \
                 others saved that global checkpoint; start it again once the cluster has \
                 started: it joins by node restart"
            )
        } else {
            format!(
                "{file}: no GCI_COMPLETED record for GCI {gci}, which this node's sysfile says \
                 it saved: a write failed, or the file is damaged before it"
            )
        }
    }

    fn replay_schema_log(
        &mut self,
        bytes: &[u8],
        out: &mut dyn Outbox,
        now: Instant,
    ) -> Result<(), String> {
        let gci = self.restart.as_ref().and_then(|r| r.gci).unwrap_or(0);
        if bytes.is_empty() {
            // Only a node whose sysfile names nothing may lack its schema log: with a
            // restorable GCI, the log is lost.
            let named_nothing =
                (self.restart.as_ref()).is_some_and(|r| r.restorable.unwrap_or(0) == 0);
            self.rejoin_cures =
                self.fatal.is_none() && named_nothing && self.restore_gci_unsaved(gci);
            return Err(format!(
                "the cluster restarts at GCI {gci}, and this node has nothing to restore (no \
                 schema log); start it again once the cluster has started: it joins by node \
                 restart"
            ));
        }
        let fail = |offset: usize, why: &str| format!("{SCHEMA_LOG}: offset {offset}: {why}");
        FileHeader::decode(bytes, format::SCHEMA_MAGIC).map_err(|why| fail(0, &why))?;
        let marks = restart_marks([(0, bytes)]);
        let mut replayed = 0;
        let mut replayed_bytes = Vec::new();
        let mut cut = None;
        // Up to the restart GCI's GCI_COMPLETED record; what follows is of later GCIs (the
        // save of a GCI comes after every node moved to the next) or a torn tail.
        for entry in read::entries(bytes, FileKind::SchemaLog, format::HEADER_BYTES) {
            let entry = match entry {
                Ok(entry) => entry,
                // A write cut short: the log ends here.
                Err(e) if e.torn => break,
                Err(e) => return Err(format!("{SCHEMA_LOG}: {e}")),
            };
            let offset = entry.offset;
            match entry.body {
                Body::Schema(change)
                    if cut.is_none()
                        && gci_hi(entry.gci) <= gci
                        && !discarded(&marks, (0, offset), entry.gci) =>
                {
                    self.replay_schema_change(&change, out, now)
                        .map_err(|e| fail(offset, &format!("replaying it: {e}")))?;
                    replayed_bytes.extend_from_slice(&bytes[offset..entry.next]);
                    replayed += 1;
                }
                // A GCI_COMPLETED that an earlier restart's RESTART mark follows vouches for
                // no GCI past that restart's: a compacted log may hold only the GCI_COMPLETED
                // of a GCI that restart gave again (sim seeds 0xd02a76, 0xc00058).
                Body::GciCompleted
                    if cut.is_none() && completed_upto(&marks, offset, entry.gci) >= gci =>
                {
                    cut = Some(entry.next);
                }
                _ => {}
            }
        }
        let Some(cut) = cut else {
            return Err(self.gci_not_saved(SCHEMA_LOG, gci));
        };
        tracing::info!(changes = replayed, "schema restored");
        // What follows the cut goes, and a RESTART record marks it, durably, before anything
        // new is written (see `replay_part`).
        let mut mark = Vec::new();
        format::append_record(&mut mark, u64::from(gci) << 32, kind::RESTART, |_| {});
        if let Some(restart) = self.restart.as_mut() {
            restart.schema_written = (cut + mark.len()) as u64;
            restart.schema_records = replayed_bytes;
        }
        self.restore_cut(SCHEMA_LOG, cut as u64, mark);
        Ok(())
    }

    /// True when a restore cuts the logs it replayed at its GCI: a system restart's. A node
    /// restart's own restore changes nothing on disk: its files stay as they were until the
    /// president lets it in, and may hold GCIs past its sysfile's that the cluster made
    /// restorable (its sysfile write failed after its save: seed 0x1a13b9f61).
    fn restore_cuts(&self) -> bool {
        !self.restart.as_ref().is_some_and(|r| r.node_restart)
    }

    /// Adds to the restore's cut (see `restore_done`): `path` truncated at `len`, a RESTART
    /// record `mark` appended there, synced. A node restart's restore cuts nothing.
    fn restore_cut(&mut self, path: &str, len: u64, mark: Vec<u8>) {
        let Some(restart) = self.restart.as_mut().filter(|r| !r.node_restart) else {
            return;
        };
        let path = path.to_string();
        restart.cut.extend([
            FsOp::Truncate {
                path: path.clone(),
                len,
            },
            FsOp::Write {
                path: path.clone(),
                offset: len,
                bytes: mark,
            },
            FsOp::Sync { path },
        ]);
    }

    /// Picks the newest complete local checkpoint whose rows are all restorable at the
    /// restart GCI, and reads it (or, with none, replays the redo from its start).
    fn restart_choose_lcp(&mut self) -> Result<(), String> {
        let Some(restart) = self.restart.as_mut() else {
            return Ok(());
        };
        let gci = restart.gci.unwrap_or(0);
        // The newest usable checkpoint whose whole chain (its full checkpoint and every
        // partial one up to it) is complete on disk.
        let complete = |id: u32| restart.lcp_ctls.iter().any(|c| c.lcp_id == id);
        let chosen = restart
            .lcp_ctls
            .iter()
            .filter(|ctl| gci_hi(ctl.max_gci) <= gci)
            .filter(|ctl| (ctl.base_id..=ctl.lcp_id).all(complete))
            .max_by_key(|ctl| ctl.lcp_id)
            .cloned();
        if let Some(ctl) = &chosen {
            tracing::info!(
                lcp = ctl.lcp_id,
                base = ctl.base_id,
                "restoring local checkpoint {} (from full checkpoint {})",
                ctl.lcp_id,
                ctl.base_id
            );
            restart.lcp_chain = (ctl.base_id..=ctl.lcp_id).rev().collect();
        } else if restart.files_dropped {
            // Its redo log lacks the rows copied to it (seed 0x4c5936: node 4's checkpoint
            // after the copy was of epoch 10, the cluster crashed before any sysfile named
            // 10 and restarted at 9, and node 4 came back from its redo log alone).
            return Err(format!(
                "the cluster restarts at GCI {gci}, and this node has nothing to restore (its \
                 files were dropped for a node restart, and no local checkpoint since covers \
                 GCI {gci}); start it again once the cluster has started: it joins by node \
                 restart"
            ));
        }
        restart.lcp = chosen;
        self.restart_load_next_lcp();
        Ok(())
    }

    /// Reads the next checkpoint of the chain, or, when all are loaded, the redo log.
    fn restart_load_next_lcp(&mut self) {
        match self.restart.as_mut().and_then(|r| r.lcp_chain.pop()) {
            Some(id) => self.fs.push(
                FsOp::Read { path: lcp_data(id) },
                FsWait::Start(StartRead::LcpData(id)),
            ),
            None => self.read_redo_parts(),
        }
    }

    /// Loads a local checkpoint's data file.
    fn restore_lcp(&mut self, id: u32, bytes: &[u8]) -> Result<(), String> {
        let path = lcp_data(id);
        let me = u32::from(self.me.0);
        let header = read::header(bytes, FileKind::LcpData).map_err(|e| format!("{path}: {e}"))?;
        if header.node != me || header.seq != u64::from(id) {
            return Err(format!(
                "{path}: written by node {} for checkpoint {}",
                header.node, header.seq
            ));
        }
        let mut walk = read::entries(bytes, FileKind::LcpData, format::HEADER_BYTES);
        let mut rows = 0u64;
        loop {
            match walk.next() {
                Some(Ok(Entry {
                    body: Body::Row(change),
                    offset,
                    gci,
                    ..
                })) => {
                    // The record's GCI is the checkpoint scan's, at or after the row's last
                    // change: as the row's, it may only make a node restart copy more.
                    self.lqh
                        .restore_change(&self.dict, &change, gci)
                        .map_err(|e| format!("{path}: offset {offset}: restoring a row: {e}"))?;
                    rows += u64::from(change.row.is_some());
                }
                Some(Ok(Entry {
                    body: Body::LcpEnd { .. },
                    next,
                    ..
                })) if next == bytes.len() => break,
                Some(Ok(Entry { next, .. })) => {
                    return Err(format!(
                        "{path}: offset {next}: {} bytes follow the LCP_END record",
                        bytes.len() - next
                    ))
                }
                // Synced before its control file was written: it must be whole.
                None => {
                    return Err(format!(
                        "{path}: ends at offset {} without its LCP_END record",
                        walk.offset()
                    ))
                }
                Some(Err(e)) => return Err(format!("{path}: {e}")),
            }
        }
        tracing::info!(lcp = id, rows, "local checkpoint restored");
        Ok(())
    }

    /// Lists every redo part's files.
    fn read_redo_parts(&mut self) {
        for part in 0..self.durability.no_of_fragment_log_parts {
            self.fs.push(
                FsOp::List {
                    path: part_dir(part),
                },
                FsWait::Start(StartRead::PartList(part)),
            );
        }
    }

    /// Once every part's files are read, replays them.
    fn restart_replay_if_read(&mut self) -> Result<(), String> {
        let Some(restart) = self.restart.as_mut() else {
            return Ok(());
        };
        let parts = self.durability.no_of_fragment_log_parts as usize;
        if restart.reads_out > 0 || restart.part_files.len() < parts {
            return Ok(());
        }
        let gci = restart.gci.unwrap_or(0);
        let files = std::mem::take(&mut restart.part_files);
        let lcp = restart.lcp.clone();
        let (oldest, newest) = restart.lcp_ids;
        let mut resume = Vec::new();
        let mut applied = 0u64;
        for (part, bytes) in files {
            let start = lcp
                .as_ref()
                .and_then(|ctl| ctl.starts.get(part as usize).copied());
            let (at, n) = self.replay_part(part, bytes, gci, start)?;
            applied += n;
            resume.push(at);
        }
        tracing::info!(changes = applied, gci, "redo log replayed");
        if !self.restart.as_ref().is_some_and(|r| r.node_restart) {
            self.restart_drop_later_lcps(lcp.as_ref().map(|ctl| ctl.lcp_id), oldest, newest);
        }
        let me = u32::from(self.me.0);
        self.lqh.redo = Some(Redo::new(me, &self.durability, &resume));
        let schema_written = self.restart.as_ref().map_or(0, |r| r.schema_written);
        self.dict_log = DictLog::new(true, me, schema_written);
        self.dict_log.set_compact_after(self.schema_compact_after);
        if let Some(restart) = self.restart.as_mut() {
            self.dict_log
                .set_records(std::mem::take(&mut restart.schema_records));
        }
        self.lcps = Lcps::new(
            self.durability.time_between_local_checkpoints,
            oldest,
            newest,
        );
        self.lqh
            .rebuild_ordered_indexes(&self.dict)
            .map_err(|e| format!("building the ordered indexes: {e}"))?;
        self.jobs.push_back(Signal::StartDone { gci });
        Ok(())
    }

    /// A system restart at GCI g removes every local checkpoint after the one it restored
    /// (or every one, when it restored none): each was left incomplete by the crash, or holds
    /// rows of GCIs after g, which the restarted cluster gives again to other changes, as the
    /// redo log's cut says for the log. Kept, one could be chosen by a later restart at a GCI
    /// past its own, with changes no node committed in that GCI (seed 0xa0eec3e0: a
    /// checkpoint of GCI 2 from before a restart at GCI 1 was restored at the next restart,
    /// at GCI 2, and its redo positions named the log before its cut). The removals are part
    /// of the cut: made once the sysfile names the restart with its cut pending, they are
    /// durable before that flag is cleared.
    fn restart_drop_later_lcps(&mut self, restored: Option<u32>, oldest: u32, newest: u32) {
        let first = restored.map_or(oldest, |id| id + 1).max(1);
        for id in first..=newest {
            tracing::info!(
                lcp = id,
                "local checkpoint {id} is past the restart: removed"
            );
            if let Some(restart) = self.restart.as_mut() {
                restart.cut.push(FsOp::Remove { path: lcp_dir(id) });
            }
        }
    }

    /// Replays one redo part's files up to `gci` and cuts off what follows; returns where the
    /// part goes on and how many changes were applied.
    fn replay_part(
        &mut self,
        part: u32,
        files: Vec<(String, Vec<u8>)>,
        gci: u32,
        start: Option<(u64, u64)>,
    ) -> Result<(Resume, u64), String> {
        let me = u32::from(self.me.0);
        let mut by_seq: BTreeMap<u64, (String, Vec<u8>)> = BTreeMap::new();
        for (path, bytes) in files {
            match FileHeader::decode(&bytes, format::REDO_MAGIC) {
                Ok(h) if h.node == me && h.part == part => {
                    by_seq.insert(h.seq, (path, bytes));
                }
                Ok(h) => {
                    return Err(format!(
                        "redo part {part}: a file of node {} part {} is in its directory",
                        h.node, h.part
                    ))
                }
                // A file whose header never reached the disk: nothing was synced in it.
                Err(why) => {
                    tracing::warn!(part, "{path}: no valid header ({why}); ignored");
                    if let Some(restart) = self.restart.as_mut() {
                        restart.damaged.push(format!("{path}: {why}"));
                    }
                }
            }
        }
        if by_seq.is_empty() {
            let file = format!("redo part {part} (no files)");
            return Err(self.gci_not_saved(&file, gci));
        }
        let files = self.durability.no_of_fragment_log_files.max(3) as u64;
        // Files before the checkpoint's start are older laps of the ring, not replayed.
        let first_seq = match start {
            Some((seq, _)) => seq,
            None => match by_seq.keys().next() {
                // Without a local checkpoint the log must hold everything from its start.
                Some(&seq) if seq > 0 => {
                    return Err(format!(
                        "redo part {part} begins at file seq {seq}, after its start: the local \
                         checkpoint it was released for is missing or damaged"
                    ))
                }
                _ => 0,
            },
        };
        by_seq.retain(|&seq, _| seq >= first_seq);
        let restarts = restart_marks(by_seq.iter().map(|(&seq, (_, b))| (seq, b.as_slice())));
        let mut complete = false;
        let mut applied = 0;
        let mut cut = Resume {
            first_seq,
            seq: first_seq,
            offset: 0,
        };
        let mut cut_path = None;
        'files: for (&seq, (path, bytes)) in &by_seq {
            let path = path.clone();
            if seq != cut.seq && !complete {
                return Err(format!(
                    "{path}: redo part {part} jumps from file {} to file {seq} before GCI {gci} was complete",
                    cut.seq
                ));
            }
            if complete && seq != cut.seq {
                // Past the cut: written after the restart GCI, removed below.
                if let Some(restart) = self.restart.as_mut().filter(|r| !r.node_restart) {
                    restart.cut.push(FsOp::Remove { path });
                }
                continue;
            }
            let offset = match start {
                Some((start_seq, start_offset)) if start_seq == seq => start_offset as usize,
                _ => format::HEADER_BYTES,
            };
            let mut walk = read::entries(bytes, FileKind::Redo, offset);
            loop {
                let offset = walk.offset();
                match walk.next() {
                    Some(Ok(entry)) => match entry.body {
                        Body::Row(change)
                            if gci_hi(entry.gci) <= gci
                                && !complete
                                && !discarded(&restarts, (seq, offset), entry.gci) =>
                        {
                            self.lqh.restore_change(&self.dict, &change, entry.gci).map_err(|e| {
                                format!("{path}: offset {offset}: restoring a row: {e}")
                            })?;
                            applied += 1;
                        }
                        Body::GciCompleted if gci_hi(entry.gci) >= gci && !complete => {
                            complete = true;
                            cut = Resume {
                                first_seq,
                                seq,
                                offset: entry.next as u64,
                            };
                            cut_path = Some(path.clone());
                        }
                        Body::FileEnd if !complete => {
                            cut.seq = seq + 1;
                            continue 'files;
                        }
                        _ => {}
                    },
                    // After the cut: removed below, whatever it holds.
                    None | Some(Err(_)) if complete => break,
                    // A log that ends, or ends in a write cut short, before the GCI: a node that
                    // stopped before the others saved it rejoins (`gci_not_saved`).
                    None if self.restore_gci_unsaved(gci) => {
                        let file = format!("{path} (redo part {part}, ends at offset {offset})");
                        return Err(self.gci_not_saved(&file, gci));
                    }
                    Some(Err(e)) if e.torn && self.restore_gci_unsaved(gci) => {
                        let file = format!("{path} (redo part {part}, cut short at offset {offset})");
                        return Err(self.gci_not_saved(&file, gci));
                    }
                    None => {
                        return Err(format!(
                            "{path}: redo part {part} ends at offset {offset} before GCI {gci} was complete"
                        ))
                    }
                    Some(Err(e)) => {
                        return Err(format!(
                            "{path}: damaged redo record before GCI {gci} was complete: {e}"
                        ))
                    }
                }
            }
        }
        if !complete {
            let file = format!("redo part {part} ({})", part_dir(part));
            return Err(self.gci_not_saved(&file, gci));
        }
        if !self.restore_cuts() {
            return Ok((cut, applied));
        }
        // Everything after the cut goes, and a RESTART record marks the cut, durably, before
        // anything new is written there: changes before the cut of GCIs after `gci` were not
        // restored, and the GCIs the restarted cluster gives next are those same numbers.
        let path = cut_path.unwrap_or_else(|| part_file(part, cut.seq % files));
        let mut mark = Vec::new();
        format::append_record(&mut mark, u64::from(gci) << 32, kind::RESTART, |_| {});
        let offset = cut.offset;
        cut.offset += mark.len() as u64;
        self.restore_cut(&path, offset, mark);
        if path != part_file(part, cut.seq % files) {
            // A file written past the ring (see `Redo::make_room`): the log goes on in the
            // next file rather than append to it under its ring name.
            cut = Resume {
                first_seq,
                seq: cut.seq + 1,
                offset: 0,
            };
        }
        Ok((cut, applied))
    }

    /// This node's restore is done: the master hears of it (or, restoring to join the running
    /// cluster, the node restart goes on).
    pub(crate) fn start_done(&mut self, gci: u32, out: &mut dyn Outbox, now: Instant) {
        if self.restart.as_ref().is_some_and(|r| r.node_restart) {
            self.node_restart_restored(gci, out, now);
        } else {
            self.restore_done(gci, out);
        }
    }

    /// This node's restore for a system restart is done. Its sysfile names the restart (both
    /// copies, one after the other, the one the start read last), with the cut pending; then
    /// the logs are cut and the later local checkpoints removed (`Restart::cut`); then both
    /// copies are written again without the flag, and the master hears of it. A later system
    /// restart knows by this sysfile that this node's logs were cut here (`restart_gci`), and
    /// it knows so before the cut: cut first, a crash before the sysfile write would leave
    /// logs that no longer hold a GCI the sysfiles of other nodes name restorable (seed
    /// 0x6200999d: a partial restart at 18 cut nodes 3 and 4, then failed; the next chose node
    /// 1's GCI 19, which group 1 had lost, and failed with 2308 at every start). When a write
    /// fails the node goes on and starts, its sysfile naming an older restart, or the cut
    /// pending; it refuses writes and asks to be stopped.
    fn restore_done(&mut self, gci: u32, out: &mut dyn Outbox) {
        let master = self.qmgr.master();
        let failed = self.fs.failed.is_some();
        let Some(restart) = self.restart.as_mut() else {
            return;
        };
        if gci > 0 && !failed {
            let copies = SYSFILES.len();
            if restart.sysfile_written == 2 * copies && restart.renumbered {
                restart.renumbered = false;
                restart.sysfile_written = copies;
            }
            if restart.sysfile_written == copies && !restart.cut_sent {
                restart.cut_sent = true;
                let mut cut = std::mem::take(&mut restart.cut);
                if let Some(last) = cut.pop() {
                    for op in cut {
                        self.fs.push(op, FsWait::Nothing);
                    }
                    return self.fs.push(last, FsWait::RestartCut);
                }
            }
            if restart.sysfile_written < 2 * copies {
                let copy = (self.gcp.sysfile_first + restart.sysfile_written) % copies;
                let sysfile = Sysfile {
                    restorable_gci: gci,
                    cut_pending: restart.sysfile_written < copies,
                    restarts: restart.history.clone(),
                };
                return self.write_sysfile_copy(copy, &sysfile, FsWait::RestartSysfile);
            }
        }
        restart.restored = Some(master);
        let no = restart.history.last().map_or(0, |r| r.no);
        if gci > 0 {
            self.dict_restored_rep(master, out);
        }
        self.send_gcp(master, gsn::CNTR_WAITREP, waitrep(gci, no), out);
    }

    /// A sysfile copy naming the restart was written and synced, or failed.
    pub(crate) fn restart_sysfile_written(&mut self, out: &mut dyn Outbox) {
        let Some(restart) = self.restart.as_mut() else {
            return;
        };
        restart.sysfile_written += 1;
        let gci = restart.gci.unwrap_or(0);
        self.restore_done(gci, out);
    }

    /// The restore's cut is on disk, or failed.
    pub(crate) fn restart_cut_done(&mut self, out: &mut dyn Outbox) {
        let gci = self.restart.as_ref().and_then(|r| r.gci).unwrap_or(0);
        self.restore_done(gci, out);
    }

    /// CNTR_WAITREP at the master: once every live node has restored under the restart
    /// number that counts (`counted_no`), all start. One under another number (told to an
    /// old master whose restart this one numbered anew, or sent before this one's CONF
    /// reached it) does not count: once this master's CONF reaches that node, it writes its
    /// sysfile again and tells this master once more.
    pub(crate) fn exec_cntr_waitrep(
        &mut self,
        from: NodeId,
        word: u64,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        // At a master that serves already (the restart's master failed after its
        // CNTR_START_REP reached some nodes only, this one), the late node is not started: it
        // confirms no failure round before it serves, and the round this master runs for the
        // failed master fails it after ArbitrationTimeout; started again, it rejoins by node
        // restart. (Starting it here raced this master's own handling of that failure, and
        // the round then failed it anyway: a review found both.)
        let (gci, no) = (word as u32, (word >> 32) as u32);
        let Some(restart) = self.restart.as_mut() else {
            return;
        };
        restart.waited.insert(from, no);
        self.start_if_all_restored(u64::from(gci), out, now);
    }

    /// As master: a node's tables and indexes, and its id counter, once it restored
    /// (DICT_RESTORED_REP).
    pub(crate) fn restart_dict_restored(
        &mut self,
        from: NodeId,
        objects: Vec<Object>,
        next_id: u32,
    ) {
        if let Some(restart) = self.restart.as_mut() {
            restart.schemas.insert(from, (objects, next_id));
        }
    }

    /// As master: CNTR_START_REP to every live node once each has restored, after the
    /// objects some of them lack (`dict/agree.rs`).
    fn start_if_all_restored(&mut self, gci: u64, out: &mut dyn Outbox, now: Instant) {
        if self.qmgr.master() != self.me {
            return;
        }
        let mut live: Vec<NodeId> = self.qmgr.peers_up().collect();
        live.push(self.me);
        let Some(restart) = self.restart.as_mut() else {
            return;
        };
        let no = counted_no(restart);
        let restored = |n: &NodeId| no.is_some() && restart.waited.get(n).copied() == no;
        if restart.start_sent || !live.iter().all(restored) {
            return;
        }
        restart.start_sent = true;
        let schemas: Vec<&(Vec<Object>, u32)> =
            live.iter().filter_map(|n| restart.schemas.get(n)).collect();
        let lacked = lacked_by_some(schemas.iter().map(|s| &s.0));
        let next_id = schemas.iter().map(|s| s.1).max().unwrap_or(0);
        tracing::info!(gci, nodes = ?live, "system restart: every data node restored");
        self.dict_restart_drop(lacked, next_id, &live, out, now);
        for node in live {
            self.send_gcp(node, gsn::CNTR_START_REP, gci, out);
        }
    }

    /// A data node failed during the start: a new master hears again from the nodes that
    /// told the old one, and the master stops waiting for the failed node.
    pub(crate) fn restart_node_failrep(&mut self, out: &mut dyn Outbox, now: Instant) {
        let master = self.qmgr.master();
        let Some(restart) = self.restart.as_ref() else {
            return;
        };
        let (told, gci) = (restart.restored, restart.gci.unwrap_or(0));
        let undecided = restart.gci.is_none() && !restart.conf_sent && !restart.node_restart;
        if undecided && self.qmgr.master() == self.me {
            // As master, before choosing the restart GCI (the others hear it, or this node's
            // stop, from it: one that has not yet heard the choice sees the stale nodes it
            // stopped as failures): nodes that failed now come back only by node restart,
            // which needs a started cluster. Holding a node of every node group, they may have
            // saved newer global checkpoints than any node left, which will not start without
            // them (a partitioned start, see `cntr_start_decide`): the restart fails, as NDB's
            // does, and every node must be started again.
            let failed = &self.qmgr.failed;
            if let Some(failed) = self.qmgr.partitioned_by(|n| failed.contains(n)) {
                self.start_fails(format!(
                    "data nodes {failed:?} failed before the restart GCI was chosen; they hold \
                     a node of every node group, so they may have saved global checkpoints \
                     newer than any node left, which cannot start without them; start every \
                     data node again (if they serve, this node lost them before it learnt so: \
                     start it again and it joins by node restart)"
                ));
                return;
            }
        }
        if restart.gci.is_some() && !restart.node_restart {
            // Every node group needs a node that restores the restart GCI: started without
            // one, the cluster would serve with a node group's rows missing (seed 0xee6b2b73:
            // both nodes of group 1 stopped with nothing to restore, and the others started).
            let qmgr = &self.qmgr;
            let lost = (qmgr.node_groups().iter())
                .find(|(_, nodes)| !nodes.iter().any(|&n| qmgr.is_alive(n)));
            if let Some((group, nodes)) = lost {
                self.start_fails(format!(
                    "no node of node group {group} ({nodes:?}) is left to restore GCI {gci}, \
                     so the cluster cannot start there; start the node group's nodes again \
                     (their errors say what their files lack)"
                ));
                return;
            }
        }
        if told.is_some_and(|old| old != master) {
            self.restore_done(gci, out);
        }
        self.start_if_all_restored(u64::from(gci), out, now);
    }

    /// The system restart cannot go on without nodes that failed during it: this node stops
    /// with 2308 (NDB's NDBD_EXIT_SR_OTHERNODEFAILED), `detail` saying why, and every data
    /// node must be started again.
    pub(crate) fn start_fails(&mut self, detail: String) {
        let why = format!(
            "error 2308: Another node failed during system restart, please investigate error(s) \
             on other node(s): {detail}"
        );
        tracing::error!("{why}");
        self.fatal.get_or_insert(why);
    }

    /// CNTR_START_REP: every node restored; this one serves.
    pub(crate) fn exec_cntr_start_rep(&mut self, gci: u64, now: Instant) {
        if self.restart.as_ref().is_some_and(|r| r.restored.is_some()) {
            self.finish_start(gci as u32, now);
        }
    }

    /// The node's restore is done: it serves from the next global checkpoint on.
    pub(crate) fn finish_start(&mut self, gci: u32, now: Instant) {
        let sysfile_first = self.gcp.sysfile_first;
        let restarts = self
            .restart
            .as_mut()
            .map(|r| std::mem::take(&mut r.history));
        self.gcp = Gcp::new(&self.durability, gci);
        self.gcp.sysfile_first = sysfile_first;
        self.gcp.restarts = restarts.unwrap_or_default();
        // Every node that starts with this one restored the GCI from its files.
        self.gcp.files_restore = self.qmgr.alive().collect();
        self.restart = None;
        self.qmgr.set_started(now);
        tracing::info!(gci, "data node started at GCI {gci}");
        self.node_restart_tell_waiting();
    }
}

/// Where earlier restarts cut a log (a redo part's files by seq, or the schema log as file 0):
/// (file seq, offset, restart GCI) of each RESTART record, in log order.
fn restart_marks<'a>(files: impl IntoIterator<Item = (u64, &'a [u8])>) -> Vec<((u64, usize), u32)> {
    let mut marks = Vec::new();
    for (seq, bytes) in files {
        let mut offset = format::HEADER_BYTES;
        while let Next::Record(record) = format::read_record(bytes, offset) {
            if record.kind == kind::RESTART {
                marks.push(((seq, offset), gci_hi(record.gci)));
            }
            offset = record.next;
        }
    }
    marks
}

/// The GCI a schema log's GCI_COMPLETED at `offset` of `gci` vouches for: no later than the
/// restart GCI of any RESTART mark after it.
fn completed_upto(marks: &[((u64, usize), u32)], offset: usize, gci: u64) -> u32 {
    (marks.iter())
        .filter(|&&(mark, _)| mark > (0, offset))
        .map(|&(_, restart_gci)| restart_gci)
        .fold(gci_hi(gci), u32::min)
}

/// True when a change at `at` of `gci` was discarded by an earlier restart: a RESTART record
/// after it names an older GCI (the change's GCI was given again after that restart).
fn discarded(marks: &[((u64, usize), u32)], at: (u64, usize), gci: u64) -> bool {
    marks
        .iter()
        .any(|&(mark, restart_gci)| mark > at && gci_hi(gci) > restart_gci)
}
