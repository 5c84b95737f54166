//! Proves that primary-key operations (insert, read, update, write, delete) against a real data
//! node round-trip every column type bit for bit, with single and composite keys, alone and a
//! hundred to one execute, and that a dropped table is gone (error 709).

use rndb_api::{
    AbortOption, Cluster, ColumnDef, ColumnType, ExecType, LockMode, Table, TableDef, Value,
};
use rndb_tests::ops::{insert_committed, read_committed, recreate_table, rows_identical};
use rndb_tests::{assert_ndb_code, ClusterSpec, TestCluster};

/// A table with one column of every type, a nullable text column and a nullable integer.
fn typed_def(name: &str) -> TableDef {
    TableDef::new(
        name,
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("i32", ColumnType::Int32),
            ColumnDef::new("u32", ColumnType::UInt32),
            ColumnDef::new("i64", ColumnType::Int64),
            ColumnDef::new("u64", ColumnType::UInt64),
            ColumnDef::new("f64", ColumnType::Float64),
            ColumnDef::new("text", ColumnType::Varchar(32)),
            ColumnDef::new("bytes", ColumnType::Varbinary(16)),
            ColumnDef::nullable("note", ColumnType::Varchar(8)),
            ColumnDef::nullable("maybe", ColumnType::Int64),
        ],
    )
}

/// ASCII-only text and bytes that vary with `id`, so rows differ from each other.
fn typed_row(id: u32) -> Vec<Value> {
    let n = i64::from(id);
    vec![
        Value::UInt32(id),
        Value::Int32(-(id as i32) * 7),
        Value::UInt32(id.wrapping_mul(2_654_435_761)),
        Value::Int64(-n * 1_000_000_007),
        Value::UInt64(u64::from(id) << 33),
        Value::Float64(f64::from(id) / 3.0),
        Value::Varchar(format!("row {id}")),
        Value::Varbinary(id.to_le_bytes().to_vec()),
        match id % 2 {
            0 => Value::Null,
            _ => Value::Varchar(format!("n{id}")),
        },
        match id % 3 {
            0 => Value::Null,
            _ => Value::Int64(n),
        },
    ]
}

/// Rows at the edges of every type: extremes, signed zero, NaN, multi-byte UTF-8, zero bytes,
/// empty strings, values at the declared maximum length.
fn edge_rows() -> Vec<Vec<Value>> {
    vec![
        vec![
            Value::UInt32(u32::MAX),
            Value::Int32(i32::MIN),
            Value::UInt32(u32::MAX),
            Value::Int64(i64::MIN),
            Value::UInt64(u64::MAX),
            Value::Float64(-0.0),
            Value::Varchar("héllo ✓ wörld — ☃".to_string()),
            Value::Varbinary(vec![0, 0xFF, 0, 0x80, 0x7F]),
            Value::Varchar("12345678".to_string()),
            Value::Int64(i64::MAX),
        ],
        vec![
            Value::UInt32(0),
            Value::Int32(i32::MAX),
            Value::UInt32(0),
            Value::Int64(i64::MAX),
            Value::UInt64(0),
            Value::Float64(f64::NAN),
            Value::Varchar(String::new()),
            Value::Varbinary(Vec::new()),
            Value::Varchar(String::new()),
            Value::Null,
        ],
        vec![
            Value::UInt32(1 << 31),
            Value::Int32(-1),
            Value::UInt32(1),
            Value::Int64(-1),
            Value::UInt64(1),
            Value::Float64(f64::MAX),
            Value::Varchar("x".repeat(32)),
            Value::Varbinary(vec![0xAB; 16]),
            Value::Null,
            Value::Int64(0),
        ],
        vec![
            Value::UInt32(7),
            Value::Int32(0),
            Value::UInt32(7),
            Value::Int64(0),
            Value::UInt64(7),
            Value::Float64(f64::MIN_POSITIVE / 2.0),
            Value::Varchar("\0tab\tnewline\n".to_string()),
            Value::Varbinary(vec![0; 16]),
            Value::Null,
            Value::Null,
        ],
    ]
}

fn start() -> (TestCluster, Cluster) {
    let cluster = TestCluster::start(ClusterSpec::new()).expect("start the cluster");
    let api = cluster.connect().expect("connect");
    (cluster, api)
}

#[track_caller]
fn assert_row(api: &Cluster, table: &Table, key: &[Value], expected: &[Value]) {
    let row = read_committed(api, table, key).expect("read the row");
    assert!(
        rows_identical(&row, expected),
        "read {row:?}, expected {expected:?}"
    );
}

#[test]
fn every_column_type_round_trips_exactly() {
    let (_cluster, api) = start();
    let table = recreate_table(&api, &typed_def("typed")).expect("create the table");
    let mut rows = edge_rows();
    rows.extend((1..=5).map(typed_row));
    insert_committed(&api, &table, &rows).expect("insert the rows");
    for row in &rows {
        assert_row(&api, &table, &row[..1], row);
    }
    let found = api.get_table("typed").expect("look the table up");
    assert_eq!(
        found.def(),
        &typed_def("typed"),
        "the dictionary keeps the definition"
    );
}

#[test]
fn update_write_and_delete_by_primary_key() {
    let (_cluster, api) = start();
    let table = recreate_table(&api, &typed_def("crud")).expect("create the table");
    let key = [Value::UInt32(10)];
    insert_committed(&api, &table, &[typed_row(10)]).expect("insert");

    let mut transaction = api.start_transaction().expect("start");
    let set = [
        (2, Value::UInt32(99)),
        (6, Value::Varchar("changed".into())),
        (8, Value::Null),
    ];
    transaction
        .update(&table, &key, &set)
        .expect("define the update");
    transaction
        .execute(ExecType::Commit)
        .expect("commit the update");
    let mut expected = typed_row(10);
    for (column, value) in set {
        expected[column] = value;
    }
    assert_row(&api, &table, &key, &expected);

    let mut overwrite = typed_row(11);
    overwrite[0] = Value::UInt32(10);
    write_committed(&api, &table, &overwrite);
    assert_row(&api, &table, &key, &overwrite);
    write_committed(&api, &table, &typed_row(12));
    assert_row(&api, &table, &[Value::UInt32(12)], &typed_row(12));

    let mut transaction = api.start_transaction().expect("start");
    transaction.delete(&table, &key).expect("define the delete");
    transaction
        .execute(ExecType::Commit)
        .expect("commit the delete");
    assert_ndb_code(
        read_committed(&api, &table, &key),
        626,
        "read a deleted row",
    );
    let mut transaction = api.start_transaction().expect("start");
    transaction.delete(&table, &key).expect("define the delete");
    assert_ndb_code(
        transaction.execute(ExecType::Commit),
        626,
        "delete a missing row",
    );
    let mut transaction = api.start_transaction().expect("start");
    transaction
        .update(&table, &key, &[(1, Value::Int32(1))])
        .expect("define the update");
    assert_ndb_code(
        transaction.execute(ExecType::Commit),
        626,
        "update a missing row",
    );
}

fn write_committed(api: &Cluster, table: &Table, row: &[Value]) {
    let mut transaction = api.start_transaction().expect("start");
    transaction.write(table, row).expect("define the write");
    transaction
        .execute(ExecType::Commit)
        .expect("commit the write");
}

#[test]
fn composite_keys_name_distinct_rows() {
    let (_cluster, api) = start();
    let def = TableDef::new(
        "composite",
        vec![
            ColumnDef::key("a", ColumnType::Int32),
            ColumnDef::new("v", ColumnType::UInt64),
            ColumnDef::key("b", ColumnType::Varchar(10)),
        ],
    );
    let table = recreate_table(&api, &def).expect("create the table");
    let row =
        |a: i32, b: &str, v: u64| vec![Value::Int32(a), Value::UInt64(v), Value::Varchar(b.into())];
    let key = |a: i32, b: &str| vec![Value::Int32(a), Value::Varchar(b.into())];
    let rows = [
        row(1, "x", 1),
        row(1, "y", 2),
        row(2, "x", 3),
        row(-1, "", 4),
    ];
    insert_committed(&api, &table, &rows).expect("insert");
    assert_ndb_code(
        insert_committed(&api, &table, &[row(1, "y", 9)]),
        630,
        "insert an existing composite key",
    );
    for r in &rows {
        assert_row(&api, &table, &key_of(r), r);
    }

    let mut transaction = api.start_transaction().expect("start");
    transaction
        .update(&table, &key(1, "y"), &[(1, Value::UInt64(20))])
        .expect("update");
    transaction.delete(&table, &key(1, "x")).expect("delete");
    transaction.execute(ExecType::Commit).expect("commit");
    assert_ndb_code(
        read_committed(&api, &table, &key(1, "x")),
        626,
        "read the deleted row",
    );
    assert_row(&api, &table, &key(1, "y"), &row(1, "y", 20));
    assert_row(&api, &table, &key(2, "x"), &row(2, "x", 3));
    assert_ndb_code(
        read_committed(&api, &table, &key(1, "z")),
        626,
        "read a key never inserted",
    );
}

/// The key of a row of the composite table: columns `a` and `b`, in column order.
fn key_of(row: &[Value]) -> Vec<Value> {
    vec![row[0].clone(), row[2].clone()]
}

#[test]
fn a_hundred_operations_in_one_execute() {
    let (_cluster, api) = start();
    let table = recreate_table(&api, &typed_def("batch")).expect("create the table");
    let rows: Vec<Vec<Value>> = (1000..1100).map(typed_row).collect();
    insert_committed(&api, &table, &rows).expect("insert 100 rows in one execute");

    let mut transaction = api.start_transaction().expect("start");
    let ops: Vec<_> = rows
        .iter()
        .map(|row| {
            transaction
                .read(&table, &row[..1], LockMode::Read)
                .expect("define a read")
        })
        .collect();
    transaction
        .execute(ExecType::NoCommit)
        .expect("read 100 rows in one execute");
    for (op, row) in ops.iter().zip(&rows) {
        let found = transaction.row(*op).expect("each read has its row");
        assert!(
            rows_identical(found, row),
            "read {found:?}, expected {row:?}"
        );
    }
    transaction.close();

    let mut transaction = api.start_transaction().expect("start");
    for row in &rows {
        transaction
            .update(&table, &row[..1], &[(1, Value::Int32(-5))])
            .expect("define");
    }
    transaction
        .execute(ExecType::Commit)
        .expect("update 100 rows in one execute");
    // Every update took, on its own row only: column i32 is -5, every other column as inserted.
    let updated: Vec<Vec<Value>> = rows
        .iter()
        .map(|row| {
            let mut row = row.clone();
            row[1] = Value::Int32(-5);
            row
        })
        .collect();
    let mut transaction = api.start_transaction().expect("start");
    let ops: Vec<_> = updated
        .iter()
        .map(|row| {
            transaction
                .read(&table, &row[..1], LockMode::CommittedRead)
                .expect("define a read")
        })
        .collect();
    transaction
        .execute(ExecType::Commit)
        .expect("read the 100 updated rows in one execute");
    for (op, row) in ops.iter().zip(&updated) {
        let found = transaction.row(*op).expect("each read has its row");
        assert!(
            rows_identical(found, row),
            "read {found:?} after the update, expected {row:?}"
        );
    }

    let mut transaction = api.start_transaction().expect("start");
    for row in &rows {
        transaction
            .delete(&table, &row[..1])
            .expect("define a delete");
    }
    transaction
        .execute(ExecType::Commit)
        .expect("delete 100 rows in one execute");

    let mut transaction = api.start_transaction().expect("start");
    let ops: Vec<_> = rows
        .iter()
        .map(|row| {
            transaction
                .read(&table, &row[..1], LockMode::CommittedRead)
                .expect("read")
        })
        .collect();
    transaction
        .execute_with(ExecType::Commit, AbortOption::IgnoreError)
        .expect("execute");
    for op in ops {
        assert_eq!(
            transaction.op_error(op).map(|e| e.code),
            Some(626),
            "every row is gone"
        );
    }
}

#[test]
fn a_dropped_table_is_gone() {
    let (_cluster, api) = start();
    let table = recreate_table(&api, &typed_def("dropme")).expect("create the table");
    insert_committed(&api, &table, &[typed_row(1)]).expect("insert");
    api.drop_table("dropme").expect("drop the table");
    assert_ndb_code(api.get_table("dropme"), 709, "look up a dropped table");
    assert_ndb_code(api.drop_table("dropme"), 709, "drop a dropped table");

    let again = api
        .create_table(&typed_def("dropme"))
        .expect("create it again");
    assert_ndb_code(
        read_committed(&api, &again, &[Value::UInt32(1)]),
        626,
        "old rows are gone",
    );
}

#[test]
fn null_in_a_not_null_column_is_refused() {
    let (_cluster, api) = start();
    let table = recreate_table(&api, &typed_def("notnull")).expect("create the table");
    let mut row = typed_row(3);
    row[1] = Value::Null;
    let result = insert_committed(&api, &table, &row_list(row));
    let code = result
        .expect_err("inserting NULL into a NOT NULL column fails")
        .code();
    assert!(
        matches!(code, Some(839 | 840)),
        "expected NDB error 839 or 840, got {code:?}"
    );
    assert_ndb_code(
        read_committed(&api, &table, &[Value::UInt32(3)]),
        626,
        "nothing was inserted",
    );
}

fn row_list(row: Vec<Value>) -> Vec<Vec<Value>> {
    vec![row]
}
