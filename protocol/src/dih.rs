//! The payloads of DIH's signals between data nodes: the global checkpoint protocol (GCP_*,
//! COPY_GCI*) and the system restart's agreement on a GCI (CNTR_START_*).

use crate::codec::{DecodeError, Reader, Writer};

/// Every GCP_* and COPY_GCI* signal, and CNTR_START_REQ/CONF: one GCI. (A GCP_NODEFINISH names
/// the epoch whose commits have ended; a GCP_SAVEREQ and a COPY_GCIREQ, or a CNTR_START_*, a
/// global checkpoint in the high word.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcpSignal {
    pub gci: u64,
}

impl GcpSignal {
    pub fn encode(&self, out: &mut Vec<u8>) {
        Writer::new(out).u64(self.gci);
    }

    pub fn decode(buf: &[u8]) -> Result<GcpSignal, DecodeError> {
        let mut r = Reader::new(buf, "global checkpoint signal");
        let v = GcpSignal { gci: r.u64()? };
        r.finish()?;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gcp_signal_round_trips_and_refuses_other_lengths() {
        let mut b = Vec::new();
        GcpSignal { gci: 7 << 32 | 3 }.encode(&mut b);
        assert_eq!(GcpSignal::decode(&b).unwrap().gci, 7 << 32 | 3);
        assert!(GcpSignal::decode(&b[..7]).is_err());
        b.push(0);
        assert!(GcpSignal::decode(&b).is_err());
    }
}
