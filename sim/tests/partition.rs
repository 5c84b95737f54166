//! Partitions are a fault the simulated cluster does not handle yet: its clients do not
//! arbitrate (no API node has ArbitrationRank, so arbitration is off, as Disabled), so data
//! nodes cut from each other each take the other for failed and serve alone (two primaries for
//! one partition). This test runs the workloads under partitions; it is ignored until the
//! simulator runs an arbitrator, so that the gap is listed with every test run, not hidden.

use rndb_sim::{run_seed, Fault, Options, Workload};

#[test]
#[ignore = "not handled yet: the simulator runs no arbitrator, so a split leaves two sides serving (split brain breaks the bank and linearizability)"]
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
