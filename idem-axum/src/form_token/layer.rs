//! [`VerifyFormTokenLayer`]: spends the form token of each request before the handler runs.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock, OnceLock};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use http::HeaderValue;
use idem_core::payload::PayloadFingerprint;
use idem_core::{Fingerprint, Store, throttled};
use tracing::Instrument;

use super::extract::{TokenKeys, issue};
use super::field::Form;
use super::{FormToken, FormTokenConfig};
use crate::detached::run_to_completion;
use crate::future::{Inner, ResponseFuture};
use crate::guard::GuardContext;
use crate::idem::OnStore;
use crate::idem::handlers::Running;
use crate::idempotency;
use crate::identity::{ClientId, ClientRequest};
use crate::outcome::{Guard, Outcome, Reporter};
use crate::rejection::{Rejection, RejectionKind};
use crate::request_body::{read_back, read_whole};

/// Verifies the one-time form token of every request to the routes it guards; see the
/// [module docs](crate::form_token).
///
/// Install it with `route_layer` on the routes that receive forms. It reads the token
/// from the configured header, or else from the form field of an urlencoded or multipart
/// body, and spends it with one atomic delete in the store: of concurrent requests
/// carrying one token, exactly one gets through.
///
/// ```
/// use axum::{Form, Router, routing::post};
/// use idem_axum::{Idem, VerifyFormTokenLayer};
///
/// #[derive(serde::Deserialize)]
/// struct Order {
///     item: String,
/// }
///
/// async fn place_order(Form(order): Form<Order>) -> String {
///     format!("ordered {}", order.item)
/// }
///
/// let idem = Idem::builder().build();
/// let app: Router = Router::new()
///     .route("/orders", post(place_order))
///     .route_layer(VerifyFormTokenLayer::new())
///     .layer(idem.layer());
/// ```
#[derive(Debug, Clone, Default)]
pub struct VerifyFormTokenLayer {
    settings: Arc<Settings>,
}

#[derive(Debug, Clone, Default)]
pub(super) struct Settings {
    body_limit: Option<usize>,
    pub(super) rotation: bool,
    message: Option<Cow<'static, str>>,
    replay: bool,
    pub(super) spend_in_transaction: bool,
    pub(super) lease: Option<Duration>,
    /// With replay, the application's hook on replayed submissions.
    on_replay: Option<idempotency::ReplayHook>,
    /// With replay, what of the posted body counts beside the token; `None`, the token
    /// alone.
    payload: Option<PayloadFingerprint>,
    /// With replay, the record settings of this layer's submissions, made by the first
    /// post for the token TTL it had, so that later posts do not build them again.
    pub(super) kept: OnceLock<(Duration, Arc<idempotency::Settings>)>,
}

impl Settings {
    /// The record settings of a submission whose tokens live `ttl`: what the submissions
    /// of this layer keep, how long, under which lease.
    pub(super) fn kept(&self, ttl: Duration) -> Arc<idempotency::Settings> {
        let make =
            || idempotency::Settings::for_form_submissions(ttl, self.lease, self.on_replay.clone());
        match self.kept.get_or_init(|| (ttl, make())) {
            (made_for, kept) if *made_for == ttl => Arc::clone(kept),
            // Another runtime's tokens (rare: one layer under two `Idem`s).
            _ => make(),
        }
    }

    /// With a [payload choice](VerifyFormTokenLayer::with_payload_fingerprint), the
    /// fingerprint of a submission and the request to hand on: what of its body counts,
    /// the body read whole within the layer's limit and put back. `None` when the token
    /// alone is the submission ([`SUBMISSION`]): the request back, untouched.
    ///
    /// Boxed: only a layer with a payload choice pays for the read, and the future of
    /// every other post stays as small as it was.
    pub(super) fn read_fingerprint(&self, request: Request) -> Submitted {
        let Some(payload) = self.payload.clone() else {
            return Submitted::TokenAlone(request);
        };
        let limit = self.body_limit;
        Submitted::Read(Box::pin(async move {
            let mut request = request;
            let body = read_back(&mut request, limit).await?;
            let fingerprint = Fingerprint::of([SUBMITTED, &payload.counted(&body)]);
            Ok((request, fingerprint))
        }))
    }
}

/// What tells a submission apart.
#[expect(
    clippy::large_enum_variant,
    reason = "moved straight through, never held: boxing the request would cost every post an allocation"
)]
pub(super) enum Submitted {
    /// Its token alone: the request, untouched.
    TokenAlone(Request),
    /// What of its body counts, once it is read.
    Read(Pin<Box<dyn Future<Output = Fingerprinted> + Send>>),
}

/// A request with its body read and put back, and the fingerprint of its submission.
pub(super) type Fingerprinted = Result<(Request, Fingerprint), Rejection>;

/// What every fingerprint of a submission starts with.
const SUBMITTED: &[u8] = b"form submission";

/// The fingerprint of every submission when the token alone is its identity: a repeat
/// with other fields is the same submission, posted again. Hashed once a process rather
/// than once a post.
pub(super) static SUBMISSION: LazyLock<Fingerprint> =
    LazyLock::new(|| Fingerprint::of([SUBMITTED]));

impl VerifyFormTokenLayer {
    /// Verifies tokens with the defaults: the router's body limit, no rotation.
    ///
    /// ```
    /// let layer = idem_axum::VerifyFormTokenLayer::new();
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// How much of a form body is read to find the token, in bytes; over it is 413 and
    /// no token is spent. By default the router's limit: axum's `DefaultBodyLimit`, 2 MB
    /// unless set. A token sent in the header is found without reading the body.
    ///
    /// The handler's own `Form` or `Multipart` extractor still applies the router's
    /// limit to the body this layer hands on.
    ///
    /// ```
    /// let layer = idem_axum::VerifyFormTokenLayer::new().with_body_limit(64 * 1024);
    /// ```
    pub fn with_body_limit(mut self, limit: usize) -> Self {
        Arc::make_mut(&mut self.settings).body_limit = Some(limit);
        self
    }

    /// Whether a spent token is replaced (default `false`), for pages that stay open and
    /// post again. A fresh token for the same client
    /// is then issued before the handler runs, given to its [`FormToken`] extractor, and
    /// sent back in the response's token header
    /// ([`FormTokenConfig::with_header_name`]).
    ///
    /// It costs a second store operation per accepted request.
    ///
    /// ```
    /// let layer = idem_axum::VerifyFormTokenLayer::new().with_rotation(true);
    /// ```
    pub fn with_rotation(mut self, rotation: bool) -> Self {
        Arc::make_mut(&mut self.settings).rotation = rotation;
        self
    }

    /// Whether a repeat of a spent token from its own client gets the first submission's
    /// response (default `false`: it gets the 409 every refused token gets).
    ///
    /// The token then also serves as an idempotency key: the first submission's response
    /// — status, headers, body; for a form, typically the `303` to the page it created — is
    /// kept for the token's life and given again, marked `Idempotent-Replayed: true`, to
    /// every later post of the same token by the same client. The user who double-clicks
    /// lands on the page the first click produced instead of an error. A repeat that
    /// arrives while the first submission still runs waits for it (up to 5 s, then 409).
    /// Another client's token, an unknown or expired one, or one spent on another route
    /// (or with another method) is still refused with 409.
    ///
    /// It costs a store operation more per submission (the kept response), and the
    /// response is kept only if it is not a 5xx: a failed submission (a 5xx, a panic)
    /// gives its token back, so the same page can be posted again — once at a time, a
    /// waiting repeat running it next. With [rotation](Self::with_rotation) on, a replay
    /// carries no new token.
    ///
    /// ```
    /// let layer = idem_axum::VerifyFormTokenLayer::new().with_replay(true);
    /// ```
    pub fn with_replay(mut self, replay: bool) -> Self {
        Arc::make_mut(&mut self.settings).replay = replay;
        self
    }

    /// What of a posted body counts as the submission beside its token, which turns
    /// [replay](Self::with_replay) on. By default nothing does: the token alone is the
    /// submission, and a repeat of it with other fields gets the first's response.
    ///
    /// With a choice ([`PayloadFingerprint`]: the raw bytes, canonical JSON, JSON fields,
    /// a function), a repeat of the token whose body differs in what counts is refused
    /// with 422 ([`IdempotencyKeyReused`](crate::RejectionKind::IdempotencyKeyReused)),
    /// also while the first still runs: the one form submitted with other values is a
    /// mistake to show, not a double click to absorb. The body is then read whole before
    /// the handler runs (within [the layer's limit](Self::with_body_limit)), even with the
    /// token in a header.
    ///
    /// ```
    /// use idem_axum::payload::PayloadFingerprint;
    /// // An urlencoded form's bytes as posted: another quantity is another submission.
    /// let layer = idem_axum::VerifyFormTokenLayer::new()
    ///     .with_payload_fingerprint(PayloadFingerprint::Raw);
    /// ```
    pub fn with_payload_fingerprint(mut self, payload: PayloadFingerprint) -> Self {
        let settings = Arc::make_mut(&mut self.settings);
        settings.payload = Some(payload);
        settings.replay = true;
        self
    }

    /// Whether the handler spends the token itself, in the transaction that writes what the
    /// form submits (default `false`: the layer spends it before the handler runs). Turns
    /// [replay](Self::with_replay) on.
    ///
    /// For a handler whose store keeps tokens and records in its own database (the SQL
    /// stores of `idem-sqlx`): the layer begins the submission's record and *looks* at the
    /// token, and runs the handler only if the token is live; the handler, through the
    /// [`FormSubmission`](crate::form_token::FormSubmission) it extracts, spends the token
    /// and stores its response in its own transaction, beside the order it writes. The
    /// spent token, the order and the response a repeat replays then commit together or
    /// not at all: a server that dies after the commit leaves a repeat that lands on the
    /// order, never a 409 nor a second order, and one that dies before it leaves the
    /// token unspent, so the repeat places the order once the record's lease has run out.
    ///
    /// A handler that leaves the record to the layer (it never calls
    /// [`stored_response`](crate::idempotency::IdempotencyRecord::stored_response)) has
    /// its token spent by the layer after its response is stored. A runtime failing open
    /// runs the handler without a `FormSubmission` when the store cannot be asked: extract
    /// `Option<FormSubmission>` there.
    ///
    /// ```
    /// let layer = idem_axum::VerifyFormTokenLayer::new().with_spend_in_transaction(true);
    /// ```
    pub fn with_spend_in_transaction(mut self, spend_in_transaction: bool) -> Self {
        Arc::make_mut(&mut self.settings).spend_in_transaction = spend_in_transaction;
        self
    }

    /// With [replay](Self::with_replay), how long a submission's record is held while its
    /// handler runs (default 10 s, as [`IdempotencyLayer`](crate::IdempotencyLayer)'s):
    /// renewed every third of it for as long as the handler runs, it ends with it only
    /// when the server died, or lost its store, mid-submission. A repeat then waits
    /// (up to 5 s, then 409) until the lease runs out and runs the submission again —
    /// which, with the token [spent in the handler's
    /// transaction](Self::with_spend_in_transaction), places the order once.
    ///
    /// ```
    /// use std::time::Duration;
    /// let layer = idem_axum::VerifyFormTokenLayer::new()
    ///     .with_replay(true)
    ///     .with_lease(Duration::from_secs(5));
    /// ```
    pub fn with_lease(mut self, lease: Duration) -> Self {
        let settings = Arc::make_mut(&mut self.settings);
        settings.lease = Some(lease);
        settings.kept = OnceLock::new();
        self
    }

    /// With [replay](Self::with_replay), a hook on every replayed submission, run before it
    /// is sent: the same as [`IdempotencyLayer::on_replay`](crate::IdempotencyLayer::on_replay)'s
    /// — it may change the replay's headers, never the kept response, and it cannot run
    /// the handler (see [`Replayed`](crate::idempotency::Replayed)).
    ///
    /// ```
    /// let layer = idem_axum::VerifyFormTokenLayer::new()
    ///     .with_replay(true)
    ///     .on_replay(|replayed| tracing::info!(status = %replayed.status(), "double submission"));
    /// ```
    pub fn on_replay<F>(mut self, hook: F) -> Self
    where
        F: Fn(&mut idempotency::Replayed<'_>) + Send + Sync + 'static,
    {
        let settings = Arc::make_mut(&mut self.settings);
        settings.on_replay = Some(idempotency::ReplayHook::new(hook));
        settings.kept = OnceLock::new();
        self
    }

    /// The message of the 409 for a token that is unknown, expired, spent or another
    /// client's.
    ///
    /// ```
    /// let layer = idem_axum::VerifyFormTokenLayer::new().with_message("请勿重复提交");
    /// ```
    pub fn with_message(mut self, message: impl Into<Cow<'static, str>>) -> Self {
        Arc::make_mut(&mut self.settings).message = Some(message.into());
        self
    }
}

/// The token's field and header as [`FormTokenConfig::new`] names them, its refusals,
/// and with replay the replay marker; see
/// [`guard_doc_with`](VerifyFormTokenLayer::guard_doc_with) for a config of your own.
#[cfg(feature = "openapi")]
#[cfg_attr(docsrs, doc(cfg(feature = "openapi")))]
impl crate::openapi::DocumentedGuard for VerifyFormTokenLayer {
    fn guard_doc(&self) -> crate::openapi::GuardDoc {
        self.guard_doc_with(&FormTokenConfig::new())
    }
}

#[cfg(feature = "openapi")]
impl VerifyFormTokenLayer {
    /// What this layer adds to the operations it guards, for forms whose tokens are
    /// `config`'s: the config an [`Extension`](axum::Extension) gives the requests,
    /// which the layer reads only when one arrives.
    ///
    /// ```
    /// use idem_axum::openapi::GuardedRoutes;
    /// use idem_axum::{FormTokenConfig, VerifyFormTokenLayer};
    ///
    /// let tokens = FormTokenConfig::new().with_field_name("sub_token");
    /// let mut api = utoipa::openapi::OpenApi::default();
    /// let doc = VerifyFormTokenLayer::new().guard_doc_with(&tokens);
    /// utoipa::Modify::modify(&doc.at("/orders"), &mut api);
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "openapi")))]
    pub fn guard_doc_with(&self, config: &FormTokenConfig) -> crate::openapi::GuardDoc {
        crate::openapi::GuardDoc::new(Arc::new(Documented {
            settings: Arc::clone(&self.settings),
            config: config.clone(),
        }))
    }
}

/// A form token layer's settings with the tokens' config, as an OpenAPI document reads
/// them.
#[cfg(feature = "openapi")]
struct Documented {
    settings: Arc<Settings>,
    config: FormTokenConfig,
}

#[cfg(feature = "openapi")]
impl crate::openapi::DescribesGuard for Documented {
    fn guards(&self, _method: &http::Method) -> bool {
        true
    }

    fn operation_guard(&self, _method: &http::Method) -> crate::openapi::OperationGuard {
        let replays = self.settings.replay || self.settings.spend_in_transaction;
        let mut refusals = vec![
            RejectionKind::MissingFormToken,
            RejectionKind::InvalidFormToken,
            RejectionKind::UnsupportedMediaType,
            RejectionKind::PayloadTooLarge,
            RejectionKind::InvalidBody,
        ];
        if replays {
            refusals.extend([
                RejectionKind::IdempotentRequestInProgress,
                RejectionKind::ResponseNotReplayable,
            ]);
            if self.settings.payload.is_some() {
                refusals.push(RejectionKind::IdempotencyKeyReused);
            }
        }
        refusals.extend(crate::openapi::opening_refusals(true));
        let (field, header) = (self.config.field_name(), self.config.header_name());
        let summary = format!(
            "A form posted once: its one-time token (the `{field}` field, or the `{header}` \
             header) is spent by the first post; {}",
            if replays {
                "a repeat from the same client gets the first post's response back."
            } else {
                "a repeat gets 409."
            }
        );
        crate::openapi::OperationGuard {
            summary,
            key: None,
            refusals,
            replay: replays.then(|| self.settings.kept(self.config.ttl()).replay_doc()),
            form_token: Some(crate::openapi::FormTokenField {
                field: field.to_owned(),
                header: header.clone(),
            }),
            extension: serde_json::json!({
                "guard": "form-token",
                "field": field,
                "header": header.as_str(),
                "replay": replays,
                "payloadChecked": self.settings.payload.is_some(),
            }),
        }
    }
}

define_guard_service!(
    /// Guards `inner` with `layer`'s settings.
    ///
    /// ```
    /// use idem_axum::{VerifyFormTokenLayer, form_token::VerifyFormToken};
    /// let service = VerifyFormToken::new(axum::Router::<()>::new(), VerifyFormTokenLayer::new());
    /// ```
    VerifyFormTokenLayer => VerifyFormToken
);

impl_guard_service!(VerifyFormToken, verify_form_token);

/// Answers one request to a guarded route: the client is told from the request's head,
/// then the post is answered on the runtime's store, typed, in a future boxed once.
fn verify_form_token<S: Inner>(
    settings: Arc<Settings>,
    inner: S,
    request: Request,
) -> ResponseFuture<S::Future> {
    let view = ClientRequest::from_request(&request);
    let (guard, client) = match GuardContext::open(&view) {
        Ok(opened) => opened,
        Err(refusal) => return ResponseFuture::ready(Ok(refusal)),
    };
    let reporter = Reporter::of(Guard::FormToken, &view);
    let store = guard.store().clone();
    store.typed(Post {
        guard,
        client,
        reporter,
        settings,
        inner,
        request,
    })
}

/// A post to a guarded route, to be answered on the runtime's store once it is typed.
struct Post<S> {
    guard: GuardContext,
    client: ClientId,
    reporter: Reporter,
    settings: Arc<Settings>,
    inner: S,
    request: Request,
}

impl<S: Inner> OnStore for Post<S> {
    type Output = ResponseFuture<S::Future>;

    fn on<St: Store + Clone>(self, store: St, waits: bool) -> Self::Output {
        let Self {
            guard,
            client,
            reporter,
            settings,
            inner,
            request,
        } = self;
        let span = reporter.span(request.uri().path(), Some(&client));
        let verified =
            verify(store, guard, client, reporter, settings, inner, request).instrument(span);
        ResponseFuture::guarded(verified, waits)
    }
}

/// Answers a post: its token found, then spent (or its submission's record begun).
async fn verify<S: Inner, St: Store + Clone>(
    store: St,
    guard: GuardContext,
    client: ClientId,
    reporter: Reporter,
    settings: Arc<Settings>,
    inner: S,
    request: Request,
) -> Result<Response, S::Error> {
    let config = FormTokenConfig::from_extensions(request.extensions());
    let (request, token) = match find_token(&config, &settings, request).await {
        Ok((request, Some(token))) => (request, token),
        Ok((_, None)) => return Ok(guard.refuse(missing_token(&config, &reporter))),
        Err(rejection) => return Ok(guard.refuse(rejection)),
    };
    // From the first store call that may change what the token allows, the post runs to
    // its end even if its client goes away meanwhile, as a browser abandons the first POST
    // of a double click: dropped after its token was spent (or its submission's record
    // begun) and before its handler ran, the submission would be lost while the store
    // says it was made — its repeat refused, or left waiting for a record nobody runs.
    let running = Running::start(guard.idem());
    let submission = Submission {
        store,
        guard,
        client,
        reporter,
        config,
        settings,
        inner,
    };
    if submission.settings.replay || submission.settings.spend_in_transaction {
        run_to_completion(running, submission.answer_with_replay(request, token)).await
    } else {
        run_to_completion(running, submission.answer_without_replay(request, token)).await
    }
}

/// One post of a form, as the steps of its answer share it.
pub(super) struct Submission<S, St> {
    /// The runtime's store, typed: its calls' futures are this store's own.
    pub(super) store: St,
    pub(super) guard: GuardContext,
    pub(super) client: ClientId,
    /// The guard and route its outcomes are reported under.
    pub(super) reporter: Reporter,
    pub(super) config: FormTokenConfig,
    pub(super) settings: Arc<Settings>,
    pub(super) inner: S,
}

impl<S: Inner, St: Store + Clone> Submission<S, St> {
    /// Spends the token, then runs the handler; a token already spent (or never issued)
    /// is refused.
    async fn answer_without_replay(
        mut self,
        request: Request,
        token: String,
    ) -> Result<Response, S::Error> {
        let (guard, client, settings) = (&self.guard, &self.client, &self.settings);
        // The keys go with the check, so that the future does not hold them on.
        let checked = {
            let keys = TokenKeys::of_posted(guard, client, &token);
            check(
                &self.store,
                guard,
                &self.reporter,
                keys.as_ref(),
                Check::Spend,
            )
            .await
        };
        match checked {
            Ok(Spent::Yes) => {}
            Ok(Spent::No) => return Ok(guard.refuse(refused_token(settings))),
            // Failing open: the request goes through unverified, and spends nothing.
            Ok(Spent::Unknown) => return self.inner.call(request).await,
            Err(rejection) => return Ok(guard.refuse(rejection)),
        }
        let reporter = &self.reporter;
        let (request, rotated) =
            rotate(guard, client, reporter, &self.config, settings, request).await;
        let response = self.inner.call(request).await?;
        Ok(with_rotated(response, &self.config, rotated))
    }
}

/// What checking a token came to.
pub(super) enum Spent {
    /// It was this client's, live and unspent: it is spent now (or, looked at, live).
    Yes,
    /// It was not (unknown, expired, spent, another client's): nothing changed.
    No,
    /// The store failed and the runtime fails open: nothing was spent.
    Unknown,
}

/// How a token is checked before the handler runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Check {
    /// Spent, with one atomic delete: the check that lets exactly one request through.
    Spend,
    /// Looked at, for a handler that spends it in its own transaction.
    Look,
}

/// Checks the token whose keys are `keys` on `store` as `how` says, reporting to
/// `reporter`; a token with no keys (malformed) is unknown without asking.
///
/// # Errors
///
/// The 503 of a store that failed while the runtime fails closed.
pub(super) async fn check<St: Store>(
    store: &St,
    guard: &GuardContext,
    reporter: &Reporter,
    keys: Option<&TokenKeys>,
    how: Check,
) -> Result<Spent, Rejection> {
    let Some(keys) = keys else {
        reporter.report(Outcome::Duplicate);
        return Ok(Spent::No);
    };
    let started = Instant::now();
    let checked = match how {
        Check::Spend => store.consume_token(&keys.scope, &keys.token).await,
        Check::Look => store.has_token(&keys.scope, &keys.token).await,
    };
    reporter.store_latency(started.elapsed());
    match checked {
        Ok(true) => {
            reporter.report(Outcome::Accepted);
            Ok(Spent::Yes)
        }
        Ok(false) => {
            reporter.report(Outcome::Duplicate);
            Ok(Spent::No)
        }
        Err(error) => {
            guard.store_failed(&error, "form token not verified")?;
            Ok(Spent::Unknown)
        }
    }
}

/// With rotation on, a fresh token for `client`, put in the request for the handler's
/// [`FormToken`] extractor.
pub(super) async fn rotate(
    guard: &GuardContext,
    client: &ClientId,
    reporter: &Reporter,
    config: &FormTokenConfig,
    settings: &Settings,
    mut request: Request,
) -> (Request, Option<FormToken>) {
    if !settings.rotation {
        return (request, None);
    }
    // Boxed: rotation is off by default, and its store call inline would size every
    // post's future (`tests::the_per_request_futures_stay_small`).
    match Box::pin(issue(guard, client, reporter, config)).await {
        Ok(rotated) => {
            request.extensions_mut().insert(rotated.clone());
            (request, Some(rotated))
        }
        // The old token is spent already: refusing now would lose the submission as well.
        // The handler runs; the page gets no new token from this response.
        Err(rejection) => {
            throttled::warn!(detail = rejection.detail(), "idem: no rotated form token");
            (request, None)
        }
    }
}

/// `response` with the rotated token in the token header, if there is one.
pub(super) fn with_rotated(
    mut response: Response,
    config: &FormTokenConfig,
    rotated: Option<FormToken>,
) -> Response {
    // A token is base64url, always a valid header value.
    let rotated = rotated.and_then(|token| HeaderValue::from_str(token.value()).ok());
    if let Some(value) = rotated {
        response
            .headers_mut()
            .insert(config.header_name().clone(), value);
    }
    response
}

/// The answer to a form posted without its token.
fn missing_token(config: &FormTokenConfig, reporter: &Reporter) -> Rejection {
    reporter.report(Outcome::Missing);
    Rejection::new(
        RejectionKind::MissingFormToken,
        format!(
            "this form needs its one-time token, in the `{}` field or the `{}` header",
            config.field_name(),
            config.header_name(),
        ),
    )
}

/// The answer to a token that is unknown, expired, spent or another client's.
pub(super) fn refused_token(settings: &Settings) -> Rejection {
    Rejection::new(
        RejectionKind::InvalidFormToken,
        settings.message.clone().unwrap_or(Cow::Borrowed(
            "This form was already submitted or has expired; reload the page and submit it again.",
        )),
    )
}

/// The token from the header, or else from the form body, read whole and put back.
async fn find_token(
    config: &FormTokenConfig,
    settings: &Settings,
    request: Request,
) -> Result<(Request, Option<String>), Rejection> {
    let header = request.headers().get(config.header_name());
    if let Some(header) = header.filter(|header| !header.is_empty()) {
        // A value that is not ASCII is no token we issued; it is refused as unknown.
        let token = String::from_utf8_lossy(header.as_bytes()).into_owned();
        return Ok((request, Some(token)));
    }
    let Some(form) = Form::of(request.headers())? else {
        return Ok((request, None));
    };
    let (parts, reading) = read_whole(request, settings.body_limit);
    let body = reading.read().await?;
    let token = form.field(body.clone(), config.field_name()).await?;
    Ok((Request::from_parts(parts, Body::from(body)), token))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every post's future is boxed once (`ResponseFuture`) and its answer once more
    /// (`run_to_completion`); what only some posts need (a multipart body's parser, a
    /// rotated token's store call) is boxed on its own rather than sizing them all. The
    /// store is a `MemoryStore`, typed, as the runtime hands it to the post.
    #[test]
    fn the_per_request_futures_stay_small() {
        let submission = || Submission {
            store: idem_core::MemoryStore::new(),
            guard: GuardContext::new(crate::Idem::builder().build(), false),
            client: ClientId::new("a"),
            reporter: Reporter::named(Guard::FormToken, "/orders"),
            config: FormTokenConfig::new(),
            settings: Arc::new(Settings::default()),
            inner: axum::Router::<()>::new(),
        };
        let Submission {
            store,
            guard,
            client,
            reporter,
            settings,
            inner,
            ..
        } = submission();
        let future = verify(
            store,
            guard,
            client,
            reporter,
            settings,
            inner,
            Request::new(Body::empty()),
        );
        let size = std::mem::size_of_val(&future);
        assert!(size <= 2300, "the per-request future grew to {size} bytes");
        let work = submission().answer_without_replay(Request::new(Body::empty()), String::new());
        let size = std::mem::size_of_val(&work);
        // 1,096 bytes; 1,144 with the feature `metrics` (the reporter holds the route's
        // label); 1,072 before the reporter.
        assert!(size <= 1150, "the boxed answer grew to {size} bytes");
        let work = submission().answer_with_replay(Request::new(Body::empty()), String::new());
        let size = std::mem::size_of_val(&work);
        // Its two steps chained, each holding the post once (3,488 bytes, debug, when they
        // were nested async calls). 1,256 when the first step handed on the token rather
        // than its keys, which the second then hashed again (three SHA-256 blocks a post);
        // 1,320 before the record's lifecycle moved to `idem_core::record` (1,360). 1,344
        // now, 1,392 with the feature `metrics` (the reporter holds the route's label);
        // 1,328 before the reporter.
        assert!(
            size <= 1400,
            "the boxed answer with replay grew to {size} bytes"
        );
    }

    #[test]
    fn a_layers_record_settings_are_made_once_for_its_tokens_ttl() {
        let layer = VerifyFormTokenLayer::new()
            .with_replay(true)
            .with_lease(Duration::from_secs(3));
        let (minute, hour) = (Duration::from_secs(60), Duration::from_secs(3600));
        let first = layer.settings.kept(minute);
        assert!(Arc::ptr_eq(&first, &layer.clone().settings.kept(minute)));
        assert_eq!(
            (first.retention, first.lease),
            (minute, Duration::from_secs(3))
        );
        let other = layer.settings.kept(hour);
        assert_eq!(
            (other.retention, other.lease),
            (hour, Duration::from_secs(3))
        );
    }
}
