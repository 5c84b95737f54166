//! What an interpreted update saves (`scripts/bench-counters` runs it on a local cluster): one
//! thread increments counters for `SECONDS` each way, alternated, `ROUNDS` times: by an
//! interpreted update (one round trip: the data node adds under the row's lock), by a locked
//! read and then an update (two round trips: NDB's read-modify-write), and, as the baseline,
//! by a plain update that sets a value (one round trip, nothing read). Prints per round the
//! increments per second of each and the ratios. Every counter must end at the number of
//! increments acknowledged; a run where one does not fails.
//!
//! ```text
//! cargo run --release --example counter_bench -- CONFIG [SECONDS] [ROUNDS]
//! ```

use std::time::{Duration, Instant};

use rndb_api::{
    Cluster, ColumnDef, ColumnType, ConnectOptions, ExecType, InterpretedCode, LockMode, Table,
    TableDef, Value,
};

const KEYS: u32 = 100;

#[derive(Clone, Copy)]
enum Way {
    Interpreted,
    ReadThenUpdate,
    SetValue,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let config = args
        .next()
        .ok_or("usage: counter_bench CONFIG [SECONDS] [ROUNDS]")?;
    let seconds: u64 = args.next().map_or(Ok(3), |s| s.parse())?;
    let rounds: u32 = args.next().map_or(Ok(3), |s| s.parse())?;
    let cluster = Cluster::connect(&config, ConnectOptions::default())?;
    let _ = cluster.drop_table("counter_bench");
    let table = cluster.create_table(&TableDef::new(
        "counter_bench",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("n", ColumnType::Int64),
        ],
    ))?;
    let mut t = cluster.start_transaction()?;
    for id in 0..KEYS {
        t.insert(&table, &[Value::UInt32(id), Value::Int64(0)])?;
    }
    t.execute(ExecType::Commit)?;
    let mut code = InterpretedCode::new(&table);
    code.add_value(1, 1)?;
    let run = Duration::from_secs(seconds);
    // Increments acknowledged per counter, by the two ways that increment.
    let mut expected = vec![0i64; KEYS as usize];
    println!("| round | interpreted /s | read then update /s | set a value /s | interpreted ÷ read then update | interpreted ÷ set a value |");
    println!("|---|---|---|---|---|---|");
    for round in 1..=rounds {
        let interpreted = increment_for(
            &cluster,
            &table,
            &code,
            Way::Interpreted,
            run,
            &mut expected,
        )?;
        let read_update = increment_for(
            &cluster,
            &table,
            &code,
            Way::ReadThenUpdate,
            run,
            &mut expected,
        )?;
        // The baseline sets each counter to what it holds, so the counts stay exact.
        let set = increment_for(&cluster, &table, &code, Way::SetValue, run, &mut expected)?;
        println!(
            "| {round} | {interpreted:.0} | {read_update:.0} | {set:.0} | {:.2} | {:.2} |",
            interpreted / read_update,
            interpreted / set
        );
    }
    for id in 0..KEYS {
        let mut t = cluster.start_transaction()?;
        let op = t.read(&table, &[Value::UInt32(id)], LockMode::CommittedRead)?;
        t.execute(ExecType::Commit)?;
        let found = t.row(op).map(|row| row[1].clone());
        let want = Value::Int64(expected[id as usize]);
        if found.as_ref() != Some(&want) {
            return Err(format!(
                "counter {id}: {found:?}, but {want:?} increments were acknowledged"
            )
            .into());
        }
    }
    println!();
    println!(
        "Every counter holds the increments acknowledged ({} in all).",
        expected.iter().sum::<i64>()
    );
    Ok(())
}

/// Increments counters one transaction at a time, `way`, for `run`; returns transactions per
/// second.
fn increment_for(
    cluster: &Cluster,
    table: &Table,
    code: &InterpretedCode,
    way: Way,
    run: Duration,
    expected: &mut [i64],
) -> Result<f64, Box<dyn std::error::Error>> {
    let began = Instant::now();
    let mut done = 0u64;
    while began.elapsed() < run {
        let id = (done % u64::from(KEYS)) as u32;
        let key = [Value::UInt32(id)];
        let mut t = cluster.start_transaction()?;
        match way {
            Way::Interpreted => {
                t.interpreted_update(table, &key, &[], code)?;
            }
            Way::ReadThenUpdate => {
                let op = t.read(table, &key, LockMode::Exclusive)?;
                t.execute(ExecType::NoCommit)?;
                let Some(Value::Int64(n)) = t.row(op).map(|row| row[1].clone()) else {
                    return Err(format!("counter {id} has no Int64 value").into());
                };
                t.update(table, &key, &[(1, Value::Int64(n + 1))])?;
            }
            Way::SetValue => {
                t.update(table, &key, &[(1, Value::Int64(expected[id as usize]))])?;
            }
        }
        t.execute(ExecType::Commit)?;
        if !matches!(way, Way::SetValue) {
            expected[id as usize] += 1;
        }
        done += 1;
    }
    Ok(done as f64 / began.elapsed().as_secs_f64())
}
