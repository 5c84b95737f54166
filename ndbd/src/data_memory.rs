//! DataMemory paged in at start, as NDB's data node allocates and touches its memory before it
//! serves. Without it each page of rows, index and transaction records is faulted in the first
//! time the node writes it, while requests wait: on this project's VM guests a fresh 2 MiB page
//! cost 5-17 ms at times (the hash index's doubling, `blocks/acc/slot_index.rs`).
//!
//! The allocator is told never to give freed memory back to the OS (mimalloc's purge delay
//! -1), then DataMemory is allocated in chunks, every page of them written in
//! (`MADV_POPULATE_WRITE`), and freed: it stays resident in the allocator's arenas, and the
//! node's rows, indexes and records are later carved from it. A DataMemory larger than the
//! host's MemAvailable, or one the kernel refuses, fails the start with the parameter named,
//! as NDB's does (rather than the OOM killer ending the process mid-way).

use std::alloc::{alloc, dealloc, Layout};
use std::io;

use anyhow::bail;

/// Bytes allocated at a time: large enough that mimalloc takes each straight from an arena.
const CHUNK_BYTES: usize = 4 << 20;
/// mimalloc's `mi_option_purge_delay` (`mimalloc.h`, v3): milliseconds before freed memory
/// goes back to the OS; -1 never.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Pages in `data_memory_bytes` (node `node`'s DataMemory) through the global allocator.
/// Returns the bytes paged in.
pub fn page_in(node: u16, data_memory_bytes: u64) -> anyhow::Result<usize> {
    let Ok(wanted) = usize::try_from(data_memory_bytes) else {
        bail!(
            "DataMemory={data_memory_bytes} of node {node} does not fit this machine's address \
             space"
        );
    };
    // Past what the host has free the page-in would not fail: the kernel's OOM killer would
    // end this process (or another) without a word.
    if let Some(available) = mem_available_bytes()? {
        if data_memory_bytes > available {
            bail!(
                "DataMemory={data_memory_bytes} of node {node} is more than this host has \
                 available ({available} bytes, MemAvailable in /proc/meminfo): lower DataMemory, \
                 or free memory on this host"
            );
        }
    }
    // SAFETY: sets an allocator option; any value is valid, and allocations in flight are
    // unaffected.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    // SAFETY: reads an allocator option.
    if unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) } != -1 {
        bail!(
            "the allocator did not take its purge delay (mimalloc's option \
             {MI_OPTION_PURGE_DELAY})"
        );
    }
    let layout = Layout::from_size_align(CHUNK_BYTES, 4096).expect("a valid layout");
    let mut chunks = Vec::with_capacity(wanted.div_ceil(CHUNK_BYTES));
    let mut failed = None;
    while chunks.len() * CHUNK_BYTES < wanted {
        // SAFETY: the layout has a non-zero size.
        let chunk = unsafe { alloc(layout) };
        if chunk.is_null() {
            failed = Some(io::Error::from_raw_os_error(libc::ENOMEM));
            break;
        }
        chunks.push(chunk);
        // SAFETY: `chunk` is CHUNK_BYTES this function owns, page aligned; populating faults
        // its pages in writable without changing what they hold.
        if unsafe { libc::madvise(chunk.cast(), CHUNK_BYTES, libc::MADV_POPULATE_WRITE) } != 0 {
            failed = Some(io::Error::last_os_error());
            break;
        }
    }
    let paged = chunks.len() * CHUNK_BYTES;
    for chunk in chunks {
        // SAFETY: allocated above with `layout`, and freed once.
        unsafe { dealloc(chunk, layout) };
    }
    if let Some(e) = failed {
        bail!(
            "DataMemory={data_memory_bytes} of node {node}: cannot page in {wanted} bytes at \
             start ({paged} done): {e} (lower DataMemory, or free memory on this host)"
        );
    }
    Ok(paged)
}

/// The host's MemAvailable (`/proc/meminfo`), in bytes; `None` where the kernel gives none.
fn mem_available_bytes() -> anyhow::Result<Option<u64>> {
    let meminfo = match std::fs::read_to_string("/proc/meminfo") {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => bail!("read /proc/meminfo: {e}"),
    };
    let Some(line) = meminfo.lines().find(|l| l.starts_with("MemAvailable:")) else {
        return Ok(None);
    };
    let kib = (line.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| anyhow::anyhow!("/proc/meminfo: cannot read {line:?}"))?;
    Ok(Some(kib.saturating_mul(1024)))
}

/// Locks the process's memory in RAM (NDB's LockPagesInMainMemory): what is mapped now, and,
/// with `future`, each page mapped later once it is first touched (`MCL_ONFAULT`: the
/// allocator's reserved address space is not paged in for it). A lock the host refuses
/// (RLIMIT_MEMLOCK without CAP_IPC_LOCK) is logged and the node goes on, as NDB's does.
pub fn lock(node: u16, mode: u8, future: bool) {
    let flags = if future {
        libc::MCL_CURRENT | libc::MCL_FUTURE | libc::MCL_ONFAULT
    } else {
        libc::MCL_CURRENT
    };
    // SAFETY: mlockall changes only whether the process's pages may be swapped.
    if unsafe { libc::mlockall(flags) } == 0 {
        tracing::info!(node, "LockPagesInMainMemory={mode}: memory locked");
    } else {
        let e = io::Error::last_os_error();
        tracing::warn!(
            node,
            "LockPagesInMainMemory={mode}: failed to lock the memory of node {node}: {e}; \
             it may be swapped"
        );
    }
}
