//! The fuzz targets. Each takes arbitrary bytes; it returns normally for any input a correct
//! decoder handles (accepted or refused with an error) and panics on a bug: a decoder that
//! panicked, or a value it accepted that does not come back the same after encoding.
//!
//! Round trips compare encodings, not values: `decode(x) = a`, `encode(a) = b`, and then
//! `decode(b)` must succeed and encode to `b` again. That holds for NaN floats too, and it does
//! not require the decoder to refuse every non-canonical input.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use rndb_config::{ClusterConfig, NodeId};
use rndb_ndbd::ndbfs::backup::{self as backup_format, BackupCtl};
use rndb_ndbd::ndbfs::format::{self as file_format, FileHeader, LcpCtl, Sysfile};
use rndb_ndbd::ndbfs::read::{self as file_read, FileKind};
use rndb_protocol::dih::{CntrStartConf, CntrStartReq, GcpSignal};
use rndb_protocol::filter::Filter;
use rndb_protocol::lqh::{
    ApiRegConf, IndexBuildDone, IndexBuildRows, LqhCommitReq, LqhKeyConf, LqhKeyRef, LqhKeyReq,
    TcFailAnswer, TcFailQuery, TransSignal,
};
use rndb_protocol::ndbinfo;
use rndb_protocol::qmgr::{
    Arbit, CmRegReq, CopyFragReq, FailRep, InclNodeReq, StartPermConf, StartPermRef,
};
use rndb_protocol::scan::{decode_scan_rows, ScanNextReq, ScanTabConf, ScanTabReq};
use rndb_protocol::schema::{self, ColumnDef, ColumnType, TableDef, Value};
use rndb_protocol::signals::{
    self, CreateIndexReq, IndexInfo, IndexName, Refusal, TableInfo, TcExecuteConf, TcExecuteRef,
    TcExecuteReq, TcKeyRef, TcKeyReq, TcKeyReqView, TcKeyRow,
};
use rndb_protocol::suma;
use rndb_protocol::{Reader, Writer};
use rndb_transporter::frame::{self, Decoded, FRAME_BYTES_MAX, FRAME_HEADER_BYTES};
use rndb_transporter::handshake::{self, Hello};
use rndb_transporter::registry;

/// One fuzz target: a name for the command line and the corpus folder, and its function.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    /// The target's name: `scripts/fuzz <name>`, `fuzz/corpus/<name>/`.
    pub name: &'static str,
    /// What the target feeds its bytes to.
    pub about: &'static str,
    /// Runs one input; panics on a bug.
    pub run: fn(&[u8]),
    /// Words the mutations insert (config syntax, say); may be empty.
    pub dictionary: &'static [&'static [u8]],
    /// Seed files kept elsewhere in the workspace, as `folder/*.extension` relative to the
    /// workspace root (the config parser's own corpus), read besides `fuzz/corpus/<name>/`.
    pub extra_seeds: &'static [&'static str],
}

/// Every target.
pub const TARGETS: &[Target] = &[
    Target {
        name: "frame",
        about: "the frame decoder, with and without a CRC trailer, whole and byte by byte",
        run: frame,
        dictionary: &[],
        extra_seeds: &[],
    },
    Target {
        name: "signals",
        about: "every signal payload decoder (the first byte picks one), with round trips",
        run: signals,
        dictionary: &[],
        extra_seeds: &[],
    },
    Target {
        name: "handshake",
        about: "HELLO frames as a data node reads them, admission, and HELLO_CONF/REF",
        run: handshake,
        dictionary: &[b"RNDB", &[0xF0, 0xFF], &[0xF1, 0xFF], &[0xF2, 0xFF]],
        extra_seeds: &[],
    },
    Target {
        name: "config",
        about: "config.ini bytes, UTF-8 or not, through the whole parser",
        run: config,
        dictionary: CONFIG_WORDS,
        extra_seeds: &[
            "config/tests/corpus/valid/*.ini",
            "config/tests/corpus/invalid/*.ini",
            "config/examples/*.ini",
        ],
    },
    Target {
        name: "redo",
        about: "a redo log file as a restart reads it: header, records, row changes",
        run: redo,
        dictionary: FILE_WORDS,
        extra_seeds: &[],
    },
    Target {
        name: "schema_log",
        about: "the schema log as a restart reads it: header, records, schema changes",
        run: schema_log,
        dictionary: FILE_WORDS,
        extra_seeds: &[],
    },
    Target {
        name: "lcp",
        about: "a local checkpoint's data file and control file as a restart reads them",
        run: lcp,
        dictionary: FILE_WORDS,
        extra_seeds: &[],
    },
    Target {
        name: "sysfile",
        about: "the sysfile as a restart reads it",
        run: sysfile,
        dictionary: FILE_WORDS,
        extra_seeds: &[],
    },
    Target {
        name: "backup",
        about: "a backup's data, log and control files as ndb_restore reads them",
        run: backup,
        dictionary: FILE_WORDS,
        extra_seeds: &[],
    },
];

/// Words of the data node's files the mutations insert: the magics, record kinds, lengths.
const FILE_WORDS: &[&[u8]] = &[
    b"RNDBREDO",
    b"RNDBSCHM",
    b"RNDBSYSF",
    b"RNDBLCPD",
    b"RNDBLCPC",
    b"RNDBBKPD",
    b"RNDBBKPL",
    b"RNDBBKPC",
    &[1, 0, 0, 0],
    &[0xFF, 0xFF, 0xFF, 0xFF],
    &[0, 0, 0x10, 0],
    &[1],
    &[2],
    &[3],
    &[4],
    &[5],
    &[6],
    &[7],
    &[8],
    &[9],
];

/// Config syntax the mutations of the `config` target insert.
const CONFIG_WORDS: &[&[u8]] = &[
    b"\n",
    b"=",
    b"[ndbd]\n",
    b"[ndbd default]\n",
    b"[api]\n",
    b"[mysqld]\n",
    b"[ndb_mgmd]\n",
    b"[tcp]\n",
    b"[shm]\n",
    b"[tcp default]\n",
    b"NodeId=",
    b"NodeId1=",
    b"NodeId2=",
    b"HostName=",
    b"NoOfReplicas=",
    b"DataMemory=",
    b"Nodegroup=",
    b"ServerPort=",
    b"UseShm=1\n",
    b"UseIoUring=1\n",
    b"Checksum=1\n",
    b"LockExecuteThreadToCPU=",
    b"SendBufferMemory=",
    b"ShmSize=",
    b"#",
    b";",
    b"4294967296",
    b"18446744073709551616",
    b"1G",
    b"0-1,3",
    b"\xff",
];

/// The target called `name`.
pub fn find(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

/// The frame decoder, as a link's receive loop uses it: frames one after another from the
/// buffer, under both Checksum settings. A decoded frame must lie inside the buffer, re-encode
/// to the same bytes, and decode the same from any longer prefix; a shorter prefix may only ask
/// for more bytes or fail the same way, never deliver a frame.
pub fn frame(data: &[u8]) {
    for checksum in [false, true] {
        let mut rest = data;
        while let Ok(Decoded::Frame {
            header,
            payload,
            frame_len,
        }) = frame::decode(rest, checksum)
        {
            assert!((FRAME_HEADER_BYTES..=FRAME_BYTES_MAX).contains(&frame_len));
            assert!(frame_len <= rest.len(), "frame runs past the buffer");
            let mut again = Vec::new();
            frame::encode_into(&mut again, &header, payload, checksum)
                .expect("a decoded frame fits when encoded again");
            assert_eq!(
                again,
                rest[..frame_len],
                "frame did not re-encode to its bytes"
            );
            rest = &rest[frame_len..];
        }
        let whole = frame::decode(rest, checksum);
        // A prefix of the bytes never delivers a frame the whole did not, nor a different
        // error: every check is made as soon as the bytes it needs are there.
        let cut = rest.len() / 2;
        match frame::decode(&rest[..cut], checksum) {
            Ok(Decoded::NeedMore) => {}
            Ok(Decoded::Frame { .. }) => panic!("a prefix delivered a frame the whole refused"),
            Err(e) => assert_eq!(Err(e), whole, "a prefix failed differently"),
        }
    }
}

/// One payload decoder: `decode`, and when it accepts, the round trip.
type Decoder = fn(&[u8]);

/// Every signal payload decoder; the first input byte picks one (modulo the count).
const DECODERS: &[Decoder] = &[
    |b| round_trip(b, Refusal::decode, Refusal::encode),
    |b| round_trip(b, TableInfo::decode, TableInfo::encode),
    |b| {
        round_trip(b, signals::decode_table_def, |def, out| {
            signals::encode_table_def(out, def)
        })
    },
    |b| round_trip(b, CreateIndexReq::decode, CreateIndexReq::encode),
    |b| round_trip(b, IndexName::decode, IndexName::encode),
    |b| round_trip(b, IndexInfo::decode, IndexInfo::encode),
    |b| {
        let _ = signals::decode_name(b);
    },
    tckeyreq,
    |b| {
        round_trip(b, TcKeyRow::decode, |row, out| {
            TcKeyRow::encode_parts(out, row.op_index, &row.values)
        });
        let mut values = Vec::new();
        let _ = TcKeyRow::decode_row_into(b, &fuzz_table(), &mut values);
        let _ = TcKeyRow::op_index_of(b);
        // The same bytes as a TCKEY_ROW_CONF: the row, then a commit's GCI or nothing.
        round_trip(b, TcKeyRow::decode_conf, |(row, gci), out| {
            TcKeyRow::encode_parts(out, row.op_index, &row.values);
            TcExecuteConf { gci: *gci }.encode(out);
        });
        values.clear();
        let _ = TcKeyRow::decode_row_conf_into(b, &fuzz_table(), &mut values);
    },
    |b| round_trip(b, TcKeyRef::decode, TcKeyRef::encode),
    |b| round_trip(b, TcExecuteReq::decode, TcExecuteReq::encode),
    |b| round_trip(b, TcExecuteRef::decode, TcExecuteRef::encode),
    |b| round_trip(b, IndexBuildRows::decode, IndexBuildRows::encode),
    |b| round_trip(b, IndexBuildDone::decode, IndexBuildDone::encode),
    |b| round_trip(b, TcFailQuery::decode, TcFailQuery::encode),
    |b| round_trip(b, TcFailAnswer::decode, TcFailAnswer::encode),
    |b| round_trip(b, LqhKeyReq::decode, LqhKeyReq::encode),
    |b| round_trip(b, LqhKeyConf::decode, LqhKeyConf::encode),
    |b| round_trip(b, LqhKeyRef::decode, LqhKeyRef::encode),
    |b| round_trip(b, TransSignal::decode, TransSignal::encode),
    |b| round_trip(b, ApiRegConf::decode, ApiRegConf::encode),
    |b| round_trip(b, ScanTabReq::decode, ScanTabReq::encode),
    |b| round_trip(b, ScanNextReq::decode, ScanNextReq::encode),
    |b| round_trip(b, ScanTabConf::decode, ScanTabConf::encode),
    |b| {
        let _ = decode_scan_rows(b, &fuzz_table(), &mut |_, _| Ok(()));
    },
    filter,
    values,
    |b| round_trip(b, LqhCommitReq::decode, LqhCommitReq::encode),
    |b| round_trip(b, GcpSignal::decode, GcpSignal::encode),
    |b| round_trip(b, TcExecuteConf::decode, TcExecuteConf::encode),
    |b| {
        round_trip(
            b,
            signals::ListTablesReq::decode,
            signals::ListTablesReq::encode,
        )
    },
    |b| {
        round_trip(
            b,
            signals::ListTablesConf::decode,
            signals::ListTablesConf::encode,
        )
    },
    |b| round_trip(b, FailRep::decode, FailRep::encode),
    |b| round_trip(b, CmRegReq::decode, CmRegReq::encode),
    |b| round_trip(b, StartPermConf::decode, StartPermConf::encode),
    |b| round_trip(b, StartPermRef::decode, StartPermRef::encode),
    |b| round_trip(b, Arbit::decode, Arbit::encode),
    |b| round_trip(b, CopyFragReq::decode, CopyFragReq::encode),
    |b| round_trip(b, InclNodeReq::decode, InclNodeReq::encode),
    |b| round_trip(b, CntrStartReq::decode, CntrStartReq::encode),
    |b| round_trip(b, CntrStartConf::decode, CntrStartConf::encode),
    |b| {
        round_trip(
            b,
            ndbinfo::DbinfoScanReq::decode,
            ndbinfo::DbinfoScanReq::encode,
        )
    },
    |b| {
        round_trip(
            b,
            ndbinfo::DbinfoScanConf::decode,
            ndbinfo::DbinfoScanConf::encode,
        )
    },
    |b| {
        round_trip(
            b,
            ndbinfo::DbinfoScanRef::decode,
            ndbinfo::DbinfoScanRef::encode,
        )
    },
    |b| round_trip(b, suma::SubStartReq::decode, suma::SubStartReq::encode),
    |b| round_trip(b, suma::SubStartConf::decode, suma::SubStartConf::encode),
    |b| {
        // Borrows its images from the payload: decoded, encoded and decoded again by hand.
        let Ok(first) = suma::SubTableData::decode(b) else {
            return;
        };
        let mut encoded = Vec::new();
        first.encode(&mut encoded);
        let second = suma::SubTableData::decode(&encoded)
            .unwrap_or_else(|e| panic!("{first:?} encoded to {encoded:02x?}: {e}"));
        assert_eq!(first, second);
    },
    |b| {
        round_trip(
            b,
            suma::SubGcpCompleteRep::decode,
            suma::SubGcpCompleteRep::encode,
        )
    },
];

/// Every signal payload decoder of rndb-protocol; `data[0]` picks which, the rest is the
/// payload.
pub fn signals(data: &[u8]) {
    let Some((&pick, payload)) = data.split_first() else {
        return;
    };
    DECODERS[usize::from(pick) % DECODERS.len()](payload);
}

/// How many decoders [`signals`](fn@signals) chooses from (the seed corpus names them by index).
pub fn signal_decoder_count() -> usize {
    DECODERS.len()
}

/// Decodes, and when that succeeds, checks the encoding survives a second round.
fn round_trip<T: std::fmt::Debug>(
    bytes: &[u8],
    decode: fn(&[u8]) -> Result<T, rndb_protocol::DecodeError>,
    encode: fn(&T, &mut Vec<u8>),
) {
    let Ok(first) = decode(bytes) else {
        return;
    };
    let mut encoded = Vec::new();
    encode(&first, &mut encoded);
    let second = decode(&encoded).unwrap_or_else(|e| {
        panic!("{first:?} encoded to {encoded:02x?}, which does not decode: {e}")
    });
    let mut again = Vec::new();
    encode(&second, &mut again);
    assert_eq!(
        encoded, again,
        "{first:?} and {second:?} encode differently"
    );
}

/// TCKEYREQ, owned and viewed: the view accepts exactly what the owned decoder accepts, and
/// the key a view hands the data node is canonical as `encode_key` would make it.
fn tckeyreq(bytes: &[u8]) {
    round_trip(bytes, TcKeyReq::decode, TcKeyReq::encode);
    let owned = TcKeyReq::decode(bytes);
    match TcKeyReqView::decode(bytes) {
        Ok(view) => {
            // Compared by encoding: a NaN float is not equal to itself.
            let owned = owned.expect("the owned decoder refused what the view accepted");
            let (mut from_owned, mut from_view) = (Vec::new(), Vec::new());
            owned.encode(&mut from_owned);
            view.to_owned().encode(&mut from_view);
            assert_eq!(from_owned, from_view, "view and owned differ");
            let table = fuzz_table();
            let _ = schema::canonical_key(&table, &table.key_columns(), view.key);
        }
        Err(_) => assert!(
            owned.is_err(),
            "the owned decoder accepted what the view refused"
        ),
    }
}

/// A pushed-down filter: decode, round trip, and evaluate against a row.
fn filter(bytes: &[u8]) {
    let mut r = Reader::new(bytes, "filter");
    let Ok(filter) = Filter::decode(&mut r) else {
        return;
    };
    let mut encoded = Vec::new();
    filter.encode(&mut Writer::new(&mut encoded));
    let again = Filter::decode(&mut Reader::new(&encoded, "filter"))
        .unwrap_or_else(|e| panic!("{filter:?} does not decode after encoding: {e}"));
    let mut twice = Vec::new();
    again.encode(&mut Writer::new(&mut twice));
    assert_eq!(encoded, twice);
    let row = [Value::Int32(1), Value::Null, Value::Varchar("x".into())];
    let _ = filter.matches(&row);
}

/// Value lists as the codec reads them, and rows checked against a table.
fn values(bytes: &[u8]) {
    let _ = schema::skip_values(&mut Reader::new(bytes, "values"), usize::from(u16::MAX));
    if let Ok(values) = schema::decode_values(&mut Reader::new(bytes, "values"), 512) {
        let mut encoded = Vec::new();
        schema::encode_values(&mut Writer::new(&mut encoded), &values);
        let again = schema::decode_values(&mut Reader::new(&encoded, "values"), 512)
            .expect("encoded values decode");
        let mut twice = Vec::new();
        schema::encode_values(&mut Writer::new(&mut twice), &again);
        assert_eq!(encoded, twice);
    }
    let table = fuzz_table();
    let mut row = Vec::new();
    let _ = table.decode_row_into(&mut Reader::new(bytes, "row"), &mut row);
    for column in &table.columns {
        let _ = Value::decode_for(&mut Reader::new(bytes, "value"), column);
    }
    let mut into = Vec::new();
    let _ = schema::decode_values_into(&mut Reader::new(bytes, "values"), 512, &mut into);
    let _ = TableDef::decode(&mut Reader::new(bytes, "table"));
    let _ = Value::decode(&mut Reader::new(bytes, "value"));
}

/// The table rows and keys are checked against: one column of each kind.
fn fuzz_table() -> TableDef {
    let mut id = ColumnDef::new("id", ColumnType::UInt32);
    id.primary_key = true;
    let mut name = ColumnDef::new("name", ColumnType::Varchar(8));
    name.primary_key = true;
    let mut score = ColumnDef::new("score", ColumnType::Int64);
    score.nullable = true;
    let mut blob = ColumnDef::new("blob", ColumnType::Varbinary(16));
    blob.nullable = true;
    let float = ColumnDef::new("f", ColumnType::Float64);
    TableDef::new("fuzz", vec![id, name, score, blob, float])
}

/// The cluster the handshake target admits into: data nodes 1 and 2 on 127.0.0.1, API slot 3
/// on 127.0.0.1, API slot 4 anywhere, one of them over SHM, one with checksums.
const HANDSHAKE_CONFIG: &str = "\
[ndbd default]
NoOfReplicas=2
[ndbd]
NodeId=1
HostName=127.0.0.1
[ndbd]
NodeId=2
HostName=127.0.0.1
[api]
NodeId=3
HostName=127.0.0.1
[api]
NodeId=4
[shm]
NodeId1=1
NodeId2=3
[tcp]
NodeId1=1
NodeId2=4
Checksum=1
";

/// The config [`handshake`](fn@handshake) admits against.
pub fn handshake_config() -> ClusterConfig {
    rndb_config::parse_str(HANDSHAKE_CONFIG, Path::new("handshake-fuzz.ini"))
        .expect("the handshake fuzz config is valid")
}

thread_local! {
    static CONFIG: ClusterConfig = handshake_config();
}

/// The bytes a connecting peer sends, as data node 1 reads them (one whole handshake frame),
/// then admission from 127.0.0.1 and from another host; the same bytes read as a server's
/// answer. An accepted HELLO must encode back to its own payload (a version 7 one, without a
/// token, to its first 23 bytes).
pub fn handshake(data: &[u8]) {
    if let Ok(hello) = handshake::decode_hello_frame(data) {
        let payload = &data[FRAME_HEADER_BYTES..];
        let encoded = hello.encode();
        if payload.len() == handshake::HELLO_BYTES_V7 {
            assert_eq!(hello.token, 0, "a version 7 HELLO has no token");
            assert_eq!(
                encoded[..payload.len()],
                payload[..],
                "HELLO did not re-encode"
            );
        } else {
            assert_eq!(encoded[..], payload[..], "HELLO did not re-encode");
        }
        assert_eq!(Hello::decode(&encoded).ok(), Some(hello));
        // Some node ids held: by the same sender (1703) or another (1702).
        let held = |node: NodeId, token: u64| {
            node.0
                .is_multiple_of(3)
                .then_some(if node.0.is_multiple_of(2) { token } else { 0 })
        };
        CONFIG.with(|config| {
            for peer in [
                IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
            ] {
                if let Ok(link) = registry::admit(config, NodeId(1), &hello, peer, held) {
                    assert!(
                        link.node1 == hello.from || link.node2 == hello.from,
                        "admitted over a link that is not the peer's"
                    );
                }
            }
        });
    }
    let _ = handshake::decode_answer_frame(data);
    if let Some(payload) = data.get(FRAME_HEADER_BYTES..) {
        let _ = handshake::decode_ref(payload);
        let _ = Hello::decode(payload);
    }
}

/// Config text: any bytes through [`rndb_config::parse_bytes`]. A config that parses must
/// answer the questions every node asks of it.
pub fn config(data: &[u8]) {
    let Ok(config) = rndb_config::parse_bytes(data, Path::new("fuzz.ini")) else {
        return;
    };
    let _ = config.cluster_id();
    for node in &config.data_nodes {
        let _ = config.data_node_port(node.node_id);
        for other in &config.data_nodes {
            let _ = config.link(node.node_id, other.node_id);
        }
    }
}

/// A record file read whole as `file`: whatever the bytes, the read returns; a file it reads
/// encodes back to exactly the bytes it read (the header and every valid record), which read
/// again give the same records and no stop; a stop lies where the valid records end. Reading
/// from any offset, however large, returns.
fn record_file(data: &[u8], file: FileKind) {
    for offset in [0, 1, data.len(), data.len() + 1, usize::MAX - 8, usize::MAX] {
        let _ = file_format::read_record(data, offset);
        let _ = file_read::entries(data, file, offset).count();
    }
    let Ok(read) = file_read::read_file(data, file) else {
        return;
    };
    assert!(read.end <= data.len(), "the records end past the bytes");
    if let Some(stop) = &read.stop {
        assert_eq!(stop.offset, read.end, "{stop} is not where the records end");
    }
    let encoded = file_read::encode_file(&read.header, &read.entries);
    assert_eq!(
        encoded,
        data[..read.end],
        "the records read do not encode to their bytes"
    );
    if read.stop.is_none() {
        let again = file_read::read_file(&encoded, file).expect("an encoded file reads");
        assert_eq!(again, read, "an encoded file reads differently");
    }
}

/// The bytes with every CRC made right: the header's, and each record's as far as the record
/// lengths lead. A mutation almost always breaks a CRC, and a file whose CRCs fail never reaches
/// the decoders behind them; the targets read both the bytes and their resealed copy.
pub fn reseal(data: &[u8]) -> Vec<u8> {
    let mut bytes = data.to_vec();
    if bytes.len() < file_format::HEADER_BYTES {
        return bytes;
    }
    let crc = crc32fast::hash(&bytes[..28]);
    bytes[28..32].copy_from_slice(&crc.to_le_bytes());
    let mut offset = file_format::HEADER_BYTES;
    while let Some(head) = bytes.get(offset..offset + file_format::RECORD_HEAD_BYTES) {
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let end = offset + file_format::RECORD_HEAD_BYTES + len;
        if len > file_format::PAYLOAD_MAX || end > bytes.len() {
            break;
        }
        let crc = crc32fast::hash(&bytes[offset + 8..end]);
        bytes[offset + 4..offset + 8].copy_from_slice(&crc.to_le_bytes());
        offset = end;
    }
    bytes
}

/// A redo log file as `replay_part` reads it (and its resealed copy).
pub fn redo(data: &[u8]) {
    record_file(data, FileKind::Redo);
    record_file(&reseal(data), FileKind::Redo);
}

/// The schema log as `replay_schema_log` reads it (and its resealed copy).
pub fn schema_log(data: &[u8]) {
    record_file(data, FileKind::SchemaLog);
    record_file(&reseal(data), FileKind::SchemaLog);
}

/// The bytes as a local checkpoint's data file, and as its control file: a control file read
/// encodes back to its own bytes, and the redo positions it names are safe to read from (as a
/// restart reads the redo log from them).
pub fn lcp(data: &[u8]) {
    lcp_files(data);
    lcp_files(&reseal(data));
}

fn lcp_files(data: &[u8]) {
    record_file(data, FileKind::LcpData);
    let Ok(header) = FileHeader::decode(data, file_format::LCP_CTL_MAGIC) else {
        return;
    };
    let Ok(ctl) = LcpCtl::from_file(data, header.node) else {
        return;
    };
    let encoded = ctl.file_bytes(header.node);
    assert!(
        data.starts_with(&encoded),
        "{ctl:?} does not encode to the bytes it was read from"
    );
    for &(_, offset) in &ctl.starts {
        let _ = file_read::entries(data, FileKind::Redo, offset as usize).count();
    }
}

/// The sysfile (and its resealed copy): what reads encodes back to the bytes it was read from.
pub fn sysfile(data: &[u8]) {
    sysfile_file(data);
    sysfile_file(&reseal(data));
}

fn sysfile_file(data: &[u8]) {
    let Ok(header) = FileHeader::decode(data, file_format::SYSFILE_MAGIC) else {
        let _ = Sysfile::from_file(data, 1);
        return;
    };
    let Ok(sysfile) = Sysfile::from_file(data, header.node) else {
        return;
    };
    assert!(
        data.starts_with(&sysfile.file_bytes(header.node)),
        "{sysfile:?} does not encode to the bytes it was read from"
    );
    assert!(Sysfile::from_file(data, header.node.wrapping_add(1)).is_err());
}

/// The bytes as a backup's data and log files and as its control file (and their resealed
/// copies), for the node and backup id their header names: a control file read reads back
/// the same once encoded, every row read lies within the file.
pub fn backup(data: &[u8]) {
    backup_files(data);
    backup_files(&reseal(data));
}

fn backup_files(data: &[u8]) {
    let Some(header) = [
        backup_format::DATA_MAGIC,
        backup_format::LOG_MAGIC,
        backup_format::CTL_MAGIC,
    ]
    .into_iter()
    .find_map(|magic| FileHeader::decode(data, magic).ok()) else {
        let _ = backup_format::read_rows(data, backup_format::DATA_MAGIC, 1, 1);
        let _ = BackupCtl::from_file(data, 1, 1);
        return;
    };
    let (id, node) = (header.seq as u32, header.node);
    for magic in [backup_format::DATA_MAGIC, backup_format::LOG_MAGIC] {
        if let Ok(rows) = backup_format::read_rows(data, magic, id, node) {
            for row in rows {
                assert!(row.offset < data.len() && row.row.len() <= data.len());
            }
        }
    }
    if let Ok(ctl) = BackupCtl::from_file(data, id, node) {
        // The table definitions' decoder ignores unknown flag bits (as on the wire), so the
        // bytes need not come back; what was read must.
        let again = BackupCtl::from_file(&ctl.file_bytes(node), id, node);
        assert_eq!(again.as_ref(), Ok(&ctl), "{ctl:?} does not read back");
    }
}
