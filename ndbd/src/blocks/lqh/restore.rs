//! LQH's side of a restart: a committed row change read back from the redo log is applied to
//! its fragment as it was logged (a PUT installs the after-image, a DELETE removes the row), and
//! once every change is in, the ordered indexes are built over the rows.

use rndb_protocol::codec::Reader;
use rndb_protocol::schema::decode_values;
use rndb_protocol::NdbError;

use super::Lqh;
use crate::blocks::dict::Dict;
use crate::blocks::tup::{self, Row};
use crate::ndbfs::format::RowChange;

/// The most values a stored row may hold.
const ROW_VALUES_MAX: usize = 4096;

impl Lqh {
    /// Applies one committed change from the redo log. A change of a table the dictionary
    /// does not have (dropped later) is skipped; a row that does not decode, or a DataMemory
    /// too small for what was committed, is an error.
    pub fn restore_change(&mut self, dict: &Dict, change: &RowChange<'_>) -> Result<(), NdbError> {
        if dict.get(change.table_id).is_none() {
            return Ok(());
        }
        let Some(fragment) = self
            .fragments
            .get_mut(&change.table_id)
            .and_then(|f| f.get_mut(change.fragment as usize))
        else {
            return Err(NdbError::with_detail(
                4000,
                format!(
                    "the redo log names fragment {} of table {}, which it does not have",
                    change.fragment, change.table_id
                ),
            ));
        };
        let existing = fragment.rows.id_of(change.key);
        match change.row {
            Some(encoded) => {
                let mut reader = Reader::new(encoded, "row in the redo log");
                let values = decode_values(&mut reader, ROW_VALUES_MAX)
                    .map_err(|e| NdbError::with_detail(4000, e.to_string()))?;
                let row = Row::pack(&values);
                let id = match existing {
                    Some(id) => id,
                    None => {
                        self.memory.reserve(tup::slot_bytes(change.key))?;
                        fragment.rows.insert(change.key)
                    }
                };
                self.memory.reserve(tup::row_bytes(&row))?;
                if let Some(slot) = fragment.rows.slot_mut(id) {
                    let old = slot.committed.replace(row);
                    self.memory.free(old.as_ref().map_or(0, tup::row_bytes));
                }
            }
            None => {
                if let Some(slot) = existing.and_then(|id| fragment.rows.remove(id)) {
                    self.memory.free(
                        tup::slot_bytes(&slot.key)
                            + slot.committed.as_ref().map_or(0, tup::row_bytes),
                    );
                }
            }
        }
        Ok(())
    }

    /// Builds every ordered index of the dictionary over the restored rows.
    pub fn rebuild_ordered_indexes(&mut self, dict: &Dict) -> Result<(), NdbError> {
        for table_id in dict.table_ids() {
            let Some(table) = dict.get(table_id) else {
                continue;
            };
            for index in &table.ordered {
                self.drop_ordered(table_id, index.index_id);
                self.build_ordered(table_id, index.index_id, &index.columns)?;
            }
        }
        Ok(())
    }
}
