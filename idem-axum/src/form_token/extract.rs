//! [`FormToken`]: the extractor that issues a one-time token to the page rendering a form.

use std::cell::Cell;
use std::fmt;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::request::Parts;
use idem_core::{Key, TokenStore, throttled};

use super::FormTokenConfig;
use crate::guard::GuardContext;
use crate::identity::{ClientId, ClientRequest};
use crate::outcome::{Guard, Outcome, Reporter};
use crate::rejection::{Rejection, RejectionKind, escape_html};

/// Random bytes in a token: 128 bits, as many as a version 4 UUID has and then some.
const TOKEN_BYTES: usize = 16;

/// Characters in a token: `TOKEN_BYTES` in unpadded base64url.
const TOKEN_LEN: usize = (TOKEN_BYTES * 4).div_ceil(3);

/// A one-time token for a form, issued to the client of the request that extracts it.
///
/// Extracting it draws 128 bits from a cryptographic generator the operating system seeds
/// (rand's thread-local ChaCha12, without a system call per token), stores them
/// in the runtime's store under the client's scope for the configured TTL
/// ([`FormTokenConfig`]), and gives the handler the value to put in the page. The store
/// holds a hash of the client and the token, never the token itself.
///
/// - One token per request: extracting it twice in one request gives the same token.
/// - On a route under [`VerifyFormTokenLayer`](crate::VerifyFormTokenLayer) with
///   [rotation](crate::VerifyFormTokenLayer::with_rotation) on, it is the rotated token the
///   layer issued (and put in the response header), not yet another one.
/// - Without [`Idem::layer`](crate::Idem::layer) on the router it answers 500 naming the missing layer; for a
///   client the runtime cannot tell, the runtime's rejection; when the store fails, the
///   runtime's [`StoreFailure`](crate::StoreFailure) policy (fail closed: 503; fail open:
///   the page gets a token the store does not know, refused when posted once the store is
///   back).
///
/// ```
/// use axum::response::Html;
/// use idem_axum::FormToken;
///
/// async fn order_form(token: FormToken) -> Html<String> {
///     Html(format!(
///         r#"<form method="post" action="/orders">{}<button>Buy</button></form>"#,
///         token.hidden_input()
///     ))
/// }
/// ```
#[derive(Clone)]
pub struct FormToken {
    value: Arc<str>,
    config: FormTokenConfig,
}

impl FormToken {
    /// The token, 22 URL-safe characters (unpadded base64url of 128 random bits).
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The form field it is to be posted in ([`FormTokenConfig::with_field_name`]).
    pub fn field_name(&self) -> &str {
        self.config.field_name()
    }

    /// A hidden input that posts the token with the form, HTML-escaped:
    /// `<input type="hidden" name="form_token" value="...">`.
    pub fn hidden_input(&self) -> String {
        format!(
            r#"<input type="hidden" name="{}" value="{}">"#,
            escape_html(self.field_name()),
            escape_html(&self.value),
        )
    }
}

/// Leaves the value out, so logging a token does not hand it out.
impl fmt::Debug for FormToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FormToken")
            .field("field_name", &self.field_name())
            .finish_non_exhaustive()
    }
}

/// Why a [`FormToken`] could not be issued — no `Idem` layer on the router, a client the
/// runtime cannot tell, a store that failed while the runtime fails closed — as the
/// response every idem refusal is rendered to (the runtime's responder's, where there is
/// a runtime).
#[derive(Debug)]
pub struct FormTokenRejection(Response);

impl FormTokenRejection {
    /// The response's status.
    pub fn status(&self) -> http::StatusCode {
        self.0.status()
    }
}

impl IntoResponse for FormTokenRejection {
    fn into_response(self) -> Response {
        self.0
    }
}

impl<S: Send + Sync> FromRequestParts<S> for FormToken {
    type Rejection = FormTokenRejection;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        if let Some(token) = parts.extensions.get::<Self>() {
            return Ok(token.clone());
        }
        let view = ClientRequest::from_parts(parts);
        let (guard, client) = GuardContext::open(&view).map_err(FormTokenRejection)?;
        let reporter = Reporter::of(Guard::FormToken, &view);
        let config = FormTokenConfig::from_extensions(&parts.extensions);
        let token = issue(&guard, &client, &reporter, &config)
            .await
            .map_err(|rejection| FormTokenRejection(guard.refuse(rejection)))?;
        parts.extensions.insert(token.clone());
        Ok(token)
    }
}

/// Draws a token for `client` and stores it for the configured TTL.
pub(super) async fn issue(
    guard: &GuardContext,
    client: &ClientId,
    reporter: &Reporter,
    config: &FormTokenConfig,
) -> Result<FormToken, Rejection> {
    let mut bytes = [0; TOKEN_BYTES];
    if let Err(error) = draw(&mut bytes) {
        throttled::error!(%error, "idem: the operating system's random generator failed");
        return Err(Rejection::new(
            RejectionKind::RandomnessUnavailable,
            "the server could not draw a form token; please retry shortly",
        ));
    }
    let value = URL_SAFE_NO_PAD.encode(bytes);
    let keys = TokenKeys::of(guard, client, &value);
    let stored = guard.store().put_token(
        &keys.scope,
        &keys.token,
        config.ttl(),
        config.tokens_per_client(),
    );
    match stored.await {
        Ok(()) => reporter.report(Outcome::Issued),
        Err(error) => guard.store_failed(&error, "form token not stored")?,
    }
    Ok(FormToken {
        value: value.into(),
        config: config.clone(),
    })
}

/// Fills `bytes` from this thread's generator: rand's `ThreadRng` (ChaCha12, seeded by the
/// operating system and reseeded from it after every 64 KiB it gives, the generator
/// [`Owner::random`](idem_core::Owner::random) draws from too), so a token costs no system
/// call.
///
/// rand panics if the operating system cannot seed the generator; so before a thread's
/// first token the operating system's generator is asked once, and its failure answered as
/// an error instead. A reseed that fails later (every 4,096 tokens or so of a thread) still
/// panics, in rand.
///
/// # Errors
///
/// When the operating system's generator fails before this thread's first token.
fn draw(bytes: &mut [u8]) -> Result<(), getrandom::Error> {
    thread_local!(static SEEDED: Cell<bool> = const { Cell::new(false) });
    if !SEEDED.get() {
        getrandom::fill(&mut [0; 32])?;
        SEEDED.set(true);
    }
    rand::Rng::fill_bytes(&mut rand::rng(), bytes);
    Ok(())
}

/// The store keys of one token of one client: its client's set of tokens, and the token
/// itself, hashed with the client, so a token is found only when its own client posts it,
/// and so the store never sees the token itself.
///
/// Hashed once a post and handed on: the check that spends the token, the give-back of a
/// failed submission and the handler's [`FormSubmission`](super::FormSubmission) use the
/// same two (`replay::tests::a_post_hashes_its_token_once`; three SHA-256 blocks a post
/// fewer; with the submission's fingerprint hashed once, a page and post with replay went
/// from 113,050 instructions to 94,386, `bench/results/counts.md`).
#[derive(Debug, Clone)]
pub(super) struct TokenKeys {
    /// The key of `client`'s set of tokens.
    pub(super) scope: Key,
    /// The key of the token.
    pub(super) token: Key,
}

impl TokenKeys {
    /// The keys of `token`, which [`issue`] drew.
    pub(super) fn of(guard: &GuardContext, client: &ClientId, token: &str) -> Self {
        #[cfg(test)]
        HASHED.set(HASHED.get() + 1);
        Self {
            scope: guard.key(&[b"form_tokens", client.as_bytes()]),
            token: guard.key(&[b"form_token", client.as_bytes(), token.as_bytes()]),
        }
    }

    /// The keys of a posted `token`; `None`, and nothing hashed, when it cannot be one
    /// that [`issue`] drew.
    pub(super) fn of_posted(guard: &GuardContext, client: &ClientId, token: &str) -> Option<Self> {
        well_formed(token).then(|| Self::of(guard, client, token))
    }
}

#[cfg(test)]
thread_local! {
    /// How many times this thread hashed a token's keys.
    pub(super) static HASHED: Cell<usize> = const { Cell::new(0) };
}

/// Whether `token` could be one [`issue`] drew. Anything else is unknown without asking
/// the store.
fn well_formed(token: &str) -> bool {
    token.len() == TOKEN_LEN
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Idem;

    fn token(field_name: &'static str) -> FormToken {
        FormToken {
            value: "abc_-XYZ0123456789abcd".into(),
            config: FormTokenConfig::new().with_field_name(field_name),
        }
    }

    #[test]
    fn the_hidden_input_is_escaped() {
        assert_eq!(
            token("form_token").hidden_input(),
            r#"<input type="hidden" name="form_token" value="abc_-XYZ0123456789abcd">"#
        );
        assert_eq!(
            token(r#""><script>"#).hidden_input(),
            r#"<input type="hidden" name="&quot;&gt;&lt;script&gt;" value="abc_-XYZ0123456789abcd">"#
        );
    }

    #[test]
    fn debug_leaves_the_value_out() {
        let debug = format!("{:?}", token("form_token"));
        assert!(!debug.contains("abc_"), "{debug}");
    }

    #[tokio::test]
    async fn issued_tokens_are_long_random_and_well_formed() {
        let guard = GuardContext::new(Idem::builder().build(), false);
        let client = ClientId::new("alice");
        let config = FormTokenConfig::new();
        let reporter = Reporter::named(Guard::FormToken, "/form");
        let a = issue(&guard, &client, &reporter, &config).await.unwrap();
        let b = issue(&guard, &client, &reporter, &config).await.unwrap();
        assert_ne!(a.value(), b.value());
        assert_eq!(a.value().len(), TOKEN_LEN);
        assert_eq!(TOKEN_LEN, 22);
        assert!(well_formed(a.value()) && well_formed(b.value()));
        assert!(!well_formed("short"));
        assert!(!well_formed(&"+".repeat(TOKEN_LEN)));
        let spend = |client: &ClientId, token: &FormToken| {
            let keys = TokenKeys::of(&guard, client, token.value());
            let store = guard.store().clone();
            async move { store.consume_token(&keys.scope, &keys.token).await.unwrap() }
        };
        assert!(spend(&client, &a).await);
        assert!(
            !spend(&ClientId::new("bob"), &b).await,
            "another client's key does not find it"
        );
        assert!(spend(&client, &b).await);
    }

    #[test]
    fn tokens_drawn_on_many_threads_past_their_reseeds_are_all_distinct() {
        // 10,000 tokens a thread is 160 KB of output: each thread's generator reseeds twice.
        let threads: Vec<_> = (0..8)
            .map(|_| {
                std::thread::spawn(|| {
                    (0..10_000)
                        .map(|_| {
                            let mut bytes = [0; TOKEN_BYTES];
                            draw(&mut bytes).unwrap();
                            bytes
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut seen = std::collections::HashSet::new();
        for thread in threads {
            for bytes in thread.join().unwrap() {
                assert!(seen.insert(bytes), "a token was drawn twice");
            }
        }
        assert_eq!(seen.len(), 80_000);
    }
}
