//! NDBFS: the data node's files. The kernel does no I/O: its blocks put file requests
//! ([`FsRequest`]) in a queue, and whoever runs the kernel carries them out on a [`Disk`] and
//! hands each completion ([`FsConf`]) back, in request order. In `ndbd` that is one thread over
//! the real file system ([`real`]); in the simulator, a simulated disk that tears writes, loses
//! what was not synced when its node crashes, and fails with ENOSPC or EIO.
//!
//! Every path is relative to the node's file system directory, `ndb_<NodeId>_fs/` under
//! FileSystemPath (DataDir when unset), as NDB names its files: `D1/DBDIH/P0.sysfile` (and its
//! copy under `D2`), `D1/DBDICT/P0.SchemaLog`, and each redo log part's files
//! `D<8+part>/DBLQH/S<file>.FragLog`. Their byte layouts are in [`format`] and
//! ARCHITECTURE.md.

pub mod format;
pub mod read;
pub mod real;

use std::fmt;
use std::io;

/// One file request from the kernel. Requests complete in the order they were made.
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

const ENOSPC: i32 = 28;
const EDQUOT: i32 = 122;
