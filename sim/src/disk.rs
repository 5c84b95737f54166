//! A data node's simulated disk: the `rndb_ndbd::ndbfs::Disk` the kernel's file requests run
//! on, a model of what a real disk keeps through a power loss, and the queue of requests in
//! flight.
//!
//! Each file has its durable bytes (what a power loss leaves) and the changes made since its
//! last sync, in order (writes, truncations, its removal): reads and listings see both, as a
//! page cache does. `sync` makes a file's changes durable, and with them the directory entries
//! of its directory (a removal elsewhere in it), as `RealDisk::sync` syncs the directory too.
//! A removal (of a file, or of a directory and everything under it) is durable at once, as
//! `RealDisk::remove` syncs the directory.
//! `replace` is atomic and durable (a temporary file, fsync, rename, fsync of the directory).
//! At a crash ([`SimDisk::crash`]) each file keeps a drawn prefix of its unsynced changes,
//! usually none, and the last write kept may be torn (only a prefix of its bytes reaches the
//! disk, the rest of its range keeping what was there): a real disk after a power loss, whose
//! page cache wrote back some pages in order and was cut in the middle of one.
//!
//! Faults, only where the seed turns them on and only after [`SimDisk::arm_faults`]: a write,
//! a replace or a sync fails with ENOSPC (28) or EIO (5) and changes nothing. A real fsync that
//! fails may drop the dirty pages it could not write (Linux marks them clean); NDBFS changes
//! nothing after any failure (`FailStop`), so the model keeps them unsynced instead.
//!
//! Requests run one at a time in request order ([`SimDisk::submit`], [`SimDisk::complete`]),
//! each taking a drawn time: a request's effect happens when it completes, so a request still
//! queued at a crash never happened. As in `ndbd`, whose NDBFS runs a backup's files (absolute
//! paths) on a thread of their own, those wait in a queue of their own ([`DiskQueue::Backup`]),
//! with service times of their own: a backup disk that is slower than the node's stretches a
//! backup over several global checkpoints.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io;

use rndb_ndbd::ndbfs::{Disk, FailStop, FsConf, FsOp, FsRequest};

use crate::rng::Rng;

/// ENOSPC and EIO, the raw OS errors the faults return.
const ENOSPC: i32 = 28;
const EIO: i32 = 5;

/// What a seed's disks do: service times and fault rates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskKnobs {
    /// Time a write, truncation, read, listing or removal takes (drawn between the two).
    pub op_ns: (u64, u64),
    /// Time a sync or a replace takes.
    pub sync_ns: (u64, u64),
    /// The same two of a backup's files ([`DiskQueue::Backup`]).
    pub backup_op_ns: (u64, u64),
    pub backup_sync_ns: (u64, u64),
    /// Per-million chance that a write, replace or sync fails with ENOSPC, once armed.
    pub enospc_ppm: u64,
    /// Per-million chance that it fails with EIO, once armed.
    pub eio_ppm: u64,
}

/// One change to a file not yet durable.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Change {
    Write { offset: u64, bytes: Vec<u8> },
    Truncate { len: u64 },
    Remove,
}

/// One file: its durable state and what changed since.
#[derive(Clone, Debug, Default)]
struct SimFile {
    /// What a power loss leaves (`None`: the file does not exist on the disk).
    durable: Option<Vec<u8>>,
    /// Changes since the last sync, oldest first.
    unsynced: Vec<Change>,
}

impl SimFile {
    /// The file as reads see it: the durable bytes with every change applied.
    fn current(&self) -> Option<Vec<u8>> {
        let mut bytes = self.durable.clone();
        for change in &self.unsynced {
            apply(&mut bytes, change);
        }
        bytes
    }

    /// Makes the first `count` unsynced changes durable.
    fn make_durable(&mut self, count: usize) {
        let count = count.min(self.unsynced.len());
        for change in self.unsynced.drain(..count) {
            apply(&mut self.durable, &change);
        }
    }
}

/// Applies one change to a file's bytes (`None`: absent). A write or truncation creates the
/// file, as `RealDisk` opens with `create`; a write past the end fills the gap with zeros.
fn apply(file: &mut Option<Vec<u8>>, change: &Change) {
    match change {
        Change::Write { offset, bytes } => {
            let data = file.get_or_insert_with(Vec::new);
            if bytes.is_empty() {
                // A write torn before its first byte: the file is as it was.
                return;
            }
            let start = *offset as usize;
            let end = start + bytes.len();
            if data.len() < end {
                data.resize(end, 0);
            }
            data[start..end].copy_from_slice(bytes);
        }
        Change::Truncate { len } => file.get_or_insert_with(Vec::new).resize(*len as usize, 0),
        Change::Remove => *file = None,
    }
}

/// The directory part of a path (`D8/DBLQH` of `D8/DBLQH/S0.FragLog`).
fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}

/// Which queue of a [`SimDisk`] a request waits in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DiskQueue {
    /// The node's own files (relative paths).
    Files,
    /// A backup's files (absolute paths, under BackupDataDir).
    Backup,
}

impl DiskQueue {
    /// The queue of a request on `path`.
    fn of(path: &str) -> DiskQueue {
        if path.starts_with('/') {
            DiskQueue::Backup
        } else {
            DiskQueue::Files
        }
    }

    fn index(self) -> usize {
        match self {
            DiskQueue::Files => 0,
            DiskQueue::Backup => 1,
        }
    }
}

/// One data node's disk (it outlives the node's kernels: a restart finds it as the last crash
/// left it).
#[derive(Debug)]
pub struct SimDisk {
    files: BTreeMap<String, SimFile>,
    /// Service times, fault draws and crash draws: a generator of this disk's own.
    rng: Rng,
    knobs: DiskKnobs,
    /// Faults fire only once armed (after the tables are ready).
    armed: bool,
    /// Faults do not fire while set (the world holds them: see `World::fs_done`).
    pub faults_held: bool,
    /// Requests taken from the kernel and not yet carried out, oldest first, by [`DiskQueue`].
    queues: [VecDeque<FsRequest>; 2],
    /// NDBFS of the node's running process: it changes nothing after a failure.
    stop: FailStop,
    /// Faults injected so far.
    pub faults: u64,
    /// Unsynced changes dropped by crashes, kept by crashes, and writes torn.
    pub lost_changes: u64,
    pub kept_changes: u64,
    pub torn_writes: u64,
}

impl SimDisk {
    pub fn new(rng: Rng, knobs: DiskKnobs) -> SimDisk {
        SimDisk {
            files: BTreeMap::new(),
            rng,
            knobs,
            armed: false,
            faults_held: false,
            queues: Default::default(),
            stop: FailStop::default(),
            faults: 0,
            lost_changes: 0,
            kept_changes: 0,
            torn_writes: 0,
        }
    }

    /// Lets faults fire from now on (none while the cluster is being set up).
    pub fn arm_faults(&mut self) {
        self.armed = true;
    }

    /// The operator mended the disk (its node stopped for a file system error, and is
    /// started again, as its error message asks), or the faults ended with the workload: no
    /// fault fires on it again.
    pub fn mend(&mut self) {
        self.armed = false;
    }

    /// Queues the kernel's requests. Returns the queues that were idle and now have
    /// requests: the caller schedules each one's first completion ([`SimDisk::service_ns`]).
    pub fn submit(&mut self, requests: Vec<FsRequest>) -> Vec<DiskQueue> {
        let idle = [DiskQueue::Files, DiskQueue::Backup].map(|q| self.queues[q.index()].is_empty());
        for request in requests {
            self.queues[DiskQueue::of(request.op.path()).index()].push_back(request);
        }
        [DiskQueue::Files, DiskQueue::Backup]
            .into_iter()
            .filter(|q| idle[q.index()] && self.busy(*q))
            .collect()
    }

    /// The node's process stopped: the requests it queued never happen (what the disk
    /// already took stays, in the page cache).
    pub fn drop_queue(&mut self) {
        self.queues.iter_mut().for_each(VecDeque::clear);
        self.stop = FailStop::default();
    }

    /// True while requests wait in `queue`.
    pub fn busy(&self, queue: DiskQueue) -> bool {
        !self.queues[queue.index()].is_empty()
    }

    /// How long the request at the head of `queue` takes.
    pub fn service_ns(&mut self, queue: DiskQueue) -> u64 {
        let sync = matches!(
            self.queues[queue.index()].front().map(|r| &r.op),
            Some(FsOp::Sync { .. } | FsOp::Replace { .. })
        );
        let (lo, hi) = match (queue, sync) {
            (DiskQueue::Files, true) => self.knobs.sync_ns,
            (DiskQueue::Files, false) => self.knobs.op_ns,
            (DiskQueue::Backup, true) => self.knobs.backup_sync_ns,
            (DiskQueue::Backup, false) => self.knobs.backup_op_ns,
        };
        self.rng.between(lo, hi.max(lo))
    }

    /// Carries out the request at the head of `queue`.
    pub fn complete(&mut self, queue: DiskQueue) -> Option<FsConf> {
        let request = self.queues[queue.index()].pop_front()?;
        let mut stop = std::mem::take(&mut self.stop);
        let conf = stop.execute(self, request);
        self.stop = stop;
        Some(conf)
    }

    /// The node lost power: queued requests never happen, and each file keeps a drawn
    /// prefix of its unsynced changes (half the time none), the last of which, when a write,
    /// may be torn.
    pub fn crash(&mut self) {
        self.queues.iter_mut().for_each(VecDeque::clear);
        self.stop = FailStop::default();
        for file in self.files.values_mut() {
            let count = file.unsynced.len();
            if count == 0 {
                continue;
            }
            let keep = if self.rng.coin() {
                0
            } else {
                self.rng.between(1, count as u64) as usize
            };
            if keep > 0 && self.rng.coin() {
                if let Change::Write { bytes, .. } = &mut file.unsynced[keep - 1] {
                    let cut = self.rng.below(bytes.len() as u64) as usize;
                    bytes.truncate(cut);
                    self.torn_writes += 1;
                }
            }
            self.kept_changes += keep as u64;
            self.lost_changes += (count - keep) as u64;
            file.make_durable(keep);
            file.unsynced.clear();
        }
        self.files.retain(|_, f| f.durable.is_some());
    }

    /// The durable bytes of `path` (what a restart would find if the node crashed now, with
    /// nothing unsynced kept); `None` when absent.
    pub fn durable(&self, path: &str) -> Option<&[u8]> {
        self.files.get(path)?.durable.as_deref()
    }

    /// ENOSPC or EIO, drawn, when a fault fires for this write or sync.
    fn fault(&mut self) -> io::Result<()> {
        if !self.armed || self.faults_held || self.knobs.enospc_ppm + self.knobs.eio_ppm == 0 {
            return Ok(());
        }
        let draw = self.rng.below(1_000_000);
        let code = if draw < self.knobs.enospc_ppm {
            ENOSPC
        } else if draw < self.knobs.enospc_ppm + self.knobs.eio_ppm {
            EIO
        } else {
            return Ok(());
        };
        self.faults += 1;
        Err(io::Error::from_raw_os_error(code))
    }

    /// A sync of the directory `dir`: the removals of its files become durable.
    fn sync_dir(&mut self, dir: &str) {
        for (path, file) in self.files.iter_mut() {
            if parent(path) != dir {
                continue;
            }
            if let Some(last) = file.unsynced.iter().rposition(|c| *c == Change::Remove) {
                file.make_durable(last + 1);
            }
        }
    }

    fn change(&mut self, path: &str, change: Change) {
        self.files
            .entry(path.to_string())
            .or_default()
            .unsynced
            .push(change);
    }
}

impl Disk for SimDisk {
    fn write_at(&mut self, path: &str, offset: u64, bytes: &[u8]) -> io::Result<()> {
        self.fault()?;
        let bytes = bytes.to_vec();
        self.change(path, Change::Write { offset, bytes });
        Ok(())
    }

    fn sync(&mut self, path: &str) -> io::Result<()> {
        self.fault()?;
        if let Some(file) = self.files.get_mut(path) {
            let count = file.unsynced.len();
            file.make_durable(count);
        }
        self.sync_dir(parent(path));
        Ok(())
    }

    fn truncate(&mut self, path: &str, len: u64) -> io::Result<()> {
        self.change(path, Change::Truncate { len });
        Ok(())
    }

    fn replace(&mut self, path: &str, bytes: &[u8]) -> io::Result<()> {
        self.fault()?;
        let file = self.files.entry(path.to_string()).or_default();
        file.durable = Some(bytes.to_vec());
        file.unsynced.clear();
        self.sync_dir(parent(path));
        Ok(())
    }

    fn read(&mut self, path: &str) -> io::Result<Option<Vec<u8>>> {
        Ok(self.files.get(path).and_then(SimFile::current))
    }

    /// The names in directory `path`, as `read_dir` gives them: its files and its
    /// subdirectories (a directory is there while a file under it is; a local checkpoint is
    /// the directory `LCP/<id>`).
    fn list(&mut self, path: &str) -> io::Result<Vec<String>> {
        let prefix = format!("{path}/");
        let names: BTreeSet<String> = (self.files.iter())
            .filter(|(_, f)| f.current().is_some())
            .filter_map(|(p, _)| p.strip_prefix(&prefix))
            .map(|rest| rest.split('/').next().unwrap_or(rest).to_string())
            .collect();
        Ok(names.into_iter().collect())
    }

    /// Removes a file, or a directory with everything in it, durably: `RealDisk::remove`
    /// syncs the directory it removed from.
    fn remove(&mut self, path: &str) -> io::Result<()> {
        let under = format!("{path}/");
        for (name, file) in self.files.iter_mut() {
            if name == path || name.starts_with(&under) {
                file.unsynced.push(Change::Remove);
                file.make_durable(file.unsynced.len());
            }
        }
        self.files
            .retain(|_, f| f.durable.is_some() || !f.unsynced.is_empty());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk(seed: u64) -> SimDisk {
        SimDisk::new(Rng::new(seed), DiskKnobs::default())
    }

    #[test]
    fn synced_bytes_survive_a_crash_and_unsynced_ones_at_most_in_order() {
        for seed in 0..200 {
            let mut d = disk(seed);
            d.write_at("D8/DBLQH/S0.FragLog", 0, b"header").unwrap();
            d.sync("D8/DBLQH/S0.FragLog").unwrap();
            d.write_at("D8/DBLQH/S0.FragLog", 6, b"-one").unwrap();
            d.write_at("D8/DBLQH/S0.FragLog", 10, b"-two").unwrap();
            assert_eq!(
                d.read("D8/DBLQH/S0.FragLog").unwrap().as_deref(),
                Some(&b"header-one-two"[..])
            );
            d.crash();
            let after = d.read("D8/DBLQH/S0.FragLog").unwrap().unwrap();
            // A prefix of what was written, in order, possibly torn.
            assert!(
                b"header-one-two".starts_with(&after),
                "seed {seed}: {after:?}"
            );
            assert!(after.len() >= 6, "seed {seed}: synced bytes lost");
        }
    }

    #[test]
    fn crashes_keep_none_some_and_torn_writes_across_seeds() {
        let mut lengths = std::collections::BTreeSet::new();
        for seed in 0..200 {
            let mut d = disk(seed);
            d.write_at("f", 0, b"0123456789").unwrap();
            d.crash();
            lengths.insert(d.read("f").unwrap().map_or(0, |b| b.len()));
        }
        assert!(lengths.contains(&0) && lengths.contains(&10));
        assert!(lengths.iter().any(|&n| n > 0 && n < 10), "{lengths:?}");
    }

    #[test]
    fn replace_is_durable_and_atomic() {
        let mut d = disk(1);
        d.replace("D1/DBDIH/P0.sysfile", b"old").unwrap();
        d.replace("D1/DBDIH/P0.sysfile", b"new").unwrap();
        d.crash();
        assert_eq!(
            d.read("D1/DBDIH/P0.sysfile").unwrap().as_deref(),
            Some(&b"new"[..])
        );
    }

    #[test]
    fn a_removal_is_durable_once_its_directory_is_synced() {
        let mut d = disk(3);
        d.write_at("D8/DBLQH/S1.FragLog", 0, b"old").unwrap();
        d.sync("D8/DBLQH/S1.FragLog").unwrap();
        d.remove("D8/DBLQH/S1.FragLog").unwrap();
        assert_eq!(d.list("D8/DBLQH").unwrap(), Vec::<String>::new());
        d.write_at("D8/DBLQH/S0.FragLog", 0, b"x").unwrap();
        d.sync("D8/DBLQH/S0.FragLog").unwrap();
        d.crash();
        assert_eq!(d.list("D8/DBLQH").unwrap(), vec!["S0.FragLog".to_string()]);
    }

    #[test]
    fn armed_faults_fail_writes_with_enospc_or_eio_and_change_nothing() {
        let knobs = DiskKnobs {
            enospc_ppm: 500_000,
            eio_ppm: 500_000,
            ..DiskKnobs::default()
        };
        let mut d = SimDisk::new(Rng::new(5), knobs);
        d.write_at("f", 0, b"a").unwrap();
        d.arm_faults();
        let error = d.write_at("f", 1, b"b").unwrap_err();
        assert!(matches!(error.raw_os_error(), Some(ENOSPC | EIO)));
        assert_eq!(d.read("f").unwrap().as_deref(), Some(&b"a"[..]));
        assert_eq!(d.faults, 1);
    }
}
