//! DICT: the tables and indexes of this data node, their ids, versions and definitions.
//!
//! A unique hash index is stored as a *hidden table*, as NDB stores it: its primary key is the
//! indexed columns and its one other column, `NDB$PK`, holds the base row's canonical primary
//! key encoding. The hidden table has fragments like any table (partitioned by the unique key)
//! but no name in the table namespace. An ordered index has no table: TUX keeps one ordered
//! structure per fragment of its base table.
//!
//! A BLOB or TEXT column (but a TINY one) has a *parts table* (`rndb_protocol::blob`),
//! created with its table in the same schema change (the next ids, in column order) and
//! dropped with it. It has a name (`NDB$BLOB_<table id>_<column>`, a prefix no user table may
//! take) so that API nodes can find it, but no place in table listings or in a system
//! restart's agreement of the dictionaries: it comes and goes with its table.

pub mod agree;
pub mod index;
pub mod index_build;
pub mod log;
pub mod schema;
pub mod takeover;

use hashbrown::HashMap;

use rndb_protocol::schema::{COLUMN_BYTES_MAX, NAME_BYTES_MAX};
use rndb_protocol::signals::{
    CreateIndexReq, IndexInfo, ListTablesConf, ListedObject, ObjectKind, TableInfo,
    INDEX_COLUMNS_MAX, LIST_TABLES_OBJECTS_MAX, SYSTEM_TABLES,
};
use rndb_protocol::{blob, ColumnDef, ColumnType, IndexKind, NdbError, TableDef, Value};

/// The name of the hidden table column that holds the base row's encoded primary key.
pub const UNIQUE_PK_COLUMN: &str = "NDB$PK";

/// A unique hash index as base-table writes need it.
#[derive(Clone, Debug)]
pub struct UniqueRef {
    pub index_id: u32,
    pub hidden_table_id: u32,
    /// Indexed columns' positions in the base table, in index order.
    pub columns: Vec<usize>,
}

/// An ordered index as base-table writes and scans need it.
#[derive(Clone, Debug)]
pub struct OrderedRef {
    pub index_id: u32,
    /// Indexed columns' positions in the base table, in index order.
    pub columns: Vec<usize>,
}

/// A table as the kernel uses it: its definition plus what every operation needs fast.
#[derive(Debug)]
pub struct Table {
    pub info: TableInfo,
    /// Positions of the primary-key columns, in column order.
    pub key_columns: Vec<usize>,
    /// Fragments (partitions) of the table; DIH decides which key goes to which.
    pub fragment_count: u32,
    /// Unique hash indexes to maintain on every write.
    pub unique: Vec<UniqueRef>,
    /// Ordered indexes to maintain on every write.
    pub ordered: Vec<OrderedRef>,
    /// The unique index this table stores, when it is a hidden index table.
    pub hidden_for: Option<u32>,
    /// The parts tables of its BLOB and TEXT columns.
    pub parts: Vec<u32>,
    /// The table whose parts this table holds, when it is a parts table.
    pub parts_of: Option<u32>,
}

impl Table {
    /// The fragment holding partition `partition`'s rows (every table has one per partition,
    /// so this divides only for a partition past the table's fragments).
    pub fn fragment_of(&self, partition: u32) -> u32 {
        let count = self.fragment_count.max(1);
        if partition < count {
            partition
        } else {
            partition % count
        }
    }
}

/// An index: what the API names and what operations need.
#[derive(Clone, Debug)]
pub struct Index {
    pub info: IndexInfo,
    /// Indexed columns' positions in the base table, in index order.
    pub columns: Vec<usize>,
    /// The hidden table of a unique index.
    pub hidden_table_id: Option<u32>,
}

/// The dictionary. Table and index ids share one space and are never reused while the node
/// runs, so an operation naming a dropped object's id can never reach a newer one.
#[derive(Debug)]
pub struct Dict {
    tables: HashMap<u32, Table>,
    by_name: HashMap<String, u32>,
    indexes: HashMap<u32, Index>,
    next_id: u32,
    /// MaxNoOfTables.
    tables_max: u32,
    /// MaxNoOfOrderedIndexes.
    ordered_max: u32,
    /// MaxNoOfUniqueHashIndexes.
    unique_max: u32,
    /// MaxNoOfAttributes: columns of every table (a unique index's hidden table too) and
    /// ordered index, as NDB's DICT counts its attribute records.
    attributes_max: u32,
    /// Tables being dropped (a table and its hidden index tables): no operation or scan
    /// starts on them (283) while the drop waits for the transactions holding their rows
    /// (`schema.rs`). Not saved: a drop not applied when its master fails is called off.
    dropping: hashbrown::HashSet<u32>,
}

impl Dict {
    pub fn new(tables_max: u32, ordered_max: u32, unique_max: u32, attributes_max: u32) -> Dict {
        Dict {
            tables: HashMap::new(),
            by_name: HashMap::new(),
            indexes: HashMap::new(),
            next_id: 1,
            tables_max,
            ordered_max,
            unique_max,
            attributes_max,
            dropping: hashbrown::HashSet::new(),
        }
    }

    /// Creates a table and the parts tables of its BLOB and TEXT columns: 721 if the name
    /// exists, 4241 for a name of the parts tables' prefix, 826 past MaxNoOfTables (which
    /// parts tables count towards, as in NDB), 708 past MaxNoOfAttributes, definition errors
    /// as `TableDef::validate` reports them. Nothing is created when any is refused.
    pub fn create(&mut self, def: TableDef, fragment_count: u32) -> Result<&Table, NdbError> {
        def.validate()
            .map_err(|(code, detail)| NdbError::with_detail(code, detail))?;
        if def.name.starts_with(blob::PARTS_PREFIX) {
            return Err(NdbError::with_detail(
                4241,
                format!(
                    "table {}: names beginning {} are blob parts tables'",
                    def.name,
                    blob::PARTS_PREFIX
                ),
            ));
        }
        if self.by_name.contains_key(&def.name) {
            return Err(NdbError::with_detail(721, format!("table {}", def.name)));
        }
        let parted: Vec<usize> = blob::parted_columns(&def).collect();
        let visible = self.tables.values().filter(|t| t.hidden_for.is_none());
        if visible.count() + 1 + parted.len() > self.tables_max as usize {
            return Err(NdbError::with_detail(
                826,
                format!(
                    "MaxNoOfTables={} reached (table {} and its {} blob parts tables)",
                    self.tables_max,
                    def.name,
                    parted.len()
                ),
            ));
        }
        let key_columns = def.key_columns().len();
        let attributes = def.columns.len() + parted.len() * (key_columns + 2);
        self.check_attributes(attributes, &format!("table {}", def.name))?;
        // Each parts table must be a table of its own right (its columns' names, their
        // count, its row's size): the limits hold for it as for any.
        for &column in &parted {
            if let Some(parts_def) = blob::parts_def(&def, self.next_id, column) {
                parts_def.validate().map_err(|(code, detail)| {
                    NdbError::with_detail(
                        code,
                        format!(
                            "table {}: the parts table of column {}: {detail}",
                            def.name, def.columns[column].name
                        ),
                    )
                })?;
            }
        }
        let table_id = self.insert_table(def, fragment_count, None);
        let def = self.tables[&table_id].info.def.clone();
        self.by_name.insert(def.name.clone(), table_id);
        for column in parted {
            let Some(parts_def) = blob::parts_def(&def, table_id, column) else {
                continue;
            };
            let name = parts_def.name.clone();
            let parts_id = self.insert_table(parts_def, fragment_count, None);
            if let Some(parts) = self.tables.get_mut(&parts_id) {
                parts.parts_of = Some(table_id);
            }
            self.by_name.insert(name, parts_id);
            if let Some(table) = self.tables.get_mut(&table_id) {
                table.parts.push(parts_id);
            }
        }
        Ok(&self.tables[&table_id])
    }

    fn insert_table(&mut self, def: TableDef, fragment_count: u32, hidden_for: Option<u32>) -> u32 {
        let table_id = self.new_id();
        let key_columns = def.key_columns();
        let table = Table {
            info: TableInfo {
                table_id,
                table_version: 1,
                def,
            },
            key_columns,
            fragment_count,
            unique: Vec::new(),
            ordered: Vec::new(),
            hidden_for,
            parts: Vec::new(),
            parts_of: None,
        };
        self.tables.insert(table_id, table);
        table_id
    }

    /// The id the next table or index gets.
    pub fn next_id(&self) -> u32 {
        self.next_id
    }

    /// Moves the id counter forward to `next` (never back: ids are never reused). Data nodes
    /// that follow the DICT master set it to the master's before each schema change, so that a
    /// change one of them refused leaves no gap between their ids.
    pub fn advance_next_id(&mut self, next: u32) {
        self.next_id = self.next_id.max(next);
    }

    fn new_id(&mut self) -> u32 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// The table DROP TABLE `name` would drop: 709 if there is none, 4264 for a blob parts
    /// table (it goes with its table).
    pub fn droppable(&self, name: &str) -> Result<&Table, NdbError> {
        let table = self.by_name(name)?;
        if let Some(of) = table.parts_of {
            let of = self.tables.get(&of).map_or("", |t| &t.info.def.name);
            return Err(NdbError::with_detail(
                4264,
                format!("{name} is the blob parts table of table {of}, and goes with it"),
            ));
        }
        Ok(table)
    }

    /// Drops a table by name with its indexes and blob parts tables; returns its id and the
    /// ids of its hidden index tables and parts tables, whose fragments go too (709 if there
    /// is none, 4264 for a parts table).
    pub fn drop_table(&mut self, name: &str) -> Result<(u32, Vec<u32>), NdbError> {
        let id = self.droppable(name)?.info.table_id;
        self.by_name.remove(name);
        let mut hidden = Vec::new();
        if let Some(table) = self.tables.remove(&id) {
            for u in &table.unique {
                self.indexes.remove(&u.index_id);
                self.tables.remove(&u.hidden_table_id);
                hidden.push(u.hidden_table_id);
            }
            for &parts in &table.parts {
                if let Some(parts) = self.tables.remove(&parts) {
                    self.by_name.remove(&parts.info.def.name);
                }
                hidden.push(parts);
            }
            for o in &table.ordered {
                self.indexes.remove(&o.index_id);
            }
        }
        self.dropping.remove(&id);
        for h in &hidden {
            self.dropping.remove(h);
        }
        Ok((id, hidden))
    }

    /// Marks table `table_id`, its hidden index tables and its blob parts tables as being
    /// dropped (see [`Dict::is_dropping`]); returns their ids (none when there is no such
    /// table).
    pub fn start_dropping(&mut self, table_id: u32) -> Vec<u32> {
        let Some(table) = self.tables.get(&table_id) else {
            return Vec::new();
        };
        let ids: Vec<u32> = std::iter::once(table_id)
            .chain(table.unique.iter().map(|u| u.hidden_table_id))
            .chain(table.parts.iter().copied())
            .collect();
        self.dropping.extend(ids.iter().copied());
        ids
    }

    /// Takes the marks of [`Dict::start_dropping`] off `ids` again: the drop was called off.
    pub fn stop_dropping(&mut self, ids: &[u32]) {
        for id in ids {
            self.dropping.remove(id);
        }
    }

    /// True while table `table_id` (a hidden index table too) is being dropped.
    pub fn is_dropping(&self, table_id: u32) -> bool {
        !self.dropping.is_empty() && self.dropping.contains(&table_id)
    }

    /// 283 while table `table_id` is being dropped (NDB's "Table is being dropped").
    pub fn check_not_dropping(&self, table_id: u32) -> Result<(), NdbError> {
        if self.is_dropping(table_id) {
            let name = self.tables.get(&table_id).map_or("", |t| &t.info.def.name);
            return Err(NdbError::with_detail(
                283,
                format!("table {name} (id {table_id})"),
            ));
        }
        Ok(())
    }

    pub fn by_name(&self, name: &str) -> Result<&Table, NdbError> {
        self.by_name
            .get(name)
            .and_then(|id| self.tables.get(id))
            .ok_or_else(|| NdbError::with_detail(709, format!("table {name}")))
    }

    /// LIST_TABLES_REQ: the tables (hidden index tables and blob parts tables left out) and
    /// indexes whose id is `from_id` or more, in id order, at most a page of them.
    pub fn list(&self, from_id: u32) -> ListTablesConf {
        let tables = self
            .tables
            .iter()
            .filter(|(_, t)| t.hidden_for.is_none() && t.parts_of.is_none())
            .map(|(&id, t)| ListedObject {
                id,
                kind: match SYSTEM_TABLES.contains(&t.info.def.name.as_str()) {
                    true => ObjectKind::SystemTable,
                    false => ObjectKind::UserTable,
                },
                parent_id: 0,
                name: t.info.def.name.clone(),
            });
        let indexes = self.indexes.iter().map(|(&id, i)| ListedObject {
            id,
            kind: match i.info.kind {
                IndexKind::Unique => ObjectKind::UniqueHashIndex,
                IndexKind::Ordered => ObjectKind::OrderedIndex,
            },
            parent_id: i.info.table_id,
            name: i.info.name.clone(),
        });
        let mut objects: Vec<ListedObject> =
            tables.chain(indexes).filter(|o| o.id >= from_id).collect();
        objects.sort_unstable_by_key(|o| o.id);
        let more = objects.len() > LIST_TABLES_OBJECTS_MAX;
        objects.truncate(LIST_TABLES_OBJECTS_MAX);
        ListTablesConf { objects, more }
    }

    /// The table an operation names: 709 if it is gone, 241 if its version changed, 283 while
    /// it is being dropped.
    pub fn for_operation(&self, table_id: u32, table_version: u32) -> Result<&Table, NdbError> {
        let table = self
            .tables
            .get(&table_id)
            .filter(|t| t.hidden_for.is_none())
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
        self.check_not_dropping(table_id)?;
        Ok(table)
    }

    /// The index an operation or scan names: 4243 if it is gone, 241 if its version changed,
    /// 283 while its table is being dropped.
    pub fn index_for_operation(&self, index_id: u32, version: u32) -> Result<&Index, NdbError> {
        let index = self
            .indexes
            .get(&index_id)
            .ok_or_else(|| NdbError::with_detail(4243, format!("index id {index_id}")))?;
        if index.info.index_version != version {
            return Err(NdbError::with_detail(
                241,
                format!("index {} has another version", index.info.name),
            ));
        }
        self.check_not_dropping(index.info.table_id)?;
        Ok(index)
    }

    /// An empty dictionary with this one's limits (a node restart sets its restored one
    /// aside and takes the president's).
    pub fn emptied(&self) -> Dict {
        Dict::new(
            self.tables_max,
            self.ordered_max,
            self.unique_max,
            self.attributes_max,
        )
    }

    /// Every table's id, in id order.
    pub fn table_ids(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = self.tables.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    pub fn get(&self, table_id: u32) -> Option<&Table> {
        self.tables.get(&table_id)
    }

    pub fn index(&self, index_id: u32) -> Option<&Index> {
        self.indexes.get(&index_id)
    }

    /// The index `name` of table `table`: 709 without the table, 4243 without the index.
    pub fn index_by_name(&self, table: &str, name: &str) -> Result<&Index, NdbError> {
        let table = self.by_name(table)?;
        let id = table
            .unique
            .iter()
            .map(|u| u.index_id)
            .chain(table.ordered.iter().map(|o| o.index_id))
            .find(|id| self.indexes.get(id).is_some_and(|i| i.info.name == name));
        id.and_then(|id| self.indexes.get(&id)).ok_or_else(|| {
            NdbError::with_detail(
                4243,
                format!("index {name} on table {}", table.info.def.name),
            )
        })
    }

    /// Creates an index. For a unique index this also creates its hidden table (whose
    /// fragments the caller creates); an ordered index must then be built by the caller, who
    /// drops it again if that fails.
    pub fn create_index(
        &mut self,
        req: &CreateIndexReq,
        fragment_count: u32,
    ) -> Result<Index, NdbError> {
        let columns = self.check_index(req)?;
        let table_id = self.by_name(&req.table)?.info.table_id;
        let index_id = self.new_id();
        let hidden_table_id = match req.kind {
            IndexKind::Unique => {
                let def = self.hidden_table_def(table_id, index_id, &columns)?;
                Some(self.insert_table(def, fragment_count, Some(index_id)))
            }
            IndexKind::Ordered => None,
        };
        let table = self
            .tables
            .get_mut(&table_id)
            .ok_or_else(|| NdbError::with_detail(709, format!("table {}", req.table)))?;
        let info = IndexInfo {
            index_id,
            index_version: 1,
            table_id,
            table_version: table.info.table_version,
            kind: req.kind,
            name: req.index.clone(),
            columns: columns.iter().map(|&c| c as u16).collect(),
        };
        match hidden_table_id {
            Some(hidden_table_id) => table.unique.push(UniqueRef {
                index_id,
                hidden_table_id,
                columns: columns.clone(),
            }),
            None => table.ordered.push(OrderedRef {
                index_id,
                columns: columns.clone(),
            }),
        }
        let index = Index {
            info,
            columns,
            hidden_table_id,
        };
        self.indexes.insert(index_id, index.clone());
        Ok(index)
    }

    /// Checks an index request against the table and the limits; returns the column positions.
    fn check_index(&self, req: &CreateIndexReq) -> Result<Vec<usize>, NdbError> {
        let table = self.by_name(&req.table)?;
        if req.index.is_empty() || req.index.len() > NAME_BYTES_MAX {
            return Err(NdbError::with_detail(
                4241,
                format!("index name must be 1..={NAME_BYTES_MAX} bytes"),
            ));
        }
        if self.index_by_name(&req.table, &req.index).is_ok() {
            return Err(NdbError::with_detail(721, format!("index {}", req.index)));
        }
        if req.columns.is_empty() || req.columns.len() > INDEX_COLUMNS_MAX {
            return Err(NdbError::with_detail(
                4317,
                format!("an index needs 1..={INDEX_COLUMNS_MAX} columns"),
            ));
        }
        let mut columns = Vec::with_capacity(req.columns.len());
        for name in &req.columns {
            let column = table.info.def.column_index(name).ok_or_else(|| {
                NdbError::with_detail(4004, format!("table {} has no column {name}", req.table))
            })?;
            let column_type = table.info.def.columns[column].column_type;
            if blob::size_of(column_type).is_some() {
                return Err(NdbError::with_detail(
                    4264,
                    format!("column {name} is {column_type}, which no index may hold"),
                ));
            }
            if columns.contains(&column) {
                return Err(NdbError::with_detail(
                    4317,
                    format!("column {name} is listed twice"),
                ));
            }
            columns.push(column);
        }
        let (count, max, code, param) = match req.kind {
            IndexKind::Ordered => (
                self.count(IndexKind::Ordered),
                self.ordered_max,
                903,
                "MaxNoOfOrderedIndexes",
            ),
            IndexKind::Unique => (
                self.count(IndexKind::Unique),
                self.unique_max,
                707,
                "MaxNoOfUniqueHashIndexes",
            ),
        };
        if count >= max as usize {
            return Err(NdbError::with_detail(
                code,
                format!("{param}={max} reached"),
            ));
        }
        // A unique index's hidden table has the indexed columns and NDB$PK.
        let attributes = match req.kind {
            IndexKind::Ordered => columns.len(),
            IndexKind::Unique => columns.len() + 1,
        };
        self.check_attributes(attributes, &format!("index {}", req.index))?;
        Ok(columns)
    }

    /// 708 (NDB DICT's "no more attribute metadata records") when `adding` more attributes
    /// (for `what`) would pass MaxNoOfAttributes.
    fn check_attributes(&self, adding: usize, what: &str) -> Result<(), NdbError> {
        let tables: usize = self.tables.values().map(|t| t.info.def.columns.len()).sum();
        let ordered: usize = self
            .indexes
            .values()
            .filter(|i| i.info.kind == IndexKind::Ordered)
            .map(|i| i.columns.len())
            .sum();
        let defined = tables + ordered;
        if defined + adding > self.attributes_max as usize {
            return Err(NdbError::with_detail(
                708,
                format!(
                    "MaxNoOfAttributes={} reached: {defined} attributes defined, {what} has {adding}",
                    self.attributes_max
                ),
            ));
        }
        Ok(())
    }

    fn count(&self, kind: IndexKind) -> usize {
        self.indexes
            .values()
            .filter(|i| i.info.kind == kind)
            .count()
    }

    /// The hidden table of a unique index: the indexed columns as its key, then `NDB$PK`.
    fn hidden_table_def(
        &self,
        table_id: u32,
        index_id: u32,
        columns: &[usize],
    ) -> Result<TableDef, NdbError> {
        let base = &self.tables[&table_id];
        let pk_bytes: usize = base
            .key_columns
            .iter()
            .map(|&c| Value::encoded_bytes_max(base.info.def.columns[c].column_type))
            .sum();
        if pk_bytes > usize::from(COLUMN_BYTES_MAX) {
            return Err(NdbError::with_detail(
                738,
                format!("primary key of up to {pk_bytes} bytes is too long for a unique index"),
            ));
        }
        let mut defs: Vec<ColumnDef> = columns
            .iter()
            .map(|&c| base.info.def.columns[c].as_key())
            .collect();
        defs.push(ColumnDef::new(
            UNIQUE_PK_COLUMN,
            ColumnType::Varbinary(pk_bytes.max(1) as u16),
        ));
        let def = TableDef::new(&format!("NDB$INDEX_{index_id}_UI"), defs);
        def.validate()
            .map_err(|(code, detail)| NdbError::with_detail(code, detail))?;
        Ok(def)
    }

    /// Drops an index; returns it (with its hidden table id, whose fragments go too).
    pub fn drop_index(&mut self, table: &str, name: &str) -> Result<Index, NdbError> {
        let index = self.index_by_name(table, name)?.clone();
        self.remove_index(index.info.index_id);
        Ok(index)
    }

    /// Forgets an index by id (also used to undo a failed ordered-index build).
    pub fn remove_index(&mut self, index_id: u32) {
        let Some(index) = self.indexes.remove(&index_id) else {
            return;
        };
        if let Some(hidden) = index.hidden_table_id {
            self.tables.remove(&hidden);
        }
        if let Some(table) = self.tables.get_mut(&index.info.table_id) {
            table.unique.retain(|u| u.index_id != index_id);
            table.ordered.retain(|o| o.index_id != index_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rndb_protocol::BlobSize;

    fn with_blobs() -> TableDef {
        TableDef::new(
            "t",
            vec![
                ColumnDef::key("k", ColumnType::Int32),
                ColumnDef::nullable("b", ColumnType::Blob(BlobSize::Blob)),
                ColumnDef::new("tiny", ColumnType::Text(BlobSize::Tiny)),
                ColumnDef::nullable("t", ColumnType::Text(BlobSize::Long)),
            ],
        )
    }

    /// A table's BLOB and TEXT columns get parts tables (not the TINY one), named for API
    /// nodes, unlisted, dropped with it and not alone; they count towards MaxNoOfTables.
    #[test]
    fn blob_parts_tables_come_and_go_with_their_table() {
        let mut dict = Dict::new(10, 10, 10, 1000);
        let table = dict.create(with_blobs(), 2).expect("created");
        let (id, parts) = (table.info.table_id, table.parts.clone());
        assert_eq!(parts, vec![id + 1, id + 2], "the next ids, in column order");
        let b = dict
            .by_name(&blob::parts_table_name(id, 1))
            .expect("b's parts");
        assert_eq!((b.info.table_id, b.parts_of), (id + 1, Some(id)));
        assert_eq!(
            b.info.def.columns[2].column_type,
            ColumnType::Varbinary(2000)
        );
        let t = dict
            .by_name(&blob::parts_table_name(id, 3))
            .expect("t's parts");
        assert_eq!(
            t.info.def.columns[2].column_type,
            ColumnType::Varbinary(8000)
        );
        let listed: Vec<u32> = dict.list(0).objects.iter().map(|o| o.id).collect();
        assert_eq!(listed, vec![id], "parts tables are not listed");
        let refused = dict.drop_table(&blob::parts_table_name(id, 1));
        assert_eq!(refused.map_err(|e| e.code), Err(4264));
        let name = blob::parts_table_name(id, 1);
        let user = TableDef::new(&name, vec![ColumnDef::key("k", ColumnType::Int32)]);
        assert_eq!(
            dict.create(user, 2).map(|_| ()).map_err(|e| e.code),
            Err(4241)
        );
        assert_eq!(dict.drop_table("t"), Ok((id, vec![id + 1, id + 2])));
        assert!(dict.by_name(&name).is_err() && dict.get(id + 1).is_none());
        // Three tables in all: one more than MaxNoOfTables=2 allows.
        let mut small = Dict::new(2, 10, 10, 1000);
        assert_eq!(
            small
                .create(with_blobs(), 2)
                .map(|_| ())
                .map_err(|e| e.code),
            Err(826)
        );
        assert!(small.by_name("t").is_err(), "nothing was created");
    }

    /// A table whose parts tables would break a table's limits is refused, and nothing of
    /// it is created: a key column named as a parts table's own column, a key that leaves no
    /// room for the part number and the data (columns, row size).
    #[test]
    fn a_table_whose_parts_tables_would_be_invalid_is_refused() {
        let blob = || ColumnDef::nullable("b", ColumnType::Blob(BlobSize::Long));
        let clash = TableDef::new(
            "clash",
            vec![ColumnDef::key(blob::PART_COLUMN, ColumnType::Int32), blob()],
        );
        let mut many: Vec<ColumnDef> = (0..127)
            .map(|i| ColumnDef::key(&format!("k{i}"), ColumnType::Int32))
            .collect();
        many.push(blob());
        let many = TableDef::new("many", many);
        let long_key = TableDef::new(
            "long_key",
            vec![ColumnDef::key("k", ColumnType::Varbinary(7000)), blob()],
        );
        for def in [clash, many, long_key] {
            assert!(def.validate().is_ok(), "{} itself is valid", def.name);
            let mut dict = Dict::new(10, 10, 10, 10_000);
            let name = def.name.clone();
            let refused = dict.create(def, 2).map(|_| ()).map_err(|e| e.code);
            assert!(refused.is_err(), "{name}: created");
            assert!(dict.by_name(&name).is_err() && dict.table_ids().is_empty());
            let parts = dict.by_name(&blob::parts_table_name(1, 1));
            assert!(parts.is_err(), "{name}: a parts table");
        }
    }

    /// No index may hold a BLOB or TEXT column, and neither may a primary key.
    #[test]
    fn blob_columns_are_in_no_key_or_index() {
        let mut dict = Dict::new(10, 10, 10, 1000);
        dict.create(with_blobs(), 2).expect("created");
        for kind in [IndexKind::Ordered, IndexKind::Unique] {
            let req = CreateIndexReq {
                table: "t".into(),
                index: "ix".into(),
                kind,
                columns: vec!["tiny".into()],
            };
            let refused = dict.create_index(&req, 2).map(|_| ()).map_err(|e| e.code);
            assert_eq!(refused, Err(4264));
        }
        let keyed = TableDef::new(
            "u",
            vec![ColumnDef::key("b", ColumnType::Blob(BlobSize::Blob))],
        );
        assert_eq!(
            dict.create(keyed, 2).map(|_| ()).map_err(|e| e.code),
            Err(4264)
        );
    }
}
