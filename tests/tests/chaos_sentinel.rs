//! The chaos run on Sentinel with replica acks, short (`idem_tests::chaos`;
//! `scripts/chaos.sh` runs it at length): four instances of the chaos server on a Redis
//! master and one replica watched by three Sentinels, every write that decides something
//! waiting for the replica's acknowledgement (`with_replica_acks(1, 500 ms)`), the
//! replication link delayed 25 ms each way so that the replica lags, while the master is
//! killed and the replica promoted. A failover may lose what the master had not
//! replicated, so what is asserted here is the bound on answers: every request answered
//! within the bound `RedisStoreBuilder::with_replica_acks` states — the store's timeout +
//! `within` per call that waits for the replica, the timeout per other call, + 100 ms —
//! except while its own instance was down, even while the promoted master has no replica
//! and refuses every acknowledged write.

use std::time::Duration;

use idem_tests::chaos::{Chaos, Fault, StoreSetup};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_keep_the_replica_acks_bound_through_a_failover() {
    let setup = StoreSetup::Sentinel {
        replica_acks: Some((1, Duration::from_millis(500))),
        replication_delay: Duration::from_millis(25),
    };
    let mut chaos = Chaos::new(env!("CARGO_BIN_EXE_chaos_server"), setup);
    chaos.faults = vec![Fault::Failover];
    chaos.requests = 1_500;
    chaos.lease = Duration::from_secs(5);
    chaos.settle = Duration::from_secs(2);
    chaos.deadline = Duration::from_secs(90);

    let report = chaos.clone().run().await;
    println!("{}", report.markdown());
    assert_eq!(report.faults.len(), 1, "the failover was injected");
    let violations = report.timing_violations();
    assert!(violations.is_empty(), "{violations:#?}");
}
