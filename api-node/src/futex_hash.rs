//! Room in the kernel's futex hash for the threads this library parks.
//!
//! A client thread waiting for its answer parks ([`std::thread::park_timeout`]): it sleeps on a
//! futex, queued in the slot of the futex hash its address falls in, and the thread that files
//! its answer wakes it with a futex wake, which walks that slot's queue. Since Linux 6.16 a
//! process that starts a second thread gets a hash of its own, sized for the CPUs it may use
//! and not for its threads: four slots per CPU, at least 16. On this 2-vCPU machine that is 16
//! slots, so 4096 parked client threads queue 256 to a slot, and the wakes' walks took 16 % of
//! the client threads' CPU at 4096 threads (perf; at 256 threads, under 1 %).
//!
//! [`parking`] counts the threads parked in this library at once, and when they outnumber the
//! slots, asks for four times as many (`prctl(PR_FUTEX_HASH, PR_FUTEX_HASH_SET_SLOTS)`, rounded
//! to a power of two, at most [`SLOTS_MAX`]). The hash only grows: a process that asked for a
//! larger one itself, or uses the kernel's global hash (0 slots), keeps what it has. On kernels
//! without the call (before 6.16: every process shares the global hash, sized for the machine)
//! the first refusal stops further tries.

#![allow(unsafe_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// `prctl` option and sub-operations (include/uapi/linux/prctl.h, Linux 6.16).
const PR_FUTEX_HASH: libc::c_int = 78;
const PR_FUTEX_HASH_SET_SLOTS: libc::c_ulong = 1;
const PR_FUTEX_HASH_GET_SLOTS: libc::c_ulong = 2;

/// Slots asked for per parked thread when the hash grows (the kernel's own default ratio).
const SLOTS_PER_PARKED: usize = 4;
/// The most slots asked for: 64 bytes each, 4 MiB.
const SLOTS_MAX: usize = 65_536;

/// Threads parked in this library now.
static PARKED: AtomicUsize = AtomicUsize::new(0);
/// Parked threads past which the hash is looked at again: its slots when last seen, or
/// `usize::MAX` once growing it is known to be impossible or unneeded.
static ROOM_FOR: AtomicUsize = AtomicUsize::new(0);
/// One thread at a time resizes.
static RESIZING: Mutex<()> = Mutex::new(());

/// Counts the calling thread as parked until the guard drops, growing the futex hash first if
/// the parked threads now outnumber its slots.
pub(crate) fn parking() -> Parked {
    let parked = PARKED.fetch_add(1, Ordering::Relaxed) + 1;
    if parked > ROOM_FOR.load(Ordering::Relaxed) {
        make_room(parked);
    }
    Parked(())
}

/// A thread counted as parked (see [`parking`]).
pub(crate) struct Parked(());

impl Drop for Parked {
    fn drop(&mut self) {
        PARKED.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Grows the hash to [`SLOTS_PER_PARKED`] slots per parked thread, unless it is the global hash,
/// already as large, or the kernel refuses.
fn make_room(parked: usize) {
    let Ok(_one_at_a_time) = RESIZING.try_lock() else {
        return; // Another thread is resizing; this one parks as things are.
    };
    if parked <= ROOM_FOR.load(Ordering::Relaxed) {
        return;
    }
    let room = match slots() {
        // The global hash (or no private hash yet): sized for the machine, not ours to change.
        Ok(0) => usize::MAX,
        Ok(current) if current >= parked => current,
        Ok(current) => {
            let wanted = (parked * SLOTS_PER_PARKED)
                .next_power_of_two()
                .min(SLOTS_MAX);
            match set_slots(wanted) {
                Ok(()) => {
                    tracing::debug!(parked, from = current, to = wanted, "futex hash grown");
                    if wanted == SLOTS_MAX {
                        usize::MAX
                    } else {
                        wanted
                    }
                }
                Err(e) => {
                    tracing::debug!(parked, slots = current, "futex hash not grown: {e}");
                    usize::MAX
                }
            }
        }
        Err(e) => {
            tracing::debug!("futex hash size unknown: {e}");
            usize::MAX
        }
    };
    ROOM_FOR.store(room, Ordering::Relaxed);
}

/// The slots of this process's futex hash (0: the kernel's global hash).
fn slots() -> std::io::Result<usize> {
    // SAFETY: PR_FUTEX_HASH_GET_SLOTS reads no memory of ours; the unused arguments are 0.
    let slots = unsafe { libc::prctl(PR_FUTEX_HASH, PR_FUTEX_HASH_GET_SLOTS, 0, 0, 0) };
    if slots < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(slots as usize)
}

/// Resizes this process's futex hash to `slots` (a power of two).
fn set_slots(slots: usize) -> std::io::Result<()> {
    // SAFETY: PR_FUTEX_HASH_SET_SLOTS reads no memory of ours: the slot count and flags (0:
    // the size may change again) are plain integers; the unused argument is 0.
    let result = unsafe {
        libc::prctl(
            PR_FUTEX_HASH,
            PR_FUTEX_HASH_SET_SLOTS,
            slots as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    if result < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counting hundreds of parked threads grows the hash to at least a slot each, where the
    /// kernel gives this process a hash of its own (Linux 6.16 and later).
    #[test]
    fn many_parked_threads_grow_the_hash() {
        // A second thread makes the kernel give the process its private hash.
        std::thread::spawn(|| ()).join().unwrap();
        let before = match slots() {
            Ok(0) | Err(_) => {
                eprintln!("no private futex hash on this kernel: nothing to grow");
                return;
            }
            Ok(slots) => slots,
        };
        let parked: Vec<Parked> = (0..(before * 8).max(300)).map(|_| parking()).collect();
        let after = slots().unwrap();
        assert!(
            after >= parked.len().min(SLOTS_MAX),
            "{} threads counted parked, the hash has {after} slots (before: {before})",
            parked.len()
        );
        drop(parked);
        assert_eq!(slots().unwrap(), after, "the hash never shrinks");
    }
}
