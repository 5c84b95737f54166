//! DICT's indexes: CREATE_INDEX records an index and builds it from the table's rows (an
//! ordered index here, per fragment; a unique index's hidden table across the cluster, see
//! `index_build.rs`); DROP_INDEX removes it.

use std::time::Instant;

use rndb_protocol::signals::{CreateIndexReq, IndexName};
use rndb_protocol::{IndexKind, NdbError, Value};

use super::Index;
use crate::blocks::{Kernel, Outbox};

/// A unique index created here whose entries are still to be built (see `index_build.rs`).
#[derive(Debug)]
pub(crate) struct PendingBuild {
    pub base_table_id: u32,
    pub hidden: u32,
    pub entries: Vec<(Vec<Value>, Box<[u8]>)>,
}

impl Kernel {
    /// CREATE_INDEX_REQ: records the index, then builds it from the table's rows; answers
    /// the CONF payload.
    pub(crate) fn apply_create_index(
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
    /// partitions this node is a live replica of (a value with a NULL has none). Every replica
    /// sends its entries, and a replica of the entry's partition takes one it holds already
    /// as the same (`Lqh::insert_committed`): the nodes' views of who is primary may differ
    /// while a failure or a node restart's move of primaries is being handled, and entries
    /// from the primary alone were sent twice (a 893 for no duplicate) or by no node (sim
    /// seed 0x50000e4a). The replicas agree: the create is refused (701) where a change is
    /// uncommitted, and the table is locked against writes while the index is built.
    fn unique_entries(&self, table_id: u32, columns: &[usize]) -> Vec<(Vec<Value>, Box<[u8]>)> {
        let mut entries = Vec::new();
        let fragments = self.lqh.fragments.get(&table_id).into_iter().flatten();
        for (partition, fragment) in fragments.enumerate() {
            if !self.live_replicas(partition as u32).contains(&self.me) {
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
    pub(crate) fn apply_drop_index(
        &mut self,
        name: IndexName,
        out: &mut dyn Outbox,
        now: Instant,
    ) -> Result<Vec<u8>, NdbError> {
        let index = self.dict.drop_index(&name.table, &name.index)?;
        match (index.info.kind, index.hidden_table_id) {
            (IndexKind::Unique, Some(hidden)) => {
                self.drop_fragments(hidden, out, now);
                // Transactions that maintained the index may still hold its rows (the undo
                // of a create whose build failed: sim seed 0x610007d2).
                self.lqh.forget_rows_of(hidden);
            }
            _ => self
                .lqh
                .drop_ordered(index.info.table_id, index.info.index_id),
        }
        tracing::info!(table = %name.table, index = %name.index, "dropped index");
        Ok(Vec::new())
    }
}
