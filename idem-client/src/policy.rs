//! [`RetryPolicy`]: which requests are keyed, which answers are retried, how long to wait
//! and how much to retry — shared by the tower layer and the reqwest middleware.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use http::header::{CONTENT_TYPE, HeaderName, RETRY_AFTER};
use http::{HeaderMap, Method, StatusCode};
use tower::retry::budget::{Budget, TpsBudget};

/// The `type` of idem's own "the first request with this key is still running" problem
/// (`idem-axum`'s `RejectionKind::IdempotentRequestInProgress`) is the URL of its section in
/// idem-axum's refusals guide on docs.rs, which names the server's release of idem-axum:
/// this before the release, and [`IN_PROGRESS_SECTION`] after it.
const IDEM_REFUSALS: &str = "https://docs.rs/idem-axum/";

/// The end of the in-progress problem's `type`, after the release.
const IN_PROGRESS_SECTION: &str = "/idem_axum/guide/refusals/index.html#request-in-progress";

/// The largest `409` problem body read to learn its `type`; idem's are a few hundred bytes.
pub(crate) const MAX_PROBLEM: usize = 64 * 1024;

/// The header in which a server says how long it keeps a key, in whole seconds
/// (idem-axum's `IdempotencyLayer` sends it; the name the Idempotency-Key draft's
/// tracker proposes).
const IDEMPOTENCY_TTL: HeaderName = HeaderName::from_static("idempotency-ttl");

/// How the layer keys and retries: the methods it keys, the attempts and the time it may
/// spend, the backoff, the body it buffers, and the retry budget.
///
/// The defaults: `POST` and `PATCH` are keyed; at most 5 attempts within 30 s; a backoff
/// of 100 ms doubling up to 5 s, with full jitter; request bodies up to 1 MiB; tower's
/// [`TpsBudget`] default (retries up to 20 % of requests, plus 10 a second), shared by
/// every clone of the policy.
///
/// ```
/// use std::time::Duration;
/// use idem_client::RetryPolicy;
///
/// let policy = RetryPolicy::new()
///     .with_max_attempts(3)
///     .with_max_elapsed(Duration::from_secs(10));
/// # let _ = policy;
/// ```
#[derive(Clone)]
pub struct RetryPolicy {
    methods: Vec<Method>,
    max_attempts: u32,
    max_elapsed: Duration,
    base_delay: Duration,
    max_delay: Duration,
    max_body: usize,
    budget: Arc<dyn Budget + Send + Sync>,
    retention_header: Option<HeaderName>,
}

impl RetryPolicy {
    /// The default policy (see the type's docs).
    pub fn new() -> Self {
        Self {
            methods: vec![Method::POST, Method::PATCH],
            max_attempts: 5,
            max_elapsed: Duration::from_secs(30),
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(5),
            max_body: 1024 * 1024,
            budget: Arc::new(TpsBudget::default()),
            retention_header: Some(IDEMPOTENCY_TTL),
        }
    }

    /// The methods whose requests are keyed and retried (default `POST`, `PATCH`); other
    /// requests pass through untouched, sent once.
    ///
    /// ```
    /// let policy = idem_client::RetryPolicy::new().with_methods([http::Method::POST, http::Method::PUT]);
    /// # let _ = policy;
    /// ```
    pub fn with_methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.methods = methods.into_iter().collect();
        self
    }

    /// The most attempts of one request, the first included (default 5; at least 1).
    ///
    /// ```
    /// let policy = idem_client::RetryPolicy::new().with_max_attempts(3);
    /// # let _ = policy;
    /// ```
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// The longest time from the first attempt's start to the last retry's start (default
    /// 30 s): a wait that would end later is not begun, and the last answer is returned.
    ///
    /// A shorter bound holds when the server advertises one: an answer to retry that
    /// says how long the key is kept (`Idempotency-TTL`, in seconds, as idem-axum's
    /// `IdempotencyLayer` sends it on its `409` "still in progress") ends the retries
    /// before that time has passed since the first attempt began — later, the server may
    /// have forgotten the key and would run the request again.
    ///
    /// ```
    /// let policy = idem_client::RetryPolicy::new().with_max_elapsed(std::time::Duration::from_secs(5));
    /// # let _ = policy;
    /// ```
    pub fn with_max_elapsed(mut self, elapsed: Duration) -> Self {
        self.max_elapsed = elapsed;
        self
    }

    /// The backoff: the `n`th retry waits a random time between zero and
    /// `min(max, base × 2ⁿ⁻¹)` ("full jitter"), or as long as the answer's `Retry-After`
    /// asks if that is longer (defaults 100 ms and 5 s).
    ///
    /// ```
    /// use std::time::Duration;
    /// let policy = idem_client::RetryPolicy::new()
    ///     .with_backoff(Duration::from_millis(50), Duration::from_secs(2));
    /// # let _ = policy;
    /// ```
    pub fn with_backoff(mut self, base: Duration, max: Duration) -> Self {
        self.base_delay = base;
        self.max_delay = max.max(base);
        self
    }

    /// The largest request body the tower layer buffers to send again (default 1 MiB); a
    /// larger one fails with [`Error::BodyTooLarge`](crate::Error::BodyTooLarge) before
    /// anything is sent.
    ///
    /// ```
    /// let policy = idem_client::RetryPolicy::new().with_max_body(64 * 1024);
    /// # let _ = policy;
    /// ```
    pub fn with_max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// The header in which the server says how long it keeps a key, in whole seconds
    /// (default `Idempotency-TTL`, as idem-axum's `IdempotencyLayer` sends it), or `None`
    /// to read none: for a server whose layer renamed it (its `with_retention_header`).
    /// What it advertises shortens the [time allowed](Self::with_max_elapsed).
    ///
    /// ```
    /// let policy = idem_client::RetryPolicy::new()
    ///     .with_retention_header(Some(http::HeaderName::from_static("x-idempotency-ttl")));
    /// # let _ = policy;
    /// ```
    pub fn with_retention_header(mut self, name: Option<HeaderName>) -> Self {
        self.retention_header = name;
        self
    }

    /// The header the retention is read from, if any.
    pub(crate) fn retention_header(&self) -> Option<&HeaderName> {
        self.retention_header.as_ref()
    }

    /// The retry budget, shared by every clone of this policy (default: tower's
    /// [`TpsBudget::default`]): every keyed request deposits, every retry withdraws, and a
    /// retry the budget refuses is not made. It keeps a failing downstream from being
    /// sent several times its usual load.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower::retry::budget::TpsBudget;
    /// // Retries up to half the requests, plus 100 a second.
    /// let policy = idem_client::RetryPolicy::new()
    ///     .with_budget(TpsBudget::new(Duration::from_secs(10), 100, 0.5));
    /// # let _ = policy;
    /// ```
    pub fn with_budget(mut self, budget: impl Budget + Send + Sync + 'static) -> Self {
        self.budget = Arc::new(budget);
        self
    }

    /// Whether requests of `method` are keyed and retried.
    pub(crate) fn keys(&self, method: &Method) -> bool {
        self.methods.contains(method)
    }

    /// The largest request body to buffer.
    pub(crate) fn max_body(&self) -> usize {
        self.max_body
    }

    /// The attempts of one request, its first begun now.
    pub(crate) fn attempts(&self) -> Attempts<'_> {
        self.budget.deposit();
        Attempts {
            policy: self,
            started: Instant::now(),
            deadline: self.max_elapsed,
            made: 1,
        }
    }

    /// The backoff before retry number `retry` (from 1): full jitter.
    fn backoff(&self, retry: u32) -> Duration {
        let ceiling = self
            .base_delay
            .saturating_mul(2_u32.saturating_pow(retry.saturating_sub(1)))
            .min(self.max_delay);
        let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(fastrand::u64(0..=nanos))
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("methods", &self.methods)
            .field("max_attempts", &self.max_attempts)
            .field("max_elapsed", &self.max_elapsed)
            .field("base_delay", &self.base_delay)
            .field("max_delay", &self.max_delay)
            .field("max_body", &self.max_body)
            .field("retention_header", &self.retention_header)
            .finish_non_exhaustive()
    }
}

/// The attempts of one request so far, and whether another may be made.
#[derive(Debug)]
pub(crate) struct Attempts<'a> {
    policy: &'a RetryPolicy,
    started: Instant,
    /// The longest time from the first attempt's start to a retry's: the policy's, or
    /// less, the retention a server advertised.
    deadline: Duration,
    made: u32,
}

impl Attempts<'_> {
    /// The attempts made so far.
    pub(crate) fn made(&self) -> u32 {
        self.made
    }

    /// How long to wait before the next attempt, after one that may be retried and whose
    /// answer `asked` what it asked; `None` when no attempt is left, the wait would end
    /// past the time allowed (the policy's, or the key's advertised retention if shorter),
    /// or the budget refuses.
    pub(crate) fn next_delay(&mut self, asked: Asked) -> Option<Duration> {
        if let Some(retention) = asked.retention {
            self.deadline = self.deadline.min(retention);
        }
        if self.made >= self.policy.max_attempts {
            return None;
        }
        let backoff = self.policy.backoff(self.made);
        let delay = asked.wait.map_or(backoff, |after| after.max(backoff));
        if self.started.elapsed() + delay > self.deadline {
            if self.deadline < self.policy.max_elapsed {
                tracing::debug!(
                    retention = ?self.deadline,
                    "idem-client: a retry would come after the key's advertised retention; \
                     the answer stands"
                );
            }
            return None;
        }
        if !self.policy.budget.withdraw() {
            tracing::debug!("idem-client: the retry budget is spent; the answer stands");
            return None;
        }
        self.made += 1;
        Some(delay)
    }
}

/// What one attempt came to.
pub(crate) enum Judged<R, E> {
    /// The request's outcome.
    Final(R),
    /// An answer to retry after the wait it asks for, or to return if no retry is left.
    Retry(R, Asked),
    /// No answer (or one that could not be read): retried, or returned as the error.
    Failed(E),
}

/// Makes the attempts of one keyed request with `attempt` until one is final or the
/// policy allows no more; returns the last outcome, its error with the attempts made.
pub(crate) async fn keep_trying<R, E, F, Fut>(
    policy: &RetryPolicy,
    mut attempt: F,
) -> Result<R, (E, u32)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Judged<R, E>>,
{
    let mut attempts = policy.attempts();
    loop {
        let (outcome, asked) = match attempt().await {
            Judged::Final(answer) => return Ok(answer),
            Judged::Retry(answer, asked) => (Ok(answer), asked),
            Judged::Failed(error) => (Err(error), Asked::default()),
        };
        let Some(delay) = attempts.next_delay(asked) else {
            return outcome.map_err(|error| (error, attempts.made()));
        };
        tracing::debug!(
            attempt = attempts.made(),
            ?delay,
            "idem-client: retrying a keyed request"
        );
        tokio::time::sleep(delay).await;
    }
}

/// What an answer means for the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The request's outcome: returned to the caller.
    Final,
    /// The downstream did not take the request, or has not finished it: send it again,
    /// as the answer asks.
    Retry(Asked),
    /// A `409` problem: its body says which (read it, then [`in_progress_problem`]).
    ReadProblem,
}

/// What an answer of `status` with `headers` means: a `503` is retried; a `409` is
/// retried when it says the first attempt with the key is still running — idem's problem
/// of that `type`, or a `409` that is not a problem document and carries `Retry-After`
/// (the answer the Idempotency-Key draft gives a concurrent request); any other answer is
/// final.
pub(crate) fn verdict(
    status: StatusCode,
    headers: &HeaderMap,
    retention: Option<&HeaderName>,
) -> Verdict {
    let asked = || Asked::by(headers, SystemTime::now(), retention);
    match status {
        StatusCode::SERVICE_UNAVAILABLE => Verdict::Retry(asked()),
        StatusCode::CONFLICT if is_problem(headers) => Verdict::ReadProblem,
        StatusCode::CONFLICT if headers.contains_key(RETRY_AFTER) => Verdict::Retry(asked()),
        _ => Verdict::Final,
    }
}

/// Whether a `409` problem body is idem's "still in progress".
pub(crate) fn in_progress_problem(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Problem {
        r#type: Option<String>,
    }
    serde_json::from_slice::<Problem>(body)
        .is_ok_and(|problem| problem.r#type.as_deref().is_some_and(is_idem_in_progress))
}

/// Whether `type_uri` is idem's in-progress problem, as any release of idem-axum names it:
/// a server need not run the release this client was built with.
fn is_idem_in_progress(type_uri: &str) -> bool {
    type_uri
        .strip_prefix(IDEM_REFUSALS)
        .and_then(|rest| rest.strip_suffix(IN_PROGRESS_SECTION))
        .is_some_and(|release| !release.is_empty() && !release.contains('/'))
}

/// Whether the answer is an RFC 9457 problem document.
fn is_problem(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|media| {
            media
                .trim()
                .eq_ignore_ascii_case("application/problem+json")
        })
}

/// What an answer to retry asks of the retries: a wait, and how long its key is kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Asked {
    /// The wait `Retry-After` asks for.
    pub(crate) wait: Option<Duration>,
    /// The key's retention the server advertised (`Idempotency-TTL`, or the policy's
    /// [header](RetryPolicy::with_retention_header)).
    pub(crate) retention: Option<Duration>,
}

impl Asked {
    /// What an answer with `headers` asks at `now`, its retention read from `retention`.
    pub(crate) fn by(headers: &HeaderMap, now: SystemTime, retention: Option<&HeaderName>) -> Self {
        Self {
            wait: retry_after(headers, now),
            retention: retention
                .and_then(|name| seconds(headers, name))
                .map(Duration::from_secs),
        }
    }
}

/// The wait `Retry-After` asks for at `now`: whole seconds, or an HTTP date (a date past
/// is no wait); `None` when absent or unreadable.
fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    if let Some(secs) = seconds(headers, &RETRY_AFTER) {
        return Some(Duration::from_secs(secs));
    }
    let date = httpdate::parse_http_date(headers.get(RETRY_AFTER)?.to_str().ok()?.trim()).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The value of the field `name` as whole seconds (delta-seconds); `None` when absent or
/// not a number.
fn seconds(headers: &HeaderMap, name: &HeaderName) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(name, value)| {
                (
                    http::HeaderName::from_static(name),
                    HeaderValue::from_static(value),
                )
            })
            .collect()
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        let wait = |value| retry_after(&headers(&[("retry-after", value)]), now);
        assert_eq!(wait("3"), Some(Duration::from_secs(3)));
        assert_eq!(wait(" 0 "), Some(Duration::ZERO));
        assert_eq!(
            wait("Sun, 06 Nov 1994 08:49:47 GMT"),
            Some(Duration::from_secs(10))
        );
        assert_eq!(wait("Sun, 06 Nov 1994 08:49:00 GMT"), Some(Duration::ZERO));
        assert_eq!(wait("soon"), None);
        assert_eq!(wait("-1"), None);
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }

    #[test]
    fn only_503_and_a_409_in_progress_are_retried() {
        let none = HeaderMap::new();
        assert_eq!(
            verdict(
                StatusCode::SERVICE_UNAVAILABLE,
                &none,
                Some(&IDEMPOTENCY_TTL)
            ),
            Verdict::Retry(Asked::default())
        );
        for status in [
            StatusCode::OK,
            StatusCode::CREATED,
            StatusCode::INTERNAL_SERVER_ERROR,
            StatusCode::BAD_GATEWAY,
            StatusCode::UNPROCESSABLE_ENTITY,
            StatusCode::CONFLICT,
        ] {
            assert_eq!(
                verdict(status, &none, Some(&IDEMPOTENCY_TTL)),
                Verdict::Final,
                "{status}"
            );
        }
        let plain = headers(&[("retry-after", "2")]);
        assert_eq!(
            verdict(StatusCode::CONFLICT, &plain, Some(&IDEMPOTENCY_TTL)),
            Verdict::Retry(Asked {
                wait: Some(Duration::from_secs(2)),
                retention: None
            })
        );
        let problem = headers(&[
            ("content-type", "application/problem+json; charset=utf-8"),
            ("retry-after", "1"),
        ]);
        assert_eq!(
            verdict(StatusCode::CONFLICT, &problem, Some(&IDEMPOTENCY_TTL)),
            Verdict::ReadProblem
        );
    }

    #[test]
    fn only_idem_s_in_progress_problem_is_in_progress() {
        let problem = |kind: &str| {
            format!(
                r#"{{"type":"https://docs.rs/idem-axum/0.4.2/idem_axum/guide/refusals/index.html#{kind}","status":409}}"#
            )
        };
        assert!(in_progress_problem(
            problem("request-in-progress").as_bytes()
        ));
        // The `type` the idem-axum beside this crate gives.
        let server = idem_axum::RejectionKind::IdempotentRequestInProgress.type_uri();
        assert!(is_idem_in_progress(server), "{server}");
        // The section of another crate's page, or a page without a release, is not idem's.
        for other in [
            "https://docs.rs/other/0.1.0/idem_axum/guide/refusals/index.html#request-in-progress",
            "https://docs.rs/idem-axum//idem_axum/guide/refusals/index.html#request-in-progress",
            "https://docs.rs/idem-axum/0.1.0/idem_axum/guide/refusals/index.html#request-in-progress-x",
        ] {
            let body = format!(r#"{{"type":"{other}","status":409}}"#);
            assert!(!in_progress_problem(body.as_bytes()), "{other}");
        }
        // An avoid-repeat window refused: retrying it when the window ends would run the
        // request again.
        assert!(!in_progress_problem(
            problem("duplicate-request").as_bytes()
        ));
        assert!(!in_progress_problem(
            problem("response-not-replayable").as_bytes()
        ));
        assert!(!in_progress_problem(b"{}"));
        assert!(!in_progress_problem(b"not json"));
    }

    #[test]
    fn the_backoff_is_full_jitter_under_a_doubling_ceiling() {
        let policy = RetryPolicy::new()
            .with_backoff(Duration::from_millis(100), Duration::from_millis(1000));
        for (retry, ceiling) in [
            (1, 100),
            (2, 200),
            (3, 400),
            (4, 800),
            (5, 1000),
            (40, 1000),
        ] {
            let waits: Vec<_> = (0..200).map(|_| policy.backoff(retry)).collect();
            assert!(
                waits.iter().all(|w| *w <= Duration::from_millis(ceiling)),
                "retry {retry}: {waits:?}"
            );
            // Jittered: not one fixed wait (200 draws from a range of nanoseconds).
            assert!(waits.iter().any(|w| *w != waits[0]), "retry {retry}");
        }
    }

    #[test]
    fn attempts_stop_at_the_limit_the_deadline_or_the_budget() {
        let policy = RetryPolicy::new()
            .with_max_attempts(3)
            .with_backoff(Duration::ZERO, Duration::ZERO);
        let mut attempts = policy.attempts();
        let nothing = Asked::default();
        assert_eq!(attempts.next_delay(nothing), Some(Duration::ZERO));
        assert_eq!(attempts.next_delay(nothing), Some(Duration::ZERO));
        assert_eq!(attempts.next_delay(nothing), None);
        assert_eq!(attempts.made(), 3);

        let policy = RetryPolicy::new().with_max_elapsed(Duration::from_secs(2));
        let mut attempts = policy.attempts();
        assert_eq!(attempts.next_delay(wait(3)), None);
        assert_eq!(
            attempts.next_delay(wait(1)),
            Some(Duration::from_secs(1)),
            "the wait asked for, longer than the backoff"
        );

        let policy = RetryPolicy::new().with_budget(TpsBudget::new(Duration::from_secs(1), 0, 0.0));
        assert_eq!(policy.attempts().next_delay(wait(0)), None);
    }

    /// An answer asking for a wait of `secs`.
    fn wait(secs: u64) -> Asked {
        Asked {
            wait: Some(Duration::from_secs(secs)),
            retention: None,
        }
    }

    #[test]
    fn an_advertised_retention_shortens_the_time_allowed_for_good() {
        let asked = Asked::by(
            &headers(&[("retry-after", "1"), ("idempotency-ttl", " 2 ")]),
            SystemTime::now(),
            Some(&IDEMPOTENCY_TTL),
        );
        assert_eq!(asked.retention, Some(Duration::from_secs(2)));
        let policy = RetryPolicy::new().with_backoff(Duration::ZERO, Duration::ZERO);
        let mut attempts = policy.attempts();
        assert_eq!(attempts.next_delay(asked), Some(Duration::from_secs(1)));
        // Within the policy's 30 s, past the key's 2 s: and an answer that no longer
        // carries the retention does not lift it.
        assert_eq!(attempts.next_delay(wait(2)), None);
        assert_eq!(attempts.next_delay(wait(1)), Some(Duration::from_secs(1)));

        // A retention longer than the policy's bound leaves that bound.
        let long = headers(&[("retry-after", "31"), ("idempotency-ttl", "86400")]);
        let mut attempts = policy.attempts();
        assert_eq!(
            attempts.next_delay(Asked::by(&long, SystemTime::now(), Some(&IDEMPOTENCY_TTL))),
            None
        );
        // Unreadable: ignored.
        let odd = headers(&[("idempotency-ttl", "a day")]);
        assert_eq!(
            Asked::by(&odd, SystemTime::now(), Some(&IDEMPOTENCY_TTL)).retention,
            None
        );
    }

    /// A policy reads the retention from the header it is told, and from that one only;
    /// told none, it reads none.
    #[test]
    fn the_retention_is_read_from_the_policys_header() {
        let renamed = HeaderName::from_static("x-idempotency-ttl");
        let policy = RetryPolicy::new().with_retention_header(Some(renamed.clone()));
        let answer = headers(&[("x-idempotency-ttl", "2"), ("idempotency-ttl", "9")]);
        let asked = verdict(
            StatusCode::SERVICE_UNAVAILABLE,
            &answer,
            policy.retention_header(),
        );
        let Verdict::Retry(asked) = asked else {
            panic!("a 503 is retried: {asked:?}");
        };
        assert_eq!(asked.retention, Some(Duration::from_secs(2)));
        let deaf = RetryPolicy::new().with_retention_header(None);
        let asked = Asked::by(&answer, SystemTime::now(), deaf.retention_header());
        assert_eq!(asked.retention, None);
        let default = RetryPolicy::new();
        let asked = Asked::by(&answer, SystemTime::now(), default.retention_header());
        assert_eq!(asked.retention, Some(Duration::from_secs(9)));
    }
}
