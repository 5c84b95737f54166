//! The kernel's index paths: CREATE_INDEX / DROP_INDEX, the two hops of an operation through a
//! unique hash index, and the index maintenance a base-table write fires.
//!
//! An operation through a unique index (TCINDXREQ) first reads the index's hidden table by the
//! unique key (CommittedRead for a CommittedRead operation, else a shared lock that keeps the
//! unique value stable until the transaction ends), then runs the API's operation on the base
//! row the index row names. It counts as one outstanding operation across both hops.
//!
//! A write to a table with unique indexes fires, per index whose values changed, a delete of
//! the old index row and an insert of the new one (NDB's triggers): TC runs them in the same
//! transaction, so a rollback takes them back. A duplicate (630 on the hidden table) fails the
//! base operation with 893 and aborts the transaction.

use std::time::Instant;

use rndb_protocol::signals::{CreateIndexReq, IndexName, TcKeyReq, REPLICA_PRIMARY};
use rndb_protocol::{IndexKind, LockMode, NdbError, OperationType, Reader, Value};

use super::acc::{OpKey, Row, TransId};
use super::dict::Index;
use super::lqh::{IndexChange, LqhKeyReq, OpRole, UniqueLookup};
use super::{dih, tup, Kernel, Outbox};

/// A unique index created here whose entries are still to be built (see `index_build.rs`).
#[derive(Debug)]
pub(crate) struct PendingBuild {
    pub base_table_id: u32,
    pub hidden: u32,
    pub entries: Vec<(Vec<Value>, Box<[u8]>)>,
}

/// What a failed index-maintenance operation means to the base operation.
pub fn trigger_error(error: NdbError) -> NdbError {
    if error.code == 630 {
        NdbError::with_detail(893, "duplicate value in a unique index")
    } else {
        error
    }
}

impl Kernel {
    /// CREATE_INDEX_REQ: records the index, then builds it from the table's rows; answers
    /// the CONF payload.
    pub(super) fn apply_create_index(
        &mut self,
        req: CreateIndexReq,
    ) -> Result<(Vec<u8>, Option<PendingBuild>), NdbError> {
        let fragment_count = self.dih.partition_count();
        let index = self
            .unique_build_possible(&req)
            .and_then(|()| self.dict.create_index(&req, fragment_count))?;
        let pending = self.build_index(&index)?;
        tracing::info!(table = %req.table, index = %req.index, kind = ?req.kind, "created index");
        let mut conf = Vec::new();
        index.info.encode(&mut conf);
        Ok((conf, pending))
    }

    /// A unique index is built from committed rows, so it is refused (701, temporary) while a
    /// transaction has an uncommitted change in its table: the change's index maintenance was
    /// never fired, and its commit would leave the index inconsistent. (NDB builds under a
    /// table lock instead.) Writes that run after the build fire its maintenance as usual.
    fn unique_build_possible(&self, req: &CreateIndexReq) -> Result<(), NdbError> {
        if req.kind != IndexKind::Unique {
            return Ok(());
        }
        let Ok(table) = self.dict.by_name(&req.table) else {
            // The dictionary says why.
            return Ok(());
        };
        let busy = self
            .lqh
            .fragments
            .get(&table.info.table_id)
            .into_iter()
            .flatten()
            .any(|f| f.rows.iter().any(|(_, slot)| slot.pending.is_some()));
        if busy {
            return Err(NdbError::with_detail(
                701,
                format!(
                    "table {} has uncommitted changes; retry the unique index when they end",
                    req.table
                ),
            ));
        }
        Ok(())
    }

    /// Builds a new index from the rows its table holds; on failure nothing of it remains. An
    /// ordered index is built here at once; a unique index's entries go to the replicas of
    /// their partitions across the cluster (see `index_build.rs`): returned to be started.
    fn build_index(&mut self, index: &Index) -> Result<Option<PendingBuild>, NdbError> {
        let table_id = index.info.table_id;
        let index_id = index.info.index_id;
        match index.hidden_table_id {
            None => {
                let built = self.lqh.build_ordered(table_id, index_id, &index.columns);
                if built.is_err() {
                    self.dict.remove_index(index_id);
                }
                built.map(|()| None)
            }
            Some(hidden) => {
                self.lqh
                    .create_fragments(hidden, self.dih.partition_count());
                let entries = self.unique_entries(table_id, &index.columns);
                Ok(Some(PendingBuild {
                    base_table_id: table_id,
                    hidden,
                    entries,
                }))
            }
        }
    }

    /// The entries (unique values, canonical primary key) of the committed rows of a table's
    /// partitions this node is the live primary of (a value with a NULL has none). Rows that
    /// transactions are changing right now count by their committed image; the table is
    /// locked against writes while the index is built.
    fn unique_entries(&self, table_id: u32, columns: &[usize]) -> Vec<(Vec<Value>, Box<[u8]>)> {
        let mut entries = Vec::new();
        let fragments = self.lqh.fragments.get(&table_id).into_iter().flatten();
        for (partition, fragment) in fragments.enumerate() {
            if self.live_replicas(partition as u32).first() != Some(&self.me) {
                continue;
            }
            for (_, slot) in fragment.rows.iter() {
                let Some(row) = &slot.committed else { continue };
                let key: Vec<Value> = columns.iter().map(|&c| row.value(c)).collect();
                if !key.contains(&Value::Null) {
                    entries.push((key, Box::<[u8]>::from(&*slot.key)));
                }
            }
        }
        entries
    }

    /// DROP_INDEX_REQ: forgets the index and frees its structures.
    pub(super) fn apply_drop_index(
        &mut self,
        name: IndexName,
        out: &mut dyn Outbox,
        now: Instant,
    ) -> Result<Vec<u8>, NdbError> {
        let index = self.dict.drop_index(&name.table, &name.index)?;
        match (index.info.kind, index.hidden_table_id) {
            (IndexKind::Unique, Some(hidden)) => self.drop_fragments(hidden, out, now),
            _ => self
                .lqh
                .drop_ordered(index.info.table_id, index.info.index_id),
        }
        tracing::info!(table = %name.table, index = %name.index, "dropped index");
        Ok(Vec::new())
    }

    /// The first hop of an operation through a unique index: a read of the hidden table.
    pub(super) fn build_unique_lookup(
        &mut self,
        trans: TransId,
        req: TcKeyReq,
    ) -> Result<LqhKeyReq, (u32, NdbError)> {
        let fail = |e| (req.op_index, e);
        let index = self
            .dict
            .index_for_operation(req.table_id, req.table_version)
            .map_err(fail)?;
        let Some(hidden) = index.hidden_table_id.and_then(|id| self.dict.get(id)) else {
            return Err(fail(NdbError::with_detail(
                4243,
                format!("{} is not a unique hash index", index.info.name),
            )));
        };
        if !matches!(
            req.op_type,
            OperationType::Read | OperationType::Update | OperationType::Delete
        ) {
            return Err(fail(NdbError::with_detail(
                4116,
                "only read, update and delete go through a unique index",
            )));
        }
        self.key_scratch.clear();
        tup::encode_key(
            &hidden.info.def,
            &hidden.key_columns,
            &req.key,
            &mut self.key_scratch,
        )
        .map_err(fail)?;
        let hash = dih::key_hash(&self.key_scratch);
        let partition = self.dih.partition_of(hash);
        let lock_mode = match req.lock_mode {
            LockMode::CommittedRead if req.op_type == OperationType::Read => {
                LockMode::CommittedRead
            }
            _ => LockMode::Read,
        };
        Ok(LqhKeyReq {
            trans,
            op_index: req.op_index,
            op_type: OperationType::Read,
            lock_mode,
            table_id: hidden.info.table_id,
            fragment: hidden.fragment_of(partition),
            key_bytes: OpKey::with_hash(&self.key_scratch, hash),
            key: req.key,
            attrs: Vec::new(),
            role: OpRole::UniqueLookup(Box::new(UniqueLookup {
                base_table_id: index.info.table_id,
                op_type: req.op_type,
                lock_mode: req.lock_mode,
                attrs: req.attrs,
            })),
            chain: Vec::new(),
            commit_at_last: false,
            backup: false,
        })
    }

    /// The second hop: the API's operation on the base row the index row names.
    pub(super) fn unique_second_hop(
        &mut self,
        trans: TransId,
        op_index: u32,
        lookup: UniqueLookup,
        index_row: Option<Row>,
    ) -> Result<LqhKeyReq, NdbError> {
        let Some(Value::Varbinary(pk)) = index_row.and_then(|row| row.unpack().pop()) else {
            return Err(NdbError::with_detail(
                4000,
                "index row without a primary key",
            ));
        };
        let Some(table) = self.dict.get(lookup.base_table_id) else {
            return Err(NdbError::with_detail(709, "the indexed table was dropped"));
        };
        let mut reader = Reader::new(&pk, "indexed primary key");
        let key = (0..table.key_columns.len())
            .map(|_| Value::decode(&mut reader))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| NdbError::with_detail(4000, e))?;
        let hash = dih::key_hash(&pk);
        let partition = self.dih.partition_of(hash);
        Ok(LqhKeyReq {
            trans,
            op_index,
            op_type: lookup.op_type,
            lock_mode: lookup.lock_mode,
            table_id: lookup.base_table_id,
            fragment: table.fragment_of(partition),
            key_bytes: OpKey::with_hash(&pk, hash),
            key,
            attrs: lookup.attrs,
            role: OpRole::Api,
            chain: Vec::new(),
            commit_at_last: false,
            backup: false,
        })
    }

    /// Starts one index-maintenance operation fired by the base operation `op_index`.
    pub(super) fn fire(
        &mut self,
        trans: TransId,
        op_index: u32,
        change: IndexChange,
        out: &mut dyn Outbox,
    ) {
        if !self.tc.is_active(trans) {
            // The transaction is ending: its write is being undone, and so is nothing here.
            return;
        }
        let Some(hidden) = self.dict.get(change.hidden_table_id) else {
            // The index was dropped while the write ran: nothing to maintain.
            return;
        };
        self.key_scratch.clear();
        let encoded = tup::encode_key(
            &hidden.info.def,
            &hidden.key_columns,
            &change.key,
            &mut self.key_scratch,
        );
        let hash = dih::key_hash(&self.key_scratch);
        let fragment = hidden.fragment_of(self.dih.partition_of(hash));
        let pk_column = (hidden.info.def.columns.len() - 1) as u16;
        let attrs = match change.op_type {
            OperationType::Insert => vec![(pk_column, Value::Varbinary(change.pk.to_vec()))],
            _ => Vec::new(),
        };
        let req = LqhKeyReq {
            trans,
            op_index,
            op_type: change.op_type,
            lock_mode: LockMode::Exclusive,
            table_id: change.hidden_table_id,
            fragment,
            key_bytes: OpKey::with_hash(&self.key_scratch, hash),
            key: change.key,
            attrs,
            role: OpRole::Trigger,
            chain: Vec::new(),
            commit_at_last: false,
            backup: false,
        };
        if let Err(error) = encoded.and_then(|()| self.tc.add_internal_op(trans)) {
            self.tc.on_trigger_refused(trans, op_index, error);
            return;
        }
        self.dispatch(Box::new(req), REPLICA_PRIMARY, out);
    }
}
