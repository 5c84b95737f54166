//! Reading the data nodes' ndbinfo tables (`rndb_protocol::ndbinfo`), as NDB's NdbInfo API
//! does for `ndbinfo_select_all` and the `ndbinfo` database.

use rndb_protocol::ndbinfo::{self, DbinfoScanConf, DbinfoScanRef, DbinfoScanReq, Position, Scope};
use rndb_protocol::signals::block;
use rndb_protocol::{gsn, NdbError};

use crate::connection::Connection;
use crate::{single_answer, Cluster, Error};

pub use rndb_protocol::ndbinfo::{ColumnKind, InfoColumn, InfoRow, InfoTable, InfoValue, TABLES};

/// The rows of one ndbinfo table.
#[derive(Clone, Debug)]
pub struct NdbinfoRows {
    pub table: &'static InfoTable,
    /// Node by node in node id order for a table of every node's rows.
    pub rows: Vec<InfoRow>,
}

impl Cluster {
    /// Every row of ndbinfo table `name` (NDB's `ndb$` prefix allowed; 709 when there is no
    /// such table): each live data node's rows, or, for a table of the whole cluster, the
    /// rows of the DICT master (the live data node of lowest id).
    pub fn ndbinfo(&self, name: &str) -> Result<NdbinfoRows, Error> {
        let table = ndbinfo::table(name).ok_or_else(|| {
            let names: Vec<&str> = ndbinfo::TABLES.iter().map(|t| t.name).collect();
            Error::ndb_detail(
                709,
                format!(
                    "no ndbinfo table is named {name:?}; there are {}",
                    names.join(", ")
                ),
            )
        })?;
        let connections: Vec<_> = match table.scope {
            Scope::Cluster => vec![self.coordinator()],
            Scope::Node => {
                let mut live: Vec<_> = self.linked().filter(|c| !c.is_failed()).collect();
                live.sort_by_key(|c| c.peer);
                live
            }
        };
        let mut rows = Vec::new();
        for connection in connections {
            self.read_table_of(&connection, table, &mut rows)?;
        }
        Ok(NdbinfoRows { table, rows })
    }

    /// Adds `connection`'s data node's rows of `table` to `rows`, a page at a time. A page
    /// this API node cannot read (a data node of another version, say) fails the read alone:
    /// the link, intact, goes on serving.
    fn read_table_of(
        &self,
        connection: &Connection,
        table: &'static InfoTable,
        rows: &mut Vec<InfoRow>,
    ) -> Result<(), Error> {
        let unreadable = |reason: String| Error::Protocol {
            node: connection.peer,
            reason: format!("ndbinfo table {}: {reason}", table.name),
        };
        let mut position = Position::default();
        loop {
            let mut payload = Vec::new();
            DbinfoScanReq {
                table_id: table.id,
                position,
            }
            .encode(&mut payload);
            let answers =
                self.request_to(connection, gsn::DBINFO_SCANREQ, block::DBINFO, &payload)?;
            let page = match single_answer(&answers, connection)? {
                (gsn::DBINFO_SCANCONF, payload) => {
                    DbinfoScanConf::decode(payload).map_err(|e| unreadable(e.to_string()))?
                }
                (gsn::DBINFO_SCANREF, payload) => {
                    let refusal =
                        DbinfoScanRef::decode(payload).map_err(|e| unreadable(e.to_string()))?;
                    return Err(Error::Ndb(NdbError::with_detail(
                        refusal.error,
                        format!(
                            "data node {} cannot read ndbinfo table {}",
                            connection.peer, table.name
                        ),
                    )));
                }
                (signal, _) => {
                    return Err(unreadable(format!("answer {signal} to DBINFO_SCANREQ")))
                }
            };
            if page.table_id != table.id {
                return Err(unreadable(format!("a page of table {}", page.table_id)));
            }
            rows.extend(page.rows);
            match page.next {
                // Each page moves on: a node that answered the same position again would
                // keep this read going for ever.
                Some(next) if next > position => position = next,
                Some(next) => {
                    return Err(unreadable(format!(
                        "the page after {position:?} goes on from {next:?}"
                    )))
                }
                None => return Ok(()),
            }
        }
    }
}
