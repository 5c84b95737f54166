//! Issue 21 item 10 in the simulator: a CREATE TABLE sent to a data node that is not the DICT
//! master is refused with 702, and the client creates its tables on the master, also when its
//! link to the master comes up only later (until then every try meets 702).

use rndb_sim::{run_seed, Options};

#[test]
fn schema_requests_at_a_non_master_get_702_and_are_retried_on_the_master() {
    let options = Options {
        faults: Vec::new(),
        ..Options::default()
    };
    let (mut deliberate, mut late_link) = (0, 0);
    for seed in 0..60 {
        let report = run_seed(seed, &options).expect("passes");
        let refusals = report.stats.errors.get(&702).copied().unwrap_or(0);
        let knobs = &report.knobs;
        // A data node with files starts only once the cluster agreed on its restart GCI, which
        // may take longer than the master link's lateness: then CREATE TABLE finds it up.
        let late_after_start =
            knobs.master_link_late_ns > if knobs.durable { 50_000_000 } else { 0 };
        if knobs.schema_to_non_master || late_after_start {
            assert!(refusals >= 1, "seed {seed:#x}: no 702 ({knobs})");
            assert!(report.stats.non_master_702);
            // The tables were made and used all the same.
            assert!(report.stats.transfers_ok + report.stats.writes_ok > 0);
        } else if knobs.master_link_late_ns > 0 {
            assert!(report.stats.transfers_ok + report.stats.writes_ok > 0);
        } else {
            assert_eq!(refusals, 0, "seed {seed:#x}: 702 at the master ({knobs})");
        }
        if knobs.master_link_late_ns > 50_000_000 {
            late_link += 1;
            // Retried every 20 ms until the link came up.
            assert!(
                refusals >= 2,
                "seed {seed:#x}: {refusals} refusals ({knobs})"
            );
        } else if knobs.schema_to_non_master {
            deliberate += 1;
        }
    }
    assert!(
        deliberate >= 5 && late_link >= 3,
        "{deliberate} {late_link}"
    );
}
