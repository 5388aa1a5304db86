//! What must not allocate: keys and owners are made on every guarded request, and are kept
//! inline for that reason. Undo it (a `String` or an `Arc<str>` inside) and this fails.

use idem_core::{Key, Owner};

#[test]
fn a_hashed_key_and_a_random_owner_allocate_nothing() {
    // The OS random generator behind `Owner::random` sets itself up on first use.
    let _ = Owner::random();
    let made = allocation_counter::measure(|| {
        let key = Key::hashed(["idempotency", "client-42", "POST /orders", "key-7"]);
        let owner = Owner::random();
        std::hint::black_box((key, owner));
    });
    assert_eq!(
        made.count_total, 0,
        "allocations while making a key and an owner"
    );
}

#[test]
fn a_short_chosen_key_allocates_nothing_beyond_its_string() {
    let name = String::from("lock:invoice-run");
    let made = allocation_counter::measure(|| {
        std::hint::black_box(Key::new(name.clone()).unwrap());
    });
    // The clone of the name is the one allocation; the key keeps its bytes inline.
    assert_eq!(made.count_total, 1, "allocations while making a chosen key");
}
