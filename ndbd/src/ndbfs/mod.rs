//! NDBFS: the data node's files. The kernel does no I/O: its blocks put file requests
//! ([`FsRequest`]) in a queue, and whoever runs the kernel carries them out on a [`Disk`] and
//! hands each completion ([`FsConf`]) back, in request order. In `ndbd` that is one thread over
//! the real file system ([`real`]), and a second one for a backup's files; in the simulator, a
//! simulated disk that tears writes, loses what was not synced when its node crashes, and
//! fails with ENOSPC or EIO.
//!
//! Every path is relative to the node's file system directory, `ndb_<NodeId>_fs/` under
//! FileSystemPath (DataDir when unset), as NDB names its files: `D1/DBDIH/P0.sysfile` (and its
//! copy under `D2`), `D1/DBDICT/P0.SchemaLog`, and each redo log part's files
//! `D<8+part>/DBLQH/S<file>.FragLog`; only a backup's files (`BACKUP/BACKUP-<id>/` under
//! BackupDataDir) have absolute paths. Their byte layouts are in [`format`](mod@format), [`backup`] and
//! ARCHITECTURE.md.

pub mod backup;
pub mod format;
pub mod read;
pub mod real;

use std::fmt;
use std::io;

/// One file request from the kernel. Requests complete in the order they were made (those on
/// absolute paths, a backup's, in the order they among themselves were made).
#[derive(Debug)]
pub struct FsRequest {
    /// Echoed in the completion.
    pub id: u64,
    pub op: FsOp,
}

/// What a request does.
#[derive(Debug)]
pub enum FsOp {
    /// Writes `bytes` at `offset` of `path`, creating the file (and its directories) first.
    Write {
        path: String,
        offset: u64,
        bytes: Vec<u8>,
    },
    /// Makes what was written to `path` durable (fsync).
    Sync { path: String },
    /// Makes what was written to every one of `paths` durable (in one call where the disk
    /// can: a global checkpoint's save syncs every redo part at once).
    SyncAll { paths: Vec<String> },
    /// Cuts `path` to `len` bytes.
    Truncate { path: String, len: u64 },
    /// Replaces `path` with `bytes` durably: a complete new file or the old one, never a mix.
    Replace { path: String, bytes: Vec<u8> },
    /// Reads the whole of `path` (`None` when it does not exist).
    Read { path: String },
    /// Names the files in directory `path` (empty when it does not exist).
    List { path: String },
    /// Removes `path`, a file or a directory with everything in it (nothing when it does not
    /// exist).
    Remove { path: String },
}

impl FsOp {
    /// The file or directory the request is about.
    pub fn path(&self) -> &str {
        match self {
            FsOp::SyncAll { paths } => paths.first().map_or("", String::as_str),
            FsOp::Write { path, .. }
            | FsOp::Sync { path }
            | FsOp::Truncate { path, .. }
            | FsOp::Replace { path, .. }
            | FsOp::Read { path }
            | FsOp::List { path }
            | FsOp::Remove { path } => path,
        }
    }

    fn name(&self) -> &'static str {
        match self {
            FsOp::Write { .. } => "write",
            FsOp::Sync { .. } | FsOp::SyncAll { .. } => "sync",
            FsOp::Truncate { .. } => "truncate",
            FsOp::Replace { .. } => "replace",
            FsOp::Read { .. } => "read",
            FsOp::List { .. } => "list",
            FsOp::Remove { .. } => "remove",
        }
    }
}

/// A request's outcome.
#[derive(Debug)]
pub struct FsConf {
    pub id: u64,
    pub result: Result<FsData, FsError>,
}

/// What a successful request returns.
#[derive(Debug, PartialEq, Eq)]
pub enum FsData {
    Done,
    /// A read: the file's bytes, `None` when it does not exist.
    File(Option<Vec<u8>>),
    /// A listing: file names, sorted.
    Names(Vec<String>),
}

/// A failed request: which operation on which file, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsError {
    pub op: &'static str,
    pub path: String,
    /// The disk is full (ENOSPC, EDQUOT).
    pub no_space: bool,
    pub reason: String,
}

impl fmt::Display for FsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.op, self.path, self.reason)
    }
}

impl std::error::Error for FsError {}

/// The primitive operations a disk offers, over paths relative to the node's file system.
pub trait Disk {
    fn write_at(&mut self, path: &str, offset: u64, bytes: &[u8]) -> io::Result<()>;
    fn sync(&mut self, path: &str) -> io::Result<()>;
    /// Syncs every one of `paths` (one by one, unless the disk has a better way).
    fn sync_all(&mut self, paths: &[String]) -> io::Result<()> {
        paths.iter().try_for_each(|path| self.sync(path))
    }
    fn truncate(&mut self, path: &str, len: u64) -> io::Result<()>;
    fn replace(&mut self, path: &str, bytes: &[u8]) -> io::Result<()>;
    fn read(&mut self, path: &str) -> io::Result<Option<Vec<u8>>>;
    fn list(&mut self, path: &str) -> io::Result<Vec<String>>;
    fn remove(&mut self, path: &str) -> io::Result<()>;
}

/// Carries out one request on `disk`.
pub fn execute(disk: &mut dyn Disk, request: FsRequest) -> FsConf {
    let FsRequest { id, op } = request;
    let result = match &op {
        FsOp::Write {
            path,
            offset,
            bytes,
        } => disk.write_at(path, *offset, bytes).map(|()| FsData::Done),
        FsOp::Sync { path } => disk.sync(path).map(|()| FsData::Done),
        FsOp::SyncAll { paths } => disk.sync_all(paths).map(|()| FsData::Done),
        FsOp::Truncate { path, len } => disk.truncate(path, *len).map(|()| FsData::Done),
        FsOp::Replace { path, bytes } => disk.replace(path, bytes).map(|()| FsData::Done),
        FsOp::Read { path } => disk.read(path).map(FsData::File),
        FsOp::List { path } => disk.list(path).map(|mut names| {
            names.sort();
            FsData::Names(names)
        }),
        FsOp::Remove { path } => disk.remove(path).map(|()| FsData::Done),
    };
    FsConf {
        id,
        result: result.map_err(|e| FsError {
            op: op.name(),
            path: op.path().to_string(),
            no_space: matches!(e.raw_os_error(), Some(ENOSPC | EDQUOT))
                || e.kind() == io::ErrorKind::StorageFull,
            reason: e.to_string(),
        }),
    }
}

/// NDBFS stops changing the disk at its first failed request. Every request after it that
/// would write, sync, truncate, replace or remove is not carried out and fails, naming the
/// first failure; reads and listings still run. A sequence the kernel queued at once (a node
/// restart's overwrite of both sysfile copies, their syncs, then the removal of its files)
/// thereby never goes on past a step that failed, and the kernel, which refuses writes and stops
/// saving from its first failure, finds the disk as that failure left it. A new process
/// starts with a new one. Requests on absolute paths (a backup's files, under BackupDataDir)
/// are outside this: carried out whatever failed before, and their failures stop nothing.
#[derive(Debug, Default)]
pub struct FailStop {
    first: Option<FsError>,
}

impl FailStop {
    /// Carries out `request` on `disk`, unless it changes the disk after a failure.
    pub fn execute(&mut self, disk: &mut dyn Disk, request: FsRequest) -> FsConf {
        // An absolute path is outside the node's file system (a backup's file): its failure
        // concerns only what wrote it.
        if request.op.path().starts_with('/') {
            return execute(disk, request);
        }
        if let Some(first) = &self.first {
            if !matches!(request.op, FsOp::Read { .. } | FsOp::List { .. }) {
                return FsConf {
                    id: request.id,
                    result: Err(FsError {
                        op: request.op.name(),
                        path: request.op.path().to_string(),
                        no_space: first.no_space,
                        reason: format!("not carried out: an earlier request failed ({first})"),
                    }),
                };
            }
        }
        let conf = execute(disk, request);
        if let (Err(error), None) = (&conf.result, &self.first) {
            self.first = Some(error.clone());
        }
        conf
    }
}

const ENOSPC: i32 = 28;
const EDQUOT: i32 = 122;

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Files in memory; writes to `failing` fail with EIO.
    #[derive(Default)]
    struct Files(BTreeMap<String, Vec<u8>>, &'static str);

    impl Disk for Files {
        fn write_at(&mut self, path: &str, _: u64, bytes: &[u8]) -> io::Result<()> {
            if path == self.1 {
                return Err(io::Error::from_raw_os_error(5));
            }
            self.0.insert(path.to_string(), bytes.to_vec());
            Ok(())
        }
        fn sync(&mut self, _: &str) -> io::Result<()> {
            Ok(())
        }
        fn truncate(&mut self, _: &str, _: u64) -> io::Result<()> {
            Ok(())
        }
        fn replace(&mut self, path: &str, bytes: &[u8]) -> io::Result<()> {
            self.write_at(path, 0, bytes)
        }
        fn read(&mut self, path: &str) -> io::Result<Option<Vec<u8>>> {
            Ok(self.0.get(path).cloned())
        }
        fn list(&mut self, _: &str) -> io::Result<Vec<String>> {
            Ok(self.0.keys().cloned().collect())
        }
        fn remove(&mut self, path: &str) -> io::Result<()> {
            self.0.remove(path);
            Ok(())
        }
    }

    fn request(id: u64, op: FsOp) -> FsRequest {
        FsRequest { id, op }
    }

    fn write(path: &str) -> FsOp {
        FsOp::Write {
            path: path.into(),
            offset: 0,
            bytes: b"new".to_vec(),
        }
    }

    #[test]
    fn nothing_changes_the_disk_after_a_failed_request() {
        let mut disk = Files(BTreeMap::new(), "D1/a");
        disk.0.insert("D2/a".into(), b"old".to_vec());
        disk.0.insert("D8/log".into(), b"log".to_vec());
        let mut stop = FailStop::default();
        let ok = stop.execute(&mut disk, request(0, write("D3/a")));
        assert!(ok.result.is_ok(), "before any failure requests run");
        let first = stop.execute(&mut disk, request(1, write("D1/a")));
        assert!(first.result.is_err());
        let later = [
            write("D2/a"),
            FsOp::Sync {
                path: "D2/a".into(),
            },
            FsOp::Remove {
                path: "D8/log".into(),
            },
        ];
        for (id, op) in (2..).zip(later) {
            let conf = stop.execute(&mut disk, request(id, op));
            let error = conf.result.expect_err("a change after the failure");
            assert!(
                error
                    .reason
                    .contains("an earlier request failed (write D1/a: "),
                "the error names the first failure: {error}"
            );
        }
        assert_eq!(disk.0.get("D2/a").map(Vec::as_slice), Some(&b"old"[..]));
        assert!(disk.0.contains_key("D8/log"), "nothing was removed");
        let read = stop.execute(
            &mut disk,
            request(
                9,
                FsOp::Read {
                    path: "D2/a".into(),
                },
            ),
        );
        assert_eq!(read.result, Ok(FsData::File(Some(b"old".to_vec()))));
    }
}
