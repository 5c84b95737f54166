//! `ndb_mgm`: the management client. `ndb_mgm -e "SHOW"` runs one command (several separated
//! by `;`) and exits 1 if one failed; without `-e` it reads commands from stdin, NDB's
//! `ndb_mgm>` prompt first.

use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use rndb_mgm::commands::{self, Command};
use rndb_mgm::{ConnectString, MgmClient};

/// The rndb management client.
#[derive(Parser, Debug)]
#[command(name = "ndb_mgm", version, about = "rndb management client")]
struct Args {
    /// Where ndb_mgmd is: `host[:port][,host[:port]]` (port 1186 by default).
    #[arg(short = 'c', long = "ndb-connectstring", visible_aliases = ["connect-string", "ndb_connectstring"], default_value = "localhost:1186")]
    connectstring: String,
    /// Run these commands and exit.
    #[arg(short = 'e', long = "execute")]
    execute: Option<String>,
    /// How many more times to try an unreachable ndb_mgmd (NDB's default is 3).
    #[arg(long = "connect-retries", default_value_t = 3)]
    connect_retries: u32,
    /// Seconds between tries.
    #[arg(long = "connect-retry-delay", default_value_t = 5)]
    connect_retry_delay: u64,
    /// Directories (colon-separated) holding the cluster CA (NDB-Cluster-cert) and an API node's
    /// key and certificate (ndb-api-private-key, ndb-api-cert): with them the connection to
    /// ndb_mgmd is TLS (NDB 8.3's `start tls`).
    #[arg(long = "ndb-tls-search-path", visible_alias = "ndb_tls_search_path")]
    ndb_tls_search_path: Option<String>,
    /// `relaxed`: TLS when ndb_mgmd can, else plain text; `strict`: TLS or fail.
    #[arg(long = "ndb-mgm-tls", default_value = "relaxed", action = clap::ArgAction::Set,
          value_parser = rndb_mgm::tls::parse_mgm_tls)]
    ndb_mgm_tls: bool,
    /// The connectstring as NDB's positional argument (`ndb_mgm localhost:1186`).
    positional: Option<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let text = args
        .positional
        .clone()
        .unwrap_or(args.connectstring.clone());
    let connectstring = match ConnectString::parse(&text) {
        Ok(cs) => cs,
        Err(e) => {
            eprintln!("ndb_mgm: {e}");
            return ExitCode::FAILURE;
        }
    };
    let tls = match rndb_mgm::tls::ClientTls::load(
        args.ndb_tls_search_path.as_deref(),
        rndb_config::NodeKind::Api,
        args.ndb_mgm_tls,
    ) {
        Ok(tls) => tls,
        Err(e) => {
            eprintln!("ndb_mgm: {e}");
            return ExitCode::FAILURE;
        }
    };
    let retries = args.connect_retries;
    let delay = Duration::from_secs(args.connect_retry_delay);
    let connect = || {
        let mut attempt = 0;
        loop {
            match MgmClient::connect_tls(&connectstring, &tls) {
                Err(e) if attempt < retries => {
                    eprintln!(
                        "Unable to connect with connect string: {connectstring}: {e}\n\
                         Retrying every {} seconds. Attempts left: {}",
                        delay.as_secs(),
                        retries - attempt
                    );
                    attempt += 1;
                    std::thread::sleep(delay);
                }
                Err(e) => {
                    return Err(rndb_mgm::MgmError::Unreachable(format!(
                        "Unable to connect with connect string: {connectstring}: {e}"
                    )))
                }
                ok => return ok,
            }
        }
    };
    match &args.execute {
        Some(lines) => {
            let mut ok = true;
            for line in lines.split(';').filter(|l| !l.trim().is_empty()) {
                ok &= run_line(line, &connect);
            }
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        None => interactive(&connect),
    }
}

/// Parses and runs one command, printing its output or error; false when it failed.
fn run_line(line: &str, connect: &dyn Fn() -> Result<MgmClient, rndb_mgm::MgmError>) -> bool {
    let result = commands::parse(line).and_then(|command| commands::execute(&command, connect));
    match result {
        Ok(out) => {
            print!("{out}");
            let _ = std::io::stdout().flush();
            true
        }
        Err(why) => {
            eprintln!("{why}");
            false
        }
    }
}

fn interactive(connect: &dyn Fn() -> Result<MgmClient, rndb_mgm::MgmError>) -> ExitCode {
    println!("-- NDB Cluster -- Management Client --");
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    loop {
        print!("ndb_mgm> ");
        let _ = std::io::stdout().flush();
        let Some(Ok(line)) = lines.next() else {
            println!();
            return ExitCode::SUCCESS;
        };
        if line.trim().is_empty() {
            continue;
        }
        if matches!(commands::parse(&line), Ok(Command::Quit)) {
            return ExitCode::SUCCESS;
        }
        run_line(&line, connect);
    }
}
