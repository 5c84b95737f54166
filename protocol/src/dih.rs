//! The payloads of DIH's signals between data nodes: the global checkpoint protocol (GCP_*,
//! COPY_GCI*) and the system restart's agreement on a GCI (CNTR_START_*).

use crate::codec::{DecodeError, Reader, Writer};

/// Every GCP_* and COPY_GCI* signal, and CNTR_WAITREP and CNTR_START_REP: one GCI. (A
/// GCP_NODEFINISH names the epoch whose commits have ended; a GCP_SAVEREQ and a COPY_GCIREQ a
/// global checkpoint in the high word; CNTR_* the restart GCI, and CNTR_WAITREP in the high word
/// the number of the restart the sender restored for.) And a set of data nodes: in
/// GCP_SAVEREQ and CNTR_START_REP, those the sender has declared failed (a node saves a GCI
/// only once it has handled those failures too); in COPY_GCIREQ, those that confirmed the save
/// (GCP_SAVECONF), whose files restore the GCI once it is restorable; else the sender's failed
/// nodes. CNTR_START_REQ and CNTR_START_CONF have their own payloads (below).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcpSignal {
    pub gci: u64,
    /// Node ids as a bitmap: node n is bit n % 64 of word n / 64.
    pub nodes: [u64; 4],
}

impl GcpSignal {
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer::new(out);
        w.u64(self.gci);
        for word in self.nodes {
            w.u64(word);
        }
    }

    pub fn decode(buf: &[u8]) -> Result<GcpSignal, DecodeError> {
        let mut r = Reader::new(buf, "global checkpoint signal");
        let gci = r.u64()?;
        let mut nodes = [0; 4];
        for word in &mut nodes {
            *word = r.u64()?;
        }
        r.finish()?;
        Ok(GcpSignal { gci, nodes })
    }
}

/// A system restart, as the sysfiles record it: its number (one more than the newest any node
/// named when it was decided; the initial start is number 0) and its GCI.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct RestartId {
    pub no: u32,
    pub gci: u32,
}

/// The most restarts a history keeps: the newest ones.
pub const RESTARTS_KEPT: usize = 8;

/// `count u8 | count × (no u32 | gci u32)`, oldest first.
pub fn encode_restarts(w: &mut Writer<'_>, restarts: &[RestartId]) {
    w.u8(restarts.len() as u8);
    for r in restarts {
        w.u32(r.no).u32(r.gci);
    }
}

/// Reads what [`encode_restarts`] wrote: at most [`RESTARTS_KEPT`], each numbered above the one
/// before.
pub fn decode_restarts(r: &mut Reader<'_>) -> Result<Vec<RestartId>, DecodeError> {
    let count = usize::from(r.u8()?);
    if count > RESTARTS_KEPT {
        return Err(DecodeError::new(
            "restart history",
            format!("{count} restarts, more than {RESTARTS_KEPT}"),
        ));
    }
    let mut restarts: Vec<RestartId> = Vec::with_capacity(count);
    for _ in 0..count {
        let restart = RestartId {
            no: r.u32()?,
            gci: r.u32()?,
        };
        if restarts.last().is_some_and(|last| last.no >= restart.no) {
            return Err(DecodeError::new(
                "restart history",
                format!(
                    "restart {} follows restart {}",
                    restart.no,
                    restarts[restarts.len() - 1].no
                ),
            ));
        }
        restarts.push(restart);
    }
    Ok(restarts)
}

/// CNTR_START_REQ: what a starting node's sysfile names, `restorable u32 | restarts`: its
/// newest restorable GCI and the system restarts its files went through (the last one it took
/// part in last; see `restart.rs`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CntrStartReq {
    pub restorable: u32,
    pub restarts: Vec<RestartId>,
}

impl CntrStartReq {
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer::new(out);
        w.u32(self.restorable);
        encode_restarts(&mut w, &self.restarts);
    }

    pub fn decode(buf: &[u8]) -> Result<CntrStartReq, DecodeError> {
        let mut r = Reader::new(buf, "CNTR_START_REQ");
        let restorable = r.u32()?;
        let restarts = decode_restarts(&mut r)?;
        r.finish()?;
        Ok(CntrStartReq {
            restorable,
            restarts,
        })
    }
}

/// CNTR_START_CONF: the GCI the cluster restarts at, the nodes the master left out (failed),
/// and the cluster's restart history, this restart last: `gci u32 | failed 4 × u64 |
/// restarts`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CntrStartConf {
    pub gci: u32,
    pub failed: [u64; 4],
    pub restarts: Vec<RestartId>,
}

impl CntrStartConf {
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer::new(out);
        w.u32(self.gci);
        for word in self.failed {
            w.u64(word);
        }
        encode_restarts(&mut w, &self.restarts);
    }

    pub fn decode(buf: &[u8]) -> Result<CntrStartConf, DecodeError> {
        let mut r = Reader::new(buf, "CNTR_START_CONF");
        let gci = r.u32()?;
        let mut failed = [0; 4];
        for word in &mut failed {
            *word = r.u64()?;
        }
        let restarts = decode_restarts(&mut r)?;
        r.finish()?;
        Ok(CntrStartConf {
            gci,
            failed,
            restarts,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cntr_start_signals_round_trip_and_refuse_bad_histories() {
        let restarts = vec![RestartId { no: 0, gci: 0 }, RestartId { no: 3, gci: 16 }];
        let req = CntrStartReq {
            restorable: 17,
            restarts: restarts.clone(),
        };
        let mut b = Vec::new();
        req.encode(&mut b);
        assert_eq!(CntrStartReq::decode(&b).unwrap(), req);
        assert!(CntrStartReq::decode(&b[..b.len() - 1]).is_err());
        let conf = CntrStartConf {
            gci: 17,
            failed: [1 << 2, 0, 0, 0],
            restarts,
        };
        let mut b = Vec::new();
        conf.encode(&mut b);
        assert_eq!(CntrStartConf::decode(&b).unwrap(), conf);
        // Numbers must grow, and no more than RESTARTS_KEPT are kept.
        let backwards = CntrStartReq {
            restorable: 1,
            restarts: vec![RestartId { no: 2, gci: 5 }, RestartId { no: 2, gci: 6 }],
        };
        let mut b = Vec::new();
        backwards.encode(&mut b);
        assert!(CntrStartReq::decode(&b).is_err());
        let mut b = Vec::new();
        Writer::new(&mut b).u32(1).u8(RESTARTS_KEPT as u8 + 1);
        assert!(CntrStartReq::decode(&b).is_err());
    }

    #[test]
    fn a_gcp_signal_round_trips_and_refuses_other_lengths() {
        let mut b = Vec::new();
        let signal = GcpSignal {
            gci: 7 << 32 | 3,
            nodes: [1 << 3, 0, 0, 1 << 63],
        };
        signal.encode(&mut b);
        assert_eq!(GcpSignal::decode(&b).unwrap(), signal);
        assert!(GcpSignal::decode(&b[..39]).is_err());
        b.push(0);
        assert!(GcpSignal::decode(&b).is_err());
    }
}
