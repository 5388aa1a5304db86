//! The chaos run, short (`idem_tests::chaos`; `scripts/chaos.sh` runs it at length):
//! four instances of the chaos server on one Redis that writes its append-only file with
//! `appendfsync always`, sent duplicates of every guarded kind while Redis is killed and
//! started again from its file, an instance is killed in the middle of handlers and
//! started again, Redis is paused, and the link to it stalls and resets. Then:
//!
//! - no operation ran twice but where an instance was killed between its commit and the
//!   moment its response was stored (the window a record kept apart from the data
//!   cannot close), counted from the servers' ledgers, not from status codes;
//! - every request was answered within the store's timeout + 100 ms, except while its
//!   own instance was down;
//! - every record completed shortly before the Redis restart was still there after it:
//!   its response replayed, its token and window still refusing;
//! - every operation got a final answer, and the lock route's holders never overlapped.

use idem_tests::chaos::{Chaos, Fault, StoreSetup};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_twice_never_lost_through_redis_restarts_kills_pauses_and_link_faults() {
    let mut chaos = Chaos::new(env!("CARGO_BIN_EXE_chaos_server"), StoreSetup::Durable);
    chaos.faults = vec![
        Fault::RedisRestart,
        Fault::InstanceKill,
        Fault::ClientPause,
        Fault::LinkStall,
        Fault::LinkReset,
    ];
    chaos.requests = 3_000;
    chaos.lease = std::time::Duration::from_secs(5);
    chaos.settle = std::time::Duration::from_secs(2);
    chaos.deadline = std::time::Duration::from_secs(90);

    let report = chaos.clone().run().await;
    println!("{}", report.markdown());
    report.assert_held(&chaos);
}
