//! A fake data node for tests of the API library against a hostile or broken data node: a
//! thread that accepts one API connection on a port of its own, speaks the real handshake and
//! frames (HELLO, API_REGREQ, GET_TABINFO_REQ), and then runs a script of what to answer: any
//! signal, any payload, bytes that are no frame, a close, silence.
//!
//! [`FakeDataNode::start`] writes a config.ini with one data node (the fake, [`DATA_NODE`];
//! [`FakeDataNode::start_several`]: several) and
//! one API slot ([`API_NODE`]) in a temporary directory; [`FakeDataNode::run`] connects an API
//! node to it over TCP and runs the API side on a thread of its own, bounded by [`RUN_LIMIT`],
//! so a hang fails the test instead of stalling it. The script's side is a [`Peer`].

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rndb_api::{Cluster, ConnectOptions, Error, NodeId, TransporterKind};
use rndb_protocol::lqh::{self, ApiRegConf};
use rndb_protocol::signals::{block, gsn, TableInfo, TcKeyReqView};
use rndb_transporter::frame::{self, Decoded, FrameHeader};
use rndb_transporter::handshake::{self, HANDSHAKE_TIMEOUT};
use tempfile::TempDir;

use crate::{free_port_listener, ClusterSpec, API_NODE_ID_FIRST, DATA_NODE_ID_FIRST};

/// The fake data node's id: the one data node of the config (the first of several).
pub const DATA_NODE: NodeId = NodeId(DATA_NODE_ID_FIRST);
/// The API node's slot.
pub const API_NODE: NodeId = NodeId(API_NODE_ID_FIRST);
/// The API's request timeout (4012 after this).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// The API's connect timeout (TCP connect, handshake, and waiting for the cluster to start).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest a whole case's API side may take (connect and a few calls); past it the test
/// fails as hung rather than wait for ever.
pub const RUN_LIMIT: Duration = Duration::from_secs(15);
/// How long the fake node waits for the API (to connect, or for its next frame) before it
/// gives up, so that its thread always ends.
pub const FAKE_WAIT_LIMIT: Duration = Duration::from_secs(10);
/// How often the fake node's blocking socket calls wake to look at its stop flag.
pub const FAKE_POLL: Duration = Duration::from_millis(20);

/// How the API node connects to the fake: slot [`API_NODE`], TCP, and the short timeouts
/// above.
pub fn connect_options() -> ConnectOptions {
    ConnectOptions {
        node_id: Some(API_NODE),
        connect_timeout: CONNECT_TIMEOUT,
        transporter: Some(TransporterKind::Tcp),
        request_timeout: REQUEST_TIMEOUT,
        ..ConnectOptions::default()
    }
}

fn connect(config_path: &Path) -> Result<Cluster, Error> {
    Cluster::connect(config_path, connect_options())
}

/// What a fake data node does after its handshake.
pub type Script = Box<dyn FnOnce(&mut Peer) + Send>;

/// A data node that is a test thread: it accepts one API connection on a port of its own,
/// runs the server side of the handshake, and then a script of what to answer. It ends (and is
/// joined) when the test ends, even when the test fails.
#[derive(Debug)]
pub struct FakeDataNode {
    /// Holds config.ini.
    _dir: TempDir,
    config_path: PathBuf,
    /// Set when the test is done with the node: its thread stops within [`FAKE_POLL`].
    stop: Arc<AtomicBool>,
    /// One per fake data node of the config.
    threads: Vec<JoinHandle<()>>,
}

impl FakeDataNode {
    /// A node that does what a data node does on connect (HELLO_CONF, then API_REGCONF saying
    /// the cluster has started), then runs `script`, then keeps the link open (reading and
    /// dropping whatever comes) until the API closes it or the test ends.
    pub fn start(script: impl FnOnce(&mut Peer) + Send + 'static) -> FakeDataNode {
        FakeDataNode::start_raw(move |peer| {
            peer.register_api();
            script(peer);
        })
    }

    /// As [`FakeDataNode::start`], but `script` runs right after the handshake: it answers
    /// API_REGREQ itself.
    pub fn start_raw(script: impl FnOnce(&mut Peer) + Send + 'static) -> FakeDataNode {
        FakeDataNode::start_several(vec![Box::new(script)])
    }

    /// Fake data nodes [`DATA_NODE`], [`DATA_NODE`] + 1, ... (NoOfReplicas=1: a node group
    /// each), the n-th running the n-th script right after its handshake, as
    /// [`FakeDataNode::start_raw`].
    pub fn start_several(scripts: Vec<Script>) -> FakeDataNode {
        let dir = tempfile::tempdir().expect("create a temporary directory");
        // The ports stay bound: each fake node accepts on its very socket.
        let listeners: Vec<(NodeId, TcpListener)> = (0..scripts.len())
            .map(|i| (NodeId(DATA_NODE.0 + i as u16), free_port_listener()))
            .collect();
        let ports: BTreeMap<NodeId, u16> = (listeners.iter())
            .map(|(node, l)| (*node, l.local_addr().expect("bound address").port()))
            .collect();
        let config_path = dir.path().join("config.ini");
        let config = ClusterSpec::new()
            .data_nodes(scripts.len() as u16)
            .replicas(1)
            .api_slots(1)
            .render(dir.path(), &ports);
        std::fs::write(&config_path, config).expect("write config.ini");
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (listeners.into_iter().zip(scripts))
            .map(|((node, listener), script)| {
                let thread_stop = stop.clone();
                std::thread::Builder::new()
                    .name(format!("fake-ndbd-{node}"))
                    .spawn(move || {
                        let mut peer = Peer::accept(&listener, node, thread_stop);
                        script(&mut peer);
                        peer.linger();
                    })
                    .expect("spawn the fake data node")
            })
            .collect();
        FakeDataNode {
            _dir: dir,
            config_path,
            stop,
            threads,
        }
    }

    /// Connects an API node to the fake node and runs `api` with it on a thread of its own,
    /// failing the test if that does not return within [`RUN_LIMIT`] (the API hangs) and
    /// raising its panic here if it panics.
    pub fn run<T: Send + 'static>(&self, api: impl FnOnce(&Cluster) -> T + Send + 'static) -> T {
        let config_path = self.config_path.clone();
        bounded(move || {
            let cluster = connect(&config_path).expect("connect to the fake data node");
            api(&cluster)
        })
    }

    /// Connects an API node to the fake node (bounded as [`FakeDataNode::run`]) and returns what
    /// the connect returned.
    pub fn try_connect(&self) -> Result<Cluster, Error> {
        let config_path = self.config_path.clone();
        bounded(move || connect(&config_path))
    }

    /// Stops the fake node and raises its script's panic, if any: the API did not send what
    /// the script expected.
    pub fn finish(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in std::mem::take(&mut self.threads) {
            if let Err(panic) = thread.join() {
                std::panic::resume_unwind(panic);
            }
        }
    }
}

impl Drop for FakeDataNode {
    /// Stops and joins the thread (each of its waits looks at the stop flag every
    /// [`FAKE_POLL`]); a panic of its script is left to the test's own failure.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in std::mem::take(&mut self.threads) {
            let _ = thread.join();
        }
    }
}

/// The fake node's end of the API's connection.
#[derive(Debug)]
pub struct Peer {
    /// Blocking, with read and write timeouts of [`FAKE_POLL`].
    stream: TcpStream,
    /// The link's Checksum setting, as the API's HELLO says.
    checksum: bool,
    /// Bytes read and not decoded yet.
    received: Vec<u8>,
    /// The request id of the API's API_REGREQ, answered and finished.
    registration_request_id: u32,
    stop: Arc<AtomicBool>,
}

impl Peer {
    /// Waits (bounded) for the API to connect and admits it, as a data node's listener does.
    fn accept(listener: &TcpListener, node: NodeId, stop: Arc<AtomicBool>) -> Peer {
        listener
            .set_nonblocking(true)
            .expect("make the listener non-blocking");
        let deadline = Instant::now() + FAKE_WAIT_LIMIT;
        let mut stream = loop {
            match listener.accept() {
                Ok((stream, _)) => break stream,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    assert!(
                        !stop.load(Ordering::Relaxed) && Instant::now() < deadline,
                        "the API never connected"
                    );
                    std::thread::sleep(FAKE_POLL);
                }
                Err(e) => panic!("accept the API's connection: {e}"),
            }
        };
        stream
            .set_nonblocking(false)
            .expect("make the stream blocking");
        let hello = handshake::server_read_hello(&mut stream, HANDSHAKE_TIMEOUT)
            .expect("read the API's HELLO");
        assert_eq!((hello.from, hello.to), (API_NODE, node), "HELLO's node ids");
        assert_eq!(hello.transporter, TransporterKind::Tcp, "HELLO's link kind");
        handshake::server_accept(&mut stream, node, HANDSHAKE_TIMEOUT).expect("send HELLO_CONF");
        stream
            .set_read_timeout(Some(FAKE_POLL))
            .expect("set the read timeout");
        stream
            .set_write_timeout(Some(FAKE_POLL))
            .expect("set the write timeout");
        Peer {
            stream,
            checksum: hello.checksum,
            received: Vec::new(),
            registration_request_id: 0,
            stop,
        }
    }

    /// Answers the API_REGREQ that `Cluster::connect` sends: the cluster has started.
    pub fn register_api(&mut self) {
        let (request, _) = self.expect(lqh::gsn::API_REGREQ);
        let mut conf = Vec::new();
        ApiRegConf {
            started: true,
            data_nodes_up: 1,
            data_nodes: 1,
        }
        .encode(&mut conf);
        self.answer(&request, lqh::gsn::API_REGCONF, &conf);
        self.registration_request_id = request.request_id;
    }

    /// The API's next frame; `None` once the API closed the connection, the test ended, or
    /// nothing came for [`FAKE_WAIT_LIMIT`].
    pub fn read_frame(&mut self) -> Option<(FrameHeader, Vec<u8>)> {
        let deadline = Instant::now() + FAKE_WAIT_LIMIT;
        let mut chunk = [0u8; 4096];
        loop {
            let decoded =
                frame::decode(&self.received, self.checksum).expect("the API sends valid frames");
            if let Decoded::Frame {
                header,
                payload,
                frame_len,
            } = decoded
            {
                let payload = payload.to_vec();
                self.received.drain(..frame_len);
                return Some((header, payload));
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.received.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) =>
                {
                    if self.stop.load(Ordering::Relaxed) || Instant::now() >= deadline {
                        return None;
                    }
                }
                // Reset: the API is gone.
                Err(_) => return None,
            }
        }
    }

    /// The API's next frame, which must carry `signal`.
    #[track_caller]
    pub fn expect(&mut self, signal: u16) -> (FrameHeader, Vec<u8>) {
        let Some((header, payload)) = self.read_frame() else {
            panic!("the fake node expected signal {signal}, but the API sent nothing more");
        };
        assert_eq!(header.signal, signal, "the signal the API sent");
        (header, payload)
    }

    /// The API's next frame with `signal`, dropping any others before it (a rollback a dropped
    /// transaction sends, say).
    #[track_caller]
    pub fn expect_skipping(&mut self, signal: u16) -> FrameHeader {
        loop {
            match self.read_frame() {
                Some((header, _)) if header.signal == signal => return header,
                Some(_) => {}
                None => {
                    panic!("the fake node expected signal {signal}, but the API sent nothing more")
                }
            }
        }
    }

    /// Reads an execute: TCKEYREQ frames, the last with FLAG_EXECUTE (or a TC_EXECUTE_REQ
    /// after them), and returns the header of the frame that ended it.
    #[track_caller]
    pub fn read_execute(&mut self) -> FrameHeader {
        loop {
            let Some((header, payload)) = self.read_frame() else {
                panic!("the fake node expected an execute, but the API sent nothing more");
            };
            match header.signal {
                gsn::TCKEYREQ => {
                    let req = TcKeyReqView::decode(&payload).expect("a TCKEYREQ that decodes");
                    if req.execute().is_some() {
                        return header;
                    }
                }
                gsn::TC_EXECUTE_REQ => return header,
                other => panic!("expected TCKEYREQ or TC_EXECUTE_REQ, got signal {other}"),
            }
        }
    }

    /// Answers GET_TABINFO_REQ with `table`.
    pub fn serve_table(&mut self, table: &TableInfo) {
        let (request, _) = self.expect(gsn::GET_TABINFO_REQ);
        let mut info = Vec::new();
        table.encode(&mut info);
        self.answer(&request, gsn::GET_TABINFO_CONF, &info);
    }

    /// Sends `signal` with `payload` in answer to `request` (its request id, blocks swapped),
    /// as a data node answers.
    pub fn answer(&mut self, request: &FrameHeader, signal: u16, payload: &[u8]) {
        self.send(request.request_id, signal, payload);
    }

    /// Sends one well-formed frame to the API under `request_id`.
    pub fn send(&mut self, request_id: u32, signal: u16, payload: &[u8]) {
        let bytes = self.frame(request_id, signal, payload);
        self.send_raw(&bytes);
    }

    /// The bytes of one well-formed frame to the API under `request_id`, from TC.
    pub fn frame(&self, request_id: u32, signal: u16, payload: &[u8]) -> Vec<u8> {
        let header = FrameHeader {
            signal,
            receiver_block: block::API,
            sender_block: block::DBTC,
            request_id,
        };
        let mut bytes = Vec::new();
        frame::encode_into(&mut bytes, &header, payload, self.checksum)
            .expect("encode a frame for the API");
        bytes
    }

    /// Writes bytes as they are, all of them unless the test ends first: a write that times
    /// out (the API is not reading) goes on from where it stopped, so no frame is cut by
    /// accident. A failure is ignored: the API may have given the link up already, and each
    /// test asserts on what the API saw.
    pub fn send_raw(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() && !self.stop.load(Ordering::Relaxed) {
            match self.stream.write(bytes) {
                Ok(0) => return,
                Ok(written) => bytes = &bytes[written..],
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) => {}
                Err(_) => return,
            }
        }
    }

    /// True once the test is done with the fake node: a script that loops should end.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// The request id of the API's API_REGREQ, answered and finished by
    /// [`Peer::register_api`].
    pub fn registration_request_id(&self) -> u32 {
        self.registration_request_id
    }

    /// Closes the connection in both directions (the API sees EOF).
    pub fn close(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }

    /// Reads and drops frames until the API closes the connection or the test ends.
    pub fn linger(&mut self) {
        while self.read_frame().is_some() {}
    }
}

/// Runs `f` on a thread of its own and returns its result, failing the test when it takes
/// longer than [`RUN_LIMIT`]. A thread that hangs cannot be stopped; it ends with the test
/// process.
fn bounded<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, result) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("api".into())
        .spawn(move || {
            let _ = done.send(f());
        })
        .expect("spawn the API thread");
    match result.recv_timeout(RUN_LIMIT) {
        Ok(value) => {
            let _ = thread.join();
            value
        }
        Err(RecvTimeoutError::Timeout) => {
            panic!("the API side did not return within {RUN_LIMIT:?}: it hangs")
        }
        Err(RecvTimeoutError::Disconnected) => match thread.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the API thread ended without a result"),
        },
    }
}
