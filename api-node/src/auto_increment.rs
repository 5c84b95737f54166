//! Auto-increment values (NDB's `Ndb::getAutoIncrementValue`, `readAutoIncrementValue`,
//! `setAutoIncrementValue`): each table's counter is a row of the system table `SYSTAB_0`
//! (`SYSKEY_0` the table's id, `NEXTID` the next value no API node has taken), as in NDB. An
//! API node takes a range of [`ConnectOptions::auto_increment_prefetch`] values at a time by
//! an interpreted update (`NEXTID += n`, one round trip under the row's lock) and hands them
//! out from memory; values are unique across API nodes, increasing within one, and a range an
//! API node did not use is a gap (as with NDB's `ndb_autoincrement_prefetch_sz`).
//!
//! A range is dropped once this API node sees a link to a data node that was up when it was
//! taken fail (as NDB's API drops its caches when it sees the cluster fail): a system restart
//! may restore the counter from before the range (its commit was not yet in a saved global
//! checkpoint), and the values would be handed out again. Rows inserted with the range's
//! values commit after it, so such a restart restores none of them either. What this cannot
//! see: a value handed out after the restart but before this API node noticed its link fail
//! (a link is seen failed when it is used, or by the API heartbeat within four
//! HeartbeatIntervalDbApi); an insert with it then fails on that link, and a retry must take a
//! new value.
//!
//! `SYSTAB_0` is created by the first API node that needs it. A counter starts at 1. Taking a
//! range holds this API node's auto-increment lock for its two round trips (the table's
//! lookup, then the update and read), so threads of one API node take ranges one at a time.
//!
//! [`ConnectOptions::auto_increment_prefetch`]: crate::ConnectOptions::auto_increment_prefetch

use std::collections::HashMap;
use std::sync::Arc;

use rndb_protocol::{ColumnDef, ColumnType, ExecType, LockMode, TableDef, Value};

use crate::connection::Connection;
use crate::{Cluster, Error, InterpretedCode, Table};

/// NDB's system table of auto-increment counters.
pub const SYSTAB_0: &str = rndb_protocol::signals::SYSTEM_TABLES[0];
/// `NEXTID`'s column.
const NEXTID: usize = 1;
/// How often taking a range may meet another API node creating the same counter (630) or the
/// system table (721) before it gives up.
const RACES_MAX: usize = 16;

/// This API node's ranges, by table id and version.
pub(crate) type Ranges = HashMap<(u32, u32), Range>;

/// Values taken and not yet handed out.
#[derive(Debug)]
pub(crate) struct Range {
    next: u64,
    /// Exclusive.
    end: u64,
    /// The links up when it was taken: once one fails, a system restart may hand the range
    /// out again.
    links: Vec<Arc<Connection>>,
}

impl Range {
    /// The next value not handed out, unless the range is used up or a link failed since it
    /// was taken.
    fn peek(&self) -> Option<u64> {
        (self.next < self.end && !self.links.iter().any(|c| c.is_failed())).then_some(self.next)
    }
}

fn systab_def() -> TableDef {
    TableDef::new(
        SYSTAB_0,
        vec![
            ColumnDef::key("SYSKEY_0", ColumnType::UInt64),
            ColumnDef::new("NEXTID", ColumnType::UInt64),
        ],
    )
}

impl Cluster {
    /// The next auto-increment value of `table` (NDB's `getAutoIncrementValue`): from this API
    /// node's range, or from a new range of `auto_increment_prefetch` values taken from the
    /// table's counter. Unique across the cluster; never 0. A value past the table's
    /// auto-increment column's type is refused (4209).
    pub fn auto_increment_value(&self, table: &Table) -> Result<u64, Error> {
        let mut ranges = self
            .auto_increment
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let key = (table.id(), table.version());
        let value = match ranges.get_mut(&key) {
            Some(range) if range.peek().is_some() => {
                range.next += 1;
                range.next - 1
            }
            _ => {
                let links: Vec<Arc<Connection>> =
                    self.linked().filter(|c| !c.is_failed()).collect();
                let mut count = u64::from(self.auto_increment_prefetch.max(1));
                let mut taken = self.take_range(table, count);
                if matches!(&taken, Err(e) if e.code() == Some(878)) && count > 1 {
                    // Within a range of the top of u64: the last values one at a time.
                    count = 1;
                    taken = self.take_range(table, count);
                }
                let first = taken.map_err(|e| match e.code() {
                    Some(878) => Error::ndb_detail(
                        4209,
                        format!(
                            "the auto-increment counter of table {} is used up",
                            table.def().name
                        ),
                    ),
                    _ => e,
                })?;
                let (next, end) = (first + 1, first + count);
                ranges.insert(key, Range { next, end, links });
                first
            }
        };
        check_fits(table, value)?;
        Ok(value)
    }

    /// The next auto-increment value of `table` without taking it (NDB's
    /// `readAutoIncrementValue`): this API node's next if it holds a range, else the counter's.
    pub fn read_auto_increment_value(&self, table: &Table) -> Result<u64, Error> {
        let ranges = self
            .auto_increment
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(next) = ranges
            .get(&(table.id(), table.version()))
            .and_then(Range::peek)
        {
            return Ok(next);
        }
        drop(ranges);
        let systab = self.systab()?;
        let mut tx = self.start_transaction()?;
        let op = tx.read(
            &systab,
            &[Value::UInt64(table.id().into())],
            LockMode::CommittedRead,
        )?;
        match tx.execute(ExecType::Commit) {
            Ok(()) => next_id(tx.row(op)),
            Err(e) if e.code() == Some(626) => Ok(1),
            Err(e) => Err(e),
        }
    }

    /// Moves `table`'s counter so that the next value any API node takes is `next` (NDB's
    /// `setAutoIncrementValue`; 0 is taken as 1); with `increase_only`, only if that is above
    /// where it stands. This API node's range is dropped; other API nodes use up theirs first.
    pub fn set_auto_increment_value(
        &self,
        table: &Table,
        next: u64,
        increase_only: bool,
    ) -> Result<(), Error> {
        let next = next.max(1);
        let mut ranges = self
            .auto_increment
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        ranges.remove(&(table.id(), table.version()));
        let systab = self.systab()?;
        let key = [Value::UInt64(table.id().into())];
        for _ in 0..RACES_MAX {
            let mut tx = self.start_transaction()?;
            let op = tx.read(&systab, &key, LockMode::Exclusive)?;
            match tx.execute(ExecType::NoCommit) {
                Ok(()) => {
                    if !increase_only || next_id(tx.row(op))? < next {
                        tx.update(&systab, &key, &[(NEXTID, Value::UInt64(next))])?;
                    }
                    return tx.execute(ExecType::Commit);
                }
                Err(e) if e.code() == Some(626) => {
                    let mut tx = self.start_transaction()?;
                    tx.insert(&systab, &[key[0].clone(), Value::UInt64(next)])?;
                    match tx.execute(ExecType::Commit) {
                        Err(e) if e.code() == Some(630) => continue,
                        done => return done,
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Err(raced(table))
    }

    /// Takes `count` values from `table`'s counter; returns the first.
    fn take_range(&self, table: &Table, count: u64) -> Result<u64, Error> {
        let systab = self.systab()?;
        let key = [Value::UInt64(table.id().into())];
        let mut code = InterpretedCode::new(&systab);
        code.add_value(NEXTID, i64::try_from(count).unwrap_or(i64::MAX))?;
        for _ in 0..RACES_MAX {
            let mut tx = self.start_transaction()?;
            tx.interpreted_update(&systab, &key, &[], &code)?;
            // Read after the update in the same execute: the counter as this range left it.
            let op = tx.read(&systab, &key, LockMode::Read)?;
            match tx.execute(ExecType::Commit) {
                Ok(()) => return Ok(next_id(tx.row(op))? - count),
                Err(e) if e.code() == Some(626) => {
                    // The table's first range: its counter starts at 1.
                    let mut tx = self.start_transaction()?;
                    tx.insert(&systab, &[key[0].clone(), Value::UInt64(1 + count)])?;
                    match tx.execute(ExecType::Commit) {
                        Ok(()) => return Ok(1),
                        // Another API node created it first: take from it.
                        Err(e) if e.code() == Some(630) => continue,
                        Err(e) => return Err(e),
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Err(raced(table))
    }

    /// `SYSTAB_0`, created if no API node has yet.
    fn systab(&self) -> Result<Table, Error> {
        for _ in 0..RACES_MAX {
            match self.get_table(SYSTAB_0) {
                Err(e) if e.code() == Some(709) => {}
                found => return found,
            }
            match self.create_table(&systab_def()) {
                Err(e) if e.code() == Some(721) => {}
                created => return created,
            }
        }
        Err(Error::ndb_detail(
            701,
            format!("{SYSTAB_0} was created and dropped {RACES_MAX} times while this API node looked it up"),
        ))
    }
}

/// `NEXTID` of a `SYSTAB_0` row read.
fn next_id(row: Option<&[Value]>) -> Result<u64, Error> {
    match row.and_then(|row| row.get(NEXTID)) {
        Some(Value::UInt64(next)) => Ok(*next),
        other => Err(Error::ndb_detail(
            4000,
            format!("{SYSTAB_0}'s NEXTID read as {other:?}"),
        )),
    }
}

fn raced(table: &Table) -> Error {
    Error::ndb_detail(
        701,
        format!(
            "the auto-increment counter of table {} raced other API nodes {RACES_MAX} times",
            table.def().name
        ),
    )
}

/// 4209 when `value` does not fit `table`'s auto-increment column (if it has one).
fn check_fits(table: &Table, value: u64) -> Result<(), Error> {
    let Some(column) = table.def().columns.iter().find(|c| c.auto_increment) else {
        return Ok(());
    };
    let max = column
        .column_type
        .integer_bounds()
        .map_or(u64::MAX, |(_, greatest)| {
            u64::try_from(greatest).unwrap_or(u64::MAX)
        });
    if value > max {
        return Err(Error::ndb_detail(
            4209,
            format!(
                "auto-increment value {value} of table {} is past column {}'s type {}",
                table.def().name,
                column.name,
                column.column_type
            ),
        ));
    }
    Ok(())
}
