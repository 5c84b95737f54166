//! The API library's one error type.

use rndb_config::{ConfigErrors, NodeId};
use rndb_protocol::NdbError;
use rndb_transporter::TransportError;

/// Everything the API can fail with. Errors from the data node keep NDB's code and class.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The data node (or the API, for a local check) answered with an NDB error code.
    #[error("{0}")]
    Ndb(NdbError),
    /// The config file could not be read.
    #[error("read cluster config: {0}")]
    Config(#[from] ConfigErrors),
    /// The config could not be fetched from ndb_mgmd (unreachable, refused, or a bad
    /// connectstring).
    #[error("ndb_mgmd: {0}")]
    Mgm(String),
    /// No connection could be made to a data node.
    #[error("connect to node {node}: {reason}")]
    Connect { node: NodeId, reason: String },
    /// TLS could not be set up: a key or certificate file (named) is missing or bad, a TLS
    /// handshake failed, or RequireTls=1 cannot be met.
    #[error("TLS: {0}")]
    Tls(String),
    /// Every API slot that fits this host is taken (or none exists).
    #[error("no free API slot: {0}")]
    NoFreeSlot(String),
    /// The link failed while a request was outstanding.
    #[error("link to node {node}: {source}")]
    Transport {
        node: NodeId,
        source: TransportError,
    },
    /// The data node sent something this library cannot decode; the link is closed.
    #[error("protocol error from node {node}: {reason}")]
    Protocol { node: NodeId, reason: String },
}

impl Error {
    /// The NDB error code, when there is one.
    pub fn code(&self) -> Option<u32> {
        match self {
            Error::Ndb(e) => Some(e.code),
            _ => None,
        }
    }

    /// True when a retry may succeed (NDB's temporary classes; a lost link is temporary too).
    pub fn is_temporary(&self) -> bool {
        match self {
            Error::Ndb(e) => e.is_temporary(),
            Error::Transport { .. } | Error::Connect { .. } => true,
            _ => false,
        }
    }

    /// The NDB error, when this is one.
    pub fn ndb(&self) -> Option<&NdbError> {
        match self {
            Error::Ndb(e) => Some(e),
            _ => None,
        }
    }

    pub(crate) fn ndb_detail(code: u32, detail: impl std::fmt::Display) -> Error {
        Error::Ndb(NdbError::with_detail(code, detail))
    }
}

impl From<NdbError> for Error {
    fn from(e: NdbError) -> Self {
        Error::Ndb(e)
    }
}
