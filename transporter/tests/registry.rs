//! Proves the admission rules (every refusal code, with a message naming the node and the
//! parameter) and the registry's bookkeeping of links by peer node id.

mod common;

use std::net::IpAddr;
use std::os::fd::RawFd;

use rndb_config::{ClusterConfig, NodeKind};
use rndb_transporter::handshake::Hello;
use rndb_transporter::registry::*;
use rndb_transporter::{
    FlushStatus, FrameHeader, NodeId, TransportError, Transporter, TransporterKind,
};

const LOCAL: &str = "127.0.0.1";

fn hello(config: &ClusterConfig, from: u16, to: u16) -> Hello {
    Hello::for_link(config, NodeId(from), NodeId(to)).expect("linked pair")
}

/// The process token of node 2's link in [`check`].
const NODE_2_PROCESS: u64 = 0xABC;

/// Node 1 judges `hello` from `addr`, with node 2 already connected (by process
/// [`NODE_2_PROCESS`]); `expected` is the pair the admitted link joins, or the refusal code and
/// a phrase the message must contain.
fn check(hello: Hello, addr: &str, expected: Result<(u16, u16), (u32, &str)>) {
    let config = common::cluster();
    let addr: IpAddr = addr.parse().expect("test address");
    let held = |node, _| (node == NodeId(2)).then_some(NODE_2_PROCESS);
    let result = admit(&config, NodeId(1), &hello, addr, held);
    match (result, expected) {
        (Ok(link), Ok((node1, node2))) => {
            assert_eq!((link.node1, link.node2), (NodeId(node1), NodeId(node2)));
        }
        (Err(refusal), Err((code, phrase))) => {
            assert_eq!(refusal.code, code, "{refusal}");
            assert!(
                refusal.message.contains(phrase),
                "{:?} lacks {phrase:?}",
                refusal.message
            );
        }
        (result, expected) => panic!("{hello:?} from {addr}: got {result:?}, want {expected:?}"),
    }
}

#[test]
fn admits_configured_peers() {
    let config = common::cluster();
    check(hello(&config, 10, 1), LOCAL, Ok((1, 10)));
    check(hello(&config, 10, 1), "203.0.113.9", Ok((1, 10)));
    check(hello(&config, 11, 1), "127.0.1.1", Ok((1, 11)));
    check(hello(&config, 11, 1), "::1", Ok((1, 11)));
    check(hello(&config, 11, 1), "::ffff:127.0.0.1", Ok((1, 11)));
    check(hello(&config, 12, 1), "192.0.2.20", Ok((1, 12)));
    check(hello(&config, 49, 1), LOCAL, Ok((1, 49)));
}

/// Node 10's hello to node 1 with one field changed by `patch`.
fn api_hello_with(patch: impl FnOnce(&mut Hello)) -> Hello {
    let mut hello = hello(&common::cluster(), 10, 1);
    patch(&mut hello);
    hello
}

#[test]
fn refuses_peers_that_disagree_on_identity() {
    let version = api_hello_with(|h| h.protocol_version = 99);
    check(
        version,
        LOCAL,
        Err((REFUSE_VERSION_MISMATCH, "protocol version 99")),
    );
    let cluster = api_hello_with(|h| h.cluster_id ^= 1);
    check(
        cluster,
        LOCAL,
        Err((REFUSE_CLUSTER_MISMATCH, "different cluster config")),
    );
    let wrong_node = api_hello_with(|h| h.to = NodeId(5));
    check(
        wrong_node,
        LOCAL,
        Err((REFUSE_WRONG_NODE, "asked for node 5")),
    );
    let unknown = api_hello_with(|h| h.from = NodeId(77));
    check(unknown, LOCAL, Err((REFUSE_UNKNOWN_NODE, "NodeId=77")));
    let kind = api_hello_with(|h| h.from_kind = NodeKind::Data);
    let phrase = "declares NodeId=10 as an API node";
    check(kind, LOCAL, Err((REFUSE_NODE_TYPE_MISMATCH, phrase)));
}

#[test]
fn refuses_peers_that_disagree_on_the_link() {
    let unlinked = api_hello_with(|h| h.from = NodeId(13));
    check(
        unlinked,
        LOCAL,
        Err((REFUSE_NO_LINK, "no link between node 13")),
    );
    let shm = api_hello_with(|h| h.transporter = TransporterKind::Shm);
    check(
        shm,
        LOCAL,
        Err((REFUSE_TRANSPORTER_MISMATCH, "wants a SHM link")),
    );
    let checksum = api_hello_with(|h| h.checksum = true);
    check(
        checksum,
        LOCAL,
        Err((REFUSE_CHECKSUM_MISMATCH, "Checksum=1")),
    );
}

/// TCP and Uring links are both TCP on the wire, so a client may ask for either on either; an
/// SHM link also takes either; SHM is refused on a TCP or Uring link.
#[test]
fn tcp_and_uring_stand_in_for_each_other() {
    for (configured, wanted, admitted) in [
        (TransporterKind::Tcp, TransporterKind::Uring, true),
        (TransporterKind::Uring, TransporterKind::Tcp, true),
        (TransporterKind::Uring, TransporterKind::Uring, true),
        (TransporterKind::Shm, TransporterKind::Uring, true),
        (TransporterKind::Uring, TransporterKind::Shm, false),
        (TransporterKind::Tcp, TransporterKind::Shm, false),
    ] {
        let mut config = common::cluster();
        for link in &mut config.links {
            if (link.node1, link.node2) == (NodeId(1), NodeId(10)) {
                link.kind = configured;
            }
        }
        let mut hello = hello(&config, 10, 1);
        hello.transporter = wanted;
        let result = admit(
            &config,
            NodeId(1),
            &hello,
            LOCAL.parse().expect("address"),
            |_, _| None,
        );
        match result {
            Ok(_) => assert!(admitted, "{wanted} on a {configured} link was admitted"),
            Err(refusal) => {
                assert!(!admitted, "{wanted} on a {configured} link: {refusal}");
                assert_eq!(refusal.code, REFUSE_TRANSPORTER_MISMATCH);
                let phrase = format!("wants a {wanted} link");
                assert!(refusal.message.contains(&phrase), "{refusal}");
            }
        }
    }
}

#[test]
fn refuses_wrong_hosts_and_second_connections() {
    let config = common::cluster();
    let phrase = "HostName=localhost";
    check(
        hello(&config, 11, 1),
        "192.0.2.99",
        Err((REFUSE_HOST_NOT_ALLOWED, phrase)),
    );
    let phrase = "HostName=192.0.2.20";
    check(
        hello(&config, 12, 1),
        LOCAL,
        Err((REFUSE_HOST_NOT_ALLOWED, phrase)),
    );
    let phrase = "node 2 connected from 127.0.0.1";
    check(
        hello(&config, 2, 1),
        LOCAL,
        Err((REFUSE_HOST_NOT_ALLOWED, phrase)),
    );
    let phrase = "node 2 already has a link to node 1, from another sender";
    check(
        hello(&config, 2, 1),
        "192.0.2.10",
        Err((REFUSE_ALREADY_CONNECTED, phrase)),
    );
    // The same process again, its earlier link not closed yet: 1703, to retry.
    let mut again = hello(&config, 2, 1);
    again.token = NODE_2_PROCESS;
    let phrase = "still closing the earlier link of node 2 from the same sender";
    check(again, "192.0.2.10", Err((REFUSE_LINK_CLOSING, phrase)));
}

/// A link that only knows its peer; enough for the registry.
struct FakeLink(NodeId);

impl Transporter for FakeLink {
    fn peer(&self) -> NodeId {
        self.0
    }
    fn kind(&self) -> TransporterKind {
        TransporterKind::Tcp
    }
    fn send(&mut self, _: &FrameHeader, _: &[u8]) -> Result<(), TransportError> {
        Ok(())
    }
    fn flush(&mut self) -> Result<FlushStatus, TransportError> {
        Ok(FlushStatus::Done)
    }
    fn receive(&mut self, _: &mut dyn FnMut(&FrameHeader, &[u8])) -> Result<usize, TransportError> {
        Ok(0)
    }
    fn pending_send_bytes(&self) -> usize {
        0
    }
    fn poll_fd(&self) -> RawFd {
        -1
    }
}

#[test]
fn registry_keeps_one_link_per_peer() {
    let mut registry = Registry::new();
    assert!(registry.is_empty());
    assert!(registry.insert(Box::new(FakeLink(NodeId(3)))).is_none());
    assert!(registry.insert(Box::new(FakeLink(NodeId(1)))).is_none());
    assert!(registry.insert(Box::new(FakeLink(NodeId(255)))).is_none());
    assert!(
        registry.insert(Box::new(FakeLink(NodeId(3)))).is_some(),
        "replaced, reported"
    );
    assert_eq!(registry.len(), 3);
    assert!(registry.contains(NodeId(1)) && !registry.contains(NodeId(2)));
    assert!(
        !registry.contains(NodeId(1000)),
        "ids past the table are simply absent"
    );
    assert_eq!(
        registry.get_mut(NodeId(255)).map(|link| link.peer()),
        Some(NodeId(255))
    );
    let peers: Vec<NodeId> = registry
        .iter_mut()
        .map(|(id, link)| {
            assert_eq!(id, link.peer());
            id
        })
        .collect();
    assert_eq!(peers, [NodeId(1), NodeId(3), NodeId(255)]);
    assert!(registry.remove(NodeId(3)).is_some());
    assert!(registry.remove(NodeId(3)).is_none());
    assert!(registry.remove(NodeId(1000)).is_none());
    assert_eq!(
        registry.peers().collect::<Vec<_>>(),
        [NodeId(1), NodeId(255)]
    );
    assert!(format!("{registry:?}").contains("255"));
    // Iteration stops after the highest link: removing it, and adding a lower one, keep every
    // link visited and nothing else.
    assert!(registry.remove(NodeId(255)).is_some());
    assert_eq!(registry.peers().collect::<Vec<_>>(), [NodeId(1)]);
    assert!(registry.insert(Box::new(FakeLink(NodeId(7)))).is_none());
    let visited: Vec<NodeId> = registry.iter_mut().map(|(id, _)| id).collect();
    assert_eq!(visited, [NodeId(1), NodeId(7)]);
    assert!(registry.remove(NodeId(1)).is_some() && registry.remove(NodeId(7)).is_some());
    assert!(registry.is_empty() && registry.peers().next().is_none());
    let mut grown = Registry::default();
    grown.insert(Box::new(FakeLink(NodeId(300))));
    assert!(grown.contains(NodeId(300)));
    assert_eq!(grown.peers().collect::<Vec<_>>(), [NodeId(300)]);
}
