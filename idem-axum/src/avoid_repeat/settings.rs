//! How one guarded handler behaves: its window, when its key is given back, and what
//! makes two requests the same.

use idem_core::payload::PayloadFingerprint;
use std::borrow::Cow;
use std::time::Duration;

/// When the key of an accepted request is given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Release {
    /// The key lives for the whole window after acceptance: repeats inside it are refused.
    #[default]
    Expire,
    /// The key is released when the handler has produced its response: only concurrent
    /// repeats are refused.
    Finish,
}

/// What makes two requests "the same" for the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RepeatBy {
    /// The same client to the same handler.
    #[default]
    Client,
    /// The same client to the same handler with the same query and body. The body is read
    /// whole (within the router's `DefaultBodyLimit`) and handed on unchanged.
    ClientAndBody,
}

/// How one guarded handler behaves.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) timeout: Duration,
    pub(crate) release: Release,
    pub(crate) by: RepeatBy,
    pub(crate) message: Option<Cow<'static, str>>,
    /// What of the body counts, with [`RepeatBy::ClientAndBody`].
    pub(crate) payload: PayloadFingerprint,
    /// The gRPC methods guarded; other gRPC calls pass through.
    #[cfg(feature = "grpc")]
    pub(crate) grpc_methods: crate::grpc::GrpcMethods,
}

impl Settings {
    /// Whether the layer guards `request`: any request, but for a gRPC call only a guarded
    /// gRPC method.
    pub(super) fn takes<B>(&self, _request: &http::Request<B>) -> bool {
        #[cfg(feature = "grpc")]
        return self.grpc_methods.take(_request);
        #[cfg(not(feature = "grpc"))]
        true
    }

    pub(super) fn message(&self) -> Cow<'static, str> {
        self.message.clone().unwrap_or(Cow::Borrowed(
            "This request was already submitted; please wait before repeating it.",
        ))
    }
}

/// The window's operations in an OpenAPI document: every method, refused with 409.
#[cfg(feature = "openapi")]
impl crate::openapi::DescribesGuard for Settings {
    fn guards(&self, _method: &http::Method) -> bool {
        true
    }

    fn operation_guard(&self, _method: &http::Method) -> crate::openapi::OperationGuard {
        use crate::RejectionKind;

        let mut refusals = vec![RejectionKind::Duplicate];
        if self.by == RepeatBy::ClientAndBody {
            refusals.extend([RejectionKind::PayloadTooLarge, RejectionKind::InvalidBody]);
        }
        refusals.extend(crate::openapi::opening_refusals(true));
        let (what, by) = match self.by {
            RepeatBy::Client => ("a repeat", "client"),
            RepeatBy::ClientAndBody => ("a repeat with the same query and body", "client-and-body"),
        };
        let (until, release) = match self.release {
            Release::Expire => (
                format!("for {} s after it was accepted", self.timeout.as_secs()),
                "expire",
            ),
            Release::Finish => ("while it runs".to_owned(), "finish"),
        };
        crate::openapi::OperationGuard {
            summary: format!("Once per client: {what} of an accepted request {until} gets 409."),
            key: None,
            refusals,
            replay: None,
            form_token: None,
            extension: serde_json::json!({
                "guard": "avoid-repeat",
                "windowSeconds": self.timeout.as_secs(),
                "release": release,
                "repeatBy": by,
            }),
        }
    }
}
