//! A lock a case holds in the store directly, below the `Lock` API.

use std::time::Duration;

use idem_core::store::Fencing;
use idem_core::{Acquire, Key, Owner, Store};

/// Takes the lock `name` on `store` for a fresh owner, fenced, for a minute: a holder whose
/// lock a case then waits on, releases, renews or tampers with. Answers the lock's key and
/// its owner.
///
/// # Panics
///
/// When `name` is not a valid key, or the store fails or does not answer that the lock was
/// acquired, with a fencing token.
pub async fn hold_fenced<S: Store>(store: &S, name: &str) -> (Key, Owner) {
    let (lock, owner) = (Key::new(name).expect("a valid key"), Owner::random());
    let acquired = store
        .acquire(&lock, &owner, Duration::from_secs(60), Fencing::On)
        .await
        .unwrap();
    assert!(
        matches!(acquired, Acquire::Acquired { fence: Some(_) }),
        "{acquired:?}"
    );
    (lock, owner)
}
