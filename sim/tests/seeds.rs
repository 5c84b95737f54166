//! Hundreds of seeds of each workload keep their invariants (the bank's total, linearizable
//! registers and set elements, every request answered) under the faults today's cluster handles: data-node
//! crashes, clients dying mid-transaction, slow links, API links dropping, data nodes pausing,
//! data nodes hanging past the heartbeat bound (declared failed, and stopping when they wake),
//! and BUGGIFY's full send buffers and late ticks. Each seed runs once here (determinism is replay.rs's); the
//! totals at the end show the faults really happened.

use rndb_sim::{run_seeds, Fault, Options, Report, Workload};

/// Seeds per workload. In a debug build (the simulator at opt-level 2, the kernel at 0, see the
/// workspace Cargo.toml) a seed takes about 30 ms; `scripts/sim --seeds N` runs more.
const SEEDS: u64 = 300;

fn run_many(workload: Workload, start: u64, count: u64) -> Vec<Report> {
    let options = Options {
        workload,
        ..Options::default()
    };
    assert_eq!(options.faults, Fault::DEFAULT.to_vec());
    run_seeds(start, count, &options).unwrap_or_else(|failures| panic!("{failures}"))
}

fn faults(reports: &[Report], kind: &str) -> u64 {
    reports
        .iter()
        .map(|r| r.faults.get(kind).copied().unwrap_or(0))
        .sum()
}

#[test]
fn bank_seeds_keep_the_total_through_crashes_and_dying_clients() {
    let reports = run_many(Workload::Bank, 0, SEEDS);
    let sum = |f: fn(&Report) -> u64| reports.iter().map(f).sum::<u64>();
    let transfers = sum(|r| r.stats.transfers_ok);
    let audits = sum(|r| r.stats.audits_ok);
    assert!(transfers > SEEDS * 20, "{transfers} transfers committed");
    assert!(audits > SEEDS * 5, "{audits} full reads");
    assert!(faults(&reports, "crash (sent frames drain)") > SEEDS / 4);
    assert!(faults(&reports, "crash (sent frames lost)") > SEEDS / 4);
    assert!(faults(&reports, "client death") > SEEDS / 2);
    assert!(faults(&reports, "slow link") > SEEDS / 2);
    assert!(faults(&reports, "api link drop") > SEEDS / 2);
    assert!(faults(&reports, "pause") > SEEDS / 2);
    let hangs = faults(&reports, "hang past the heartbeat bound");
    assert!(hangs > SEEDS / 10, "{hangs} hangs");
    let stopped = faults(&reports, "data node stopped (expected)");
    assert!(
        stopped > SEEDS / 20,
        "{stopped} hung nodes stopped on waking"
    );
    assert!(sum(|r| r.stats.deaths_mid_request) > 10);
    assert!(
        sum(|r| r.stats.transfers_unknown) > 0,
        "no transfer ended unknown"
    );
    assert!(sum(|r| r.overloads) > 0, "BUGGIFY never overloaded a send");
    assert!(reports.iter().any(|r| r.stats.non_master_702));
    // About half the seeds read the bank by table scans (the final read too), under locks
    // and as committed reads, in several batches, and some scans fail under the faults.
    let scanning = reports.iter().filter(|r| r.knobs.scan_reads).count() as u64;
    assert!(scanning > SEEDS / 3, "{scanning} seeds scan");
    assert!(sum(|r| r.stats.scan_audits_locked) > scanning * 3);
    assert!(sum(|r| r.stats.scan_audits_committed) > scanning);
    assert!(sum(|r| r.stats.scan_next_requests) > scanning * 3);
    assert!(sum(|r| r.stats.scan_audits_failed) > scanning / 2);
    // Node failure aborted transactions that were in flight (286 at TC, 4010 for operations
    // sent to the failed node).
    let node_failure_aborts: u64 = reports
        .iter()
        .map(|r| r.stats.errors.get(&286).copied().unwrap_or(0))
        .sum();
    assert!(node_failure_aborts > 0);
}

#[test]
fn register_seeds_stay_linearizable_through_crashes_and_dying_clients() {
    let reports = run_many(Workload::Registers, 1_000_000, SEEDS);
    let sum = |f: fn(&Report) -> u64| reports.iter().map(f).sum::<u64>();
    assert!(sum(|r| r.stats.writes_ok) > SEEDS * 20);
    assert!(sum(|r| r.stats.reads_ok) > SEEDS * 40);
    assert!(
        sum(|r| r.stats.writes_unknown) > 0,
        "no write ended unknown"
    );
    assert!(faults(&reports, "crash (sent frames drain)") > SEEDS / 4);
    assert!(faults(&reports, "crash (sent frames lost)") > SEEDS / 4);
    assert!(faults(&reports, "client death") > SEEDS / 2);
    let undecided: usize = reports.iter().map(|r| r.undecided_keys).sum();
    assert_eq!(undecided, 0, "the checker gave up on some keys");
}

#[test]
fn set_seeds_keep_every_acknowledged_insert_and_delete_through_crashes() {
    let reports = run_many(Workload::Sets, 3_000_000, SEEDS / 3);
    let sum = |f: fn(&Report) -> u64| reports.iter().map(f).sum::<u64>();
    let seeds = SEEDS / 3;
    assert!(sum(|r| r.stats.inserts_ok) > seeds * 10);
    assert!(sum(|r| r.stats.deletes_ok) > seeds * 10);
    // The workload meets both errors it expects.
    assert!(sum(|r| r.stats.inserts_duplicate) > seeds * 5);
    assert!(sum(|r| r.stats.deletes_missing) > seeds * 5);
    assert!(sum(|r| r.stats.set_reads_present) > seeds);
    assert!(sum(|r| r.stats.set_reads_absent) > seeds);
    // Reads through the unique hash index on the value column (TCINDXREQ) find rows.
    assert!(sum(|r| r.stats.index_reads_found) > seeds * 3);
    assert!(
        sum(|r| r.stats.set_ops_unknown) > 0,
        "no set write ended unknown"
    );
    assert!(faults(&reports, "crash (sent frames drain)") > seeds / 4);
    assert!(faults(&reports, "crash (sent frames lost)") > seeds / 4);
    let undecided: usize = reports.iter().map(|r| r.undecided_keys).sum();
    assert_eq!(undecided, 0, "the checker gave up on some elements");
}

#[test]
fn mixed_seeds_pass() {
    run_many(Workload::All, 2_000_000, SEEDS / 3);
}

/// NoOfReplicas=3 (one or two node groups of three data nodes) under the handled faults
/// (disk faults, node restarts and cluster crashes too): chains of three replicas, failures
/// with two survivors in a group, and a node let stop for its disk asking both of its peers
/// first.
#[test]
fn three_replica_seeds_pass_with_every_handled_fault() {
    let options = Options {
        faults: Fault::HANDLED.to_vec(),
        replicas: 3,
        ..Options::default()
    };
    let seeds = SEEDS / 3;
    let reports =
        run_seeds(4_000_000, seeds, &options).unwrap_or_else(|failures| panic!("{failures}"));
    let six = reports.iter().filter(|r| r.knobs.data_nodes == 6).count() as u64;
    assert!(
        six > seeds / 4 && six < seeds * 3 / 4,
        "{six} seeds of 6 data nodes"
    );
    assert!(reports.iter().all(|r| r.knobs.data_nodes % 3 == 0));
    assert!(faults(&reports, "disk fault") > seeds / 4);
    assert!(faults(&reports, "node restart") > seeds / 4);
    assert!(faults(&reports, "crash (sent frames drain)") > seeds / 8);
}

/// NoOfReplicas=3 with `crash-again`: a node group that lost a node to a crash loses a second
/// one once the first failure is handled, and its last member serves alone (with three data
/// nodes, after the arbitrator chose it), alongside node restarts of the two.
#[test]
fn a_three_replica_group_serves_on_after_two_crashes() {
    let mut faults_on = Fault::DEFAULT.to_vec();
    faults_on.push(Fault::CrashAgain);
    let options = Options {
        faults: faults_on,
        replicas: 3,
        ..Options::default()
    };
    let seeds = SEEDS / 3;
    let reports =
        run_seeds(4_100_000, seeds, &options).unwrap_or_else(|failures| panic!("{failures}"));
    assert!(faults(&reports, "second crash in a node group") > seeds / 20);
}
