//! rndb-mgm: the management server (`ndb_mgmd`), its clients (`ndb_mgm`, `ndb_waiter`), and
//! the management protocol data nodes and API nodes fetch their config with.
//!
//! - [`wire`]: the protocol's text messages (NDB's mgmapi style: a command line, `name: value`
//!   fields, an optional body).
//! - [`connectstring`]: NDB's `--ndb-connectstring` (`nodeid=N,host:port,...`).
//! - [`identity`]: which config a process runs (cluster id and text checksum), sent with
//!   reports so that management servers serving different configs are caught.
//! - [`client`]: one connection to ndb_mgmd; `fetch_config` for nodes started with `-c`.
//! - [`node_report`]: a data node's reports to ndb_mgmd (state, links, memory, the figures of
//!   [`node_report::FIGURES`]) and the stop, restart or start ndb_mgmd may ask for in its
//!   replies; the wait in NOT_STARTED of a node started with `--nostart`.
//! - [`backup_round`]: the coordinator of an online backup (START BACKUP), over the data
//!   nodes' reported progress.
//! - [`status`]: what ndb_mgmd knows of each node, and SHOW's and STATUS's text.
//! - [`tls`]: TLS on the protocol (`start tls`, as NDB 8.3), for both ends.
//! - [`server`]: ndb_mgmd itself: serving the config, node states, the cluster log
//!   ([`server::log`]), the config cache ([`server::cache`]), STOP, RESTART, START and
//!   SHUTDOWN, and the metrics endpoint ([`server::metrics`]).
//!
//! A request flows: `ndb_mgm -e "2 STOP"` → `client::MgmClient::call("stop", node: 2)` →
//! `server::Server::stop` marks node 2 → node 2's next report gets `action: stop` → the data
//! node stops as on SIGTERM → its report link closes → the server answers `stopped: 2`.

#![forbid(unsafe_code)]

pub mod backup_round;
pub mod client;
pub mod commands;
pub mod connectstring;
pub mod identity;
pub mod node_report;
pub mod server;
pub mod status;
pub mod tls;
pub mod wire;

pub use client::{fetch_config, FetchedConfig, MgmClient, MgmError, Requester};
pub use connectstring::{ConnectString, DEFAULT_PORT};
