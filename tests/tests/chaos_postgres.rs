//! The chaos run on PostgreSQL, short (`idem_tests::chaos`; `scripts/chaos.sh` runs it at
//! length): four instances of the chaos server with every guard on one `PostgresStore`
//! (a real PostgreSQL with its default durability, reached through a forwarder), sent
//! duplicates of every guarded kind while PostgreSQL is stopped with `pg_ctl stop -m
//! immediate` and started again, an instance is killed in the middle of handlers, every
//! connection of the store is ended with `pg_terminate_backend`, and the link stalls and
//! resets. The idempotency routes complete their records in the transaction that writes
//! their commit. Then:
//!
//! - no operation ran twice; on the idempotency routes not even where an instance was
//!   killed between its commit and its answer (the commit and the record are one), counted
//!   from the servers' ledgers and the commits' table, not from status codes;
//! - every request was answered within the store's timeout + 100 ms, except while its own
//!   instance was down: on the idempotency routes too, where the handler's transaction is
//!   bounded by the store's timeout and the layer asks the store nothing after it;
//! - every record completed shortly before the restart and the terminations was still
//!   there after them: its response replayed, its token and window still refusing;
//! - every operation got a final answer, and the lock route's holders never overlapped.

use std::time::Duration;

use idem_tests::chaos::{Chaos, Fault, StoreSetup};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_twice_never_lost_through_postgres_restarts_terminations_kills_and_link_faults() {
    let mut chaos = Chaos::new(env!("CARGO_BIN_EXE_chaos_server"), StoreSetup::Postgres);
    chaos.faults = vec![
        Fault::PostgresRestart,
        Fault::InstanceKill,
        Fault::PostgresTerminate,
        Fault::LinkStall,
        Fault::LinkReset,
    ];
    chaos.requests = 3_000;
    chaos.lease = Duration::from_secs(5);
    chaos.settle = Duration::from_secs(2);
    chaos.deadline = Duration::from_secs(90);

    let report = chaos.clone().run().await;
    println!("{}", report.markdown());
    report.assert_held(&chaos);
}
