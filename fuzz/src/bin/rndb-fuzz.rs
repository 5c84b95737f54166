//! `rndb-fuzz`: runs one fuzz target on stable Rust for a number of cases or seconds, or
//! replays files through it. `scripts/fuzz` is the front door.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use rndb_fuzz::runner::{self, INPUT_BYTES_MAX_DEFAULT};
use rndb_fuzz::{Options, TARGETS};

/// Fuzz one rndb decoder with mutations of its seed corpus.
#[derive(Parser, Debug)]
#[command(
    name = "rndb-fuzz",
    about = "fuzz one rndb decoder (stable Rust, no coverage feedback)"
)]
struct Args {
    /// The target: frame, signals, handshake, config, redo, schema_log, lcp or sysfile (`--list`
    /// names them).
    target: Option<String>,
    /// Mutated cases to run.
    #[arg(long)]
    runs: Option<u64>,
    /// Seconds to run for.
    #[arg(long)]
    seconds: Option<u64>,
    /// Seed of the mutation sequence (default: from the clock; printed, to replay a run).
    #[arg(long)]
    seed: Option<u64>,
    /// The longest input made.
    #[arg(long, default_value_t = INPUT_BYTES_MAX_DEFAULT)]
    max_len: usize,
    /// Replay these files instead of fuzzing (a crash artifact, say).
    #[arg(long, num_args = 1..)]
    replay: Vec<PathBuf>,
    /// List the targets.
    #[arg(long)]
    list: bool,
    /// Write the seed corpus (made from the real encoders) to fuzz/corpus/ and exit.
    #[arg(long)]
    write_seeds: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    if args.write_seeds {
        return write_seeds(&root);
    }
    if args.list || args.target.is_none() {
        for target in TARGETS {
            println!("{:<10} {}", target.name, target.about);
        }
        return ExitCode::SUCCESS;
    }
    let name = args.target.unwrap_or_default();
    let Some(target) = rndb_fuzz::find(&name) else {
        eprintln!("rndb-fuzz: no target {name}; --list names them");
        return ExitCode::from(2);
    };
    if !args.replay.is_empty() {
        return match runner::replay(target, &args.replay, &root) {
            Ok(None) => {
                println!("{name}: {} file(s) replayed, no crash", args.replay.len());
                ExitCode::SUCCESS
            }
            Ok(Some(crash)) => report_crash(&name, &crash),
            Err(e) => {
                eprintln!("rndb-fuzz: {e:#}");
                ExitCode::from(2)
            }
        };
    }
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let duration = args.seconds.map(Duration::from_secs);
    let runs = if args.runs.is_none() && duration.is_none() {
        Some(100_000)
    } else {
        args.runs
    };
    let options = Options {
        runs,
        duration,
        seed,
        input_bytes_max: args.max_len,
        root,
    };
    let start = Instant::now();
    match runner::run(target, &options) {
        Ok(outcome) => {
            let seconds = start.elapsed().as_secs_f64();
            println!(
                "{name}: {} cases ({} seed and regression files) in {seconds:.1} s, {:.0} cases/s, seed {seed}",
                outcome.cases,
                outcome.files,
                outcome.cases as f64 / seconds.max(1e-9)
            );
            match outcome.crash {
                None => {
                    println!("{name}: no crash");
                    ExitCode::SUCCESS
                }
                Some(crash) => report_crash(&name, &crash),
            }
        }
        Err(e) => {
            eprintln!("rndb-fuzz: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn report_crash(name: &str, crash: &runner::Crash) -> ExitCode {
    println!("{name}: CRASH: {}", crash.message);
    println!(
        "{name}: input ({} bytes): {:02x?}",
        crash.input.len(),
        crash.input
    );
    if !crash.artifact.as_os_str().is_empty() {
        println!(
            "{name}: written to {}; once fixed, move it to fuzz/regressions/{name}/",
            crash.artifact.display()
        );
    }
    ExitCode::FAILURE
}

fn write_seeds(root: &std::path::Path) -> ExitCode {
    let seeds = rndb_fuzz::seeds::all();
    for (target, name, bytes) in &seeds {
        let dir = root.join("corpus").join(target);
        if let Err(e) =
            std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(dir.join(name), bytes))
        {
            eprintln!("rndb-fuzz: write {}/{name}: {e}", dir.display());
            return ExitCode::from(2);
        }
    }
    println!(
        "wrote {} seed files under {}",
        seeds.len(),
        root.join("corpus").display()
    );
    ExitCode::SUCCESS
}
