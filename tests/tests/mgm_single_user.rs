//! Proves NDB's single user mode through ndb_mgm: `ENTER SINGLE USER MODE 50` lets API node 50
//! alone use the database (API node 51's open transaction is aborted, and its new transactions,
//! scans and schema changes are refused with 299), `ALL STATUS` and `SHOW` say so, a data node
//! started again meanwhile enters the mode too, only an API node can be named, and
//! `EXIT SINGLE USER MODE` lets every API node in again.

use std::time::Duration;

use rndb_api::{
    Cluster, ColumnDef, ColumnType, ConnectOptions, ExecType, ScanOptions, TableDef, Value,
};
use rndb_tests::ops::{insert_committed, read_committed, recreate_table};
use rndb_tests::processes::{run, start_mgmd, text, Processes};
use rndb_tests::{assert_ndb_code, wait_until};

/// How long a start may take (two data nodes in debug builds on a shared 2-core machine).
const START_TIMEOUT: Duration = Duration::from_secs(90);
const VERSION: &str = concat!("rndb-", env!("CARGO_PKG_VERSION"));

fn mgm(cs: &str, command: &str) -> (bool, String, String) {
    let out = run("ndb_mgm", &["-c", cs, "-e", command]);
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

fn wait_for_status(cs: &str, want: &str) {
    wait_until(
        &format!("ALL STATUS to read {want:?}"),
        START_TIMEOUT,
        || Ok((mgm(cs, "ALL STATUS").1 == want).then_some(())),
    )
    .unwrap_or_else(|e| panic!("{e}; last: {}", mgm(cs, "ALL STATUS").1));
}

fn row(id: u32) -> Vec<Value> {
    vec![Value::UInt32(id), Value::Int64(i64::from(id))]
}

#[test]
fn single_user_mode_lets_one_api_node_in_and_refuses_the_others_with_299() {
    let mut procs = Processes::new();
    let cs = start_mgmd(&mut procs, "", 2);
    procs.spawn("ndbd-1", "ndbd", &["-c", &cs, "--ndb-nodeid", "1"]);
    procs.spawn("ndbd-2", "ndbd", &["-c", &cs, "--ndb-nodeid", "2"]);
    wait_for_status(
        &cs,
        &format!("Node 1: started ({VERSION})\nNode 2: started ({VERSION})\n"),
    );
    let connect = || Cluster::connect_mgm(&cs, ConnectOptions::default()).expect("connect");
    let (alone, other) = (connect(), connect());
    assert_eq!((alone.node_id().0, other.node_id().0), (50, 51));
    let def = TableDef::new(
        "t",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("v", ColumnType::Int64),
        ],
    );
    let table = recreate_table(&alone, &def).expect("create the table");
    insert_committed(&alone, &table, &[row(1)]).expect("insert");
    let other_table = other.get_table("t").expect("API node 51 sees the table");
    // API node 51 holds a transaction open across the change of mode.
    let mut open = other.start_transaction().expect("start");
    open.insert(&other_table, &row(2)).expect("define");
    open.execute(ExecType::NoCommit).expect("before the mode");

    let (ok, out, err) = mgm(&cs, "ENTER SINGLE USER MODE 50");
    assert!(ok, "{err}");
    assert_eq!(
        out,
        "Single user mode entered\nAccess is granted for API node 50 only.\n"
    );
    let single =
        format!("Node 1: single user mode ({VERSION})\nNode 2: single user mode ({VERSION})\n");
    assert_eq!(mgm(&cs, "ALL STATUS").1, single);
    let shown = mgm(&cs, "SHOW").1;
    for line in [
        format!("id=1\t@127.0.0.1  ({VERSION}, single user mode, Nodegroup: 0, *)"),
        format!("id=50\t@127.0.0.1  ({VERSION}, allowed single user)"),
        format!("id=51\t@127.0.0.1  ({VERSION})"),
    ] {
        assert!(shown.contains(&line), "SHOW lacks {line:?}:\n{shown}");
    }

    // The other API node: its open transaction was aborted, nothing new is let in.
    let aborted = open
        .execute(ExecType::Commit)
        .expect_err("aborted by the mode");
    assert_eq!(aborted.code(), Some(299), "{aborted}");
    assert!(
        aborted.to_string().contains("only API node 50"),
        "{aborted}"
    );
    drop(open);
    assert_ndb_code(
        read_committed(&other, &other_table, &[Value::UInt32(1)]),
        299,
        "a read of API node 51",
    );
    let scanned = other
        .start_transaction()
        .and_then(|mut tx| {
            tx.scan_table(&other_table, &ScanOptions::default())?
                .collect::<Result<Vec<_>, _>>()
        })
        .map(|rows| rows.len());
    assert_ndb_code(scanned, 299, "a scan of API node 51");
    let other_def = TableDef::new("u", def.columns.clone());
    assert_ndb_code(
        other.create_table(&other_def).map(|_| ()),
        299,
        "a CREATE TABLE of API node 51",
    );
    // API node 50 goes on; API node 51's insert was rolled back.
    insert_committed(&alone, &table, &[row(3)]).expect("API node 50 writes");
    assert_ndb_code(
        read_committed(&alone, &table, &[Value::UInt32(2)]),
        626,
        "the aborted insert",
    );

    // Only an API node can be named.
    let (ok, _, err) = mgm(&cs, "ENTER SINGLE USER MODE 2");
    assert!(!ok);
    assert!(err.contains("Node 2 is not an API node"), "{err}");

    // A data node started again meanwhile enters the mode as it starts.
    let (ok, _, err) = mgm(&cs, "2 STOP");
    assert!(ok, "{err}");
    assert!(procs.wait_exit("ndbd-2", Duration::from_secs(30)).success());
    procs.spawn("ndbd-2-again", "ndbd", &["-c", &cs, "--ndb-nodeid", "2"]);
    wait_for_status(&cs, &single);

    let (ok, out, err) = mgm(&cs, "EXIT SINGLE USER MODE");
    assert!(ok, "{err}");
    assert_eq!(
        out,
        "Exiting single user mode in progress.\n\
         Use ALL STATUS or SHOW to see when single user mode has been exited.\n"
    );
    wait_for_status(
        &cs,
        &format!("Node 1: started ({VERSION})\nNode 2: started ({VERSION})\n"),
    );
    let rows = wait_until("API node 51 to read again", Duration::from_secs(30), || {
        Ok(read_committed(&other, &other_table, &[Value::UInt32(3)]).ok())
    })
    .expect("API node 51 is let in again");
    assert_eq!(rows, row(3));
}
