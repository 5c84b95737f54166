//! Partitions of the data nodes (links cut both ways, or one way until an end is declared
//! failed) keep the bank and the registers correct over hundreds of seeds: client 0
//! arbitrates, only one side goes on, the losing side stops (2305 or 2315) and, with node
//! restarts on, rejoins; nothing acknowledged is lost and no stale side serves. Slow links,
//! client deaths, API link drops and BUGGIFY come on top in the second test, and every fault
//! kind at once (crashes, hangs, disk faults and cluster crashes too) in the third.

use rndb_sim::{run_seeds, Fault, Options, Report, Workload};

fn run_many(faults: Vec<Fault>, start: u64, count: u64) -> Vec<Report> {
    let options = Options {
        workload: Workload::All,
        faults,
        trace: false,
        sabotage: None,
        replicas: 2,
        durable_commits: false,
    };
    run_seeds(start, count, &options).unwrap_or_else(|failures| panic!("{failures}"))
}

fn total(reports: &[Report], kind: &str) -> u64 {
    reports
        .iter()
        .map(|r| r.faults.get(kind).copied().unwrap_or(0))
        .sum()
}

#[test]
fn partitions_keep_the_bank_and_the_registers_correct_and_the_losers_rejoin() {
    let reports = run_many(vec![Fault::Partition, Fault::Restart], 0, 200);
    // The seeds did split the cluster, sides did stop, and stopped nodes came back.
    assert!(total(&reports, "partition (two-way)") > 20);
    assert!(total(&reports, "partition (one-way)") > 20);
    assert!(total(&reports, "data node stopped (expected)") > 20);
    assert!(total(&reports, "node restart") > 20);
}

#[test]
fn partitions_with_slow_links_client_deaths_and_buggify_stay_correct() {
    run_many(
        vec![
            Fault::Partition,
            Fault::Restart,
            Fault::Slow,
            Fault::Client,
            Fault::ApiLink,
            Fault::Buggify,
        ],
        5000,
        150,
    );
}

#[test]
fn partitions_with_every_other_fault_stay_correct() {
    let mut faults = Fault::HANDLED.to_vec();
    faults.extend([Fault::Partition, Fault::CrashStarting]);
    let reports = run_many(faults, 9000, 300);
    // Both kinds of partitions happened beside crashes.
    assert!(total(&reports, "partition (two-way)") + total(&reports, "partition (one-way)") > 10);
    assert!(total(&reports, "crash (sent frames lost)") > 10);
}
