//! The kernel's side of NDBFS: blocks queue file requests here, each with what its completion
//! means to them ([`FsWait`]); whoever runs the kernel takes the requests
//! ([`Kernel::take_fs_requests`]) and hands back each completion ([`Kernel::on_fs_conf`]), in
//! request order (a backup's requests in their own order: `ndbfs/real.rs`).

use std::collections::VecDeque;
use std::time::Instant;

use rndb_protocol::NdbError;

use super::backup::BackupIo;
use super::lqh::lcp::LcpIo;
use super::lqh::redo::RedoIo;
use super::restart::StartRead;
use super::{Kernel, Outbox};
use crate::ndbfs::{FsConf, FsError, FsOp, FsRequest};

/// What a file request's completion means.
#[derive(Debug)]
pub(crate) enum FsWait {
    Redo(RedoIo),
    /// A write of the schema log.
    SchemaWrite,
    /// A sync of the schema log, part of a global checkpoint's save.
    SchemaSync,
    /// A copy of the sysfile, part of a global checkpoint's save.
    Sysfile,
    /// A copy of the sysfile naming a system restart, written once its restore is done.
    RestartSysfile,
    /// The last request of a system restart's cut (`Restart::cut`).
    RestartCut,
    /// A read of a restart.
    Start(StartRead),
    /// Nothing waits for it (a request of a restart's cut but the last).
    Nothing,
    /// A request of a local checkpoint.
    Lcp(LcpIo),
    /// A request of the backup round with this token (its files are outside the node's file
    /// system: one that fails fails the backup, not the node).
    Backup(u64, BackupIo),
}

/// File requests not yet taken, and those taken but not completed.
#[derive(Debug, Default)]
pub(crate) struct FsQueue {
    next_id: u64,
    ready: Vec<FsRequest>,
    waits: VecDeque<(u64, FsWait)>,
    /// The first file request that failed: the node refuses writes from then on (a redo
    /// change that cannot reach the disk would make a later save a lie), and asks to be
    /// stopped (`ask_to_be_stopped`).
    pub failed: Option<FsError>,
}

impl FsQueue {
    pub fn push(&mut self, op: FsOp, wait: FsWait) {
        let id = self.next_id;
        self.next_id += 1;
        self.ready.push(FsRequest { id, op });
        self.waits.push_back((id, wait));
    }

    /// The temporary error that refuses writes after a file request failed.
    pub fn refusal(&self) -> Option<NdbError> {
        self.failed.as_ref().map(|why| {
            NdbError::with_detail(1234, format!("the redo log cannot be written: {why}"))
        })
    }
}

impl Kernel {
    /// File requests for NDBFS, in the order they must be carried out.
    pub fn take_fs_requests(&mut self) -> Vec<FsRequest> {
        if let Some(redo) = self.lqh.redo.as_mut() {
            for (op, io) in std::mem::take(&mut redo.requests) {
                self.fs.push(op, FsWait::Redo(io));
            }
        }
        std::mem::take(&mut self.fs.ready)
    }

    /// True while file requests wait to be taken.
    pub fn has_fs_requests(&self) -> bool {
        !self.fs.ready.is_empty()
            || self
                .lqh
                .redo
                .as_ref()
                .is_some_and(|r| !r.requests.is_empty())
    }

    /// A file request completed. An error that stops this node is returned (a restart that
    /// cannot read its files).
    pub fn on_fs_conf(
        &mut self,
        conf: FsConf,
        out: &mut dyn Outbox,
        now: Instant,
    ) -> Result<(), String> {
        let Some(at) = self.fs.waits.iter().position(|(id, _)| *id == conf.id) else {
            tracing::warn!(id = conf.id, "completion of a file request nobody made");
            return Ok(());
        };
        let Some((_, wait)) = self.fs.waits.remove(at) else {
            return Ok(());
        };
        let data = match conf.result {
            Ok(data) => data,
            Err(error) => {
                if let FsWait::Backup(token, _) = wait {
                    self.backup_io_failed(token, &error);
                    return Ok(());
                }
                // A failed sync of the sysfile a start read stops nothing by itself: no
                // later request changes the disk (`FailStop`), and the node asks to be
                // stopped once it runs, as after any other failed write.
                if matches!(&wait, FsWait::Start(read) if !matches!(read, StartRead::SysfileSync)) {
                    let (code, text) = super::qmgr::file_system_error(&error);
                    return Err(format!(
                        "restart: error {code}: {text}. Mend what failed (the disk), then start \
                         the node again"
                    ));
                }
                if self.fs.failed.is_none() {
                    tracing::error!(%error, "file request failed: this node refuses writes from now on, saves no global checkpoint, and asks to be stopped");
                    self.fs.failed = Some(error);
                    self.ask_to_be_stopped(out);
                } else {
                    tracing::debug!(%error, "file request failed after the first failure");
                }
                match wait {
                    FsWait::RestartSysfile => self.restart_sysfile_written(out),
                    FsWait::RestartCut => self.restart_cut_done(out),
                    _ => {}
                }
                return Ok(());
            }
        };
        match wait {
            FsWait::Redo(RedoIo::Write(bytes)) => {
                if let Some(redo) = self.lqh.redo.as_mut() {
                    redo.written(bytes);
                }
            }
            FsWait::Redo(RedoIo::Sync) | FsWait::SchemaSync => self.gcp_synced(out),
            FsWait::SchemaWrite | FsWait::Nothing => {}
            FsWait::Sysfile => self.gcp_sysfile_written(out),
            FsWait::RestartSysfile => self.restart_sysfile_written(out),
            FsWait::RestartCut => self.restart_cut_done(out),
            FsWait::Start(read) => {
                self.restart_read(read, data, out, now).map_err(|why| {
                    match self
                        .restart
                        .as_ref()
                        .map(|r| r.damaged())
                        .filter(|d| !d.is_empty())
                    {
                        Some(damaged) => format!("{why} (damaged and not used: {damaged})"),
                        None => why,
                    }
                })?
            }
            FsWait::Lcp(io) => self.lcp_io_done(io),
            FsWait::Backup(token, io) => self.backup_io_done(token, io, data),
        }
        Ok(())
    }
}
