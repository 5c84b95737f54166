//! A connection to ndb_mgmd: what `ndb_mgm`, `ndb_waiter`, data nodes and API nodes use.

use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use rndb_config::{ClusterConfig, ConfigErrors};

use crate::connectstring::{ConnectString, MgmAddress, MgmServer};
use crate::identity::ConfigIdentity;
use crate::status::ClusterStatus;
use crate::tls::{ClientTls, MgmConnection};
use crate::wire::Message;

/// How long connecting to one management server may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a reply may take, except for requests that wait for nodes to stop.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a reply to STOP or SHUTDOWN may take: the server waits for the nodes to be gone.
pub const STOP_REPLY_TIMEOUT: Duration = Duration::from_secs(150);
/// How long START BACKUP waits for its answer: a little longer than the server waits for the
/// backup (`server::backup::BACKUP_WAIT`).
pub const BACKUP_REPLY_TIMEOUT: Duration = Duration::from_secs(6 * 3600 + 60);

/// What talking to ndb_mgmd can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MgmError {
    /// The connectstring is malformed.
    #[error("{0}")]
    ConnectString(String),
    /// No management server of the connectstring could be reached; each one's reason.
    #[error("could not connect to a management server ({0})")]
    Unreachable(String),
    /// The connection failed while a request was outstanding.
    #[error("ndb_mgmd at {server}: {source}")]
    Io {
        server: String,
        source: std::io::Error,
    },
    /// ndb_mgmd refused the request, saying why.
    #[error("{0}")]
    Refused(String),
    /// The reply was not what the request expects.
    #[error("ndb_mgmd at {server}: unexpected reply: {reason}")]
    Protocol { server: String, reason: String },
    /// The config ndb_mgmd served does not parse.
    #[error("the config served by ndb_mgmd has errors:\n{0}")]
    Config(ConfigErrors),
    /// TLS to ndb_mgmd failed, or the keys for it are missing (see [`crate::tls`]).
    #[error("TLS: {0}")]
    Tls(String),
}

/// The kinds of node that ask for a config (NDB's `nodetype`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requester {
    Ndbd,
    Api,
    Mgm,
}

impl Requester {
    pub fn as_str(self) -> &'static str {
        match self {
            Requester::Ndbd => "ndbd",
            Requester::Api => "api",
            Requester::Mgm => "mgm",
        }
    }
}

/// The config ndb_mgmd served, and the node id it gave (for a data node that asked for any).
#[derive(Debug)]
pub struct FetchedConfig {
    pub config: ClusterConfig,
    pub node_id: Option<u16>,
    /// The config's text, as served.
    pub text: String,
    /// The management server that served it.
    pub server: MgmAddress,
}

impl FetchedConfig {
    /// The identity of the config served (see [`crate::identity`]).
    pub fn identity(&self) -> ConfigIdentity {
        ConfigIdentity::of(&self.config, &self.text)
    }
}

/// One connection to one management server.
#[derive(Debug)]
pub struct MgmClient {
    /// Requests are written to and replies read from this connection, plain or TLS.
    conn: MgmConnection,
    server: MgmAddress,
}

impl MgmClient {
    /// Connects to `server` alone (TLS when `tls` has keys).
    pub fn connect_to(server: &MgmAddress, tls: &ClientTls) -> Result<MgmClient, MgmError> {
        let stream =
            connect_one(server).map_err(|e| MgmError::Unreachable(format!("{server}: {e}")))?;
        let conn = crate::tls::start_client(stream, tls, server)?;
        Ok(MgmClient {
            conn,
            server: server.clone(),
        })
    }

    /// Connects to the first management server of `connectstring` that answers, in plain text.
    pub fn connect(connectstring: &ConnectString) -> Result<MgmClient, MgmError> {
        MgmClient::connect_tls(connectstring, &ClientTls::plain())
    }

    /// Connects to the first management server of `connectstring` that answers, and upgrades
    /// the connection to TLS when `tls` has keys (see [`crate::tls`]).
    pub fn connect_tls(
        connectstring: &ConnectString,
        tls: &ClientTls,
    ) -> Result<MgmClient, MgmError> {
        let mut reasons = Vec::new();
        for server in &connectstring.servers {
            match connect_one(server) {
                Ok(stream) => {
                    let conn = crate::tls::start_client(stream, tls, server)?;
                    return Ok(MgmClient {
                        conn,
                        server: server.clone(),
                    });
                }
                Err(e) => reasons.push(format!("{server}: {e}")),
            }
        }
        Err(MgmError::Unreachable(reasons.join("; ")))
    }

    /// Parses `text` as a connectstring and connects, trying up to `retries` more times with
    /// `delay` between rounds (NDB's `--connect-retries` and `--connect-retry-delay`).
    pub fn connect_str(text: &str, retries: u32, delay: Duration) -> Result<MgmClient, MgmError> {
        MgmClient::connect_str_tls(text, retries, delay, &ClientTls::plain())
    }

    /// [`MgmClient::connect_str`] with TLS when `tls` has keys.
    pub fn connect_str_tls(
        text: &str,
        retries: u32,
        delay: Duration,
        tls: &ClientTls,
    ) -> Result<MgmClient, MgmError> {
        let connectstring = ConnectString::parse(text).map_err(MgmError::ConnectString)?;
        let mut attempt = 0;
        loop {
            match MgmClient::connect_tls(&connectstring, tls) {
                Err(MgmError::Unreachable(_)) if attempt < retries => {
                    attempt += 1;
                    std::thread::sleep(delay);
                }
                other => return other,
            }
        }
    }

    /// True when the connection is TLS.
    pub fn is_tls(&self) -> bool {
        self.conn.get_ref().is_tls()
    }

    /// The server this client talks to.
    pub fn server(&self) -> &MgmAddress {
        &self.server
    }

    /// Sends `request` and reads its reply, waiting at most `timeout`; a reply with an error
    /// result is [`MgmError::Refused`].
    pub fn call(&mut self, request: &Message, timeout: Duration) -> Result<Message, MgmError> {
        let io = |source| MgmError::Io {
            server: self.server.to_string(),
            source,
        };
        let stream = self.conn.get_mut();
        stream
            .socket()
            .set_read_timeout(Some(timeout))
            .map_err(io)?;
        request.write_to(stream).map_err(io)?;
        let reply = Message::read_from(&mut self.conn)
            .map_err(io)?
            .ok_or_else(|| MgmError::Protocol {
                server: self.server.to_string(),
                reason: "the server closed the connection".into(),
            })?;
        let expected = format!("{} reply", request.command);
        if reply.command != expected {
            return Err(MgmError::Protocol {
                server: self.server.to_string(),
                reason: format!("{:?} to {:?}", reply.command, request.command),
            });
        }
        reply.result().map_err(MgmError::Refused)?;
        Ok(reply)
    }

    /// Asks for the cluster's config as node `node_id` of kind `requester` (`None`: a data
    /// node asks for any free data node id; an API node takes a slot when it connects).
    pub fn fetch_config(
        &mut self,
        requester: Requester,
        node_id: Option<u16>,
    ) -> Result<FetchedConfig, MgmError> {
        let mut request = Message::new("get config").field("nodetype", requester.as_str());
        if let Some(id) = node_id {
            request.push("nodeid", id);
        }
        let reply = self.call(&request, REPLY_TIMEOUT)?;
        let text = String::from_utf8(reply.body.clone()).map_err(|_| MgmError::Protocol {
            server: self.server.to_string(),
            reason: "the config is not UTF-8".into(),
        })?;
        let source = format!("ndb_mgmd {}", self.server);
        let config = rndb_config::parse_str(&text, std::path::Path::new(&source))
            .map_err(MgmError::Config)?;
        let node_id = reply.parse("nodeid").map_err(|reason| MgmError::Protocol {
            server: self.server.to_string(),
            reason,
        })?;
        Ok(FetchedConfig {
            config,
            node_id,
            text,
            server: self.server.clone(),
        })
    }

    /// Every node's state.
    pub fn status(&mut self) -> Result<ClusterStatus, MgmError> {
        let reply = self.call(&Message::new("get status"), REPLY_TIMEOUT)?;
        ClusterStatus::from_message(&reply).map_err(|reason| MgmError::Protocol {
            server: self.server.to_string(),
            reason,
        })
    }
}

/// Resolves and connects to `server`, bounded by [`CONNECT_TIMEOUT`] per address.
fn connect_one(server: &MgmAddress) -> std::io::Result<TcpStream> {
    let mut last = None;
    for addr in (server.host.as_str(), server.port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "the host name resolves to no address",
        )
    }))
}

/// Fetches the config from the first management server of `connectstring` that answers,
/// retrying unreachable servers `retries` times `delay` apart: how `ndbd -c` and API nodes
/// started with a connectstring get their config.
pub fn fetch_config(
    connectstring: &str,
    requester: Requester,
    node_id: Option<u16>,
    retries: u32,
    delay: Duration,
) -> Result<FetchedConfig, MgmError> {
    fetch_config_tls(
        connectstring,
        requester,
        node_id,
        retries,
        delay,
        &ClientTls::plain(),
    )
}

/// [`fetch_config`] with TLS when `tls` has keys. The servers are tried in the
/// connectstring's order: one that cannot be reached, or whose connection fails before it
/// answered, is passed over for the next (a server that answers with a refusal is not: its
/// refusal is the answer). When every server fails, the error names each with its reason.
pub fn fetch_config_tls(
    connectstring: &str,
    requester: Requester,
    node_id: Option<u16>,
    retries: u32,
    delay: Duration,
    tls: &ClientTls,
) -> Result<FetchedConfig, MgmError> {
    let parsed = ConnectString::parse(connectstring).map_err(MgmError::ConnectString)?;
    let node_id = node_id.or(parsed.node_id);
    let mut attempt = 0;
    loop {
        let mut reasons = Vec::new();
        for server in &parsed.servers {
            let fetched = MgmClient::connect_to(server, tls)
                .and_then(|mut client| client.fetch_config(requester, node_id));
            match fetched {
                Ok(fetched) => {
                    if !reasons.is_empty() {
                        tracing::warn!(
                            "config fetched from ndb_mgmd {server} after failing over ({})",
                            reasons.join("; ")
                        );
                    }
                    return Ok(fetched);
                }
                Err(MgmError::Unreachable(why)) => reasons.push(why),
                Err(e @ (MgmError::Io { .. } | MgmError::Protocol { .. })) => {
                    reasons.push(e.to_string());
                }
                Err(e) => return Err(e),
            }
        }
        if attempt >= retries {
            return Err(MgmError::Unreachable(reasons.join("; ")));
        }
        attempt += 1;
        std::thread::sleep(delay);
    }
}

/// Tells every management server of `servers` (see [`ConnectString::servers_of`]) that API
/// node `node_id` connected to the cluster (its version and address, as NDB's API reports
/// ConnectedApiVersion), once, with the identity of the config it runs. Returns the servers
/// that could not be told, each with its reason.
pub fn report_api_connected(
    servers: &[MgmServer],
    node_id: u16,
    identity: &ConfigIdentity,
    tls: &ClientTls,
) -> Vec<(MgmServer, MgmError)> {
    let mut request = Message::new("report")
        .field("nodetype", Requester::Api.as_str())
        .field("nodeid", node_id)
        .field("version", crate::status::VERSION);
    identity.add_to(&mut request);
    servers
        .iter()
        .filter_map(|server| {
            MgmClient::connect_to(&server.address, tls)
                .and_then(|mut client| client.call(&request, REPLY_TIMEOUT))
                .err()
                .map(|e| (server.clone(), e))
        })
        .collect()
}
