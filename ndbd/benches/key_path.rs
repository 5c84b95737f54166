//! Micro benchmark: the data node's CPU cost per primary-key read, with no transporter and no
//! client: TCKEYREQ frames go straight into the kernel (TC → LQH → ACC/TUP → TC) and the
//! answers into an outbox that encodes them and throws them away. A batch reads `BATCH`
//! consecutive keys with Read locks in one execute (NoCommit), then the transaction rolls back,
//! as testread-perf's `batch_pk` does. Small tables stay in the cache; the large one shows what
//! the cache misses of the hash index and the rows add.
//!
//! A second measurement makes the reads serial, as testread-perf's `serial_pk` does: one read per
//! execute (its TCKEYREQ carries the execute), `SERIAL_RANGE` of them per transaction, then the
//! rollback. No other read's misses overlap a serial read's.
//!
//! Loading the table, each batch of inserts is timed too: the longest one is the insert that
//! grew the fragment's storage or its hash index.
//!
//! Run: `cargo bench -p rndb-ndbd --bench key_path [-- [serial] SIZE ...]` (table sizes; default
//! 1000 and 100000; `serial` measures the serial reads only, for a profile of them alone).

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use rndb_config::NodeId;
use rndb_ndbd::blocks::{Kernel, Outbox, SendFailure};
use rndb_protocol::signals::{
    self, block, gsn, TableInfo, TcExecuteReq, TcKeyReq, FLAG_START_TRANSACTION,
};
use rndb_protocol::{
    AbortOption, ColumnDef, ColumnType, ExecType, LockMode, OperationType, TableDef, Value,
};
use rndb_transporter::FrameHeader;

/// The allocator `ndbd` runs with, so that the per-operation allocations cost what they cost
/// there.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Reads per execute, as testread-perf's `--range 1000`.
const BATCH: u32 = 1000;
/// Serial reads per transaction, as testread-perf's default `--range 20`.
const SERIAL_RANGE: u32 = 20;
/// Table sizes measured by default: in the cache, and beyond it.
const SIZES: [u32; 2] = [1_000, 100_000];
/// How long each size runs.
const CELL_DURATION: Duration = Duration::from_millis(1500);
/// The API node that sends everything.
const API: u16 = 50;

const INI: &str = "[ndbd default]\nNoOfReplicas=1\nDataMemory=512M\n\
MaxNoOfConcurrentOperations=1000000\n[ndbd]\nNodeId=1\nHostName=127.0.0.1\n\
[api]\nNodeId=50\nHostName=127.0.0.1\n";

/// Encodes every answer, as a link would, and counts the frames.
#[derive(Default)]
struct Sink {
    buf: Vec<u8>,
    frames: u64,
    last: Option<(u16, Vec<u8>)>,
}

impl Outbox for Sink {
    fn send(
        &mut self,
        _to: NodeId,
        header: FrameHeader,
        encode: &mut dyn FnMut(&mut Vec<u8>),
    ) -> Result<(), SendFailure> {
        self.buf.clear();
        encode(&mut self.buf);
        self.frames += 1;
        if header.signal != gsn::TCKEY_ROW {
            self.last = Some((header.signal, self.buf.clone()));
        }
        Ok(())
    }
}

fn header(signal: u16, request_id: u32) -> FrameHeader {
    FrameHeader {
        signal,
        receiver_block: block::DBTC,
        sender_block: block::API,
        request_id,
    }
}

fn encoded(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut b = Vec::new();
    f(&mut b);
    b
}

/// Frames of one execute: `keys` operations of `op_type`, then TC_EXECUTE_REQ.
fn execute(
    table: &TableInfo,
    op_type: OperationType,
    keys: &[u32],
    exec: ExecType,
) -> Vec<Vec<u8>> {
    let mut frames: Vec<Vec<u8>> = keys
        .iter()
        .enumerate()
        .map(|(i, &key)| {
            let req = TcKeyReq {
                flags: if i == 0 { FLAG_START_TRANSACTION } else { 0 },
                op_index: i as u32,
                op_type,
                lock_mode: if op_type == OperationType::Read {
                    LockMode::Read
                } else {
                    LockMode::Exclusive
                },
                table_id: table.table_id,
                table_version: table.table_version,
                replica: 0,
                key: vec![Value::UInt32(key)],
                attrs: if op_type == OperationType::Read {
                    Vec::new()
                } else {
                    (1..=3)
                        .map(|c| (c, Value::UInt32(key)))
                        .chain([(4, Value::UInt64(u64::from(key)))])
                        .collect()
                },
                program: None,
            };
            encoded(|b| req.encode(b))
        })
        .collect();
    frames.push(encoded(|b| {
        TcExecuteReq {
            flags: 0,
            exec_type: exec,
            abort_option: AbortOption::AbortOnError,
            op_count: keys.len() as u32,
        }
        .encode(b)
    }));
    frames
}

/// One read of `key` whose TCKEYREQ carries a NoCommit execute (its transaction's first when
/// `first`).
fn serial_read(table: &TableInfo, key: u32, first: bool) -> Vec<u8> {
    let req = TcKeyReq {
        flags: if first { FLAG_START_TRANSACTION } else { 0 },
        op_index: 0,
        op_type: OperationType::Read,
        lock_mode: LockMode::Read,
        table_id: table.table_id,
        table_version: table.table_version,
        replica: 0,
        key: vec![Value::UInt32(key)],
        attrs: Vec::new(),
        program: None,
    };
    let mut frame = encoded(|b| req.encode(b));
    TcExecuteReq {
        flags: 0,
        exec_type: ExecType::NoCommit,
        abort_option: AbortOption::AbortOnError,
        op_count: 1,
    }
    .append_to_key_req(&mut frame, 0);
    frame
}

/// Sends one execute's frames as request `rid` and runs the kernel until it has answered;
/// returns the signal of the execute's final answer.
fn run(kernel: &mut Kernel, sink: &mut Sink, rid: u32, frames: &[Vec<u8>]) -> u16 {
    let now = Instant::now();
    let last = frames.len() - 1;
    for (i, payload) in frames.iter().enumerate() {
        let signal = if i == last {
            gsn::TC_EXECUTE_REQ
        } else {
            gsn::TCKEYREQ
        };
        kernel
            .on_frame(NodeId(API), &header(signal, rid), payload, sink, now)
            .expect("frame");
    }
    kernel.run_jobs(sink, now);
    sink.last.take().map_or(0, |(signal, _)| signal)
}

fn rollback(kernel: &mut Kernel, sink: &mut Sink, rid: u32) {
    let frame = encoded(|b| {
        TcExecuteReq {
            flags: 0,
            exec_type: ExecType::Rollback,
            abort_option: AbortOption::AbortOnError,
            op_count: 0,
        }
        .encode(b)
    });
    run(kernel, sink, rid, &[frame]);
}

fn main() {
    println!(
        "µs per primary-key read in the data node's kernel: {BATCH} reads per execute, and \
         serial ({SERIAL_RANGE} executes of one read per transaction)"
    );
    // `cargo bench` passes `--bench`; numbers are table sizes.
    let mut sizes: Vec<u32> = std::env::args().filter_map(|a| a.parse().ok()).collect();
    if sizes.is_empty() {
        sizes = SIZES.to_vec();
    }
    let serial_only = std::env::args().any(|a| a == "serial");
    for size in sizes {
        let size = size.max(BATCH);
        let config = rndb_config::parse_str(INI, Path::new("bench.ini")).expect("config");
        let node = config.data_nodes[0].clone();
        let mut kernel = Kernel::new(&config, &node);
        let mut sink = Sink::default();
        let def = TableDef::new(
            "t",
            vec![
                ColumnDef::key("pk", ColumnType::UInt32),
                ColumnDef::new("a", ColumnType::UInt32),
                ColumnDef::new("b", ColumnType::UInt32),
                ColumnDef::new("c", ColumnType::UInt32),
                ColumnDef::new("d", ColumnType::UInt64),
            ],
        );
        let create = encoded(|b| signals::encode_table_def(b, &def));
        kernel
            .on_frame(
                NodeId(API),
                &header(gsn::CREATE_TABLE_REQ, 1),
                &create,
                &mut sink,
                Instant::now(),
            )
            .expect("create table");
        let (signal, payload) = sink.last.take().expect("create answer");
        assert_eq!(signal, gsn::CREATE_TABLE_CONF);
        let table = TableInfo::decode(&payload).expect("table info");
        let mut rid = 2;
        let keys: Vec<u32> = (0..size).collect();
        // Each batch of inserts timed: the longest shows what growing a table costs the one
        // operation that grows it (every other request waits behind it).
        let mut batch_us = Vec::with_capacity(keys.len() / BATCH as usize);
        for chunk in keys.chunks(BATCH as usize) {
            let frames = execute(&table, OperationType::Insert, chunk, ExecType::Commit);
            let began = Instant::now();
            let signal = run(&mut kernel, &mut sink, rid, &frames);
            batch_us.push(began.elapsed().as_secs_f64() * 1e6);
            assert_eq!(signal, gsn::TC_EXECUTE_CONF);
            rid += 1;
        }
        batch_us.sort_by(f64::total_cmp);
        println!(
            "  {size:>7} rows loaded in batches of {BATCH} inserts: median {:.0} µs a batch, \
             longest {:.0} µs",
            batch_us[batch_us.len() / 2],
            batch_us[batch_us.len() - 1]
        );
        let batched_us =
            (!serial_only).then(|| measure_batched(&mut kernel, &mut sink, &table, size, &mut rid));
        let serial_us = measure_serial(&mut kernel, &mut sink, &table, size, &mut rid);
        match batched_us {
            Some(us) => println!(
                "  {size:>7} rows: {:.3} µs per read in batches, {:.3} serial",
                black_box(us),
                black_box(serial_us)
            ),
            None => println!(
                "  {size:>7} rows: {:.3} µs per serial read",
                black_box(serial_us)
            ),
        }
    }
}

/// µs per read in batches: executes of `BATCH` consecutive keys from 64 starts over the table,
/// each transaction rolled back.
fn measure_batched(
    kernel: &mut Kernel,
    sink: &mut Sink,
    table: &TableInfo,
    size: u32,
    rid: &mut u32,
) -> f64 {
    let batches: Vec<Vec<Vec<u8>>> = (0..64)
        .map(|i| {
            let start = (i * 7919 * BATCH) % (size - BATCH + 1);
            let keys: Vec<u32> = (start..start + BATCH).collect();
            execute(table, OperationType::Read, &keys, ExecType::NoCommit)
        })
        .collect();
    let began = Instant::now();
    let mut reads = 0u64;
    let mut i = 0;
    while began.elapsed() < CELL_DURATION {
        let signal = run(kernel, sink, *rid, &batches[i % batches.len()]);
        // The last read's row may confirm the execute itself.
        assert!(
            matches!(signal, gsn::TC_EXECUTE_CONF | gsn::TCKEY_ROW_CONF),
            "signal {signal}"
        );
        rollback(kernel, sink, *rid);
        reads += u64::from(BATCH);
        *rid += 1;
        i += 1;
    }
    began.elapsed().as_secs_f64() * 1e6 / reads as f64
}

/// µs per serial read: `SERIAL_RANGE` reads of consecutive keys from pseudo-random starts, one
/// execute each, each transaction rolled back. The starts cover the whole table, so a large
/// table's rows are not in the cache when read (testread-perf's random starts do the same).
fn measure_serial(
    kernel: &mut Kernel,
    sink: &mut Sink,
    table: &TableInfo,
    size: u32,
    rid: &mut u32,
) -> f64 {
    let count = size / SERIAL_RANGE;
    let transactions: Vec<Vec<Vec<u8>>> = (0..count)
        .map(|i| {
            // 7919 is prime, so the starts visit every multiple of SERIAL_RANGE once.
            let start = (u64::from(i) * 7919 % u64::from(count)) as u32 * SERIAL_RANGE;
            (0..SERIAL_RANGE)
                .map(|op| serial_read(table, start + op, op == 0))
                .collect()
        })
        .collect();
    let began = Instant::now();
    let mut reads = 0u64;
    let mut i = 0;
    while began.elapsed() < CELL_DURATION {
        for frame in &transactions[i % transactions.len()] {
            let now = Instant::now();
            kernel
                .on_frame(NodeId(API), &header(gsn::TCKEYREQ, *rid), frame, sink, now)
                .expect("frame");
            kernel.run_jobs(sink, now);
            // A NoCommit read that ends its execute confirms it with its row.
            assert_eq!(
                sink.last.take().map(|(signal, _)| signal),
                Some(gsn::TCKEY_ROW_CONF)
            );
        }
        rollback(kernel, sink, *rid);
        reads += u64::from(SERIAL_RANGE);
        *rid += 1;
        i += 1;
    }
    began.elapsed().as_secs_f64() * 1e6 / reads as f64
}
