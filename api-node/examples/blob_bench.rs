//! What BLOB values cost against a VARBINARY (`scripts/bench-blobs` runs it on a local
//! cluster): one thread reads (CommittedRead) and writes (update, committed) one row at a time
//! for `SECONDS` each, alternated, `ROUNDS` times, for a VARBINARY(8000) of 8000 bytes (the
//! baseline: one round trip a read, no parts) and BLOB values of 200 bytes (in the head),
//! 8000 bytes (four parts), 64 KiB and 1 MiB (part operations in several executes). Prints per
//! round the microseconds per operation and each one's ratio to the baseline's, and the
//! writes refused with a temporary error (1221 when the redo log's disk falls behind),
//! retried after a millisecond as an application would. Every value read must be the one
//! last written; a run where one is not fails.
//!
//! ```text
//! cargo run --release --example blob_bench -- CONFIG [SECONDS] [ROUNDS]
//! ```

use std::time::{Duration, Instant};

use rndb_api::{
    BlobSize, Cluster, ColumnDef, ColumnType, ConnectOptions, ExecType, LockMode, Table, TableDef,
    Value,
};

/// Rows per table: reads and writes go round them.
const KEYS: u32 = 8;

/// One measured kind of value: its label, its table, its length.
struct Case {
    label: &'static str,
    table: Table,
    bytes: usize,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let config = args
        .next()
        .ok_or("usage: blob_bench CONFIG [SECONDS] [ROUNDS]")?;
    let seconds: u64 = args.next().map_or(Ok(3), |s| s.parse())?;
    let rounds: u32 = args.next().map_or(Ok(3), |s| s.parse())?;
    let cluster = Cluster::connect(&config, ConnectOptions::default())?;
    let run = Duration::from_secs(seconds);
    let cases = [
        ("VARBINARY(8000), 8000 B", ColumnType::Varbinary(8000), 8000),
        ("BLOB, 200 B", ColumnType::Blob(BlobSize::Blob), 200),
        ("BLOB, 8000 B", ColumnType::Blob(BlobSize::Blob), 8000),
        (
            "MEDIUMBLOB, 64 KiB",
            ColumnType::Blob(BlobSize::Medium),
            64 << 10,
        ),
        ("LONGBLOB, 1 MiB", ColumnType::Blob(BlobSize::Long), 1 << 20),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, (label, column_type, bytes))| {
        let name = format!("blob_bench_{i}");
        let _ = cluster.drop_table(&name);
        let table = cluster.create_table(&TableDef::new(
            &name,
            vec![
                ColumnDef::key("id", ColumnType::UInt32),
                ColumnDef::new("v", column_type),
            ],
        ))?;
        let mut t = cluster.start_transaction()?;
        for id in 0..KEYS {
            t.insert(&table, &[Value::UInt32(id), value(bytes, 0)])?;
        }
        t.execute(ExecType::Commit)?;
        Ok(Case {
            label,
            table,
            bytes,
        })
    })
    .collect::<Result<Vec<Case>, Box<dyn std::error::Error>>>()?;
    // The generation each row last got written with, per case.
    let mut written = vec![vec![0u8; KEYS as usize]; cases.len()];
    println!(
        "| round | value | read µs | write µs | read ÷ baseline | write ÷ baseline | writes retried |"
    );
    println!("|---|---|---|---|---|---|---|");
    for round in 1..=rounds {
        let mut baseline = None;
        for (case, written) in cases.iter().zip(&mut written) {
            let read = read_for(&cluster, case, run, written)?;
            let (write, retried) = write_for(&cluster, case, run, written)?;
            let (read_base, write_base) = *baseline.get_or_insert((read, write));
            println!(
                "| {round} | {} | {read:.1} | {write:.1} | {:.2} | {:.2} | {retried} |",
                case.label,
                read / read_base,
                write / write_base
            );
        }
    }
    for case in &cases {
        let _ = cluster.drop_table(case.table.name());
    }
    println!();
    println!("Every value read was the one last written.");
    Ok(())
}

/// `bytes` bytes that differ from one generation to the next.
fn value(bytes: usize, generation: u8) -> Value {
    Value::Varbinary(
        (0..bytes)
            .map(|i| (i as u8).wrapping_mul(31) ^ generation)
            .collect(),
    )
}

/// Reads rows one transaction at a time for `run`, checking each; returns µs per read.
fn read_for(
    cluster: &Cluster,
    case: &Case,
    run: Duration,
    written: &[u8],
) -> Result<f64, Box<dyn std::error::Error>> {
    let began = Instant::now();
    let mut done = 0u64;
    while began.elapsed() < run || done == 0 {
        let id = (done % u64::from(KEYS)) as u32;
        let mut t = cluster.start_transaction()?;
        let op = t.read(&case.table, &[Value::UInt32(id)], LockMode::CommittedRead)?;
        t.execute(ExecType::Commit)?;
        let want = value(case.bytes, written[id as usize]);
        if t.row(op).map(|row| &row[1]) != Some(&want) {
            return Err(format!("{}: row {id} is not the value last written", case.label).into());
        }
        done += 1;
    }
    Ok(began.elapsed().as_secs_f64() * 1e6 / done as f64)
}

/// Updates rows one committed transaction at a time for `run`, each to a new generation
/// (a write refused with a temporary error is retried after a millisecond); returns µs per
/// acknowledged write and the retries.
fn write_for(
    cluster: &Cluster,
    case: &Case,
    run: Duration,
    written: &mut [u8],
) -> Result<(f64, u64), Box<dyn std::error::Error>> {
    let began = Instant::now();
    let (mut done, mut retried) = (0u64, 0u64);
    while began.elapsed() < run || done == 0 {
        let id = (done % u64::from(KEYS)) as usize;
        let generation = written[id].wrapping_add(1);
        let mut t = cluster.start_transaction()?;
        let result = t
            .update(
                &case.table,
                &[Value::UInt32(id as u32)],
                &[(1, value(case.bytes, generation))],
            )
            .and_then(|_| t.execute(ExecType::Commit));
        match result {
            Ok(()) => {
                written[id] = generation;
                done += 1;
            }
            Err(e) if e.is_temporary() => {
                retried += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok((began.elapsed().as_secs_f64() * 1e6 / done as f64, retried))
}
