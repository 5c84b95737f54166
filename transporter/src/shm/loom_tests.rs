//! Loom models of the ring and of the wake-up protocol: loom runs the real `Producer` and
//! `Consumer` code on loom's atomics and `UnsafeCell`s over every interleaving (up to a
//! preemption bound), so a consumer that read unpublished bytes would be reported as a data
//! race, and a lost wake-up fails an assertion.
//!
//! They run with this crate's unit tests (`cargo test -p rndb-transporter --lib shm::loom_tests`),
//! at a preemption bound of 3.

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use loom::sync::Arc;

use super::ring::{Consumer, Producer, RingBytes, RingControl};

/// A small data area: 32 bytes, so records wrap after two or three.
const CAPACITY_BYTES: usize = 32;
const RECORD_BYTES_MAX: usize = 16;

/// A heap data area of loom cells: loom checks that every byte's write happens before its read.
#[derive(Clone, Debug)]
struct LoomBytes(Arc<Vec<UnsafeCell<u8>>>);

impl LoomBytes {
    fn new() -> LoomBytes {
        LoomBytes(Arc::new(
            (0..CAPACITY_BYTES).map(|_| UnsafeCell::new(0)).collect(),
        ))
    }
}

impl RingBytes for LoomBytes {
    fn capacity_bytes(&self) -> usize {
        self.0.len()
    }

    unsafe fn write(&self, offset: usize, src: &[u8]) {
        for (cell, &byte) in self.0[offset..offset + src.len()].iter().zip(src) {
            // SAFETY: the caller owns the region (unpublished); loom checks that claim.
            cell.with_mut(|ptr| unsafe { *ptr = byte });
        }
    }

    unsafe fn read(&self, offset: usize, dst: &mut [u8]) {
        for (byte, cell) in dst.iter_mut().zip(&self.0[offset..]) {
            // SAFETY: the caller reads only published bytes; loom checks that claim.
            *byte = cell.with(|ptr| unsafe { *ptr });
        }
    }

    unsafe fn read_u32(&self, offset: usize) -> u32 {
        let mut word = [0u8; 4];
        // SAFETY: the same contract as ours.
        unsafe { self.read(offset, &mut word) };
        u32::from_le_bytes(word)
    }
}

type Control = Arc<RingControl<AtomicU64>>;

fn ring() -> (Producer<Control, LoomBytes>, Consumer<Control, LoomBytes>) {
    let control: Control = Arc::new(RingControl::new());
    let bytes = LoomBytes::new();
    let producer = Producer::new(Arc::clone(&control), bytes.clone(), RECORD_BYTES_MAX);
    (producer, Consumer::new(control, bytes, RECORD_BYTES_MAX))
}

/// Record `index`: its length word, then `index` repeated.
fn record(index: u8, len: usize) -> Vec<u8> {
    let mut bytes = vec![index; len];
    bytes[..4].copy_from_slice(&(len as u32).to_le_bytes());
    bytes
}

fn model(body: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(body);
}

/// Three records of 8-, 16- and 16-byte slots through a 32-byte ring: the third waits for space
/// and wraps with a marker. The consumer gets them whole and in order, and never reads a byte
/// that is not published (loom would report the race).
#[test]
fn ring_delivers_whole_records_in_order() {
    const LENGTHS: [usize; 3] = [4, 12, 12];
    model(|| {
        let (mut producer, mut consumer) = ring();
        let writer = loom::thread::spawn(move || {
            for (index, &len) in LENGTHS.iter().enumerate() {
                while !producer
                    .try_write(&record(index as u8, len))
                    .expect("valid ring")
                {
                    loom::thread::yield_now();
                }
                producer.publish();
            }
        });
        let mut dst = [0u8; RECORD_BYTES_MAX];
        for (index, &len) in LENGTHS.iter().enumerate() {
            let got = loop {
                consumer.refresh().expect("valid tail");
                if let Some(got) = consumer.pop_into(&mut dst).expect("valid record") {
                    break got;
                }
                loom::thread::yield_now();
            };
            assert_eq!(got, len);
            assert_eq!(dst[..len], record(index as u8, len)[..]);
        }
        writer.join().expect("writer");
    });
}

/// The wake-up protocol: the producer publishes two records and writes a "TCP byte" whenever
/// `publish` says the consumer announced sleep. The consumer drains, announces sleep, and
/// either sees data (no sleep), finds a wake-up byte (wakes), or would sleep. If it would
/// sleep while a record it has not read is published, a wake-up byte must be on its way.
#[test]
fn no_wake_up_is_lost() {
    model(|| {
        let (mut producer, mut consumer) = ring();
        let wake_bytes = Arc::new(AtomicUsize::new(0));
        let wake_bytes_sent = Arc::clone(&wake_bytes);
        let writer = loom::thread::spawn(move || {
            for index in 0..2u8 {
                assert!(producer.try_write(&record(index, 4)).expect("valid ring"));
                if producer.publish() {
                    wake_bytes_sent.fetch_add(1, Ordering::Release);
                }
            }
        });
        let mut dst = [0u8; RECORD_BYTES_MAX];
        let mut received = 0;
        let mut wake_bytes_read = 0;
        let asleep = loop {
            consumer.refresh().expect("valid tail");
            while consumer.pop_into(&mut dst).expect("valid record").is_some() {
                received += 1;
            }
            if received == 2 {
                break false;
            }
            if !consumer.prepare_to_sleep() {
                continue;
            }
            // "epoll": a pending wake-up byte makes the socket readable.
            if wake_bytes.load(Ordering::Acquire) > wake_bytes_read {
                wake_bytes_read += 1;
                consumer.woke_up();
                continue;
            }
            break true;
        };
        writer.join().expect("writer");
        if asleep {
            let pending = wake_bytes.load(Ordering::Acquire) > wake_bytes_read;
            assert!(
                pending,
                "lost wake-up: asleep with {received} of 2 records read, no byte sent"
            );
        }
    });
}
