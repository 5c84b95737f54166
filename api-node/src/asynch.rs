//! Many transactions in flight from one thread: NDB's asynchronous API
//! (`executeAsynchPrepare`, `sendPollNdb`).
//!
//! ```text
//! prepare(tx, Commit) ─► prepared ─send()─► in flight ─poll()─► Completion { tx, result }
//!                        (encoded)   one flush per data node      (answers filed by the
//!                                    for every prepared execute    connection's poll owner)
//! ```
//!
//! `prepare` encodes a transaction's execute without sending it; `send` sends every prepared
//! execute, grouped by the data node that coordinates it, so a node receives all of them in one
//! flush (NDB's adaptive send: many transactions' signals to one node coalesce); `poll` returns
//! executes whose answers have come, waiting (reading the links) until at least `min` have.
//! The executor holds at most MaxNoOfConcurrentTransactions transactions (prepared or in
//! flight); past that `prepare` fails with 4006.
//!
//! A completed commit's GCI is its transaction's [`Transaction::gci`]; a transaction set to
//! [`Transaction::set_durable_commit`] before `prepare` completes only once its global
//! checkpoint is saved, and thousands of them in flight share each save (a group commit).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hashbrown::HashMap;
use rndb_config::NodeId;
use rndb_protocol::id_hash::SequentialIds;
use rndb_protocol::{AbortOption, ExecType};

use crate::connection::{Answers, Connection};
use crate::transaction::{Begun, Encoded, Sent};
use crate::{Cluster, Error, Transaction};

/// While executes wait on several links, the oldest's link is waited on this long at a time,
/// and the others are read in between.
const OTHER_LINKS_SLICE: Duration = Duration::from_millis(1);

/// Bytes of frames one send takes at most: prepared executes to one node go out in sends of
/// about this size (each flushed once), so one send never needs more send buffer than this.
const SEND_CHUNK_BYTES: usize = 64 * 1024;

/// A finished execute, handed back with its transaction.
#[derive(Debug)]
pub struct Completion<'c> {
    /// What the application passed to `prepare`, to tell completions apart.
    pub tag: u64,
    /// The transaction, with its rows and errors filed (read them as after `execute`).
    pub transaction: Transaction<'c>,
    /// The execute's outcome, as `execute_with` would have returned it.
    pub result: Result<(), Error>,
}

/// One execute between `prepare` and its completion. Several executors may share a cluster
/// (one per thread): each collects only the answers of its own executes.
struct Pending<'c> {
    tag: u64,
    transaction: Transaction<'c>,
    connection: Arc<Connection>,
    sent: Sent,
    /// Until `send`: the encoded frames.
    frames: Encoded,
    /// Its place in the executor's [`SendOrder`] once sent.
    seq: u64,
}

/// A sent execute in the executor's send order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Outstanding {
    node: NodeId,
    id: u32,
    deadline: Instant,
}

/// Holes [`SendOrder`] tolerates beyond as many as it has live entries before closing them up.
const SEND_ORDER_SLACK: usize = 1024;

/// Sent executes in send order: the oldest is the one `poll` waits for, and the first to time
/// out. An execute that completes leaves a hole, so that completing one costs no search (it
/// finds its entry by the `seq` that `push` gave it); holes at the front are dropped at once.
/// Holes behind an old execute (one that waits for a lock, say, while thousands complete after
/// it) are closed up once they outnumber the live entries by [`SEND_ORDER_SLACK`], which
/// renumbers the live ones: the queue stays within twice the executes in flight, plus the slack.
#[derive(Debug, Default)]
struct SendOrder {
    entries: VecDeque<Option<Outstanding>>,
    /// The seq of `entries[0]`.
    base: u64,
    /// Entries that are not holes.
    live: usize,
}

impl SendOrder {
    /// Appends `entry`; returns its seq.
    fn push(&mut self, entry: Outstanding) -> u64 {
        self.entries.push_back(Some(entry));
        self.live += 1;
        self.base + self.entries.len() as u64 - 1
    }

    /// The oldest entry still in the queue.
    fn oldest(&self) -> Option<Outstanding> {
        self.entries.front().copied().flatten()
    }

    /// Makes a hole of the entry `seq` (nothing when it is not there).
    fn remove(&mut self, seq: u64) {
        let Some(entry) = seq
            .checked_sub(self.base)
            .and_then(|index| self.entries.get_mut(usize::try_from(index).ok()?))
        else {
            return;
        };
        if entry.take().is_some() {
            self.live -= 1;
        }
        while let Some(None) = self.entries.front() {
            self.entries.pop_front();
            self.base += 1;
        }
    }

    /// Closes the holes up once there are too many (see the type's docs); `renumbered` is told
    /// each live entry's new seq.
    fn compact(&mut self, mut renumbered: impl FnMut(&Outstanding, u64)) {
        if self.entries.len() <= 2 * self.live + SEND_ORDER_SLACK {
            return;
        }
        self.entries.retain(Option::is_some);
        for (index, entry) in self.entries.iter().enumerate() {
            if let Some(entry) = entry {
                renumbered(entry, self.base + index as u64);
            }
        }
    }

    /// Entries, holes included.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Runs many transactions' executes at once from one thread. See the module docs.
pub struct AsyncExecutor<'c> {
    cluster: &'c Cluster,
    /// Boxed, like `in_flight`'s: an execute moves from here through `send`'s per-node lists
    /// into the map, and each move should copy a pointer, not the transaction.
    #[allow(clippy::vec_box)]
    prepared: Vec<Box<Pending<'c>>>,
    /// Sent executes by TC node and request id (boxed: a map entry moves 8 bytes, not the
    /// transaction).
    in_flight: HashMap<(NodeId, u32), Box<Pending<'c>>, SequentialIds>,
    /// How many executes are in flight to each data node.
    per_node: Vec<(NodeId, usize)>,
    /// Sent executes in send order.
    order: SendOrder,
    /// Completed without a round trip, or failed before sending; handed out by the next poll.
    ready: Vec<Completion<'c>>,
    /// MaxNoOfConcurrentTransactions.
    limit: usize,
}

impl std::fmt::Debug for AsyncExecutor<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncExecutor")
            .field("prepared", &self.prepared.len())
            .field("in_flight", &self.in_flight.len())
            .field("ready", &self.ready.len())
            .field("limit", &self.limit)
            .finish()
    }
}

impl<'c> AsyncExecutor<'c> {
    pub(crate) fn new(cluster: &'c Cluster, limit: usize) -> AsyncExecutor<'c> {
        AsyncExecutor {
            cluster,
            prepared: Vec::new(),
            in_flight: HashMap::default(),
            per_node: Vec::new(),
            order: SendOrder::default(),
            ready: Vec::new(),
            limit,
        }
    }

    /// Transactions held: prepared, in flight, or completed and not yet polled.
    pub fn len(&self) -> usize {
        self.prepared.len() + self.in_flight.len() + self.ready.len()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most transactions this executor holds at once (MaxNoOfConcurrentTransactions).
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// NDB's `executeAsynchPrepare`: encodes the execute of `transaction` (the operations
    /// defined since its last execute) to be sent by the next [`send`](Self::send). `tag` comes
    /// back in its [`Completion`]. Fails with 4006 when the executor already holds
    /// MaxNoOfConcurrentTransactions transactions; the transaction is then dropped (rolled
    /// back if it was open). A commit of a transaction whose scan locked rows on several data
    /// nodes first waits here for those nodes to confirm their locks (one round trip).
    pub fn prepare(
        &mut self,
        mut transaction: Transaction<'c>,
        exec: ExecType,
        abort: AbortOption,
        tag: u64,
    ) -> Result<(), Error> {
        if self.len() >= self.limit {
            return Err(Error::ndb_detail(
                4006,
                format!(
                    "{} transactions in flight: MaxNoOfConcurrentTransactions={}",
                    self.len(),
                    self.limit
                ),
            ));
        }
        // A commit after a scan that locked rows on other data nodes than the TC first
        // confirms that they still hold them, one blocking round trip to those nodes (see
        // `Transaction::scan_locks_to_confirm`); such a scan itself was read blocking.
        if let Err(e) = transaction.confirm_scan_locks(exec) {
            self.ready.push(Completion {
                tag,
                transaction,
                result: Err(e),
            });
            return Ok(());
        }
        match transaction.begin_execute(exec, abort) {
            Begun::Done(result) => self.ready.push(Completion {
                tag,
                transaction,
                result,
            }),
            Begun::Send {
                connection,
                frames,
                sent,
            } => self.prepared.push(Box::new(Pending {
                tag,
                transaction,
                connection,
                sent,
                frames,
                seq: 0,
            })),
        }
        Ok(())
    }

    /// Sends every prepared execute: per data node, as few sends (each one flush) as the
    /// frames need. An execute whose send fails completes with that error at the next poll.
    pub fn send(&mut self) {
        if self.prepared.is_empty() {
            return;
        }
        let mut by_node: Vec<(NodeId, Vec<Box<Pending<'c>>>)> = Vec::new();
        for pending in self.prepared.drain(..) {
            let node = pending.connection.peer;
            match by_node.iter_mut().find(|(n, _)| *n == node) {
                Some((_, list)) => list.push(pending),
                None => by_node.push((node, vec![pending])),
            }
        }
        for (node, list) in by_node {
            let mut chunk: Vec<Box<Pending<'c>>> = Vec::new();
            let mut chunk_bytes = 0;
            for pending in list {
                let bytes = pending.frames.size_bytes();
                if !chunk.is_empty() && chunk_bytes + bytes > SEND_CHUNK_BYTES {
                    self.send_chunk(node, std::mem::take(&mut chunk));
                    chunk_bytes = 0;
                }
                chunk_bytes += bytes;
                chunk.push(pending);
            }
            self.send_chunk(node, chunk);
        }
    }

    /// Sends the executes of `chunk`, all to `node`, in one batch.
    #[allow(clippy::vec_box)] // see `prepared`
    fn send_chunk(&mut self, node: NodeId, chunk: Vec<Box<Pending<'c>>>) {
        let Some(connection) = chunk.first().map(|p| Arc::clone(&p.connection)) else {
            return;
        };
        for pending in &chunk {
            connection.register_async_request(pending.transaction.request_id());
        }
        let sent = connection.send_frames(chunk.iter().flat_map(|p| p.frames.iter()));
        match sent {
            Ok(()) => {
                let deadline = self.cluster.deadline();
                for mut pending in chunk {
                    let id = pending.transaction.request_id();
                    pending.frames = Encoded::default();
                    pending.seq = self.order.push(Outstanding { node, id, deadline });
                    self.insert_in_flight((node, id), pending);
                }
            }
            Err(e) => {
                for mut pending in chunk {
                    connection.forget(pending.transaction.request_id());
                    let error = pending.transaction.send_failed(echo(&e));
                    self.ready.push(Completion {
                        tag: pending.tag,
                        transaction: pending.transaction,
                        result: Err(error),
                    });
                }
            }
        }
    }

    /// NDB's `pollNdb`: the executes that have completed, waiting up to `timeout` until at
    /// least `min` have (fewer when fewer are held). Executes past the API's request timeout
    /// complete with 4012, those on a failed link with 4010.
    pub fn poll(&mut self, min: usize, timeout: Duration) -> Vec<Completion<'c>> {
        let until = Instant::now() + timeout;
        let mut done = std::mem::take(&mut self.ready);
        // Sized for what the caller waits for: growing it would move every completion again.
        done.reserve(min.min(self.in_flight.len()));
        loop {
            self.collect(&mut done);
            let wanted = min.min(done.len() + self.in_flight.len());
            let now = Instant::now();
            if done.len() >= wanted || self.in_flight.is_empty() || now >= until {
                return done;
            }
            // Wait for the oldest execute still in flight; the connection's poll owner files
            // every other answer it reads meanwhile.
            let Some(Outstanding { node, id, deadline }) = self.order.oldest() else {
                return done;
            };
            let connection = self.cluster.connection_of(node);
            let mut wait_until = until.min(deadline);
            // Answers on the other links are read too, a slice at a time, so that no data
            // node's answers pile up unread while this one is waited for.
            let others: Vec<Arc<Connection>> = self.other_links(node);
            if !others.is_empty() {
                for other in others {
                    if let Err(e) = other.pump() {
                        self.fail_node(other.peer, &e, &mut done);
                    }
                }
                wait_until = wait_until.min(Instant::now() + OTHER_LINKS_SLICE);
            }
            match connection.await_reply(id, wait_until) {
                Err(e) => self.fail_node(node, &e, &mut done),
                Ok(true) if !connection.is_registered(id) => {
                    // Its answer was taken by someone else (it cannot be collected): the
                    // execute's outcome is unknown.
                    if let Some(pending) = self.take_in_flight((node, id)) {
                        let error = Error::ndb_detail(
                            4012,
                            format!("the answer from node {node} was lost"),
                        );
                        done.push(pending.complete(Err(error)));
                    }
                }
                Ok(_) => {}
            }
        }
    }

    /// NDB's `sendPollNdb`: [`send`](Self::send), then [`poll`](Self::poll).
    pub fn send_poll(&mut self, min: usize, timeout: Duration) -> Vec<Completion<'c>> {
        self.send();
        self.poll(min, timeout)
    }

    /// Links other than `node`'s with executes in flight.
    fn other_links(&self, node: NodeId) -> Vec<Arc<Connection>> {
        let cluster: &'c Cluster = self.cluster;
        self.per_node
            .iter()
            .filter(|&&(n, count)| n != node && count > 0)
            .map(|&(n, _)| cluster.connection_of(n))
            .collect()
    }

    fn insert_in_flight(&mut self, key: (NodeId, u32), pending: Box<Pending<'c>>) {
        match self.per_node.iter_mut().find(|(n, _)| *n == key.0) {
            Some((_, count)) => *count += 1,
            None => self.per_node.push((key.0, 1)),
        }
        self.in_flight.insert(key, pending);
    }

    fn take_in_flight(&mut self, key: (NodeId, u32)) -> Option<Box<Pending<'c>>> {
        let pending = self.in_flight.remove(&key)?;
        if let Some((_, count)) = self.per_node.iter_mut().find(|(n, _)| *n == key.0) {
            *count -= 1;
        }
        self.order.remove(pending.seq);
        Some(pending)
    }

    /// Moves every execute whose answer is filed (or whose time ran out) into `done`.
    fn collect(&mut self, done: &mut Vec<Completion<'c>>) {
        if self.in_flight.is_empty() {
            return;
        }
        let cluster: &'c Cluster = self.cluster;
        for connection in cluster.linked() {
            let peer = connection.peer;
            let in_flight = &self.in_flight;
            let answered = connection.take_async_done(|id| in_flight.contains_key(&(peer, id)));
            // Two passes: the executes leave the map first, and `done` is sized for all of them,
            // so it never grows (growing moved every completion it held).
            let answered: Vec<(Box<Pending<'c>>, Answers)> = answered
                .into_iter()
                .filter_map(|(id, answers)| Some((self.take_in_flight((peer, id))?, answers)))
                .collect();
            done.reserve(answered.len());
            for (pending, answers) in answered {
                done.push(pending.complete(Ok(answers)));
            }
            if let Some(e) = connection
                .is_failed()
                .then(|| connection.failure())
                .flatten()
            {
                let peer = connection.peer;
                self.fail_node(peer, &e, done);
            }
        }
        let now = Instant::now();
        while let Some(Outstanding { node, id, deadline }) = self.order.oldest() {
            if deadline > now {
                break;
            }
            let Some(pending) = self.take_in_flight((node, id)) else {
                // Not in the map (cannot happen: its entry would be a hole): dropped, so that
                // the executes behind it still time out.
                self.order.remove(self.order.base);
                continue;
            };
            pending.connection.forget(id);
            let error = Error::ndb_detail(4012, format!("no answer from node {node}"));
            done.push(pending.complete(Err(error)));
        }
        let in_flight = &mut self.in_flight;
        self.order.compact(|entry, seq| {
            if let Some(pending) = in_flight.get_mut(&(entry.node, entry.id)) {
                pending.seq = seq;
            }
        });
    }

    /// Every execute in flight to `node` fails with `e` (its link failed).
    fn fail_node(&mut self, node: NodeId, e: &Error, done: &mut Vec<Completion<'c>>) {
        let ids: Vec<(NodeId, u32)> = self
            .in_flight
            .keys()
            .filter(|(n, _)| *n == node)
            .copied()
            .collect();
        for key in ids {
            if let Some(pending) = self.take_in_flight(key) {
                pending.connection.forget(key.1);
                done.push(pending.complete(Err(echo(e))));
            }
        }
    }
}

impl<'c> Pending<'c> {
    /// Files the execute's answers (or its error) and hands the transaction back. The answers
    /// are filed where the execute lies, and only the transaction moves out.
    fn complete(mut self: Box<Self>, answers: Result<Answers, Error>) -> Completion<'c> {
        let result = self.transaction.complete_execute(self.sent, answers);
        let Pending {
            tag, transaction, ..
        } = *self;
        Completion {
            tag,
            transaction,
            result,
        }
    }
}

impl Drop for AsyncExecutor<'_> {
    /// Executes still in flight are abandoned: their transactions roll back when dropped.
    fn drop(&mut self) {
        for ((_, id), mut pending) in self.in_flight.drain() {
            pending.connection.forget(id);
            pending.transaction.count_unanswered(&pending.sent);
            pending.transaction.abandon();
        }
    }
}

/// The same error again, for each of several executes one failure ended (NDB errors keep their
/// code; others become 4010, the link's failure).
fn echo(e: &Error) -> Error {
    match e {
        Error::Ndb(n) => Error::Ndb(n.clone()),
        other => Error::ndb_detail(4010, other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: u32) -> Outstanding {
        Outstanding {
            node: NodeId(1),
            id,
            deadline: Instant::now(),
        }
    }

    #[test]
    fn the_oldest_is_the_first_pushed_that_was_not_removed() {
        let mut order = SendOrder::default();
        let seqs: Vec<u64> = (0..3).map(|id| order.push(entry(id))).collect();
        order.remove(seqs[1]);
        assert_eq!(order.oldest().map(|e| e.id), Some(0));
        order.remove(seqs[0]);
        assert_eq!(
            order.oldest().map(|e| e.id),
            Some(2),
            "the hole behind it went too"
        );
        assert_eq!(order.len(), 1);
        order.remove(seqs[0]);
        order.remove(seqs[2] + 1);
        assert_eq!(order.len(), 1, "removing what is not there changes nothing");
        order.remove(seqs[2]);
        assert_eq!(order.oldest(), None);
        assert_eq!(order.len(), 0);
    }

    #[test]
    fn holes_behind_an_old_entry_stay_bounded_and_seqs_follow_the_renumbering() {
        let mut order = SendOrder::default();
        let mut seq_of = std::collections::HashMap::new();
        seq_of.insert(0, order.push(entry(0)));
        // Entry 0 never completes; a hundred thousand after it do, about 100 at a time.
        for id in 1..=100_000u32 {
            seq_of.insert(id, order.push(entry(id)));
            if id % 100 == 0 {
                for done in id - 99..=id {
                    order.remove(seq_of.remove(&done).expect("live"));
                }
                order.compact(|entry, seq| {
                    seq_of.insert(entry.id, seq);
                });
                assert!(
                    order.len() <= 2 * seq_of.len() + SEND_ORDER_SLACK,
                    "{} entries for {} live",
                    order.len(),
                    seq_of.len()
                );
            }
        }
        assert_eq!(order.oldest().map(|e| e.id), Some(0));
        order.remove(seq_of[&0]);
        assert_eq!(order.len(), 0, "only holes were left behind entry 0");
    }
}
