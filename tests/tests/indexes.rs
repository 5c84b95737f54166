//! Proves that unique hash indexes and ordered indexes on a real data node answer like a model:
//! unique lookups, updates and deletes through the index, duplicates refused with 893, NULLs
//! that never collide, rolled-back writes that leave no entry, entries that move with updates;
//! ordered-index scans with every bound type, prefix bounds on two columns, descending and
//! multi-range scans, empty ranges, ranges over every partition in sorted order, indexes built on
//! loaded tables, and the MaxNoOfOrderedIndexes (903), MaxNoOfConcurrentIndexOperations (288),
//! MaxNoOfFiredTriggers (221) and MaxNoOfAttributes (708) limits.

use std::cmp::Ordering;

use rndb_api::{
    BoundType, Cluster, ColumnDef, ColumnType, ExecType, Index, IndexDef, IndexRange, LockMode,
    ScanOptions, Table, TableDef, Value,
};
use rndb_tests::ops::{insert_committed, read_committed, recreate_table};
use rndb_tests::{assert_ndb_code, ClusterSpec, TestCluster};

/// `people(id key, email nullable unique, age, name nullable)`.
fn people_def() -> TableDef {
    TableDef::new(
        "people",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::nullable("email", ColumnType::Varchar(32)),
            ColumnDef::new("age", ColumnType::Int32),
            ColumnDef::nullable("name", ColumnType::Varchar(16)),
        ],
    )
}

fn person(id: u32, email: Option<&str>, age: i32, name: Option<&str>) -> Vec<Value> {
    vec![
        Value::UInt32(id),
        email.map_or(Value::Null, |e| Value::Varchar(e.into())),
        Value::Int32(age),
        name.map_or(Value::Null, |n| Value::Varchar(n.into())),
    ]
}

/// Person `id`, aged 20, with email `<id>@x`.
fn person_at_x(id: u32) -> Vec<Value> {
    person(id, Some(&format!("{id}@x")), 20, None)
}

/// The people table, made afresh, with its unique index `email_u` on `email`.
fn people_with_email_index(api: &Cluster) -> (Table, Index) {
    let table = recreate_table(api, &people_def()).expect("create table");
    let index = api
        .create_index(&table, &IndexDef::unique("email_u", &["email"]))
        .expect("create unique index");
    (table, index)
}

fn email(e: &str) -> Vec<Value> {
    vec![Value::Varchar(e.into())]
}

/// Reads through the unique index in a transaction of its own.
fn read_unique(api: &Cluster, index: &Index, key: &[Value]) -> Result<Vec<Value>, rndb_api::Error> {
    let mut tx = api.start_transaction()?;
    let op = tx.read_unique(index, key, LockMode::CommittedRead)?;
    tx.execute(ExecType::Commit)?;
    Ok(tx
        .row(op)
        .expect("a read that succeeded has a row")
        .to_vec())
}

fn start(spec: ClusterSpec) -> (TestCluster, Cluster) {
    let cluster = TestCluster::start(spec).expect("start the cluster");
    let api = cluster.connect().expect("connect");
    (cluster, api)
}

#[test]
fn unique_index_lookups_duplicates_nulls_and_moves() {
    let (_cluster, api) = start(ClusterSpec::new());
    let (table, index) = people_with_email_index(&api);
    insert_committed(
        &api,
        &table,
        &[
            person(1, Some("a@x"), 30, Some("ann")),
            person(2, Some("b@x"), 40, None),
            person(3, None, 50, None),
            person(4, None, 60, None),
        ],
    )
    .expect("insert rows, two with NULL email (NULLs never collide)");
    assert_eq!(
        read_unique(&api, &index, &email("b@x")).unwrap(),
        person(2, Some("b@x"), 40, None)
    );
    assert_ndb_code(
        read_unique(&api, &index, &email("zz")),
        626,
        "read a missing unique key",
    );

    // A duplicate fails the insert with 893 and aborts the transaction.
    assert_ndb_code(
        insert_committed(&api, &table, &[person(5, Some("a@x"), 1, None)]),
        893,
        "insert a duplicate unique value",
    );
    assert_ndb_code(
        read_committed(&api, &table, &[Value::UInt32(5)]),
        626,
        "row 5 after 893",
    );

    // Update by primary key moves the entry.
    let mut tx = api.start_transaction().unwrap();
    tx.update(
        &table,
        &[Value::UInt32(1)],
        &[(1, Value::Varchar("c@x".into()))],
    )
    .unwrap();
    tx.execute(ExecType::Commit).expect("move a@x to c@x");
    assert_ndb_code(
        read_unique(&api, &index, &email("a@x")),
        626,
        "old value after the move",
    );
    assert_eq!(
        read_unique(&api, &index, &email("c@x")).unwrap()[0],
        Value::UInt32(1)
    );
    insert_committed(&api, &table, &[person(6, Some("a@x"), 2, None)]).expect("a@x is free again");

    // Update and delete through the index; a NULL takes the row out of the index.
    let mut tx = api.start_transaction().unwrap();
    tx.update_unique(&index, &email("c@x"), &[(2, Value::Int32(31))])
        .unwrap();
    tx.update_unique(&index, &email("b@x"), &[(1, Value::Null)])
        .unwrap();
    tx.delete_unique(&index, &email("a@x")).unwrap();
    tx.execute(ExecType::Commit)
        .expect("update and delete through the index");
    assert_eq!(
        read_committed(&api, &table, &[Value::UInt32(1)]).unwrap()[2],
        Value::Int32(31)
    );
    assert_eq!(
        read_committed(&api, &table, &[Value::UInt32(2)]).unwrap()[1],
        Value::Null
    );
    assert_ndb_code(
        read_unique(&api, &index, &email("b@x")),
        626,
        "b@x after set to NULL",
    );
    assert_ndb_code(
        read_committed(&api, &table, &[Value::UInt32(6)]),
        626,
        "row deleted via index",
    );

    // Duplicates inside one transaction, and against an uncommitted insert of the same tx.
    let mut tx = api.start_transaction().unwrap();
    tx.insert(&table, &person(7, Some("d@x"), 1, None)).unwrap();
    tx.insert(&table, &person(8, Some("d@x"), 1, None)).unwrap();
    assert_ndb_code(
        tx.execute(ExecType::Commit),
        893,
        "two inserts of d@x in one execute",
    );
    assert_ndb_code(
        read_unique(&api, &index, &email("d@x")),
        626,
        "d@x after the abort",
    );
}

#[test]
fn rolled_back_writes_leave_no_entry_and_locks_hold() {
    let spec = ClusterSpec::new().deadlock_timeout_ms(300);
    let (_cluster, api) = start(spec);
    let (table, index) = people_with_email_index(&api);
    let mut tx = api.start_transaction().unwrap();
    tx.insert(&table, &person(1, Some("r@x"), 1, None)).unwrap();
    tx.execute(ExecType::NoCommit).unwrap();
    // Inside the transaction the uncommitted entry is visible.
    let op = tx
        .read_unique(&index, &email("r@x"), LockMode::Read)
        .unwrap();
    tx.execute(ExecType::NoCommit).unwrap();
    assert_eq!(tx.row(op).unwrap()[0], Value::UInt32(1));
    tx.execute(ExecType::Rollback).unwrap();
    assert_ndb_code(
        read_unique(&api, &index, &email("r@x")),
        626,
        "entry after rollback",
    );
    insert_committed(&api, &table, &[person(2, Some("r@x"), 1, None)]).expect("r@x is free");
    assert_eq!(
        read_unique(&api, &index, &email("r@x")).unwrap()[0],
        Value::UInt32(2)
    );

    // An exclusive read through the index locks the base row until the transaction ends.
    let mut holder = api.start_transaction().unwrap();
    holder
        .read_unique(&index, &email("r@x"), LockMode::Exclusive)
        .unwrap();
    holder.execute(ExecType::NoCommit).unwrap();
    let mut other = api.start_transaction().unwrap();
    other
        .update(&table, &[Value::UInt32(2)], &[(2, Value::Int32(9))])
        .unwrap();
    assert_ndb_code(
        other.execute(ExecType::Commit),
        266,
        "update of a row locked via the index",
    );
    holder.execute(ExecType::Commit).unwrap();
}

#[test]
fn unique_index_on_loaded_table_and_drop() {
    let (_cluster, api) = start(ClusterSpec::new());
    let table = recreate_table(&api, &people_def()).expect("create table");
    let rows: Vec<_> = (0..200)
        .map(|i| person(i, Some(&format!("p{i}")), 1, None))
        .collect();
    insert_committed(&api, &table, &rows).unwrap();
    let index = api
        .create_index(&table, &IndexDef::unique("email_u", &["email"]))
        .expect("build a unique index from 200 rows");
    for i in [0, 99, 199] {
        assert_eq!(
            read_unique(&api, &index, &email(&format!("p{i}"))).unwrap(),
            rows[i as usize]
        );
    }
    assert_eq!(api.get_index(&table, "email_u").unwrap().id(), index.id());
    assert_ndb_code(
        api.create_index(&table, &IndexDef::unique("age_u", &["age"])),
        893,
        "a unique index over duplicate values",
    );
    assert_ndb_code(
        api.get_index(&table, "age_u"),
        4243,
        "a failed index is gone",
    );
    api.drop_index(&table, "email_u").expect("drop the index");
    assert_ndb_code(
        read_unique(&api, &index, &email("p1")),
        4243,
        "read via a dropped index",
    );
    insert_committed(&api, &table, &[person(500, Some("p1"), 1, None)])
        .expect("no constraint left");
}

/// `pairs(id key, a Int32, b Varchar nullable)` with ordered indexes on (a) and (a, b).
fn pairs_def() -> TableDef {
    TableDef::new(
        "pairs",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("a", ColumnType::Int32),
            ColumnDef::nullable("b", ColumnType::Varchar(8)),
        ],
    )
}

fn pair(id: u32) -> Vec<Value> {
    let a = (id % 20) as i32 - 10;
    let b = match id % 7 {
        0 => Value::Null,
        k => Value::Varchar(format!("b{k}")),
    };
    vec![Value::UInt32(id), Value::Int32(a), b]
}

/// Orders values as an ordered index does: NULL first, then by value.
fn value_order(x: &Value, y: &Value) -> Ordering {
    match (x, y) {
        (Value::Null, Value::Null) => Ordering::Equal,
        (Value::Null, _) => Ordering::Less,
        (_, Value::Null) => Ordering::Greater,
        (Value::Int32(x), Value::Int32(y)) => x.cmp(y),
        (Value::UInt32(x), Value::UInt32(y)) => x.cmp(y),
        (Value::Varchar(x), Value::Varchar(y)) => x.as_bytes().cmp(y.as_bytes()),
        _ => panic!("unexpected values {x:?} {y:?}"),
    }
}

fn prefix_order(row: &[Value], prefix: &[Value], columns: &[usize]) -> Ordering {
    for (v, &c) in prefix.iter().zip(columns) {
        match value_order(&row[c], v) {
            Ordering::Equal => {}
            other => return other,
        }
    }
    Ordering::Equal
}

/// The model of a range: does `row` lie in it (index columns `columns`)?
fn in_range(row: &[Value], range: &IndexRange, columns: &[usize]) -> bool {
    use rndb_api::RangeEnd::*;
    let low_ok = match &range.low {
        Unbounded => true,
        Included(p) => prefix_order(row, p, columns) != Ordering::Less,
        Excluded(p) => prefix_order(row, p, columns) == Ordering::Greater,
    };
    let high_ok = match &range.high {
        Unbounded => true,
        Included(p) => prefix_order(row, p, columns) != Ordering::Greater,
        Excluded(p) => prefix_order(row, p, columns) == Ordering::Less,
    };
    low_ok && high_ok
}

fn scan_rows(api: &Cluster, index: &Index, options: &ScanOptions) -> Vec<Vec<Value>> {
    let mut tx = api.start_transaction().unwrap();
    let scan = tx.scan_index(index, options).expect("start the index scan");
    let rows = scan.collect::<Result<Vec<_>, _>>().expect("scan the index");
    tx.execute(ExecType::Commit).unwrap();
    rows
}

/// Checks a scan against the model: the same rows, and for a sorted scan, in index order.
fn check_scan(api: &Cluster, index: &Index, model: &[Vec<Value>], options: ScanOptions) {
    let columns = index.columns().to_vec();
    let mut got = scan_rows(api, index, &options);
    let mut expected: Vec<Vec<Value>> = model
        .iter()
        .filter(|r| {
            options.ranges.is_empty() || options.ranges.iter().any(|g| in_range(r, g, &columns))
        })
        .cloned()
        .collect();
    let key = |r: &Vec<Value>| columns.iter().map(|&c| r[c].clone()).collect::<Vec<_>>();
    let cmp = |x: &Vec<Value>, y: &Vec<Value>| {
        key(x)
            .iter()
            .zip(key(y).iter())
            .map(|(a, b)| value_order(a, b))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    };
    if options.sorted {
        let mut sorted = got.clone();
        sorted.sort_by(|x, y| {
            if options.descending {
                cmp(y, x)
            } else {
                cmp(x, y)
            }
        });
        let keys: Vec<_> = got.iter().map(key).collect();
        let sorted_keys: Vec<_> = sorted.iter().map(key).collect();
        assert_eq!(
            keys, sorted_keys,
            "sorted scan {options:?} returns rows in index order"
        );
    }
    got.sort_by_key(|r| match r[0] {
        Value::UInt32(id) => id,
        _ => 0,
    });
    expected.sort_by_key(|r| match r[0] {
        Value::UInt32(id) => id,
        _ => 0,
    });
    assert_eq!(got, expected, "scan {options:?}");
}

#[test]
fn ordered_index_bounds_order_and_ranges() {
    let (_cluster, api) = start(ClusterSpec::new());
    let table = recreate_table(&api, &pairs_def()).expect("create table");
    let model: Vec<_> = (0..300).map(pair).collect();
    insert_committed(&api, &table, &model[..150]).unwrap();
    // Built on a table that holds rows, then kept in step with the inserts that follow.
    let by_a = api
        .create_index(&table, &IndexDef::ordered("by_a", &["a"]))
        .expect("index a");
    let by_ab = api
        .create_index(&table, &IndexDef::ordered("by_ab", &["a", "b"]))
        .expect("index a, b");
    insert_committed(&api, &table, &model[150..]).unwrap();

    let a = |v: i32| vec![Value::Int32(v)];
    let ab = |v: i32, s: &str| vec![Value::Int32(v), Value::Varchar(s.into())];
    let opts = |ranges: Vec<IndexRange>, sorted: bool, descending: bool| ScanOptions {
        ranges,
        sorted,
        descending,
        batch_rows: Some(7),
        ..ScanOptions::default()
    };
    let r = IndexRange::all;
    let cases = vec![
        (&by_a, opts(vec![], true, false)),
        (&by_a, opts(vec![], true, true)),
        (&by_a, opts(vec![], false, false)),
        (
            &by_a,
            opts(vec![r().bound(BoundType::LE, a(-3))], true, false),
        ),
        (
            &by_a,
            opts(vec![r().bound(BoundType::LT, a(-3))], true, false),
        ),
        (
            &by_a,
            opts(vec![r().bound(BoundType::GE, a(4))], true, true),
        ),
        (
            &by_a,
            opts(vec![r().bound(BoundType::GT, a(4))], false, false),
        ),
        (&by_a, opts(vec![IndexRange::eq(a(0))], true, false)),
        (
            &by_a,
            opts(
                vec![r().bound(BoundType::LE, a(-2)).bound(BoundType::GT, a(3))],
                true,
                false,
            ),
        ),
        // Multi-range, given out of order, ascending and descending.
        (
            &by_a,
            opts(
                vec![
                    IndexRange::eq(a(5)),
                    r().bound(BoundType::LE, a(-9)).bound(BoundType::GE, a(-7)),
                ],
                true,
                false,
            ),
        ),
        (
            &by_a,
            opts(
                vec![
                    IndexRange::eq(a(5)),
                    r().bound(BoundType::LE, a(-9)).bound(BoundType::GE, a(-7)),
                ],
                true,
                true,
            ),
        ),
        // Empty ranges: no such value, and low above high.
        (&by_a, opts(vec![IndexRange::eq(a(100))], true, false)),
        (
            &by_a,
            opts(
                vec![r().bound(BoundType::LE, a(5)).bound(BoundType::GE, a(2))],
                false,
                false,
            ),
        ),
        (
            &by_a,
            opts(
                vec![r().bound(BoundType::LT, a(2)).bound(BoundType::GT, a(2))],
                true,
                false,
            ),
        ),
        // Prefix bounds on the two-column index.
        (&by_ab, opts(vec![IndexRange::eq(a(3))], true, false)),
        (&by_ab, opts(vec![IndexRange::eq(ab(3, "b2"))], true, false)),
        (
            &by_ab,
            opts(
                vec![r()
                    .bound(BoundType::LT, ab(3, "b2"))
                    .bound(BoundType::GE, ab(5, "b3"))],
                true,
                false,
            ),
        ),
        (
            &by_ab,
            opts(
                vec![r()
                    .bound(BoundType::LE, a(-1))
                    .bound(BoundType::GT, ab(1, "b4"))],
                true,
                true,
            ),
        ),
        (
            &by_ab,
            opts(
                vec![IndexRange::eq(vec![Value::Int32(4), Value::Null])],
                true,
                false,
            ),
        ),
    ];
    for (index, options) in cases {
        check_scan(&api, index, &model, options);
    }
    assert_ndb_code(
        api.start_transaction()
            .unwrap()
            .scan_index(&by_a, &opts(vec![IndexRange::eq(ab(1, "x"))], false, false)),
        4259,
        "a bound with more values than the index has columns",
    );
}

#[test]
fn ordered_index_follows_updates_deletes_and_uncommitted_changes() {
    let (_cluster, api) = start(ClusterSpec::new());
    let table = recreate_table(&api, &pairs_def()).expect("create table");
    let by_a = api
        .create_index(&table, &IndexDef::ordered("by_a", &["a"]))
        .unwrap();
    let mut model: Vec<_> = (0..100).map(pair).collect();
    insert_committed(&api, &table, &model).unwrap();
    let mut tx = api.start_transaction().unwrap();
    for id in (0..100).step_by(3) {
        tx.update(
            &table,
            &[Value::UInt32(id)],
            &[(1, Value::Int32(1000 + id as i32))],
        )
        .unwrap();
        model[id as usize][1] = Value::Int32(1000 + id as i32);
    }
    for id in (1..100).step_by(5) {
        tx.delete(&table, &[Value::UInt32(id)]).unwrap();
    }
    tx.execute(ExecType::Commit).unwrap();
    model.retain(|r| match r[0] {
        Value::UInt32(id) => id % 5 != 1,
        _ => true,
    });
    let sorted = ScanOptions {
        sorted: true,
        ..ScanOptions::default()
    };
    check_scan(&api, &by_a, &model, sorted.clone());

    // Another transaction's uncommitted change is invisible to a CommittedRead scan, which
    // sees each committed row exactly once; the writer sees its own change.
    let mut writer = api.start_transaction().unwrap();
    writer
        .update(&table, &[Value::UInt32(2)], &[(1, Value::Int32(-500))])
        .unwrap();
    writer.insert(&table, &pair(1000)).unwrap();
    writer.execute(ExecType::NoCommit).unwrap();
    check_scan(&api, &by_a, &model, sorted.clone());
    let own = writer
        .scan_index(
            &by_a,
            &ScanOptions {
                ranges: vec![IndexRange::eq(vec![Value::Int32(-500)])],
                ..sorted.clone()
            },
        )
        .unwrap();
    let own: Vec<_> = own.collect::<Result<_, _>>().unwrap();
    assert_eq!(own.len(), 1, "the writer sees its own uncommitted change");
    writer.execute(ExecType::Rollback).unwrap();
    check_scan(&api, &by_a, &model, sorted);
}

#[test]
fn ordered_index_limit_is_enforced() {
    let spec = ClusterSpec::new().data_node_param("MaxNoOfOrderedIndexes", "2");
    let (_cluster, api) = start(spec);
    let table = recreate_table(&api, &pairs_def()).expect("create table");
    api.create_index(&table, &IndexDef::ordered("i1", &["a"]))
        .unwrap();
    api.create_index(&table, &IndexDef::ordered("i2", &["b"]))
        .unwrap();
    assert_ndb_code(
        api.create_index(&table, &IndexDef::ordered("i3", &["a", "b"])),
        903,
        "third ordered index",
    );
    assert_ndb_code(
        api.create_index(&table, &IndexDef::ordered("i1", &["b"])),
        721,
        "a name used twice",
    );
    assert_ndb_code(
        api.create_index(&table, &IndexDef::ordered("i4", &["nope"])),
        4004,
        "an unknown column",
    );
    api.drop_index(&table, "i1").unwrap();
    api.create_index(&table, &IndexDef::ordered("i3", &["a", "b"]))
        .expect("room after a drop");
}

#[test]
fn max_no_of_attributes_counts_tables_and_indexes_and_is_enforced_with_708() {
    let spec = ClusterSpec::new().data_node_param("MaxNoOfAttributes", "32");
    let (_cluster, api) = start(spec);
    let wide = |name: &str, columns: usize| {
        let mut defs = vec![ColumnDef::key("id", ColumnType::UInt32)];
        defs.extend((1..columns).map(|c| ColumnDef::new(&format!("c{c}"), ColumnType::Int32)));
        TableDef::new(name, defs)
    };
    let t1 = recreate_table(&api, &wide("t1", 10)).expect("10 attributes");
    recreate_table(&api, &wide("t2", 10)).expect("20 attributes");
    recreate_table(&api, &wide("t3", 10)).expect("30 attributes");
    let refused = recreate_table(&api, &wide("t4", 10));
    let detail = format!("{refused:?}");
    assert_ndb_code(refused, 708, "a table past MaxNoOfAttributes");
    assert!(detail.contains("MaxNoOfAttributes=32"), "{detail}");
    // An ordered index counts its columns, a unique index its hidden table's (the indexed
    // columns and NDB$PK).
    api.create_index(&t1, &IndexDef::ordered("o", &["c1", "c2"]))
        .expect("32 attributes");
    assert_ndb_code(
        api.create_index(&t1, &IndexDef::unique("u", &["c3"])),
        708,
        "a unique index past MaxNoOfAttributes",
    );
    api.drop_table("t3").unwrap();
    api.create_index(&t1, &IndexDef::unique("u", &["c3"]))
        .expect("24 attributes after the drop");
    assert_ndb_code(
        recreate_table(&api, &wide("t4", 9)),
        708,
        "a table of 9 attributes with 24 defined",
    );
    recreate_table(&api, &wide("t4", 8)).expect("32 attributes");
}

#[test]
fn max_no_of_fired_triggers_refuses_index_maintenance_past_it_with_221() {
    let spec = ClusterSpec::new().data_node_param("MaxNoOfFiredTriggers", "2");
    let (_cluster, api) = start(spec);
    let (table, index) = people_with_email_index(&api);
    // Five inserts in one execute fire five index inserts at once: past two, 221, and the
    // whole transaction is undone.
    let mut five = api.start_transaction().expect("start");
    for id in 1..=5 {
        five.insert(&table, &person_at_x(id)).expect("define");
    }
    let error = five
        .execute(ExecType::Commit)
        .expect_err("five triggers at once");
    assert_eq!(error.code(), Some(221), "{error}");
    assert!(error.is_temporary(), "{error}");
    assert!(
        error.to_string().contains("MaxNoOfFiredTriggers=2"),
        "{error}"
    );
    drop(five);
    assert_ndb_code(
        read_committed(&api, &table, &[Value::UInt32(1)]),
        626,
        "the refused transaction's insert",
    );
    // Records come back as their operations are answered: inserts two at a time, many times.
    for pair in 0..4 {
        let rows: Vec<Vec<Value>> = (1..=2).map(|k| person_at_x(10 + 2 * pair + k)).collect();
        insert_committed(&api, &table, &rows).expect("two at a time");
    }
    assert_eq!(
        read_unique(&api, &index, &email("17@x")).expect("maintained")[0],
        Value::UInt32(17)
    );
}

#[test]
fn max_no_of_concurrent_index_operations_refuses_one_past_it_in_flight_with_288() {
    let spec = ClusterSpec::new().data_node_param("MaxNoOfConcurrentIndexOperations", "3");
    let (_cluster, api) = start(spec);
    let (table, index) = people_with_email_index(&api);
    let rows: Vec<Vec<Value>> = (1..=4).map(person_at_x).collect();
    insert_committed(&api, &table, &rows).expect("insert");
    // Four index operations in one execute reach TC together: the fourth finds the three
    // records held.
    let mut four = api.start_transaction().expect("start");
    for id in 1..=4 {
        four.read_unique(&index, &email(&format!("{id}@x")), LockMode::Read)
            .expect("define");
    }
    let error = four
        .execute(ExecType::NoCommit)
        .expect_err("a fourth at once");
    assert_eq!(error.code(), Some(288), "{error}");
    assert!(error.is_temporary(), "{error}");
    assert!(
        error
            .to_string()
            .contains("MaxNoOfConcurrentIndexOperations=3"),
        "{error}"
    );
    drop(four);
    // A record is free again once its operation is answered, not only when its transaction
    // ends (as NDB's): one open transaction runs index operations past the limit, three at a
    // time, while another reads through the index too.
    let mut holder = api.start_transaction().expect("start");
    for round in 0..3 {
        for id in 1..=3 {
            holder
                .read_unique(&index, &email(&format!("{id}@x")), LockMode::Read)
                .expect("define");
        }
        holder
            .execute(ExecType::NoCommit)
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
    }
    assert_eq!(
        read_unique(&api, &index, &email("4@x")).expect("another transaction")[0],
        Value::UInt32(4)
    );
    holder.execute(ExecType::Commit).expect("commit");
    // Key reads never needed one.
    assert_eq!(
        read_committed(&api, &table, &[Value::UInt32(1)]).expect("a key read")[0],
        Value::UInt32(1)
    );
}
