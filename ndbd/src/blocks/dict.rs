//! DICT: the tables of this data node, their ids, versions and definitions.

use std::collections::HashMap;

use rndb_protocol::signals::TableInfo;
use rndb_protocol::{NdbError, TableDef};

/// A table as the kernel uses it: its definition plus what every operation needs fast.
#[derive(Debug)]
pub struct Table {
    pub info: TableInfo,
    /// Positions of the primary-key columns, in column order.
    pub key_columns: Vec<usize>,
    /// Fragments (partitions) of the table; DIH decides which key goes to which.
    pub fragment_count: u32,
}

/// The dictionary. Table ids are never reused while the node runs, so an operation naming a
/// dropped table's id can never reach a newer table.
#[derive(Debug)]
pub struct Dict {
    tables: HashMap<u32, Table>,
    by_name: HashMap<String, u32>,
    next_table_id: u32,
    /// MaxNoOfTables.
    tables_max: u32,
}

impl Dict {
    pub fn new(tables_max: u32) -> Dict {
        Dict {
            tables: HashMap::new(),
            by_name: HashMap::new(),
            next_table_id: 1,
            tables_max,
        }
    }

    /// Creates a table: 721 if the name exists, 826 past MaxNoOfTables, definition errors as
    /// `TableDef::validate` reports them.
    pub fn create(&mut self, def: TableDef, fragment_count: u32) -> Result<&Table, NdbError> {
        def.validate()
            .map_err(|(code, detail)| NdbError::with_detail(code, detail))?;
        if self.by_name.contains_key(&def.name) {
            return Err(NdbError::with_detail(721, format!("table {}", def.name)));
        }
        if self.tables.len() >= self.tables_max as usize {
            return Err(NdbError::with_detail(
                826,
                format!("MaxNoOfTables={} reached", self.tables_max),
            ));
        }
        let table_id = self.next_table_id;
        self.next_table_id += 1;
        let key_columns = def.key_columns();
        self.by_name.insert(def.name.clone(), table_id);
        let table = Table {
            info: TableInfo {
                table_id,
                table_version: 1,
                def,
            },
            key_columns,
            fragment_count,
        };
        Ok(self.tables.entry(table_id).or_insert(table))
    }

    /// Drops a table by name; returns its id (709 if there is none).
    pub fn drop_table(&mut self, name: &str) -> Result<u32, NdbError> {
        let id = self
            .by_name
            .remove(name)
            .ok_or_else(|| NdbError::with_detail(709, format!("table {name}")))?;
        self.tables.remove(&id);
        Ok(id)
    }

    pub fn by_name(&self, name: &str) -> Result<&Table, NdbError> {
        self.by_name
            .get(name)
            .and_then(|id| self.tables.get(id))
            .ok_or_else(|| NdbError::with_detail(709, format!("table {name}")))
    }

    /// The table an operation names: 709 if it is gone, 241 if its version changed.
    pub fn for_operation(&self, table_id: u32, table_version: u32) -> Result<&Table, NdbError> {
        let table = self
            .tables
            .get(&table_id)
            .ok_or_else(|| NdbError::with_detail(709, format!("table id {table_id}")))?;
        if table.info.table_version != table_version {
            return Err(NdbError::with_detail(
                241,
                format!(
                    "table {} is version {}, the operation names {table_version}",
                    table.info.def.name, table.info.table_version
                ),
            ));
        }
        Ok(table)
    }

    pub fn get(&self, table_id: u32) -> Option<&Table> {
        self.tables.get(&table_id)
    }
}
