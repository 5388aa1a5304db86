//! `#[avoid_repeat]`: rewrites an axum handler so its body runs under idem's anti-repeat
//! guard.
//!
//! ```text
//! #[avoid_repeat(timeout = "30s")]
//! async fn create(State(s): State<App>, Form(f): Form<Order>) -> impl IntoResponse { BODY }
//! ```
//! becomes
//! ```text
//! async fn create(
//!     __idem_arg0: State<App>,
//!     __idem_arg1: Last<Form<Order>, false>,  // also reads the runtime and the client
//! ) -> Response {
//!     async fn __idem_handler(State(s): State<App>, Form(f): Form<Order>) -> impl IntoResponse { BODY }
//!     static __IDEM_SPEC: Spec = Spec::new("my_crate::orders::create", 30000, ...);
//!     run(__idem_arg1.context, &__IDEM_SPEC, None, __idem_handler(__idem_arg0, __idem_arg1.inner)).await
//! }
//! ```
//! The arity stays the same, because `#[axum::debug_handler]` above this attribute calls
//! the function with its original number of arguments. Which argument is wrapped:
//! - key `client`: the first argument before the last that is not a `State` (so
//!   `debug_handler` still infers the state type), as `WithContext<T>`; else the last, as
//!   `Last<T, false>`, or `WithContext<T>` if it is a parts extractor;
//! - key `client+body`: the last, as `Last<T, true>`, or `LastParts<T>` if it is a parts
//!   extractor;
//! - a handler without arguments gains one.
//!
//! The original body keeps its own signature in the inner function, so `?`, early
//! `return`s and `impl IntoResponse` behave as written.

mod args;

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::spanned::Spanned;
use syn::{FnArg, GenericParam, ItemFn, Type};

use self::args::{Args, Release, RepeatBy};

/// axum extractors that read no body: as the last argument they get a wrapper for parts
/// extractors, since the one for body extractors cannot take them.
const PARTS_EXTRACTORS: &[&str] = &[
    "State",
    "Path",
    "Query",
    "Extension",
    "HeaderMap",
    "Method",
    "Uri",
    "OriginalUri",
    "MatchedPath",
    "ConnectInfo",
    "TypedHeader",
    "RawQuery",
    "RawPathParams",
    "NestedPath",
    "Version",
    "CookieJar",
    "PrivateCookieJar",
    "SignedCookieJar",
    "Host",
];

pub(crate) fn expand(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let args: Args = syn::parse2(args)?;
    let item: ItemFn = syn::parse2(item)?;
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = item;

    if sig.asyncness.is_none() {
        return Err(syn::Error::new_spanned(
            sig.fn_token,
            "`#[avoid_repeat]` must be used on an `async fn` handler",
        ));
    }
    let mut arg_types = Vec::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(receiver) => {
                return Err(syn::Error::new_spanned(
                    receiver,
                    "`#[avoid_repeat]` handlers are free functions: they cannot take `self`",
                ));
            }
            FnArg::Typed(typed) => arg_types.push((*typed.ty).clone()),
        }
    }

    let name = &sig.ident;
    let name_str = name.to_string();
    let (impl_generics, _, where_clause) = sig.generics.split_for_impl();
    let type_args: Vec<_> = sig
        .generics
        .params
        .iter()
        .filter_map(|param| match param {
            GenericParam::Type(ty) => Some(ty.ident.clone()),
            GenericParam::Const(konst) => Some(konst.ident.clone()),
            GenericParam::Lifetime(_) => None,
        })
        .collect();
    let turbofish = (!type_args.is_empty()).then(|| quote!(::<#(#type_args),*>));

    let arg_names: Vec<_> = (0..arg_types.len())
        .map(|i| format_ident!("__idem_arg{i}"))
        .collect();
    let mut outer_params: Vec<TokenStream> = arg_names
        .iter()
        .zip(&arg_types)
        .map(|(name, ty)| quote!(#name: #ty))
        .collect();
    let mut call_args: Vec<TokenStream> = arg_names.iter().map(|name| quote!(#name)).collect();
    let private = quote!(::idem_axum::__private);
    let mut wrap = |index: usize, wrapper: fn(&Type) -> TokenStream| {
        let (name, ty) = (&arg_names[index], &arg_types[index]);
        let (span, wrapped) = (ty.span(), wrapper(ty));
        outer_params[index] = quote::quote_spanned!(span=> #name: ::idem_axum::__private::#wrapped);
        call_args[index] = quote!(#name.inner);
    };

    // Which argument also reads the context (and the payload's fingerprint), keeping the
    // handler's arity; see `idem_axum::__private`.
    let last = arg_types.len().checked_sub(1);
    let (context, payload) = match (args.by, last) {
        (RepeatBy::Client, None) => {
            outer_params.push(quote!(__idem_context: #private::AvoidRepeatContext));
            (quote!(__idem_context), quote!(::core::option::Option::None))
        }
        (RepeatBy::ClientAndBody, None) => {
            outer_params.push(quote!(__idem_payload: #private::Payload));
            (
                quote!(__idem_payload.context),
                quote!(::core::option::Option::Some(__idem_payload.fingerprint)),
            )
        }
        (RepeatBy::Client, Some(last)) => {
            // Not a `State`, so `#[axum::debug_handler]` can still infer the state type.
            let carrier = (0..last)
                .find(|&i| !is_state(&arg_types[i]))
                .unwrap_or(last);
            let name = &arg_names[carrier];
            if carrier < last || reads_no_body(&arg_types[last]) {
                wrap(carrier, |ty| quote!(WithContext<#ty>));
            } else {
                wrap(carrier, |ty| quote!(Last<#ty, false>));
            }
            (quote!(#name.context), quote!(::core::option::Option::None))
        }
        (RepeatBy::ClientAndBody, Some(last)) => {
            let name = &arg_names[last];
            if reads_no_body(&arg_types[last]) {
                wrap(last, |ty| quote!(LastParts<#ty>));
                (
                    quote!(#name.context),
                    quote!(::core::option::Option::Some(#name.fingerprint)),
                )
            } else {
                wrap(last, |ty| quote!(Last<#ty, true>));
                (quote!(#name.context), quote!(#name.fingerprint))
            }
        }
    };

    let release = match args.release {
        Release::Expire => quote!(Expire),
        Release::Finish => quote!(Finish),
    };
    let key = match args.by {
        RepeatBy::Client => quote!(Client),
        RepeatBy::ClientAndBody => quote!(ClientAndBody),
    };
    let message = match &args.message {
        Some(message) => quote!(::core::option::Option::Some(#message)),
        None => quote!(::core::option::Option::None),
    };
    let timeout_ms = args.timeout_ms;
    let inputs = &sig.inputs;
    let output = &sig.output;

    Ok(quote! {
        #(#attrs)*
        #vis async fn #name #impl_generics (#(#outer_params),*) -> ::idem_axum::__private::Response #where_clause {
            async fn __idem_handler #impl_generics (#inputs) #output #where_clause #block

            static __IDEM_SPEC: ::idem_axum::__private::Spec = ::idem_axum::__private::Spec::new(
                ::core::concat!(::core::module_path!(), "::", #name_str),
                #timeout_ms,
                ::idem_axum::__private::Release::#release,
                ::idem_axum::__private::RepeatBy::#key,
                #message,
            );

            ::idem_axum::__private::run(
                #context,
                &__IDEM_SPEC,
                #payload,
                __idem_handler #turbofish (#(#call_args),*),
            )
            .await
        }
    })
}

/// The name of `ty`'s last path segment: `Json` for `axum::Json<Order>`.
fn type_name(ty: &Type) -> Option<String> {
    match ty {
        Type::Path(path) => path
            .path
            .segments
            .last()
            .map(|segment| segment.ident.to_string()),
        _ => None,
    }
}

/// Whether `ty` is one of axum's extractors that read no body.
fn reads_no_body(ty: &Type) -> bool {
    matches!(ty, Type::Tuple(tuple) if tuple.elems.is_empty())
        || type_name(ty).is_some_and(|name| PARTS_EXTRACTORS.contains(&name.as_str()))
}

fn is_state(ty: &Type) -> bool {
    type_name(ty).is_some_and(|name| name == "State")
}
