//! TLS bytes: a blocking TLS stream for the node handshake and the SHM set-up
//! ([`TlsStream`], inside [`NodeStream`]), and the link's non-blocking I/O ([`TlsIo`]), which
//! drives a rustls connection over the raw socket inside the [`SocketIo`] seam: the socket
//! link's frames, buffers and receive loop stay as they are, and only this I/O knows that the
//! bytes on the wire are TLS records.
//!
//! Receiving: plaintext rustls already holds is handed out first; otherwise buffered ciphertext
//! is given to rustls; otherwise one `read` of the socket fills the ciphertext buffer. A
//! receive reports a short read (the socket drained) only when the socket's read was short
//! and nothing remains buffered, so a caller that stops after a short read loses nothing.
//!
//! Sending: ciphertext still queued from an earlier send goes out first; only then does rustls
//! take (and encrypt) more of the batch. The link asks [`SocketIo::finish_send`] whether the
//! queued ciphertext is out before it reports a flush done.
#![forbid(unsafe_code)]

use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use rustls::pki_types::ServerName;
use rustls::Connection;
use socket2::SockRef;

use crate::error::is_disconnect;
use crate::socket_link::{ReceiveRegion, Received, SocketIo, SocketLink};
use crate::{FlushStatus, LinkSettings, NodeId, TransportError, TransporterKind};

use super::NodeTls;

/// Ciphertext bytes read from the socket at once: a little more than one full TLS record
/// (16 KiB of plaintext plus its header and tag), so a large frame batch costs one read per
/// record.
pub const CIPHERTEXT_READ_BYTES: usize = 16 * 1024 + 512;

/// One TCP link to one peer node whose bytes are TLS records.
pub type TlsLink = SocketLink<TlsIo>;

/// A connected socket after the TLS handshake, used blocking (handshake frames, SHM set-up).
pub struct TlsStream {
    pub(crate) conn: Connection,
    pub(crate) sock: TcpStream,
}

impl std::fmt::Debug for TlsStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsStream")
            .field("sock", &self.sock)
            .finish()
    }
}

impl TlsStream {
    /// Runs the client side of the TLS handshake on `sock` (blocking), until `deadline`.
    /// `server_host` is the data node's HostName, checked against a certificate bound to hosts.
    pub fn connect(
        tls: &NodeTls,
        sock: TcpStream,
        server_host: &str,
        deadline: Instant,
    ) -> Result<TlsStream, TransportError> {
        let name = ServerName::try_from(server_host.to_string()).map_err(|e| {
            TransportError::Tls(format!("HostName {server_host} is no TLS server name: {e}"))
        })?;
        let conn = rustls::ClientConnection::new(tls.client.clone(), name)
            .map_err(|e| TransportError::Tls(format!("start TLS: {e}")))?;
        TlsStream::handshake(Connection::Client(conn), sock, deadline)
    }

    /// Runs the server side of the TLS handshake on an accepted `sock`, until `deadline`.
    pub fn accept(
        tls: &NodeTls,
        sock: TcpStream,
        deadline: Instant,
    ) -> Result<TlsStream, TransportError> {
        let conn = rustls::ServerConnection::new(tls.server.clone())
            .map_err(|e| TransportError::Tls(format!("start TLS: {e}")))?;
        TlsStream::handshake(Connection::Server(conn), sock, deadline)
    }

    fn handshake(
        conn: Connection,
        sock: TcpStream,
        deadline: Instant,
    ) -> Result<TlsStream, TransportError> {
        let mut stream = TlsStream { conn, sock };
        while stream.conn.is_handshaking() {
            set_timeouts(&stream.sock, deadline)?;
            stream
                .conn
                .complete_io(&mut stream.sock)
                .map_err(|e| TransportError::Tls(format!("TLS handshake: {}", io_reason(&e))))?;
        }
        Ok(stream)
    }

    /// The certificate the peer presented (its first, the node's own).
    pub fn peer_certificate(&self) -> Option<&rustls::pki_types::CertificateDer<'static>> {
        self.conn.peer_certificates()?.first()
    }

    /// Gives up TLS and returns the raw socket: the SHM link keeps it for liveness and wake-up
    /// bytes, which carry nothing; the ring's contents never cross it.
    pub fn into_socket(self) -> TcpStream {
        self.sock
    }
}

impl Read for TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.conn.reader().read(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                other => return other,
            }
            self.flush()?;
            if self.conn.read_tls(&mut self.sock)? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            self.conn
                .process_new_packets()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        }
    }
}

impl Write for TlsStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let taken = self.conn.writer().write(buf)?;
        self.flush()?;
        Ok(taken)
    }

    fn flush(&mut self) -> io::Result<()> {
        while self.conn.wants_write() {
            self.conn.write_tls(&mut self.sock)?;
        }
        Ok(())
    }
}

/// A connection during the node handshake: plain TCP, or TLS after START_TLS.
#[derive(Debug)]
pub enum NodeStream {
    Plain(TcpStream),
    Tls(Box<TlsStream>),
}

impl NodeStream {
    /// The socket underneath, for timeouts and addresses.
    pub fn socket(&self) -> &TcpStream {
        match self {
            NodeStream::Plain(sock) => sock,
            NodeStream::Tls(tls) => &tls.sock,
        }
    }

    /// True after START_TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self, NodeStream::Tls(_))
    }
}

impl Read for NodeStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            NodeStream::Plain(sock) => sock.read(buf),
            NodeStream::Tls(tls) => tls.read(buf),
        }
    }
}

impl Write for NodeStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            NodeStream::Plain(sock) => sock.write(buf),
            NodeStream::Tls(tls) => tls.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            NodeStream::Plain(sock) => sock.flush(),
            NodeStream::Tls(tls) => tls.flush(),
        }
    }
}

/// Wraps a handshaken TLS stream as a link to `peer`.
pub fn tls_link(
    stream: TlsStream,
    peer: NodeId,
    settings: &LinkSettings,
) -> Result<TlsLink, TransportError> {
    let io = TlsIo {
        conn: stream.conn,
        peer,
        ciphertext: vec![0; CIPHERTEXT_READ_BYTES].into_boxed_slice(),
        ciphertext_start: 0,
        ciphertext_end: 0,
        socket_drained: false,
        unread_at_open: true,
        sealed: Vec::new(),
        sealed_offset: 0,
    };
    SocketLink::with_io(stream.sock, io, peer, settings)
}

/// The link's I/O under TLS: a rustls connection driven over the non-blocking socket.
pub struct TlsIo {
    /// The TLS session; its plaintext and ciphertext queues are bounded by rustls (64 KiB
    /// outgoing by default; incoming plaintext is taken out before more ciphertext goes in).
    conn: Connection,
    /// The node at the other end, for error messages; fixed.
    peer: NodeId,
    /// Ciphertext read from the socket and not yet taken by rustls: `[start, end)`.
    ciphertext: Box<[u8]>,
    ciphertext_start: usize,
    ciphertext_end: usize,
    /// The last socket read was shorter than asked: the socket held no more then.
    socket_drained: bool,
    /// Set at open, cleared by the first receive: the handshake may have read the first frames
    /// of the link into rustls, where no readiness event will report them.
    unread_at_open: bool,
    /// TLS records made by `seal` for the caller to send with its sleep; `[offset..]` unsent.
    /// They go out before anything rustls queues later. At most one flush's worth (rustls's
    /// 64 KiB buffer limit), reused.
    sealed: Vec<u8>,
    sealed_offset: usize,
}

impl std::fmt::Debug for TlsIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsIo")
            .field("peer", &self.peer)
            .field(
                "buffered_ciphertext_bytes",
                &(self.ciphertext_end - self.ciphertext_start),
            )
            .finish()
    }
}

impl SocketIo for TlsIo {
    const KIND: TransporterKind = TransporterKind::Tcp;
    const LINK_NAME: &'static str = "TlsLink";
    const SOCKET_CARRIES_FRAMES: bool = false;

    fn open(_stream: &TcpStream, peer: NodeId) -> Result<TlsIo, TransportError> {
        Err(TransportError::Tls(format!(
            "link to node {peer}: a TLS link is made from a handshaken TLS stream"
        )))
    }

    fn send(
        &mut self,
        stream: &TcpStream,
        batch: &[u8],
    ) -> Result<io::Result<usize>, TransportError> {
        if let Err(e) = self.push_ciphertext(stream) {
            return Ok(Err(e));
        }
        let taken = match self.conn.writer().write(batch) {
            Ok(taken) => taken,
            Err(e) => return Ok(Err(e)),
        };
        // What rustls took is encrypted and queued; a full socket leaves it for `finish_send`.
        match self.push_ciphertext(stream) {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => Ok(Err(e)),
            _ => Ok(Ok(taken)),
        }
    }

    fn finish_send(&mut self, stream: &TcpStream) -> Result<FlushStatus, TransportError> {
        match self.push_ciphertext(stream) {
            Ok(()) => Ok(FlushStatus::Done),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(FlushStatus::Pending),
            Err(e) if is_disconnect(&e) => Err(TransportError::Closed { peer: self.peer }),
            Err(e) => Err(TransportError::io(
                format!("link to node {}: send TLS records", self.peer),
                e,
            )),
        }
    }

    fn pending_bytes(&self) -> usize {
        self.sealed.len() - self.sealed_offset + usize::from(self.conn.wants_write())
    }

    fn seal(&mut self, batch: &[u8]) -> usize {
        if self.sealed_offset < self.sealed.len() || self.conn.wants_write() {
            // Older records are still queued: they must go first, through `flush`.
            return 0;
        }
        self.sealed.clear();
        self.sealed_offset = 0;
        let Ok(taken) = self.conn.writer().write(batch) else {
            return 0;
        };
        while self.conn.wants_write() {
            if self.conn.write_tls(&mut self.sealed).is_err() {
                break;
            }
        }
        taken
    }

    fn sealed(&self) -> &[u8] {
        &self.sealed[self.sealed_offset..]
    }

    fn sealed_sent(&mut self, result: &io::Result<usize>) {
        if let Ok(bytes) = result {
            self.sealed_offset = (self.sealed_offset + bytes).min(self.sealed.len());
        }
    }

    fn input_buffered(&self) -> bool {
        self.unread_at_open
    }

    fn receive(
        &mut self,
        stream: &TcpStream,
        mut region: ReceiveRegion<'_>,
    ) -> Result<Received, TransportError> {
        self.unread_at_open = false;
        let requested = region.len();
        loop {
            match self.conn.reader().read(region.bytes()) {
                Ok(0) => return Ok(Received::Closed),
                Ok(bytes) => {
                    let drained = bytes < requested
                        && self.socket_drained
                        && self.ciphertext_start == self.ciphertext_end;
                    let requested = if drained { requested } else { bytes };
                    return Ok(Received::Bytes { bytes, requested });
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(Received::Closed),
                Err(e) => return Err(self.tls_failure(stream, e.to_string())),
            }
            if self.ciphertext_start < self.ciphertext_end {
                self.give_ciphertext(stream)?;
                continue;
            }
            match self.read_socket(stream)? {
                Received::Bytes { .. } => {}
                other => return Ok(other),
            }
        }
    }
}

impl TlsIo {
    /// Writes queued TLS records (sealed ones first) until none remain (`Ok`) or the socket is
    /// full or fails.
    fn push_ciphertext(&mut self, stream: &TcpStream) -> io::Result<()> {
        while self.sealed_offset < self.sealed.len() {
            match SockRef::from(stream)
                .send_with_flags(&self.sealed[self.sealed_offset..], libc::MSG_NOSIGNAL)
            {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(bytes) => self.sealed_offset += bytes,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut SocketWriter(stream)) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Hands buffered ciphertext to rustls and decrypts what it completes.
    fn give_ciphertext(&mut self, stream: &TcpStream) -> Result<(), TransportError> {
        let mut pending = &self.ciphertext[self.ciphertext_start..self.ciphertext_end];
        let taken = match self.conn.read_tls(&mut pending) {
            Ok(taken) => taken,
            Err(e) => return Err(self.tls_failure(stream, e.to_string())),
        };
        self.ciphertext_start += taken;
        if let Err(e) = self.conn.process_new_packets() {
            return Err(self.tls_failure(stream, e.to_string()));
        }
        // A key update or alert from the peer may want an answer; a full socket leaves it
        // queued for the next send.
        let _ = self.push_ciphertext(stream);
        if taken == 0 {
            return Err(self.tls_failure(stream, "rustls took no ciphertext".to_string()));
        }
        Ok(())
    }

    /// One read of the socket into the (empty) ciphertext buffer.
    fn read_socket(&mut self, mut stream: &TcpStream) -> Result<Received, TransportError> {
        self.ciphertext_start = 0;
        self.ciphertext_end = 0;
        loop {
            return match stream.read(&mut self.ciphertext) {
                Ok(0) => Ok(Received::Closed),
                Ok(bytes) => {
                    self.ciphertext_end = bytes;
                    self.socket_drained = bytes < self.ciphertext.len();
                    Ok(Received::Bytes {
                        bytes,
                        requested: self.ciphertext.len(),
                    })
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Received::Nothing),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if is_disconnect(&e) => Ok(Received::Closed),
                Err(e) => Err(TransportError::io(
                    format!("link to node {}: read", self.peer),
                    e,
                )),
            };
        }
    }

    /// A TLS error: sends the alert rustls queued (if the socket takes it) and names the peer.
    fn tls_failure(&mut self, stream: &TcpStream, reason: String) -> TransportError {
        let _ = self.push_ciphertext(stream);
        TransportError::BadFrame {
            peer: self.peer,
            reason: format!("TLS: {reason}"),
        }
    }
}

/// Sends on the non-blocking socket without SIGPIPE; TLS records from several queued writes
/// go out in one `sendmsg`.
struct SocketWriter<'a>(&'a TcpStream);

impl Write for SocketWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        SockRef::from(self.0).send_with_flags(buf, libc::MSG_NOSIGNAL)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        SockRef::from(self.0).send_vectored_with_flags(bufs, libc::MSG_NOSIGNAL)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Read and write timeouts of `sock` set to what is left before `deadline`.
pub(crate) fn set_timeouts(sock: &TcpStream, deadline: Instant) -> Result<(), TransportError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(TransportError::Handshake("timed out".to_string()));
    }
    sock.set_read_timeout(Some(left))
        .and_then(|()| sock.set_write_timeout(Some(left)))
        .map_err(|e| TransportError::io("set socket timeouts", e))
}

/// An I/O error from rustls's `complete_io`: its TLS error when it wraps one.
fn io_reason(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => "timed out".to_string(),
        io::ErrorKind::UnexpectedEof => "the peer closed the connection".to_string(),
        _ => e.to_string(),
    }
}
