//! Proves that four data nodes with NoOfReplicas=2 form one cluster: rows spread over every node
//! and both node groups, every commit (single- or multi-node, one batch or a bank workload of
//! concurrent transfers, also with all four execution threads on one CPU or with each data node
//! on a host of its own) leaves equal rows on the primary and the backup while rollbacks leave
//! nothing on either, lock waits across nodes end in 266, tables and indexes created or dropped
//! through one node are seen by every node and every API node, and the cluster survives a data
//! node's death (killed, or stopped and found by missed heartbeats) without losing or
//! half-applying a committed transaction.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rndb_api::{
    AbortOption, Cluster, ConnectOptions, Error, ExecType, IndexDef, LockMode, NodeId, ScanOptions,
    Table, Value,
};
use rndb_config::ClusterConfig;
use rndb_protocol::ErrorClass;
use rndb_tests::bank::{accounts_def, balance, key, row, transfer};
use rndb_tests::ops::{insert_committed, recreate_table};
use rndb_tests::{assert_ndb_code, ClusterSpec, Hosts, TestCluster, START_TIMEOUT};

/// Data nodes in every cluster of this file: two node groups of two.
const DATA_NODE_COUNT: u16 = 4;
/// NoOfReplicas: a primary and one backup per partition.
const REPLICA_COUNT: u32 = 2;
/// API slots: enough for the two API nodes some tests connect, with room to spare.
const API_SLOT_COUNT: u16 = 4;
/// The replica index of the primary and of the backup, for `read_from_replica`.
const PRIMARY: usize = 0;
const BACKUP: usize = 1;
/// How far `keys_by_primary` looks for keys before it gives up: with four nodes and a hash
/// partitioning, a few hundred ids are plenty.
const KEY_SEARCH_MAX: u32 = 100_000;

/// Accounts in the bank test, and what each holds at the start.
const ACCOUNT_COUNT: u32 = 100;
const OPENING_BALANCE: i64 = 1000;
/// Client threads making transfers, each on the one shared API node.
const TRANSFER_THREAD_COUNT: u64 = 8;
/// How long the transfer threads and the scanner run at least.
const BANK_RUN: Duration = Duration::from_secs(3);
/// The run goes on past `BANK_RUN` until the scanner has completed a locking scan (each one
/// may lose a deadlock against the transfers and retry), at most this much longer.
const BANK_RUN_EXTRA_MAX: Duration = Duration::from_secs(20);
/// The largest amount one transfer moves.
const TRANSFER_AMOUNT_MAX: u64 = 100;
/// Lock waits in the bank test: short, so the rare deadlock between two transfers (or a transfer
/// and the locking scan) costs little, and long enough that ordinary waits succeed.
const BANK_DEADLOCK_TIMEOUT_MS: u32 = 100;
/// Lock waits in the lock test: short, so 266 comes quickly.
const SHORT_DEADLOCK_TIMEOUT_MS: u32 = 200;
/// How long a request of this file may wait for its answer: far above every lock wait, so a
/// lock wait that never ends or an answer that never comes fails a test with 4012 within
/// seconds rather than the default minute.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The spec every test starts from: four data nodes in two node groups of two.
fn spec() -> ClusterSpec {
    ClusterSpec::new()
        .data_nodes(DATA_NODE_COUNT)
        .replicas(REPLICA_COUNT)
        .api_slots(API_SLOT_COUNT)
}

/// Connects an API node that gives up on a request after [`REQUEST_TIMEOUT`]. It waits up to
/// [`START_TIMEOUT`] for the data nodes to have connected to each other (the cluster to have
/// started), as four nodes starting at once may take longer than one.
#[track_caller]
fn connect(cluster: &TestCluster) -> Cluster {
    cluster
        .connect_with(ConnectOptions {
            request_timeout: REQUEST_TIMEOUT,
            connect_timeout: START_TIMEOUT,
            ..ConnectOptions::default()
        })
        .expect("connect an API node")
}

/// Starts the cluster of `spec`, connects one API node and creates `accounts`.
fn start(spec: ClusterSpec) -> (TestCluster, Cluster, Table) {
    let cluster = TestCluster::start(spec).expect("start four data nodes");
    let api = connect(&cluster);
    let table = recreate_table(&api, &accounts_def("accounts")).expect("create accounts");
    (cluster, api, table)
}

/// The node group of data node `node`, as the config forms them.
#[track_caller]
fn group_of(config: &ClusterConfig, node: NodeId) -> u32 {
    config
        .node_groups
        .iter()
        .find(|group| group.nodes.contains(&node))
        .unwrap_or_else(|| panic!("data node {node} is in no node group"))
        .id
}

/// The replicas of the row with id `id`, primary first, checked to be a primary and a backup
/// on two different nodes of one node group.
#[track_caller]
fn replicas(api: &Cluster, table: &Table, id: u32) -> Vec<NodeId> {
    let nodes = api.replicas_of(table, &key(id)).expect("replicas_of");
    assert_eq!(
        nodes.len(),
        REPLICA_COUNT as usize,
        "key {id} has replicas {nodes:?}"
    );
    assert_ne!(nodes[0], nodes[1], "key {id}: primary and backup coincide");
    assert_eq!(
        group_of(api.config(), nodes[0]),
        group_of(api.config(), nodes[1]),
        "key {id}: primary and backup {nodes:?} are in one node group"
    );
    nodes
}

/// The primary replica's node of the row with id `id`.
#[track_caller]
fn primary(api: &Cluster, table: &Table, id: u32) -> NodeId {
    replicas(api, table, id)[0]
}

/// `per_node` ids for each data node whose primary replica is that node, the smallest ids
/// first. Panics if some node is the primary of no key in the first [`KEY_SEARCH_MAX`] ids.
#[track_caller]
fn keys_by_primary(api: &Cluster, table: &Table, per_node: usize) -> BTreeMap<NodeId, Vec<u32>> {
    let mut keys: BTreeMap<NodeId, Vec<u32>> = api
        .config()
        .data_nodes
        .iter()
        .map(|node| (node.node_id, Vec::new()))
        .collect();
    for id in 0..KEY_SEARCH_MAX {
        if keys.values().all(|ids| ids.len() >= per_node) {
            return keys;
        }
        let ids = keys
            .get_mut(&primary(api, table, id))
            .expect("the primary is a data node of the config");
        if ids.len() < per_node {
            ids.push(id);
        }
    }
    panic!("no {per_node} keys for every primary in ids below {KEY_SEARCH_MAX}: {keys:?}");
}

/// The id of an `accounts` row.
#[track_caller]
fn id_of(row: &[Value]) -> u32 {
    match row {
        [Value::UInt32(id), _] => *id,
        other => panic!("an accounts row starts with a UInt32, got {other:?}"),
    }
}

/// Reads the rows with `ids` from replica `replica` in one transaction (CommittedReads, each
/// served by the node holding that replica): `Some(row)`, or `None` where the replica has no
/// such row (626). A read refused with a temporary error (1204 while a restarted node takes
/// its primaries back) is read again, for up to 10 s; any other error fails the test.
#[track_caller]
fn replica_rows(
    api: &Cluster,
    table: &Table,
    ids: &[u32],
    replica: usize,
) -> Vec<Option<Vec<Value>>> {
    rndb_tests::wait_until(
        &format!("replica {replica} reads without a temporary error"),
        Duration::from_secs(10),
        || Ok(replica_rows_once(api, table, ids, replica).ok()),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// One try of [`replica_rows`]: `Err` with the first temporary error.
fn replica_rows_once(
    api: &Cluster,
    table: &Table,
    ids: &[u32],
    replica: usize,
) -> Result<Vec<Option<Vec<Value>>>, String> {
    let mut transaction = api.start_transaction().expect("start");
    let ops: Vec<_> = ids
        .iter()
        .map(|&id| {
            transaction
                .read_from_replica(table, &key(id), replica)
                .expect("define a replica read")
        })
        .collect();
    transaction
        .execute_with(ExecType::Commit, AbortOption::IgnoreError)
        .unwrap_or_else(|e| panic!("read {} rows from replica {replica}: {e}", ids.len()));
    if let Some(e) = ops
        .iter()
        .filter_map(|&op| transaction.op_error(op))
        .find(|e| e.is_temporary())
    {
        return Err(e.to_string());
    }
    Ok(ids
        .iter()
        .zip(ops)
        .map(|(id, op)| match transaction.op_error(op) {
            None => Some(
                transaction
                    .row(op)
                    .unwrap_or_else(|| panic!("replica {replica} read of {id} has no row"))
                    .to_vec(),
            ),
            Some(e) if e.code == 626 => None,
            Some(e) => panic!("read key {id} from replica {replica}: {e}"),
        })
        .collect())
}

/// Asserts that both replicas of every id in `ids` hold exactly `expected(id)` (`None`: no
/// row on either).
#[track_caller]
fn assert_replicas_hold(
    api: &Cluster,
    table: &Table,
    ids: &[u32],
    expected: impl Fn(u32) -> Option<Vec<Value>>,
    what: &str,
) {
    let primaries = replica_rows(api, table, ids, PRIMARY);
    let backups = replica_rows(api, table, ids, BACKUP);
    for ((&id, on_primary), on_backup) in ids.iter().zip(primaries).zip(backups) {
        let nodes = replicas(api, table, id);
        let want = expected(id);
        assert_eq!(
            on_primary, want,
            "{what}: key {id} on its primary, node {}",
            nodes[0]
        );
        assert_eq!(
            on_backup, want,
            "{what}: key {id} on its backup, node {}",
            nodes[1]
        );
    }
}

/// Runs a full-table scan in a transaction of its own and returns (sum of balances, rows).
fn scan_total(api: &Cluster, table: &Table, lock: LockMode) -> Result<(i64, usize), Error> {
    let mut transaction = api.start_transaction()?;
    let options = ScanOptions {
        lock,
        ..ScanOptions::default()
    };
    let mut total = 0;
    let mut count = 0;
    for row in transaction.scan_table(table, &options)? {
        total += balance(&row?);
        count += 1;
    }
    // Ending the transaction releases the shared locks of a locking scan.
    transaction.execute(ExecType::Commit)?;
    Ok((total, count))
}

#[test]
fn rows_spread_over_every_node_and_both_node_groups() {
    let (cluster, api, table) = start(spec());
    let config = api.config();
    assert_eq!(config.node_groups.len(), 2, "four nodes, two replicas");
    for group in &config.node_groups {
        assert_eq!(group.nodes.len(), 2, "node group {}", group.id);
    }
    let grouped: BTreeSet<NodeId> = config
        .node_groups
        .iter()
        .flat_map(|g| g.nodes.iter().copied())
        .collect();
    let all_nodes: BTreeSet<NodeId> = cluster.data_node_ids().into_iter().collect();
    assert_eq!(grouped, all_nodes, "every data node is in one node group");

    let ids: Vec<u32> = (0..200).collect();
    let rows: Vec<_> = ids.iter().map(|&id| row(id, i64::from(id) * 3)).collect();
    insert_committed(&api, &table, &rows).expect("insert 200 rows");

    let mut primaries = BTreeMap::<NodeId, usize>::new();
    let mut groups = BTreeSet::new();
    for &id in &ids {
        let nodes = replicas(&api, &table, id);
        *primaries.entry(nodes[0]).or_default() += 1;
        groups.insert(group_of(config, nodes[0]));
    }
    let primary_nodes: BTreeSet<NodeId> = primaries.keys().copied().collect();
    assert_eq!(
        primary_nodes, all_nodes,
        "every node is the primary of some of 200 rows: {primaries:?}"
    );
    let all_groups: BTreeSet<u32> = config.node_groups.iter().map(|g| g.id).collect();
    assert_eq!(groups, all_groups, "rows land in both node groups");

    // A scan covers every partition on every node: each row exactly once, whichever node's TC
    // runs it (a transaction's first key operation places its TC on that key's primary).
    let mut scanned = scan_rows(&api, &table, None);
    scanned.sort_by_key(|r| id_of(r));
    assert_eq!(scanned, rows, "a scan returns every row once");
    for (node, ids) in keys_by_primary(&api, &table, 1) {
        let mut scanned = scan_rows(&api, &table, Some(ids[0]));
        scanned.sort_by_key(|r| id_of(r));
        assert_eq!(
            scanned, rows,
            "a scan in a transaction started on node {node}"
        );
    }
}

/// Scans the whole table with CommittedRead in one transaction, which first reads the row
/// with id `first_read` (placing the transaction's TC on that row's primary) when given.
fn scan_rows(api: &Cluster, table: &Table, first_read: Option<u32>) -> Vec<Vec<Value>> {
    let mut transaction = api.start_transaction().expect("start");
    if let Some(id) = first_read {
        transaction
            .read(table, &key(id), LockMode::CommittedRead)
            .expect("define");
        transaction
            .execute(ExecType::NoCommit)
            .unwrap_or_else(|e| panic!("read {id} before the scan: {e}"));
    }
    let rows = transaction
        .scan_table(table, &ScanOptions::default())
        .unwrap_or_else(|e| panic!("start a scan after reading {first_read:?}: {e}"))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("scan after reading {first_read:?}: {e}"));
    transaction.execute(ExecType::Commit).expect("commit");
    rows
}

#[test]
fn committed_rows_read_the_same_from_primary_and_backup() {
    let (_cluster, api, table) = start(spec());
    let ids: Vec<u32> = (0..120).collect();
    let rows: Vec<_> = ids.iter().map(|&id| row(id, i64::from(id) + 7)).collect();
    insert_committed(&api, &table, &rows).expect("insert");
    assert_replicas_hold(
        &api,
        &table,
        &ids,
        |id| Some(row(id, i64::from(id) + 7)),
        "after the insert",
    );

    // Updates and deletes reach the backup too: update every second row, delete every third.
    let mut transaction = api.start_transaction().expect("start");
    for &id in &ids {
        if id % 3 == 0 {
            transaction.delete(&table, &key(id)).expect("define");
        } else if id % 2 == 0 {
            transaction
                .update(&table, &key(id), &[(1, Value::Int64(-i64::from(id)))])
                .expect("define");
        }
    }
    transaction
        .execute(ExecType::Commit)
        .expect("update and delete");
    assert_replicas_hold(
        &api,
        &table,
        &ids,
        |id| match (id % 3, id % 2) {
            (0, _) => None,
            (_, 0) => Some(row(id, -i64::from(id))),
            _ => Some(row(id, i64::from(id) + 7)),
        },
        "after updates and deletes",
    );

    let mut transaction = api.start_transaction().expect("start");
    assert_ndb_code(
        transaction.read_from_replica(&table, &key(1), REPLICA_COUNT as usize),
        4116,
        "read from a replica beyond NoOfReplicas",
    );
}

#[test]
fn a_rollback_leaves_nothing_on_either_replica() {
    let (_cluster, api, table) = start(spec());
    let by_node = keys_by_primary(&api, &table, 12);
    let ids: Vec<u32> = by_node.values().flatten().copied().collect();
    // The first six ids on each node exist before; the others are new in each transaction.
    let existing: Vec<u32> = by_node.values().flat_map(|v| &v[..6]).copied().collect();
    let fresh: Vec<u32> = by_node.values().flat_map(|v| &v[6..]).copied().collect();
    let rows: Vec<_> = existing.iter().map(|&id| row(id, 500)).collect();
    insert_committed(&api, &table, &rows).expect("insert the existing rows");
    let untouched = |id: u32| existing.contains(&id).then(|| row(id, 500));

    // An explicit rollback after NoCommit inserts, updates and deletes on every node.
    let mut transaction = api.start_transaction().expect("start");
    for &id in &fresh {
        transaction.insert(&table, &row(id, 1)).expect("define");
    }
    for &id in &existing {
        if id % 2 == 0 {
            transaction.delete(&table, &key(id)).expect("define");
        } else {
            transaction
                .update(&table, &key(id), &[(1, Value::Int64(0))])
                .expect("define");
        }
    }
    transaction
        .execute(ExecType::NoCommit)
        .expect("change without commit");
    transaction.execute(ExecType::Rollback).expect("roll back");
    assert_replicas_hold(&api, &table, &ids, untouched, "after a rollback");

    // An execute that fails with AbortOnError: new rows on every node, and in the middle of the
    // batch an insert of an existing key (630).
    let mut transaction = api.start_transaction().expect("start");
    let (before, after) = fresh.split_at(fresh.len() / 2);
    for &id in before {
        transaction.insert(&table, &row(id, 2)).expect("define");
    }
    let duplicate = transaction
        .insert(&table, &row(existing[0], 2))
        .expect("define");
    for &id in after {
        transaction.insert(&table, &row(id, 2)).expect("define");
    }
    let error = transaction
        .execute(ExecType::Commit)
        .expect_err("a duplicate insert aborts the transaction");
    assert_eq!(error.code(), Some(630), "{error}");
    assert_eq!(transaction.op_error(duplicate).map(|e| e.code), Some(630));
    assert_replicas_hold(&api, &table, &ids, untouched, "after an aborted commit");

    // The same ids insert cleanly afterwards: nothing of the aborted transaction stayed behind.
    let rows: Vec<_> = fresh.iter().map(|&id| row(id, 3)).collect();
    insert_committed(&api, &table, &rows).expect("insert the new rows for real");
    assert_replicas_hold(
        &api,
        &table,
        &ids,
        |id| Some(row(id, if fresh.contains(&id) { 3 } else { 500 })),
        "after the insert",
    );
}

/// A small seeded generator (xorshift64*): each thread picks the same sequence of transfers in
/// every run (how the threads interleave still varies).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// A number in `0..bound`.
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % bound
    }
}

/// What one transfer thread did.
#[derive(Debug, Default)]
struct TransferCounts {
    committed: u64,
    /// Transfers that failed with a temporary error and then committed on a retry.
    retried_to_success: u64,
    /// Temporary errors that say a data node failed: NDB's node recovery, node shutdown and
    /// unknown result classes (286, 4010, 280, 4012, ...), or a link to a data node that broke.
    node_failure_errors: u64,
    /// Lock waits that timed out (266): deadlocks between transfers and the scanner.
    lock_timeouts: u64,
    /// Other temporary errors.
    other_temporary_errors: u64,
    /// When the first node failure error came.
    first_node_failure: Option<Instant>,
    /// When the last transfer committed.
    last_commit: Option<Instant>,
}

impl TransferCounts {
    /// The counts of every thread together.
    fn sum(all: &[TransferCounts]) -> TransferCounts {
        let earliest = |a: Option<Instant>, b: Option<Instant>| a.into_iter().chain(b).min();
        let latest = |a: Option<Instant>, b: Option<Instant>| a.into_iter().chain(b).max();
        all.iter()
            .fold(TransferCounts::default(), |sum, c| TransferCounts {
                committed: sum.committed + c.committed,
                retried_to_success: sum.retried_to_success + c.retried_to_success,
                node_failure_errors: sum.node_failure_errors + c.node_failure_errors,
                lock_timeouts: sum.lock_timeouts + c.lock_timeouts,
                other_temporary_errors: sum.other_temporary_errors + c.other_temporary_errors,
                first_node_failure: earliest(sum.first_node_failure, c.first_node_failure),
                last_commit: latest(sum.last_commit, c.last_commit),
            })
    }

    /// Counts a temporary error by its kind.
    fn count_temporary(&mut self, error: &Error) {
        let node_failure = match error {
            Error::Ndb(e) => matches!(
                e.class,
                ErrorClass::NodeRecovery | ErrorClass::NodeShutdown | ErrorClass::UnknownResult
            ),
            Error::Transport { .. } | Error::Connect { .. } => true,
            _ => false,
        };
        if node_failure {
            self.node_failure_errors += 1;
            self.first_node_failure.get_or_insert_with(Instant::now);
        } else if error.code() == Some(266) {
            self.lock_timeouts += 1;
        } else {
            self.other_temporary_errors += 1;
        }
    }
}

/// How long one transfer is retried before the test gives up on it: far longer than a node
/// failure takes to be handled, or a few deadlocks in a row.
const TRANSFER_RETRY_MAX: Duration = Duration::from_secs(30);

/// Makes random transfers until `stop` is set. A transfer that fails with a temporary error is
/// retried whole with a new transaction until it commits, also after `stop` (for at most
/// [`TRANSFER_RETRY_MAX`]); any other error fails the test.
fn transfer_until(api: &Cluster, table: &Table, seed: u64, stop: &AtomicBool) -> TransferCounts {
    let mut rng = Rng::new(seed);
    let mut counts = TransferCounts::default();
    while !stop.load(Ordering::Relaxed) {
        let from = rng.below(u64::from(ACCOUNT_COUNT)) as u32;
        let to = (from + 1 + rng.below(u64::from(ACCOUNT_COUNT) - 1) as u32) % ACCOUNT_COUNT;
        let amount = 1 + rng.below(TRANSFER_AMOUNT_MAX) as i64;
        let give_up = Instant::now() + TRANSFER_RETRY_MAX;
        let mut attempt = 1;
        loop {
            match transfer(api, table, from, to, amount) {
                Ok(()) => {
                    counts.committed += 1;
                    counts.retried_to_success += u64::from(attempt > 1);
                    counts.last_commit = Some(Instant::now());
                    break;
                }
                Err(e) if e.is_temporary() && Instant::now() < give_up => {
                    counts.count_temporary(&e);
                    attempt += 1;
                }
                Err(e) => panic!("transfer {amount} from {from} to {to}, attempt {attempt}: {e}"),
            }
        }
    }
    counts
}

/// What the scanner thread saw.
#[derive(Debug, Default)]
struct ScanCounts {
    /// Locking scans that completed, each with the full total.
    consistent: u64,
    /// CommittedRead scans that completed, each with every account once.
    committed_read: u64,
    temporary_errors: u64,
}

/// Scans `accounts` until `deadline`, alternating a scan with shared locks (which must see the
/// whole total: the locks hold until the scan's transaction ends, so no transfer is half
/// seen) and a CommittedRead scan (whose total may be off in the middle of transfers, but which
/// must see every account exactly once).
fn scan_until(api: &Cluster, table: &Table, deadline: Instant, stop: &AtomicBool) -> ScanCounts {
    let mut counts = ScanCounts::default();
    let expected_total = i64::from(ACCOUNT_COUNT) * OPENING_BALANCE;
    let cap = deadline + BANK_RUN_EXTRA_MAX;
    while Instant::now() < cap && (Instant::now() < deadline || counts.consistent == 0) {
        match scan_total(api, table, LockMode::Read) {
            Ok((total, count)) => {
                assert_eq!(count, ACCOUNT_COUNT as usize, "a locking scan's rows");
                assert_eq!(total, expected_total, "a locking scan's total");
                counts.consistent += 1;
            }
            Err(e) if e.is_temporary() => counts.temporary_errors += 1,
            Err(e) => panic!("locking scan: {e}"),
        }
        match scan_total(api, table, LockMode::CommittedRead) {
            Ok((_, count)) => {
                assert_eq!(count, ACCOUNT_COUNT as usize, "a CommittedRead scan's rows");
                counts.committed_read += 1;
            }
            Err(e) if e.is_temporary() => counts.temporary_errors += 1,
            Err(e) => panic!("CommittedRead scan: {e}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    counts
}

#[test]
fn concurrent_transfers_across_nodes_keep_the_total_on_both_replicas() {
    bank_run(spec().deadlock_timeout_ms(BANK_DEADLOCK_TIMEOUT_MS));
}

/// The bank test again with every execution thread bound to CPU 0: the data nodes then send
/// each answer in the call that puts them to sleep (`rndb_transporter::sleeper`) where the
/// kernel allows, which the test asks the kernel itself: where it allows, no node may have
/// fallen back; where it does not, each node must have logged the same reason and fallen
/// back. Each then stops cleanly on SIGTERM, asleep in io_uring or not.
#[test]
fn concurrent_transfers_keep_the_total_when_data_nodes_share_a_cpu() {
    let sleeper = sleeper_support();
    eprintln!("this kernel and a data node's sleeper: {sleeper:?}");
    let mut cluster = bank_run(
        spec()
            .deadlock_timeout_ms(BANK_DEADLOCK_TIMEOUT_MS)
            .data_node_param("LockExecuteThreadToCPU", "0"),
    );
    for node in cluster.data_node_ids() {
        let log = cluster.log(node);
        assert!(
            log.contains("shares its CPU with another data node"),
            "node {node} saw the shared CPU: {log}"
        );
        let fallback = log.lines().find(|l| l.contains(SLEEPER_FALLBACK));
        match (&sleeper, fallback) {
            (Ok(()), None) => {}
            (Ok(()), Some(line)) => {
                panic!("node {node} fell back although this kernel has a sleeper: {line}")
            }
            (Err(reason), Some(line)) => assert!(
                line.contains(reason.as_str()),
                "node {node} fell back for another reason than {reason:?}: {line}"
            ),
            (Err(reason), None) => {
                panic!(
                    "node {node} did not say it fell back for lack of a sleeper ({reason}): {log}"
                )
            }
        }
    }
    // SIGTERM to all first: stopped one after another, the nodes left once a whole node
    // group had gone stop with 2305 (a cluster without a group's rows serves nothing).
    for node in cluster.data_node_ids() {
        cluster.terminate_node(node).expect("SIGTERM");
    }
    for node in cluster.data_node_ids() {
        let status = cluster.stop_node(node).expect("stop a data node");
        assert!(
            status.success(),
            "node {node} stopped on SIGTERM, not killed: {status:?}\n{}",
            cluster.log(node)
        );
    }
}

/// The bank test again with every data node on a host of its own (a network namespace with
/// its own address, as its HostName says): node to node and API to node traffic then crosses a
/// bridge between addresses, and each host's address is checked against its HostName.
#[test]
#[ignore = "needs root: network namespaces (scripts/test runs it as root)"]
fn concurrent_transfers_keep_the_total_with_each_data_node_on_its_own_host() {
    let hosts = Hosts::new(DATA_NODE_COUNT as u8).expect("make a host per data node (root)");
    // The cluster bank_run returns is dropped (its data nodes stopped) before the hosts go.
    bank_run(
        spec()
            .deadlock_timeout_ms(BANK_DEADLOCK_TIMEOUT_MS)
            .on_hosts(&hosts),
    );
}

/// What a data node logs when it cannot send an answer with its sleep (`ndbd`'s exec loop),
/// followed by the reason.
const SLEEPER_FALLBACK: &str = "answers are sent before sleeping, not with it: ";

/// Whether this kernel lets a data node send an answer and sleep in one call: `Err` holds the
/// reason in the words a data node logs after [`SLEEPER_FALLBACK`]. Making a sleeper probes
/// the kernel (io_uring, its EPOLL_WAIT) and nothing else: the epoll instance it is given is
/// used only by a sleep, which this probe never makes, so none is needed (-1 stands in).
fn sleeper_support() -> Result<(), String> {
    rndb_transporter::sleeper::Sleeper::new(-1, 1).map(drop)
}

/// Runs the bank workload on a cluster of `spec` and checks the totals; returns the cluster.
fn bank_run(spec: ClusterSpec) -> TestCluster {
    let (cluster, api, table) = start(spec);
    let ids: Vec<u32> = (0..ACCOUNT_COUNT).collect();
    let rows: Vec<_> = ids.iter().map(|&id| row(id, OPENING_BALANCE)).collect();
    insert_committed(&api, &table, &rows).expect("open the accounts");
    // The scanner is a second API node, so the workload also crosses API nodes.
    let scanner_api = connect(&cluster);

    let deadline = Instant::now() + BANK_RUN;
    let stop = AtomicBool::new(false);
    let (transfers, scans) = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..TRANSFER_THREAD_COUNT)
            .map(|seed| {
                let (api, table, stop) = (&api, &table, &stop);
                scope.spawn(move || transfer_until(api, table, seed, stop))
            })
            .collect();
        // The scanner ends the run (transfers stop when it does), even if it panics.
        let scanner = scope.spawn(|| {
            struct StopOnDrop<'a>(&'a AtomicBool);
            impl Drop for StopOnDrop<'_> {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::Relaxed);
                }
            }
            let _guard = StopOnDrop(&stop);
            scan_until(&scanner_api, &table, deadline, &stop)
        });
        let transfers: Vec<TransferCounts> = workers
            .into_iter()
            .map(|w| w.join().expect("a transfer thread panicked"))
            .collect();
        (
            transfers,
            scanner.join().expect("the scanner thread panicked"),
        )
    });
    let transfers = TransferCounts::sum(&transfers);
    eprintln!("transfers {transfers:?}, scans {scans:?}");
    assert!(
        transfers.committed > 0,
        "no transfer committed: {transfers:?}"
    );
    assert_eq!(
        transfers.node_failure_errors, 0,
        "no data node failed, yet: {transfers:?}"
    );
    assert!(
        scans.consistent > 0,
        "no locking scan completed during the run: {scans:?}"
    );

    let expected_total = i64::from(ACCOUNT_COUNT) * OPENING_BALANCE;
    let (total, count) =
        scan_total(&api, &table, LockMode::CommittedRead).expect("scan after the run");
    assert_eq!(count, ACCOUNT_COUNT as usize, "every account, once");
    assert_eq!(
        total, expected_total,
        "transfers neither create nor destroy money"
    );

    let primaries = replica_rows(&api, &table, &ids, PRIMARY);
    let backups = replica_rows(&api, &table, &ids, BACKUP);
    assert_eq!(
        primaries, backups,
        "primary and backup hold the same balances"
    );
    let replica_total = |rows: &[Option<Vec<Value>>]| -> i64 {
        rows.iter()
            .map(|r| balance(r.as_deref().expect("every account exists")))
            .sum()
    };
    assert_eq!(
        replica_total(&primaries),
        expected_total,
        "on the primaries"
    );
    assert_eq!(replica_total(&backups), expected_total, "on the backups");
    cluster
}

#[test]
fn a_lock_wait_across_nodes_ends_in_266_and_the_retry_succeeds() {
    let spec = spec().deadlock_timeout_ms(SHORT_DEADLOCK_TIMEOUT_MS);
    let (cluster, api, table) = start(spec);
    let config = api.config();
    // The contended row's primary is in one node group; B starts on a row of the other, so
    // B's TC is a node of that other group and its lock wait is on a remote node.
    let by_node = keys_by_primary(&api, &table, 1);
    let contended = by_node.values().next().expect("a data node")[0];
    let contended_group = group_of(config, primary(&api, &table, contended));
    let first = *by_node
        .iter()
        .find(|(node, _)| group_of(config, **node) != contended_group)
        .expect("a node of the other node group")
        .1
        .first()
        .expect("a key");
    insert_committed(&api, &table, &[row(contended, 10), row(first, 20)]).expect("insert");

    let other_api = connect(&cluster);
    let mut holder = api.start_transaction().expect("start A");
    holder
        .update(&table, &key(contended), &[(1, Value::Int64(11))])
        .expect("define");
    holder
        .execute(ExecType::NoCommit)
        .expect("A takes the exclusive lock");

    let waiter = |value: i64| -> Result<(), Error> {
        let mut transaction = other_api.start_transaction()?;
        transaction.update(&table, &key(first), &[(1, Value::Int64(value))])?;
        transaction.update(&table, &key(contended), &[(1, Value::Int64(value))])?;
        transaction.execute(ExecType::Commit)
    };
    let error = waiter(30).expect_err("B waits for A's lock and times out");
    assert_eq!(error.code(), Some(266), "B's lock wait: {error}");
    assert!(error.is_temporary(), "266 is temporary: {error}");
    let ids = [contended, first];
    assert_replicas_hold(
        &api,
        &table,
        &ids,
        |id| Some(row(id, if id == contended { 10 } else { 20 })),
        "B aborted and A has not committed",
    );

    holder.execute(ExecType::Commit).expect("A commits");
    assert_replicas_hold(
        &api,
        &table,
        &ids,
        |id| Some(row(id, if id == contended { 11 } else { 20 })),
        "A committed",
    );
    waiter(31).expect("B' gets both locks once A has committed");
    assert_replicas_hold(&api, &table, &ids, |id| Some(row(id, 31)), "B' committed");
}

#[test]
fn one_execute_writes_to_every_node_and_both_replicas() {
    let (_cluster, api, table) = start(spec());
    let by_node = keys_by_primary(&api, &table, 13);
    let ids: Vec<u32> = by_node.values().flatten().copied().take(50).collect();
    let primaries: BTreeSet<NodeId> = ids.iter().map(|&id| primary(&api, &table, id)).collect();
    assert_eq!(
        primaries.len(),
        DATA_NODE_COUNT as usize,
        "50 rows on every node"
    );

    let mut transaction = api.start_transaction().expect("start");
    for &id in &ids {
        transaction
            .insert(&table, &row(id, i64::from(id) * 2))
            .expect("define");
    }
    transaction
        .execute(ExecType::Commit)
        .expect("insert 50 rows on four nodes in one execute");
    assert_replicas_hold(
        &api,
        &table,
        &ids,
        |id| Some(row(id, i64::from(id) * 2)),
        "after one execute of 50 inserts",
    );

    let mut transaction = api.start_transaction().expect("start");
    for &id in &ids {
        transaction.delete(&table, &key(id)).expect("define");
    }
    transaction
        .execute(ExecType::Commit)
        .expect("delete 50 rows on four nodes in one execute");
    assert_replicas_hold(
        &api,
        &table,
        &ids,
        |_| None,
        "after one execute of 50 deletes",
    );
}

#[test]
fn a_table_created_through_one_node_is_on_every_node_until_dropped() {
    let cluster = TestCluster::start(spec()).expect("start four data nodes");
    let creator = connect(&cluster);
    let created = recreate_table(&creator, &accounts_def("shared")).expect("create shared");
    let user = connect(&cluster);
    assert_ne!(creator.node_id(), user.node_id(), "two API nodes");

    let table = user
        .get_table("shared")
        .expect("the second API node finds the table");
    assert_eq!(
        (table.id(), table.version(), table.def()),
        (created.id(), created.version(), created.def()),
        "both API nodes see one table"
    );

    // One key per data node as primary, so every node's TC and LQH run on the new table.
    let by_node = keys_by_primary(&user, &table, 1);
    for (node, ids) in &by_node {
        let id = ids[0];
        insert_committed(&user, &table, &[row(id, 1)])
            .unwrap_or_else(|e| panic!("insert a row whose primary is node {node}: {e}"));
        let mut transaction = user.start_transaction().expect("start");
        transaction
            .update(&table, &key(id), &[(1, Value::Int64(2))])
            .expect("define");
        transaction
            .execute(ExecType::Commit)
            .unwrap_or_else(|e| panic!("update a row whose primary is node {node}: {e}"));
        assert_replicas_hold(&user, &table, &[id], |id| Some(row(id, 2)), "updated");
        assert_replicas_hold(&creator, &table, &[id], |id| Some(row(id, 2)), "updated");
    }

    creator.drop_table("shared").expect("drop shared");
    assert_ndb_code(user.get_table("shared"), 709, "look up the dropped table");
    assert_ndb_code(
        creator.get_table("shared"),
        709,
        "look up the dropped table",
    );
    for (node, ids) in &by_node {
        let mut transaction = user.start_transaction().expect("start");
        transaction
            .read(&table, &key(ids[0]), LockMode::CommittedRead)
            .expect("define");
        assert_ndb_code(
            transaction.execute(ExecType::Commit),
            709,
            &format!("read the dropped table on node {node}"),
        );
    }
}

/// A transaction of one write, committed in the execute that defines it, takes the short path:
/// its coordinator sits on the row's primary, and the backup commits as soon as it holds the
/// write (no separate commit round). Each such insert, update and delete must still be on both
/// replicas when the execute returns, and one that fails must leave nothing anywhere.
#[test]
fn one_write_transactions_commit_on_both_replicas() {
    let (_cluster, api, table) = start(spec());
    let by_node = keys_by_primary(&api, &table, 5);
    let ids: Vec<u32> = by_node.values().flatten().copied().collect();
    let commit_one = |define: &dyn Fn(&mut rndb_api::Transaction<'_>)| {
        let mut transaction = api.start_transaction().expect("start");
        define(&mut transaction);
        transaction.execute(ExecType::Commit)
    };
    for &id in &ids {
        commit_one(&|t| {
            t.insert(&table, &row(id, 10)).expect("define");
        })
        .expect("insert");
    }
    for replica in [PRIMARY, BACKUP] {
        let rows = replica_rows(&api, &table, &ids, replica);
        assert!(
            rows.iter()
                .zip(&ids)
                .all(|(r, &id)| r.as_deref() == Some(&row(id, 10)[..])),
            "replica {replica} holds every inserted row"
        );
    }
    for &id in &ids {
        commit_one(&|t| {
            t.update(&table, &key(id), &[(1, Value::Int64(20))])
                .expect("define");
        })
        .expect("update");
    }
    // A duplicate insert fails on the primary: nothing changes on either replica.
    for &id in &ids {
        assert_ndb_code(
            commit_one(&|t| {
                t.insert(&table, &row(id, 99)).expect("define");
            }),
            630,
            "insert of an existing row",
        );
    }
    for replica in [PRIMARY, BACKUP] {
        let rows = replica_rows(&api, &table, &ids, replica);
        assert!(
            rows.iter()
                .zip(&ids)
                .all(|(r, &id)| r.as_deref() == Some(&row(id, 20)[..])),
            "replica {replica} holds every update and no failed insert"
        );
    }
    for &id in &ids {
        commit_one(&|t| {
            t.delete(&table, &key(id)).expect("define");
        })
        .expect("delete");
    }
    assert_replicas_hold(&api, &table, &ids, |_| None, "one-row deletes");
}

/// CPU time (user + system, in clock ticks) process `pid` has used, from /proc.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc stat");
    // The command name (field 2) may hold spaces; the fields after it are space-separated.
    let after_name = &stat[stat.rfind(')').expect("stat format") + 2..];
    let fields: Vec<&str> = after_name.split(' ').collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the name.
    fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
}

/// Four data nodes with the default spin settings share two cores: idle, each sleeps in its
/// poller instead of spinning. Over one second of idleness every node uses a small fraction of
/// a core (a spinning node would use all of one).
#[test]
fn idle_data_nodes_sleep() {
    let (cluster, _api, _table) = start(spec());
    let pids: Vec<(NodeId, u32)> = cluster
        .data_node_ids()
        .into_iter()
        .map(|id| (id, cluster.pid(id).expect("running")))
        .collect();
    let before: Vec<u64> = pids.iter().map(|&(_, pid)| cpu_ticks(pid)).collect();
    let window = Duration::from_secs(1);
    // The measurement window itself, not a wait for some condition.
    std::thread::sleep(window);
    // The bound: clock ticks are 1/100 s on Linux (USER_HZ); a spinning node gains
    // about 100 in one second, a sleeping one a few (timers every 10 ms).
    for ((node, pid), before) in pids.iter().zip(before) {
        let used = cpu_ticks(*pid) - before;
        assert!(
            used < 25,
            "idle data node {node} used {used} ticks of CPU in {window:?}: it spins"
        );
    }
}

/// A data node that dies loses no committed row and makes none unreachable: the backups of its
/// partitions take over as primaries, reads and writes of every key go on (after at most a
/// temporary error while the survivors notice), a full scan still sees every row, a new API
/// node can connect, and the dead node started again (empty, with `--initial`) never serves its
/// empty store: it rejoins by node restart, with the rows copied.
#[test]
fn the_backups_of_a_dead_data_node_take_over() {
    let (mut cluster, api, table) = start(spec());
    let by_node = keys_by_primary(&api, &table, 3);
    let ids: Vec<u32> = by_node.values().flatten().copied().collect();
    for &id in &ids {
        insert_committed(&api, &table, &[row(id, 1)]).expect("insert before the failure");
    }
    let victim = NodeId(4);
    cluster.kill_node(victim).expect("kill node 4");

    // Every key is written again, the dead node's (now on its backup) included; a write may
    // fail with a temporary error while the others notice the failure, and is retried.
    for &id in &ids {
        rndb_tests::wait_until(
            &format!("an update of key {id} after node 4 died"),
            Duration::from_secs(10),
            || {
                let mut transaction = api.start_transaction()?;
                transaction.update(&table, &key(id), &[(1, Value::Int64(5))])?;
                match transaction.execute(ExecType::Commit) {
                    Ok(()) => Ok(Some(())),
                    Err(e) if e.is_temporary() => Ok(None),
                    Err(e) => Err(anyhow::anyhow!("update of {id}: {e}")),
                }
            },
        )
        .expect("the update succeeds");
    }
    let all_updated = |api: &Cluster| {
        replica_rows(api, &table, &ids, PRIMARY)
            .iter()
            .zip(&ids)
            .all(|(r, &id)| r.as_deref() == Some(&row(id, 5)[..]))
    };
    assert!(all_updated(&api), "every key reads its new value");
    let (total, count) =
        scan_total(&api, &table, LockMode::CommittedRead).expect("scan after the failure");
    assert_eq!(count, ids.len(), "the scan sees every row");
    assert_eq!(total, 5 * ids.len() as i64);
    for node in [NodeId(1), NodeId(2), NodeId(3)] {
        assert!(cluster.is_running(node), "data node {node} still runs");
    }
    // A new API node connects to the data nodes that are left, and is served by them.
    let late_api = connect(&cluster);
    assert!(all_updated(&late_api), "a new API node reads every key");
    drop(late_api);
    // The dead node started again, empty: it serves nothing until it has rejoined by node
    // restart (tests/node_restart.rs checks its rows); every key keeps its value.
    cluster.start_node(victim).expect("restart node 4");
    let after_restart = cluster
        .connect_with(ConnectOptions {
            request_timeout: REQUEST_TIMEOUT,
            connect_timeout: Duration::from_secs(1),
            ..ConnectOptions::default()
        })
        .expect("connect with node 4 restarting");
    assert!(
        all_updated(&after_restart),
        "every key still reads its value: node 4's empty store is never used"
    );
    assert!(
        all_updated(&api),
        "the API node that saw node 4 die does not use it again either"
    );
}

/// A data node that starts after the others joins them: until it runs, the cluster has not
/// started and API nodes cannot connect (4009, naming the missing node); once it has connected
/// to its peers, the cluster serves.
#[test]
fn a_late_data_node_completes_the_cluster() {
    let late = NodeId(4);
    let mut cluster =
        TestCluster::start_without(spec(), &[late]).expect("start three of four data nodes");
    let refused = rndb_api::Cluster::connect(
        cluster.config_path(),
        ConnectOptions {
            connect_timeout: Duration::from_millis(500),
            ..ConnectOptions::default()
        },
    )
    .expect_err("an API node cannot connect while a data node is missing");
    assert_eq!(refused.code(), Some(4009), "{refused}");
    assert!(
        refused.to_string().contains(&format!("node {late}")),
        "the error names the missing node: {refused}"
    );
    cluster.start_node(late).expect("start the last data node");
    let api = connect(&cluster);
    let table = recreate_table(&api, &accounts_def("late")).expect("create a table");
    let by_node = keys_by_primary(&api, &table, 2);
    let ids: Vec<u32> = by_node.values().flatten().copied().collect();
    insert_committed(
        &api,
        &table,
        &ids.iter().map(|&id| row(id, 1)).collect::<Vec<_>>(),
    )
    .expect("insert on every node");
    assert_replicas_hold(
        &api,
        &table,
        &ids,
        |id| Some(row(id, 1)),
        "after a late start",
    );
}

/// The bank workload goes on through the death of a data node: transfers in flight when it
/// dies fail with temporary errors of a node failure (none before it) and are retried until
/// they commit, the backups take over and transfers commit after it, and afterwards the
/// accounts still hold the opening total — no committed transfer is lost or half applied, even
/// those whose coordinator was the dead node.
#[test]
fn transfers_keep_the_total_through_a_data_node_failure() {
    let spec = spec().deadlock_timeout_ms(BANK_DEADLOCK_TIMEOUT_MS);
    let (mut cluster, api, table) = start(spec);
    let ids: Vec<u32> = (0..ACCOUNT_COUNT).collect();
    let rows: Vec<_> = ids.iter().map(|&id| row(id, OPENING_BALANCE)).collect();
    insert_committed(&api, &table, &rows).expect("open the accounts");
    let stop = AtomicBool::new(false);
    let (kill_began, transfers) = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..TRANSFER_THREAD_COUNT)
            .map(|seed| {
                let (api, table, stop) = (&api, &table, &stop);
                scope.spawn(move || transfer_until(api, table, seed, stop))
            })
            .collect();
        // Let transfers run, kill a data node in the middle of them, let them run on.
        let half = BANK_RUN / 2;
        std::thread::sleep(half);
        let kill_began = Instant::now();
        let killed = cluster.kill_node(NodeId(3));
        std::thread::sleep(half);
        stop.store(true, Ordering::Relaxed);
        killed.expect("kill data node 3");
        let counts: Vec<TransferCounts> = workers
            .into_iter()
            .map(|w| w.join().expect("a transfer thread panicked"))
            .collect();
        (kill_began, TransferCounts::sum(&counts))
    });
    eprintln!("transfers {transfers:?}");
    assert!(
        transfers.node_failure_errors > 0,
        "no transfer in flight at the kill failed with a node failure error: {transfers:?}"
    );
    let first_failure = transfers
        .first_node_failure
        .expect("the time of the first node failure error");
    assert!(
        first_failure >= kill_began,
        "a node failure error came {:?} before the kill: {transfers:?}",
        kill_began - first_failure
    );
    // Every transfer that failed was retried until it committed (`transfer_until` retries
    // each one to the end); at least those hit by the kill were.
    assert!(
        transfers.retried_to_success > 0,
        "no failed transfer committed on a retry: {transfers:?}"
    );
    assert!(
        transfers.last_commit.is_some_and(|t| t > first_failure),
        "no transfer committed after the node failure: {transfers:?}"
    );
    let expected_total = i64::from(ACCOUNT_COUNT) * OPENING_BALANCE;
    let (total, count) =
        scan_total(&api, &table, LockMode::CommittedRead).expect("scan after the run");
    assert_eq!(count, ACCOUNT_COUNT as usize, "every account, once");
    assert_eq!(total, expected_total, "no transfer lost or half applied");
    let by_key: i64 = replica_rows(&api, &table, &ids, PRIMARY)
        .iter()
        .map(|r| balance(r.as_deref().expect("every account is readable")))
        .sum();
    assert_eq!(by_key, expected_total, "read by key, the same total");
}

/// Heartbeats in the bank test's shape: a data node stopped with SIGSTOP keeps its sockets
/// open, so only missed heartbeats show it is gone. The cluster declares it failed within a few
/// HeartbeatIntervalDbDb (the president's log says so), its backups take over and the API node
/// routes around it (NODE_FAILREP), transfers go on and keep the total; resumed, the node
/// reads that it was declared failed and stops (2315) instead of serving a second copy.
#[test]
fn a_stopped_data_node_is_declared_failed_by_heartbeats_and_stops_when_resumed() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;

    const HEARTBEAT_MS: u64 = 200;
    let spec = spec()
        .deadlock_timeout_ms(BANK_DEADLOCK_TIMEOUT_MS)
        .data_node_param("HeartbeatIntervalDbDb", &HEARTBEAT_MS.to_string());
    let (mut cluster, api, table) = start(spec);
    let ids: Vec<u32> = (0..ACCOUNT_COUNT).collect();
    let rows: Vec<_> = ids.iter().map(|&id| row(id, OPENING_BALANCE)).collect();
    insert_committed(&api, &table, &rows).expect("open the accounts");
    let victim = NodeId(3);
    let pid = Pid::from_raw(cluster.pid(victim).expect("node 3 runs") as i32);
    let stop = AtomicBool::new(false);
    let (declared_after, transfers) = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..TRANSFER_THREAD_COUNT)
            .map(|seed| {
                let (api, table, stop) = (&api, &table, &stop);
                scope.spawn(move || transfer_until(api, table, seed, stop))
            })
            .collect();
        std::thread::sleep(BANK_RUN / 2);
        let stopped_at = Instant::now();
        kill(pid, Signal::SIGSTOP).expect("SIGSTOP node 3");
        let declared = rndb_tests::wait_until(
            "the president to declare node 3 failed",
            Duration::from_secs(30),
            || {
                Ok(cluster
                    .log(NodeId(1))
                    .contains("declaring data node failed")
                    .then_some(()))
            },
        );
        let declared_after = stopped_at.elapsed();
        // Transfers go on without node 3 for a while.
        std::thread::sleep(BANK_RUN / 2);
        stop.store(true, Ordering::Relaxed);
        let counts: Vec<TransferCounts> = workers
            .into_iter()
            .map(|w| w.join().expect("a transfer thread panicked"))
            .collect();
        declared.expect("node 3 declared failed");
        (declared_after, TransferCounts::sum(&counts))
    });
    eprintln!("declared failed {declared_after:?} after SIGSTOP; transfers {transfers:?}");
    // Declared after about 4 silent intervals; far more means heartbeats did not find it.
    assert!(
        declared_after < Duration::from_millis(20 * HEARTBEAT_MS),
        "node 3 declared failed only {declared_after:?} after it stopped"
    );
    assert!(
        transfers
            .last_commit
            .is_some_and(|t| t.elapsed() < BANK_RUN),
        "transfers commit after node 3 is declared failed: {transfers:?}"
    );
    let expected_total = i64::from(ACCOUNT_COUNT) * OPENING_BALANCE;
    let (total, count) =
        scan_total(&api, &table, LockMode::CommittedRead).expect("scan after the run");
    assert_eq!(count, ACCOUNT_COUNT as usize, "every account, once");
    assert_eq!(total, expected_total, "no transfer lost or half applied");
    // Resumed, node 3 finds itself declared failed and stops.
    kill(pid, Signal::SIGCONT).expect("SIGCONT node 3");
    rndb_tests::wait_until("node 3 to stop itself", Duration::from_secs(30), || {
        Ok((!cluster.is_running(victim)).then_some(()))
    })
    .expect("node 3 stops");
    let log = cluster.log(victim);
    assert!(
        log.contains("2315") || log.contains("2305"),
        "node 3's log says it was declared failed:\n{log}"
    );
    for node in [NodeId(1), NodeId(2), NodeId(4)] {
        assert!(cluster.is_running(node), "data node {node} still runs");
    }
    let (total, _) = scan_total(&api, &table, LockMode::CommittedRead).expect("scan at the end");
    assert_eq!(total, expected_total, "the total after node 3 stopped");
}

/// What [`failover_after_sigstop`] measured: from the SIGSTOP to the president's log line
/// declaring the node failed, and to the first committed write of a row the stopped node was
/// the primary of.
#[derive(Debug)]
struct Failover {
    declared: Duration,
    serving: Duration,
}

/// Four data nodes with HeartbeatIntervalDbDb = `interval_ms` (HeartbeatIntervalDbApi the same,
/// at least NDB's minimum of 100): SIGSTOPs node 3 and measures [`Failover`], writing one of
/// node 3's rows again and again (each attempt may wait up to 2 intervals for its answer).
fn failover_after_sigstop(interval_ms: u64) -> Failover {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;

    let interval = interval_ms.to_string();
    let spec = spec()
        .data_node_param("HeartbeatIntervalDbDb", &interval)
        .data_node_param("HeartbeatIntervalDbApi", &interval_ms.max(100).to_string());
    let cluster = TestCluster::start(spec).expect("start four data nodes");
    let api = cluster
        .connect_with(ConnectOptions {
            request_timeout: Duration::from_millis(2 * interval_ms),
            connect_timeout: START_TIMEOUT,
            ..ConnectOptions::default()
        })
        .expect("connect");
    let table = recreate_table(&api, &accounts_def("accounts")).expect("create accounts");
    let victim = NodeId(3);
    let id = keys_by_primary(&api, &table, 1)[&victim][0];
    insert_committed(&api, &table, &[row(id, 0)]).expect("insert");
    let pid = Pid::from_raw(cluster.pid(victim).expect("node 3 runs") as i32);
    let stopped_at = Instant::now();
    kill(pid, Signal::SIGSTOP).expect("SIGSTOP node 3");
    let (declared, serving) = std::thread::scope(|scope| {
        // The president's log is read every few ms for the line that declares node 3 failed.
        let declared = scope.spawn(|| {
            rndb_tests::wait_until("node 3 declared failed", Duration::from_secs(60), || {
                let log = cluster.log(NodeId(1));
                Ok(log
                    .contains("declaring data node failed")
                    .then(|| stopped_at.elapsed()))
            })
        });
        let serving =
            rndb_tests::wait_until("a write of node 3's row", Duration::from_secs(60), || {
                let mut transaction = api.start_transaction()?;
                transaction.update(&table, &key(id), &[(1, Value::Int64(1))])?;
                match transaction.execute(ExecType::Commit) {
                    Ok(()) => Ok(Some(stopped_at.elapsed())),
                    Err(e) if e.is_temporary() => Ok(None),
                    Err(e) => Err(anyhow::anyhow!("write of {id}: {e}")),
                }
            });
        let declared = declared.join().expect("the log reader panicked");
        (declared, serving)
    });
    let _ = kill(pid, Signal::SIGCONT);
    Failover {
        declared: declared.expect("the president declares node 3 failed"),
        serving: serving.expect("the row is written again"),
    }
}

/// The benchmark of issue 23: from a SIGSTOP to the cluster declaring the node failed and
/// serving its rows again, against the heartbeat bound (4 × HeartbeatIntervalDbDb), for a few
/// intervals. `scripts/bench-heartbeat` runs it.
#[test]
#[ignore = "benchmark: scripts/bench-heartbeat"]
fn bench_failover_after_a_sigstop() {
    println!(
        "| HeartbeatIntervalDbDb | bound (4 ×) | declared failed | a write of its row commits |"
    );
    println!("|---|---|---|---|");
    for interval_ms in [100, 300, 1000] {
        let f = failover_after_sigstop(interval_ms);
        println!(
            "| {interval_ms} ms | {} ms | {} ms | {} ms |",
            4 * interval_ms,
            f.declared.as_millis(),
            f.serving.as_millis()
        );
    }
}

/// A data node that must close its link to a data node which may still run (here: the peer
/// breaks the protocol) stops itself, with an error saying why, rather than go on with a view
/// of the cluster its peer does not share.
#[test]
fn a_data_node_that_drops_a_live_peer_stops_itself() {
    use rndb_transporter::handshake::{self, Hello, HANDSHAKE_TIMEOUT};
    use rndb_transporter::{tcp::TcpLink, FrameHeader, LinkSettings, Transporter};

    let spec = ClusterSpec::new().data_nodes(2).replicas(2).api_slots(2);
    let (me, impostor) = (NodeId(1), NodeId(2));
    let mut cluster = TestCluster::start_without(spec, &[impostor]).expect("start node 1");
    // Connect to node 1 as data node 2 and send it a signal no data node sends.
    let config = cluster.config().clone();
    let mut stream = std::net::TcpStream::connect(cluster.addr(me)).expect("connect");
    let hello = Hello::for_link(&config, impostor, me).expect("hello");
    handshake::client_handshake(&mut stream, &hello, HANDSHAKE_TIMEOUT).expect("admitted");
    let link_config = config.link(impostor, me).expect("a link");
    let mut link =
        TcpLink::new(stream, me, &LinkSettings::from_link(link_config)).expect("a TCP link");
    let header = FrameHeader {
        signal: 9999,
        receiver_block: 0,
        sender_block: 0,
        request_id: 0,
    };
    link.send(&header, b"nonsense").expect("queue the frame");
    link.flush().expect("send the frame");
    rndb_tests::wait_until("node 1 to stop itself", Duration::from_secs(10), || {
        Ok((!cluster.is_running(me)).then_some(()))
    })
    .expect("node 1 stops");
    let log = cluster.log(me);
    assert!(
        log.contains("stopping this data node"),
        "the log says why:\n{log}"
    );
}

/// A unique index created over rows already loaded on every node is built across the node
/// groups (each index row lands on the replicas of its own partition): every row is found
/// through it afterwards, and a duplicate value fails the creation (893) everywhere.
#[test]
fn a_unique_index_over_loaded_rows_is_built_across_node_groups() {
    let (cluster, api, table) = start(spec());
    let ids: Vec<u32> = (0..200).collect();
    // balance = 10 × id: unique.
    let rows: Vec<_> = ids.iter().map(|&id| row(id, i64::from(id) * 10)).collect();
    insert_committed(&api, &table, &rows).expect("load the accounts");
    let index = api
        .create_index(&table, &IndexDef::unique("by_balance", &["balance"]))
        .expect("create the unique index over loaded rows");
    // Every row is found through the index, from a second API node too.
    let other = connect(&cluster);
    for reader in [&api, &other] {
        let index = reader.get_index(&table, "by_balance").expect("the index");
        let mut transaction = reader.start_transaction().expect("start");
        let ops: Vec<_> = ids
            .iter()
            .map(|&id| {
                transaction
                    .read_unique(&index, &[Value::Int64(i64::from(id) * 10)], LockMode::Read)
                    .expect("define")
            })
            .collect();
        transaction
            .execute(ExecType::Commit)
            .expect("read every row through the index");
        for (&id, op) in ids.iter().zip(ops) {
            assert_eq!(transaction.row(op), Some(&row(id, i64::from(id) * 10)[..]));
        }
    }
    api.drop_index(&table, index.name())
        .expect("drop the index");
    // A duplicate value: the creation fails everywhere and leaves no index.
    insert_committed(&api, &table, &[row(1000, 50)]).expect("a second balance of 50");
    assert_ndb_code(
        api.create_index(&table, &IndexDef::unique("dup", &["balance"])),
        893,
        "a unique index over duplicate values",
    );
    for reader in [&api, &other] {
        assert_ndb_code(reader.get_index(&table, "dup"), 4243, "the failed index");
    }
    // Writes go on afterwards.
    insert_committed(&api, &table, &[row(1001, 7)]).expect("a write after the failed build");
}
