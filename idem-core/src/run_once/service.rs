//! [`RunOnceLayer`]: the run-once guard over any tower `Service` of messages.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use serde::Serialize;
use serde::de::DeserializeOwned;
use tower_layer::Layer;
use tower_service::Service;

use super::{RunError, RunOnce, fingerprint_as};
use crate::Fingerprint;
use crate::store::RecordStore;

/// How a [`RunOnceLayer`] tells a redelivered message from another one sent with its
/// key.
pub trait MessageFingerprint<M> {
    /// The fingerprint of `message`, for `once`.
    ///
    /// # Errors
    ///
    /// The message could not be serialised.
    fn fingerprint<St>(
        &self,
        once: &RunOnce<St>,
        message: &M,
    ) -> Result<Fingerprint, serde_json::Error>;
}

/// The fingerprint of a `Serialize` message, as its [`RunOnce`] takes a payload's
/// ([`RunOnce::with_payload_fingerprint`]; its JSON with sorted keys by default). A
/// [`RunOnceLayer`]'s default.
#[derive(Clone, Copy, Debug, Default)]
pub struct JsonFingerprint;

impl<M: Serialize> MessageFingerprint<M> for JsonFingerprint {
    fn fingerprint<St>(
        &self,
        once: &RunOnce<St>,
        message: &M,
    ) -> Result<Fingerprint, serde_json::Error> {
        fingerprint_as(&once.payload, message)
    }
}

/// A fingerprint of the caller's: [`RunOnceLayer::fingerprint_with`].
#[derive(Clone, Copy)]
pub struct FingerprintWith<F>(F);

impl<M, F: Fn(&M) -> Fingerprint> MessageFingerprint<M> for FingerprintWith<F> {
    fn fingerprint<St>(
        &self,
        _: &RunOnce<St>,
        message: &M,
    ) -> Result<Fingerprint, serde_json::Error> {
        Ok((self.0)(message))
    }
}

impl<F> fmt::Debug for FingerprintWith<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FingerprintWith")
    }
}

/// Runs the wrapped service once per message key: a message delivered again gets the
/// first delivery's response, decoded from the store, and the service is not called.
/// The key comes from the message (`key`: its id, an event's id, an order number).
///
/// The service's response is the kept result: it must be `Serialize` and
/// `Deserialize`. Its error frees the key, as [`RunOnce::run`]'s work's does. The
/// service finds the run's [`Attempt`](super::Attempt) with
/// [`Attempt::current`](super::Attempt::current): for its outbound keys, or to complete
/// the record in its own transaction.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::convert::Infallible;
/// use serde::{Deserialize, Serialize};
/// use tower::{ServiceBuilder, ServiceExt, service_fn};
/// use idem_core::MemoryStore;
/// use idem_core::run_once::{RunOnce, RunOnceLayer};
///
/// #[derive(Clone, Serialize, Deserialize)]
/// struct OrderPlaced { id: String, cents: u64 }
///
/// let once = RunOnce::new(MemoryStore::new(), "order-placed");
/// let consumer = ServiceBuilder::new()
///     .layer(RunOnceLayer::new(once, |event: &OrderPlaced| event.id.clone()))
///     .service(service_fn(|event: OrderPlaced| async move {
///         Ok::<_, Infallible>(format!("shipped {}", event.id))
///     }));
///
/// let event = OrderPlaced { id: "o-7".into(), cents: 1299 };
/// let first = consumer.clone().oneshot(event.clone()).await.unwrap();
/// let redelivered = consumer.oneshot(event).await.unwrap();
/// assert_eq!(first, redelivered);
/// # }
/// ```
pub struct RunOnceLayer<St, K, Fp = JsonFingerprint> {
    once: RunOnce<St>,
    key: K,
    fingerprint: Fp,
}

impl<St, K> RunOnceLayer<St, K> {
    /// The guard of `once` over a service, keyed by `key` of each message, each message
    /// fingerprinted by its JSON.
    pub fn new(once: RunOnce<St>, key: K) -> Self {
        Self {
            once,
            key,
            fingerprint: JsonFingerprint,
        }
    }
}

impl<St, K, Fp> RunOnceLayer<St, K, Fp> {
    /// Fingerprints each message with `fingerprint` instead of its JSON: for a message
    /// that is not `Serialize` (a protobuf message), or whose fields do not all tell one
    /// message from another (its delivery time).
    pub fn fingerprint_with<M, F>(self, fingerprint: F) -> RunOnceLayer<St, K, FingerprintWith<F>>
    where
        F: Fn(&M) -> Fingerprint,
    {
        RunOnceLayer {
            once: self.once,
            key: self.key,
            fingerprint: FingerprintWith(fingerprint),
        }
    }
}

impl<St: Clone, K: Clone, Fp: Clone> Clone for RunOnceLayer<St, K, Fp> {
    fn clone(&self) -> Self {
        Self {
            once: self.once.clone(),
            key: self.key.clone(),
            fingerprint: self.fingerprint.clone(),
        }
    }
}

impl<St: fmt::Debug, K, Fp> fmt::Debug for RunOnceLayer<St, K, Fp> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunOnceLayer")
            .field("once", &self.once)
            .finish_non_exhaustive()
    }
}

impl<S, St: Clone, K: Clone, Fp: Clone> Layer<S> for RunOnceLayer<St, K, Fp> {
    type Service = RunOnceService<S, St, K, Fp>;

    fn layer(&self, inner: S) -> Self::Service {
        RunOnceService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service of [`RunOnceLayer`].
pub struct RunOnceService<S, St, K, Fp = JsonFingerprint> {
    inner: S,
    layer: RunOnceLayer<St, K, Fp>,
}

impl<S: Clone, St: Clone, K: Clone, Fp: Clone> Clone for RunOnceService<S, St, K, Fp> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

impl<S: fmt::Debug, St: fmt::Debug, K, Fp> fmt::Debug for RunOnceService<S, St, K, Fp> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunOnceService")
            .field("inner", &self.inner)
            .field("layer", &self.layer)
            .finish()
    }
}

impl<M, S, St, K, Fp> Service<M> for RunOnceService<S, St, K, Fp>
where
    M: Send + 'static,
    S: Service<M> + Clone + Send + 'static,
    S::Response: Serialize + DeserializeOwned + Send,
    S::Error: Send,
    S::Future: Send,
    St: RecordStore + Clone,
    K: Fn(&M) -> String,
    Fp: MessageFingerprint<M>,
{
    type Response = S::Response;
    type Error = RunError<S::Error>;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(RunError::Failed)
    }

    fn call(&mut self, message: M) -> Self::Future {
        // The service made ready is the one that runs the message; a clone takes its place.
        let ready = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, ready);
        let once = self.layer.once.clone();
        let key = once.key_of(&(self.layer.key)(&message));
        let fingerprint = self.layer.fingerprint.fingerprint(&once, &message);
        Box::pin(async move {
            let fingerprint = fingerprint.map_err(RunError::Encode)?;
            once.run_on(key, fingerprint, move |_| inner.call(message))
                .await
        })
    }
}
