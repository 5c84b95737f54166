//! A graceful stop's last steps (ndbd's SIGTERM, ndb_mgm's STOP, RESTART, SHUTDOWN and ALL
//! RESTART): before the node leaves, every commit its TC acknowledged is saved in a global
//! checkpoint, so that a stop of every data node loses none (NDB's system stop likewise waits
//! for its transactions, then forces a global checkpoint: NDBCNTR's WAIT_GCP_REQ
//! CompleteForceStart).
//!
//! ```text
//! begin_stop ─► refuse new work from API nodes (280); abort their idle transactions
//!            ─► once TC coordinates nothing running: note the epoch commits take now (g),
//!               ask the master for a save at once (GCP_SAVE_WANTED)
//!            ─► once g is durable (GCP_DURABLE_REP): stop (NODE_STOPPING_REP, exit)
//! ```
//!
//! Commits that started before the stop run to their end; no commit starts at this TC after,
//! so each one it answered has an epoch at most g. A node not started, or without files
//! (Diskless), stops at once; one whose save does not come within [`STOP_FLUSH_MAX`] stops
//! anyway and says so.

use std::time::{Duration, Instant};

use rndb_config::NodeId;
use rndb_protocol::NdbError;

use super::{Kernel, Outbox};
use crate::ndbfs::format::gci_hi;

/// The longest a graceful stop waits for its transactions and its save.
pub const STOP_FLUSH_MAX: Duration = Duration::from_secs(30);

/// A graceful stop in its last steps.
#[derive(Debug)]
pub(crate) struct Stopping {
    began: Instant,
    /// The epoch whose save the stop waits for, once TC coordinates nothing running.
    saving: Option<u64>,
}

impl Kernel {
    /// A graceful stop begins: API nodes' new work is refused (280) and their idle
    /// transactions aborted from now on. `Kernel::ready_to_stop` says when the node may go.
    pub fn begin_stop(&mut self, now: Instant) {
        if self.stopping.is_some() || !self.qmgr.started() || !self.has_files {
            return;
        }
        tracing::info!(
            "stopping: refusing new transactions, then saving a global checkpoint of every \
             commit this node answered"
        );
        self.stopping = Some(Stopping {
            began: now,
            saving: None,
        });
        self.abort_idle_except(NodeId(0), &stop_error());
    }

    /// True once a graceful stop may end: every commit this node's TC answered is in a
    /// durable global checkpoint, or there was nothing to wait for, or [`STOP_FLUSH_MAX`]
    /// passed.
    pub fn ready_to_stop(&mut self, out: &mut dyn Outbox, now: Instant) -> bool {
        let Some(stopping) = &self.stopping else {
            return true;
        };
        if self.qmgr.dead || !self.qmgr.started() {
            return true;
        }
        if now.saturating_duration_since(stopping.began) >= STOP_FLUSH_MAX {
            tracing::warn!(
                "stopping without a saved global checkpoint of this node's last commits: none \
                 came within {} s",
                STOP_FLUSH_MAX.as_secs()
            );
            return true;
        }
        let gci = match stopping.saving {
            Some(gci) => gci,
            None if self.tc.coordinates_running() => return false,
            None => {
                let gci = self.gcp.current;
                if let Some(stopping) = &mut self.stopping {
                    stopping.saving = Some(gci);
                }
                gci
            }
        };
        if gci_hi(gci) <= self.gcp.durable {
            tracing::info!(
                gci = gci_hi(gci),
                "global checkpoint {} saved: every commit this node answered is durable",
                gci_hi(gci)
            );
            return true;
        }
        // Asked once until the next save starts: a save of an older checkpoint running now
        // is followed by one that covers this epoch.
        self.gcp_want_save(out);
        false
    }

    /// While a graceful stop runs: refuses with 280 a request of API node `from` that would
    /// start work (see `refuse_new_work`). True when the frame was handled.
    pub(super) fn refuse_while_stopping(
        &mut self,
        from: NodeId,
        header: &rndb_transporter::FrameHeader,
        payload: &[u8],
        out: &mut dyn Outbox,
    ) -> bool {
        self.refuse_new_work(from, header, payload, out, stop_error())
    }

    /// While a graceful stop runs, aborts every API node's idle transactions (their next
    /// execute is told 280).
    pub(super) fn stopping_sweep(&mut self) {
        if self.stopping.is_some() {
            self.abort_idle_except(NodeId(0), &stop_error());
        }
    }
}

/// NDB's 280, for work refused or aborted by a node that stops.
fn stop_error() -> NdbError {
    NdbError::with_detail(280, "this data node is stopping")
}
