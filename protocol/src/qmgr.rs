//! The payloads of QMGR's signals between data nodes: a node failure that a node saw
//! (FAIL_REP, to the president) and that the president declares (NODE_FAILREP, to everyone),
//! and a node restart's (CM_REGREQ, START_PERMCONF; INCL_NODEREQ and the others that name a
//! node carry a [`FailRep`]). HEARTBEAT has no payload.
//!
//! COPY_ROWS carries the data node's redo-format records (`ndbd`'s `ndbfs/format.rs`: a PUT
//! record per row, each with its CRC), back to back.

use crate::codec::{DecodeError, Reader, Writer};
use crate::dih::{decode_restarts, encode_restarts, RestartId};
use crate::gsn;

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

/// Every arbitration signal (ARBIT_STARTREQ .. ARBIT_VERDICT, PREP_FAILREQ/CONF): the
/// arbitrator's ticket (ARBIT_VERDICT and PREP_FAILREQ/CONF: the side's request), a node (the
/// arbitrator in ARBIT_PREPREQ, the verdict in ARBIT_VERDICT, the side's count in
/// PREP_FAILREQ, else 0) and, in ARBIT_CHOOSEREQ, ARBIT_VERDICT and PREP_FAILREQ, the data
/// nodes of the side (PREP_FAILREQ: then those being copied to).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Arbit {
    pub ticket: u64,
    pub node: u16,
    pub nodes: Vec<u16>,
}

/// The most data nodes an ARBIT_CHOOSEREQ names (node ids are below 256).
pub const ARBIT_NODES_MAX: usize = 255;

impl Arbit {
    pub fn encode(&self, out: &mut Vec<u8>) {
        debug_assert!(self.nodes.len() <= ARBIT_NODES_MAX);
        let mut w = Writer::new(out);
        w.u64(self.ticket)
            .u16(self.node)
            .u16(self.nodes.len() as u16);
        for &node in &self.nodes {
            w.u16(node);
        }
    }

    pub fn decode(buf: &[u8]) -> Result<Arbit, DecodeError> {
        let mut r = Reader::new(buf, "ARBIT");
        let ticket = r.u64()?;
        let node = r.u16()?;
        let count = usize::from(r.u16()?);
        if count > ARBIT_NODES_MAX {
            return Err(r.error(format!("{count} data nodes (at most {ARBIT_NODES_MAX})")));
        }
        let mut nodes = Vec::with_capacity(count);
        for _ in 0..count {
            nodes.push(r.u16()?);
        }
        r.finish()?;
        Ok(Arbit {
            ticket,
            node,
            nodes,
        })
    }
}

/// The arbitrator's decisions, kept by the API node that arbitrates (and by the simulator's):
/// the ticket the president gave it, and the side chosen for that ticket.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ArbiterState {
    ticket: Option<u64>,
    chosen: Option<Vec<u16>>,
    /// The ticket before this one, when no side was chosen for it: a new president replaced
    /// it (a lower id that rejoined), and a node its ARBIT_PREPREQ had not reached yet asks
    /// with it. Such a request counts for the current ticket. A ticket a side was chosen for
    /// is never taken again: a late request of the side that lost must stay refused.
    undecided: Option<u64>,
}

/// What [`ArbiterState::answer`] decided, for the arbitrator's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArbiterEvent {
    /// The president made this node the arbitrator for a new ticket.
    Started,
    /// The president asked again for the ticket it holds.
    Restarted,
    /// The first side to ask for the ticket goes on.
    Chose(Vec<u16>),
    /// The chosen side, or a part of it, asked again: it is the chosen side now.
    Confirmed,
    /// Another side asked: it stops; the chosen one is named.
    Refused { chosen: Vec<u16> },
    /// A request for a ticket the arbitrator does not hold.
    UnknownTicket,
}

impl ArbiterState {
    /// True once a president made this node the arbitrator (ARBIT_STARTREQ).
    pub fn has_ticket(&self) -> bool {
        self.ticket.is_some()
    }

    /// The answer (signal and payload) to arbitration request `signal` (ARBIT_STARTREQ or
    /// ARBIT_CHOOSEREQ), with what happened; `None` for another signal.
    pub fn answer(&mut self, signal: u16, request: &Arbit) -> Option<(u16, Arbit, ArbiterEvent)> {
        let reply = |signal, event| {
            let answer = Arbit {
                ticket: request.ticket,
                node: 0,
                nodes: Vec::new(),
            };
            Some((signal, answer, event))
        };
        match signal {
            gsn::ARBIT_STARTREQ => {
                if self.ticket == Some(request.ticket) {
                    // The president asked again for the ticket it holds: a side chosen for it
                    // stays chosen (seed 0x6203fcd: node 1, restarted, made the ticket its
                    // earlier run had made; this forgot the side chosen for it, and the other
                    // side of the split, asking with it next, was chosen too).
                    return reply(gsn::ARBIT_STARTCONF, ArbiterEvent::Restarted);
                }
                let event = ArbiterEvent::Started;
                let undecided = match (self.ticket, &self.chosen) {
                    (Some(old), None) if old != request.ticket => Some(old),
                    (Some(old), None) => self.undecided.filter(|&u| u != old),
                    _ => None,
                };
                *self = ArbiterState {
                    ticket: Some(request.ticket),
                    chosen: None,
                    undecided,
                };
                reply(gsn::ARBIT_STARTCONF, event)
            }
            gsn::ARBIT_CHOOSEREQ => {
                let known = self.ticket == Some(request.ticket)
                    || (self.undecided.is_some() && self.undecided == Some(request.ticket));
                if !known {
                    return reply(gsn::ARBIT_CHOOSEREF, ArbiterEvent::UnknownTicket);
                }
                match &self.chosen {
                    None => {
                        self.chosen = Some(request.nodes.clone());
                        reply(
                            gsn::ARBIT_CHOOSECONF,
                            ArbiterEvent::Chose(request.nodes.clone()),
                        )
                    }
                    // Sides of a split share no data node (each node confirms one side): a
                    // request naming one of the chosen side's nodes is that side asking again
                    // (its president may have changed), or a part of it that split off since.
                    // The chosen side becomes that part, so that of two parts of it only the
                    // first to ask goes on.
                    Some(chosen) if request.nodes.iter().any(|n| chosen.contains(n)) => {
                        self.chosen = Some(request.nodes.clone());
                        reply(gsn::ARBIT_CHOOSECONF, ArbiterEvent::Confirmed)
                    }
                    Some(chosen) => {
                        let chosen = chosen.clone();
                        reply(gsn::ARBIT_CHOOSEREF, ArbiterEvent::Refused { chosen })
                    }
                }
            }
            _ => None,
        }
    }
}

/// CM_REGREQ: whether the sender serves (has started), and which run of its process this is
/// (a value no earlier run of that node had: see `INCL_NODEREQ`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmRegReq {
    pub started: bool,
    pub run: u64,
}

impl CmRegReq {
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer::new(out);
        w.u8(u8::from(self.started));
        w.u64(self.run);
    }

    pub fn decode(buf: &[u8]) -> Result<CmRegReq, DecodeError> {
        let mut r = Reader::new(buf, "CM_REGREQ");
        let started = match r.u8()? {
            0 => false,
            1 => true,
            other => return Err(r.error(format!("started flag {other}"))),
        };
        let run = r.u64()?;
        r.finish()?;
        Ok(CmRegReq { started, run })
    }
}

/// INCL_NODEREQ: the president includes `node`, the run of it that it let in (the `run` of
/// that run's CM_REGREQ). A node that has since heard another run of it register takes the
/// request for stale: the president let in a run that is gone. INCL_NODECONF carries the same
/// two fields back, so that the president takes a confirmation for the run it let in only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InclNodeReq {
    pub node: u16,
    pub run: u64,
}

impl InclNodeReq {
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer::new(out);
        w.u16(self.node);
        w.u64(self.run);
    }

    pub fn decode(buf: &[u8]) -> Result<InclNodeReq, DecodeError> {
        Self::decode_as(buf, "INCL_NODEREQ")
    }

    /// INCL_NODECONF: the same two fields, the inclusion a node confirms.
    pub fn decode_conf(buf: &[u8]) -> Result<InclNodeReq, DecodeError> {
        Self::decode_as(buf, "INCL_NODECONF")
    }

    fn decode_as(buf: &[u8], signal: &'static str) -> Result<InclNodeReq, DecodeError> {
        let mut r = Reader::new(buf, signal);
        let v = InclNodeReq {
            node: r.u16()?,
            run: r.u64()?,
        };
        r.finish()?;
        Ok(v)
    }
}

/// START_PERMREF: why the node is not let in now, and the data node it should ask (the
/// president as the refusing node sees it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartPermRef {
    pub president: u16,
    pub reason: String,
}

impl StartPermRef {
    pub fn encode(&self, out: &mut Vec<u8>) {
        Writer::new(out).u16(self.president).str16(&self.reason);
    }

    pub fn decode(buf: &[u8]) -> Result<StartPermRef, DecodeError> {
        let mut r = Reader::new(buf, "START_PERMREF");
        let v = StartPermRef {
            president: r.u16()?,
            reason: r.str16()?.to_string(),
        };
        r.finish()?;
        Ok(v)
    }
}

/// START_PERMCONF: the president's current epoch, the GCI the cluster last started from (its
/// last system restart, 0 after an initial start) and its restart history (the last restart
/// last), the data nodes alive in its view (a bitmap
/// by node id), the nodes that rejoined before (in the order they did: chains put them last in
/// that order), the sequence number of the last schema change (a new DICT master's takeover
/// compares them), the president's dictionary id counter (which may be past the ids of the
/// changes copied: a system restart dropped objects some node had made), and the dictionary
/// as schema-log records (each table and index as the schema change that made it, in the
/// order they were made).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartPermConf {
    pub gci: u64,
    /// The cluster's system restarts, the last the one it last started from.
    pub restarts: Vec<RestartId>,
    pub alive: [u64; 4],
    /// The live nodes whose files restore the cluster's restorable GCI, as the president
    /// knows them (a bitmap as `alive`).
    pub files_restore: [u64; 4],
    pub rejoined: Vec<u16>,
    pub schema_seq: u64,
    pub dict_next_id: u32,
    pub dictionary: Vec<u8>,
}

/// The most node ids a START_PERMCONF's rejoined list may hold (every node id).
const REJOINED_MAX: usize = 255;

impl StartPermConf {
    /// `gci u64 | restarts (count u8 | count × (no u32 | gci u32)) | alive
    /// 4 × u64 | files_restore 4 × u64 | rejoined count u16 | count × node u16 | schema_seq
    /// u64 | dict_next_id u32 | dictionary (the rest)`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer::new(out);
        w.u64(self.gci);
        encode_restarts(&mut w, &self.restarts);
        for word in self.alive.iter().chain(&self.files_restore) {
            w.u64(*word);
        }
        w.u16(self.rejoined.len() as u16);
        for &node in &self.rejoined {
            w.u16(node);
        }
        w.u64(self.schema_seq).u32(self.dict_next_id);
        out.extend_from_slice(&self.dictionary);
    }

    pub fn decode(buf: &[u8]) -> Result<StartPermConf, DecodeError> {
        let mut r = Reader::new(buf, "START_PERMCONF");
        let gci = r.u64()?;
        let restarts = decode_restarts(&mut r)?;
        let mut alive = [0u64; 4];
        let mut files_restore = [0u64; 4];
        for word in alive.iter_mut().chain(&mut files_restore) {
            *word = r.u64()?;
        }
        let count = usize::from(r.u16()?);
        if count > REJOINED_MAX {
            return Err(r.error(format!("{count} rejoined nodes")));
        }
        let rejoined = (0..count).map(|_| r.u16()).collect::<Result<_, _>>()?;
        let schema_seq = r.u64()?;
        let dict_next_id = r.u32()?;
        Ok(StartPermConf {
            gci,
            restarts,
            alive,
            files_restore,
            rejoined,
            schema_seq,
            dict_next_id,
            dictionary: r.rest().to_vec(),
        })
    }
}

/// The most tables a [`CopyFragReq`] may name (every table and index id of a dictionary fits).
pub const COPY_TABLES_MAX: usize = 1 << 16;

/// START_INFOCONF (restarting node → president) and COPY_FRAGREQ (president → each node that
/// copies): the restarting node, the GCI up to which it restored its own local checkpoint and
/// redo log (0: it restored nothing and everything is copied), the tables whose restored
/// rows it kept (for those, rows unchanged since that GCI are sent as a key only; the others
/// are copied whole), and in COPY_FRAGREQ the data nodes alive at the president (a bitmap as
/// START_PERMCONF's; zero in START_INFOCONF): a node plans its part of the copy only once it
/// holds none of the others alive.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CopyFragReq {
    pub node: u16,
    pub gci: u32,
    pub tables: Vec<u32>,
    pub alive: [u64; 4],
}

impl CopyFragReq {
    /// `node u16 | gci u32 | table count u32 | count × table id u32 | alive 4 × u64`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer::new(out);
        w.u16(self.node).u32(self.gci).u32(self.tables.len() as u32);
        for &table in &self.tables {
            w.u32(table);
        }
        for word in self.alive {
            w.u64(word);
        }
    }

    pub fn decode(buf: &[u8]) -> Result<CopyFragReq, DecodeError> {
        let mut r = Reader::new(buf, "COPY_FRAGREQ");
        let (node, gci) = (r.u16()?, r.u32()?);
        let count = r.u32()? as usize;
        if count > COPY_TABLES_MAX {
            return Err(r.error(format!("{count} tables")));
        }
        let tables = (0..count).map(|_| r.u32()).collect::<Result<_, _>>()?;
        let alive = [r.u64()?, r.u64()?, r.u64()?, r.u64()?];
        r.finish()?;
        Ok(CopyFragReq {
            node,
            gci,
            tables,
            alive,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arbit(ticket: u64, nodes: &[u16]) -> Arbit {
        Arbit {
            ticket,
            node: 0,
            nodes: nodes.to_vec(),
        }
    }

    #[test]
    fn a_ticket_replaced_undecided_still_counts_and_a_decided_one_never_again() {
        let mut state = ArbiterState::default();
        let (old, new, next) = (2 << 48 | 1, 1 << 48 | 1, 1 << 48 | 2);
        state.answer(gsn::ARBIT_STARTREQ, &arbit(old, &[]));
        // Node 1, rejoined with the lowest id, presides and starts the arbitrator anew; it
        // crashes before node 2 hears of the new ticket, and node 2 asks with the old one.
        state.answer(gsn::ARBIT_STARTREQ, &arbit(new, &[]));
        let (signal, _, event) = state
            .answer(gsn::ARBIT_CHOOSEREQ, &arbit(old, &[2]))
            .unwrap();
        assert_eq!(
            (signal, event),
            (gsn::ARBIT_CHOOSECONF, ArbiterEvent::Chose(vec![2]))
        );
        // One side only: the other side, with the current ticket, is refused.
        let (signal, _, _) = state
            .answer(gsn::ARBIT_CHOOSEREQ, &arbit(new, &[1]))
            .unwrap();
        assert_eq!(signal, gsn::ARBIT_CHOOSEREF);
        // After that decision the winner starts it again: the old tickets are gone, and a late
        // request of the side that lost stays refused.
        state.answer(gsn::ARBIT_STARTREQ, &arbit(next, &[]));
        for ticket in [old, new] {
            let (signal, _, event) = state
                .answer(gsn::ARBIT_CHOOSEREQ, &arbit(ticket, &[1]))
                .unwrap();
            assert_eq!(
                (signal, event),
                (gsn::ARBIT_CHOOSEREF, ArbiterEvent::UnknownTicket)
            );
        }
    }

    #[test]
    fn a_chosen_side_that_splits_again_goes_on_in_one_part_only() {
        let mut state = ArbiterState::default();
        let ticket = 1 << 48 | 1;
        state.answer(gsn::ARBIT_STARTREQ, &arbit(ticket, &[]));
        let ask = |state: &mut ArbiterState, nodes: &[u16]| {
            let (signal, _, event) = state
                .answer(gsn::ARBIT_CHOOSEREQ, &arbit(ticket, nodes))
                .unwrap();
            (signal, event)
        };
        let chose = ArbiterEvent::Chose(vec![1, 2, 3, 4]);
        assert_eq!(
            ask(&mut state, &[1, 2, 3, 4]),
            (gsn::ARBIT_CHOOSECONF, chose)
        );
        // The chosen side asks again under a new president, then splits in two before its
        // president started the arbitrator with a new ticket: the first part to ask goes on.
        let again = (gsn::ARBIT_CHOOSECONF, ArbiterEvent::Confirmed);
        assert_eq!(ask(&mut state, &[2, 3, 4]), again);
        assert_eq!(ask(&mut state, &[3, 4]), again);
        let (signal, _) = ask(&mut state, &[2]);
        assert_eq!(signal, gsn::ARBIT_CHOOSEREF);
        assert_eq!(ask(&mut state, &[4]), again);
    }

    #[test]
    fn a_fail_rep_round_trips_and_refuses_other_lengths() {
        let mut b = Vec::new();
        FailRep { node: 7 }.encode(&mut b);
        assert_eq!(FailRep::decode(&b).unwrap(), FailRep { node: 7 });
        assert!(FailRep::decode(&b[..1]).is_err());
        b.push(0);
        assert!(FailRep::decode(&b).is_err());
    }

    #[test]
    fn node_restart_payloads_round_trip_and_refuse_bad_input() {
        for started in [false, true] {
            let mut b = Vec::new();
            let req = CmRegReq {
                started,
                run: 0x0123_4567_89ab_cdef,
            };
            req.encode(&mut b);
            assert_eq!(CmRegReq::decode(&b).unwrap(), req);
        }
        assert!(CmRegReq::decode(&[2, 0, 0, 0, 0, 0, 0, 0, 0]).is_err());
        assert!(CmRegReq::decode(&[1]).is_err(), "a run is required");
        assert!(CmRegReq::decode(&[]).is_err());
        let incl = InclNodeReq { node: 4, run: 9 };
        let mut b = Vec::new();
        incl.encode(&mut b);
        assert_eq!(InclNodeReq::decode(&b).unwrap(), incl);
        assert!(InclNodeReq::decode(&b[..2]).is_err());
        let req = CopyFragReq {
            node: 3,
            gci: 41,
            tables: vec![2, 5],
            alive: [0b1110, 0, 0, 1],
        };
        let mut b = Vec::new();
        req.encode(&mut b);
        assert_eq!(CopyFragReq::decode(&b).unwrap(), req);
        assert!(CopyFragReq::decode(&b[..b.len() - 1]).is_err());
        b.push(0);
        assert!(CopyFragReq::decode(&b).is_err());
        let conf = StartPermConf {
            gci: 7 << 32 | 3,
            restarts: vec![RestartId { no: 0, gci: 0 }, RestartId { no: 4, gci: 6 }],
            alive: [0b110, 0, 0, 1],
            files_restore: [0b10, 0, 0, 0],
            rejoined: vec![3, 2],
            schema_seq: 9,
            dict_next_id: 11,
            dictionary: vec![1, 2, 3],
        };
        let mut b = Vec::new();
        conf.encode(&mut b);
        assert_eq!(StartPermConf::decode(&b).unwrap(), conf);
        assert!(StartPermConf::decode(&b[..20]).is_err());
        let refusal = StartPermRef {
            president: 2,
            reason: "busy".into(),
        };
        let mut b = Vec::new();
        refusal.encode(&mut b);
        assert_eq!(StartPermRef::decode(&b).unwrap(), refusal);
        assert!(StartPermRef::decode(&b[..3]).is_err());
    }
}
