//! `idem_core::run_once` on every store: work run once per key however many calls, from
//! however many instances, arrive at once; its result replayed; another payload refused;
//! a failed, panicked or dropped run giving its key back; the lease renewed while the
//! work runs and taken over when its run died; and, on the SQL stores, the record
//! committed in the work's own transaction. Every claim that the work ran once counts how
//! often it ran.

mod cases;
mod transaction;

/// A module per store, each with a test per case of `cases`.
macro_rules! on_every_store {
    ($($module:ident: $backend:ident;)*) => {
        $(mod $module {
            on_every_store!(@cases $backend:
                hundreds_of_concurrent_calls_from_two_instances_run_the_work_once,
                a_call_while_the_first_runs_is_refused_then_replayed,
                a_waiting_call_is_woken_by_the_first_not_polling,
                another_payload_under_the_key_is_refused,
                a_failure_frees_the_key_and_a_kept_one_is_replayed,
                a_panicked_or_dropped_run_frees_the_key,
                the_lease_is_renewed_while_the_work_runs,
                a_run_that_died_is_taken_over_once_its_lease_ends,
                a_message_layer_and_a_batch_run_each_message_once,
            );
        })*
    };
    (@cases $backend:ident: $($case:ident,)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                crate::cases::$case::<idem_tests::$backend>().await;
            }
        )*
    };
}

on_every_store! {
    memory: MemoryBackend;
    redis: RedisBackend;
    redis_cluster: ClusterBackend;
    postgres: PostgresBackend;
    sqlite: SqliteBackend;
}
