//! Logging that a flood of requests cannot turn into a flood of lines: [`warn!`] and
//! [`error!`], `tracing`'s own, throttled to one line per call site per [`INTERVAL`].
//!
//! An event that can happen once per request — a refusal, a store error met by a request,
//! a record that could not be removed, a lock renewal that failed — is logged through
//! these rather than through `tracing`'s macros. Each call site lets its first event
//! through at once, with its fields; the events that follow within the interval are
//! counted, not written; the first event after the interval is written with
//! `suppressed = N`, how many went unwritten since the line before (the field is left out
//! when none did). So 100,000 refusals write one line per interval, and the lines still
//! account for every one of them: each is a line, or counted in the next one. The count
//! of the last interval of a burst is written with the next event at that call site,
//! whenever it comes; the metrics, where an event has one, count every event as it
//! happens.
//!
//! Events that happen once per process or per connection (a store's checks when it
//! connects, a listener's reconnections, a drain at shutdown) stay with `tracing`'s
//! macros.
//!
//! The interval is fixed, not configurable: it bounds how much a flood writes, and
//! `tracing`'s own filters decide what is written at all. The throttle is per call site
//! (a `static` each invocation makes) and per process, whatever the runtime or the
//! store. Its clock is Tokio's, which is the standard clock unless a test pauses it.
//!
//! Not a public API: the macros are public for the other crates of idem to call, and
//! hidden from the documentation.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// How often one call site writes a line at most: the first event at once, then the
/// first event at least this long after the last line written.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// [`INTERVAL`] in milliseconds.
const INTERVAL_MS: u64 = INTERVAL.as_millis() as u64;

/// Logs a `tracing::warn!` event, throttled: the first of its call site at once, then at
/// most one line per [`INTERVAL`], carrying `suppressed`, how many events went unwritten
/// since the last line. Its arguments are `tracing::warn!`'s.
#[doc(hidden)]
#[macro_export]
macro_rules! __throttled_warn {
    ($($event:tt)+) => {
        $crate::__throttled_event!(warn, $($event)+)
    };
}

/// Logs a `tracing::error!` event, throttled as [`warn!`] is.
#[doc(hidden)]
#[macro_export]
macro_rules! __throttled_error {
    ($($event:tt)+) => {
        $crate::__throttled_event!(error, $($event)+)
    };
}

/// What [`warn!`] and [`error!`] expand to: a [`Throttle`] of the call site's own, and the
/// event written when it lets it through.
#[doc(hidden)]
#[macro_export]
macro_rules! __throttled_event {
    ($level:ident, $($event:tt)+) => {{
        static THROTTLE: $crate::throttled::Throttle = $crate::throttled::Throttle::new();
        if let ::core::option::Option::Some(suppressed) = THROTTLE.admit() {
            // Left out of the line when nothing was suppressed.
            let suppressed = (suppressed > 0).then_some(suppressed);
            $crate::__private::tracing::$level!(suppressed, $($event)+);
        }
    }};
}

pub use crate::{__throttled_error as error, __throttled_warn as warn};

/// The throttle of one call site: when it may write its next line, and how many events it
/// left unwritten since its last. Two atomics: no lock, no allocation, no timer.
#[derive(Debug, Default)]
pub struct Throttle {
    /// When the next line may be written, in milliseconds on the scale of [`now_ms`]; 0
    /// until the first event, which is written at once.
    next_line: AtomicU64,
    /// The events left unwritten since the last line.
    suppressed: AtomicU64,
}

impl Throttle {
    /// A throttle that lets its first event through.
    pub const fn new() -> Self {
        Self {
            next_line: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// Whether an event happening now is written: `Some` with how many events were left
    /// unwritten since the last line, or `None`, the event counted in the next line.
    #[inline]
    pub fn admit(&self) -> Option<u64> {
        self.admit_at(now_ms())
    }

    /// [`admit`](Self::admit) at `now`, in milliseconds on the scale of [`now_ms`].
    fn admit_at(&self, now: u64) -> Option<u64> {
        let next_line = self.next_line.load(Ordering::Relaxed);
        // One event of the many that find the interval over wins the line; the others
        // are counted in the next one.
        if now >= next_line
            && self
                .next_line
                .compare_exchange(
                    next_line,
                    now.saturating_add(INTERVAL_MS),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            // Every count is a read-modify-write of the one atomic: an event counted
            // while the line is written is in this line's count or the next's, never lost.
            return Some(self.suppressed.swap(0, Ordering::Relaxed));
        }
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        None
    }
}

/// Where [`epoch`] lies on the throttles' scale of milliseconds: far enough from its zero
/// (146 million years) that no instant comes before it.
const EPOCH_MS: u64 = 1 << 62;

/// The instant the throttles count from: the first time one is asked.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Now, in milliseconds on the throttles' scale, [`epoch`] at [`EPOCH_MS`]. Now may come
/// before the epoch: each runtime whose clock a test paused has a clock of its own.
fn now_ms() -> u64 {
    let (now, epoch) = (Instant::now(), epoch());
    let ms = |duration: Duration| u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    match now.checked_duration_since(epoch) {
        Some(after) => EPOCH_MS.saturating_add(ms(after)),
        None => EPOCH_MS.saturating_sub(ms(epoch - now)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000;

    /// The first event is written at once; the rest of its interval is counted; the first
    /// event after it is written with the count, and starts the next interval.
    #[test]
    fn one_line_per_interval_carrying_the_count_of_the_rest() {
        let throttle = Throttle::new();
        assert_eq!(throttle.admit_at(5 * SECOND), Some(0), "the first at once");
        for ms in (5 * SECOND..15 * SECOND).step_by(100) {
            assert_eq!(throttle.admit_at(ms), None, "at {ms} ms");
        }
        assert_eq!(
            throttle.admit_at(15 * SECOND),
            Some(100),
            "the interval is over"
        );
        assert_eq!(throttle.admit_at(15 * SECOND + 1), None);
        assert_eq!(throttle.admit_at(24 * SECOND + 999), None);
        assert_eq!(throttle.admit_at(25 * SECOND), Some(2));
    }

    /// An event long after the last line is written at once, with nothing suppressed.
    #[test]
    fn a_rare_event_is_always_written() {
        let throttle = Throttle::new();
        for minute in 0..10 {
            assert_eq!(throttle.admit_at(minute * 60 * SECOND), Some(0));
        }
    }

    /// Events from many threads at once: each is a line or counted in one.
    #[test]
    fn concurrent_events_are_each_written_or_counted() {
        let throttle = Throttle::new();
        let (threads, each) = (8, 10_000);
        let written: Vec<(u64, u64)> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|thread| {
                    let throttle = &throttle;
                    scope.spawn(move || {
                        let (mut lines, mut counted) = (0, 0);
                        for i in 0..each {
                            // Every thread crosses the same interval boundaries.
                            let now = (i / 1_000) * 5 * SECOND + thread;
                            if let Some(suppressed) = throttle.admit_at(now) {
                                lines += 1;
                                counted += suppressed;
                            }
                        }
                        (lines, counted)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let lines: u64 = written.iter().map(|(lines, _)| lines).sum();
        let counted: u64 = written.iter().map(|(_, counted)| counted).sum();
        // 50 seconds of events: a line at 0, 10, 20, 30 and 40 seconds (and a few ms).
        assert_eq!(lines, 5);
        let pending = throttle
            .admit_at(u64::MAX / 2)
            .expect("the interval is over");
        assert_eq!(lines + counted + pending, threads * each);
    }

    /// The macros write their line in `tracing`, with the call site's fields, and
    /// `suppressed` once events were suppressed; on Tokio's paused clock.
    #[tokio::test(start_paused = true)]
    async fn the_macros_write_through_tracing_on_tokios_clock() {
        let lines = Lines::default();
        let _default = tracing::subscriber::set_default(lines.clone());
        let warn = |n: u64| crate::throttled::warn!(n, "idem: a warning");
        for n in 0..1_000 {
            warn(n);
        }
        tokio::time::advance(INTERVAL).await;
        warn(1_000);
        crate::throttled::error!("idem: an error");
        assert_eq!(
            *lines.0.lock().unwrap(),
            [
                "WARN n=0".to_owned(),
                "WARN suppressed=999 n=1000".to_owned(),
                "ERROR".to_owned()
            ]
        );
    }

    /// A subscriber that keeps each event's level and fields but its message.
    #[derive(Clone, Default)]
    struct Lines(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

    /// One event's level and fields but its message.
    struct Line(String);

    impl tracing::field::Visit for Line {
        fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
            if field.name() != "message" {
                self.0.push_str(&format!(" {}={value:?}", field.name()));
            }
        }
    }

    impl tracing::Subscriber for Lines {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }

        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }

        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

        fn event(&self, event: &tracing::Event<'_>) {
            let mut line = Line(event.metadata().level().to_string());
            event.record(&mut line);
            self.0.lock().unwrap().push(line.0);
        }

        fn enter(&self, _: &tracing::span::Id) {}

        fn exit(&self, _: &tracing::span::Id) {}
    }
}
