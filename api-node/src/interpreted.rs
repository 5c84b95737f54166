//! Interpreted operations (NDB's `NdbInterpretedCode` with `interpretedUpdateTuple`,
//! `interpretedDeleteTuple`, or `readTuple`): a row's integer columns changed by a constant in
//! the data node, or the row deleted or read, under a condition on the row, in one round trip
//! and (but for a committed read) under the row's lock, without reading it first.
//!
//! ```no_run
//! # fn demo(cluster: &rndb_api::Cluster, accounts: &rndb_api::Table) -> Result<(), rndb_api::Error> {
//! use rndb_api::{CmpOp, ExecType, Filter, InterpretedCode, Value};
//! // Take 30 from account 7's balance (column 1), unless that would leave less than 0.
//! let mut code = InterpretedCode::new(accounts);
//! code.sub_value(1, 30)?
//!     .condition(Filter::cmp(1, CmpOp::Ge, Value::Int64(30)))?
//!     .exit_nok(6000)?;
//! let mut tx = cluster.start_transaction()?;
//! tx.interpreted_update(accounts, &[Value::Int32(7)], &[], &code)?;
//! tx.execute(ExecType::Commit)?; // error 6000 when the balance was below 30
//! # Ok(()) }
//! ```

use rndb_protocol::filter::Filter;
use rndb_protocol::interpreter::Program;

use crate::{Error, Table};

/// A program for [`crate::Transaction::interpreted_update`] (or, without changes,
/// [`crate::Transaction::interpreted_read`], [`crate::Transaction::interpreted_delete`] and
/// [`crate::Transaction::interpreted_write`]):
/// a condition the row must meet
/// (else the operation fails with the exit code, 626 unless [`InterpretedCode::exit_nok`] names
/// another), then integer columns changed by constants. Checked against its table as it is
/// built; the data node checks it again. A change that meets a NULL or leaves its column
/// type's range fails the operation with 878.
#[derive(Clone, Debug)]
pub struct InterpretedCode {
    table: Table,
    pub(crate) program: Program,
}

impl InterpretedCode {
    /// An empty program for rows of `table`.
    pub fn new(table: &Table) -> InterpretedCode {
        InterpretedCode {
            table: table.clone(),
            program: Program::default(),
        }
    }

    /// Adds `delta` to integer column `column` (NDB's `add_val`).
    pub fn add_value(&mut self, column: usize, delta: i64) -> Result<&mut Self, Error> {
        let column = u16::try_from(column).map_err(|_| {
            Error::ndb_detail(
                4004,
                format!("column {column} of table {}", self.table.def().name),
            )
        })?;
        self.program.changes.push((column, delta));
        if let Err(e) = self.program.check(self.table.def()) {
            self.program.changes.pop();
            return Err(e.into());
        }
        Ok(self)
    }

    /// Subtracts `delta` from integer column `column` (NDB's `sub_val`).
    pub fn sub_value(&mut self, column: usize, delta: i64) -> Result<&mut Self, Error> {
        let negated = delta.checked_neg().ok_or_else(|| {
            Error::ndb_detail(4209, format!("cannot subtract {delta}: use add_value"))
        })?;
        self.add_value(column, negated)
    }

    /// The row must meet `filter` (as a scan filter evaluates it; NDB's `branch_col_*` to an
    /// exit), else the operation fails with the exit code. A second call replaces the first.
    pub fn condition(&mut self, filter: Filter) -> Result<&mut Self, Error> {
        let earlier = self.program.condition.replace(filter);
        if let Err(e) = self.program.check(self.table.def()) {
            self.program.condition = earlier;
            return Err(e.into());
        }
        Ok(self)
    }

    /// The error code of a condition that does not hold (NDB's `interpret_exit_nok`): 626
    /// (the default, as in NDB), 899 (NDB's old default) or one of 6000-6999, which
    /// applications choose for themselves; another is refused (4116).
    pub fn exit_nok(&mut self, code: u16) -> Result<&mut Self, Error> {
        let earlier = std::mem::replace(&mut self.program.exit_code, code);
        if let Err(e) = self.program.check(self.table.def()) {
            self.program.exit_code = earlier;
            return Err(e.into());
        }
        Ok(self)
    }

    /// The table the program was built for.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// 4116 unless the program was built for `table` and changes no column (what an
    /// interpreted `operation`, a read or a delete, takes).
    pub(crate) fn check_condition_only(&self, table: &Table, operation: &str) -> Result<(), Error> {
        self.check_for(table)?;
        if !self.program.changes.is_empty() {
            return Err(Error::ndb_detail(
                4116,
                format!("an interpreted {operation} takes a condition only, no column changes"),
            ));
        }
        Ok(())
    }

    /// 4116 unless the program was built for `table` (the same id and version).
    pub(crate) fn check_for(&self, table: &Table) -> Result<(), Error> {
        if self.table.id() == table.id() && self.table.version() == table.version() {
            return Ok(());
        }
        Err(Error::ndb_detail(
            4116,
            format!(
                "the interpreted code was built for table {}, not {}",
                self.table.def().name,
                table.def().name
            ),
        ))
    }
}
