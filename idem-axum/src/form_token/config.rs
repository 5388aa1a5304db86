//! [`FormTokenConfig`]: what a form token is, agreed on by the routes that issue it and
//! the routes that verify it.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use http::{Extensions, HeaderName};

/// What a form token is: the form field and the header it travels in, and how long it
/// stays valid.
///
/// The page that issues a token ([`FormToken`](super::FormToken)) and the layer that
/// verifies it ([`VerifyFormTokenLayer`](crate::VerifyFormTokenLayer)) must agree on
/// these, so they read them from one place: the request extensions. Put the config there
/// once, with axum's [`Extension`](axum::Extension) layer over every route that issues or
/// verifies; without it, both sides use the defaults.
///
/// | setting | default | why |
/// |---|---|---|
/// | [field name](Self::with_field_name) | `form_token` | |
/// | [header name](Self::with_header_name) | `x-form-token` | also the response header that carries a rotated token |
/// | [TTL](Self::with_ttl) | 30 minutes | long enough to fill in a long form, short enough that the tokens of abandoned pages leave the store soon |
/// | [tokens per client](Self::with_tokens_per_client) | 16 | a client's newest 16 stay valid (a user with a dozen tabs open), older ones lapse, so one client rendering a form a million times holds 16 tokens, not a million |
///
/// ```
/// use std::time::Duration;
/// use axum::{Extension, Router};
/// use idem_axum::FormTokenConfig;
///
/// let tokens = FormTokenConfig::new().with_ttl(Duration::from_secs(10 * 60));
/// let app: Router = Router::new().layer(Extension(tokens));
/// ```
#[derive(Debug, Clone)]
pub struct FormTokenConfig {
    settings: Arc<Settings>,
}

#[derive(Debug, Clone)]
struct Settings {
    field_name: Cow<'static, str>,
    header_name: HeaderName,
    ttl: Duration,
    per_client: usize,
}

impl Default for FormTokenConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl FormTokenConfig {
    /// How long an issued token stays valid unless configured: 30 minutes.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(30 * 60);

    /// The form field a token is posted in unless configured: `form_token`.
    pub const DEFAULT_FIELD_NAME: &'static str = "form_token";

    /// The header a token is sent in (and a rotated one returned in) unless configured:
    /// `x-form-token`.
    pub const DEFAULT_HEADER_NAME: HeaderName = HeaderName::from_static("x-form-token");

    /// How many of a client's newest tokens stay valid unless configured: 16.
    pub const DEFAULT_TOKENS_PER_CLIENT: usize = 16;

    /// The defaults.
    ///
    /// ```
    /// let config = idem_axum::FormTokenConfig::new();
    /// assert_eq!(config.field_name(), "form_token");
    /// ```
    pub fn new() -> Self {
        Self {
            settings: Arc::new(Settings {
                field_name: Cow::Borrowed(Self::DEFAULT_FIELD_NAME),
                header_name: Self::DEFAULT_HEADER_NAME,
                ttl: Self::DEFAULT_TTL,
                per_client: Self::DEFAULT_TOKENS_PER_CLIENT,
            }),
        }
    }

    /// The form field the token is posted in (default `form_token`); the name
    /// [`FormToken::hidden_input`](super::FormToken::hidden_input) gives its input.
    ///
    /// ```
    /// let config = idem_axum::FormTokenConfig::new().with_field_name("subToken");
    /// ```
    pub fn with_field_name(mut self, name: impl Into<Cow<'static, str>>) -> Self {
        Arc::make_mut(&mut self.settings).field_name = name.into();
        self
    }

    /// The header the token may be sent in instead of a form field, and that carries a
    /// rotated token back (default `x-form-token`).
    ///
    /// ```
    /// let config = idem_axum::FormTokenConfig::new()
    ///     .with_header_name(http::HeaderName::from_static("x-sub-token"));
    /// ```
    pub fn with_header_name(mut self, name: HeaderName) -> Self {
        Arc::make_mut(&mut self.settings).header_name = name;
        self
    }

    /// How long an issued token stays valid (default [`DEFAULT_TTL`](Self::DEFAULT_TTL)).
    ///
    /// ```
    /// let config = idem_axum::FormTokenConfig::new().with_ttl(std::time::Duration::from_secs(600));
    /// ```
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        Arc::make_mut(&mut self.settings).ttl = ttl;
        self
    }

    /// How many of a client's newest tokens stay valid (default
    /// [`DEFAULT_TOKENS_PER_CLIENT`](Self::DEFAULT_TOKENS_PER_CLIENT); at least 1): issuing
    /// one more makes the client's oldest lapse, as if it had expired.
    ///
    /// ```
    /// let config = idem_axum::FormTokenConfig::new().with_tokens_per_client(4);
    /// assert_eq!(config.tokens_per_client(), 4);
    /// ```
    pub fn with_tokens_per_client(mut self, tokens: usize) -> Self {
        Arc::make_mut(&mut self.settings).per_client = tokens.max(1);
        self
    }

    /// How many of a client's newest tokens stay valid.
    pub fn tokens_per_client(&self) -> usize {
        self.settings.per_client
    }

    /// The form field.
    pub fn field_name(&self) -> &str {
        &self.settings.field_name
    }

    /// The header.
    pub fn header_name(&self) -> &HeaderName {
        &self.settings.header_name
    }

    /// How long an issued token stays valid.
    pub fn ttl(&self) -> Duration {
        self.settings.ttl
    }

    /// The config an [`Extension`](axum::Extension) layer put in `extensions`, or the
    /// defaults.
    pub(crate) fn from_extensions(extensions: &Extensions) -> Self {
        extensions.get::<Self>().cloned().unwrap_or_default()
    }
}
