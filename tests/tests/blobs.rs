//! Proves that BLOB and TEXT values of every length (none, in the head only, one part, many
//! parts, a MEDIUMTEXT past 64 KiB, a LONGBLOB of 6 MiB in several executes) round-trip through
//! insert, read (by key and through a unique index), both kinds of scans, update, write and
//! delete on two data nodes with two replicas, that the parts tables hold exactly the parts the
//! values need after each change (none left behind by a shorter value or a delete), that a
//! value too long, a BLOB key, an index or filter comparison on a blob column, and reads that
//! cannot assemble values or writes that cannot read old heads (from a chosen replica,
//! through the asynchronous executor) are refused, that a row a scan reads again for its
//! parts still meets the scan's filter, that a table's parts tables go with it, that a JSON
//! column holds JSON documents only, that writes read old heads at their execute and keep a
//! batch's order and operation ids (a round trip failing on the way rolls the transaction
//! back), that the tokio interface reads, writes and scans long
//! values as the blocking API does, and that a scan sees the long values its own transaction
//! wrote (within a bound).

use rndb_api::CmpOp;
use rndb_api::{
    AbortOption, BlobSize, Cluster, ColumnDef, ColumnType, ExecType, Filter, IndexDef, LockMode,
    ScanOptions, Table, TableDef, Value,
};
use rndb_tests::{assert_ndb_code, ClusterSpec, TestCluster};

fn start() -> (TestCluster, Cluster) {
    let spec = ClusterSpec::new().data_nodes(2).replicas(2);
    let cluster = TestCluster::start(spec).expect("start the cluster");
    let api = cluster.connect().expect("connect");
    (cluster, api)
}

fn docs_def() -> TableDef {
    TableDef::new(
        "docs",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("code", ColumnType::Varchar(16)),
            ColumnDef::nullable("body", ColumnType::Blob(BlobSize::Blob)),
            ColumnDef::nullable("note", ColumnType::Text(BlobSize::Tiny)),
            ColumnDef::nullable("story", ColumnType::Text(BlobSize::Medium)),
        ],
    )
}

/// `len` bytes that differ from one position to the next and from one seed to another.
fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Text of `len` bytes, with a two-byte character in it when long enough.
fn text(len: usize, seed: u8) -> String {
    let letters: String = (0..len)
        .map(|i| char::from(b'a' + ((i + usize::from(seed)) % 26) as u8))
        .collect();
    if len >= 4 {
        format!("é{}", &letters[2..])
    } else {
        letters
    }
}

fn row(id: u32, body: Option<usize>, note: &str, story: Option<usize>) -> Vec<Value> {
    vec![
        Value::UInt32(id),
        Value::Varchar(format!("c{id}")),
        body.map_or(Value::Null, |n| Value::Varbinary(bytes(n, id as u8))),
        Value::Varchar(note.to_string()),
        story.map_or(Value::Null, |n| Value::Varchar(text(n, id as u8))),
    ]
}

fn read(api: &Cluster, table: &Table, id: u32, lock: LockMode) -> Option<Vec<Value>> {
    let mut tx = api.start_transaction().expect("start");
    let op = tx.read(table, &[Value::UInt32(id)], lock).expect("define");
    match tx.execute(ExecType::Commit) {
        Ok(()) => Some(tx.row(op).expect("a row").to_vec()),
        Err(e) if e.code() == Some(626) => None,
        Err(e) => panic!("read {id}: {e}"),
    }
}

fn scan(api: &Cluster, table: &Table, lock: LockMode) -> Vec<Vec<Value>> {
    let mut tx = api.start_transaction().expect("start");
    let options = ScanOptions {
        lock,
        batch_rows: Some(2),
        ..ScanOptions::default()
    };
    let rows: Vec<Vec<Value>> = tx
        .scan_table(table, &options)
        .expect("scan")
        .collect::<Result<_, _>>()
        .expect("rows");
    tx.execute(ExecType::Commit).expect("commit");
    sorted_by_key(rows)
}

/// The rows of a parts table, as (key, part number, data length).
fn parts(api: &Cluster, table: &Table, column: usize) -> Vec<(u32, u32, usize)> {
    let (_, parts) = (table.blob_parts_tables().into_iter())
        .find(|(c, _)| *c == column)
        .expect("a parts table");
    let mut tx = api.start_transaction().expect("start");
    let scan = tx
        .scan_table(&parts, &ScanOptions::default())
        .expect("scan");
    let mut found: Vec<(u32, u32, usize)> = scan
        .map(|r| {
            let r = r.expect("a row");
            match (&r[0], &r[1], &r[2]) {
                (Value::UInt32(id), Value::UInt32(part), Value::Varbinary(data)) => {
                    (*id, *part, data.len())
                }
                other => panic!("a parts row {other:?}"),
            }
        })
        .collect();
    found.sort();
    found
}

fn commit(api: &Cluster, define: impl FnOnce(&mut rndb_api::Transaction<'_>)) {
    let mut tx = api.start_transaction().expect("start");
    define(&mut tx);
    tx.execute(ExecType::Commit).expect("commit");
}

#[test]
fn values_of_every_length_round_trip_and_parts_follow_them() {
    let (_cluster, api) = start();
    let table = api.create_table(&docs_def()).expect("create");
    assert_eq!(
        table.blob_parts_tables().len(),
        2,
        "BLOB and MEDIUMTEXT have parts tables, TINYTEXT none"
    );
    // Lengths: nothing, in the head, exactly the head, one byte of a part, many parts.
    let rows = vec![
        row(1, None, "", None),
        row(2, Some(0), "n", Some(3)),
        row(3, Some(256), "short note", Some(256)),
        row(4, Some(257), &"x".repeat(255), Some(4_257)),
        row(5, Some(65_535), "max", Some(70_000)),
    ];
    commit(&api, |tx| {
        for r in &rows {
            tx.insert(&table, r).expect("insert");
        }
    });
    for lock in [LockMode::CommittedRead, LockMode::Read, LockMode::Exclusive] {
        for r in &rows {
            let id = match r[0] {
                Value::UInt32(id) => id,
                _ => unreachable!(),
            };
            assert_eq!(
                read(&api, &table, id, lock).as_ref(),
                Some(r),
                "row {id}, {lock:?}"
            );
        }
        assert_eq!(scan(&api, &table, lock), rows, "a {lock:?} scan");
    }
    // Parts: BLOB of 257 → 1 part of 1 byte; 65 535 → 33 parts (the last 1 279 bytes).
    let body = parts(&api, &table, 2);
    assert_eq!(body.iter().filter(|p| p.0 == 4).count(), 1);
    assert_eq!(body.iter().filter(|p| p.0 == 5).count(), 33);
    assert_eq!(
        body.iter().find(|p| p.0 == 5 && p.1 == 32).map(|p| p.2),
        Some(1_279)
    );
    assert_eq!(
        body.len(),
        34,
        "no parts for values of the head's length or less"
    );
    let story = parts(&api, &table, 4);
    assert_eq!(
        story.iter().filter(|p| p.0 == 5).count(),
        18,
        "70 000 bytes in 4 000s"
    );

    // A unique index on another column reads the whole row too.
    let index = api
        .create_index(&table, &IndexDef::unique("by_code", &["code"]))
        .expect("index");
    let mut tx = api.start_transaction().expect("start");
    let op = tx
        .read_unique(
            &index,
            &[Value::Varchar("c5".into())],
            LockMode::CommittedRead,
        )
        .expect("define");
    tx.execute(ExecType::Commit)
        .expect("read through the index");
    assert_eq!(tx.row(op), Some(&rows[4][..]));

    // Shorter, longer, NULL: the parts tables hold exactly what the new values need.
    commit(&api, |tx| {
        let set = [(2, Value::Varbinary(bytes(300, 9)))];
        tx.update(&table, &[Value::UInt32(5)], &set)
            .expect("update 5 shorter");
        let set = [(4, Value::Null), (2, Value::Varbinary(bytes(5_000, 8)))];
        tx.update(&table, &[Value::UInt32(3)], &set)
            .expect("update 3 longer");
        tx.write(&table, &row(4, Some(10), "w", Some(9_000)))
            .expect("write 4");
        tx.write(&table, &row(6, Some(2_001), "new", None))
            .expect("write 6, new");
    });
    let mut expected = rows.clone();
    expected[4][2] = Value::Varbinary(bytes(300, 9));
    expected[2][4] = Value::Null;
    expected[2][2] = Value::Varbinary(bytes(5_000, 8));
    expected[3] = row(4, Some(10), "w", Some(9_000));
    expected.push(row(6, Some(2_001), "new", None));
    assert_eq!(scan(&api, &table, LockMode::CommittedRead), expected);
    let body = parts(&api, &table, 2);
    let count = |id: u32| body.iter().filter(|p| p.0 == id).count();
    assert_eq!(
        (count(3), count(4), count(5), count(6)),
        (3, 0, 1, 1),
        "{body:?}"
    );
    let story = parts(&api, &table, 4);
    assert_eq!(
        story.iter().filter(|p| p.0 == 3).count(),
        0,
        "NULL has none"
    );
    assert_eq!(story.iter().filter(|p| p.0 == 4).count(), 3);
    assert_eq!(story.iter().filter(|p| p.0 == 5).count(), 18);

    // A transaction reads the values it wrote itself, parts and all, before it commits.
    let mut tx = api.start_transaction().expect("start");
    let fresh = row(7, Some(9_999), "mine", Some(12_345));
    tx.insert(&table, &fresh).expect("insert 7");
    let op = tx
        .read(&table, &[Value::UInt32(7)], LockMode::CommittedRead)
        .expect("define");
    tx.execute(ExecType::NoCommit).expect("read its own write");
    assert_eq!(tx.row(op), Some(&fresh[..]));
    tx.execute(ExecType::Rollback).expect("roll back");
    assert_eq!(read(&api, &table, 7, LockMode::Read), None);
    assert!(
        parts(&api, &table, 2).iter().all(|p| p.0 != 7),
        "rolled back"
    );

    // A delete takes every part with the row.
    commit(&api, |tx| {
        tx.delete(&table, &[Value::UInt32(5)]).expect("delete 5");
    });
    assert_eq!(read(&api, &table, 5, LockMode::Read), None);
    assert!(parts(&api, &table, 2).iter().all(|p| p.0 != 5));
    assert!(parts(&api, &table, 4).iter().all(|p| p.0 != 5));

    // The parts tables go with the table, and not alone.
    let (_, body_parts) = table.blob_parts_tables().remove(0);
    assert_ndb_code(
        api.drop_table(body_parts.name()),
        4264,
        "drop a parts table",
    );
    api.drop_index(&table, "by_code").expect("drop index");
    api.drop_table("docs").expect("drop");
    assert_ndb_code(
        api.get_table(body_parts.name()),
        709,
        "the parts table is gone",
    );
}

#[test]
fn blob_misuse_is_refused() {
    let (_cluster, api) = start();
    let table = api.create_table(&docs_def()).expect("create");
    let mut tx = api.start_transaction().expect("start");
    let mut long = row(1, None, "", None);
    long[2] = Value::Varbinary(vec![0; 65_536]);
    assert_ndb_code(tx.insert(&table, &long), 4209, "a BLOB past 65 535 bytes");
    let mut tiny = row(1, None, "", None);
    tiny[3] = Value::Varchar("y".repeat(256));
    assert_ndb_code(tx.insert(&table, &tiny), 4209, "a TINYTEXT past 255 bytes");
    let mut wrong = row(1, None, "", None);
    wrong[4] = Value::Varbinary(vec![1]);
    assert_ndb_code(tx.insert(&table, &wrong), 4209, "bytes for a TEXT");
    drop(tx);
    let keyed = TableDef::new(
        "keyed",
        vec![ColumnDef::key("b", ColumnType::Blob(BlobSize::Blob))],
    );
    assert_ndb_code(api.create_table(&keyed), 4264, "a BLOB key");
    let index = IndexDef::ordered("by_body", &["body"]);
    assert_ndb_code(api.create_index(&table, &index), 4264, "an index on a BLOB");
    let mut tx = api.start_transaction().expect("start");
    let options = ScanOptions {
        filter: Some(Filter::cmp(2, CmpOp::Eq, Value::Varbinary(vec![]))),
        ..ScanOptions::default()
    };
    assert_ndb_code(
        tx.scan_table(&table, &options).map(|_| ()),
        4264,
        "a filter comparing a BLOB",
    );
    // Where values are not assembled: a read from a chosen replica, the asynchronous
    // executor's execute of a read.
    let mut tx = api.start_transaction().expect("start");
    let key = [Value::UInt32(1)];
    assert_ndb_code(
        tx.read_from_replica(&table, &key, 0),
        4264,
        "a replica read",
    );
    tx.read(&table, &key, LockMode::CommittedRead)
        .expect("define");
    let mut executor = api.async_executor();
    executor
        .prepare(tx, ExecType::Commit, AbortOption::AbortOnError, 7)
        .expect("prepare");
    let done = executor.send_poll(1, std::time::Duration::from_secs(10));
    assert_eq!(done.len(), 1);
    let code = done[0].result.as_ref().err().and_then(|e| e.code());
    assert_eq!(code, Some(4264), "an async read: {:?}", done[0].result);
    // A write of a row with parts reads its old heads at its execute: round trips the
    // asynchronous executor does not make.
    let mut tx = api.start_transaction().expect("start");
    tx.write(&table, &row(1, Some(5_000), "", None))
        .expect("define");
    executor
        .prepare(tx, ExecType::Commit, AbortOption::AbortOnError, 8)
        .expect("prepare");
    let done = executor.send_poll(1, std::time::Duration::from_secs(10));
    assert_eq!(done.len(), 1);
    let code = done[0].result.as_ref().err().and_then(|e| e.code());
    assert_eq!(code, Some(4264), "an async write: {:?}", done[0].result);
    let reserved = TableDef::new(
        &format!("NDB$BLOB_{}_2", table.id()),
        vec![ColumnDef::key("k", ColumnType::Int32)],
    );
    assert_ndb_code(api.create_table(&reserved), 4241, "a parts table's name");
}

/// A CommittedRead scan reads a row with a long value again to complete it: a row changed
/// since the scan met it comes back only if it still meets the scan's filter.
#[test]
fn a_row_read_again_for_its_parts_still_meets_the_scan_filter() {
    let (_cluster, api) = start();
    let table = api.create_table(&docs_def()).expect("create");
    commit(&api, |tx| {
        tx.insert(&table, &row(1, Some(3_000), "", None))
            .expect("insert");
        tx.insert(&table, &row(2, Some(3_000), "", None))
            .expect("insert");
    });
    let mut tx = api.start_transaction().expect("start");
    let options = ScanOptions {
        filter: Some(Filter::cmp(1, CmpOp::Eq, Value::Varchar("c1".into()))),
        ..ScanOptions::default()
    };
    // Its first batches are in: the scan met row 1 as "c1".
    let scan = tx.scan_table(&table, &options).expect("scan");
    commit(&api, |tx| {
        let set = [(1, Value::Varchar("moved".into()))];
        tx.update(&table, &[Value::UInt32(1)], &set)
            .expect("update");
    });
    let rows: Vec<Vec<Value>> = scan.collect::<Result<_, _>>().expect("rows");
    assert_eq!(
        rows,
        Vec::<Vec<Value>>::new(),
        "row 1 no longer meets the filter"
    );
    drop(tx);
    let mut tx = api.start_transaction().expect("start");
    let rows: Vec<Vec<Value>> = tx
        .scan_table(&table, &options)
        .expect("scan")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert!(rows.is_empty());
}

/// An insert of a row whose key exists, with a value that has parts, under IgnoreError: the
/// insert fails (630) and must leave no parts behind (they would be orphans, past the
/// existing value's length, and a later insert of the key would fail on them); also with a
/// value of 600 KB, whose parts follow the row in batches of their own.
#[test]
fn a_failed_insert_under_ignore_error_leaves_no_parts() {
    let (_cluster, api) = start();
    let table = api.create_table(&docs_def()).expect("create");
    commit(&api, |tx| {
        tx.insert(&table, &row(1, Some(300), "", None))
            .expect("insert");
    });
    assert_eq!(parts(&api, &table, 2).len(), 1);
    let mut tx = api.start_transaction().expect("start");
    let op = tx
        .insert(&table, &row(1, Some(5_000), "", None))
        .expect("define");
    let result = tx.execute_with(ExecType::Commit, rndb_api::AbortOption::IgnoreError);
    match result {
        Ok(()) => assert_eq!(tx.op_error(op).map(|e| e.code), Some(630)),
        Err(e) => assert_eq!(e.code(), Some(630), "{e}"),
    }
    drop(tx);
    assert_eq!(
        parts(&api, &table, 2),
        vec![(1, 0, 44)],
        "the existing value's one part, and no other"
    );
    assert_eq!(
        read(&api, &table, 1, LockMode::Read),
        Some(row(1, Some(300), "", None))
    );
    let mut tx = api.start_transaction().expect("start");
    let op = tx
        .insert(&table, &row(1, None, "", Some(600_000)))
        .expect("define");
    let result = tx.execute_with(ExecType::Commit, rndb_api::AbortOption::IgnoreError);
    match result {
        Ok(()) => assert_eq!(tx.op_error(op).map(|e| e.code), Some(630)),
        Err(e) => assert_eq!(e.code(), Some(630), "{e}"),
    }
    drop(tx);
    assert_eq!(parts(&api, &table, 4), Vec::new(), "no parts of the 600 KB");
    // The key deleted and inserted again, with a longer value.
    commit(&api, |tx| {
        tx.delete(&table, &[Value::UInt32(1)]).expect("delete");
    });
    commit(&api, |tx| {
        tx.insert(&table, &row(1, Some(5_000), "", None))
            .expect("insert");
    });
    assert_eq!(
        read(&api, &table, 1, LockMode::Read),
        Some(row(1, Some(5_000), "", None))
    );
}

/// An operation defined before a write of a row with BLOB values, which fails under the
/// IgnoreError the execute names: the write's read of the old heads must not turn the
/// failure into the write's (nor abort the transaction); and under AbortOnError the failure
/// still aborts the transaction at the execute.
#[test]
fn operations_defined_before_a_blob_write_keep_the_execute_abort_option() {
    let (_cluster, api) = start();
    let table = api.create_table(&docs_def()).expect("create");
    let mut tx = api.start_transaction().expect("start");
    let missing = tx
        .delete(&table, &[Value::UInt32(9)])
        .expect("define the delete");
    let write = tx
        .write(&table, &row(2, Some(3_000), "w", None))
        .expect("the write is defined: the delete's 626 is ignored");
    tx.execute_with(ExecType::Commit, rndb_api::AbortOption::IgnoreError)
        .expect("commit");
    assert_eq!(tx.op_error(missing).map(|e| e.code), Some(626));
    assert_eq!(tx.op_error(write), None);
    drop(tx);
    assert_eq!(
        read(&api, &table, 2, LockMode::Read),
        Some(row(2, Some(3_000), "w", None))
    );

    // AbortOnError: the delete's 626 fails the execute, and nothing is written.
    let mut tx = api.start_transaction().expect("start");
    tx.delete(&table, &[Value::UInt32(9)])
        .expect("define the delete");
    let defined = tx.write(&table, &row(3, Some(3_000), "w", None));
    let result = defined.and_then(|_| tx.execute(ExecType::Commit));
    assert_ndb_code(result, 626, "the delete of a missing row");
    drop(tx);
    assert_eq!(read(&api, &table, 3, LockMode::Read), None);
    assert!(parts(&api, &table, 2).iter().all(|p| p.0 != 3));
}

/// A scan in a transaction that changed long values of its table sees the transaction's own
/// values, whole, under every lock mode, through the blocking API and the tokio interface: a
/// changed row, a deleted one left out, the others as committed. Operations defined before
/// the scan and not yet executed go out before it opens (it sees them), and the error of one
/// fails the next execute that aborts on errors, as if it had waited for that execute.
#[test]
fn a_scan_sees_its_own_transactions_long_values() {
    let (_cluster, api) = start();
    let table = api.create_table(&docs_def()).expect("create");
    let committed = long_rows(&api, &table);
    for lock in [LockMode::Read, LockMode::Exclusive, LockMode::CommittedRead] {
        let mut tx = api.start_transaction().expect("start");
        let new = row(2, Some(4_500 + lock as usize), "", Some(300));
        tx.write(&table, &new).expect("write");
        tx.delete(&table, &[Value::UInt32(3)]).expect("delete");
        tx.execute(ExecType::NoCommit).expect("no commit");
        // Row 1 exists: this insert fails (630) when it is sent. The update of it before goes
        // out before the scan opens, which sees it.
        let pending = Value::Varchar("pending".into());
        (tx.update(&table, &[Value::UInt32(1)], &[(1, pending.clone())])).expect("update");
        tx.insert(&table, &row(1, None, "", None)).expect("insert");
        // A batch of one row: the scan is open while its rows' parts are read.
        let options = ScanOptions {
            lock,
            batch_rows: Some(1),
            ..ScanOptions::default()
        };
        let rows: Vec<Vec<Value>> = tx
            .scan_table(&table, &options)
            .expect("scan")
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("a {lock:?} scan: {e}"));
        let mut expected = vec![committed[0].clone(), new];
        expected[0][1] = pending;
        assert_eq!(sorted_by_key(rows), expected, "a {lock:?} scan");
        assert_ndb_code(
            tx.execute(ExecType::Commit),
            630,
            "the insert sent with the scan",
        );
    }
    assert_eq!(scan(&api, &table, LockMode::Read), committed);
    // The tokio interface, the same.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let mut tx = api.tokio().start_transaction();
        let new = row(1, None, "", Some(20_000));
        tx.write(&table, &new).expect("write");
        tx.execute(ExecType::NoCommit).await.expect("no commit");
        let mut scan = (tx.scan_table(&table, &ScanOptions::default()))
            .await
            .expect("scan (tokio)");
        let mut rows = Vec::new();
        while let Some(r) = scan.next_row().await {
            rows.push(r.expect("a row (tokio)"));
        }
        drop(scan);
        let mut expected = committed.clone();
        expected[0] = new;
        assert_eq!(sorted_by_key(rows), expected, "a scan (tokio)");
        tx.execute(ExecType::Rollback).await.expect("rollback");
    });
    assert_eq!(scan(&api, &table, LockMode::Read), committed);
}

/// Three committed rows with long values, keys 1 to 3, in key order.
fn long_rows(api: &Cluster, table: &Table) -> Vec<Vec<Value>> {
    let committed: Vec<Vec<Value>> = (1..=3)
        .map(|id| row(id, Some(300), "", Some(5_000)))
        .collect();
    commit(api, |tx| {
        for r in &committed {
            tx.insert(table, r).expect("insert");
        }
    });
    committed
}

fn sorted_by_key(mut rows: Vec<Vec<Value>>) -> Vec<Vec<Value>> {
    rows.sort_by_key(|r| match r[0] {
        Value::UInt32(id) => id,
        _ => 0,
    });
    rows
}

/// A CommittedRead scan completes each row with a long value in a short transaction of its
/// own: its transaction, still open, holds no lock on the rows it returned.
#[test]
fn a_committed_read_scan_holds_no_lock_on_the_rows_it_completed() {
    let (_cluster, api) = start();
    let table = api.create_table(&docs_def()).expect("create");
    let committed = long_rows(&api, &table);
    let mut reader = api.start_transaction().expect("start");
    let rows: Vec<Vec<Value>> = reader
        .scan_table(&table, &ScanOptions::default())
        .expect("scan")
        .collect::<Result<_, _>>()
        .expect("a CommittedRead scan");
    assert_eq!(sorted_by_key(rows), committed);
    // The reader is still open: a write of a row it completed does not wait for it.
    let newer = row(1, Some(7_000), "", None);
    commit(&api, |tx| {
        tx.write(&table, &newer).expect("write");
    });
    reader.execute(ExecType::Commit).expect("commit");
    assert_eq!(read(&api, &table, 1, LockMode::Read), Some(newer));
}

/// A JSON column is a LONGTEXT that takes JSON documents only: a document past its head
/// round-trips through insert, read and scan; text that is not one document is refused with
/// 4209 naming the column (insert and update), leaving the row as it was; a filter may not
/// compare it (4264).
#[test]
fn a_json_column_holds_json_documents() {
    let (_cluster, api) = start();
    let def = TableDef::new(
        "events",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::nullable("doc", ColumnType::Json),
        ],
    );
    let table = api.create_table(&def).expect("create");
    let items: Vec<String> = (0..500).map(|i| format!("{{\"n\": {i}}}")).collect();
    let doc = format!("{{\"items\": [{}], \"ok\": true}}", items.join(", "));
    let row = vec![Value::UInt32(1), Value::Varchar(doc)];
    commit(&api, |tx| {
        tx.insert(&table, &row).expect("insert");
    });
    assert_eq!(
        read(&api, &table, 1, LockMode::CommittedRead),
        Some(row.clone())
    );
    assert_eq!(
        scan(&api, &table, LockMode::CommittedRead),
        vec![row.clone()]
    );
    for (what, op) in [("insert", 0), ("update", 1)] {
        let mut tx = api.start_transaction().expect("start");
        let bad = vec![Value::UInt32(2 - op), Value::Varchar("{\"a\": }".into())];
        let refused = if op == 0 {
            tx.insert(&table, &bad)
        } else {
            tx.update(&table, &bad[..1], &[(1, bad[1].clone())])
        };
        let e = refused.expect_err(what);
        assert_eq!(e.code(), Some(4209), "{what}: {e}");
        assert!(
            e.to_string()
                .contains("column doc is Json: Invalid JSON text"),
            "{e}"
        );
    }
    assert_eq!(read(&api, &table, 1, LockMode::Read), Some(row));
    assert_eq!(read(&api, &table, 2, LockMode::Read), None);
    let mut tx = api.start_transaction().expect("start");
    let options = ScanOptions {
        filter: Some(Filter::cmp(1, CmpOp::Eq, Value::Varchar("{}".into()))),
        ..ScanOptions::default()
    };
    assert_ndb_code(
        tx.scan_table(&table, &options).map(|_| ()),
        4264,
        "a filter comparing a JSON column",
    );
}

/// A LONGBLOB of several MiB (hundreds of parts) is written, read, scanned, shortened and
/// deleted: its parts go in executes that fit the links' send buffers.
#[test]
fn a_value_of_megabytes_round_trips() {
    let (_cluster, api) = start();
    let def = TableDef::new(
        "big",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::nullable("b", ColumnType::Blob(BlobSize::Long)),
        ],
    );
    let table = api.create_table(&def).expect("create");
    let value = bytes(6 << 20, 3);
    let row = vec![Value::UInt32(1), Value::Varbinary(value)];
    commit(&api, |tx| {
        tx.insert(&table, &row).expect("insert");
    });
    assert_eq!(
        read(&api, &table, 1, LockMode::CommittedRead),
        Some(row.clone())
    );
    assert_eq!(scan(&api, &table, LockMode::CommittedRead), vec![row]);
    let short = vec![Value::UInt32(1), Value::Varbinary(bytes(9_000, 4))];
    commit(&api, |tx| {
        tx.write(&table, &short).expect("write");
    });
    assert_eq!(read(&api, &table, 1, LockMode::Read), Some(short));
    assert_eq!(parts(&api, &table, 1).len(), 2);
    commit(&api, |tx| {
        tx.delete(&table, &[Value::UInt32(1)]).expect("delete");
    });
    assert!(parts(&api, &table, 1).is_empty());
}

/// An update or delete of a row with parts reads the old heads at its execute, as NDB's blob
/// handles do, not when it is defined: a row inserted and committed by another transaction
/// in between is the one updated (whole, with exactly the new value's parts) or deleted
/// (with every part). A row missing at the execute gets 626 under either AbortOption and
/// nothing is sent for it: no head naming parts never written, no parts left behind (on
/// which a later insert of the key would fail with 630).
#[test]
fn an_update_or_delete_reads_the_row_at_its_execute_and_leaves_nothing_for_a_missing_one() {
    let (_cluster, api) = start();
    let table = api.create_table(&docs_def()).expect("create");

    // The update, defined before the row existed.
    let mut tx = api.start_transaction().expect("start");
    let set = [(2, Value::Varbinary(bytes(7_000, 5)))];
    let update = tx
        .update(&table, &[Value::UInt32(1)], &set)
        .expect("define the update");
    commit(&api, |other| {
        other
            .insert(&table, &row(1, Some(9_000), "", None))
            .expect("insert");
    });
    tx.execute_with(ExecType::Commit, AbortOption::IgnoreError)
        .expect("commit the update");
    assert_eq!(tx.op_error(update), None);
    assert_eq!(tx.row(update), None, "an update's OpId names no row");
    drop(tx);
    let mut updated = row(1, Some(9_000), "", None);
    updated[2] = Value::Varbinary(bytes(7_000, 5));
    assert_eq!(read(&api, &table, 1, LockMode::Read), Some(updated));
    let expected: Vec<(u32, u32, usize)> = (0..4)
        .map(|p| (1, p, if p < 3 { 2_000 } else { 744 }))
        .collect();
    assert_eq!(
        parts(&api, &table, 2),
        expected,
        "the new value's parts only"
    );

    // The delete, defined before the row existed.
    let mut tx = api.start_transaction().expect("start");
    tx.delete(&table, &[Value::UInt32(2)])
        .expect("define the delete");
    commit(&api, |other| {
        other
            .insert(&table, &row(2, Some(5_000), "", None))
            .expect("insert");
    });
    tx.execute(ExecType::Commit).expect("commit the delete");
    drop(tx);
    assert_eq!(read(&api, &table, 2, LockMode::Read), None);
    assert!(
        parts(&api, &table, 2).iter().all(|p| p.0 != 2),
        "its parts gone"
    );

    // Missing at the execute: 626, under IgnoreError as the operation's error.
    for abort in [AbortOption::IgnoreError, AbortOption::AbortOnError] {
        let mut tx = api.start_transaction().expect("start");
        let update = tx
            .update(&table, &[Value::UInt32(3)], &set)
            .expect("define the update");
        let delete = tx
            .delete(&table, &[Value::UInt32(4)])
            .expect("define the delete");
        let result = tx.execute_with(ExecType::Commit, abort);
        match abort {
            AbortOption::IgnoreError => {
                result.expect("commit");
                assert_eq!(tx.op_error(update).map(|e| e.code), Some(626));
                assert_eq!(tx.op_error(delete).map(|e| e.code), Some(626));
            }
            AbortOption::AbortOnError => assert_ndb_code(result, 626, "a missing row"),
        }
    }
    assert!(
        parts(&api, &table, 2).iter().all(|p| p.0 == 1),
        "no parts of the missing rows"
    );
    commit(&api, |tx| {
        tx.delete(&table, &[Value::UInt32(1)]).expect("delete");
    });
    assert!(parts(&api, &table, 2).is_empty(), "no orphan parts");
    commit(&api, |tx| {
        for id in 2..=4 {
            tx.insert(&table, &row(id, Some(5_000), "", None))
                .expect("insert again");
        }
    });
}

/// A write defined while its row is missing, then a row of that key with a longer value
/// inserted and committed by another transaction before the write executes: the other
/// value's parts past the write's must not stay behind as orphans (a later insert of the key
/// would fail on them with 630), whether the write's read of the old heads (at its execute)
/// finds the row or, in a race, finds none and inserts (630).
#[test]
fn a_write_of_a_row_found_missing_leaves_no_orphans() {
    let (_cluster, api) = start();
    let table = api.create_table(&docs_def()).expect("create");
    let mut tx = api.start_transaction().expect("start");
    tx.write(&table, &row(1, Some(300), "", None))
        .expect("define the write");
    commit(&api, |other| {
        other
            .insert(&table, &row(1, Some(9_000), "", None))
            .expect("insert");
    });
    let result = tx.execute(ExecType::Commit);
    drop(tx);
    let expected: Vec<(u32, u32, usize)> = match result {
        // The write went in after the insert: its one part, and no other.
        Ok(()) => vec![(1, 0, 44)],
        // Or it failed as a conflict: the insert's row, whole.
        Err(_) => {
            assert_eq!(
                read(&api, &table, 1, LockMode::Read),
                Some(row(1, Some(9_000), "", None))
            );
            (0..5)
                .map(|p| (1, p, if p < 4 { 2_000 } else { 744 }))
                .collect()
        }
    };
    assert_eq!(parts(&api, &table, 2), expected, "{result:?}");
    commit(&api, |tx| {
        tx.delete(&table, &[Value::UInt32(1)]).expect("delete");
    });
    assert!(parts(&api, &table, 2).is_empty(), "no orphan parts");
}

/// An interpreted update that sets a BLOB or TEXT column would write the value as the
/// row's head, leaving the old value's parts behind (setting NULL) or a head that is not the
/// value: it is refused (4264), as NDB refuses setValue on a blob column.
#[test]
fn an_interpreted_update_of_a_blob_column_is_refused() {
    let (_cluster, api) = start();
    let table = api.create_table(&docs_def()).expect("create");
    commit(&api, |tx| {
        tx.insert(&table, &row(1, Some(3_000), "n", None))
            .expect("insert");
    });
    let code = rndb_api::InterpretedCode::new(&table);
    let mut tx = api.start_transaction().expect("start");
    for (column, value) in [
        (2, Value::Null),
        (3, Value::Varchar("x".into())),
        (4, Value::Varchar(text(600, 1))),
    ] {
        let set = [(column, value)];
        assert_ndb_code(
            tx.interpreted_update(&table, &[Value::UInt32(1)], &set, &code),
            4264,
            "an interpreted update of a blob column",
        );
    }
    // One of the other columns is fine.
    let set = [(1, Value::Varchar("k".into()))];
    tx.interpreted_update(&table, &[Value::UInt32(1)], &set, &code)
        .expect("an interpreted update of another column");
    tx.execute(ExecType::Commit).expect("commit");
    drop(tx);
    let mut expected = row(1, Some(3_000), "n", None);
    expected[1] = Value::Varchar("k".into());
    assert_eq!(read(&api, &table, 1, LockMode::Read), Some(expected));
    assert_eq!(parts(&api, &table, 2).len(), 2);
}

/// A rollback of a batch holding a failed write of a row with parts, under IgnoreError, is a
/// rollback as any other: it succeeds (a batch without BLOB values does), and nothing stays.
#[test]
fn a_rollback_of_a_failed_blob_write_succeeds() {
    let (_cluster, api) = start();
    let table = api.create_table(&docs_def()).expect("create");
    commit(&api, |tx| {
        tx.insert(&table, &row(1, Some(300), "", None))
            .expect("insert");
    });
    let mut tx = api.start_transaction().expect("start");
    tx.insert(&table, &row(1, Some(5_000), "", None))
        .expect("define");
    tx.insert(&table, &row(2, Some(5_000), "", None))
        .expect("define");
    tx.execute_with(ExecType::Rollback, AbortOption::IgnoreError)
        .expect("a rollback");
    drop(tx);
    assert_eq!(parts(&api, &table, 2), vec![(1, 0, 44)]);
    assert_eq!(read(&api, &table, 2, LockMode::Read), None);
}

/// The operations of one batch mixing writes of rows with parts (a write of a row found and
/// of one missing, an update, a delete, a missing row's update, an insert of 600 KB) with
/// plain operations and reads of the rows written: the execute reads each write's old heads
/// when it reaches it, and every operation takes effect in the order defined and reports
/// under the `OpId` it was given, also across a second execute of the transaction. Nothing is
/// sent or locked before the execute: another transaction changes a row the batch updates,
/// meanwhile, without waiting. Through the blocking API and the tokio interface alike.
#[test]
fn a_batch_of_long_value_writes_keeps_its_order_and_operation_ids() {
    let (_cluster, api) = start();
    let api: &'static Cluster = Box::leak(Box::new(api));
    let table = api.create_table(&docs_def()).expect("create");
    for base in [0, 100] {
        commit(api, |tx| {
            for r in [
                row(base + 1, Some(9_000), "a", Some(5_000)),
                row(base + 2, Some(3_000), "", None),
                row(base + 4, Some(7_000), "", Some(12_000)),
            ] {
                tx.insert(&table, &r).expect("insert");
            }
        });
    }
    // The blocking API, then the tokio interface in a spawned task.
    let mut tx = api.start_transaction().expect("start");
    let ops = define_mixed_batch(api, &mut tx, &table, 0);
    tx.execute_with(ExecType::NoCommit, AbortOption::IgnoreError)
        .expect("execute");
    let more = define_after(&mut tx, &table, 0);
    tx.execute(ExecType::Commit).expect("commit");
    check_mixed_batch(&tx, &ops, &more, 0);
    drop(tx);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let task = {
        let table = table.clone();
        async move {
            let tokio = api.tokio();
            let mut tx = tokio.start_transaction();
            let ops = define_mixed_batch(api, &mut tx, &table, 100);
            (tx.execute_with(ExecType::NoCommit, AbortOption::IgnoreError))
                .await
                .expect("execute (tokio)");
            let more = define_after(&mut tx, &table, 100);
            tx.execute(ExecType::Commit).await.expect("commit (tokio)");
            check_mixed_batch(&tx, &ops, &more, 100);
        }
    };
    (runtime.block_on(async { tokio::spawn(task).await })).expect("the task ran");
    for base in [0, 100] {
        let mut expected = [
            row(base + 1, Some(2_500), "w", Some(9_000)),
            row(base + 2, Some(12_000), "", None),
            row(base + 5, Some(4_000), "i", None),
            row(base + 8, None, "", Some(600_000)),
        ];
        expected[1][1] = Value::Varchar("other".into());
        for id in [base + 1, base + 2, base + 4, base + 5, base + 7, base + 8] {
            let found = read(api, &table, id, LockMode::Read);
            let want = expected.iter().find(|r| r[0] == Value::UInt32(id));
            assert_eq!(found.as_ref(), want, "row {id}");
        }
    }
    // Every value's parts and no others: a BLOB's of 2 000 bytes, a MEDIUMTEXT's of 4 000,
    // past a 256-byte head.
    let count = |len: usize, part: usize| (len.saturating_sub(256)).div_ceil(part) as u32;
    for (column, part, lengths) in [
        (2, 2_000, [(1, 2_500), (2, 12_000), (5, 4_000), (8, 0)]),
        (4, 4_000, [(1, 9_000), (2, 0), (5, 0), (8, 600_000)]),
    ] {
        let mut expected = Vec::new();
        for base in [0, 100] {
            for (id, len) in lengths {
                expected.extend((0..count(len, part)).map(|p| (base + id, p)));
            }
        }
        let found: Vec<(u32, u32)> = (parts(api, &table, column).into_iter())
            .map(|(id, p, _)| (id, p))
            .collect();
        assert_eq!(found, expected, "the parts of column {column}");
    }
}

/// Writes of long values defined one after another are resolved together (their reads of
/// old heads in one round trip), except where one writes a row an earlier one of the run
/// wrote: its read must see that write, or the parts only the earlier value had are left
/// behind. Rows 1-20 written twice in one batch, the second value shorter, then once more
/// in a batch of distinct rows: each row has its last value's parts and no others.
#[test]
fn writes_of_one_row_in_a_batch_each_see_the_last() {
    let (_cluster, api) = start();
    let table = api.create_table(&docs_def()).expect("create");
    commit(&api, |tx| {
        for id in 1..=20 {
            tx.insert(&table, &row(id, Some(3_000), "", None))
                .expect("insert");
        }
    });
    commit(&api, |tx| {
        for id in 1..=20 {
            tx.write(&table, &row(id, Some(12_000), "a", Some(9_000)))
                .expect("long");
            tx.write(&table, &row(id, Some(2_500), "b", None))
                .expect("shorter");
        }
    });
    // A BLOB's parts of 2 000 bytes and a MEDIUMTEXT's of 4 000, past a 256-byte head.
    let check_parts = |counts: [(usize, u32); 2]| {
        for (column, count) in counts {
            let found: Vec<(u32, u32)> = (parts(&api, &table, column).into_iter())
                .map(|(id, p, _)| (id, p))
                .collect();
            let expected: Vec<(u32, u32)> = (1..=20)
                .flat_map(|id| (0..count).map(move |p| (id, p)))
                .collect();
            assert_eq!(found, expected, "the parts of column {column}");
        }
    };
    check_parts([(2, 2), (4, 0)]);
    commit(&api, |tx| {
        for id in 1..=20 {
            tx.write(&table, &row(id, Some(4_500), "c", Some(4_500)))
                .expect("write");
        }
    });
    for id in 1..=20 {
        let found = read(&api, &table, id, LockMode::Read);
        assert_eq!(
            found,
            Some(row(id, Some(4_500), "c", Some(4_500))),
            "row {id}"
        );
    }
    check_parts([(2, 3), (4, 2)]);
}

/// As above through two handles of one table (`create_table` and `get_table` give two):
/// the second write is still a write of a row already in the run (review).
#[test]
fn writes_of_one_row_through_two_table_handles_each_see_the_last() {
    let (_cluster, api) = start();
    let table = api.create_table(&docs_def()).expect("create");
    let again = api
        .get_table("docs")
        .expect("the same table, another handle");
    commit(&api, |tx| {
        tx.insert(&table, &row(1, Some(3_000), "", None))
            .expect("insert");
    });
    commit(&api, |tx| {
        tx.write(&table, &row(1, Some(12_000), "a", None))
            .expect("long");
        tx.write(&again, &row(1, Some(2_500), "b", None))
            .expect("shorter, through the other handle");
    });
    let last = row(1, Some(2_500), "b", None);
    assert_eq!(read(&api, &table, 1, LockMode::Read), Some(last));
    let found: Vec<(u32, u32)> = (parts(&api, &table, 2).into_iter())
        .map(|(id, p, _)| (id, p))
        .collect();
    assert_eq!(
        found,
        vec![(1, 0), (1, 1)],
        "the parts of the last value only"
    );
}

/// The batch of `a_batch_of_long_value_writes_keeps_its_order_and_operation_ids`, on keys
/// past `base`; another transaction changes row `base + 2` once it is defined.
fn define_mixed_batch(
    api: &Cluster,
    tx: &mut rndb_api::Transaction<'_>,
    table: &Table,
    base: u32,
) -> Vec<rndb_api::OpId> {
    let key = |id: u32| [Value::UInt32(base + id)];
    let code = |c: &str| (1, Value::Varchar(c.into()));
    let body = |len: usize| (2, Value::Varbinary(bytes(len, (base + 2) as u8)));
    let ops = vec![
        tx.update(table, &key(1), &[code("x")])
            .expect("a plain update"),
        tx.write(table, &row(base + 1, Some(2_500), "w", Some(9_000)))
            .expect("a write of a row found"),
        tx.read(table, &key(1), LockMode::Exclusive)
            .expect("a read of the row written"),
        tx.update(table, &key(2), &[body(12_000)])
            .expect("an update"),
        tx.delete(table, &key(4)).expect("a delete"),
        tx.write(table, &row(base + 5, Some(4_000), "i", None))
            .expect("a write of a missing row"),
        tx.update(table, &key(7), &[body(5_000)])
            .expect("an update of a missing row"),
        tx.insert(table, &row(base + 8, None, "", Some(600_000)))
            .expect("an insert of 600 KB"),
        tx.read(table, &key(2), LockMode::Read)
            .expect("a read of the row updated"),
        tx.read(table, &key(4), LockMode::Read)
            .expect("a read of the row deleted"),
    ];
    // Nothing of the batch was sent: its rows are not locked.
    commit(api, |other| {
        other
            .update(table, &key(2), &[code("other")])
            .expect("another transaction's update");
    });
    ops
}

/// Defined after the first execute: a read of the row the batch wrote, and a delete of it.
fn define_after(
    tx: &mut rndb_api::Transaction<'_>,
    table: &Table,
    base: u32,
) -> Vec<rndb_api::OpId> {
    let key = [Value::UInt32(base + 5)];
    vec![
        tx.read(table, &key, LockMode::Read).expect("read"),
        tx.delete(table, &key).expect("delete"),
        tx.insert(table, &row(base + 5, Some(4_000), "i", None))
            .expect("insert"),
    ]
}

fn check_mixed_batch(
    tx: &rndb_api::Transaction<'_>,
    ops: &[rndb_api::OpId],
    more: &[rndb_api::OpId],
    base: u32,
) {
    let code = |op: rndb_api::OpId| tx.op_error(op).map(|e| e.code);
    let codes: Vec<Option<u32>> = ops.iter().map(|&op| code(op)).collect();
    let expected = [
        None,
        None,
        None,
        None,
        None,
        None,
        Some(626),
        None,
        None,
        Some(626),
    ];
    assert_eq!(codes, expected, "base {base}");
    for &op in &ops[..2] {
        assert_eq!(tx.row(op), None, "a write's OpId names no row");
    }
    let written = row(base + 1, Some(2_500), "w", Some(9_000));
    assert_eq!(tx.row(ops[2]), Some(&written[..]), "the row as written");
    let mut updated = row(base + 2, Some(3_000), "", None);
    updated[1] = Value::Varchar("other".into());
    updated[2] = Value::Varbinary(bytes(12_000, (base + 2) as u8));
    assert_eq!(tx.row(ops[8]), Some(&updated[..]), "the row as updated");
    let inserted = row(base + 5, Some(4_000), "i", None);
    assert_eq!(
        tx.row(more[0]),
        Some(&inserted[..]),
        "the row the batch inserted"
    );
    assert_eq!((code(more[1]), code(more[2])), (None, None));
}

/// Through the tokio interface, in a spawned task (so its futures are `Send`), long values
/// go as through the blocking API: inserted, read by key under every lock mode (the parts
/// read before the commit), written again under IgnoreError (a shorter value's parts left
/// behind are deleted), scanned by CommittedRead and locked scans of one row a batch; an
/// update of a missing row's BLOB fails the execute with the read's 626 and writes nothing.
#[test]
fn the_tokio_interface_reads_writes_and_scans_long_values() {
    let (_cluster, api) = start();
    let api: &'static Cluster = Box::leak(Box::new(api));
    let table = api.create_table(&docs_def()).expect("create");
    let mut rows: Vec<Vec<Value>> = (1..=3)
        .map(|id| row(id, Some(3_000 * id as usize), "n", Some(5_000)))
        .collect();
    // A row whose values its heads hold whole.
    rows.push(row(4, Some(100), "", None));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let rewritten = row(2, Some(2_500), "", Some(9_000));
    let mut expected = rows.clone();
    expected[1] = rewritten.clone();
    let task = {
        let (table, expected) = (table.clone(), expected.clone());
        async move {
            let tokio = api.tokio();
            let mut tx = tokio.start_transaction();
            for r in &rows {
                tx.insert(&table, r).expect("insert");
            }
            tx.execute(ExecType::Commit).await.expect("insert (tokio)");
            for lock in [LockMode::CommittedRead, LockMode::Read, LockMode::Exclusive] {
                let mut tx = tokio.start_transaction();
                let ops: Vec<_> = (1..=4)
                    .map(|id| tx.read(&table, &[Value::UInt32(id)], lock).expect("read"))
                    .collect();
                tx.execute(ExecType::Commit).await.expect("read (tokio)");
                for (op, r) in ops.into_iter().zip(&rows) {
                    assert_eq!(tx.row(op), Some(&r[..]), "a {lock:?} read (tokio)");
                }
            }
            let mut tx = tokio.start_transaction();
            tx.write(&table, &rewritten).expect("write");
            (tx.execute_with(ExecType::Commit, AbortOption::IgnoreError))
                .await
                .expect("write (tokio)");
            let mut tx = tokio.start_transaction();
            let body = Value::Varbinary(bytes(5_000, 9));
            tx.update(&table, &[Value::UInt32(99)], &[(2, body)])
                .expect("update");
            let e = tx
                .execute(ExecType::Commit)
                .await
                .expect_err("a missing row");
            assert_eq!(e.code(), Some(626), "{e}");
            for lock in [LockMode::CommittedRead, LockMode::Read] {
                let mut tx = tokio.start_transaction();
                let options = ScanOptions {
                    lock,
                    batch_rows: Some(1),
                    ..ScanOptions::default()
                };
                let mut scan = tx.scan_table(&table, &options).await.expect("scan");
                let mut got = Vec::new();
                while let Some(r) = scan.next_row().await {
                    got.push(r.unwrap_or_else(|e| panic!("a {lock:?} scan (tokio): {e}")));
                }
                drop(scan);
                tx.execute(ExecType::Commit).await.expect("commit");
                assert_eq!(sorted_by_key(got), expected, "a {lock:?} scan (tokio)");
            }
        }
    };
    (runtime.block_on(async { tokio::spawn(task).await })).expect("the task ran");
    assert_eq!(scan(api, &table, LockMode::Read), expected);
    // Row 2's body went from three parts (2 000 bytes each past a 256-byte head) to two, its
    // story from two (of 4 000) to three; the missing row has none.
    let count = |column, id| {
        parts(api, &table, column)
            .iter()
            .filter(|p| p.0 == id)
            .count()
    };
    assert_eq!((count(2, 2), count(4, 2)), (2, 3));
    assert_eq!((count(2, 99), count(4, 99)), (0, 0));
}

/// A scan read whole in its own transaction (one that locked rows of its table it cannot name:
/// an Exclusive scan) holds at most `OWN_PARTS_SCAN_BYTES_MAX` bytes of values: past it the
/// scan fails with 4000 naming the limit, and the transaction goes on. The rows here are heads
/// written raw that name values of 16 MiB each (no parts behind them: the scan fails before it
/// would read any).
#[test]
fn a_scan_read_whole_in_its_own_transaction_is_bounded() {
    let (_cluster, api) = start();
    let table = api.create_table(&docs_def()).expect("create");
    let mut head = 16_777_215u64.to_le_bytes().to_vec();
    head.extend([b'a'; 256]);
    let claimed = rndb_api::OWN_PARTS_SCAN_BYTES_MAX / 16_777_215 + 1;
    commit(&api, |tx| {
        for id in 0..claimed as u32 {
            let raw = vec![
                Value::UInt32(100 + id),
                Value::Varchar(String::new()),
                Value::Null,
                Value::Varbinary(0u64.to_le_bytes().to_vec()),
                Value::Varbinary(head.clone()),
            ];
            tx.insert(&table.raw(), &raw).expect("insert a raw row");
        }
    });
    let mut tx = api.start_transaction().expect("start");
    let new = row(1, Some(5_000), "", None);
    tx.insert(&table, &new).expect("insert");
    tx.execute(ExecType::NoCommit).expect("no commit");
    // An Exclusive scan (of no row here): the transaction may hold locks it cannot name.
    let none = ScanOptions {
        lock: LockMode::Exclusive,
        filter: Some(Filter::cmp(0, CmpOp::Eq, Value::UInt32(0))),
        ..ScanOptions::default()
    };
    assert_eq!(tx.scan_table(&table, &none).expect("scan").count(), 0);
    let scanned = tx.scan_table(&table, &ScanOptions::default()).map(|_| ());
    let detail = format!("{scanned:?}");
    assert_ndb_code(scanned, 4000, "a scan read whole past its bound");
    let limit = rndb_api::OWN_PARTS_SCAN_BYTES_MAX.to_string();
    assert!(detail.contains(&limit), "{detail}");
    tx.execute(ExecType::Commit)
        .expect("the transaction goes on");
    assert_eq!(read(&api, &table, 1, LockMode::Read), Some(new));
}

/// A CommittedRead by key of a row with BLOB or TEXT values, alone in a transaction its
/// execute commits, is one round trip when the values are whole in their heads (one frame
/// sent, where a locked read takes a second to commit), and a row whose values have parts is
/// read whole all the same (read again, then its parts, by a transaction of its own), through
/// the blocking API and the tokio interface; with other operations in the batch the read
/// takes the lock and the round trips it did before.
#[test]
fn a_committed_read_of_values_in_their_heads_is_one_round_trip() {
    let (_cluster, api) = start();
    let table = api.create_table(&docs_def()).expect("create");
    let short = row(1, Some(100), "n", Some(200));
    let long = row(2, Some(9_000), "", Some(20_000));
    commit(&api, |tx| {
        tx.insert(&table, &short).expect("insert");
        tx.insert(&table, &long).expect("insert");
    });
    let frames = |lock: LockMode, ids: &[u32]| {
        let before = api.link_traffic();
        let mut tx = api.start_transaction().expect("start");
        let ops: Vec<_> = (ids.iter())
            .map(|&id| tx.read(&table, &[Value::UInt32(id)], lock).expect("read"))
            .collect();
        tx.execute(ExecType::Commit).expect("commit");
        let rows: Vec<Vec<Value>> = (ops.iter())
            .map(|&op| tx.row(op).expect("a row").to_vec())
            .collect();
        (api.link_traffic().since(&before).frames_sent, rows)
    };
    assert_eq!(
        frames(LockMode::CommittedRead, &[1]),
        (1, vec![short.clone()])
    );
    assert_eq!(frames(LockMode::Read, &[1]), (2, vec![short.clone()]));
    let (sent, rows) = frames(LockMode::CommittedRead, &[2, 1]);
    assert_eq!(rows, vec![long.clone(), short.clone()]);
    assert!(
        sent > 2,
        "{sent} frames: the long row read again and its parts"
    );
    // With a write in the batch the reads are locked reads, read before the commit.
    let mut tx = api.start_transaction().expect("start");
    let newer = row(3, None, "", Some(5_000));
    tx.insert(&table, &newer).expect("insert");
    let op = (tx.read(&table, &[Value::UInt32(2)], LockMode::CommittedRead)).expect("read");
    tx.execute(ExecType::Commit).expect("commit");
    assert_eq!(tx.row(op), Some(&long[..]));
    assert_eq!(read(&api, &table, 3, LockMode::CommittedRead), Some(newer));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let mut tx = api.tokio().start_transaction();
        let ops = [1, 2].map(|id| {
            (tx.read(&table, &[Value::UInt32(id)], LockMode::CommittedRead)).expect("read")
        });
        tx.execute(ExecType::Commit).await.expect("commit (tokio)");
        assert_eq!(tx.row(ops[0]), Some(&short[..]));
        assert_eq!(tx.row(ops[1]), Some(&long[..]));
    });
}

/// A committed read in a transaction sees the parts the transaction wrote itself (what a scan
/// of rows it locked relies on), and another transaction's committed read the committed ones.
#[test]
fn a_committed_read_sees_its_own_transactions_parts() {
    let (_cluster, api) = start();
    let table = api.create_table(&docs_def()).expect("create");
    let (_, parts) = (table.blob_parts_tables().into_iter())
        .find(|(c, _)| *c == 2)
        .expect("body's parts table");
    commit(&api, |tx| {
        tx.insert(&table, &row(1, Some(5_000), "", None))
            .expect("insert");
    });
    let part = |tx: &mut rndb_api::Transaction<'_>, n: u32| {
        let key = [Value::UInt32(1), Value::UInt32(n)];
        let op = (tx.read(&parts, &key, LockMode::CommittedRead)).expect("read a part");
        tx.execute_with(ExecType::NoCommit, AbortOption::IgnoreError)
            .expect("execute");
        tx.row(op).map(|r| r[2].clone())
    };
    let new = bytes(7_000, 99);
    let mut tx = api.start_transaction().expect("start");
    let mut changed = row(1, None, "", None);
    changed[2] = Value::Varbinary(new.clone());
    tx.write(&table, &changed).expect("write");
    tx.execute(ExecType::NoCommit).expect("no commit");
    let mut other = api.start_transaction().expect("start");
    for n in 0..4u32 {
        let at = 256 + n as usize * 2_000;
        let own = Value::Varbinary(new[at..(at + 2_000).min(new.len())].to_vec());
        assert_eq!(part(&mut tx, n), Some(own), "part {n}, its own transaction");
        let committed = bytes(5_000, 1)
            .get(at..)
            .map(|b| Value::Varbinary(b[..b.len().min(2_000)].to_vec()));
        assert_eq!(
            part(&mut other, n),
            committed,
            "part {n}, another transaction"
        );
    }
}

/// A scan in a transaction that locked rows of its table exclusively without writing their
/// parts (an update of another column) completes them in the transaction: no wait for its own
/// locks. One of those rows changed by the transaction after the scan opened is refused (4264),
/// as its values were read when the scan opened.
#[test]
fn a_scan_completes_the_rows_its_transaction_locked() {
    let (_cluster, api) = start();
    let table = api.create_table(&docs_def()).expect("create");
    let committed = long_rows(&api, &table);
    let mut tx = api.start_transaction().expect("start");
    for id in 1..=3 {
        let code = Value::Varchar(format!("x{id}"));
        (tx.update(&table, &[Value::UInt32(id)], &[(1, code)])).expect("update");
    }
    tx.execute(ExecType::NoCommit).expect("no commit");
    let expected: Vec<Vec<Value>> = (committed.iter().cloned())
        .map(|mut r| {
            let Value::UInt32(id) = r[0] else {
                unreachable!()
            };
            r[1] = Value::Varchar(format!("x{id}"));
            r
        })
        .collect();
    let rows: Vec<Vec<Value>> = tx
        .scan_table(&table, &ScanOptions::default())
        .expect("scan")
        .collect::<Result<_, _>>()
        .expect("a CommittedRead scan");
    assert_eq!(sorted_by_key(rows), expected);
    // One row a batch, one fragment at a time: at most one row is read before the change.
    let one = ScanOptions {
        batch_rows: Some(1),
        parallelism: 1,
        ..ScanOptions::default()
    };
    // Each story changed behind the same head (its length and first 256 bytes kept).
    let behind_the_head = |r: &[Value]| {
        let mut r = r.to_vec();
        if let Value::Varchar(story) = &mut r[4] {
            story.replace_range(4_000.., &"z".repeat(story.len() - 4_000));
        }
        r
    };
    // A scan opened, then every row written again (behind its head), then the scan read on:
    // it refuses (4264) the rows it meets after the writes.
    let refused_after_writes =
        |tx: &mut rndb_api::Transaction<'_>, options, rows: &[Vec<Value>]| {
            let mut open = tx.scan_table(&table, options).expect("scan");
            for r in rows {
                tx.write(&table, &behind_the_head(r)).expect("write");
            }
            tx.execute(ExecType::NoCommit).expect("no commit");
            let refused = open
                .find_map(Result::err)
                .expect("a row changed after the scan opened");
            assert_eq!(refused.code(), Some(4264), "{refused}");
            drop(open);
            tx.execute(ExecType::Rollback).expect("rollback");
        };
    refused_after_writes(&mut tx, &one, &expected);
    assert_eq!(scan(&api, &table, LockMode::Read), committed);
    // A locked scan of rows the transaction locks only after it opened: refused too, where
    // another transaction would read the committed parts under the new heads.
    let mut tx = api.start_transaction().expect("start");
    let locked = ScanOptions {
        lock: LockMode::Read,
        ..one.clone()
    };
    refused_after_writes(&mut tx, &locked, &committed);
}

/// A CommittedRead through a unique index (a shared lock, as NDB's), of a row with long values
/// and of one whole in its heads, while another thread moves each between two keys of that
/// index: every row returned has the key read.
#[test]
fn a_committed_read_through_a_unique_index_returns_rows_at_its_key() {
    // The reader's locks and the writer's meet in either order (index entry, row): deadlocks
    // end after 100 ms, not the default 1.2 s.
    let spec = ClusterSpec::new()
        .data_nodes(2)
        .replicas(2)
        .deadlock_timeout_ms(100);
    let cluster = TestCluster::start(spec).expect("start the cluster");
    let api = cluster.connect().expect("connect");
    let table = api.create_table(&docs_def()).expect("create");
    let index = (api.create_index(&table, &IndexDef::unique("docs_code", &["code"])))
        .expect("create the index");
    let at = |id: u32, code: &str| {
        let mut r = if id == 1 {
            row(id, Some(5_000), "", Some(9_000))
        } else {
            row(id, Some(100), "", None)
        };
        r[1] = Value::Varchar(code.into());
        r
    };
    commit(&api, |tx| {
        tx.insert(&table, &at(1, "a")).expect("insert");
        tx.insert(&table, &at(2, "c")).expect("insert");
    });
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (mut found, mut missing) = (0, 0);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut flips = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && flips < 2_000 {
                let codes = if flips % 2 == 0 {
                    ["b", "d"]
                } else {
                    ["a", "c"]
                };
                let mut tx = api.start_transaction().expect("start");
                for (id, code) in [1, 2].into_iter().zip(codes) {
                    let set = [(1, Value::Varchar(code.into()))];
                    tx.update(&table, &[Value::UInt32(id)], &set)
                        .expect("update");
                }
                if tx.execute(ExecType::Commit).is_ok() {
                    flips += 1;
                }
            }
        });
        for round in 0..300 {
            let mut tx = api.start_transaction().expect("start");
            if round % 2 == 1 {
                // Not alone in its transaction.
                (tx.read(&table, &[Value::UInt32(7)], LockMode::CommittedRead)).expect("read");
            }
            let ops = [(1, "a"), (2, "c")].map(|(id, code)| {
                let key = [Value::Varchar(code.into())];
                let op = tx.read_unique(&index, &key, LockMode::CommittedRead);
                (id, code, op.expect("read"))
            });
            match tx.execute_with(ExecType::Commit, AbortOption::IgnoreError) {
                Ok(()) => {
                    for (id, code, op) in ops {
                        match (tx.row(op), tx.op_error(op)) {
                            (Some(r), _) => {
                                assert_eq!(r, &at(id, code)[..], "round {round}");
                                found += 1;
                            }
                            (None, Some(e)) if e.code == 626 => missing += 1,
                            other => panic!("round {round}: {other:?}"),
                        }
                    }
                }
                Err(e) if e.is_temporary() => {}
                Err(e) => panic!("round {round}: {e}"),
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert!(found > 0, "{found} rows found, {missing} missing");
}

/// The shared locks parts are read under do not pile up in the reading transaction: with
/// MaxNoOfConcurrentOperations=200, a transaction reads ten values of 30 parts each under a
/// Read lock, and one that wrote a row scans the table ten times (the rows it wrote read once,
/// then taken as they were); each answers whole, where keeping a lock record per part read
/// ran out (234) at the seventh.
#[test]
fn part_reads_do_not_use_up_the_transactions_operation_records() {
    let spec = ClusterSpec::new()
        .data_nodes(2)
        .replicas(2)
        .data_node_param("MaxNoOfConcurrentOperations", "200");
    let cluster = TestCluster::start(spec).expect("start the cluster");
    let api = cluster.connect().expect("connect");
    let table = api.create_table(&docs_def()).expect("create");
    // 60 000 bytes in BLOB parts of 2 000: 30 parts a value.
    let rows: Vec<Vec<Value>> = (1..=10).map(|id| row(id, Some(60_000), "", None)).collect();
    for r in &rows {
        commit(&api, |tx| {
            tx.insert(&table, r).expect("insert");
        });
    }
    let mut tx = api.start_transaction().expect("start");
    for r in &rows {
        let op = (tx.read(&table, &r[..1], LockMode::Read)).expect("read");
        tx.execute(ExecType::NoCommit)
            .unwrap_or_else(|e| panic!("read {:?}: {e}", r[0]));
        assert_eq!(tx.row(op), Some(&r[..]));
    }
    tx.execute(ExecType::Commit).expect("commit");
    let mut tx = api.start_transaction().expect("start");
    let new = row(11, Some(60_000), "", None);
    tx.insert(&table, &new).expect("insert");
    tx.execute(ExecType::NoCommit).expect("no commit");
    let mut expected = rows.clone();
    expected.push(new);
    for round in 0..10 {
        let options = ScanOptions {
            filter: Some(Filter::cmp(0, CmpOp::Ge, Value::UInt32(9))),
            ..ScanOptions::default()
        };
        let scanned: Vec<Vec<Value>> = tx
            .scan_table(&table, &options)
            .expect("scan")
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("scan {round}: {e}"));
        assert_eq!(sorted_by_key(scanned), expected[8..], "scan {round}");
    }
    tx.execute(ExecType::Rollback).expect("rollback");
}

/// A CommittedRead scan refuses (4264) a row with long values that its transaction may have
/// locked after it opened without naming it (an Exclusive scan of the table), where completing
/// it elsewhere would wait for that lock (266); a locked scan, which reads only parts apart,
/// goes on; an Exclusive scan refused before it was sent marks nothing. A noted row whose
/// exclusive operation failed (an update of a missing row, 626) completes as any other once
/// another transaction inserts it. A row updated through the raw handle is the transaction's:
/// reading it by key then does not wait for its own lock.
#[test]
fn a_scan_tells_apart_rows_its_transaction_may_hold() {
    let (_cluster, api) = start();
    let table = api.create_table(&docs_def()).expect("create");
    let committed = long_rows(&api, &table);
    let mut tx = api.start_transaction().expect("start");
    let one = ScanOptions {
        batch_rows: Some(1),
        parallelism: 1,
        ..ScanOptions::default()
    };
    let mut open = tx.scan_table(&table, &one).expect("scan");
    let read_locked = ScanOptions {
        lock: LockMode::Read,
        ..one.clone()
    };
    let mut open_locked = tx.scan_table(&table, &read_locked).expect("scan");
    let refused_before_sent = ScanOptions {
        lock: LockMode::Exclusive,
        batch_rows: Some(0),
        ..ScanOptions::default()
    };
    assert!(tx.scan_table(&table, &refused_before_sent).is_err());
    let first = open
        .next()
        .expect("a row")
        .expect("not refused: nothing was locked");
    assert!(committed.contains(&first));
    let exclusive = ScanOptions {
        lock: LockMode::Exclusive,
        ..ScanOptions::default()
    };
    let locked: Vec<Vec<Value>> = tx
        .scan_table(&table, &exclusive)
        .expect("scan")
        .collect::<Result<_, _>>()
        .expect("an Exclusive scan");
    assert_eq!(sorted_by_key(locked), committed);
    let refused = open
        .find_map(Result::err)
        .expect("a row the Exclusive scan locked");
    assert_eq!(refused.code(), Some(4264), "{refused}");
    drop(open);
    let rows: Vec<Vec<Value>> = (open_locked.by_ref())
        .collect::<Result<_, _>>()
        .expect("a locked scan goes on");
    assert_eq!(sorted_by_key(rows), committed);
    drop(open_locked);
    tx.execute(ExecType::Rollback).expect("rollback");

    let mut tx = api.start_transaction().expect("start");
    let body = Value::Varbinary(bytes(5_000, 3));
    (tx.update(&table, &[Value::UInt32(9)], &[(2, body)])).expect("update");
    let failed = tx.execute_with(ExecType::NoCommit, AbortOption::IgnoreError);
    failed.expect("an execute that ignores the error");
    let scan_all = |tx: &mut rndb_api::Transaction<'_>| -> Vec<Vec<Value>> {
        let rows = (tx.scan_table(&table, &ScanOptions::default()))
            .expect("scan")
            .collect::<Result<_, _>>()
            .expect("a scan meeting a row its failed update named");
        sorted_by_key(rows)
    };
    // The first scan reads row 9 missing; the second meets it, inserted since.
    assert_eq!(scan_all(&mut tx), committed);
    let later = row(9, Some(7_000), "", None);
    commit(&api, |other| {
        other.insert(&table, &later).expect("insert");
    });
    let mut expected = committed.clone();
    expected.push(later);
    assert_eq!(scan_all(&mut tx), expected);
    tx.execute(ExecType::Rollback).expect("rollback");

    let mut tx = api.start_transaction().expect("start");
    let code = [(1, Value::Varchar("raw".into()))];
    (tx.update(&table.raw(), &[Value::UInt32(1)], &code)).expect("update");
    tx.execute(ExecType::NoCommit).expect("no commit");
    let op = (tx.read(&table, &[Value::UInt32(1)], LockMode::Read)).expect("read");
    tx.execute(ExecType::NoCommit)
        .expect("a read of its own row");
    let mut own = committed[0].clone();
    own[1] = Value::Varchar("raw".into());
    assert_eq!(tx.row(op), Some(&own[..]));
    tx.execute(ExecType::Rollback).expect("rollback");
}

/// A NaN is itself when a scan compares rows: a CommittedRead ordered-index scan over a
/// DOUBLE returns a NaN row with long values (read again to complete them), and a scan in the
/// transaction that wrote such a row hands it out whole.
#[test]
fn rows_holding_a_nan_are_completed_like_any_other() {
    let (_cluster, api) = start();
    let def = TableDef::new(
        "nans",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("x", ColumnType::Float64),
            ColumnDef::nullable("body", ColumnType::Blob(BlobSize::Blob)),
        ],
    );
    let table = api.create_table(&def).expect("create");
    let index =
        (api.create_index(&table, &IndexDef::ordered("nans_x", &["x"]))).expect("create the index");
    let nan = |id: u32, len: usize| {
        vec![
            Value::UInt32(id),
            Value::Float64(f64::NAN),
            Value::Varbinary(bytes(len, id as u8)),
        ]
    };
    commit(&api, |tx| {
        tx.insert(&table, &nan(1, 5_000)).expect("insert");
    });
    let same = |a: &[Vec<Value>], b: &[Vec<Value>]| format!("{a:?}") == format!("{b:?}");
    let mut tx = api.start_transaction().expect("start");
    let rows: Vec<Vec<Value>> = tx
        .scan_index(&index, &ScanOptions::default())
        .expect("scan")
        .collect::<Result<_, _>>()
        .expect("an index scan");
    assert!(same(&rows, &[nan(1, 5_000)]), "{rows:?}");
    tx.insert(&table, &nan(2, 6_000)).expect("insert");
    tx.execute(ExecType::NoCommit).expect("no commit");
    let rows: Vec<Vec<Value>> = tx
        .scan_table(&table, &ScanOptions::default())
        .expect("scan")
        .collect::<Result<_, _>>()
        .expect("a scan of its own NaN row");
    assert!(same(&sorted_by_key(rows), &[nan(1, 5_000), nan(2, 6_000)]));
    tx.execute(ExecType::Rollback).expect("rollback");
}

/// A scan opened after a write or update of a row with parts that was defined but not executed
/// sees the row as written: the write is resolved and sent before the scan takes note of the
/// rows its transaction locked.
#[test]
fn a_scan_after_an_unexecuted_long_write_sees_it() {
    let (_cluster, api) = start();
    let table = api.create_table(&docs_def()).expect("create");
    let committed = long_rows(&api, &table);
    let mut failures = Vec::new();
    for (what, lock) in [
        ("write", LockMode::CommittedRead),
        ("write", LockMode::Read),
        ("update", LockMode::CommittedRead),
    ] {
        let mut tx = api.start_transaction().expect("start");
        let new = row(2, Some(4_500), "", Some(300));
        if what == "write" {
            tx.write(&table, &new).expect("write");
        } else {
            let set: Vec<(usize, Value)> = (1..5).map(|c| (c, new[c].clone())).collect();
            tx.update(&table, &[Value::UInt32(2)], &set)
                .expect("update");
        }
        let options = ScanOptions {
            lock,
            ..ScanOptions::default()
        };
        let rows: Result<Vec<Vec<Value>>, _> =
            tx.scan_table(&table, &options).expect("scan").collect();
        let mut expected = committed.clone();
        expected[1] = new;
        match rows {
            Ok(rows) if sorted_by_key(rows.clone()) == expected => {}
            other => failures.push(format!("{what} {lock:?}: {:?}", other.map(|r| r.len()))),
        }
        tx.execute(ExecType::Rollback).expect("rollback");
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A CommittedRead of a row with parts, then two writes of rows with parts, one execute: the
/// read is completed while the second write still waits, and returns the committed row.
#[test]
fn a_committed_read_before_two_long_writes_reads_the_committed_row() {
    let (_cluster, api) = start();
    let table = api.create_table(&docs_def()).expect("create");
    let committed = long_rows(&api, &table);
    let mut tx = api.start_transaction().expect("start");
    let r = tx
        .read(&table, &[Value::UInt32(1)], LockMode::CommittedRead)
        .expect("read");
    tx.write(&table, &row(1, Some(3_000), "", None))
        .expect("write 1");
    tx.write(&table, &row(2, Some(3_000), "", None))
        .expect("write 2");
    tx.execute(ExecType::Commit).expect("commit");
    assert_eq!(tx.row(r), Some(&committed[0][..]));
}

/// A tokio execute dropped while its first round trip (up to a write's read of old heads) is
/// on its way, then the transaction executed again: 4114, as after any dropped execute.
#[test]
fn an_execute_dropped_while_its_writes_resolve_finishes_the_transaction() {
    use std::future::Future;
    let (_cluster, api) = start();
    let table = api.create_table(&docs_def()).expect("create");
    long_rows(&api, &table);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let tokio = api.tokio();
        let mut tx = tokio.start_transaction();
        let code = |c: &str| [(1, Value::Varchar(c.into()))];
        tx.write(&table, &row(1, Some(3_000), "", None))
            .expect("w1");
        tx.update(&table, &[Value::UInt32(3)], &code("a"))
            .expect("plain");
        tx.write(&table, &row(2, Some(3_000), "", None))
            .expect("w2");
        tx.update(&table, &[Value::UInt32(3)], &code("b"))
            .expect("plain");
        {
            let mut fut = Box::pin(tx.execute(ExecType::Commit));
            let polled =
                std::future::poll_fn(|cx| std::task::Poll::Ready(fut.as_mut().poll(cx))).await;
            assert!(polled.is_pending(), "dropped mid-way");
        }
        let again = tx.execute(ExecType::Commit).await;
        assert_eq!(again.err().and_then(|e| e.code()), Some(4114));
    });
}

/// The first round trip of a split execute fails while the transaction stays open (a
/// CommittedRead whose parts cannot be read: another transaction holds the row): the
/// transaction is rolled back, so that no later execute commits without the operations
/// defined after the write, which were never sent (4114).
#[test]
fn a_failed_round_trip_of_a_split_execute_rolls_the_transaction_back() {
    let spec = ClusterSpec::new()
        .data_nodes(2)
        .replicas(2)
        .deadlock_timeout_ms(100);
    let cluster = TestCluster::start(spec).expect("start the cluster");
    let api = cluster.connect().expect("connect");
    let table = api.create_table(&docs_def()).expect("create");
    let committed = long_rows(&api, &table);
    let mut holder = api.start_transaction().expect("start");
    holder
        .update(
            &table,
            &[Value::UInt32(1)],
            &[(1, Value::Varchar("held".into()))],
        )
        .expect("update");
    holder.execute(ExecType::NoCommit).expect("hold row 1");
    let mut tx = api.start_transaction().expect("start");
    tx.read(&table, &[Value::UInt32(1)], LockMode::CommittedRead)
        .expect("read");
    tx.write(&table, &row(2, Some(3_000), "", None))
        .expect("write");
    let insert = tx
        .insert(&table, &row(5, Some(100), "", None))
        .expect("insert");
    let first = tx.execute(ExecType::Commit);
    assert!(first.is_err(), "{first:?}");
    drop(holder);
    let second = tx.execute(ExecType::Commit);
    assert_eq!(second.err().and_then(|e| e.code()), Some(4114));
    assert_eq!(tx.op_error(insert), None, "never sent");
    drop(tx);
    assert_eq!(read(&api, &table, 5, LockMode::Read), None);
    assert_eq!(
        read(&api, &table, 2, LockMode::Read),
        Some(committed[1].clone())
    );
}

/// Unique-index operations (TCINDXREQ) before, between and after writes of rows with parts
/// take effect in order and report under their own `OpId`s.
#[test]
fn unique_index_operations_around_long_value_writes_keep_their_order() {
    let (_cluster, api) = start();
    let table = api.create_table(&docs_def()).expect("create");
    let index = (api.create_index(&table, &IndexDef::unique("docs_code", &["code"])))
        .expect("create the index");
    let committed = long_rows(&api, &table);
    let code = |c: &str| Value::Varchar(c.into());
    let mut tx = api.start_transaction().expect("start");
    let u1 = tx
        .update_unique(&index, &[code("c1")], &[(1, code("x1"))])
        .expect("u1");
    let w2 = tx
        .write(&table, &row(2, Some(3_000), "w", None))
        .expect("w2");
    let r1 = tx
        .read_unique(&index, &[code("x1")], LockMode::Read)
        .expect("r1");
    let w3 = tx
        .update(&table, &[Value::UInt32(3)], &[(4, Value::Null)])
        .expect("w3");
    let r3 = tx
        .read_unique(&index, &[code("c3")], LockMode::Read)
        .expect("r3");
    let u3 = tx
        .update_unique(&index, &[code("c3")], &[(1, code("x3"))])
        .expect("u3");
    let r2 = tx
        .read_unique(&index, &[code("c2")], LockMode::Read)
        .expect("r2");
    tx.execute(ExecType::Commit).expect("commit");
    for op in [u1, w2, r1, w3, r3, u3, r2] {
        assert_eq!(tx.op_error(op), None);
    }
    let mut one = committed[0].clone();
    one[1] = code("x1");
    assert_eq!(tx.row(r1), Some(&one[..]));
    let mut three = committed[2].clone();
    three[4] = Value::Null;
    assert_eq!(tx.row(r3), Some(&three[..]));
    assert_eq!(tx.row(r2), Some(&row(2, Some(3_000), "w", None)[..]));
    drop(tx);
    three[1] = code("x3");
    assert_eq!(read(&api, &table, 3, LockMode::Read), Some(three));
    assert_eq!(read(&api, &table, 1, LockMode::Read), Some(one));
}

/// A write's resolution rolls the transaction back (an insert of 600 KB whose key exists,
/// under IgnoreError) with another write still pending: a later execute gets 4114.
#[test]
fn an_execute_after_a_resolution_rolled_back_gets_4114() {
    let (_cluster, api) = start();
    let table = api.create_table(&docs_def()).expect("create");
    long_rows(&api, &table);
    let mut tx = api.start_transaction().expect("start");
    let plain = [(1, Value::Varchar("p".into()))];
    tx.insert(&table, &row(1, None, "", Some(600_000)))
        .expect("insert");
    tx.update(&table, &[Value::UInt32(3)], &plain)
        .expect("plain");
    tx.write(&table, &row(2, Some(3_000), "", None))
        .expect("write");
    tx.update(&table, &[Value::UInt32(3)], &plain)
        .expect("plain");
    let first = tx.execute_with(ExecType::Commit, AbortOption::IgnoreError);
    assert_eq!(first.err().and_then(|e| e.code()), Some(630));
    let again = tx.execute(ExecType::Commit);
    assert_eq!(again.err().and_then(|e| e.code()), Some(4114));
}
