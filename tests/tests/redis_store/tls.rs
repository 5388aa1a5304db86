//! Redis over TLS (`rediss://`, feature `tls`).

use idem_core::LockStore;
use std::time::Duration;

use idem_core::store::Fencing;
use idem_redis::RedisStore;
use idem_tests::{RedisServer, hold_fenced, unused_port};
use redis::RedisError;

use crate::{LONG, Server};

/// A certificate authority made for one test, and a certificate it signed for 127.0.0.1,
/// written as PEM files into `dir`: (CA certificate PEM, certificate path, key path).
fn throwaway_tls(dir: &std::path::Path) -> (Vec<u8>, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, SanType};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().expect("a CA key");
    let ca_cert = ca_params.self_signed(&ca_key).expect("the CA certificate");
    let issuer = Issuer::new(ca_params, ca_key);
    let mut params = CertificateParams::new(vec!["localhost".to_owned()]).expect("parameters");
    params
        .subject_alt_names
        .push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
    let key = KeyPair::generate().expect("a key");
    let cert = params.signed_by(&key, &issuer).expect("a certificate");
    let (cert_path, key_path) = (dir.join("redis.crt"), dir.join("redis.key"));
    std::fs::write(&cert_path, cert.pem()).expect("the certificate file");
    std::fs::write(&key_path, key.serialize_pem()).expect("the key file");
    (
        ca_cert.pem().into_bytes(),
        cert_path.display().to_string(),
        key_path.display().to_string(),
    )
}

/// Over TLS (`rediss://`, feature `tls`): a store that trusts the server's CA works as
/// over plain TCP; one that trusts only the system's roots cannot talk to the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_a_store_that_trusts_the_ca_works_and_one_that_does_not_is_refused() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (ca, cert, key_file) = throwaway_tls(dir.path());
    let tls_port = unused_port().to_string();
    let _server = RedisServer::start_with(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key_file,
        "--tls-auth-clients",
        "no",
    ]);
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let store = RedisStore::builder()
        .with_timeout(Duration::from_secs(2))
        .with_lazy_connect(true)
        .connect(Server::url_with_ca(&url, ca))
        .await
        .expect("a TLS store");
    // A fenced lock is taken and released over TLS.
    let (lock, owner) = hold_fenced(&store, "over-tls").await;
    assert!(store.release(&lock, &owner).await.unwrap());

    let untrusting = RedisStore::builder()
        .with_timeout(Duration::from_secs(2))
        .with_lazy_connect(true)
        .connect(Server::url(&url))
        .await
        .expect("a valid URL");
    let refused = untrusting.acquire(&lock, &owner, LONG, Fencing::Off).await;
    assert!(
        refused
            .as_ref()
            .is_err_and(|error| error.backend_error::<RedisError>().is_some()),
        "a certificate from an unknown CA is refused: {refused:?}"
    );
}
