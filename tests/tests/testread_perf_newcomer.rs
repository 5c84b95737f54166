//! Proves that `testread-perf` tells a newcomer what is happening and what is wrong: it says
//! that it builds ndbd and lets cargo's progress through instead of going silent; it refuses
//! `--transporter shm` on a config without SHM links before it starts any data node; it says
//! that a missing config file does not exist, naming it once; and `--local` finds an `--ndbd`
//! given as a relative path.

use std::path::Path;
use std::process::{Command, Output};

use rndb_tests::{ndbd_path, testread_perf_path, ClusterSpec};

/// Runs testread-perf with `args` in `dir` (the current directory when `None`).
fn run_in(dir: Option<&Path>, args: &[&str]) -> Output {
    let exe = testread_perf_path().expect("find testread-perf");
    let mut command = Command::new(exe);
    command.args(args);
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    command.output().expect("run testread-perf")
}

/// Runs testread-perf with `args`, which it must refuse; returns its stderr.
fn run_refused(args: &[&str]) -> String {
    let output = run_in(None, args);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        !output.status.success(),
        "testread-perf {args:?} must fail:\n{stderr}"
    );
    stderr
}

fn utf8(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

/// Without `--ndbd`, `--local` builds ndbd with cargo first: it says so, and cargo's own
/// status lines reach the terminal (here, the "Finished" of a build that has nothing to do).
/// The config puts its data node on another host, so the run stops right after the build.
#[test]
fn local_says_it_builds_ndbd_and_shows_cargos_progress() {
    let dir = tempfile::tempdir().expect("create a directory");
    let config = dir.path().join("config.ini");
    // TEST-NET-2: a documentation address, on no host.
    std::fs::write(
        &config,
        "[ndbd default]\nNoOfReplicas=1\n[ndbd]\nNodeId=1\nHostName=198.51.100.7\n[api]\n",
    )
    .expect("write the config");
    // Builds ndbd first, so the build testread-perf starts finds it fresh.
    ndbd_path().expect("find ndbd");
    let stderr = run_refused(&["--local", "--config-file", utf8(&config)]);
    assert!(
        stderr.contains("testread-perf: building ndbd (debug profile) with cargo"),
        "{stderr}"
    );
    assert!(stderr.contains("Finished"), "cargo's output: {stderr}");
    assert!(
        stderr.contains("is not an address of this host"),
        "{stderr}"
    );
}

/// A config whose API slots reach the data nodes over TCP only cannot run SHM; the config says
/// so, and the run fails before `--local` starts a data node.
#[test]
fn shm_on_a_config_without_shm_links_fails_before_any_data_node_starts() {
    let dir = tempfile::tempdir().expect("create a directory");
    let written = ClusterSpec::new()
        .data_nodes(2)
        .write(dir.path())
        .expect("write the config");
    let ndbd = ndbd_path().expect("find ndbd");
    let stderr = run_refused(&[
        "--local",
        "--config-file",
        utf8(&written.path),
        "--ndbd",
        utf8(&ndbd),
        "--transporter",
        "tcp,shm",
    ]);
    assert!(
        stderr.contains("--transporter shm:")
            && stderr.contains("gives no API slot a shared-memory link to every data node"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("serves on"),
        "no data node may start: {stderr}"
    );
}

/// A config file that is not there is said not to exist, with its path, once.
#[test]
fn a_missing_config_file_is_said_not_to_exist() {
    let dir = tempfile::tempdir().expect("create a directory");
    let missing = dir.path().join("no-such.ini");
    let stderr = run_refused(&["--config-file", utf8(&missing)]);
    assert!(
        stderr.contains(&format!(
            "testread-perf: error: read the config file: {}: the config file does not exist",
            missing.display()
        )),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches(utf8(&missing)).count(),
        1,
        "the path once: {stderr}"
    );
}

/// `--ndbd ./ndbd` from the directory ndbd is in: the data nodes run in a directory of their
/// own, so the path must be resolved before they start.
#[test]
fn local_finds_an_ndbd_given_as_a_relative_path() {
    let dir = tempfile::tempdir().expect("create a directory");
    let written = ClusterSpec::new()
        .replicas(1)
        .data_nodes(1)
        .write(dir.path())
        .expect("write the config");
    let ndbd = ndbd_path().expect("find ndbd");
    let bin_dir = ndbd.parent().expect("ndbd's directory");
    let output = run_in(
        Some(bin_dir),
        &[
            "--local",
            "--config-file",
            utf8(&written.path),
            "--ndbd",
            "./ndbd",
            "--access",
            "ping",
            "--range",
            "2",
            "--iterations",
            "2",
            "--size",
            "10",
        ],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("data node 1 serves on"), "{stderr}");
}
