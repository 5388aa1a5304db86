//! [`FormSubmission`]: a form submission whose handler spends its token and stores its
//! response in its own transaction
//! ([`VerifyFormTokenLayer::with_spend_in_transaction`](crate::VerifyFormTokenLayer::with_spend_in_transaction)).

use std::fmt;
use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use idem_core::Key;

use super::extract::TokenKeys;
use super::layer::{Settings, refused_token};
use crate::guard::GuardContext;
use crate::idempotency::{DoNotKeep, IdempotencyRecord};
use crate::rejection::impl_layer_extractor;

/// The submission of a form whose token the handler spends itself, **in the transaction
/// that writes what the form submits**, with the response a repeat will get; given by
/// [`VerifyFormTokenLayer`](crate::VerifyFormTokenLayer) with
/// [`with_spend_in_transaction(true)`](crate::VerifyFormTokenLayer::with_spend_in_transaction).
///
/// The layer has begun the submission's record (so a double click's second post waits
/// for this one and replays its response) and seen that the token is live; it has not
/// spent it. In one transaction, the handler then:
///
/// 1. spends the token: `consume_token_in` of the SQL stores of `idem-sqlx`, with
///    [`token_scope`](Self::token_scope) and [`token`](Self::token). `false` means the
///    token lapsed since the layer looked (its TTL ran out, or newer forms of its client
///    pushed it out): answer [`refused`](Self::refused) and write nothing;
/// 2. does its writes;
/// 3. turns its response into the bytes a repeat replays, with the record's
///    [`stored_response`](IdempotencyRecord::stored_response);
/// 4. completes the record with them and commits (`commit_with_record`, which rolls back
///    instead if the record was lost to a retry after its lease ran out).
///
/// The spent token, the writes and the stored response then commit together or not at
/// all. A server killed after the commit leaves a repeat that replays the response (the
/// page of the order placed); one killed before it leaves the token unspent and nothing
/// written, so the repeat runs the handler once the record's lease has run out.
///
/// Extract it as `FormSubmission` on a route whose runtime fails closed; where the
/// runtime fails open, a post the store could not check runs without one: extract
/// `Option<FormSubmission>` and, without one, commit as the handler would unguarded.
///
/// ```
/// use axum::http::StatusCode;
/// use axum::response::{IntoResponse, Redirect, Response};
/// use idem_axum::form_token::FormSubmission;
///
/// async fn place_order(submission: FormSubmission) -> Response {
///     let record = submission.record();
///     record.take_over(); // completed in the transaction, not by the layer
///     // let mut tx = db.begin().await?;
///     // if !SqliteStore::consume_token_in(&mut tx, submission.token_scope(), submission.token()).await? {
///     //     return submission.refused();
///     // }
///     // … the order's writes …
///     let Ok((stored, response)) = record.stored_response(Redirect::to("/orders/7")).await else {
///         return StatusCode::INTERNAL_SERVER_ERROR.into_response();
///     };
///     // SqliteStore::commit_with_record(tx, record.key(), record.owner(), stored, record.retention()).await?;
///     # let _ = stored;
///     response
/// }
/// ```
#[derive(Clone)]
pub struct FormSubmission {
    record: IdempotencyRecord,
    keys: TokenKeys,
    guard: GuardContext,
    settings: Arc<Settings>,
}

impl FormSubmission {
    pub(super) fn new(
        record: IdempotencyRecord,
        keys: &TokenKeys,
        guard: &GuardContext,
        settings: &Arc<Settings>,
    ) -> Self {
        Self {
            record,
            keys: keys.clone(),
            guard: guard.clone(),
            settings: Arc::clone(settings),
        }
    }

    /// The submission's idempotency record, to complete in the transaction.
    pub fn record(&self) -> &IdempotencyRecord {
        &self.record
    }

    /// The store key of the client's tokens the token belongs to.
    pub fn token_scope(&self) -> &Key {
        &self.keys.scope
    }

    /// The store key of the token (a hash of it and its client: the store never holds the
    /// token itself).
    pub fn token(&self) -> &Key {
        &self.keys.token
    }

    /// The answer to a submission whose token lapsed before the handler could spend it:
    /// the 409 the layer gives a token that is unknown, expired or spent, marked
    /// [`DoNotKeep`] so that the record goes and nothing is replayed.
    pub fn refused(&self) -> Response {
        let refusal = self.guard.refuse(refused_token(&self.settings));
        (DoNotKeep, refusal).into_response()
    }
}

/// Leaves the keys out of the output.
impl fmt::Debug for FormSubmission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FormSubmission")
            .field("record", &self.record)
            .finish_non_exhaustive()
    }
}

impl_layer_extractor! {
    FormSubmission,
    log: "idem: FormSubmission extracted where the layer gave none",
    detail: "this handler takes the form's submission, but none was given: put \
             `VerifyFormTokenLayer::new().with_spend_in_transaction(true)` on its route, \
             or extract `Option<FormSubmission>` where the runtime fails open",
}
