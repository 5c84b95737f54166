//! `ndb_perror`: what an NDB error code means, like MySQL Cluster's `ndb_perror`.
//!
//! `ndb_perror 626 4010` prints, for each code, `NDB error code 626: Tuple did not exist:
//! Permanent error: No data found` (`--silent`: the message alone). A code rndb does not know
//! is reported on stderr, the other codes are still printed, and the exit status is 1.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use rndb_api::NdbError;

/// Print the message, status and classification of NDB error codes, like NDB's ndb_perror.
#[derive(Debug, Parser)]
#[command(name = "ndb_perror", version)]
struct Args {
    /// Print only the error message.
    #[arg(short, long)]
    silent: bool,
    /// The error codes.
    #[arg(value_name = "CODE", required = true)]
    codes: Vec<u32>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut status = ExitCode::SUCCESS;
    for &code in &args.codes {
        match NdbError::known(code) {
            Some(e) if args.silent => println!("{}", e.message),
            Some(e) => println!(
                "NDB error code {code}: {}: {}: {}",
                e.message,
                e.class.status(),
                e.class.description()
            ),
            None => {
                eprintln!("ndb_perror: illegal NDB error code {code}: not one rndb knows");
                status = ExitCode::FAILURE;
            }
        }
    }
    status
}
