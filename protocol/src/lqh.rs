//! Signals between data nodes: a transaction coordinator (TC) on one node sends key operations
//! to the LQH of the node holding the partition's primary replica, which runs them and passes
//! writes along the partition's backups (NDB's LQHKEYREQ chain); the last replica answers TC.
//! Commit and abort go to every node that holds rows of the transaction.
//!
//! A transaction keeps the id the API's TC gave it (`TransId`: the API node id in the high 32
//! bits, the API's request id in the low 32), so every node names it alike.

use crate::codec::{DecodeError, Reader, Writer};
use crate::ids::TransId;
use crate::interpreter::Program;
use crate::schema::{decode_values, encode_values, LockMode, OperationType, Value, COLUMNS_MAX};

/// Signal numbers: one list for every signal, in [`crate::gsn`].
pub use crate::gsn;

/// Most entries one INDEX_BUILD_ROWS carries.
pub const INDEX_BUILD_ROWS_MAX: usize = 256;

/// INDEX_BUILD_ROWS: unique-index entries (the unique columns' values and the base row's
/// canonical primary key) for the hidden table `hidden_table_id`.
#[derive(Clone, Debug, PartialEq)]
pub struct IndexBuildRows {
    pub hidden_table_id: u32,
    pub entries: Vec<(Vec<Value>, Vec<u8>)>,
}

impl IndexBuildRows {
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer::new(out);
        w.u32(self.hidden_table_id).u16(self.entries.len() as u16);
        for (key, pk) in &self.entries {
            encode_values(&mut w, key);
            w.bytes16(pk);
        }
    }

    pub fn decode(buf: &[u8]) -> Result<IndexBuildRows, DecodeError> {
        let mut r = Reader::new(buf, "INDEX_BUILD_ROWS");
        let hidden_table_id = r.u32()?;
        let count = usize::from(r.u16()?);
        if count > INDEX_BUILD_ROWS_MAX {
            return Err(r.error(format!("{count} entries, at most {INDEX_BUILD_ROWS_MAX}")));
        }
        let mut entries = Vec::with_capacity(count);
        for _ in 0..count {
            let key = decode_values(&mut r, COLUMNS_MAX)?;
            let pk = r.bytes16()?.to_vec();
            entries.push((key, pk));
        }
        r.finish()?;
        Ok(IndexBuildRows {
            hidden_table_id,
            entries,
        })
    }
}

/// INDEX_BUILD_DONE: the sender's part of the build of `hidden_table_id` is sent; `code` is the
/// NDB error its own part met (0: none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexBuildDone {
    pub hidden_table_id: u32,
    pub code: u32,
}

impl IndexBuildDone {
    pub fn encode(&self, out: &mut Vec<u8>) {
        Writer::new(out).u32(self.hidden_table_id).u32(self.code);
    }

    pub fn decode(buf: &[u8]) -> Result<IndexBuildDone, DecodeError> {
        let mut r = Reader::new(buf, "INDEX_BUILD_DONE");
        let v = IndexBuildDone {
            hidden_table_id: r.u32()?,
            code: r.u32()?,
        };
        r.finish()?;
        Ok(v)
    }
}

/// TC_FAIL_QUERY (the master asks a survivor) and TC_FAIL_REPORT (a survivor tells the
/// master): a transaction whose coordinator `tc_node` failed. A query is answered, and a report
/// acted on, once the receiving node has itself handled that failure (so everything the
/// coordinator sent it before dying has run).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcFailQuery {
    pub trans: TransId,
    pub tc_node: u16,
}

impl TcFailQuery {
    pub fn encode(&self, out: &mut Vec<u8>) {
        Writer::new(out).u64(self.trans.0).u16(self.tc_node);
    }

    pub fn decode(buf: &[u8]) -> Result<TcFailQuery, DecodeError> {
        let mut r = Reader::new(buf, "TC_FAIL_QUERY");
        let v = TcFailQuery {
            trans: TransId(r.u64()?),
            tc_node: r.u16()?,
        };
        r.finish()?;
        Ok(v)
    }
}

/// What a node knows of a transaction whose coordinator failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransOutcome {
    /// Still open here, or never seen.
    Open = 0,
    /// Committed here.
    Committed = 1,
    /// Rolled back here.
    Aborted = 2,
}

/// TC_FAIL_ANSWER: a transaction and its outcome on the answering node. TC_FAIL_DECISION: the
/// master's decision on it (Committed or Aborted), for every survivor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcFailAnswer {
    pub trans: TransId,
    pub outcome: TransOutcome,
    /// When committed: the epoch its coordinator gave the commit, which every survivor commits
    /// it in (0 otherwise).
    pub gci: u64,
}

impl TcFailAnswer {
    pub fn encode(&self, out: &mut Vec<u8>) {
        Writer::new(out)
            .u64(self.trans.0)
            .u8(self.outcome as u8)
            .u64(self.gci);
    }

    pub fn decode(buf: &[u8]) -> Result<TcFailAnswer, DecodeError> {
        let mut r = Reader::new(buf, "TC_FAIL_ANSWER");
        let trans = TransId(r.u64()?);
        let outcome = match r.u8()? {
            0 => TransOutcome::Open,
            1 => TransOutcome::Committed,
            2 => TransOutcome::Aborted,
            other => return Err(r.error(format!("unknown outcome {other}"))),
        };
        let gci = r.u64()?;
        r.finish()?;
        Ok(TcFailAnswer {
            trans,
            outcome,
            gci,
        })
    }
}

/// `LqhKeyReq::flags`: the last replica commits the whole transaction on its node as soon as
/// the operation succeeds there (TC has decided to commit, and nothing else of the transaction
/// can fail), and says so in its LQHKEYCONF.
pub const LQHKEY_COMMIT_AT_LAST_REPLICA: u8 = 1;
/// `LqhKeyReq::flags`: the operation runs on a backup replica (the primary already ran it).
pub const LQHKEY_BACKUP: u8 = 2;
/// `LqhKeyReq::flags`: an interpreted update; its program follows the request's other fields
/// (TC to the primary replica only: the primary sends its backups the values it computed).
pub const LQHKEY_INTERPRETED: u8 = 4;
/// `LqhKeyRef::flags`: a backup replica refused an operation its primary ran: the replicas
/// would differ, so the transaction must abort whatever its abort option.
pub const LQHKEYREF_BACKUP: u8 = 1;
/// `LqhKeyConf::flags`: the transaction is committed on the answering node.
pub const LQHKEYCONF_COMMITTED: u8 = 1;

/// Most replicas a partition has (NoOfReplicas is 1..=4).
pub const REPLICAS_MAX: usize = 4;

/// [`LqhKeyReq::run`] when the TC did not know the node's run (its link had closed).
pub const RUN_UNKNOWN: u64 = u64::MAX;
/// Most index changes one write fires (one delete and one insert per unique index).
pub const FIRED_MAX: usize = 2 * 64;

/// One key operation sent to a replica's LQH.
#[derive(Clone, Debug, PartialEq)]
pub struct LqhKeyReq {
    pub trans: TransId,
    /// The node whose TC runs the transaction: the last replica answers it.
    pub tc_node: u16,
    /// TC's name for this operation, echoed in the answer.
    pub token: u32,
    pub op_index: u32,
    pub op_type: OperationType,
    pub lock_mode: LockMode,
    pub table_id: u32,
    pub fragment: u32,
    /// The canonical key encoding.
    pub key_bytes: Vec<u8>,
    pub key: Vec<Value>,
    pub attrs: Vec<(u16, Value)>,
    /// The receiver's run (its CM_REGREQ's) as the TC that chose the replicas knew it, or
    /// [`RUN_UNKNOWN`]: a node that restarted since drops the operation.
    pub run: u64,
    /// Replicas still to run the operation after this one, in order (backups of a write),
    /// each with its run as that TC knew it.
    pub chain: Vec<(u16, u64)>,
    /// [`LQHKEY_COMMIT_AT_LAST_REPLICA`], [`LQHKEY_BACKUP`].
    pub flags: u8,
    /// With [`LQHKEY_COMMIT_AT_LAST_REPLICA`]: the epoch the commit belongs to (0 otherwise).
    pub gci: u64,
    /// An interpreted update's program ([`LQHKEY_INTERPRETED`] on the wire).
    pub program: Option<Program>,
}

impl LqhKeyReq {
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer::new(out);
        w.u64(self.trans.0)
            .u16(self.tc_node)
            .u32(self.token)
            .u32(self.op_index)
            .u8(self.op_type.to_u8())
            .u8(self.lock_mode.to_u8())
            .u32(self.table_id)
            .u32(self.fragment)
            .bytes16(&self.key_bytes);
        encode_values(&mut w, &self.key);
        encode_attrs(&mut w, &self.attrs);
        w.u8(self.chain.len() as u8);
        for &(node, run) in &self.chain {
            w.u16(node).u64(run);
        }
        let flags = match self.program {
            Some(_) => self.flags | LQHKEY_INTERPRETED,
            None => self.flags & !LQHKEY_INTERPRETED,
        };
        w.u8(flags).u64(self.gci).u64(self.run);
        if let Some(program) = &self.program {
            program.encode(&mut w);
        }
    }

    pub fn decode(buf: &[u8]) -> Result<LqhKeyReq, DecodeError> {
        let mut r = Reader::new(buf, "LQHKEYREQ");
        let trans = TransId(r.u64()?);
        let tc_node = r.u16()?;
        let token = r.u32()?;
        let op_index = r.u32()?;
        let op_type =
            OperationType::from_u8(r.u8()?).ok_or_else(|| r.error("unknown operation type"))?;
        let lock_mode = LockMode::from_u8(r.u8()?).ok_or_else(|| r.error("unknown lock mode"))?;
        let table_id = r.u32()?;
        let fragment = r.u32()?;
        let key_bytes = r.bytes16()?.to_vec();
        let key = decode_values(&mut r, COLUMNS_MAX)?;
        let attrs = decode_attrs(&mut r)?;
        let chain_len = usize::from(r.u8()?);
        if chain_len >= REPLICAS_MAX {
            return Err(r.error(format!("chain of {chain_len} replicas")));
        }
        let chain = (0..chain_len)
            .map(|_| Ok((r.u16()?, r.u64()?)))
            .collect::<Result<_, DecodeError>>()?;
        let flags = r.u8()?;
        let gci = r.u64()?;
        let run = r.u64()?;
        let program = if flags & LQHKEY_INTERPRETED != 0 {
            Some(Program::decode(&mut r)?)
        } else {
            None
        };
        r.finish()?;
        Ok(LqhKeyReq {
            trans,
            tc_node,
            token,
            op_index,
            op_type,
            lock_mode,
            table_id,
            fragment,
            key_bytes,
            key,
            attrs,
            run,
            chain,
            flags: flags & !LQHKEY_INTERPRETED,
            gci,
            program,
        })
    }
}

/// A change of a unique index's hidden table that a write fired (TC runs it as a trigger).
#[derive(Clone, Debug, PartialEq)]
pub struct FiredChange {
    pub hidden_table_id: u32,
    pub op_type: OperationType,
    pub key: Vec<Value>,
    pub pk: Vec<u8>,
}

/// The operation succeeded on every replica.
#[derive(Clone, Debug, PartialEq)]
pub struct LqhKeyConf {
    pub trans: TransId,
    pub token: u32,
    pub op_index: u32,
    /// A read's row.
    pub row: Option<Vec<Value>>,
    /// Index changes a write fired.
    pub fired: Vec<FiredChange>,
    /// [`LQHKEYCONF_COMMITTED`] or 0.
    pub flags: u8,
}

impl LqhKeyConf {
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer::new(out);
        w.u64(self.trans.0)
            .u32(self.token)
            .u32(self.op_index)
            .u8(self.flags);
        match &self.row {
            Some(row) => {
                w.u8(1);
                encode_values(&mut w, row);
            }
            None => {
                w.u8(0);
            }
        }
        w.u16(self.fired.len() as u16);
        for change in &self.fired {
            w.u32(change.hidden_table_id).u8(change.op_type.to_u8());
            encode_values(&mut w, &change.key);
            w.bytes16(&change.pk);
        }
    }

    pub fn decode(buf: &[u8]) -> Result<LqhKeyConf, DecodeError> {
        let mut r = Reader::new(buf, "LQHKEYCONF");
        let trans = TransId(r.u64()?);
        let token = r.u32()?;
        let op_index = r.u32()?;
        let flags = r.u8()?;
        let row = match r.u8()? {
            0 => None,
            1 => Some(decode_values(&mut r, COLUMNS_MAX)?),
            other => return Err(r.error(format!("row flag {other}"))),
        };
        let count = usize::from(r.u16()?);
        if count > FIRED_MAX {
            return Err(r.error(format!("{count} index changes, at most {FIRED_MAX}")));
        }
        let mut fired = Vec::with_capacity(count);
        for _ in 0..count {
            let hidden_table_id = r.u32()?;
            let op_type =
                OperationType::from_u8(r.u8()?).ok_or_else(|| r.error("unknown operation type"))?;
            let key = decode_values(&mut r, COLUMNS_MAX)?;
            let pk = r.bytes16()?.to_vec();
            fired.push(FiredChange {
                hidden_table_id,
                op_type,
                key,
                pk,
            });
        }
        r.finish()?;
        Ok(LqhKeyConf {
            trans,
            token,
            op_index,
            row,
            fired,
            flags,
        })
    }
}

/// The operation failed on a replica (nothing of it stays once the transaction aborts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LqhKeyRef {
    pub trans: TransId,
    pub token: u32,
    pub op_index: u32,
    pub code: u32,
    pub detail: String,
    /// [`LQHKEYREF_BACKUP`] or 0.
    pub flags: u8,
}

impl LqhKeyRef {
    pub fn encode(&self, out: &mut Vec<u8>) {
        Writer::new(out)
            .u64(self.trans.0)
            .u32(self.token)
            .u32(self.op_index)
            .u32(self.code)
            .str16(&self.detail)
            .u8(self.flags);
    }

    pub fn decode(buf: &[u8]) -> Result<LqhKeyRef, DecodeError> {
        let mut r = Reader::new(buf, "LQHKEYREF");
        let v = LqhKeyRef {
            trans: TransId(r.u64()?),
            token: r.u32()?,
            op_index: r.u32()?,
            code: r.u32()?,
            detail: r.str16()?.to_string(),
            flags: r.u8()?,
        };
        r.finish()?;
        Ok(v)
    }
}

/// `LqhCommitReq::flags`: commit only the rows the node holds as a backup replica. TC sets it
/// in its first commit round for a node that is also the primary of another write of the
/// transaction: that node's primary rows commit in the second round, once every backup has
/// committed, so that no reader sees a primary's change that a coordinator's failure could
/// still undo.
pub const LQH_COMMIT_BACKUP_ROWS_ONLY: u8 = 1;

/// LQH_COMMITREQ: commit what a transaction holds on the receiving node (all of it, or only its
/// backup rows), in the epoch its TC gave the commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LqhCommitReq {
    pub trans: TransId,
    /// [`LQH_COMMIT_BACKUP_ROWS_ONLY`] or 0.
    pub flags: u8,
    /// The commit's GCI (global checkpoint in the high word, epoch in the low).
    pub gci: u64,
}

impl LqhCommitReq {
    pub fn encode(&self, out: &mut Vec<u8>) {
        Writer::new(out)
            .u64(self.trans.0)
            .u8(self.flags)
            .u64(self.gci);
    }

    pub fn decode(buf: &[u8]) -> Result<LqhCommitReq, DecodeError> {
        let mut r = Reader::new(buf, "LQH_COMMITREQ");
        let trans = TransId(r.u64()?);
        let flags = r.u8()?;
        if flags & !LQH_COMMIT_BACKUP_ROWS_ONLY != 0 {
            return Err(r.error(format!("unknown flags {flags:#04x}")));
        }
        let gci = r.u64()?;
        r.finish()?;
        Ok(LqhCommitReq { trans, flags, gci })
    }

    /// True when only the rows held as a backup replica commit.
    pub fn backup_rows_only(&self) -> bool {
        self.flags & LQH_COMMIT_BACKUP_ROWS_ONLY != 0
    }
}

/// LQH_COMMITCONF and LQH_ABORTREQ/CONF: a transaction by id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransSignal {
    pub trans: TransId,
}

impl TransSignal {
    pub fn encode(&self, out: &mut Vec<u8>) {
        Writer::new(out).u64(self.trans.0);
    }

    pub fn decode(buf: &[u8]) -> Result<TransSignal, DecodeError> {
        let mut r = Reader::new(buf, "transaction signal");
        let v = TransSignal {
            trans: TransId(r.u64()?),
        };
        r.finish()?;
        Ok(v)
    }
}

/// API_REGCONF: whether the cluster has started, as this data node sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiRegConf {
    /// Every data node of the config is connected to this one and the cluster serves requests.
    pub started: bool,
    /// Data nodes this one has links to, itself included.
    pub data_nodes_up: u16,
    /// Data nodes in the config.
    pub data_nodes: u16,
}

impl ApiRegConf {
    pub fn encode(&self, out: &mut Vec<u8>) {
        Writer::new(out)
            .u8(u8::from(self.started))
            .u16(self.data_nodes_up)
            .u16(self.data_nodes);
    }

    pub fn decode(buf: &[u8]) -> Result<ApiRegConf, DecodeError> {
        let mut r = Reader::new(buf, "API_REGCONF");
        let v = ApiRegConf {
            started: r.u8()? != 0,
            data_nodes_up: r.u16()?,
            data_nodes: r.u16()?,
        };
        r.finish()?;
        Ok(v)
    }
}

fn encode_attrs(w: &mut Writer<'_>, attrs: &[(u16, Value)]) {
    w.u16(attrs.len() as u16);
    for (column, value) in attrs {
        w.u16(*column);
        value.encode(w);
    }
}

fn decode_attrs(r: &mut Reader<'_>) -> Result<Vec<(u16, Value)>, DecodeError> {
    let count = usize::from(r.u16()?);
    if count > COLUMNS_MAX {
        return Err(r.error(format!("{count} attributes, at most {COLUMNS_MAX}")));
    }
    let mut attrs = Vec::with_capacity(count);
    for _ in 0..count {
        let column = r.u16()?;
        attrs.push((column, Value::decode(r)?));
    }
    Ok(attrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lqh_signals_round_trip() {
        let req = LqhKeyReq {
            trans: TransId(0x0033_0000_0007),
            tc_node: 1,
            token: 9,
            op_index: 2,
            op_type: OperationType::Update,
            lock_mode: LockMode::Exclusive,
            table_id: 4,
            fragment: 3,
            key_bytes: vec![1, 2, 3],
            key: vec![Value::UInt32(5)],
            attrs: vec![(1, Value::Int64(-3)), (2, Value::Null)],
            run: 7,
            chain: vec![(2, 9)],
            flags: LQHKEY_COMMIT_AT_LAST_REPLICA,
            gci: 7 << 32,
            program: Some(Program {
                condition: None,
                exit_code: 626,
                changes: vec![(1, 7)],
            }),
        };
        let mut buf = Vec::new();
        req.encode(&mut buf);
        assert_eq!(LqhKeyReq::decode(&buf), Ok(req));
        assert!(LqhKeyReq::decode(&buf[..buf.len() - 1]).is_err());
        let conf = LqhKeyConf {
            trans: TransId(1),
            token: 2,
            op_index: 3,
            row: Some(vec![Value::Varchar("x".into())]),
            fired: vec![FiredChange {
                hidden_table_id: 7,
                op_type: OperationType::Insert,
                key: vec![Value::Int32(1)],
                pk: vec![9, 9],
            }],
            flags: LQHKEYCONF_COMMITTED,
        };
        let mut buf = Vec::new();
        conf.encode(&mut buf);
        assert_eq!(LqhKeyConf::decode(&buf), Ok(conf));
        for flags in [0, LQH_COMMIT_BACKUP_ROWS_ONLY] {
            let commit = LqhCommitReq {
                trans: TransId(0x0033_0000_0007),
                flags,
                gci: 9 << 32 | 4,
            };
            let mut buf = Vec::new();
            commit.encode(&mut buf);
            assert_eq!(LqhCommitReq::decode(&buf), Ok(commit));
            assert_eq!(commit.backup_rows_only(), flags != 0);
        }
        let mut unknown = Vec::new();
        LqhCommitReq {
            trans: TransId(1),
            flags: 2,
            gci: 0,
        }
        .encode(&mut unknown);
        assert!(LqhCommitReq::decode(&unknown).is_err(), "unknown flags");
    }

    proptest::proptest! {
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let _ = LqhKeyReq::decode(&bytes);
            let _ = LqhKeyConf::decode(&bytes);
            let _ = LqhKeyRef::decode(&bytes);
            let _ = TransSignal::decode(&bytes);
            let _ = LqhCommitReq::decode(&bytes);
            let _ = ApiRegConf::decode(&bytes);
            let _ = TcFailAnswer::decode(&bytes);
            let _ = TcFailQuery::decode(&bytes);
            let _ = IndexBuildRows::decode(&bytes);
            let _ = IndexBuildDone::decode(&bytes);
        }
    }
}
