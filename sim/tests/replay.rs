//! A seed replays exactly: two runs in one process deliver the same frames at the same
//! simulated times (equal trace hashes), different seeds make different runs, and the knobs a
//! seed draws depend on nothing else.

use rndb_sim::{run_seed, run_seed_checked, Fault, Options, Workload};

/// The faults whose handling is deterministic in today's kernel (all but data-node crashes).
fn without_crashes(workload: Workload) -> Options {
    Options {
        workload,
        faults: vec![Fault::Client, Fault::Slow, Fault::ApiLink, Fault::Buggify],
        trace: false,
        sabotage: None,
    }
}

#[test]
fn a_seed_replays_identically() {
    for workload in [Workload::Bank, Workload::Registers, Workload::All] {
        let options = without_crashes(workload);
        for seed in 0..40 {
            let first = run_seed(seed, &options).expect("passes");
            let second = run_seed(seed, &options).expect("passes");
            assert_eq!(
                (first.trace_hash, first.steps, first.sim_ns),
                (second.trace_hash, second.steps, second.sim_ns),
                "seed {seed:#x} ({workload:?}) did not replay"
            );
            assert!(first.frames > 100);
        }
    }
}

#[test]
fn different_seeds_make_different_runs() {
    let options = without_crashes(Workload::All);
    let a = run_seed(1, &options).expect("passes");
    let b = run_seed(2, &options).expect("passes");
    assert_ne!(a.trace_hash, b.trace_hash);
    assert_eq!(
        a.knobs.to_string(),
        run_seed(1, &options).expect("passes").knobs.to_string()
    );
}

/// Data-node failure handling sends TC_FAIL_QUERY for the failed coordinator's transactions in
/// the iteration order of `Dist::foreign`, a `hashbrown::HashMap` with a random hasher
/// (`on_data_node_lost`, ndbd/src/blocks/dist.rs): two runs of one seed send the same queries
/// in different orders. Found by this simulator: about 3 % of seeds with crashes (`scripts/sim
/// --seeds 1000` lists them, each with the delivered frame where its two runs part; `--trace`
/// prints both runs). The leak is being removed with the blocks' restructuring.
#[test]
#[ignore = "kernel leak: on_data_node_lost iterates Dist::foreign (hashbrown, random order) to send TC_FAIL_QUERY"]
fn a_seed_with_data_node_crashes_replays_identically() {
    let options = Options {
        workload: Workload::All,
        faults: vec![Fault::Crash],
        trace: false,
        sabotage: None,
    };
    let failures: Vec<String> = (0..200)
        .filter_map(|seed| run_seed_checked(seed, &options).err())
        .map(|f| f.to_string())
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
