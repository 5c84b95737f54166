//! Partitions are a fault today's cluster does not handle: with no heartbeats and no
//! arbitration, data nodes cut from each other each take the other for failed and serve alone
//! (two primaries for one partition), and a one-way cut leaves a link up that carries nothing.
//! This test runs the workloads under partitions; it is ignored until arbitration lands, so
//! that the gap is listed with every test run, not hidden.

use rndb_sim::{run_seed, Fault, Options, Workload};

#[test]
#[ignore = "not handled yet: partitions need heartbeats and arbitration (split brain breaks the bank and linearizability, one-way cuts hang)"]
fn partitions_keep_the_bank_and_the_registers_correct() {
    let options = Options {
        workload: Workload::All,
        faults: vec![Fault::Partition],
        trace: false,
        sabotage: None,
    };
    let failures: Vec<String> = (0..200)
        .filter_map(|seed| run_seed(seed, &options).err())
        .map(|f| f.to_string())
        .collect();
    assert!(
        failures.is_empty(),
        "{} of 200 seeds failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
