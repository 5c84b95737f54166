//! Primaries move back after node restarts over hundreds of seeds: crashed data nodes start
//! again, rejoin last in every chain, and once started take their config place again through a
//! switch round, while the bank, the registers (linearizable) and the sets stay correct and,
//! at the end, every data node that serves orders the chains alike.

use rndb_sim::{run_seeds, Fault, Options, Workload};

#[test]
fn restarted_nodes_take_their_primaries_back_and_every_history_stays_correct() {
    let options = Options {
        workload: Workload::All,
        faults: vec![Fault::Crash, Fault::Restart, Fault::Slow, Fault::Client],
        trace: false,
        sabotage: None,
        replicas: 2,
        durable_commits: false,
    };
    let reports = run_seeds(20000, 300, &options).unwrap_or_else(|failures| panic!("{failures}"));
    let total = |kind: &str| -> u64 {
        reports
            .iter()
            .map(|r| r.faults.get(kind).copied().unwrap_or(0))
            .sum()
    };
    assert!(total("node restart") > 50, "{}", total("node restart"));
    assert!(
        total("primaries moved back") > 20,
        "{}",
        total("primaries moved back")
    );
}
