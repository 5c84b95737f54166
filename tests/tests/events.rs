//! Proves that the event API hands a subscriber every committed change exactly once, in epoch
//! order, each in the epoch its commit returned, with the row's new and old images, and
//! nothing of an aborted transaction; that data nodes SIGKILLed and restarted in turn under a
//! writer (the master among them) lose and duplicate no acknowledged change (a replica partner
//! covers their fragments, and each is subscribed again once it is back); and that dropping the
//! table under a writer hands out every acknowledged change, then ends the subscription with a
//! Drop event; and that a merged operation (NDB's mergeEvents) hands out BLOB and TEXT values
//! whole, names a long value an update left as it was, and makes one event of a row's changes
//! in one epoch, also while data nodes are SIGKILLed and restarted under a writer; and that
//! named events (NDB's Dictionary::createEvent) are kept for every API node, refuse what NDB
//! refuses, and hand out the kinds of change they name; and that the client statistics count
//! the events received.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rndb_api::{
    BlobSize, ClientStat, Cluster, ColumnDef, ColumnType, EventData, EventDef, EventOperation,
    EventType, ExecType, Table, TableDef, TableEvents, Value,
};
use rndb_config::NodeId;
use rndb_tests::ops::recreate_table;
use rndb_tests::{wait_until, ClusterSpec, TestCluster};

/// A node's restart, in debug builds on a shared 2-core machine.
const RESTART_TIMEOUT: Duration = Duration::from_secs(120);

/// How long the events of what was committed may take to come (a few epochs, on a loaded
/// machine).
const EVENTS_TIMEOUT: Duration = Duration::from_secs(60);

/// An event as compared: its type, epoch, new and old images.
type Change = (EventType, u64, Option<Vec<Value>>, Option<Vec<Value>>);

fn counters_def(name: &str) -> TableDef {
    TableDef::new(
        name,
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("v", ColumnType::Int64),
        ],
    )
}

fn row(id: u32, v: i64) -> Vec<Value> {
    vec![Value::UInt32(id), Value::Int64(v)]
}

/// Polls until `done` holds over the events gathered, failing after [`EVENTS_TIMEOUT`].
fn gather(
    op: &mut EventOperation<'_>,
    events: &mut Vec<EventData>,
    what: &str,
    done: impl Fn(&[EventData]) -> bool,
) {
    let deadline = Instant::now() + EVENTS_TIMEOUT;
    while !done(events) {
        assert!(
            Instant::now() < deadline,
            "{what}: not every event came within {EVENTS_TIMEOUT:?}; got {events:#?}"
        );
        if op
            .poll_events(Duration::from_millis(200))
            .expect("poll events")
            .is_some()
        {
            while let Some(event) = op.next_event() {
                events.push(event);
            }
        }
    }
}

fn commit(cluster: &Cluster, build: impl FnOnce(&mut rndb_api::Transaction<'_>)) -> u64 {
    let mut t = cluster.start_transaction().expect("start a transaction");
    build(&mut t);
    t.execute(ExecType::Commit).expect("commit");
    t.gci().expect("a writing commit has a GCI")
}

#[test]
fn committed_changes_come_once_in_their_epochs_with_both_images() {
    let cluster = TestCluster::start(ClusterSpec::new().data_nodes(2).replicas(2))
        .expect("start the data nodes");
    let api = cluster.connect().expect("connect");
    let table = recreate_table(&api, &counters_def("ev_basic")).expect("create table");
    let mut op = api.create_event_operation(&table).expect("subscribe");

    // Changes that commit, each with the GCI its commit returned.
    let mut expected: Vec<Change> = Vec::new();
    let gci = commit(&api, |t| {
        for id in 0..20 {
            t.insert(&table, &row(id, 0)).unwrap();
        }
    });
    for id in 0..20 {
        expected.push((EventType::Insert, gci, Some(row(id, 0)), None));
    }
    let gci = commit(&api, |t| {
        t.update(&table, &[Value::UInt32(3)], &[(1, Value::Int64(33))])
            .unwrap();
    });
    expected.push((EventType::Update, gci, Some(row(3, 33)), Some(row(3, 0))));
    // An aborted transaction's changes never appear.
    {
        let mut t = api.start_transaction().unwrap();
        t.insert(&table, &row(100, 1)).unwrap();
        t.delete(&table, &[Value::UInt32(4)]).unwrap();
        t.execute(ExecType::NoCommit).unwrap();
        t.execute(ExecType::Rollback).unwrap();
    }
    let gci = commit(&api, |t| {
        t.delete(&table, &[Value::UInt32(5)]).unwrap();
    });
    expected.push((EventType::Delete, gci, None, Some(row(5, 0))));

    let mut events = Vec::new();
    gather(&mut op, &mut events, "basic changes", |e| {
        e.len() >= expected.len()
    });
    // A little longer: nothing more may come (each change once, the aborted ones never).
    let more = op.poll_events(Duration::from_millis(500)).expect("poll");
    while let Some(event) = op.next_event() {
        events.push(event);
    }
    assert!(
        more.is_none() || events.len() == expected.len(),
        "unexpected events: {events:#?}"
    );
    assert!(
        events.windows(2).all(|w| w[0].epoch <= w[1].epoch),
        "epochs in order: {events:#?}"
    );
    let mut got: Vec<_> = events
        .iter()
        .map(|e| {
            (
                e.event_type,
                e.epoch,
                e.values.clone(),
                e.pre_values.clone(),
            )
        })
        .collect();
    let key = |x: &Change| (x.1, format!("{:?}", x.0), format!("{:?}{:?}", x.2, x.3));
    got.sort_by_key(key);
    expected.sort_by_key(key);
    assert_eq!(
        got, expected,
        "every committed change once, in its commit's epoch"
    );
    // The client statistics counted the changes as they came (from each node that sent
    // them), the epochs' ends, and their bytes.
    let stats = api.client_stats();
    let data = stats[ClientStat::DataEventsRecvdCount];
    assert!(data >= expected.len() as u64, "{stats:?}");
    assert!(stats[ClientStat::NonDataEventsRecvdCount] > 0, "{stats:?}");
    assert!(
        stats[ClientStat::EventBytesRecvdCount] > data * 8,
        "{stats:?}"
    );

    // Dropping the table ends the subscription, after the changes committed before it (in
    // an epoch not complete when the drop came).
    let gci = commit(&api, |t| {
        t.update(&table, &[Value::UInt32(6)], &[(1, Value::Int64(66))])
            .unwrap();
    });
    api.drop_table("ev_basic").expect("drop table");
    let mut last = Vec::new();
    gather(&mut op, &mut last, "the drop", |e| {
        e.iter().any(|x| x.event_type == EventType::Drop)
    });
    let kinds: Vec<_> = last.iter().map(|e| (e.event_type, e.epoch)).collect();
    assert_eq!(
        kinds,
        [(EventType::Update, gci), (EventType::Drop, kinds[1].1)],
        "the last change, then the drop: {last:#?}"
    );
    assert_eq!(last[0].values, Some(row(6, 66)));
    let after = op.poll_events(Duration::from_millis(10));
    assert!(
        after.is_err(),
        "an operation whose table was dropped ends: {after:?}"
    );
}

#[test]
fn data_nodes_killed_and_restarted_in_turn_under_a_writer_lose_and_repeat_no_change() {
    // Node 1 is the master (global checkpoints) and president: its takeover too.
    let spec = ClusterSpec::new().data_nodes(2).replicas(2).api_slots(8);
    kills_under_a_writer(spec, &[NodeId(2), NodeId(1), NodeId(2)]);
}

#[test]
fn four_data_nodes_killed_in_turn_lose_and_repeat_no_change() {
    let spec = ClusterSpec::new().data_nodes(4).replicas(2).api_slots(8);
    kills_under_a_writer(spec, &[NodeId(1), NodeId(3), NodeId(2), NodeId(4)]);
}

/// A writer updates rows while each of `kills` in turn is SIGKILLed, the others serve, and it
/// is started again; the subscriber then holds every acknowledged value once, in order per key.
fn kills_under_a_writer(spec: ClusterSpec, kills: &[NodeId]) {
    let mut cluster = TestCluster::start(spec).expect("start the data nodes");
    let api = cluster.connect().expect("connect");
    let table = recreate_table(&api, &counters_def("ev_kill")).expect("create table");
    const KEYS: u32 = 16;
    let opening: Vec<Vec<Value>> = (0..KEYS).map(|id| row(id, 0)).collect();
    let mut t = api.start_transaction().unwrap();
    for r in &opening {
        t.insert(&table, r).unwrap();
    }
    t.execute(ExecType::Commit).unwrap();
    let mut op = api.create_event_operation(&table).expect("subscribe");

    // The writer sets the keys in turn to ever larger values; acknowledged ones are recorded.
    let acked: Mutex<BTreeMap<u32, Vec<(i64, u64)>>> = Mutex::new(BTreeMap::new());
    let stop = AtomicBool::new(false);
    let mut events = Vec::new();
    // What the test did when, for a failure's message.
    let started = Instant::now();
    let mut timeline: Vec<String> = Vec::new();
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| write_until(&api, &table, &acked, &stop, Until::Stopped));
        let acked_count = || acked.lock().unwrap().values().map(Vec::len).sum::<usize>();
        let all = cluster.data_node_ids().len();
        let result = (|| {
            wait_until("writes before the first kill", RESTART_TIMEOUT, || {
                take(&mut op, &mut events);
                Ok((acked_count() >= 200).then_some(()))
            })?;
            for &node in kills {
                // Every node's subscription covers what is not handed out yet, right before
                // the kill: else the epochs between would be Inconsistent (see docs/events.md;
                // a subscription redone since the last check starts later).
                wait_until("every subscription covering", RESTART_TIMEOUT, || {
                    take(&mut op, &mut events);
                    Ok((op.data_nodes().len() == all).then_some(()))
                })?;
                timeline.push(format!(
                    "{:?}: kill {node} (last event's epoch {:#x}, {} events)",
                    started.elapsed(),
                    events.last().map_or(0, |e| e.epoch),
                    events.len()
                ));
                let mut poll = || take(&mut op, &mut events);
                kill_and_restart(&mut cluster, node, 200, &acked_count, &mut poll)?;
                timeline.push(format!("{:?}: {node} restarted", started.elapsed()));
                // Subscribed again there before its partner may fail: else the epochs between
                // would be Inconsistent (see docs/events.md).
                wait_until(
                    "the subscription on the restarted node",
                    RESTART_TIMEOUT,
                    || {
                        take(&mut op, &mut events);
                        Ok((op.data_nodes().len() == all).then_some(()))
                    },
                )?;
                timeline.push(format!(
                    "{:?}: {node} subscribed again (last event's epoch {:#x})",
                    started.elapsed(),
                    events.last().map_or(0, |e| e.epoch)
                ));
                let before = acked_count();
                wait_until("writes after the restart", RESTART_TIMEOUT, || {
                    take(&mut op, &mut events);
                    Ok((acked_count() >= before + 200).then_some(()))
                })?;
            }
            Ok::<(), anyhow::Error>(())
        })();
        stop.store(true, Ordering::Relaxed);
        writer.join().expect("writer");
        result.expect("kill and restart under the writer");
    });

    // Every acknowledged value arrives, once, in order per key.
    let acked = acked.into_inner().unwrap();
    let last = last_acked(&acked);
    gather(
        &mut op,
        &mut events,
        "every acknowledged change",
        |events| {
            let mut newest: BTreeMap<u32, i64> = BTreeMap::new();
            for e in events {
                if let Some(values) = &e.values {
                    if let (Value::UInt32(k), Value::Int64(v)) = (&values[0], &values[1]) {
                        newest.insert(*k, *v);
                    }
                }
            }
            last.iter()
                .all(|(k, v)| newest.get(k).is_some_and(|n| n >= v))
        },
    );
    eprintln!(
        "{} acknowledged writes, {} events",
        acked.values().map(Vec::len).sum::<usize>(),
        events.len()
    );
    let inconsistent: Vec<(String, u32)> = (events.iter())
        .filter(|e| e.event_type == EventType::Inconsistent)
        .map(|e| (format!("{:#x}", e.epoch), e.fragment))
        .collect();
    assert!(
        inconsistent.is_empty(),
        "a replica survived: no epoch lacks a fragment; Inconsistent (epoch, fragment): \
         {inconsistent:?}; steps: {timeline:#?}"
    );
    assert!(
        events.windows(2).all(|w| w[0].epoch <= w[1].epoch),
        "epochs in order"
    );
    let mut seen: BTreeMap<u32, Vec<i64>> = BTreeMap::new();
    let mut epoch_of: BTreeMap<i64, u64> = BTreeMap::new();
    for e in &events {
        assert_eq!(e.event_type, EventType::Update, "{e:?}");
        let (Some(values), Some(pre)) = (&e.values, &e.pre_values) else {
            panic!("an update has both images: {e:?}");
        };
        let (Value::UInt32(k), Value::Int64(v)) = (&values[0], &values[1]) else {
            panic!("{values:?}");
        };
        let Value::Int64(p) = &pre[1] else {
            panic!("{pre:?}")
        };
        let history = seen.entry(*k).or_default();
        assert_eq!(
            *p,
            history.last().copied().unwrap_or(0),
            "key {k}: the image before is the last one seen"
        );
        history.push(*v);
        epoch_of.insert(*v, e.epoch);
    }
    for (k, values) in &acked {
        let history = seen.get(k).cloned().unwrap_or_default();
        assert!(
            history.windows(2).all(|w| w[1] > w[0]),
            "key {k}: each value once, in order: {history:?}"
        );
        for (v, gci) in values {
            assert_eq!(
                epoch_of.get(v),
                Some(gci),
                "key {k}: acknowledged value {v} arrived, in the epoch its commit returned"
            );
        }
    }
}

/// Each key's last acknowledged value.
fn last_acked(acked: &BTreeMap<u32, Vec<(i64, u64)>>) -> BTreeMap<u32, i64> {
    (acked.iter())
        .map(|(k, v)| (*k, v.last().expect("a value").0))
        .collect()
}

/// Hands what `op` completes within 50 ms to `events`.
fn take(op: &mut EventOperation<'_>, events: &mut Vec<EventData>) {
    if op
        .poll_events(Duration::from_millis(50))
        .expect("poll events")
        .is_some()
    {
        while let Some(event) = op.next_event() {
            events.push(event);
        }
    }
}

/// SIGKILLs data node `node`, waits for `writes` more acknowledged writes (`acked` counts
/// them), starts the node again and waits for its node restart, calling `poll` (the
/// subscriber) all along.
fn kill_and_restart(
    cluster: &mut TestCluster,
    node: NodeId,
    writes: usize,
    acked: &dyn Fn() -> usize,
    poll: &mut dyn FnMut(),
) -> anyhow::Result<()> {
    cluster.kill_node(node)?;
    let before = acked();
    wait_until("writes after the kill", RESTART_TIMEOUT, || {
        poll();
        Ok((acked() >= before + writes).then_some(()))
    })?;
    cluster.restart_node(node)?;
    wait_until("the node restart", RESTART_TIMEOUT, || {
        poll();
        Ok(cluster
            .log(node)
            .contains("node restart complete")
            .then_some(()))
    })
}

/// When [`write_until`] stops.
#[derive(Clone, Copy, PartialEq)]
enum Until {
    /// Once the flag is set.
    Stopped,
    /// Once a write fails after the flag is set (the table is being dropped).
    Refused,
}

/// Updates the keys in turn, one a transaction, each to a value larger than any before,
/// until `flag` says (see [`Until`]); records each acknowledged value with its commit's GCI.
fn write_until(
    api: &Cluster,
    table: &Table,
    acked: &Mutex<BTreeMap<u32, Vec<(i64, u64)>>>,
    flag: &AtomicBool,
    until: Until,
) {
    // Every attempt writes a value never written before, so a commit whose answer was lost
    // (its node failed) and the retry after it are two changes with two values.
    let mut v = 0;
    let mut k = 0;
    while until == Until::Refused || !flag.load(Ordering::Relaxed) {
        v += 1;
        let result = (|| {
            let mut t = api.start_transaction()?;
            t.update(table, &[Value::UInt32(k)], &[(1, Value::Int64(v))])?;
            t.execute(ExecType::Commit)?;
            Ok::<u64, rndb_api::Error>(t.gci().expect("a writing commit has a GCI"))
        })();
        match result {
            Ok(gci) => {
                acked.lock().unwrap().entry(k).or_default().push((v, gci));
                k = (k + 1) % 16;
            }
            Err(_) if until == Until::Refused && flag.load(Ordering::Relaxed) => return,
            Err(e) => {
                assert!(e.is_temporary(), "write: {e}");
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

#[test]
fn subscriptions_past_the_config_limits_are_refused_with_1422() {
    let cluster = TestCluster::start(
        ClusterSpec::new()
            .data_nodes(2)
            .replicas(2)
            .data_node_param("MaxNoOfSubscribers", "2")
            .data_node_param("MaxNoOfSubscriptions", "1"),
    )
    .expect("start the data nodes");
    let api = cluster.connect().expect("connect");
    let a = recreate_table(&api, &counters_def("ev_limit_a")).expect("create table");
    let b = recreate_table(&api, &counters_def("ev_limit_b")).expect("create table");
    let first = api.create_event_operation(&a).expect("first subscription");
    let refused = api.create_event_operation(&b).map(|_| ());
    let e = refused.expect_err("a second table's subscription: MaxNoOfSubscriptions=1");
    assert_eq!(e.code(), Some(1422), "{e}");
    assert!(e.to_string().contains("MaxNoOfSubscriptions"), "{e}");
    let second = api
        .create_event_operation(&a)
        .expect("second subscriber of the table");
    let e = api
        .create_event_operation(&a)
        .map(|_| ())
        .expect_err("MaxNoOfSubscribers=2");
    assert_eq!(e.code(), Some(1422), "{e}");
    assert!(e.to_string().contains("MaxNoOfSubscribers"), "{e}");
    // Dropped operations give their places back.
    drop(first);
    drop(second);
    wait_until("the subscriptions to end", EVENTS_TIMEOUT, || {
        Ok(api.create_event_operation(&b).ok().map(|_| ()))
    })
    .expect("subscribe to the other table once the first ended");
}

#[test]
fn an_operation_that_outgrows_its_event_buffer_fails_with_4734_and_the_links_serve_on() {
    let cluster = TestCluster::start(ClusterSpec::new().data_nodes(2).replicas(2))
        .expect("start the data nodes");
    let api = cluster.connect().expect("connect");
    let table = recreate_table(&api, &counters_def("ev_overflow")).expect("create table");
    let mut op = api.create_event_operation(&table).expect("subscribe");
    op.set_buffer_max(4096);
    commit(&api, |t| {
        for id in 0..500 {
            t.insert(&table, &row(id, 7)).unwrap();
        }
    });
    let deadline = Instant::now() + EVENTS_TIMEOUT;
    let error = loop {
        match op.poll_events(Duration::from_millis(200)) {
            Err(e) => break e,
            Ok(_) => {
                while op.next_event().is_some() {}
                assert!(
                    Instant::now() < deadline,
                    "no overflow within {EVENTS_TIMEOUT:?}"
                );
            }
        }
    };
    assert_eq!(error.code(), Some(4734), "{error}");
    assert!(
        op.poll_events(Duration::ZERO).is_err(),
        "the operation stays ended"
    );
    // The overflow cost the operation only: the links go on serving.
    let read = rndb_tests::ops::read_committed(&api, &table, &[Value::UInt32(9)]).expect("read");
    assert_eq!(read, row(9, 7));
    let mut again = api.create_event_operation(&table).expect("subscribe again");
    commit(&api, |t| {
        t.update(&table, &[Value::UInt32(9)], &[(1, Value::Int64(8))])
            .unwrap();
    });
    let mut events = Vec::new();
    gather(&mut again, &mut events, "the next change", |e| {
        !e.is_empty()
    });
    assert_eq!(events[0].values, Some(row(9, 8)));
}

#[test]
fn a_table_dropped_under_a_writer_on_two_node_groups_hands_out_every_acknowledged_change() {
    let cluster = TestCluster::start(ClusterSpec::new().data_nodes(4).replicas(2).api_slots(8))
        .expect("start the data nodes");
    let api = cluster.connect().expect("connect");
    let table = recreate_table(&api, &counters_def("ev_drop4")).expect("create table");
    let mut t = api.start_transaction().unwrap();
    for id in 0..16 {
        t.insert(&table, &row(id, 0)).unwrap();
    }
    t.execute(ExecType::Commit).unwrap();
    let mut op = api.create_event_operation(&table).expect("subscribe");
    // The writer goes on until the drop refuses its writes (every key, both node groups).
    let acked: Mutex<BTreeMap<u32, Vec<(i64, u64)>>> = Mutex::new(BTreeMap::new());
    let dropping = AtomicBool::new(false);
    let mut events = Vec::new();
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| write_until(&api, &table, &acked, &dropping, Until::Refused));
        wait_until("writes before the drop", EVENTS_TIMEOUT, || {
            Ok((acked.lock().unwrap().values().map(Vec::len).sum::<usize>() >= 300).then_some(()))
        })
        .expect("writes");
        dropping.store(true, Ordering::Relaxed);
        api.drop_table("ev_drop4").expect("drop table");
        writer.join().expect("writer");
    });
    gather(&mut op, &mut events, "the drop", |e| {
        e.iter().any(|x| x.event_type == EventType::Drop)
    });
    assert_eq!(events.last().map(|e| e.event_type), Some(EventType::Drop));
    assert!(
        !events
            .iter()
            .any(|e| e.event_type == EventType::Inconsistent),
        "{events:#?}"
    );
    let mut epoch_of: BTreeMap<i64, u64> = BTreeMap::new();
    for e in events.iter().filter(|e| e.event_type == EventType::Update) {
        if let Some([_, Value::Int64(v)]) = e.values.as_deref() {
            assert!(epoch_of.insert(*v, e.epoch).is_none(), "value {v} twice");
        }
    }
    // DROP TABLE waits for the transactions holding the table's rows: every acknowledged
    // change, those acknowledged while the drop waited too, is handed out before the drop.
    for (v, gci) in acked.into_inner().unwrap().values().flatten() {
        assert_eq!(
            epoch_of.get(v),
            Some(gci),
            "acknowledged value {v} handed out before the drop, in its commit's epoch"
        );
    }
}

fn docs_def(name: &str) -> TableDef {
    TableDef::new(
        name,
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("v", ColumnType::Int64),
            ColumnDef::nullable("body", ColumnType::Blob(BlobSize::Blob)),
            ColumnDef::nullable("note", ColumnType::Text(BlobSize::Tiny)),
        ],
    )
}

/// A row of `docs_def` with a body of `len` bytes (seeded) and a short note.
fn doc(id: u32, v: i64, len: usize, seed: u8) -> Vec<Value> {
    vec![
        Value::UInt32(id),
        Value::Int64(v),
        Value::Varbinary((0..len).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()),
        Value::Varchar(format!("note {id} {seed}")),
    ]
}

/// The next events of a merged operation, up to and with the first of epoch `gci`.
fn through_epoch(op: &mut EventOperation<'_>, gci: u64, what: &str) -> Vec<EventData> {
    let mut events = Vec::new();
    gather(op, &mut events, what, |e| e.iter().any(|e| e.epoch >= gci));
    events
}

#[test]
fn merged_events_carry_whole_long_values_and_one_event_a_row_an_epoch() {
    let cluster = TestCluster::start(ClusterSpec::new().data_nodes(2).replicas(2))
        .expect("start the data nodes");
    let api = cluster.connect().expect("connect");
    let table = recreate_table(&api, &docs_def("ev_docs")).expect("create table");
    let mut op = api
        .create_event_operation_merged(&table)
        .expect("subscribe, merged");
    let key = |id: u32| [Value::UInt32(id)];

    // Each change in an epoch of its own (the next commits once the last epoch is handed
    // out): a value of several parts, a shorter one, one left as it was, a delete.
    let long = doc(1, 0, 7000, 1);
    let gci = commit(&api, |t| {
        t.insert(&table, &long).unwrap();
    });
    let events = through_epoch(&mut op, gci, "the insert");
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0].event_type, EventType::Insert);
    assert_eq!(events[0].values.as_deref(), Some(&long[..]), "whole values");
    assert!(events[0].blobs_undefined.is_empty());

    let short = doc(1, 1, 600, 2);
    let gci = commit(&api, |t| {
        t.update(
            &table,
            &key(1),
            &[(1, short[1].clone()), (2, short[2].clone())],
        )
        .unwrap();
    });
    let events = through_epoch(&mut op, gci, "the update of the value");
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0].event_type, EventType::Update);
    assert_eq!(
        events[0].pre_values.as_deref(),
        Some(&long[..]),
        "old value whole"
    );
    let mut after = short.clone();
    after[3] = long[3].clone();
    assert_eq!(
        events[0].values.as_deref(),
        Some(&after[..]),
        "new value whole"
    );

    let gci = commit(&api, |t| {
        t.update(&table, &key(1), &[(1, Value::Int64(2))]).unwrap();
    });
    let events = through_epoch(&mut op, gci, "the update that leaves the value");
    assert_eq!(events.len(), 1, "{events:#?}");
    let e = &events[0];
    assert_eq!(
        e.blobs_undefined,
        vec![2],
        "the body with parts is not in the epoch"
    );
    let (values, pre) = (e.values.as_ref().unwrap(), e.pre_values.as_ref().unwrap());
    assert_eq!((&values[2], &pre[2]), (&Value::Null, &Value::Null));
    assert_eq!((&values[1], &pre[1]), (&Value::Int64(2), &Value::Int64(1)));
    assert_eq!(values[3], long[3], "a TINY value is whole in its head");

    let gci = commit(&api, |t| {
        t.delete(&table, &key(1)).unwrap();
    });
    let events = through_epoch(&mut op, gci, "the delete");
    let mut deleted = after.clone();
    deleted[1] = Value::Int64(2);
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0].event_type, EventType::Delete);
    assert_eq!(events[0].pre_values.as_deref(), Some(&deleted[..]));

    // Changes of one row in one epoch come as one event: an insert then an update is an
    // insert of the last values; an insert then a delete is nothing. Commits back to back
    // share an epoch most of the time; what is expected follows the GCIs they returned.
    let first = doc(2, 0, 9000, 3);
    let last = doc(2, 5, 3000, 4);
    let gci_insert = commit(&api, |t| {
        t.insert(&table, &first).unwrap();
        t.insert(&table, &doc(3, 0, 5000, 5)).unwrap();
    });
    let gci_update = commit(&api, |t| {
        t.update(
            &table,
            &key(2),
            &[(1, last[1].clone()), (2, last[2].clone())],
        )
        .unwrap();
        t.delete(&table, &key(3)).unwrap();
    });
    let events = through_epoch(&mut op, gci_update, "the changes back to back");
    let mut last_row = last.clone();
    last_row[3] = first[3].clone();
    if gci_insert == gci_update {
        assert_eq!(events.len(), 1, "one epoch: {events:#?}");
        assert_eq!(events[0].event_type, EventType::Insert);
        assert_eq!(events[0].values.as_deref(), Some(&last_row[..]));
    } else {
        let kinds: Vec<(EventType, u64)> = events.iter().map(|e| (e.event_type, e.epoch)).collect();
        assert_eq!(kinds.len(), 4, "two epochs: {events:#?}");
        let update = events.iter().find(|e| e.event_type == EventType::Update);
        let update = update.expect("the update");
        assert_eq!(update.pre_values.as_deref(), Some(&first[..]));
        assert_eq!(update.values.as_deref(), Some(&last_row[..]));
    }
}

/// The body `doc_v` writes for value `v`: from head-only to several parts, by `v`.
fn body_of(v: i64) -> Value {
    let len = (v as usize * 997) % 7000;
    Value::Varbinary((0..len).map(|i| (i as u8) ^ (v as u8)).collect())
}

#[test]
fn merged_events_of_long_values_survive_data_nodes_killed_in_turn() {
    let spec = ClusterSpec::new().data_nodes(2).replicas(2).api_slots(8);
    let mut cluster = TestCluster::start(spec).expect("start the data nodes");
    let api = cluster.connect().expect("connect");
    let table = recreate_table(&api, &docs_def("ev_docs_kill")).expect("create table");
    const KEYS: u32 = 8;
    let mut t = api.start_transaction().unwrap();
    for id in 0..KEYS {
        t.insert(&table, &doc(id, 0, 0, 0)).unwrap();
    }
    t.execute(ExecType::Commit).unwrap();
    let mut op = api
        .create_event_operation_merged(&table)
        .expect("subscribe, merged");

    // The writer sets each key's number and body together, to ever larger numbers; a write
    // that failed (a node killed under it) may have committed all the same.
    let acked: Mutex<BTreeMap<u32, Vec<(i64, u64)>>> = Mutex::new(BTreeMap::new());
    let unknown: Mutex<BTreeSet<i64>> = Mutex::new(BTreeSet::new());
    let stop = AtomicBool::new(false);
    let mut events = Vec::new();
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let (mut v, mut k) = (0, 0);
            while !stop.load(Ordering::Relaxed) {
                v += 1;
                let result = (|| {
                    let mut t = api.start_transaction()?;
                    let set = [(1, Value::Int64(v)), (2, body_of(v))];
                    t.update(&table, &[Value::UInt32(k)], &set)?;
                    t.execute(ExecType::Commit)?;
                    Ok::<u64, rndb_api::Error>(t.gci().expect("a writing commit has a GCI"))
                })();
                match result {
                    Ok(gci) => {
                        acked.lock().unwrap().entry(k).or_default().push((v, gci));
                        k = (k + 1) % KEYS;
                    }
                    Err(e) => {
                        assert!(e.is_temporary(), "write: {e}");
                        unknown.lock().unwrap().insert(v);
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
            }
        });
        let acked_count = || acked.lock().unwrap().values().map(Vec::len).sum::<usize>();
        let result = (|| {
            for node in [NodeId(2), NodeId(1)] {
                let before = acked_count();
                wait_until("writes before the kill", RESTART_TIMEOUT, || {
                    take(&mut op, &mut events);
                    Ok((acked_count() >= before + 100 && op.data_nodes().len() == 2).then_some(()))
                })?;
                let mut poll = || take(&mut op, &mut events);
                kill_and_restart(&mut cluster, node, 100, &acked_count, &mut poll)?;
            }
            Ok::<(), anyhow::Error>(())
        })();
        stop.store(true, Ordering::Relaxed);
        writer.join().expect("writer");
        result.expect("kill and restart under the writer");
    });

    // Each epoch's last acknowledged value of each key arrives whole, in that epoch, with
    // the value before it whole too: the last one of the epoch before.
    let acked = acked.into_inner().unwrap();
    let mut last_of_epoch: BTreeMap<(u32, u64), i64> = BTreeMap::new();
    for (k, values) in &acked {
        for (v, gci) in values {
            let last = last_of_epoch.entry((*k, *gci)).or_default();
            *last = (*last).max(*v);
        }
    }
    let newest = last_acked(&acked);
    gather(
        &mut op,
        &mut events,
        "every acknowledged change",
        |events| {
            newest.iter().all(|(k, v)| {
                events.iter().any(|e| {
                    e.values.as_ref().is_some_and(|values| {
                        values[0] == Value::UInt32(*k) && values[1] == Value::Int64(*v)
                    })
                })
            })
        },
    );
    assert!(
        events.windows(2).all(|w| w[0].epoch <= w[1].epoch),
        "epochs in order"
    );
    let mut seen: BTreeMap<(u32, u64), i64> = BTreeMap::new();
    let mut before: BTreeMap<u32, i64> = BTreeMap::new();
    for e in &events {
        assert_eq!(e.event_type, EventType::Update, "a replica survived: {e:?}");
        assert!(
            e.blobs_undefined.is_empty(),
            "each update wrote the body: {e:?}"
        );
        let (Some(values), Some(pre)) = (&e.values, &e.pre_values) else {
            panic!("an update has both images: {e:?}");
        };
        let (Value::UInt32(k), Value::Int64(v), Value::Int64(p)) =
            (&values[0], &values[1], &pre[1])
        else {
            panic!("{values:?} {pre:?}");
        };
        assert_eq!(values[2], body_of(*v), "key {k}: the body of {v}, whole");
        let old_body = if *p == 0 {
            Value::Varbinary(Vec::new())
        } else {
            body_of(*p)
        };
        assert_eq!(pre[2], old_body, "key {k}: the body of {p} before, whole");
        assert_eq!(
            *p,
            before.get(k).copied().unwrap_or(0),
            "key {k}: one event an epoch"
        );
        before.insert(*k, *v);
        assert!(
            seen.insert((*k, e.epoch), *v).is_none(),
            "key {k}: one event in {:#x}",
            e.epoch
        );
    }
    eprintln!(
        "{} acknowledged writes, {} merged events",
        acked.values().map(Vec::len).sum::<usize>(),
        events.len()
    );
    // Each epoch's last acknowledged value of each key, or a later one whose answer was
    // lost; nothing else.
    let unknown = unknown.into_inner().unwrap();
    for (&(k, epoch), &v) in &last_of_epoch {
        let got = seen.get(&(k, epoch)).copied();
        assert!(
            got.is_some_and(|g| g == v || (g > v && unknown.contains(&g))),
            "key {k} in {epoch:#x}: last acknowledged {v}, the event's {got:?}"
        );
    }
    for (&(k, epoch), &v) in &seen {
        assert!(
            last_of_epoch.contains_key(&(k, epoch)) || unknown.contains(&v),
            "key {k}: {v} in {epoch:#x}, neither acknowledged there nor a write whose answer \
             was lost"
        );
    }
}

#[test]
fn named_events_are_kept_for_every_api_node_and_report_their_kinds_of_change() {
    let cluster = TestCluster::start(ClusterSpec::new().data_nodes(2).replicas(2))
        .expect("start the data nodes");
    let api = cluster.connect().expect("connect");
    let table = recreate_table(&api, &counters_def("ev_named")).expect("create table");
    let code = |r: Result<(), rndb_api::Error>| r.err().and_then(|e| e.code());
    assert_eq!(api.list_events().expect("list"), Vec::new(), "none yet");
    assert_eq!(
        api.get_event("nope").err().and_then(|e| e.code()),
        Some(4710)
    );
    assert_eq!(code(api.drop_event("nope")), Some(4710));

    let def = EventDef {
        events: TableEvents::INSERT | TableEvents::DELETE,
        ..EventDef::new("ins_del", "ev_named")
    };
    api.create_event(&def).expect("create the event");
    assert_eq!(code(api.create_event(&def)), Some(746), "the name is taken");
    assert_eq!(
        code(api.create_event(&EventDef::new("other", "no_such_table"))),
        Some(709)
    );
    assert_eq!(
        code(api.create_event(&EventDef::new("", "ev_named"))),
        Some(4708)
    );
    let merged = EventDef {
        merge_events: true,
        ..EventDef::new("all_merged", "ev_named")
    };
    api.create_event(&merged).expect("create the merged event");

    // Another API node sees them.
    let other = cluster.connect().expect("connect another API node");
    assert_eq!(other.get_event("ins_del").expect("get"), def);
    assert_eq!(
        other.list_events().expect("list"),
        vec![merged.clone(), def.clone()]
    );

    // Its operation hands out inserts and deletes, not updates.
    let mut op = other
        .create_event_operation_for("ins_del")
        .expect("subscribe to the event");
    let mut all = api
        .create_event_operation_for("all_merged")
        .expect("subscribe to the merged event");
    commit(&api, |t| t.insert(&table, &row(1, 10)).map(|_| ()).unwrap());
    commit(&api, |t| {
        t.update(&table, &[Value::UInt32(1)], &[(1, Value::Int64(11))])
            .map(|_| ())
            .unwrap()
    });
    let gci = commit(&api, |t| {
        t.delete(&table, &[Value::UInt32(1)]).map(|_| ()).unwrap()
    });
    let mut events = Vec::new();
    gather(&mut op, &mut events, "the named event's changes", |e| {
        e.iter().any(|e| e.epoch >= gci)
    });
    let kinds: Vec<EventType> = events.iter().map(|e| e.event_type).collect();
    assert_eq!(kinds, [EventType::Insert, EventType::Delete], "{events:#?}");
    // The merged one makes one event of row 1's changes in an epoch (none when all three
    // shared one), then row 2's insert.
    let gci = commit(&api, |t| t.insert(&table, &row(2, 20)).map(|_| ()).unwrap());
    let mut merged_events = Vec::new();
    gather(
        &mut all,
        &mut merged_events,
        "the merged event's changes",
        |e| e.iter().any(|e| e.epoch >= gci),
    );
    let last = merged_events.last().expect("row 2's insert");
    assert_eq!(
        (last.event_type, last.values.clone()),
        (EventType::Insert, Some(row(2, 20)))
    );
    let mut epochs: Vec<u64> = merged_events.iter().map(|e| e.epoch).collect();
    epochs.dedup();
    assert_eq!(
        epochs.len(),
        merged_events.len(),
        "one event a row an epoch: {merged_events:#?}"
    );

    // A merged event of updates only filters before it merges: an insert and an update of
    // row 3, in one epoch or two, come as the update alone.
    let updates = EventDef {
        events: TableEvents::UPDATE,
        merge_events: true,
        ..EventDef::new("upd_merged", "ev_named")
    };
    api.create_event(&updates)
        .expect("create the updates' event");
    let mut upd = api
        .create_event_operation_for("upd_merged")
        .expect("subscribe to the updates' event");
    commit(&api, |t| t.insert(&table, &row(3, 30)).map(|_| ()).unwrap());
    let gci = commit(&api, |t| {
        t.update(&table, &[Value::UInt32(3)], &[(1, Value::Int64(31))])
            .map(|_| ())
            .unwrap()
    });
    let mut events = Vec::new();
    gather(&mut upd, &mut events, "the update", |e| {
        e.iter().any(|e| e.epoch >= gci)
    });
    let got: Vec<_> = (events.iter())
        .map(|e| (e.event_type, e.values.clone(), e.pre_values.clone()))
        .collect();
    assert_eq!(
        got,
        [(EventType::Update, Some(row(3, 31)), Some(row(3, 30)))]
    );
    let long = "x".repeat(200);
    assert_eq!(
        api.get_event(&long).err().and_then(|e| e.code()),
        Some(4710)
    );

    api.drop_event("ins_del").expect("drop the event");
    assert_eq!(
        other.get_event("ins_del").err().and_then(|e| e.code()),
        Some(4710)
    );
    assert_eq!(
        other
            .create_event_operation_for("ins_del")
            .err()
            .and_then(|e| e.code()),
        Some(4710)
    );
    assert_eq!(other.list_events().expect("list"), vec![merged, updates]);
}
