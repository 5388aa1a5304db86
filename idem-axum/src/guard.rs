//! Writing a guard of your own: the steps every guard of idem takes before it decides,
//! as one public type.
//!
//! Each guard here — `#[avoid_repeat]`, [`AvoidRepeatLayer`](crate::AvoidRepeatLayer),
//! [`FormToken`](crate::FormToken), [`VerifyFormTokenLayer`](crate::VerifyFormTokenLayer),
//! [`IdempotencyLayer`](crate::IdempotencyLayer) — opens the same way: it finds the
//! [`Idem`] runtime that [`Idem::layer`] put in the request, tells who the client is, notes
//! whether the client prefers HTML, and from then on refuses through the runtime's
//! responder. [`GuardContext`] is that opening, and what a guard needs after it: the
//! store, keys in the runtime's namespace, and the store-failure policy.
//!
//! A guard of your own built on it behaves like idem's: the same client identity, the
//! same refusals rendered by the same responder, the same answer when the store is down.
//! Here, a handler that lets each client run one export at a time:
//!
//! ```
//! use std::time::Duration;
//! use axum::extract::Request;
//! use axum::response::{IntoResponse, Response};
//! use idem_axum::identity::ClientRequest;
//! use idem_axum::guard::GuardContext;
//! use idem_axum::store::{Acquire, Fencing, LockStore, Owner};
//! use idem_axum::{Rejection, RejectionKind};
//!
//! async fn export(request: Request) -> Response {
//!     let (guard, client) = match GuardContext::open(&ClientRequest::from_request(&request)) {
//!         Ok(opened) => opened,
//!         Err(refusal) => return refusal,
//!     };
//!     let key = guard.key(&[b"export", client.as_bytes()]);
//!     let owner = Owner::random();
//!     match guard.store().acquire(&key, &owner, Duration::from_secs(600), Fencing::Off).await {
//!         Ok(Acquire::Acquired { .. }) => {}
//!         Ok(Acquire::Held { remaining } | Acquire::Reentered { remaining, .. }) => {
//!             let busy = Rejection::new(RejectionKind::Duplicate, "your last export is still running");
//!             return guard.refuse(busy.with_retry_after(remaining));
//!         }
//!         Err(error) => {
//!             if let Err(refusal) = guard.on_store_error(&error, "export") {
//!                 return refusal;
//!             }
//!         }
//!     }
//!     let answer = "exported".into_response(); // the export itself
//!     let _ = guard.store().release(&key, &owner).await;
//!     answer
//! }
//! ```

// A refusal is the response itself, as axum's own extractors give theirs: the guard
// returns it as it is.
#![allow(clippy::result_large_err)]

use std::time::Duration;

use axum::response::{IntoResponse, Response};
use idem_core::{Key, StoreError, throttled};

use crate::StoreFailure;
use crate::idem::{Idem, IdemStore};
use crate::identity::{ClientId, ClientRequest};
use crate::rejection::{Rejection, RejectionKind, prefers_html};

/// One request as a guard sees it: the runtime it runs under, and how its refusals are
/// rendered. Made by [`GuardContext::of`] or [`GuardContext::open`].
#[derive(Debug, Clone)]
pub struct GuardContext {
    idem: Idem,
    rendering: Rendering,
}

impl GuardContext {
    #[cfg(test)]
    pub(crate) fn new(idem: Idem, html: bool) -> Self {
        let rendering = if html {
            Rendering::Html
        } else {
            Rendering::Problem
        };
        Self { idem, rendering }
    }

    /// The runtime [`Idem::layer`] put in `request`, and whether its client prefers HTML
    /// (its `Accept` ranks `text/html` above JSON). With the feature `grpc`, a gRPC call's
    /// refusals are gRPC statuses, whatever the runtime's responder (the `grpc` module).
    ///
    /// # Errors
    ///
    /// Without the runtime, the 500 that names the missing layer, rendered by default
    /// (there is no responder without a runtime). While the runtime drains
    /// ([`Idem::shutdown`]), or runs more detached handlers than it lets run
    /// ([`IdemBuilder::with_detached_limit`](crate::IdemBuilder::with_detached_limit)), the
    /// 503 that says so: a new guarded request is not let in.
    pub fn of(request: &ClientRequest<'_>) -> Result<Self, Response> {
        let rendering = Rendering::of(request.headers());
        match request.extensions().get::<Idem>() {
            Some(idem) => match idem.handlers().admit() {
                Ok(()) => Ok(Self {
                    idem: idem.clone(),
                    rendering,
                }),
                Err(refusal) => Err(rendering.respond(Some(idem), refusal)),
            },
            None => {
                throttled::error!("idem: a guard ran without `Idem::layer()` on the router");
                let missing = Rejection::new(
                    RejectionKind::MissingLayer,
                    "idem's runtime is missing: add `.layer(idem.layer())` to the Router, \
                     outside the guarded routes",
                );
                Err(rendering.respond(None, missing))
            }
        }
    }

    /// [`of`](Self::of), then [`identify`](Self::identify): the opening of every guard
    /// that is per client.
    ///
    /// # Errors
    ///
    /// The refusal either step gives.
    pub fn open(request: &ClientRequest<'_>) -> Result<(Self, ClientId), Response> {
        let context = Self::of(request)?;
        let client = context.identify(request)?;
        Ok((context, client))
    }

    /// The client of `request`, as the runtime tells clients apart
    /// ([`IdemBuilder::with_client_identity`](crate::IdemBuilder::with_client_identity)).
    ///
    /// # Errors
    ///
    /// The refusal for a client that cannot be told: 400 when the request lacks what
    /// identifies it, 500 when the server is not set up for it.
    pub fn identify(&self, request: &ClientRequest<'_>) -> Result<ClientId, Response> {
        self.idem
            .identify(request)
            .map_err(|rejection| self.refuse(rejection))
    }

    /// The response for `rejection`: the runtime's responder's, or the default rendering,
    /// as HTML when the client prefers it.
    pub fn refuse(&self, rejection: Rejection) -> Response {
        self.rendering.respond(Some(&self.idem), rejection)
    }

    /// Applies the runtime's [`StoreFailure`] policy to `error`, met while doing `what`
    /// (a few words for the log): failing closed, the 503 refusal; failing open, `Ok`, to
    /// go on unguarded. Logged either way, as a warning written at most once every 10
    /// seconds with the count of the rest (the production guide's
    /// [logs](crate::guide::production#logs)).
    ///
    /// # Errors
    ///
    /// The refusal, when the runtime fails closed.
    pub fn on_store_error(&self, error: &StoreError, what: &str) -> Result<(), Response> {
        self.store_failed(error, what)
            .map_err(|rejection| self.refuse(rejection))
    }

    /// The runtime's store.
    pub fn store(&self) -> &IdemStore {
        self.idem.store()
    }

    /// A store key in the runtime's namespace, hashed from `parts`: no input can name
    /// another guard's or another application's key.
    pub fn key(&self, parts: &[&[u8]]) -> Key {
        self.idem.key(parts)
    }

    /// What guards do when the store fails.
    pub fn store_failure(&self) -> StoreFailure {
        self.idem.store_failure()
    }

    /// The runtime.
    pub fn idem(&self) -> &Idem {
        &self.idem
    }

    /// Whether the client prefers HTML to problem JSON.
    pub fn prefers_html(&self) -> bool {
        self.rendering == Rendering::Html
    }

    /// [`on_store_error`](Self::on_store_error), for a guard that goes on with a
    /// [`Rejection`] rather than a response.
    pub(crate) fn store_failed(&self, error: &StoreError, what: &str) -> Result<(), Rejection> {
        self.idem.store_failed(error, what)
    }
}

/// How a request's refusals are rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rendering {
    /// Problem JSON, or what the runtime's responder makes of it.
    Problem,
    /// A small HTML page, or what the runtime's responder makes of it.
    Html,
    /// A gRPC status: the responder renders HTTP bodies, which a gRPC client cannot read.
    #[cfg(feature = "grpc")]
    Grpc,
}

impl Rendering {
    /// How the refusals of a request with `headers` are rendered.
    fn of(headers: &http::HeaderMap) -> Self {
        #[cfg(feature = "grpc")]
        if crate::grpc::is_grpc(headers) {
            return Self::Grpc;
        }
        if prefers_html(headers) {
            Self::Html
        } else {
            Self::Problem
        }
    }

    /// The response for `rejection`: through the runtime's responder, if there is a
    /// runtime, or else by default.
    fn respond(self, idem: Option<&Idem>, rejection: Rejection) -> Response {
        #[cfg(feature = "grpc")]
        if self == Self::Grpc {
            return crate::grpc::refusal(&rejection);
        }
        let rejection = rejection.with_html(self == Self::Html);
        match idem {
            Some(idem) => idem.respond(rejection),
            None => rejection.into_response(),
        }
    }
}

/// The refusal of a request whose handler the runtime cancelled because it is shutting
/// down: its outcome is unknown, so the client is told to retry.
pub(crate) fn shutting_down() -> Rejection {
    Rejection::new(
        RejectionKind::ShuttingDown,
        "the server is shutting down; please retry shortly",
    )
    .with_retry_after(Duration::from_secs(1))
}
