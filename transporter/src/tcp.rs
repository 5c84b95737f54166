//! The TCP link: a [`SocketLink`] whose bytes move by plain system calls, one `send` of the
//! whole unsent batch per flush round and one `read` into the receive buffer's free space per
//! receive round (see [`crate::socket_link`] for the buffers and the receive loop).
#![forbid(unsafe_code)]

use std::io::{self, Read};
use std::net::TcpStream;

use socket2::SockRef;

use crate::error::is_disconnect;
pub use crate::socket_link::RECEIVE_READS_PER_CALL_MAX;
use crate::socket_link::{ReceiveRegion, Received, SocketIo, SocketLink};
use crate::{NodeId, TransportError, TransporterKind};

/// One TCP link to one peer node.
pub type TcpLink = SocketLink<SyscallIo>;

/// Bytes moved by `send` and `read` system calls on the non-blocking socket.
#[derive(Debug)]
pub struct SyscallIo {
    /// The node at the other end, for error messages; fixed.
    peer: NodeId,
}

impl SocketIo for SyscallIo {
    const KIND: TransporterKind = TransporterKind::Tcp;
    const LINK_NAME: &'static str = "TcpLink";

    fn open(_stream: &TcpStream, peer: NodeId) -> Result<SyscallIo, TransportError> {
        Ok(SyscallIo { peer })
    }

    fn send(
        &mut self,
        stream: &TcpStream,
        batch: &[u8],
    ) -> Result<io::Result<usize>, TransportError> {
        Ok(SockRef::from(stream).send_with_flags(batch, libc::MSG_NOSIGNAL))
    }

    fn receive(
        &mut self,
        mut stream: &TcpStream,
        mut region: ReceiveRegion<'_>,
    ) -> Result<Received, TransportError> {
        let requested = region.len();
        loop {
            match stream.read(region.bytes()) {
                Ok(0) => return Ok(Received::Closed),
                Ok(bytes) => return Ok(Received::Bytes { bytes, requested }),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Received::Nothing),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if is_disconnect(&e) => return Ok(Received::Closed),
                Err(e) => {
                    return Err(TransportError::io(
                        format!("link to node {}: read", self.peer),
                        e,
                    ))
                }
            }
        }
    }
}
