//! [`store_operations!`](crate::store_operations): the one list of the store operations,
//! by capability, that everything forwarding them is generated from.

/// Calls `callback!` with every store operation, by capability, so that code forwarding
/// them all — [`AnyStore`](crate::AnyStore)'s erasure, the store of idem-axum's runtime,
/// a test wrapper that counts calls — is generated from this one list and cannot leave one
/// out (an operation left out of a forwarding `impl` would silently fall back to its
/// trait's default).
///
/// The callback gets:
///
/// ```text
/// capabilities {
///     LockStore {
///         acquire(key: &Key, owner: &Owner; ttl: Duration, fencing: Fencing) -> Acquire;
///         …
///     }
///     TokenStore { … }
///     RecordStore { … }
/// }
/// fair {
///     FairStore { … }
/// }
/// ```
///
/// Each operation is its name, its borrowed arguments (`name: &Type`), a `;`, its
/// arguments taken by value, and what it answers: its future's output is
/// `Result<answer, StoreError>`. Types are spelled with absolute paths, so the callback
/// expands anywhere. [`FairStore`](crate::FairStore) comes apart, being a capability that
/// [`Store`](crate::Store) does not include.
#[doc(hidden)]
#[macro_export]
macro_rules! store_operations {
    ($callback:path) => {
        $callback! {
            capabilities {
                LockStore {
                    acquire(
                        key: &$crate::Key, owner: &$crate::Owner;
                        ttl: ::core::time::Duration, fencing: $crate::store::Fencing
                    ) -> $crate::Acquire;
                    release(key: &$crate::Key, owner: &$crate::Owner;) -> bool;
                    acquire_or_register_waiter(
                        key: &$crate::Key, owner: &$crate::Owner;
                        ttl: ::core::time::Duration, fencing: $crate::store::Fencing,
                        wait: ::core::time::Duration
                    ) -> $crate::Acquire;
                    release_and_signal(key: &$crate::Key, owner: &$crate::Owner;) -> bool;
                    wait_for_release(key: &$crate::Key; within: ::core::time::Duration) -> bool;
                    renew(
                        key: &$crate::Key, owner: &$crate::Owner; ttl: ::core::time::Duration
                    ) -> bool;
                    remaining(key: &$crate::Key;) -> ::core::option::Option<::core::time::Duration>;
                }
                TokenStore {
                    put_token(
                        scope: &$crate::Key, token: &$crate::Key;
                        ttl: ::core::time::Duration, keep: usize
                    ) -> ();
                    consume_token(scope: &$crate::Key, token: &$crate::Key;) -> bool;
                    has_token(scope: &$crate::Key, token: &$crate::Key;) -> bool;
                }
                RecordStore {
                    begin_record(
                        key: &$crate::Key, owner: &$crate::Owner,
                        fingerprint: &$crate::Fingerprint; lease: ::core::time::Duration
                    ) -> $crate::Begin;
                    complete_record(
                        key: &$crate::Key, owner: &$crate::Owner;
                        response: $crate::__private::Bytes, retention: ::core::time::Duration
                    ) -> bool;
                    renew_record(
                        key: &$crate::Key, owner: &$crate::Owner; lease: ::core::time::Duration
                    ) -> bool;
                    abandon_record(key: &$crate::Key, owner: &$crate::Owner;) -> bool;
                    record_state(key: &$crate::Key;) -> ::core::option::Option<$crate::RecordState>;
                    remove_record(key: &$crate::Key;) -> bool;
                    wait_for_record(key: &$crate::Key; within: ::core::time::Duration) -> bool;
                }
            }
            fair {
                FairStore {
                    acquire_in_turn(
                        key: &$crate::Key, owner: &$crate::Owner;
                        ttl: ::core::time::Duration, fencing: $crate::store::Fencing,
                        place: ::core::option::Option<::core::time::Duration>
                    ) -> $crate::store::Turn;
                    wait_for_turn(
                        key: &$crate::Key, owner: &$crate::Owner; within: ::core::time::Duration
                    ) -> bool;
                    leave_queue(key: &$crate::Key, owner: &$crate::Owner;) -> ();
                }
            }
        }
    };
}
