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
//!     static __IDEM_SPEC: Spec = Spec::new("my_crate::orders::create", 30000, ..., Counted::Raw);
//!     run(__idem_arg1.context, &__IDEM_SPEC, None, __idem_handler(__idem_arg0, __idem_arg1.inner)).await
//! }
//! ```
//! The arity stays the same, because `#[axum::debug_handler]` above this attribute calls
//! the function with its original number of arguments. Which argument is wrapped:
//! - `by = "client"`: the first argument before the last that is not a `State` (so
//!   `debug_handler` still infers the state type), as `WithContext<T>`; else the last, as
//!   `Last<T, false>`;
//! - `by = "client+body"`: the last, as `Last<T, true>`, which also reads the query and
//!   body; `run` fingerprints them as `payload = ...` chose (the `Spec`'s `Counted`);
//! - a handler without arguments gains one.
//!
//! `Last` is an extractor for whatever axum's marker makes the last argument — one that
//! reads the body, or any `FromRequestParts` type — so no extractor is known by name.
//!
//! The original body keeps its own signature in the inner function, so `?`, early
//! `return`s and `impl IntoResponse` behave as written.

mod args;

use proc_macro2::{Ident, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, GenericParam, ItemFn, Signature, Type};

use self::args::{Args, Payload, Release, RepeatBy};

pub(crate) fn expand(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let args: Args = syn::parse2(args)?;
    let item: ItemFn = syn::parse2(item)?;
    check_async(&item.sig)?;
    let arg_types = check_inputs(&item.sig)?;
    let mut outer = Outer::new(arg_types, &args.krate);
    let carried = outer.carry_context(args.by);
    Ok(assemble(item, &args, outer, carried))
}

fn check_async(sig: &Signature) -> syn::Result<()> {
    match sig.asyncness {
        Some(_) => Ok(()),
        None => Err(syn::Error::new_spanned(
            sig.fn_token,
            "`#[avoid_repeat]` must be used on an `async fn` handler",
        )),
    }
}

/// The types of the handler's arguments, all of them extractors.
fn check_inputs(sig: &Signature) -> syn::Result<Vec<Type>> {
    sig.inputs
        .iter()
        .map(|input| match input {
            FnArg::Receiver(receiver) => Err(syn::Error::new_spanned(
                receiver,
                "`#[avoid_repeat]` handlers are free functions: they cannot take `self`",
            )),
            FnArg::Typed(typed) => Ok((*typed.ty).clone()),
        })
        .collect()
}

/// The outer function's parameters, and the arguments it calls the original body with.
struct Outer {
    /// `<idem-axum>::__private`.
    private: TokenStream,
    types: Vec<Type>,
    names: Vec<Ident>,
    params: Vec<TokenStream>,
    call_args: Vec<TokenStream>,
}

/// How the outer function reaches the guard's context and the payload's fingerprint.
struct Carried {
    context: TokenStream,
    payload: TokenStream,
}

impl Outer {
    fn new(types: Vec<Type>, krate: &syn::Path) -> Self {
        let names: Vec<Ident> = (0..types.len())
            .map(|i| format_ident!("__idem_arg{i}"))
            .collect();
        let params = names
            .iter()
            .zip(&types)
            .map(|(name, ty)| quote!(#name: #ty))
            .collect();
        let call_args = names.iter().map(|name| quote!(#name)).collect();
        Self {
            private: quote!(#krate::__private),
            types,
            names,
            params,
            call_args,
        }
    }

    /// Wraps argument `index` in `wrapper`, which also reads the context; the original
    /// body gets what the handler's own extractor produced.
    fn wrap(&mut self, index: usize, wrapper: fn(&Type) -> TokenStream) -> &Ident {
        let (name, ty) = (&self.names[index], &self.types[index]);
        let (span, wrapped) = (ty.span(), wrapper(ty));
        let private = &self.private;
        self.params[index] = quote_spanned!(span=> #name: #private::#wrapped);
        self.call_args[index] = quote!(#name.inner);
        name
    }

    /// Picks the argument that also reads the context (and the payload's fingerprint),
    /// keeping the handler's arity; see `idem_axum::__private`. A handler without
    /// arguments gains one.
    fn carry_context(&mut self, by: RepeatBy) -> Carried {
        let private = self.private.clone();
        let none = quote!(::core::option::Option::None);
        let Some(last) = self.types.len().checked_sub(1) else {
            return match by {
                RepeatBy::Client => {
                    self.params
                        .push(quote!(__idem_context: #private::AvoidRepeatContext));
                    Carried {
                        context: quote!(__idem_context),
                        payload: none,
                    }
                }
                RepeatBy::ClientAndBody => {
                    self.params.push(quote!(__idem_payload: #private::Payload));
                    Carried {
                        context: quote!(__idem_payload.context),
                        payload: quote!(::core::option::Option::Some(__idem_payload.payload)),
                    }
                }
            };
        };
        match by {
            RepeatBy::Client => {
                // Not a `State`, so `#[axum::debug_handler]` can still infer the state type;
                // before the last, so it reads the request's head only.
                let carrier = (0..last).find(|&i| !is_state(&self.types[i]));
                let name = match carrier {
                    Some(carrier) => self.wrap(carrier, |ty| quote!(WithContext<#ty>)),
                    None => self.wrap(last, |ty| quote!(Last<#ty, false>)),
                };
                Carried {
                    context: quote!(#name.context),
                    payload: none,
                }
            }
            RepeatBy::ClientAndBody => {
                let name = self.wrap(last, |ty| quote!(Last<#ty, true>));
                Carried {
                    context: quote!(#name.context),
                    payload: quote!(#name.payload),
                }
            }
        }
    }
}

/// The handler's settings, as the `static` the outer function hands the guard.
fn spec(args: &Args, name: &Ident, private: &TokenStream) -> TokenStream {
    let name = name.to_string();
    let release = match args.release {
        Release::Expire => quote!(Expire),
        Release::Finish => quote!(Finish),
    };
    let by = match args.by {
        RepeatBy::Client => quote!(Client),
        RepeatBy::ClientAndBody => quote!(ClientAndBody),
    };
    let message = match &args.message {
        Some(message) => quote!(::core::option::Option::Some(#message)),
        None => quote!(::core::option::Option::None),
    };
    let counted = match &args.payload {
        Payload::Raw => quote!(#private::Counted::Raw),
        Payload::CanonicalJson => quote!(#private::Counted::CanonicalJson),
        Payload::Fields(fields) => quote!(#private::Counted::Fields(&[#(#fields),*])),
    };
    let timeout_ms = args.timeout_ms;
    quote! {
        static __IDEM_SPEC: #private::Spec = #private::Spec::new(
            ::core::concat!(::core::module_path!(), "::", #name),
            #timeout_ms,
            #private::Release::#release,
            #private::RepeatBy::#by,
            #message,
            #counted,
        );
    }
}

/// The outer function: the original body as an inner function, run under the guard.
fn assemble(item: ItemFn, args: &Args, outer: Outer, carried: Carried) -> TokenStream {
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = item;
    let name = &sig.ident;
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
    let spec = spec(args, name, &outer.private);
    let (inputs, output) = (&sig.inputs, &sig.output);
    let Outer {
        private,
        params,
        call_args,
        ..
    } = outer;
    let Carried { context, payload } = carried;
    quote! {
        #(#attrs)*
        #vis async fn #name #impl_generics (#(#params),*) -> #private::Response #where_clause {
            async fn __idem_handler #impl_generics (#inputs) #output #where_clause #block

            #spec

            #private::run(
                #context,
                &__IDEM_SPEC,
                #payload,
                __idem_handler #turbofish (#(#call_args),*),
            )
            .await
        }
    }
}

/// Whether `ty` is axum's `State` (by its last path segment's name).
fn is_state(ty: &Type) -> bool {
    match ty {
        Type::Path(path) => path
            .path
            .segments
            .last()
            .is_some_and(|segment| segment.ident == "State"),
        _ => false,
    }
}
