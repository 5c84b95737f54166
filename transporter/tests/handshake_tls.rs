//! Proves the START_TLS step of the handshake on real sockets: a data node without keys
//! answers START_TLS_REF and admits the same connection's plain HELLO; a data node with
//! RequireTls=1 refuses a plain HELLO with 1718, naming both nodes.

mod common;

use std::thread;
use std::time::Duration;

use rndb_transporter::handshake::{self, Hello};
use rndb_transporter::registry::{self, REFUSE_TLS_REQUIRED};
use rndb_transporter::tls::TlsSetup;
use rndb_transporter::{NodeId, TransportError};

const TIMEOUT: Duration = Duration::from_secs(5);

fn api_hello() -> Hello {
    Hello::for_link(&common::cluster(), NodeId(10), NodeId(1)).expect("node 10 links to node 1")
}

/// Runs data node 1's side of a handshake with `tls` on a new connection; returns the
/// client's end and the server's outcome (whether the connection stayed plain, or the error).
fn serve(
    tls: TlsSetup,
) -> (
    std::net::TcpStream,
    thread::JoinHandle<Result<bool, TransportError>>,
) {
    let (client, server) = common::connected_streams();
    let server = thread::spawn(move || {
        let config = common::cluster();
        registry::server_handshake_tls(server, &config, NodeId(1), |_, _| None, TIMEOUT, &tls)
            .map(|(stream, _, _)| !stream.is_tls())
    });
    (client, server)
}

#[test]
fn a_node_without_keys_lets_start_tls_go_on_in_plain_text() {
    let (mut client, server) = serve(TlsSetup::plain());
    let agreed = handshake::client_start_tls(&mut client, NodeId(1), TIMEOUT).expect("answer");
    assert!(!agreed, "no keys: START_TLS_REF");
    handshake::client_handshake(&mut client, &api_hello(), TIMEOUT).expect("plain HELLO admitted");
    assert!(
        server.join().expect("server thread").expect("admitted"),
        "stayed plain"
    );
}

#[test]
fn a_node_requiring_tls_refuses_a_plain_hello() {
    let tls = TlsSetup {
        keys: None,
        require_tls: true,
    };
    let (mut client, server) = serve(tls);
    let refused = handshake::client_handshake(&mut client, &api_hello(), TIMEOUT);
    match refused {
        Err(TransportError::Refused { code, message }) => {
            assert_eq!(code, REFUSE_TLS_REQUIRED);
            assert!(
                message.contains(
                    "node 1 requires TLS (RequireTls=1) and node 10 connected without TLS"
                ),
                "{message}"
            );
        }
        other => panic!("a plain HELLO to a node requiring TLS: {other:?}"),
    }
    assert!(matches!(
        server.join().expect("server thread"),
        Err(TransportError::Refused {
            code: REFUSE_TLS_REQUIRED,
            ..
        })
    ));
}
