//! The store's notion of "now": lease expiry, backoff and timestamps all read it, so tests can
//! move time instead of sleeping.

use std::fmt::Debug;
use std::sync::Mutex;
use std::time::Duration;

use time::OffsetDateTime;

/// A source of the current time. Every node must keep its clock in sync (NTP): leases are
/// compared against the claiming node's clock.
pub trait Clock: Debug + Send + Sync {
    /// The current time.
    fn now(&self) -> OffsetDateTime;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }
}

/// A clock that moves only when told to: for tests of lease expiry, backoff and schedules.
#[derive(Debug)]
pub struct ManualClock(Mutex<OffsetDateTime>);

impl ManualClock {
    /// A clock standing at `at`.
    pub fn new(at: OffsetDateTime) -> ManualClock {
        ManualClock(Mutex::new(at))
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let mut now = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *now += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> OffsetDateTime {
        *self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Unix milliseconds, the unit of every time column.
pub(crate) fn to_ms(at: OffsetDateTime) -> i64 {
    i64::try_from(at.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX)
}

/// The inverse of [`to_ms`]; out-of-range values clamp to the Unix epoch.
pub(crate) fn from_ms(ms: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

pub(crate) fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
