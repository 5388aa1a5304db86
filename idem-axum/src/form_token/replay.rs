//! A spent form token as an idempotency key
//! ([`VerifyFormTokenLayer::with_replay`](super::VerifyFormTokenLayer::with_replay)): the
//! first submission's response is kept for the token's life and given again to every
//! later post of the same token by the same client.
//!
//! The submission's record is begun *before* the token is spent, so that of a double
//! click's two posts exactly one begins it: the other finds it in progress, waits for it,
//! and replays its response — the page the first click produced — whichever of the two
//! the browser is still waiting for.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::response::Response;
use idem_core::{Begin, Fingerprint, Owner, Store};

use super::FormTokenConfig;
use super::layer::{Settings, Spent, refused_token, rotate, run_to_end, spend, with_rotated};
use crate::client::ClientId;
use crate::future::Inner;
use crate::guard::GuardContext;
use crate::idempotency::{self, IdempotencyRecord, Record, RecordScope, replay, run_first};
use crate::outcome::{self, Guard, Outcome};
use crate::rejection::{Rejection, RejectionKind};

/// How long a repeat waits for the first submission of its token to finish.
const WAIT_FOR_FIRST: Duration = Duration::from_secs(5);

/// How often a waiting repeat looks again.
const LOOK_AGAIN: Duration = Duration::from_millis(20);

/// Answers a post of `token`: the first runs the handler, its repeats replay its response.
pub(super) async fn replaying<S: Inner>(
    guard: GuardContext,
    client: ClientId,
    config: FormTokenConfig,
    settings: Arc<Settings>,
    inner: S,
    request: Request,
    token: String,
) -> Result<Response, S::Error> {
    let submission = guard.key(&[
        b"form_token:submission",
        client.as_bytes(),
        token.as_bytes(),
    ]);
    let kept = idempotency::Settings::for_form_submissions(config.ttl());
    let owner = Owner::random();
    // The token is the whole identity of a submission: a repeat with other fields is the
    // same submission, posted again.
    let fingerprint = Fingerprint::of([b"form submission".as_slice()]);
    let deadline = tokio::time::Instant::now() + WAIT_FOR_FIRST;
    loop {
        let begun = guard
            .store()
            .begin_record(&submission, &owner, &fingerprint, kept.lease())
            .await;
        match begun {
            Ok(Begin::Started) => {}
            Ok(Begin::Completed { response }) => {
                outcome::report(Guard::FormToken, Outcome::Replayed);
                return Ok(replay(
                    &guard,
                    &response,
                    request.headers(),
                    kept.replayed_header(),
                ));
            }
            Ok(Begin::InProgress { .. }) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(LOOK_AGAIN).await;
                continue;
            }
            Ok(Begin::InProgress { remaining }) => {
                outcome::report(Guard::FormToken, Outcome::Conflict);
                return Ok(guard.refuse(still_running(remaining)));
            }
            Ok(Begin::Mismatch) => return Ok(guard.refuse(refused_token(&settings))),
            Err(error) => {
                return match guard.on_store_error(&error, "form submission not recorded") {
                    Err(refusal) => Ok(refusal),
                    // Failing open, as without replay: the token still decides.
                    Ok(()) => run_to_end(&guard, inner, request).await,
                };
            }
        }
        // This post began the submission's record: its token decides whether it runs.
        let abandon = || async {
            if let Err(error) = guard.store().abandon_record(&submission, &owner).await {
                tracing::warn!(%error, "idem: a refused submission's record ends with its lease");
            }
        };
        match spend(&guard, &client, &token).await {
            Ok(Spent::Yes) => {}
            Ok(Spent::No) => {
                abandon().await;
                return Ok(guard.refuse(refused_token(&settings)));
            }
            Ok(Spent::Unknown) => {
                abandon().await;
                return run_to_end(&guard, inner, request).await;
            }
            Err(rejection) => {
                abandon().await;
                return Ok(guard.refuse(rejection));
            }
        }
        let (request, rotated) = rotate(&guard, &client, &config, &settings, request).await;
        let handle = IdempotencyRecord::new(
            submission,
            owner,
            config.ttl(),
            RecordScope::Client,
            kept.max_stored_response(),
        );
        let record = Record::new(guard.store().clone(), handle);
        return match run_first(kept, record, inner, request).await {
            Ok(answered) => answered.map(|response| with_rotated(response, &config, rotated)),
            Err(rejection) => Ok(guard.refuse(rejection)),
        };
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
