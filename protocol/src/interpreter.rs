//! Interpreted updates (NDB's `interpretedUpdateTuple` with an `NdbInterpretedCode`), in the
//! subset rndb runs: a condition the row must meet, else the operation fails with the
//! program's exit code (NDB's `interpret_exit_nok`), then integer columns changed by a
//! constant (`add_val`/`sub_val`). The primary replica runs the program against the row it
//! locked; the backups receive the values it computed, as a plain update.
//!
//! On the wire (after a TCKEYREQ's or LQHKEYREQ's attributes, flagged): has-condition u8 ·
//! [filter, as [`Filter::encode`] writes it] · exit code u16 · change count u16 · (column u16 ·
//! delta i64 as u64)*.
//!
//! Running one: a missing row is 626; a condition that does not hold is the exit code (626
//! unless the program names another: 899, NDB's old default, or one of 6000-6999); a change of a NULL
//! column, or one that leaves the column type's range, is 878 (NDB's uninitialised register;
//! NDB's registers wrap silently where rndb refuses).

use crate::codec::{DecodeError, Reader, Writer};
use crate::error::NdbError;
use crate::error::USER_EXIT_CODES;
use crate::filter::{check_filter, Filter};
use crate::schema::{OperationType, TableDef, Value, COLUMNS_MAX};

/// The most column changes a program holds (one per column of the widest table).
pub const CHANGES_MAX: usize = COLUMNS_MAX;
/// The exit code of a condition that does not hold when the program names none.
pub const EXIT_NOK_DEFAULT: u16 = 626;

/// A program: run against the row an interpreted update locked.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    /// Must hold for the row as it is, else the operation fails with `exit_code`.
    pub condition: Option<Filter>,
    /// The error of a condition that does not hold.
    pub exit_code: u16,
    /// (column, delta): the column's value plus the delta.
    pub changes: Vec<(u16, i64)>,
}

impl Default for Program {
    fn default() -> Self {
        Program {
            condition: None,
            exit_code: EXIT_NOK_DEFAULT,
            changes: Vec::new(),
        }
    }
}

impl Program {
    pub fn encode(&self, w: &mut Writer<'_>) {
        match &self.condition {
            Some(filter) => {
                w.u8(1);
                filter.encode(w);
            }
            None => {
                w.u8(0);
            }
        }
        w.u16(self.exit_code).u16(self.changes.len() as u16);
        for &(column, delta) in &self.changes {
            w.u16(column).u64(delta as u64);
        }
    }

    pub fn decode(r: &mut Reader<'_>) -> Result<Program, DecodeError> {
        let condition = match r.u8()? {
            0 => None,
            1 => Some(Filter::decode(r)?),
            b => return Err(r.error(format!("program condition flag {b}"))),
        };
        let exit_code = r.u16()?;
        let count = usize::from(r.u16()?);
        if count > CHANGES_MAX {
            return Err(r.error(format!("{count} column changes, at most {CHANGES_MAX}")));
        }
        let changes = (0..count)
            .map(|_| Ok((r.u16()?, r.u64()? as i64)))
            .collect::<Result<_, DecodeError>>()?;
        Ok(Program {
            condition,
            exit_code,
            changes,
        })
    }

    /// Checks the program against a table: the exit code is 626, 899 or one of 6000-6999
    /// (4116), the condition's columns and constants are a scan filter's, and each change
    /// names an integer column outside the primary key (4004), each at most once (4209 for a
    /// non-integer column or a second change).
    pub fn check(&self, def: &TableDef) -> Result<(), NdbError> {
        let code = u32::from(self.exit_code);
        if !(code == 626 || code == 899 || USER_EXIT_CODES.contains(&code)) {
            return Err(NdbError::with_detail(
                4116,
                format!(
                    "exit code {code}: an interpreted program exits with 626, 899 or 6000-6999"
                ),
            ));
        }
        if let Some(filter) = &self.condition {
            check_filter(def, filter)?;
        }
        for (i, &(column, _)) in self.changes.iter().enumerate() {
            let Some(cdef) = def.columns.get(usize::from(column)) else {
                return Err(NdbError::with_detail(
                    4004,
                    format!(
                        "interpreted update names column {column} of table {}",
                        def.name
                    ),
                ));
            };
            if cdef.primary_key {
                return Err(NdbError::with_detail(
                    4004,
                    format!(
                        "interpreted update changes column {}, part of the primary key",
                        cdef.name
                    ),
                ));
            }
            if !cdef.column_type.is_integer() {
                return Err(NdbError::with_detail(
                    4209,
                    format!(
                        "interpreted update adds to column {} of type {}, not an integer",
                        cdef.name, cdef.column_type
                    ),
                ));
            }
            if self.changes[..i].iter().any(|&(c, _)| c == column) {
                return Err(NdbError::with_detail(
                    4209,
                    format!("interpreted update changes column {} twice", cdef.name),
                ));
            }
        }
        Ok(())
    }

    /// 4116 unless the program may go with an operation of type `op`: an update's, or a read's,
    /// delete's or write's that changes no column (NDB's readTuple and interpretedDeleteTuple;
    /// a write's condition is rndb's: it holds for a row that is there, and a missing row is
    /// inserted, with nothing to change).
    pub fn check_operation(&self, op: OperationType) -> Result<(), NdbError> {
        let refusal = match op {
            OperationType::Update => None,
            OperationType::Read | OperationType::Delete | OperationType::Write
                if self.changes.is_empty() =>
            {
                None
            }
            OperationType::Read | OperationType::Delete | OperationType::Write => {
                Some("an interpreted read, delete or write changes no column")
            }
            OperationType::Insert => {
                Some("an insert carries no interpreted program: a write's condition does")
            }
        };
        refusal.map_or(Ok(()), |refusal| Err(NdbError::with_detail(4116, refusal)))
    }

    /// 4209 when a column is both set by `attrs` and changed by the program.
    pub fn check_attrs(&self, def: &TableDef, attrs: &[(u16, Value)]) -> Result<(), NdbError> {
        match self
            .changes
            .iter()
            .find(|&&(c, _)| attrs.iter().any(|&(a, _)| a == c))
        {
            Some(&(column, _)) => Err(NdbError::with_detail(
                4209,
                format!(
                    "column {} is both set and changed by the interpreted program",
                    def.columns
                        .get(usize::from(column))
                        .map_or("?", |c| c.name.as_str())
                ),
            )),
            None => Ok(()),
        }
    }

    /// Checks the program against the table (as [`Program::check`]: the data node runs what
    /// another node may have sent), then runs it against `row` (every column, in table
    /// order): the condition, then the changes, in place. On an error `row` may hold part of
    /// the changes.
    pub fn run(&self, def: &TableDef, row: &mut [Value]) -> Result<(), NdbError> {
        self.check(def)?;
        if let Some(filter) = &self.condition {
            if !filter.matches(row) {
                return Err(NdbError::with_detail(
                    u32::from(self.exit_code),
                    format!(
                        "the interpreted update's condition does not hold for the row of table {}",
                        def.name
                    ),
                ));
            }
        }
        for &(column, delta) in &self.changes {
            let name = || {
                def.columns
                    .get(usize::from(column))
                    .map_or("?", |c| c.name.as_str())
            };
            let Some(value) = row.get_mut(usize::from(column)) else {
                return Err(NdbError::with_detail(4004, format!("column {column}")));
            };
            let column_type = def.columns.get(usize::from(column)).map(|c| c.column_type);
            let changed = match *value {
                Value::Int32(v) => {
                    i32::try_from(i64::from(v).checked_add(delta).unwrap_or(i64::MAX))
                        .ok()
                        .map(Value::Int32)
                }
                Value::UInt32(v) => u32::try_from(i64::from(v).checked_add(delta).unwrap_or(-1))
                    .ok()
                    .map(Value::UInt32),
                Value::Int64(v) => v.checked_add(delta).map(Value::Int64),
                Value::UInt64(v) => v.checked_add_signed(delta).map(Value::UInt64),
                Value::Null => {
                    return Err(NdbError::with_detail(
                        878,
                        format!(
                            "interpreted update adds {delta} to column {}, which is NULL",
                            name()
                        ),
                    ))
                }
                _ => {
                    return Err(NdbError::with_detail(
                        4209,
                        format!(
                            "interpreted update adds to column {}, not an integer",
                            name()
                        ),
                    ))
                }
            };
            // A narrow integer column (8, 16, 24 bits) is carried by a 32-bit value.
            let changed = changed.filter(|v| column_type.is_none_or(|t| v.fits(t)));
            match changed {
                Some(changed) => *value = changed,
                None => {
                    return Err(NdbError::with_detail(
                        878,
                        format!(
                            "interpreted update adds {delta} to column {} ({value:?}): out of its type's range",
                            name()
                        ),
                    ))
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::CmpOp;
    use crate::schema::{ColumnDef, ColumnType};

    fn table() -> TableDef {
        TableDef::new(
            "t",
            vec![
                ColumnDef::key("id", ColumnType::Int32),
                ColumnDef::new("a", ColumnType::Int32),
                ColumnDef::new("b", ColumnType::UInt64),
                ColumnDef::nullable("c", ColumnType::Int64),
                ColumnDef::new("s", ColumnType::Varchar(8)),
            ],
        )
    }

    fn run(program: &Program, row: &[Value]) -> Result<Vec<Value>, u32> {
        let mut row = row.to_vec();
        program.run(&table(), &mut row).map_err(|e| e.code)?;
        Ok(row)
    }

    fn row() -> Vec<Value> {
        vec![
            Value::Int32(1),
            Value::Int32(10),
            Value::UInt64(5),
            Value::Null,
            Value::Varchar("x".into()),
        ]
    }

    #[test]
    fn goes_with_the_operations_that_take_it() {
        let condition = Program {
            condition: Some(Filter::IsNull(1)),
            exit_code: 6000,
            changes: Vec::new(),
        };
        let changing = Program {
            changes: vec![(2, 1)],
            ..condition.clone()
        };
        use OperationType::*;
        for op in [Read, Update, Delete, Write] {
            assert_eq!(condition.check_operation(op), Ok(()), "{op:?}");
        }
        assert_eq!(changing.check_operation(Update), Ok(()));
        for (program, op) in [
            (&condition, Insert),
            (&changing, Read),
            (&changing, Delete),
            (&changing, Write),
        ] {
            let refused = program.check_operation(op).map_err(|e| e.code);
            assert_eq!(refused, Err(4116), "{op:?}");
        }
    }

    #[test]
    fn adds_under_a_condition() {
        let program = Program {
            condition: Some(Filter::cmp(1, CmpOp::Ge, Value::Int32(3))),
            exit_code: 6001,
            changes: vec![(1, -3), (2, 7)],
        };
        let mut expected = row();
        expected[1] = Value::Int32(7);
        expected[2] = Value::UInt64(12);
        assert_eq!(run(&program, &row()), Ok(expected));
        let mut low = row();
        low[1] = Value::Int32(2);
        assert_eq!(run(&program, &low), Err(6001));
        let default_exit = Program {
            exit_code: EXIT_NOK_DEFAULT,
            ..program
        };
        assert_eq!(run(&default_exit, &low), Err(626));
    }

    #[test]
    fn refuses_nulls_overflows_keys_and_text() {
        let add = |column, delta| Program {
            changes: vec![(column, delta)],
            ..Program::default()
        };
        assert_eq!(run(&add(3, 1), &row()), Err(878));
        assert_eq!(run(&add(2, -6), &row()), Err(878));
        assert_eq!(run(&add(1, i64::from(i32::MAX)), &row()), Err(878));
        assert_eq!(run(&add(1, i64::MIN), &row()), Err(878));
        assert_eq!(run(&add(0, 1), &row()), Err(4004));
        assert_eq!(run(&add(4, 1), &row()), Err(4209));
        assert_eq!(run(&add(9, 1), &row()), Err(4004));
        let twice = Program {
            changes: vec![(1, 1), (1, 2)],
            ..Program::default()
        };
        assert_eq!(run(&twice, &row()), Err(4209));
        for (code, ok) in [
            (626, true),
            (899, true),
            (6000, true),
            (6999, true),
            (0, false),
            (266, false),
            (7000, false),
        ] {
            let program = Program {
                exit_code: code,
                ..Program::default()
            };
            assert_eq!(program.check(&table()).is_ok(), ok, "exit code {code}");
        }
        let mut at_max = row();
        at_max[2] = Value::UInt64(u64::MAX - 1);
        assert_eq!(
            run(&add(2, 1), &at_max).map(|r| r[2].clone()),
            Ok(Value::UInt64(u64::MAX))
        );
    }

    #[test]
    fn round_trips_and_refuses_bad_bytes() {
        let program = Program {
            condition: Some(Filter::and(vec![
                Filter::cmp(1, CmpOp::Gt, Value::Int32(0)),
                Filter::IsNull(3),
            ])),
            exit_code: 6000,
            changes: vec![(1, -1), (2, i64::MIN)],
        };
        let mut buf = Vec::new();
        program.encode(&mut Writer::new(&mut buf));
        let mut r = Reader::new(&buf, "program");
        assert_eq!(Program::decode(&mut r).unwrap(), program);
        r.finish().unwrap();
        for cut in 0..buf.len() {
            assert!(Program::decode(&mut Reader::new(&buf[..cut], "program")).is_err());
        }
        let mut bad = buf.clone();
        bad[0] = 2;
        assert!(Program::decode(&mut Reader::new(&bad, "program")).is_err());
        let mut many = vec![0, 0, 0];
        many.extend_from_slice(&(CHANGES_MAX as u16 + 1).to_le_bytes());
        assert!(Program::decode(&mut Reader::new(&many, "program")).is_err());
    }
}
