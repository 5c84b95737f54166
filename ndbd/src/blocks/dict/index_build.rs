//! Building a unique index over a table that already holds rows, across node groups.
//!
//! An index row belongs to the partition of its unique key, which is usually in another node
//! group than the base row's. So every data node, when it creates the index, computes the
//! entries of the base rows it is a live replica of, inserts those whose index partition it
//! replicates, sends the others to the replicas of their partitions (INDEX_BUILD_ROWS), and
//! ends with INDEX_BUILD_DONE to every other live data node. A node's build is complete when it
//! has heard DONE from every other live data node; only then does it answer the schema change
//! (a follower to the master; the master in its own bookkeeping). Entries that arrive before
//! the index exists here (the master's own entries outrun its request) wait in `early`.
//!
//! While its build runs, a node refuses writes to the indexed table (701, temporary), as NDB
//! builds under a table lock: a write's index maintenance must not race the build's entries.
//! It refuses the index maintenance of writes to the hidden table too (701): every replica of
//! a base row sends its entry, and a copy still on its way after the base replicas ended
//! their builds must not find the entry moved by a write, and come back as a stale one.
//! A duplicate unique value anywhere fails the build (893) and so the schema change, which the
//! master then undoes on every data node (a follower whose build failed has the index too);
//! so does a data node failing during the build. A build whose index is dropped (by that
//! undo, or by a new master's takeover) ends where it runs. When the master fails during a
//! build, the others' builds fail, and the new master's takeover takes the index back. The
//! index's create goes to the schema log only once its build succeeded here (`unlogged`).

use std::collections::BTreeMap;
use std::time::Instant;

use hashbrown::HashMap;

use rndb_config::NodeId;
use rndb_protocol::lqh::{gsn as lgsn, IndexBuildDone, IndexBuildRows, INDEX_BUILD_ROWS_MAX};
use rndb_protocol::signals::block;
use rndb_protocol::{NdbError, Value};
use rndb_transporter::FrameHeader;

use super::index::PendingBuild;
use crate::blocks::tc::index::trigger_error;
use crate::blocks::{dih, tup, Kernel, Outbox, ProtocolViolation};

/// An index entry on the wire: the unique columns' values and the base row's primary key.
type Entry = (Vec<Value>, Vec<u8>);

/// Who hears of a build's outcome.
#[derive(Debug)]
pub(crate) enum BuildReply {
    /// This node is the master: its schema change goes on.
    Master,
    /// This node follows: it answers the master's request with this CONF payload (or a REF).
    Follower {
        master: NodeId,
        request: FrameHeader,
        conf: Vec<u8>,
        /// The `seq` of the change that made the index.
        seq: u64,
    },
}

/// One unique index being built on this node.
#[derive(Debug)]
pub(crate) struct Build {
    /// The indexed table, whose writes are refused meanwhile.
    pub base_table_id: u32,
    /// Other data nodes whose INDEX_BUILD_DONE is still to come.
    awaiting: Vec<NodeId>,
    error: Option<NdbError>,
    reply: BuildReply,
}

/// What arrived for a hidden table this node has not created yet.
#[derive(Debug)]
pub(crate) enum Early {
    Rows(Vec<Entry>),
    Done(u32),
}

/// The unique index builds of this node.
#[derive(Debug, Default)]
pub(crate) struct Builds {
    pub running: HashMap<u32, Build>,
    /// The CREATE INDEX of each unique index (by hidden table) whose build has not succeeded
    /// here, with the epoch it was to be logged in: logged once the build succeeds, never if
    /// it fails (then its undo is not logged either). A system restart before that finds no
    /// index here, and the others drop theirs (`dict/agree.rs`); logged at once, a restart
    /// between a failed build and its undo's save brought back on every node an index built
    /// in part, which nothing dropped (a review found it).
    pub unlogged: HashMap<u32, (u64, crate::ndbfs::format::SchemaChange)>,
    pub early: HashMap<u32, Vec<(NodeId, Early)>>,
    /// Entries (and DONE markers) held in `early`.
    early_entries: usize,
}

/// How far past this node's id counter an index being created may be.
const EARLY_IDS_AHEAD: u32 = 1024;
/// Entries held at most for indexes not created here yet.
const EARLY_ENTRIES_MAX: usize = 16 * 1024 * 1024;

impl Builds {
    /// True while a build of an index on `table_id`, or of hidden table `table_id` itself,
    /// runs here. The hidden table too: another replica's copy of an entry may still be on
    /// its way here after the base row's replicas ended their builds, and a write's index
    /// maintenance that ran before it (moving the row to another value) would see the old
    /// entry come back for good (a review found it).
    pub fn locks(&self, table_id: u32) -> bool {
        self.running.contains_key(&table_id)
            || self.running.values().any(|b| b.base_table_id == table_id)
    }
}

fn header(signal: u16) -> FrameHeader {
    FrameHeader {
        signal,
        receiver_block: block::DBDICT,
        sender_block: block::DBDICT,
        request_id: 0,
    }
}

impl Kernel {
    /// Starts this node's part of building a unique index from its entries (the unique values
    /// and primary keys of the base rows this node is the live primary of). The caller ends
    /// it with `finish_build_if_done` (at once when no other data node is up).
    pub(crate) fn start_unique_build(
        &mut self,
        build: PendingBuild,
        reply: BuildReply,
        out: &mut dyn Outbox,
    ) {
        let PendingBuild {
            base_table_id,
            hidden,
            entries,
        } = build;
        let peers: Vec<NodeId> = self.qmgr.peers_up().collect();
        // By node in order: frames go out in the same order every run.
        let mut outgoing: BTreeMap<NodeId, Vec<Entry>> = BTreeMap::new();
        let mut error = None;
        for (key, pk) in entries {
            let partition = match self.index_entry_partition(hidden, &key) {
                Ok(p) => p,
                Err(e) => {
                    error.get_or_insert(e);
                    continue;
                }
            };
            for node in self.live_replicas(partition) {
                if node == self.me {
                    if let Err(e) = self.insert_index_entry(hidden, &key, &pk) {
                        error.get_or_insert(e);
                    }
                } else {
                    outgoing
                        .entry(node)
                        .or_default()
                        .push((key.clone(), pk.to_vec()));
                }
            }
        }
        for (node, entries) in outgoing {
            for chunk in entries.chunks(INDEX_BUILD_ROWS_MAX) {
                let rows = IndexBuildRows {
                    hidden_table_id: hidden,
                    entries: chunk.to_vec(),
                };
                self.unsent
                    .send(out, node, header(lgsn::INDEX_BUILD_ROWS), &mut |b| {
                        rows.encode(b)
                    });
            }
        }
        let done = IndexBuildDone {
            hidden_table_id: hidden,
            code: error.as_ref().map_or(0, |e: &NdbError| e.code),
        };
        for &peer in &peers {
            self.unsent
                .send(out, peer, header(lgsn::INDEX_BUILD_DONE), &mut |b| {
                    done.encode(b)
                });
        }
        self.builds.running.insert(
            hidden,
            Build {
                base_table_id,
                awaiting: peers,
                error,
                reply,
            },
        );
        let early = self.take_early(hidden);
        for (from, early) in early {
            match early {
                Early::Rows(rows) => self.take_index_rows(from, hidden, rows),
                Early::Done(code) => self.take_index_done(from, hidden, code),
            }
        }
    }

    /// INDEX_BUILD_ROWS and INDEX_BUILD_DONE from another data node.
    pub(crate) fn exec_index_build_signal(
        &mut self,
        from: NodeId,
        header: &FrameHeader,
        payload: &[u8],
        out: &mut dyn Outbox,
        now: Instant,
    ) -> Result<(), ProtocolViolation> {
        if !self.qmgr.is_data_node(from) {
            return Err(ProtocolViolation(format!(
                "index build signal from node {from}, which is not a data node"
            )));
        }
        if self.has_failed(from) {
            // Late from a node this one failed: the builds that waited for it failed already.
            return Ok(());
        }
        if header.signal == lgsn::INDEX_BUILD_ROWS {
            let rows = IndexBuildRows::decode(payload)?;
            let hidden = rows.hidden_table_id;
            if self.builds.running.contains_key(&hidden) {
                self.take_index_rows(from, hidden, rows.entries);
            } else {
                self.early_entry(hidden, from, Early::Rows(rows.entries))?;
            }
        } else {
            let done = IndexBuildDone::decode(payload)?;
            let hidden = done.hidden_table_id;
            if self.builds.running.contains_key(&hidden) {
                self.take_index_done(from, hidden, done.code);
                self.finish_build_if_done(hidden, out, now);
            } else {
                self.early_entry(hidden, from, Early::Done(done.code))?;
            }
        }
        Ok(())
    }

    /// Keeps what arrived for an index not created here yet: only for ids the master may have
    /// given since this node's last schema change, and at most [`EARLY_ENTRIES_MAX`] entries in
    /// all (past that the peer is misbehaving).
    fn early_entry(
        &mut self,
        hidden: u32,
        from: NodeId,
        early: Early,
    ) -> Result<(), ProtocolViolation> {
        let next_id = self.dict.next_id();
        if hidden < next_id {
            // A build that ended here (its index dropped, this node refused it, or a node it
            // waited for failed): a peer's part of it may still be on its way, a failed
            // node's too, delivered after its failure (sim seed 0x630005dd).
            return Ok(());
        }
        if hidden > next_id.saturating_add(EARLY_IDS_AHEAD) {
            return Err(ProtocolViolation(format!(
                "index build entries for table id {hidden}, which is not being created"
            )));
        }
        let entries = match &early {
            Early::Rows(rows) => rows.len(),
            Early::Done(_) => 1,
        };
        self.builds.early_entries += entries;
        if self.builds.early_entries > EARLY_ENTRIES_MAX {
            return Err(ProtocolViolation(format!(
                "more than {EARLY_ENTRIES_MAX} index build entries for indexes not created"
            )));
        }
        self.builds
            .early
            .entry(hidden)
            .or_default()
            .push((from, early));
        Ok(())
    }

    fn take_index_rows(&mut self, from: NodeId, hidden: u32, rows: Vec<Entry>) {
        let mut error = None;
        for (key, pk) in rows {
            if let Err(e) = self.insert_index_entry(hidden, &key, &pk) {
                error.get_or_insert(e);
            }
        }
        if let (Some(e), Some(build)) = (error, self.builds.running.get_mut(&hidden)) {
            tracing::warn!(node = %from, hidden, "index build entry refused: {e}");
            build.error.get_or_insert(e);
        }
    }

    fn take_index_done(&mut self, from: NodeId, hidden: u32, code: u32) {
        if let Some(build) = self.builds.running.get_mut(&hidden) {
            build.awaiting.retain(|&n| n != from);
            if code != 0 {
                build.error.get_or_insert(NdbError::with_detail(
                    code,
                    format!("data node {from} building the unique index"),
                ));
            }
        }
    }

    /// A data node failed: builds waiting for it fail (its entries may be missing).
    pub(crate) fn builds_node_lost(&mut self, node: NodeId, out: &mut dyn Outbox, now: Instant) {
        let mut waiting: Vec<u32> = self
            .builds
            .running
            .iter()
            .filter(|(_, b)| b.awaiting.contains(&node))
            .map(|(&h, _)| h)
            .collect();
        // In id order: the map's order is random, and what each build sends goes out in it.
        waiting.sort_unstable();
        for hidden in waiting {
            if let Some(build) = self.builds.running.get_mut(&hidden) {
                build.awaiting.retain(|&n| n != node);
                build.error.get_or_insert(NdbError::with_detail(
                    4009,
                    format!("data node {node} failed while the unique index was built"),
                ));
            }
            self.finish_build_if_done(hidden, out, now);
        }
    }

    /// Ends the build of `hidden` when every other node's part is in. True when it ended.
    pub(crate) fn finish_build_if_done(
        &mut self,
        hidden: u32,
        out: &mut dyn Outbox,
        now: Instant,
    ) -> bool {
        if self
            .builds
            .running
            .get(&hidden)
            .is_none_or(|b| !b.awaiting.is_empty())
        {
            return false;
        }
        let Some(build) = self.builds.running.remove(&hidden) else {
            return false;
        };
        if build.error.is_none() {
            if let Some((gci, change)) = self.builds.unlogged.remove(&hidden) {
                // In the change's epoch, or this node's own if later or if it saved the
                // change's already: never before the build's entries, stored in this node's.
                let saved = crate::ndbfs::format::gci_hi(gci) <= self.dict_log.saved();
                let gci = if saved {
                    self.gcp.current
                } else {
                    gci.max(self.gcp.current)
                };
                self.dict_log.append(gci, &change);
            }
        }
        match build.reply {
            BuildReply::Master => self.schema_build_done(build.error, out, now),
            BuildReply::Follower {
                master,
                request,
                conf,
                seq,
            } => {
                let still_last = self.schema.last.as_ref().is_some_and(|c| c.seq == seq);
                if build.error.is_some() && still_last {
                    // The index stays here until the master's undo: a takeover counts it as
                    // not applied.
                    self.schema.last_applied = false;
                }
                self.answer_schema(master, &request, build.error.map_or(Ok(conf), Err), out)
            }
        }
        true
    }

    /// Table `hidden` is dropped here (its index was, or the undo of its creation ran): a build
    /// of it that still runs ends, answering no one, and what arrived early for it goes.
    pub(crate) fn builds_table_dropped(&mut self, hidden: u32) {
        if self.builds.running.remove(&hidden).is_some() {
            tracing::info!(hidden, "unique index build ended: its index was dropped");
        }
        self.take_early(hidden);
    }

    /// What arrived early for `hidden`, no longer held.
    fn take_early(&mut self, hidden: u32) -> Vec<(NodeId, Early)> {
        let early = self.builds.early.remove(&hidden).unwrap_or_default();
        let held: usize = early
            .iter()
            .map(|(_, e)| match e {
                Early::Rows(rows) => rows.len(),
                Early::Done(_) => 1,
            })
            .sum();
        self.builds.early_entries = self.builds.early_entries.saturating_sub(held);
        early
    }

    /// True while this node's part of a build of a change it answers the master for runs.
    pub(crate) fn follower_build_running(&self) -> bool {
        (self.builds.running.values()).any(|b| matches!(b.reply, BuildReply::Follower { .. }))
    }

    /// Drops what arrived early for ids below the id counter: their index was not made here.
    pub(crate) fn builds_forget_early_below(&mut self, next_id: u32) {
        let stale: Vec<u32> = (self.builds.early.keys())
            .copied()
            .filter(|&h| h < next_id)
            .collect();
        for hidden in stale {
            self.take_early(hidden);
        }
    }

    /// The partition of the index entry with unique values `key`.
    fn index_entry_partition(&self, hidden: u32, key: &[Value]) -> Result<u32, NdbError> {
        let Some(table) = self.dict.get(hidden) else {
            return Err(NdbError::with_detail(709, "hidden index table"));
        };
        let mut key_bytes = Vec::new();
        tup::encode_key(&table.info.def, &table.key_columns, key, &mut key_bytes)?;
        Ok(self.dih.partition_of(dih::key_hash(&key_bytes)) % table.fragment_count.max(1))
    }

    /// Stores one committed entry of hidden table `hidden` (893 on a duplicate value; the same
    /// entry from another replica of its base row is taken as the same).
    fn insert_index_entry(
        &mut self,
        hidden: u32,
        key: &[Value],
        pk: &[u8],
    ) -> Result<(), NdbError> {
        let Some(table) = self.dict.get(hidden) else {
            return Err(NdbError::with_detail(709, "hidden index table"));
        };
        let mut key_bytes = Vec::new();
        tup::encode_key(&table.info.def, &table.key_columns, key, &mut key_bytes)?;
        let fragment =
            self.dih.partition_of(dih::key_hash(&key_bytes)) % table.fragment_count.max(1);
        if !self.live_replicas(fragment).contains(&self.me) {
            return Err(NdbError::with_detail(
                4000,
                format!("an index entry for partition {fragment}, which this node does not hold"),
            ));
        }
        let pk_column = (table.info.def.columns.len() - 1) as u16;
        let row = tup::build_row(
            &table.info.def,
            &table.key_columns,
            key,
            &[(pk_column, Value::Varbinary(pk.to_vec()))],
        )?;
        self.lqh
            .insert_committed(
                hidden,
                fragment,
                key_bytes.into_boxed_slice(),
                row,
                self.gcp.current,
            )
            .map_err(trigger_error)
    }
}
