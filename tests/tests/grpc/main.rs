//! The guards on a tonic gRPC server (idem-axum's feature `grpc`), called by a tonic
//! client over real HTTP/2. Every claim that a handler ran once counts how often its body
//! ran.
//!
//! One module per guard; this file holds the service they drive — the unary methods of
//! `bank.Bank`, served by tonic's own unary machinery on the axum router tonic's server
//! runs — and the client that calls it.

mod avoid_repeat;
mod idempotency;

use std::future::Future;

use axum::Router;
use axum::http::uri::PathAndQuery;
use axum::response::IntoResponse;
use axum::routing::{MethodRouter, post};
use idem_axum::identity::ClientHeader;
use idem_axum::store::Store;
use idem_axum::{Idem, IdemLayer, StoreFailure};
use idem_tests::Shop;
use tonic::client::Grpc;
use tonic::service::Routes;
use tonic::transport::Channel;
use tonic::transport::server::TcpIncoming;
use tonic::{Code, Status};
use tonic_prost::ProstCodec;
use tonic_types::StatusExt;

const PAY: &str = "/bank.Bank/Pay";
const REFUND: &str = "/bank.Bank/Refund";

/// The message every method takes and answers.
#[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
struct Amount {
    #[prost(int64, tag = "1")]
    cents: i64,
}

/// The runtime's layer: `store`, failing as `failure` says, clients told apart by their
/// `x-api-key` metadata.
fn idem(store: impl Store, failure: StoreFailure) -> IdemLayer {
    let client = ClientHeader::new(axum::http::HeaderName::from_static("x-api-key"));
    Idem::builder()
        .with_store(store)
        .with_store_failure(failure)
        .with_client_identity(client)
        .build()
        .layer()
}

/// A unary method whose body is `handle`, given the method's path and the request's
/// message, and run by tonic's unary service as generated code runs it.
fn unary<F, Fut>(handle: F) -> MethodRouter
where
    F: Fn(String, Amount) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<tonic::Response<Amount>, Status>> + Send + 'static,
{
    post(move |request: axum::extract::Request| {
        let (handle, path) = (handle.clone(), request.uri().path().to_owned());
        async move {
            let service = tower::service_fn(move |request: tonic::Request<Amount>| {
                handle(path.clone(), request.into_inner())
            });
            let mut grpc = tonic::server::Grpc::new(ProstCodec::<Amount, Amount>::default());
            grpc.unary(service, request).await.into_response()
        }
    })
}

/// A unary method that counts its run in `shop` and answers its message.
fn counting(shop: &Shop) -> MethodRouter {
    let shop = shop.clone();
    unary(move |_, amount| {
        let shop = shop.clone();
        async move {
            shop.ran();
            Ok(tonic::Response::new(amount))
        }
    })
}

/// Serves `router` with tonic's server on a port of its own; its URL.
async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = tonic::transport::Server::builder()
        .add_routes(Routes::from(router))
        .serve_with_incoming(TcpIncoming::from(listener));
    tokio::spawn(server);
    url
}

/// A tonic client on a connection of its own.
#[derive(Debug, Clone)]
struct Caller {
    grpc: Grpc<Channel>,
}

impl Caller {
    async fn connect(url: &str) -> Self {
        let channel = Channel::from_shared(url.to_owned()).unwrap();
        Self {
            grpc: Grpc::new(channel.connect().await.unwrap()),
        }
    }

    /// Calls `path` with `cents`, from client `client-1`, with `key` as its
    /// `idempotency-key` if there is one.
    async fn call(
        &mut self,
        path: &'static str,
        cents: i64,
        key: Option<&str>,
    ) -> Result<tonic::Response<Amount>, Status> {
        let mut request = tonic::Request::new(Amount { cents });
        let metadata = request.metadata_mut();
        metadata.insert("x-api-key", "client-1".parse().unwrap());
        if let Some(key) = key {
            metadata.insert("idempotency-key", key.parse().unwrap());
        }
        self.grpc.ready().await.unwrap();
        let path = PathAndQuery::from_static(path);
        self.grpc.unary(request, path, ProstCodec::default()).await
    }
}

/// Whether an answer is a replay.
fn replayed(answer: &tonic::Response<Amount>) -> bool {
    let marker = answer.metadata().get("idempotent-replayed");
    marker.is_some_and(|value| value == "true")
}

/// `status` is `code`, with a `google.rpc.RetryInfo` and the same delay in whole seconds
/// as `retry-after`.
fn assert_retry_later(status: &Status, code: Code) {
    assert_eq!(status.code(), code, "{status:?}");
    let delay = status
        .get_details_retry_info()
        .and_then(|info| info.retry_delay)
        .unwrap_or_else(|| panic!("{status:?} says when to retry"));
    let seconds = (delay.as_secs() + u64::from(delay.subsec_nanos() > 0)).max(1);
    let retry_after = status.metadata().get("retry-after").expect("retry-after");
    assert_eq!(retry_after.to_str().unwrap(), seconds.to_string());
}
