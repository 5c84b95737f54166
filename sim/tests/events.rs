//! The event API's check (`--faults events`): client 0's subscription hands out the workload's
//! committed changes, each acknowledged write found once in the epoch its commit named and
//! every key's image ending where the final reads found it, under faults that take no data
//! node down (slow links, pauses, API links dropping, dying clients, BUGGIFY); with data
//! nodes failing and the cluster crashing, each epoch span no replica of a fragment covered is
//! handed out as `Inconsistent` at its first epoch, and only those; and a change the
//! subscriber loses (a planted bug) fails its seed.

use rndb_sim::{run_seed, run_seeds, Fault, Options, Sabotage, Workload};

fn options(sabotage: Option<Sabotage>) -> Options {
    Options {
        workload: Workload::All,
        faults: vec![
            Fault::Client,
            Fault::Slow,
            Fault::ApiLink,
            Fault::Buggify,
            Fault::Pause,
            Fault::Events,
        ],
        sabotage,
        ..Options::default()
    }
}

/// Data nodes crash, hang, restart and fail their disks, and the cluster crashes: every
/// handled fault, nodes crashing mid-restart too, and the subscriber.
fn crash_options() -> Options {
    let mut faults = Fault::HANDLED.to_vec();
    faults.extend([Fault::CrashStarting, Fault::Events]);
    Options {
        workload: Workload::All,
        faults,
        ..Options::default()
    }
}

/// Seeds 0xe7e00012 and 0xe7e0010f once failed on changes `EventMerge` held from the epoch
/// before `begin()` and handed out.
#[test]
fn every_acknowledged_change_is_handed_out_once_in_its_epoch() {
    let mut reports = run_seeds(0xe7e0_0200, 40, &options(None)).unwrap_or_else(|f| panic!("{f}"));
    for seed in [0xe7e0_0012, 0xe7e0_010f] {
        reports.push(run_seed(seed, &options(None)).unwrap_or_else(|f| panic!("{f}")));
    }
    let stats: Vec<_> = reports.iter().filter_map(|r| r.events.clone()).collect();
    assert_eq!(stats.len(), reports.len(), "every seed subscribed");
    let sum = |f: fn(&rndb_sim::events::EventStats) -> u64| stats.iter().map(f).sum::<u64>();
    assert!(
        sum(|s| s.changes) > 40 * 50,
        "{} changes",
        sum(|s| s.changes)
    );
    assert!(
        sum(|s| s.writes_found) > 40 * 20,
        "{} writes found",
        sum(|s| s.writes_found)
    );
    assert!(
        sum(|s| s.keys_matched) > 40 * 10,
        "{} keys",
        sum(|s| s.keys_matched)
    );
    assert_eq!(sum(|s| s.inconsistent), 0, "no node failed");
}

/// Seeds that `EventMerge` once failed: it hid the gap a failed node left (0xe000049,
/// 0xe00008c, 0xe0000a9, 0xe00001b), judged only epochs that held changes, or handed out late
/// copies of epochs handed out (0xe00009a, 0xe00016b). Each Inconsistent comes where the
/// simulator's own model of the subscriptions expects it.
#[test]
fn the_gaps_failed_nodes_leave_are_inconsistent_and_nothing_else_is() {
    let options = crash_options();
    let mut inconsistent = 0;
    let mut found = 0;
    for seed in [
        0xe00_0049, 0xe00_008c, 0xe00_009a, 0xe00_00a9, 0xe00_001b, 0xe00_016b,
    ] {
        let report = run_seed(seed, &options).unwrap_or_else(|f| panic!("{f}"));
        let stats = report.events.expect("the seed subscribed");
        inconsistent += stats.inconsistent;
        found += stats.writes_found;
    }
    assert!(inconsistent > 0, "no gap");
    assert!(found > 100, "{found} writes found");
}

/// Seed 0xe3000ed: data node 2's SUB_START_CONF, on a slow link, comes after the merge
/// handed out later epochs from node 1 alone; `EventMerge::went_back` took it for a system
/// restart (its start was at or below the epochs handed out when it came), and the API's
/// operation would have ended with 4009 though the cluster ran on. `went_back` now judges a
/// start against the newest epoch handed out or reported when the subscription was asked.
#[test]
fn a_late_confirmation_is_no_system_restart() {
    run_seed(0xe30_00ed, &crash_options()).unwrap_or_else(|f| panic!("{f}"));
}

#[test]
fn a_lost_change_fails_the_seed() {
    let failure = run_seed(0xe7e0_0000, &options(Some(Sabotage::Events))).unwrap_err();
    assert!(failure.what.starts_with("events: "), "{}", failure.what);
    assert!(
        failure.replay.contains("--sabotage events"),
        "{}",
        failure.replay
    );
}

/// Seed 0xe600b46: both data nodes crashed (a system restart) and one came back and was
/// subscribed again before the other's link was seen down, so the merge went on with the
/// restarted cluster's epochs, which repeat numbers of epochs handed out before; the write of
/// one was taken for the other. The confirmation now names the system restart (its number
/// changed: the merge ends, as the API's operation with 4009).
#[test]
fn a_system_restart_ends_the_merge_even_when_a_node_comes_back_first() {
    let report = run_seed(0xe60_0b46, &crash_options()).unwrap_or_else(|f| panic!("{f}"));
    let stats = report.events.expect("the seed subscribed");
    assert!(stats.merges_went_back > 0, "{stats:?}");
}

/// Seeds 0xeb04857, 0xeb068b7: a fresh confirmation's start, counted as reported, made
/// another node's later confirmation look like a system restart. Seed 0xeb03ed5: a refused
/// resubscription of a restarting node dropped the changes its ended subscription had
/// reported, and a write was never handed out.
#[test]
fn resubscriptions_neither_look_like_restarts_nor_drop_reported_changes() {
    for seed in [0xeb0_4857, 0xeb0_68b7, 0xeb0_3ed5] {
        run_seed(seed, &crash_options()).unwrap_or_else(|f| panic!("{f}"));
    }
}

/// Seed 0xec021bf (three replicas, a split): data node 1, master on the losing side, ended
/// epoch 0x1800000000 without the other side's nodes and reported it to the subscriber while it
/// stopped (2305); the other side went on committing in that epoch, and the merge took node
/// 1's copy, without a ledger row. A node that is stopping now reports nothing.
#[test]
fn the_losing_side_of_a_split_reports_no_epoch() {
    let mut options = crash_options();
    options.replicas = 3;
    options.durable_commits = true;
    options
        .faults
        .extend([Fault::CrashAgain, Fault::Backup, Fault::Partition]);
    run_seed(0xec0_21bf, &options).unwrap_or_else(|f| panic!("{f}"));
}

/// Seed 0xfa02230: a merge made between two system restarts (its subscriptions refused while
/// the cluster started) got its first confirmation only after the second, and went on, as
/// it should: it had handed out nothing before. The check took its changes for the first
/// restart's era; a merge that goes on across a restart is now of the new one.
#[test]
fn a_merge_made_between_two_system_restarts_is_of_the_second() {
    run_seed(0xfa0_2230, &crash_options()).unwrap_or_else(|f| panic!("{f}"));
}

/// Seed 0x10201ac7: a merge went on across a system restart and handed out, after it, an epoch
/// the restart had restored (GCI 12, the restart GCI): its changes were committed in the era
/// before. An epoch a restart restored counts as the earlier era's.
#[test]
fn an_epoch_a_system_restart_restored_is_of_the_era_before() {
    let mut options = crash_options();
    options.faults.push(Fault::SingleUser);
    run_seed(0x1020_1ac7, &options).unwrap_or_else(|f| panic!("{f}"));
}

/// Seed 0x33000ad2: data node 2 crashed with the cluster, and its frames of the era before,
/// on a slow link, reached the subscriber after the system restart began; the check took them
/// for the new era's, moved the merge into it, and counted the old era's epochs it had handed
/// out as covering a change the new era committed in the same epoch. A frame is now of the era
/// of the subscription it answers (when that was asked for).
#[test]
fn frames_of_the_era_before_a_restart_delivered_late_stay_of_that_era() {
    let faults = [
        Fault::Partition,
        Fault::Backup,
        Fault::SingleUser,
        Fault::Events,
        Fault::Limits,
        Fault::Drop,
    ];
    let options = Options {
        workload: Workload::All,
        faults: [&Fault::HANDLED[..], &faults].concat(),
        ..Options::default()
    };
    run_seed(0x3300_0ad2, &options).unwrap_or_else(|f| panic!("{f}"));
}
