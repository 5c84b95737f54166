//! `ndb_waiter`: waits until every data node reaches a state (STARTED by default), asking
//! ndb_mgmd every 100 ms and printing each node's state as it changes. Exits 0 when they all
//! reached it, 1 on timeout or error: for scripts.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use rndb_mgm::status::{NodeState, NodeType};
use rndb_mgm::{ConnectString, MgmClient};

/// How often ndb_mgmd is asked (NDB's 100 ms).
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Wait for the cluster's data nodes to reach a state.
#[derive(Parser, Debug)]
#[command(
    name = "ndb_waiter",
    version,
    about = "wait for the rndb cluster's data nodes to reach a state"
)]
struct Args {
    /// Where ndb_mgmd is: `host[:port][,host[:port]]`.
    #[arg(short = 'c', long = "ndb-connectstring", visible_aliases = ["connect-string", "ndb_connectstring"], default_value = "localhost:1186")]
    connectstring: String,
    /// Directories (colon-separated) holding the cluster CA (NDB-Cluster-cert) and an API node's
    /// key and certificate (ndb-api-private-key, ndb-api-cert): with them the connection to
    /// ndb_mgmd is TLS (NDB 8.3's `start tls`).
    #[arg(long = "ndb-tls-search-path", visible_alias = "ndb_tls_search_path")]
    ndb_tls_search_path: Option<String>,
    /// `relaxed`: TLS when ndb_mgmd can, else plain text; `strict`: TLS or fail.
    #[arg(long = "ndb-mgm-tls", default_value = "relaxed", action = clap::ArgAction::Set,
          value_parser = rndb_mgm::tls::parse_mgm_tls)]
    ndb_mgm_tls: bool,
    /// Give up after this many seconds (exit code 1).
    #[arg(short = 't', long, default_value_t = 120)]
    timeout: u64,
    /// Wait until every data node is connected and waiting for START in NOT_STARTED
    /// (`ndbd --nostart`, `N RESTART -n`).
    #[arg(
        long = "not-started",
        visible_alias = "not_started",
        conflicts_with = "no_contact"
    )]
    not_started: bool,
    /// Wait until no data node is in contact (all stopped).
    #[arg(long = "no-contact", visible_alias = "no_contact")]
    no_contact: bool,
    /// Wait only for these data nodes (comma-separated ids), as NDB's `--wait-nodes`.
    #[arg(
        short = 'w',
        long = "wait-nodes",
        visible_alias = "wait_nodes",
        value_delimiter = ','
    )]
    wait_nodes: Vec<u16>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let connectstring = match ConnectString::parse(&args.connectstring) {
        Ok(cs) => cs,
        Err(e) => {
            eprintln!("ndb_waiter: {e}");
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
            eprintln!("ndb_waiter: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (wanted, name) = if args.not_started {
        (NodeState::NotStarted, "NOT_STARTED")
    } else if args.no_contact {
        (NodeState::NoContact, "NO_CONTACT")
    } else {
        (NodeState::Started, "STARTED")
    };
    if let Some(id) = args.wait_nodes.iter().find(|id| **id == 0) {
        eprintln!("ndb_waiter: --wait-nodes: {id} is not a node id");
        return ExitCode::FAILURE;
    }
    println!("Connecting to mgmsrv at ({connectstring})");
    println!("Waiting for cluster enter state {name}");
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    let mut printed: BTreeMap<u16, NodeState> = BTreeMap::new();
    let mut last_error = None;
    loop {
        match MgmClient::connect_tls(&connectstring, &tls).and_then(|mut c| c.status()) {
            Ok(status) => {
                last_error = None;
                let mut all = true;
                let mut any = false;
                if let Some(id) = args
                    .wait_nodes
                    .iter()
                    .find(|id| status.of_type(NodeType::Ndb).all(|n| n.id != **id))
                {
                    eprintln!(
                        "ndb_waiter: --wait-nodes: node {id} is not a data node of the cluster"
                    );
                    return ExitCode::FAILURE;
                }
                let waited = status
                    .of_type(NodeType::Ndb)
                    .filter(|n| args.wait_nodes.is_empty() || args.wait_nodes.contains(&n.id));
                for node in waited {
                    any = true;
                    all &= node.state == wanted;
                    if printed.insert(node.id, node.state) != Some(node.state) {
                        println!("Node {}: {}", node.id, node.state.as_str());
                    }
                }
                if all && any {
                    return ExitCode::SUCCESS;
                }
            }
            Err(e) => {
                let text = e.to_string();
                if last_error.as_ref() != Some(&text) {
                    eprintln!("ndb_waiter: {text}");
                }
                last_error = Some(text);
            }
        }
        if Instant::now() >= deadline {
            let waiting: Vec<String> = printed
                .iter()
                .filter(|(_, s)| **s != wanted)
                .map(|(id, s)| format!("node {id} is {}", s.as_str()))
                .collect();
            eprintln!(
                "ndb_waiter: timed out after {} s waiting for state {name}{}",
                args.timeout,
                if waiting.is_empty() {
                    String::new()
                } else {
                    format!(": {}", waiting.join(", "))
                }
            );
            return ExitCode::FAILURE;
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}
