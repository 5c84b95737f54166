//! Finding the executables the tests run (`ndbd`, `testread-perf`, `ndb_desc`, the table tools,
//! `ndb_mgmd`, `ndb_mgm`, `ndb_waiter`), and keeping them fresh.
//!
//! Cargo builds another package's binaries only when asked, and `CARGO_BIN_EXE_*` exists only
//! inside the package that owns the binary. So the harness looks for the binaries in the target
//! directory the test executable itself was built into (`target/<profile>/`), and, the first
//! time a test process asks and the test runs under cargo (`CARGO` is set), it first runs
//! `cargo build --workspace --bins` with the same profile and target directory. That build is
//! a no-op when the binaries are fresh (as after `scripts/test`'s own build, which is the same
//! command; `rndb_testread_perf::cargo_build` says what else it takes not to compile crates
//! again), and it means a test never runs a stale data node.
//!
//! - `RNDB_BIN_DIR=<dir>` uses the binaries in `<dir>` and builds nothing.
//! - `RNDB_TESTS_NO_BUILD=1` skips the build; the binaries must then already exist
//!   (`cargo build --workspace --bins`).

use std::env;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{anyhow, bail, Context, Result};
use rndb_testread_perf::cargo_build::workspace_build;

/// The outcome of the one build a test process runs, shared by every test thread.
static BUILD: OnceLock<Result<(), String>> = OnceLock::new();

/// The data node executable.
pub fn ndbd_path() -> Result<PathBuf> {
    binary_path("ndbd")
}

/// The benchmark executable.
pub fn testread_perf_path() -> Result<PathBuf> {
    binary_path("testread-perf")
}

/// The executable `name` of this workspace, built first if need be (see the module comment).
pub fn binary_path(name: &str) -> Result<PathBuf> {
    let dir = bin_dir()?;
    if let Err(message) = BUILD.get_or_init(|| build_binaries(&dir)) {
        bail!("build the binaries the tests run: {message}");
    }
    let path = dir.join(name);
    if !path.is_file() {
        bail!(
            "{} does not exist: build the workspace binaries first \
             (`cargo build --workspace --bins`, same profile as the tests)",
            path.display()
        );
    }
    Ok(path)
}

/// The directory holding the workspace binaries: `RNDB_BIN_DIR`, or the profile directory the
/// test executable lives in (`target/debug/deps/x-hash` → `target/debug`).
fn bin_dir() -> Result<PathBuf> {
    if let Some(dir) = env::var_os("RNDB_BIN_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let exe = env::current_exe().context("find the test executable")?;
    let mut dir = exe
        .parent()
        .ok_or_else(|| anyhow!("{} has no parent directory", exe.display()))?;
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir = dir.parent().unwrap_or(dir);
    }
    Ok(dir.to_path_buf())
}

/// Runs cargo to build the workspace's binaries (`ndbd`, `testread-perf`, `ndb_desc`, the table
/// tools, the management programs and the rest) into `dir`, unless told not to or not run by
/// cargo. The build is `scripts/test`'s own, `cargo build --workspace --bins`, run without the
/// variables cargo set for the test (`rndb_testread_perf::cargo_build` says why). Returns
/// cargo's error output when the build fails.
fn build_binaries(dir: &Path) -> Result<(), String> {
    if env::var_os("RNDB_BIN_DIR").is_some() || env::var_os("RNDB_TESTS_NO_BUILD").is_some() {
        return Ok(());
    }
    let Some(cargo) = env::var_os("CARGO") else {
        return Ok(());
    };
    let (Some(profile), Some(target_dir)) =
        (dir.file_name().and_then(|p| p.to_str()), dir.parent())
    else {
        return Ok(());
    };
    let Some(mut command) = workspace_build(&cargo, target_dir, profile, &["--quiet", "--bins"])
    else {
        return Ok(());
    };
    let output = command.output().map_err(|e| format!("run cargo: {e}"))?;
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "`{command:?}` failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    ))
}
