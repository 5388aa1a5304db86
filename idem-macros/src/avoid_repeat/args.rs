//! The arguments of `#[avoid_repeat(...)]`, checked at compile time.

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::{LitStr, Token};

mod kw {
    syn::custom_keyword!(timeout);
    syn::custom_keyword!(release);
    syn::custom_keyword!(by);
    syn::custom_keyword!(message);
    syn::custom_keyword!(payload);
}

#[derive(Clone, Copy)]
pub(super) enum Release {
    Expire,
    Finish,
}

#[derive(Clone, Copy)]
pub(super) enum RepeatBy {
    Client,
    ClientAndBody,
}

/// What of the body counts with `by = "client+body"`.
pub(super) enum Payload {
    Raw,
    CanonicalJson,
    /// The JSON pointers of the fields that count.
    Fields(Vec<LitStr>),
}

pub(super) struct Args {
    pub(super) timeout_ms: u64,
    pub(super) release: Release,
    pub(super) by: RepeatBy,
    pub(super) message: Option<LitStr>,
    pub(super) payload: Payload,
    /// The path of the `idem-axum` crate, for a dependency renamed in `Cargo.toml`.
    pub(super) krate: syn::Path,
}

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut timeout = None;
        let mut release = None;
        let mut by = None;
        let mut message = None;
        let mut payload = None;
        let mut krate = None;
        while !input.is_empty() {
            let lookahead = input.lookahead1();
            if lookahead.peek(kw::timeout) {
                let name = input.parse::<kw::timeout>()?;
                let value = value_of(input, "timeout", "\"30s\"")?;
                set_once(&mut timeout, name.span, "timeout", parse_timeout(&value)?)?;
            } else if lookahead.peek(kw::release) {
                let name = input.parse::<kw::release>()?;
                let value = value_of(input, "release", "\"expire\"")?;
                let parsed = choice(
                    &value,
                    [("expire", Release::Expire), ("finish", Release::Finish)],
                )?;
                set_once(&mut release, name.span, "release", parsed)?;
            } else if lookahead.peek(kw::by) {
                let name = input.parse::<kw::by>()?;
                let value = value_of(input, "by", "\"client\"")?;
                let parsed = choice(
                    &value,
                    [
                        ("client", RepeatBy::Client),
                        ("client+body", RepeatBy::ClientAndBody),
                    ],
                )?;
                set_once(&mut by, name.span, "by", parsed)?;
            } else if lookahead.peek(Token![crate]) {
                let name = input.parse::<Token![crate]>()?;
                let value = value_of(input, "crate", "\"my_idem\"")?;
                set_once(&mut krate, name.span, "crate", crate_path(&value)?)?;
            } else if lookahead.peek(kw::payload) {
                let name = input.parse::<kw::payload>()?;
                set_once(
                    &mut payload,
                    name.span,
                    "payload",
                    (name.span, payload_of(input)?),
                )?;
            } else if lookahead.peek(kw::message) {
                let name = input.parse::<kw::message>()?;
                let value = value_of(input, "message", "\"请勿重复提交\"")?;
                set_once(&mut message, name.span, "message", message_text(value)?)?;
            } else {
                return Err(lookahead.error());
            }
            if !input.is_empty() {
                input.parse::<Token![,]>()?;
            }
        }
        let by = by.unwrap_or(RepeatBy::Client);
        let payload = match payload {
            None => Payload::Raw,
            Some((span, _)) if matches!(by, RepeatBy::Client) => {
                return Err(syn::Error::new(
                    span,
                    "`payload` counts only in a key that includes the body: add `by = \"client+body\"`",
                ));
            }
            Some((_, payload)) => payload,
        };
        Ok(Self {
            timeout_ms: timeout.ok_or_else(missing_timeout)?,
            release: release.unwrap_or(Release::Expire),
            by,
            message,
            payload,
            krate: krate.unwrap_or_else(|| syn::parse_quote!(::idem_axum)),
        })
    }
}

/// `= "raw"`, `= "canonical_json"` or `= ["/json/pointer", ...]` after `payload`.
fn payload_of(input: ParseStream<'_>) -> syn::Result<Payload> {
    input.parse::<Token![=]>()?;
    if input.peek(syn::token::Bracket) {
        let content;
        let brackets = syn::bracketed!(content in input);
        let fields = content.parse_terminated(|field| field.parse::<LitStr>(), Token![,])?;
        if fields.is_empty() {
            return Err(syn::Error::new(
                brackets.span.join(),
                "name at least one field, e.g. `payload = [\"/amount\"]`",
            ));
        }
        for field in &fields {
            if !field.value().starts_with('/') {
                return Err(syn::Error::new(
                    field.span(),
                    "a field is a JSON pointer, which starts with `/`, e.g. \"/amount\"",
                ));
            }
        }
        return Ok(Payload::Fields(fields.into_iter().collect()));
    }
    if !input.peek(LitStr) {
        return Err(input.error(
            "`payload` takes \"raw\", \"canonical_json\" or a list of JSON pointers, \
             e.g. `payload = [\"/amount\", \"/currency\"]`",
        ));
    }
    let value: LitStr = input.parse()?;
    choice(
        &value,
        [
            ("raw", Payload::Raw),
            ("canonical_json", Payload::CanonicalJson),
        ],
    )
}

/// The path `crate = "..."` names.
fn crate_path(value: &LitStr) -> syn::Result<syn::Path> {
    value
        .parse::<syn::Path>()
        .map_err(|_| syn::Error::new(value.span(), "expected a crate path, e.g. `\"my_idem\"`"))
}

/// The text `message = "..."` gives, which must say something.
fn message_text(value: LitStr) -> syn::Result<LitStr> {
    if value.value().trim().is_empty() {
        return Err(syn::Error::new(value.span(), "`message` must not be empty"));
    }
    Ok(value)
}

/// The error for arguments without `timeout`.
fn missing_timeout() -> syn::Error {
    syn::Error::new(
        Span::call_site(),
        "missing `timeout`, e.g. `#[avoid_repeat(timeout = \"30s\")]`",
    )
}

/// `= "literal"` after an argument's name.
fn value_of(input: ParseStream<'_>, name: &str, example: &str) -> syn::Result<LitStr> {
    input.parse::<Token![=]>()?;
    if input.peek(LitStr) {
        input.parse()
    } else {
        Err(input.error(format!(
            "`{name}` takes a string literal, e.g. `{name} = {example}`"
        )))
    }
}

fn set_once<T>(slot: &mut Option<T>, span: Span, name: &str, value: T) -> syn::Result<()> {
    if slot.is_some() {
        return Err(syn::Error::new(
            span,
            format!("`{name}` is given more than once"),
        ));
    }
    *slot = Some(value);
    Ok(())
}

fn parse_timeout(value: &LitStr) -> syn::Result<u64> {
    if value.value().trim_start().starts_with('-') {
        return Err(syn::Error::new(
            value.span(),
            "`timeout` must be positive, e.g. \"30s\"",
        ));
    }
    let duration = humantime::parse_duration(&value.value()).map_err(|error| {
        syn::Error::new(
            value.span(),
            format!("invalid `timeout`: {error}; write e.g. \"500ms\", \"30s\", \"5m\" or \"1h\""),
        )
    })?;
    match u64::try_from(duration.as_millis()) {
        Ok(0) => Err(syn::Error::new(
            value.span(),
            "`timeout` must be at least 1ms",
        )),
        Ok(ms) => Ok(ms),
        Err(_) => Err(syn::Error::new(value.span(), "`timeout` is too long")),
    }
}

/// The one of two choices `value` names; the error, spanned on it, names both.
fn choice<T>(value: &LitStr, choices: [(&str, T); 2]) -> syn::Result<T> {
    let [(first, _), (second, _)] = &choices;
    let (first, second) = (*first, *second);
    choices
        .into_iter()
        .find(|(name, _)| value.value() == *name)
        .map(|(_, chosen)| chosen)
        .ok_or_else(|| {
            syn::Error::new(
                value.span(),
                format!("expected \"{first}\" or \"{second}\""),
            )
        })
}
