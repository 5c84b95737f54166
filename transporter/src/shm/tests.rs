//! Unit tests of the ring's bounds checks on a heap ring, and of segment creation, header
//! validation and stale-segment cleaning in /dev/shm.

use std::cell::Cell;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::ring::{Consumer, Producer, RingBytes, RingControl, RECORD_BYTES_MIN, WRAP_MARKER};
use super::segment::{validate_header, Segment, SegmentSpec};
use super::*;
use crate::NodeId;

/// A heap data area for single-threaded ring tests.
#[derive(Clone, Copy, Debug)]
struct HeapBytes<'a>(&'a [Cell<u8>]);

impl RingBytes for HeapBytes<'_> {
    fn capacity_bytes(&self) -> usize {
        self.0.len()
    }
    unsafe fn write(&self, offset: usize, src: &[u8]) {
        for (cell, &byte) in self.0[offset..offset + src.len()].iter().zip(src) {
            cell.set(byte);
        }
    }
    unsafe fn read(&self, offset: usize, dst: &mut [u8]) {
        for (byte, cell) in dst.iter_mut().zip(&self.0[offset..]) {
            *byte = cell.get();
        }
    }
    unsafe fn read_u32(&self, offset: usize) -> u32 {
        let mut word = [0u8; 4];
        // SAFETY: the same contract as ours; `HeapBytes::read` is bounds-checked anyway.
        unsafe { self.read(offset, &mut word) };
        u32::from_le_bytes(word)
    }
}

const CAPACITY_BYTES: usize = 64;
const RECORD_BYTES_MAX: usize = 16;

type HeapProducer<'a> = Producer<&'a RingControl<AtomicU64>, HeapBytes<'a>>;
type HeapConsumer<'a> = Consumer<&'a RingControl<AtomicU64>, HeapBytes<'a>>;

fn ring<'a>(
    control: &'a RingControl<AtomicU64>,
    cells: &'a [Cell<u8>],
) -> (HeapProducer<'a>, HeapConsumer<'a>) {
    let bytes = HeapBytes(cells);
    (
        Producer::new(control, bytes, RECORD_BYTES_MAX),
        Consumer::new(control, bytes, RECORD_BYTES_MAX),
    )
}

/// A record of `len` bytes: its length word, then `fill`.
fn record(len: usize, fill: u8) -> Vec<u8> {
    let mut bytes = vec![fill; len];
    bytes[..4].copy_from_slice(&(len as u32).to_le_bytes());
    bytes
}

fn cells() -> Vec<Cell<u8>> {
    (0..CAPACITY_BYTES).map(|_| Cell::new(0xEE)).collect()
}

#[test]
fn records_wrap_with_a_marker_and_arrive_in_order() {
    let control = RingControl::<AtomicU64>::new();
    let cells = cells();
    let (mut producer, mut consumer) = ring(&control, &cells);
    let mut dst = [0u8; RECORD_BYTES_MAX];
    for round in 0..40u8 {
        let len = RECORD_BYTES_MIN + usize::from(round) % (RECORD_BYTES_MAX - 3);
        assert!(producer
            .try_write(&record(len, round))
            .expect("no corruption"));
        assert!(
            !consumer.input_pending(),
            "nothing is visible before publish"
        );
        assert!(!producer.publish(), "no sleeper to wake");
        assert!(consumer.refresh().expect("valid tail"));
        assert_eq!(
            consumer.pop_into(&mut dst).expect("valid record"),
            Some(len)
        );
        assert_eq!(dst[..len], record(len, round)[..]);
        assert_eq!(consumer.pop_into(&mut dst).expect("valid"), None);
    }
}

#[test]
fn a_full_ring_refuses_until_the_consumer_releases() {
    let control = RingControl::<AtomicU64>::new();
    let cells = cells();
    let (mut producer, mut consumer) = ring(&control, &cells);
    let mut written = 0;
    while producer.try_write(&record(16, 1)).expect("valid") {
        written += 1;
    }
    assert_eq!(written, CAPACITY_BYTES / 16);
    producer.publish();
    assert!(consumer.refresh().expect("valid"));
    let mut dst = [0u8; RECORD_BYTES_MAX];
    assert_eq!(consumer.pop_into(&mut dst).expect("valid"), Some(16));
    assert!(
        producer.try_write(&record(16, 2)).expect("valid"),
        "a released slot is reused"
    );
}

#[test]
fn sleeping_flag_makes_publish_ask_for_a_wake_up_once() {
    let control = RingControl::<AtomicU64>::new();
    let cells = cells();
    let (mut producer, consumer) = ring(&control, &cells);
    assert!(
        consumer.prepare_to_sleep(),
        "an empty ring lets the consumer sleep"
    );
    assert!(producer.try_write(&record(8, 1)).expect("valid"));
    assert!(producer.publish(), "the sleeper must be woken");
    assert!(
        !consumer.prepare_to_sleep(),
        "data is waiting: do not sleep"
    );
    assert_eq!(
        control.consumer_sleeping.word.load(Ordering::Relaxed),
        0,
        "flag withdrawn"
    );
}

/// Checks that a consumer given `tail` (after one valid 8-byte record) reports corruption
/// containing `reason`.
fn check_bad_tail(tail: u64, reason: &str) {
    let control = RingControl::<AtomicU64>::new();
    let cells = cells();
    let (mut producer, mut consumer) = ring(&control, &cells);
    assert!(producer.try_write(&record(8, 1)).expect("valid"));
    producer.publish();
    control.tail.word.store(tail, Ordering::Release);
    let error = consumer.refresh().expect_err("corrupt tail");
    assert!(
        error.reason.contains(reason),
        "tail {tail}: {}",
        error.reason
    );
}

#[test]
fn impossible_tails_are_errors() {
    check_bad_tail(CAPACITY_BYTES as u64 + 8, "invalid");
    check_bad_tail(u64::MAX - 7, "invalid");
    check_bad_tail(12, "invalid");
}

/// Checks that an 8-byte record whose length word was overwritten with `length` is refused with
/// `reason`.
fn check_bad_length(length: u32, reason: &str) {
    let control = RingControl::<AtomicU64>::new();
    let cells = cells();
    let (mut producer, mut consumer) = ring(&control, &cells);
    assert!(producer.try_write(&record(8, 1)).expect("valid"));
    producer.publish();
    for (cell, byte) in cells.iter().zip(length.to_le_bytes()) {
        cell.set(byte);
    }
    assert!(consumer.refresh().expect("valid tail"));
    let error = consumer
        .pop_into(&mut [0u8; RECORD_BYTES_MAX])
        .expect_err("bad length");
    assert!(
        error.reason.contains(reason),
        "length {length}: {}",
        error.reason
    );
}

#[test]
fn impossible_lengths_are_errors() {
    check_bad_length(RECORD_BYTES_MAX as u32 + 1, "exceeds the limit");
    check_bad_length(u32::MAX, "exceeds the limit");
    check_bad_length(3, "below the minimum");
    check_bad_length(WRAP_MARKER, "wrap marker at offset 0");
    check_bad_length(RECORD_BYTES_MAX as u32, "published tail");
}

#[test]
fn a_head_beyond_the_published_tail_is_an_error() {
    let control = RingControl::<AtomicU64>::new();
    let cells = cells();
    let (mut producer, _consumer) = ring(&control, &cells);
    while producer.try_write(&record(16, 1)).expect("valid") {}
    control.head.word.store(1 << 40, Ordering::Release);
    let error = producer
        .try_write(&record(16, 1))
        .expect_err("corrupt head");
    assert!(error.reason.contains("ring head"), "{}", error.reason);
}

fn spec(cluster_id: u64, segment_bytes: u64) -> SegmentSpec {
    SegmentSpec {
        cluster_id,
        server_node: NodeId(1),
        client_node: NodeId(200),
        segment_bytes,
        checksum: true,
    }
}

#[test]
fn a_created_segment_attaches_and_unlinks() {
    let segment_bytes = 3 << 20;
    let mut created = Segment::create(&spec(0x5E6_0001, segment_bytes)).expect("create");
    let path = created.path().to_owned();
    let attached = Segment::attach(&path, segment_bytes).expect("attach a fresh segment");
    assert_eq!(attached.header(), created.header());
    assert_eq!(
        attached.header().rings[0].capacity_bytes,
        1 << 20,
        "largest power of two"
    );
    created.unlink().expect("unlink");
    assert!(!path.exists());
    assert!(
        Segment::attach(&path, segment_bytes).is_err(),
        "an unlinked segment is gone"
    );
}

#[test]
fn a_creator_that_fails_before_unlinking_leaves_no_file() {
    let created = Segment::create(&spec(0x5E6_0002, SHM_SEGMENT_BYTES_MIN)).expect("create");
    let path = created.path().to_owned();
    assert!(path.exists());
    drop(created);
    assert!(
        !path.exists(),
        "dropping the creator's segment removes the file"
    );
}

#[test]
fn sizes_outside_the_limits_are_refused() {
    assert!(Segment::create(&spec(0x5E6_0003, SHM_SEGMENT_BYTES_MIN - 1)).is_err());
    assert!(Segment::create(&spec(0x5E6_0003, SHM_SEGMENT_BYTES_MAX + 1)).is_err());
}

/// Writes `bytes` at `offset` of a fresh segment's file and checks that attaching fails with an
/// error containing `reason`.
fn check_corrupt_header(offset: u64, bytes: &[u8], reason: &str) {
    let created = Segment::create(&spec(0x5E6_0004, SHM_SEGMENT_BYTES_MIN)).expect("create");
    let path = created.path().to_owned();
    let file = OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open for corruption");
    file.write_all_at(bytes, offset).expect("corrupt");
    let error = Segment::attach(&path, SHM_SEGMENT_BYTES_MIN).expect_err("corrupt header");
    assert!(
        error.to_string().contains(reason),
        "offset {offset}: {error}"
    );
}

#[test]
fn corrupt_headers_are_refused() {
    check_corrupt_header(0, b"NOTRNDB!", "bad magic");
    check_corrupt_header(8, &2u32.to_le_bytes(), "layout version");
    check_corrupt_header(16, &(1u64 << 40).to_le_bytes(), "segment bytes");
    check_corrupt_header(48, &64u64.to_le_bytes(), "control block");
    check_corrupt_header(
        56,
        &(SHM_SEGMENT_BYTES_MIN - 64).to_le_bytes(),
        "does not fit",
    );
    check_corrupt_header(64, &12345u64.to_le_bytes(), "not a power of two");
    check_corrupt_header(64, &(1u64 << 62).to_le_bytes(), "not a power of two");
    check_corrupt_header(80, &4096u64.to_le_bytes(), "overlap");
}

#[test]
fn a_truncated_file_is_refused_before_mapping() {
    let created = Segment::create(&spec(0x5E6_0005, SHM_SEGMENT_BYTES_MIN)).expect("create");
    let path = created.path().to_owned();
    let file = OpenOptions::new().write(true).open(&path).expect("open");
    file.set_len(100).expect("truncate");
    let error = Segment::attach(&path, SHM_SEGMENT_BYTES_MIN).expect_err("short file");
    assert!(error.to_string().contains("100 bytes"), "{error}");
}

#[test]
fn paths_outside_dev_shm_are_refused() {
    for path in [
        "/etc/passwd",
        "/dev/shm/other-name",
        "/dev/shm/../etc/rndb-x",
        "/tmp/rndb-1",
    ] {
        let error = Segment::attach(Path::new(path), SHM_SEGMENT_BYTES_MIN).expect_err(path);
        assert!(error.to_string().contains("refusing"), "{path}: {error}");
    }
}

#[test]
fn header_validation_accepts_what_create_writes() {
    let created = Segment::create(&spec(0x5E6_0006, SHM_SEGMENT_BYTES_MIN)).expect("create");
    assert_eq!(
        validate_header(created.header(), SHM_SEGMENT_BYTES_MIN),
        Ok(())
    );
    assert!(validate_header(created.header(), SHM_SEGMENT_BYTES_MIN + 8).is_err());
}

#[test]
fn stale_segments_of_dead_creators_are_removed() {
    let cluster_id = 0x5E6_0007;
    let pid_max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(4_194_304);
    let dead = format!(
        "{SHM_DIR}/{SHM_NAME_PREFIX}{cluster_id:016x}-1-2-{}-00000001",
        pid_max + 1
    );
    std::fs::write(&dead, b"stale").expect("write a stale segment");
    let live = Arc::new(Segment::create(&spec(cluster_id, SHM_SEGMENT_BYTES_MIN)).expect("create"));
    assert_eq!(clean_stale_segments(cluster_id), 1);
    assert!(
        !Path::new(&dead).exists(),
        "the dead creator's segment is gone"
    );
    assert!(live.path().exists(), "a live creator's segment stays");
}
