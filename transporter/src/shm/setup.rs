//! The SHM set-up exchange, run on the link's TCP connection after the node handshake.
//!
//! ```text
//! server -> client, offer (280 bytes, little-endian)
//! 0    4    magic "RSHO"
//! 4    4    segment layout version
//! 8    8    segment bytes
//! 16   2    path length n (1..=256)
//! 18   6    reserved (zero)
//! 24   256  path bytes (n used, the rest zero)
//!
//! client -> server, ack (8 bytes, little-endian)
//! 0    4    magic "RSHA"
//! 4    4    status: 0 = attached, 1 = refused (the client's own error says why)
//!
//! server -> client, ready (4 bytes), only after an ack with status 0
//! 0    4    magic "RSHR"
//! ```
//!
//! Beside the segment the server makes two FIFOs, `<segment path>-w0` (server to client) and
//! `<segment path>-w1` (client to server): a sender writes one wake-up byte into the FIFO its
//! peer reads when the peer sleeps (a pipe wakes a thread for a fraction of what a loopback
//! TCP segment costs; see docs/shm.md). Each side opens the FIFO it reads before the other
//! opens it for writing, so both opens succeed at once without blocking: the server opens `-w1`
//! for reading before the offer; the client opens `-w0` for reading and `-w1` for writing
//! before its ack; the server opens `-w0` for writing after it, and only then says "ready"
//! (until a writer has opened a FIFO, a read of it reports end of file). From then on, a
//! FIFO's reader sees end of file when its writer is gone: the peer process died or shut the
//! link down.
//!
//! On a TLS connection the exchange runs inside TLS; the link then keeps the raw socket for
//! its liveness checks, which carry nothing (the ring's frames never cross it).
//!
//! The server unlinks the file and the FIFOs as soon as the ack arrives (or the exchange
//! fails), so none outlives the set-up; the two mappings and the FIFOs' descriptors stay until
//! each side drops its link.
#![forbid(unsafe_code)]

use std::fs::File;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rndb_config::LinkConfig;

use super::link::{Role, ShmLink};
use super::segment::{Segment, SegmentSpec, HEADER_FLAG_CHECKSUM};
use super::{SHM_LAYOUT_VERSION, SHM_SETUP_TIMEOUT_MS};
use crate::tls::io::NodeStream;
use crate::{NodeId, TransportError};

const OFFER_MAGIC: u32 = u32::from_le_bytes(*b"RSHO");
const ACK_MAGIC: u32 = u32::from_le_bytes(*b"RSHA");
const READY_MAGIC: u32 = u32::from_le_bytes(*b"RSHR");
const OFFER_PATH_BYTES_MAX: usize = 256;
const OFFER_BYTES: usize = 24 + OFFER_PATH_BYTES_MAX;
const ACK_BYTES: usize = 8;
const ACK_ATTACHED: u32 = 0;
const ACK_REFUSED: u32 = 1;

/// The data node side: creates the segment, offers it to the client over `stream`, waits
/// (at most [`SHM_SETUP_TIMEOUT_MS`] per step) for the client's ack, and unlinks the file.
/// `stream` must be connected and past the node handshake.
pub fn server_setup(
    stream: TcpStream,
    peer: NodeId,
    me: NodeId,
    cluster_id: u64,
    link: &LinkConfig,
) -> Result<ShmLink, TransportError> {
    server_setup_on(NodeStream::Plain(stream), peer, me, cluster_id, link)
}

/// [`server_setup`] on a connection that may be TLS.
pub fn server_setup_on(
    mut stream: NodeStream,
    peer: NodeId,
    me: NodeId,
    cluster_id: u64,
    link: &LinkConfig,
) -> Result<ShmLink, TransportError> {
    prepare_stream(stream.socket())?;
    let spec = SegmentSpec {
        cluster_id,
        server_node: me,
        client_node: peer,
        segment_bytes: link.shm_size_bytes,
        checksum: link.checksum,
    };
    // On any error below, dropping `segment` unlinks the file, and dropping `fifos` the FIFOs.
    let mut segment = Segment::create(&spec)?;
    let fifos = WakeFifos::create(segment.path())?;
    let wake_in = open_fifo(&fifos.client_to_server, FifoEnd::Read)?;
    let offer = encode_offer(segment.path(), spec.segment_bytes)?;
    stream
        .write_all(&offer)
        .and_then(|()| stream.flush())
        .map_err(|e| TransportError::io(format!("SHM set-up with node {peer}: send offer"), e))?;
    let mut ack = [0u8; ACK_BYTES];
    stream
        .read_exact(&mut ack)
        .map_err(|e| TransportError::io(format!("SHM set-up with node {peer}: read ack"), e))?;
    segment.unlink()?;
    let status = u32::from_le_bytes([ack[4], ack[5], ack[6], ack[7]]);
    if u32::from_le_bytes([ack[0], ack[1], ack[2], ack[3]]) != ACK_MAGIC || status != ACK_ATTACHED {
        return Err(TransportError::Handshake(format!(
            "SHM set-up with node {peer}: client refused the segment (status {status})"
        )));
    }
    let wake_out = open_fifo(&fifos.server_to_client, FifoEnd::Write)?;
    drop(fifos);
    stream
        .write_all(&READY_MAGIC.to_le_bytes())
        .and_then(|()| stream.flush())
        .map_err(|e| TransportError::io(format!("SHM set-up with node {peer}: send ready"), e))?;
    ShmLink::new(
        into_socket(stream),
        peer,
        Arc::new(segment),
        Role::Server,
        link,
        wake_in,
        wake_out,
    )
}

/// The API node side: reads the server's offer, attaches to the segment, validates it against
/// this link's config and acks. A segment that fails validation is refused (the server is told)
/// and the error says why.
pub fn client_setup(
    stream: TcpStream,
    me: NodeId,
    peer: NodeId,
    link: &LinkConfig,
) -> Result<ShmLink, TransportError> {
    client_setup_on(NodeStream::Plain(stream), me, peer, link)
}

/// [`client_setup`] on a connection that may be TLS.
pub fn client_setup_on(
    mut stream: NodeStream,
    me: NodeId,
    peer: NodeId,
    link: &LinkConfig,
) -> Result<ShmLink, TransportError> {
    prepare_stream(stream.socket())?;
    let mut offer = [0u8; OFFER_BYTES];
    stream
        .read_exact(&mut offer)
        .map_err(|e| TransportError::io(format!("SHM set-up with node {peer}: read offer"), e))?;
    let attached = decode_offer(&offer)
        .and_then(|(path, segment_bytes)| check_size(segment_bytes, link).map(|()| path))
        .and_then(|path| Segment::attach(&path, link.shm_size_bytes))
        .and_then(|segment| check_identity(&segment, me, peer, link).map(|()| segment))
        .and_then(|segment| {
            let fifos = WakeFifos::named(segment.path());
            let wake_in = open_fifo(&fifos.server_to_client, FifoEnd::Read)?;
            let wake_out = open_fifo(&fifos.client_to_server, FifoEnd::Write)?;
            Ok((segment, wake_in, wake_out))
        });
    let status = if attached.is_ok() {
        ACK_ATTACHED
    } else {
        ACK_REFUSED
    };
    let mut ack = [0u8; ACK_BYTES];
    ack[..4].copy_from_slice(&ACK_MAGIC.to_le_bytes());
    ack[4..].copy_from_slice(&status.to_le_bytes());
    let ack_sent = stream.write_all(&ack).and_then(|()| stream.flush());
    let (segment, wake_in, wake_out) = attached?;
    ack_sent
        .map_err(|e| TransportError::io(format!("SHM set-up with node {peer}: send ack"), e))?;
    let mut ready = [0u8; 4];
    stream
        .read_exact(&mut ready)
        .map_err(|e| TransportError::io(format!("SHM set-up with node {peer}: read ready"), e))?;
    if u32::from_le_bytes(ready) != READY_MAGIC {
        return Err(TransportError::Handshake(format!(
            "SHM set-up with node {peer}: bad ready message {ready:02x?}"
        )));
    }
    ShmLink::new(
        into_socket(stream),
        peer,
        Arc::new(segment),
        Role::Client,
        link,
        wake_in,
        wake_out,
    )
}

/// The two wake-up FIFOs of a segment, named after it; the creator's copy removes them when
/// dropped (once both sides have opened them, or when the set-up fails).
struct WakeFifos {
    server_to_client: PathBuf,
    client_to_server: PathBuf,
    owned: bool,
}

impl WakeFifos {
    /// The FIFO paths of the segment at `segment_path` (which was checked to be one of ours,
    /// directly in /dev/shm; the suffixes keep the names in the same alphabet).
    fn named(segment_path: &Path) -> WakeFifos {
        let with = |suffix: &str| {
            let mut name = segment_path.as_os_str().to_owned();
            name.push(suffix);
            PathBuf::from(name)
        };
        WakeFifos {
            server_to_client: with("-w0"),
            client_to_server: with("-w1"),
            owned: false,
        }
    }

    /// Makes both FIFOs (mode 0600) next to the new segment at `segment_path`.
    fn create(segment_path: &Path) -> Result<WakeFifos, TransportError> {
        let mut fifos = WakeFifos::named(segment_path);
        fifos.owned = true;
        for path in [&fifos.server_to_client, &fifos.client_to_server] {
            nix::unistd::mkfifo(
                path.as_path(),
                nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
            )
            .map_err(|e| {
                TransportError::io(
                    format!("make SHM wake-up FIFO {}", path.display()),
                    e.into(),
                )
            })?;
        }
        Ok(fifos)
    }
}

impl Drop for WakeFifos {
    fn drop(&mut self) {
        if self.owned {
            let _ = std::fs::remove_file(&self.server_to_client);
            let _ = std::fs::remove_file(&self.client_to_server);
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FifoEnd {
    Read,
    Write,
}

/// Opens one end of a wake-up FIFO, non-blocking, and checks that it is a FIFO (the client
/// opens paths the server named). Opening the write end needs the reader to have it open.
fn open_fifo(path: &Path, end: FifoEnd) -> Result<File, TransportError> {
    let context = |what: &str| format!("{what} SHM wake-up FIFO {}", path.display());
    let file = std::fs::OpenOptions::new()
        .read(end == FifoEnd::Read)
        .write(end == FifoEnd::Write)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| TransportError::io(context("open"), e))?;
    let is_fifo = file
        .metadata()
        .map_err(|e| TransportError::io(context("inspect"), e))?
        .file_type()
        .is_fifo();
    if !is_fifo {
        return Err(TransportError::Handshake(format!(
            "{} is not a FIFO",
            path.display()
        )));
    }
    Ok(file)
}

/// The socket under the set-up connection, TLS given up (see the module comment).
fn into_socket(stream: NodeStream) -> TcpStream {
    match stream {
        NodeStream::Plain(sock) => sock,
        NodeStream::Tls(tls) => tls.into_socket(),
    }
}

/// Blocking mode with bounded waits for the set-up exchange.
fn prepare_stream(stream: &TcpStream) -> Result<(), TransportError> {
    let timeout = Some(Duration::from_millis(SHM_SETUP_TIMEOUT_MS));
    stream
        .set_nonblocking(false)
        .and_then(|()| stream.set_read_timeout(timeout))
        .and_then(|()| stream.set_write_timeout(timeout))
        .map_err(|e| TransportError::io("SHM set-up: configure TCP socket", e))
}

fn encode_offer(
    path: &std::path::Path,
    segment_bytes: u64,
) -> Result<[u8; OFFER_BYTES], TransportError> {
    let path_bytes = path.as_os_str().as_encoded_bytes();
    if path_bytes.is_empty() || path_bytes.len() > OFFER_PATH_BYTES_MAX {
        return Err(TransportError::Handshake(format!(
            "SHM path {} too long",
            path.display()
        )));
    }
    let mut offer = [0u8; OFFER_BYTES];
    offer[0..4].copy_from_slice(&OFFER_MAGIC.to_le_bytes());
    offer[4..8].copy_from_slice(&SHM_LAYOUT_VERSION.to_le_bytes());
    offer[8..16].copy_from_slice(&segment_bytes.to_le_bytes());
    offer[16..18].copy_from_slice(&(path_bytes.len() as u16).to_le_bytes());
    offer[24..24 + path_bytes.len()].copy_from_slice(path_bytes);
    Ok(offer)
}

fn decode_offer(offer: &[u8; OFFER_BYTES]) -> Result<(PathBuf, u64), TransportError> {
    let refuse = |reason: String| Err(TransportError::Handshake(format!("SHM offer: {reason}")));
    let magic = u32::from_le_bytes([offer[0], offer[1], offer[2], offer[3]]);
    let version = u32::from_le_bytes([offer[4], offer[5], offer[6], offer[7]]);
    let mut size = [0u8; 8];
    size.copy_from_slice(&offer[8..16]);
    let segment_bytes = u64::from_le_bytes(size);
    let path_len = u16::from_le_bytes([offer[16], offer[17]]) as usize;
    if magic != OFFER_MAGIC {
        return refuse(format!("bad magic {magic:#010x}"));
    }
    if version != SHM_LAYOUT_VERSION {
        return refuse(format!(
            "layout version {version}, this build speaks {SHM_LAYOUT_VERSION}"
        ));
    }
    if path_len == 0 || path_len > OFFER_PATH_BYTES_MAX {
        return refuse(format!("path length {path_len}"));
    }
    let Ok(path) = std::str::from_utf8(&offer[24..24 + path_len]) else {
        return refuse("path is not UTF-8".into());
    };
    Ok((PathBuf::from(path), segment_bytes))
}

fn check_size(segment_bytes: u64, link: &LinkConfig) -> Result<(), TransportError> {
    if segment_bytes != link.shm_size_bytes {
        return Err(TransportError::Handshake(format!(
            "SHM offer of {segment_bytes} bytes, but this link's ShmSize is {}",
            link.shm_size_bytes
        )));
    }
    Ok(())
}

/// The segment must be for this pair of nodes and this link's Checksum setting.
fn check_identity(
    segment: &Segment,
    me: NodeId,
    peer: NodeId,
    link: &LinkConfig,
) -> Result<(), TransportError> {
    let header = segment.header();
    let checksum = header.flags & HEADER_FLAG_CHECKSUM != 0;
    if header.server_node != peer.0 || header.client_node != me.0 || checksum != link.checksum {
        return Err(TransportError::Handshake(format!(
            "SHM segment is for server {} / client {} with Checksum={checksum}; expected \
             server {peer} / client {me} with Checksum={}",
            header.server_node, header.client_node, link.checksum
        )));
    }
    Ok(())
}
