//! Re-entry: the same owner shares one hold, and a fenced one its token.

use std::time::Duration;

use idem_core::lock::{Fenced, Lease, LockError, Unfenced};
use idem_core::{Lock, Owner};

use crate::{LONG, LockBackend, Mode, is_free, key};

lock_suite!(
    the_same_owner_reenters_and_shares_one_hold,
    a_fenced_reentry_shares_the_token,
);

/// Reentry is not counted: both guards share one hold, and the first release ends it.
async fn the_same_owner_reenters_and_shares_one_hold<B: LockBackend>(backend: B) {
    in_both_modes!(reentry, backend, "reentry")
}

async fn reentry<B: LockBackend, F: Mode>(backend: &B, name: &str) {
    let owner = Owner::new("worker-7:job-42").unwrap();
    let lock = F::make(Lock::new(backend.store(), key(name), Lease::Fixed(LONG)))
        .with_owner(owner.clone());
    let first = lock.try_acquire().await.unwrap();
    // The same owner from elsewhere, as a retry after a network timeout would be.
    let again = F::make(Lock::new(backend.store(), key(name), Lease::Fixed(LONG)))
        .with_owner(owner)
        .acquire_within(LONG)
        .await
        .expect("the same owner re-enters, also while waiting");
    assert!(again.is_reentered() && !first.is_reentered());
    assert!(again.valid_until() <= first.valid_until() + Duration::from_millis(50));
    assert!(matches!(
        F::make(Lock::new(backend.store(), key(name), Lease::Fixed(LONG)))
            .try_acquire()
            .await,
        Err(LockError::Held { .. })
    ));

    assert!(
        again.release().await.unwrap(),
        "either guard frees the hold"
    );
    assert!(is_free(&backend.store(), lock.key()).await);
    assert!(
        !first.release().await.unwrap(),
        "the other guard's hold ended with it"
    );
}

/// A fenced lock's guards of one hold share its token, and the next hold's is greater.
async fn a_fenced_reentry_shares_the_token<B: LockBackend>(backend: B) {
    let owner = Owner::random();
    let lock = Lock::new(backend.store(), key("fenced-reentry"), Lease::Fixed(LONG))
        .fenced()
        .with_owner(owner);
    let first = lock.try_acquire().await.unwrap();
    let again = lock.try_acquire().await.unwrap();
    let waited = lock.acquire_within(LONG).await.unwrap();
    assert_eq!(again.fencing_token(), first.fencing_token(), "one hold");
    assert_eq!(waited.fencing_token(), first.fencing_token(), "one hold");
    let token = first.fencing_token();
    assert!(first.release().await.unwrap());
    let next = lock.try_acquire().await.unwrap();
    assert!(next.fencing_token() > token);
    assert!(next.release().await.unwrap());
}
