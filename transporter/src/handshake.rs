//! The first exchange on a new TCP connection, before any link frame: the client says who it
//! is and what link it wants, the server admits or refuses it.
//!
//! Each message is one ordinary frame (see [`crate::frame`]) with a reserved signal number and
//! never a checksum, whatever the link's setting, so both ends can read it before they agree on
//! anything. Block numbers and request id are zero.
//!
//! | signal | name | direction | payload |
//! |---|---|---|---|
//! | `0xFFF0` | HELLO | client → server | [`Hello`], 31 bytes |
//! | `0xFFF1` | HELLO_CONF | server → client | server node id (u16) |
//! | `0xFFF2` | HELLO_REF | server → client | error code (u32), message length (u16), UTF-8 message |
//! | `0xFFF3` | START_TLS | client → server | empty: TLS handshake next, then HELLO inside TLS |
//! | `0xFFF4` | START_TLS_CONF | server → client | empty: go on with the TLS handshake |
//! | `0xFFF5` | START_TLS_REF | server → client | empty: no keys here, go on in plain text |
//!
//! ```text
//! HELLO payload (all little-endian)
//! offset  size  field
//!  0      4     magic b"RNDB"
//!  4      4     protocol version (PROTOCOL_VERSION)
//!  8      8     cluster id (ClusterConfig::cluster_id)
//! 16      2     from node id
//! 18      2     to node id
//! 20      1     from node kind: 1 data, 2 mgm, 3 api
//! 21      1     wanted transporter: 1 TCP, 2 SHM, 3 URING (TCP moved by io_uring)
//! 22      1     checksum: 0 or 1
//! 23      8     sender's token (protocol version 8 on; [`Hello::token`])
//! ```
//!
//! The helpers here block, each bounded by a timeout (normally [`HANDSHAKE_TIMEOUT`]), and read
//! exactly one frame's bytes, so frames the peer sends right after the handshake stay in the
//! socket for the link.
#![forbid(unsafe_code)]

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use rndb_config::{ClusterConfig, NodeKind};

use crate::frame::{self, Decoded, FrameHeader, FRAME_HEADER_BYTES};
use crate::{NodeId, TransportError, TransporterKind};

/// The version of the wire protocol (handshake and frames). Peers must agree exactly.
/// 2: a TCKEYREQ or TCINDXREQ may carry its execute (`signals::FLAG_EXECUTE`), which a node of
/// version 1 would take for a malformed operation; a read's row may confirm its execute
/// (`TCKEY_ROW_CONF`), a signal an API node of version 1 does not know.
/// 3: a TCKEY_ROW_CONF may end a committed execute and then carries the commit's GCI after the
/// row, which a node of version 2 would take for trailing garbage; a read-only commit's
/// TC_EXECUTE_CONF names no GCI.
/// 4: CM_REGREQ names the sender's run and INCL_NODEREQ the run it includes (eight bytes
/// more each), which a node of version 3 would refuse as malformed.
/// 5: LQHKEYREQ names each replica's run (the receiver's and every chain node's), and STOP_PERM_*
/// and STOP_ABORT_REP (129-132) exist.
/// 6: INCL_NODECONF names the run it confirms the inclusion of, as INCL_NODEREQ does (eight
/// bytes more), which a node of version 5 would refuse as malformed.
/// 7: START_INFOCONF and COPY_FRAGREQ end with the president's live data nodes (a 32-byte
/// bitmap), which a node of version 6 would take for trailing garbage.
/// 8: HELLO ends with the sender's token (31 bytes); a version 7 hello (23 bytes)
/// still decodes, so that it is refused for its version (1710) rather than as malformed.
/// 9: DROP TABLE first sends PREP_DROP_TAB_REQ (134-135), which a node of version 8 would
/// refuse as an unknown signal.
/// 10: the DICT master passes a schema change on with the epoch it logged it in and its
/// sequence number after its id counter (20 bytes before the request, not 4), which a node of
/// version 9 would misread; START_PERMCONF carries that number, and a new DICT master takes
/// over with DICT_TAKEOVER_REQ/CONF (136-137).
/// 11: CNTR_WAITREP names the restart's number in its high word, which a master checks (a
/// node of version 10 sends 0 there); a system restart's master hears each node's tables and
/// indexes and names those to drop (DICT_RESTORED_REP, DICT_RESTART_DROP: 138-139).
/// 12: DICT_RESTORED_REP and DICT_RESTART_DROP end with an id counter (a node of version 11
/// refuses the longer payload), and DICT_RESTART_DROP comes in every system restart;
/// START_PERMCONF carries the president's id counter after the schema change's number.
/// 13: LIST_TABLES_CONF names SYSTAB_0 and NDB$EVENTS_0 with object type 1 (SystemTable),
/// which an API node of version 12 would refuse as malformed. (The backup steps' new
/// `snapshotstart` and `snapshot <gci>` words ride the management server's report replies,
/// which this number does not cover: an older data node ignores such a step.)
/// 14: a TCKEYREQ or LQHKEYREQ may carry a Write with a condition-only program (an
/// interpreted write), which a node of version 13 would refuse (4116).
/// 15: STOP_SAVED_REP (140) between data nodes in a stop of every data node, which a node of
/// version 14 would take for a protocol violation.
/// 16: a data node stopping alone sends NODE_STOPPING_REP (103) to its API nodes, which
/// answer NODE_STOPPING_CONF (141); a node of version 15 on either side would take either for
/// a protocol violation. Between data nodes NODE_STOPPING_REP carries a byte saying whether
/// every data node stops.
/// 17: NODE_STOPPING_REP between data nodes also says that the sender begins to stop alone
/// (byte 2, answered NODE_STOPPING_CONF) or that every data node stops (byte 3), which a node
/// of version 16 would take for a leave, and NODE_STOPPING_CONF goes between data nodes.
pub const PROTOCOL_VERSION: u32 = 17;
/// The first four bytes of a HELLO payload.
pub const HELLO_MAGIC: [u8; 4] = *b"RNDB";
/// Signal number of HELLO.
pub const SIGNAL_HELLO: u16 = 0xFFF0;
/// Signal number of HELLO_CONF.
pub const SIGNAL_HELLO_CONF: u16 = 0xFFF1;
/// Signal number of HELLO_REF.
pub const SIGNAL_HELLO_REF: u16 = 0xFFF2;
/// Signal number of START_TLS: a client with TLS keys asks for TLS before its HELLO (empty
/// payload).
pub const SIGNAL_START_TLS: u16 = 0xFFF3;
/// Signal number of START_TLS_CONF: the TLS handshake follows, then HELLO inside TLS.
pub const SIGNAL_START_TLS_CONF: u16 = 0xFFF4;
/// Signal number of START_TLS_REF: this node has no TLS keys; HELLO follows in plain text
/// (a client that requires TLS closes instead).
pub const SIGNAL_START_TLS_REF: u16 = 0xFFF5;
/// Bytes in a HELLO payload.
pub const HELLO_BYTES: usize = 31;
/// Bytes in a HELLO payload of protocol version 7 and earlier (no token).
pub const HELLO_BYTES_V7: usize = 23;
/// Bytes in a HELLO_CONF payload.
pub const HELLO_CONF_BYTES: usize = 2;
/// The longest HELLO_REF message; longer messages are cut at a character boundary.
pub const REFUSAL_MESSAGE_BYTES_MAX: usize = 1024;
/// The longest handshake frame; a peer announcing more is refused at once.
pub const HANDSHAKE_FRAME_BYTES_MAX: usize = FRAME_HEADER_BYTES + 6 + REFUSAL_MESSAGE_BYTES_MAX;
/// How long a handshake may take, from connect (or accept) to HELLO_CONF.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection the handshake runs on: a plain socket, or one inside TLS
/// ([`crate::tls::io::NodeStream`]). Timeouts are set on the socket underneath.
pub trait HandshakeStream: Read + Write {
    /// The socket underneath.
    fn socket(&self) -> &TcpStream;
}

impl HandshakeStream for TcpStream {
    fn socket(&self) -> &TcpStream {
        self
    }
}

impl HandshakeStream for crate::tls::io::NodeStream {
    fn socket(&self) -> &TcpStream {
        crate::tls::io::NodeStream::socket(self)
    }
}

/// What a connecting node says about itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The sender's [`PROTOCOL_VERSION`].
    pub protocol_version: u32,
    /// The sender's `ClusterConfig::cluster_id()`: both must have read the same cluster.
    pub cluster_id: u64,
    /// The connecting node.
    pub from: NodeId,
    /// The node it wants to reach.
    pub to: NodeId,
    /// What kind of node the connecting node is.
    pub from_kind: NodeKind,
    /// The link kind it expects for this pair.
    pub transporter: TransporterKind,
    /// The Checksum setting it expects for this pair.
    pub checksum: bool,
    /// Who sends: the [`process_token`] of a data node's or tool's process, or an API node's
    /// own [`fresh_token`], drawn per connection (a process may hold several API slots); 0
    /// from a version 7 hello. A node that still holds a link with the same token under this
    /// node id (it has not finished closing it) refuses with 1703, not 1702: the sender knows
    /// that no other took its id.
    pub token: u64,
}

/// A token this process drew when it first linked, the same for each of its links
/// ([`Hello::token`]).
pub fn process_token() -> u64 {
    static TOKEN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TOKEN.get_or_init(fresh_token)
}

/// A new token, unlikely to be any other's (never 0).
pub fn fresh_token() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // Each RandomState has new random keys; the pid and the clock set tokens apart further.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    if let Ok(since) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        hasher.write_u128(since.as_nanos());
    }
    hasher.finish().max(1)
}

/// What the server said when it admitted us.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HelloAccepted {
    /// The server's node id (equal to the `to` of our hello).
    pub server_node: NodeId,
}

impl Hello {
    /// The hello `from` sends to `to`, from the config both read.
    pub fn for_link(
        config: &ClusterConfig,
        from: NodeId,
        to: NodeId,
    ) -> Result<Hello, TransportError> {
        let from_kind = config.node_kind(from).ok_or_else(|| {
            TransportError::Handshake(format!("node {from} is not in the config"))
        })?;
        let link = config.link(from, to).ok_or_else(|| {
            TransportError::Handshake(format!(
                "the config has no link between nodes {from} and {to}"
            ))
        })?;
        Ok(Hello {
            protocol_version: PROTOCOL_VERSION,
            cluster_id: config.cluster_id(),
            from,
            to,
            from_kind,
            transporter: link.kind,
            checksum: link.checksum,
            token: process_token(),
        })
    }

    /// The 31 payload bytes of this hello.
    pub fn encode(&self) -> [u8; HELLO_BYTES] {
        let mut bytes = [0u8; HELLO_BYTES];
        bytes[0..4].copy_from_slice(&HELLO_MAGIC);
        bytes[4..8].copy_from_slice(&self.protocol_version.to_le_bytes());
        bytes[8..16].copy_from_slice(&self.cluster_id.to_le_bytes());
        bytes[16..18].copy_from_slice(&self.from.0.to_le_bytes());
        bytes[18..20].copy_from_slice(&self.to.0.to_le_bytes());
        bytes[20] = node_kind_code(self.from_kind);
        bytes[21] = transporter_code(self.transporter);
        bytes[22] = u8::from(self.checksum);
        bytes[23..31].copy_from_slice(&self.token.to_le_bytes());
        bytes
    }

    /// Parses a HELLO payload; anything but exactly 31 well-formed bytes (or 23, a version 7
    /// hello, without a token) is an error.
    pub fn decode(payload: &[u8]) -> Result<Hello, TransportError> {
        let token = match payload.len() {
            HELLO_BYTES => {
                let mut token = [0u8; 8];
                token.copy_from_slice(&payload[23..31]);
                u64::from_le_bytes(token)
            }
            HELLO_BYTES_V7 => 0,
            n => {
                return Err(bad(format!(
                    "HELLO payload is {n} bytes, expected {HELLO_BYTES}"
                )))
            }
        };
        let bytes = payload;
        if bytes[0..4] != HELLO_MAGIC {
            return Err(bad(format!(
                "bad magic {:02x?}, expected \"RNDB\"",
                &bytes[0..4]
            )));
        }
        let version = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
        if bytes.len() == HELLO_BYTES_V7 && version >= 8 {
            return Err(bad(format!(
                "a version {version} HELLO is {HELLO_BYTES} bytes, not {HELLO_BYTES_V7}"
            )));
        }
        let from_kind = match bytes[20] {
            1 => NodeKind::Data,
            2 => NodeKind::Mgm,
            3 => NodeKind::Api,
            other => return Err(bad(format!("unknown node kind {other}"))),
        };
        let transporter = match bytes[21] {
            1 => TransporterKind::Tcp,
            2 => TransporterKind::Shm,
            3 => TransporterKind::Uring,
            other => return Err(bad(format!("unknown transporter kind {other}"))),
        };
        let checksum = match bytes[22] {
            0 => false,
            1 => true,
            other => return Err(bad(format!("checksum flag {other} is neither 0 nor 1"))),
        };
        Ok(Hello {
            protocol_version: u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
            cluster_id: u64::from_le_bytes([
                bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14],
                bytes[15],
            ]),
            from: NodeId(u16::from_le_bytes([bytes[16], bytes[17]])),
            to: NodeId(u16::from_le_bytes([bytes[18], bytes[19]])),
            from_kind,
            transporter,
            checksum,
            token,
        })
    }
}

/// The client side: sends `hello`, waits for the answer. A HELLO_REF becomes
/// [`TransportError::Refused`]; anything else unexpected is [`TransportError::Handshake`].
/// Leaves the stream blocking; `TcpLink::new` makes it non-blocking.
pub fn client_handshake(
    stream: &mut (impl HandshakeStream + ?Sized),
    hello: &Hello,
    timeout: Duration,
) -> Result<HelloAccepted, TransportError> {
    let deadline = Instant::now() + timeout;
    write_frame(stream, SIGNAL_HELLO, &hello.encode(), deadline)
        .map_err(|e| context(e, format!("send HELLO to node {}", hello.to)))?;
    let mut buf = Vec::new();
    let header = read_frame(stream, &mut buf, deadline)
        .map_err(|e| context(e, format!("read answer from node {}", hello.to)))?;
    let accepted = answer(header.signal, &buf[FRAME_HEADER_BYTES..])?;
    if accepted.server_node != hello.to {
        return Err(bad(format!(
            "connected to node {} but node {} answered",
            hello.to, accepted.server_node
        )));
    }
    Ok(accepted)
}

/// A server's answer from its signal number and payload.
fn answer(signal: u16, payload: &[u8]) -> Result<HelloAccepted, TransportError> {
    match signal {
        SIGNAL_HELLO_CONF => decode_conf(payload),
        SIGNAL_HELLO_REF => Err(decode_ref(payload)?),
        other => Err(bad(format!(
            "expected HELLO_CONF or HELLO_REF, got signal {other:#06x}"
        ))),
    }
}

/// What a client opens with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opening {
    /// START_TLS: TLS first, then HELLO inside it.
    StartTls,
    /// HELLO in plain text.
    Hello(Hello),
}

/// The client side of START_TLS: asks for TLS and returns whether the server agreed
/// (START_TLS_CONF). START_TLS_REF (the server has no keys) is `false`; a HELLO_REF is
/// [`TransportError::Refused`].
pub fn client_start_tls(
    stream: &mut (impl HandshakeStream + ?Sized),
    to: NodeId,
    timeout: Duration,
) -> Result<bool, TransportError> {
    let deadline = Instant::now() + timeout;
    write_frame(stream, SIGNAL_START_TLS, &[], deadline)
        .map_err(|e| context(e, format!("send START_TLS to node {to}")))?;
    let mut buf = Vec::new();
    let header = read_frame(stream, &mut buf, deadline)
        .map_err(|e| context(e, format!("read answer to START_TLS from node {to}")))?;
    match header.signal {
        SIGNAL_START_TLS_CONF => Ok(true),
        SIGNAL_START_TLS_REF => Ok(false),
        SIGNAL_HELLO_REF => Err(decode_ref(&buf[FRAME_HEADER_BYTES..])?),
        other => Err(bad(format!(
            "expected START_TLS_CONF or START_TLS_REF from node {to}, got signal {other:#06x}"
        ))),
    }
}

/// The server side, first step on a connection from a node that may ask for TLS: START_TLS
/// or a HELLO.
pub fn server_read_opening(
    stream: &mut (impl HandshakeStream + ?Sized),
    timeout: Duration,
) -> Result<Opening, TransportError> {
    let deadline = Instant::now() + timeout;
    let mut buf = Vec::new();
    let header = read_frame(stream, &mut buf, deadline).map_err(|e| context(e, "read HELLO"))?;
    if header.signal == SIGNAL_START_TLS && buf.len() == FRAME_HEADER_BYTES {
        return Ok(Opening::StartTls);
    }
    decode_hello_frame(&buf).map(Opening::Hello)
}

/// The server's answer to START_TLS: CONF when it has keys (`agreed`), else REF.
pub fn server_answer_start_tls(
    stream: &mut (impl HandshakeStream + ?Sized),
    agreed: bool,
    timeout: Duration,
) -> Result<(), TransportError> {
    let signal = if agreed {
        SIGNAL_START_TLS_CONF
    } else {
        SIGNAL_START_TLS_REF
    };
    write_frame(stream, signal, &[], Instant::now() + timeout)
        .map_err(|e| context(e, "answer START_TLS"))
}

/// The server side, first step: reads the client's HELLO. The caller decides (see
/// `registry::admit`) and answers with [`server_accept`] or [`server_refuse`].
pub fn server_read_hello(
    stream: &mut (impl HandshakeStream + ?Sized),
    timeout: Duration,
) -> Result<Hello, TransportError> {
    let deadline = Instant::now() + timeout;
    let mut buf = Vec::new();
    read_frame(stream, &mut buf, deadline).map_err(|e| context(e, "read HELLO"))?;
    decode_hello_frame(&buf)
}

/// The HELLO in `bytes`, which must be exactly one whole handshake frame as a connecting peer
/// sends it: the checks [`server_read_hello`] makes on the bytes it read, without the socket
/// (the fuzz target `handshake` runs them on arbitrary bytes).
pub fn decode_hello_frame(bytes: &[u8]) -> Result<Hello, TransportError> {
    handshake_frame_len(bytes.get(..FRAME_HEADER_BYTES).unwrap_or(bytes))?;
    let header = whole_handshake_frame(bytes)?;
    if header.signal != SIGNAL_HELLO {
        return Err(bad(format!(
            "expected HELLO, got signal {:#06x}",
            header.signal
        )));
    }
    Hello::decode(&bytes[FRAME_HEADER_BYTES..])
}

/// The answer in `bytes`, one whole handshake frame as a server sends it: `Ok` for HELLO_CONF,
/// [`TransportError::Refused`] for HELLO_REF, as [`client_handshake`] reads them.
pub fn decode_answer_frame(bytes: &[u8]) -> Result<HelloAccepted, TransportError> {
    handshake_frame_len(bytes.get(..FRAME_HEADER_BYTES).unwrap_or(bytes))?;
    let header = whole_handshake_frame(bytes)?;
    answer(header.signal, &bytes[FRAME_HEADER_BYTES..])
}

/// The server side, admitting: sends HELLO_CONF carrying our node id `me`.
pub fn server_accept(
    stream: &mut (impl HandshakeStream + ?Sized),
    me: NodeId,
    timeout: Duration,
) -> Result<(), TransportError> {
    let deadline = Instant::now() + timeout;
    write_frame(stream, SIGNAL_HELLO_CONF, &me.0.to_le_bytes(), deadline)
        .map_err(|e| context(e, "send HELLO_CONF"))
}

/// The server side, refusing: sends HELLO_REF with an error code and a message (cut to
/// [`REFUSAL_MESSAGE_BYTES_MAX`]). The caller then drops the stream.
pub fn server_refuse(
    stream: &mut (impl HandshakeStream + ?Sized),
    code: u32,
    message: &str,
    timeout: Duration,
) -> Result<(), TransportError> {
    let deadline = Instant::now() + timeout;
    write_frame(
        stream,
        SIGNAL_HELLO_REF,
        &encode_ref(code, message),
        deadline,
    )
    .map_err(|e| context(e, "send HELLO_REF"))
}

/// The HELLO_REF payload for a code and message.
pub fn encode_ref(code: u32, message: &str) -> Vec<u8> {
    let mut cut = message.len().min(REFUSAL_MESSAGE_BYTES_MAX);
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    let message = &message.as_bytes()[..cut];
    let mut payload = Vec::with_capacity(6 + message.len());
    payload.extend_from_slice(&code.to_le_bytes());
    payload.extend_from_slice(&(message.len() as u16).to_le_bytes());
    payload.extend_from_slice(message);
    payload
}

/// Parses a HELLO_REF payload into the `Refused` error it stands for.
pub fn decode_ref(payload: &[u8]) -> Result<TransportError, TransportError> {
    let (Some(code_bytes), Some(len_bytes)) = (payload.get(0..4), payload.get(4..6)) else {
        return Err(bad(format!(
            "HELLO_REF payload of {} bytes is too short",
            payload.len()
        )));
    };
    let code = u32::from_le_bytes([code_bytes[0], code_bytes[1], code_bytes[2], code_bytes[3]]);
    let message_bytes = usize::from(u16::from_le_bytes([len_bytes[0], len_bytes[1]]));
    let Some(message) = payload.get(6..).filter(|rest| rest.len() == message_bytes) else {
        return Err(bad(format!(
            "HELLO_REF announces a {message_bytes}-byte message in a {}-byte payload",
            payload.len()
        )));
    };
    let message = String::from_utf8_lossy(message).into_owned();
    Ok(TransportError::Refused { code, message })
}

fn decode_conf(payload: &[u8]) -> Result<HelloAccepted, TransportError> {
    let bytes: [u8; HELLO_CONF_BYTES] = payload.try_into().map_err(|_| {
        bad(format!(
            "HELLO_CONF payload is {} bytes, expected {HELLO_CONF_BYTES}",
            payload.len()
        ))
    })?;
    Ok(HelloAccepted {
        server_node: NodeId(u16::from_le_bytes(bytes)),
    })
}

fn node_kind_code(kind: NodeKind) -> u8 {
    match kind {
        NodeKind::Data => 1,
        NodeKind::Mgm => 2,
        NodeKind::Api => 3,
    }
}

fn transporter_code(kind: TransporterKind) -> u8 {
    match kind {
        TransporterKind::Tcp => 1,
        TransporterKind::Shm => 2,
        TransporterKind::Uring => 3,
    }
}

/// Writes one unchecksummed frame, blocking until `deadline`.
fn write_frame(
    stream: &mut (impl HandshakeStream + ?Sized),
    signal: u16,
    payload: &[u8],
    deadline: Instant,
) -> Result<(), TransportError> {
    let header = FrameHeader {
        signal,
        ..FrameHeader::default()
    };
    let mut bytes = Vec::with_capacity(frame::encoded_len(payload.len(), false));
    frame::encode_into(&mut bytes, &header, payload, false)?;
    let socket = stream.socket();
    socket
        .set_nonblocking(false)
        .map_err(|e| TransportError::io("set blocking", e))?;
    socket
        .set_write_timeout(Some(remaining(deadline)?))
        .map_err(|e| TransportError::io("set write timeout", e))?;
    stream.write_all(&bytes).map_err(io_failure)?;
    stream.flush().map_err(io_failure)
}

/// Reads exactly one unchecksummed frame into `buf` (header included) and returns its header.
/// The length is checked as soon as its four bytes arrive, and again with the flags once the
/// header has, so an oversized or garbage frame fails without waiting for the rest.
fn read_frame(
    stream: &mut (impl HandshakeStream + ?Sized),
    buf: &mut Vec<u8>,
    deadline: Instant,
) -> Result<FrameHeader, TransportError> {
    stream
        .socket()
        .set_nonblocking(false)
        .map_err(|e| TransportError::io("set blocking", e))?;
    buf.resize(LENGTH_BYTES, 0);
    read_exact_until(stream, buf, deadline)?;
    handshake_frame_len(buf)?;
    buf.resize(FRAME_HEADER_BYTES, 0);
    read_exact_until(stream, &mut buf[LENGTH_BYTES..], deadline)?;
    let frame_len = handshake_frame_len(buf)?;
    buf.resize(frame_len, 0);
    read_exact_until(stream, &mut buf[FRAME_HEADER_BYTES..], deadline)?;
    whole_handshake_frame(buf)
}

/// Bytes of a frame's length field, the first thing read of a handshake frame.
const LENGTH_BYTES: usize = 4;

/// The length a handshake frame's header (its first [`FRAME_HEADER_BYTES`] bytes, or only the
/// first [`LENGTH_BYTES`]) announces, checked against the frame rules and
/// [`HANDSHAKE_FRAME_BYTES_MAX`].
fn handshake_frame_len(header: &[u8]) -> Result<usize, TransportError> {
    let frame_len = match frame::decode(header, false) {
        Ok(Decoded::NeedMore) => match header.get(0..4) {
            Some(&[a, b, c, d]) => {
                usize::try_from(u32::from_le_bytes([a, b, c, d])).unwrap_or(usize::MAX)
            }
            _ => return Err(bad("handshake frame header incomplete".to_string())),
        },
        Ok(Decoded::Frame { frame_len, .. }) => frame_len,
        Err(e) => return Err(bad(e.to_string())),
    };
    if frame_len > HANDSHAKE_FRAME_BYTES_MAX {
        return Err(bad(format!(
            "handshake frame of {frame_len} bytes exceeds {HANDSHAKE_FRAME_BYTES_MAX}"
        )));
    }
    Ok(frame_len)
}

/// The header of the one whole handshake frame `bytes` must be.
fn whole_handshake_frame(bytes: &[u8]) -> Result<FrameHeader, TransportError> {
    match frame::decode(bytes, false) {
        Ok(Decoded::Frame {
            header, frame_len, ..
        }) if frame_len == bytes.len() => Ok(header),
        Ok(Decoded::Frame { frame_len, .. }) => Err(bad(format!(
            "handshake frame of {frame_len} bytes followed by {} more",
            bytes.len() - frame_len
        ))),
        Ok(Decoded::NeedMore) => Err(bad("handshake frame incomplete".to_string())),
        Err(e) => Err(bad(e.to_string())),
    }
}

/// `read_exact` with the socket's read timeout renewed to what is left before `deadline`.
fn read_exact_until(
    stream: &mut (impl HandshakeStream + ?Sized),
    mut buf: &mut [u8],
    deadline: Instant,
) -> Result<(), TransportError> {
    while !buf.is_empty() {
        stream
            .socket()
            .set_read_timeout(Some(remaining(deadline)?))
            .map_err(|e| TransportError::io("set read timeout", e))?;
        match stream.read(buf) {
            Ok(0) => return Err(bad("peer closed the connection".to_string())),
            Ok(read_bytes) => buf = &mut buf[read_bytes..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_failure(e)),
        }
    }
    Ok(())
}

/// Time left before `deadline`, or a timeout error when none is.
fn remaining(deadline: Instant) -> Result<Duration, TransportError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(bad("timed out".to_string()));
    }
    Ok(left)
}

/// Maps a socket error: a timeout is a handshake failure, the rest stay io errors.
fn io_failure(e: io::Error) -> TransportError {
    if let Some(tls) = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        return TransportError::Tls(tls.to_string());
    }
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => bad("timed out".to_string()),
        _ => TransportError::io("socket", e),
    }
}

fn bad(message: String) -> TransportError {
    TransportError::Handshake(message)
}

/// Prefixes what we were doing to a handshake or io error; other errors pass unchanged.
fn context(e: TransportError, doing: impl Into<String>) -> TransportError {
    let doing = doing.into();
    match e {
        TransportError::Handshake(message) => {
            TransportError::Handshake(format!("{doing}: {message}"))
        }
        TransportError::Io { context, source } => TransportError::Io {
            context: format!("{doing}: {context}"),
            source,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HELLO: Hello = Hello {
        protocol_version: PROTOCOL_VERSION,
        cluster_id: 0x0123_4567_89AB_CDEF,
        from: NodeId(3),
        to: NodeId(1),
        from_kind: NodeKind::Api,
        transporter: TransporterKind::Tcp,
        checksum: false,
        token: 7,
    };

    fn frame_of(signal: u16, payload: &[u8]) -> Vec<u8> {
        let header = FrameHeader {
            signal,
            ..FrameHeader::default()
        };
        let mut bytes = Vec::new();
        frame::encode_into(&mut bytes, &header, payload, false).expect("fits");
        bytes
    }

    /// `decode_hello_frame(bytes)` is the hello, or an error containing `expected`.
    #[track_caller]
    fn check(bytes: &[u8], expected: Result<Hello, &str>) {
        match (decode_hello_frame(bytes), expected) {
            (Ok(found), Ok(hello)) => assert_eq!(found, hello),
            (Err(e), Err(text)) => assert!(e.to_string().contains(text), "{e} lacks {text:?}"),
            (found, expected) => panic!("{bytes:02x?}: got {found:?}, expected {expected:?}"),
        }
    }

    #[test]
    fn hello_frames_as_a_data_node_reads_them() {
        let good = frame_of(SIGNAL_HELLO, &HELLO.encode());
        check(&good, Ok(HELLO));
        check(&good[..good.len() - 1], Err("incomplete"));
        let mut longer = good.clone();
        longer.push(0);
        check(&longer, Err("followed by 1 more"));
        check(&good[..3], Err("header incomplete"));
        check(
            &u32::MAX.to_le_bytes(),
            Err("frame length 4294967295 exceeds"),
        );
        check(
            &2000u32.to_le_bytes(),
            Err("handshake frame of 2000 bytes exceeds"),
        );
        check(
            &frame_of(SIGNAL_HELLO_CONF, &[1, 0]),
            Err("expected HELLO, got signal 0xfff1"),
        );
        check(
            &frame_of(SIGNAL_HELLO, &HELLO.encode()[..22]),
            Err("HELLO payload is 22 bytes"),
        );
        let mut bad_kind = HELLO.encode();
        bad_kind[20] = 9;
        check(
            &frame_of(SIGNAL_HELLO, &bad_kind),
            Err("unknown node kind 9"),
        );
    }

    #[test]
    fn answer_frames_as_a_client_reads_them() {
        assert_eq!(
            decode_answer_frame(&frame_of(SIGNAL_HELLO_CONF, &7u16.to_le_bytes())).ok(),
            Some(HelloAccepted {
                server_node: NodeId(7)
            })
        );
        match decode_answer_frame(&frame_of(SIGNAL_HELLO_REF, &encode_ref(1702, "busy"))) {
            Err(TransportError::Refused { code, message }) => {
                assert_eq!((code, message.as_str()), (1702, "busy"));
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert!(decode_answer_frame(&frame_of(SIGNAL_HELLO, &[])).is_err());
    }
}
