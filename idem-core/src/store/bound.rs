//! How long a store call may wait, with one timer per request rather than one per call:
//! [`bounded`] and [`sharing_one_timer`].
//!
//! A store that waits on something outside the process (a server, a database) bounds each
//! call with [`bounded`], so that no caller waits on a stalled link beyond the store's
//! timeout. A timer per call would cost every call a registration in the runtime's timer
//! wheel and its removal; a guarded request makes two or three calls. So the calls of a
//! request that runs under [`sharing_one_timer`] share one timer, set again for each call:
//! the guards of idem-axum run every request so. A call that answers on its first poll
//! (every call of `MemoryStore`) never touches a timer at all.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use super::StoreError;

tokio::task_local! {
    /// The timer the store calls of one request share, inside [`sharing_one_timer`].
    static SHARED: RefCell<SharedTimer>;
}

thread_local! {
    /// Set while a [`Bounded`] call polls what it bounds: a [`Bounded`] call polled then is
    /// part of it, and bounded by it.
    static ENCLOSED: Cell<bool> = const { Cell::new(false) };
}

/// The timer of one request: made by its first call that has to wait, set again by each
/// later one.
#[derive(Default)]
struct SharedTimer {
    sleep: Option<Pin<Box<Sleep>>>,
    /// A call is using it: a second call waiting at the same time in the same request
    /// (two calls joined) takes a timer of its own.
    in_use: bool,
}

/// Runs `future` — one request, typically — so that the [`bounded`] store calls it makes
/// share one timer: at most one timer is registered for all of them, however many calls
/// it makes one after another.
///
/// ```
/// use std::time::Duration;
/// use idem_core::StoreError;
/// use idem_core::store::{bounded, sharing_one_timer};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), StoreError> {
/// let request = async {
///     // Two calls one after the other: one timer between them.
///     bounded(Duration::from_secs(1), async { Ok::<_, StoreError>(1) }).await?;
///     bounded(Duration::from_secs(1), async { Ok::<_, StoreError>(2) }).await
/// };
/// assert_eq!(sharing_one_timer(request).await?, 2);
/// # Ok(()) }
/// ```
pub fn sharing_one_timer<F: Future>(future: F) -> impl Future<Output = F::Output> {
    SHARED.scope(RefCell::new(SharedTimer::default()), future)
}

/// `call`, cut off with [`StoreError::Timeout`] once it has waited `timeout`.
///
/// The timer is set only if `call` does not answer on its first poll, and inside
/// [`sharing_one_timer`] it is the request's one timer; elsewhere (or while another call
/// of the same request uses that one) a timer of its own. A `bounded` call made inside
/// another one (an operation of two commands, each bounded, bounded as a whole) sets no
/// timer: the enclosing call's bounds both. Dropping `call` on the timeout cancels it, as
/// [`tokio::time::timeout`] does.
///
/// ```
/// use std::time::Duration;
/// use idem_core::StoreError;
/// use idem_core::store::bounded;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let stalled = bounded(Duration::from_millis(10), std::future::pending::<Result<(), StoreError>>());
/// assert!(matches!(stalled.await, Err(StoreError::Timeout(_))));
/// # }
/// ```
pub fn bounded<T, F>(timeout: Duration, call: F) -> Bounded<F>
where
    F: Future<Output = Result<T, StoreError>>,
{
    Bounded {
        call,
        timeout,
        timer: Timer::Unset,
    }
}

pin_project_lite::pin_project! {
    /// The future of [`bounded`].
    #[derive(Debug)]
    pub struct Bounded<F> {
        #[pin]
        call: F,
        timeout: Duration,
        timer: Timer,
    }

    impl<F> PinnedDrop for Bounded<F> {
        fn drop(this: Pin<&mut Self>) {
            this.project().timer.release();
        }
    }
}

/// Which timer a [`Bounded`] call waits on.
#[derive(Debug)]
enum Timer {
    /// None yet: the call has not had to wait.
    Unset,
    /// The request's shared one, set for this deadline.
    Shared(Instant),
    /// One of its own.
    Own(Pin<Box<Sleep>>),
}

impl Timer {
    /// Sets a timer for `deadline`: the request's, if it has one free.
    fn set(deadline: Instant) -> Self {
        let shared = SHARED.try_with(|shared| {
            let mut shared = shared.borrow_mut();
            if shared.in_use {
                return false;
            }
            shared.in_use = true;
            match &mut shared.sleep {
                Some(sleep) => sleep.as_mut().reset(deadline),
                None => shared.sleep = Some(new_timer(deadline)),
            }
            true
        });
        if shared == Ok(true) {
            Self::Shared(deadline)
        } else {
            Self::Own(new_timer(deadline))
        }
    }

    /// Whether the deadline has passed; if not, the task is woken when it does.
    fn elapsed(&mut self, cx: &mut Context<'_>) -> bool {
        if let Self::Shared(deadline) = *self {
            let shared = SHARED.try_with(|shared| {
                let mut shared = shared.borrow_mut();
                let sleep = shared.sleep.as_mut()?;
                Some(sleep.as_mut().poll(cx).is_ready())
            });
            match shared {
                Ok(Some(elapsed)) => return elapsed,
                // The call moved out of its request's scope (a request whose client went
                // away, its work detached into a task of its own): a timer of its own, for
                // the same deadline.
                _ => *self = Self::Own(new_timer(deadline)),
            }
        }
        match self {
            Self::Own(sleep) => sleep.as_mut().poll(cx).is_ready(),
            Self::Unset | Self::Shared(_) => false,
        }
    }

    /// Gives the request's timer back, for its next call.
    fn release(&mut self) {
        if let Self::Shared(_) = self {
            let _ = SHARED.try_with(|shared| shared.borrow_mut().in_use = false);
        }
        *self = Self::Unset;
    }
}

/// [`ENCLOSED`] set while it lives, and put back as it was when it is dropped, also by a
/// panic in the call it encloses.
struct Enclosing {
    was: bool,
}

impl Enclosing {
    fn enter() -> Self {
        Self {
            was: ENCLOSED.replace(true),
        }
    }
}

impl Drop for Enclosing {
    fn drop(&mut self) {
        ENCLOSED.set(self.was);
    }
}

/// A timer for `deadline`, counted in tests.
fn new_timer(deadline: Instant) -> Pin<Box<Sleep>> {
    #[cfg(test)]
    tests::TIMERS.with(|timers| timers.set(timers.get() + 1));
    Box::pin(tokio::time::sleep_until(deadline))
}

impl<T, F> Future for Bounded<F>
where
    F: Future<Output = Result<T, StoreError>>,
{
    type Output = Result<T, StoreError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let enclosing = Enclosing::enter();
        let polled = this.call.poll(cx);
        let enclosed = enclosing.was;
        drop(enclosing);
        if let Poll::Ready(answer) = polled {
            this.timer.release();
            return Poll::Ready(answer);
        }
        if enclosed {
            return Poll::Pending;
        }
        if let Timer::Unset = this.timer {
            *this.timer = Timer::set(Instant::now() + *this.timeout);
        }
        if this.timer.elapsed(cx) {
            this.timer.release();
            return Poll::Ready(Err(StoreError::Timeout(*this.timeout)));
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// Timers made on this thread.
        pub(super) static TIMERS: Cell<usize> = const { Cell::new(0) };
    }

    /// A call that waits `after`, then answers.
    async fn call(after: Duration) -> Result<(), StoreError> {
        tokio::time::sleep(after).await;
        Ok(())
    }

    fn shared_timer_is_set() -> bool {
        SHARED
            .try_with(|shared| shared.borrow().sleep.is_some())
            .unwrap_or(false)
    }

    #[tokio::test(start_paused = true)]
    async fn calls_of_one_request_share_its_timer_and_each_gets_the_whole_timeout() {
        let timeout = Duration::from_secs(1);
        let request = async {
            assert!(!shared_timer_is_set(), "no timer before a call waits");
            bounded(timeout, async { Ok(()) }).await.unwrap();
            assert!(
                !shared_timer_is_set(),
                "a call that answers at once sets none"
            );
            // Each call may wait almost the whole timeout: the timer is set again for it.
            for _ in 0..3 {
                bounded(timeout, call(timeout * 9 / 10)).await.unwrap();
                assert!(shared_timer_is_set());
            }
            let stalled = bounded(timeout, call(timeout * 2)).await;
            assert!(matches!(stalled, Err(StoreError::Timeout(t)) if t == timeout));
        };
        let before = TIMERS.with(Cell::get);
        sharing_one_timer(request).await;
        assert_eq!(
            TIMERS.with(Cell::get) - before,
            1,
            "one timer for four calls that waited"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn joined_calls_each_keep_their_own_bound() {
        let timeout = Duration::from_secs(1);
        let started = Instant::now();
        let request = async {
            let (first, second) = tokio::join!(
                bounded(timeout, call(timeout * 3)),
                bounded(timeout, call(timeout / 2)),
            );
            assert!(matches!(first, Err(StoreError::Timeout(_))));
            assert!(second.is_ok());
        };
        sharing_one_timer(request).await;
        assert_eq!(
            started.elapsed(),
            timeout,
            "the stalled call was cut off in time"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_operation_of_two_calls_is_bounded_as_one() {
        let timeout = Duration::from_secs(1);
        let started = Instant::now();
        let before = TIMERS.with(Cell::get);
        let operation = bounded(timeout, async {
            bounded(timeout, call(timeout * 6 / 10)).await?;
            bounded(timeout, call(timeout * 6 / 10)).await
        });
        assert!(matches!(
            sharing_one_timer(operation).await,
            Err(StoreError::Timeout(_))
        ));
        assert_eq!(
            started.elapsed(),
            timeout,
            "cut off at the operation's timeout"
        );
        assert_eq!(
            TIMERS.with(Cell::get) - before,
            1,
            "one timer, the operation's"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn outside_a_request_a_call_has_a_timer_of_its_own() {
        let stalled = bounded(
            Duration::from_millis(10),
            std::future::pending::<Result<(), _>>(),
        );
        assert!(matches!(stalled.await, Err(StoreError::Timeout(_))));
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_dropped_half_way_gives_the_timer_back() {
        let request = async {
            let cut = tokio::time::timeout(
                Duration::from_millis(5),
                bounded(
                    Duration::from_secs(1),
                    std::future::pending::<Result<(), _>>(),
                ),
            )
            .await;
            assert!(cut.is_err());
            let in_use = SHARED.with(|shared| shared.borrow().in_use);
            assert!(!in_use, "given back when dropped");
            bounded(Duration::from_secs(1), call(Duration::from_millis(1)))
                .await
                .unwrap();
        };
        sharing_one_timer(request).await;
    }

    /// A request's work detached into a task of its own when its client goes away takes
    /// its call in progress along, out of the request's scope: the call stays bounded.
    #[tokio::test(start_paused = true)]
    async fn a_call_moved_out_of_its_request_keeps_its_bound() {
        let timeout = Duration::from_millis(100);
        let mut call = Box::pin(bounded(timeout, std::future::pending::<Result<(), _>>()));
        let started = std::future::poll_fn(|cx| Poll::Ready(call.as_mut().poll(cx).is_pending()));
        assert!(
            sharing_one_timer(started).await,
            "waiting on the request's timer"
        );
        let moved = tokio::time::timeout(timeout * 10, call).await;
        assert!(
            matches!(moved, Ok(Err(StoreError::Timeout(t))) if t == timeout),
            "cut off at its own deadline, not left unbounded: {moved:?}"
        );
    }
}
