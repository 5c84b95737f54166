//! The payloads of DIH's signals between data nodes: the global checkpoint protocol (GCP_*,
//! COPY_GCI*) and the system restart's agreement on a GCI (CNTR_START_*).

use crate::codec::{DecodeError, Reader, Writer};

/// Every GCP_* and COPY_GCI* signal, and CNTR_START_REQ/CONF: one GCI. (A GCP_NODEFINISH names
/// the epoch whose commits have ended; a GCP_SAVEREQ and a COPY_GCIREQ, or a CNTR_START_*, a
/// global checkpoint in the high word.) And a set of data nodes: in GCP_SAVEREQ and
/// CNTR_START_*, those the sender has declared failed (a node saves a GCI only once it has
/// handled those failures too); in COPY_GCIREQ, those that confirmed the save (GCP_SAVECONF),
/// whose files restore the GCI once it is restorable; else the sender's failed nodes.
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

#[cfg(test)]
mod tests {
    use super::*;

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
