//! A single-producer single-consumer ring of length-prefixed records, and the consumer's
//! "going to sleep" flag.
//!
//! The ring is written against two small abstractions so the same code runs on a mapped segment
//! and in the loom models: [`AtomicWord`] for the three control words and [`RingBytes`] for the
//! data area. Positions are monotonic byte counts (`u64`, never wrapped); `position & mask` is the
//! offset in the data area.
//!
//! ```text
//! data area (capacity_bytes, a power of two; every slot starts 8-byte aligned)
//! +-----------+-----------+---------+-------------+-------------------+
//! | record    | record    |  free   | WRAP_MARKER | (rest of the end, |
//! | len|bytes | len|bytes |         | length 0    |  skipped)         |
//! +-----------+-----------+---------+-------------+-------------------+
//!  ^ head (consumer)       ^ tail (producer)
//! ```
//!
//! A record never wraps the end of the data area (NDB's rule): when it does not fit before the end,
//! the producer writes [`WRAP_MARKER`] in place of a length and the record starts again at offset
//! 0. The first four bytes of a record are its length, little-endian (a frame's own length field);
//! the record occupies its length rounded up to [`RECORD_ALIGN_BYTES`].

use std::ops::Deref;
use std::sync::atomic::Ordering;

use super::sync::AtomicWord;

/// Every record slot starts at a multiple of this, so a length word is always aligned and a wrap
/// marker always fits before the end.
pub(crate) const RECORD_ALIGN_BYTES: usize = 8;
/// A length word with this value means "the rest of the data area is padding; go to offset 0".
/// Zero is below every valid record length, so a marker is never mistaken for a record.
pub(crate) const WRAP_MARKER: u32 = 0;
/// The shortest record: its own length word.
pub(crate) const RECORD_BYTES_MIN: usize = 4;

/// One value alone on a 64-byte cache line, so the producer's and the consumer's words never
/// share a line.
#[repr(C, align(64))]
#[derive(Debug)]
pub(crate) struct CacheLine<T> {
    pub(crate) word: T,
}

/// The shared control words of one ring. In a segment this lives in the header region.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct RingControl<A> {
    /// Bytes ever published by the producer. Written only by the producer (Release), read by the
    /// consumer (Acquire).
    pub(crate) tail: CacheLine<A>,
    /// Bytes ever consumed. Written only by the consumer (Release), read by the producer (Acquire).
    pub(crate) head: CacheLine<A>,
    /// 1 while the consumer may be asleep in its poller, else 0. Changed only by `swap` (a
    /// read-modify-write) on both sides; see [`Consumer::prepare_to_sleep`] for why.
    pub(crate) consumer_sleeping: CacheLine<A>,
}

impl<A: AtomicWord> RingControl<A> {
    /// An empty ring's control words (heap rings in tests; a segment is zeroed instead).
    #[cfg(test)]
    pub(crate) fn new() -> Self {
        RingControl {
            tail: CacheLine {
                word: A::with_value(0),
            },
            head: CacheLine {
                word: A::with_value(0),
            },
            consumer_sleeping: CacheLine {
                word: A::with_value(0),
            },
        }
    }
}

/// The data area of a ring.
///
/// Implementations only move bytes; every offset and length they get has been checked by the
/// ring against the capacity, and they assert it again.
pub(crate) trait RingBytes {
    /// Bytes in the data area: a power of two.
    fn capacity_bytes(&self) -> usize;

    /// Copies `src` to `offset`.
    ///
    /// # Safety
    /// `[offset, offset + src.len())` must lie in the producer's unpublished region, which no
    /// one else reads or writes until the producer publishes it.
    unsafe fn write(&self, offset: usize, src: &[u8]);

    /// Copies bytes at `offset` into `dst`.
    ///
    /// # Safety
    /// `[offset, offset + dst.len())` must lie in the published, not yet consumed region, which
    /// the producer does not write until the consumer releases it.
    unsafe fn read(&self, offset: usize, dst: &mut [u8]);

    /// Reads the little-endian length word at `offset` (a multiple of 4).
    ///
    /// # Safety
    /// As for [`RingBytes::read`], for the four bytes at `offset`.
    unsafe fn read_u32(&self, offset: usize) -> u32;

    /// Hints that the bytes at `offset` (a record's first two cache lines) are read soon. No
    /// effect on memory; the consumer calls it with every look at the tail, so that a new
    /// record's first lines cross between cores together with the tail, not after it.
    fn prefetch(&self, _offset: usize) {}
}

/// The ring's indices or a record length are impossible: the peer is broken or the segment was
/// corrupted. The link is closed.
#[derive(Debug)]
pub(crate) struct RingError {
    pub(crate) reason: String,
}

fn corrupt(reason: String) -> RingError {
    RingError { reason }
}

/// `bytes` rounded up to a whole record slot.
pub(crate) fn slot_bytes(bytes: usize) -> usize {
    bytes.div_ceil(RECORD_ALIGN_BYTES) * RECORD_ALIGN_BYTES
}

/// The writing end. Owns the tail; caches the consumer's head.
#[derive(Debug)]
pub(crate) struct Producer<C, B> {
    control: C,
    bytes: B,
    capacity_bytes: u64,
    mask: u64,
    record_bytes_max: usize,
    /// Bytes written so far, published or not. Only this producer changes it.
    tail_written: u64,
    /// The tail value last stored in `control.tail`.
    tail_published: u64,
    /// The consumer's head as last read; refreshed only when the ring looks full.
    head_cached: u64,
}

impl<A, C, B> Producer<C, B>
where
    A: AtomicWord,
    C: Deref<Target = RingControl<A>>,
    B: RingBytes,
{
    /// The producer of an empty ring (both indices at zero).
    pub(crate) fn new(control: C, bytes: B, record_bytes_max: usize) -> Self {
        let capacity_bytes = bytes.capacity_bytes();
        assert!(capacity_bytes.is_power_of_two() && capacity_bytes >= 4 * RECORD_ALIGN_BYTES);
        assert!((RECORD_BYTES_MIN..=capacity_bytes / 2).contains(&record_bytes_max));
        Producer {
            control,
            bytes,
            capacity_bytes: capacity_bytes as u64,
            mask: capacity_bytes as u64 - 1,
            record_bytes_max,
            tail_written: 0,
            tail_published: 0,
            head_cached: 0,
        }
    }

    /// Writes one record after the last one, unpublished. Returns `Ok(false)`, writing nothing,
    /// when the ring has no room for it now. `record` starts with its own length, little-endian.
    pub(crate) fn try_write(&mut self, record: &[u8]) -> Result<bool, RingError> {
        debug_assert_eq!(record[..4], (record.len() as u32).to_le_bytes());
        self.try_write_bytes(record)
    }

    /// Like [`Producer::try_write`], but the bytes need not start with their length: a test
    /// plays a broken peer with it. The slot is the length of `bytes` rounded up.
    pub(crate) fn try_write_bytes(&mut self, record: &[u8]) -> Result<bool, RingError> {
        let record_len = record.len();
        assert!((RECORD_BYTES_MIN..=self.record_bytes_max).contains(&record_len));
        let slot_len = slot_bytes(record_len) as u64;
        let offset = self.tail_written & self.mask;
        let to_end = self.capacity_bytes - offset;
        let padding = if slot_len > to_end { to_end } else { 0 };
        if !self.has_room(padding + slot_len)? {
            return Ok(false);
        }
        if padding > 0 {
            // SAFETY: `has_room` showed that `padding + slot_len` bytes from `tail_written` are
            // free (consumed by the consumer, never published again), so the four bytes at
            // `offset` (8-aligned, at least 8 before the end) are in our unpublished region.
            unsafe {
                self.bytes
                    .write(offset as usize, &WRAP_MARKER.to_le_bytes())
            };
            self.tail_written += padding;
        }
        let offset = (self.tail_written & self.mask) as usize;
        // SAFETY: as above, the slot of `slot_len` bytes at `offset` is free and unpublished, and
        // it does not cross the end of the data area (we padded to offset 0 when it would).
        unsafe { self.bytes.write(offset, record) };
        self.tail_written += slot_len;
        Ok(true)
    }

    /// True when `needed` more bytes fit, reading the consumer's head only if the cached one
    /// says they do not.
    fn has_room(&mut self, needed: u64) -> Result<bool, RingError> {
        if self.tail_written - self.head_cached + needed <= self.capacity_bytes {
            return Ok(true);
        }
        // Acquire pairs with the consumer's Release store of `head`: the consumer finished
        // reading those bytes before we overwrite them.
        let head = self.control.head.word.load_word(Ordering::Acquire);
        if head < self.head_cached || head > self.tail_published {
            return Err(corrupt(format!(
                "ring head {head} outside [{}, {}] (cached head, published tail)",
                self.head_cached, self.tail_published
            )));
        }
        self.head_cached = head;
        Ok(self.tail_written - head + needed <= self.capacity_bytes)
    }

    /// Makes every written record visible to the consumer. Returns true when the consumer had
    /// announced that it is going to sleep; the caller must then wake it (one byte on the TCP
    /// socket). The flag is cleared here, so one publish wakes the consumer at most once.
    pub(crate) fn publish(&mut self) -> bool {
        if self.tail_written == self.tail_published {
            return false;
        }
        // Release: the record bytes written before are visible to a consumer that reads this
        // tail with Acquire, so a record is never read half-written.
        self.control
            .tail
            .word
            .store_word(self.tail_written, Ordering::Release);
        self.tail_published = self.tail_written;
        // The wake-up check is a read-modify-write, never a plain load; see
        // `Consumer::prepare_to_sleep` for the argument that no wake-up is lost.
        self.control
            .consumer_sleeping
            .word
            .swap_word(0, Ordering::AcqRel)
            != 0
    }
}

/// The reading end. Owns the head; caches the producer's tail.
#[derive(Debug)]
pub(crate) struct Consumer<C, B> {
    control: C,
    bytes: B,
    capacity_bytes: u64,
    mask: u64,
    record_bytes_max: usize,
    /// Bytes consumed so far; stored to `control.head` after each record.
    head_read: u64,
    /// The producer's tail as last read and validated.
    tail_cached: u64,
}

impl<A, C, B> Consumer<C, B>
where
    A: AtomicWord,
    C: Deref<Target = RingControl<A>>,
    B: RingBytes,
{
    /// The consumer of an empty ring (both indices at zero).
    pub(crate) fn new(control: C, bytes: B, record_bytes_max: usize) -> Self {
        let capacity_bytes = bytes.capacity_bytes();
        assert!(capacity_bytes.is_power_of_two() && capacity_bytes >= 4 * RECORD_ALIGN_BYTES);
        assert!((RECORD_BYTES_MIN..=capacity_bytes / 2).contains(&record_bytes_max));
        Consumer {
            control,
            bytes,
            capacity_bytes: capacity_bytes as u64,
            mask: capacity_bytes as u64 - 1,
            record_bytes_max,
            head_read: 0,
            tail_cached: 0,
        }
    }

    /// True when the producer has published bytes we have not read. One atomic load, no
    /// validation (a corrupt tail is caught by [`Consumer::refresh`]).
    pub(crate) fn input_pending(&self) -> bool {
        self.bytes.prefetch((self.head_read & self.mask) as usize);
        self.control.tail.word.load_word(Ordering::Acquire) != self.head_read
    }

    /// Reads and validates the producer's tail. Returns true when records are waiting. Records
    /// published after this call wait for the next one, which bounds the work of one receive.
    pub(crate) fn refresh(&mut self) -> Result<bool, RingError> {
        self.bytes.prefetch((self.head_read & self.mask) as usize);
        // Acquire pairs with the producer's Release store: every byte below `tail` is written.
        let tail = self.control.tail.word.load_word(Ordering::Acquire);
        let tail_valid = tail >= self.tail_cached
            && tail - self.head_read <= self.capacity_bytes
            && tail & (RECORD_ALIGN_BYTES as u64 - 1) == 0;
        if !tail_valid {
            return Err(corrupt(format!(
                "ring tail {tail} invalid (head {}, previous tail {}, capacity {} bytes)",
                self.head_read, self.tail_cached, self.capacity_bytes
            )));
        }
        self.tail_cached = tail;
        Ok(tail != self.head_read)
    }

    /// Copies the next record below the cached tail into `dst` and releases its slot to the
    /// producer. Returns the record's length, or `None` when every refreshed record was read.
    /// Every length read from the ring is checked before it is used.
    pub(crate) fn pop_into(&mut self, dst: &mut [u8]) -> Result<Option<usize>, RingError> {
        assert!(dst.len() >= self.record_bytes_max);
        loop {
            let published = self.tail_cached - self.head_read;
            if published == 0 {
                return Ok(None);
            }
            let offset = self.head_read & self.mask;
            let to_end = self.capacity_bytes - offset;
            // SAFETY: `published` is a non-zero multiple of 8 (checked in `refresh`) and `offset`
            // is 8-aligned, so the four bytes at `offset` are published and not yet consumed.
            let length = unsafe { self.bytes.read_u32(offset as usize) };
            if length == WRAP_MARKER {
                if offset == 0 || to_end > published {
                    return Err(corrupt(format!(
                        "wrap marker at offset {offset} skips {to_end} bytes, {published} published"
                    )));
                }
                self.release(to_end);
                continue;
            }
            let record_len = length as usize;
            self.check_record(record_len, offset, published)?;
            // SAFETY: the record's slot lies before the end of the data area and below the
            // published tail (`check_record`); `dst` is long enough (asserted above).
            unsafe { self.bytes.read(offset as usize, &mut dst[..record_len]) };
            self.release(slot_bytes(record_len) as u64);
            return Ok(Some(record_len));
        }
    }

    /// Checks a record length read from the ring before anything trusts it.
    fn check_record(
        &self,
        record_len: usize,
        offset: u64,
        published: u64,
    ) -> Result<(), RingError> {
        let slot_len = slot_bytes(record_len) as u64;
        let to_end = self.capacity_bytes - offset;
        if record_len > self.record_bytes_max {
            return Err(corrupt(format!(
                "record length {record_len} at offset {offset} exceeds the limit of {} bytes",
                self.record_bytes_max
            )));
        }
        if record_len < RECORD_BYTES_MIN {
            return Err(corrupt(format!(
                "record length {record_len} at offset {offset} is below the minimum of \
                 {RECORD_BYTES_MIN} bytes"
            )));
        }
        if slot_len > to_end || slot_len > published {
            return Err(corrupt(format!(
                "record of {slot_len} bytes at offset {offset} crosses the end of the ring \
                 ({to_end} bytes left) or the published tail ({published} bytes published)"
            )));
        }
        Ok(())
    }

    /// Hands `bytes` more bytes back to the producer.
    fn release(&mut self, bytes: u64) {
        self.head_read += bytes;
        // Release: our reads of the slot happen before the producer, reading `head` with Acquire,
        // writes over it.
        self.control
            .head
            .word
            .store_word(self.head_read, Ordering::Release);
    }

    /// Announces that the consumer is about to sleep in its poller and checks the ring once more.
    /// Returns false, withdrawing the announcement, when records arrived meanwhile.
    ///
    /// Why no wake-up is lost. Every change of `consumer_sleeping`, on either side, is a `swap`
    /// (a read-modify-write), so all of them lie in one modification order and each reads the
    /// value of the one just before it. Let P be the producer's `swap(0)` after it stored a new
    /// tail T (Release), and C our `swap(1)` below, followed by our Acquire load of the tail.
    /// - If C comes before P in that order, the first change after C is either ours (we withdrew
    ///   or woke up, so we are not asleep) or a producer's `swap(0)`, which reads 1 and so writes
    ///   the wake-up byte: the sleeper is woken.
    /// - If P comes before C, C reads from the release sequence headed by P (every later change
    ///   is a read-modify-write), so P synchronizes with C, the store of T happens before our
    ///   tail load, and we see T and do not sleep.
    ///
    /// This is Dekker's "store flag, then load tail" against "store tail, then load flag", made
    /// safe with read-modify-writes instead of SeqCst fences (which also lets loom check it).
    pub(crate) fn prepare_to_sleep(&self) -> bool {
        self.control
            .consumer_sleeping
            .word
            .swap_word(1, Ordering::AcqRel);
        if self.control.tail.word.load_word(Ordering::Acquire) != self.head_read {
            self.woke_up();
            return false;
        }
        true
    }

    /// Withdraws the "going to sleep" announcement (after waking, or when not sleeping after all).
    pub(crate) fn woke_up(&self) {
        self.control
            .consumer_sleeping
            .word
            .swap_word(0, Ordering::AcqRel);
    }
}
