//! ndbinfo: the data nodes' virtual tables of their own state (NDB's DBINFO block and the
//! `ndbinfo` database), their catalogue and the signals that read them.
//!
//! A table is a fixed list of columns, each a number or a text, defined here once so that data
//! node and API agree on it (NDB keeps it in `NdbinfoTables.cpp`, known to both). A data node
//! answers a DBINFO_SCANREQ with the table's rows from its [`Position`] on, as many as fit a
//! page of [`PAGE_BYTES`] and as it finds within a budget of records examined (NDB's
//! ratelimit), and the position to go on from; the API asks again until there is none. A table
//! of [`Scope::Node`] has rows on every data node (the first column is the node's id); one of
//! [`Scope::Cluster`] is asked of one data node only.
//!
//! Wire layouts (little-endian, `str16` = u16 length and UTF-8 bytes):
//!
//! ```text
//! DBINFO_SCANREQ   table_id u32 | position 4 × u32
//! DBINFO_SCANCONF  table_id u32 | columns u16 | rows u16 | rows × columns values (in the
//!                  table's order; number: tag 0, u64 | text: tag 1, str16) | more u8 |
//!                  next position 4 × u32
//! DBINFO_SCANREF   table_id u32 | error u32
//! ```

use crate::codec::{DecodeError, Reader, Writer};

/// Bytes of rows a DBINFO_SCANCONF carries at most, well inside a 32 KiB frame: a data node
/// stops adding rows once a page reaches it, so a page holds at most this and one row.
pub const PAGE_BYTES: usize = 16 * 1024;

/// Bytes a text value may hold: longer ones are cut (at a character boundary) when encoded,
/// so one row always fits a page.
pub const TEXT_BYTES_MAX: usize = 512;

/// What a column holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColumnKind {
    Number,
    Text,
}

impl ColumnKind {
    /// NDB's name for the type (`ndbinfo.columns`'s `column_type`).
    pub fn name(self) -> &'static str {
        match self {
            ColumnKind::Number => "Number",
            ColumnKind::Text => "String",
        }
    }
}

/// One column of a table.
#[derive(Debug)]
pub struct InfoColumn {
    pub name: &'static str,
    pub kind: ColumnKind,
    pub comment: &'static str,
}

/// Which data nodes hold a table's rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every data node has rows of its own, its node id in the first column.
    Node,
    /// One data node answers for the cluster.
    Cluster,
}

/// One virtual table.
#[derive(Debug)]
pub struct InfoTable {
    pub id: u32,
    pub name: &'static str,
    pub comment: &'static str,
    pub scope: Scope,
    pub columns: &'static [InfoColumn],
}

const fn n(name: &'static str, comment: &'static str) -> InfoColumn {
    InfoColumn {
        name,
        kind: ColumnKind::Number,
        comment,
    }
}

const fn t(name: &'static str, comment: &'static str) -> InfoColumn {
    InfoColumn {
        name,
        kind: ColumnKind::Text,
        comment,
    }
}

const NODE_ID: InfoColumn = n("node_id", "data node id");

/// Table ids, for the data node's row makers.
pub mod table_id {
    pub const TABLES: u32 = 0;
    pub const COLUMNS: u32 = 1;
    pub const NODES: u32 = 2;
    pub const MEMORYUSAGE: u32 = 3;
    pub const TRANSPORTERS: u32 = 4;
    pub const COUNTERS: u32 = 5;
    pub const POOLS: u32 = 6;
    pub const LOGSPACES: u32 = 7;
    pub const LOGBUFFERS: u32 = 8;
    pub const CLUSTER_TRANSACTIONS: u32 = 9;
    pub const BACKUP_ID: u32 = 10;
    pub const ERROR_MESSAGES: u32 = 11;
    pub const CLUSTER_LOCKS: u32 = 12;
    pub const TABLE_FRAGMENTS: u32 = 13;
    pub const CONFIG_PARAMS: u32 = 14;
    pub const CONFIG_VALUES: u32 = 15;
}

/// Every table, in id order (a table's id is its index here).
pub static TABLES: &[InfoTable] = &[
    InfoTable {
        id: table_id::TABLES,
        name: "tables",
        comment: "metadata for tables available through ndbinfo",
        scope: Scope::Cluster,
        columns: &[n("table_id", ""), t("table_name", ""), t("comment", "")],
    },
    InfoTable {
        id: table_id::COLUMNS,
        name: "columns",
        comment: "metadata for columns available through ndbinfo",
        scope: Scope::Cluster,
        columns: &[
            n("table_id", ""),
            n("column_id", ""),
            t("column_name", ""),
            t("column_type", "Number or String"),
            t("comment", ""),
        ],
    },
    InfoTable {
        id: table_id::NODES,
        name: "nodes",
        comment: "node status",
        scope: Scope::Node,
        columns: &[
            NODE_ID,
            n("uptime", "seconds since the node started"),
            t("status", "STARTING, STARTED or SINGLEUSER"),
            n("start_phase", "0 once started, 1 while starting"),
        ],
    },
    InfoTable {
        id: table_id::MEMORYUSAGE,
        name: "memoryusage",
        comment: "memory usage (DataMemory)",
        scope: Scope::Node,
        columns: &[
            NODE_ID,
            t("memory_type", "Data memory"),
            n("used", "bytes in use"),
            n("used_pages", "32 KiB pages in use (rounded up)"),
            n("total", "bytes configured"),
            n("total_pages", "32 KiB pages configured"),
        ],
    },
    InfoTable {
        id: table_id::TRANSPORTERS,
        name: "transporters",
        comment: "transporter status: one row for each other node the config links to",
        scope: Scope::Node,
        columns: &[
            NODE_ID,
            n("remote_node_id", ""),
            t("status", "CONNECTED or DISCONNECTED"),
            t(
                "remote_address",
                "the peer's address, empty when not connected",
            ),
            n("bytes_sent", "headers and payloads sent on the link now up"),
            n(
                "bytes_received",
                "headers and payloads received on the link now up",
            ),
            n(
                "connect_count",
                "times the link came up since the node started",
            ),
            n(
                "overloaded",
                "1 when the send buffer is over its overload limit",
            ),
            n(
                "overload_count",
                "sends that found the send buffer overloaded",
            ),
            n("encrypted", "1 for a TLS link"),
            n("sendbuffer_used_bytes", "bytes waiting in the send buffer"),
            t("type", "TCP, SHM or IOURING"),
        ],
    },
    InfoTable {
        id: table_id::COUNTERS,
        name: "counters",
        comment: "monotonic counters since the node started",
        scope: Scope::Node,
        columns: &[
            NODE_ID,
            t("block_name", ""),
            n("block_instance", ""),
            n("counter_id", "NDB's counter id"),
            t("counter_name", ""),
            n("val", ""),
        ],
    },
    InfoTable {
        id: table_id::POOLS,
        name: "pools",
        comment: "record pools: records in use and configured",
        scope: Scope::Node,
        columns: &[
            NODE_ID,
            t("block_name", ""),
            n("block_instance", ""),
            t("pool_name", ""),
            n("used", "records in use"),
            n("total", "records configured"),
            t("config_param", "the parameter that sets total"),
        ],
    },
    InfoTable {
        id: table_id::LOGSPACES,
        name: "logspaces",
        comment: "redo log space: bytes of each part's files in use",
        scope: Scope::Node,
        columns: &[
            NODE_ID,
            t("log_type", "REDO"),
            n("log_id", ""),
            n("log_part", ""),
            n("total", "bytes"),
            n("used", "bytes"),
        ],
    },
    InfoTable {
        id: table_id::LOGBUFFERS,
        name: "logbuffers",
        comment: "redo log buffer: bytes not yet written",
        scope: Scope::Node,
        columns: &[
            NODE_ID,
            t("log_type", "REDO"),
            n("log_id", ""),
            n("log_part", ""),
            n("total", "bytes (RedoBuffer)"),
            n("used", "bytes"),
        ],
    },
    InfoTable {
        id: table_id::CLUSTER_TRANSACTIONS,
        name: "cluster_transactions",
        comment: "transactions each node coordinates",
        scope: Scope::Node,
        columns: &[
            NODE_ID,
            n("block_instance", ""),
            n(
                "transid",
                "the transaction id (API node id in the high word)",
            ),
            t("state", "Started, Committing, Aborting or Committed"),
            n("count_operations", "operation records it holds"),
            n("outstanding_operations", "operations not answered yet"),
            n(
                "inactive_seconds",
                "since the API last sent anything for it",
            ),
            n("client_node_id", "the API node"),
            n(
                "client_block_ref",
                "the API node's request id of the transaction",
            ),
        ],
    },
    InfoTable {
        id: table_id::BACKUP_ID,
        name: "backup_id",
        comment: "the id of the newest backup the answering node took part in or found",
        scope: Scope::Cluster,
        columns: &[n("id", "0 when none")],
    },
    InfoTable {
        id: table_id::ERROR_MESSAGES,
        name: "error_messages",
        comment: "NDB error codes and their messages",
        scope: Scope::Cluster,
        columns: &[
            n("error_code", ""),
            t("error_description", ""),
            t("error_status", ""),
            t("error_classification", ""),
        ],
    },
    InfoTable {
        id: table_id::CLUSTER_LOCKS,
        name: "cluster_locks",
        comment: "row locks held and waited for: one row per holder or waiter",
        scope: Scope::Node,
        columns: &[
            NODE_ID,
            n("block_instance", ""),
            n("tableid", ""),
            n("fragmentid", ""),
            n("rowid", "the row's slot in its fragment"),
            n("transid", "the transaction holding or waiting"),
            t("mode", "S shared, X exclusive"),
            t("state", "H holding, W waiting"),
            t("detail", "* for the first holder"),
            t(
                "op",
                "READ-SH, READ-EX, INSERT, UPDATE, DELETE, WRITE, SCAN-SH or SCAN-EX",
            ),
            n(
                "waiting_for",
                "a waiter: the transid of the row's first holder of another transaction (0 for a holder)",
            ),
        ],
    },
    InfoTable {
        id: table_id::TABLE_FRAGMENTS,
        name: "table_fragments",
        comment: "each table's fragments and their replicas, as this node's DIH sees them",
        scope: Scope::Node,
        columns: &[
            NODE_ID,
            n("table_id", ""),
            n("partition_id", ""),
            n("fragment_id", ""),
            n("log_part_id", "the redo log part its changes go to"),
            n("no_of_replicas", "NoOfReplicas"),
            n("current_primary", "the live replica operations go to first (0: none)"),
            n("preferred_primary", "the config's first replica"),
            n("current_first_backup", "0: none"),
            n("current_second_backup", "0: none"),
            n("current_third_backup", "0: none"),
            n("num_alive_replicas", ""),
            n("num_dead_replicas", ""),
        ],
    },
    InfoTable {
        id: table_id::CONFIG_PARAMS,
        name: "config_params",
        comment: "every config parameter rndb knows, of every section",
        scope: Scope::Cluster,
        columns: &[
            n("param_number", "the parameter's number (config_values.config_param)"),
            t("param_name", ""),
            t("param_description", ""),
            t("param_type", "int, size, bool, string or path"),
            t("param_default", ""),
            t("param_min", "empty for a type without a range"),
            t("param_max", "empty for a type without a range"),
            n("param_mandatory", "1 when a section must give it"),
            t("param_status", "implemented, or recognised (the value is ignored)"),
        ],
    },
    InfoTable {
        id: table_id::CONFIG_VALUES,
        name: "config_values",
        comment: "the value of each [ndbd] parameter this data node runs with",
        scope: Scope::Node,
        columns: &[
            NODE_ID,
            n("config_param", "config_params.param_number"),
            t("config_value", ""),
        ],
    },
];

/// The table named `name` (NDB's `ndb$` prefix allowed), if there is one.
pub fn table(name: &str) -> Option<&'static InfoTable> {
    let name = name.strip_prefix("ndb$").unwrap_or(name);
    TABLES.iter().find(|t| t.name.eq_ignore_ascii_case(name))
}

/// The table with id `id`, if there is one.
pub fn table_by_id(id: u32) -> Option<&'static InfoTable> {
    TABLES.get(usize::try_from(id).ok()?)
}

/// One value of a row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InfoValue {
    Number(u64),
    Text(String),
}

impl InfoValue {
    fn kind(&self) -> ColumnKind {
        match self {
            InfoValue::Number(_) => ColumnKind::Number,
            InfoValue::Text(_) => ColumnKind::Text,
        }
    }
}

impl std::fmt::Display for InfoValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InfoValue::Number(v) => write!(f, "{v}"),
            InfoValue::Text(s) => f.write_str(s),
        }
    }
}

impl From<u64> for InfoValue {
    fn from(v: u64) -> Self {
        InfoValue::Number(v)
    }
}

impl From<u32> for InfoValue {
    fn from(v: u32) -> Self {
        InfoValue::Number(u64::from(v))
    }
}

impl From<&str> for InfoValue {
    fn from(v: &str) -> Self {
        InfoValue::Text(v.to_string())
    }
}

impl From<String> for InfoValue {
    fn from(v: String) -> Self {
        InfoValue::Text(v)
    }
}

/// One row: a value for each column of its table, in order.
pub type InfoRow = Vec<InfoValue>;

/// Where a read of a table stands, as NDB's ScanCursor keeps it: four words whose meaning is
/// the table's (a row index for most; for cluster_transactions a transaction record, for
/// cluster_locks a table, fragment, row slot and lock entry). All zero: the start. A data node
/// answers the rows from there on and the position to go on from, which is always past the
/// one asked: a read ends.
pub type Position = [u32; 4];

/// DBINFO_SCANREQ: the rows of table `table_id` from `position` on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DbinfoScanReq {
    pub table_id: u32,
    pub position: Position,
}

fn write_position(w: &mut Writer<'_>, position: &Position) {
    for word in position {
        w.u32(*word);
    }
}

fn read_position(r: &mut Reader<'_>) -> Result<Position, DecodeError> {
    Ok([r.u32()?, r.u32()?, r.u32()?, r.u32()?])
}

impl DbinfoScanReq {
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer::new(out);
        w.u32(self.table_id);
        write_position(&mut w, &self.position);
    }
    pub fn decode(buf: &[u8]) -> Result<DbinfoScanReq, DecodeError> {
        let mut r = Reader::new(buf, "DBINFO_SCANREQ");
        let table_id = r.u32()?;
        let position = read_position(&mut r)?;
        r.finish()?;
        Ok(DbinfoScanReq { table_id, position })
    }
}

/// DBINFO_SCANCONF: a page of rows (maybe none, when the node examined its budget of records
/// without finding one), and the position to ask from next when the table goes on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DbinfoScanConf {
    pub table_id: u32,
    pub rows: Vec<InfoRow>,
    pub next: Option<Position>,
}

/// Bytes `value` takes in a page.
fn encoded_len(value: &InfoValue) -> usize {
    match value {
        InfoValue::Number(_) => 9,
        InfoValue::Text(s) => 3 + s.len().min(TEXT_BYTES_MAX),
    }
}

/// Encodes one row's values.
fn encode_row(w: &mut Writer<'_>, row: &[InfoValue]) {
    for value in row {
        match value {
            InfoValue::Number(v) => {
                w.u8(0).u64(*v);
            }
            InfoValue::Text(s) => {
                let mut end = s.len().min(TEXT_BYTES_MAX);
                while !s.is_char_boundary(end) {
                    end -= 1;
                }
                w.u8(1).str16(&s[..end]);
            }
        }
    }
}

/// The rows of one DBINFO_SCANCONF being gathered: full once they take [`PAGE_BYTES`], so a
/// page holds at most that and one row.
#[derive(Debug, Default)]
pub struct Page {
    rows: Vec<InfoRow>,
    bytes: usize,
}

impl Page {
    pub fn is_full(&self) -> bool {
        self.bytes >= PAGE_BYTES || self.rows.len() >= usize::from(u16::MAX)
    }

    pub fn push(&mut self, row: InfoRow) {
        self.bytes += row.iter().map(encoded_len).sum::<usize>();
        self.rows.push(row);
    }

    /// The answer: these rows, and `next` to go on from (`None`: the table ended).
    pub fn into_conf(self, table_id: u32, next: Option<Position>) -> DbinfoScanConf {
        DbinfoScanConf {
            table_id,
            rows: self.rows,
            next,
        }
    }
}

impl DbinfoScanConf {
    /// The page of a table whose rows are all in `rows` (a small one), from row
    /// `position[0]` on.
    pub fn of_rows(table_id: u32, rows: Vec<InfoRow>, position: Position) -> DbinfoScanConf {
        let total = rows.len();
        let start = (position[0] as usize).min(total);
        let mut page = Page::default();
        let mut end = start;
        for row in rows.into_iter().skip(start) {
            if page.is_full() {
                break;
            }
            page.push(row);
            end += 1;
        }
        let next = (end < total).then_some([end as u32, 0, 0, 0]);
        page.into_conf(table_id, next)
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer::new(out);
        let columns = self.rows.first().map_or(0, Vec::len);
        w.u32(self.table_id)
            .u16(columns as u16)
            .u16(self.rows.len() as u16);
        for row in &self.rows {
            encode_row(&mut w, row);
        }
        w.u8(u8::from(self.next.is_some()));
        write_position(&mut w, &self.next.unwrap_or_default());
    }

    /// Decodes a page, checking each row against its table's columns. A row of more values
    /// than the table has here (a data node of a later version, which added columns at the
    /// end) keeps the ones known; fewer is an error.
    pub fn decode(buf: &[u8]) -> Result<DbinfoScanConf, DecodeError> {
        let mut r = Reader::new(buf, "DBINFO_SCANCONF");
        let table_id = r.u32()?;
        let table = table_by_id(table_id)
            .ok_or_else(|| r.error(format!("no ndbinfo table has id {table_id}")))?;
        let columns = usize::from(r.u16()?);
        let count = usize::from(r.u16()?);
        if count > 0 && columns < table.columns.len() {
            return Err(r.error(format!(
                "rows of {columns} values for table {}, which has {} columns",
                table.name,
                table.columns.len()
            )));
        }
        // Each value takes at least 3 bytes: a count past what is left is a lie.
        if count * columns * 3 > r.remaining() {
            return Err(r.error(format!("{count} rows in {} bytes", r.remaining())));
        }
        let mut rows = Vec::with_capacity(count);
        for _ in 0..count {
            let mut row = Vec::with_capacity(table.columns.len());
            for index in 0..columns {
                let value = match r.u8()? {
                    0 => InfoValue::Number(r.u64()?),
                    1 => InfoValue::Text(r.str16()?.to_string()),
                    tag => return Err(r.error(format!("value tag {tag}"))),
                };
                let Some(column) = table.columns.get(index) else {
                    continue;
                };
                if value.kind() != column.kind {
                    return Err(r.error(format!(
                        "column {}.{} holds a {}, not a {}",
                        table.name,
                        column.name,
                        column.kind.name(),
                        value.kind().name()
                    )));
                }
                row.push(value);
            }
            rows.push(row);
        }
        let more = r.u8()?;
        let next = read_position(&mut r)?;
        r.finish()?;
        let next = match more {
            0 => None,
            1 => Some(next),
            other => return Err(r.error(format!("more flag {other}"))),
        };
        Ok(DbinfoScanConf {
            table_id,
            rows,
            next,
        })
    }
}

/// DBINFO_SCANREF: the table cannot be read (`error`: NDB's code).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DbinfoScanRef {
    pub table_id: u32,
    pub error: u32,
}

impl DbinfoScanRef {
    pub fn encode(&self, out: &mut Vec<u8>) {
        Writer::new(out).u32(self.table_id).u32(self.error);
    }
    pub fn decode(buf: &[u8]) -> Result<DbinfoScanRef, DecodeError> {
        let mut r = Reader::new(buf, "DBINFO_SCANREF");
        let answer = DbinfoScanRef {
            table_id: r.u32()?,
            error: r.u32()?,
        };
        r.finish()?;
        Ok(answer)
    }
}

/// The rows of the catalogue tables (`tables` and `columns`), which every node makes alike.
pub fn catalogue_rows(table_id: u32) -> Option<Vec<InfoRow>> {
    match table_id {
        table_id::TABLES => Some(
            TABLES
                .iter()
                .map(|t| vec![t.id.into(), t.name.into(), t.comment.into()])
                .collect(),
        ),
        table_id::COLUMNS => Some(
            TABLES
                .iter()
                .flat_map(|t| {
                    t.columns.iter().enumerate().map(move |(i, c)| {
                        vec![
                            t.id.into(),
                            (i as u32).into(),
                            c.name.into(),
                            c.kind.name().into(),
                            c.comment.into(),
                        ]
                    })
                })
                .collect(),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_indexes_and_names_unique() {
        for (i, table) in TABLES.iter().enumerate() {
            assert_eq!(table.id as usize, i, "{}", table.name);
            assert_eq!(TABLES.iter().filter(|t| t.name == table.name).count(), 1);
            if table.scope == Scope::Node {
                assert_eq!(table.columns[0].name, "node_id", "{}", table.name);
            }
        }
        assert_eq!(table("ndb$memoryusage").unwrap().id, table_id::MEMORYUSAGE);
        assert_eq!(table("Counters").unwrap().id, table_id::COUNTERS);
        assert!(table("nosuch").is_none());
        assert!(table_by_id(TABLES.len() as u32).is_none());
    }

    #[test]
    fn a_table_pages_through_every_row_once() {
        let rows: Vec<InfoRow> = (0..3000u32)
            .map(|i| vec![i.into(), format!("row {i}").into(), "x".repeat(40).into()])
            .collect();
        let mut position = Position::default();
        let mut seen = Vec::new();
        loop {
            let page = DbinfoScanConf::of_rows(table_id::TABLES, rows.clone(), position);
            let mut buf = Vec::new();
            page.encode(&mut buf);
            assert!(buf.len() < PAGE_BYTES + 1024, "{} bytes", buf.len());
            let decoded = DbinfoScanConf::decode(&buf).unwrap();
            assert_eq!(decoded, page);
            seen.extend(decoded.rows);
            match decoded.next {
                Some(next) => position = next,
                None => break,
            }
        }
        assert_eq!(seen, rows);
    }

    #[test]
    fn rows_of_a_later_version_keep_the_known_columns() {
        let mut buf = Vec::new();
        DbinfoScanConf {
            table_id: table_id::BACKUP_ID,
            rows: vec![vec![7u32.into(), "a later column".into()]],
            next: None,
        }
        .encode(&mut buf);
        let decoded = DbinfoScanConf::decode(&buf).unwrap();
        assert_eq!(decoded.rows, [vec![InfoValue::Number(7)]]);
        // Fewer values than the table has is an error.
        let mut buf = Vec::new();
        DbinfoScanConf {
            table_id: table_id::MEMORYUSAGE,
            rows: vec![vec![1u32.into()]],
            next: None,
        }
        .encode(&mut buf);
        assert!(DbinfoScanConf::decode(&buf).is_err());
    }

    #[test]
    fn rows_are_checked_against_their_table() {
        let mut buf = Vec::new();
        DbinfoScanConf {
            table_id: table_id::BACKUP_ID,
            rows: vec![vec!["text".into()]],
            next: None,
        }
        .encode(&mut buf);
        let err = DbinfoScanConf::decode(&buf).unwrap_err();
        assert!(err.to_string().contains("backup_id.id"), "{err}");
        let mut buf = Vec::new();
        DbinfoScanConf {
            table_id: 999,
            rows: vec![],
            next: None,
        }
        .encode(&mut buf);
        assert!(DbinfoScanConf::decode(&buf).is_err());
        // A row count the bytes cannot hold.
        let mut buf = Vec::new();
        Writer::new(&mut buf)
            .u32(table_id::NODES)
            .u16(4)
            .u16(u16::MAX);
        assert!(DbinfoScanConf::decode(&buf).is_err());
    }

    #[test]
    fn long_text_is_cut_at_a_character() {
        let long = "é".repeat(TEXT_BYTES_MAX);
        let mut buf = Vec::new();
        DbinfoScanConf {
            table_id: table_id::TABLES,
            rows: vec![vec![1u32.into(), long.clone().into(), "".into()]],
            next: None,
        }
        .encode(&mut buf);
        let decoded = DbinfoScanConf::decode(&buf).unwrap();
        let InfoValue::Text(cut) = &decoded.rows[0][1] else {
            panic!("not text")
        };
        assert!(cut.len() <= TEXT_BYTES_MAX && long.starts_with(cut.as_str()));
    }

    #[test]
    fn requests_and_refusals_round_trip() {
        let req = DbinfoScanReq {
            table_id: 4,
            position: [17, 1, 2, 3],
        };
        let mut buf = Vec::new();
        req.encode(&mut buf);
        assert_eq!(DbinfoScanReq::decode(&buf), Ok(req));
        buf.push(0);
        assert!(DbinfoScanReq::decode(&buf).is_err());
        let answer = DbinfoScanRef {
            table_id: 4,
            error: 723,
        };
        let mut buf = Vec::new();
        answer.encode(&mut buf);
        assert_eq!(DbinfoScanRef::decode(&buf), Ok(answer));
    }

    #[test]
    fn the_catalogue_lists_every_column() {
        let columns = catalogue_rows(table_id::COLUMNS).unwrap();
        let total: usize = TABLES.iter().map(|t| t.columns.len()).sum();
        assert_eq!(columns.len(), total);
        assert_eq!(
            catalogue_rows(table_id::TABLES).unwrap().len(),
            TABLES.len()
        );
        assert!(catalogue_rows(table_id::NODES).is_none());
    }
}
