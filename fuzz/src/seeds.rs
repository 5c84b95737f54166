//! The seed corpus, made from the real encoders: one valid input per decoder and frame kind.
//! `rndb-fuzz --write-seeds` writes them to `fuzz/corpus/`; a test checks the committed files
//! are the ones these functions make, so a change of an encoding updates the seeds in the same
//! commit. The config target's seeds are the config parser's own corpus and examples, read where
//! they are (`Target::extra_seeds`). The data node's files are made by the encoders its writers
//! use (`rndb_ndbd::ndbfs::format`), record by record as the redo log, the schema log and a
//! local checkpoint write them.

use rndb_config::NodeId;
use rndb_ndbd::ndbfs::backup::{self, BackupCtl};
use rndb_ndbd::ndbfs::format::{
    self as file_format, kind, FileHeader, LcpCtl, RowChange, SchemaChange, Sysfile,
};
use rndb_protocol::filter::{CmpOp, Filter};
use rndb_protocol::gsn;
use rndb_protocol::interpreter::Program;
use rndb_protocol::lqh::{
    ApiRegConf, FiredChange, IndexBuildDone, IndexBuildRows, LqhCommitReq, LqhKeyConf, LqhKeyRef,
    LqhKeyReq, TcFailAnswer, TcFailQuery, TransOutcome, TransSignal, LQH_COMMIT_BACKUP_ROWS_ONLY,
};
use rndb_protocol::scan::{
    encode_scan_row, FragmentBatch, KeyRange, RangeEnd, ScanNextReq, ScanTabConf, ScanTabReq,
};
use rndb_protocol::schema::{ColumnDef, ColumnType, TableDef, Value};
use rndb_protocol::signals::{
    CreateIndexReq, IndexInfo, IndexName, Refusal, TableInfo, TcExecuteConf, TcExecuteRef,
    TcExecuteReq, TcKeyRef, TcKeyReq, TcKeyRow, FLAG_EXECUTE, FLAG_START_TRANSACTION,
};
use rndb_protocol::{AbortOption, ExecType, IndexKind, LockMode, OperationType, TransId, Writer};
use rndb_transporter::frame::{self, FrameHeader};
use rndb_transporter::handshake::{self, Hello, PROTOCOL_VERSION, SIGNAL_HELLO, SIGNAL_HELLO_CONF};
use rndb_transporter::TransporterKind;

/// One seed file: its target, its file name, its bytes.
pub type Seed = (&'static str, String, Vec<u8>);

/// Every seed of every target.
pub fn all() -> Vec<Seed> {
    let mut seeds = Vec::new();
    seeds.extend(frames());
    seeds.extend(signal_payloads());
    seeds.extend(handshakes());
    seeds.extend(files());
    seeds
}

fn frames() -> Vec<Seed> {
    let header = FrameHeader {
        signal: 20,
        receiver_block: 245,
        sender_block: 0,
        request_id: 7,
    };
    let mut seeds = Vec::new();
    for (name, checksum) in [("plain", false), ("crc", true)] {
        let mut bytes = Vec::new();
        frame::encode_into(&mut bytes, &header, b"", checksum).expect("fits");
        seeds.push(("frame", format!("{name}-empty"), bytes.clone()));
        // Two frames back to back, as a receive buffer holds them.
        frame::encode_into(&mut bytes, &header, &tckeyreq(), checksum).expect("fits");
        seeds.push(("frame", format!("{name}-two"), bytes));
    }
    seeds
}

fn tckeyreq() -> Vec<u8> {
    let mut out = Vec::new();
    TcKeyReq {
        flags: FLAG_START_TRANSACTION | FLAG_EXECUTE,
        op_index: 0,
        op_type: OperationType::Update,
        lock_mode: LockMode::Exclusive,
        table_id: 3,
        table_version: 1,
        replica: 0,
        key: vec![Value::UInt32(1), Value::Varchar("ab".into())],
        attrs: vec![
            (2, Value::Int64(-5)),
            (3, Value::Null),
            (4, Value::Float64(0.5)),
        ],
        program: Some(seed_program()),
    }
    .encode(&mut out);
    // The execute a TCKEYREQ with FLAG_EXECUTE carries: flags, exec type, abort option.
    out.extend_from_slice(&[0, ExecType::Commit as u8, AbortOption::AbortOnError as u8]);
    out
}

/// An interpreted update's program: a condition, then two changes.
fn seed_program() -> Program {
    Program {
        condition: Some(Filter::cmp(2, CmpOp::Ge, Value::Int64(3))),
        exit_code: 6000,
        changes: vec![(2, -3), (5, 1)],
    }
}

/// Each payload is prefixed with the index of its decoder in `targets::DECODERS`.
fn signal_payloads() -> Vec<Seed> {
    let table = TableDef::new(
        "t",
        vec![
            key_column("id", ColumnType::UInt32),
            ColumnDef::new("v", ColumnType::Varbinary(16)),
        ],
    );
    let row = vec![Value::UInt32(1), Value::Varchar("ab".into())];
    let filter = Filter::and(vec![
        Filter::cmp(0, CmpOp::Ge, Value::UInt32(1)),
        Filter::not(Filter::IsNull(2)),
    ]);
    let mut payloads: Vec<Vec<u8>> = vec![Vec::new(); crate::targets::signal_decoder_count()];
    let mut put = |index: usize, encode: &dyn Fn(&mut Vec<u8>)| encode(&mut payloads[index]);
    put(0, &|o| {
        Refusal {
            code: 4010,
            detail: "node failed".into(),
        }
        .encode(o)
    });
    put(1, &|o| {
        TableInfo {
            table_id: 3,
            table_version: 1,
            def: table.clone(),
        }
        .encode(o)
    });
    // A definition with the narrow integer, date and time, fixed-length, ENUM, SET and JSON types.
    let typed = TableDef::new(
        "typed",
        vec![
            key_column("k", ColumnType::Int8),
            ColumnDef::new("a", ColumnType::UInt16),
            ColumnDef::new("b", ColumnType::Int24),
            ColumnDef::new("d", ColumnType::Date),
            ColumnDef::new("t", ColumnType::Datetime(3)),
            ColumnDef::new("s", ColumnType::Timestamp(0)),
            ColumnDef::new("f", ColumnType::Float32),
            ColumnDef::new("c", ColumnType::Char(3)),
            ColumnDef::new("n", ColumnType::Binary(2)),
            ColumnDef::new("y", ColumnType::Year),
            ColumnDef::new("x", ColumnType::Bit(7)),
            ColumnDef::new("m", ColumnType::Decimal(12, 2)),
            ColumnDef::new("h", ColumnType::Time(3)),
            ColumnDef::enumeration("e", &["s", "m"]),
            ColumnDef::set("z", &["a", "b", "c"]),
            ColumnDef::nullable("j", ColumnType::Json),
        ],
    );
    put(2, &|o| rndb_protocol::signals::encode_table_def(o, &typed));
    let index_req = CreateIndexReq {
        table: "t".into(),
        index: "i".into(),
        kind: IndexKind::Ordered,
        columns: vec!["v".into(), "id".into()],
    };
    put(3, &|o| index_req.encode(o));
    put(4, &|o| {
        IndexName {
            table: "t".into(),
            index: "i".into(),
        }
        .encode(o)
    });
    let index_info = IndexInfo {
        index_id: 4,
        index_version: 1,
        table_id: 3,
        table_version: 1,
        kind: IndexKind::Unique,
        name: "i".into(),
        columns: vec![1, 0],
    };
    put(5, &|o| index_info.encode(o));
    put(6, &|o| rndb_protocol::signals::encode_name(o, "t"));
    put(7, &|o| o.extend_from_slice(&tckeyreq()));
    put(8, &|o| TcKeyRow::encode_parts(o, 0, &row));
    put(9, &|o| {
        TcKeyRef {
            op_index: 1,
            code: 626,
        }
        .encode(o)
    });
    let execute = TcExecuteReq {
        flags: 0,
        exec_type: ExecType::Commit,
        abort_option: AbortOption::IgnoreError,
        op_count: 2,
    };
    put(10, &|o| execute.encode(o));
    put(11, &|o| {
        TcExecuteRef {
            code: 266,
            op_index: u32::MAX,
            detail: "timeout".into(),
        }
        .encode(o)
    });
    put(12, &|o| {
        IndexBuildRows {
            hidden_table_id: 9,
            entries: vec![(vec![Value::UInt32(1)], vec![1, 2, 3])],
        }
        .encode(o)
    });
    put(13, &|o| {
        IndexBuildDone {
            hidden_table_id: 9,
            code: 0,
        }
        .encode(o)
    });
    put(14, &|o| {
        TcFailQuery {
            trans: TransId(0x3_0000_0001),
            tc_node: 2,
        }
        .encode(o)
    });
    put(15, &|o| {
        TcFailAnswer {
            trans: TransId(0x3_0000_0001),
            outcome: TransOutcome::Committed,
            gci: 5 << 32 | 1,
        }
        .encode(o)
    });
    let lqh_req = LqhKeyReq {
        trans: TransId(0x3_0000_0001),
        tc_node: 1,
        token: 5,
        op_index: 0,
        op_type: OperationType::Write,
        lock_mode: LockMode::Exclusive,
        table_id: 3,
        fragment: 1,
        key_bytes: vec![2, 1, 0, 0, 0],
        key: vec![Value::UInt32(1)],
        attrs: vec![(1, Value::Varbinary(vec![1, 2]))],
        run: 7,
        chain: vec![(2, 9)],
        flags: 1,
        gci: 0,
        program: Some(seed_program()),
    };
    put(16, &|o| lqh_req.encode(o));
    let lqh_conf = LqhKeyConf {
        trans: TransId(0x3_0000_0001),
        token: 5,
        op_index: 0,
        row: Some(row.clone()),
        fired: vec![FiredChange {
            hidden_table_id: 9,
            op_type: OperationType::Insert,
            key: vec![Value::Int32(1)],
            pk: vec![9, 9],
        }],
        flags: 1,
    };
    put(17, &|o| lqh_conf.encode(o));
    let lqh_ref = LqhKeyRef {
        trans: TransId(0x3_0000_0001),
        token: 5,
        op_index: 0,
        code: 626,
        detail: "no such row".into(),
        flags: 0,
    };
    put(18, &|o| lqh_ref.encode(o));
    put(19, &|o| {
        TransSignal {
            trans: TransId(0x3_0000_0001),
        }
        .encode(o)
    });
    put(20, &|o| {
        ApiRegConf {
            started: true,
            data_nodes_up: 2,
            data_nodes: 2,
        }
        .encode(o)
    });
    let scan = ScanTabReq {
        flags: 1,
        trans_request_id: 8,
        table_id: 3,
        table_version: 1,
        index_id: 4,
        index_version: 1,
        lock_mode: LockMode::Read,
        parallelism: 0,
        batch_rows: 64,
        batch_bytes: 8192,
        batch_bytes_total: 65536,
        ranges: vec![KeyRange {
            low: RangeEnd::Included(vec![Value::UInt32(1)]),
            high: RangeEnd::Unbounded,
        }],
        filter: Some(filter.clone()),
        alive: vec![1, 2],
    };
    put(21, &|o| scan.encode(o));
    put(22, &|o| {
        ScanNextReq {
            scan_id: 8,
            close: false,
            fragments: vec![0, 3],
        }
        .encode(o)
    });
    let conf = ScanTabConf {
        fragment_count: 4,
        finished: false,
        fragments: vec![FragmentBatch {
            fragment: 0,
            rows: 2,
            done: true,
        }],
    };
    put(23, &|o| conf.encode(o));
    put(24, &|o| {
        encode_scan_row(o, 0, &fuzz_row());
        encode_scan_row(o, 3, &fuzz_row());
    });
    put(25, &|o| filter.encode(&mut Writer::new(o)));
    put(26, &|o| {
        rndb_protocol::schema::encode_values(&mut Writer::new(o), &fuzz_row())
    });
    put(27, &|o| {
        LqhCommitReq {
            trans: TransId(0x3_0000_0001),
            flags: LQH_COMMIT_BACKUP_ROWS_ONLY,
            gci: 5 << 32 | 2,
        }
        .encode(o)
    });
    put(28, &|o| {
        rndb_protocol::dih::GcpSignal {
            gci: 5 << 32 | 3,
            nodes: [1 << 2, 0, 0, 0],
        }
        .encode(o)
    });
    put(29, &|o| {
        TcExecuteConf {
            gci: Some(5 << 32 | 4),
        }
        .encode(o)
    });
    put(30, &|o| {
        rndb_protocol::signals::ListTablesReq { from_id: 3 }.encode(o)
    });
    put(31, &|o| {
        use rndb_protocol::signals::{ListTablesConf, ListedObject, ObjectKind};
        ListTablesConf {
            objects: vec![
                ListedObject {
                    id: 3,
                    kind: ObjectKind::UserTable,
                    parent_id: 0,
                    name: "t".into(),
                },
                ListedObject {
                    id: 4,
                    kind: ObjectKind::UniqueHashIndex,
                    parent_id: 3,
                    name: "i".into(),
                },
            ],
            more: false,
        }
        .encode(o)
    });
    put(32, &|o| rndb_protocol::qmgr::FailRep { node: 3 }.encode(o));
    put(33, &|o| {
        rndb_protocol::qmgr::CmRegReq {
            started: true,
            run: 7,
        }
        .encode(o)
    });
    put(34, &|o| {
        rndb_protocol::qmgr::StartPermConf {
            gci: 5 << 32 | 2,
            restarts: vec![
                rndb_protocol::dih::RestartId { no: 0, gci: 0 },
                rndb_protocol::dih::RestartId { no: 1, gci: 4 },
            ],
            alive: [0b110, 0, 0, 0],
            files_restore: [0b100, 0, 0, 0],
            rejoined: vec![2],
            schema_seq: 3,
            dict_next_id: 7,
            dictionary: vec![0; 12],
        }
        .encode(o)
    });
    put(35, &|o| {
        rndb_protocol::qmgr::StartPermRef {
            president: 1,
            reason: "data node 3 restarts now".into(),
        }
        .encode(o)
    });
    put(36, &|o| {
        rndb_protocol::qmgr::Arbit {
            ticket: 1 << 48 | 1,
            node: 0,
            nodes: vec![1, 3],
        }
        .encode(o)
    });
    put(37, &|o| {
        rndb_protocol::qmgr::CopyFragReq {
            node: 4,
            gci: 17,
            tables: vec![1, 2, 6],
            alive: [0b11110, 0, 0, 0],
        }
        .encode(o)
    });
    put(38, &|o| {
        rndb_protocol::qmgr::InclNodeReq { node: 4, run: 9 }.encode(o)
    });
    let restarts = vec![
        rndb_protocol::dih::RestartId { no: 0, gci: 0 },
        rndb_protocol::dih::RestartId { no: 2, gci: 9 },
    ];
    put(39, &|o| {
        rndb_protocol::dih::CntrStartReq {
            restorable: 11,
            restarts: restarts.clone(),
        }
        .encode(o)
    });
    put(40, &|o| {
        rndb_protocol::dih::CntrStartConf {
            gci: 11,
            failed: [1 << 3, 0, 0, 0],
            restarts: restarts.clone(),
        }
        .encode(o)
    });
    use rndb_protocol::ndbinfo::{self, table_id};
    put(41, &|o| {
        ndbinfo::DbinfoScanReq {
            table_id: table_id::COUNTERS,
            position: [0, 0, 0, 0],
        }
        .encode(o)
    });
    put(42, &|o| {
        ndbinfo::DbinfoScanConf {
            table_id: table_id::MEMORYUSAGE,
            rows: vec![vec![
                1u32.into(),
                "Data memory".into(),
                4096u64.into(),
                1u64.into(),
                (16u64 << 20).into(),
                512u64.into(),
            ]],
            next: Some([1, 0, 0, 0]),
        }
        .encode(o)
    });
    put(43, &|o| {
        ndbinfo::DbinfoScanRef {
            table_id: 99,
            error: 709,
        }
        .encode(o)
    });
    use rndb_protocol::suma;
    put(44, &|o| {
        suma::SubStartReq {
            table_id: 2,
            table_version: 1,
        }
        .encode(o)
    });
    put(45, &|o| {
        suma::SubStartConf {
            start_gci: 7 << 32 | 2,
            restart: 1,
        }
        .encode(o)
    });
    put(46, &|o| {
        suma::SubTableData {
            gci: 7 << 32 | 2,
            fragment: 1,
            kind: suma::ChangeKind::Update,
            after: &[2, 0, 3, 1, 0, 0, 0, 4, 9, 0, 0, 0, 0, 0, 0, 0],
            before: &[2, 0, 3, 1, 0, 0, 0, 4, 8, 0, 0, 0, 0, 0, 0, 0],
        }
        .encode(o)
    });
    put(47, &|o| {
        suma::SubGcpCompleteRep {
            gci: 7 << 32 | 2,
            flags: suma::SUB_GCP_DATA_LOST,
        }
        .encode(o)
    });
    payloads
        .into_iter()
        .enumerate()
        .map(|(index, payload)| {
            let mut bytes = vec![index as u8];
            bytes.extend_from_slice(&payload);
            ("signals", format!("decoder-{index:02}"), bytes)
        })
        .collect()
}

/// A row of the `signals` target's table (`targets::fuzz_table`).
fn fuzz_row() -> Vec<Value> {
    vec![
        Value::UInt32(1),
        Value::Varchar("name".into()),
        Value::Null,
        Value::Varbinary(vec![0xAB; 3]),
        Value::Float64(1.5),
    ]
}

fn key_column(name: &str, column_type: ColumnType) -> ColumnDef {
    let mut column = ColumnDef::new(name, column_type);
    column.primary_key = true;
    column
}

fn handshakes() -> Vec<Seed> {
    let config = crate::targets::handshake_config();
    let mut seeds = Vec::new();
    for (from, transporter) in [
        (2, TransporterKind::Tcp),
        (3, TransporterKind::Shm),
        (4, TransporterKind::Tcp),
    ] {
        let mut hello = Hello::for_link(&config, NodeId(from), NodeId(1)).expect("a link");
        hello.transporter = transporter;
        // A fixed token: the seeds are the same on every run.
        hello.token = u64::from(from);
        seeds.push((
            "handshake",
            format!("hello-from-{from}"),
            handshake_frame(SIGNAL_HELLO, &hello.encode()),
        ));
    }
    let hello = Hello {
        protocol_version: PROTOCOL_VERSION,
        cluster_id: 0,
        from: NodeId(9),
        to: NodeId(1),
        from_kind: rndb_config::NodeKind::Api,
        transporter: TransporterKind::Uring,
        checksum: false,
        token: 0x5eed,
    };
    seeds.push((
        "handshake",
        "hello-stranger".into(),
        handshake_frame(SIGNAL_HELLO, &hello.encode()),
    ));
    seeds.push((
        "handshake",
        "conf".into(),
        handshake_frame(SIGNAL_HELLO_CONF, &1u16.to_le_bytes()),
    ));
    seeds.push((
        "handshake",
        "ref".into(),
        handshake_frame(
            handshake::SIGNAL_HELLO_REF,
            &handshake::encode_ref(1702, "Node already connected"),
        ),
    ));
    seeds
}

fn handshake_frame(signal: u16, payload: &[u8]) -> Vec<u8> {
    let header = FrameHeader {
        signal,
        ..FrameHeader::default()
    };
    let mut bytes = Vec::new();
    frame::encode_into(&mut bytes, &header, payload, false).expect("fits");
    bytes
}

/// A data node's files: node 1, redo part 0, local checkpoint 3.
fn files() -> Vec<Seed> {
    let header = |magic, part, seq| {
        let mut bytes = Vec::new();
        FileHeader {
            magic,
            node: 1,
            part,
            seq,
        }
        .encode(&mut bytes);
        bytes
    };
    // A row as the data node keeps it (its values in wire encoding), and its canonical key.
    let table = TableDef::new(
        "t",
        vec![
            key_column("id", ColumnType::UInt32),
            ColumnDef::new("v", ColumnType::Varchar(8)),
        ],
    );
    let mut row = Vec::new();
    rndb_protocol::schema::encode_values(
        &mut Writer::new(&mut row),
        &[Value::UInt32(1), Value::Varchar("ab".into())],
    );
    let mut key = Vec::new();
    rndb_protocol::schema::encode_values(&mut Writer::new(&mut key), &[Value::UInt32(1)]);
    let key = rndb_protocol::schema::canonical_key(&table, &table.key_columns(), &key)
        .expect("a valid key");
    let put = RowChange {
        table_id: 3,
        table_version: 1,
        fragment: 0,
        key,
        row: Some(&row),
    };
    let delete = RowChange { row: None, ..put };
    let gci = 7 << 32;
    let mut redo = header(file_format::REDO_MAGIC, 0, 0);
    let mut seeds = vec![("redo", "header-only".to_string(), redo.clone())];
    file_format::append_record(&mut redo, gci, kind::PUT, |b| put.encode(b));
    file_format::append_record(&mut redo, gci | 1, kind::DELETE, |b| delete.encode(b));
    file_format::append_record(&mut redo, gci, kind::GCI_COMPLETED, |_| {});
    file_format::append_record(&mut redo, gci, kind::RESTART, |_| {});
    file_format::append_record(&mut redo, 0, kind::FILE_END, |_| {});
    seeds.push(("redo", "part0-file0".into(), redo));

    let mut request = Vec::new();
    rndb_protocol::signals::encode_table_def(&mut request, &table);
    let create = SchemaChange {
        signal: gsn::CREATE_TABLE_REQ,
        first_id: 3,
        request,
    };
    let mut schema = header(file_format::SCHEMA_MAGIC, 0, 0);
    file_format::append_record(&mut schema, gci, kind::SCHEMA, |b| create.encode(b));
    file_format::append_record(&mut schema, gci, kind::GCI_COMPLETED, |_| {});
    file_format::append_record(&mut schema, gci, kind::RESTART, |_| {});
    seeds.push(("schema_log", "create-table".into(), schema));

    let mut data = header(file_format::LCP_DATA_MAGIC, 0, 3);
    file_format::append_record(&mut data, gci, kind::DELETE, |b| delete.encode(b));
    file_format::append_record(&mut data, gci, kind::PUT, |b| put.encode(b));
    file_format::append_record(&mut data, gci, kind::LCP_END, |b| {
        b.extend_from_slice(&1u64.to_le_bytes())
    });
    seeds.push(("lcp", "data-3".into(), data));
    let ctl = LcpCtl {
        lcp_id: 3,
        base_id: 2,
        max_gci: gci,
        starts: vec![(0, 32), (1, 4096)],
    };
    seeds.push(("lcp", "ctl-3".into(), ctl.file_bytes(1)));
    let sysfile = Sysfile {
        restorable_gci: 7,
        cut_pending: false,
        restarts: vec![
            rndb_protocol::dih::RestartId { no: 0, gci: 0 },
            rndb_protocol::dih::RestartId { no: 1, gci: 5 },
        ],
    };
    seeds.push(("sysfile", "gci-7".into(), sysfile.file_bytes(1)));
    let row = {
        let mut row = Vec::new();
        rndb_protocol::schema::encode_values(
            &mut Writer::new(&mut row),
            &[Value::Int32(7), Value::Varchar("seven".into())],
        );
        row
    };
    for (name, magic, kind) in [
        ("data-2", backup::DATA_MAGIC, kind::PUT),
        ("log-2", backup::LOG_MAGIC, kind::DELETE),
        (
            "log-before-2",
            backup::LOG_MAGIC,
            backup::backup_kind::BEFORE,
        ),
    ] {
        let mut file = backup::header(magic, 2, 1);
        backup::append_row(&mut file, gci, kind::PUT, 5, 0, &row);
        backup::append_row(&mut file, gci, kind, 5, 1, &row);
        backup::append_end(&mut file, gci, 2);
        seeds.push(("backup", name.into(), file));
    }
    let ctl = BackupCtl {
        backup_id: 2,
        start_gci: gci,
        stop_gci: 9,
        snapshot_gci: None,
        records: 2,
        log_records: 2,
        data_bytes: 200,
        log_bytes: 200,
        tables: vec![TableInfo {
            table_id: 5,
            table_version: 1,
            def: table.clone(),
        }],
        indexes: Vec::new(),
    };
    seeds.push(("backup", "ctl-2".into(), ctl.file_bytes(1)));
    let snapshot = BackupCtl {
        snapshot_gci: Some(8),
        ..ctl
    };
    seeds.push(("backup", "ctl-snapshot".into(), snapshot.file_bytes(1)));
    seeds
}
