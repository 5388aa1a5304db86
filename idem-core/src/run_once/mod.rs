//! Any async work, run once per key: a queue consumer's message, a webhook, a scheduled
//! job, a step of a batch. [`RunOnce`] keeps each run's result in a record of any store
//! and answers a later call with the same key from it, without running the work again.
//!
//! Delivery is at least once wherever a message can be lost: a broker redelivers a
//! message whose consumer died before it acknowledged, a scheduler reruns a job it did
//! not see finish, a provider sends its callback again. The work must not run twice for
//! one of them. [`RunOnce::run`] begins a record under the caller's key — one atomic
//! step in the store, as every guard of idem — and:
//!
//! - the first call runs the work, with the record's lease renewed while it runs, and
//!   keeps its result, serialised with serde (as JSON), for the retention;
//! - a later call with the key gets that result back, decoded ([`RunOnce::run`] returns
//!   it as the first call did) — the work does not run;
//! - a call with the key while the first still runs gets [`RunError::InProgress`], or
//!   waits for the first's result within a bound
//!   ([`wait_while_in_progress`](RunOnce::wait_while_in_progress));
//! - a call with the key and **another payload** gets [`RunError::Mismatch`]: a key sent
//!   again with something else is a client's bug, not a retry;
//! - a run that **fails** (the work answers `Err`, panics, or its future is dropped)
//!   frees the key: the next call runs the work afresh. To keep a failure — a card
//!   declined is an answer, not a fault — return it inside `Ok`: the result may itself
//!   be a `Result`, and is kept and replayed like any other;
//! - a run whose process died leaves its record in progress until its lease ends; the
//!   next call after that takes the record over and runs the work.
//!
//! ```
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use std::time::Duration;
//! use idem_core::MemoryStore;
//! use idem_core::run_once::{RunError, RunOnce};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize)]
//! struct Charge { order: u64, cents: u64 }
//! #[derive(Debug, PartialEq, Serialize, Deserialize)]
//! struct Receipt { id: u32 }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let charges = AtomicU32::new(0);
//! let once = RunOnce::new(MemoryStore::new(), "charge").with_retention(Duration::from_secs(3600));
//! let charge = Charge { order: 7, cents: 1299 };
//!
//! let work = |_| async { Ok::<_, std::io::Error>(Receipt { id: charges.fetch_add(1, Ordering::SeqCst) + 1 }) };
//! let first = once.run("order-7", &charge, work).await.unwrap();
//! let again = once.run("order-7", &charge, work).await.unwrap(); // a redelivery
//! assert_eq!(first, Receipt { id: 1 });
//! assert_eq!(again, first, "the redelivery gets the first run's receipt");
//! assert_eq!(charges.load(Ordering::SeqCst), 1, "and the work ran once");
//!
//! // The same key with another payload is refused, not run.
//! let other = Charge { order: 7, cents: 1 };
//! let refused = once.run("order-7", &other, work).await;
//! assert!(matches!(refused, Err(RunError::Mismatch)));
//! # }
//! ```
//!
//! # Keys and fingerprints
//!
//! A record's key is the caller's key within the [`RunOnce`]'s *scope* (its name, say
//! `"charge"`): two scopes never share a record. [`run_by_payload`](RunOnce::run_by_payload)
//! derives the key from the payload itself, for messages that carry no id of their own.
//!
//! The fingerprint that tells a retry from a reused key is the payload's JSON with its
//! object keys sorted and no whitespace ([`fingerprint_of`]): a map serialised in
//! another order is the same payload. [`with_payload_fingerprint`](RunOnce::with_payload_fingerprint)
//! chooses otherwise — only some fields, or none — as the HTTP guards do. [`run_with`](RunOnce::run_with) takes a
//! [`Fingerprint`] of the caller's own instead, for a payload that is not `Serialize`
//! (a protobuf message) or whose fields do not all count (a timestamp of delivery).
//!
//! # Inside the caller's transaction
//!
//! With the records in the application's own database (`PostgresStore`, `SqliteStore`
//! of crate `idem-sqlx`), the work can complete its record in its own transaction, with
//! its own writes: then a consumer killed right after its commit never applies the
//! message twice, which no store apart from the data can promise. The work gets the
//! run's [`Attempt`]; [`Attempt::stored`] takes the record over and gives the bytes to
//! commit with `commit_with_record`:
//!
//! ```rust,ignore
//! once.run(&message.id, &message, |attempt| async move {
//!     let mut tx = db.begin().await?;
//!     insert_payment(&mut tx, &message).await?;
//!     let receipt = Receipt { id: message.id };
//!     PostgresStore::commit_with_record(tx, attempt.key(), attempt.owner(), attempt.stored(&receipt)?, attempt.retention()).await?;
//!     Ok(receipt)
//! }).await
//! ```
//!
//! # The calls the work makes to other services
//!
//! [`Attempt::outbound_keys`] derives the `Idempotency-Key`s of the work's own calls (a
//! payment provider's charge) from the record's key, so a rerun after a crash sends the
//! provider the same keys. [`Attempt::current`] finds the run's attempt from anywhere in
//! its task, for code behind a [`RunOnceLayer`], which sees only the message.
//!
//! # Messages and batches
//!
//! [`RunOnceLayer`] puts the same guard over any tower `Service` of messages, keyed by a
//! function of the message; [`RunOnce::batch`] runs a batch with each message once,
//! and reports the ones that failed, for the broker to deliver again.
//!
//! # Store failures and shutdown
//!
//! A store that cannot answer when the record is begun gives [`RunError::Store`]: the
//! work has not run. One that cannot answer when the result is kept gives the caller the
//! result all the same, and keeps trying to store it in the background (the work ran; a
//! record left in progress would let a later call run it again once its lease ended).
//! [`RunOnce::drain`] waits for those at shutdown.

mod attempt;
mod batch;
mod error;
mod fingerprint;
mod host;
mod service;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use self::attempt::Attempt;
pub use self::batch::{Batch, BatchItem, BatchReport};
pub use self::error::RunError;
pub use self::fingerprint::fingerprint_of;
use self::fingerprint::{fingerprint_as, fingerprint_of_value};
use self::host::{Background, RunHost};
pub use self::service::{
    FingerprintWith, JsonFingerprint, MessageFingerprint, RunOnceLayer, RunOnceService,
};
use crate::payload::PayloadFingerprint;
use crate::record::{Began, Kept, Record};
use crate::store::RecordStore;
use crate::{Fingerprint, Key};

/// Separates the keys and fingerprints of run-once records from every other hash of
/// idem's, and names the derivation's version: records stay found across releases.
const DERIVATION: &str = "idem-run-once/1";

/// What the store keeps, in place of a result it had no room for.
const NO_ROOM: &[u8] = b"idem:run-once:no-room";

/// How long an in-progress record is held without a renewal, unless set.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// How long a result is kept for later calls, unless set.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

/// Work run once per key, on a store: see the [module docs](self).
///
/// Cheap to clone: clones share their settings' scope and the background completions
/// [`drain`](Self::drain) waits for.
pub struct RunOnce<S> {
    store: S,
    scope: Arc<str>,
    lease: Duration,
    retention: Duration,
    wait: Option<Duration>,
    payload: PayloadFingerprint,
    background: Background,
}

impl<S: Clone> Clone for RunOnce<S> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            scope: Arc::clone(&self.scope),
            lease: self.lease,
            retention: self.retention,
            wait: self.wait,
            payload: self.payload.clone(),
            background: self.background.clone(),
        }
    }
}

impl<S: fmt::Debug> fmt::Debug for RunOnce<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunOnce")
            .field("store", &self.store)
            .field("scope", &self.scope)
            .field("lease", &self.lease)
            .field("retention", &self.retention)
            .field("wait", &self.wait)
            .field("payload", &self.payload)
            .finish_non_exhaustive()
    }
}

impl<S: RecordStore + Clone> RunOnce<S> {
    /// Work run once per key on `store`, its keys within `scope` (a name for what the
    /// work does: `"charge"`, `"order-events"`): the same key in two scopes names two
    /// records.
    ///
    /// A record is in progress for [`DEFAULT_LEASE`] at a time, renewed while the work
    /// runs, and kept for [`DEFAULT_RETENTION`]; a call that finds another running is
    /// refused at once.
    pub fn new(store: S, scope: &str) -> Self {
        Self {
            store,
            scope: Arc::from(scope),
            lease: DEFAULT_LEASE,
            retention: DEFAULT_RETENTION,
            wait: None,
            payload: PayloadFingerprint::CanonicalJson,
            background: Background::default(),
        }
    }

    /// How long a record stays in progress without a renewal: the time a crashed run
    /// holds its key. The lease is renewed every third of it while the work runs, so work
    /// may take longer than this.
    #[must_use]
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How long a result is kept and replayed. Make it longer than the broker keeps
    /// redelivering a message (its visibility timeout times its retries, its retention).
    #[must_use]
    pub fn with_retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// A call that finds another still running waits for that one's result, for at most
    /// `bound`; when the other run fails, the waiting call runs the work itself. Past the
    /// bound it gets [`RunError::InProgress`], as it does at once without this setting.
    ///
    /// It waits with the store's [`wait_for_record`](RecordStore::wait_for_record), which
    /// the other run's completion or failure wakes (every store of idem's own signals
    /// it), and then looks at the record again: one look when the wait began and one
    /// when it ended, rather than a look every few milliseconds.
    #[must_use]
    pub fn wait_while_in_progress(mut self, bound: Duration) -> Self {
        self.wait = Some(bound);
        self
    }

    /// What of a payload tells one call from another with the same key
    /// ([`PayloadFingerprint::CanonicalJson`] unless set): [`JsonFields`] to leave a
    /// delivery timestamp or a trace id out, [`Ignored`] for a key that alone names the
    /// message. The same choice the HTTP guards take.
    ///
    /// [`JsonFields`]: PayloadFingerprint::JsonFields
    /// [`Ignored`]: PayloadFingerprint::Ignored
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use idem_core::MemoryStore;
    /// use idem_core::payload::PayloadFingerprint;
    /// use idem_core::run_once::RunOnce;
    /// use serde_json::json;
    ///
    /// let once = RunOnce::new(MemoryStore::new(), "webhooks")
    ///     .with_payload_fingerprint(PayloadFingerprint::json_fields(["/event", "/amount"]));
    /// let work = |_| async { Ok::<_, std::io::Error>(String::from("handled")) };
    /// let sent = json!({"event": "paid", "amount": 1299, "sent_at": "12:00:01"});
    /// let resent = json!({"event": "paid", "amount": 1299, "sent_at": "12:00:31"});
    /// once.run("evt_1", &sent, work).await.unwrap();
    /// assert_eq!(once.run("evt_1", &resent, work).await.unwrap(), "handled", "a redelivery");
    /// # }
    /// ```
    #[must_use]
    pub fn with_payload_fingerprint(mut self, payload: PayloadFingerprint) -> Self {
        self.payload = payload;
        self
    }

    /// The fingerprint of `payload`, as this `RunOnce` takes it.
    ///
    /// # Errors
    ///
    /// `payload` cannot be serialised as JSON.
    pub fn fingerprint_of<P: Serialize + ?Sized>(
        &self,
        payload: &P,
    ) -> Result<Fingerprint, serde_json::Error> {
        fingerprint_as(&self.payload, payload)
    }

    /// The store the records are in.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The record key of `key` in this scope: what an operator looks the record up by.
    pub fn key_of(&self, key: &str) -> Key {
        Key::hashed([DERIVATION, "key", &self.scope, key])
    }

    /// Runs `work` once for `key` and `payload`, or answers with the result of the run
    /// that did: see the [module docs](self).
    ///
    /// `work` gets the run's [`Attempt`], for the keys of its outbound calls and to
    /// complete the record in its own transaction.
    ///
    /// # Errors
    ///
    /// - [`RunError::Failed`]: this call ran the work and it failed; the key is free again.
    /// - [`RunError::InProgress`]: another call runs the work now (and did not end within
    ///   the wait, if one is set).
    /// - [`RunError::Mismatch`]: the key was used with another payload.
    /// - [`RunError::Store`]: the store could not answer; the work did not run.
    /// - [`RunError::Encode`], [`RunError::Replay`], [`RunError::NotKept`]: a result that
    ///   could not be kept or read back.
    pub async fn run<P, T, E, F, Fut>(
        &self,
        key: &str,
        payload: &P,
        work: F,
    ) -> Result<T, RunError<E>>
    where
        P: Serialize + ?Sized,
        T: Serialize + DeserializeOwned,
        F: FnOnce(Attempt) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let fingerprint = self.fingerprint_of(payload).map_err(RunError::Encode)?;
        self.run_on(self.key_of(key), fingerprint, work).await
    }

    /// [`run`](Self::run), with the key derived from the payload: for messages that carry
    /// no id of their own, where two equal payloads are one message delivered twice.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use idem_core::MemoryStore;
    /// use idem_core::run_once::RunOnce;
    /// use serde_json::json;
    ///
    /// let runs = AtomicU32::new(0);
    /// let once = RunOnce::new(MemoryStore::new(), "webhooks");
    /// let work = |_| async { Ok::<_, std::io::Error>(runs.fetch_add(1, Ordering::SeqCst)) };
    /// let sent = json!({"event": "paid", "order": 7});
    /// let again = json!({"order": 7, "event": "paid"}); // the same message, keys reordered
    /// assert_eq!(once.run_by_payload(&sent, work).await.unwrap(), 0);
    /// assert_eq!(once.run_by_payload(&again, work).await.unwrap(), 0, "replayed");
    /// assert_eq!(once.run_by_payload(&json!({"event": "paid", "order": 8}), work).await.unwrap(), 1);
    /// assert_eq!(runs.load(Ordering::SeqCst), 2);
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`run`](Self::run)'s, but for [`RunError::Mismatch`], which two equal payloads
    /// cannot meet.
    pub async fn run_by_payload<P, T, E, F, Fut>(
        &self,
        payload: &P,
        work: F,
    ) -> Result<T, RunError<E>>
    where
        P: Serialize + ?Sized,
        T: Serialize + DeserializeOwned,
        F: FnOnce(Attempt) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        // The key from the whole payload, whatever counts in its fingerprint: with only
        // some fields counted, two payloads that differ elsewhere are two messages.
        // The payload is serialised once for both, and, counted whole (the default), hashed
        // once.
        let value = serde_json::to_value(payload).map_err(RunError::Encode)?;
        let whole = fingerprint_of_value(&PayloadFingerprint::CanonicalJson, &value);
        let key = Key::hashed([
            DERIVATION.as_bytes(),
            b"payload",
            self.scope.as_bytes(),
            whole.as_bytes(),
        ]);
        let fingerprint = match self.payload {
            PayloadFingerprint::CanonicalJson => whole,
            ref counted => fingerprint_of_value(counted, &value),
        };
        self.run_on(key, fingerprint, work).await
    }

    /// [`run`](Self::run), with a fingerprint of the caller's own: for a payload that is
    /// not `Serialize`, or whose fields do not all tell one message from another.
    ///
    /// # Errors
    ///
    /// As [`run`](Self::run)'s.
    pub async fn run_with<T, E, F, Fut>(
        &self,
        key: &str,
        fingerprint: &Fingerprint,
        work: F,
    ) -> Result<T, RunError<E>>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce(Attempt) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.run_on(self.key_of(key), *fingerprint, work).await
    }

    /// Waits until every result this `RunOnce` (and its clones) keeps storing in the
    /// background has been stored, or `within` has passed: `true` when none is left.
    /// Call it at shutdown, after the last run.
    pub async fn drain(&self, within: Duration) -> bool {
        self.background.drain(within).await
    }

    async fn run_on<T, E, F, Fut>(
        &self,
        key: Key,
        fingerprint: Fingerprint,
        work: F,
    ) -> Result<T, RunError<E>>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce(Attempt) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let deadline = self.wait.map(|bound| tokio::time::Instant::now() + bound);
        loop {
            let began = Record::begin(
                self.store.clone(),
                &key,
                &fingerprint,
                self.lease,
                |key, owner| {
                    RunHost::new(&self.background, Attempt::new(key, owner, self.retention))
                },
            )
            .await
            .map_err(RunError::Store)?;
            match began {
                Began::First(record) => return self.first(record, work).await,
                Began::Completed(stored) => return replay(&stored),
                Began::Mismatch => return Err(RunError::Mismatch),
                Began::InProgress(remaining) => {
                    let now = tokio::time::Instant::now();
                    match deadline {
                        Some(deadline) if now < deadline => {
                            let within = remaining.min(deadline - now);
                            wait_for_record(&self.store, &key, within).await;
                        }
                        _ => return Err(RunError::InProgress { remaining }),
                    }
                }
            }
        }
    }

    /// Runs the work under the record this call began, and keeps its result or gives the
    /// key back.
    async fn first<T, E, F, Fut>(
        &self,
        record: Record<S, RunHost>,
        work: F,
    ) -> Result<T, RunError<E>>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce(Attempt) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let attempt = record.host().attempt().clone();
        // A panic, or the caller dropping this future, gives the key back.
        let armed = record.clone().abandon_on_drop();
        let ran = record
            .renewing(attempt.clone().scope(work(attempt.clone())))
            .await;
        let record = armed.disarm();
        let value = match ran {
            Ok(value) => value,
            Err(error) => {
                if attempt.taken_over() {
                    record.abandon_taken_over().await;
                } else {
                    record.abandon().await;
                }
                return Err(RunError::Failed(error));
            }
        };
        if attempt.taken_over() {
            return Ok(value);
        }
        let result = match serde_json::to_vec(&value) {
            Ok(result) => Bytes::from(result),
            Err(error) => {
                record.abandon().await;
                return Err(RunError::Encode(error));
            }
        };
        match record
            .complete(result, self.retention, || Bytes::from_static(NO_ROOM))
            .await
        {
            // Another run's result, its key having been taken while this one's lease had
            // run out: the answer every other call with the key gets.
            Kept::Lost(Some(stored)) => replay(&stored),
            Kept::Stored
            | Kept::ByHandler
            | Kept::ClaimedAgain
            | Kept::Unknown
            | Kept::Lost(None) => Ok(value),
        }
    }
}

/// A stored result, decoded.
fn replay<T: DeserializeOwned, E>(stored: &[u8]) -> Result<T, RunError<E>> {
    if stored == NO_ROOM {
        return Err(RunError::NotKept);
    }
    serde_json::from_slice(stored).map_err(RunError::Replay)
}

/// Waits with [`RecordStore::wait_for_record`] for the record `key` to end, for at most
/// `within`. A wait the store cannot make (an error) is a short pause instead: the next
/// look at the record tells whether the store answers.
async fn wait_for_record<S: RecordStore>(store: &S, key: &Key, within: Duration) {
    if let Err(error) = store.wait_for_record(key, within).await {
        tracing::debug!(%error, "idem: a wait for a record failed; looking again shortly");
        tokio::time::sleep(within.min(crate::store::RELEASE_POLL_INTERVAL)).await;
    }
}
