use rndb_config::NodeId;

/// Everything a link can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The send buffer cannot take this frame (NDB error 1218, temporary).
    #[error("Send Buffers overloaded in NDB kernel (1218): link to node {peer} has {pending_bytes} bytes pending, limit {limit_bytes}")]
    Overloaded {
        peer: NodeId,
        pending_bytes: usize,
        limit_bytes: usize,
    },
    /// A frame longer than the frame limit was offered or announced.
    #[error("frame of {bytes} bytes exceeds the limit of {limit} bytes")]
    FrameTooLarge { bytes: usize, limit: usize },
    /// The peer sent bytes that are not a valid frame; the link must be closed.
    #[error("bad frame from node {peer}: {reason}")]
    BadFrame { peer: NodeId, reason: String },
    /// The peer closed the link (or died).
    #[error("link to node {peer} closed")]
    Closed { peer: NodeId },
    /// The handshake was malformed, timed out, or the peer left during it.
    #[error("handshake: {0}")]
    Handshake(String),
    /// TLS could not be set up: a key or certificate file is missing or bad (the message names
    /// it), or the TLS handshake failed (an expired certificate, one from another CA, ...).
    #[error("TLS: {0}")]
    Tls(String),
    /// The peer refused our handshake with an error code (see `registry` for the codes).
    #[error("handshake refused ({code}): {message}")]
    Refused { code: u32, message: String },
    /// The kernel refuses io_uring (ENOSYS, or EPERM from `kernel.io_uring_disabled` or a
    /// seccomp filter), so a Uring link cannot be made; a TCP link carries the same bytes.
    #[error(
        "io_uring is not available on this kernel ({reason}): use a TCP link (remove UseIoUring=1)"
    )]
    UringUnavailable { reason: String },
    /// An operating-system error, with what we were doing.
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
}

impl TransportError {
    /// Wraps an io error with a verb-phrase context.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        TransportError::Io {
            context: context.into(),
            source,
        }
    }
}

/// True for the errors that mean the peer is gone rather than that we misused the socket.
pub(crate) fn is_disconnect(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::NotConnected
            | std::io::ErrorKind::UnexpectedEof
    )
}
