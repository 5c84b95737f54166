//! Proves that the order-entry workload (`testread-perf --workload tpcc`) keeps TPC-C's
//! consistency conditions and its own ledger under every consistency setting on a two-node,
//! two-replica cluster, with its transactions on client threads and as tokio tasks on one
//! thread (`--in-flight async`), and that its checks fail when the data is wrong: a district
//! whose next order id moved, a warehouse whose year-to-date lost a payment, a lost order line.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use rndb_api::{Cluster, ExecType, Value};
use rndb_testread_perf::tpcc::{self, InFlight, Ledger, Scale, Setting, Tables};
use rndb_tests::{ClusterSpec, TestCluster};

const SCALE: Scale = Scale {
    warehouses: 2,
    items: 200,
    customers_per_district: 20,
};
/// How long each setting runs; enough for dozens of transactions, not a measurement.
const RUN: Duration = Duration::from_millis(400);
/// Transactions in flight: enough to contend for the districts and warehouse rows.
const IN_FLIGHT: u32 = 6;
/// The asynchronous run's levels: one task, then more tasks than the threaded runs' threads.
const ASYNC_LEVELS: [u32; 2] = [1, 32];

fn workload(api: &Arc<Cluster>, tables: &Tables, setting: Setting) -> tpcc::Run {
    tpcc::Run {
        cluster: Arc::clone(api),
        tables: tables.clone(),
        scale: SCALE,
        setting,
        duration: RUN,
        seed: 26,
        stop: Arc::new(|| false),
        history_ids: Arc::new(AtomicU64::new(0)),
    }
}

fn run(api: &Arc<Cluster>, tables: &Tables, setting: Setting) -> Ledger {
    let mut ledger = Ledger::default();
    let level = workload(api, tables, setting)
        .level(IN_FLIGHT, InFlight::Threads, &mut ledger)
        .expect("run the workload");
    // A durable setting may commit only a few in the time, maybe all of one kind; the test
    // asks for both kinds over all settings.
    assert!(
        level.new_orders + level.payments > 0,
        "{setting:?}: {level:?}"
    );
    ledger
}

#[test]
fn every_setting_keeps_the_invariants_and_the_checks_catch_damage() {
    let spec = ClusterSpec::new()
        .data_nodes(2)
        .replicas(2)
        .data_memory("64M");
    let cluster = TestCluster::start(spec).expect("start the cluster");
    let api = Arc::new(cluster.connect().expect("connect"));
    let (mut new_orders, mut payments) = (0, 0);
    for setting in Setting::EVERY {
        let tables = tpcc::create_and_load(&api, SCALE, setting.read_backup()).expect("load");
        let ledger = run(&api, &tables, setting);
        let checked = tpcc::check(&api, &tables, SCALE, &ledger)
            .unwrap_or_else(|e| panic!("{setting:?}: {e:#}"));
        let committed: u64 = ledger.new_orders.values().sum();
        assert_eq!(checked.orders, committed, "{setting:?}");
        assert_eq!(checked.payments, ledger.payments.values().sum::<u64>());
        new_orders += checked.orders;
        payments += checked.payments;
    }
    assert!(new_orders > 0 && payments > 0, "{new_orders} {payments}");

    // Tokio tasks on one runtime thread run the same transactions: levels that add to one
    // ledger, then the same checks.
    let tables = tpcc::create_and_load(&api, SCALE, false).expect("load");
    let mut ledger = Ledger::default();
    let tasks = workload(&api, &tables, Setting::Committed);
    for in_flight in ASYNC_LEVELS {
        let level = tasks
            .level(in_flight, InFlight::Async, &mut ledger)
            .expect("run the workload as tasks");
        assert!(level.new_orders + level.payments > 0, "{level:?}");
    }
    let checked = tpcc::check(&api, &tables, SCALE, &ledger).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(checked.orders, ledger.new_orders.values().sum::<u64>());
    assert_eq!(checked.payments, ledger.payments.values().sum::<u64>());
    assert!(checked.orders > 0 && checked.payments > 0, "{checked:?}");

    // The last setting's tables, damaged one way at a time, fail the checks.
    let tables = tpcc::create_and_load(&api, SCALE, false).expect("load");
    let ledger = run(&api, &tables, Setting::Committed);
    tpcc::check(&api, &tables, SCALE, &ledger).expect("undamaged");

    // A New-Order the ledger does not know of: the district's next order id is one ahead.
    let mut more = ledger.clone();
    let key = *ledger
        .new_orders
        .keys()
        .next()
        .expect("a district took orders");
    *more.new_orders.get_mut(&key).expect("district") += 1;
    let e = tpcc::check(&api, &tables, SCALE, &more).expect_err("a New-Order too many");
    assert!(format!("{e:#}").contains("d_next_o_id"), "{e:#}");

    // A payment lost from the warehouse's year-to-date only (W_YTD ≠ Σ D_YTD).
    let mut tx = api.start_transaction().expect("start");
    let w = [Value::UInt32(1)];
    let op = tx
        .read(&tables.warehouse, &w, rndb_api::LockMode::Exclusive)
        .expect("read");
    tx.execute(ExecType::NoCommit).expect("read");
    let Some(Value::Int64(ytd)) = tx.row(op).map(|r| r[4].clone()) else {
        panic!("w_ytd");
    };
    tx.update(&tables.warehouse, &w, &[(4, Value::Int64(ytd - 1))])
        .expect("update");
    tx.execute(ExecType::Commit).expect("commit");
    let e = tpcc::check(&api, &tables, SCALE, &ledger).expect_err("w_ytd off by one");
    assert!(format!("{e:#}").contains("w_ytd"), "{e:#}");
    let mut tx = api.start_transaction().expect("start");
    tx.update(&tables.warehouse, &w, &[(4, Value::Int64(ytd))])
        .expect("update");
    tx.execute(ExecType::Commit).expect("commit");
    tpcc::check(&api, &tables, SCALE, &ledger).expect("repaired");

    // An order line gone: Σ O_OL_CNT no longer counts the lines.
    let (w, d) = key;
    let mut tx = api.start_transaction().expect("start");
    tx.delete(
        &tables.order_line,
        &[
            Value::UInt32(w),
            Value::UInt32(d),
            Value::UInt32(1),
            Value::UInt32(1),
        ],
    )
    .expect("delete");
    tx.execute(ExecType::Commit).expect("commit");
    let e = tpcc::check(&api, &tables, SCALE, &ledger).expect_err("a line missing");
    assert!(format!("{e:#}").contains("order lines"), "{e:#}");
}
