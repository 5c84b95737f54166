//! Test bodies every transporter must pass, generic over a factory of connected link pairs, so
//! the same bodies run over TCP, shared memory and io_uring (see `tests/conformance_tcp.rs`).
//!
//! Each function panics when the transporter misbehaves: they are test bodies, called from a
//! `#[test]` per transporter. Every wait polls against a deadline ([`WAIT_DEADLINE`]) instead
//! of sleeping, so a broken link fails the test instead of hanging it.
#![forbid(unsafe_code)]

use std::io;
use std::time::{Duration, Instant};

use crate::frame::{self, FrameHeader, FRAME_BYTES_MAX, FRAME_HEADER_BYTES, FRAME_TRAILER_BYTES};
use crate::{FlushStatus, LinkSettings, TransportError, Transporter, RECEIVE_SLICE_BYTES};

/// The longest any conformance test waits for a link to make progress.
pub const WAIT_DEADLINE: Duration = Duration::from_secs(10);

/// The frames the ordering test sends.
pub const ORDERING_FRAME_COUNT: usize = 10_000;

/// The most bytes the back-pressure test offers before it gives up waiting for Overloaded.
pub const BACK_PRESSURE_BYTES_MAX: usize = 256 * 1024 * 1024;

/// Writes raw bytes into a link's input, bypassing the frame encoder (for bad-frame tests).
pub type RawWriter = Box<dyn FnMut(&[u8]) -> io::Result<()> + Send>;

/// Makes connected pairs of one kind of link.
pub trait LinkPair {
    /// Two connected links with `settings`: what `a` sends, `b` receives and the other way
    /// round. `a.peer()` is `b`'s node and `b.peer()` is `a`'s node; the two differ.
    fn make(settings: LinkSettings) -> (Box<dyn Transporter>, Box<dyn Transporter>);

    /// A link with `settings` and a writer whose bytes that link receives as if its peer had
    /// sent them. `None` when the transporter cannot inject bytes; bad-frame tests then pass
    /// without checking anything.
    fn make_raw(_settings: LinkSettings) -> Option<(Box<dyn Transporter>, RawWriter)> {
        None
    }
}

/// 10 000 frames of varied sizes arrive complete and in the order sent, with and without
/// checksums.
pub fn ordering<P: LinkPair>() {
    for checksum in [false, true] {
        let (mut a, mut b) = P::make(LinkSettings {
            checksum,
            ..LinkSettings::default()
        });
        transfer(a.as_mut(), b.as_mut(), ORDERING_FRAME_COUNT, |index| {
            index % 300
        });
        // And the other direction over the same pair.
        transfer(b.as_mut(), a.as_mut(), ORDERING_FRAME_COUNT / 10, |index| {
            index % 50
        });
    }
}

/// Many sends and one flush: the send buffer accounts for every byte, and the receiver gets
/// every frame.
pub fn batches<P: LinkPair>() {
    let (mut a, mut b) = P::make(LinkSettings {
        checksum: true,
        ..LinkSettings::default()
    });
    let frame_count = 100;
    let mut expected_bytes = 0;
    for index in 0..frame_count {
        let payload = payload_for(index, 20 + index);
        a.send(&header_for(index), &payload)
            .expect("a batch of 100 small frames fits");
        expected_bytes += frame::encoded_len(payload.len(), true);
        assert_eq!(
            a.pending_send_bytes(),
            expected_bytes,
            "pending bytes after send {index}"
        );
    }
    match a.flush().expect("flush a batch") {
        FlushStatus::Done => assert_eq!(a.pending_send_bytes(), 0, "Done means nothing pending"),
        FlushStatus::Pending => assert!(a.pending_send_bytes() > 0, "Pending means bytes remain"),
    }
    let mut received = 0;
    wait_until("the batch arrives", || {
        flush(a.as_mut());
        received += receive_checked(b.as_mut(), received, |index| 20 + index);
        received == frame_count
    });
    assert_eq!(a.pending_send_bytes(), 0);
}

/// Frames of the largest size pass in both checksum modes; one byte more is refused with
/// FrameTooLarge and leaves the send buffer unchanged.
pub fn large_frames<P: LinkPair>() {
    for checksum in [false, true] {
        let (mut a, mut b) = P::make(LinkSettings {
            checksum,
            ..LinkSettings::default()
        });
        let trailer_bytes = if checksum { FRAME_TRAILER_BYTES } else { 0 };
        let payload_bytes_max = FRAME_BYTES_MAX - FRAME_HEADER_BYTES - trailer_bytes;
        let frame_count = 100;
        transfer(a.as_mut(), b.as_mut(), frame_count, |index| {
            payload_bytes_max - index % 3
        });
        a.send(&header_for(frame_count), &payload_for(frame_count, 1))
            .expect("a small frame");
        let pending_bytes = a.pending_send_bytes();
        let too_large = vec![0u8; payload_bytes_max + 1];
        let err = a
            .send(&header_for(0), &too_large)
            .expect_err("over the frame limit");
        assert!(
            matches!(err, TransportError::FrameTooLarge { .. }),
            "got {err:?}"
        );
        assert_eq!(
            a.pending_send_bytes(),
            pending_bytes,
            "a refused frame changes nothing"
        );
        let mut received = 0;
        wait_until("the frame after the refused one arrives", || {
            flush(a.as_mut());
            received += receive_checked(b.as_mut(), frame_count + received, |_| 1);
            received == 1
        });
    }
}

/// A sender whose peer does not read fills its send buffer and gets Overloaded (NDB 1218)
/// without the buffer changing; once the peer drains, sending works again.
pub fn back_pressure<P: LinkPair>() {
    let settings = LinkSettings {
        checksum: false,
        send_buffer_bytes_max: 256 * 1024,
        overload_limit_bytes: 128 * 1024,
        receive_buffer_bytes: 256 * 1024,
    };
    let (mut a, mut b) = P::make(settings);
    let payload_bytes = 1000;
    let mut sent = 0;
    loop {
        assert!(
            sent * payload_bytes < BACK_PRESSURE_BYTES_MAX,
            "never overloaded"
        );
        match a.send(&header_for(sent), &payload_for(sent, payload_bytes)) {
            Ok(()) => sent += 1,
            Err(TransportError::Overloaded {
                pending_bytes,
                limit_bytes,
                ..
            }) => {
                assert_eq!(pending_bytes, a.pending_send_bytes());
                assert!(pending_bytes <= limit_bytes);
                assert!(limit_bytes <= settings.send_limit_bytes());
                break;
            }
            Err(e) => panic!("send {sent}: {e}"),
        }
        a.flush().expect("flush while the peer does not read");
    }
    let pending_bytes = a.pending_send_bytes();
    let again = a.send(&header_for(sent), &payload_for(sent, payload_bytes));
    assert!(
        matches!(again, Err(TransportError::Overloaded { .. })),
        "still full: {again:?}"
    );
    assert_eq!(
        a.pending_send_bytes(),
        pending_bytes,
        "Overloaded leaves the buffer unchanged"
    );
    let mut received = 0;
    wait_until("the peer drains the sender", || {
        flush(a.as_mut());
        received += receive_checked(b.as_mut(), received, |_| payload_bytes);
        received == sent && a.pending_send_bytes() == 0
    });
    a.send(&header_for(sent), &payload_for(sent, payload_bytes))
        .expect("room again");
    wait_until("the frame after the drain arrives", || {
        flush(a.as_mut());
        received += receive_checked(b.as_mut(), received, |_| payload_bytes);
        received == sent + 1
    });
}

/// When one end goes away, the other end's `receive` reports Closed within the deadline, after
/// delivering the frames that were sent before.
pub fn peer_death<P: LinkPair>() {
    let (mut a, mut b) = P::make(LinkSettings::default());
    let peer = a.peer();
    for index in 0..10 {
        b.send(&header_for(index), &payload_for(index, 8))
            .expect("send before dying");
    }
    wait_until("the last frames leave", || {
        b.flush().expect("flush before dying") == FlushStatus::Done
    });
    drop(b);
    let mut received = 0;
    let mut closed = false;
    wait_until("the survivor sees Closed", || {
        let mut on_frame = |header: &FrameHeader, payload: &[u8]| {
            check_frame(received, header, payload, 8);
            received += 1;
        };
        match a.receive(&mut on_frame) {
            Ok(_) => false,
            Err(TransportError::Closed { peer: closed_peer }) => {
                assert_eq!(closed_peer, peer, "Closed names the peer");
                closed = true;
                true
            }
            Err(e) => panic!("expected Closed, got {e}"),
        }
    });
    assert!(closed);
    assert_eq!(
        received, 10,
        "frames sent before the peer died are delivered"
    );
}

/// Raw bytes that are not a valid frame make `receive` return BadFrame naming the peer, after
/// delivering the valid frames before them. Skipped when the factory cannot inject bytes.
pub fn bad_frames<P: LinkPair>() {
    for case in bad_frame_cases() {
        let settings = LinkSettings {
            checksum: case.checksum,
            ..LinkSettings::default()
        };
        let Some((mut link, mut write_raw)) = P::make_raw(settings) else {
            return;
        };
        let mut valid = Vec::new();
        frame::encode_into(
            &mut valid,
            &header_for(0),
            &payload_for(0, 5),
            case.checksum,
        )
        .expect("encode the valid frame");
        write_raw(&valid).expect("inject a valid frame");
        write_raw(&case.bytes).expect("inject garbage");
        let mut received = 0;
        let mut reason = None;
        wait_until(case.name, || {
            let mut on_frame = |header: &FrameHeader, payload: &[u8]| {
                check_frame(received, header, payload, 5);
                received += 1;
            };
            match link.receive(&mut on_frame) {
                Ok(_) => false,
                Err(TransportError::BadFrame { peer, reason: why }) => {
                    assert_eq!(peer, link.peer(), "{}: BadFrame names the peer", case.name);
                    reason = Some(why);
                    true
                }
                Err(e) => panic!("{}: expected BadFrame, got {e}", case.name),
            }
        });
        let reason = reason.unwrap_or_default();
        assert!(
            reason.contains(case.reason),
            "{}: reason {reason:?}",
            case.name
        );
        assert_eq!(
            received, 1,
            "{}: the valid frame before the garbage arrives",
            case.name
        );
    }
}

/// A receiving link limited to [`RECEIVE_SLICE_BYTES`] per call (`limit_receive`) takes a
/// backlog of about 80 KiB in several calls: the first stops short of the whole, says more
/// input is pending, and the rest follows whole and in order.
pub fn limited_receive<P: LinkPair>() {
    const FRAMES: usize = 200;
    const PAYLOAD_BYTES: usize = 400;
    let (mut a, mut b) = P::make(LinkSettings::default());
    b.limit_receive(RECEIVE_SLICE_BYTES);
    for index in 0..FRAMES {
        a.send(&header_for(index), &payload_for(index, PAYLOAD_BYTES))
            .unwrap_or_else(|e| panic!("send frame {index}: {e}"));
    }
    flush(&mut *a);
    let mut received = 0;
    wait_until("the first frames arrive", || {
        received += receive_checked(&mut *b, received, |_| PAYLOAD_BYTES);
        received > 0
    });
    let frame_bytes = b.encoded_frame_bytes(PAYLOAD_BYTES);
    assert!(
        received * frame_bytes <= RECEIVE_SLICE_BYTES + frame_bytes,
        "one receive took {received} frames of {frame_bytes} bytes"
    );
    assert!(b.input_pending(), "the rest is reported pending");
    wait_until("every frame arrives", || {
        received += receive_checked(&mut *b, received, |_| PAYLOAD_BYTES);
        received == FRAMES
    });
}

/// Every conformance test, one after the other.
pub fn run_all<P: LinkPair>() {
    ordering::<P>();
    batches::<P>();
    large_frames::<P>();
    back_pressure::<P>();
    peer_death::<P>();
    bad_frames::<P>();
    limited_receive::<P>();
}

/// Sends `frame_count` frames from `a` to `b`, frame `i` with `payload_bytes(i)` bytes, flushing
/// and receiving as it goes, and checks each arrives whole and in order.
fn transfer(
    a: &mut dyn Transporter,
    b: &mut dyn Transporter,
    frame_count: usize,
    payload_bytes: impl Fn(usize) -> usize,
) {
    let mut next = 0;
    let mut received = 0;
    wait_until("every frame arrives", || {
        while next < frame_count {
            match a.send(&header_for(next), &payload_for(next, payload_bytes(next))) {
                Ok(()) => next += 1,
                Err(TransportError::Overloaded { .. }) => break,
                Err(e) => panic!("send frame {next}: {e}"),
            }
        }
        flush(a);
        received += receive_checked(b, received, &payload_bytes);
        received == frame_count
    });
    assert_eq!(
        a.pending_send_bytes(),
        0,
        "everything received means nothing pending"
    );
}

/// One `receive` on `link`, expecting frames numbered from `first_index`; returns how many came.
fn receive_checked(
    link: &mut dyn Transporter,
    first_index: usize,
    payload_bytes: impl Fn(usize) -> usize,
) -> usize {
    let mut index = first_index;
    let mut on_frame = |header: &FrameHeader, payload: &[u8]| {
        check_frame(index, header, payload, payload_bytes(index));
        index += 1;
    };
    let delivered = link
        .receive(&mut on_frame)
        .unwrap_or_else(|e| panic!("receive: {e}"));
    assert_eq!(
        delivered,
        index - first_index,
        "receive counts what it delivered"
    );
    delivered
}

fn flush(link: &mut dyn Transporter) {
    if let Err(e) = link.flush() {
        panic!("flush to node {}: {e}", link.peer());
    }
}

/// Polls `condition` until it holds, failing the test after [`WAIT_DEADLINE`].
fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT_DEADLINE;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "timed out after {WAIT_DEADLINE:?} waiting until {what}"
        );
        std::thread::yield_now();
    }
}

/// The header of test frame `index`; every field varies so a swap or a shift shows.
fn header_for(index: usize) -> FrameHeader {
    FrameHeader {
        signal: (index % 0xFFF0) as u16,
        receiver_block: (index % 251) as u16,
        sender_block: (index % 13) as u16,
        request_id: index as u32,
    }
}

fn payload_byte(index: usize, offset: usize) -> u8 {
    (index.wrapping_mul(31).wrapping_add(offset) % 251) as u8
}

/// The payload of test frame `index`: a pattern that differs from frame to frame.
fn payload_for(index: usize, payload_bytes: usize) -> Vec<u8> {
    (0..payload_bytes)
        .map(|offset| payload_byte(index, offset))
        .collect()
}

fn check_frame(index: usize, header: &FrameHeader, payload: &[u8], payload_bytes: usize) {
    assert_eq!(
        *header,
        header_for(index),
        "frame {index}: wrong header (lost or reordered?)"
    );
    assert_eq!(
        payload.len(),
        payload_bytes,
        "frame {index}: payload length"
    );
    let intact = payload
        .iter()
        .enumerate()
        .all(|(offset, &b)| b == payload_byte(index, offset));
    assert!(intact, "frame {index}: payload corrupted");
}

/// One kind of garbage, the link setting it is sent on, and a phrase the reason must contain.
struct BadFrameCase {
    name: &'static str,
    checksum: bool,
    bytes: Vec<u8>,
    reason: &'static str,
}

/// A frame header with a chosen length field and flags, and zeros after it.
fn raw_frame(length_bytes: u32, flags: u16, total_bytes: usize) -> Vec<u8> {
    let mut bytes = length_bytes.to_le_bytes().to_vec();
    bytes.extend_from_slice(&7u16.to_le_bytes());
    bytes.extend_from_slice(&flags.to_le_bytes());
    bytes.resize(total_bytes.max(bytes.len()), 0);
    bytes
}

fn bad_frame_cases() -> Vec<BadFrameCase> {
    let encoded = |checksum: bool| {
        let mut bytes = Vec::new();
        frame::encode_into(&mut bytes, &header_for(1), b"garbage?", checksum).expect("encode");
        bytes
    };
    let mut corrupted = encoded(true);
    corrupted[FRAME_HEADER_BYTES + 3] ^= 0x01;
    let case = |name, checksum, bytes, reason| BadFrameCase {
        name,
        checksum,
        bytes,
        reason,
    };
    vec![
        case(
            "length below the header",
            false,
            raw_frame(8, 0, 16),
            "below the minimum",
        ),
        case(
            "length above the limit, header only",
            false,
            ((FRAME_BYTES_MAX + 1) as u32).to_le_bytes().to_vec(),
            "exceeds the limit",
        ),
        case(
            "length u32::MAX",
            true,
            u32::MAX.to_le_bytes().to_vec(),
            "exceeds the limit",
        ),
        case(
            "unknown flag bits",
            false,
            raw_frame(16, 0x0004, 16),
            "unknown flag bits",
        ),
        case(
            "checksum flag on a plain link",
            false,
            encoded(true),
            "checksum flag",
        ),
        case(
            "no checksum flag on a checksum link",
            true,
            encoded(false),
            "checksum flag",
        ),
        case("CRC mismatch", true, corrupted, "CRC-32 mismatch"),
    ]
}
