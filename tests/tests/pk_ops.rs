//! Proves that primary-key operations (insert, read, update, write, delete) against a real data
//! node round-trip every column type bit for bit, with single and composite keys, alone and a
//! hundred to one execute, and that a dropped table is gone (error 709); and that a NULL for a
//! NOT NULL column, a TINYINT, SMALLINT, MEDIUMINT, YEAR or BIT value past its range, a DATE,
//! DATETIME or TIMESTAMP in another form, or a CHAR, BINARY, FLOAT, DECIMAL or TIME value not
//! in its one form, is refused by the API and, sent as raw frames past it, by the data node;
//! DECIMAL and TIME rows order and filter as their numbers and times do.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use rndb_api::{
    AbortOption, Cluster, ColumnDef, ColumnType, ExecType, LockMode, Table, TableDef, Value,
};
use rndb_config::NodeId;
use rndb_protocol::filter::Filter;
use rndb_protocol::interpreter::Program;
use rndb_protocol::signals::{
    block, gsn, TcExecuteRef, TcExecuteReq, TcKeyRef, TcKeyReq, FLAG_START_TRANSACTION,
    REPLICA_PRIMARY,
};
use rndb_protocol::OperationType;
use rndb_tests::ops::{insert_committed, read_committed, recreate_table, rows_identical};
use rndb_tests::{assert_ndb_code, ClusterSpec, TestCluster};
use rndb_transporter::frame::{self, Decoded, FrameHeader};
use rndb_transporter::handshake::{self, Hello, HANDSHAKE_TIMEOUT};

/// The one data node.
const DATA_NODE: NodeId = NodeId(1);
/// How long a raw connection waits for the data node's answer to an execute.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

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
            ColumnDef::new("i8", ColumnType::Int8),
            ColumnDef::new("u8", ColumnType::UInt8),
            ColumnDef::new("i16", ColumnType::Int16),
            ColumnDef::new("u16", ColumnType::UInt16),
            ColumnDef::nullable("i24", ColumnType::Int24),
            ColumnDef::new("u24", ColumnType::UInt24),
        ],
    )
}

/// The first of the narrow integer columns (TINYINT, SMALLINT and MEDIUMINT, signed and
/// unsigned, in that order).
const NARROW_FIRST: usize = 10;

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
        Value::Int32(-((id % 128) as i32)),
        Value::UInt32(id % 256),
        Value::Int32((id as i32 % 300) * 100),
        Value::UInt32(id * 200 % 65_536),
        match id % 2 {
            0 => Value::Null,
            _ => Value::Int32(-((id % 200) as i32) * 30_000),
        },
        Value::UInt32(id * 70_000 % (1 << 24)),
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
            Value::Int32(i8::MIN.into()),
            Value::UInt32(u8::MAX.into()),
            Value::Int32(i16::MIN.into()),
            Value::UInt32(u16::MAX.into()),
            Value::Int32(-(1 << 23)),
            Value::UInt32((1 << 24) - 1),
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
            Value::Int32(i8::MAX.into()),
            Value::UInt32(0),
            Value::Int32(i16::MAX.into()),
            Value::UInt32(0),
            Value::Int32((1 << 23) - 1),
            Value::UInt32(0),
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
            Value::Int32(-1),
            Value::UInt32(1),
            Value::Int32(-1),
            Value::UInt32(1),
            Value::Null,
            Value::UInt32(1),
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
            Value::Int32(0),
            Value::UInt32(7),
            Value::Int32(0),
            Value::UInt32(7),
            Value::Int32(0),
            Value::UInt32(7),
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

/// TINYINT, SMALLINT and MEDIUMINT columns, signed and unsigned, take their carriers'
/// values (`Int32`, `UInt32`) only within their own range: one past either edge is refused by
/// the API (4209) and, sent as raw frames past it, by the data node (4209); an interpreted
/// increment past the edge fails (878); a narrow key past its range is refused (4209). Rows
/// are left as they were.
#[test]
fn narrow_integers_past_their_range_are_refused() {
    let (cluster, api) = start();
    let table = recreate_table(&api, &typed_def("narrow")).expect("create the table");
    let row = typed_row(5);
    insert_committed(&api, &table, &row_list(row.clone())).expect("insert");
    let (i8, u8, i16, u16, i24, u24) = (
        NARROW_FIRST,
        NARROW_FIRST + 1,
        NARROW_FIRST + 2,
        NARROW_FIRST + 3,
        NARROW_FIRST + 4,
        NARROW_FIRST + 5,
    );
    let past = [
        (i8, Value::Int32(-129)),
        (i8, Value::Int32(128)),
        (u8, Value::UInt32(256)),
        (i16, Value::Int32(-32_769)),
        (i16, Value::Int32(32_768)),
        (u16, Value::UInt32(65_536)),
        (i24, Value::Int32(-(1 << 23) - 1)),
        (i24, Value::Int32(1 << 23)),
        (u24, Value::UInt32(1 << 24)),
        // The carrier of the other sign.
        (i8, Value::UInt32(1)),
        (u8, Value::Int32(1)),
    ];
    let slot = spare_slot(&cluster, &api);
    let mut raw = RawApi::connect(&cluster, slot);
    for (request_id, (column, value)) in (1u32..).zip(past) {
        let mut tx = api.start_transaction().expect("start");
        let set = [(column, value.clone())];
        assert_ndb_code(
            tx.update(&table, &row[..1], &set),
            4209,
            &format!("the API sets column {column} to {value:?}"),
        );
        let attrs = [(column as u16, value.clone())];
        let op = (OperationType::Update, &row[..1], &attrs[..], None);
        let refused = raw
            .execute_one(request_id, &table, op)
            .unwrap_or_else(|| panic!("the data node set column {column} to {value:?}"));
        assert_eq!(refused.code, 4209, "column {column} set to {value:?} raw");
    }
    // Increments past each edge: TINYINT from -1 by 128 (127 is the last), TINYINT UNSIGNED
    // from 1 down by 2.
    for (column, delta) in [(NARROW_FIRST, 129), (NARROW_FIRST + 1, -2)] {
        let mut code = rndb_api::InterpretedCode::new(&table);
        code.add_value(column, delta).expect("a well-formed change");
        let mut tx = api.start_transaction().expect("start");
        let mut row9 = typed_row(9);
        row9[column] = if column == NARROW_FIRST {
            Value::Int32(-1)
        } else {
            Value::UInt32(1)
        };
        insert_committed(&api, &table, &row_list(row9.clone())).expect("insert row 9");
        tx.interpreted_update(&table, &row9[..1], &[], &code)
            .expect("define");
        assert_ndb_code(
            tx.execute(ExecType::Commit),
            878,
            &format!("column {column} changed by {delta}"),
        );
        assert!(rows_identical(
            &read_committed(&api, &table, &row9[..1]).expect("read row 9"),
            &row9
        ));
        let mut tx = api.start_transaction().expect("start");
        tx.delete(&table, &row9[..1]).expect("define");
        tx.execute(ExecType::Commit).expect("delete row 9");
    }
    assert!(rows_identical(
        &read_committed(&api, &table, &row[..1]).expect("read the row"),
        &row
    ));

    // A SMALLINT key: every value in range names its own row; one past is refused.
    let keyed = TableDef::new(
        "narrow_key",
        vec![
            ColumnDef::key("k", ColumnType::Int16),
            ColumnDef::new("v", ColumnType::UInt8),
        ],
    );
    let keyed = recreate_table(&api, &keyed).expect("create narrow_key");
    let keys = [i16::MIN, -1, 0, 1, i16::MAX];
    let rows: Vec<Vec<Value>> = (0u32..)
        .zip(keys)
        .map(|(i, k)| vec![Value::Int32(k.into()), Value::UInt32(i)])
        .collect();
    insert_committed(&api, &keyed, &rows).expect("insert the keyed rows");
    for row in &rows {
        assert_row(&api, &keyed, &row[..1], row);
    }
    assert_ndb_code(
        read_committed(&api, &keyed, &[Value::Int32(32_768)]),
        4209,
        "a key past SMALLINT",
    );
}

/// DATE, DATETIME(fsp) and TIMESTAMP columns take text in their one form: rows keyed by a
/// DATE read back; an ordered index over a DATETIME(3) returns the rows in time order; a
/// non-existent day, another form, too few fraction digits or a TIMESTAMP out of its range is
/// refused by the API (4209) and, sent raw past it, by the data node (4209).
#[test]
fn dates_and_times_in_their_one_form() {
    let (cluster, api) = start();
    let def = TableDef::new(
        "events",
        vec![
            ColumnDef::key("day", ColumnType::Date),
            ColumnDef::new("at", ColumnType::Datetime(3)),
            ColumnDef::nullable("seen", ColumnType::Timestamp(0)),
        ],
    );
    let table = recreate_table(&api, &def).expect("create the table");
    let text = |s: &str| Value::Varchar(s.to_string());
    let rows = vec![
        vec![
            text("2024-02-29"),
            text("2024-02-29 23:59:59.999"),
            Value::Null,
        ],
        vec![
            text("1000-01-01"),
            text("1000-01-01 00:00:00.000"),
            text("1970-01-01 00:00:01"),
        ],
        vec![
            text("9999-12-31"),
            text("9999-12-31 12:00:00.500"),
            text("2038-01-19 03:14:07"),
        ],
        vec![
            text("2023-06-15"),
            text("2023-06-15 08:30:00.001"),
            Value::Null,
        ],
    ];
    insert_committed(&api, &table, &rows).expect("insert");
    for row in &rows {
        assert_row(&api, &table, &row[..1], row);
    }
    let index = api
        .create_index(&table, &rndb_api::IndexDef::ordered("by_at", &["at"]))
        .expect("create the ordered index");
    let mut tx = api.start_transaction().expect("start");
    let options = rndb_api::ScanOptions {
        sorted: true,
        ..rndb_api::ScanOptions::default()
    };
    let scanned: Vec<Value> = tx
        .scan_index(&index, &options)
        .expect("scan")
        .map(|row| row.expect("a row")[1].clone())
        .collect();
    tx.execute(ExecType::Commit).expect("commit");
    // In time order, written out: the rows were inserted in another.
    let times: Vec<Value> = [
        "1000-01-01 00:00:00.000",
        "2023-06-15 08:30:00.001",
        "2024-02-29 23:59:59.999",
        "9999-12-31 12:00:00.500",
    ]
    .into_iter()
    .map(text)
    .collect();
    assert_eq!(scanned, times, "the index orders the DATETIMEs by time");

    let slot = spare_slot(&cluster, &api);
    let mut raw = RawApi::connect(&cluster, slot);
    let bad = [
        (0, "2023-02-29"),
        (0, "2023-6-15"),
        (1, "2023-06-15 08:30:00"),
        (1, "2023-06-15T08:30:00.000"),
        (2, "1969-12-31 23:59:59"),
        (2, "2038-01-19 03:14:08"),
    ];
    for (request_id, (column, value)) in (1u32..).zip(bad) {
        let mut row = rows[3].clone();
        row[0] = text("2001-01-01");
        row[column] = text(value);
        let what = format!("{value:?} in column {column}");
        refused_both_ways(&api, &mut raw, &table, request_id, &row, 1, &what);
    }
}

/// CHAR(n), BINARY(n), FLOAT, YEAR and BIT(n) columns: rows keyed by a CHAR and a YEAR read
/// back bit for bit; an ordered index over the CHAR orders padded text as PAD SPACE compares
/// ("a" after "a\t"), one over the FLOAT orders the singles; a unique index over the BINARY
/// finds its row by the padded bytes; an unpadded CHAR or BINARY, a double no single holds, a
/// YEAR or BIT out of range is refused by the API (4209) and, sent raw past it, by the data node.
#[test]
fn float_char_binary_year_and_bit_in_their_one_form() {
    let (cluster, api) = start();
    let def = TableDef::new(
        "fixed",
        vec![
            ColumnDef::key("c", ColumnType::Char(4)),
            ColumnDef::key("y", ColumnType::Year),
            ColumnDef::new("f", ColumnType::Float32),
            ColumnDef::nullable("b", ColumnType::Binary(3)),
            ColumnDef::new("bits", ColumnType::Bit(10)),
        ],
    );
    let table = recreate_table(&api, &def).expect("create the table");
    let char4 = |s: &str| ColumnType::Char(4).padded(Value::Varchar(s.to_string()));
    let binary3 = |b: &[u8]| ColumnType::Binary(3).padded(Value::Varbinary(b.to_vec()));
    let single = |v: f32| Value::Float64(f64::from(v));
    let rows = vec![
        vec![
            char4("b"),
            Value::UInt32(2155),
            single(-2.5),
            binary3(b"\x01"),
            Value::UInt64(1023),
        ],
        vec![
            char4("a"),
            Value::UInt32(0),
            single(0.1),
            binary3(b"xyz"),
            Value::UInt64(0),
        ],
        vec![
            char4("a\t"),
            Value::UInt32(1901),
            single(f32::MAX),
            Value::Null,
            Value::UInt64(5),
        ],
        vec![
            char4("ab"),
            Value::UInt32(2024),
            single(-1e-30),
            binary3(b""),
            Value::UInt64(512),
        ],
    ];
    insert_committed(&api, &table, &rows).expect("insert");
    for row in &rows {
        assert_row(&api, &table, &row[..2], row);
    }
    assert_eq!(
        rows[0][0],
        Value::Varchar("b   ".into()),
        "CHAR padded with spaces"
    );

    let sorted = |index: &rndb_api::Index, column: usize| sorted_column(&api, index, column);
    let by_c = (api.create_index(&table, &rndb_api::IndexDef::ordered("by_c", &["c"])))
        .expect("create the ordered index over c");
    let text_order: Vec<Value> = ["a\t", "a", "ab", "b"].into_iter().map(char4).collect();
    assert_eq!(
        sorted(&by_c, 0),
        text_order,
        "padded CHARs in PAD SPACE order"
    );
    let by_f = (api.create_index(&table, &rndb_api::IndexDef::ordered("by_f", &["f"])))
        .expect("create the ordered index over f");
    let float_order = vec![single(-2.5), single(-1e-30), single(0.1), single(f32::MAX)];
    assert_eq!(sorted(&by_f, 2), float_order, "the singles in order");
    let on_b = (api.create_index(&table, &rndb_api::IndexDef::unique("on_b", &["b"])))
        .expect("create the unique index over b");
    let mut tx = api.start_transaction().expect("start");
    let op = tx
        .read_unique(&on_b, &[binary3(b"")], LockMode::CommittedRead)
        .expect("define");
    tx.execute(ExecType::Commit).expect("read by b");
    assert!(rows_identical(tx.row(op).expect("a row"), &rows[3]));

    let slot = spare_slot(&cluster, &api);
    let mut raw = RawApi::connect(&cluster, slot);
    let bad = [
        (0, Value::Varchar("c".into())),
        (0, Value::Varchar("cdefg".into())),
        (1, Value::UInt32(1900)),
        (1, Value::UInt32(2156)),
        (2, Value::Float64(0.1)),
        (2, Value::Float64(1e39)),
        (3, Value::Varbinary(vec![1, 2])),
        (3, Value::Varbinary(vec![1, 2, 3, 4])),
        (4, Value::UInt64(1024)),
    ];
    for (request_id, (column, value)) in (1u32..).zip(bad) {
        let mut row = rows[3].clone();
        row[0] = char4("new");
        row[column] = value.clone();
        let what = format!("{value:?} in column {column}");
        refused_both_ways(&api, &mut raw, &table, request_id, &row, 2, &what);
    }
    assert_ndb_code(
        read_committed(&api, &table, &[char4("new"), Value::UInt32(2024)]),
        626,
        "no refused row was stored",
    );
}

/// DECIMAL(p, s) and TIME(fsp) columns: rows keyed by a DECIMAL read back; ordered indexes
/// over the DECIMAL and the TIME return negative and positive values in numeric and time
/// order, a scan filter `price < 0` finds the negative rows; a DECIMAL of the wrong length,
/// with a group past its digits or a negative zero, a TIME past 838:59:59 or finer than its
/// fsp, is refused by the API (4209) and, sent raw past it, by the data node.
#[test]
fn decimals_and_times_order_as_numbers_and_times() {
    let (cluster, api) = start();
    let price_type = ColumnType::Decimal(12, 2);
    let at_type = ColumnType::Time(3);
    let def = TableDef::new(
        "ledger",
        vec![
            ColumnDef::key("price", price_type),
            ColumnDef::new("at", at_type),
        ],
    );
    let table = recreate_table(&api, &def).expect("create the table");
    let price = |text: &str| price_type.value_of_text(text).expect("a DECIMAL(12,2)");
    let at = |text: &str| at_type.value_of_text(text).expect("a TIME(3)");
    let pairs = [
        ("1.5", "-00:00:00.001"),
        ("-1234567890.99", "838:59:59"),
        ("0", "00:00:00"),
        ("-2.25", "-838:59:59"),
        ("9999999999.99", "12:00:00.5"),
        ("-0.01", "-12:00:00"),
    ];
    let rows: Vec<Vec<Value>> = pairs.iter().map(|(p, t)| vec![price(p), at(t)]).collect();
    insert_committed(&api, &table, &rows).expect("insert");
    for row in &rows {
        assert_row(&api, &table, &row[..1], row);
    }
    let texts = |values: Vec<Value>, t: ColumnType| -> Vec<String> {
        values
            .iter()
            .map(|v| t.text_of(v).expect("a value of the type"))
            .collect()
    };
    let sorted = |index: &rndb_api::Index, column: usize| sorted_column(&api, index, column);
    let by_price = (api.create_index(&table, &rndb_api::IndexDef::ordered("by_price", &["price"])))
        .expect("create the ordered index over price");
    assert_eq!(
        texts(sorted(&by_price, 0), price_type),
        [
            "-1234567890.99",
            "-2.25",
            "-0.01",
            "0.00",
            "1.50",
            "9999999999.99"
        ],
    );
    let by_at = (api.create_index(&table, &rndb_api::IndexDef::ordered("by_at", &["at"])))
        .expect("create the ordered index over at");
    assert_eq!(
        texts(sorted(&by_at, 1), at_type),
        [
            "-838:59:59.000",
            "-12:00:00.000",
            "-00:00:00.001",
            "00:00:00.000",
            "12:00:00.500",
            "838:59:59.000"
        ],
    );
    let mut tx = api.start_transaction().expect("start");
    let options = rndb_api::ScanOptions {
        filter: Some(Filter::cmp(0, rndb_protocol::filter::CmpOp::Lt, price("0"))),
        ..rndb_api::ScanOptions::default()
    };
    let mut negative: Vec<String> = (tx.scan_table(&table, &options).expect("scan"))
        .map(|row| {
            price_type
                .text_of(&row.expect("a row")[0])
                .expect("a DECIMAL")
        })
        .collect();
    tx.execute(ExecType::Commit).expect("commit");
    negative.sort();
    assert_eq!(negative, ["-0.01", "-1234567890.99", "-2.25"]);

    let slot = spare_slot(&cluster, &api);
    let mut raw = RawApi::connect(&cluster, slot);
    let mut group_past = price("1");
    if let Value::Varbinary(bytes) = &mut group_past {
        // The last group (two fraction digits, one byte) holding 100.
        *bytes.last_mut().expect("bytes") = 100;
    }
    let bad = [
        (0, Value::Varbinary(vec![0x80; 5])),
        (0, group_past),
        (
            0,
            Value::Varbinary(vec![0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]),
        ),
        (1, Value::Int64(rndb_protocol::time::MAX_MICROS + 1000)),
        (1, Value::Int64(1)),
        (1, Value::Int32(1)),
    ];
    for (request_id, (column, value)) in (1u32..).zip(bad) {
        let mut row = vec![price("7"), at("01:00:00")];
        row[column] = value.clone();
        let what = format!("{value:?} in column {column}");
        refused_both_ways(&api, &mut raw, &table, request_id, &row, 1, &what);
    }
    assert_ndb_code(
        read_committed(&api, &table, &[price("7")]),
        626,
        "no refused row was stored",
    );
}

/// ENUM and SET columns: a table keyed by an ENUM is created (its names kept by the data
/// nodes' dictionary: `get_table` returns them), rows read back, an ordered index over the
/// ENUM returns the rows in element order (not name order, as MySQL orders ENUMs), a scan
/// filter on the SET's bits finds its rows; an ENUM number or SET bits past the type are
/// refused by the API (4209) and, sent raw past it, by the data node. Tables made from a
/// table's key or columns keep the names: a blob parts table keyed by an ENUM, a unique
/// index's hidden table over a SET.
#[test]
fn enums_order_by_element_and_sets_hold_bits() {
    let (cluster, api) = start();
    let size = ColumnDef::enumeration("size", &["small", "medium", "large", "huge", "xl"]);
    let tags = ColumnDef::set("tags", &["cotton", "red", "sale"]).or_null();
    let key = ColumnDef {
        primary_key: true,
        ..size.clone()
    };
    let def = TableDef::new("shirts", vec![key, tags.clone()]);
    let table = recreate_table(&api, &def).expect("create the table");
    assert_eq!(api.get_table("shirts").expect("get").def(), &def);
    let row = |s: &str, t: Option<&str>| {
        vec![
            size.value_of_text(s).expect("a size"),
            t.map_or(Value::Null, |t| tags.value_of_text(t).expect("tags")),
        ]
    };
    let rows = [
        row("huge", Some("sale,cotton")),
        row("small", Some("")),
        row("large", None),
        row("medium", Some("red,sale")),
    ];
    insert_committed(&api, &table, &rows).expect("insert");
    for r in &rows {
        assert_row(&api, &table, &r[..1], r);
    }
    let by_size = (api.create_index(&table, &rndb_api::IndexDef::ordered("by_size", &["size"])))
        .expect("create the ordered index over size");
    let names: Vec<String> = (sorted_column(&api, &by_size, 0).iter())
        .map(|v| size.text_of(v).expect("an element"))
        .collect();
    assert_eq!(names, ["small", "medium", "large", "huge"]);
    let mut tx = api.start_transaction().expect("start");
    // Rows on sale: the SET's bit 2 (a value of at least 4, with three members).
    let options = rndb_api::ScanOptions {
        filter: Some(Filter::cmp(
            1,
            rndb_protocol::filter::CmpOp::Ge,
            Value::UInt64(4),
        )),
        ..rndb_api::ScanOptions::default()
    };
    let mut on_sale: Vec<String> = (tx.scan_table(&table, &options).expect("scan"))
        .map(|r| size.text_of(&r.expect("a row")[0]).expect("an element"))
        .collect();
    tx.execute(ExecType::Commit).expect("commit");
    on_sale.sort();
    assert_eq!(on_sale, ["huge", "medium"]);

    let slot = spare_slot(&cluster, &api);
    let mut raw = RawApi::connect(&cluster, slot);
    let bad = [
        (0, Value::UInt32(0)),
        (0, Value::UInt32(6)),
        (1, Value::UInt64(8)),
        (1, Value::UInt32(1)),
    ];
    for (request_id, (column, value)) in (1u32..).zip(bad) {
        // "xl": a key not among the rows', so that only the value's type can refuse it.
        let mut row = row("xl", Some("red"));
        row[column] = value.clone();
        let what = format!("{value:?} in column {column}");
        refused_both_ways(&api, &mut raw, &table, request_id, &row, 1, &what);
    }
    for r in &rows {
        assert_row(&api, &table, &r[..1], r);
    }
    assert_ndb_code(
        read_committed(&api, &table, &[Value::UInt32(5)]),
        626,
        "no refused row was stored",
    );

    let labels = TableDef::new(
        "labels",
        vec![
            ColumnDef {
                primary_key: true,
                ..size.clone()
            },
            ColumnDef::set("flags", &["x", "y"]),
            ColumnDef::nullable("text", ColumnType::Text(rndb_api::BlobSize::Blob)),
        ],
    );
    let labels = recreate_table(&api, &labels).expect("a table keyed by an ENUM, with a TEXT");
    let by_flags = (api.create_index(&labels, &rndb_api::IndexDef::unique("by_flags", &["flags"])))
        .expect("a unique index over a SET");
    let label = vec![
        Value::UInt32(2),
        Value::UInt64(0b10),
        Value::Varchar("é".repeat(3_000)),
    ];
    insert_committed(&api, &labels, &row_list(label.clone())).expect("insert a label");
    let mut tx = api.start_transaction().expect("start");
    let by_key = tx
        .read(&labels, &label[..1], LockMode::CommittedRead)
        .expect("read");
    let by_index = tx
        .read_unique(&by_flags, &label[1..2], LockMode::CommittedRead)
        .expect("read through the index");
    tx.execute(ExecType::Commit).expect("commit");
    assert_eq!(tx.row(by_key), Some(&label[..]));
    assert_eq!(tx.row(by_index), Some(&label[..]));
}

/// A row with a value its column's type does not hold is refused with 4209 by the API, and
/// sent as raw frames past it (its first `keys` columns the key), by the data node.
fn refused_both_ways(
    api: &Cluster,
    raw: &mut RawApi,
    table: &Table,
    request_id: u32,
    row: &[Value],
    keys: usize,
    what: &str,
) {
    assert_ndb_code(
        insert_committed(api, table, &row_list(row.to_vec())),
        4209,
        &format!("the API inserts {what}"),
    );
    let attrs: Vec<(u16, Value)> = (keys as u16..).zip(row[keys..].iter().cloned()).collect();
    let refused = raw
        .insert(request_id, table, &row[..keys], &attrs)
        .unwrap_or_else(|| panic!("the data node stored {what}"));
    assert_eq!(refused.code, 4209, "{what}, raw");
}

/// Column `column` of every row, scanned in `index`'s order.
fn sorted_column(api: &Cluster, index: &rndb_api::Index, column: usize) -> Vec<Value> {
    let mut tx = api.start_transaction().expect("start");
    let options = rndb_api::ScanOptions {
        sorted: true,
        ..rndb_api::ScanOptions::default()
    };
    let values = (tx.scan_index(index, &options).expect("scan"))
        .map(|row| row.expect("a row")[column].clone())
        .collect();
    tx.execute(ExecType::Commit).expect("commit");
    values
}

fn row_list(row: Vec<Value>) -> Vec<Vec<Value>> {
    vec![row]
}

/// The API refuses a NULL for a NOT NULL column before it sends anything (above), so the data
/// node's own check is reached only by a client that does not check: an insert sent as raw
/// frames past the API gets 840 for an explicit NULL and 839 for a NOT NULL column left out,
/// and leaves no row.
#[test]
fn null_in_a_not_null_column_is_refused_by_the_data_node() {
    let (cluster, api) = start();
    let table = recreate_table(&api, &typed_def("notnull_raw")).expect("create the table");
    let slot = spare_slot(&cluster, &api);
    let mut raw = RawApi::connect(&cluster, slot);
    let row = typed_row(5);
    let attrs: Vec<(u16, Value)> = (1u16..).zip(row[1..].iter().cloned()).collect();
    let mut explicit_null = attrs.clone();
    explicit_null[0].1 = Value::Null;
    let left_out: Vec<(u16, Value)> = attrs[1..].to_vec();
    let cases = [
        ("an explicit NULL in column i32", explicit_null, 840),
        ("column i32 left out", left_out, 839),
    ];
    for (request_id, (what, attrs, code)) in (1u32..).zip(cases) {
        let refused = raw
            .insert(request_id, &table, &row[..1], &attrs)
            .unwrap_or_else(|| panic!("the data node committed an insert with {what}"));
        assert_eq!(
            (refused.code, refused.op_index),
            (code, 0),
            "the data node's refusal of an insert with {what}: {refused:?}"
        );
        assert_eq!(
            raw.key_refs,
            vec![TcKeyRef { op_index: 0, code }],
            "the data node's TCKEYREFs for an insert with {what}"
        );
        assert_ndb_code(
            read_committed(&api, &table, &row[..1]),
            626,
            &format!("read after an insert with {what}"),
        );
    }
    // The same row with every column given inserts: the refusals were about the NULL alone.
    if let Some(refused) = raw.insert(3, &table, &row[..1], &attrs) {
        panic!("a whole row is refused: {refused:?}");
    }
    assert!(rows_identical(
        &read_committed(&api, &table, &row[..1]).expect("read the inserted row"),
        &row
    ));
}

/// An interpreted update's program is checked by the data node as the API checks it: sent
/// raw, a change of a key column (4004), of a text column (4209), of an unknown column (4004),
/// a condition on an unknown column (4004), or a program on an insert, a read or a delete that
/// changes columns (4116) is refused with its TCKEYREF, and the row is left as it was.
#[test]
fn ill_formed_interpreted_programs_are_refused_by_the_data_node() {
    let (cluster, api) = start();
    let table = recreate_table(&api, &typed_def("program_raw")).expect("create the table");
    let slot = spare_slot(&cluster, &api);
    let row = typed_row(5);
    insert_committed(&api, &table, &row_list(row.clone())).expect("insert");
    let mut raw = RawApi::connect(&cluster, slot);
    let change = |column, condition| Program {
        condition,
        changes: vec![(column, 1)],
        ..Program::default()
    };
    let cases = [
        ("a key column", OperationType::Update, change(0, None), 4004),
        (
            "a text column",
            OperationType::Update,
            change(6, None),
            4209,
        ),
        (
            "no such column",
            OperationType::Update,
            change(40, None),
            4004,
        ),
        (
            "a condition on no such column",
            OperationType::Update,
            change(1, Some(Filter::IsNull(40))),
            4004,
        ),
        ("an insert", OperationType::Insert, change(1, None), 4116),
        (
            "a delete that changes",
            OperationType::Delete,
            change(1, None),
            4116,
        ),
        ("a read", OperationType::Read, change(1, None), 4116),
    ];
    for (request_id, (what, op_type, program, code)) in (1u32..).zip(cases) {
        let attrs: Vec<(u16, Value)> = match op_type {
            OperationType::Insert => (1u16..).zip(row[1..].iter().cloned()).collect(),
            _ => Vec::new(),
        };
        let op = (op_type, &row[..1], &attrs[..], Some(program));
        let refused = raw
            .execute_one(request_id, &table, op)
            .unwrap_or_else(|| panic!("the data node committed a program on {what}"));
        assert_eq!(
            (refused.code, raw.key_refs.clone()),
            (code, vec![TcKeyRef { op_index: 0, code }]),
            "the data node's refusal of a program on {what}: {refused:?}"
        );
    }
    assert!(rows_identical(
        &read_committed(&api, &table, &row[..1]).expect("read the row"),
        &row
    ));
}

/// An API slot the test's API node does not use, for a raw connection.
fn spare_slot(cluster: &TestCluster, api: &Cluster) -> NodeId {
    *cluster
        .api_node_ids()
        .iter()
        .rev()
        .find(|&&slot| slot != api.node_id())
        .expect("an API slot the test's API node does not use")
}

/// One operation sent raw: its type, key, attributes and interpreted program.
type RawOp<'a> = (
    OperationType,
    &'a [Value],
    &'a [(u16, Value)],
    Option<Program>,
);

/// An API node's link to the data node made of raw frames: what a client that skips the API's
/// checks sends.
struct RawApi {
    stream: TcpStream,
    /// The link carries a CRC-32 on every frame (its Checksum setting).
    checksum: bool,
    /// Bytes read and not yet decoded.
    received: Vec<u8>,
    /// The TCKEYREFs of the last execute.
    key_refs: Vec<TcKeyRef>,
}

impl RawApi {
    /// Connects as API node `slot` and completes the handshake.
    fn connect(cluster: &TestCluster, slot: NodeId) -> RawApi {
        let config = cluster.config();
        let hello = Hello::for_link(config, slot, DATA_NODE).expect("hello");
        let mut stream = TcpStream::connect(cluster.addr(DATA_NODE)).expect("connect raw TCP");
        handshake::client_handshake(&mut stream, &hello, HANDSHAKE_TIMEOUT)
            .unwrap_or_else(|e| panic!("handshake as API node {slot}: {e}"));
        stream
            .set_read_timeout(Some(Duration::from_millis(100)))
            .expect("set a read timeout");
        let checksum = config
            .link(slot, DATA_NODE)
            .expect("a link to the data node")
            .checksum;
        RawApi {
            stream,
            checksum,
            received: Vec::new(),
            key_refs: Vec::new(),
        }
    }

    /// Sends a transaction of one insert of `key` with `attrs`, with Commit: `None` when it
    /// committed (TC_EXECUTE_CONF), else the data node's TC_EXECUTE_REF.
    fn insert(
        &mut self,
        request_id: u32,
        table: &Table,
        key: &[Value],
        attrs: &[(u16, Value)],
    ) -> Option<TcExecuteRef> {
        let op = (OperationType::Insert, key, attrs, None);
        self.execute_one(request_id, table, op)
    }

    /// Sends a transaction of one operation (its type, key, attributes and program), with
    /// Commit: `None` when it committed, else the data node's TC_EXECUTE_REF.
    fn execute_one(
        &mut self,
        request_id: u32,
        table: &Table,
        (op_type, key, attrs, program): RawOp<'_>,
    ) -> Option<TcExecuteRef> {
        let mut payload = Vec::new();
        TcKeyReq {
            flags: FLAG_START_TRANSACTION,
            op_index: 0,
            op_type,
            lock_mode: LockMode::Exclusive,
            table_id: table.id(),
            table_version: table.version(),
            replica: REPLICA_PRIMARY,
            key: key.to_vec(),
            attrs: attrs.to_vec(),
            program,
        }
        .encode(&mut payload);
        TcExecuteReq {
            flags: FLAG_START_TRANSACTION,
            exec_type: ExecType::Commit,
            abort_option: AbortOption::AbortOnError,
            op_count: 1,
        }
        .append_to_key_req(&mut payload, 0);
        let header = FrameHeader {
            signal: gsn::TCKEYREQ,
            receiver_block: block::DBTC,
            sender_block: block::API,
            request_id,
        };
        let mut bytes = Vec::new();
        frame::encode_into(&mut bytes, &header, &payload, self.checksum).expect("encode a frame");
        self.stream.write_all(&bytes).expect("send the execute");
        self.key_refs.clear();
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        loop {
            let (header, payload) = self.next_frame(deadline);
            assert_eq!(
                header.request_id, request_id,
                "an answer to another request"
            );
            match header.signal {
                gsn::TCKEYREF => self
                    .key_refs
                    .push(TcKeyRef::decode(&payload).expect("a TCKEYREF that decodes")),
                gsn::TC_EXECUTE_REF => {
                    let refused = TcExecuteRef::decode(&payload);
                    return Some(refused.expect("a TC_EXECUTE_REF that decodes"));
                }
                gsn::TC_EXECUTE_CONF => return None,
                other => panic!("unexpected signal {other} in the answer to an execute"),
            }
        }
    }

    /// The next frame from the data node; panics if none whole arrives before `deadline`.
    fn next_frame(&mut self, deadline: Instant) -> (FrameHeader, Vec<u8>) {
        let mut buf = [0u8; 4096];
        loop {
            match frame::decode(&self.received, self.checksum).expect("a well-formed frame") {
                Decoded::Frame {
                    header,
                    payload,
                    frame_len,
                } => {
                    let frame = (header, payload.to_vec());
                    self.received.drain(..frame_len);
                    return frame;
                }
                Decoded::NeedMore => {}
            }
            assert!(
                Instant::now() < deadline,
                "no answer within {ANSWER_TIMEOUT:?}"
            );
            match self.stream.read(&mut buf) {
                Ok(0) => panic!("the data node closed the connection"),
                Ok(n) => self.received.extend_from_slice(&buf[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => panic!("read from the data node: {e}"),
            }
        }
    }
}
