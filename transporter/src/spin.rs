//! Adaptive spinning: how long a receive loop polls without sleeping, learned from whether
//! spinning has been paying off.
//!
//! Spinning only helps when the peer runs on another core while we spin. On a machine with few
//! cores the scheduler may put both processes on one core; then a spinner only delays the peer,
//! and a round trip costs two whole spin times. The scheduler does not separate them, because
//! at any moment only one of the two is runnable. So the budget halves every time a spin ends
//! without input, returns to the configured ShmSpintime / SchedulerSpinTimer every time input
//! arrives while spinning, and once it has decayed, one wait in [`PROBE_EVERY_WAITS`] tries the
//! full budget again in case the processes were moved apart.
//!
//! A success restores the whole budget rather than growing it step by step: the gaps between a
//! client's requests alternate (short inside a measurement, longer between measurements), and a
//! budget grown from the short gaps kept failing on the long ones and decaying again, leaving
//! both sides asleep for whole runs.
//!
//! A wait whose own request (or, for the data node, whose answer) had to wake a sleeping peer
//! never counts as a failure: its input is late by that wake-up whether or not spinning pays,
//! and counting it made both sides of a pair decay together. It still counts as a success when
//! the input comes within the spin; otherwise two sides that had both stopped spinning could
//! never start again, since each one's probe wakes the other and would go unjudged.
//!
//! Input that arrives late in a spin still counts as payoff: counted as a failure, each side's
//! probe saw the other side's answer only after that side's wake-up, judged it late, and a
//! pair that had both decayed never returned to spinning.

use std::time::Duration;

/// Once the budget has decayed below `FLOOR`, one wait in this many spins for the configured
/// time again, to notice when spinning would pay off again.
pub const PROBE_EVERY_WAITS: u32 = 256;
/// A budget below this is treated as "not spinning".
const FLOOR: Duration = Duration::from_micros(1);

/// The spin budget of one receive loop.
#[derive(Clone, Debug)]
pub struct AdaptiveSpin {
    /// The configured maximum (ShmSpintime or SchedulerSpinTimer); zero disables spinning.
    configured: Duration,
    /// The budget of the next wait.
    current: Duration,
    /// Waits since the budget fell below the floor.
    waits_since_decay: u32,
}

impl AdaptiveSpin {
    pub fn new(configured: Duration) -> Self {
        AdaptiveSpin {
            configured,
            current: configured,
            waits_since_decay: 0,
        }
    }

    /// The configured maximum.
    pub fn configured(&self) -> Duration {
        self.configured
    }

    /// Changes the configured maximum (links come and go) and starts from it.
    pub fn set_configured(&mut self, configured: Duration) {
        if configured != self.configured {
            *self = AdaptiveSpin::new(configured);
        }
    }

    /// How long to spin in the wait that starts now.
    pub fn budget(&mut self) -> Duration {
        if self.current >= FLOOR {
            return self.current;
        }
        self.waits_since_decay += 1;
        if self.waits_since_decay >= PROBE_EVERY_WAITS {
            self.waits_since_decay = 0;
            return self.configured;
        }
        Duration::ZERO
    }

    /// Records how the wait went: input arrived `Some(after)` this long into the spin, or the
    /// spin ran out (`None`).
    pub fn record(&mut self, input_after: Option<Duration>) {
        match input_after {
            Some(_) => self.current = self.configured,
            None => self.current /= 2,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decays_when_spinning_fails_and_recovers_when_it_pays() {
        let mut spin = AdaptiveSpin::new(Duration::from_micros(100));
        assert_eq!(spin.budget(), Duration::from_micros(100));
        for _ in 0..10 {
            spin.record(None);
        }
        assert_eq!(spin.budget(), Duration::ZERO);
        let probes = (0..PROBE_EVERY_WAITS * 2)
            .filter(|_| !spin.budget().is_zero())
            .count();
        assert_eq!(probes, 2, "one probe per {PROBE_EVERY_WAITS} waits");
        // A probe that pays off after 2 µs brings the budget back to where 2 µs waits pay.
        spin.record(Some(Duration::from_micros(2)));
        assert!(spin.budget() >= Duration::from_micros(8));
        for _ in 0..20 {
            spin.record(Some(Duration::from_micros(2)));
        }
        assert_eq!(spin.budget(), Duration::from_micros(100));
    }

    #[test]
    fn zero_configured_never_spins() {
        let mut spin = AdaptiveSpin::new(Duration::ZERO);
        for _ in 0..1000 {
            assert!(spin.budget().is_zero());
            spin.record(Some(Duration::ZERO));
        }
    }
}
