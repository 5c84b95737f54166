//! START BACKUP and ABORT BACKUP: the server that is asked coordinates an online backup
//! through the data nodes' report replies (NDB's master BACKUP block does this over signals;
//! the steps are the same).
//!
//! ```text
//!   START BACKUP ─▶ every started data node: start <id> <participants>
//!                  ◀─ each: scanned (the newest GCI its rows and logged changes can have)
//!                ─▶ stop <id> <the newest of those>
//!                  ◀─ each: completed (log and control file synced)
//! ```
//!
//! The step a node is to take is repeated in every reply while the backup runs, so a reply
//! lost with its link is not a step lost. A participant whose report link closes, that is no
//! longer started, or that reports a failure, ends the backup (1326, or its own error), and
//! the others are told to abort; a data node whose coordinator stops asking gives the backup
//! up by itself (`ndbd`'s `blocks/backup.rs`).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::node_report::{BackupCommand, BackupPhase, BackupProgress};
use crate::status::NodeState;
use crate::wire::Message;

use super::log::{Category, Event, Severity};
use super::{Server, State};

/// The longest START BACKUP waits for its backup to end (the backup goes on after that).
pub const BACKUP_WAIT: Duration = Duration::from_secs(6 * 3600);

/// The backup this server coordinates, or coordinated last.
#[derive(Debug)]
pub(super) struct Backup {
    id: u32,
    participants: BTreeSet<u16>,
    stop_gci: Option<u32>,
    outcome: Option<Result<Summary, Failure>>,
}

/// A completed backup, as NDB's completion event reports it.
#[derive(Clone, Copy, Debug, Default)]
struct Summary {
    start_gci: u32,
    stop_gci: u32,
    records: u64,
    log_records: u64,
    data_bytes: u64,
    log_bytes: u64,
}

#[derive(Clone, Debug)]
struct Failure {
    code: u32,
    text: String,
}

/// How long START BACKUP waits: until the backup is started on every participant, until it
/// ends, or not at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wait {
    No,
    Started,
    Completed,
}

impl State {
    /// Data node `node`'s reported progress in backup `id`.
    fn backup_progress(&self, node: u16, id: u32) -> Option<&BackupProgress> {
        let link = self.data.get(&node)?.link.as_ref()?;
        link.backup.as_ref().filter(|p| p.id == id)
    }

    /// Moves the coordinated backup on from what the participants last reported: a failure,
    /// every node scanned (the stop GCI), every node completed. Returns the events to log.
    pub(super) fn backup_advance(&mut self, me: u16) -> Vec<Event> {
        let Some(backup) = self.backup.as_ref().filter(|b| b.outcome.is_none()) else {
            return Vec::new();
        };
        let (id, participants, stop_gci) =
            (backup.id, backup.participants.clone(), backup.stop_gci);
        let mut failure = None;
        let mut progress = Vec::new();
        for &node in &participants {
            let link = self.data.get(&node).and_then(|n| n.link.as_ref());
            if link.is_none_or(|l| l.state != NodeState::Started) {
                failure = Some(Failure {
                    code: 1326,
                    text: format!("data node {node} failed or stopped"),
                });
                break;
            }
            match self.backup_progress(node, id) {
                Some(p) if p.phase == Some(BackupPhase::Failed) => {
                    failure = Some(Failure {
                        code: p.error,
                        text: format!("data node {node}: {}", p.error_text),
                    });
                    break;
                }
                Some(p) => progress.push(p.clone()),
                None => {
                    let link = self.data.get(&node).and_then(|n| n.link.as_ref());
                    let other = link.and_then(|l| l.backup.as_ref()).filter(|p| {
                        matches!(p.phase, Some(BackupPhase::Running | BackupPhase::Scanned))
                    });
                    if let Some(other) = other {
                        failure = Some(Failure {
                            code: 1302,
                            text: format!(
                                "data node {node} takes part in backup {} (another \
                                 management server's)",
                                other.id
                            ),
                        });
                        break;
                    }
                }
            }
        }
        let all = |phase: BackupPhase| {
            progress.len() == participants.len()
                && progress.iter().all(|p| p.phase.is_some_and(|q| q >= phase))
        };
        let mut events = Vec::new();
        let Some(backup) = self.backup.as_mut() else {
            return events;
        };
        if let Some(failure) = failure {
            let text = format!(
                "Backup {id} started from {me} has been aborted. Error: {}",
                failure.code
            );
            events.push(Event::new(me, Category::Backup, 7, Severity::Alert, text));
            backup.outcome = Some(Err(failure));
        } else if stop_gci.is_none() && all(BackupPhase::Scanned) {
            let stop = progress
                .iter()
                .map(|p| (p.scanned_gci >> 32) as u32)
                .max()
                .unwrap_or(0);
            backup.stop_gci = Some(stop);
        } else if let Some(stop_gci) = stop_gci.filter(|_| all(BackupPhase::Completed)) {
            let summary = Summary {
                start_gci: progress
                    .iter()
                    .map(|p| (p.start_gci >> 32) as u32)
                    .min()
                    .unwrap_or(0),
                stop_gci,
                records: progress.iter().map(|p| p.records).sum(),
                log_records: progress.iter().map(|p| p.log_records).sum(),
                data_bytes: progress.iter().map(|p| p.data_bytes).sum(),
                log_bytes: progress.iter().map(|p| p.log_bytes).sum(),
            };
            let text = format!(
                "Backup {id} started from node {me} completed. StartGCP: {} StopGCP: {} \
                 #Records: {} #LogRecords: {} Data: {} bytes Log: {} bytes",
                summary.start_gci,
                summary.stop_gci,
                summary.records,
                summary.log_records,
                summary.data_bytes,
                summary.log_bytes
            );
            events.push(Event::new(me, Category::Backup, 7, Severity::Info, text));
            backup.outcome = Some(Ok(summary));
        }
        events
    }

    /// The backup step data node `node` is to take, if any.
    pub(super) fn backup_command(&self, node: u16) -> Option<BackupCommand> {
        let backup = self.backup.as_ref()?;
        if !backup.participants.contains(&node) {
            return None;
        }
        let id = backup.id;
        match (&backup.outcome, backup.stop_gci) {
            (None, None) => Some(BackupCommand::Start {
                id,
                participants: backup.participants.iter().copied().collect(),
            }),
            (None, Some(stop_gci)) => Some(BackupCommand::Stop { id, stop_gci }),
            (Some(Err(failure)), _) => {
                let running = self.backup_progress(node, id).is_some_and(|p| {
                    matches!(p.phase, Some(BackupPhase::Running | BackupPhase::Scanned))
                });
                running.then_some(BackupCommand::Abort {
                    id,
                    error: failure.code,
                })
            }
            (Some(Ok(_)), _) => None,
        }
    }
}

impl Server {
    /// START BACKUP: `backupid` (optional: one more than the highest any node has), `wait`
    /// (`no`, `started` or `completed`, the default).
    pub(super) fn start_backup(&self, request: &Message) -> Result<Message, String> {
        let wait = match request.get("wait").unwrap_or("completed") {
            "no" => Wait::No,
            "started" => Wait::Started,
            "completed" => Wait::Completed,
            other => return Err(format!("wait {other:?}: expected no, started or completed")),
        };
        let asked: Option<u32> = request.parse("backupid")?;
        let me = self.me.0;
        let mut state = self.lock();
        if let Some(running) = state.backup.as_ref().filter(|b| b.outcome.is_none()) {
            return Err(format!(
                "error 1302: A backup is already running (backup {})",
                running.id
            ));
        }
        let elsewhere = state.data.values().find_map(|n| {
            let p = n.link.as_ref()?.backup.as_ref()?;
            matches!(p.phase, Some(BackupPhase::Running | BackupPhase::Scanned)).then_some(p.id)
        });
        if let Some(other) = elsewhere {
            return Err(format!(
                "error 1302: A backup is already running (backup {other}, coordinated by \
                 another management server)"
            ));
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
        state.backup = Some(Backup {
            id,
            participants: participants.clone(),
            stop_gci: None,
            outcome: None,
        });
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
            let backup = state.backup.as_ref().filter(|b| b.id == id);
            let started = || {
                participants
                    .iter()
                    .all(|&n| state.backup_progress(n, id).is_some())
            };
            match backup.and_then(|b| b.outcome.clone()) {
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
        let Some(backup) = state
            .backup
            .as_mut()
            .filter(|b| b.id == id && b.outcome.is_none())
        else {
            return Err(format!(
                "backup {id} is not running (coordinated by this server)"
            ));
        };
        backup.outcome = Some(Err(Failure {
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
