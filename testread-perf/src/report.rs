//! Turning measurements into figures, and printing them as a table or as one JSON document.

use comfy_table::{presets, CellAlignment, Table};
use serde::Serialize;

use crate::args::{Access, Args, Transporter};
use crate::bench::Measured;

/// The JSON document `--format json` prints. `version` changes when a field changes meaning or
/// goes away; new fields may appear without a version change.
#[derive(Debug, Serialize)]
pub struct Report {
    pub tool: &'static str,
    pub version: u32,
    pub params: Params,
    pub results: Vec<Figures>,
    /// The seed's bytes for one single-row read, to set beside each result's `wire`.
    pub seed_single_row_read_bytes: SeedBytes,
}

/// The replication-middleware thesis's bytes for one single-row read of TPC-C's customer table.
#[derive(Debug, Serialize)]
pub struct SeedBytes {
    pub mysql_5_1: u32,
    pub passthru: u32,
}

impl SeedBytes {
    pub fn published() -> SeedBytes {
        let (mysql_5_1, passthru) = SEED_SINGLE_ROW_READ_BYTES;
        SeedBytes {
            mysql_5_1,
            passthru,
        }
    }
}

/// The run's parameters, as given or defaulted.
#[derive(Debug, Serialize)]
pub struct Params {
    pub config_file: String,
    pub local: bool,
    pub size: u32,
    pub range: u32,
    pub iterations: u32,
    pub access: Vec<&'static str>,
    pub transporter: Vec<&'static str>,
    pub lock: &'static str,
    pub transaction_per_row: bool,
    /// `--primary-node`: only rows whose primary replica is on this data node were measured.
    pub primary_node: Option<u16>,
    /// How the concurrency sweep keeps transactions in flight (`threads` or `async`).
    pub in_flight: &'static str,
    /// Fraction of the sweep's transactions that update their row.
    pub write_ratio: f64,
    /// The sweep's commits waited for their global checkpoint (`--durable-commit`).
    pub durable_commit: bool,
    pub spin_us: Option<u32>,
    /// Bytes of column data in each row (`--row-bytes`).
    pub row_bytes: u32,
    pub seed: u64,
}

impl Params {
    pub fn new(args: &Args, config_file: String, seed: u64) -> Params {
        Params {
            config_file,
            local: args.local,
            size: args.size,
            range: args.range,
            iterations: args.iterations,
            access: args.access.iter().map(|a| a.name()).collect(),
            transporter: args.transporter.iter().map(|t| t.name()).collect(),
            lock: args.lock.name(),
            transaction_per_row: args.transaction_per_row,
            primary_node: args.primary_node,
            in_flight: args.in_flight.name(),
            write_ratio: args.write_ratio,
            durable_commit: args.durable_commit,
            spin_us: args.spin_us,
            row_bytes: args.row_bytes,
            seed,
        }
    }
}

/// The figures for one access type over one transporter.
#[derive(Debug, Serialize)]
pub struct Figures {
    /// The transporter asked for (`--transporter`).
    pub transporter: &'static str,
    /// The transporter the API's link to its first data node really is: `tcp` under `uring`
    /// where the kernel refused io_uring and the link fell back to TCP. (A data node's end of
    /// the link falls back on its own and logs it.)
    pub link: &'static str,
    pub access: &'static str,
    pub rows: u64,
    pub executes: u64,
    pub us_per_row: f64,
    pub rows_per_sec: f64,
    pub p50_us: f64,
    /// The 90th percentile: where a latency's spread shows before its outliers do.
    pub p90_us: f64,
    pub p99_us: f64,
    /// The 99.9th percentile (one execute, or one transaction of a sweep).
    pub p999_us: f64,
    /// Table rows per second that the measured scans covered, for access types that scan the
    /// whole table to return fewer rows (scan_filter): the table size times the scans, over the
    /// time. Computed here from what the client asked, not counted by the data node; absent
    /// for other access types.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scanned_table_rows_per_sec: Option<f64>,
    /// The same figure under its version-1 name, which claimed that the data node counted it;
    /// kept until the report's version changes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub examined_rows_per_sec: Option<f64>,
    /// Bytes on the wire per row (per ping for `ping`), counted by the API's links as they
    /// encode and decode frames (header, payload, CRC-32 trailer): what the API sent and
    /// received. Absent for sweep results.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wire: Option<WirePerRow>,
    /// Sweep results only: client threads, each with one transaction in flight.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// Sweep results only: transactions that failed with a temporary error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temporary_errors: Option<u64>,
}

/// Frames and bytes per row over the API's links during one access type's timed measurements.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct WirePerRow {
    /// Frames the API sent, per row.
    pub frames_sent: f64,
    /// Frame bytes the API sent (requests), per row.
    pub bytes_sent: f64,
    /// Frames the API received, per row.
    pub frames_received: f64,
    /// Frame bytes the API received (answers), per row.
    pub bytes_received: f64,
    /// What the kernel counted on the links' TCP sockets (`TCP_INFO`: bytes acknowledged by
    /// the peer, bytes received), per row; for SHM the socket carries only wake-ups. Absent
    /// when a socket gave no count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_bytes_sent: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_bytes_received: Option<f64>,
    /// TCP segments both ways per row (each adds 52 bytes of IPv4 and TCP headers on the wire).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_segments: Option<f64>,
}

impl WirePerRow {
    pub fn new(traffic: &rndb_api::LinkTraffic, rows: u64) -> Option<WirePerRow> {
        if rows == 0 {
            return None;
        }
        let per_row = |n: u64| round3(n as f64 / rows as f64);
        let kernel = traffic.kernel_tcp;
        Some(WirePerRow {
            frames_sent: per_row(traffic.frames_sent),
            bytes_sent: per_row(traffic.bytes_sent),
            frames_received: per_row(traffic.frames_received),
            bytes_received: per_row(traffic.bytes_received),
            kernel_bytes_sent: kernel.map(|k| per_row(k.bytes_acked)),
            kernel_bytes_received: kernel.map(|k| per_row(k.bytes_received)),
            kernel_segments: kernel
                .map(|k| per_row(u64::from(k.segments_out) + u64::from(k.segments_in))),
        })
    }
}

/// The seed's bytes on the wire for one single-row read of TPC-C's customer table, request and
/// result (the replication-middleware thesis, section 6: a byte-counting proxy between client
/// and database): (MySQL 5.1's protocol, the thesis's PassThrough protocol).
pub const SEED_SINGLE_ROW_READ_BYTES: (u32, u32) = (1951, 1002);

/// NDB's published testReadPerf figures (2005; 2 data nodes, dual AMD MP1900+, 20 records per
/// access), in µs per row: (TCP/IP sockets, SCI sockets).
pub fn ndb_2005_us_per_row(access: &str) -> Option<(f64, f64)> {
    match access {
        "serial_pk" => Some((400.0, 160.0)),
        "batch_pk" => Some((28.0, 22.0)),
        "serial_unique" => Some((500.0, 250.0)),
        "batch_unique" => Some((70.0, 36.0)),
        "index_eq" => Some((1250.0, 750.0)),
        "index_range" => Some((24.0, 12.0)),
        _ => None,
    }
}

impl Figures {
    pub fn new(transporter: Transporter, access: Access, measured: &Measured) -> Figures {
        let seconds = measured.elapsed.as_secs_f64();
        let rows = measured.rows as f64;
        let quantile_us = |q: f64| measured.execute_ns.value_at_quantile(q) as f64 / 1000.0;
        let scanned = (measured.scanned_table_rows > 0 && seconds > 0.0)
            .then(|| round3(measured.scanned_table_rows as f64 / seconds));
        Figures {
            transporter: transporter.name(),
            link: transporter.name(),
            access: access.name(),
            rows: measured.rows,
            executes: measured.executes,
            us_per_row: round3(if rows > 0.0 {
                seconds * 1e6 / rows
            } else {
                0.0
            }),
            rows_per_sec: round3(if seconds > 0.0 { rows / seconds } else { 0.0 }),
            p50_us: round3(quantile_us(0.50)),
            p90_us: round3(quantile_us(0.90)),
            p99_us: round3(quantile_us(0.99)),
            p999_us: round3(quantile_us(0.999)),
            scanned_table_rows_per_sec: scanned,
            examined_rows_per_sec: scanned,
            wire: WirePerRow::new(&measured.traffic, measured.rows),
            concurrency: None,
            temporary_errors: None,
        }
    }

    /// The figures of one sweep level: a row is a committed transaction.
    pub fn from_level(transporter: Transporter, level: &crate::sweep::Level) -> Figures {
        let seconds = level.elapsed.as_secs_f64();
        let quantile_us = |q: f64| level.latency_ns.value_at_quantile(q) as f64 / 1000.0;
        let rows = level.transactions as f64;
        Figures {
            transporter: transporter.name(),
            link: transporter.name(),
            access: "serial_pk",
            rows: level.transactions,
            executes: level.transactions,
            us_per_row: round3(if rows > 0.0 {
                seconds * 1e6 / rows
            } else {
                0.0
            }),
            rows_per_sec: round3(if seconds > 0.0 { rows / seconds } else { 0.0 }),
            p50_us: round3(quantile_us(0.50)),
            p90_us: round3(quantile_us(0.90)),
            p99_us: round3(quantile_us(0.99)),
            p999_us: round3(quantile_us(0.999)),
            scanned_table_rows_per_sec: None,
            examined_rows_per_sec: None,
            wire: None,
            concurrency: Some(level.concurrency),
            temporary_errors: Some(level.temporary_errors),
        }
    }
}

/// Rounds to three decimals: nanosecond resolution for µs figures, enough for rates.
fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

impl Report {
    /// The link kind a transporter's results really ran over, when it is not the one asked
    /// for (io_uring that fell back to TCP).
    fn fell_back_to(&self, transporter: &str) -> Option<&'static str> {
        self.results
            .iter()
            .find(|f| f.transporter == transporter && f.link != transporter)
            .map(|f| f.link)
    }

    /// A transporter's column heading: `URING`, or `URING→TCP` when its links fell back.
    fn column_label(&self, transporter: &str) -> String {
        match self.fell_back_to(transporter) {
            Some(link) => format!("{}→{}", transporter.to_uppercase(), link.to_uppercase()),
            None => transporter.to_uppercase(),
        }
    }

    /// The report as one line of JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a report always serializes")
    }

    /// The sweep as text: one row per concurrency level, one column group (transactions/s,
    /// p50, p99, p99.9) per transporter.
    pub fn to_sweep_table(&self) -> String {
        let p = &self.params;
        let mut out = format!(
            "testread-perf sweep ({} in flight): {} rows, lock {}, write ratio {}{}, seed {}, \
             config {}\n",
            p.in_flight,
            p.size,
            p.lock,
            p.write_ratio,
            if p.durable_commit {
                " (durable commits)"
            } else {
                ""
            },
            p.seed,
            p.config_file
        );
        let mut table = Table::new();
        table.load_preset(presets::UTF8_FULL_CONDENSED);
        let mut header = vec!["in flight".to_string()];
        for transporter in &p.transporter {
            let t = self.column_label(transporter);
            header.extend([
                format!("{t} tx/s"),
                format!("{t} p50 µs"),
                format!("{t} p99 µs"),
                format!("{t} p99.9 µs"),
            ]);
        }
        table.set_header(header);
        let mut levels: Vec<u32> = Vec::new();
        for level in self.results.iter().filter_map(|f| f.concurrency) {
            if !levels.contains(&level) {
                levels.push(level);
            }
        }
        for level in levels {
            let mut cells = vec![level.to_string()];
            for transporter in &p.transporter {
                let found = self
                    .results
                    .iter()
                    .find(|f| f.concurrency == Some(level) && f.transporter == *transporter);
                cells.extend(match found {
                    Some(f) => [
                        format!("{:.0}", f.rows_per_sec),
                        format!("{:.1}", f.p50_us),
                        format!("{:.1}", f.p99_us),
                        format!("{:.1}", f.p999_us),
                    ],
                    None => ["-", "-", "-", "-"].map(String::from),
                });
            }
            table.add_row(cells);
        }
        for column in table.column_iter_mut().skip(1) {
            column.set_cell_alignment(CellAlignment::Right);
        }
        out.push_str(&table.to_string());
        out
    }

    /// The report as text: a parameter line, then a table with one row per access type and
    /// one column group (µs/row, rows/s, p50, p99) per transporter.
    pub fn to_table(&self) -> String {
        let p = &self.params;
        let mut out = format!(
            "testread-perf: {} rows, range {}, {} iterations, lock {}{}{}, seed {}, config {}\n",
            p.size,
            p.range,
            p.iterations,
            p.lock,
            if p.transaction_per_row {
                ", a transaction per row"
            } else {
                ""
            },
            match p.primary_node {
                Some(node) => format!(", rows of node {node} only"),
                None => String::new(),
            },
            p.seed,
            p.config_file
        );
        let mut table = Table::new();
        table.load_preset(presets::UTF8_FULL_CONDENSED);
        let mut header = vec!["access".to_string()];
        for transporter in &p.transporter {
            let t = self.column_label(transporter);
            header.extend([
                format!("{t} µs/row"),
                format!("{t} rows/s"),
                format!("{t} p50 µs"),
                format!("{t} p99 µs"),
            ]);
        }
        header.extend([
            "NDB 2005 TCP µs/row".to_string(),
            "NDB 2005 SCI µs/row".to_string(),
        ]);
        table.set_header(header);
        for access in &p.access {
            let mut cells = vec![access.to_string()];
            for transporter in &p.transporter {
                let found = self
                    .results
                    .iter()
                    .find(|f| f.access == *access && f.transporter == *transporter);
                cells.extend(match found {
                    Some(f) => [
                        format!("{:.2}", f.us_per_row),
                        format!("{:.0}", f.rows_per_sec),
                        format!("{:.1}", f.p50_us),
                        format!("{:.1}", f.p99_us),
                    ],
                    None => ["-", "-", "-", "-"].map(String::from),
                });
            }
            cells.extend(match ndb_2005_us_per_row(access) {
                Some((tcp, sci)) => [format!("{tcp:.0}"), format!("{sci:.0}")],
                None => ["-", "-"].map(String::from),
            });
            table.add_row(cells);
        }
        for column in table.column_iter_mut().skip(1) {
            column.set_cell_alignment(CellAlignment::Right);
        }
        out.push_str(&table.to_string());
        for f in &self.results {
            if let Some(rate) = f.scanned_table_rows_per_sec {
                out.push_str(&format!(
                    "\n{} over {}: each scan covers the whole table ({} rows), {rate:.0} table \
                     rows/s (the table size times the scans, computed here; the data node does \
                     not count them)",
                    f.access,
                    self.column_label(f.transporter),
                    p.size
                ));
            }
        }
        for transporter in &p.transporter {
            if let Some(link) = self.fell_back_to(transporter) {
                out.push_str(&format!(
                    "\n{}: {transporter} was asked for, but the API's links fell back to {link} \
                     (the kernel refused io_uring), so these are {link} figures",
                    self.column_label(transporter)
                ));
            }
        }
        out.push_str(
            "\nNDB 2005: NDB's published testReadPerf figures, 2 data nodes, dual AMD MP1900+, \
             20 records per access (not measured here).",
        );
        out.push_str(&self.to_wire_table());
        out
    }

    /// Bytes on the wire per row: one row per access type and transporter, the frames the API
    /// sent and received and what the kernel counted, beside the seed's single-row read.
    fn to_wire_table(&self) -> String {
        let with_wire: Vec<&Figures> = self.results.iter().filter(|f| f.wire.is_some()).collect();
        if with_wire.is_empty() {
            return String::new();
        }
        let mut table = Table::new();
        table.load_preset(presets::UTF8_FULL_CONDENSED);
        table.set_header(vec![
            "access",
            "link",
            "frames out/row",
            "bytes out/row",
            "frames in/row",
            "bytes in/row",
            "frame bytes/row",
            "kernel TCP bytes out/row",
            "kernel TCP bytes in/row",
            "TCP segments/row",
        ]);
        let optional = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
        for f in with_wire {
            let Some(w) = f.wire else { continue };
            table.add_row(vec![
                f.access.to_string(),
                self.column_label(f.transporter),
                format!("{:.2}", w.frames_sent),
                format!("{:.1}", w.bytes_sent),
                format!("{:.2}", w.frames_received),
                format!("{:.1}", w.bytes_received),
                format!("{:.1}", w.bytes_sent + w.bytes_received),
                optional(w.kernel_bytes_sent),
                optional(w.kernel_bytes_received),
                optional(w.kernel_segments),
            ]);
        }
        for column in table.column_iter_mut().skip(2) {
            column.set_cell_alignment(CellAlignment::Right);
        }
        let (mysql, passthru) = SEED_SINGLE_ROW_READ_BYTES;
        format!(
            "\n\nBytes on the wire per row ({} bytes of column data per row; frames counted by \
             the API's links, header, payload and trailer; kernel: TCP_INFO of the links' \
             sockets, without IP/TCP headers):\n{table}\nSeed (replication-middleware thesis, \
             TPC-C customer row): a single-row read costs {mysql} bytes through MySQL 5.1's \
             protocol, {passthru} through the PassThrough's.",
            self.params.row_bytes
        )
    }
}

#[cfg(test)]
mod tests {
    //! The labels of the text table say no more than the client knows: a transporter whose
    //! links fell back is labelled with both kinds, and scanned table rows are said to be
    //! computed here.

    use super::*;

    fn params(transporter: Vec<&'static str>, access: Vec<&'static str>) -> Params {
        Params {
            config_file: "t.ini".into(),
            local: true,
            size: 100,
            range: 5,
            iterations: 2,
            access,
            transporter,
            lock: "read",
            transaction_per_row: false,
            primary_node: None,
            in_flight: "threads",
            write_ratio: 0.0,
            durable_commit: false,
            spin_us: None,
            row_bytes: 24,
            seed: 1,
        }
    }

    fn figures(transporter: &'static str, link: &'static str, access: &'static str) -> Figures {
        let scanned = (access == "scan_filter").then_some(1000.0);
        Figures {
            transporter,
            link,
            access,
            rows: 10,
            executes: 2,
            us_per_row: 1.0,
            rows_per_sec: 1e6,
            p50_us: 1.0,
            p90_us: 1.0,
            p99_us: 1.0,
            p999_us: 1.0,
            scanned_table_rows_per_sec: scanned,
            examined_rows_per_sec: scanned,
            wire: None,
            concurrency: None,
            temporary_errors: None,
        }
    }

    fn report(results: Vec<Figures>, transporter: Vec<&'static str>) -> Report {
        Report {
            tool: "testread-perf",
            version: 1,
            params: params(transporter, vec!["ping", "scan_filter"]),
            results,
            seed_single_row_read_bytes: SeedBytes::published(),
        }
    }

    #[test]
    fn io_uring_that_fell_back_to_tcp_is_labelled_so() {
        let results = vec![
            figures("tcp", "tcp", "ping"),
            figures("uring", "tcp", "ping"),
        ];
        let report = report(results, vec!["tcp", "uring"]);
        let table = report.to_table();
        assert!(table.contains("URING→TCP µs/row"), "{table}");
        assert!(table.contains("TCP µs/row"), "{table}");
        assert!(
            table.contains("uring was asked for, but the API's links fell back to tcp"),
            "{table}"
        );
        let json = report.to_json();
        assert!(
            json.contains(r#""transporter":"uring","link":"tcp""#),
            "{json}"
        );
    }

    #[test]
    fn io_uring_that_did_not_fall_back_keeps_its_label() {
        let report = report(vec![figures("uring", "uring", "ping")], vec!["uring"]);
        let table = report.to_table();
        assert!(
            table.contains("URING µs/row") && !table.contains('→'),
            "{table}"
        );
        assert!(!table.contains("fell back"), "{table}");
    }

    #[test]
    fn scanned_table_rows_are_said_to_be_computed_by_the_client() {
        let report = report(vec![figures("tcp", "tcp", "scan_filter")], vec!["tcp"]);
        let table = report.to_table();
        assert!(
            table.contains("1000 table rows/s (the table size times the scans, computed here"),
            "{table}"
        );
        assert!(!table.contains("the data node examined"), "{table}");
        let json = report.to_json();
        assert!(
            json.contains(r#""scanned_table_rows_per_sec":1000.0"#),
            "{json}"
        );
    }
}
