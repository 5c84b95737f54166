//! The event API's signals (NDB's SUMA block): an API node subscribes to a table's committed
//! changes on every data node, and each data node sends the changes committed on its replicas,
//! epoch by epoch, each epoch closed by SUB_GCP_COMPLETE_REP once every change of it (and of
//! every epoch before) has been sent.
//!
//! ```text
//!  API ─SUB_START_REQ(table)─► SUMA ─SUB_START_CONF(start epoch)─► API       (request id = the
//!      ◄─SUB_TABLE_DATA(epoch, fragment, change)──                            subscription's,
//!      ◄─SUB_GCP_COMPLETE_REP(epoch)─────────────   once per completed epoch   for every frame)
//!  API ─SUB_STOP_REQ──────────► SUMA ─SUB_STOP_CONF─► API                     (ends the stream)
//! ```
//!
//! Every replica of a fragment sends its changes; the API keeps one replica's per fragment and
//! epoch (`rndb_api::event`). A refusal is SUB_START_REF (`signals::Refusal`).

use crate::codec::{DecodeError, Reader, Writer};

/// SUB_START_REQ: subscribe to the committed changes of a table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubStartReq {
    pub table_id: u32,
    pub table_version: u32,
}

impl SubStartReq {
    pub fn encode(&self, out: &mut Vec<u8>) {
        Writer::new(out).u32(self.table_id).u32(self.table_version);
    }
    pub fn decode(buf: &[u8]) -> Result<SubStartReq, DecodeError> {
        let mut r = Reader::new(buf, "SUB_START_REQ");
        let req = SubStartReq {
            table_id: r.u32()?,
            table_version: r.u32()?,
        };
        r.finish()?;
        Ok(req)
    }
}

/// SUB_START_CONF: the subscription is in place; every change committed on this node in
/// `start_gci` or later is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubStartConf {
    pub start_gci: u64,
}

impl SubStartConf {
    pub fn encode(&self, out: &mut Vec<u8>) {
        Writer::new(out).u64(self.start_gci);
    }
    pub fn decode(buf: &[u8]) -> Result<SubStartConf, DecodeError> {
        let mut r = Reader::new(buf, "SUB_START_CONF");
        let conf = SubStartConf {
            start_gci: r.u64()?,
        };
        r.finish()?;
        Ok(conf)
    }
}

/// What a committed change did to its row (NDB's TableEvent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    Insert,
    Update,
    Delete,
}

impl ChangeKind {
    fn code(self) -> u8 {
        match self {
            ChangeKind::Insert => 1,
            ChangeKind::Update => 2,
            ChangeKind::Delete => 3,
        }
    }
}

/// SUB_TABLE_DATA: one committed change of a row of the subscribed table, in epoch `gci`, on
/// fragment `fragment` of this node. `after` is the row's new image (insert, update), `before`
/// its image before (update, delete); each all columns in column order, as
/// `schema::encode_values` writes them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubTableData<'a> {
    pub gci: u64,
    pub fragment: u32,
    pub kind: ChangeKind,
    pub after: &'a [u8],
    pub before: &'a [u8],
}

impl<'a> SubTableData<'a> {
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer::new(out);
        w.u64(self.gci).u32(self.fragment).u8(self.kind.code());
        match self.kind {
            ChangeKind::Insert => w.bytes16(self.after),
            ChangeKind::Update => w.bytes16(self.after).bytes16(self.before),
            ChangeKind::Delete => w.bytes16(self.before),
        };
    }
    pub fn decode(buf: &'a [u8]) -> Result<SubTableData<'a>, DecodeError> {
        let mut r = Reader::new(buf, "SUB_TABLE_DATA");
        let gci = r.u64()?;
        let fragment = r.u32()?;
        let (kind, after, before) = match r.u8()? {
            1 => (ChangeKind::Insert, r.bytes16()?, &[][..]),
            2 => (ChangeKind::Update, r.bytes16()?, r.bytes16()?),
            3 => (ChangeKind::Delete, &[][..], r.bytes16()?),
            other => return Err(r.error(format!("unknown change kind {other}"))),
        };
        r.finish()?;
        Ok(SubTableData {
            gci,
            fragment,
            kind,
            after,
            before,
        })
    }
}

/// SUB_GCP_COMPLETE_REP's flag: this node dropped changes of the epochs since its last report
/// (MaxBufferedEpochBytes was reached): it vouches for none of them.
pub const SUB_GCP_DATA_LOST: u32 = 1;

/// SUB_GCP_COMPLETE_REP: every change this node committed in epoch `gci` or before has been
/// sent (unless `flags` has [`SUB_GCP_DATA_LOST`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubGcpCompleteRep {
    pub gci: u64,
    pub flags: u32,
}

impl SubGcpCompleteRep {
    pub fn encode(&self, out: &mut Vec<u8>) {
        Writer::new(out).u64(self.gci).u32(self.flags);
    }
    pub fn decode(buf: &[u8]) -> Result<SubGcpCompleteRep, DecodeError> {
        let mut r = Reader::new(buf, "SUB_GCP_COMPLETE_REP");
        let rep = SubGcpCompleteRep {
            gci: r.u64()?,
            flags: r.u32()?,
        };
        r.finish()?;
        Ok(rep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_change_kind_carries_only_its_images() {
        for kind in [ChangeKind::Insert, ChangeKind::Update, ChangeKind::Delete] {
            let data = SubTableData {
                gci: 7 << 32 | 3,
                fragment: 5,
                kind,
                after: if kind == ChangeKind::Delete {
                    b""
                } else {
                    b"new"
                },
                before: if kind == ChangeKind::Insert {
                    b""
                } else {
                    b"old"
                },
            };
            let mut bytes = Vec::new();
            data.encode(&mut bytes);
            assert_eq!(SubTableData::decode(&bytes).unwrap(), data);
            bytes.push(0);
            assert!(SubTableData::decode(&bytes).is_err(), "trailing byte");
        }
        let mut bad = Vec::new();
        Writer::new(&mut bad).u64(1).u32(0).u8(9);
        let e = SubTableData::decode(&bad).unwrap_err().to_string();
        assert!(e.contains("unknown change kind 9"), "{e}");
    }

    #[test]
    fn requests_and_reports_round_trip() {
        let req = SubStartReq {
            table_id: 3,
            table_version: 2,
        };
        let mut b = Vec::new();
        req.encode(&mut b);
        assert_eq!(SubStartReq::decode(&b).unwrap(), req);
        let conf = SubStartConf { start_gci: 99 };
        b.clear();
        conf.encode(&mut b);
        assert_eq!(SubStartConf::decode(&b).unwrap(), conf);
        let rep = SubGcpCompleteRep {
            gci: 1 << 33,
            flags: SUB_GCP_DATA_LOST,
        };
        b.clear();
        rep.encode(&mut b);
        assert_eq!(SubGcpCompleteRep::decode(&b).unwrap(), rep);
        assert!(SubGcpCompleteRep::decode(&b[..5]).is_err());
    }
}
