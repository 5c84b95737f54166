//! A `cargo build` of this workspace run from a program that cargo started: `testread-perf
//! --local` building ndbd, and the integration tests' harness building every binary.
//!
//! Two things make such a build compile crates again that are already fresh, and the next
//! ordinary cargo run compile them once more:
//!
//! - the variables cargo sets for the program it runs (`CARGO_PKG_*`, `CARGO_MANIFEST_DIR`, ...)
//!   reach the build's scripts, and ring's counts them among its inputs, so ring and every crate
//!   above it (rustls, the transporter, ...) are compiled again;
//! - cargo resolves features over the packages it is given, so a build of one package (`-p
//!   rndb-ndbd`) compiles shared crates with other features and overwrites the binaries a
//!   workspace build made.
//!
//! So the build here always names the whole workspace (`--workspace`, then the targets asked
//! for) and runs without those variables.

use std::env;
use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

/// True for an environment variable cargo sets for the crate it runs, as opposed to the user's
/// configuration (`CARGO_HOME`, `CARGO_TARGET_DIR`, `CARGO_PROFILE_*`, ...).
fn set_by_cargo_for_the_program(key: &str) -> bool {
    const PREFIXES: [&str; 4] = [
        "CARGO_PKG_",
        "CARGO_MANIFEST_",
        "CARGO_BIN_",
        "CARGO_CRATE_",
    ];
    const NAMES: [&str; 4] = [
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
        "CARGO_RUSTC_CURRENT_DIR",
        "OUT_DIR",
    ];
    PREFIXES.iter().any(|prefix| key.starts_with(prefix)) || NAMES.contains(&key)
}

/// `cargo build --workspace <targets>` of the workspace this crate was built from, into
/// `target_dir` with the cargo profile `profile` (`debug` or `release` as cargo names their
/// directories, or a custom profile's name), run by `cargo` without the variables cargo set for
/// this process. `None` when that workspace no longer exists (an installed binary).
pub fn workspace_build(
    cargo: &OsStr,
    target_dir: &Path,
    profile: &str,
    targets: &[&str],
) -> Option<Command> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    if !manifest.is_file() {
        return None;
    }
    let mut command = Command::new(cargo);
    for (key, _) in env::vars_os() {
        if key.to_str().is_some_and(set_by_cargo_for_the_program) {
            command.env_remove(key);
        }
    }
    command
        .args(["build", "--workspace"])
        .args(targets)
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(target_dir);
    match profile {
        "debug" => {}
        "release" => {
            command.arg("--release");
        }
        other => {
            command.arg("--profile").arg(other);
        }
    }
    Some(command)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_variables_cargo_sets_for_a_program_are_removed() {
        for key in [
            "CARGO_PKG_NAME",
            "CARGO_MANIFEST_DIR",
            "CARGO_BIN_EXE_ndbd",
            "CARGO_CRATE_NAME",
            "CARGO_PRIMARY_PACKAGE",
            "OUT_DIR",
        ] {
            assert!(set_by_cargo_for_the_program(key), "{key}");
        }
        for key in [
            "CARGO",
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_PROFILE_RELEASE_LTO",
            "RUSTFLAGS",
        ] {
            assert!(!set_by_cargo_for_the_program(key), "{key}");
        }
    }

    #[test]
    fn the_build_names_the_whole_workspace_and_the_profile() {
        let command = workspace_build("cargo".as_ref(), Path::new("/t"), "release", &["--bins"])
            .expect("the workspace exists while its tests run");
        let args: Vec<_> = command.get_args().map(|a| a.to_string_lossy()).collect();
        assert_eq!(&args[..3], ["build", "--workspace", "--bins"]);
        assert!(args.iter().any(|a| a == "--release"), "{args:?}");
        assert!(command
            .get_envs()
            .all(|(key, value)| value.is_none()
                && set_by_cargo_for_the_program(&key.to_string_lossy())));
    }
}
