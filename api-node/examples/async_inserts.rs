//! One thread, many transactions in flight: inserts rows each in its own transaction with the
//! asynchronous executor (NDB's executeAsynchPrepare / sendPollNdb), keeping up to 256 in
//! flight, and reports how many committed per second.
//!
//! ```text
//! cargo run --release --bin ndbd -- --config-file config/examples/single.ini --ndb-nodeid 1 &
//! cargo run --release --example async_inserts -- config/examples/single.ini
//! ```

use std::time::{Duration, Instant};

use rndb_api::{
    AbortOption, Cluster, ColumnDef, ColumnType, ConnectOptions, ExecType, TableDef, Value,
};

/// Rows inserted, one transaction each.
const ROWS: u32 = 100_000;
/// Transactions kept in flight.
const IN_FLIGHT: usize = 256;

fn main() -> Result<(), rndb_api::Error> {
    let config = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "config/examples/single.ini".into());
    let cluster = Cluster::connect(&config, ConnectOptions::default())?;
    let _ = cluster.drop_table("async_inserts");
    let table = cluster.create_table(&TableDef::new(
        "async_inserts",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("value", ColumnType::UInt64),
        ],
    ))?;

    let mut executor = cluster.async_executor();
    let in_flight = IN_FLIGHT.min(executor.limit());
    let started = Instant::now();
    let (mut next, mut committed, mut failed) = (0u32, 0u64, 0u64);
    loop {
        // Keep `in_flight` transactions going: prepare new ones as others complete.
        while next < ROWS && executor.len() < in_flight {
            let mut tx = cluster.start_transaction()?;
            tx.insert(
                &table,
                &[Value::UInt32(next), Value::UInt64(u64::from(next) * 7)],
            )?;
            executor.prepare(
                tx,
                ExecType::Commit,
                AbortOption::AbortOnError,
                u64::from(next),
            )?;
            next += 1;
        }
        if executor.is_empty() {
            break;
        }
        // Send everything prepared (one flush per data node) and collect what completed.
        for done in executor.send_poll(1, Duration::from_secs(10)) {
            match done.result {
                Ok(()) => committed += 1,
                Err(e) => {
                    failed += 1;
                    eprintln!("row {}: {e}", done.tag);
                }
            }
        }
    }
    let elapsed = started.elapsed();
    println!(
        "{committed} transactions committed, {failed} failed, in {elapsed:.2?}: {:.0} per second",
        committed as f64 / elapsed.as_secs_f64()
    );
    Ok(())
}
