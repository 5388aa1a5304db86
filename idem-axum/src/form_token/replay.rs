//! A spent form token as an idempotency key
//! ([`VerifyFormTokenLayer::with_replay`](super::VerifyFormTokenLayer::with_replay)): the
//! first submission's response is kept for the token's life and given again to every
//! later post of the same token by the same client to the same route.
//!
//! The submission's record is begun *before* the token is spent, so that of a double
//! click's two posts exactly one begins it: the other finds it in progress, waits for it,
//! and replays its response — the page the first click produced — whichever of the two
//! the browser is still waiting for. A submission that fails (a 5xx, a panic) gives its
//! token back before its record is removed: the waiting post, or a later one, then runs
//! it again, still one at a time.

use std::future::{Future, ready};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::response::Response;
use futures_util::FutureExt;
use futures_util::future::Either;
use http::HeaderMap;
use idem_core::{Fingerprint, Key, Store, StoreError, throttled};
use tokio::time::Instant;

use super::extract::TokenKeys;
use super::layer::{
    Check, SUBMISSION, Spent, Submission, Submitted, check, refused_token, rotate, with_rotated,
};
use super::submission::FormSubmission;
use crate::future::Inner;
use crate::guard::GuardContext;
use crate::idempotency::{self, Began, Record, Spending, record_key, replay, tag};
use crate::identity::ClientRequest;
use crate::outcome::{Outcome, Reporter};
use crate::rejection::{Rejection, RejectionKind};

/// How long a repeat waits for the first submission of its token to finish.
const WAIT_FOR_FIRST: Duration = Duration::from_secs(5);

/// How long a waiting repeat pauses before it looks again when the store could not wait
/// for the record (an error).
const LOOK_AGAIN: Duration = Duration::from_millis(20);

impl<S: Inner, St: Store + Clone> Submission<S, St> {
    /// Answers a post of `token`: the first runs the handler, its repeats replay its
    /// response.
    ///
    /// Two steps chained, not nested: what the post comes to ([`decide`](Self::decide)),
    /// then the handler's run if it is the first. Each step's future holds the submission
    /// and the request once, and the answer is the larger of the two, not their sum
    /// (`layer::tests::the_per_request_futures_stay_small`).
    pub(super) fn answer_with_replay(
        self,
        request: Request,
        token: String,
    ) -> impl Future<Output = Result<Response, S::Error>> + Send + 'static {
        self.decide(request, token).then(|decided| match decided {
            Decided::Answered(response) => Either::Left(ready(Ok(response))),
            Decided::Unguarded(mut inner, request) => {
                Either::Right(Either::Left(inner.call(request)))
            }
            Decided::First(first) => Either::Right(Either::Right(first.run())),
        })
    }

    /// Begins the post's record (or finds it), then spends its token (or looks at it).
    async fn decide(self, mut request: Request, token: String) -> Decided<S, St> {
        let kept = self.settings.kept(self.config.ttl());
        let view = ClientRequest::from_request(&request);
        let key = record_key(
            &self.guard,
            tag::FORM_SUBMISSION,
            Some(&self.client),
            &view,
            &token,
        );
        // Back into `request`, a parameter, which the future holds already: a binding of
        // its own would be a second request in it.
        let fingerprint = match self.settings.read_fingerprint(request) {
            Submitted::TokenAlone(unread) => {
                request = unread;
                *SUBMISSION
            }
            Submitted::Read(reading) => match reading.await {
                Ok((read, fingerprint)) => {
                    request = read;
                    fingerprint
                }
                Err(rejection) => return Decided::Answered(self.guard.refuse(rejection)),
            },
        };
        let headers = request.headers();
        let begun = begin_or_wait(
            &self.store,
            &self.guard,
            &self.reporter,
            &key,
            &fingerprint,
            &kept,
            headers,
        );
        let record = match begun.await {
            Ok(Began::First(record)) => record,
            Ok(Began::Completed(stored)) => {
                let replayed = replay(
                    &self.guard,
                    &kept,
                    &self.reporter,
                    &stored,
                    request.headers(),
                );
                return Decided::Answered(replayed);
            }
            Ok(Began::InProgress(remaining)) => {
                self.reporter.report(Outcome::Conflict);
                return Decided::Answered(self.guard.refuse(still_running(remaining)));
            }
            Ok(Began::Mismatch) => {
                self.reporter.report(Outcome::Mismatch);
                return Decided::Answered(self.guard.refuse(submitted_otherwise()));
            }
            // A post whose record the store could not begin: refused, or, failing open,
            // run unverified, as a post whose token the store cannot spend is.
            Err(error) => {
                return match self
                    .guard
                    .on_store_error(&error, "form submission not recorded")
                {
                    Err(refusal) => Decided::Answered(refusal),
                    Ok(()) => Decided::Unguarded(self.inner, request),
                };
            }
        };
        let how = match self.settings.spend_in_transaction {
            true => Check::Look,
            false => Check::Spend,
        };
        let keys = TokenKeys::of_posted(&self.guard, &self.client, &token);
        let checked = check(&self.store, &self.guard, &self.reporter, keys.as_ref(), how).await;
        // Decided before the record is abandoned, so that what the check gave is not
        // held while it is.
        let refusal = match (checked, keys) {
            (Ok(Spent::Yes), Some(keys)) => {
                return Decided::First(First {
                    submission: self,
                    record,
                    request,
                    keys,
                    how,
                });
            }
            // Failing open, as without replay: nothing was spent, nothing is kept.
            (Ok(Spent::Unknown), _) => None,
            (Ok(Spent::No | Spent::Yes), _) => Some(refused_token(&self.settings)),
            (Err(rejection), _) => Some(rejection),
        };
        record.abandon().await;
        match refusal {
            Some(refusal) => Decided::Answered(self.guard.refuse(refusal)),
            None => Decided::Unguarded(self.inner, request),
        }
    }
}

/// What a post comes to before its handler runs.
#[cfg_attr(
    feature = "metrics",
    expect(
        clippy::large_enum_variant,
        reason = "moved straight to its step, never held: boxing the first post would cost \
                  every post an allocation; the route's label tips it over the lint's bound"
    )
)]
enum Decided<S, St: Store> {
    /// An answer without the handler: a replay, a refusal.
    Answered(Response),
    /// The handler's, unguarded: the store failed and the runtime fails open.
    Unguarded(S, Request),
    /// The first post of its token, which runs the handler.
    First(First<S, St>),
}

/// The first post of a token: its record begun, its token spent (or, the handler spending
/// it in its own transaction, seen live).
struct First<S, St: Store> {
    submission: Submission<S, St>,
    record: Record<St>,
    request: Request,
    keys: TokenKeys,
    how: Check,
}

impl<S: Inner, St: Store + Clone> First<S, St> {
    /// Runs the handler: its response is kept, or, if it fails, the token spent before it
    /// ran is given back before its record goes. With rotation, the fresh token is issued
    /// first, in a future boxed apart (rotation is off by default).
    fn run(self) -> impl Future<Output = Result<Response, S::Error>> + Send + 'static {
        let Self {
            submission,
            record,
            mut request,
            keys,
            how,
        } = self;
        if how == Check::Look {
            request.extensions_mut().insert(FormSubmission::new(
                record.handle().clone(),
                &keys,
                &submission.guard,
                &submission.settings,
            ));
        }
        let record = record.spending(SubmittedToken::new(&submission, keys, how));
        if !submission.settings.rotation {
            // In place: the whole answer already runs in a task of its own when it has to.
            return Either::Left(record.run_in_place(submission.inner, request));
        }
        Either::Right(Box::pin(async move {
            let Submission {
                guard,
                client,
                reporter,
                config,
                settings,
                inner,
                ..
            } = submission;
            let (request, rotated) =
                rotate(&guard, &client, &reporter, &config, &settings, request).await;
            let response = record.run_in_place(inner, request).await?;
            Ok(with_rotated(response, &config, rotated))
        }))
    }
}

/// Begins the submission's record, or finds it; while an earlier post of the token
/// still runs, waits for its record to end ([`wait_for_record`](idem_core::RecordStore::wait_for_record),
/// which its completion or failure wakes) and looks again, until the wait is over.
///
/// An `async` block, which holds its arguments once, where an `async fn` would hold them
/// twice (`layer::tests::the_per_request_futures_stay_small`).
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn's future would hold its arguments twice"
)]
fn begin_or_wait<'a, St: Store + Clone>(
    store: &'a St,
    guard: &'a GuardContext,
    reporter: &'a Reporter,
    key: &'a Key,
    fingerprint: &'a Fingerprint,
    kept: &'a Arc<idempotency::Settings>,
    request: &'a HeaderMap,
) -> impl Future<Output = Result<Began<St>, StoreError>> + 'a {
    async move {
        let deadline = Instant::now() + WAIT_FOR_FIRST;
        loop {
            let began = Record::begin_on(
                store.clone(),
                guard,
                reporter,
                key,
                fingerprint,
                kept,
                request,
            )
            .await;
            let Ok(Began::InProgress(remaining)) = began else {
                return began;
            };
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return began;
            };
            if left.is_zero() {
                return began;
            }
            // Boxed: a repeat that waits is rare, and the wait's future inline would size
            // every post's (`layer::tests::the_per_request_futures_stay_small`).
            Box::pin(wait_for_first(store, key, remaining.min(left))).await;
        }
    }
}

/// Waits for the first submission's record to end, for at most `within`; a wait the
/// store cannot make (an error) is a pause of [`LOOK_AGAIN`] instead.
async fn wait_for_first<St: Store>(store: &St, key: &Key, within: Duration) {
    if store.wait_for_record(key, within).await.is_err() {
        tokio::time::sleep(LOOK_AGAIN.min(within)).await;
    }
}

/// The token of a submission: spent before the handler ran, to give back if it fails
/// (stored again for the token's life, under the same client); or left to the handler, to
/// spend once the layer stored the response if the handler did not.
struct SubmittedToken<St> {
    store: St,
    keys: TokenKeys,
    ttl: Duration,
    keep: usize,
    how: Check,
}

impl<St: Clone> SubmittedToken<St> {
    fn new<S>(submission: &Submission<S, St>, keys: TokenKeys, how: Check) -> Self {
        Self {
            store: submission.store.clone(),
            keys,
            ttl: submission.config.ttl(),
            keep: submission.config.tokens_per_client(),
            how,
        }
    }
}

impl<St: Store> Spending for SubmittedToken<St> {
    fn give_back(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            if self.how == Check::Look {
                return; // nothing was spent: the handler's transaction rolled back
            }
            let stored =
                self.store
                    .put_token(&self.keys.scope, &self.keys.token, self.ttl, self.keep);
            if let Err(error) = stored.await {
                throttled::warn!(%error, "idem: a failed submission's form token stays spent");
            }
        })
    }

    fn spend_late(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            if self.how == Check::Spend {
                return; // spent before the handler ran
            }
            throttled::warn!(
                "idem: a form submission's handler left its record to the layer, so its token \
                 is spent after its transaction, not in it; complete the record with the \
                 token through `FormSubmission`"
            );
            if let Err(error) = self
                .store
                .consume_token(&self.keys.scope, &self.keys.token)
                .await
            {
                throttled::warn!(%error, "idem: a submission's form token could not be spent; it lapses with its TTL");
            }
        })
    }
}

/// The answer to a repeat whose first submission still runs after the wait.
fn still_running(remaining: Duration) -> Rejection {
    Rejection::new(
        RejectionKind::IdempotentRequestInProgress,
        "this form's first submission is still being processed; reload the page in a moment",
    )
    .with_retry_after(remaining.min(Duration::from_secs(1)))
}

/// The answer to a repeat of a token whose body differs, in what counts, from the first
/// submission's ([`with_payload_fingerprint`](super::VerifyFormTokenLayer::with_payload_fingerprint)).
fn submitted_otherwise() -> Rejection {
    Rejection::new(
        RejectionKind::IdempotencyKeyReused,
        "this form was already submitted with other values; reload the page and submit it again",
    )
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::body::Body;
    use axum::routing::{get, post};
    use http::{HeaderName, Request, StatusCode};
    use tower::ServiceExt;

    use super::super::extract::HASHED;
    use crate::identity::ClientHeader;
    use crate::{FormToken, FormTokenConfig, Idem, VerifyFormTokenLayer};

    /// The first post of a token, kept for replay, hashes the token's keys once: for the
    /// check that spends it and for what gives it back if the handler fails.
    #[tokio::test]
    async fn a_post_hashes_its_token_once() {
        const CLIENT: HeaderName = HeaderName::from_static("x-client");
        let idem = Idem::builder()
            .with_client_identity(ClientHeader::new(CLIENT))
            .build();
        let app = Router::new()
            .route(
                "/form",
                get(|token: FormToken| async move { token.value().to_owned() }),
            )
            .route(
                "/order",
                post(|| async { "placed" })
                    .route_layer(VerifyFormTokenLayer::new().with_replay(true)),
            )
            .layer(idem.layer());
        let page = Request::get("/form")
            .header(&CLIENT, "alice")
            .body(Body::empty());
        let page = app.clone().oneshot(page.unwrap()).await.unwrap();
        let token = axum::body::to_bytes(page.into_body(), 64).await.unwrap();
        let token = String::from_utf8(token.to_vec()).unwrap();
        HASHED.set(0);
        let post = Request::post("/order")
            .header(&CLIENT, "alice")
            .header(FormTokenConfig::new().header_name(), token)
            .body(Body::empty());
        let answer = app.oneshot(post.unwrap()).await.unwrap();
        assert_eq!(answer.status(), StatusCode::OK);
        assert_eq!(HASHED.get(), 1);
    }
}
