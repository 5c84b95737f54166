//! rndb-fuzz: fuzz targets for every decoder that reads bytes from outside the process, and a
//! small mutation runner that drives them on stable Rust.
//!
//! - [`targets`]: one function per target (`frame`, `signals`, `handshake`, `config`, and the data
//!   node's file readers `redo`, `schema_log`, `lcp`, `sysfile`, `backup`). Each takes
//!   arbitrary bytes and panics only when it finds a bug: a decoder panicked, or something it
//!   accepted does not survive being encoded and decoded again.
//! - [`runner`]: feeds a target its seed corpus (`fuzz/corpus/<target>/`), its regressions
//!   (`fuzz/regressions/<target>/`, every crash found so far) and then mutations of the seeds,
//!   for a bounded number of cases or seconds. A crash is written to `fuzz/artifacts/<target>/`.
//!
//! `cargo test -p rndb-fuzz` runs a short, fixed-seed run of every target; `scripts/fuzz
//! <target>` runs a long one (with `--libfuzzer`, under cargo-fuzz where a nightly toolchain
//! and cargo-fuzz are installed, from `fuzz/libfuzzer/`, on the same target functions).

#![forbid(unsafe_code)]

pub mod runner;
pub mod seeds;
pub mod targets;

pub use runner::{run, Options, Outcome};
pub use targets::{find, Target, TARGETS};
