//! `rndb-abuse`: a hostile peer for measuring what abuse costs a data node's real clients. For
//! a bounded time it keeps `--idle` connections open that say nothing (reopening each one the
//! node drops), sends a HELLO one byte a second on `--slow` connections, and every 100 ms
//! opens a connection announcing a 4 GiB frame. `scripts/bench-abuse` runs it beside
//! testread-perf; it sends only to the data node's address in the config (a loopback one).

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use rndb_config::NodeId;
use rndb_transporter::frame::{self, FrameHeader};
use rndb_transporter::handshake::{Hello, SIGNAL_HELLO};

/// Abuse one data node's port for a while.
#[derive(Parser, Debug)]
#[command(
    name = "rndb-abuse",
    about = "a hostile peer for one data node (bounded in time)"
)]
struct Args {
    /// The cluster's config.ini.
    #[arg(long = "config-file")]
    config_file: PathBuf,
    /// The data node to abuse.
    #[arg(long = "ndb-nodeid", default_value_t = 1)]
    node: u16,
    /// Seconds to go on for (at most an hour).
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// Connections kept open that send nothing.
    #[arg(long, default_value_t = 256)]
    idle: usize,
    /// Connections sending a HELLO one byte a second.
    #[arg(long, default_value_t = 4)]
    slow: usize,
}

/// The longest run allowed, whatever `--seconds` says.
const SECONDS_MAX: u64 = 3600;
/// How often the abuser tops up its connections and sends the next slow byte.
const TICK: Duration = Duration::from_millis(100);

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let config = rndb_config::parse_file(&args.config_file)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("read {}", args.config_file.display()))?;
    let me = NodeId(args.node);
    let data = config
        .data_node(me)
        .with_context(|| format!("node {me} is not a data node"))?;
    let addr = rndb_transporter::connect::resolve(data, &config)?;
    anyhow::ensure!(
        addr.ip().is_loopback(),
        "rndb-abuse sends only to a loopback address, not {addr}"
    );
    // Any API slot: the slow HELLO never completes, so it never takes the slot.
    let from = config
        .api_slots
        .last()
        .map(|a| a.node_id)
        .context("the config has no API slot")?;
    let hello = Hello::for_link(&config, from, me)?;
    let mut hello_frame = Vec::new();
    let header = FrameHeader {
        signal: SIGNAL_HELLO,
        ..FrameHeader::default()
    };
    frame::encode_into(&mut hello_frame, &header, &hello.encode(), false)?;
    let stop_at = Instant::now() + Duration::from_secs(args.seconds.min(SECONDS_MAX));
    let mut idle: Vec<TcpStream> = Vec::new();
    let mut slow: Vec<(TcpStream, usize, Instant)> = Vec::new();
    let (mut opened, mut huge) = (0u64, 0u64);
    while Instant::now() < stop_at {
        idle.retain(is_open);
        while idle.len() < args.idle {
            let Some(stream) = connect(addr) else { break };
            idle.push(stream);
            opened += 1;
        }
        slow.retain_mut(|(stream, sent, last)| {
            if last.elapsed() < Duration::from_secs(1) {
                return true;
            }
            *last = Instant::now();
            let Some(byte) = hello_frame.get(*sent) else {
                return false;
            };
            *sent += 1;
            stream.write_all(&[*byte]).is_ok()
        });
        while slow.len() < args.slow {
            let Some(stream) = connect(addr) else { break };
            slow.push((stream, 0, Instant::now()));
            opened += 1;
        }
        if let Some(mut stream) = connect(addr) {
            let _ = stream.write_all(&u32::MAX.to_le_bytes());
            huge += 1;
            opened += 1;
        }
        std::thread::sleep(TICK);
    }
    println!(
        "rndb-abuse: {opened} connections opened, {huge} announced 4 GiB, over {} s",
        args.seconds
    );
    Ok(())
}

fn connect(addr: SocketAddr) -> Option<TcpStream> {
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    stream.set_nonblocking(true).ok()?;
    Some(stream)
}

/// False once the node has closed the (non-blocking) stream.
fn is_open(stream: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    match stream.peek(&mut byte) {
        Ok(0) => false,
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
    }
}
