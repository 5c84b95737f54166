//! The payloads of QMGR's signals between data nodes: a node failure that a node saw
//! (FAIL_REP, to the president) and that the president declares (NODE_FAILREP, to everyone).
//! HEARTBEAT has no payload.

use crate::codec::{DecodeError, Reader, Writer};

/// FAIL_REP and NODE_FAILREP: the node that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailRep {
    pub node: u16,
}

impl FailRep {
    pub fn encode(&self, out: &mut Vec<u8>) {
        Writer::new(out).u16(self.node);
    }

    pub fn decode(buf: &[u8]) -> Result<FailRep, DecodeError> {
        let mut r = Reader::new(buf, "FAIL_REP");
        let v = FailRep { node: r.u16()? };
        r.finish()?;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fail_rep_round_trips_and_refuses_other_lengths() {
        let mut b = Vec::new();
        FailRep { node: 7 }.encode(&mut b);
        assert_eq!(FailRep::decode(&b).unwrap(), FailRep { node: 7 });
        assert!(FailRep::decode(&b[..1]).is_err());
        b.push(0);
        assert!(FailRep::decode(&b).is_err());
    }
}
