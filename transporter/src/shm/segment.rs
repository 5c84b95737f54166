//! The shared-memory segment: a file in `/dev/shm`, its `#[repr(C)]` header, creation,
//! validated attachment, and the views the rings use. The layout is drawn in `shm.rs`.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use memmap2::{MmapMut, MmapOptions};

use super::ring::{RingBytes, RingControl, RECORD_ALIGN_BYTES};
use super::{
    SHM_DIR, SHM_HEADER_BYTES, SHM_LAYOUT_VERSION, SHM_MAGIC, SHM_NAME_PREFIX, SHM_RING_BYTES_MAX,
    SHM_RING_BYTES_MIN, SHM_SEGMENT_BYTES_MAX, SHM_SEGMENT_BYTES_MIN,
};
use crate::{NodeId, TransportError};

/// Byte offset of the server→client ring's control block (ring 0).
pub(crate) const RING0_CONTROL_OFFSET: usize = 128;
/// Byte offset of the client→server ring's control block (ring 1).
pub(crate) const RING1_CONTROL_OFFSET: usize = RING0_CONTROL_OFFSET + RING_CONTROL_BYTES;
/// Bytes of one ring control block: three cache lines.
pub(crate) const RING_CONTROL_BYTES: usize = std::mem::size_of::<RingControl<AtomicU64>>();
/// Header flag bit: frames carry a CRC-32 trailer (the link's Checksum=1).
pub(crate) const HEADER_FLAG_CHECKSUM: u32 = 1;

const _: () = assert!(std::mem::size_of::<SegmentHeader>() == RING0_CONTROL_OFFSET);
const _: () = assert!(RING_CONTROL_BYTES == 3 * 64);
const _: () = assert!(RING1_CONTROL_OFFSET + RING_CONTROL_BYTES <= SHM_HEADER_BYTES);

/// Where one ring lives in the segment. Byte offsets from the segment start.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RingDescriptor {
    pub(crate) control_offset: u64,
    pub(crate) data_offset: u64,
    pub(crate) capacity_bytes: u64,
}

/// The first 128 bytes of a segment, written once by the creator before the peer learns the
/// path, never changed afterwards. Integers in native byte order (little-endian on x86-64): both
/// processes run on the same machine.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SegmentHeader {
    pub(crate) magic: u64,
    pub(crate) layout_version: u32,
    pub(crate) header_bytes: u32,
    pub(crate) segment_bytes: u64,
    pub(crate) creator_pid: u32,
    pub(crate) flags: u32,
    pub(crate) cluster_id: u64,
    pub(crate) server_node: u16,
    pub(crate) client_node: u16,
    pub(crate) reserved0: u32,
    /// Ring 0 carries server→client frames, ring 1 client→server.
    pub(crate) rings: [RingDescriptor; 2],
    pub(crate) reserved1: [u64; 4],
}

/// What the creator puts in a new segment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SegmentSpec {
    pub(crate) cluster_id: u64,
    pub(crate) server_node: NodeId,
    pub(crate) client_node: NodeId,
    pub(crate) segment_bytes: u64,
    pub(crate) checksum: bool,
}

/// A mapped segment. Dropping the last reference unmaps it; the creator's copy also unlinks the
/// file if that has not happened yet.
#[derive(Debug)]
pub(crate) struct Segment {
    /// The start of the mapping (page-aligned), valid for `segment_bytes` while `map` lives.
    base: NonNull<u8>,
    segment_bytes: usize,
    header: SegmentHeader,
    path: PathBuf,
    /// True for the creator until it unlinked the file.
    owns_file: bool,
    /// Keeps the mapping alive; unmapped when the segment is dropped.
    _map: MmapMut,
}

// SAFETY: `base` points into `map`, which the segment owns and which stays mapped until the
// segment is dropped; the mapping is shared memory, and every concurrent access through it goes
// through atomics or through the ring protocol, which gives each byte one writer at a time.
unsafe impl Send for Segment {}
// SAFETY: as above; `&Segment` only hands out views whose accesses follow the ring protocol.
unsafe impl Sync for Segment {}

impl Segment {
    /// Creates, sizes, maps and initialises a new segment file in [`SHM_DIR`].
    pub(crate) fn create(spec: &SegmentSpec) -> Result<Segment, TransportError> {
        let header = header_for(spec).map_err(TransportError::Handshake)?;
        let (path, file) = create_file(spec)?;
        let mut segment = Segment::map_file(&file, path, spec.segment_bytes, header, true)?;
        // SAFETY: the mapping is at least `SHM_HEADER_BYTES` long and page-aligned, so the
        // header fits and is aligned; no one else has the path yet, so no one reads it.
        unsafe {
            segment
                .base
                .cast::<SegmentHeader>()
                .as_ptr()
                .write_volatile(header)
        };
        segment.header = header;
        Ok(segment)
    }

    /// Maps an existing segment file and validates its header. `offered_bytes` is the size the
    /// creator announced; the file must have exactly that size.
    pub(crate) fn attach(path: &Path, offered_bytes: u64) -> Result<Segment, TransportError> {
        check_segment_path(path).map_err(TransportError::Handshake)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| TransportError::io(format!("open SHM segment {}", path.display()), e))?;
        let file_bytes = file
            .metadata()
            .map_err(|e| TransportError::io(format!("stat SHM segment {}", path.display()), e))?
            .len();
        if file_bytes != offered_bytes
            || !(SHM_SEGMENT_BYTES_MIN..=SHM_SEGMENT_BYTES_MAX).contains(&file_bytes)
        {
            return Err(TransportError::Handshake(format!(
                "SHM segment {} has {file_bytes} bytes, offered {offered_bytes}, allowed \
                 {SHM_SEGMENT_BYTES_MIN}..={SHM_SEGMENT_BYTES_MAX}",
                path.display()
            )));
        }
        let segment = Segment::map_file(
            &file,
            path.to_owned(),
            file_bytes,
            SegmentHeader::default(),
            false,
        )?;
        // SAFETY: the mapping has `file_bytes >= SHM_SEGMENT_BYTES_MIN > size_of::<SegmentHeader>()`
        // bytes and is page-aligned; every bit pattern is a valid header (plain integers).
        let header = unsafe {
            segment
                .base
                .cast::<SegmentHeader>()
                .as_ptr()
                .read_volatile()
        };
        validate_header(&header, file_bytes).map_err(|reason| {
            TransportError::Handshake(format!("SHM segment {}: {reason}", path.display()))
        })?;
        let mut segment = segment;
        segment.header = header;
        Ok(segment)
    }

    fn map_file(
        file: &File,
        path: PathBuf,
        segment_bytes: u64,
        header: SegmentHeader,
        owns_file: bool,
    ) -> Result<Segment, TransportError> {
        let map_error = |e| TransportError::io(format!("map SHM segment {}", path.display()), e);
        // SAFETY: memmap2 requires that the file is not truncated or changed behind the mapping's
        // back in ways Rust cannot see. The file lives in /dev/shm with mode 0600, is used only
        // by the two processes of this link, and is never truncated after `set_len`; every
        // concurrent access to the mapped bytes follows the ring protocol.
        //
        // Populated (MAP_POPULATE): every page is allocated and mapped now, at connect time,
        // rather than faulted in by the first frame to reach it. A fault costs microseconds,
        // and a page of ring holds a few dozen small frames, so the first lap around each ring
        // would otherwise pay one in every few dozen round trips (more on both sides).
        let mut map = unsafe { MmapOptions::new().populate().map_mut(file) }.map_err(map_error)?;
        let mapped_bytes = map.len();
        if mapped_bytes as u64 != segment_bytes {
            return Err(TransportError::Handshake(format!(
                "SHM segment {} mapped {mapped_bytes} bytes, expected {segment_bytes}",
                path.display()
            )));
        }
        let base = NonNull::new(map.as_mut_ptr())
            .ok_or_else(|| TransportError::Handshake("SHM mapping at address 0".into()))?;
        assert_eq!(
            base.as_ptr() as usize % 4096,
            0,
            "a mapping is page-aligned"
        );
        Ok(Segment {
            base,
            segment_bytes: mapped_bytes,
            header,
            path,
            owns_file,
            _map: map,
        })
    }

    /// The validated header.
    pub(crate) fn header(&self) -> &SegmentHeader {
        &self.header
    }

    /// The file's path (it may already be unlinked).
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the file from /dev/shm. The mappings stay valid in both processes.
    pub(crate) fn unlink(&mut self) -> Result<(), TransportError> {
        if !self.owns_file {
            return Ok(());
        }
        self.owns_file = false;
        fs::remove_file(&self.path).map_err(|e| {
            TransportError::io(format!("unlink SHM segment {}", self.path.display()), e)
        })
    }

    /// The control block and data area of ring `index` (0 or 1) as views sharing `segment`.
    pub(crate) fn ring(segment: &Arc<Segment>, index: usize) -> (MappedControl, MappedBytes) {
        let descriptor = segment.header.rings[index];
        let control = MappedControl::new(Arc::clone(segment), descriptor.control_offset as usize);
        let bytes = MappedBytes::new(
            Arc::clone(segment),
            descriptor.data_offset as usize,
            descriptor.capacity_bytes as usize,
        );
        (control, bytes)
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if self.owns_file {
            // The creator failed before the peer attached: leave no file behind.
            let _ = fs::remove_file(&self.path);
        }
        // `_map` is dropped after this, which unmaps the segment.
    }
}

/// The layout of a new segment of `spec.segment_bytes`: two rings of the largest power of two
/// that fits twice after the header.
fn header_for(spec: &SegmentSpec) -> Result<SegmentHeader, String> {
    if !(SHM_SEGMENT_BYTES_MIN..=SHM_SEGMENT_BYTES_MAX).contains(&spec.segment_bytes) {
        return Err(format!(
            "ShmSize {} is outside {SHM_SEGMENT_BYTES_MIN}..={SHM_SEGMENT_BYTES_MAX} bytes",
            spec.segment_bytes
        ));
    }
    let ring_room_bytes = (spec.segment_bytes - SHM_HEADER_BYTES as u64) / 2;
    let capacity_bytes = (1u64 << ring_room_bytes.ilog2()).min(SHM_RING_BYTES_MAX as u64);
    let data0_offset = SHM_HEADER_BYTES as u64;
    Ok(SegmentHeader {
        magic: SHM_MAGIC,
        layout_version: SHM_LAYOUT_VERSION,
        header_bytes: SHM_HEADER_BYTES as u32,
        segment_bytes: spec.segment_bytes,
        creator_pid: std::process::id(),
        flags: if spec.checksum {
            HEADER_FLAG_CHECKSUM
        } else {
            0
        },
        cluster_id: spec.cluster_id,
        server_node: spec.server_node.0,
        client_node: spec.client_node.0,
        reserved0: 0,
        rings: [
            RingDescriptor {
                control_offset: RING0_CONTROL_OFFSET as u64,
                data_offset: data0_offset,
                capacity_bytes,
            },
            RingDescriptor {
                control_offset: RING1_CONTROL_OFFSET as u64,
                data_offset: data0_offset + capacity_bytes,
                capacity_bytes,
            },
        ],
        reserved1: [0; 4],
    })
}

/// Checks everything the header claims against the file, so no later access can go out of
/// bounds: magic, version, sizes, and each ring's placement.
pub(crate) fn validate_header(header: &SegmentHeader, file_bytes: u64) -> Result<(), String> {
    if header.magic != SHM_MAGIC {
        return Err(format!("bad magic {:#018x}", header.magic));
    }
    if header.layout_version != SHM_LAYOUT_VERSION {
        return Err(format!(
            "layout version {} (this build speaks {SHM_LAYOUT_VERSION})",
            header.layout_version
        ));
    }
    if header.header_bytes as usize != SHM_HEADER_BYTES || header.segment_bytes != file_bytes {
        return Err(format!(
            "header says {} header bytes and {} segment bytes; expected {SHM_HEADER_BYTES} and {file_bytes}",
            header.header_bytes, header.segment_bytes
        ));
    }
    if header.flags & !HEADER_FLAG_CHECKSUM != 0 {
        return Err(format!("unknown header flags {:#x}", header.flags));
    }
    let expected_controls = [RING0_CONTROL_OFFSET as u64, RING1_CONTROL_OFFSET as u64];
    for (index, ring) in header.rings.iter().enumerate() {
        validate_ring(ring, expected_controls[index], file_bytes)
            .map_err(|reason| format!("ring {index}: {reason}"))?;
    }
    let [ring0, ring1] = header.rings;
    let disjoint = ring0.data_offset + ring0.capacity_bytes <= ring1.data_offset
        || ring1.data_offset + ring1.capacity_bytes <= ring0.data_offset;
    if !disjoint {
        return Err("the two rings' data areas overlap".into());
    }
    Ok(())
}

fn validate_ring(
    ring: &RingDescriptor,
    control_offset: u64,
    file_bytes: u64,
) -> Result<(), String> {
    if ring.control_offset != control_offset {
        return Err(format!(
            "control block at {}, expected {control_offset}",
            ring.control_offset
        ));
    }
    let capacity_ok = ring.capacity_bytes.is_power_of_two()
        && (SHM_RING_BYTES_MIN as u64..=SHM_RING_BYTES_MAX as u64).contains(&ring.capacity_bytes);
    if !capacity_ok {
        return Err(format!(
            "capacity {} is not a power of two in range",
            ring.capacity_bytes
        ));
    }
    let end = ring.data_offset.checked_add(ring.capacity_bytes);
    let placed_ok = ring.data_offset >= SHM_HEADER_BYTES as u64
        && ring.data_offset & 63 == 0
        && end.is_some_and(|end| end <= file_bytes);
    if !placed_ok {
        return Err(format!(
            "data area [{}, +{}) does not fit in {file_bytes} bytes after the header",
            ring.data_offset, ring.capacity_bytes
        ));
    }
    Ok(())
}

/// Creates the segment file with a fresh name (`create_new`, mode 0600) and sizes it.
fn create_file(spec: &SegmentSpec) -> Result<(PathBuf, File), TransportError> {
    static NONCE: AtomicU32 = AtomicU32::new(0);
    let clock_nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    for _attempt in 0..8 {
        let nonce = clock_nanos ^ NONCE.fetch_add(0x9E37_79B9, Ordering::Relaxed);
        let path = Path::new(SHM_DIR).join(segment_name(spec, std::process::id(), nonce));
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(file) => {
                if let Err(e) = file.set_len(spec.segment_bytes) {
                    let _ = fs::remove_file(&path);
                    return Err(TransportError::io(
                        format!("size SHM segment {}", path.display()),
                        e,
                    ));
                }
                return Ok((path, file));
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(TransportError::io(
                    format!("create SHM segment {}", path.display()),
                    e,
                ))
            }
        }
    }
    Err(TransportError::Handshake(
        "create SHM segment: no free name after 8 attempts".into(),
    ))
}

/// `rndb-<cluster_id, 16 hex digits>-<server node>-<client node>-<creator pid>-<nonce, 8 hex>`.
pub(crate) fn segment_name(spec: &SegmentSpec, pid: u32, nonce: u32) -> String {
    format!(
        "{SHM_NAME_PREFIX}{:016x}-{}-{}-{pid}-{nonce:08x}",
        spec.cluster_id, spec.server_node.0, spec.client_node.0
    )
}

/// A peer-supplied path must name a file directly in /dev/shm with one of our names.
fn check_segment_path(path: &Path) -> Result<(), String> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let name_ok = name.starts_with(SHM_NAME_PREFIX)
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b == b'-');
    if path.parent() != Some(Path::new(SHM_DIR)) || !name_ok {
        return Err(format!("refusing SHM segment path {}", path.display()));
    }
    Ok(())
}

/// Removes `/dev/shm/rndb-<cluster_id>-*` files whose creator process no longer exists (left by
/// a crashed earlier run). Returns how many were removed. A segment whose creator lives is kept.
pub(crate) fn clean_stale_segments(cluster_id: u64) -> usize {
    let prefix = format!("{SHM_NAME_PREFIX}{cluster_id:016x}-");
    let Ok(entries) = fs::read_dir(SHM_DIR) else {
        return 0;
    };
    let mut removed_count = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
            continue;
        };
        // rest = "<server>-<client>-<pid>-<nonce>"
        let Some(pid) = rest.split('-').nth(2).and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        let alive = Path::new("/proc").join(pid.to_string()).exists();
        if !alive && fs::remove_file(entry.path()).is_ok() {
            tracing::info!(path = %entry.path().display(), pid, "removed stale SHM segment");
            removed_count += 1;
        }
    }
    removed_count
}

/// A ring's control block inside a segment.
#[derive(Clone, Debug)]
pub(crate) struct MappedControl {
    segment: Arc<Segment>,
    offset: usize,
}

impl MappedControl {
    fn new(segment: Arc<Segment>, offset: usize) -> MappedControl {
        assert!(offset & 63 == 0 && offset + RING_CONTROL_BYTES <= SHM_HEADER_BYTES);
        assert!(offset + RING_CONTROL_BYTES <= segment.segment_bytes);
        MappedControl { segment, offset }
    }
}

impl std::ops::Deref for MappedControl {
    type Target = RingControl<AtomicU64>;

    fn deref(&self) -> &RingControl<AtomicU64> {
        // SAFETY: `new` checked that the block lies inside the mapping and is 64-byte aligned
        // (the mapping is page-aligned); `AtomicU64` has the layout of `u64`, every bit pattern
        // is valid, and the block is only ever accessed atomically. The mapping lives as long as
        // `self.segment`, which outlives the returned reference.
        unsafe {
            &*self
                .segment
                .base
                .as_ptr()
                .add(self.offset)
                .cast::<RingControl<AtomicU64>>()
        }
    }
}

/// A ring's data area inside a segment.
#[derive(Clone, Debug)]
pub(crate) struct MappedBytes {
    segment: Arc<Segment>,
    offset: usize,
    capacity_bytes: usize,
}

impl MappedBytes {
    fn new(segment: Arc<Segment>, offset: usize, capacity_bytes: usize) -> MappedBytes {
        assert!(offset & (RECORD_ALIGN_BYTES - 1) == 0 && offset >= SHM_HEADER_BYTES);
        assert!(offset
            .checked_add(capacity_bytes)
            .is_some_and(|end| end <= segment.segment_bytes));
        MappedBytes {
            segment,
            offset,
            capacity_bytes,
        }
    }

    /// A pointer to `len` bytes at `offset` in the data area, after checking the bounds.
    fn at(&self, offset: usize, len: usize) -> *mut u8 {
        assert!(offset <= self.capacity_bytes && len <= self.capacity_bytes - offset);
        // SAFETY: `offset + len <= capacity_bytes` and the data area lies inside the mapping
        // (checked in `new`), so the result stays within the mapping.
        unsafe { self.segment.base.as_ptr().add(self.offset + offset) }
    }

    /// The length word at `offset` as an atomic, so a racing (broken) peer cannot make the read
    /// a data race.
    fn word_at(&self, offset: usize) -> &AtomicU32 {
        let ptr = self.at(offset, 4);
        assert_eq!(ptr as usize % 4, 0, "length words are 4-byte aligned");
        // SAFETY: `ptr` is in bounds for four bytes and 4-byte aligned; `AtomicU32` has the layout
        // of `u32` and accepts every bit pattern; the mapping outlives `&self`.
        unsafe { &*ptr.cast::<AtomicU32>() }
    }

    /// Overwrites the length word at `offset` (fault injection in tests).
    pub(crate) fn store_word(&self, offset: usize, value: u32) {
        self.word_at(offset).store(value.to_le(), Ordering::Release);
    }
}

impl RingBytes for MappedBytes {
    fn capacity_bytes(&self) -> usize {
        self.capacity_bytes
    }

    unsafe fn write(&self, offset: usize, src: &[u8]) {
        let dst = self.at(offset, src.len());
        // SAFETY: `dst` is in bounds for `src.len()` bytes (checked by `at`); the caller
        // guarantees the region is ours alone; `src` is local memory, so they do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
    }

    unsafe fn read(&self, offset: usize, dst: &mut [u8]) {
        let src = self.at(offset, dst.len());
        // SAFETY: `src` is in bounds for `dst.len()` bytes (checked by `at`); the caller
        // guarantees the producer does not write the region now; `dst` is local memory.
        unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
    }

    unsafe fn read_u32(&self, offset: usize) -> u32 {
        u32::from_le(self.word_at(offset).load(Ordering::Relaxed))
    }

    fn prefetch(&self, offset: usize) {
        let ptr = self.at(offset, 0);
        // SAFETY: a prefetch is a hint that never faults and reads nothing the program sees;
        // `ptr` lies inside the mapping anyway (checked by `at`).
        #[cfg(target_arch = "x86_64")]
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(ptr.cast());
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                ptr.wrapping_add(64).cast(),
            );
        }
    }
}
