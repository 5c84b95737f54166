//! LQH's side of a restart: a committed row change read back from the redo log is applied to
//! its fragment as it was logged (a PUT installs the after-image, a DELETE removes the row), and
//! once every change is in, the ordered indexes are built over the rows.

use rndb_protocol::codec::Reader;
use rndb_protocol::schema::decode_values;
use rndb_protocol::NdbError;

use super::{Fragment, Lqh};
use crate::blocks::dict::Dict;
use crate::blocks::tup::{self, Row};
use crate::ndbfs::format::{gci_hi, RowChange};

/// The most values a stored row may hold.
const ROW_VALUES_MAX: usize = 4096;

impl Lqh {
    /// Applies one committed change from the redo log (or a local checkpoint, or a node
    /// restart's copy), of GCI `gci`: a PUT's row is current from then on (its last change is
    /// `gci`'s). A change of a table the dictionary does not have (dropped later) is skipped;
    /// a row that does not decode, or a DataMemory too small for what was committed, is an
    /// error.
    pub fn restore_change(
        &mut self,
        dict: &Dict,
        change: &RowChange<'_>,
        gci: u64,
    ) -> Result<(), NdbError> {
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
                    slot.gci = gci_hi(gci);
                    slot.restored = false;
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

    /// A node restart that kept this node's own rows: every row is marked restored (possibly
    /// stale, see `RowSlot::restored`) until the copy confirms it. Returns the rows marked.
    pub fn mark_restored(&mut self) -> u64 {
        let mut rows = 0;
        for fragment in self.fragments.values_mut().flatten() {
            let ids: Vec<_> = fragment.rows.iter().map(|(id, _)| id).collect();
            for id in ids {
                if let Some(slot) = fragment.rows.slot_mut(id) {
                    slot.restored = true;
                    rows += 1;
                }
            }
        }
        rows
    }

    /// A COPY_ROWS "unchanged" mark: the live replica holds the row as this node restored it.
    /// An error when this node does not have the row (its restore and the live replica
    /// disagree about what the restorable GCI holds).
    pub fn confirm_restored(
        &mut self,
        table_id: u32,
        fragment: u32,
        key: &[u8],
    ) -> Result<(), NdbError> {
        let slot = self
            .fragments
            .get_mut(&table_id)
            .and_then(|f| f.get_mut(fragment as usize))
            .and_then(|f| f.rows.get_mut(key))
            .filter(|slot| slot.committed.is_some());
        match slot {
            Some(slot) => {
                slot.restored = false;
                Ok(())
            }
            None => Err(NdbError::with_detail(
                4000,
                format!(
                    "the live replica has a row of table {table_id} fragment {fragment} unchanged \
                     since this node's restorable GCI, and this node did not restore it"
                ),
            )),
        }
    }

    /// The copy has ended: every row still marked restored is gone at the live replicas
    /// (deleted after this node's restorable GCI) and is removed. Returns how many.
    ///
    /// Such a row's image goes even when a live transaction holds the row: that can only be
    /// an insert of the key again (an update or delete reaching this node means the live
    /// replica had the row, so the copy mentioned it or a committed insert here made it
    /// current), whose own image stays pending; the slot goes once nobody uses it.
    pub fn remove_unconfirmed(&mut self) -> u64 {
        let mut removed = 0;
        for fragment in self.fragments.values_mut().flatten() {
            let ids: Vec<_> = (fragment.rows.iter())
                .filter(|(_, slot)| slot.restored)
                .map(|(id, _)| id)
                .collect();
            for id in ids {
                let Some(slot) = fragment.rows.slot_mut(id) else {
                    continue;
                };
                slot.restored = false;
                let gone = slot.committed.take();
                self.memory.free(gone.as_ref().map_or(0, tup::row_bytes));
                removed += 1;
                if slot.is_empty() {
                    if let Some(slot) = fragment.rows.remove(id) {
                        self.memory.free(tup::slot_bytes(&slot.key));
                    }
                }
            }
        }
        removed
    }

    /// Frees the memory of fragments taken out of the LQH (a restored table the cluster
    /// dropped or changed while this node was down). Nothing runs on their rows.
    pub fn free_fragments(&mut self, fragments: Vec<Fragment>) {
        for mut fragment in fragments {
            for index in &mut fragment.ordered {
                index.clear(&mut self.memory);
            }
            for slot in fragment.rows.drain() {
                self.memory.free(
                    tup::slot_bytes(&slot.key) + slot.committed.as_ref().map_or(0, tup::row_bytes),
                );
            }
        }
    }
}
