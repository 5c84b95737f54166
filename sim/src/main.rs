//! The simulator's command line: one seed (`--seed`), or many (`--seeds N`), each run twice
//! and compared; a failing seed is printed with the one command that replays it.

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use rndb_sim::{run_seed, run_seed_checked, Fault, Options, Report, Sabotage, Workload};

/// A deterministic simulation of an rndb cluster: real data-node kernels, simulated API nodes,
/// network and faults, all from one seed.
#[derive(Debug, Parser)]
#[command(name = "rndb-sim", version)]
struct Args {
    /// Run this one seed (hex with 0x, or decimal).
    #[arg(long, value_parser = parse_seed, conflicts_with = "seeds")]
    seed: Option<u64>,
    /// Run this many seeds, from --start on.
    #[arg(long)]
    seeds: Option<u64>,
    /// The first seed of --seeds.
    #[arg(long, value_parser = parse_seed, default_value = "0")]
    start: u64,
    /// The workload the clients run.
    #[arg(long, value_enum, default_value = "all")]
    workload: Workload,
    /// Fault kinds seeds may draw, comma-separated: crash, client, slow, api-link, buggify,
    /// pause, crash-all (every data node crashes, then a system restart), disk (ENOSPC and EIO
    /// on writes and syncs), partition (data nodes cut from each other; client 0 arbitrates),
    /// events (client 0 subscribes to the tables' changes, checked at the end; no fault of
    /// its own), drop (client 0 drops a table the transfers write, mid-workload), or none (see
    /// `Fault` for the rest). Default: all but crash-all, disk and partition.
    #[arg(long, value_delimiter = ',', value_parser = parse_fault)]
    faults: Option<Vec<Option<Fault>>>,
    /// Print every delivered frame and every fault (with --seed).
    #[arg(long)]
    trace: bool,
    /// Also print the data nodes' log lines (with --seed), each under its node's id, among
    /// the trace's lines (`--log` alone: warnings and errors; `RUST_LOG` chooses others).
    #[arg(long)]
    log: bool,
    /// Run each seed once (skip the in-process replay that checks determinism).
    #[arg(long)]
    once: bool,
    /// Also run the seed in a second process and compare trace hashes (with --seed).
    #[arg(long)]
    check_determinism: bool,
    /// Plant a deliberate client bug, to see a checker fire and the failing seed replay.
    #[arg(long, value_enum)]
    sabotage: Option<Sabotage>,
    /// NoOfReplicas: 2 (2 or 4 data nodes) or 3 (3 or 6 data nodes).
    #[arg(long, default_value = "2", value_parser = clap::value_parser!(u16).range(2..=3))]
    replicas: u16,
    /// Every commit asks to be durable: answered once its global checkpoint is saved, and
    /// checked to survive every cluster crash after its answer.
    #[arg(long)]
    durable_commits: bool,
    /// Print only the trace hash of the one seed (used by --check-determinism).
    #[arg(long, hide = true)]
    print_hash: bool,
}

/// Seconds between two progress lines of a `--seeds` run.
const PROGRESS_EVERY_S: u64 = 30;

fn parse_seed(text: &str) -> Result<u64, String> {
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16),
        None => text.replace('_', "").parse(),
    };
    parsed.map_err(|e| format!("{text:?} is not a seed: {e}"))
}

fn parse_fault(text: &str) -> Result<Option<Fault>, String> {
    if text == "none" {
        return Ok(None);
    }
    <Fault as clap::ValueEnum>::from_str(text, true).map(Some)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut faults: Vec<Fault> = match &args.faults {
        Some(list) => list.iter().flatten().copied().collect(),
        None => Fault::DEFAULT.to_vec(),
    };
    faults.sort();
    faults.dedup();
    let options = Options {
        workload: args.workload,
        faults,
        trace: args.trace,
        sabotage: args.sabotage,
        replicas: args.replicas,
        durable_commits: args.durable_commits,
    };
    if let Some(seed) = args.seed {
        if args.log {
            let filter = tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
            tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_writer(std::io::stdout)
                .without_time()
                .with_target(false)
                .with_ansi(false)
                .init();
        }
        return one_seed(seed, &options, &args);
    }
    many_seeds(args.start, args.seeds.unwrap_or(100), &options, args.once)
}

fn one_seed(seed: u64, options: &Options, args: &Args) -> ExitCode {
    let result = if args.once || args.print_hash {
        run_seed(seed, options)
    } else {
        run_seed_checked(seed, options)
    };
    match result {
        Ok(report) if args.print_hash => {
            println!("{:#018x}", report.trace_hash);
            ExitCode::SUCCESS
        }
        Ok(report) => {
            print_report(&report);
            if args.check_determinism {
                return check_across_processes(seed, options, &report);
            }
            ExitCode::SUCCESS
        }
        Err(failure) => {
            eprintln!("FAILED: {failure}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the seed again in a child process of this binary and compares the trace hashes.
fn check_across_processes(seed: u64, options: &Options, report: &Report) -> ExitCode {
    let Ok(exe) = std::env::current_exe() else {
        eprintln!("cannot find this executable to run it again");
        return ExitCode::FAILURE;
    };
    let faults: Vec<&str> = options.faults.iter().map(|f| f.name()).collect();
    let faults = if faults.is_empty() {
        "none".to_string()
    } else {
        faults.join(",")
    };
    let output = std::process::Command::new(exe)
        .args(["--seed", &format!("{seed:#x}"), "--print-hash"])
        .args(["--workload", options.workload.name(), "--faults", &faults])
        .args(match options.sabotage {
            Some(Sabotage::Bank) => &["--sabotage", "bank"][..],
            Some(Sabotage::Registers) => &["--sabotage", "registers"][..],
            Some(Sabotage::Sets) => &["--sabotage", "sets"][..],
            Some(Sabotage::Backup) => &["--sabotage", "backup"][..],
            Some(Sabotage::SnapshotStart) => &["--sabotage", "snapshot-start"][..],
            Some(Sabotage::Events) => &["--sabotage", "events"][..],
            None => &[],
        })
        .args(["--replicas", &options.replicas.to_string()])
        .args(options.durable_commits.then_some("--durable-commits"))
        .output();
    let theirs = match output {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_string(),
        Ok(out) => {
            eprintln!(
                "the second process failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("start the second process: {e}");
            return ExitCode::FAILURE;
        }
    };
    let ours = format!("{:#018x}", report.trace_hash);
    if ours == theirs {
        println!("determinism across processes: both trace hashes are {ours}");
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "FAILED: determinism across processes: trace hash {ours} here, {theirs} in a second process\n  replay: {}",
            options.replay_command(seed)
        );
        ExitCode::FAILURE
    }
}

fn many_seeds(start: u64, count: u64, options: &Options, once: bool) -> ExitCode {
    let wall = Instant::now();
    let mut sim_ns: u128 = 0;
    let mut failures = 0u64;
    let mut last_progress = Instant::now();
    for seed in start..start.saturating_add(count) {
        if last_progress.elapsed().as_secs() >= PROGRESS_EVERY_S {
            last_progress = Instant::now();
            let done = seed - start;
            eprintln!(
                "{done} of {count} seeds, {:.1} seeds/s, {failures} failed",
                done as f64 / wall.elapsed().as_secs_f64()
            );
        }
        let result = if once {
            run_seed(seed, options)
        } else {
            run_seed_checked(seed, options)
        };
        match result {
            Ok(report) => sim_ns += u128::from(report.sim_ns),
            Err(failure) => {
                sim_ns += u128::from(failure.sim_ns);
                failures += 1;
                eprintln!("FAILED: {failure}");
            }
        }
    }
    let seconds = wall.elapsed().as_secs_f64();
    let runs = if once { 1 } else { 2 };
    println!(
        "{count} seeds ({} workload, faults {:?}) in {seconds:.1} s: {:.1} seeds/s ({runs} run(s) each), simulated/wall time {:.1}",
        options.workload.name(),
        options.faults.iter().map(|f| f.name()).collect::<Vec<_>>(),
        count as f64 / seconds,
        sim_ns as f64 / 1e9 * f64::from(runs) / seconds
    );
    if failures > 0 {
        eprintln!("{failures} of {count} seeds failed");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn print_report(report: &Report) {
    println!("seed {:#018x}: ok", report.seed);
    println!("  knobs: {}", report.knobs);
    println!(
        "  {} steps, {} frames, simulated {:.3} s, trace hash {:#018x}",
        report.steps,
        report.frames,
        report.sim_ns as f64 / 1e9,
        report.trace_hash
    );
    let s = &report.stats;
    println!(
        "  transfers ok {} failed {} unknown {}, full reads ok {}, register writes ok {} failed {} unknown {}, reads ok {} failed {}",
        s.transfers_ok, s.transfers_failed, s.transfers_unknown, s.audits_ok, s.writes_ok, s.writes_failed, s.writes_unknown, s.reads_ok, s.reads_failed
    );
    println!(
        "  scan full reads checked under locks {}, as committed reads {}, failed {}, SCAN_NEXTREQs {}",
        s.scan_audits_locked, s.scan_audits_committed, s.scan_audits_failed, s.scan_next_requests
    );
    println!(
        "  set inserts ok {} duplicate (630) {}, deletes ok {} missing (626) {}, reads present {} absent {}, through the unique index found {} missing {}, failed {} unknown {}",
        s.inserts_ok, s.inserts_duplicate, s.deletes_ok, s.deletes_missing, s.set_reads_present, s.set_reads_absent, s.index_reads_found, s.index_reads_missing, s.set_ops_failed, s.set_ops_unknown
    );
    println!(
        "  errors seen {:?}, faults {:?}, overloaded sends {}, 702 from a non-master then retried: {}, undecided keys {}",
        s.errors, report.faults, report.overloads, s.non_master_702, report.undecided_keys
    );
    if report.knobs.durable {
        let d = &report.durability;
        println!(
            "  durability: restorable GCI {} at the end; cluster crashes (ms, restorable, restart GCI) {:?}; acknowledged operations durable through a crash {} ({} by a durable commit's answer), made unknown by one {}; transfers the ledger had to hold {}, ledger rows {}; disk faults {}, unsynced changes lost {} kept {}, torn writes {}",
            d.restorable_gci,
            d.crashes
                .iter()
                .map(|&(at, r, g)| (format!("{:.3}", at as f64 / 1e6), r, g))
                .collect::<Vec<_>>(),
            d.durable_ops,
            d.durable_commits_kept,
            d.ops_made_unknown,
            d.transfers_required,
            d.ledger_rows,
            d.disk_faults,
            d.changes_lost,
            d.changes_kept,
            d.torn_writes
        );
    }
    for note in &report.notes {
        println!("  note: {note}");
    }
}
