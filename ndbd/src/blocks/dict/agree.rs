//! A system restart makes the restoring data nodes' dictionaries one. Each node restores its
//! own schema log up to the restart GCI, and every schema change is logged in the DICT
//! master's GCI on every node, so the logs agree at any GCI but for changes some node logged
//! and another did not: a new master's correction (`dict/takeover.rs`: a drop finished on the
//! nodes behind, a create undone on the nodes that had it) and the undo of a create some node
//! refused, both logged in a later GCI than the change; a create an old master logged and
//! died before passing on; and a drop the master applies to itself last, in its GCI of then.
//! A restart at a GCI between the two would bring back dictionaries that differ, and a table
//! some nodes lack can be neither used, created again nor dropped.
//!
//! So once a node has restored, it tells the master (DICT_RESTORED_REP, just before its
//! CNTR_WAITREP) the tables and indexes it holds, and its id counter; once every live node
//! has, the master sends (DICT_RESTART_DROP, just before CNTR_START_REP) those some node lacks,
//! and the highest counter; every node that holds one drops it before it serves, logging the
//! drop in the restarted cluster's first GCI, and every node takes the counter. (A node that
//! logged a create and its undo, or an object others lack, has a counter past theirs: the
//! master's next create would give ids the node had given, so it made the index under other
//! ids than the master, and its build waited for good for entries it took for a stale
//! build's: sim seed 0x500001a4.)
//! Dropping an object some node lacks takes the side each correction took (a drop finished,
//! a create undone), and loses nothing acknowledged: a create is answered only once every
//! node applied it and its GCI is restorable, so an object some node lacks is one whose
//! create was never acknowledged, or one a drop reached on some nodes; and a drop reaches no
//! node before every node has marked the table (no new work on it) and every transaction
//! holding its rows ended (PREP_DROP_TAB_REQ), and the master applies it to itself only once
//! every other node answered, so no drop is on the master alone while the others go on
//! writing the table. A unique index's create is logged on a node only once its build
//! succeeded there (`Builds::unlogged`), in an epoch no earlier than its entries: where the
//! build failed, neither it nor its undo is logged; where it succeeded, both are, and a
//! restart between the two drops it as some node lacks it.
//!
//! ```text
//! DICT_RESTORED_REP:  count u32 | per object: id u32 | table str16 | index str16 (empty: the table)
//!                     | next_id u32 (the node's id counter)
//! DICT_RESTART_DROP:  the same (the objects to drop; the counter every node takes)
//! ```

use std::collections::BTreeSet;
use std::time::Instant;

use rndb_config::NodeId;
use rndb_protocol::codec::{Reader, Writer};
use rndb_protocol::signals::{self, block, gsn, IndexName};
use rndb_transporter::FrameHeader;

use crate::blocks::{Kernel, Outbox, ProtocolViolation};
use crate::ndbfs::format::SchemaChange;

/// A table or an index: its id, its table's name, and its own name (empty for a table).
pub(crate) type Object = (u32, String, String);

/// Objects one DICT_RESTORED_REP or DICT_RESTART_DROP may name: tables and indexes together
/// cannot pass the configured maxima, which are far below this.
const OBJECTS_MAX: u32 = 1 << 16;

/// A schema log record that changes nothing but the id counter: its `first_id` is the
/// counter a system restart agreed (DICT_RESTART_DROP's), and it has no request.
pub(crate) const COUNTER_RECORD: u16 = gsn::DICT_RESTART_DROP;

/// `count u32 | per object: id u32 | table str16 | index str16 | next_id u32`.
pub(crate) fn encode_objects(objects: &[Object], next_id: u32, out: &mut Vec<u8>) {
    let mut w = Writer::new(out);
    w.u32(objects.len() as u32);
    for (id, table, index) in objects {
        w.u32(*id).str16(table).str16(index);
    }
    w.u32(next_id);
}

pub(crate) fn decode_objects(
    payload: &[u8],
    what: &'static str,
) -> Result<(Vec<Object>, u32), ProtocolViolation> {
    let mut r = Reader::new(payload, what);
    let malformed = |e: rndb_protocol::DecodeError| ProtocolViolation(e.to_string());
    let count = r.u32().map_err(malformed)?;
    if count > OBJECTS_MAX {
        return Err(ProtocolViolation(format!(
            "{what} names {count} objects, more than {OBJECTS_MAX}"
        )));
    }
    let mut objects = Vec::new();
    for _ in 0..count {
        let id = r.u32().map_err(malformed)?;
        let table = r.str16().map_err(malformed)?.to_string();
        objects.push((id, table, r.str16().map_err(malformed)?.to_string()));
    }
    let next_id = r.u32().map_err(malformed)?;
    super::schema::check_id_counter(next_id)?;
    r.finish().map_err(malformed)?;
    Ok((objects, next_id))
}

/// The objects some of `held` (each node's) lack, in id order.
pub(crate) fn lacked_by_some<'a>(held: impl IntoIterator<Item = &'a Vec<Object>>) -> Vec<Object> {
    let sets: Vec<BTreeSet<&Object>> = held.into_iter().map(|h| h.iter().collect()).collect();
    let every: BTreeSet<&Object> = sets.iter().flatten().copied().collect();
    every
        .into_iter()
        .filter(|object| sets.iter().any(|set| !set.contains(object)))
        .cloned()
        .collect()
}

impl Kernel {
    /// The tables (not a unique index's hidden one) and indexes this node holds, in id order.
    pub(crate) fn dict_objects(&self) -> Vec<Object> {
        let mut objects = Vec::new();
        for id in self.dict.table_ids() {
            // Blob parts tables come and go with their table.
            let own = |t: &&super::Table| t.hidden_for.is_none() && t.parts_of.is_none();
            let Some(table) = self.dict.get(id).filter(own) else {
                continue;
            };
            let name = &table.info.def.name;
            objects.push((id, name.clone(), String::new()));
            let indexes = (table.unique.iter().map(|u| u.index_id))
                .chain(table.ordered.iter().map(|o| o.index_id));
            for index_id in indexes {
                if let Some(index) = self.dict.index(index_id) {
                    objects.push((index_id, name.clone(), index.info.name.clone()));
                }
            }
        }
        objects.sort();
        objects
    }

    /// DICT_RESTORED_REP to the master (this node's objects straight into its restart, when
    /// it is the master).
    pub(crate) fn dict_restored_rep(&mut self, master: NodeId, out: &mut dyn Outbox) {
        let objects = self.dict_objects();
        let next_id = self.dict.next_id();
        if master == self.me {
            return self.restart_dict_restored(master, objects, next_id);
        }
        let header = FrameHeader {
            signal: gsn::DICT_RESTORED_REP,
            receiver_block: block::DBDICT,
            sender_block: block::DBDICT,
            request_id: 0,
        };
        self.unsent.send(out, master, header, &mut |b| {
            encode_objects(&objects, next_id, b)
        });
    }

    /// DICT_RESTORED_REP at the master.
    pub(crate) fn exec_dict_restored_rep(
        &mut self,
        from: NodeId,
        payload: &[u8],
    ) -> Result<(), ProtocolViolation> {
        let (objects, next_id) = decode_objects(payload, "DICT_RESTORED_REP")?;
        self.restart_dict_restored(from, objects, next_id);
        Ok(())
    }

    /// As master, once every live node restored: DICT_RESTART_DROP, naming the objects some
    /// of them lack and the highest id counter, to each of `live` (this node drops its own
    /// at once).
    pub(crate) fn dict_restart_drop(
        &mut self,
        lacked: Vec<Object>,
        next_id: u32,
        live: &[NodeId],
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        if !lacked.is_empty() {
            tracing::warn!(objects = ?lacked, nodes = ?live, "system restart: the restored dictionaries differ (a schema change some nodes had not logged when its master failed, or its correction not logged yet): every node drops the objects some lack, which were never acknowledged");
        }
        for &node in live {
            if node == self.me {
                self.drop_lacked(&lacked, next_id, out, now);
                continue;
            }
            let header = FrameHeader {
                signal: gsn::DICT_RESTART_DROP,
                receiver_block: block::DBDICT,
                sender_block: block::DBDICT,
                request_id: 0,
            };
            self.unsent.send(out, node, header, &mut |b| {
                encode_objects(&lacked, next_id, b)
            });
        }
    }

    /// DICT_RESTART_DROP from the master of this node's system restart.
    pub(crate) fn exec_dict_restart_drop(
        &mut self,
        from: NodeId,
        payload: &[u8],
        out: &mut dyn Outbox,
        now: Instant,
    ) -> Result<(), ProtocolViolation> {
        let (lacked, next_id) = decode_objects(payload, "DICT_RESTART_DROP")?;
        let restarting = self.restart.as_ref().is_some_and(|r| !r.node_restart);
        if from != self.qmgr.master() || !restarting {
            tracing::warn!(node = %from, master = %self.qmgr.master(), restarting, "DICT_RESTART_DROP from a data node that is not the master of this node's system restart: ignored");
            return Ok(());
        }
        self.drop_lacked(&lacked, next_id, out, now);
        Ok(())
    }

    /// Drops each of `lacked` this node holds (an index whose table goes too goes with it),
    /// logging each drop in the first GCI of the restarted cluster, and takes id counter
    /// `next_id` (the highest of the restoring nodes'). A counter this raises is logged too
    /// (`COUNTER_RECORD`), so that a restart that replays this node's log alone never gives
    /// again an id another node's log holds.
    fn drop_lacked(&mut self, lacked: &[Object], next_id: u32, out: &mut dyn Outbox, now: Instant) {
        let Some(restart_gci) = self.restart.as_ref().and_then(|r| r.gci) else {
            return;
        };
        let gci = u64::from(restart_gci + 1) << 32;
        if next_id > self.dict.next_id() {
            self.dict.advance_next_id(next_id);
            let counter = SchemaChange {
                signal: COUNTER_RECORD,
                first_id: next_id,
                request: Vec::new(),
            };
            self.dict_log.append(gci, &counter);
        }
        let held = self.dict_objects();
        let dropped_tables: Vec<&str> = (lacked.iter())
            .filter(|o| held.contains(o) && o.2.is_empty())
            .map(|o| o.1.as_str())
            .collect();
        for object in lacked.iter().filter(|o| held.contains(o)) {
            let (_, table, index) = object;
            let (signal, request, result) = match index.is_empty() {
                true => {
                    let mut request = Vec::new();
                    signals::encode_name(&mut request, table);
                    let result = self.apply_drop_table(table, out, now).map(|_| ());
                    (gsn::DROP_TABLE_REQ, request, result)
                }
                false if dropped_tables.contains(&table.as_str()) => continue,
                false => {
                    let name = IndexName {
                        table: table.clone(),
                        index: index.clone(),
                    };
                    let mut request = Vec::new();
                    name.encode(&mut request);
                    let result = self.apply_drop_index(name, out, now).map(|_| ());
                    (gsn::DROP_INDEX_REQ, request, result)
                }
            };
            match result {
                Ok(()) => {
                    let change = SchemaChange {
                        signal,
                        first_id: self.dict.next_id(),
                        request,
                    };
                    self.dict_log.append(gci, &change);
                    tracing::warn!(id = object.0, %table, %index, gci = restart_gci + 1, "system restart: dropped an object another data node lacks");
                }
                Err(e) => {
                    tracing::error!(id = object.0, %table, %index, error = %e, "system restart: could not drop an object another data node lacks")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_round_trip_and_bad_payloads_are_refused() {
        let objects = vec![
            (1, "t".to_string(), String::new()),
            (3, "t".to_string(), "ix".to_string()),
        ];
        let mut bytes = Vec::new();
        encode_objects(&objects, 9, &mut bytes);
        assert_eq!(
            decode_objects(&bytes, "test").expect("decodes"),
            (objects, 9)
        );
        assert!(decode_objects(&bytes[..bytes.len() - 1], "test").is_err());
        let mut long = bytes.clone();
        long.push(0);
        assert!(decode_objects(&long, "test").is_err());
        assert!(decode_objects(&u32::MAX.to_le_bytes(), "test").is_err());
    }

    #[test]
    fn an_object_any_node_lacks_is_named() {
        let t = |id: u32, table: &str, index: &str| (id, table.to_string(), index.to_string());
        let node1 = vec![t(1, "a", ""), t(2, "b", ""), t(4, "a", "ix")];
        let node2 = vec![t(1, "a", ""), t(3, "c", ""), t(4, "a", "ix")];
        let node3 = vec![t(1, "a", ""), t(2, "b", ""), t(3, "c", ""), t(4, "a", "ix")];
        assert_eq!(
            lacked_by_some([&node1, &node2, &node3]),
            vec![t(2, "b", ""), t(3, "c", "")]
        );
        assert_eq!(lacked_by_some([&node1, &node1]), Vec::<Object>::new());
    }
}
