//! TLS on node links (NDB 8.3's "TLS Link Encryption"): the cluster CA, each node's key and
//! certificate found on a search path, the rustls configurations built from them, and the link
//! whose bytes are TLS records ([`io::TlsLink`]).
//!
//! - Files, with NDB's names: the CA certificate `NDB-Cluster-cert` (its key
//!   `NDB-Cluster-private-key` stays with whoever signs), and per node type
//!   `ndb-data-node-cert`/`ndb-data-node-private-key`, `ndb-api-cert`/`ndb-api-private-key`,
//!   `ndb-mgm-server-cert`/`ndb-mgm-server-private-key`, each looked up in the directories of
//!   `--ndb-tls-search-path` in order ([`SearchPath`]). `ndb_sign_keys` ([`pki`]) makes them.
//! - Certificates name their node type in the subject's common name as NDB does ("NDB Data
//!   Node Dec 2026", "NDB Node …" for API nodes); a peer whose certificate is for another node
//!   type than the one it connects as is refused ([`kind_of_certificate`]). Both ends present
//!   certificates signed by the cluster CA (mutual TLS); an expired certificate or one from
//!   another CA fails the TLS handshake. A certificate with subject alternative names is bound
//!   to them: a connecting node checks the data node's against that node's HostName (a data
//!   node does not yet check a connecting node's binding against its address).
//! - The upgrade happens inside the node handshake ([`crate::handshake`]): a node with keys opens
//!   with START_TLS, and HELLO follows inside TLS.
//!
//! **Architecture Invariant:** a link without TLS is a [`crate::tcp::TcpLink`] exactly as before:
//! TLS adds no branch to the plain link's send or receive path.
#![forbid(unsafe_code)]

pub mod io;
pub mod pki;
mod verify;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rndb_config::NodeKind;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use crate::TransportError;

/// The cluster CA's certificate file.
pub const CA_CERT_FILE: &str = "NDB-Cluster-cert";
/// The cluster CA's private key file.
pub const CA_KEY_FILE: &str = "NDB-Cluster-private-key";

/// The certificate file of a node of `kind`, as NDB names it.
pub fn cert_file(kind: NodeKind) -> &'static str {
    match kind {
        NodeKind::Data => "ndb-data-node-cert",
        NodeKind::Api => "ndb-api-cert",
        NodeKind::Mgm => "ndb-mgm-server-cert",
    }
}

/// The private key file of a node of `kind`, as NDB names it.
pub fn key_file(kind: NodeKind) -> &'static str {
    match kind {
        NodeKind::Data => "ndb-data-node-private-key",
        NodeKind::Api => "ndb-api-private-key",
        NodeKind::Mgm => "ndb-mgm-server-private-key",
    }
}

/// The directories `--ndb-tls-search-path` names, colon-separated, searched in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchPath {
    /// The directories, in the order given; an empty entry is the current directory.
    pub dirs: Vec<PathBuf>,
}

impl SearchPath {
    /// Parses `a:b:c`.
    pub fn parse(text: &str) -> SearchPath {
        SearchPath {
            dirs: text.split(':').map(PathBuf::from).collect(),
        }
    }

    /// The first existing `name` in the directories, in order.
    pub fn find(&self, name: &str) -> Option<PathBuf> {
        self.dirs
            .iter()
            .map(|dir| dir.join(name))
            .find(|path| path.is_file())
    }

    /// `name` in the search path, or an error naming the file and the path.
    pub fn require(&self, name: &str) -> Result<PathBuf, TransportError> {
        self.find(name).ok_or_else(|| {
            TransportError::Tls(format!(
                "no file {name} in the TLS search path {} (create it with ndb_sign_keys)",
                self
            ))
        })
    }
}

impl std::fmt::Display for SearchPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dirs: Vec<String> = self.dirs.iter().map(|d| d.display().to_string()).collect();
        write!(f, "{}", dirs.join(":"))
    }
}

/// A node's TLS identity: its certificate and key, the cluster CA, and the rustls
/// configurations for both ends of a connection. Built once at start-up and shared.
#[derive(Clone)]
pub struct NodeTls {
    /// What this node presents and checks when it connects (API nodes, a data node to lower ids).
    pub(crate) client: Arc<ClientConfig>,
    /// What this node presents and checks when it accepts (data nodes).
    pub(crate) server: Arc<ServerConfig>,
    /// The certificate file in use, for log lines.
    pub cert_path: PathBuf,
    /// The node type its certificate is for.
    pub kind: NodeKind,
}

impl std::fmt::Debug for NodeTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeTls")
            .field("cert_path", &self.cert_path)
            .field("kind", &self.kind)
            .finish()
    }
}

impl NodeTls {
    /// Finds the CA certificate and the certificate and key of a node of `kind` on
    /// `search_path` and builds the TLS configurations. Every error names the file.
    pub fn load(search_path: &SearchPath, kind: NodeKind) -> Result<NodeTls, TransportError> {
        let ca_path = search_path.require(CA_CERT_FILE)?;
        let cert_path = search_path.require(cert_file(kind))?;
        let key_path = search_path.require(key_file(kind))?;
        let ca = read_certs(&ca_path)?;
        let chain = read_certs(&cert_path)?;
        let key = PrivateKeyDer::from_pem_file(&key_path)
            .map_err(|e| file_error(&key_path, format!("not a PEM private key: {e}")))?;
        let own_kind =
            kind_of_certificate(&chain[0]).map_err(|reason| file_error(&cert_path, reason))?;
        if own_kind != kind {
            return Err(file_error(
                &cert_path,
                format!(
                    "is a certificate for {}, not for {}",
                    kind_name(own_kind),
                    kind_name(kind)
                ),
            ));
        }
        let mut roots = RootCertStore::empty();
        for cert in ca {
            roots
                .add(cert)
                .map_err(|e| file_error(&ca_path, format!("not a usable CA certificate: {e}")))?;
        }
        let roots = Arc::new(roots);
        let provider = Arc::new(provider());
        let configs = verify::configs(roots, provider, chain, key).map_err(|e| {
            file_error(
                &cert_path,
                format!("with its key {}: {e}", key_path.display()),
            )
        })?;
        Ok(NodeTls {
            client: configs.0,
            server: configs.1,
            cert_path,
            kind,
        })
    }
}

/// rustls's ring provider with AES-128-GCM preferred: a link's records are small and many,
/// and AES-128 costs less per record than AES-256 with the same AES-NI.
fn provider() -> rustls::crypto::CryptoProvider {
    use rustls::crypto::ring::cipher_suite;
    rustls::crypto::CryptoProvider {
        cipher_suites: vec![
            cipher_suite::TLS13_AES_128_GCM_SHA256,
            cipher_suite::TLS13_AES_256_GCM_SHA384,
            cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
        ],
        ..rustls::crypto::ring::default_provider()
    }
}

/// What a node brings to every connection: its TLS identity, if it has one, and whether its
/// links must be TLS (RequireTls).
#[derive(Clone, Debug, Default)]
pub struct TlsSetup {
    /// This node's keys; `None` when started without a TLS search path (or none was found).
    pub keys: Option<Arc<NodeTls>>,
    /// RequireTls=1 for this node: no link without TLS.
    pub require_tls: bool,
}

impl TlsSetup {
    /// No TLS: plain TCP links, plain peers admitted.
    pub fn plain() -> TlsSetup {
        TlsSetup::default()
    }

    /// The setup of a node of `kind` started with `search_path` (maybe none) and the config's
    /// RequireTls and RequireCertificate for it. With a search path, the keys must load; without
    /// one, RequireTls and RequireCertificate are errors that say what is missing.
    pub fn for_node(
        search_path: Option<&SearchPath>,
        kind: NodeKind,
        require_tls: bool,
        require_certificate: bool,
    ) -> Result<TlsSetup, TransportError> {
        let keys = match search_path {
            Some(path) => Some(Arc::new(NodeTls::load(path, kind)?)),
            None if require_tls || require_certificate => {
                let parameter = if require_tls {
                    "RequireTls"
                } else {
                    "RequireCertificate"
                };
                return Err(TransportError::Tls(format!(
                    "{parameter}=1 but no TLS search path was given: name the directories \
                     holding {CA_CERT_FILE}, {} and {} with --ndb-tls-search-path",
                    cert_file(kind),
                    key_file(kind)
                )));
            }
            None => None,
        };
        Ok(TlsSetup { keys, require_tls })
    }
}

/// The node type a certificate is for, from its subject's common name as NDB writes it
/// ("NDB Data Node …", "NDB Management Node …", "NDB Node …" for API nodes).
pub fn kind_of_certificate(cert: &CertificateDer<'_>) -> Result<NodeKind, String> {
    let common_name = pki::common_name(cert)?;
    kind_of_common_name(&common_name)
        .ok_or_else(|| format!("common name \"{common_name}\" names no NDB node type"))
}

/// The node type an NDB common name names.
pub fn kind_of_common_name(common_name: &str) -> Option<NodeKind> {
    if common_name.starts_with("NDB Data Node") {
        Some(NodeKind::Data)
    } else if common_name.starts_with("NDB Management Node") {
        Some(NodeKind::Mgm)
    } else if common_name.starts_with("NDB Node") {
        Some(NodeKind::Api)
    } else {
        None
    }
}

/// "a data node", "an API node", "a management node".
pub fn kind_name(kind: NodeKind) -> &'static str {
    match kind {
        NodeKind::Data => "a data node",
        NodeKind::Api => "an API node",
        NodeKind::Mgm => "a management node",
    }
}

/// Every certificate in a PEM file; at least one.
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TransportError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| file_error(path, format!("not a PEM certificate file: {e}")))?;
    if certs.is_empty() {
        return Err(file_error(path, "holds no certificate".to_string()));
    }
    Ok(certs)
}

fn file_error(path: &Path, reason: String) -> TransportError {
    TransportError::Tls(format!("{}: {reason}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(common_name: &str, expected: Option<NodeKind>) {
        assert_eq!(kind_of_common_name(common_name), expected, "{common_name}");
    }

    /// NDB's common names, as `ndb_sign_keys` writes them, name the node type; others none.
    #[test]
    fn common_names_name_node_types() {
        check("NDB Data Node Dec 2026", Some(NodeKind::Data));
        check("NDB Management Node Dec 2026", Some(NodeKind::Mgm));
        check("NDB Node Dec 2026", Some(NodeKind::Api));
        check("NDB Node Dec 2026 Cluster 1A2B3C", Some(NodeKind::Api));
        check("MySQL NDB Cluster Dec 2026", None);
        check("ndb data node", None);
        check("", None);
        for kind in [NodeKind::Data, NodeKind::Mgm, NodeKind::Api] {
            check(&pki::common_name_for(kind), Some(kind));
        }
    }

    /// A search path is searched in order; an empty entry is the current directory.
    #[test]
    fn a_search_path_finds_the_first_file() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::write(b.path().join(CA_CERT_FILE), "b").unwrap();
        let path = SearchPath::parse(&format!("{}:{}", a.path().display(), b.path().display()));
        assert_eq!(path.find(CA_CERT_FILE), Some(b.path().join(CA_CERT_FILE)));
        std::fs::write(a.path().join(CA_CERT_FILE), "a").unwrap();
        assert_eq!(path.find(CA_CERT_FILE), Some(a.path().join(CA_CERT_FILE)));
        let missing = path
            .require(cert_file(NodeKind::Api))
            .unwrap_err()
            .to_string();
        assert!(
            missing.contains("no file ndb-api-cert in the TLS search path"),
            "{missing}"
        );
        assert_eq!(SearchPath::parse("x::y").dirs.len(), 3);
    }

    /// A lifetime too long for a certificate's date is an error, not a panic.
    #[test]
    fn an_endless_lifetime_is_an_error() {
        assert!(pki::Lifetime::from_now(i64::MAX).is_err());
        assert!(pki::Lifetime::from_now(i64::MIN).is_err());
        let expired = pki::Lifetime::from_now(-3600).unwrap();
        assert!(expired.not_before < expired.not_after);
    }
}
