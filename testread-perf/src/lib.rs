//! The library half of testread-perf: what other crates of the workspace reuse.
//!
//! - [`data_nodes`]: the data nodes of a config.ini as child processes, awaited until they serve
//!   and stopped on drop. `testread-perf --local` starts its cluster with it, and so does the
//!   integration tests' harness (`rndb-tests`), which depends on this crate for it; this crate
//!   depends on nothing of theirs.
//!
//! - [`cargo_build`]: a `cargo build` of the workspace run from a program cargo started
//!   (testread-perf building ndbd, the harness building every binary), made so that it does not
//!   compile fresh crates again.
//!
//! - [`tpcc`]: the order-entry workload (`--workload tpcc`): its tables, transactions and
//!   consistency checks, which the integration tests also run.
//!
//! The benchmark itself (arguments, measurements, reports) lives in the binary (`main.rs`).
#![forbid(unsafe_code)]

pub mod cargo_build;
pub mod data_nodes;
pub mod tpcc;
