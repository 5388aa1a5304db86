//! A payment replayed by a new server process after the first was killed, its record kept
//! by a real redis-server that was itself restarted from its append-only file.

mod common;

use std::process::Command;

use example_grpc::proto::ListPaymentsRequest;
use idem_tests::{RedisServer, ServerProcess};

use common::{client, keyed, ledger_entry, payment, replayed};

/// The example's binary on a port of its own, its records in `redis`.
fn start(redis: &RedisServer) -> ServerProcess {
    let mut command = Command::new(env!("CARGO_BIN_EXE_example-grpc"));
    command.args(["--port", "0", "--redis", &redis.url()]);
    ServerProcess::start(command)
}

#[tokio::test]
async fn a_payment_is_replayed_after_the_server_and_redis_restart() {
    let mut redis = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let first_server = start(&redis);
    let mut first_client = client(first_server.base()).await;
    let paid = first_client
        .pay(keyed(payment(2_500), "order-77"))
        .await
        .expect("the payment");
    assert!(!replayed(&paid));

    drop(first_server); // SIGKILL
    redis.stop();
    redis.start_again();
    let second_server = start(&redis);
    let mut second_client = client(second_server.base()).await;
    let again = second_client
        .pay(keyed(payment(2_500), "order-77"))
        .await
        .expect("the replay");

    assert!(replayed(&again), "idempotent-replayed: true");
    assert_eq!(
        again.get_ref(),
        paid.get_ref(),
        "the first payment, by its id"
    );
    assert_eq!(ledger_entry(&again), ledger_entry(&paid), "and its trailer");
    let mut made_here = second_client
        .list_payments(ListPaymentsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        made_here.message().await.unwrap(),
        None,
        "the new process charged nothing"
    );
}
