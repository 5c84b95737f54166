//! Merged events (NDB's `NdbEventOperation::mergeEvents(true)`), without I/O: the changes of
//! one epoch to the same primary key made one event, and each BLOB or TEXT value assembled
//! whole from its head and the events of its parts table in the same epoch.
//!
//! A transaction writes a row's head and every part of each value it sets (`crate::blob`),
//! so an epoch that changed a value holds an event for each of its parts: the new value from
//! the parts' new images, the old value from their old images. An update that left a value
//! with parts as it was wrote none of them: that value is not in the epoch, and the event
//! names the column in [`EventData::blobs_undefined`] (NDB's `NdbBlob::getDefined` of -1).

use std::collections::{BTreeMap, HashMap};

use rndb_protocol::Value;

use crate::blob::{self, BlobColumn};
use crate::event::{EventData, EventType};
use crate::transaction::key_of;
use crate::{Error, Table};

/// Merges the changes of one epoch that name the same primary key of `table` into one event,
/// at the place of the first (NDB's merge: an insert then an update is the insert of the last
/// values; an insert then a delete is nothing; a delete then an insert is an update; an update
/// then a delete is the delete of the first old values). Other events keep their places.
pub(crate) fn merge_same_keys(table: &Table, events: Vec<EventData>) -> Vec<EventData> {
    let mut merged: Vec<Option<EventData>> = Vec::with_capacity(events.len());
    let mut at: HashMap<Vec<u8>, usize> = HashMap::new();
    for event in events {
        let Some(row) = event.values.as_ref().or(event.pre_values.as_ref()) else {
            merged.push(Some(event));
            continue;
        };
        let key = blob::key_bytes(table, &key_of(table, row));
        match at.get(&key) {
            Some(&i) => merged[i] = combine(merged[i].take(), event),
            None => {
                at.insert(key, merged.len());
                merged.push(Some(event));
            }
        }
    }
    merged.into_iter().flatten().collect()
}

/// Two changes of one row in one epoch, `first` committed before `next` (`None`: the changes
/// before `next` cancelled out).
fn combine(first: Option<EventData>, next: EventData) -> Option<EventData> {
    use EventType::{Delete, Insert, Update};
    let Some(first) = first else {
        return Some(next);
    };
    let kind = match (first.event_type, next.event_type) {
        (Insert, Update) => Insert,
        (Insert, Delete) => return None,
        (Update, Update) | (Delete, Insert) => Update,
        (Update, Delete) => Delete,
        // No row takes these in order (an insert of a row there, a change of a row not
        // there): the later change stands, as the row's last state.
        _ => return Some(next),
    };
    Some(EventData {
        event_type: kind,
        values: if kind == Delete { None } else { next.values },
        pre_values: if kind == Insert {
            None
        } else {
            first.pre_values
        },
        ..first
    })
}

/// One part of a value in an epoch: its data before and after (`None`: there was none, or
/// there is none now).
#[derive(Default)]
struct PartImages {
    before: Option<Vec<u8>>,
    after: Option<Vec<u8>>,
}

/// The parts of one column's values changed in an epoch: by the row's key, by part number.
#[derive(Default)]
pub(crate) struct EpochParts {
    by_row: HashMap<Vec<u8>, BTreeMap<u32, PartImages>>,
}

impl EpochParts {
    /// The epoch's events of `parts` (the parts table of a column of `table`), merged by part
    /// key. A part row that does not hold a part is the data nodes' fault: 4267.
    pub(crate) fn of(table: &Table, parts: &Table, events: Vec<EventData>) -> Result<Self, Error> {
        let keys = table.key_columns().len();
        let mut by_row: HashMap<Vec<u8>, BTreeMap<u32, PartImages>> = HashMap::new();
        for event in merge_same_keys(parts, events) {
            let Some(row) = event.values.as_ref().or(event.pre_values.as_ref()) else {
                continue;
            };
            let (Some(Value::UInt32(part)), true) = (row.get(keys), row.len() == keys + 2) else {
                return Err(bad_part(parts, row));
            };
            let data = |row: Option<Vec<Value>>| -> Result<Option<Vec<u8>>, Error> {
                match row.map(|mut r| r.pop()) {
                    None => Ok(None),
                    Some(Some(Value::Varbinary(data))) => Ok(Some(data)),
                    Some(other) => Err(bad_part(parts, &[other.unwrap_or(Value::Null)])),
                }
            };
            let images = PartImages {
                before: data(event.pre_values.clone())?,
                after: data(event.values.clone())?,
            };
            let key = blob::key_bytes(table, &row[..keys]);
            by_row.entry(key).or_default().insert(*part, images);
        }
        Ok(EpochParts { by_row })
    }
}

fn bad_part(parts: &Table, row: &[Value]) -> Error {
    Error::ndb_detail(
        4267,
        format!(
            "an event of parts table {} holds {row:?}, not a part",
            parts.name()
        ),
    )
}

/// Makes each BLOB and TEXT value of a merged change of `table` whole: from its head alone, or
/// with its parts from `parts` (by column). A value with parts the epoch did not write is
/// undefined: both images of it become NULL and the column goes into `blobs_undefined`.
pub(crate) fn assemble(
    table: &Table,
    event: &mut EventData,
    parts: &HashMap<usize, EpochParts>,
) -> Result<(), Error> {
    let Some(row) = event.values.as_ref().or(event.pre_values.as_ref()) else {
        return Ok(());
    };
    let key = blob::key_bytes(table, &key_of(table, row));
    for bc in table.blobs() {
        let changed = parts.get(&bc.column).and_then(|p| p.by_row.get(&key));
        let mut defined = true;
        for (image, after) in [(&mut event.values, true), (&mut event.pre_values, false)] {
            if let Some(row) = image.as_mut() {
                match whole(table, bc, &row[bc.column], changed, after)? {
                    Some(value) => row[bc.column] = value,
                    None => defined = false,
                }
            }
        }
        if !defined {
            for row in [&mut event.values, &mut event.pre_values]
                .into_iter()
                .flatten()
            {
                row[bc.column] = Value::Null;
            }
            event.blobs_undefined.push(bc.column);
        }
    }
    Ok(())
}

/// The whole value a head names, with its parts' new (`after`) or old images; `None` when
/// the epoch lacks one of them.
fn whole(
    table: &Table,
    bc: &BlobColumn,
    head: &Value,
    changed: Option<&BTreeMap<u32, PartImages>>,
    after: bool,
) -> Result<Option<Value>, Error> {
    let count = blob::parts_of(bc, blob::head_length(table, bc, head)?);
    let mut data = Vec::new();
    for part in 0..count {
        let image = (changed.and_then(|c| c.get(&(part as u32)))).and_then(|i| {
            if after {
                i.after.as_ref()
            } else {
                i.before.as_ref()
            }
        });
        match image {
            Some(bytes) => data.push(bytes.clone()),
            None => return Ok(None),
        }
    }
    blob::whole_value(table, bc, head, &data).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: EventType, after: Option<i64>, before: Option<i64>) -> EventData {
        let row = |v: i64| vec![Value::UInt32(1), Value::Int64(v)];
        EventData {
            event_type: kind,
            epoch: 7,
            fragment: 0,
            values: after.map(row),
            pre_values: before.map(row),
            blobs_undefined: Vec::new(),
        }
    }

    fn kinds(first: EventData, next: EventData) -> Option<(EventType, Option<i64>, Option<i64>)> {
        let v = |r: Option<Vec<Value>>| {
            r.map(|r| match r[1] {
                Value::Int64(v) => v,
                _ => unreachable!(),
            })
        };
        combine(Some(first), next).map(|e| (e.event_type, v(e.values), v(e.pre_values)))
    }

    #[test]
    fn changes_of_one_row_combine_as_ndb_merges_them() {
        use EventType::*;
        let ins = |a| event(Insert, Some(a), None);
        let upd = |a, b| event(Update, Some(a), Some(b));
        let del = |b| event(Delete, None, Some(b));
        assert_eq!(kinds(ins(1), upd(2, 1)), Some((Insert, Some(2), None)));
        assert_eq!(kinds(ins(1), del(1)), None);
        assert_eq!(
            kinds(upd(2, 1), upd(3, 2)),
            Some((Update, Some(3), Some(1)))
        );
        assert_eq!(kinds(upd(2, 1), del(2)), Some((Delete, None, Some(1))));
        assert_eq!(kinds(del(1), ins(5)), Some((Update, Some(5), Some(1))));
        // Out of order: the later stands.
        assert_eq!(kinds(del(1), upd(3, 2)), Some((Update, Some(3), Some(2))));
        // What cancelled out leaves the next change alone.
        assert_eq!(
            combine(None, ins(9)).map(|e| e.event_type),
            Some(EventType::Insert)
        );
    }
}
