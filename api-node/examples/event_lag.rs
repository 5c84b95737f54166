//! What a subscription costs and how late its events come (`scripts/bench-events` runs it on
//! a local cluster): one thread commits single-row updates for `SECONDS`, first with no
//! subscriber (the baseline), then while another thread consumes the table's events; prints,
//! per round, the commits per second of each phase and their ratio, and the lag from each
//! commit's acknowledgement to its event being handed out (p50, p99, max). Every committed
//! value must arrive once; a run where one does not fails.
//!
//! ```text
//! cargo run --release --example event_lag -- CONFIG [SECONDS] [ROUNDS]
//! ```

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rndb_api::{
    Cluster, ColumnDef, ColumnType, ConnectOptions, EventType, ExecType, Table, TableDef, Value,
};

const KEYS: u32 = 100;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let config = args
        .next()
        .ok_or("usage: event_lag CONFIG [SECONDS] [ROUNDS]")?;
    let seconds: u64 = args.next().map_or(Ok(3), |s| s.parse())?;
    let rounds: u32 = args.next().map_or(Ok(3), |s| s.parse())?;
    let cluster = Cluster::connect(&config, ConnectOptions::default())?;
    let _ = cluster.drop_table("event_lag");
    let table = cluster.create_table(&TableDef::new(
        "event_lag",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("v", ColumnType::Int64),
        ],
    ))?;
    let mut t = cluster.start_transaction()?;
    for id in 0..KEYS {
        t.insert(&table, &[Value::UInt32(id), Value::Int64(0)])?;
    }
    t.execute(ExecType::Commit)?;
    let run = Duration::from_secs(seconds);
    let mut next = 1i64;
    println!("| round | commits/s alone | commits/s subscribed | ratio | lag p50 ms | lag p99 ms | lag max ms | events |");
    println!("|---|---|---|---|---|---|---|---|");
    for round in 1..=rounds {
        let alone = write_for(&cluster, &table, run, &mut next, None)?;
        let acked = Mutex::new(BTreeMap::new());
        let stop = AtomicBool::new(false);
        let mut op = cluster.create_event_operation(&table)?;
        let (subscribed, seen) = std::thread::scope(|scope| {
            let consumer = scope.spawn(|| {
                let mut seen: BTreeMap<i64, Instant> = BTreeMap::new();
                let mut drained_at: Option<Instant> = None;
                loop {
                    if op.poll_events(Duration::from_millis(20))?.is_some() {
                        while let Some(e) = op.next_event() {
                            if e.event_type != EventType::Update {
                                return Err(format!("unexpected event {e:?}").into());
                            }
                            if let Some([_, Value::Int64(v)]) = e.values.as_deref() {
                                if seen.insert(*v, Instant::now()).is_some() {
                                    return Err(format!("value {v} handed out twice").into());
                                }
                            }
                        }
                    }
                    if stop.load(Ordering::Relaxed) {
                        let wanted = acked.lock().unwrap().len();
                        if seen.len() >= wanted {
                            return Ok(seen);
                        }
                        let since = *drained_at.get_or_insert_with(Instant::now);
                        if since.elapsed() > Duration::from_secs(30) {
                            return Err(format!("{} of {wanted} events in 30 s", seen.len()).into());
                        }
                    }
                }
            });
            let rate = write_for(&cluster, &table, run, &mut next, Some(&acked));
            stop.store(true, Ordering::Relaxed);
            let seen: Result<BTreeMap<i64, Instant>, Box<dyn std::error::Error + Send + Sync>> =
                consumer.join().expect("consumer");
            (rate, seen)
        });
        let subscribed = subscribed?;
        let seen = seen.map_err(|e| e.to_string())?;
        let acked = acked.into_inner().unwrap();
        let mut lags: Vec<f64> = Vec::with_capacity(acked.len());
        for (v, at) in &acked {
            let Some(handed) = seen.get(v) else {
                return Err(format!("committed value {v} never handed out").into());
            };
            lags.push(handed.saturating_duration_since(*at).as_secs_f64() * 1000.0);
        }
        lags.sort_by(f64::total_cmp);
        let pick = |q: f64| lags[((lags.len() - 1) as f64 * q) as usize];
        println!(
            "| {round} | {alone:.0} | {subscribed:.0} | {:.2} | {:.1} | {:.1} | {:.1} | {} |",
            subscribed / alone,
            pick(0.5),
            pick(0.99),
            pick(1.0),
            seen.len()
        );
    }
    Ok(())
}

/// Commits single-row updates, one at a time, for `run`; records each acknowledged value's
/// time in `acked`. Returns commits per second.
fn write_for(
    cluster: &Cluster,
    table: &Table,
    run: Duration,
    next: &mut i64,
    acked: Option<&Mutex<BTreeMap<i64, Instant>>>,
) -> Result<f64, rndb_api::Error> {
    let began = Instant::now();
    let mut commits = 0u64;
    while began.elapsed() < run {
        let v = *next;
        *next += 1;
        let key = (v as u32) % KEYS;
        let mut t = cluster.start_transaction()?;
        t.update(table, &[Value::UInt32(key)], &[(1, Value::Int64(v))])?;
        t.execute(ExecType::Commit)?;
        if let Some(acked) = acked {
            acked.lock().unwrap().insert(v, Instant::now());
        }
        commits += 1;
    }
    Ok(commits as f64 / began.elapsed().as_secs_f64())
}
