//! [`IdemLayer`]: puts an [`Idem`] where the guards below it find it.

use std::task::{Context, Poll};

use tower_layer::Layer;
use tower_service::Service;

use super::Idem;

/// Puts an [`Idem`] in every request's extensions, where guards find it. Made by
/// [`Idem::layer`].
#[derive(Debug, Clone)]
pub struct IdemLayer {
    idem: Idem,
}

impl IdemLayer {
    pub(super) fn new(idem: Idem) -> Self {
        Self { idem }
    }
}

impl<S> Layer<S> for IdemLayer {
    type Service = IdemService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        IdemService::new(inner, self.idem.clone())
    }
}

/// The service [`IdemLayer`] makes.
#[derive(Debug, Clone)]
pub struct IdemService<S> {
    inner: S,
    idem: Idem,
}

impl<S> IdemService<S> {
    /// Makes `idem` available to the guards inside `inner`.
    ///
    /// ```
    /// use idem_axum::{Idem, IdemService};
    /// let service = IdemService::new(axum::Router::<()>::new(), Idem::builder().build());
    /// ```
    pub fn new(inner: S, idem: Idem) -> Self {
        Self { inner, idem }
    }

    define_inner_service_accessors!();
}

impl<S, B> Service<http::Request<B>> for IdemService<S>
where
    S: Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        request.extensions_mut().insert(self.idem.clone());
        self.inner.call(request)
    }
}
