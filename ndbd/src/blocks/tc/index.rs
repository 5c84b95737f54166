//! TC's unique-index paths: the two hops of an operation through a unique hash index, and the
//! index maintenance a base-table write fires.
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

use rndb_protocol::signals::{TcKeyReq, REPLICA_PRIMARY};
use rndb_protocol::{LockMode, NdbError, OperationType, Reader, Value};

use crate::blocks::acc::{OpKey, Row, TransId};
use crate::blocks::lqh::{IndexChange, LqhKeyReq, OpRole, UniqueLookup};
use crate::blocks::{dih, tup, Kernel, Outbox};

/// What a failed index-maintenance operation means to the base operation.
pub fn trigger_error(error: NdbError) -> NdbError {
    if error.code == 630 {
        NdbError::with_detail(893, "duplicate value in a unique index")
    } else {
        error
    }
}

impl Kernel {
    /// The first hop of an operation through a unique index: a read of the hidden table.
    pub(crate) fn build_unique_lookup(
        &mut self,
        trans: TransId,
        req: TcKeyReq,
    ) -> Result<LqhKeyReq, (u32, NdbError)> {
        let fail = |e| (req.op_index, e);
        if req.program.is_some() {
            return Err(fail(NdbError::with_detail(
                4116,
                "an interpreted operation goes to a row by its primary key, not through a unique index",
            )));
        }
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
            program: None,
        })
    }

    /// The second hop: the API's operation on the base row the index row names.
    pub(crate) fn unique_second_hop(
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
            program: None,
        })
    }

    /// Starts one index-maintenance operation fired by the base operation `op_index`.
    pub(crate) fn fire(
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
            program: None,
        };
        if let Err(error) = encoded.and_then(|()| self.tc.take_fired_trigger(trans)) {
            self.tc.on_trigger_refused(trans, op_index, error);
            return;
        }
        if let Err(error) = self.tc.add_internal_op(trans) {
            self.tc.release_fired_trigger(trans);
            self.tc.on_trigger_refused(trans, op_index, error);
            return;
        }
        self.dispatch(Box::new(req), REPLICA_PRIMARY, out);
    }
}
