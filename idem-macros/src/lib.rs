//! Procedural macros for [idem](https://github.com/idem-rs/idem). Use them through
//! `idem-axum` (feature `macros`, on by default): `use idem_axum::avoid_repeat;`.

mod avoid_repeat;

use proc_macro::TokenStream;

/// Refuses a repeat of a request **from the same client to this handler** while the key
/// of the first one is held: the duplicate gets `409 Conflict` with `Retry-After`, and the
/// handler body does not run for it.
///
/// ```
/// use axum::extract::State;
/// use axum::routing::post;
/// use axum::{Form, Router};
/// use idem_axum::{Idem, avoid_repeat};
///
/// #[derive(Clone)]
/// struct Shop;
///
/// #[derive(serde::Deserialize)]
/// struct Order {
///     product_id: u64,
/// }
///
/// #[avoid_repeat(timeout = "30s")]
/// async fn place_order(State(_shop): State<Shop>, Form(order): Form<Order>) -> String {
///     format!("ordered {}", order.product_id) // runs once per client per 30 s
/// }
///
/// let idem = Idem::builder().build();
/// let app: Router = Router::new()
///     .route("/orders", post(place_order))
///     .with_state(Shop)
///     .layer(idem.layer());
/// ```
///
/// Needs the `Idem` runtime on the router (`.layer(idem.layer())`); without it the
/// handler answers 500 naming the missing layer.
///
/// # Arguments
///
/// | argument | values | default |
/// |---|---|---|
/// | `timeout` (required) | `"500ms"`, `"30s"`, `"5m"`, `"1h"` (humantime; longer than zero) | — |
/// | `release` | `"expire"`: the key is held for `timeout` after the request is accepted; `"finish"`: released when the response is produced, `timeout` being only the lease if the process dies | `"expire"` |
/// | `by` | `"client"`: same client, same handler; `"client+body"`: also the same query and body, so a different payload is not a repeat | `"client"` |
/// | `payload` | with `by = "client+body"`, what of the body counts: `"raw"` (the bytes as sent), `"canonical_json"` (key order and whitespace do not), or the fields that count as JSON pointers, `["/amount", "/currency"]` — `AvoidRepeatLayer::with_payload_fingerprint`'s choices | `"raw"` |
/// | `crate` | the path `idem-axum` is known by, for a dependency renamed in `Cargo.toml` (`crate = "my_idem"`) | `"::idem_axum"` |
/// | `message` | the text a refused duplicate gets, e.g. `"请勿重复提交"` | a sentence in English |
///
/// A handler that fails — a 5xx response, a panic under `CatchPanicLayer`, a future
/// dropped because the client went away — releases its key at once.
///
/// The handler's identity is `module_path!()::fn_name`; the client comes from the
/// runtime's client identity. The key is taken after the handler's own extractors
/// succeeded, so a request refused for bad input takes no key.
///
/// With `by = "client+body"` the body is read whole (within axum's `DefaultBodyLimit`)
/// and handed on unchanged; if the last argument reads no body (`Path`, a parts
/// extractor of your own), the body is read only to fingerprint it.
///
/// Works with any extractor, axum's (`State`, `Path`, `Query`, `Json`, `Form`, …) or your
/// own (a `CurrentUser` implementing `FromRequestParts`, a session), whatever its name and
/// place, under `#[axum::debug_handler]`,
/// with `Result<_, _>` and `impl IntoResponse` returns, and in handlers generic over their
/// state. Misuse — not an `async fn`, an unknown or repeated argument, a zero, negative,
/// overflowing or malformed duration, a value that is not a string literal — is a compile
/// error at the offending token. Set `IDEM_MACROS_DEBUG=1` while building to print the
/// expansion.
#[proc_macro_attribute]
pub fn avoid_repeat(args: TokenStream, item: TokenStream) -> TokenStream {
    compile_errors(avoid_repeat::expand(args.into(), item.into()))
}

fn compile_errors(expanded: syn::Result<proc_macro2::TokenStream>) -> TokenStream {
    let tokens = expanded.unwrap_or_else(syn::Error::into_compile_error);
    if std::env::var_os("IDEM_MACROS_DEBUG").is_some() {
        eprintln!("{tokens}");
    }
    tokens.into()
}

/// The README's examples, compiled (and run where they can be) as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;
