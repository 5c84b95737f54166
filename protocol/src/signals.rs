//! Signal numbers and payloads.
//!
//! A transaction is named by the frame header's request id (chosen by the API node, unique per
//! connection). Operations travel as one `TcKeyReq` each; the `TcExecuteReq` that follows them
//! says how many were sent and what to do at the end (NoCommit, Commit, Rollback). The data node
//! answers each read with a `TcKeyRow`, each operation error with a `TcKeyRef`, and the execute
//! as a whole with `TcExecuteConf` or `TcExecuteRef`; when a read's row is the execute's last
//! answer and the execute succeeded, one TCKEY_ROW_CONF carries both (the row, then a commit's
//! GCI). All of an execute's signals go out in one flush, so a batch costs one round trip.

use crate::codec::{DecodeError, Reader, Writer};
use crate::interpreter::Program;
use crate::schema::{
    decode_values, decode_values_into, encode_values, skip_values, AbortOption, ExecType,
    IndexKind, LockMode, OperationType, TableDef, Value, COLUMNS_MAX, NAME_BYTES_MAX,
};

/// Signal numbers: one list for every signal, in [`crate::gsn`].
pub use crate::gsn;

/// Block numbers, as NDB numbers its kernel blocks. API-side receivers use `API`.
pub mod block {
    pub const DBTC: u16 = 245;
    pub const DBDIH: u16 = 246;
    pub const DBLQH: u16 = 247;
    pub const DBACC: u16 = 248;
    pub const DBTUP: u16 = 249;
    pub const DBDICT: u16 = 250;
    pub const QMGR: u16 = 252;
    pub const DBINFO: u16 = 263;
    pub const SUMA: u16 = 257;
    pub const API: u16 = 0x8000;
}

/// Flag on `TcKeyReq` and `TcExecuteReq`: this is the first signal of a new transaction.
pub const FLAG_START_TRANSACTION: u8 = 1;
/// Flag on a TCKEYREQ or TCINDXREQ (NDB's TcKeyReq execute flag): this operation is the last of
/// its execute, which it ends as a TC_EXECUTE_REQ would. The execute's flags, exec type and
/// abort option follow the attributes ([`EXECUTE_TRAILER_BYTES`]); its operation count is this
/// operation's `op_index + 1`. It saves an execute of one or more operations a frame.
pub const FLAG_EXECUTE: u8 = 2;
/// Bytes of the execute that a TCKEYREQ with [`FLAG_EXECUTE`] carries after its attributes:
/// flags u8, exec type u8, abort option u8.
pub const EXECUTE_TRAILER_BYTES: usize = 3;
/// Flag on `TcExecuteReq` (and on the execute a TCKEYREQ with [`FLAG_EXECUTE`] carries): a
/// durable commit. TC answers the commit only once the global checkpoint holding its GCI is
/// saved on every data node's disk, so that a system restart keeps it; an execute that does not
/// commit ignores it. Bit 2, clear of [`FLAG_EXECUTE`], which only a TCKEYREQ uses.
pub const FLAG_DURABLE_COMMIT: u8 = 4;
/// Flag on a TCKEYREQ (NDB's interpretedUpdateTuple): an update whose program
/// ([`crate::interpreter::Program`]) follows the attributes, before any execute trailer. Only
/// an update of a base table's row carries one.
pub const FLAG_INTERPRETED: u8 = 8;
/// `TcKeyReq::replica` for the primary replica (the default).
pub const REPLICA_PRIMARY: u8 = 0;
/// The op index meaning "no particular operation" in `TcExecuteRef`.
pub const OP_INDEX_NONE: u32 = u32::MAX;

/// A negative answer: NDB's error code and detail text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub code: u32,
    pub detail: String,
}

impl Refusal {
    pub fn encode(&self, out: &mut Vec<u8>) {
        Writer::new(out).u32(self.code).str16(&self.detail);
    }
    pub fn decode(buf: &[u8]) -> Result<Refusal, DecodeError> {
        let mut r = Reader::new(buf, "Ref");
        let refusal = Refusal {
            code: r.u32()?,
            detail: r.str16()?.to_string(),
        };
        r.finish()?;
        Ok(refusal)
    }
}

/// Names a table in a request.
pub fn encode_name(out: &mut Vec<u8>, name: &str) {
    Writer::new(out).str16(name);
}

pub fn decode_name(buf: &[u8]) -> Result<String, DecodeError> {
    let mut r = Reader::new(buf, "table name");
    let name = r.str16()?.to_string();
    r.finish()?;
    Ok(name)
}

/// LIST_TABLES_REQ: the dictionary's objects whose id is `from_id` or more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListTablesReq {
    pub from_id: u32,
}

impl ListTablesReq {
    pub fn encode(&self, out: &mut Vec<u8>) {
        Writer::new(out).u32(self.from_id);
    }
    pub fn decode(buf: &[u8]) -> Result<ListTablesReq, DecodeError> {
        let mut r = Reader::new(buf, "LIST_TABLES_REQ");
        let from_id = r.u32()?;
        r.finish()?;
        Ok(ListTablesReq { from_id })
    }
}

/// NDB's system tables, which the API nodes create when they first need them: the
/// auto-increment counters and the named events. They list as [`ObjectKind::SystemTable`].
pub const SYSTEM_TABLES: [&str; 2] = ["SYSTAB_0", "NDB$EVENTS_0"];

/// The kind of a dictionary object, numbered as NDB's `NdbDictionary::Object::Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectKind {
    SystemTable = 1,
    UserTable = 2,
    UniqueHashIndex = 3,
    OrderedIndex = 6,
}

impl ObjectKind {
    pub fn from_u8(v: u8) -> Option<ObjectKind> {
        match v {
            1 => Some(ObjectKind::SystemTable),
            2 => Some(ObjectKind::UserTable),
            3 => Some(ObjectKind::UniqueHashIndex),
            6 => Some(ObjectKind::OrderedIndex),
            _ => None,
        }
    }
    /// NDB's name of the type, as `ndb_show_tables` prints it.
    pub fn name(self) -> &'static str {
        match self {
            ObjectKind::SystemTable => "SystemTable",
            ObjectKind::UserTable => "UserTable",
            ObjectKind::UniqueHashIndex => "UniqueHashIndex",
            ObjectKind::OrderedIndex => "OrderedIndex",
        }
    }
}

/// One object of LIST_TABLES_CONF.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedObject {
    /// The table id, or the index id (ids share one space).
    pub id: u32,
    pub kind: ObjectKind,
    /// An index's table; 0 for a table.
    pub parent_id: u32,
    pub name: String,
}

/// Objects in one LIST_TABLES_CONF at most: each takes at most 11 bytes and a name of
/// [`NAME_BYTES_MAX`], so a page stays well inside a 32 KiB frame.
pub const LIST_TABLES_OBJECTS_MAX: usize = 128;

const _: () = assert!(3 + LIST_TABLES_OBJECTS_MAX * (11 + NAME_BYTES_MAX) <= 24 * 1024);

/// LIST_TABLES_CONF: objects in id order; `more` when objects past the last one remain (ask
/// again from its id + 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListTablesConf {
    pub objects: Vec<ListedObject>,
    pub more: bool,
}

impl ListTablesConf {
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer::new(out);
        w.u16(self.objects.len() as u16);
        for object in &self.objects {
            w.u32(object.id)
                .u8(object.kind as u8)
                .u32(object.parent_id)
                .str16(&object.name);
        }
        w.u8(u8::from(self.more));
    }
    pub fn decode(buf: &[u8]) -> Result<ListTablesConf, DecodeError> {
        let mut r = Reader::new(buf, "LIST_TABLES_CONF");
        let count = usize::from(r.u16()?);
        if count > LIST_TABLES_OBJECTS_MAX {
            return Err(r.error(format!(
                "{count} objects, at most {LIST_TABLES_OBJECTS_MAX}"
            )));
        }
        let mut objects = Vec::with_capacity(count);
        for _ in 0..count {
            let id = r.u32()?;
            let tag = r.u8()?;
            let kind =
                ObjectKind::from_u8(tag).ok_or_else(|| r.error(format!("object type {tag}")))?;
            let parent_id = r.u32()?;
            let name = r.str16()?.to_string();
            objects.push(ListedObject {
                id,
                kind,
                parent_id,
                name,
            });
        }
        let more = r.u8()? != 0;
        r.finish()?;
        Ok(ListTablesConf { objects, more })
    }
}

/// CREATE_TABLE_REQ carries a `TableDef`; GET_TABINFO_CONF carries id, version and definition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableInfo {
    pub table_id: u32,
    pub table_version: u32,
    pub def: TableDef,
}

impl TableInfo {
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer::new(out);
        w.u32(self.table_id).u32(self.table_version);
        self.def.encode(&mut w);
    }
    pub fn decode(buf: &[u8]) -> Result<TableInfo, DecodeError> {
        let mut r = Reader::new(buf, "TableInfo");
        let table_id = r.u32()?;
        let table_version = r.u32()?;
        let def = TableDef::decode(&mut r)?;
        r.finish()?;
        Ok(TableInfo {
            table_id,
            table_version,
            def,
        })
    }
}

pub fn encode_table_def(out: &mut Vec<u8>, def: &TableDef) {
    def.encode(&mut Writer::new(out));
}

pub fn decode_table_def(buf: &[u8]) -> Result<TableDef, DecodeError> {
    let mut r = Reader::new(buf, "TableDef");
    let def = TableDef::decode(&mut r)?;
    r.finish()?;
    Ok(def)
}

/// The most columns an index may have.
pub const INDEX_COLUMNS_MAX: usize = 32;

/// CREATE_INDEX_REQ: an index on a table, by names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateIndexReq {
    pub table: String,
    pub index: String,
    pub kind: IndexKind,
    /// Column names, in index order.
    pub columns: Vec<String>,
}

impl CreateIndexReq {
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer::new(out);
        w.str16(&self.table)
            .str16(&self.index)
            .u8(self.kind.to_u8())
            .u16(self.columns.len() as u16);
        for c in &self.columns {
            w.str16(c);
        }
    }
    pub fn decode(buf: &[u8]) -> Result<CreateIndexReq, DecodeError> {
        let mut r = Reader::new(buf, "CREATE_INDEX_REQ");
        let table = r.str16()?.to_string();
        let index = r.str16()?.to_string();
        let kind = IndexKind::from_u8(r.u8()?).ok_or_else(|| r.error("unknown index kind"))?;
        let count = usize::from(r.u16()?);
        if count > INDEX_COLUMNS_MAX {
            return Err(r.error(format!("{count} columns, at most {INDEX_COLUMNS_MAX}")));
        }
        let columns = (0..count)
            .map(|_| r.str16().map(str::to_string))
            .collect::<Result<_, _>>()?;
        r.finish()?;
        Ok(CreateIndexReq {
            table,
            index,
            kind,
            columns,
        })
    }
}

/// DROP_INDEX_REQ and GET_INDEX_REQ: an index named by its table and its own name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexName {
    pub table: String,
    pub index: String,
}

impl IndexName {
    pub fn encode(&self, out: &mut Vec<u8>) {
        Writer::new(out).str16(&self.table).str16(&self.index);
    }
    pub fn decode(buf: &[u8]) -> Result<IndexName, DecodeError> {
        let mut r = Reader::new(buf, "index name");
        let v = IndexName {
            table: r.str16()?.to_string(),
            index: r.str16()?.to_string(),
        };
        r.finish()?;
        Ok(v)
    }
}

/// CREATE_INDEX_CONF and GET_INDEX_CONF: the index as operations name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexInfo {
    pub index_id: u32,
    pub index_version: u32,
    pub table_id: u32,
    pub table_version: u32,
    pub kind: IndexKind,
    pub name: String,
    /// Positions of the indexed columns in the table, in index order.
    pub columns: Vec<u16>,
}

impl IndexInfo {
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer::new(out);
        w.u32(self.index_id)
            .u32(self.index_version)
            .u32(self.table_id)
            .u32(self.table_version)
            .u8(self.kind.to_u8())
            .str16(&self.name)
            .u16(self.columns.len() as u16);
        for c in &self.columns {
            w.u16(*c);
        }
    }
    pub fn decode(buf: &[u8]) -> Result<IndexInfo, DecodeError> {
        let mut r = Reader::new(buf, "IndexInfo");
        let index_id = r.u32()?;
        let index_version = r.u32()?;
        let table_id = r.u32()?;
        let table_version = r.u32()?;
        let kind = IndexKind::from_u8(r.u8()?).ok_or_else(|| r.error("unknown index kind"))?;
        let name = r.str16()?.to_string();
        if name.len() > NAME_BYTES_MAX {
            return Err(r.error("index name too long"));
        }
        let count = usize::from(r.u16()?);
        if count > INDEX_COLUMNS_MAX {
            return Err(r.error(format!("{count} columns, at most {INDEX_COLUMNS_MAX}")));
        }
        let columns = (0..count).map(|_| r.u16()).collect::<Result<_, _>>()?;
        r.finish()?;
        Ok(IndexInfo {
            index_id,
            index_version,
            table_id,
            table_version,
            kind,
            name,
            columns,
        })
    }
}

/// One key operation of a transaction.
#[derive(Clone, Debug, PartialEq)]
pub struct TcKeyReq {
    /// `FLAG_START_TRANSACTION` or 0.
    pub flags: u8,
    /// Position of this operation in the execute (0-based), echoed in answers.
    pub op_index: u32,
    pub op_type: OperationType,
    pub lock_mode: LockMode,
    pub table_id: u32,
    pub table_version: u32,
    /// Which replica serves a CommittedRead: [`REPLICA_PRIMARY`], or the n-th replica of the
    /// key's partition (1 = first backup). Other operations always run on the primary.
    pub replica: u8,
    /// Primary-key values in key-column order.
    pub key: Vec<Value>,
    /// Non-key values to set: (column position, value).
    pub attrs: Vec<(u16, Value)>,
    /// An interpreted update's program ([`FLAG_INTERPRETED`] on the wire).
    pub program: Option<Program>,
}

/// A [`TcKeyReq`] that borrows its key and values: what the API encodes from the caller's
/// slices without copying them first.
#[derive(Clone, Copy, Debug)]
pub struct TcKeyReqRef<'a> {
    pub flags: u8,
    pub op_index: u32,
    pub op_type: OperationType,
    pub lock_mode: LockMode,
    pub table_id: u32,
    pub table_version: u32,
    pub replica: u8,
    pub key: &'a [Value],
    pub attrs: &'a [(u16, Value)],
    pub program: Option<&'a Program>,
}

impl TcKeyReqRef<'_> {
    /// Numbers an encoded TCKEYREQ or TCINDXREQ (`payload`) again as operation `op_index` of
    /// its execute: the field after the flags byte, in place. An execute whose batch the API
    /// splits (a write of a row with parts resolved at execute) numbers the rest from 0.
    pub fn set_op_index(payload: &mut [u8], op_index: u32) {
        if let Some(field) = payload.get_mut(1..5) {
            field.copy_from_slice(&op_index.to_le_bytes());
        }
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer::new(out);
        let flags = match self.program {
            Some(_) => self.flags | FLAG_INTERPRETED,
            None => self.flags & !FLAG_INTERPRETED,
        };
        w.u8(flags)
            .u32(self.op_index)
            .u8(self.op_type.to_u8())
            .u8(self.lock_mode.to_u8())
            .u32(self.table_id)
            .u32(self.table_version)
            .u8(self.replica);
        encode_values(&mut w, self.key);
        w.u16(self.attrs.len() as u16);
        for (column, value) in self.attrs {
            w.u16(*column);
            value.encode(&mut w);
        }
        if let Some(program) = self.program {
            program.encode(&mut w);
        }
    }
}

impl TcKeyReq {
    /// The first operation of a new transaction: a read of the row with primary key `key`
    /// under a shared lock, from the primary replica.
    pub fn first_read(table_id: u32, table_version: u32, key: Vec<Value>) -> TcKeyReq {
        TcKeyReq {
            flags: FLAG_START_TRANSACTION,
            op_index: 0,
            op_type: OperationType::Read,
            lock_mode: LockMode::Read,
            table_id,
            table_version,
            replica: REPLICA_PRIMARY,
            key,
            attrs: Vec::new(),
            program: None,
        }
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        TcKeyReqRef {
            flags: self.flags,
            op_index: self.op_index,
            op_type: self.op_type,
            lock_mode: self.lock_mode,
            table_id: self.table_id,
            table_version: self.table_version,
            replica: self.replica,
            key: &self.key,
            attrs: &self.attrs,
            program: self.program.as_ref(),
        }
        .encode(out)
    }

    pub fn decode(buf: &[u8]) -> Result<TcKeyReq, DecodeError> {
        TcKeyReqView::decode(buf).map(|view| view.to_owned())
    }
}

/// Bytes of a TCKEYREQ before its key: flags u8, op_index u32, op_type u8, lock_mode u8,
/// table_id u32, table_version u32, replica u8.
const TCKEYREQ_HEAD_BYTES: usize = 16;

/// A TCKEYREQ read in place: every field checked as [`TcKeyReq::decode`] checks it, the key
/// and attribute values left encoded. The data node decodes them only for an operation that
/// needs them (a read needs only the canonical key, see `schema::canonical_key`).
///
/// The fixed fields are read from the frame when asked for, not copied out: a view holding
/// them as fields was stored field by field and then copied whole by wider loads (LLVM merges
/// neighbouring `u32`s), a store-forwarding stall on every operation in the data node.
#[derive(Clone, Copy, Debug)]
pub struct TcKeyReqView<'a> {
    head: &'a [u8; TCKEYREQ_HEAD_BYTES],
    /// The key values, as [`encode_values`] writes them.
    pub key: &'a [u8],
    /// The attributes: a u16 count, then (column u16 · value)*.
    pub attrs: &'a [u8],
    /// With [`FLAG_INTERPRETED`]: the program, as [`Program::encode`] writes it (checked by
    /// `decode`).
    pub program: Option<&'a [u8]>,
    /// With [`FLAG_EXECUTE`]: the execute this operation ends (checked by `decode`).
    execute_trailer: Option<&'a [u8; EXECUTE_TRAILER_BYTES]>,
}

impl<'a> TcKeyReqView<'a> {
    /// Inlined: the data node decodes one per operation.
    #[inline]
    pub fn decode(buf: &'a [u8]) -> Result<TcKeyReqView<'a>, DecodeError> {
        let mut r = Reader::new(buf, "TCKEYREQ");
        let head_bytes = r.rest();
        r.u8()?;
        r.u32()?;
        OperationType::from_u8(r.u8()?).ok_or_else(|| r.error("unknown operation type"))?;
        LockMode::from_u8(r.u8()?).ok_or_else(|| r.error("unknown lock mode"))?;
        r.u32()?;
        r.u32()?;
        r.u8()?;
        let Some(head) = head_bytes.first_chunk::<TCKEYREQ_HEAD_BYTES>() else {
            return Err(r.error("short head"));
        };
        let key = skip_values(&mut r, COLUMNS_MAX)?;
        let attrs_start = r.rest();
        let attr_count = usize::from(r.u16()?);
        if attr_count > COLUMNS_MAX {
            return Err(r.error(format!("{attr_count} attributes, at most {COLUMNS_MAX}")));
        }
        for _ in 0..attr_count {
            r.u16()?;
            Value::skip(&mut r)?;
        }
        let attrs = &attrs_start[..attrs_start.len() - r.rest().len()];
        let program = if head[0] & FLAG_INTERPRETED != 0 {
            let program_start = r.rest();
            Program::decode(&mut r)?;
            Some(&program_start[..program_start.len() - r.rest().len()])
        } else {
            None
        };
        let execute_trailer = if head[0] & FLAG_EXECUTE != 0 {
            let trailer = r.rest().first_chunk::<EXECUTE_TRAILER_BYTES>();
            r.u8()?;
            ExecType::from_u8(r.u8()?).ok_or_else(|| r.error("unknown exec type"))?;
            AbortOption::from_u8(r.u8()?).ok_or_else(|| r.error("unknown abort option"))?;
            trailer
        } else {
            None
        };
        r.finish()?;
        Ok(TcKeyReqView {
            head,
            key,
            attrs,
            program,
            execute_trailer,
        })
    }

    /// The execute this operation ends ([`FLAG_EXECUTE`]), or `None`.
    #[inline]
    pub fn execute(&self) -> Option<TcExecuteReq> {
        let [flags, exec_type, abort_option] = *self.execute_trailer?;
        // `decode` checked both bytes, so the fallbacks are never taken.
        Some(TcExecuteReq {
            flags,
            exec_type: ExecType::from_u8(exec_type).unwrap_or(ExecType::Rollback),
            abort_option: AbortOption::from_u8(abort_option).unwrap_or(AbortOption::AbortOnError),
            op_count: self.op_index().saturating_add(1),
        })
    }

    fn head_u32(&self, at: usize) -> u32 {
        let mut bytes = [0; 4];
        bytes.copy_from_slice(&self.head[at..at + 4]);
        u32::from_le_bytes(bytes)
    }

    #[inline]
    pub fn flags(&self) -> u8 {
        self.head[0]
    }

    #[inline]
    pub fn op_index(&self) -> u32 {
        self.head_u32(1)
    }

    /// `decode` checked the byte, so the fallback is never taken.
    #[inline]
    pub fn op_type(&self) -> OperationType {
        OperationType::from_u8(self.head[5]).unwrap_or(OperationType::Read)
    }

    /// `decode` checked the byte, so the fallback is never taken.
    #[inline]
    pub fn lock_mode(&self) -> LockMode {
        LockMode::from_u8(self.head[6]).unwrap_or(LockMode::CommittedRead)
    }

    #[inline]
    pub fn table_id(&self) -> u32 {
        self.head_u32(7)
    }

    #[inline]
    pub fn table_version(&self) -> u32 {
        self.head_u32(11)
    }

    #[inline]
    pub fn replica(&self) -> u8 {
        self.head[15]
    }

    /// True when the operation names attributes (their count, the first two bytes, is not
    /// zero): a read names none.
    #[inline]
    pub fn has_attrs(&self) -> bool {
        self.attrs.get(..2).is_some_and(|count| count != [0, 0])
    }

    /// The key values (`decode` checked them, so this finds every one).
    pub fn key_values(&self) -> Vec<Value> {
        let values = decode_values(&mut Reader::new(self.key, "TCKEYREQ key"), COLUMNS_MAX);
        debug_assert!(values.is_ok(), "key values decode checked: {values:?}");
        values.unwrap_or_default()
    }

    /// The (column, value) attributes (`decode` checked them, so this finds every one).
    pub fn attr_values(&self) -> Vec<(u16, Value)> {
        let mut r = Reader::new(self.attrs, "TCKEYREQ attributes");
        let count = r.u16().map_or(0, usize::from);
        let mut attrs = Vec::with_capacity(count);
        for _ in 0..count {
            let column = r.u16();
            match (column, Value::decode(&mut r)) {
                (Ok(column), Ok(value)) => attrs.push((column, value)),
                _ => {
                    debug_assert!(false, "attributes decode checked");
                    break;
                }
            }
        }
        attrs
    }

    /// The interpreted update's program (`decode` checked it), or `None`.
    pub fn program(&self) -> Option<Program> {
        let program = Program::decode(&mut Reader::new(self.program?, "TCKEYREQ program"));
        debug_assert!(program.is_ok(), "program decode checked: {program:?}");
        program.ok()
    }

    pub fn to_owned(&self) -> TcKeyReq {
        TcKeyReq {
            // The execute it may end is not part of the operation, and the program is its own
            // field.
            flags: self.flags() & !(FLAG_EXECUTE | FLAG_INTERPRETED),
            op_index: self.op_index(),
            op_type: self.op_type(),
            lock_mode: self.lock_mode(),
            table_id: self.table_id(),
            table_version: self.table_version(),
            replica: self.replica(),
            key: self.key_values(),
            attrs: self.attr_values(),
            program: self.program(),
        }
    }
}

/// The row a read found (NDB's TRANSID_AI): every column, in column order.
#[derive(Clone, Debug, PartialEq)]
pub struct TcKeyRow {
    pub op_index: u32,
    pub values: Vec<Value>,
}

impl TcKeyRow {
    /// Encodes without building a `TcKeyRow` (the data node writes straight from storage).
    pub fn encode_parts(out: &mut Vec<u8>, op_index: u32, values: &[Value]) {
        let mut w = Writer::new(out);
        w.u32(op_index);
        encode_values(&mut w, values);
    }
    /// Encodes a row whose values are already encoded as [`encode_values`] writes them (the
    /// data node stores rows that way): the bytes are copied as they are.
    pub fn encode_encoded(out: &mut Vec<u8>, op_index: u32, encoded_values: &[u8]) {
        out.extend_from_slice(&op_index.to_le_bytes());
        out.extend_from_slice(encoded_values);
    }

    #[inline]
    pub fn decode(buf: &[u8]) -> Result<TcKeyRow, DecodeError> {
        let op_index = Self::op_index_of(buf)?;
        let mut values = Vec::new();
        Self::decode_into(buf, &mut values)?;
        Ok(TcKeyRow { op_index, values })
    }

    /// The operation a TCKEY_ROW answers, read before its values (see [`Self::decode_into`]).
    #[inline]
    pub fn op_index_of(buf: &[u8]) -> Result<u32, DecodeError> {
        Reader::new(buf, "TCKEY_ROW").u32()
    }

    /// Decodes the row's values onto the end of `values` (where the row is kept), checking the
    /// whole frame as [`Self::decode`] does.
    #[inline]
    pub fn decode_into(buf: &[u8], values: &mut Vec<Value>) -> Result<(), DecodeError> {
        let mut r = Reader::new(buf, "TCKEY_ROW");
        r.u32()?;
        decode_values_into(&mut r, COLUMNS_MAX, values)?;
        r.finish()
    }

    /// As [`Self::decode_into`], for a row of table `def`: a row that does not fit the table
    /// (see [`TableDef::decode_row_into`]) is a decode error.
    #[inline]
    pub fn decode_row_into(
        buf: &[u8],
        def: &TableDef,
        values: &mut Vec<Value>,
    ) -> Result<(), DecodeError> {
        let mut r = Reader::new(buf, "TCKEY_ROW");
        r.u32()?;
        def.decode_row_into(&mut r, values)?;
        r.finish()
    }

    /// Encodes a TCKEY_ROW_CONF: the row as [`Self::encode_encoded`] writes it, then the
    /// commit's GCI when there is one (as TC_EXECUTE_CONF carries it, see [`TcExecuteConf`]).
    pub fn encode_encoded_conf(
        out: &mut Vec<u8>,
        op_index: u32,
        encoded_values: &[u8],
        gci: Option<u64>,
    ) {
        Self::encode_encoded(out, op_index, encoded_values);
        TcExecuteConf { gci }.encode(out);
    }

    /// Decodes a TCKEY_ROW_CONF: the row, and the commit's GCI when it carries one.
    pub fn decode_conf(buf: &[u8]) -> Result<(TcKeyRow, Option<u64>), DecodeError> {
        let mut r = Reader::new(buf, "TCKEY_ROW_CONF");
        let op_index = r.u32()?;
        let mut values = Vec::new();
        decode_values_into(&mut r, COLUMNS_MAX, &mut values)?;
        let gci = decode_gci_tail(&mut r)?;
        Ok((TcKeyRow { op_index, values }, gci))
    }

    /// As [`Self::decode_row_into`], for a TCKEY_ROW_CONF: returns the commit's GCI when it
    /// carries one.
    #[inline]
    pub fn decode_row_conf_into(
        buf: &[u8],
        def: &TableDef,
        values: &mut Vec<Value>,
    ) -> Result<Option<u64>, DecodeError> {
        let mut r = Reader::new(buf, "TCKEY_ROW_CONF");
        r.u32()?;
        def.decode_row_into(&mut r, values)?;
        decode_gci_tail(&mut r)
    }
}

/// The end of a TC_EXECUTE_CONF or a TCKEY_ROW_CONF: nothing, or a commit's GCI (never 0) and
/// nothing after it.
#[inline]
fn decode_gci_tail(r: &mut Reader<'_>) -> Result<Option<u64>, DecodeError> {
    if r.remaining() == 0 {
        return Ok(None);
    }
    let gci = r.u64()?;
    if gci == 0 {
        return Err(r.error("GCI 0"));
    }
    r.finish()?;
    Ok(Some(gci))
}

/// One operation failed (sent for every failed operation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcKeyRef {
    pub op_index: u32,
    pub code: u32,
}

impl TcKeyRef {
    pub fn encode(&self, out: &mut Vec<u8>) {
        Writer::new(out).u32(self.op_index).u32(self.code);
    }
    pub fn decode(buf: &[u8]) -> Result<TcKeyRef, DecodeError> {
        let mut r = Reader::new(buf, "TCKEYREF");
        let v = TcKeyRef {
            op_index: r.u32()?,
            code: r.u32()?,
        };
        r.finish()?;
        Ok(v)
    }
}

/// Ends a batch of operations: how many were sent and what to do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcExecuteReq {
    pub flags: u8,
    pub exec_type: ExecType,
    pub abort_option: AbortOption,
    /// Operations sent in this execute (the data node checks none went missing).
    pub op_count: u32,
}

impl TcExecuteReq {
    /// Makes the TCKEYREQ (or TCINDXREQ) payload at `out[key_req_start..]`, the last thing in
    /// `out`, end this execute instead of a TC_EXECUTE_REQ frame ([`FLAG_EXECUTE`]). Its
    /// `op_count` must be that operation's `op_index + 1`.
    pub fn append_to_key_req(&self, out: &mut Vec<u8>, key_req_start: usize) {
        out[key_req_start] |= FLAG_EXECUTE;
        out.extend_from_slice(&[
            self.flags,
            self.exec_type.to_u8(),
            self.abort_option.to_u8(),
        ]);
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        Writer::new(out)
            .u8(self.flags)
            .u8(self.exec_type.to_u8())
            .u8(self.abort_option.to_u8())
            .u32(self.op_count);
    }
    pub fn decode(buf: &[u8]) -> Result<TcExecuteReq, DecodeError> {
        let mut r = Reader::new(buf, "TC_EXECUTE_REQ");
        let flags = r.u8()?;
        let exec_type = ExecType::from_u8(r.u8()?).ok_or_else(|| r.error("unknown exec type"))?;
        let abort_option =
            AbortOption::from_u8(r.u8()?).ok_or_else(|| r.error("unknown abort option"))?;
        let op_count = r.u32()?;
        r.finish()?;
        Ok(TcExecuteReq {
            flags,
            exec_type,
            abort_option,
            op_count,
        })
    }
}

/// The execute succeeded (TC_EXECUTE_CONF). The payload is empty, or, when the execute
/// committed a transaction that wrote, the commit's GCI u64 (checkpoint in the high word,
/// epoch in the low; NDB's `NdbTransaction::getGCI`). Only such commits carry it: the answers
/// of NoCommit and Rollback executes, and of read-only commits (whose GCI would name no
/// change, as NDB's names none), stay as short as they can.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcExecuteConf {
    /// The GCI the execute committed in; never 0 (`None` encodes as an empty payload).
    pub gci: Option<u64>,
}

impl TcExecuteConf {
    pub fn encode(&self, out: &mut Vec<u8>) {
        if let Some(gci) = self.gci {
            debug_assert!(gci != 0, "GCI 0 names no checkpoint");
            Writer::new(out).u64(gci);
        }
    }
    pub fn decode(buf: &[u8]) -> Result<TcExecuteConf, DecodeError> {
        let mut r = Reader::new(buf, "TC_EXECUTE_CONF");
        let gci = decode_gci_tail(&mut r)?;
        Ok(TcExecuteConf { gci })
    }
}

/// The execute failed as a whole; the transaction is aborted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcExecuteRef {
    pub code: u32,
    /// The operation that caused it, or `OP_INDEX_NONE`.
    pub op_index: u32,
    pub detail: String,
}

impl TcExecuteRef {
    pub fn encode(&self, out: &mut Vec<u8>) {
        Writer::new(out)
            .u32(self.code)
            .u32(self.op_index)
            .str16(&self.detail);
    }
    pub fn decode(buf: &[u8]) -> Result<TcExecuteRef, DecodeError> {
        let mut r = Reader::new(buf, "TC_EXECUTE_REF");
        let v = TcExecuteRef {
            code: r.u32()?,
            op_index: r.u32()?,
            detail: r.str16()?.to_string(),
        };
        r.finish()?;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{ColumnDef, ColumnType};

    #[test]
    fn list_tables_round_trips() {
        let req = ListTablesReq { from_id: 7 };
        let mut buf = Vec::new();
        req.encode(&mut buf);
        assert_eq!(ListTablesReq::decode(&buf), Ok(req));
        let conf = ListTablesConf {
            objects: vec![
                ListedObject {
                    id: 3,
                    kind: ObjectKind::UserTable,
                    parent_id: 0,
                    name: "t".into(),
                },
                ListedObject {
                    id: 4,
                    kind: ObjectKind::OrderedIndex,
                    parent_id: 3,
                    name: "by_x".into(),
                },
            ],
            more: true,
        };
        let mut buf = Vec::new();
        conf.encode(&mut buf);
        assert_eq!(ListTablesConf::decode(&buf), Ok(conf));
        buf[6] = 9; // the first object's type
        assert!(ListTablesConf::decode(&buf).is_err());
    }

    #[test]
    fn key_req_round_trips() {
        let req = TcKeyReq {
            flags: FLAG_START_TRANSACTION,
            op_index: 7,
            op_type: OperationType::Write,
            lock_mode: LockMode::Exclusive,
            table_id: 3,
            table_version: 1,
            replica: 1,
            key: vec![Value::UInt32(5), Value::Varchar("k".into())],
            attrs: vec![
                (2, Value::Null),
                (3, Value::Float64(1.5)),
                (4, Value::Varbinary(vec![1, 2])),
            ],
            program: None,
        };
        let mut buf = Vec::new();
        req.encode(&mut buf);
        assert_eq!(TcKeyReq::decode(&buf), Ok(req.clone()));
        assert!(TcKeyReq::decode(&buf[..buf.len() - 1]).is_err());
        // Numbered again in place, it decodes as the same request with its new index.
        TcKeyReqRef::set_op_index(&mut buf, 70_000);
        let renumbered = TcKeyReq {
            op_index: 70_000,
            ..req
        };
        assert_eq!(TcKeyReq::decode(&buf), Ok(renumbered));
    }

    /// An interpreted update's program travels between its attributes and its execute
    /// trailer, flagged; the flag without a program, or a program cut short, does not decode.
    #[test]
    fn key_req_carries_its_program() {
        let req = TcKeyReq {
            flags: FLAG_START_TRANSACTION,
            op_index: 0,
            op_type: OperationType::Update,
            lock_mode: LockMode::Exclusive,
            table_id: 3,
            table_version: 1,
            replica: 0,
            key: vec![Value::UInt32(5)],
            attrs: vec![(2, Value::Int32(1))],
            program: Some(Program {
                condition: Some(crate::filter::Filter::IsNotNull(3)),
                exit_code: 6000,
                changes: vec![(3, -2)],
            }),
        };
        let mut buf = Vec::new();
        req.encode(&mut buf);
        assert_eq!(buf[0], FLAG_START_TRANSACTION | FLAG_INTERPRETED);
        assert_eq!(TcKeyReq::decode(&buf), Ok(req.clone()));
        let execute = TcExecuteReq {
            flags: 0,
            exec_type: ExecType::Commit,
            abort_option: AbortOption::AbortOnError,
            op_count: 1,
        };
        let mut with_execute = buf.clone();
        execute.append_to_key_req(&mut with_execute, 0);
        let view = TcKeyReqView::decode(&with_execute).expect("decodes");
        assert_eq!(view.program(), req.program);
        assert_eq!(view.execute(), Some(execute));
        assert!(TcKeyReq::decode(&buf[..buf.len() - 1]).is_err(), "short");
        let plain = TcKeyReq {
            program: None,
            ..req
        };
        let mut flag_only = Vec::new();
        plain.encode(&mut flag_only);
        flag_only[0] |= FLAG_INTERPRETED;
        assert!(
            TcKeyReq::decode(&flag_only).is_err(),
            "flag without program"
        );
    }

    /// A TCKEYREQ that ends its execute carries the execute after its attributes; the view
    /// hands it back with the operation count its op index implies, the owned request drops
    /// it, and a short or unknown trailer does not decode.
    #[test]
    fn key_req_carries_its_execute() {
        let req = TcKeyReq {
            flags: FLAG_START_TRANSACTION,
            op_index: 2,
            op_type: OperationType::Read,
            lock_mode: LockMode::Read,
            table_id: 3,
            table_version: 1,
            replica: 0,
            key: vec![Value::UInt32(5)],
            attrs: vec![],
            program: None,
        };
        let execute = TcExecuteReq {
            flags: FLAG_START_TRANSACTION,
            exec_type: ExecType::Commit,
            abort_option: AbortOption::IgnoreError,
            op_count: 3,
        };
        let mut buf = vec![0xEE];
        req.encode(&mut buf);
        let plain = buf[1..].to_vec();
        execute.append_to_key_req(&mut buf, 1);
        let buf = &buf[1..];
        let view = TcKeyReqView::decode(buf).expect("decodes");
        assert_eq!(view.execute(), Some(execute));
        assert_eq!(view.flags(), FLAG_START_TRANSACTION | FLAG_EXECUTE);
        assert_eq!(TcKeyReq::decode(buf), Ok(req));
        assert_eq!(
            TcKeyReqView::decode(&plain).expect("decodes").execute(),
            None
        );
        assert!(
            TcKeyReqView::decode(&buf[..buf.len() - 1]).is_err(),
            "short trailer"
        );
        let mut unknown = buf.to_vec();
        let at = unknown.len() - 2;
        unknown[at] = 0xFF;
        assert!(TcKeyReqView::decode(&unknown).is_err(), "unknown exec type");
        let mut flag_only = plain.clone();
        flag_only[0] |= FLAG_EXECUTE;
        assert!(
            TcKeyReqView::decode(&flag_only).is_err(),
            "flag without trailer"
        );
    }

    /// TC_EXECUTE_CONF is empty unless the execute committed, then it names the GCI; a GCI of
    /// 0, a short one, or trailing bytes do not decode.
    #[test]
    fn execute_conf_carries_a_commits_gci() {
        let check = |conf: TcExecuteConf, bytes: &[u8]| {
            let mut buf = Vec::new();
            conf.encode(&mut buf);
            assert_eq!(buf, bytes);
            assert_eq!(TcExecuteConf::decode(bytes), Ok(conf));
        };
        check(TcExecuteConf { gci: None }, &[]);
        check(
            TcExecuteConf {
                gci: Some(5 << 32 | 2),
            },
            &[2, 0, 0, 0, 5, 0, 0, 0],
        );
        for bad in [&[0u8; 8][..], &[1, 0, 0], &[1, 0, 0, 0, 0, 0, 0, 0, 0]] {
            assert!(TcExecuteConf::decode(bad).is_err(), "{bad:?}");
        }
    }

    /// TCKEY_ROW_CONF is a TCKEY_ROW's payload, then a commit's GCI when there is one; a GCI
    /// of 0, a short one, or bytes after it do not decode, with or without the table.
    #[test]
    fn row_conf_carries_the_row_and_a_commits_gci() {
        let def = TableDef::new(
            "t",
            vec![
                ColumnDef::key("id", ColumnType::Int32),
                ColumnDef::new("v", ColumnType::Int64),
            ],
        );
        let values = vec![Value::Int32(7), Value::Int64(-1)];
        let mut encoded = Vec::new();
        encode_values(&mut Writer::new(&mut encoded), &values);
        for gci in [None, Some(5 << 32 | 2)] {
            let mut buf = Vec::new();
            TcKeyRow::encode_encoded_conf(&mut buf, 3, &encoded, gci);
            let mut row_only = Vec::new();
            TcKeyRow::encode_parts(&mut row_only, 3, &values);
            assert_eq!(buf[..row_only.len()], row_only[..], "the row comes first");
            assert_eq!(
                buf.len() - row_only.len(),
                if gci.is_some() { 8 } else { 0 }
            );
            let row = TcKeyRow {
                op_index: 3,
                values: values.clone(),
            };
            assert_eq!(TcKeyRow::decode_conf(&buf), Ok((row, gci)));
            let mut decoded = Vec::new();
            assert_eq!(
                TcKeyRow::decode_row_conf_into(&buf, &def, &mut decoded),
                Ok(gci)
            );
            assert_eq!(decoded, values);
        }
        let mut row_only = Vec::new();
        TcKeyRow::encode_parts(&mut row_only, 3, &values);
        for tail in [&[0u8; 8][..], &[1, 0, 0], &[1, 0, 0, 0, 0, 0, 0, 0, 0]] {
            let bad = [&row_only[..], tail].concat();
            assert!(TcKeyRow::decode_conf(&bad).is_err(), "{tail:?}");
            let mut decoded = Vec::new();
            assert!(
                TcKeyRow::decode_row_conf_into(&bad, &def, &mut decoded).is_err(),
                "{tail:?}"
            );
        }
    }

    #[test]
    fn table_info_round_trips() {
        let def = TableDef::new(
            "t",
            vec![
                ColumnDef::key("id", ColumnType::Int64),
                ColumnDef::nullable("v", ColumnType::Varchar(10)),
            ],
        );
        let info = TableInfo {
            table_id: 1,
            table_version: 2,
            def,
        };
        let mut buf = Vec::new();
        info.encode(&mut buf);
        assert_eq!(TableInfo::decode(&buf), Ok(info));
    }

    fn any_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        prop_oneof![
            Just(Value::Null),
            any::<i32>().prop_map(Value::Int32),
            any::<u32>().prop_map(Value::UInt32),
            // Near the edges of the 8-bit types, on both sides.
            (-200i32..200).prop_map(Value::Int32),
            (0u32..300).prop_map(Value::UInt32),
            any::<i64>().prop_map(Value::Int64),
            any::<u64>().prop_map(Value::UInt64),
            (-1e6f64..1e6).prop_map(Value::Float64),
            "[a-zé]{0,6}".prop_map(Value::Varchar),
            Just(Value::Varchar("2024-02-29".into())),
            Just(Value::Varchar("2023-02-29".into())),
            Just(Value::Varchar("2024-02-29 12:00:00".into())),
            proptest::collection::vec(any::<u8>(), 0..6).prop_map(Value::Varbinary),
        ]
    }

    fn any_type() -> impl proptest::strategy::Strategy<Value = ColumnType> {
        use proptest::prelude::*;
        prop_oneof![
            Just(ColumnType::Int8),
            Just(ColumnType::UInt8),
            Just(ColumnType::Int16),
            Just(ColumnType::UInt16),
            Just(ColumnType::Int24),
            Just(ColumnType::UInt24),
            Just(ColumnType::Int32),
            Just(ColumnType::UInt32),
            Just(ColumnType::Int64),
            Just(ColumnType::UInt64),
            Just(ColumnType::Float64),
            (0u16..5).prop_map(ColumnType::Varchar),
            (0u16..5).prop_map(ColumnType::Varbinary),
            Just(ColumnType::Date),
            Just(ColumnType::Datetime(0)),
            Just(ColumnType::Float32),
            (0u16..5).prop_map(ColumnType::Char),
            (0u16..5).prop_map(ColumnType::Binary),
            Just(ColumnType::Year),
            (0u8..4).prop_map(ColumnType::Bit),
            Just(ColumnType::Decimal(3, 1)),
            Just(ColumnType::Time(0)),
            (1u16..4).prop_map(ColumnType::Enum),
            (1u8..4).prop_map(ColumnType::Set),
        ]
    }

    proptest::proptest! {
        /// The data node's in-place key check (`canonical_key` over a `TcKeyReqView`) accepts,
        /// refuses and encodes exactly as `encode_key` over the decoded values, and the view
        /// decodes every message the owned decoder does, to the same request.
        #[test]
        fn canonical_key_agrees_with_encode_key(
            types in proptest::collection::vec(any_type(), 1..4),
            key in proptest::collection::vec(any_value(), 0..5),
        ) {
            let columns: Vec<ColumnDef> = types
                .iter()
                .enumerate()
                .map(|(i, &t)| ColumnDef::key(&format!("k{i}"), t))
                .chain([ColumnDef::nullable("v", ColumnType::Int32)])
                .collect();
            let def = TableDef::new("t", columns);
            let key_columns: Vec<usize> = (0..types.len()).collect();
            let req = TcKeyReq {
                flags: 0,
                op_index: 1,
                op_type: OperationType::Read,
                lock_mode: LockMode::Read,
                table_id: 1,
                table_version: 1,
                replica: 0,
                key,
                attrs: vec![(types.len() as u16, Value::Int32(3))],
                program: None,
            };
            let mut buf = Vec::new();
            req.encode(&mut buf);
            let view = TcKeyReqView::decode(&buf).expect("view");
            proptest::prop_assert_eq!(&view.to_owned(), &req);
            let mut expected = Vec::new();
            let expected = crate::schema::encode_key(&def, &key_columns, &req.key, &mut expected)
                .map(|()| expected);
            let found = crate::schema::canonical_key(&def, &key_columns, view.key);
            match (&expected, &found) {
                (Ok(bytes), Ok(canonical)) => proptest::prop_assert_eq!(&bytes[..], *canonical),
                (Err(e), Err(f)) => proptest::prop_assert_eq!(e.code, f.code),
                _ => proptest::prop_assert!(false, "encode_key {:?}, canonical_key {:?}", expected, found),
            }
        }

        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let _ = TcKeyReq::decode(&bytes);
            if let Ok(view) = TcKeyReqView::decode(&bytes) {
                // What the view accepted decodes whole.
                proptest::prop_assert_eq!(TcKeyReq::decode(&bytes), Ok(view.to_owned()));
            }
            let _ = TcKeyRow::decode(&bytes);
            let _ = TcKeyRow::decode_conf(&bytes);
            let _ = ListTablesReq::decode(&bytes);
            let _ = ListTablesConf::decode(&bytes);
            let _ = TcKeyRef::decode(&bytes);
            let _ = TcExecuteReq::decode(&bytes);
            let _ = TcExecuteConf::decode(&bytes);
            let _ = TcExecuteRef::decode(&bytes);
            let _ = TableInfo::decode(&bytes);
            let _ = Refusal::decode(&bytes);
            let _ = CreateIndexReq::decode(&bytes);
            let _ = IndexName::decode(&bytes);
            let _ = IndexInfo::decode(&bytes);
        }
    }
}
