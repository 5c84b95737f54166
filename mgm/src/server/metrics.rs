//! ndb_mgmd's Prometheus/OpenMetrics endpoint: `GET /metrics` on `--metrics-port` answers every
//! connected data node's figures from the reports the server already receives (no request to
//! the data nodes), one time series per node (`node_id` label), in the OpenMetrics text format
//! written by the `prometheus-client` crate.
//!
//! The HTTP side is deliberately small: one thread, one request per connection, a bounded
//! request head ([`REQUEST_HEAD_BYTES_MAX`]) read within [`REQUEST_TIMEOUT`], `Connection:
//! close`. Scrapers ask once a second or less; nothing else is served.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::Server;
use crate::node_report::{FigureKind, FIGURES};

/// The most bytes of a request head read; a longer head is refused.
pub const REQUEST_HEAD_BYTES_MAX: usize = 8192;
/// How long a client may take to send its request and read the answer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// OpenMetrics' content type.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type Labels = Vec<(String, String)>;

/// The OpenMetrics text of `figures` (per data node id, by figure name).
pub fn encode(figures: &BTreeMap<u16, BTreeMap<&'static str, u64>>) -> String {
    let mut registry = Registry::with_prefix("ndb");
    for figure in FIGURES {
        let labels_of = |id: u16| vec![("node_id".to_string(), id.to_string())];
        let values = figures
            .iter()
            .filter_map(|(&id, f)| Some((id, *f.get(figure.name)?)));
        match figure.kind {
            FigureKind::Gauge => {
                let family = Family::<Labels, Gauge<u64, AtomicU64>>::default();
                for (id, value) in values {
                    family.get_or_create(&labels_of(id)).set(value);
                }
                registry.register(figure.name, figure.help, family);
            }
            FigureKind::Counter => {
                let family = Family::<Labels, Counter<u64, AtomicU64>>::default();
                for (id, value) in values {
                    family.get_or_create(&labels_of(id)).inc_by(value);
                }
                registry.register(figure.name, figure.help, family);
            }
        }
    }
    let mut text = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut text, &registry);
    text
}

/// Serves `listener` until the process exits (on its own thread).
pub fn spawn(server: Arc<Server>, listener: TcpListener) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("mgm-metrics".into())
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                if let Err(e) = answer(&server, stream) {
                    tracing::debug!("metrics request: {e}");
                }
            }
        })
        .map(|_| ())
}

fn answer(server: &Server, mut stream: TcpStream) -> std::io::Result<()> {
    stream.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    stream.set_write_timeout(Some(REQUEST_TIMEOUT))?;
    let head = read_head(&mut stream)?;
    let request_line = head.lines().next().unwrap_or("");
    let mut parts = request_line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics") => ("200 OK", CONTENT_TYPE, encode(&server.figures())),
        ("GET", _) => (
            "404 Not Found",
            "text/plain",
            "ndb_mgmd serves /metrics only\n".to_string(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "ndb_mgmd's metrics endpoint answers GET only\n".to_string(),
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes())
}

/// Reads until the blank line that ends an HTTP request head, at most
/// [`REQUEST_HEAD_BYTES_MAX`] bytes.
fn read_head(stream: &mut TcpStream) -> std::io::Result<String> {
    let mut head = Vec::new();
    let mut buffer = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        if head.len() >= REQUEST_HEAD_BYTES_MAX {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("request head over {REQUEST_HEAD_BYTES_MAX} bytes"),
            ));
        }
        let read = stream.read(&mut buffer)?;
        if read == 0 {
            break;
        }
        head.extend_from_slice(&buffer[..read]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_encode_as_openmetrics_with_a_series_per_node() {
        let mut figures = BTreeMap::new();
        figures.insert(
            1,
            BTreeMap::from([("frames_sent", 42), ("transactions", 3)]),
        );
        figures.insert(2, BTreeMap::from([("frames_sent", 7)]));
        let text = encode(&figures);
        for line in [
            "# TYPE ndb_frames_sent counter",
            "ndb_frames_sent_total{node_id=\"1\"} 42",
            "ndb_frames_sent_total{node_id=\"2\"} 7",
            "# TYPE ndb_transactions gauge",
            "ndb_transactions{node_id=\"1\"} 3",
            "# EOF",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in:\n{text}");
        }
        assert!(!text.contains("ndb_transactions{node_id=\"2\"}"), "{text}");
    }
}
