//! Macros for the tower boilerplate every service of this crate shares.

/// `get_ref`, `get_mut` and `into_inner` for a service whose wrapped service is its
/// field `inner: S`. idem-client's `IdempotentRetry` writes the same three by hand rather
/// than share this across crates (see there).
macro_rules! define_inner_service_accessors {
    () => {
        /// The wrapped service.
        pub fn get_ref(&self) -> &S {
            &self.inner
        }

        /// The wrapped service, mutably.
        pub fn get_mut(&mut self) -> &mut S {
            &mut self.inner
        }

        /// The wrapped service, unwrapped.
        pub fn into_inner(self) -> S {
            self.inner
        }
    };
}

/// `with_grpc_methods`, the builder method (feature `grpc`) of a guard layer whose field
/// `settings: Arc<_>` holds `grpc_methods: GrpcMethods`: the gRPC methods it guards, by
/// their full path. Documented by the attributes given, since what a guarded method means
/// is each guard's own.
macro_rules! define_with_grpc_methods {
    ($(#[$doc:meta])*) => {
        $(#[$doc])*
        #[cfg(feature = "grpc")]
        #[cfg_attr(docsrs, doc(cfg(feature = "grpc")))]
        pub fn with_grpc_methods(
            mut self,
            methods: impl IntoIterator<Item = impl Into<String>>,
        ) -> Self {
            ::std::sync::Arc::make_mut(&mut self.settings).grpc_methods =
                $crate::grpc::GrpcMethods::new(methods);
            self
        }
    };
}

/// A guard's service `$service<S>` and its layer's `Layer` impl: the struct, holding the
/// wrapped service and the layer's shared settings, with its `new` (documented by the
/// attributes given, for each guard's own example) and accessors.
macro_rules! define_guard_service {
    ($(#[$new:meta])* $layer:ident => $service:ident) => {
        impl<S> ::tower_layer::Layer<S> for $layer {
            type Service = $service<S>;

            fn layer(&self, inner: S) -> Self::Service {
                $service::new(inner, self.clone())
            }
        }

        #[doc = concat!("The service [`", stringify!($layer), "`] makes.")]
        #[derive(Debug, Clone)]
        pub struct $service<S> {
            inner: S,
            settings: ::std::sync::Arc<Settings>,
        }

        impl<S> $service<S> {
            $(#[$new])*
            pub fn new(inner: S, layer: $layer) -> Self {
                Self {
                    inner,
                    settings: layer.settings,
                }
            }

            define_inner_service_accessors!();
        }
    };
}

/// `impl Service<Request>` for a guard service `$service<S>`, whose fields are
/// `inner: S` and `settings: Arc<_>`: a request the guard takes (every request, or those
/// for which the closure-like `|settings, request| …` holds) is answered by the
/// [`ResponseFuture`] `$answer(settings, inner, request)` gives; any other goes to the
/// inner service as it is.
///
/// [`ResponseFuture`]: crate::future::ResponseFuture
macro_rules! impl_guard_service {
    ($service:ident, $answer:path) => {
        impl_guard_service!($service, $answer, |_settings, _request| true);
    };
    ($service:ident, $answer:path, |$settings:ident, $request:ident| $takes:expr) => {
        impl<S> ::tower_service::Service<::axum::extract::Request> for $service<S>
        where
            S: ::tower_service::Service<
                    ::axum::extract::Request,
                    Response = ::axum::response::Response,
                > + Clone
                + Send
                + 'static,
            S::Future: Send + 'static,
            S::Error: Send + 'static,
        {
            type Response = ::axum::response::Response;
            type Error = S::Error;
            type Future = $crate::future::ResponseFuture<S::Future>;

            fn poll_ready(
                &mut self,
                cx: &mut ::std::task::Context<'_>,
            ) -> ::std::task::Poll<Result<(), Self::Error>> {
                self.inner.poll_ready(cx)
            }

            fn call(&mut self, request: ::axum::extract::Request) -> Self::Future {
                let takes = {
                    let ($settings, $request) = (&*self.settings, &request);
                    $takes
                };
                if !takes {
                    return $crate::future::ResponseFuture::unguarded(self.inner.call(request));
                }
                let inner = $crate::future::take_ready(&mut self.inner);
                let settings = ::std::sync::Arc::clone(&self.settings);
                $answer(settings, inner, request)
            }
        }
    };
}
