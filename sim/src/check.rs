//! The checkers: the bank's invariant (the total never changes, no account goes negative) and
//! linearizability of single-key registers (Wing and Gong's search with Lowe's cache, split by
//! key as Porcupine does, so that each search is small). A set's elements are checked as
//! registers of two states (absent, present) that inserts and deletes move (see [`RegOp`]).

use std::collections::{BTreeMap, HashSet};

/// The most operations one key's history may hold: the search keeps the set of linearized
/// operations in a `u128`. The register workload stops choosing a key once it is full.
pub const KEY_OPS_MAX: usize = 128;

/// States the search may visit per key before it gives up (the history is then reported as
/// undecided, not as a violation).
pub const SEARCH_STATES_MAX: usize = 2_000_000;

/// Checks one full read of the bank: every account read once, the balances sum to `total`, and
/// none is negative.
pub fn check_bank(balances: &[(i32, i64)], accounts: usize, total: i64) -> Result<(), String> {
    if balances.len() != accounts {
        return Err(format!(
            "a full read returned {} of {accounts} accounts: {balances:?}",
            balances.len()
        ));
    }
    if let Some((id, balance)) = balances.iter().find(|(_, b)| *b < 0) {
        return Err(format!(
            "account {id} is negative ({balance}): {balances:?}"
        ));
    }
    let sum: i64 = balances.iter().map(|(_, b)| b).sum();
    if sum != total {
        return Err(format!(
            "the accounts sum to {sum}, not {total} (off by {}): {balances:?}",
            sum - total
        ));
    }
    Ok(())
}

/// Whether a transfer's ledger row must be in the final read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Acknowledged, and durable through every cluster crash after it.
    Present,
    /// Surely not applied (refused, or lost before its commit was sent).
    Absent,
    /// Unknown outcome, or acknowledged and not durable at the crash after it.
    Either,
}

/// Checks the bank against its ledger: every row found belongs to a transfer whose commit was
/// sent, with that transfer's accounts and amount, and no row of a surely failed transfer is
/// there; every transfer that must be there is; and the final balances are the initial ones
/// moved by exactly the transfers whose rows are there (a transfer is atomic: its balances
/// and its ledger row are restored together or not at all). `transfers`: (id, ledger value,
/// expectation); `rows`: the ledger rows read, id → value.
pub fn check_ledger(
    initial_balance: i64,
    balances: &BTreeMap<i32, i64>,
    transfers: &[(i32, i64, Expect)],
    rows: &BTreeMap<i32, i64>,
) -> Result<(), String> {
    let by_id: BTreeMap<i32, (i64, Expect)> =
        transfers.iter().map(|&(id, v, e)| (id, (v, e))).collect();
    for (&id, &value) in rows {
        match by_id.get(&id) {
            Some(&(v, _)) if v != value => {
                return Err(format!(
                    "ledger row {id} holds {value:#x}, but its transfer wrote {v:#x}"
                ))
            }
            Some((_, Expect::Absent)) => {
                return Err(format!(
                    "ledger row {id} is there, but its transfer failed (it was refused or never committed)"
                ))
            }
            Some(_) => {}
            None => return Err(format!("ledger row {id} belongs to no transfer sent")),
        }
    }
    let lost: Vec<i32> = transfers
        .iter()
        .filter(|&&(id, _, e)| e == Expect::Present && !rows.contains_key(&id))
        .map(|&(id, _, _)| id)
        .collect();
    if !lost.is_empty() {
        return Err(format!(
            "{} acknowledged durable transfers are missing from the ledger (lost): {lost:?}",
            lost.len()
        ));
    }
    let mut expected: BTreeMap<i32, i64> =
        balances.keys().map(|&id| (id, initial_balance)).collect();
    for &value in rows.values() {
        let (from, to, amount) = (
            (value >> 48) as i32 & 0xffff,
            (value >> 32) as i32 & 0xffff,
            value & 0xffff_ffff,
        );
        *expected.entry(from).or_default() -= amount;
        *expected.entry(to).or_default() += amount;
    }
    if &expected != balances {
        let differ: Vec<String> = expected
            .iter()
            .filter(|(id, v)| balances.get(id) != Some(v))
            .map(|(id, v)| {
                format!(
                    "account {id}: {} read, {v} by the ledger",
                    balances.get(id).map_or("none".into(), |b| b.to_string())
                )
            })
            .collect();
        return Err(format!(
            "the balances are not what the {} transfers in the ledger made of them: {}",
            rows.len(),
            differ.join("; ")
        ));
    }
    Ok(())
}

/// What one register operation did. A set's element is a register too, 0 while absent and
/// 1 while present: an insert that succeeded moves it from 0 to 1, a delete from 1 to 0, and
/// an insert refused with 630 (the row existed) reads 1, a delete or read refused with 626
/// (no such row) reads 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegOp {
    /// Wrote this (unique) value.
    Write(i64),
    /// Read this value.
    Read(i64),
    /// Inserted the element: it must have been absent (0), and is present (1) after.
    Insert,
    /// Deleted the element: it must have been present (1), and is absent (0) after.
    Delete,
}

/// A set element's state in the register model.
pub const ABSENT: i64 = 0;
/// See [`ABSENT`].
pub const PRESENT: i64 = 1;

/// One operation of a key's history, as the client saw it. Operations that failed (surely not
/// applied) are left out; a read whose outcome is unknown is left out (it constrains nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistoryOp {
    pub op: RegOp,
    /// Which client ran it (for messages).
    pub client: u16,
    /// Simulated ns when the client sent it.
    pub invoke_ns: u64,
    /// Simulated ns when the client got its answer; `None` for an outcome the client never
    /// learned (a write that may or may not have taken effect, at any time after its invoke).
    pub complete_ns: Option<u64>,
    /// For an outcome never learned: the time by which it took effect if it did (a cluster
    /// crash ended it: lost, or in effect before the crash); `None`: no such time.
    pub deadline_ns: Option<u64>,
}

/// How a key's check ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Linearizable,
    /// The search gave up after [`SEARCH_STATES_MAX`] states.
    Undecided,
}

/// Checks that a register's history, starting from `initial`, is linearizable: some order of
/// its operations respects real time (an operation that completed before another was invoked
/// comes first), every read returns the latest write before it, and every completed operation
/// is in it (a write with an unknown outcome may be left out).
pub fn check_register(initial: i64, ops: &[HistoryOp]) -> Result<Verdict, String> {
    if ops.len() > KEY_OPS_MAX {
        return Err(format!(
            "{} operations on one key, more than the checker takes ({KEY_OPS_MAX})",
            ops.len()
        ));
    }
    if let Some(op) = ops
        .iter()
        .find(|o| matches!(o.op, RegOp::Read(_)) && o.complete_ns.is_none())
    {
        return Err(format!(
            "a read without an answer is in the history: {op:?}"
        ));
    }
    match search(initial, ops) {
        Some(true) => Ok(Verdict::Linearizable),
        None => Ok(Verdict::Undecided),
        Some(false) => Err(describe_violation(
            initial,
            &shortest_violation(initial, ops),
        )),
    }
}

/// True when `ops` (at most [`KEY_OPS_MAX`]) linearize from `initial`; `None` past the budget.
fn search(initial: i64, ops: &[HistoryOp]) -> Option<bool> {
    let must: u128 = ops
        .iter()
        .enumerate()
        .filter(|(_, o)| o.complete_ns.is_some())
        .fold(0, |m, (i, _)| m | 1 << i);
    let mut search = Search {
        ops,
        must,
        seen: HashSet::new(),
    };
    search.run(0, initial)
}

/// The shortest start of a violating history that violates too, for the message: the
/// operations invoked up to some time, with every write a read among them could have seen
/// (invoked before that read completed), so that cutting the history invents no violation.
fn shortest_violation(initial: i64, ops: &[HistoryOp]) -> Vec<HistoryOp> {
    let mut sorted = ops.to_vec();
    sorted.sort_by_key(|o| (o.invoke_ns, o.complete_ns));
    for end in 1..=sorted.len() {
        let cut = sorted[end - 1].invoke_ns;
        let seen_by = sorted[..end]
            .iter()
            .filter_map(|o| o.complete_ns)
            .max()
            .unwrap_or(cut);
        let start: Vec<HistoryOp> = sorted
            .iter()
            .copied()
            .filter(|o| {
                o.invoke_ns <= cut || (!matches!(o.op, RegOp::Read(_)) && o.invoke_ns <= seen_by)
            })
            .collect();
        if search(initial, &start) == Some(false) {
            return start;
        }
    }
    sorted
}

struct Search<'a> {
    ops: &'a [HistoryOp],
    /// The operations every linearization must hold (those that completed).
    must: u128,
    /// (linearized set, register value) states already explored without success. Looked up,
    /// never iterated, so its hasher's random order cannot leak into a run.
    seen: HashSet<(u128, i64)>,
}

impl Search<'_> {
    /// True when the operations outside `done` can follow, starting from `value`; `None` when
    /// the state budget ran out.
    fn run(&mut self, done: u128, value: i64) -> Option<bool> {
        if done & self.must == self.must {
            return Some(true);
        }
        if !self.seen.insert((done, value)) {
            return Some(false);
        }
        if self.seen.len() > SEARCH_STATES_MAX {
            return None;
        }
        // An operation can take effect next only if no other pending operation completed
        // before it was invoked (or, of unknown outcome, had to take effect before it).
        let min_complete = self
            .pending(done)
            .filter_map(|(_, o)| o.complete_ns.or(o.deadline_ns))
            .min()
            .unwrap_or(u64::MAX);
        let candidates: Vec<(usize, HistoryOp)> = self
            .pending(done)
            .filter(|(_, o)| o.invoke_ns <= min_complete)
            .collect();
        for (i, op) in candidates {
            // An operation with a deadline may also never have happened: it is dropped.
            if op.complete_ns.is_none()
                && op.deadline_ns.is_some()
                && self.run(done | 1 << i, value)?
            {
                return Some(true);
            }
            let next = match op.op {
                RegOp::Read(v) if v == value => value,
                RegOp::Read(_) => continue,
                RegOp::Write(v) => v,
                RegOp::Insert if value == ABSENT => PRESENT,
                RegOp::Delete if value == PRESENT => ABSENT,
                RegOp::Insert | RegOp::Delete => continue,
            };
            if self.run(done | 1 << i, next)? {
                return Some(true);
            }
        }
        Some(false)
    }

    fn pending(&self, done: u128) -> impl Iterator<Item = (usize, HistoryOp)> + '_ {
        self.ops
            .iter()
            .copied()
            .enumerate()
            .filter(move |(i, _)| done & (1 << i) == 0)
    }
}

/// A register value as the workload makes them: the writing client's node id and its request
/// id (`52:17`), or the initial value.
pub fn value_name(value: i64) -> String {
    if value >> 32 == 0 {
        value.to_string()
    } else {
        format!("{}:{}", value >> 32, value & 0xffff_ffff)
    }
}

/// A violation's message: the history in invoke order, one operation a line.
fn describe_violation(initial: i64, ops: &[HistoryOp]) -> String {
    let mut sorted: Vec<&HistoryOp> = ops.iter().collect();
    sorted.sort_by_key(|o| (o.invoke_ns, o.complete_ns));
    let mut text = format!(
        "no linearization of these {} operations (the shortest start of the key's history that has none; initial value {initial}):",
        ops.len()
    );
    for o in sorted {
        let end = o.complete_ns.map_or("unknown".to_string(), |c| {
            format!("{:.6} ms", c as f64 / 1e6)
        });
        let op = match o.op {
            RegOp::Write(v) => format!("write {}", value_name(v)),
            RegOp::Read(v) => format!("read  {}", value_name(v)),
            RegOp::Insert => "insert".to_string(),
            RegOp::Delete => "delete".to_string(),
        };
        text.push_str(&format!(
            "\n    client {:>3} {op:<14} from {:>12.6} ms to {end}",
            o.client,
            o.invoke_ns as f64 / 1e6
        ));
    }
    text
}
