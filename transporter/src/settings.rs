//! The per-link settings every transporter reads, taken from a `[tcp]`/`[shm]` link of the
//! cluster config (or built directly by tests).
#![forbid(unsafe_code)]

use rndb_config::LinkConfig;

use crate::frame::FRAME_BYTES_MAX;

/// The smallest receive buffer a link uses: room for one whole frame plus a partial one, so a
/// read always has at least [`FRAME_BYTES_MAX`] bytes of free space after compaction.
pub const RECEIVE_BUFFER_BYTES_MIN: usize = 2 * FRAME_BYTES_MAX;

/// The smallest effective send limit: an empty send buffer always takes one frame of any size,
/// so a small OverloadLimit slows a sender down instead of refusing large frames for ever.
pub const SEND_LIMIT_BYTES_MIN: usize = FRAME_BYTES_MAX;

/// NDB's default SendBufferMemory and ReceiveBufferMemory (2 MiB).
pub const BUFFER_MEMORY_BYTES_DEFAULT: usize = 2 * 1024 * 1024;

/// How one link sends and receives. Fixed when the link is created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkSettings {
    /// Checksum=1: every frame carries a CRC-32 trailer, and frames without one are rejected.
    pub checksum: bool,
    /// SendBufferMemory: the most bytes the send buffer may ever hold.
    pub send_buffer_bytes_max: usize,
    /// OverloadLimit resolved to bytes: pending send bytes above this give NDB error 1218.
    pub overload_limit_bytes: usize,
    /// ReceiveBufferMemory: the receive buffer's size (raised to [`RECEIVE_BUFFER_BYTES_MIN`]).
    pub receive_buffer_bytes: usize,
}

impl LinkSettings {
    /// The settings of a configured link.
    pub fn from_link(link: &LinkConfig) -> LinkSettings {
        LinkSettings {
            checksum: link.checksum,
            send_buffer_bytes_max: saturating_usize(link.send_buffer_memory_bytes),
            overload_limit_bytes: saturating_usize(link.overload_limit()),
            receive_buffer_bytes: saturating_usize(link.receive_buffer_memory_bytes),
        }
    }

    /// The pending send bytes a link accepts before it answers Overloaded: the smaller of
    /// OverloadLimit and SendBufferMemory, but never below [`SEND_LIMIT_BYTES_MIN`].
    pub fn send_limit_bytes(&self) -> usize {
        self.overload_limit_bytes
            .min(self.send_buffer_bytes_max)
            .max(SEND_LIMIT_BYTES_MIN)
    }

    /// The receive buffer size a link allocates: ReceiveBufferMemory, but never below
    /// [`RECEIVE_BUFFER_BYTES_MIN`].
    pub fn receive_buffer_bytes_effective(&self) -> usize {
        self.receive_buffer_bytes.max(RECEIVE_BUFFER_BYTES_MIN)
    }
}

impl Default for LinkSettings {
    /// NDB's `[tcp]` defaults: no checksum, 2 MiB buffers, overload at 80 % of the send buffer.
    fn default() -> LinkSettings {
        LinkSettings {
            checksum: false,
            send_buffer_bytes_max: BUFFER_MEMORY_BYTES_DEFAULT,
            overload_limit_bytes: BUFFER_MEMORY_BYTES_DEFAULT / 10 * 8,
            receive_buffer_bytes: BUFFER_MEMORY_BYTES_DEFAULT,
        }
    }
}

fn saturating_usize(bytes: u64) -> usize {
    usize::try_from(bytes).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rndb_config::{NodeId, TransporterKind};

    fn link(send_bytes: u64, overload_bytes: u64, receive_bytes: u64) -> LinkConfig {
        LinkConfig {
            node1: NodeId(1),
            node2: NodeId(2),
            kind: TransporterKind::Tcp,
            explicit: false,
            send_buffer_memory_bytes: send_bytes,
            receive_buffer_memory_bytes: receive_bytes,
            checksum: true,
            overload_limit_bytes: overload_bytes,
            shm_size_bytes: 4 << 20,
            shm_spintime_us: 0,
            over_tcp: None,
        }
    }

    fn check(link: LinkConfig, send_limit_bytes: usize, receive_bytes: usize) {
        let settings = LinkSettings::from_link(&link);
        assert!(settings.checksum);
        assert_eq!(settings.send_limit_bytes(), send_limit_bytes, "{link:?}");
        assert_eq!(
            settings.receive_buffer_bytes_effective(),
            receive_bytes,
            "{link:?}"
        );
    }

    #[test]
    fn limits_follow_the_config() {
        let mib = 1024 * 1024;
        check(
            link(2 * mib, 0, 2 * mib),
            2 * mib as usize / 10 * 8,
            2 * mib as usize,
        );
        check(link(2 * mib, mib, 4 * mib), mib as usize, 4 * mib as usize);
        check(link(mib, 2 * mib, mib), mib as usize, mib as usize);
        check(
            link(1000, 0, 1000),
            SEND_LIMIT_BYTES_MIN,
            RECEIVE_BUFFER_BYTES_MIN,
        );
    }

    #[test]
    fn default_matches_ndb_tcp_defaults() {
        let settings = LinkSettings::default();
        assert!(!settings.checksum);
        assert_eq!(settings.send_limit_bytes(), 1_677_720);
    }
}
