//! The real disk: files under the node's file system directory, and the NDBFS thread that
//! carries out the kernel's file requests on it, one at a time and in order (none that
//! changes the disk after one failed: [`FailStop`]), so that the execution thread never
//! waits for a disk.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;

use super::{Disk, FailStop, FsConf, FsRequest};

/// Files under one directory, kept open while they are written.
#[derive(Debug)]
pub struct RealDisk {
    root: PathBuf,
    open: HashMap<String, File>,
    /// Files created since their directory entry was last made durable.
    created: std::collections::HashSet<String>,
}

impl RealDisk {
    pub fn new(root: PathBuf) -> RealDisk {
        RealDisk {
            root,
            open: HashMap::new(),
            created: Default::default(),
        }
    }

    fn full(&self, path: &str) -> PathBuf {
        self.root.join(path)
    }

    fn file(&mut self, path: &str) -> io::Result<&File> {
        if !self.open.contains_key(path) {
            let full = self.full(path);
            if let Some(dir) = full.parent() {
                fs::create_dir_all(dir)?;
            }
            if !full.exists() {
                self.created.insert(path.to_string());
            }
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&full)?;
            self.open.insert(path.to_string(), file);
        }
        self.open
            .get(path)
            .ok_or_else(|| io::Error::other("file vanished"))
    }
}

impl Disk for RealDisk {
    fn write_at(&mut self, path: &str, offset: u64, bytes: &[u8]) -> io::Result<()> {
        self.file(path)?.write_all_at(bytes, offset)
    }

    fn sync(&mut self, path: &str) -> io::Result<()> {
        if path.starts_with('/') {
            // A file outside the node's file system (a backup's) is synced once, when it is
            // complete or given up: it is closed whatever the sync's outcome, never created
            // by it (a given-up backup's directory may be gone), and the directories its
            // backup made (`BACKUP-<id>/`, `BACKUP/`) are synced up to BackupDataDir.
            self.created.remove(path);
            let file = match self.open.remove(path) {
                Some(file) => file,
                None => match OpenOptions::new().write(true).open(path) {
                    Ok(file) => file,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                    Err(e) => return Err(e),
                },
            };
            file.sync_data()?;
            for dir in Path::new(path).ancestors().skip(1).take(3) {
                File::open(dir)?.sync_all()?;
            }
            return Ok(());
        }
        self.file(path)?.sync_data()?;
        // A new file's directory entry must be durable too (once: fsync of a directory costs
        // as much as a file's).
        if self.created.remove(path) {
            sync_dirs(&self.root, &self.full(path))?;
        }
        Ok(())
    }

    /// More than one file: one `syncfs` of the file system they are on (every file of a node
    /// is under one directory), which costs about one fsync instead of one per file.
    fn sync_all(&mut self, paths: &[String]) -> io::Result<()> {
        let [first, _, ..] = paths else {
            return paths.iter().try_for_each(|path| self.sync(path));
        };
        let fd = std::os::fd::AsRawFd::as_raw_fd(self.file(first)?);
        nix::unistd::syncfs(fd).map_err(io::Error::from)?;
        for path in paths {
            if self.created.remove(path) {
                sync_dirs(&self.root, &self.full(path))?;
            }
        }
        Ok(())
    }

    fn truncate(&mut self, path: &str, len: u64) -> io::Result<()> {
        self.file(path)?.set_len(len)
    }

    fn replace(&mut self, path: &str, bytes: &[u8]) -> io::Result<()> {
        self.open.remove(path);
        let full = self.full(path);
        if let Some(dir) = full.parent() {
            fs::create_dir_all(dir)?;
        }
        let temporary = full.with_extension("tmp");
        let mut file = File::create(&temporary)?;
        file.write_all(bytes)?;
        file.sync_data()?;
        fs::rename(&temporary, &full)?;
        sync_dirs(&self.root, &full)
    }

    fn read(&mut self, path: &str) -> io::Result<Option<Vec<u8>>> {
        match File::open(self.full(path)) {
            Ok(mut file) => {
                let mut bytes = Vec::new();
                file.read_to_end(&mut bytes)?;
                Ok(Some(bytes))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn list(&mut self, path: &str) -> io::Result<Vec<String>> {
        match fs::read_dir(self.full(path)) {
            Ok(entries) => entries
                .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
                .collect(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    fn remove(&mut self, path: &str) -> io::Result<()> {
        self.open.retain(|open, _| !open.starts_with(path));
        let full = self.full(path);
        let removed = match fs::symlink_metadata(&full) {
            Ok(meta) if meta.is_dir() => fs::remove_dir_all(&full),
            Ok(_) => fs::remove_file(&full),
            Err(e) => Err(e),
        };
        match removed {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            Err(_) => Ok(()),
            Ok(()) => sync_dir(&full),
        }
    }
}

/// Makes the directory entry of `path` durable.
/// Makes `path`'s entry durable in its directory, and each directory's in the one above, up
/// to the node's file system directory: a file in a directory made just before (a node
/// restart removes `D1` and writes its sysfile there again) would be lost with it otherwise.
fn sync_dirs(root: &Path, path: &Path) -> io::Result<()> {
    for dir in path.ancestors().skip(1) {
        File::open(dir)?.sync_all()?;
        if dir == root || !dir.starts_with(root) {
            break;
        }
    }
    Ok(())
}

fn sync_dir(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) => File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

/// Starts the NDBFS threads over `disk`: requests go in through the returned sender, and each
/// completion comes back on the returned receiver, after which `wake` is called (it wakes the
/// execution thread). The node's own files are one thread's, in request order; requests on
/// absolute paths (a backup's files, under BackupDataDir) go to a second thread, in their own
/// order, so that a slow backup disk never holds up the redo log. The threads end when the
/// sender is dropped.
pub fn spawn(
    disk: RealDisk,
    wake: Arc<dyn Fn() + Send + Sync>,
) -> io::Result<(Sender<FsRequest>, Receiver<FsConf>)> {
    let (requests, inbox) = mpsc::channel::<FsRequest>();
    let (backup_requests, backup_inbox) = mpsc::channel::<FsRequest>();
    let (confs, outbox) = mpsc::channel();
    let worker = |name: &str, mut disk: RealDisk, inbox: Receiver<FsRequest>, forward| {
        let (confs, wake): (Sender<FsConf>, Arc<dyn Fn() + Send + Sync>) =
            (confs.clone(), wake.clone());
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let mut stop = FailStop::default();
                for request in inbox {
                    let request = match &forward {
                        Some(backups) if request.op.path().starts_with('/') => {
                            let backups: &Sender<FsRequest> = backups;
                            match backups.send(request) {
                                Ok(()) => continue,
                                Err(mpsc::SendError(request)) => request,
                            }
                        }
                        _ => request,
                    };
                    if confs.send(stop.execute(&mut disk, request)).is_err() {
                        return;
                    }
                    wake();
                }
            })
    };
    let backup_disk = RealDisk::new(disk.root.clone());
    worker("ndbfs-backup", backup_disk, backup_inbox, None)?;
    worker("ndbfs", disk, inbox, Some(backup_requests))?;
    Ok((requests, outbox))
}
