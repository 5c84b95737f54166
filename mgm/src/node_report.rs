//! A data node's report link with ndb_mgmd: a thread that reports the node's state every
//! [`REPORT_INTERVAL`] over one connection and carries out what the reply asks (stop).
//!
//! ndb_mgmd learns every data node's state, version, address, memory and links from these
//! reports; a report link that closes, or is silent for [`crate::server::REPORT_TIMEOUT`], is a
//! node that is gone. The data node keeps serving when ndb_mgmd is unreachable: the thread tries
//! again every [`RECONNECT_DELAY`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::client::{MgmClient, MgmError, Requester, REPLY_TIMEOUT};
use crate::connectstring::ConnectString;
use crate::status::VERSION;
use crate::tls::ClientTls;
use crate::wire::Message;

/// How often a data node reports.
pub const REPORT_INTERVAL: Duration = Duration::from_millis(200);
/// How long the thread waits before connecting again after losing ndb_mgmd.
pub const RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// What a data node tells ndb_mgmd each time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DataNodeReport {
    /// The node serves (QMGR's started).
    pub started: bool,
    /// DataMemory in use and configured, bytes.
    pub data_memory_used_bytes: u64,
    pub data_memory_total_bytes: u64,
    /// Transaction records in use.
    pub transactions: u64,
    /// Nodes with a live link to this one.
    pub connected: Vec<u16>,
}

/// Starts the reporting thread of data node `node_id`. `probe` reads the node's state; the
/// thread sets `shutdown` when ndb_mgmd asks the node to stop (the same graceful stop as
/// SIGTERM), and reports `STOPPING` once `shutdown` is set, whoever set it. The link is TLS
/// when `tls` has keys (the data node's own).
pub fn spawn(
    connectstring: ConnectString,
    tls: ClientTls,
    node_id: u16,
    probe: Box<dyn Fn() -> DataNodeReport + Send>,
    shutdown: Arc<AtomicBool>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("mgm-report".into())
        .spawn(move || loop {
            match MgmClient::connect_tls(&connectstring, &tls) {
                Ok(mut client) => match report_until_lost(&mut client, node_id, &*probe, &shutdown)
                {
                    Err(MgmError::Refused(why)) => {
                        tracing::error!("ndb_mgmd refused this node's reports: {why}");
                        return;
                    }
                    Err(e) => tracing::warn!("lost ndb_mgmd: {e}; reconnecting"),
                    Ok(()) => return,
                },
                Err(e) => tracing::debug!("ndb_mgmd not reachable: {e}"),
            }
            std::thread::sleep(RECONNECT_DELAY);
        })
        .map(|_| ())
}

/// Reports every [`REPORT_INTERVAL`] until the connection fails.
fn report_until_lost(
    client: &mut MgmClient,
    node_id: u16,
    probe: &dyn Fn() -> DataNodeReport,
    shutdown: &AtomicBool,
) -> Result<(), MgmError> {
    tracing::info!(server = %client.server(), "reporting to ndb_mgmd");
    loop {
        let report = probe();
        let stopping = shutdown.load(Ordering::Relaxed);
        let status = match (stopping, report.started) {
            (true, _) => "STOPPING",
            (false, true) => "STARTED",
            (false, false) => "STARTING",
        };
        let connected: Vec<String> = report.connected.iter().map(u16::to_string).collect();
        let request = Message::new("report")
            .field("nodetype", Requester::Ndbd.as_str())
            .field("nodeid", node_id)
            .field("status", status)
            .field("version", VERSION)
            .field("pid", std::process::id())
            .field("connected", connected.join(","))
            .field("datamemory.used", report.data_memory_used_bytes)
            .field("datamemory.total", report.data_memory_total_bytes)
            .field("transactions", report.transactions);
        let reply = client.call(&request, REPLY_TIMEOUT)?;
        if reply.get("action") == Some("stop") && !stopping {
            tracing::info!("ndb_mgmd asked this node to stop: stopping gracefully");
            shutdown.store(true, Ordering::Relaxed);
            continue;
        }
        std::thread::sleep(REPORT_INTERVAL);
    }
}
