//! The API node's heartbeat (NDB's API_REGREQ every HeartbeatIntervalDbApi): one thread per
//! [`Cluster`](crate::Cluster) that, each interval, reads every link nobody else is reading,
//! fails a link that has brought nothing for [`MISSED_MAX`] intervals in a row (a data node
//! that stopped with its socket open, a link that drops everything), and asks every data node
//! again. The data node answers each API_REGREQ, and disconnects an API node it has heard
//! nothing from for as long (its transactions roll back and their locks are freed).

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::reconnect::Slots;

/// Silent intervals after which a link is failed (NDB: 4 missed heartbeats).
pub(crate) const MISSED_MAX: u32 = 4;

/// The heartbeat thread, stopped and joined on drop.
#[derive(Debug)]
pub(crate) struct Heartbeat {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Heartbeat {
    /// Starts the thread over `slots`, every `interval`; `None` (with a warning) when the
    /// thread cannot be started, as the API then simply has no heartbeat.
    pub fn start(slots: Slots, interval: Duration) -> Option<Heartbeat> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let thread_stop = Arc::clone(&stop);
        let spawned = std::thread::Builder::new()
            .name("rndb-heartbeat".into())
            .spawn(move || run(&slots, interval, &thread_stop));
        match spawned {
            Ok(thread) => Some(Heartbeat {
                stop,
                thread: Some(thread),
            }),
            Err(e) => {
                tracing::warn!("start the heartbeat thread: {e}; no API heartbeats");
                None
            }
        }
    }
}

fn run(slots: &Slots, interval: Duration, stop: &(Mutex<bool>, Condvar)) {
    let (stopping, changed) = stop;
    let mut stopped = stopping.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        stopped = changed
            .wait_timeout(stopped, interval)
            .unwrap_or_else(|p| p.into_inner())
            .0;
        if *stopped {
            return;
        }
        // The connections are visited without the lock: a drop waits at most one round.
        drop(stopped);
        for connection in slots.iter().filter_map(|slot| slot.get()) {
            connection.heartbeat(MISSED_MAX);
        }
        stopped = stopping.lock().unwrap_or_else(|p| p.into_inner());
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        let (stopping, changed) = &*self.stop;
        *stopping.lock().unwrap_or_else(|p| p.into_inner()) = true;
        changed.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
