//! The bank workload's table and transfer, shared by the tests that move money between
//! accounts while data nodes fail and restart: the total of the balances must never change.

use rndb_api::{Cluster, ColumnDef, ColumnType, Error, ExecType, LockMode, Table, TableDef, Value};

/// `name(id UInt32 key, balance Int64)`.
pub fn accounts_def(name: &str) -> TableDef {
    TableDef::new(
        name,
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("balance", ColumnType::Int64),
        ],
    )
}

/// The accounts row of `id` holding `balance`.
pub fn row(id: u32, balance: i64) -> Vec<Value> {
    vec![Value::UInt32(id), Value::Int64(balance)]
}

/// The primary key of account `id`.
pub fn key(id: u32) -> [Value; 1] {
    [Value::UInt32(id)]
}

/// The balance of an accounts row.
#[track_caller]
pub fn balance(row: &[Value]) -> i64 {
    match row {
        [Value::UInt32(_), Value::Int64(balance)] => *balance,
        other => panic!("an accounts row is (UInt32, Int64), got {other:?}"),
    }
}

/// Moves `amount` from account `from` to account `to` in one transaction: both rows read with
/// exclusive locks, then both updated and committed.
pub fn transfer(
    api: &Cluster,
    table: &Table,
    from: u32,
    to: u32,
    amount: i64,
) -> Result<(), Error> {
    let mut transaction = api.start_transaction()?;
    let from_op = transaction.read(table, &key(from), LockMode::Exclusive)?;
    let to_op = transaction.read(table, &key(to), LockMode::Exclusive)?;
    transaction.execute(ExecType::NoCommit)?;
    let read_balance = |op| balance(transaction.row(op).expect("a locked read returns its row"));
    let (from_balance, to_balance) = (read_balance(from_op), read_balance(to_op));
    transaction.update(
        table,
        &key(from),
        &[(1, Value::Int64(from_balance - amount))],
    )?;
    transaction.update(table, &key(to), &[(1, Value::Int64(to_balance + amount))])?;
    transaction.execute(ExecType::Commit)
}
