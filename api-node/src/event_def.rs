//! Named events in the dictionary (NDB's `NdbDictionary::Event`, `Dictionary::createEvent`,
//! `getEvent`, `dropEvent`, `listEvents`, and `Ndb::createEventOperation(eventName)`): an event
//! names a table, the kinds of change it reports, and whether its operations merge. As in NDB,
//! each is a row of the system table `NDB$EVENTS_0`, created by the first API node that
//! creates an event; every API node sees the same events, and they outlive the API nodes.
//!
//! An event names its table by name: an operation of it subscribes to the table of that name
//! when it is created (NDB keeps the table's id and version, and an event of a table dropped
//! and created again fails). Dropping the table leaves the event.

use rndb_protocol::{ColumnDef, ColumnType, ExecType, LockMode, TableDef, Value};

use crate::event::{EventOperation, EventType};
use crate::{Cluster, Error, ScanOptions, Table};

/// NDB's system table of named events.
pub const NDB_EVENTS_0: &str = rndb_protocol::signals::SYSTEM_TABLES[1];
/// The longest event name, in bytes.
pub const EVENT_NAME_BYTES_MAX: usize = 128;
/// How often creating an event may meet another API node creating or dropping the system
/// table (721, 709) before it gives up.
const RACES_MAX: usize = 16;

/// Which kinds of change an event reports (NDB's `TableEvent` bits: TE_INSERT, TE_DELETE,
/// TE_UPDATE, TE_ALL).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TableEvents(u32);

impl TableEvents {
    pub const INSERT: TableEvents = TableEvents(1);
    pub const DELETE: TableEvents = TableEvents(1 << 1);
    pub const UPDATE: TableEvents = TableEvents(1 << 2);
    pub const ALL: TableEvents = TableEvents(0b111);

    /// The bits, as stored.
    pub fn bits(self) -> u32 {
        self.0
    }

    /// True when an event of kind `kind` is reported. A gap (`Inconsistent`) and the table's
    /// drop always are.
    pub fn reports(self, kind: EventType) -> bool {
        match kind {
            EventType::Insert => self.0 & Self::INSERT.0 != 0,
            EventType::Delete => self.0 & Self::DELETE.0 != 0,
            EventType::Update => self.0 & Self::UPDATE.0 != 0,
            EventType::Inconsistent | EventType::Drop => true,
        }
    }
}

impl std::ops::BitOr for TableEvents {
    type Output = TableEvents;
    fn bitor(self, other: TableEvents) -> TableEvents {
        TableEvents(self.0 | other.0)
    }
}

/// A named event (NDB's `NdbDictionary::Event`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventDef {
    pub name: String,
    /// The table it reports the changes of, by name.
    pub table: String,
    /// The kinds of change it reports (NDB's `addTableEvent`).
    pub events: TableEvents,
    /// Its operations merge (NDB's `Event::mergeEvents`): one event a row an epoch, BLOB and
    /// TEXT values whole ([`Cluster::create_event_operation_merged`]).
    pub merge_events: bool,
}

impl EventDef {
    /// An event of every kind of change of `table`, not merged.
    pub fn new(name: &str, table: &str) -> EventDef {
        EventDef {
            name: name.to_string(),
            table: table.to_string(),
            events: TableEvents::ALL,
            merge_events: false,
        }
    }
}

fn events_def() -> TableDef {
    TableDef::new(
        NDB_EVENTS_0,
        vec![
            ColumnDef::key("NAME", ColumnType::Varbinary(EVENT_NAME_BYTES_MAX as u16)),
            ColumnDef::new("TABLE_NAME", ColumnType::Varbinary(255)),
            ColumnDef::new("EVENT_TYPE", ColumnType::UInt32),
            ColumnDef::new("MERGE_EVENTS", ColumnType::UInt32),
        ],
    )
}

pub(crate) fn not_found(name: &str) -> Error {
    Error::ndb_detail(4710, format!("no event named {name:?}"))
}

/// The key of event `name` in `NDB$EVENTS_0`: 4710 for a name no event can have.
pub(crate) fn key_of(name: &str) -> Result<[Value; 1], Error> {
    if name.is_empty() || name.len() > EVENT_NAME_BYTES_MAX {
        return Err(not_found(name));
    }
    Ok([Value::Varbinary(name.as_bytes().to_vec())])
}

impl Cluster {
    /// Creates named event `def` (NDB's `Dictionary::createEvent`): 709 when its table does
    /// not exist, 746 when an event of that name does, 4708 for an empty name or one past
    /// [`EVENT_NAME_BYTES_MAX`].
    pub fn create_event(&self, def: &EventDef) -> Result<(), Error> {
        if def.name.is_empty() || def.name.len() > EVENT_NAME_BYTES_MAX {
            return Err(Error::ndb_detail(
                4708,
                format!(
                    "event name {:?}: 1 to {EVENT_NAME_BYTES_MAX} bytes",
                    def.name
                ),
            ));
        }
        self.get_table(&def.table)?;
        let events = (self.events_table(true)?)
            .ok_or_else(|| Error::ndb_detail(4711, format!("{NDB_EVENTS_0} is missing")))?;
        let mut tx = self.start_transaction()?;
        tx.insert(
            &events,
            &[
                Value::Varbinary(def.name.as_bytes().to_vec()),
                Value::Varbinary(def.table.as_bytes().to_vec()),
                Value::UInt32(def.events.0 & TableEvents::ALL.0),
                Value::UInt32(u32::from(def.merge_events)),
            ],
        )?;
        match tx.execute(ExecType::Commit) {
            Err(e) if e.code() == Some(630) => Err(Error::ndb_detail(
                746,
                format!("an event named {:?} exists", def.name),
            )),
            done => done,
        }
    }

    /// Named event `name` (NDB's `Dictionary::getEvent`): 4710 when there is none.
    pub fn get_event(&self, name: &str) -> Result<EventDef, Error> {
        let key = key_of(name)?;
        let events = self.events_table(false)?.ok_or_else(|| not_found(name))?;
        let mut tx = self.start_transaction()?;
        let op = tx.read(&events, &key, LockMode::CommittedRead)?;
        match tx.execute(ExecType::Commit) {
            Ok(()) => event_of(tx.row(op)),
            Err(e) if e.code() == Some(626) => Err(not_found(name)),
            Err(e) => Err(e),
        }
    }

    /// Drops named event `name` (NDB's `Dictionary::dropEvent`): 4710 when there is none.
    /// Operations of it go on until they are dropped.
    pub fn drop_event(&self, name: &str) -> Result<(), Error> {
        let key = key_of(name)?;
        let events = self.events_table(false)?.ok_or_else(|| not_found(name))?;
        let mut tx = self.start_transaction()?;
        tx.delete(&events, &key)?;
        match tx.execute(ExecType::Commit) {
            Err(e) if e.code() == Some(626) => Err(not_found(name)),
            done => done,
        }
    }

    /// Every named event, by name (NDB's `Dictionary::listEvents`).
    pub fn list_events(&self) -> Result<Vec<EventDef>, Error> {
        let Some(events) = self.events_table(false)? else {
            return Ok(Vec::new());
        };
        let mut tx = self.start_transaction()?;
        let rows = tx.scan_table(&events, &ScanOptions::default())?;
        let mut defs = rows
            .map(|row| event_of(Some(&row?)))
            .collect::<Result<Vec<_>, _>>()?;
        defs.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(defs)
    }

    /// Subscribes to the changes named event `name` reports (NDB's
    /// `Ndb::createEventOperation(eventName)`): those of its table of that name now, of the
    /// kinds it names, merged when it says so. 4710 when there is no such event; the table's
    /// lookup's error (709) when its table is gone.
    pub fn create_event_operation_for(&self, name: &str) -> Result<EventOperation<'_>, Error> {
        let def = self.get_event(name)?;
        let table = self.get_table(&def.table)?;
        self.start_event_operation_of(&def, &table)?.wait_begun()
    }

    /// An operation of event `def` on `table` (merged when `def` says so, handing out the
    /// kinds it names), subscribed, not yet begun.
    pub(crate) fn start_event_operation_of(
        &self,
        def: &EventDef,
        table: &Table,
    ) -> Result<EventOperation<'_>, Error> {
        let mut op = match def.merge_events {
            true => self.start_event_operation_merged(table)?,
            false => self.start_event_operation(table)?,
        };
        op.report_only(def.events);
        Ok(op)
    }

    /// `NDB$EVENTS_0`, created when `create` and no API node has yet (else `None` while there
    /// is none).
    fn events_table(&self, create: bool) -> Result<Option<Table>, Error> {
        for _ in 0..RACES_MAX {
            match self.get_table(NDB_EVENTS_0) {
                Err(e) if e.code() == Some(709) => {}
                found => return found.map(Some),
            }
            if !create {
                return Ok(None);
            }
            match self.create_table(&events_def()) {
                Err(e) if e.code() == Some(721) => {}
                created => return created.map(Some),
            }
        }
        Err(Error::ndb_detail(
            701,
            format!("{NDB_EVENTS_0} was created and dropped {RACES_MAX} times while this API node looked it up"),
        ))
    }
}

/// A row of `NDB$EVENTS_0` as an event.
pub(crate) fn event_of(row: Option<&[Value]>) -> Result<EventDef, Error> {
    let text = |v: &Value| match v {
        Value::Varbinary(b) => String::from_utf8(b.clone()).ok(),
        _ => None,
    };
    match row {
        Some([name, table, Value::UInt32(events), Value::UInt32(merge)]) => {
            match (text(name), text(table)) {
                (Some(name), Some(table)) => Ok(EventDef {
                    name,
                    table,
                    events: TableEvents(*events),
                    merge_events: *merge != 0,
                }),
                _ => Err(bad_row(row)),
            }
        }
        _ => Err(bad_row(row)),
    }
}

fn bad_row(row: Option<&[Value]>) -> Error {
    Error::ndb_detail(
        4000,
        format!("a row of {NDB_EVENTS_0} that is no event: {row:?}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_events_report_their_kinds_and_always_gaps_and_drops() {
        let some = TableEvents::INSERT | TableEvents::DELETE;
        assert!(some.reports(EventType::Insert) && some.reports(EventType::Delete));
        assert!(!some.reports(EventType::Update));
        assert!(some.reports(EventType::Inconsistent) && some.reports(EventType::Drop));
        assert_eq!(TableEvents::ALL, some | TableEvents::UPDATE);
        let row = [
            Value::Varbinary(b"ev".to_vec()),
            Value::Varbinary(b"t".to_vec()),
            Value::UInt32(some.bits()),
            Value::UInt32(1),
        ];
        let def = event_of(Some(&row)).expect("an event");
        assert_eq!((def.events, def.merge_events), (some, true));
        assert_eq!(
            event_of(Some(&row[..3])).map_err(|e| e.code()),
            Err(Some(4000))
        );
    }
}
