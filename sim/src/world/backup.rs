//! Online backups in the simulator (`Fault::Backup`): the world coordinates each as ndb_mgmd
//! does ([`BackupRound`], one report round every [`REPORT_NS`]), tries again after a failure
//! while the workload runs, and reads a completed one back from the participants' disks to
//! check it.
//!
//! The check: the backup, restored as `ndb_restore` restores it (each node's rows, then its
//! log as `LogReplay` takes it), is the bank as of the end of the stop GCP, or of a
//! SNAPSHOTSTART backup's (every second one's) snapshot GCP. Every transfer
//! acknowledged since the last cluster crash is in it exactly when the GCI its acknowledgement
//! named is at most the stop GCP, no transfer that surely failed is, and the balances are
//! exactly the initial ones moved by the transfers whose ledger rows are there
//! (`check::check_ledger`): a transfer is in it whole or not at all. A fuzzy scan without its
//! log (`--sabotage backup`), a log cut at the wrong GCI, or a SNAPSHOTSTART backup's log
//! replayed forward to its stop GCP (`--sabotage snapshot-start`) fails it.

use std::collections::{BTreeMap, BTreeSet};

use rndb_config::NodeId;
use rndb_mgm::backup_round::{BackupRound, Participant};
use rndb_ndbd::ndbfs::backup::{self as layout, BackupCtl, BackupRow, LogReplay};
use rndb_ndbd::ndbfs::format::kind;
use rndb_ndbd::ndbfs::Disk;
use rndb_protocol::Value;

use super::{Planned, World};
use crate::check::{self, Expect};
use crate::client::{Transfer, TransferOutcome, INITIAL_BALANCE};
use crate::knobs::Sabotage;

/// How often the coordinator hears from the data nodes: ndb_mgmd's report interval is
/// 200 ms; a quarter of it lets more backups end within a simulated workload of about a
/// second, among its crashes.
const REPORT_NS: u64 = 50_000_000;
/// Where every data node keeps its backups (`<BackupDataDir>/BACKUP`) on its simulated disk.
pub(super) const BACKUP_ROOT: &str = "/backup/BACKUP";
/// BackupLogBufferSize (NDB's default).
pub(super) const LOG_BUFFER_BYTES: u64 = 16 << 20;

/// The backup the world coordinates.
#[derive(Debug)]
pub(super) struct SimBackup {
    round: BackupRound,
    started_ns: u64,
    /// Each participant's incarnation when it began: one that restarted since is gone.
    incarnations: BTreeMap<NodeId, u32>,
}

impl World {
    /// When the backups start, in the workload's first three quarters.
    pub(super) fn plan_backups(&mut self) -> Vec<(u64, Planned)> {
        (0..self.knobs.backups)
            .map(|_| {
                let at = self.rng.below(self.knobs.workload_ns * 3 / 4);
                (at, Planned::Backup)
            })
            .collect()
    }

    /// START BACKUP: every data node that serves takes part.
    pub(super) fn start_backup(&mut self) -> Result<(), String> {
        if self.backup.is_some() {
            self.count("backup put off (one runs)");
            self.schedule_fault(self.now_ns + REPORT_NS, Planned::Backup);
            return Ok(());
        }
        let participants: BTreeSet<u16> = (self.kernels.iter())
            .filter(|(_, k)| k.is_started())
            .map(|(n, _)| n.0)
            .collect();
        if participants.is_empty() {
            self.count("backup not started (no data node serves)");
            return Ok(());
        }
        self.backup_ids += 1;
        let id = self.backup_ids;
        let incarnations = participants
            .iter()
            .map(|&n| (NodeId(n), self.incarnation(NodeId(n))))
            .collect();
        self.log(format!("backup {id} starts on {participants:?}"));
        self.count("backup started");
        let mut round = BackupRound::new(id, participants, self.now_ns);
        // Every second backup restores as of its start (no draw: the seeds' streams stay),
        // from the first where the backup files' disk is the slower one (few of those seeds
        // complete two backups, and theirs span global checkpoints: see `Knobs::draw_disk`).
        let slow_disk = self.knobs.disk.backup_sync_ns != self.knobs.disk.sync_ns;
        round.snapshot_start = (id + u32::from(slow_disk)).is_multiple_of(2);
        self.backup = Some(SimBackup {
            round,
            started_ns: self.now_ns,
            incarnations,
        });
        self.backup_report()
    }

    /// One report round: the coordinator moves the backup on and tells each participant
    /// its step; a backup that ended is checked (completed) or its failure explained.
    pub(super) fn backup_report(&mut self) -> Result<(), String> {
        let Some(mut backup) = self.backup.take() else {
            return Ok(());
        };
        let gone = |world: &World, node: NodeId| {
            world.incarnation(node) != backup.incarnations[&node]
                || world.kernels.get(&node).is_none_or(|k| !k.is_started())
        };
        let ended = backup.round.advance(|n| {
            let node = NodeId(n);
            match self.kernels.get(&node) {
                Some(k) if !gone(self, node) => Participant::Serving(k.backup_progress()),
                _ => Participant::Gone,
            }
        });
        let mut commands = Vec::new();
        for &n in &backup.round.participants {
            let node = NodeId(n);
            let stopped = self.hung.contains(&node)
                || self.paused.get(&node).is_some_and(|&t| t > self.now_ns);
            let Some(kernel) = self.kernels.get(&node).filter(|_| !gone(self, node)) else {
                continue;
            };
            if let Some(command) = backup.round.command(n, kernel.backup_progress()) {
                if !stopped {
                    commands.push((node, command));
                }
            }
        }
        for (node, command) in commands {
            self.kernel_step(node, |k, out, now| {
                k.backup_command(command, now);
                k.run_jobs(out, now);
                Ok(())
            })?;
        }
        if !ended {
            self.schedule_fault(self.now_ns + REPORT_NS, Planned::BackupReport);
            self.backup = Some(backup);
            return Ok(());
        }
        let id = backup.round.id;
        match &backup.round.outcome {
            Some(Ok(summary)) => {
                self.log(format!("backup {id} completed: {summary:?}"));
                self.check_backup(&backup)?;
                self.count("backup completed and checked");
                if summary.start_gci < summary.stop_gci && backup.round.snapshot_gci.is_some() {
                    self.count("SNAPSHOTSTART backup checked, taken back past later GCIs");
                }
            }
            Some(Err(failure)) => {
                self.log(format!("backup {id} failed: {failure:?}"));
                match failure.code {
                    1326 => self.count("backup failed: a data node gone (1326)"),
                    1325 if self.knobs.disk.enospc_ppm + self.knobs.disk.eio_ppm > 0 => {
                        self.count("backup failed: a disk fault (1325)")
                    }
                    1306 if !self.knobs.durable => self.count("backup failed: no files (1306)"),
                    1302 => self.count("backup failed: a node still in an earlier one (1302)"),
                    1340 => self.count("backup failed: a schema change as it began (1340)"),
                    _ => return Err(format!("backup {id} failed unexplained: {failure:?}")),
                }
                // Another try while the workload runs, so that seeds with faults also check
                // backups that complete.
                if !self.shared.stopping && self.backup_ids < 3 * u32::from(self.knobs.backups) {
                    let at = self.now_ns + self.rng.between(20_000_000, 200_000_000);
                    self.schedule_fault(at, Planned::Backup);
                }
            }
            None => {}
        }
        Ok(())
    }

    /// Restores a completed backup from the participants' disks as `ndb_restore` does and
    /// checks the bank in it.
    fn check_backup(&mut self, backup: &SimBackup) -> Result<(), String> {
        let (id, round) = (backup.round.id, &backup.round);
        let stop = round.stop_gci.unwrap_or(0);
        // The GCP the backup restores as of: its stop GCP, or a SNAPSHOTSTART one's start.
        let point = round.snapshot_gci.unwrap_or(stop);
        // (table name, key) → value, as restored.
        let mut rows: BTreeMap<(String, i32), i64> = BTreeMap::new();
        for &n in &round.participants {
            let disk = self
                .disks
                .get_mut(&NodeId(n))
                .ok_or_else(|| format!("backup {id}: data node {n} has no disk"))?;
            let dir = format!("{BACKUP_ROOT}/{}", layout::dir_name(id));
            let mut read = |name: String| -> Result<Vec<u8>, String> {
                let path = format!("{dir}/{name}");
                match disk.read(&path) {
                    Ok(Some(bytes)) => Ok(bytes),
                    Ok(None) => Err(format!("backup {id}: {path} is missing")),
                    Err(e) => Err(format!("backup {id}: read {path}: {e}")),
                }
            };
            let ctl_bytes = read(layout::ctl_file(id, u32::from(n)))?;
            let data_bytes = read(layout::data_file(id, u32::from(n)))?;
            let log_bytes = read(layout::log_file(id, u32::from(n)))?;
            let bad = |file: String, why: String| format!("backup {id}: {file}: {why}");
            let ctl = BackupCtl::from_file(&ctl_bytes, id, u32::from(n))
                .map_err(|e| bad(layout::ctl_file(id, u32::from(n)), e))?;
            if (ctl.stop_gci, ctl.snapshot_gci) != (stop, round.snapshot_gci) {
                return Err(format!(
                    "backup {id}: node {n}'s control file stops at GCI {} (snapshot {:?}), the \
                     round at {stop} ({:?})",
                    ctl.stop_gci, ctl.snapshot_gci, round.snapshot_gci
                ));
            }
            let data = layout::read_rows(&data_bytes, layout::DATA_MAGIC, id, u32::from(n))
                .map_err(|e| bad(layout::data_file(id, u32::from(n)), e))?;
            let log = layout::read_rows(&log_bytes, layout::LOG_MAGIC, id, u32::from(n))
                .map_err(|e| bad(layout::log_file(id, u32::from(n)), e))?;
            let sabotaged = self.shared.sabotage == Some(Sabotage::Backup);
            let bad_row = |row: &BackupRow<'_>, e: String| {
                format!("backup {id}: node {n}'s row at offset {}: {e}", row.offset)
            };
            let mut replay = if self.shared.sabotage == Some(Sabotage::SnapshotStart) {
                LogReplay::new(&BackupCtl {
                    snapshot_gci: None,
                    ..ctl.clone()
                })
            } else {
                LogReplay::new(&ctl)
            };
            let mut replayed = Vec::new();
            for row in log.into_iter().filter(|_| !sabotaged) {
                let key = |r: &BackupRow<'_>| {
                    decode(&ctl, r).map(|(_, key, _)| key.to_le_bytes().to_vec())
                };
                let taken = replay.take(row, key).map_err(|e| bad_row(&row, e))?;
                replayed.extend(taken);
            }
            for row in data.iter().chain(&replayed) {
                let (table, key, value) = decode(&ctl, row).map_err(|e| bad_row(row, e))?;
                match row.kind {
                    kind::DELETE => rows.remove(&(table, key)),
                    _ => rows.insert((table, key), value),
                };
            }
        }
        if !self.shared.ledger {
            return Ok(());
        }
        let table_rows = |name: &str| -> BTreeMap<i32, i64> {
            (rows.iter())
                .filter(|((t, _), _)| t == name)
                .map(|((_, k), &v)| (*k, v))
                .collect()
        };
        let (balances, ledger) = (table_rows("accounts"), table_rows("ledger"));
        let last_crash = (self.cluster_crashes.iter())
            .map(|c| c.at_ns)
            .filter(|&at| at <= backup.started_ns)
            .max();
        // A transfer committed and acknowledged since the last cluster crash is in the backup
        // exactly when its GCI is at most the GCP it restores as of. One committed before that crash may
        // have been lost by the restart, which gave its GCI again, even when its answer came
        // after the crash (a data node that answered, then stopped, its answer on a slow link).
        let since_last_crash =
            |t: &Transfer, at: u64| last_crash.is_none_or(|c| at > c && t.invoke_ns > c);
        let expected: Vec<(i32, i64, Expect)> = (self.shared.transfers.iter())
            .map(|t| {
                let expect = match (t.outcome, t.gci) {
                    (TransferOutcome::Failed, _) => Expect::Absent,
                    (TransferOutcome::Acknowledged(at), Some(gci)) if since_last_crash(t, at) => {
                        if (gci >> 32) as u32 <= point {
                            Expect::Present
                        } else {
                            Expect::Absent
                        }
                    }
                    (TransferOutcome::Acknowledged(at), None)
                        if at < backup.started_ns && since_last_crash(t, at) =>
                    {
                        Expect::Present
                    }
                    _ => Expect::Either,
                };
                (t.id, t.ledger_value(), expect)
            })
            .collect();
        check::check_ledger(INITIAL_BALANCE, &balances, &expected, &ledger)
            .map_err(|e| format!("backup {id} (as of GCI {point}, stop {stop}): {e}"))
    }
}

/// A backed-up row of the simulator's tables: its table's name, its Int32 key and Int64 value
/// (the scratch table's BLOB column is NULL in every row).
fn decode(ctl: &BackupCtl, row: &BackupRow<'_>) -> Result<(String, i32, i64), String> {
    let table = (ctl.tables.iter())
        .find(|t| t.table_id == row.table_id)
        .ok_or_else(|| format!("table id {} is not in the control file", row.table_id))?;
    let values = row.values(&table.def).map_err(|e| e.to_string())?;
    match values.as_slice() {
        [Value::Int32(key), Value::Int64(value)]
        | [Value::Int32(key), Value::Int64(value), Value::Null] => {
            Ok((table.def.name.clone(), *key, *value))
        }
        other => Err(format!("row {other:?} of table {}", table.def.name)),
    }
}
