//! [`Lease`]: how long a lock is held, and whether a watchdog keeps extending it; and how
//! long a hold is known to be valid on this machine's clock.

use std::time::{Duration, Instant};

use crate::store::ttl_millis;

/// How long a [`Lock`](crate::Lock) is held, and whether it is renewed while held.
///
/// Chosen explicitly for every lock: a lease that quietly lapses under long work and a
/// lease that is silently extended for ever are both surprises, so neither is a default.
///
/// Either way a lease is what frees the lock when its holder dies without releasing it
/// (a crash, `SIGKILL`, a lost network): nobody waits longer than one lease for a dead
/// holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lease {
    /// Held for this long after acquiring, unless released first; never extended.
    ///
    /// For work with a known bound. Work that overruns it runs without the lock:
    /// [`LockGuard::lost`](crate::lock::LockGuard::lost) completes when the lease ends.
    Fixed(Duration),
    /// Held for this long at a time, and renewed by a watchdog task every third of it
    /// while the guard lives (Redisson's watchdog; its default is 30 s).
    ///
    /// For work of unknown length. The watchdog stops the moment the guard is released or
    /// dropped; a holder process that dies leaves the lock free at most one lease later.
    /// Keep it well above the store's timeout, so one slow renewal does not lose the lock.
    Watchdog(Duration),
}

impl Lease {
    /// The length of one lease, as the stores keep it: whole milliseconds, at least one,
    /// at most a century.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use idem_core::lock::Lease;
    /// assert_eq!(Lease::Watchdog(Duration::from_secs(30)).duration(), Duration::from_secs(30));
    /// ```
    pub fn duration(self) -> Duration {
        let (Self::Fixed(lease) | Self::Watchdog(lease)) = self;
        Duration::from_millis(ttl_millis(lease))
    }
}

/// When a hold that the store reported as `remaining`, in answer to a request sent at
/// `sent_at`, is known to be valid until on this machine's clock.
///
/// The store started counting no earlier than `sent_at`, so `sent_at + remaining` is never
/// late. From it goes an allowance for the two clocks running at slightly different rates
/// (the store's TTL clock and our monotonic one): 1% of the lease plus 2 ms, as Redlock
/// allows.
pub(super) fn valid_until(sent_at: Instant, remaining: Duration, lease: Duration) -> Instant {
    let remaining = Duration::from_millis(ttl_millis(remaining));
    let drift = lease / 100 + Duration::from_millis(2);
    sent_at + remaining.saturating_sub(drift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_is_never_later_than_the_store_keeps_it() {
        let now = Instant::now();
        let lease = Duration::from_secs(10);
        assert_eq!(
            valid_until(now, lease, lease),
            now + Duration::from_millis(10_000 - 100 - 2)
        );
        assert_eq!(
            valid_until(now, Duration::from_millis(1), lease),
            now,
            "a hold about to end is not valid at all"
        );
        assert!(
            valid_until(now, Duration::MAX, Lease::Fixed(Duration::MAX).duration()) > now,
            "a key without expiry does not overflow"
        );
    }

    #[test]
    fn leases_are_kept_within_the_stores_bounds() {
        assert_eq!(
            Lease::Fixed(Duration::ZERO).duration(),
            Duration::from_millis(1)
        );
        assert!(Lease::Watchdog(Duration::MAX).duration() < Duration::from_secs(u64::MAX / 2));
    }
}
