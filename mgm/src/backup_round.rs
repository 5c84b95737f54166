//! The coordinator's side of an online backup (ndb_mgm's START BACKUP), as a state machine
//! over what the data nodes report: ndb_mgmd runs it from report links (`server/backup.rs`),
//! the simulator from its kernels.
//!
//! ```text
//!   start <id> <participants> ─▶ every participant logs changes (SNAPSHOTSTART: with the
//!                                images they replace), scans, reports scanned
//!   stop <id> <stop_gci>      ─▶ (the newest GCI any participant's rows or changes can have;
//!     [snapshot <gci>]           SNAPSHOTSTART: the newest start point of the participants)
//!                                every participant ends its log, writes its control file,
//!                                reports completed
//! ```
//!
//! A participant that is gone (its link closed, no longer started), that reports a failure,
//! or that takes part in another backup, ends the round (1326, its error, 1302); the others
//! are then told to abort.

use std::collections::BTreeSet;

use crate::node_report::{BackupCommand, BackupPhase, BackupProgress};

/// What the coordinator knows of a participant now.
#[derive(Clone, Copy, Debug)]
pub enum Participant<'a> {
    /// Its link closed, or it no longer serves.
    Gone,
    /// It serves; its last report's backup progress (of whichever backup).
    Serving(Option<&'a BackupProgress>),
}

/// A completed backup, as NDB's completion event reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackupSummary {
    pub start_gci: u32,
    pub stop_gci: u32,
    pub records: u64,
    pub log_records: u64,
    pub data_bytes: u64,
    pub log_bytes: u64,
}

/// Why a backup failed: NDB's error code, and what happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupFailure {
    pub code: u32,
    pub text: String,
}

/// One backup, from START BACKUP to its end.
#[derive(Clone, Debug)]
pub struct BackupRound {
    pub id: u32,
    /// Names this round to the data nodes (a later round may reuse the id).
    pub token: u64,
    pub participants: BTreeSet<u16>,
    /// START BACKUP ... SNAPSHOTSTART: restorable as of the start.
    pub snapshot_start: bool,
    /// Set once every participant scanned.
    pub stop_gci: Option<u32>,
    /// A SNAPSHOTSTART backup's point, set with `stop_gci`: the end of the newest global
    /// checkpoint any participant had seen when its part began (each logged every change
    /// after it).
    pub snapshot_gci: Option<u32>,
    pub outcome: Option<Result<BackupSummary, BackupFailure>>,
}

fn running(progress: &BackupProgress) -> bool {
    matches!(
        progress.phase,
        Some(BackupPhase::Running | BackupPhase::Scanned)
    )
}

impl BackupRound {
    pub fn new(id: u32, participants: BTreeSet<u16>, token: u64) -> BackupRound {
        BackupRound {
            id,
            token,
            participants,
            snapshot_start: false,
            stop_gci: None,
            snapshot_gci: None,
            outcome: None,
        }
    }

    /// Moves the round on from what `view` says of each participant: a failure ends it,
    /// every participant scanned sets the stop GCI, every participant completed ends it.
    /// True when this call ended it.
    pub fn advance<'a>(&mut self, view: impl Fn(u16) -> Participant<'a>) -> bool {
        if self.outcome.is_some() {
            return false;
        }
        let mut progress = Vec::new();
        for &node in &self.participants {
            let failure = |code, text: String| Some(Err(BackupFailure { code, text }));
            let outcome = match view(node) {
                Participant::Gone => failure(1326, format!("data node {node} failed or stopped")),
                Participant::Serving(Some(p)) if self.is_mine(p) => {
                    if p.phase == Some(BackupPhase::Failed) {
                        failure(p.error, format!("data node {node}: {}", p.error_text))
                    } else {
                        progress.push(p.clone());
                        None
                    }
                }
                Participant::Serving(Some(p)) if running(p) => failure(
                    1302,
                    format!(
                        "data node {node} takes part in backup {} (another coordinator's)",
                        p.id
                    ),
                ),
                Participant::Serving(_) => None,
            };
            if outcome.is_some() {
                self.outcome = outcome;
                return true;
            }
        }
        let all = |phase: BackupPhase| {
            progress.len() == self.participants.len()
                && progress.iter().all(|p| p.phase.is_some_and(|q| q >= phase))
        };
        match self.stop_gci {
            None if all(BackupPhase::Scanned) => {
                let schemas: BTreeSet<u64> = progress.iter().map(|p| p.schema).collect();
                if schemas.len() > 1 {
                    self.outcome = Some(Err(BackupFailure {
                        code: 1340,
                        text: "the data nodes began with different tables (a schema change \
                               while the backup started): start it again"
                            .into(),
                    }));
                    return true;
                }
                let newest = progress.iter().map(|p| p.scanned_gci).max().unwrap_or(0);
                self.stop_gci = Some((newest >> 32) as u32);
                let started = progress.iter().map(|p| p.start_gci).max().unwrap_or(0);
                self.snapshot_gci = self.snapshot_start.then_some((started >> 32) as u32);
                false
            }
            Some(stop_gci) if all(BackupPhase::Completed) => {
                // A SNAPSHOTSTART backup's start is the point it restores to.
                let first_start = progress.iter().map(|p| (p.start_gci >> 32) as u32).min();
                self.outcome = Some(Ok(BackupSummary {
                    start_gci: self.snapshot_gci.or(first_start).unwrap_or(0),
                    stop_gci,
                    records: progress.iter().map(|p| p.records).sum(),
                    log_records: progress.iter().map(|p| p.log_records).sum(),
                    data_bytes: progress.iter().map(|p| p.data_bytes).sum(),
                    log_bytes: progress.iter().map(|p| p.log_bytes).sum(),
                }));
                true
            }
            _ => false,
        }
    }

    /// True when `progress` is a node's part of this round.
    fn is_mine(&self, progress: &BackupProgress) -> bool {
        progress.id == self.id && progress.token == self.token
    }

    /// The step participant `node`, whose last report said `progress`, is to take, if any:
    /// start and stop until the round ends, then abort while it still runs its part of a
    /// failed round.
    pub fn command(&self, node: u16, progress: Option<&BackupProgress>) -> Option<BackupCommand> {
        if !self.participants.contains(&node) {
            return None;
        }
        let id = self.id;
        match (&self.outcome, self.stop_gci) {
            (None, None) => Some(BackupCommand::Start {
                id,
                participants: self.participants.iter().copied().collect(),
                token: self.token,
                snapshot_start: self.snapshot_start,
            }),
            (None, Some(stop_gci)) => Some(BackupCommand::Stop {
                id,
                stop_gci,
                snapshot_gci: self.snapshot_gci,
            }),
            (Some(Err(failure)), _) => {
                progress
                    .filter(|p| self.is_mine(p) && running(p))
                    .map(|_| BackupCommand::Abort {
                        id,
                        error: failure.code,
                    })
            }
            (Some(Ok(_)), _) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(id: u32, phase: BackupPhase, scanned_gci: u64) -> BackupProgress {
        BackupProgress {
            id,
            token: 8,
            phase: Some(phase),
            start_gci: 3 << 32,
            scanned_gci,
            records: 5,
            log_records: 2,
            data_bytes: 100,
            log_bytes: 50,
            ..BackupProgress::default()
        }
    }

    #[test]
    fn a_round_stops_at_the_newest_scanned_gci_and_sums_the_nodes() {
        let mut round = BackupRound::new(4, [1, 2].into(), 8);
        let start = round.command(1, None);
        assert_eq!(
            start,
            Some(BackupCommand::Start {
                id: 4,
                participants: vec![1, 2],
                token: 8,
                snapshot_start: false,
            })
        );
        // A node's report of an earlier round of the same id is not this round's.
        let earlier = BackupProgress {
            token: 7,
            ..progress(4, BackupPhase::Completed, 1 << 32)
        };
        assert!(!round.advance(|_| Participant::Serving(Some(&earlier))));
        assert_eq!((round.stop_gci, &round.outcome), (None, &None));
        let (a, b) = (
            progress(4, BackupPhase::Scanned, 7 << 32 | 3),
            progress(4, BackupPhase::Running, 0),
        );
        assert!(!round.advance(|n| Participant::Serving(Some(if n == 1 { &a } else { &b }))));
        assert_eq!(round.stop_gci, None, "node 2 has not scanned");
        let b = progress(4, BackupPhase::Scanned, 9 << 32);
        assert!(!round.advance(|n| Participant::Serving(Some(if n == 1 { &a } else { &b }))));
        assert_eq!(round.stop_gci, Some(9));
        assert_eq!(
            round.command(2, Some(&b)),
            Some(BackupCommand::Stop {
                id: 4,
                stop_gci: 9,
                snapshot_gci: None
            })
        );
        let done = progress(4, BackupPhase::Completed, 9 << 32);
        assert!(round.advance(|_| Participant::Serving(Some(&done))));
        let summary = round.outcome.clone().unwrap().unwrap();
        assert_eq!((summary.start_gci, summary.stop_gci), (3, 9));
        assert_eq!((summary.records, summary.log_bytes), (10, 100));
        assert_eq!(round.command(1, Some(&done)), None);
    }

    #[test]
    fn a_snapshotstart_round_restores_to_the_newest_start_of_its_participants() {
        let mut round = BackupRound::new(4, [1, 2].into(), 8);
        round.snapshot_start = true;
        let start = round.command(1, None);
        let Some(BackupCommand::Start { snapshot_start, .. }) = start else {
            panic!("{start:?}");
        };
        assert!(snapshot_start);
        let a = BackupProgress {
            start_gci: 5 << 32 | 1,
            ..progress(4, BackupPhase::Scanned, 9 << 32)
        };
        let b = progress(4, BackupPhase::Scanned, 8 << 32);
        assert!(!round.advance(|n| Participant::Serving(Some(if n == 1 { &a } else { &b }))));
        assert_eq!((round.stop_gci, round.snapshot_gci), (Some(9), Some(5)));
        assert_eq!(
            round.command(2, Some(&b)),
            Some(BackupCommand::Stop {
                id: 4,
                stop_gci: 9,
                snapshot_gci: Some(5)
            })
        );
        let (a, b) = (
            BackupProgress {
                phase: Some(BackupPhase::Completed),
                ..a
            },
            BackupProgress {
                phase: Some(BackupPhase::Completed),
                ..b
            },
        );
        assert!(round.advance(|n| Participant::Serving(Some(if n == 1 { &a } else { &b }))));
        let summary = round.outcome.clone().unwrap().unwrap();
        assert_eq!((summary.start_gci, summary.stop_gci), (5, 9), "its point");
    }

    #[test]
    fn a_gone_or_failed_participant_ends_the_round_and_the_others_abort() {
        let mut round = BackupRound::new(4, [1, 2].into(), 8);
        let a = progress(4, BackupPhase::Running, 0);
        assert!(round.advance(|n| if n == 1 {
            Participant::Serving(Some(&a))
        } else {
            Participant::Gone
        }));
        assert_eq!(
            round.outcome.as_ref().unwrap().as_ref().unwrap_err().code,
            1326
        );
        assert_eq!(
            round.command(1, Some(&a)),
            Some(BackupCommand::Abort { id: 4, error: 1326 })
        );
        let failed = progress(4, BackupPhase::Failed, 0);
        assert_eq!(round.command(1, Some(&failed)), None, "already given up");

        // Nodes that began with different tables.
        let mut round = BackupRound::new(4, [1, 2].into(), 8);
        let (a, b) = (
            progress(4, BackupPhase::Scanned, 0),
            BackupProgress {
                schema: 1,
                ..progress(4, BackupPhase::Scanned, 0)
            },
        );
        assert!(round.advance(|n| Participant::Serving(Some(if n == 1 { &a } else { &b }))));
        assert_eq!(round.outcome.unwrap().unwrap_err().code, 1340);

        let mut round = BackupRound::new(5, [1].into(), 9);
        let other = progress(4, BackupPhase::Scanned, 0);
        assert!(round.advance(|_| Participant::Serving(Some(&other))));
        assert_eq!(round.outcome.unwrap().unwrap_err().code, 1302);
    }
}
