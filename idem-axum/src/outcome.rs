//! What a guard decided for one request, reported the same way by every guard: a
//! `tracing` span per guarded request, one event per decision at the level the decision
//! deserves, and — with the feature `metrics` — counters and a latency histogram through
//! the [`metrics`](https://docs.rs/metrics) facade. What goes wrong for one request (a
//! store failure, a refusal for `busy`) is a warning or an error written at most once
//! every 10 seconds per place in the code, with how many went unwritten since
//! (`idem_core::throttled`, the production guide's [logs](crate::guide::production#logs));
//! the counters count every one.
//!
//! | name | kind | labels |
//! |---|---|---|
//! | `idem_outcomes_total` | counter | `guard` (`avoid_repeat`, `form_token`, `idempotency`), `route`, `outcome` |
//! | `idem_store_seconds` | histogram | `guard`: the decisive store operation's latency (not by route: the store answers every route alike, and per route the histogram's bucket series would multiply) |
//! | `idem_store_errors_total` | counter | `policy` (`fail_closed`, `fail_open`) |
//! | `idem_unadmitted_total` | counter | `reason` (`busy`, `shutting_down`): guarded requests the runtime did not let in |
//! | `idem_detached_handlers` | gauge | —: guarded handlers running on after their client went away |
//! | `idem_lock_waits_total`, `idem_lock_handoffs_total` | counter | — (from `idem-core`, its own feature `metrics`) |
//! | `idem_lock_losses_total` | counter | `reason` (`not_held`, `expired`): held locks whose watchdog found them lost (`idem-core`) |
//! | `idem_replay_cache_hits_total` | counter | —: replays a `RedisStore` answered from its in-process copy (`idem-redis`, its own feature `metrics`, on with this one) |
//!
//! The `route` label has a bounded set of values, never the path a request asked for
//! (`/orders/1`, `/orders/2`, ...: as many as there are ids):
//!
//! - the path pattern of the route the request matched, as axum's `MatchedPath` has it:
//!   `/orders/{id}`, in full under `nest` (`/api/orders/{id}`);
//! - for a gRPC call, its method path (`/shop.Orders/Place`);
//! - for `#[avoid_repeat]`, the handler's name (`shop::orders::place`), which its window
//!   is keyed by;
//! - `unmatched` for a request that matched no route yet: a layer wrapped around a router
//!   as a service (`Layer::layer(router)`, a `ServiceBuilder`, a fallback service) runs
//!   before routing. Install the layer with `Router::route_layer`, `Router::layer` or on
//!   the route's method router to have its routes;
//! - `other` past the first 1,000 distinct routes of the process, so that a service with
//!   unbounded method paths cannot multiply the series.
//!
//! Each route's text is kept once for the process and shared by its labels: a report
//! allocates nothing for it.
//!
//! Building the runtime registers the counters of rare events (store errors, refused
//! admissions, the lock's) and the gauge at zero, so that they are exported before the
//! first event; outcomes and latencies are exported from the first guarded request on.
//!
//! Give `idem_store_seconds` buckets in your exporter, so that it is exported as a
//! histogram, whose buckets add up across instances, rather than as a summary: the
//! [production checklist](crate::guide::production#metrics-and-alerts) has buckets and
//! alerts.

use std::fmt;
use std::time::Duration;

use axum::extract::MatchedPath;
use tracing::Span;
use tracing::field::Empty;

use crate::identity::{ClientId, ClientRequest};

/// The guard that decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Guard {
    AvoidRepeat,
    FormToken,
    Idempotency,
}

impl Guard {
    fn as_str(self) -> &'static str {
        match self {
            Self::AvoidRepeat => "avoid_repeat",
            Self::FormToken => "form_token",
            Self::Idempotency => "idempotency",
        }
    }
}

/// What the guard decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The request runs: a key taken, a token spent, a record begun.
    Accepted,
    /// A form token was issued.
    Issued,
    /// A repeat inside its window, or a token unknown, spent or another client's.
    Duplicate,
    /// A stored response was given again.
    Replayed,
    /// A retry met its first attempt still running.
    Conflict,
    /// A key sent again with another request.
    Mismatch,
    /// A required key or token is missing.
    Missing,
    /// A key that is malformed.
    Invalid,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::Issued => "issued",
            Self::Duplicate => "duplicate",
            Self::Replayed => "replayed",
            Self::Conflict => "conflict",
            Self::Mismatch => "mismatch",
            Self::Missing => "missing",
            Self::Invalid => "invalid",
        }
    }
}

/// The `route` label of a request that matched no route: a layer wrapped around a router
/// as a service (`Layer::layer(router)`, a `ServiceBuilder`, a router's fallback service)
/// runs before routing, so it sees none. Installed with `Router::route_layer`,
/// `Router::layer` or on a route's method router, it runs after routing and sees the
/// route's pattern.
#[cfg(feature = "metrics")]
pub(crate) const UNMATCHED: &str = "unmatched";

/// The `route` label of the routes past the first [`MAX_ROUTES`] distinct ones.
#[cfg(feature = "metrics")]
pub(crate) const OTHER: &str = "other";

/// How many distinct routes are labelled as they are; the rest are counted as [`OTHER`].
#[cfg(feature = "metrics")]
pub(crate) const MAX_ROUTES: usize = 1000;

/// The route a request matched, bounded as a metric label must be: a gRPC call's method
/// path (`/shop.Orders/Place`), else the path pattern of the router's route
/// (`/orders/{id}`, in full under `nest`); `None` before routing. Never the path requested,
/// of which there are as many as there are ids.
pub(crate) fn matched_route<'a>(request: &ClientRequest<'a>) -> Option<&'a str> {
    #[cfg(feature = "grpc")]
    if let Some(path) = crate::grpc::method_path(request.headers(), request.uri().path()) {
        return Some(path);
    }
    request
        .extensions()
        .get::<MatchedPath>()
        .map(MatchedPath::as_str)
}

/// The guard and the route one request's outcomes are reported under: made where the
/// request's span is, and asked for each of its reports. Without the feature `metrics` it
/// is the guard alone.
#[derive(Debug, Clone)]
pub(crate) struct Reporter {
    guard: Guard,
    /// The `route` label, shared, not copied, by every report ([`route_label`]).
    #[cfg(feature = "metrics")]
    route: metrics::SharedString,
}

impl Reporter {
    /// The reporter of a request to `guard`, under the route it matched
    /// ([`matched_route`]), or [`UNMATCHED`].
    pub(crate) fn of(guard: Guard, request: &ClientRequest<'_>) -> Self {
        #[cfg(not(feature = "metrics"))]
        let _ = request;
        Self {
            guard,
            #[cfg(feature = "metrics")]
            route: route_label(matched_route(request)),
        }
    }

    /// The reporter of a request to `guard` under `route`, a name the code fixed: an
    /// annotated handler's.
    pub(crate) fn named(guard: Guard, route: &'static str) -> Self {
        #[cfg(not(feature = "metrics"))]
        let _ = route;
        Self {
            guard,
            #[cfg(feature = "metrics")]
            route: metrics::SharedString::const_str(route),
        }
    }

    /// The span of the request on `route` (as the span names it: it may be the path
    /// requested, which the metrics never name), for `client` (hashed: the span names no
    /// one). Its `idem.outcome` and `idem.store_us` are recorded as the guard decides.
    pub(crate) fn span(&self, route: &str, client: Option<&ClientId>) -> Span {
        let span = tracing::info_span!(
            "idem",
            idem.guard = self.guard.as_str(),
            idem.route = route,
            idem.client = Empty,
            idem.outcome = Empty,
            idem.store_us = Empty,
        );
        if let Some(client) = client {
            record_client(&span, client);
        }
        span
    }

    /// Reports `outcome`: a repeat, a replay, a conflict or a mismatch at `info` (they are
    /// what an operator looks for), the rest at `debug`.
    pub(crate) fn report(&self, outcome: Outcome) {
        let (guard_name, outcome_name) = (self.guard.as_str(), outcome.as_str());
        match outcome {
            Outcome::Duplicate | Outcome::Replayed | Outcome::Conflict | Outcome::Mismatch => {
                tracing::info!(
                    idem.guard = guard_name,
                    idem.outcome = outcome_name,
                    "idem: {guard_name}: {outcome_name}"
                );
            }
            _ => tracing::debug!(
                idem.guard = guard_name,
                idem.outcome = outcome_name,
                "idem: {guard_name}: {outcome_name}"
            ),
        }
        Span::current().record("idem.outcome", outcome_name);
        #[cfg(feature = "metrics")]
        metrics::counter!(
            "idem_outcomes_total",
            "guard" => guard_name,
            "route" => self.route.clone(),
            "outcome" => outcome_name
        )
        .increment(1);
    }

    /// Reports how long the guard's decisive store operation took. By guard alone: the
    /// store answers every route alike, and a histogram per route would multiply its
    /// bucket series by the routes.
    pub(crate) fn store_latency(&self, took: Duration) {
        Span::current().record(
            "idem.store_us",
            u64::try_from(took.as_micros()).unwrap_or(u64::MAX),
        );
        #[cfg(feature = "metrics")]
        metrics::histogram!("idem_store_seconds", "guard" => self.guard.as_str())
            .record(took.as_secs_f64());
    }
}

/// The `route` label of `route`, without copying its text per request: each distinct
/// route's text is kept once, for the process, and shared by every label of it. `None`
/// (no route matched) is [`UNMATCHED`]; a route past the first [`MAX_ROUTES`] is
/// [`OTHER`], so that the series stay bounded whatever routes a service has.
#[cfg(feature = "metrics")]
fn route_label(route: Option<&str>) -> metrics::SharedString {
    use std::collections::HashSet;
    use std::sync::{Arc, LazyLock, PoisonError, RwLock};

    static ROUTES: LazyLock<RwLock<HashSet<Arc<str>>>> = LazyLock::new(RwLock::default);

    let Some(route) = route else {
        return metrics::SharedString::const_str(UNMATCHED);
    };
    let known = ROUTES.read().unwrap_or_else(PoisonError::into_inner);
    if let Some(label) = known.get(route) {
        return Arc::clone(label).into();
    }
    drop(known);
    let mut routes = ROUTES.write().unwrap_or_else(PoisonError::into_inner);
    if let Some(label) = routes.get(route) {
        return Arc::clone(label).into();
    }
    if routes.len() >= MAX_ROUTES {
        return metrics::SharedString::const_str(OTHER);
    }
    let label: Arc<str> = route.into();
    routes.insert(Arc::clone(&label));
    label.into()
}

/// Records `client` on `span`, hashed: the span names no one.
pub(crate) fn record_client(span: &Span, client: &ClientId) {
    span.record("idem.client", tracing::field::display(Hashed(client)));
}

/// A client as the first 12 hex digits of its hash, which a subscriber that records the
/// span formats.
struct Hashed<'a>(&'a ClientId);

impl fmt::Display for Hashed<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hashed = idem_core::Key::hashed([b"client".as_slice(), self.0.as_bytes()]);
        let hashed = hashed.as_str();
        f.write_str(&hashed[..12.min(hashed.len())])
    }
}

/// Reports a guarded request the runtime did not let in, for `reason`: `busy` (more
/// detached handlers than its limit) or `shutting_down` (it drains).
pub(crate) fn unadmitted(reason: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("idem_unadmitted_total", "reason" => reason).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = reason;
}

/// Registers the series that count rare events at zero, for a runtime being built: store
/// failures, refused admissions, detached handlers and the lock's counters exist from the
/// start, so that a dashboard shows 0 rather than no data, and `rate()` has a first sample
/// when the first event comes. Outcomes and latencies come with the first guarded request.
pub(crate) fn register_series() {
    #[cfg(feature = "metrics")]
    {
        for policy in ["fail_closed", "fail_open"] {
            metrics::counter!("idem_store_errors_total", "policy" => policy).increment(0);
        }
        for reason in ["busy", "shutting_down"] {
            metrics::counter!("idem_unadmitted_total", "reason" => reason).increment(0);
        }
        // Not set: another runtime of the process may have detached handlers.
        metrics::gauge!("idem_detached_handlers").increment(0.0);
        // idem-core's, which counts them as they happen.
        metrics::counter!("idem_lock_waits_total").increment(0);
        metrics::counter!("idem_lock_handoffs_total").increment(0);
        for reason in ["not_held", "expired"] {
            metrics::counter!("idem_lock_losses_total", "reason" => reason).increment(0);
        }
    }
}

/// Reports a store failure and what the policy made of it.
pub(crate) fn store_error(failing_open: bool) {
    #[cfg(feature = "metrics")]
    metrics::counter!(
        "idem_store_errors_total",
        "policy" => if failing_open { "fail_open" } else { "fail_closed" }
    )
    .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = failing_open;
}
