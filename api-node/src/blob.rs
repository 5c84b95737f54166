//! BLOB and TEXT columns at the API node: whole values in, whole values out, heads and parts
//! on the wire (the layout is `rndb_protocol::blob`'s), as NDB's blob handles do it.
//!
//! - A row written (insert, write, update) has each BLOB value (`Varbinary`) or TEXT value
//!   (`Varchar`) cut into its head, sent in the row, and its parts, each a row of the column's
//!   parts table written in the same transaction.
//! - A write, update (of a blob column) or delete reads the row's old heads under an
//!   exclusive lock first, so that the parts the new value no longer has are deleted: at the
//!   execute, as NDB's `NdbBlob::preExecute`, not when it is defined (the operations defined
//!   before it go with that read, NoCommit; those after it wait for its row and parts
//!   operations, and keep their `OpId`s: `Transaction::resolve_blob_writes`). Such writes
//!   defined one after another, on rows of their own, read in one round trip and send their
//!   rows and parts in the next. Defining one sends nothing, in the blocking API as in the
//!   tokio interface.
//! - A locked read's execute reads the parts (NoCommit) before it commits; a CommittedRead
//!   stays one, and a row whose head names parts is read again under a shared lock, in the
//!   transaction or (when the execute committed a transaction of such reads alone) in one of
//!   its own; the row then holds whole values. Parts are always read under a shared lock.
//! - A scan's row with a value longer than its head is completed by a transaction of its own:
//!   a locked scan's row is locked already; a CommittedRead scan's row is read again under a
//!   shared lock with its parts (the row a scan returns is then a version at least as new as
//!   the one it met; a row deleted meanwhile is skipped). The rows the scan's own transaction
//!   locked exclusively ([`Noted`]) are read whole in it when the scan opens ([`OwnRows`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::Deserialize as _;

use rndb_protocol::blob::{self, BlobSize};
use rndb_protocol::{ColumnType, LockMode, NdbError, Value};

use crate::transaction::{key_of, now, Blocking, OpId, RoundTrip};
use crate::{Cluster, Error, ExecType, Table};

/// The bytes one execute of part operations carries at most (its part data, or the part
/// data its reads answer; NDB's mysqld writes 64 KiB a batch, `ndb_blob_write_batch_bytes`):
/// a value of megabytes goes in several executes (NoCommit), each well within a link's send
/// buffer (4021 past it).
pub(crate) const PARTS_BATCH_BYTES: usize = 256 * 1024;

/// A BLOB, TEXT or JSON column of a table.
#[derive(Clone, Debug)]
pub(crate) struct BlobColumn {
    pub column: usize,
    pub size: BlobSize,
    /// Whole values are text (`Varchar`): TEXT and JSON.
    pub text: bool,
    /// A JSON column: a value written must be a JSON document.
    pub json: bool,
    /// Its parts table, once looked up (`None` for a TINY one, or a handle made without).
    pub parts: Option<Table>,
}

impl BlobColumn {
    /// The BLOB, TEXT and JSON columns of a definition, without their parts tables.
    pub(crate) fn of(def: &rndb_protocol::TableDef) -> Vec<BlobColumn> {
        (def.columns.iter().enumerate())
            .filter_map(|(column, c)| {
                let size = blob::size_of(c.column_type)?;
                let json = c.column_type == ColumnType::Json;
                let text = json || matches!(c.column_type, ColumnType::Text(_));
                Some(BlobColumn {
                    column,
                    size,
                    text,
                    json,
                    parts: None,
                })
            })
            .collect()
    }

    /// Its parts table: 4263 when it has one and this handle lacks it.
    fn parts_table(&self, table: &Table) -> Result<Option<&Table>, Error> {
        if self.size.part_bytes() == 0 {
            return Ok(None);
        }
        match &self.parts {
            Some(parts) => Ok(Some(parts)),
            None => Err(Error::ndb_detail(
                4263,
                format!(
                    "table {} column {} \
                     has no parts table in this handle",
                    table.name(),
                    table.def().columns[self.column].name
                ),
            )),
        }
    }
}

/// The parts of one value to write, and how many parts the column had before (to delete
/// those past the new value's).
#[derive(Debug)]
pub(crate) struct PartWrites {
    pub parts: Table,
    /// Rows of the parts table: key values, part number, data.
    pub rows: Vec<Vec<Value>>,
    pub column: usize,
}

/// The whole bytes of `value` for BLOB or TEXT column `bc`: 4209 for another type or a value
/// past the size's longest.
fn whole_bytes<'v>(
    table: &Table,
    bc: &BlobColumn,
    value: &'v Value,
) -> Result<Option<&'v [u8]>, Error> {
    let def = &table.def().columns[bc.column];
    let bytes = match (value, bc.text) {
        (Value::Null, _) => return Ok(None),
        (Value::Varbinary(b), false) => b.as_slice(),
        (Value::Varchar(s), true) => s.as_bytes(),
        _ => {
            return Err(Error::ndb_detail(
                4209,
                format!(
                    "column {} is {}: a whole value is {}, got {value:?}",
                    def.name,
                    def.column_type,
                    if bc.text { "Varchar" } else { "Varbinary" }
                ),
            ))
        }
    };
    if bytes.len() as u64 > bc.size.max_bytes() {
        return Err(Error::ndb_detail(
            4209,
            format!(
                "column {} is {}: a value of {} bytes is longer than its {}",
                def.name,
                def.column_type,
                bytes.len(),
                bc.size.max_bytes()
            ),
        ));
    }
    if bc.json {
        if let Value::Varchar(text) = value {
            check_json(text).map_err(|e| {
                Error::ndb_detail(4209, format!("column {} is Json: {e}", def.name))
            })?;
        }
    }
    Ok(Some(bytes))
}

/// Whether `text` is one JSON document at most 100 levels deep, as MySQL's parser takes it:
/// else MySQL's message (3140 "Invalid JSON text", naming the line and column where it stops
/// being one, a number past a double, a lone surrogate; 3157 past the depth).
pub fn check_json(text: &str) -> Result<(), String> {
    // First, so that the parser's own limit (128 levels) is never what refuses a document.
    if json_depth(text) > JSON_DEPTH_MAX {
        return Err(format!(
            "The JSON document exceeds the maximum depth ({JSON_DEPTH_MAX} levels)"
        ));
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let checked = Checked::deserialize(&mut de).and_then(|_| de.end());
    checked.map_err(|e| format!("Invalid JSON text: {e}"))
}

/// A JSON value checked whole without being kept: numbers are read (one past a double's range
/// is refused, as MySQL refuses it) and strings decoded (a lone surrogate is refused), which
/// skipping them (`IgnoredAny`) does not do.
struct Checked;

impl<'de> serde::Deserialize<'de> for Checked {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(CheckedVisitor)
    }
}

struct CheckedVisitor;

impl<'de> serde::de::Visitor<'de> for CheckedVisitor {
    type Value = Checked;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_str<E>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_unit<E>(self) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut items: A) -> Result<Checked, A::Error> {
        while items.next_element::<Checked>()?.is_some() {}
        Ok(Checked)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
        while map.next_key::<Checked>()?.is_some() {
            map.next_value::<Checked>()?;
        }
        Ok(Checked)
    }
}

/// MySQL's deepest JSON document.
const JSON_DEPTH_MAX: usize = 100;

/// How deep the arrays and objects of a JSON document nest (brackets in strings do not
/// count); any text has a depth, JSON or not.
fn json_depth(text: &str) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0, false, false);
    for b in text.bytes() {
        match (in_string, escaped, b) {
            (true, true, _) => escaped = false,
            (true, false, b'\\') => escaped = true,
            (true, false, b'"') => in_string = false,
            (true, false, _) => {}
            (false, _, b'"') => in_string = true,
            (false, _, b'[' | b'{') => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            (false, _, b']' | b'}') => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// The rows of a parts table holding `bytes` (past the head) of the row keyed `key`.
fn part_rows(key: &[Value], bytes: &[u8], size: BlobSize) -> Vec<Vec<Value>> {
    let part = usize::from(size.part_bytes());
    if part == 0 || bytes.len() <= blob::INLINE_BYTES {
        return Vec::new();
    }
    (bytes[blob::INLINE_BYTES..].chunks(part).enumerate())
        .map(|(i, chunk)| {
            let mut row = key.to_vec();
            row.push(Value::UInt32(i as u32));
            row.push(Value::Varbinary(chunk.to_vec()));
            row
        })
        .collect()
}

/// The key of part `part` of the row keyed `key`.
pub(crate) fn part_key(key: &[Value], part: u64) -> Vec<Value> {
    let mut k = key.to_vec();
    k.push(Value::UInt32(part as u32));
    k
}

/// Values to set, by column position.
pub(crate) type Set = Vec<(usize, Value)>;

/// `row` (column, whole value) with each BLOB or TEXT value replaced by its head, and the
/// parts to write for each parted column it names.
pub(crate) fn to_heads(
    table: &Table,
    key: &[Value],
    row: &[(usize, Value)],
) -> Result<(Set, Vec<PartWrites>), Error> {
    let mut heads = Vec::with_capacity(row.len());
    let mut writes = Vec::new();
    for (column, value) in row {
        let Some(bc) = table.blob_column(*column) else {
            heads.push((*column, value.clone()));
            continue;
        };
        let Some(bytes) = whole_bytes(table, bc, value)? else {
            heads.push((*column, Value::Null));
            if let Some(parts) = bc.parts_table(table)? {
                writes.push(PartWrites {
                    parts: parts.clone(),
                    rows: Vec::new(),
                    column: *column,
                });
            }
            continue;
        };
        heads.push((*column, Value::Varbinary(blob::head_of(bytes))));
        if let Some(parts) = bc.parts_table(table)? {
            writes.push(PartWrites {
                parts: parts.clone(),
                rows: part_rows(key, bytes, bc.size),
                column: *column,
            });
        }
    }
    Ok((heads, writes))
}

/// The length a row's head names for column `bc` (`None` for NULL); 4267 for a head that is
/// not one.
pub(crate) fn head_length(
    table: &Table,
    bc: &BlobColumn,
    value: &Value,
) -> Result<Option<u64>, Error> {
    match value {
        Value::Null => Ok(None),
        Value::Varbinary(head) => blob::head_length(head, bc.size)
            .map(Some)
            .ok_or_else(|| corrupt(table, bc, "its head is not one".into())),
        other => Err(corrupt(table, bc, format!("its head is {other:?}"))),
    }
}

fn corrupt(table: &Table, bc: &BlobColumn, why: String) -> Error {
    Error::ndb_detail(
        4267,
        format!(
            "table {} column {}: {why}",
            table.name(),
            table.def().columns[bc.column].name
        ),
    )
}

/// The whole value of `bc` from its head and its parts' data, in order.
pub(crate) fn whole_value(
    table: &Table,
    bc: &BlobColumn,
    head: &Value,
    parts: &[Vec<u8>],
) -> Result<Value, Error> {
    let Some(length) = head_length(table, bc, head)? else {
        return Ok(Value::Null);
    };
    let Value::Varbinary(head) = head else {
        return Err(corrupt(table, bc, "its head is not bytes".into()));
    };
    let mut bytes = head[blob::LENGTH_BYTES..].to_vec();
    let part = usize::from(bc.size.part_bytes());
    for (i, data) in parts.iter().enumerate() {
        let want = (length as usize - bytes.len()).min(part);
        if data.len() != want {
            return Err(corrupt(
                table,
                bc,
                format!("part {i} holds {} bytes, not {want}", data.len()),
            ));
        }
        bytes.extend_from_slice(data);
    }
    if bytes.len() as u64 != length {
        return Err(corrupt(
            table,
            bc,
            format!("{} bytes of {length} found", bytes.len()),
        ));
    }
    if bc.text {
        String::from_utf8(bytes)
            .map(Value::Varchar)
            .map_err(|e| corrupt(table, bc, format!("its text is not UTF-8: {e}")))
    } else {
        Ok(Value::Varbinary(bytes))
    }
}

/// The parts `length` needs past the head, for `bc`.
pub(crate) fn parts_of(bc: &BlobColumn, length: Option<u64>) -> u64 {
    length.map_or(0, |l| bc.size.parts(l))
}

/// The lock a read of a table with parts tables takes for `lock` (NDB's upgrade).
pub(crate) fn read_lock(table: &Table, lock: LockMode) -> LockMode {
    if lock == LockMode::CommittedRead && table.has_parts() {
        LockMode::Read
    } else {
        lock
    }
}

/// What a CommittedRead scan's row, read again to complete its values, must still meet: the
/// scan's filter, and (an index scan) the index columns it had when the scan met it (the
/// row changed them since: it is passed over, as a row the scan met at its new place or not
/// at all; a sorted scan's order holds).
#[derive(Debug)]
pub(crate) struct FreshCheck {
    pub filter: Option<rndb_protocol::filter::Filter>,
    pub index_columns: Vec<usize>,
}

/// The same values, a float by its bits (a NaN is itself).
pub(crate) fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Float64(x), Value::Float64(y)) => x.to_bits() == y.to_bits(),
        (a, b) => a == b,
    }
}

/// The same rows, by [`same_value`].
pub(crate) fn same_row(a: &[Value], b: &[Value]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same_value(a, b))
}

impl FreshCheck {
    /// The row read again (`fresh`) is still one the scan returns where it met `met`.
    pub(crate) fn still_met(&self, met: &[Value], fresh: &[Value]) -> bool {
        let moved = (self.index_columns.iter()).any(|&c| !same_value(&fresh[c], &met[c]));
        // The filter names no blob column (4264), so heads do not matter to it.
        let unmet = self.filter.as_ref().is_some_and(|f| !f.matches(fresh));
        !moved && !unmet
    }
}

/// A scanned row of a table with BLOB or TEXT columns made whole (see the module's docs);
/// `None` when a CommittedRead scan's row was deleted before it was read again, or changed so
/// that it fails `check`.
pub(crate) fn fill_scanned(
    cluster: &Cluster,
    table: &Table,
    row: Vec<Value>,
    (locked, check, own): (bool, Option<&FreshCheck>, Option<(&OwnRows, u64)>),
) -> Result<Option<Vec<Value>>, Error> {
    let long = match whole_or_long(table, row)? {
        Ok(whole) => return Ok(Some(whole)),
        Err(long) => long,
    };
    if let Some(whole) = own.and_then(|(own, unnamed)| own.take(table, &long, unnamed, locked)) {
        return whole.map(Some);
    }
    now(fill_long(&Blocking, cluster, table, long, locked, check))
}

/// The rows of tables with parts tables that a transaction locked exclusively (wrote,
/// deleted, read Exclusive), sent or not, each with its key and how many times: shared with
/// its scans of those tables ([`OwnRows`]), which must complete such rows in the transaction.
#[derive(Debug, Default)]
pub(crate) struct Noted {
    rows: HashMap<(u32, Vec<u8>), (Vec<Value>, u64)>,
    /// Tables with rows it locked exclusively without naming them (an Exclusive scan or read
    /// through a unique index), with how many times.
    tables: HashMap<u32, u64>,
}

impl Noted {
    /// Notes one more exclusive operation on row `key` of table `table_id`.
    pub(crate) fn note(&mut self, table: &Table, key: &[Value]) {
        let entry = (self.rows.entry((table.id(), key_bytes(table, key))))
            .or_insert_with(|| (key.to_vec(), 0));
        entry.1 += 1;
    }

    /// The rows of table `table_id` noted, with their counts.
    pub(crate) fn of_table(&self, table_id: u32) -> Vec<(Vec<Value>, u64)> {
        (self.rows.iter())
            .filter(|((t, _), _)| *t == table_id)
            .map(|(_, (key, count))| (key.clone(), *count))
            .collect()
    }

    /// How many times row `key` of `table` was noted.
    pub(crate) fn count(&self, table: &Table, key: &[Value]) -> u64 {
        self.count_of(table.id(), key_bytes(table, key))
    }

    fn count_of(&self, table_id: u32, key: Vec<u8>) -> u64 {
        self.rows
            .get(&(table_id, key))
            .map_or(0, |(_, count)| *count)
    }

    /// Notes an exclusive lock of rows of `table` this transaction cannot name.
    pub(crate) fn note_table(&mut self, table_id: u32) {
        *self.tables.entry(table_id).or_insert(0) += 1;
    }

    pub(crate) fn table_count(&self, table_id: u32) -> u64 {
        self.tables.get(&table_id).copied().unwrap_or(0)
    }
}

/// A transaction's [`Noted`], shared with its scans.
pub(crate) type SharedNoted = Arc<Mutex<Noted>>;

/// Locks `noted` (a panic elsewhere while it was held leaves what it held).
pub(crate) fn lock_noted(noted: &SharedNoted) -> std::sync::MutexGuard<'_, Noted> {
    noted.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a scan of a table with parts tables knows of the rows its transaction locked
/// exclusively ([`Noted`]): those noted when it opened, read whole in the transaction then
/// (`Transaction::own_rows`), and handed out in place of the rows the scan meets; no other
/// transaction could complete them (it would wait for the locks, or not see the changes).
#[derive(Debug)]
pub(crate) struct OwnRows {
    table_id: u32,
    noted: SharedNoted,
    /// By encoded key: the row as stored (heads) and whole, and how many times it was noted
    /// when read; `None` where it was whole in its heads, or missing.
    rows: HashMap<Vec<u8>, (Option<Arc<OwnRow>>, u64)>,
}

/// A row of [`OwnRows`]: as stored, and whole.
#[derive(Debug)]
struct OwnRow {
    head: Vec<Value>,
    whole: Vec<Value>,
}

impl OwnRows {
    pub(crate) fn new(table: &Table, noted: SharedNoted) -> OwnRows {
        OwnRows {
            table_id: table.id(),
            noted,
            rows: HashMap::new(),
        }
    }

    /// Notes row `key`, noted `count` times, as whole in its heads, or missing.
    pub(crate) fn insert_short(&mut self, table: &Table, key: &[Value], count: u64) {
        self.rows.insert(key_bytes(table, key), (None, count));
    }

    /// Adds a row read whole: as stored (`head`) and `whole`, noted `count` times.
    pub(crate) fn insert_whole(
        &mut self,
        table: &Table,
        head: Vec<Value>,
        whole: Vec<Value>,
        count: u64,
    ) {
        let key = key_bytes(table, &key_of(table, &head));
        self.rows
            .insert(key, (Some(Arc::new(OwnRow { head, whole })), count));
    }

    /// The bytes of the rows it holds, values whole (`row_bytes`).
    pub(crate) fn whole_bytes(&self, table: &Table) -> Result<usize, Error> {
        let mut bytes = 0usize;
        for row in self.rows.values().filter_map(|(row, _)| row.as_ref()) {
            bytes = bytes.saturating_add(row_bytes(table, &row.head)?);
        }
        Ok(bytes)
    }

    /// Takes over from `earlier` (the same table's, of an earlier scan) the row `key`, read
    /// when it was noted `count` times, as it is noted now: `false` when it has changed since.
    pub(crate) fn reuse(
        &mut self,
        earlier: &OwnRows,
        table: &Table,
        key: &[Value],
        count: u64,
    ) -> bool {
        let key = key_bytes(table, key);
        match earlier.rows.get(&key) {
            Some((row, read)) if *read == count => {
                self.rows.insert(key, (row.clone(), count));
                true
            }
            _ => false,
        }
    }

    /// For a scan's row as stored (`long`, with values past their heads): `None` when the
    /// transaction never locked it exclusively (any transaction may complete it), its whole
    /// row when read so at the scan's opening and not locked again since, else 4264 (the
    /// transaction changed it after the scan opened, or locked it only then: read it by key).
    pub(crate) fn take(
        &self,
        table: &Table,
        long: &[Value],
        unnamed_then: u64,
        locked: bool,
    ) -> Option<Result<Vec<Value>, Error>> {
        let key = key_bytes(table, &key_of(table, long));
        let (count, table_count) = {
            let noted = lock_noted(&self.noted);
            (
                noted.count_of(self.table_id, key.clone()),
                noted.table_count(self.table_id),
            )
        };
        // Rows of the table locked since without names: this one may be among them, and a
        // CommittedRead scan's completion (its head read again under a lock, apart) would
        // wait for that lock. A locked scan's reads only the parts, which such locks leave
        // alone (an Exclusive scan or a unique-index operation does not write parts).
        let unnamed = !locked && table_count != unnamed_then;
        match self.rows.get(&key) {
            None if count == 0 && !unnamed => None,
            // Noted, but missing (its operation failed) or whole when the scan opened, and not
            // noted since: not this transaction's to complete.
            Some((None, read)) if *read == count && !unnamed => None,
            Some((Some(row), read)) if *read == count && same_row(&row.head, long) => {
                Some(Ok(row.whole.clone()))
            }
            _ => Some(Err(Error::ndb_detail(
                4264,
                format!(
                    "a row of {} with BLOB or TEXT values that \
                     its transaction locked or changed after a scan of the table opened (read \
                     it by key)",
                    table.name()
                ),
            ))),
        }
    }
}

/// 4000 for a scan or its transaction's own rows read whole past
/// [`crate::scan::OWN_PARTS_SCAN_BYTES_MAX`].
pub(crate) fn held_too_much(table: &Table, what: &str) -> Error {
    // NDB's 4000 is its API's out of memory (rndb's table names it for malformed signals, its
    // other use): the message says which.
    Error::Ndb(NdbError {
        code: 4000,
        class: rndb_protocol::ErrorClass::InternalError,
        message: format!(
            "Memory allocation error: {what} of table {} read whole passed {} bytes \
             (OWN_PARTS_SCAN_BYTES_MAX)",
            table.name(),
            crate::scan::OWN_PARTS_SCAN_BYTES_MAX
        ),
    })
}

/// A primary key of `table` as bytes, to look rows up by: its canonical encoding (the one
/// the data node hashes), else (values that do not fit the key) the values' own.
pub(crate) fn key_bytes(table: &Table, key: &[Value]) -> Vec<u8> {
    let mut bytes = Vec::new();
    let def = table.def();
    if rndb_protocol::schema::encode_key(def, table.key_columns(), key, &mut bytes).is_err() {
        bytes.clear();
        rndb_protocol::schema::encode_values(&mut rndb_protocol::Writer::new(&mut bytes), key);
    }
    bytes
}

/// A scanned row whose values its heads hold whole, made whole (`Ok`), or the row as it
/// came when a value has parts (`Err`: see [`fill_long`]).
pub(crate) fn whole_or_long(
    table: &Table,
    mut row: Vec<Value>,
) -> Result<Result<Vec<Value>, Vec<Value>>, Error> {
    for bc in table.blobs() {
        if parts_of(bc, head_length(table, bc, &row[bc.column])?) > 0 {
            return Ok(Err(row));
        }
    }
    inline_whole(table, &mut row)?;
    Ok(Ok(row))
}

/// A scanned row with a value past its head made whole by a transaction of its own, over
/// `trip`'s round trips (see the module's docs); `None` as for [`fill_scanned`].
pub(crate) async fn fill_long<R: RoundTrip>(
    trip: &R,
    cluster: &Cluster,
    table: &Table,
    row: Vec<Value>,
    locked: bool,
    check: Option<&FreshCheck>,
) -> Result<Option<Vec<Value>>, Error> {
    let mut rows = vec![(OpId::NONE, table.clone(), row)];
    if locked {
        fill_apart(trip, cluster, &mut rows).await?;
    } else {
        // Read again under a shared lock: the head, then the parts of that version.
        complete_apart(trip, cluster, &mut rows, check).await?;
    }
    Ok(rows.pop().map(|(_, _, row)| row))
}

/// Rows with values past their heads, read under CommittedRead (by key, by a transaction that
/// has committed; or by a scan), made whole by a transaction of their own: read again under a
/// shared lock (their parts then cannot change), then every part read, with the commit. A row
/// gone by then, or changed so that it fails a scan's `check`, is taken out of `rows`; its
/// operation is returned.
pub(crate) async fn complete_apart<R: RoundTrip>(
    trip: &R,
    cluster: &Cluster,
    rows: &mut Vec<(OpId, Table, Vec<Value>)>,
    check: Option<&FreshCheck>,
) -> Result<Vec<OpId>, Error> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let mut tx = cluster.start_transaction()?;
    let keys: Vec<Vec<Value>> = rows.iter().map(|(_, t, r)| key_of(t, r)).collect();
    let tables = rows.iter().map(|(_, t, _)| t);
    let fresh = (tx.read_locked(trip, tables.zip(&keys))).await?;
    let mut gone = Vec::new();
    let mut kept = Vec::with_capacity(rows.len());
    for ((op, table, met), fresh) in rows.drain(..).zip(fresh) {
        match fresh.filter(|fresh| check.is_none_or(|c| c.still_met(&met, fresh))) {
            Some(row) => kept.push((op, table, row)),
            None => gone.push(op),
        }
    }
    (tx.fill_rows(trip, &mut kept, ExecType::Commit)).await?;
    *rows = kept;
    Ok(gone)
}

/// Rows with values past their heads (locked by a transaction that did not lock them
/// exclusively) made whole by a transaction of their own: their parts read, with the commit,
/// which ends the parts' shared locks.
pub(crate) async fn fill_apart<R: RoundTrip>(
    trip: &R,
    cluster: &Cluster,
    rows: &mut [(OpId, Table, Vec<Value>)],
) -> Result<(), Error> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut tx = cluster.start_transaction()?;
    tx.fill_rows(trip, rows, ExecType::Commit).await
}

/// The error of a read whose row was deleted before its values' parts could be read.
pub(crate) fn gone() -> NdbError {
    NdbError::with_detail(
        626,
        "the row was deleted before its BLOB or TEXT values were read",
    )
}

/// The bytes `row` of `table` takes with its values whole (a BLOB's or TEXT's by its head's
/// length; 8 a number).
pub(crate) fn row_bytes(table: &Table, row: &[Value]) -> Result<usize, Error> {
    let mut bytes = 0;
    for value in row {
        bytes += match value {
            Value::Varchar(s) => s.len(),
            Value::Varbinary(b) => b.len(),
            _ => 8,
        };
    }
    for bc in table.blobs() {
        let length = head_length(table, bc, &row[bc.column])?.unwrap_or(0);
        bytes = bytes.saturating_add(usize::try_from(length).unwrap_or(usize::MAX));
    }
    Ok(bytes)
}

/// Turns each head of `row` whose value it holds whole into that value (4267 when a value
/// has parts).
pub(crate) fn inline_whole(table: &Table, row: &mut [Value]) -> Result<(), Error> {
    for bc in table.blobs() {
        row[bc.column] = whole_value(table, bc, &row[bc.column], &[])?;
    }
    Ok(())
}

/// 4263 when a BLOB or TEXT column of `table` has a parts table this handle lacks (one not
/// made by `Cluster::get_table` or `create_table`).
pub(crate) fn check_parts(table: &Table) -> Result<(), Error> {
    for bc in table.blobs() {
        bc.parts_table(table)?;
    }
    Ok(())
}

/// 4264 for an operation no BLOB or TEXT column may take part in.
pub(crate) fn unsupported(table: &Table, what: &str) -> Error {
    Error::ndb_detail(
        4264,
        format!(
            "{what} on table {}, which has BLOB or TEXT \
             columns",
            table.name()
        ),
    )
}

/// An error of a part operation as the whole operation's.
pub(crate) fn part_error(e: &NdbError) -> Error {
    Error::Ndb(e.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_documents_are_checked_whole() {
        for ok in [
            "{}",
            " [1, 2.5e3, \"a]\\\"{\", null, true] ",
            "\"text\"",
            "-0",
            &"[".repeat(100).to_string(),
        ] {
            let doc = if ok.starts_with("[[") {
                format!("{ok}{}", "]".repeat(100))
            } else {
                ok.to_string()
            };
            assert_eq!(check_json(&doc), Ok(()), "{doc}");
        }
        for (bad, needle) in [
            ("", "EOF"),
            ("{\"a\": 1,}", "line 1 column"),
            ("[1] [2]", "trailing characters"),
            ("{'a': 1}", "key must be a string"),
            ("1e999", "number out of range"),
            ("[-1e400]", "number out of range"),
            ("\"\\ud800\"", "escape"),
            ("{\"\\udc00\": 1}", "escape"),
        ] {
            let e = check_json(bad).expect_err(bad);
            assert!(
                e.starts_with("Invalid JSON text: ") && e.contains(needle),
                "{bad}: {e}"
            );
        }
        // A big integer is a double, as in MySQL; a surrogate pair is one character.
        assert_eq!(check_json("123456789012345678901234567890"), Ok(()));
        assert_eq!(check_json("\"\\ud83d\\ude00\""), Ok(()));
        for levels in [101, 129, 1000] {
            let deep = format!("{}{}", "[".repeat(levels), "]".repeat(levels));
            let e = check_json(&deep).expect_err("too deep");
            assert!(e.contains("maximum depth (100 levels)"), "{levels}: {e}");
        }
    }
}
