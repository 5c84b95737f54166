//! The wire frame. Every transporter carries the same frames; the byte layout is drawn in
//! ARCHITECTURE.md ("Frame").
//!
//! ```text
//! offset  size  field (all little-endian)
//!  0      4     length: bytes of the whole frame, header + payload + trailer
//!  4      2     signal number (which message this is; opaque to the transporter)
//!  6      2     flags: bit 0 = CRC-32 trailer present; all other bits zero
//!  8      2     receiver block
//! 10      2     sender block
//! 12      4     request id (correlates a reply with its request; opaque here)
//! 16      n     payload
//! 16+n    4     CRC-32 (crc32fast) of bytes [0, 16+n), only when flag bit 0 is set
//! ```
//!
//! [`encode_into`] appends a frame to a send buffer, [`encode_to_slice`] writes one into a ring
//! slot, and [`decode`] validates and splits the frame at the start of a receive buffer.
#![forbid(unsafe_code)]

use crate::TransportError;

/// Bytes in the fixed frame header.
pub const FRAME_HEADER_BYTES: usize = 16;
/// Bytes in the CRC-32 trailer, when present.
pub const FRAME_TRAILER_BYTES: usize = 4;
/// The largest frame, header and trailer included (NDB's limit of 32 KiB per message).
pub const FRAME_BYTES_MAX: usize = 32 * 1024;
/// The largest payload a frame can carry.
pub const FRAME_PAYLOAD_BYTES_MAX: usize =
    FRAME_BYTES_MAX - FRAME_HEADER_BYTES - FRAME_TRAILER_BYTES;
/// Flag bit: a CRC-32 trailer follows the payload.
pub const FLAG_CHECKSUM: u16 = 1;

/// The routing part of a frame header; length and flags belong to the link.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameHeader {
    /// Signal number: which message the payload holds.
    pub signal: u16,
    /// The block (or API object) that receives the signal.
    pub receiver_block: u16,
    /// The block (or API object) that sent it.
    pub sender_block: u16,
    /// Correlates a reply with its request.
    pub request_id: u32,
}

/// Every flag bit this version understands; a frame with any other bit set is rejected.
pub const FLAGS_KNOWN: u16 = FLAG_CHECKSUM;

// A checksummed frame with an empty payload must fit, and the length field must hold any frame.
const _: () = assert!(FRAME_HEADER_BYTES + FRAME_TRAILER_BYTES <= FRAME_BYTES_MAX);
const _: () = assert!(FRAME_BYTES_MAX <= u32::MAX as usize);

/// What [`decode`] found at the start of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// One whole, validated frame; the next frame starts `frame_len` bytes later.
    Frame {
        header: FrameHeader,
        payload: &'a [u8],
        frame_len: usize,
    },
    /// The bytes so far are a valid beginning of a frame; read more and decode again.
    NeedMore,
}

/// Why bytes are not a valid frame. Any of these closes the link that received them.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The length field is smaller than the header (and trailer, when one is announced).
    #[error("frame length {length_bytes} is below the minimum of {min_bytes} bytes")]
    LengthTooSmall {
        length_bytes: usize,
        min_bytes: usize,
    },
    /// The length field is larger than [`FRAME_BYTES_MAX`].
    #[error("frame length {length_bytes} exceeds the limit of {FRAME_BYTES_MAX} bytes")]
    LengthTooLarge { length_bytes: usize },
    /// A flag bit this version does not know is set.
    #[error("unknown flag bits {flags:#06x} in frame header")]
    UnknownFlags { flags: u16 },
    /// The checksum flag disagrees with the link's Checksum setting.
    #[error("checksum flag is {found} but the link has Checksum={expected}")]
    ChecksumFlagMismatch { expected: bool, found: bool },
    /// The CRC-32 trailer does not match the bytes it covers.
    #[error("CRC-32 mismatch: trailer says {trailer:#010x}, bytes give {computed:#010x}")]
    ChecksumMismatch { trailer: u32, computed: u32 },
}

/// Bytes a frame with `payload_len` payload bytes occupies on the wire.
#[inline]
pub fn encoded_len(payload_len: usize, checksum: bool) -> usize {
    FRAME_HEADER_BYTES + payload_len + if checksum { FRAME_TRAILER_BYTES } else { 0 }
}

/// Appends one whole frame to `out`. A frame over [`FRAME_BYTES_MAX`] returns
/// [`TransportError::FrameTooLarge`] and leaves `out` as it was.
#[inline]
pub fn encode_into(
    out: &mut Vec<u8>,
    header: &FrameHeader,
    payload: &[u8],
    checksum: bool,
) -> Result<(), TransportError> {
    let frame_len = checked_len(payload.len(), checksum)?;
    let start = out.len();
    out.reserve(frame_len);
    out.extend_from_slice(&header_bytes(header, frame_len, checksum));
    out.extend_from_slice(payload);
    if checksum {
        let crc = crc32fast::hash(&out[start..]);
        out.extend_from_slice(&crc.to_le_bytes());
    }
    debug_assert_eq!(out.len() - start, frame_len);
    Ok(())
}

/// Writes one whole frame at the start of `out` (a ring slot, say) and returns its length.
/// A frame over [`FRAME_BYTES_MAX`] returns [`TransportError::FrameTooLarge`]; an `out` shorter
/// than the frame returns it too, with `limit` set to `out.len()`. Nothing is written on error.
#[inline]
pub fn encode_to_slice(
    out: &mut [u8],
    header: &FrameHeader,
    payload: &[u8],
    checksum: bool,
) -> Result<usize, TransportError> {
    let frame_len = checked_len(payload.len(), checksum)?;
    if out.len() < frame_len {
        return Err(TransportError::FrameTooLarge {
            bytes: frame_len,
            limit: out.len(),
        });
    }
    let payload_end = FRAME_HEADER_BYTES + payload.len();
    out[..FRAME_HEADER_BYTES].copy_from_slice(&header_bytes(header, frame_len, checksum));
    out[FRAME_HEADER_BYTES..payload_end].copy_from_slice(payload);
    if checksum {
        let crc = crc32fast::hash(&out[..payload_end]);
        out[payload_end..frame_len].copy_from_slice(&crc.to_le_bytes());
    }
    Ok(frame_len)
}

/// Decodes the frame at the start of `buf`, validating it against the link's Checksum setting.
///
/// Every check that the bytes at hand allow is made before asking for more: an announced length
/// out of range, or bad flags, is an error as soon as those header bytes have arrived, so a peer
/// cannot make the receiver wait for a frame that can never be valid.
#[inline]
pub fn decode(buf: &[u8], expect_checksum: bool) -> Result<Decoded<'_>, FrameError> {
    let Some(length_bytes) = read_u32(buf, 0) else {
        return Ok(Decoded::NeedMore);
    };
    let frame_len = length_bytes as usize;
    if frame_len > FRAME_BYTES_MAX {
        return Err(FrameError::LengthTooLarge {
            length_bytes: frame_len,
        });
    }
    if frame_len < FRAME_HEADER_BYTES {
        return Err(FrameError::LengthTooSmall {
            length_bytes: frame_len,
            min_bytes: FRAME_HEADER_BYTES,
        });
    }
    let Some(flags) = read_u16(buf, 6) else {
        return Ok(Decoded::NeedMore);
    };
    check_flags(flags, frame_len, expect_checksum)?;
    if buf.len() < frame_len {
        return Ok(Decoded::NeedMore);
    }
    let payload_end = if expect_checksum {
        frame_len - FRAME_TRAILER_BYTES
    } else {
        frame_len
    };
    if expect_checksum {
        let trailer = read_u32(buf, payload_end).unwrap_or_default();
        let computed = crc32fast::hash(&buf[..payload_end]);
        if trailer != computed {
            return Err(FrameError::ChecksumMismatch { trailer, computed });
        }
    }
    let header = FrameHeader {
        signal: read_u16(buf, 4).unwrap_or_default(),
        receiver_block: read_u16(buf, 8).unwrap_or_default(),
        sender_block: read_u16(buf, 10).unwrap_or_default(),
        request_id: read_u32(buf, 12).unwrap_or_default(),
    };
    Ok(Decoded::Frame {
        header,
        payload: &buf[FRAME_HEADER_BYTES..payload_end],
        frame_len,
    })
}

/// The frame length for a payload, or `FrameTooLarge`.
#[inline]
fn checked_len(payload_len: usize, checksum: bool) -> Result<usize, TransportError> {
    let frame_len = encoded_len(payload_len, checksum);
    if frame_len > FRAME_BYTES_MAX {
        return Err(TransportError::FrameTooLarge {
            bytes: frame_len,
            limit: FRAME_BYTES_MAX,
        });
    }
    Ok(frame_len)
}

/// The 16 header bytes of a frame of `frame_len` bytes (checked by the caller).
#[inline]
fn header_bytes(
    header: &FrameHeader,
    frame_len: usize,
    checksum: bool,
) -> [u8; FRAME_HEADER_BYTES] {
    let flags: u16 = if checksum { FLAG_CHECKSUM } else { 0 };
    let mut bytes = [0u8; FRAME_HEADER_BYTES];
    bytes[0..4].copy_from_slice(&(frame_len as u32).to_le_bytes());
    bytes[4..6].copy_from_slice(&header.signal.to_le_bytes());
    bytes[6..8].copy_from_slice(&flags.to_le_bytes());
    // Each field is read on its own: merged into one 4-byte load, the two blocks could not
    // take their values from the two 2-byte stores that usually just wrote them (a
    // store-forwarding stall on every frame).
    let receiver_block = std::hint::black_box(header.receiver_block);
    bytes[8..10].copy_from_slice(&receiver_block.to_le_bytes());
    bytes[10..12].copy_from_slice(&header.sender_block.to_le_bytes());
    bytes[12..16].copy_from_slice(&header.request_id.to_le_bytes());
    bytes
}

/// Checks the flags word against the link setting and the announced length.
#[inline]
fn check_flags(flags: u16, frame_len: usize, expect_checksum: bool) -> Result<(), FrameError> {
    if flags & !FLAGS_KNOWN != 0 {
        return Err(FrameError::UnknownFlags { flags });
    }
    let found = flags & FLAG_CHECKSUM != 0;
    if found != expect_checksum {
        return Err(FrameError::ChecksumFlagMismatch {
            expected: expect_checksum,
            found,
        });
    }
    let min_bytes = encoded_len(0, expect_checksum);
    if frame_len < min_bytes {
        return Err(FrameError::LengthTooSmall {
            length_bytes: frame_len,
            min_bytes,
        });
    }
    Ok(())
}

fn read_u16(buf: &[u8], offset: usize) -> Option<u16> {
    let bytes = buf.get(offset..offset + 2)?;
    Some(u16::from_le_bytes([bytes[0], bytes[1]]))
}

fn read_u32(buf: &[u8], offset: usize) -> Option<u32> {
    let bytes = buf.get(offset..offset + 4)?;
    Some(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HEADER: FrameHeader = FrameHeader {
        signal: 0x1234,
        receiver_block: 7,
        sender_block: 9,
        request_id: 0xDEAD_BEEF,
    };

    /// Raw frame bytes with a chosen length field and flags, for cases the encoder refuses to make.
    fn raw(length_bytes: u32, flags: u16, rest: &[u8]) -> Vec<u8> {
        let mut bytes = length_bytes.to_le_bytes().to_vec();
        bytes.extend_from_slice(&0x1234u16.to_le_bytes());
        bytes.extend_from_slice(&flags.to_le_bytes());
        bytes.extend_from_slice(rest);
        bytes
    }

    fn encoded(payload: &[u8], checksum: bool) -> Vec<u8> {
        let mut out = Vec::new();
        encode_into(&mut out, &HEADER, payload, checksum).expect("frame fits");
        out
    }

    fn check(input: &[u8], expect_checksum: bool, expected: Result<Decoded<'_>, FrameError>) {
        assert_eq!(
            decode(input, expect_checksum),
            expected,
            "input {input:02x?}"
        );
    }

    fn frame(payload: &[u8], frame_len: usize) -> Result<Decoded<'_>, FrameError> {
        Ok(Decoded::Frame {
            header: HEADER,
            payload,
            frame_len,
        })
    }

    #[test]
    fn whole_frames_decode() {
        check(&encoded(b"", false), false, frame(b"", 16));
        check(&encoded(b"abc", false), false, frame(b"abc", 19));
        check(&encoded(b"", true), true, frame(b"", 20));
        check(&encoded(b"abc", true), true, frame(b"abc", 23));
        // Bytes after the frame belong to the next frame and are left alone.
        let mut two = encoded(b"xy", false);
        two.extend_from_slice(&[0xFF; 3]);
        check(&two, false, frame(b"xy", 18));
    }

    #[test]
    fn partial_frames_need_more() {
        check(b"", false, Ok(Decoded::NeedMore));
        check(&[20, 0, 0], false, Ok(Decoded::NeedMore));
        check(&[20, 0, 0, 0, 1, 2, 0], false, Ok(Decoded::NeedMore));
        let whole = encoded(b"hello", true);
        check(&whole[..whole.len() - 1], true, Ok(Decoded::NeedMore));
        check(&whole[..FRAME_HEADER_BYTES], true, Ok(Decoded::NeedMore));
    }

    #[test]
    fn bad_lengths_fail_before_the_rest_arrives() {
        let too_large = (FRAME_BYTES_MAX + 1) as u32;
        check(
            &too_large.to_le_bytes(),
            false,
            Err(FrameError::LengthTooLarge {
                length_bytes: FRAME_BYTES_MAX + 1,
            }),
        );
        check(
            &u32::MAX.to_le_bytes(),
            true,
            Err(FrameError::LengthTooLarge {
                length_bytes: u32::MAX as usize,
            }),
        );
        check(
            &15u32.to_le_bytes(),
            false,
            Err(FrameError::LengthTooSmall {
                length_bytes: 15,
                min_bytes: 16,
            }),
        );
        check(
            &0u32.to_le_bytes(),
            true,
            Err(FrameError::LengthTooSmall {
                length_bytes: 0,
                min_bytes: 16,
            }),
        );
        // With a trailer announced, the frame must also hold the trailer.
        check(
            &raw(18, FLAG_CHECKSUM, &[]),
            true,
            Err(FrameError::LengthTooSmall {
                length_bytes: 18,
                min_bytes: 20,
            }),
        );
    }

    #[test]
    fn bad_flags_fail() {
        check(
            &raw(16, 0x0002, &[]),
            false,
            Err(FrameError::UnknownFlags { flags: 2 }),
        );
        check(
            &raw(16, 0x8001, &[]),
            true,
            Err(FrameError::UnknownFlags { flags: 0x8001 }),
        );
        check(
            &raw(20, FLAG_CHECKSUM, &[]),
            false,
            Err(FrameError::ChecksumFlagMismatch {
                expected: false,
                found: true,
            }),
        );
        check(
            &raw(16, 0, &[]),
            true,
            Err(FrameError::ChecksumFlagMismatch {
                expected: true,
                found: false,
            }),
        );
    }

    #[test]
    fn corrupted_checksummed_frames_fail() {
        let good = encoded(b"payload", true);
        for index in [0usize, 4, 8, 12, 16, 22, good.len() - 1] {
            let mut bad = good.clone();
            bad[index] ^= 0x40;
            // A flipped length bit may announce a longer frame, which waits for more bytes;
            // what must never happen is a frame being delivered.
            let result = decode(&bad, true);
            let delivered = matches!(result, Ok(Decoded::Frame { .. }));
            assert!(
                !delivered,
                "flipping byte {index} went unnoticed: {result:?}"
            );
        }
    }

    #[test]
    fn encoder_refuses_oversized_frames() {
        let mut out = vec![1, 2, 3];
        let limit_payload = vec![0u8; FRAME_PAYLOAD_BYTES_MAX];
        encode_into(&mut out, &HEADER, &limit_payload, true).expect("the largest payload fits");
        assert_eq!(out.len(), 3 + FRAME_BYTES_MAX);
        let over = vec![0u8; FRAME_PAYLOAD_BYTES_MAX + 1];
        let err = encode_into(&mut out, &HEADER, &over, true).expect_err("one byte too many");
        assert!(
            matches!(err, TransportError::FrameTooLarge { bytes, .. } if bytes == FRAME_BYTES_MAX + 1)
        );
        assert_eq!(
            out.len(),
            3 + FRAME_BYTES_MAX,
            "a refused frame leaves the buffer unchanged"
        );
    }

    #[test]
    fn slice_encoder_matches_vec_encoder() {
        let mut slot = [0u8; 64];
        let frame_len = encode_to_slice(&mut slot, &HEADER, b"abc", true).expect("fits");
        assert_eq!(&slot[..frame_len], &encoded(b"abc", true)[..]);
        let mut small = [0u8; 18];
        let err = encode_to_slice(&mut small, &HEADER, b"abc", false).expect_err("slot too small");
        assert!(matches!(
            err,
            TransportError::FrameTooLarge {
                bytes: 19,
                limit: 18
            }
        ));
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256), checksum: bool) {
            let _ = decode(&bytes, checksum);
        }

        #[test]
        fn decode_never_panics_on_plausible_lengths(
            length_bytes in 0u32..64,
            flags in 0u16..4,
            rest in proptest::collection::vec(any::<u8>(), 0..80),
            checksum: bool,
        ) {
            let _ = decode(&raw(length_bytes, flags, &rest), checksum);
        }

        #[test]
        fn encode_then_decode_round_trips(
            signal: u16,
            receiver_block: u16,
            sender_block: u16,
            request_id: u32,
            payload in proptest::collection::vec(any::<u8>(), 0..2048),
            checksum: bool,
            tail in proptest::collection::vec(any::<u8>(), 0..8),
        ) {
            let header = FrameHeader { signal, receiver_block, sender_block, request_id };
            let mut buf = Vec::new();
            encode_into(&mut buf, &header, &payload, checksum).expect("fits");
            let frame_len = buf.len();
            prop_assert_eq!(frame_len, encoded_len(payload.len(), checksum));
            for cut in [0, 3, 7, frame_len - 1] {
                prop_assert_eq!(decode(&buf[..cut], checksum), Ok(Decoded::NeedMore));
            }
            buf.extend_from_slice(&tail);
            let expected = Decoded::Frame { header, payload: &payload, frame_len };
            prop_assert_eq!(decode(&buf, checksum), Ok(expected));
        }
    }
}
