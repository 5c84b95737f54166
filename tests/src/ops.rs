//! Small transaction helpers the tests share: each runs one whole transaction.

use rndb_api::{Cluster, Error, ExecType, LockMode, Table, Value};

/// Reads the row with `key` in a transaction of its own, without locking (CommittedRead).
pub fn read_committed(
    cluster: &Cluster,
    table: &Table,
    key: &[Value],
) -> Result<Vec<Value>, Error> {
    read_with(cluster, table, key, LockMode::CommittedRead)
}

/// Reads the row with `key` in a transaction of its own with `lock`, then commits (which
/// releases the lock).
pub fn read_with(
    cluster: &Cluster,
    table: &Table,
    key: &[Value],
    lock: LockMode,
) -> Result<Vec<Value>, Error> {
    let mut transaction = cluster.start_transaction()?;
    let op = transaction.read(table, key, lock)?;
    transaction.execute(ExecType::Commit)?;
    let row = transaction.row(op).map(<[Value]>::to_vec);
    Ok(row.expect("a read that succeeded returns its row"))
}

/// Inserts `rows` in one transaction and commits.
pub fn insert_committed(
    cluster: &Cluster,
    table: &Table,
    rows: &[Vec<Value>],
) -> Result<(), Error> {
    let mut transaction = cluster.start_transaction()?;
    for row in rows {
        transaction.insert(table, row)?;
    }
    transaction.execute(ExecType::Commit)
}

/// Inserts `row` and commits, retrying temporary errors (286 while arbitration decides a
/// failure, 1204 while primaries move) until it commits, for at most `timeout`.
pub fn insert_when_served(
    cluster: &Cluster,
    table: &Table,
    row: Vec<Value>,
    timeout: std::time::Duration,
) -> anyhow::Result<()> {
    let rows = [row];
    crate::wait_until("a write to commit", timeout, || {
        match insert_committed(cluster, table, &rows) {
            Ok(()) => Ok(Some(())),
            Err(e) if e.is_temporary() => Ok(None),
            Err(e) => Err(e.into()),
        }
    })
}

/// Reads the row of `key` (a shared lock), retrying temporary errors (a node's failure is
/// handled within the heartbeat bound) until it is read, for at most `timeout`.
pub fn read_when_served(
    cluster: &Cluster,
    table: &Table,
    key: &[Value],
    timeout: std::time::Duration,
) -> anyhow::Result<Vec<Value>> {
    crate::wait_until("a read", timeout, || {
        match read_with(cluster, table, key, LockMode::Read) {
            Ok(row) => Ok(Some(row)),
            Err(e) if e.is_temporary() => Ok(None),
            Err(e) => Err(e.into()),
        }
    })
}

/// Creates the table `def`, dropping a table of the same name first if one exists.
pub fn recreate_table(cluster: &Cluster, def: &rndb_api::TableDef) -> Result<Table, Error> {
    match cluster.drop_table(&def.name) {
        Ok(()) => {}
        Err(e) if e.code() == Some(709) => {}
        Err(e) => return Err(e),
    }
    cluster.create_table(def)
}

/// True when two rows hold the same values, comparing floats by their bits (so -0.0 differs
/// from 0.0 and NaN equals the same NaN): "round-trips exactly" means bit for bit.
pub fn rows_identical(a: &[Value], b: &[Value]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|pair| match pair {
            (Value::Float64(x), Value::Float64(y)) => x.to_bits() == y.to_bits(),
            (x, y) => x == y,
        })
}
