//! TLS on the management protocol, as NDB 8.3 does it: a connection starts in plain text, the
//! client asks `start tls`, the server answers `start tls reply` with `result: Ok`, and both run
//! the TLS handshake on the same socket; every later request and reply is inside TLS.
//!
//! - The server presents its management node certificate (`ndb-mgm-server-cert`, signed with
//!   `ndb_sign_keys --node-type=mgmd`) and checks the client's against the cluster CA: a data
//!   node presents its data node certificate, an API node and the tools (`ndb_mgm`,
//!   `ndb_waiter`) an API node certificate. A TLS client asking for a data node's config, or
//!   reporting as one, must hold a data node certificate (an API node certificate for an API
//!   node's config), so a stolen API key does not make a data node.
//! - A server without keys answers `start tls` with an error; a client in relaxed mode (NDB's
//!   `--ndb-mgm-tls=relaxed`, the default) goes on in plain text, one in strict mode fails.
//! - A server whose `[ndb_mgmd]` section has RequireTls=1 answers any other request on a plain
//!   connection with `result: Error: Requires TLS …`, logs the peer, and closes it.
//!
//! ```text
//!  client                                   ndb_mgmd
//!  start tls\n\n                      ──▶
//!                                     ◀──   start tls reply\nresult: Ok\n\n
//!  TLS 1.3 handshake (both present certificates signed by the cluster CA)
//!  get config\nnodetype: ndbd\n\n     ══▶   (inside TLS from here on)
//! ```

use std::io::BufReader;
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rndb_config::{NodeId, NodeKind};
use rndb_transporter::tls::io::{NodeStream, TlsStream};
use rndb_transporter::tls::{self, NodeTls, SearchPath};
use rndb_transporter::TransportError;

use crate::client::MgmError;
use crate::connectstring::MgmAddress;
use crate::wire::Message;

/// The command that upgrades a connection.
pub const START_TLS: &str = "start tls";
/// How long the TLS handshake may take, on either side.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// The start of the error a server requiring TLS gives a plain request (NDB's "Requires TLS").
pub const REQUIRES_TLS: &str = "Requires TLS";

/// A connection to or from ndb_mgmd, read through a buffer: plain, or TLS after `start tls`.
pub type MgmConnection = BufReader<NodeStream>;

/// How a client of ndb_mgmd uses TLS.
#[derive(Clone, Debug, Default)]
pub struct ClientTls {
    /// The keys the client presents; `None`: plain text.
    pub keys: Option<Arc<NodeTls>>,
    /// Fail rather than go on in plain text when the server cannot do TLS (NDB's
    /// `--ndb-mgm-tls=strict`).
    pub strict: bool,
}

impl ClientTls {
    /// Plain text.
    pub fn plain() -> ClientTls {
        ClientTls::default()
    }

    /// The keys of a node of `kind` on `search_path` (colon-separated); none without a path.
    /// A path whose keys do not load is an error naming the missing or bad file.
    pub fn load(
        search_path: Option<&str>,
        kind: NodeKind,
        strict: bool,
    ) -> Result<ClientTls, MgmError> {
        let keys = match search_path {
            Some(path) => Some(Arc::new(
                NodeTls::load(&SearchPath::parse(path), kind)
                    .map_err(|e| MgmError::Tls(reason(e)))?,
            )),
            None if strict => {
                return Err(MgmError::Tls(format!(
                    "--ndb-mgm-tls=strict needs --ndb-tls-search-path naming the directories \
                     holding {}, {} and {}",
                    tls::CA_CERT_FILE,
                    tls::cert_file(kind),
                    tls::key_file(kind)
                )))
            }
            None => None,
        };
        Ok(ClientTls { keys, strict })
    }

    /// A client with keys already loaded (a data node's own).
    pub fn with_keys(keys: Option<Arc<NodeTls>>, strict: bool) -> ClientTls {
        ClientTls { keys, strict }
    }
}

/// NDB's `--ndb-mgm-tls` values.
pub fn parse_mgm_tls(text: &str) -> Result<bool, String> {
    match text {
        "relaxed" => Ok(false),
        "strict" => Ok(true),
        other => Err(format!("{other:?}: expected relaxed or strict")),
    }
}

/// Upgrades a freshly connected `sock` to TLS when `tls` has keys: asks `start tls`, and runs
/// the handshake once the server agrees. A server that cannot do TLS leaves the connection
/// plain (relaxed) or is an error (strict).
pub fn start_client(
    sock: TcpStream,
    tls: &ClientTls,
    server: &MgmAddress,
) -> Result<MgmConnection, MgmError> {
    let mut conn = BufReader::new(NodeStream::Plain(sock));
    let Some(keys) = &tls.keys else {
        return Ok(conn);
    };
    let io = |source| MgmError::Io {
        server: server.to_string(),
        source,
    };
    conn.get_mut()
        .socket()
        .set_read_timeout(Some(HANDSHAKE_TIMEOUT))
        .map_err(io)?;
    Message::new(START_TLS)
        .write_to(conn.get_mut())
        .map_err(io)?;
    let reply = Message::read_from(&mut conn)
        .map_err(io)?
        .ok_or_else(|| MgmError::Protocol {
            server: server.to_string(),
            reason: "the server closed the connection at start tls".into(),
        })?;
    if let Err(why) = reply.result() {
        if tls.strict {
            return Err(MgmError::Tls(format!(
                "ndb_mgmd at {server} cannot do TLS ({why}), and --ndb-mgm-tls=strict"
            )));
        }
        tracing::warn!("ndb_mgmd at {server} cannot do TLS ({why}); going on in plain text");
        return Ok(conn);
    }
    if !conn.buffer().is_empty() {
        return Err(MgmError::Protocol {
            server: server.to_string(),
            reason: "bytes after the start tls reply, before the TLS handshake".into(),
        });
    }
    let NodeStream::Plain(sock) = conn.into_inner() else {
        return Err(MgmError::Tls("the connection is already TLS".into()));
    };
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    let stream = TlsStream::connect(keys, sock, &server.host, deadline)
        .map_err(|e| MgmError::Tls(format!("ndb_mgmd at {server}: {}", reason(e))))?;
    Ok(BufReader::new(NodeStream::Tls(Box::new(stream))))
}

/// What the server does with the TLS side of connections: its keys, and RequireTls.
#[derive(Clone, Debug)]
pub struct ServerTls {
    /// The management node's keys; `None`: `start tls` is refused.
    pub keys: Option<Arc<NodeTls>>,
    /// RequireTls=1 in this management node's section: plain requests are refused.
    pub require_tls: bool,
    /// This management node, for messages.
    pub me: NodeId,
}

/// What the server does with one request, as far as TLS goes.
#[derive(Debug)]
pub enum Screened {
    /// Serve the request on the connection as it is.
    Serve(MgmConnection),
    /// Answer with this instead of serving the request, and go on.
    Answer(MgmConnection, Message),
    /// The connection became TLS: read the next request.
    Upgraded(MgmConnection),
    /// Answer with this (if anything) and close the connection.
    Close(Option<(MgmConnection, Message)>),
}

impl ServerTls {
    /// No keys: `start tls` is refused, plain clients are served.
    pub fn plain(me: NodeId) -> ServerTls {
        ServerTls {
            keys: None,
            require_tls: false,
            me,
        }
    }

    /// Screens one request read from `conn` (from `peer`): `start tls` upgrades, a plain request
    /// to a server that requires TLS is refused, and a TLS client's certificate must be for
    /// the node type it asks or reports as.
    pub fn screen(&self, request: &Message, mut conn: MgmConnection, peer: &str) -> Screened {
        let is_tls = conn.get_ref().is_tls();
        if request.command == START_TLS {
            return self.start_tls(conn, peer);
        }
        if !is_tls && self.require_tls {
            tracing::warn!(
                peer,
                command = %request.command,
                "refused a plain-text client: RequireTls=1 for management node {}",
                self.me
            );
            let why = format!(
                "{REQUIRES_TLS}: ndb_mgmd (node {}) has RequireTls=1 and refuses plain-text \
                 clients; connect with --ndb-tls-search-path naming the cluster CA and this \
                 client's keys",
                self.me
            );
            return Screened::Close(Some((conn, Message::error_reply(&request.command, why))));
        }
        if is_tls {
            if let Err(why) = check_certificate(conn.get_mut(), request) {
                tracing::warn!(peer, "refused a TLS client: {why}");
                return Screened::Answer(conn, Message::error_reply(&request.command, why));
            }
        }
        Screened::Serve(conn)
    }

    fn start_tls(&self, mut conn: MgmConnection, peer: &str) -> Screened {
        let refuse = |conn, why: &str| Screened::Answer(conn, Message::error_reply(START_TLS, why));
        let Some(keys) = &self.keys else {
            return refuse(
                conn,
                "ndb_mgmd has no TLS keys (start it with --ndb-tls-search-path)",
            );
        };
        if conn.get_ref().is_tls() {
            return refuse(conn, "the connection is already TLS");
        }
        if !conn.buffer().is_empty() {
            return Screened::Close(Some((
                conn,
                Message::error_reply(START_TLS, "bytes after start tls, before the handshake"),
            )));
        }
        if Message::ok_reply(START_TLS)
            .write_to(conn.get_mut())
            .is_err()
        {
            return Screened::Close(None);
        }
        let NodeStream::Plain(sock) = conn.into_inner() else {
            return Screened::Close(None);
        };
        let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
        match TlsStream::accept(keys, sock, deadline) {
            Ok(stream) => {
                tracing::debug!(peer, "management connection upgraded to TLS");
                Screened::Upgraded(BufReader::new(NodeStream::Tls(Box::new(stream))))
            }
            Err(e) => {
                tracing::warn!(peer, "TLS handshake with a management client failed: {e}");
                Screened::Close(None)
            }
        }
    }
}

/// A TLS client asking for (or reporting as) a node of some type must present a certificate
/// for that type.
fn check_certificate(stream: &NodeStream, request: &Message) -> Result<(), String> {
    if !matches!(request.command.as_str(), "get config" | "report") {
        return Ok(());
    }
    let wanted = match request.get("nodetype") {
        Some("ndbd") => NodeKind::Data,
        Some("api") => NodeKind::Api,
        Some("mgm") => NodeKind::Mgm,
        _ => return Ok(()),
    };
    let NodeStream::Tls(tls_stream) = stream else {
        return Ok(());
    };
    let cert = tls_stream
        .peer_certificate()
        .ok_or("the TLS client presented no certificate")?;
    let kind = tls::kind_of_certificate(cert)?;
    if kind != wanted {
        return Err(format!(
            "the client's certificate is for {}, not for {} (nodetype {})",
            tls::kind_name(kind),
            tls::kind_name(wanted),
            request.get("nodetype").unwrap_or_default()
        ));
    }
    Ok(())
}

fn reason(e: TransportError) -> String {
    match e {
        TransportError::Tls(reason) => reason,
        e => e.to_string(),
    }
}
