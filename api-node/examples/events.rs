//! Prints a table's committed changes as they come, epoch by epoch (NDB's event API; see
//! docs/events.md), until the table is dropped or `SECONDS` pass.
//!
//! ```text
//! cargo run --release --bin ndbd -- --config-file config/examples/single.ini --ndb-nodeid 1 &
//! cargo run --release --example quickstart -- config/examples/single.ini    # makes `quickstart`
//! cargo run --release --example events -- config/examples/single.ini quickstart 60 &
//! cargo run --release --bin ndb_delete_all -- -f config/examples/single.ini quickstart
//! ```
//!
//! The last prints each deleted row as a DELETE with its image.

use std::time::{Duration, Instant};

use rndb_api::{Cluster, ConnectOptions, EventType};

fn main() -> Result<(), rndb_api::Error> {
    let mut args = std::env::args().skip(1);
    let config = args
        .next()
        .unwrap_or_else(|| "config/examples/single.ini".into());
    let table = args.next().unwrap_or_else(|| "quickstart".into());
    let seconds: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(60);
    let cluster = Cluster::connect(&config, ConnectOptions::default())?;
    let table = cluster.get_table(&table)?;
    let mut op = cluster.create_event_operation(&table)?;
    println!("subscribed to {} for {seconds} s", table.name());
    let until = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < until {
        if op.poll_events(Duration::from_millis(500))?.is_none() {
            continue;
        }
        while let Some(event) = op.next_event() {
            let epoch = format!("{}/{}", event.epoch >> 32, event.epoch & 0xffff_ffff);
            match event.event_type {
                EventType::Insert => {
                    println!("{epoch} INSERT {:?}", event.values.unwrap_or_default())
                }
                EventType::Update => println!(
                    "{epoch} UPDATE {:?} -> {:?}",
                    event.pre_values.unwrap_or_default(),
                    event.values.unwrap_or_default()
                ),
                EventType::Delete => {
                    println!("{epoch} DELETE {:?}", event.pre_values.unwrap_or_default())
                }
                EventType::Inconsistent => println!("{epoch} INCONSISTENT: changes may be missing"),
                EventType::Drop => {
                    println!("{epoch} DROP: the table was dropped");
                    return Ok(());
                }
            }
        }
    }
    Ok(())
}
