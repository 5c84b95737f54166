//! `--workload tpcc`: for each consistency setting, a fresh load, then each level of
//! transactions in flight, then the consistency checks; figures as a table or JSON.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use comfy_table::{presets, CellAlignment, Table};
use rndb_api::Cluster;
use rndb_testread_perf::tpcc::{self, Checked, InFlight, Ledger, Level, Scale};
use serde::Serialize;

use crate::args::{Args, Transporter};
use crate::local::Shutdown;

/// The JSON document of a tpcc run (`version` as in the access report).
#[derive(Debug, Serialize)]
pub struct TpccReport {
    pub tool: &'static str,
    pub version: u32,
    pub workload: &'static str,
    pub params: TpccParams,
    pub results: Vec<TpccFigures>,
    /// One per transporter and setting: what the consistency checks found (they passed, or
    /// the run failed).
    pub checks: Vec<TpccChecked>,
    /// `--in-flight` (named in `params`).
    #[serde(skip)]
    pub mode: InFlight,
}

#[derive(Debug, Serialize)]
pub struct TpccParams {
    pub config_file: String,
    pub local: bool,
    pub warehouses: u32,
    pub items: u32,
    pub customers_per_district: u32,
    pub in_flight: Vec<u32>,
    /// How each level kept its transactions in flight (`--in-flight`): `threads` (a client
    /// thread per transaction) or `async` (a tokio task per transaction, on one thread).
    pub in_flight_mode: &'static str,
    pub duration_ms: u64,
    pub consistency: Vec<&'static str>,
    pub transporter: Vec<&'static str>,
    pub seed: u64,
}

/// One level under one setting over one transporter.
#[derive(Debug, Serialize)]
pub struct TpccFigures {
    pub transporter: &'static str,
    pub link: &'static str,
    pub consistency: &'static str,
    pub in_flight: u32,
    /// `threads` or `async`, as in the params.
    pub in_flight_mode: &'static str,
    /// New-Order and Payment transactions committed per second.
    pub tx_per_sec: f64,
    /// New-Orders per minute (TPC-C's tpmC, for this partial mix).
    pub new_orders_per_min: f64,
    pub new_orders: u64,
    pub payments: u64,
    /// Attempts rolled back by a temporary error (266 deadlock timeout, 1218, ...) and redone.
    pub temporary_errors: u64,
    /// Latency of a committed transaction (both kinds), µs.
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub new_order_p50_us: f64,
    pub new_order_p99_us: f64,
    pub payment_p50_us: f64,
    pub payment_p99_us: f64,
}

#[derive(Debug, Serialize)]
pub struct TpccChecked {
    pub transporter: &'static str,
    pub consistency: &'static str,
    #[serde(flatten)]
    pub checked: Checked,
}

fn us(h: &hdrhistogram::Histogram<u64>, q: f64) -> f64 {
    (h.value_at_quantile(q) as f64 / 1000.0 * 10.0).round() / 10.0
}

impl TpccFigures {
    fn new(
        transporter: Transporter,
        setting: tpcc::Setting,
        mode: InFlight,
        level: &Level,
    ) -> TpccFigures {
        let seconds = level.elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
        let round = |x: f64| (x * 10.0).round() / 10.0;
        TpccFigures {
            transporter: transporter.name(),
            link: transporter.name(),
            consistency: setting.name(),
            in_flight: level.in_flight,
            in_flight_mode: mode.name(),
            tx_per_sec: round((level.new_orders + level.payments) as f64 / seconds),
            new_orders_per_min: round(level.new_orders as f64 * 60.0 / seconds),
            new_orders: level.new_orders,
            payments: level.payments,
            temporary_errors: level.temporary_errors,
            p50_us: us(&level.latency_ns, 0.5),
            p90_us: us(&level.latency_ns, 0.9),
            p99_us: us(&level.latency_ns, 0.99),
            p999_us: us(&level.latency_ns, 0.999),
            new_order_p50_us: us(&level.new_order_ns, 0.5),
            new_order_p99_us: us(&level.new_order_ns, 0.99),
            payment_p50_us: us(&level.payment_ns, 0.5),
            payment_p99_us: us(&level.payment_ns, 0.99),
        }
    }
}

/// Runs every setting over one connected transporter; appends figures and checks.
pub fn run_transporter(
    args: &Args,
    cluster: &Arc<Cluster>,
    transporter: Transporter,
    seed: u64,
    shutdown: &Shutdown,
    report: &mut TpccReport,
) -> Result<()> {
    let scale = Scale {
        warehouses: args.warehouses,
        items: args.tpcc_items,
        customers_per_district: args.tpcc_customers,
    };
    let mode = args.in_flight;
    for consistency in &args.consistency {
        shutdown.check()?;
        let setting = consistency.setting();
        eprintln!(
            "testread-perf: tpcc: loading {} warehouse(s) for {} over {}",
            scale.warehouses,
            setting.name(),
            transporter.name()
        );
        let started = std::time::Instant::now();
        let tables = tpcc::create_and_load(cluster, scale, setting.read_backup())
            .context("load the tpcc tables")?;
        eprintln!("testread-perf: tpcc: loaded in {:.2?}", started.elapsed());
        let mut ledger = Ledger::default();
        let stop = shutdown.clone();
        let run = tpcc::Run {
            cluster: Arc::clone(cluster),
            tables: tables.clone(),
            scale,
            setting,
            duration: Duration::from_millis(args.duration_ms),
            seed,
            stop: Arc::new(move || stop.requested()),
            history_ids: Arc::new(AtomicU64::new(0)),
        };
        for &in_flight in &args.concurrency {
            shutdown.check()?;
            let level = run
                .level(in_flight, mode, &mut ledger)
                .with_context(|| format!("tpcc {} at {in_flight} in flight", setting.name()))?;
            shutdown.check()?;
            eprintln!(
                "testread-perf: tpcc {} {in_flight} in flight ({}): {} New-Orders, {} Payments, \
                 {} retried",
                setting.name(),
                mode.name(),
                level.new_orders,
                level.payments,
                level.temporary_errors
            );
            report
                .results
                .push(TpccFigures::new(transporter, setting, mode, &level));
        }
        let checked = tpcc::check(cluster, &tables, scale, &ledger)
            .with_context(|| format!("tpcc consistency checks after {}", setting.name()))?;
        eprintln!(
            "testread-perf: tpcc {}: consistency checks passed ({} orders, {} order lines, {} \
             payments)",
            setting.name(),
            checked.orders,
            checked.order_lines,
            checked.payments
        );
        report.checks.push(TpccChecked {
            transporter: transporter.name(),
            consistency: setting.name(),
            checked,
        });
    }
    Ok(())
}

impl TpccReport {
    pub fn new(args: &Args, config_file: String, seed: u64) -> TpccReport {
        TpccReport {
            tool: "testread-perf",
            version: 1,
            workload: "tpcc",
            params: TpccParams {
                config_file,
                local: args.local,
                warehouses: args.warehouses,
                items: args.tpcc_items,
                customers_per_district: args.tpcc_customers,
                in_flight: args.concurrency.clone(),
                in_flight_mode: args.in_flight.name(),
                duration_ms: args.duration_ms,
                consistency: args
                    .consistency
                    .iter()
                    .map(|c| c.setting().name())
                    .collect(),
                transporter: args.transporter.iter().map(|t| t.name()).collect(),
                seed,
            },
            results: Vec::new(),
            checks: Vec::new(),
            mode: args.in_flight,
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a report always serializes")
    }

    /// One row per transporter, setting and level.
    pub fn to_table(&self) -> String {
        let p = &self.params;
        let mut out = format!(
            "testread-perf tpcc (New-Order and Payment, 45:43): {} warehouse(s), {} items, {} \
             customers per district, {} ms per level, in flight as {}, seed {}, config {}\n",
            p.warehouses,
            p.items,
            p.customers_per_district,
            p.duration_ms,
            match self.mode {
                InFlight::Threads => "threads (a client thread per transaction)",
                InFlight::Async => "async (a tokio task per transaction, on one thread)",
            },
            p.seed,
            p.config_file
        );
        let mut table = Table::new();
        table.load_preset(presets::UTF8_FULL_CONDENSED);
        table.set_header(vec![
            "link",
            "consistency",
            "in flight",
            "tx/s",
            "New-Orders/min",
            "retried",
            "p50 µs",
            "p90 µs",
            "p99 µs",
            "p99.9 µs",
            "New-Order p50/p99 µs",
            "Payment p50/p99 µs",
        ]);
        for f in &self.results {
            table.add_row(vec![
                f.link.to_uppercase(),
                f.consistency.to_string(),
                f.in_flight.to_string(),
                format!("{:.0}", f.tx_per_sec),
                format!("{:.0}", f.new_orders_per_min),
                f.temporary_errors.to_string(),
                format!("{:.0}", f.p50_us),
                format!("{:.0}", f.p90_us),
                format!("{:.0}", f.p99_us),
                format!("{:.0}", f.p999_us),
                format!("{:.0} / {:.0}", f.new_order_p50_us, f.new_order_p99_us),
                format!("{:.0} / {:.0}", f.payment_p50_us, f.payment_p99_us),
            ]);
        }
        for column in table.column_iter_mut().skip(2) {
            column.set_cell_alignment(CellAlignment::Right);
        }
        out.push_str(&table.to_string());
        for c in &self.checks {
            out.push_str(&format!(
                "\n{} {}: consistency checks passed: {} orders, {} order lines, {} payments",
                c.transporter.to_uppercase(),
                c.consistency,
                c.checked.orders,
                c.checked.order_lines,
                c.checked.payments
            ));
        }
        out
    }
}
