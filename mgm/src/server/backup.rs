//! START BACKUP and ABORT BACKUP: the server that is asked coordinates an online backup
//! ([`BackupRound`]) through the data nodes' report replies (NDB's master BACKUP block does
//! this over signals; the steps are the same). The step a node is to take is repeated in
//! every reply while the backup runs, so a reply lost with its link is not a step lost; a data
//! node whose coordinator stops asking gives the backup up by itself (`ndbd`'s
//! `blocks/backup.rs`).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::backup_round::{BackupFailure, BackupRound, BackupSummary, Participant};
use crate::node_report::{BackupCommand, BackupPhase, BackupProgress};
use crate::status::NodeState;
use crate::wire::Message;

use super::log::{Category, Event, Severity};
use super::{Server, State};

/// The longest START BACKUP waits for its backup to end (the backup goes on after that).
pub const BACKUP_WAIT: Duration = Duration::from_secs(6 * 3600);
/// A participant that has not begun its part this long after START BACKUP fails the backup
/// (1326): a started node begins within a report or two.
pub const BACKUP_BEGIN_WAIT: Duration = Duration::from_secs(60);
/// Ended rounds whose outcome is kept for their waiters.
const DONE_KEPT: usize = 8;

/// How a backup round ended.
pub(super) type Outcome = Result<BackupSummary, BackupFailure>;

/// How long START BACKUP waits: until the backup is started on every participant, until it
/// ends, or not at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wait {
    No,
    Started,
    Completed,
}

impl State {
    /// Data node `node`'s last reported backup progress, if it serves.
    fn participant(&self, node: u16) -> Participant<'_> {
        match self.data.get(&node).and_then(|n| n.link.as_ref()) {
            Some(link) if link.state == NodeState::Started => {
                Participant::Serving(link.backup.as_ref())
            }
            _ => Participant::Gone,
        }
    }

    fn reported_backup(&self, node: u16) -> Option<&BackupProgress> {
        self.data.get(&node)?.link.as_ref()?.backup.as_ref()
    }

    /// Moves the coordinated backup on from what the participants last reported; returns the
    /// events to log when it ends.
    pub(super) fn backup_advance(&mut self, me: u16) -> Vec<Event> {
        let Some((mut round, began)) = self.backup.take() else {
            return Vec::new();
        };
        let mut ended = round.advance(|node| self.participant(node));
        let token = round.token;
        let late = (round.participants.iter())
            .find(|&&n| (self.reported_backup(n)).is_none_or(|p| p.token != token));
        if let Some(&node) = late.filter(|_| round.outcome.is_none()) {
            if began.elapsed() > BACKUP_BEGIN_WAIT {
                round.outcome = Some(Err(BackupFailure {
                    code: 1326,
                    text: format!(
                        "data node {node} did not begin its part within {} s",
                        BACKUP_BEGIN_WAIT.as_secs()
                    ),
                }));
                ended = true;
            }
        }
        let id = round.id;
        let event = match &round.outcome {
            Some(Ok(s)) if ended => Some(Event::new(
                me,
                Category::Backup,
                7,
                Severity::Info,
                format!(
                    "Backup {id} started from node {me} completed. StartGCP: {} StopGCP: {} \
                     #Records: {} #LogRecords: {} Data: {} bytes Log: {} bytes",
                    s.start_gci, s.stop_gci, s.records, s.log_records, s.data_bytes, s.log_bytes
                ),
            )),
            Some(Err(f)) if ended => Some(Event::new(
                me,
                Category::Backup,
                7,
                Severity::Alert,
                format!(
                    "Backup {id} started from {me} has been aborted. Error: {}",
                    f.code
                ),
            )),
            _ => None,
        };
        self.backup = Some((round, began));
        event.into_iter().collect()
    }

    /// The backup step data node `node` is to take, if any.
    pub(super) fn backup_command(&self, node: u16) -> Option<BackupCommand> {
        let (round, _) = self.backup.as_ref()?;
        round.command(node, self.reported_backup(node))
    }
}

impl Server {
    /// START BACKUP: `backupid` (optional: one more than the highest any node has), `wait`
    /// (`no`, `started` or `completed`, the default), `snapshot` (`start` or `end`, the
    /// default: the point the backup restores to).
    pub(super) fn start_backup(&self, request: &Message) -> Result<Message, String> {
        let wait = match request.get("wait").unwrap_or("completed") {
            "no" => Wait::No,
            "started" => Wait::Started,
            "completed" => Wait::Completed,
            other => return Err(format!("wait {other:?}: expected no, started or completed")),
        };
        let snapshot_start = match request.get("snapshot").unwrap_or("end") {
            "start" => true,
            "end" => false,
            other => return Err(format!("snapshot {other:?}: expected start or end")),
        };
        let asked: Option<u32> = request.parse("backupid")?;
        let me = self.me.0;
        let mut state = self.lock();
        if let Some((running, _)) = state.backup.as_ref().filter(|(b, _)| b.outcome.is_none()) {
            return Err(format!(
                "error 1302: A backup is already running (backup {})",
                running.id
            ));
        }
        let elsewhere = state.data.values().find_map(|n| {
            let p = n.link.as_ref()?.backup.as_ref()?;
            let running = matches!(p.phase, Some(BackupPhase::Running | BackupPhase::Scanned));
            running.then_some((p.id, p.token))
        });
        if let Some((other, token)) = elsewhere {
            let ours = (state.backup.as_ref()).is_some_and(|(b, _)| b.token == token)
                || (state.backup_done.iter()).any(|(t, _)| *t == token);
            return Err(match ours {
                true => format!(
                    "error 1302: A backup is already running (backup {other} ended here; the \
                     data nodes are still giving it up: try again in a moment)"
                ),
                false => format!(
                    "error 1302: A backup is already running (backup {other}, coordinated by \
                     another management server)"
                ),
            });
        }
        let participants: BTreeSet<u16> = state
            .data
            .iter()
            .filter(|(_, n)| {
                n.link
                    .as_ref()
                    .is_some_and(|l| l.state == NodeState::Started)
            })
            .map(|(&id, _)| id)
            .collect();
        if participants.is_empty() {
            return Err("no data node is started".into());
        }
        let highest = state
            .data
            .values()
            .filter_map(|n| Some(n.link.as_ref()?.backup_last))
            .chain([state.backup_last_id])
            .max()
            .unwrap_or(0);
        let id = match asked {
            Some(0) => return Err("backup id 0: backup ids start at 1".into()),
            Some(id) => id,
            None => highest
                .checked_add(1)
                .ok_or("every backup id is taken (the highest is 4294967295)")?,
        };
        state.backup_last_id = state.backup_last_id.max(id);
        // Names this round to the nodes: a later START BACKUP of the same id is another one.
        let token = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        if let Some((old, _)) = state.backup.take() {
            if let Some(outcome) = old.outcome {
                state.backup_done.push((old.token, outcome));
                let excess = state.backup_done.len().saturating_sub(DONE_KEPT);
                state.backup_done.drain(..excess);
            }
        }
        let mut round = BackupRound::new(id, participants.clone(), token);
        round.snapshot_start = snapshot_start;
        state.backup = Some((round, Instant::now()));
        let text = format!("Backup {id} started from node {me}");
        state
            .log
            .write(&Event::new(me, Category::Backup, 7, Severity::Info, text));
        let master = participants.first().copied().unwrap_or(0);
        let reply = Message::ok_reply(&request.command)
            .field("backupid", id)
            .field("master", master)
            .field("from", me);
        if wait == Wait::No {
            return Ok(reply);
        }
        let deadline = Instant::now() + BACKUP_WAIT;
        loop {
            for event in state.backup_advance(me) {
                state.log.write(&event);
            }
            let current = (state.backup.as_ref())
                .filter(|(b, _)| b.token == token)
                .and_then(|(b, _)| b.outcome.clone());
            let earlier = || {
                (state.backup_done.iter())
                    .find(|(t, _)| *t == token)
                    .map(|(_, outcome)| outcome.clone())
            };
            let started = || {
                participants.iter().all(|&n| {
                    (state.reported_backup(n)).is_some_and(|p| p.id == id && p.token == token)
                })
            };
            let outcome = current.or_else(earlier);
            let forgotten = outcome.is_none()
                && (state.backup.as_ref()).is_none_or(|(b, _)| b.token != token)
                && !(state.backup_done.iter()).any(|(t, _)| *t == token);
            if forgotten {
                return Err(format!(
                    "backup {id} ended, but several backups began since and its outcome is \
                     no longer kept here: the cluster log has it"
                ));
            }
            match outcome {
                Some(Ok(s)) => {
                    return Ok(reply
                        .field("startgci", s.start_gci)
                        .field("stopgci", s.stop_gci)
                        .field("records", s.records)
                        .field("logrecords", s.log_records)
                        .field("bytes", s.data_bytes)
                        .field("logbytes", s.log_bytes))
                }
                Some(Err(f)) => return Err(format!("error {}: {}", f.code, f.text)),
                None if wait == Wait::Started && started() => return Ok(reply),
                None => {}
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(format!(
                    "backup {id} still runs after {} s; the cluster log tells when it ends",
                    BACKUP_WAIT.as_secs()
                ));
            }
            state = self
                .changed
                .wait_timeout(state, (deadline - now).min(Duration::from_secs(1)))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// ABORT BACKUP: `backupid`, the backup this server coordinates.
    pub(super) fn abort_backup(&self, request: &Message) -> Result<Message, String> {
        let id: u32 = request.parse("backupid")?.ok_or("no backup id given")?;
        let me = self.me.0;
        let mut guard = self.lock();
        let state = &mut *guard;
        let Some((backup, _)) =
            (state.backup.as_mut()).filter(|(b, _)| b.id == id && b.outcome.is_none())
        else {
            return Err(format!(
                "backup {id} is not running (coordinated by this server)"
            ));
        };
        backup.outcome = Some(Err(BackupFailure {
            code: 1321,
            text: "Backup aborted by user request".into(),
        }));
        let text = format!("Backup {id} started from {me} has been aborted. Error: 1321");
        state
            .log
            .write(&Event::new(me, Category::Backup, 7, Severity::Alert, text));
        drop(guard);
        self.changed.notify_all();
        Ok(Message::ok_reply(&request.command))
    }
}
