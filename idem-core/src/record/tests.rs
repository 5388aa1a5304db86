//! The lifecycle on its own, with no HTTP in sight: what `idem-axum`'s guards and the
//! run-once API rely on.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{AbandonOnDrop, Began, Host, Kept, Record, Spending};
use crate::store::{Begin, RecordStore, StoreError};
use crate::{Fingerprint, Key, MemoryStore, Owner};

const LEASE: Duration = Duration::from_secs(30);
const RETENTION: Duration = Duration::from_secs(60);

/// A host that says when each piece of work it ran has ended.
#[derive(Debug, Clone)]
struct TestHost {
    taken_over: Arc<AtomicBool>,
    ended: mpsc::UnboundedSender<()>,
}

impl Host for TestHost {
    fn spawn<F>(&self, work: F) -> Option<JoinHandle<()>>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let ended = self.ended.clone();
        Some(tokio::spawn(async move {
            work.await;
            let _ = ended.send(());
        }))
    }

    fn taken_over(&self) -> bool {
        self.taken_over.load(Ordering::Relaxed)
    }
}

/// A host, and the receiving end of what it says.
fn host() -> (TestHost, mpsc::UnboundedReceiver<()>) {
    let (ended, receiver) = mpsc::unbounded_channel();
    let taken_over = Arc::new(AtomicBool::new(false));
    (TestHost { taken_over, ended }, receiver)
}

/// Counts what was given back and spent late.
#[derive(Default)]
struct Spent {
    given_back: Arc<AtomicUsize>,
    spent_late: Arc<AtomicUsize>,
}

impl Spending for Spent {
    fn give_back(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        self.given_back.fetch_add(1, Ordering::Relaxed);
        Box::pin(std::future::ready(()))
    }

    fn spend_late(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        self.spent_late.fetch_add(1, Ordering::Relaxed);
        Box::pin(std::future::ready(()))
    }
}

fn names() -> (Key, Fingerprint) {
    (Key::hashed(["job", "7"]), Fingerprint::of(["payload"]))
}

async fn begin<St: RecordStore + Clone>(store: &St, host: &TestHost) -> Began<St, TestHost> {
    let (key, fingerprint) = names();
    Record::begin(store.clone(), &key, &fingerprint, LEASE, |_, _| {
        host.clone()
    })
    .await
    .expect("the store answers")
}

async fn first<St: RecordStore + Clone>(store: &St, host: &TestHost) -> Record<St, TestHost> {
    match begin(store, host).await {
        Began::First(record) => record,
        other => panic!("a free key begins a record, not {other:?}"),
    }
}

#[tokio::test]
async fn a_completed_record_answers_the_next_attempt_with_its_result() {
    let (store, (host, _)) = (MemoryStore::new(), host());
    let record = first(&store, &host).await;
    assert!(matches!(begin(&store, &host).await, Began::InProgress(_)));
    let kept = record
        .complete(Bytes::from_static(b"done"), RETENTION, Bytes::new)
        .await;
    assert_eq!(kept, Kept::Stored);
    assert!(matches!(begin(&store, &host).await, Began::Completed(stored) if stored == "done"));
    let (key, _) = names();
    let other = Fingerprint::of(["another payload"]);
    let began = Record::begin(store.clone(), &key, &other, LEASE, |_, _| host.clone()).await;
    assert!(matches!(began, Ok(Began::Mismatch)));
}

#[tokio::test]
async fn an_abandoned_record_gives_back_what_was_spent_and_frees_the_key() {
    let (store, (host, _)) = (MemoryStore::new(), host());
    let spent = Spent::default();
    let given_back = Arc::clone(&spent.given_back);
    let record = first(&store, &host).await.spending(spent);
    record.abandon().await;
    assert_eq!(given_back.load(Ordering::Relaxed), 1);
    first(&store, &host).await;
}

#[tokio::test]
async fn what_the_attempt_left_to_spend_is_spent_once_its_result_is_stored() {
    let (store, (host, _)) = (MemoryStore::new(), host());
    let spent = Spent::default();
    let (spent_late, given_back) = (Arc::clone(&spent.spent_late), Arc::clone(&spent.given_back));
    let record = first(&store, &host).await.spending(spent);
    let kept = record
        .complete(Bytes::from_static(b"r"), RETENTION, Bytes::new)
        .await;
    assert_eq!(kept, Kept::Stored);
    assert_eq!(spent_late.load(Ordering::Relaxed), 1);
    assert_eq!(given_back.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn a_record_taken_over_is_left_to_its_attempt() {
    let (store, (host, _)) = (MemoryStore::new(), host());
    let record = first(&store, &host).await;
    host.taken_over.store(true, Ordering::Relaxed);
    let kept = record
        .complete(Bytes::from_static(b"r"), RETENTION, Bytes::new)
        .await;
    assert_eq!(kept, Kept::ByHandler);
    assert!(
        matches!(begin(&store, &host).await, Began::InProgress(_)),
        "the store was asked nothing: the record is as the attempt left it"
    );
}

#[tokio::test]
async fn a_result_without_room_is_kept_as_the_note() {
    let store = MemoryStore::builder().with_max_bytes(4096).build();
    let (host, _) = host();
    let record = first(&store, &host).await;
    let large = Bytes::from(vec![b'x'; 64 * 1024]);
    let kept = record
        .complete(large, RETENTION, || Bytes::from_static(b"too large"))
        .await;
    assert_eq!(kept, Kept::Stored);
    assert!(
        matches!(begin(&store, &host).await, Began::Completed(stored) if stored == "too large")
    );
}

#[tokio::test]
async fn a_panicking_attempt_frees_its_key() {
    let (store, (host, mut ended)) = host_on_memory();
    let record = first(&store, &host).await;
    let armed: AbandonOnDrop<_, _> = record.clone().abandon_on_drop();
    let attempt = tokio::spawn(async move {
        let _armed = armed;
        panic!("the handler panics");
    });
    assert!(attempt.await.is_err_and(|error| error.is_panic()));
    ended.recv().await.expect("the removal ran");
    // The key is free again; disarmed, the guard leaves the new record alone.
    let record = first(&store, &host).await;
    drop(record.abandon_on_drop().disarm());
    assert!(matches!(begin(&store, &host).await, Began::InProgress(_)));
}

fn host_on_memory() -> (MemoryStore, (TestHost, mpsc::UnboundedReceiver<()>)) {
    (MemoryStore::new(), host())
}

/// A `MemoryStore` that counts the renewals it is asked for, and, told to, begins records
/// without ever answering the begin, as a link that stalls on the way back.
#[derive(Debug, Clone, Default)]
struct Renewals {
    store: MemoryStore,
    renewed: Arc<AtomicUsize>,
    begins_unanswered: bool,
}

impl RecordStore for Renewals {
    async fn begin_record(
        &self,
        key: &Key,
        owner: &Owner,
        fingerprint: &Fingerprint,
        lease: Duration,
    ) -> Result<Begin, StoreError> {
        let begun = self
            .store
            .begin_record(key, owner, fingerprint, lease)
            .await;
        if self.begins_unanswered {
            return std::future::pending().await;
        }
        begun
    }

    async fn complete_record(
        &self,
        key: &Key,
        owner: &Owner,
        response: Bytes,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        self.store
            .complete_record(key, owner, response, retention)
            .await
    }

    async fn renew_record(
        &self,
        key: &Key,
        owner: &Owner,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        self.renewed.fetch_add(1, Ordering::Relaxed);
        self.store.renew_record(key, owner, lease).await
    }

    async fn abandon_record(&self, key: &Key, owner: &Owner) -> Result<bool, StoreError> {
        self.store.abandon_record(key, owner).await
    }
}

/// On Tokio's paused clock: work that waits two leases is renewed every third of one;
/// work that ends at once starts no renewal at all.
#[tokio::test(start_paused = true)]
async fn the_lease_is_renewed_while_the_work_waits_and_only_then() {
    let (store, (host, _)) = (Renewals::default(), host());
    let record = first(&store, &host).await;
    record.renewing(std::future::ready(())).await;
    assert_eq!(store.renewed.load(Ordering::Relaxed), 0);
    record.renewing(tokio::time::sleep(LEASE * 2)).await;
    let renewed = store.renewed.load(Ordering::Relaxed);
    assert!((5..=6).contains(&renewed), "renewed {renewed} times");
}

#[tokio::test]
async fn spending_is_set_in_place() {
    let (store, (host, _)) = (MemoryStore::new(), host());
    let record = first(&store, &host).await;
    let state = Arc::as_ptr(&record.0);
    let record = record.spending(Spent::default());
    assert_eq!(Arc::as_ptr(&record.0), state, "set in place");
    assert!(record.0.spending.is_some());
    let shared = record.clone();
    let spending_again = shared.spending(Spent::default());
    assert_ne!(Arc::as_ptr(&spending_again.0), state);
    assert!(record.0.spending.is_some() && spending_again.0.spending.is_some());
}

/// A begin dropped before its answer came (its caller went away) gives the key back, in
/// a task of its host's: a retry runs rather than finding the key in progress for a
/// whole lease. A begin that was answered gives nothing back.
#[tokio::test]
async fn a_begin_dropped_before_its_answer_gives_the_key_back() {
    let unanswered = Renewals {
        begins_unanswered: true,
        ..Renewals::default()
    };
    let (host, mut ended) = host();
    let (key, fingerprint) = names();
    let mut unanswered_begin = Box::pin(Record::begin(
        unanswered.clone(),
        &key,
        &fingerprint,
        LEASE,
        |_, _| host.clone(),
    ));
    let polled = std::future::poll_fn(|cx| Poll::Ready(unanswered_begin.as_mut().poll(cx))).await;
    assert!(polled.is_pending(), "the store holds its answer back");
    let memory = unanswered.store;
    assert!(
        matches!(begin(&memory, &host).await, Began::InProgress(_)),
        "the store began the record"
    );
    drop(unanswered_begin);
    let given_back = tokio::time::timeout(Duration::from_secs(5), ended.recv()).await;
    assert!(matches!(given_back, Ok(Some(()))), "the key was given back");
    let record = first(&memory, &host).await;
    assert!(
        ended.try_recv().is_err(),
        "an answered begin gives nothing back"
    );
    drop(record);
    assert!(matches!(begin(&memory, &host).await, Began::InProgress(_)));
}
