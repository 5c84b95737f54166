//! Kernel-level regression tests: signals in, frames out, with a fake outbox that can refuse
//! sends (an overloaded or gone link).

use std::collections::{BTreeSet, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use rndb_config::NodeId;
use rndb_protocol::ndbinfo::{self, table_id, DbinfoScanConf, DbinfoScanReq, Position};
use rndb_protocol::scan::{ScanTabReq, SCAN_FLAG_START_TRANSACTION};
use rndb_protocol::signals::{
    self, block, gsn, CreateIndexReq, Refusal, TableInfo, TcExecuteConf, TcExecuteRef,
    TcExecuteReq, TcKeyReq, FLAG_DURABLE_COMMIT, FLAG_START_TRANSACTION,
};
use rndb_protocol::{
    AbortOption, ColumnDef, ColumnType, ExecType, IndexKind, LockMode, OperationType, TableDef,
    Value,
};
use rndb_transporter::FrameHeader;

use super::{Kernel, Outbox, SendFailure};
use crate::ndbfs::{self, Disk, FsOp, FsRequest};

/// Records every frame sent; sends to nodes in `overloaded` fail with `Overloaded`.
#[derive(Default)]
struct Out {
    frames: Vec<(NodeId, u16, u32, Vec<u8>)>,
    overloaded: HashSet<NodeId>,
    closed: Vec<(NodeId, String)>,
}

impl Outbox for Out {
    fn send(
        &mut self,
        to: NodeId,
        h: FrameHeader,
        enc: &mut dyn FnMut(&mut Vec<u8>),
    ) -> Result<(), SendFailure> {
        if self.overloaded.contains(&to) {
            return Err(SendFailure::Overloaded);
        }
        let mut b = Vec::new();
        enc(&mut b);
        self.frames.push((to, h.signal, h.request_id, b));
        Ok(())
    }

    fn close(&mut self, to: NodeId, reason: String) {
        self.closed.push((to, reason));
    }
}

const INI: &str = "[ndbd default]\nNoOfReplicas=1\nDataMemory=16M\n\
TransactionDeadlockDetectionTimeout=100\n[ndbd]\nNodeId=1\nHostName=127.0.0.1\n\
[api]\nNodeId=50\nHostName=127.0.0.1\n[api]\nNodeId=51\nHostName=127.0.0.1\n";

fn kernel_with(extra: &str) -> Kernel {
    let ini = INI.replace("[ndbd]\n", &format!("{extra}[ndbd]\n"));
    let config = rndb_config::parse_str(&ini, Path::new("t.ini")).expect("config");
    let node = config.data_nodes[0].clone();
    Kernel::new(&config, &node)
}

fn hdr(signal: u16, rid: u32) -> FrameHeader {
    FrameHeader {
        signal,
        receiver_block: block::DBTC,
        sender_block: block::API,
        request_id: rid,
    }
}

fn frame(k: &mut Kernel, out: &mut Out, from: u16, signal: u16, rid: u32, payload: &[u8]) {
    frame_at(k, out, from, signal, rid, payload, Instant::now());
}

fn frame_at(
    k: &mut Kernel,
    out: &mut Out,
    from: u16,
    signal: u16,
    rid: u32,
    payload: &[u8],
    now: Instant,
) {
    k.on_frame(NodeId(from), &hdr(signal, rid), payload, out, now)
        .map_err(|e| e.0)
        .expect("frame");
    k.run_jobs(out, now);
}

fn key_req(t: &TableInfo, start: bool, op_type: OperationType, key: i32, val: i32) -> Vec<u8> {
    let mut b = Vec::new();
    key_op(t, start, op_type, key, val).encode(&mut b);
    b
}

/// Operation 0 of `op_type` on `key` (writing `val` to column 1 where it writes), the first of
/// its transaction when `start`.
fn key_op(t: &TableInfo, start: bool, op_type: OperationType, key: i32, val: i32) -> TcKeyReq {
    TcKeyReq {
        flags: if start { FLAG_START_TRANSACTION } else { 0 },
        op_index: 0,
        replica: 0,
        op_type,
        lock_mode: if op_type == OperationType::Read {
            LockMode::Read
        } else {
            LockMode::Exclusive
        },
        table_id: t.table_id,
        table_version: t.table_version,
        key: vec![Value::Int32(key)],
        attrs: if matches!(op_type, OperationType::Delete | OperationType::Read) {
            vec![]
        } else {
            vec![(1, Value::Int32(val))]
        },
        program: None,
    }
}

fn exec_req(start: bool, exec_type: ExecType, abort_option: AbortOption, ops: u32) -> Vec<u8> {
    let ex = TcExecuteReq {
        flags: if start { FLAG_START_TRANSACTION } else { 0 },
        exec_type,
        abort_option,
        op_count: ops,
    };
    let mut b = Vec::new();
    ex.encode(&mut b);
    b
}

/// One operation and its execute, as the API sends them.
#[allow(clippy::too_many_arguments)]
fn op_at(
    k: &mut Kernel,
    out: &mut Out,
    from: u16,
    rid: u32,
    t: &TableInfo,
    start: bool,
    op_type: OperationType,
    key: i32,
    val: i32,
    exec: ExecType,
    now: Instant,
) {
    let b = key_req(t, start, op_type, key, val);
    frame_at(k, out, from, gsn::TCKEYREQ, rid, &b, now);
    let b = exec_req(start, exec, AbortOption::AbortOnError, 1);
    frame_at(k, out, from, gsn::TC_EXECUTE_REQ, rid, &b, now);
}

#[allow(clippy::too_many_arguments)]
fn op(
    k: &mut Kernel,
    out: &mut Out,
    from: u16,
    rid: u32,
    t: &TableInfo,
    start: bool,
    op_type: OperationType,
    key: i32,
    val: i32,
    exec: ExecType,
) {
    op_at(
        k,
        out,
        from,
        rid,
        t,
        start,
        op_type,
        key,
        val,
        exec,
        Instant::now(),
    );
}

/// API node 50 inserts row (`key`, `val`) in a transaction of its own (request `rid`), which
/// commits.
fn insert_committed(k: &mut Kernel, out: &mut Out, t: &TableInfo, rid: u32, key: i32, val: i32) {
    op(
        k,
        out,
        50,
        rid,
        t,
        true,
        OperationType::Insert,
        key,
        val,
        ExecType::Commit,
    );
    assert_eq!(answered(out, rid), Some(gsn::TC_EXECUTE_CONF));
}

/// The execute answer (CONF or REF) last sent for `rid`.
fn answered(out: &Out, rid: u32) -> Option<u16> {
    out.frames
        .iter()
        .rev()
        .find(|(_, s, r, _)| *r == rid && (*s == gsn::TC_EXECUTE_CONF || *s == gsn::TC_EXECUTE_REF))
        .map(|x| x.1)
}

fn execute_ref(out: &Out, rid: u32) -> TcExecuteRef {
    let (_, _, _, b) = out
        .frames
        .iter()
        .rev()
        .find(|(_, s, r, _)| *r == rid && *s == gsn::TC_EXECUTE_REF)
        .expect("TC_EXECUTE_REF");
    TcExecuteRef::decode(b).expect("decode")
}

fn create_table(k: &mut Kernel, out: &mut Out) -> TableInfo {
    send_create_table(k, out);
    let (_, signal, _, payload) = out.frames.last().expect("answer");
    assert_eq!(*signal, gsn::CREATE_TABLE_CONF);
    TableInfo::decode(payload).expect("table info")
}

/// CREATE TABLE `t(k, v)`, request id 1.
fn send_create_table(k: &mut Kernel, out: &mut Out) {
    let def = TableDef::new(
        "t",
        vec![
            ColumnDef::key("k", ColumnType::Int32),
            ColumnDef::new("v", ColumnType::Int32),
        ],
    );
    let mut b = Vec::new();
    signals::encode_table_def(&mut b, &def);
    frame(k, out, 50, gsn::CREATE_TABLE_REQ, 1, &b);
}

/// [`create_table`] on a kernel with files: its CONF waits for a durable global checkpoint,
/// so every file request (sysfiles too) runs until it comes.
fn create_table_saved(
    k: &mut Kernel,
    out: &mut Out,
    disk: &mut MemDisk,
    now: Instant,
) -> TableInfo {
    send_create_table(k, out);
    let conf = |out: &Out| {
        (out.frames.iter().rev())
            .find(|(_, s, r, _)| *r == 1 && *s == gsn::CREATE_TABLE_CONF)
            .map(|(_, _, _, payload)| payload.clone())
    };
    for _ in 0..64 {
        if let Some(payload) = conf(out) {
            return TableInfo::decode(&payload).expect("table info");
        }
        for request in k.take_fs_requests() {
            let answer = ndbfs::execute(disk, request);
            k.on_fs_conf(answer, out, now).expect("file request");
        }
        k.run_jobs(out, now);
    }
    panic!("CREATE TABLE was not answered once its checkpoint was saved")
}

/// A kernel with table `t(k, v)` holding committed rows 1 and 2.
fn setup_with(extra: &str) -> (Kernel, Out, TableInfo) {
    let mut k = kernel_with(extra);
    let mut out = Out::default();
    let info = create_table(&mut k, &mut out);
    for (rid, key) in [(2, 1), (3, 2)] {
        op(
            &mut k,
            &mut out,
            50,
            rid,
            &info,
            true,
            OperationType::Insert,
            key,
            0,
            ExecType::Commit,
        );
        assert_eq!(answered(&out, rid), Some(gsn::TC_EXECUTE_CONF));
    }
    (k, out, info)
}

fn setup() -> (Kernel, Out, TableInfo) {
    setup_with("")
}

/// Both rows can be written by a fresh transaction and no memory is left behind.
fn assert_rows_free(k: &mut Kernel, out: &mut Out, t: &TableInfo, base_mem: u64, now: Instant) {
    assert_eq!(k.transaction_count(), 0, "every transaction ended");
    for (rid, key) in [(90_001, 1), (90_002, 2)] {
        op_at(
            k,
            out,
            51,
            rid,
            t,
            true,
            OperationType::Update,
            key,
            9,
            ExecType::Commit,
            now,
        );
        assert_eq!(
            answered(out, rid),
            Some(gsn::TC_EXECUTE_CONF),
            "row {key} is free"
        );
    }
    assert_eq!(k.memory_used_bytes(), base_mem, "no DataMemory leaked");
    assert!(k.lqh.trans_rows.is_empty(), "no row list leaked");
    assert_eq!(k.lqh.row_locks(), 0, "no operation record leaked");
}

/// Defect 1: T1 and T2 of one API node are aborted together (disconnect); T1's abort grants
/// its lock to T2's waiting update, which must not run after T2's own abort.
#[test]
fn disconnect_with_a_waiter_releases_every_lock() {
    for trial in 0..40u32 {
        let (mut k, mut out, t) = setup();
        let base_mem = k.memory_used_bytes();
        let (r1, r2) = (1000 + trial * 7, 5000 + trial * 13);
        let u = OperationType::Update;
        op(
            &mut k,
            &mut out,
            50,
            r1,
            &t,
            true,
            u,
            1,
            11,
            ExecType::NoCommit,
        );
        assert_eq!(answered(&out, r1), Some(gsn::TC_EXECUTE_CONF));
        op(
            &mut k,
            &mut out,
            50,
            r2,
            &t,
            true,
            u,
            1,
            22,
            ExecType::NoCommit,
        );
        assert_eq!(answered(&out, r2), None, "waits");
        k.on_disconnect(NodeId(50), &mut out, Instant::now());
        k.run_jobs(&mut out, Instant::now());
        assert_rows_free(&mut k, &mut out, &t, base_mem, Instant::now());
    }
}

/// Defect 1: two deadlock victims expire in the same timer tick.
#[test]
fn deadlock_victims_expiring_together_release_every_lock() {
    let (mut k, mut out, t) = setup();
    let base_mem = k.memory_used_bytes();
    let now = Instant::now();
    let u = OperationType::Update;
    let nc = ExecType::NoCommit;
    op_at(&mut k, &mut out, 50, 100, &t, true, u, 1, 1, nc, now);
    op_at(&mut k, &mut out, 51, 200, &t, true, u, 2, 2, nc, now);
    op_at(&mut k, &mut out, 50, 100, &t, false, u, 2, 1, nc, now);
    op_at(&mut k, &mut out, 51, 200, &t, false, u, 1, 2, nc, now);
    let later = now + Duration::from_millis(500);
    k.on_timer(later);
    k.run_jobs(&mut out, later);
    assert_eq!(answered(&out, 100), Some(gsn::TC_EXECUTE_REF));
    assert_eq!(answered(&out, 200), Some(gsn::TC_EXECUTE_REF));
    assert_rows_free(&mut k, &mut out, &t, base_mem, later);
}

/// Defect 1: a Read-lock scan in a deadlock is resumed after its transaction's abort.
#[test]
fn a_scan_resumed_after_its_abort_takes_no_lock() {
    for trial in 0..20u32 {
        let (mut k, mut out, t) = setup();
        let base_mem = k.memory_used_bytes();
        let now = Instant::now();
        let (r1, r2) = (100 + trial * 3, 900 + trial * 11);
        let u = OperationType::Update;
        let nc = ExecType::NoCommit;
        op_at(&mut k, &mut out, 50, r1, &t, true, u, 1, 1, nc, now);
        op_at(&mut k, &mut out, 51, r2, &t, true, u, 2, 2, nc, now);
        let scan = scan_req(&t, r2, LockMode::Read, 0);
        frame_at(
            &mut k,
            &mut out,
            51,
            gsn::SCAN_TABREQ,
            7000 + trial,
            &scan,
            now,
        );
        op_at(&mut k, &mut out, 50, r1, &t, false, u, 2, 1, nc, now);
        let later = now + Duration::from_millis(500);
        k.on_timer(later);
        k.run_jobs(&mut out, later);
        assert_eq!(k.scan_count(), 0);
        assert_rows_free(&mut k, &mut out, &t, base_mem, later);
    }
}

fn scan_req(t: &TableInfo, trans_rid: u32, lock_mode: LockMode, flags: u8) -> Vec<u8> {
    let scan = ScanTabReq {
        flags,
        trans_request_id: trans_rid,
        table_id: t.table_id,
        table_version: t.table_version,
        index_id: 0,
        index_version: 0,
        lock_mode,
        parallelism: 0,
        batch_rows: 100,
        batch_bytes: 1 << 16,
        batch_bytes_total: 1 << 20,
        ranges: vec![],
        filter: None,
        alive: Vec::new(),
    };
    let mut b = Vec::new();
    scan.encode(&mut b);
    b
}

/// Defect 2: a transaction whose operations arrived but whose execute never did is aborted
/// after TransactionInactiveTimeout, and its locks go.
#[test]
fn operations_without_an_execute_time_out() {
    let (mut k, mut out, t) = setup_with("TransactionInactiveTimeout=100\n");
    let base_mem = k.memory_used_bytes();
    let now = Instant::now();
    let b = key_req(&t, true, OperationType::Update, 1, 5);
    frame_at(&mut k, &mut out, 50, gsn::TCKEYREQ, 77, &b, now);
    assert_eq!(k.transaction_count(), 1);
    k.on_timer(now + Duration::from_millis(50));
    k.run_jobs(&mut out, now + Duration::from_millis(50));
    assert_eq!(k.transaction_count(), 1, "not idle long enough yet");
    let later = now + Duration::from_millis(500);
    k.on_timer(later);
    k.run_jobs(&mut out, later);
    assert_rows_free(&mut k, &mut out, &t, base_mem, later);
    // The execute arriving late is told why.
    let b = exec_req(true, ExecType::Commit, AbortOption::AbortOnError, 1);
    frame_at(&mut k, &mut out, 50, gsn::TC_EXECUTE_REQ, 77, &b, later);
    assert_eq!(execute_ref(&out, 77).code, 237);
}

/// Defect 3: an execute answer that meets a full send buffer is sent once it drains.
#[test]
fn an_execute_answer_survives_an_overloaded_link() {
    let (mut k, mut out, t) = setup();
    out.overloaded.insert(NodeId(50));
    op(
        &mut k,
        &mut out,
        50,
        10,
        &t,
        true,
        OperationType::Update,
        1,
        3,
        ExecType::Commit,
    );
    // A ping and a dictionary request answered while the link is full wait their turn too.
    frame(&mut k, &mut out, 50, gsn::PING_REQ, 11, &[]);
    frame(
        &mut k,
        &mut out,
        50,
        gsn::GET_TABINFO_REQ,
        12,
        &name_payload("t"),
    );
    assert_eq!(answered(&out, 10), None);
    assert_eq!(k.transaction_count(), 0, "committed all the same");
    out.overloaded.clear();
    k.run_jobs(&mut out, Instant::now());
    let sent: Vec<(u16, u32)> = out.frames.iter().map(|f| (f.1, f.2)).collect();
    let tail = &sent[sent.len() - 3..];
    assert_eq!(
        tail,
        [
            (gsn::TC_EXECUTE_CONF, 10),
            (gsn::PING_CONF, 11),
            (gsn::GET_TABINFO_CONF, 12)
        ],
        "answers go out in order"
    );
    assert!(out.closed.is_empty());
}

fn name_payload(name: &str) -> Vec<u8> {
    let mut b = Vec::new();
    signals::encode_name(&mut b, name);
    b
}

/// Defect 3: a scan's final answer survives an overloaded link.
#[test]
fn a_scan_answer_survives_an_overloaded_link() {
    let (mut k, mut out, t) = setup();
    out.overloaded.insert(NodeId(51));
    let scan = scan_req(
        &t,
        600,
        LockMode::CommittedRead,
        SCAN_FLAG_START_TRANSACTION,
    );
    frame(&mut k, &mut out, 51, gsn::SCAN_TABREQ, 601, &scan);
    assert!(!out.frames.iter().any(|f| f.2 == 601));
    out.overloaded.clear();
    k.run_jobs(&mut out, Instant::now());
    let answer = out
        .frames
        .iter()
        .rev()
        .find(|f| f.2 == 601)
        .expect("answer");
    // The rows did not fit: the scan is refused with 1218, and the API hears it.
    assert_eq!(answer.1, gsn::SCAN_TABREF);
    assert_eq!(Refusal::decode(&answer.3).expect("refusal").code, 1218);
}

/// Defect 3: an API node that never drains its answers past the bound loses its link.
#[test]
fn unsent_answers_past_the_bound_close_the_link() {
    let mut k = kernel_with("MaxNoOfConcurrentTransactions=32\nMaxNoOfConcurrentScans=2\n");
    let mut out = Out::default();
    out.overloaded.insert(NodeId(50));
    for rid in 0..200 {
        frame(&mut k, &mut out, 50, gsn::PING_REQ, rid, &[]);
        if !out.closed.is_empty() {
            break;
        }
    }
    assert_eq!(out.closed.len(), 1, "the link is closed once");
    assert_eq!(out.closed[0].0, NodeId(50));
    k.on_disconnect(NodeId(50), &mut out, Instant::now());
    out.overloaded.clear();
    k.run_jobs(&mut out, Instant::now());
    assert!(out.frames.is_empty(), "nothing is sent to a closed link");
}

/// An outbox that refuses every row, alone or confirming its execute (the row does not fit the
/// send buffer).
#[derive(Default)]
struct RowsDontFit(Out);

impl Outbox for RowsDontFit {
    fn send(
        &mut self,
        to: NodeId,
        h: FrameHeader,
        enc: &mut dyn FnMut(&mut Vec<u8>),
    ) -> Result<(), SendFailure> {
        if matches!(h.signal, gsn::TCKEY_ROW | gsn::TCKEY_ROW_CONF) {
            return Err(SendFailure::Overloaded);
        }
        self.0.send(to, h, enc)
    }
}

/// A read that ends an execute is answered by one frame, its row confirming the execute
/// (TCKEY_ROW_CONF): under NoCommit at once, under Commit once the commit is over (a read-only
/// commit names no GCI). A row that does not fit a NoCommit execute's answer fails the execute
/// with 1218.
#[test]
fn a_read_ending_an_execute_confirms_it_with_its_row() {
    let (mut k, mut out, t) = setup();
    op(
        &mut k,
        &mut out,
        50,
        99,
        &t,
        true,
        OperationType::Insert,
        7,
        10,
        ExecType::Commit,
    );
    assert_eq!(answered(&out, 99), Some(gsn::TC_EXECUTE_CONF));
    let read_one = |k: &mut Kernel, out: &mut dyn Outbox, rid: u32, exec: ExecType| {
        let now = Instant::now();
        let b = key_req(&t, true, OperationType::Read, 7, 0);
        k.on_frame(NodeId(50), &hdr(gsn::TCKEYREQ, rid), &b, out, now)
            .expect("frame");
        let b = exec_req(true, exec, AbortOption::AbortOnError, 1);
        k.on_frame(NodeId(50), &hdr(gsn::TC_EXECUTE_REQ, rid), &b, out, now)
            .expect("frame");
        k.run_jobs(out, now);
    };
    read_one(&mut k, &mut out, 100, ExecType::NoCommit);
    let answers: Vec<_> = out.frames.iter().filter(|f| f.2 == 100).collect();
    assert_eq!(answers.len(), 1, "one frame: {answers:?}");
    assert_eq!(answers[0].1, gsn::TCKEY_ROW_CONF);
    let row = signals::TcKeyRow::decode(&answers[0].3).expect("row");
    assert_eq!(
        (row.op_index, row.values),
        (0, vec![Value::Int32(7), Value::Int32(10)])
    );
    assert_eq!(
        k.transaction_count(),
        1,
        "NoCommit leaves the transaction open"
    );

    read_one(&mut k, &mut out, 101, ExecType::Commit);
    let answers: Vec<_> = out.frames.iter().filter(|f| f.2 == 101).collect();
    assert_eq!(answers.len(), 1, "one frame: {answers:?}");
    assert_eq!(answers[0].1, gsn::TCKEY_ROW_CONF);
    let (row, gci) = signals::TcKeyRow::decode_conf(&answers[0].3).expect("row");
    assert_eq!(
        (row.op_index, row.values, gci),
        (0, vec![Value::Int32(7), Value::Int32(10)], None)
    );
    assert_eq!(
        k.transaction_count(),
        1,
        "committed: only the NoCommit one is open"
    );

    let mut full = RowsDontFit(Out::default());
    read_one(&mut k, &mut full, 102, ExecType::NoCommit);
    assert_eq!(answered(&full.0, 102), Some(gsn::TC_EXECUTE_REF));
    assert_eq!(execute_ref(&full.0, 102).code, 1218);
}

/// Defect 4: under IgnoreError, a read whose row could not be sent fails the execute (1218)
/// instead of reporting neither row nor error. (Here the row is not the execute's last answer,
/// which would wait for the commit and go with its confirmation as every final answer does.)
#[test]
fn a_lost_row_is_reported_under_ignore_error() {
    let (mut k, out, t) = setup();
    let mut out = RowsDontFit(out);
    let now = Instant::now();
    let first = key_op(&t, true, OperationType::Read, 1, 0);
    let second = TcKeyReq {
        flags: 0,
        op_index: 1,
        key: vec![Value::Int32(2)],
        ..first.clone()
    };
    for req in [&first, &second] {
        let mut b = Vec::new();
        req.encode(&mut b);
        k.on_frame(NodeId(50), &hdr(gsn::TCKEYREQ, 20), &b, &mut out, now)
            .expect("frame");
    }
    let b = exec_req(true, ExecType::Commit, AbortOption::IgnoreError, 2);
    k.on_frame(NodeId(50), &hdr(gsn::TC_EXECUTE_REQ, 20), &b, &mut out, now)
        .expect("frame");
    k.run_jobs(&mut out, now);
    assert_eq!(answered(&out.0, 20), Some(gsn::TC_EXECUTE_REF));
    let r = execute_ref(&out.0, 20);
    assert_eq!((r.code, r.op_index), (1218, 0));
    assert_eq!(k.transaction_count(), 0);
}

/// A read of `key` in transaction `rid` (`start`: a new one) and the Commit execute that ends
/// it, both received before the read runs (as when the API ends the execute in the TCKEYREQ),
/// so TC knows the row is the execute's last answer.
fn read_and_commit(k: &mut Kernel, out: &mut Out, rid: u32, t: &TableInfo, start: bool, key: i32) {
    let now = Instant::now();
    let b = key_req(t, start, OperationType::Read, key, 0);
    k.on_frame(NodeId(50), &hdr(gsn::TCKEYREQ, rid), &b, out, now)
        .expect("frame");
    let b = exec_req(start, ExecType::Commit, AbortOption::AbortOnError, 1);
    k.on_frame(NodeId(50), &hdr(gsn::TC_EXECUTE_REQ, rid), &b, out, now)
        .expect("frame");
    k.run_jobs(out, now);
}

/// A read that ends a Commit execute of a transaction that wrote names the commit's GCI with
/// its row; a committed row's answer that meets a full send buffer is kept, as any final
/// answer, and sent once the buffer drains (the commit is over: it cannot fail any more).
#[test]
fn a_committed_rows_answer_names_the_gci_of_a_write_and_survives_a_full_link() {
    let (mut k, mut out, t) = setup();
    op(
        &mut k,
        &mut out,
        50,
        60,
        &t,
        true,
        OperationType::Insert,
        5,
        9,
        ExecType::NoCommit,
    );
    assert_eq!(answered(&out, 60), Some(gsn::TC_EXECUTE_CONF));
    out.frames.clear();
    read_and_commit(&mut k, &mut out, 60, &t, false, 5);
    let answers: Vec<_> = out.frames.iter().filter(|f| f.2 == 60).collect();
    assert_eq!(answers.len(), 1, "one frame: {answers:?}");
    assert_eq!(answers[0].1, gsn::TCKEY_ROW_CONF);
    let (row, gci) = signals::TcKeyRow::decode_conf(&answers[0].3).expect("row");
    assert_eq!(row.values, vec![Value::Int32(5), Value::Int32(9)]);
    assert_eq!(
        gci,
        Some(k.current_gci()),
        "the commit of a write names its GCI"
    );

    out.frames.clear();
    out.overloaded.insert(NodeId(50));
    read_and_commit(&mut k, &mut out, 61, &t, true, 1);
    assert!(out.frames.iter().all(|f| f.2 != 61), "{:?}", out.frames);
    assert_eq!(k.transaction_count(), 0, "committed all the same");
    out.overloaded.clear();
    k.run_jobs(&mut out, Instant::now());
    let answers: Vec<_> = out.frames.iter().filter(|f| f.2 == 61).collect();
    assert_eq!(answers.len(), 1, "one frame: {answers:?}");
    assert_eq!(answers[0].1, gsn::TCKEY_ROW_CONF);
    let (row, gci) = signals::TcKeyRow::decode_conf(&answers[0].3).expect("row");
    assert_eq!(
        (row.values, gci),
        (vec![Value::Int32(1), Value::Int32(0)], None)
    );
}

/// Defect 5: rows a locking scan locks take operation records; none free is 234.
#[test]
fn locking_scans_are_bounded_by_operation_records() {
    let (mut k, mut out, t) = setup_with("MaxNoOfConcurrentOperations=32\n");
    for key in 10..60 {
        insert_committed(&mut k, &mut out, &t, 1000 + key as u32, key, 0);
    }
    let base_mem = k.memory_used_bytes();
    let scan = scan_req(&t, 700, LockMode::Exclusive, SCAN_FLAG_START_TRANSACTION);
    frame(&mut k, &mut out, 51, gsn::SCAN_TABREQ, 701, &scan);
    let answer = out
        .frames
        .iter()
        .rev()
        .find(|f| f.2 == 701)
        .expect("answer");
    assert_eq!(answer.1, gsn::SCAN_TABREF);
    assert_eq!(Refusal::decode(&answer.3).expect("refusal").code, 234);
    // The locks it took stay with its transaction until the transaction ends.
    let b = exec_req(false, ExecType::Rollback, AbortOption::AbortOnError, 0);
    frame(&mut k, &mut out, 51, gsn::TC_EXECUTE_REQ, 700, &b);
    assert_eq!(answered(&out, 700), Some(gsn::TC_EXECUTE_CONF));
    assert_rows_free(&mut k, &mut out, &t, base_mem, Instant::now());
}

/// A CommittedRead holds its operation record only until its execute ends (NDB frees a dirty
/// read's at its answer): one transaction reads a row 40 times, one execute each, past
/// MaxNoOfConcurrentOperations=32; locking reads hold theirs until the end (the 33rd, 234).
#[test]
fn committed_reads_free_their_operation_records_with_their_execute() {
    let (mut k, mut out, t) = setup_with("MaxNoOfConcurrentOperations=32\n");
    insert_committed(&mut k, &mut out, &t, 1000, 7, 70);
    for (rid, lock_mode, refused_at) in [
        (800, LockMode::CommittedRead, None),
        (801, LockMode::Read, Some(32)),
    ] {
        for i in 0..40 {
            let mut req = key_op(&t, i == 0, OperationType::Read, 7, 0);
            req.lock_mode = lock_mode;
            let mut b = Vec::new();
            req.encode(&mut b);
            frame(&mut k, &mut out, 50, gsn::TCKEYREQ, rid, &b);
            let b = exec_req(i == 0, ExecType::NoCommit, AbortOption::AbortOnError, 1);
            frame(&mut k, &mut out, 50, gsn::TC_EXECUTE_REQ, rid, &b);
            if Some(i) == refused_at {
                assert_eq!(execute_ref(&out, rid).code, 234, "{lock_mode:?} read {i}");
                break;
            }
            assert_eq!(
                answered(&out, rid),
                Some(gsn::TC_EXECUTE_CONF),
                "{lock_mode:?} read {i}: {:?}",
                out.frames.last()
            );
            out.frames.clear();
        }
        let b = exec_req(false, ExecType::Rollback, AbortOption::AbortOnError, 0);
        frame(&mut k, &mut out, 50, gsn::TC_EXECUTE_REQ, rid, &b);
        out.frames.clear();
    }
    assert_eq!(k.transaction_count(), 0);
}

/// Defect 6: a unique index is not built while the table has uncommitted changes (701).
#[test]
fn a_unique_index_waits_for_uncommitted_changes() {
    let (mut k, mut out, t) = setup();
    op(
        &mut k,
        &mut out,
        50,
        30,
        &t,
        true,
        OperationType::Update,
        1,
        7,
        ExecType::NoCommit,
    );
    let req = CreateIndexReq {
        table: "t".into(),
        index: "u".into(),
        kind: IndexKind::Unique,
        columns: vec!["v".into()],
    };
    let mut b = Vec::new();
    req.encode(&mut b);
    frame(&mut k, &mut out, 50, gsn::CREATE_INDEX_REQ, 31, &b);
    let answer = out.frames.last().expect("answer");
    assert_eq!(answer.1, gsn::CREATE_INDEX_REF);
    assert_eq!(Refusal::decode(&answer.3).expect("refusal").code, 701);
    let b = exec_req(false, ExecType::Commit, AbortOption::AbortOnError, 0);
    frame(&mut k, &mut out, 50, gsn::TC_EXECUTE_REQ, 30, &b);
    assert_eq!(answered(&out, 30), Some(gsn::TC_EXECUTE_CONF));
    frame(
        &mut k,
        &mut out,
        50,
        gsn::CREATE_INDEX_REQ,
        32,
        &req_bytes(&req),
    );
    assert_eq!(out.frames.last().expect("answer").1, gsn::CREATE_INDEX_CONF);
}

fn req_bytes(req: &CreateIndexReq) -> Vec<u8> {
    let mut b = Vec::new();
    req.encode(&mut b);
    b
}

/// Defect 7: a shared holder's upgrade goes ahead of an exclusive waiter that waits for it.
#[test]
fn a_lock_upgrade_does_not_wait_behind_its_own_waiter() {
    let (mut k, mut out, t) = setup();
    let now = Instant::now();
    let r = OperationType::Read;
    let nc = ExecType::NoCommit;
    op_at(&mut k, &mut out, 50, 40, &t, true, r, 1, 0, nc, now); // T1 shares row 1
    op_at(&mut k, &mut out, 51, 41, &t, true, r, 1, 0, nc, now); // T2 shares row 1
    let u = OperationType::Update;
    op_at(
        &mut k,
        &mut out,
        51,
        42,
        &t,
        true,
        u,
        1,
        5,
        ExecType::Commit,
        now,
    ); // T3 waits
    let upgrade_sent = out.frames.len();
    op_at(
        &mut k,
        &mut out,
        50,
        40,
        &t,
        false,
        u,
        1,
        6,
        ExecType::Commit,
        now,
    ); // T1 upgrades
    assert!(
        !out.frames[upgrade_sent..]
            .iter()
            .any(|f| f.2 == 40 || f.2 == 42),
        "T1's upgrade waits for T2's shared lock, and T3 for both: {:?}",
        &out.frames[upgrade_sent..]
    );
    let b = exec_req(false, ExecType::Commit, AbortOption::AbortOnError, 0);
    frame_at(&mut k, &mut out, 51, gsn::TC_EXECUTE_REQ, 41, &b, now); // T2 ends
    let conf_at = |rid| {
        out.frames[upgrade_sent..]
            .iter()
            .position(|f| f.2 == rid && f.1 == gsn::TC_EXECUTE_CONF)
            .unwrap_or_else(|| panic!("no TC_EXECUTE_CONF for request {rid}"))
    };
    assert!(
        conf_at(40) < conf_at(42),
        "T1's upgrade is granted before T3, which waited behind it"
    );
    // T3 ran last, so its value stands.
    op_at(
        &mut k,
        &mut out,
        50,
        43,
        &t,
        true,
        r,
        1,
        0,
        ExecType::Commit,
        now,
    );
    let row = out
        .frames
        .iter()
        .find(|f| f.2 == 43 && (f.1 == gsn::TCKEY_ROW || f.1 == gsn::TCKEY_ROW_CONF))
        .map(|f| signals::TcKeyRow::decode(&f.3).expect("row").values);
    assert_eq!(
        row,
        Some(vec![Value::Int32(1), Value::Int32(5)]),
        "T3's update ran after T1's"
    );
    assert_eq!(k.transaction_count(), 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Defect 8: no payload of any signal makes the kernel panic.
    #[test]
    fn on_frame_never_panics(
        signal in prop::sample::select(vec![
            gsn::TCKEYREQ, gsn::TCINDXREQ, gsn::TC_EXECUTE_REQ, gsn::SCAN_TABREQ,
            gsn::SCAN_NEXTREQ, gsn::CREATE_TABLE_REQ, gsn::DROP_TABLE_REQ, gsn::GET_TABINFO_REQ,
            gsn::CREATE_INDEX_REQ, gsn::DROP_INDEX_REQ, gsn::GET_INDEX_REQ, gsn::LIST_TABLES_REQ,
            gsn::PING_REQ, gsn::DBINFO_SCANREQ, 999,
        ]),
        rid in 0u32..4,
        payload in prop::collection::vec(any::<u8>(), 0..64),
        head in prop::collection::vec(any::<u8>(), 0..3),
    ) {
        let (mut k, mut out, t) = setup();
        // Start from a valid prefix (a known table id) as often as from noise.
        let mut bytes = Vec::new();
        if head.len() == 1 {
            bytes.extend(key_req(&t, true, OperationType::Update, 1, 1));
            bytes.truncate(usize::from(head[0]) % (bytes.len() + 1));
        }
        bytes.extend(payload);
        let now = Instant::now();
        let _ = k.on_frame(NodeId(50), &hdr(signal, rid), &bytes, &mut out, now);
        k.run_jobs(&mut out, now);
        k.on_timer(now + Duration::from_secs(10));
        k.on_disconnect(NodeId(50), &mut out, Instant::now());
        k.run_jobs(&mut out, now + Duration::from_secs(10));
        prop_assert_eq!(k.transaction_count(), 0);
    }
}

/// A rollback that arrives while the transaction's execute still runs (the API stopped
/// waiting, or dropped it) is not refused: the transaction aborts as soon as that execute's
/// operations are done, and releases what they took.
#[test]
fn a_rollback_during_a_running_execute_aborts_when_it_ends() {
    let mut k = kernel_with("");
    let mut out = Out::default();
    let t = create_table(&mut k, &mut out);
    op(
        &mut k,
        &mut out,
        50,
        1,
        &t,
        true,
        OperationType::Insert,
        1,
        10,
        ExecType::Commit,
    );
    assert_eq!(answered(&out, 1), Some(gsn::TC_EXECUTE_CONF));
    // Transaction 2 holds the row; transaction 3's update waits for it.
    op(
        &mut k,
        &mut out,
        50,
        2,
        &t,
        true,
        OperationType::Update,
        1,
        20,
        ExecType::NoCommit,
    );
    assert_eq!(answered(&out, 2), Some(gsn::TC_EXECUTE_CONF));
    op(
        &mut k,
        &mut out,
        50,
        3,
        &t,
        true,
        OperationType::Update,
        1,
        30,
        ExecType::NoCommit,
    );
    assert_eq!(answered(&out, 3), None, "waits for the lock");
    let rollback = exec_req(false, ExecType::Rollback, AbortOption::AbortOnError, 0);
    frame(&mut k, &mut out, 50, gsn::TC_EXECUTE_REQ, 3, &rollback);
    assert_eq!(
        answered(&out, 3),
        None,
        "answered when the running execute ends"
    );
    let commit = exec_req(false, ExecType::Commit, AbortOption::AbortOnError, 0);
    frame(&mut k, &mut out, 50, gsn::TC_EXECUTE_REQ, 2, &commit);
    assert_eq!(answered(&out, 2), Some(gsn::TC_EXECUTE_CONF));
    assert_eq!(
        answered(&out, 3),
        Some(gsn::TC_EXECUTE_CONF),
        "the rollback is done"
    );
    assert_eq!(k.transaction_count(), 0, "both transactions ended");
    // Transaction 2's value stands; transaction 3's update is gone and its lock free.
    op(
        &mut k,
        &mut out,
        50,
        4,
        &t,
        true,
        OperationType::Read,
        1,
        0,
        ExecType::Commit,
    );
    let row = out
        .frames
        .iter()
        .find(|(_, s, r, _)| *r == 4 && *s == gsn::TCKEY_ROW)
        .map(|(_, _, _, b)| signals::TcKeyRow::decode(b).expect("row").values);
    assert_eq!(row, Some(vec![Value::Int32(1), Value::Int32(20)]));
}

/// A read's row goes from LQH straight to the API; when a later operation of the same execute
/// fails and aborts the transaction, the API still gets the row first and the execute's
/// TC_EXECUTE_REF after it, and the read's lock is released.
#[test]
fn a_read_row_comes_before_the_ref_of_its_failed_execute() {
    let (mut k, mut out, t) = setup();
    let rid = 40;
    let read = key_op(&t, true, OperationType::Read, 1, 0);
    let duplicate = TcKeyReq {
        flags: 0,
        op_index: 1,
        op_type: OperationType::Insert,
        lock_mode: LockMode::Exclusive,
        key: vec![Value::Int32(2)],
        attrs: vec![(1, Value::Int32(7))],
        ..read.clone()
    };
    for req in [&read, &duplicate] {
        let mut b = Vec::new();
        req.encode(&mut b);
        frame(&mut k, &mut out, 50, gsn::TCKEYREQ, rid, &b);
    }
    let b = exec_req(false, ExecType::NoCommit, AbortOption::AbortOnError, 2);
    frame(&mut k, &mut out, 50, gsn::TC_EXECUTE_REQ, rid, &b);
    let signals: Vec<u16> = out
        .frames
        .iter()
        .filter(|(_, _, r, _)| *r == rid)
        .map(|f| f.1)
        .collect();
    let row_at = signals.iter().position(|&s| s == gsn::TCKEY_ROW);
    let ref_at = signals.iter().position(|&s| s == gsn::TC_EXECUTE_REF);
    assert!(
        matches!((row_at, ref_at), (Some(row), Some(r)) if row < r),
        "the row comes before the execute's refusal: {signals:?}"
    );
    assert_eq!(
        signals.iter().filter(|&&s| s == gsn::TCKEY_ROW).count(),
        1,
        "the row is sent once: {signals:?}"
    );
    assert_eq!(execute_ref(&out, rid).code, 630);
    // The aborted read holds no lock: another transaction updates the row at once.
    op(
        &mut k,
        &mut out,
        51,
        41,
        &t,
        true,
        OperationType::Update,
        1,
        5,
        ExecType::Commit,
    );
    assert_eq!(answered(&out, 41), Some(gsn::TC_EXECUTE_CONF));
}

/// The GCI the last TC_EXECUTE_CONF for `rid` names (`None`: none sent, or it names none).
fn conf_gci(out: &Out, rid: u32) -> Option<u64> {
    let (_, _, _, b) = out
        .frames
        .iter()
        .rev()
        .find(|(_, s, r, _)| *r == rid && *s == gsn::TC_EXECUTE_CONF)?;
    TcExecuteConf::decode(b).expect("decode").gci
}

/// The timer fires at `now` (the master's global checkpoints run on it).
fn tick(k: &mut Kernel, out: &mut Out, now: Instant) {
    k.on_timer(now);
    k.run_jobs(out, now);
}

/// A committed execute's TC_EXECUTE_CONF names its commit's GCI, the epoch current when the
/// commit started, so a later epoch's commit names a larger one; NoCommit and rollback answers
/// name none.
#[test]
fn a_commits_conf_names_its_gci() {
    let (mut k, mut out, t) = setup();
    let now = Instant::now();
    op_at(
        &mut k,
        &mut out,
        50,
        10,
        &t,
        true,
        OperationType::Insert,
        5,
        1,
        ExecType::NoCommit,
        now,
    );
    assert_eq!(answered(&out, 10), Some(gsn::TC_EXECUTE_CONF));
    assert_eq!(conf_gci(&out, 10), None, "NoCommit names no GCI");
    let b = exec_req(false, ExecType::Commit, AbortOption::AbortOnError, 0);
    frame_at(&mut k, &mut out, 50, gsn::TC_EXECUTE_REQ, 10, &b, now);
    let first = conf_gci(&out, 10).expect("the commit names its GCI");
    assert_eq!(first, k.current_gci());
    // The master starts the next epoch once TimeBetweenEpochs has passed.
    tick(&mut k, &mut out, now);
    tick(&mut k, &mut out, now + Duration::from_millis(500));
    assert!(k.current_gci() > first, "a new epoch started");
    op_at(
        &mut k,
        &mut out,
        50,
        11,
        &t,
        true,
        OperationType::Update,
        5,
        2,
        ExecType::Commit,
        now,
    );
    let second = conf_gci(&out, 11).expect("the commit names its GCI");
    assert!(second > first, "{second:#x} after {first:#x}");
    assert_eq!(second, k.current_gci());
    op_at(
        &mut k,
        &mut out,
        50,
        12,
        &t,
        true,
        OperationType::Insert,
        6,
        1,
        ExecType::Rollback,
        now,
    );
    assert_eq!(answered(&out, 12), Some(gsn::TC_EXECUTE_CONF));
    assert_eq!(conf_gci(&out, 12), None, "a rollback names no GCI");
}

/// One operation and its execute, asking for a durable commit.
fn durable_insert(k: &mut Kernel, out: &mut Out, from: u16, rid: u32, t: &TableInfo, key: i32) {
    let now = Instant::now();
    let b = key_req(t, true, OperationType::Insert, key, 1);
    frame_at(k, out, from, gsn::TCKEYREQ, rid, &b, now);
    let ex = TcExecuteReq {
        flags: FLAG_START_TRANSACTION | FLAG_DURABLE_COMMIT,
        exec_type: ExecType::Commit,
        abort_option: AbortOption::AbortOnError,
        op_count: 1,
    };
    let mut b = Vec::new();
    ex.encode(&mut b);
    frame_at(k, out, from, gsn::TC_EXECUTE_REQ, rid, &b, now);
}

/// A disk in memory: files by path, as `ndbfs::Disk` sees them.
#[derive(Default)]
struct MemDisk {
    files: std::collections::BTreeMap<String, Vec<u8>>,
}

impl Disk for MemDisk {
    fn write_at(&mut self, path: &str, offset: u64, bytes: &[u8]) -> std::io::Result<()> {
        let file = self.files.entry(path.to_string()).or_default();
        let end = offset as usize + bytes.len();
        if file.len() < end {
            file.resize(end, 0);
        }
        file[offset as usize..end].copy_from_slice(bytes);
        Ok(())
    }
    fn sync(&mut self, _: &str) -> std::io::Result<()> {
        Ok(())
    }
    fn truncate(&mut self, path: &str, len: u64) -> std::io::Result<()> {
        if let Some(file) = self.files.get_mut(path) {
            file.truncate(len as usize);
        }
        Ok(())
    }
    fn replace(&mut self, path: &str, bytes: &[u8]) -> std::io::Result<()> {
        self.files.insert(path.to_string(), bytes.to_vec());
        Ok(())
    }
    fn read(&mut self, path: &str) -> std::io::Result<Option<Vec<u8>>> {
        Ok(self.files.get(path).cloned())
    }
    fn list(&mut self, path: &str) -> std::io::Result<Vec<String>> {
        let prefix = format!("{path}/");
        Ok(self
            .files
            .keys()
            .filter_map(|name| name.strip_prefix(&prefix))
            .filter(|name| !name.contains('/'))
            .map(str::to_string)
            .collect())
    }
    fn remove(&mut self, path: &str) -> std::io::Result<()> {
        self.files.remove(path);
        Ok(())
    }
}

/// Carries out the kernel's file requests on `disk` until it makes no more, except the
/// sysfile's writes and syncs, which are returned (not carried out) in order.
fn pump_files(k: &mut Kernel, out: &mut Out, disk: &mut MemDisk, now: Instant) -> Vec<FsRequest> {
    let mut sysfiles = Vec::new();
    loop {
        let requests = k.take_fs_requests();
        if requests.is_empty() {
            return sysfiles;
        }
        for request in requests {
            if request.op.path().ends_with(".sysfile") {
                sysfiles.push(request);
                continue;
            }
            let conf = ndbfs::execute(disk, request);
            k.on_fs_conf(conf, out, now).expect("file request");
            k.run_jobs(out, now);
        }
    }
}

/// A durable commit's TC_EXECUTE_CONF waits until the global checkpoint holding its GCI is
/// saved, the redo log synced and both copies of the sysfile written, and then names that
/// GCI; a plain commit beside it is answered at once. The save starts at once (the node asks
/// the master, GCP_SAVE_WANTED), not after TimeBetweenGlobalCheckpoints.
#[test]
fn a_durable_commit_is_answered_once_its_checkpoint_is_saved() {
    let (mut k, mut out, mut disk, start) = started_with_files("");
    let t = create_table_saved(&mut k, &mut out, &mut disk, start);
    let gci = k.current_gci();
    durable_insert(&mut k, &mut out, 50, 10, &t, 5);
    op(
        &mut k,
        &mut out,
        50,
        11,
        &t,
        true,
        OperationType::Insert,
        6,
        1,
        ExecType::Commit,
    );
    assert!(
        conf_gci(&out, 11).is_some_and(|g| g >= gci),
        "a plain commit is answered at once"
    );
    assert_eq!(answered(&out, 10), None, "the durable commit waits");
    assert_eq!(k.transaction_count(), 1, "its record stays while it waits");
    // The save already runs: once the redo is synced, the node is told to write its sysfile,
    // with no timer tick.
    let now = start;
    let sysfiles = pump_files(&mut k, &mut out, &mut disk, now);
    assert_eq!(
        sysfiles.len(),
        2,
        "the first copy of the sysfile is written and synced, the second not yet touched"
    );
    assert!(u64::from(k.restorable_gci()) < gci >> 32);
    assert_eq!(
        answered(&out, 10),
        None,
        "the redo is synced, the sysfile not yet written"
    );
    for request in sysfiles {
        let conf = ndbfs::execute(&mut disk, request);
        k.on_fs_conf(conf, &mut out, now).expect("sysfile");
        k.run_jobs(&mut out, now);
    }
    assert_eq!(
        answered(&out, 10),
        None,
        "one copy of the sysfile is not enough"
    );
    let second = pump_files(&mut k, &mut out, &mut disk, now);
    assert_eq!(second.len(), 2, "the second copy once the first is synced");
    for request in second {
        let conf = ndbfs::execute(&mut disk, request);
        k.on_fs_conf(conf, &mut out, now).expect("sysfile");
        k.run_jobs(&mut out, now);
    }
    assert_eq!(
        u64::from(k.restorable_gci()),
        gci >> 32,
        "the checkpoint is saved"
    );
    assert_eq!(
        conf_gci(&out, 10),
        Some(gci),
        "then the durable commit is answered"
    );
    assert_eq!(k.transaction_count(), 0);
    assert_eq!(k.tc.saving_count(), 0);
}

/// While durable commits wait for their save each keeps its transaction record, so
/// MaxNoOfConcurrentTransactions bounds them and the next new transaction is refused with 233;
/// the save answers them all, in GCI order.
#[test]
fn waiting_durable_commits_are_bounded_by_transaction_records() {
    let (mut k, mut out, mut disk, t) = with_files("MaxNoOfConcurrentTransactions=32\n");
    let now = Instant::now();
    let rids: Vec<u32> = (100..132).collect();
    for (i, &rid) in rids.iter().enumerate() {
        durable_insert(&mut k, &mut out, 50, rid, &t, 10 + i as i32);
    }
    assert!(rids.iter().all(|&rid| answered(&out, rid).is_none()));
    assert_eq!(k.transaction_count(), 32);
    op(
        &mut k,
        &mut out,
        51,
        200,
        &t,
        true,
        OperationType::Insert,
        99,
        1,
        ExecType::Commit,
    );
    assert_eq!(execute_ref(&out, 200).code, 233, "no record is free");
    for _ in 0..8 {
        for request in pump_files(&mut k, &mut out, &mut disk, now) {
            let conf = ndbfs::execute(&mut disk, request);
            k.on_fs_conf(conf, &mut out, now).expect("sysfile");
            k.run_jobs(&mut out, now);
        }
    }
    let answers: Vec<u64> = out
        .frames
        .iter()
        .filter(|(_, s, r, _)| *s == gsn::TC_EXECUTE_CONF && rids.contains(r))
        .map(|(_, _, _, b)| {
            TcExecuteConf::decode(b)
                .expect("decode")
                .gci
                .expect("a GCI")
        })
        .collect();
    assert_eq!(answers.len(), rids.len(), "each answered once");
    assert!(answers.windows(2).all(|w| w[0] <= w[1]), "{answers:x?}");
    assert!(u64::from(k.restorable_gci()) >= answers[answers.len() - 1] >> 32);
    assert_eq!(k.transaction_count(), 0);
}

/// A kernel with files (on `MemDisk`) and table `t`, started; `extra` goes into
/// `[ndbd default]`.
fn with_files(extra: &str) -> (Kernel, Out, MemDisk, TableInfo) {
    let (mut k, mut out, mut disk, now) = started_with_files(extra);
    let t = create_table_saved(&mut k, &mut out, &mut disk, now);
    (k, out, disk, t)
}

/// A kernel with files (on `MemDisk`), started, and the time it started at; `extra` goes
/// into `[ndbd default]`.
fn started_with_files(extra: &str) -> (Kernel, Out, MemDisk, Instant) {
    let ini = INI.replace("[ndbd]\n", &format!("{extra}[ndbd]\n"));
    let config = rndb_config::parse_str(&ini, Path::new("t.ini")).expect("config");
    let mut k = Kernel::with_files(&config, &config.data_nodes[0], true);
    let mut out = Out::default();
    let mut disk = MemDisk::default();
    let now = Instant::now();
    k.run_jobs(&mut out, now);
    assert!(pump_files(&mut k, &mut out, &mut disk, now).is_empty());
    (k, out, disk, now)
}

/// An API node that disconnects while its durable commit waits leaves nothing behind: the
/// record goes at once, the commit stands, and the checkpoint answers nobody.
#[test]
fn a_durable_commit_whose_api_left_is_forgotten() {
    let (mut k, mut out, mut disk, t) = with_files("");
    let now = Instant::now();
    durable_insert(&mut k, &mut out, 50, 10, &t, 5);
    assert_eq!(k.transaction_count(), 1);
    k.on_disconnect(NodeId(50), &mut out, now);
    k.run_jobs(&mut out, now);
    assert_eq!(k.transaction_count(), 0);
    assert_eq!(k.tc.saving_count(), 0);
    let restorable = k.restorable_gci();
    // The sysfile's copies, one after the other.
    loop {
        let sysfiles = pump_files(&mut k, &mut out, &mut disk, now);
        if sysfiles.is_empty() {
            break;
        }
        for request in sysfiles {
            let conf = ndbfs::execute(&mut disk, request);
            k.on_fs_conf(conf, &mut out, now).expect("sysfile");
            k.run_jobs(&mut out, now);
        }
    }
    assert!(k.restorable_gci() > restorable, "the save went on");
    assert_eq!(answered(&out, 10), None);
    // The row was committed: inserting it again finds it.
    op(
        &mut k,
        &mut out,
        51,
        11,
        &t,
        true,
        OperationType::Insert,
        5,
        1,
        ExecType::Commit,
    );
    assert_eq!(execute_ref(&out, 11).code, 630);
}

/// A durable commit whose global checkpoint is never saved (here its files are never written,
/// as on a node group whose every disk failed) is answered 4012 (unknown result) twice
/// TimeBetweenGlobalCheckpointsTimeout after it was held, and its transaction record goes;
/// a save that comes after answers it no second time.
#[test]
fn a_durable_commit_whose_checkpoint_is_never_saved_ends_as_unknown() {
    let (mut k, mut out, mut disk, t) = with_files("TimeBetweenGlobalCheckpointsTimeout=1000\n");
    let held = Instant::now();
    durable_insert(&mut k, &mut out, 50, 10, &t, 5);
    assert_eq!(answered(&out, 10), None, "the durable commit waits");
    assert_eq!(k.tc.saving_count(), 1);
    k.on_timer(held + Duration::from_millis(1900));
    k.run_jobs(&mut out, held + Duration::from_millis(1900));
    assert_eq!(answered(&out, 10), None, "not before twice the timeout");
    assert_eq!(k.transaction_count(), 1);
    let late = held + Duration::from_millis(2100);
    k.on_timer(late);
    k.run_jobs(&mut out, late);
    let error = execute_ref(&out, 10);
    assert_eq!(error.code, 4012, "{error:?}");
    assert!(error.detail.contains("durable is unknown"), "{error:?}");
    assert_eq!(k.transaction_count(), 0, "its record is free again");
    assert_eq!(k.tc.saving_count(), 0);
    // The save completes after all: nothing more is answered.
    let answers = out.frames.len();
    for _ in 0..4 {
        for request in pump_files(&mut k, &mut out, &mut disk, late) {
            let conf = ndbfs::execute(&mut disk, request);
            k.on_fs_conf(conf, &mut out, late).expect("sysfile");
            k.run_jobs(&mut out, late);
        }
    }
    assert!(
        !out.frames[answers..].iter().any(|(_, _, r, _)| *r == 10),
        "answered twice"
    );
}

/// A schema change whose checkpoint is never saved (the sysfile writes never complete) is
/// answered 4012 after twice TimeBetweenGlobalCheckpointsTimeout, as a durable commit is:
/// applied, its durability unknown.
#[test]
fn a_schema_change_whose_checkpoint_is_never_saved_ends_as_unknown() {
    let (mut k, mut out, mut disk, held) =
        started_with_files("TimeBetweenGlobalCheckpointsTimeout=1000\n");
    send_create_table(&mut k, &mut out);
    // Its save's redo sync runs; the sysfile writes never complete.
    let _sysfiles = pump_files(&mut k, &mut out, &mut disk, held);
    let answer = |out: &Out| {
        (out.frames.iter().rev())
            .find(|(_, _, r, _)| *r == 1)
            .map(|(_, s, _, payload)| (*s, payload.clone()))
    };
    assert_eq!(
        answer(&out),
        None,
        "the CREATE TABLE waits for its checkpoint"
    );
    let early = held + Duration::from_millis(1900);
    k.on_timer(early);
    k.run_jobs(&mut out, early);
    assert_eq!(answer(&out), None, "not before twice the timeout");
    let late = held + Duration::from_millis(2100);
    k.on_timer(late);
    k.run_jobs(&mut out, late);
    let (signal, payload) = answer(&out).expect("answered");
    assert_eq!(signal, gsn::CREATE_TABLE_REF);
    let refusal = Refusal::decode(&payload).expect("refusal");
    assert_eq!(refusal.code, 4012, "{refusal:?}");
    assert!(
        refusal.detail.contains("durability is unknown"),
        "{refusal:?}"
    );
}

/// A backup's changes wait in memory until its files exist (here its directory listing never
/// completes, as on a stalled backup disk); once they pass BackupLogBufferSize the backup fails
/// with 1324, stops logging, and the node goes on committing.
#[test]
fn a_backup_whose_changes_outgrow_the_log_buffer_fails_with_1324() {
    use rndb_mgm::node_report::{BackupCommand, BackupPhase};
    let (mut k, mut out, mut disk, t) = with_files("");
    let now = Instant::now();
    assert!(pump_files(&mut k, &mut out, &mut disk, now).is_empty());
    k.set_backup_dir("/backup/BACKUP".into(), 2048, 0);
    let start = BackupCommand::Start {
        id: 1,
        participants: vec![1],
        token: 7,
        snapshot_start: false,
    };
    k.backup_command(start, now);
    let held = k.take_fs_requests();
    assert!(
        held.iter()
            .any(|r| r.op.path() == "/backup/BACKUP/BACKUP-1"),
        "the directory is listed first: {held:?}"
    );
    let phase = |k: &Kernel| k.backup_progress().and_then(|p| p.phase);
    // Each insert logs a record of about 40 bytes.
    for i in 0..200 {
        insert_committed(&mut k, &mut out, &t, 1000 + i, 100 + i as i32, 5);
        k.on_timer(now);
        k.run_jobs(&mut out, now);
        if phase(&k) == Some(BackupPhase::Failed) {
            break;
        }
    }
    let progress = k.backup_progress().expect("a backup");
    assert_eq!(progress.phase, Some(BackupPhase::Failed));
    assert_eq!(progress.error, 1324, "{}", progress.error_text);
    assert!(
        progress.error_text.contains("BackupLogBufferSize is 2048"),
        "{}",
        progress.error_text
    );
    // Logging stopped; the node commits on.
    insert_committed(&mut k, &mut out, &t, 2000, 999, 5);
    assert!(k
        .lqh
        .fragments
        .values()
        .flatten()
        .all(|f| f.backup_log.is_none()));
}

/// A SNAPSHOTSTART backup whose scan meets rows changed after its start (the changes come in
/// a later global checkpoint, before the scan begins) restores, as `ndb_restore` replays it,
/// to the rows as they were at its snapshot GCP: the row updated, the row deleted and the row
/// inserted meanwhile are taken back. Replayed to its stop GCP instead, it holds the changes.
#[test]
fn a_snapshotstart_backup_takes_back_the_changes_its_scan_met() {
    use crate::ndbfs::backup::{self as layout, BackupCtl, LogReplay};
    use rndb_mgm::node_report::{BackupCommand, BackupPhase};
    let (mut k, mut out, mut disk, t) = with_files("");
    let mut now = Instant::now();
    for key in 1..=3 {
        insert_committed(&mut k, &mut out, &t, 100 + key as u32, key, 10 * key);
    }
    // Every file request runs but the backup's, held until `release`.
    let mut held: Vec<FsRequest> = Vec::new();
    let mut pump = |k: &mut Kernel, out: &mut Out, disk: &mut MemDisk, now, release: bool| loop {
        let mut requests = k.take_fs_requests();
        if release {
            requests.append(&mut held);
        }
        let (backup, others): (Vec<_>, Vec<_>) =
            (requests.into_iter()).partition(|r| !release && r.op.path().starts_with("/backup"));
        held.extend(backup);
        if others.is_empty() {
            return;
        }
        for request in others {
            let conf = ndbfs::execute(disk, request);
            k.on_fs_conf(conf, out, now).expect("file request");
            k.run_jobs(out, now);
        }
    };
    pump(&mut k, &mut out, &mut disk, now, false);
    k.set_backup_dir("/backup/BACKUP".into(), 16 << 20, 0);
    let start = BackupCommand::Start {
        id: 1,
        participants: vec![1],
        token: 7,
        snapshot_start: true,
    };
    k.backup_command(start, now);
    let start_gcp = (k.backup_progress().expect("a backup").start_gci >> 32) as u32;
    // Global checkpoints go on (the backup's files wait): the changes get a later GCP.
    for _ in 0..100 {
        if (k.current_gci() >> 32) as u32 > start_gcp {
            break;
        }
        now += Duration::from_millis(150);
        tick(&mut k, &mut out, now);
        pump(&mut k, &mut out, &mut disk, now, false);
    }
    assert!((k.current_gci() >> 32) as u32 > start_gcp, "a later GCP");
    let change = |k: &mut Kernel, out: &mut Out, rid, op_type, key, val| {
        op(
            k,
            out,
            50,
            rid,
            &t,
            true,
            op_type,
            key,
            val,
            ExecType::Commit,
        );
        assert_eq!(answered(out, rid), Some(gsn::TC_EXECUTE_CONF));
    };
    change(&mut k, &mut out, 201, OperationType::Update, 1, 99);
    change(&mut k, &mut out, 202, OperationType::Delete, 2, 0);
    change(&mut k, &mut out, 203, OperationType::Insert, 4, 40);
    // Now the files, and the scan, which meets the changed rows.
    let mut stopped = false;
    for _ in 0..200 {
        pump(&mut k, &mut out, &mut disk, now, true);
        let progress = k.backup_progress().expect("a backup").clone();
        match progress.phase {
            Some(BackupPhase::Completed) => break,
            Some(BackupPhase::Scanned) if !stopped => {
                stopped = true;
                let stop = BackupCommand::Stop {
                    id: 1,
                    stop_gci: (progress.scanned_gci >> 32) as u32,
                    snapshot_gci: Some(start_gcp),
                };
                k.backup_command(stop, now);
            }
            Some(BackupPhase::Failed) => panic!("{progress:?}"),
            _ => {}
        }
        now += Duration::from_millis(150);
        tick(&mut k, &mut out, now);
    }
    let progress = k.backup_progress().expect("a backup");
    assert_eq!(progress.phase, Some(BackupPhase::Completed), "{progress:?}");

    let dir = "/backup/BACKUP/BACKUP-1";
    let mut read = |name: String| {
        let path = format!("{dir}/{name}");
        disk.read(&path)
            .expect("read")
            .unwrap_or_else(|| panic!("{path}"))
    };
    let ctl = BackupCtl::from_file(&read(layout::ctl_file(1, 1)), 1, 1).expect("ctl");
    assert_eq!(ctl.snapshot_gci, Some(start_gcp));
    let data_bytes = read(layout::data_file(1, 1));
    let log_bytes = read(layout::log_file(1, 1));
    let data = layout::read_rows(&data_bytes, layout::DATA_MAGIC, 1, 1).expect("data");
    let log = layout::read_rows(&log_bytes, layout::LOG_MAGIC, 1, 1).expect("log");
    let def = &t.def;
    let restored = |ctl: &BackupCtl| {
        let mut rows = std::collections::BTreeMap::new();
        let mut replay = LogReplay::new(ctl);
        let key =
            |r: &layout::BackupRow<'_>| Ok::<_, ()>(r.values(def).expect("row")[..1].to_vec());
        let key = |r: &layout::BackupRow<'_>| key(r).map(|k| format!("{k:?}").into_bytes());
        let logged = log
            .iter()
            .filter_map(|&r| replay.take(r, key).expect("replay"));
        for row in data.iter().copied().chain(logged.collect::<Vec<_>>()) {
            let values = row.values(def).expect("row");
            let (Value::Int32(k), Value::Int32(v)) = (&values[0], &values[1]) else {
                panic!("{values:?}");
            };
            match row.kind {
                ndbfs::format::kind::DELETE => rows.remove(k),
                _ => rows.insert(*k, *v),
            };
        }
        rows
    };
    let scanned: Vec<Vec<Value>> = data.iter().map(|r| r.values(def).expect("row")).collect();
    assert!(
        scanned.contains(&vec![Value::Int32(1), Value::Int32(99)]),
        "the scan met the update: {scanned:?}"
    );
    assert_eq!(
        restored(&ctl).into_iter().collect::<Vec<_>>(),
        vec![(1, 10), (2, 20), (3, 30)],
        "as of the snapshot GCP {start_gcp}"
    );
    let at_stop = BackupCtl {
        snapshot_gci: None,
        ..ctl.clone()
    };
    assert_eq!(
        restored(&at_stop).into_iter().collect::<Vec<_>>(),
        vec![(1, 99), (3, 30), (4, 40)],
        "as of the stop GCP {}",
        ctl.stop_gci
    );
}

/// A backup's scan writes BackupWriteSize at a time (a step ends past it by at most one row),
/// with at most BackupDataBufferSize of them out at once, and its data file holds every row.
#[test]
fn a_backup_scan_writes_backup_write_size_at_a_time_within_its_data_buffer() {
    use rndb_mgm::node_report::{BackupCommand, BackupPhase};
    let (mut k, mut out, mut disk, t) =
        with_files("BackupWriteSize=32K\nBackupMaxWriteSize=256K\nBackupDataBufferSize=512K\n");
    let now = Instant::now();
    // About 35 bytes a row in the data file: some 700 KB, more than the data buffer holds.
    for i in 0..20_000 {
        insert_committed(&mut k, &mut out, &t, 1000 + i, 10 + i as i32, 7);
    }
    assert!(pump_files(&mut k, &mut out, &mut disk, now).is_empty());
    k.set_backup_dir("/backup/BACKUP".into(), 16 << 20, 0);
    let start = BackupCommand::Start {
        id: 1,
        participants: vec![1],
        token: 7,
        snapshot_start: false,
    };
    k.backup_command(start, now);
    let data = "/backup/BACKUP/BACKUP-1/BACKUP-1-0.1.Data";
    let (mut writes, mut out_at_once) = (Vec::new(), 0);
    for _ in 0..1000 {
        let requests = k.take_fs_requests();
        if requests.is_empty() {
            break;
        }
        let pending = (requests.iter())
            .filter(|r| matches!(&r.op, FsOp::Write { path, .. } if path == data))
            .count();
        out_at_once = out_at_once.max(pending);
        for request in requests {
            if let FsOp::Write { path, bytes, .. } = &request.op {
                if path == data {
                    writes.push(bytes.len());
                }
            }
            let conf = ndbfs::execute(&mut disk, request);
            k.on_fs_conf(conf, &mut out, now).expect("file request");
            k.run_jobs(&mut out, now);
        }
    }
    let progress = k.backup_progress().expect("a backup");
    assert_eq!(progress.phase, Some(BackupPhase::Scanned), "{progress:?}");
    assert_eq!(progress.records, 20_000);
    assert!(writes.len() > 16, "{} writes", writes.len());
    assert!(writes.iter().all(|&w| w < 32 * 1024 + 100), "{writes:?}");
    assert_eq!(out_at_once, 16, "512K of 32K writes at once");
}

/// Reads one page of ndbinfo table `table` from `position` as API node 50.
fn dbinfo_page(k: &mut Kernel, out: &mut Out, table: u32, position: Position) -> DbinfoScanConf {
    let mut b = Vec::new();
    DbinfoScanReq {
        table_id: table,
        position,
    }
    .encode(&mut b);
    frame(k, out, 50, gsn::DBINFO_SCANREQ, 900, &b);
    let (_, signal, _, payload) = out.frames.last().expect("answer");
    assert_eq!(*signal, gsn::DBINFO_SCANCONF);
    DbinfoScanConf::decode(payload).expect("page")
}

/// Every page of ndbinfo table `table`, read from the start: each goes on past the last.
fn dbinfo_pages(k: &mut Kernel, out: &mut Out, table: u32) -> Vec<DbinfoScanConf> {
    dbinfo_pages_from(k, out, table, Position::default())
}

/// Every page of ndbinfo table `table` from `position` on.
fn dbinfo_pages_from(
    k: &mut Kernel,
    out: &mut Out,
    table: u32,
    mut position: Position,
) -> Vec<DbinfoScanConf> {
    let mut pages = Vec::new();
    loop {
        let page = dbinfo_page(k, out, table, position);
        let next = page.next;
        pages.push(page);
        match next {
            Some(next) => {
                assert!(next > position, "{next:?} after {position:?}");
                position = next;
            }
            None => return pages,
        }
    }
}

/// cluster_locks is walked in place, a bounded number of row slots a request: 1000 rows
/// locked among 20 000 come in pages, each once; the locks of a transaction ended between two
/// pages are gone from the later ones; with no lock, a walk of 20 000 slots takes two requests
/// (`RECORDS_PER_REQUEST` each); a transaction that upgraded its shared lock holds it once,
/// exclusively.
#[test]
fn cluster_locks_are_walked_in_pages_of_bounded_work() {
    let (mut k, mut out, t) = setup();
    for key in 10..20_010 {
        insert_committed(&mut k, &mut out, &t, 100_000 + key as u32, key, 0);
    }
    for i in 0..1000 {
        op(
            &mut k,
            &mut out,
            51,
            700,
            &t,
            i == 0,
            OperationType::Update,
            10 + i * 20,
            1,
            ExecType::NoCommit,
        );
    }
    let pages = dbinfo_pages(&mut k, &mut out, table_id::CLUSTER_LOCKS);
    // ~100 KiB of rows: several pages, none much over PAGE_BYTES.
    assert!(pages.len() >= 6, "{} pages", pages.len());
    for page in &pages {
        let mut b = Vec::new();
        page.encode(&mut b);
        assert!(b.len() < ndbinfo::PAGE_BYTES + 1024, "{} bytes", b.len());
    }
    let rows: Vec<_> = pages.into_iter().flat_map(|p| p.rows).collect();
    assert_eq!(rows.len(), 1000);
    let locked: BTreeSet<(String, String)> = (rows.iter())
        .map(|r| (r[3].to_string(), r[4].to_string()))
        .collect();
    assert_eq!(locked.len(), 1000, "each locked row once");
    assert!(rows
        .iter()
        .all(|r| r[6] == "X".into() && r[9] == "UPDATE".into()));

    // Rolled back after the first page: the rest is read as it is now.
    let first = dbinfo_page(
        &mut k,
        &mut out,
        table_id::CLUSTER_LOCKS,
        Position::default(),
    );
    let b = exec_req(false, ExecType::Rollback, AbortOption::AbortOnError, 0);
    frame(&mut k, &mut out, 51, gsn::TC_EXECUTE_REQ, 700, &b);
    assert_eq!(answered(&out, 700), Some(gsn::TC_EXECUTE_CONF));
    let rest = first.next.expect("more than one page");
    let later = dbinfo_pages_from(&mut k, &mut out, table_id::CLUSTER_LOCKS, rest);
    assert!(later.iter().all(|p| p.rows.is_empty()));

    // No lock left: the 20 002 row slots take two requests of RECORDS_PER_REQUEST each.
    let pages = dbinfo_pages(&mut k, &mut out, table_id::CLUSTER_LOCKS);
    assert_eq!(pages.len(), 2);
    assert!(pages.iter().all(|p| p.rows.is_empty()));

    // A shared lock upgraded by its own transaction: one entry, exclusive.
    op(
        &mut k,
        &mut out,
        51,
        701,
        &t,
        true,
        OperationType::Read,
        1,
        0,
        ExecType::NoCommit,
    );
    op(
        &mut k,
        &mut out,
        51,
        701,
        &t,
        false,
        OperationType::Update,
        1,
        5,
        ExecType::NoCommit,
    );
    let rows: Vec<_> = dbinfo_pages(&mut k, &mut out, table_id::CLUSTER_LOCKS)
        .into_iter()
        .flat_map(|p| p.rows)
        .collect();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (rows[0][6].to_string(), rows[0][9].to_string()),
        ("X".into(), "UPDATE".into())
    );
}

/// API node `from` subscribes to `t` (request `rid`); the answer's start epoch.
fn subscribe(k: &mut Kernel, out: &mut Out, from: u16, rid: u32, t: &TableInfo) -> u64 {
    use rndb_protocol::suma::{SubStartConf, SubStartReq};
    let mut b = Vec::new();
    SubStartReq {
        table_id: t.table_id,
        table_version: t.table_version,
    }
    .encode(&mut b);
    frame(k, out, from, gsn::SUB_START_REQ, rid, &b);
    let (_, _, _, payload) = (out.frames.iter())
        .rev()
        .find(|(to, s, r, _)| *to == NodeId(from) && *r == rid && *s == gsn::SUB_START_CONF)
        .expect("SUB_START_CONF");
    SubStartConf::decode(payload).expect("decode").start_gci
}

/// Ticks past one TimeBetweenEpochs at a time until the master completed `epochs` more.
fn run_epochs(k: &mut Kernel, out: &mut Out, now: &mut Instant, epochs: u32) {
    for _ in 0..epochs {
        *now += Duration::from_millis(150);
        tick(k, out, *now);
    }
}

/// SUMA's frames to API node `to` of the subscription `rid`, in order.
fn stream(out: &Out, to: u16, rid: u32) -> Vec<(u16, Vec<u8>)> {
    (out.frames.iter())
        .filter(|(n, s, r, _)| *n == NodeId(to) && *r == rid && (50..=56).contains(s))
        .map(|(_, s, _, p)| (*s, p.clone()))
        .collect()
}

/// A subscriber gets each change committed after its subscription once its epoch is complete,
/// with the commit's GCI and the row's images, then the epoch's report; an abort's change never
/// comes; once it unsubscribes nothing more comes.
#[test]
fn suma_sends_each_committed_change_with_its_epoch_then_the_report() {
    use rndb_protocol::suma::{ChangeKind, SubGcpCompleteRep, SubTableData};
    let (mut k, mut out, t) = setup();
    let mut now = Instant::now();
    run_epochs(&mut k, &mut out, &mut now, 1);
    let start = subscribe(&mut k, &mut out, 50, 900, &t);
    run_epochs(&mut k, &mut out, &mut now, 1);
    op(
        &mut k,
        &mut out,
        50,
        901,
        &t,
        true,
        OperationType::Update,
        1,
        7,
        ExecType::Commit,
    );
    let gci = conf_gci(&out, 901).expect("a commit's GCI");
    assert!(
        gci >= start,
        "the change is in an epoch the subscription covers"
    );
    op(
        &mut k,
        &mut out,
        50,
        902,
        &t,
        true,
        OperationType::Insert,
        9,
        1,
        ExecType::NoCommit,
    );
    op(
        &mut k,
        &mut out,
        50,
        902,
        &t,
        false,
        OperationType::Delete,
        2,
        0,
        ExecType::Rollback,
    );
    assert!(
        !stream(&out, 50, 900)
            .iter()
            .any(|(s, _)| *s == gsn::SUB_TABLE_DATA),
        "nothing before the epoch completes"
    );
    run_epochs(&mut k, &mut out, &mut now, 2);
    let frames = stream(&out, 50, 900);
    let data: Vec<_> = (frames.iter())
        .filter(|(s, _)| *s == gsn::SUB_TABLE_DATA)
        .map(|(_, p)| SubTableData::decode(p).expect("decode").gci)
        .collect();
    assert_eq!(
        data,
        [gci],
        "the update, once, in its commit's epoch: {frames:?}"
    );
    let change = (frames.iter())
        .find(|(s, _)| *s == gsn::SUB_TABLE_DATA)
        .map(|(_, p)| SubTableData::decode(p).expect("decode"))
        .expect("the change");
    assert_eq!(change.kind, ChangeKind::Update);
    assert!(!change.after.is_empty() && !change.before.is_empty());
    let at = frames
        .iter()
        .position(|(s, _)| *s == gsn::SUB_TABLE_DATA)
        .unwrap();
    let reported = (frames[at..].iter())
        .filter(|(s, _)| *s == gsn::SUB_GCP_COMPLETE_REP)
        .map(|(_, p)| SubGcpCompleteRep::decode(p).expect("decode"))
        .next()
        .expect("a report after the change");
    assert!(reported.gci >= gci && reported.flags == 0, "{reported:?}");
    frame(&mut k, &mut out, 50, gsn::SUB_STOP_REQ, 900, &[]);
    assert_eq!(
        stream(&out, 50, 900).last().map(|f| f.0),
        Some(gsn::SUB_STOP_CONF)
    );
    let before = stream(&out, 50, 900).len();
    op(
        &mut k,
        &mut out,
        50,
        903,
        &t,
        true,
        OperationType::Update,
        1,
        8,
        ExecType::Commit,
    );
    run_epochs(&mut k, &mut out, &mut now, 2);
    assert_eq!(
        stream(&out, 50, 900).len(),
        before,
        "nothing after the stop"
    );
}

/// A subscriber that does not take its frames (a full send buffer) keeps its completed epochs
/// queued up to MaxBufferedEpochs; past it, its link is closed and its subscription ends, and
/// the other subscriber is served on.
#[test]
fn suma_closes_a_subscriber_lagging_past_max_buffered_epochs() {
    let (mut k, mut out, t) = setup_with("MaxBufferedEpochs=3\n");
    let mut now = Instant::now();
    subscribe(&mut k, &mut out, 50, 900, &t);
    subscribe(&mut k, &mut out, 51, 901, &t);
    out.overloaded.insert(NodeId(50));
    run_epochs(&mut k, &mut out, &mut now, 3);
    assert!(
        out.closed.is_empty(),
        "three epochs queued: {:?}",
        out.closed
    );
    run_epochs(&mut k, &mut out, &mut now, 2);
    let (node, reason) = out
        .closed
        .first()
        .expect("the lagging subscriber's link closed");
    assert_eq!(*node, NodeId(50));
    assert!(reason.contains("MaxBufferedEpochs (3)"), "{reason}");
    assert_eq!(k.suma.subscriber_count(), 1, "node 51's subscription stays");
    let reports = |out: &Out| {
        stream(out, 51, 901)
            .iter()
            .filter(|(s, _)| *s == gsn::SUB_GCP_COMPLETE_REP)
            .count()
    };
    let served = reports(&out);
    run_epochs(&mut k, &mut out, &mut now, 2);
    assert!(reports(&out) > served, "node 51 is served on");
}

/// Changes of epochs not complete past MaxBufferedEpochBytes are dropped, and the report that
/// covers them says so (the subscriber then takes another replica's copy, or marks the epoch
/// inconsistent); reports after them are whole again.
#[test]
fn suma_drops_changes_past_max_buffered_epoch_bytes_and_says_so() {
    use rndb_protocol::suma::{SubGcpCompleteRep, SUB_GCP_DATA_LOST};
    let mut k = kernel_with("");
    let mut out = Out::default();
    let def = TableDef::new(
        "big",
        vec![
            ColumnDef::key("k", ColumnType::Int32),
            ColumnDef::new("v", ColumnType::Varbinary(8000)),
        ],
    );
    let mut b = Vec::new();
    signals::encode_table_def(&mut b, &def);
    frame(&mut k, &mut out, 50, gsn::CREATE_TABLE_REQ, 1, &b);
    let t = TableInfo::decode(&out.frames.last().expect("answer").3).expect("table info");
    let mut now = Instant::now();
    subscribe(&mut k, &mut out, 50, 900, &t);
    run_epochs(&mut k, &mut out, &mut now, 1);
    // 26214400 bytes (the default) of changes within one epoch: a row of 8000 bytes inserted,
    // then updated (each change holds both images) 1700 times.
    for key in 0..1700 {
        let kind = if key == 0 {
            OperationType::Insert
        } else {
            OperationType::Update
        };
        let mut req = key_op(&t, true, kind, 0, 0);
        req.attrs = vec![(1, Value::Varbinary(vec![key as u8; 8000]))];
        let mut b = Vec::new();
        req.encode(&mut b);
        let rid = 2000 + key as u32;
        frame(&mut k, &mut out, 50, gsn::TCKEYREQ, rid, &b);
        let b = exec_req(true, ExecType::Commit, AbortOption::AbortOnError, 1);
        frame(&mut k, &mut out, 50, gsn::TC_EXECUTE_REQ, rid, &b);
        assert_eq!(answered(&out, rid), Some(gsn::TC_EXECUTE_CONF));
    }
    run_epochs(&mut k, &mut out, &mut now, 3);
    let reports: Vec<SubGcpCompleteRep> = (stream(&out, 50, 900).iter())
        .filter(|(s, _)| *s == gsn::SUB_GCP_COMPLETE_REP)
        .map(|(_, p)| SubGcpCompleteRep::decode(p).expect("decode"))
        .collect();
    assert!(
        reports.iter().any(|r| r.flags & SUB_GCP_DATA_LOST != 0),
        "a report says changes were dropped: {reports:?}"
    );
    assert_eq!(
        reports.last().map(|r| r.flags),
        Some(0),
        "later reports are whole: {reports:?}"
    );
    let data = (stream(&out, 50, 900).iter())
        .filter(|(s, _)| *s == gsn::SUB_TABLE_DATA)
        .count();
    assert!(data < 1700, "the dropped changes were not sent ({data})");
}
