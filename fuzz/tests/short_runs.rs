//! Proves that every fuzz target survives its committed seeds, every regression (each crash
//! fuzzing has found), and a short fixed-seed run of mutations, and that the committed seed
//! corpus is what the encoders make today, and that a resealed file reaches the decoders.

use std::path::Path;

use rndb_fuzz::{run, Options, TARGETS};

/// Mutated cases per binary-decoder target: about a second each in a debug build.
const SHORT_RUN_CASES: u64 = 20_000;
/// Mutated cases of the config target, whose every case runs the whole parser (about a
/// thousand cases a second in a debug build).
const CONFIG_SHORT_RUN_CASES: u64 = 3_000;

fn check_short_run(name: &str, cases: u64) {
    let target = rndb_fuzz::find(name).expect("target exists");
    let outcome = run(target, &Options::cases(cases, 0x5EED)).expect("run");
    if let Some(crash) = outcome.crash {
        panic!(
            "{name} crashed: {}\ninput {:02x?}\nsaved as {}",
            crash.message,
            crash.input,
            crash.artifact.display()
        );
    }
    assert!(outcome.files > 0, "{name} has no seed files");
    assert_eq!(outcome.cases, outcome.files as u64 + cases);
}

#[test]
fn frame_short_run() {
    check_short_run("frame", SHORT_RUN_CASES);
}

#[test]
fn signals_short_run() {
    check_short_run("signals", SHORT_RUN_CASES);
}

#[test]
fn handshake_short_run() {
    check_short_run("handshake", SHORT_RUN_CASES);
}

#[test]
fn config_short_run() {
    check_short_run("config", CONFIG_SHORT_RUN_CASES);
}

#[test]
fn redo_short_run() {
    check_short_run("redo", SHORT_RUN_CASES);
}

#[test]
fn schema_log_short_run() {
    check_short_run("schema_log", SHORT_RUN_CASES);
}

#[test]
fn lcp_short_run() {
    check_short_run("lcp", SHORT_RUN_CASES);
}

#[test]
fn sysfile_short_run() {
    check_short_run("sysfile", SHORT_RUN_CASES);
}

#[test]
fn backup_short_run() {
    check_short_run("backup", SHORT_RUN_CASES);
}

#[test]
fn every_target_has_a_short_run_here() {
    let names: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
    assert_eq!(
        names,
        [
            "frame",
            "signals",
            "handshake",
            "config",
            "redo",
            "schema_log",
            "lcp",
            "sysfile",
            "backup"
        ]
    );
}

#[test]
fn committed_seeds_are_what_the_encoders_make() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for (target, name, bytes) in rndb_fuzz::seeds::all() {
        let path = root.join(target).join(&name);
        let committed = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; run `cargo run --bin rndb-fuzz -- --write-seeds`",
                path.display()
            )
        });
        assert!(
            committed == bytes,
            "{} differs from what the encoders make; run `cargo run --bin rndb-fuzz -- --write-seeds`",
            path.display()
        );
    }
}

/// A mutated record fails its CRC and stops a walk at once; resealed, the same bytes reach the
/// record decoders behind the CRC, which is what the file targets fuzz.
#[test]
fn a_resealed_file_reaches_the_decoders() {
    use rndb_ndbd::ndbfs::format::HEADER_BYTES;
    use rndb_ndbd::ndbfs::read::{read_file, FileKind};
    let seeds = rndb_fuzz::seeds::all();
    let (_, _, redo) = seeds
        .iter()
        .find(|(target, name, _)| *target == "redo" && name == "part0-file0")
        .expect("the redo seed");
    let mut mutated = redo.clone();
    // The first record's table id: a byte behind the CRC, not a length.
    mutated[HEADER_BYTES + 17] ^= 0x40;
    let stop = read_file(&mutated, FileKind::Redo)
        .expect("the header is intact")
        .stop
        .expect("the CRC fails");
    assert!(stop.torn && stop.offset == HEADER_BYTES, "{stop}");
    let resealed = rndb_fuzz::targets::reseal(&mutated);
    let read = read_file(&resealed, FileKind::Redo).expect("the header is intact");
    assert_eq!(read.stop, None, "every resealed record decodes");
    assert_eq!(read.end, resealed.len());
}
