//! The guards in the service's OpenAPI document, with [utoipa](https://docs.rs/utoipa)
//! (feature `openapi`).
//!
//! An API's consumers read its OpenAPI document, not its code. Each guarded operation's
//! entry says what the guard on it does to a request, read from the very layer that
//! guards it:
//!
//! | guard | what its operations gain |
//! |---|---|
//! | [`IdempotencyLayer`](crate::IdempotencyLayer) | the key header ([`with_key_header`](crate::IdempotencyLayer::with_key_header)'s name), required on the methods that [require](crate::IdempotencyLayer::with_required) it; none for a [key function](crate::IdempotencyLayer::with_idempotency_key_fn); the replay marker (`Idempotent-Replayed`) and the retention header (`Idempotency-TTL`, if sent) on every response it [keeps](crate::IdempotencyLayer::with_stored_statuses) |
//! | [`VerifyFormTokenLayer`](crate::VerifyFormTokenLayer) | the token's form field in the form bodies, and its header as an optional parameter; with [replay](crate::VerifyFormTokenLayer::with_replay), the replay marker, and with a [payload choice](crate::VerifyFormTokenLayer::with_payload_fingerprint) its 422 |
//! | [`AvoidRepeatLayer`](crate::AvoidRepeatLayer) | its 409 |
//!
//! and each, its refusals: one response per status, `application/problem+json`, whose
//! `type` is one of the [refusals'](crate::guide::refusals) URLs — 400 for a missing or
//! malformed key or token, 409 for a request in progress or a repeat, 422 for a key reused
//! with another request, 413 and 415 for a body the guard cannot read, 503 for a store
//! that failed (when the runtime [fails closed](crate::StoreFailure)), a server that is
//! draining, or one busy with earlier requests — with `Retry-After` where the refusal
//! says when to try again. A guard adds to what the handler documents: a status the
//! handler answers too keeps its own content beside the problem JSON. The operation's
//! description gains a sentence per guard, and its extension `x-idem-guards` lists the
//! guards with their settings, for tools (and tests) that check the document against
//! the service.
//!
//! # With utoipa-axum
//!
//! [`GuardedRoutes::guarded_by`] puts a layer on the routes of
//! [`routes!`](utoipa_axum::routes) and describes it in their operations at once, so the
//! router and its document cannot disagree: the layer that guards is the layer described.
//!
//! ```
//! use axum::http::StatusCode;
//! use idem_axum::openapi::GuardedRoutes;
//! use idem_axum::{Idem, IdempotencyLayer};
//! use utoipa_axum::{router::OpenApiRouter, routes};
//!
//! /// Pays an invoice.
//! #[utoipa::path(post, path = "/payments", responses((status = 201, description = "Paid")))]
//! async fn pay() -> (StatusCode, &'static str) {
//!     (StatusCode::CREATED, "payment 1")
//! }
//!
//! let idem = Idem::builder().build();
//! let (router, api) = OpenApiRouter::new()
//!     .routes(routes!(pay).guarded_by(IdempotencyLayer::new().with_required(true)))
//!     .split_for_parts();
//! let app: axum::Router = router.layer(idem.layer());
//!
//! let pay = api.paths.paths["/payments"].post.as_ref().unwrap();
//! let utoipa::openapi::RefOr::T(key) = &pay.parameters.as_ref().unwrap()[0] else {
//!     panic!("the key header, described in place");
//! };
//! assert_eq!(key.name, "idempotency-key");
//! assert!(matches!(key.required, utoipa::openapi::Required::True));
//! let paid = serde_json::to_value(&pay.responses.responses["201"]).unwrap();
//! assert!(paid["headers"]["idempotent-replayed"].is_object());
//! let reused = serde_json::to_value(&pay.responses.responses["422"]).unwrap();
//! assert_eq!(
//!     reused["content"]["application/problem+json"]["schema"]["properties"]["type"]["enum"][0],
//!     idem_axum::RejectionKind::IdempotencyKeyReused.type_uri(),
//! );
//! ```
//!
//! The routes' other layers go on with utoipa-axum's own
//! [`map`](utoipa_axum::router::UtoipaMethodRouterExt::map) — a runtime of their own, say:
//! `routes!(pay).guarded_by(layer).map(|routes| routes.route_layer(idem.layer()))`.
//! Several guards on one route are each `guarded_by` in turn, the last outermost, as
//! axum's `route_layer` stacks them.
//!
//! # Without it
//!
//! A document derived with `#[derive(OpenApi)]` gains a guard through utoipa's
//! [`Modify`]: [`DocumentedGuard::guard_doc`] describes a layer, and
//! [`GuardDoc::at`] names the path it guards. Here it is the application that keeps the
//! router and the document in step — the same layer value in both:
//!
//! ```
//! use idem_axum::IdempotencyLayer;
//! use idem_axum::openapi::DocumentedGuard;
//! use utoipa::{Modify, OpenApi};
//!
//! #[utoipa::path(post, path = "/payments", responses((status = 201, description = "Paid")))]
//! async fn pay() {}
//!
//! #[derive(OpenApi)]
//! #[openapi(paths(pay))]
//! struct Api;
//!
//! let guard = IdempotencyLayer::new();
//! let router: axum::Router = axum::Router::new()
//!     .route("/payments", axum::routing::post(pay).route_layer(guard.clone()));
//! let mut api = Api::openapi();
//! guard.guard_doc().at("/payments").modify(&mut api);
//! assert!(api.paths.paths["/payments"].post.as_ref().unwrap().extensions.is_some());
//! ```
//!
//! # What it cannot know
//!
//! - A form's [`FormTokenConfig`](crate::FormTokenConfig) travels in the request's
//!   extensions, out of the layer's sight: [`VerifyFormTokenLayer`](crate::VerifyFormTokenLayer)'s
//!   `guard_doc` describes the default field and header. With a config of your own,
//!   describe it with [`VerifyFormTokenLayer::guard_doc_with`](crate::VerifyFormTokenLayer::guard_doc_with).
//! - `#[avoid_repeat]` is inside its handler, where no router sees it: a route whose
//!   window belongs in the document takes [`AvoidRepeatLayer`](crate::AvoidRepeatLayer).
//! - A [custom responder](crate::IdemBuilder::with_responder) replaces the problem JSON
//!   for the whole runtime, out of any layer's sight: describe what it answers once for
//!   the whole document with [`RefusalContent`], after the guards.
//!
//! No guard answers 429, so no operation gains one. The refusal for a server busy with
//! earlier requests ([`busy`](crate::guide::refusals#busy)) is a 503 with `Retry-After`:
//! it is this instance's own backlog of handlers still running for clients that went
//! away, not the rate of the client refused, which is what a 429 tells a client (and what
//! a client's rate limiter in front of the guards documents for itself).
//!
//! # Why utoipa
//!
//! utoipa is the OpenAPI crate most axum services use: a document derived from
//! annotations on the handlers, and utoipa-axum's `OpenApiRouter`, which builds the
//! router and the document from one list of routes — the place where a guard can be
//! described by the layer that guards (utoipa 6, with utoipa-axum 0.3 on axum 0.8).
//! aide, the other one, derives the document from the handlers' types through its own
//! router and its own OpenAPI types. It is not covered:
//! a second integration would double this module for the smaller share of services. An
//! aide user can still describe a utoipa `Operation` with [`GuardDoc::describe`] and carry
//! its parameters and responses over.

mod operation;
mod refusal_content;

use std::convert::Infallible;
use std::fmt;
use std::sync::Arc;

use axum::extract::Request;
use axum::response::IntoResponse;
use axum::routing::Route;
use http::Method;
use tower_layer::Layer;
use tower_service::Service;
use utoipa::Modify;
use utoipa::openapi::OpenApi;
use utoipa::openapi::path::{Operation, PathItem, Paths};
use utoipa_axum::router::UtoipaMethodRouter;

pub(crate) use self::operation::{FormTokenField, KeyParameter, OperationGuard, Replay};
pub use self::refusal_content::RefusalContent;

use crate::RejectionKind;

/// The refusals of every guard before it looks at the request: the client's identity
/// missing (when the guard keeps keys per client), the store failed while the runtime
/// fails closed, the server draining or busy with the handlers of clients gone.
pub(crate) fn opening_refusals(per_client: bool) -> Vec<RejectionKind> {
    let mut refusals = Vec::with_capacity(4);
    if per_client {
        refusals.push(RejectionKind::MissingClientIdentity);
    }
    refusals.extend([
        RejectionKind::StoreUnavailable,
        RejectionKind::ShuttingDown,
        RejectionKind::Busy,
    ]);
    refusals
}

/// The name of the extension that lists an operation's guards.
pub const GUARDS_EXTENSION: &str = operation::EXTENSION;

/// What a guard adds to the OpenAPI description of the operations it guards, read from
/// its layer's settings ([`DocumentedGuard::guard_doc`]).
///
/// ```
/// use idem_axum::IdempotencyLayer;
/// use idem_axum::openapi::DocumentedGuard;
/// let doc = IdempotencyLayer::new().guard_doc();
/// assert!(doc.guards(&http::Method::POST));
/// assert!(!doc.guards(&http::Method::GET));
/// ```
#[derive(Clone)]
pub struct GuardDoc {
    guard: Arc<dyn DescribesGuard>,
}

/// A guard's settings, as its documentation reads them.
pub(crate) trait DescribesGuard: Send + Sync {
    /// Whether requests of `method` are guarded.
    fn guards(&self, method: &Method) -> bool;
    /// What the guard adds to an operation of `method`, which it guards.
    fn operation_guard(&self, method: &Method) -> OperationGuard;
}

impl GuardDoc {
    pub(crate) fn new(guard: Arc<dyn DescribesGuard>) -> Self {
        Self { guard }
    }

    /// Whether the guard takes requests of `method`; others pass it untouched, and their
    /// operations are left as they are.
    pub fn guards(&self, method: &Method) -> bool {
        self.guard.guards(method)
    }

    /// Adds the guard to `operation`, whose method is `method`, if it guards that method.
    ///
    /// ```
    /// use idem_axum::AvoidRepeatLayer;
    /// use idem_axum::openapi::DocumentedGuard;
    /// use utoipa::openapi::path::OperationBuilder;
    ///
    /// let mut operation = OperationBuilder::new().build();
    /// AvoidRepeatLayer::new(std::time::Duration::from_secs(5))
    ///     .guard_doc()
    ///     .describe(&http::Method::POST, &mut operation);
    /// assert!(operation.responses.responses.contains_key("409"));
    /// ```
    pub fn describe(&self, method: &Method, operation: &mut Operation) {
        if self.guards(method) {
            self.guard.operation_guard(method).apply(operation);
        }
    }

    /// Adds the guard to every operation of `paths` whose method it guards: the paths of
    /// one route, as utoipa-axum's [`routes!`](utoipa_axum::routes) gives them.
    pub fn describe_paths(&self, paths: &mut Paths) {
        for item in paths.paths.values_mut() {
            self.describe_path_item(item);
        }
    }

    /// Adds the guard to every operation of `item` whose method it guards.
    pub fn describe_path_item(&self, item: &mut PathItem) {
        for (method, operation) in operations(item) {
            if let Some(operation) = operation {
                self.describe(&method, operation);
            }
        }
    }

    /// This guard on the path `path` of a document, as a [`Modify`].
    ///
    /// ```
    /// use idem_axum::IdempotencyLayer;
    /// use idem_axum::openapi::DocumentedGuard;
    /// let modify = IdempotencyLayer::new().guard_doc().at("/payments");
    /// ```
    pub fn at(self, path: impl Into<String>) -> GuardedPath {
        GuardedPath {
            path: path.into(),
            doc: self,
        }
    }
}

impl fmt::Debug for GuardDoc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardDoc").finish_non_exhaustive()
    }
}

/// The operations of `item`, with their methods.
fn operations(item: &mut PathItem) -> [(Method, &mut Option<Operation>); 8] {
    [
        (Method::GET, &mut item.get),
        (Method::PUT, &mut item.put),
        (Method::POST, &mut item.post),
        (Method::DELETE, &mut item.delete),
        (Method::OPTIONS, &mut item.options),
        (Method::HEAD, &mut item.head),
        (Method::PATCH, &mut item.patch),
        (Method::TRACE, &mut item.trace),
    ]
}

/// A guard on one path of a document: a [`Modify`] that describes it in that path's
/// operations ([`GuardDoc::at`]).
#[derive(Debug, Clone)]
pub struct GuardedPath {
    path: String,
    doc: GuardDoc,
}

/// Describes the guard in the operations of the path; a document without the path is
/// left as it is, with a warning.
impl Modify for GuardedPath {
    fn modify(&self, openapi: &mut OpenApi) {
        match openapi.paths.paths.get_mut(&self.path) {
            Some(item) => self.doc.describe_path_item(item),
            None => tracing::warn!(path = %self.path, "idem: no such path in the OpenAPI document"),
        }
    }
}

/// A guard layer that can describe itself in an OpenAPI document.
pub trait DocumentedGuard {
    /// What this layer, as configured, adds to the operations it guards.
    ///
    /// ```
    /// use idem_axum::VerifyFormTokenLayer;
    /// use idem_axum::openapi::DocumentedGuard;
    /// let doc = VerifyFormTokenLayer::new().with_replay(true).guard_doc();
    /// ```
    fn guard_doc(&self) -> GuardDoc;
}

/// utoipa-axum's routes (the [`routes!`](utoipa_axum::routes) of one path) guarded by a
/// layer that describes itself in their operations.
pub trait GuardedRoutes: Sized {
    /// Puts `layer` on these routes as axum's `route_layer` does, and describes it in the
    /// operations whose method it guards.
    ///
    /// ```
    /// use idem_axum::openapi::GuardedRoutes;
    /// use idem_axum::{AvoidRepeatLayer, IdempotencyLayer};
    /// use utoipa_axum::routes;
    ///
    /// #[utoipa::path(post, path = "/orders", responses((status = 201)))]
    /// async fn order() {}
    ///
    /// let routes: utoipa_axum::router::UtoipaMethodRouter = routes!(order)
    ///     .guarded_by(AvoidRepeatLayer::new(std::time::Duration::from_secs(5)))
    ///     .guarded_by(IdempotencyLayer::new());
    /// ```
    fn guarded_by<L>(self, layer: L) -> Self
    where
        L: DocumentedGuard + Layer<Route> + Clone + Send + Sync + 'static,
        L::Service: Service<Request, Error = Infallible> + Clone + Send + Sync + 'static,
        <L::Service as Service<Request>>::Response: IntoResponse + 'static,
        <L::Service as Service<Request>>::Future: Send + 'static;
}

impl<S> GuardedRoutes for UtoipaMethodRouter<S>
where
    S: Clone + Send + Sync + 'static,
{
    fn guarded_by<L>(self, layer: L) -> Self
    where
        L: DocumentedGuard + Layer<Route> + Clone + Send + Sync + 'static,
        L::Service: Service<Request, Error = Infallible> + Clone + Send + Sync + 'static,
        <L::Service as Service<Request>>::Response: IntoResponse + 'static,
        <L::Service as Service<Request>>::Future: Send + 'static,
    {
        let (schemas, mut paths, routes) = self;
        layer.guard_doc().describe_paths(&mut paths);
        (schemas, paths, routes.route_layer(layer))
    }
}
