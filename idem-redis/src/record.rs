//! How a [`RedisStore`] keeps an idempotency record: one Redis string, begun with one
//! command.
//!
//! The string's first byte is its state, then come the 32 bytes of the request's
//! fingerprint, then, while the record runs, the owner of the attempt, and once it is done,
//! the stored response:
//!
//! ```text
//! r <fingerprint> <owner>       in progress
//! d <fingerprint> <response>    completed
//! ```
//!
//! So the value `SET record <in progress> NX PX lease GET` answers is enough to tell a
//! started record from one in progress, completed or begun for another request: the
//! fingerprint is compared here, not in a script. `complete_record.lua`, `renew_record.lua`
//! and `abandon_record.lua` read the same layout to check the owner.
//!
//! Versions before this layout kept a record in a hash (`state`, `owner`, `fingerprint`,
//! `response`). `SET … GET` on such a key fails with `WRONGTYPE`; the record is then read
//! as a hash (`read_hash_record.lua`), so an instance upgraded during a rolling upgrade
//! still answers the records the older ones wrote.
//!
//! An operator reads either layout with its time left in one step (`record_state.lua`),
//! and removes a record of either with one `DEL`.

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use bytes::Bytes;
use redis::{RedisError, Script, Value};

use idem_core::store::{RELEASE_POLL_INTERVAL, ttl_millis};
use idem_core::{Begin, Fingerprint, Key, Owner, RecordState, StoreError};

use crate::store::{Kind, RedisStore, ScriptAnswer, record_script, remaining_from_pttl};

static COMPLETED_REMAINING: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/completed_remaining.lua")));
static READ_HASH_RECORD: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/read_hash_record.lua")));
static RECORD_STATE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/record_state.lua")));
static REMOVE_RECORD: LazyLock<Script> =
    LazyLock::new(|| record_script(include_str!("scripts/remove_record.lua")));
static WAIT_FOR_RECORD: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/wait_for_record.lua")));

/// The first byte of a record in progress.
const RUNNING: u8 = b'r';
/// The first byte of a record in progress that a waiter waits for
/// (`wait_for_record.lua`): its ending wakes the waiters. Read as [`RUNNING`].
const WAITED: u8 = b'w';
/// The first byte of a completed record.
const DONE: u8 = b'd';
/// Where the owner or the response starts: after the state and the fingerprint.
const AFTER_FINGERPRINT: usize = 1 + 32;

/// The value of a record in progress, on the stack: `begin_record` sends one per request.
pub(crate) struct Running {
    bytes: [u8; AFTER_FINGERPRINT + Owner::MAX_LEN],
    len: usize,
}

impl Running {
    pub(crate) fn new(fingerprint: &Fingerprint, owner: &Owner) -> Self {
        let owner = owner.as_str().as_bytes();
        let mut bytes = [0; AFTER_FINGERPRINT + Owner::MAX_LEN];
        bytes[0] = RUNNING;
        bytes[1..AFTER_FINGERPRINT].copy_from_slice(fingerprint.as_bytes());
        let len = AFTER_FINGERPRINT + owner.len();
        bytes[AFTER_FINGERPRINT..len].copy_from_slice(owner);
        Self { bytes, len }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// What a record's value says, for a request with a given fingerprint.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Found {
    /// Begun for a request with another fingerprint, whatever its state.
    Mismatch,
    /// In progress, for this fingerprint.
    Running,
    /// Completed for this fingerprint: the stored response.
    Done(Bytes),
}

impl Found {
    /// Reads `value`, a record's string, for a request with `fingerprint`; `None` for a
    /// value of no known layout.
    pub(crate) fn read(value: &Bytes, fingerprint: &Fingerprint) -> Option<Self> {
        let (&state, rest) = value.split_first()?;
        let theirs = rest.get(..AFTER_FINGERPRINT - 1)?;
        if !matches!(state, RUNNING | WAITED | DONE) {
            return None;
        }
        Some(if theirs != fingerprint.as_bytes() {
            Self::Mismatch
        } else if state != DONE {
            Self::Running
        } else {
            Self::Done(value.slice(AFTER_FINGERPRINT..))
        })
    }
}

/// What `SET … NX … GET` found under a record's key.
pub(crate) enum Taken {
    /// Nothing: the record is now the caller's.
    Started,
    /// A record in this layout: its value.
    Found(Bytes),
    /// A record in the hash layout of earlier versions.
    Hash,
}

impl RedisStore {
    /// Begins `record` for `owner`, unless a record is there; what was there.
    ///
    /// A full Redis (`maxmemory` reached, `noeviction`) refuses the `SET` even when it
    /// would change nothing: the record is then only read, so that replays and refusals
    /// go on while nothing new can begin.
    pub(crate) async fn take_record(
        &self,
        record: &str,
        owner: &Owner,
        fingerprint: &Fingerprint,
        lease: Duration,
    ) -> Result<Taken, StoreError> {
        let value = Running::new(fingerprint, owner);
        let set = self.set_nx_get(record, value.as_bytes(), lease);
        let refusal = match self.replicated_if(record, set, Option::is_none).await {
            Ok(None) => return Ok(Taken::Started),
            Ok(Some(found)) => return Ok(Taken::Found(Bytes::from(found))),
            Err(error) => error,
        };
        if holds_a_hash(&refusal) {
            return Ok(Taken::Hash);
        }
        if !redis_error(&refusal).is_some_and(is_out_of_memory) {
            return Err(refusal);
        }
        // Boxed: a full server is rare, and this read inline would size every begin's
        // future (`store::tests::an_operations_future_stays_small`).
        match Box::pin(self.get(record)).await {
            Ok(Some(found)) => Ok(Taken::Found(Bytes::from(found))),
            Ok(None) => Err(refusal),
            Err(error) if holds_a_hash(&error) => Ok(Taken::Hash),
            Err(error) => Err(error),
        }
    }

    /// What `begin_record` answers for the record `value` found under `record`; `None`
    /// when the record ended before its time left could be read, and the key is free to
    /// begin again.
    pub(crate) async fn answer_found(
        &self,
        key: &Key,
        record: &str,
        value: Bytes,
        fingerprint: &Fingerprint,
    ) -> Result<Option<Begin>, StoreError> {
        match Found::read(&value, fingerprint) {
            None => Err(StoreError::unexpected("begin_record", value)),
            Some(Found::Mismatch) => Ok(Some(Begin::Mismatch)),
            Some(Found::Running) => Ok(self
                .pttl(record)
                .await?
                .map(|remaining| Begin::InProgress { remaining })),
            Some(Found::Done(response)) => {
                self.copy_replay(key, record, &value, fingerprint, &response)
                    .await;
                Ok(Some(Begin::Completed { response }))
            }
        }
    }

    /// Copies the completed record `value` into the process, unless the store keeps no
    /// copies. The copy needs the record's time left, one more round trip, and only here:
    /// a request that begins a record never pays for it.
    async fn copy_replay(
        &self,
        key: &Key,
        record: &str,
        value: &Bytes,
        fingerprint: &Fingerprint,
        response: &Bytes,
    ) {
        let Some(replays) = self.replays() else {
            return;
        };
        let asked = Instant::now();
        let remaining = self
            .script::<i64>(&COMPLETED_REMAINING, &[record], &[value])
            .await;
        // Without its time left the record is not copied; the answer stands all the same.
        if let Some(remaining) = remaining.ok().and_then(remaining_from_pttl) {
            replays.keep(key, *fingerprint, response.clone(), asked, remaining);
        }
    }

    /// What `begin_record` answers for a record in the hash layout of earlier versions;
    /// `None` when there is no such record any more.
    pub(crate) async fn answer_hash(
        &self,
        key: &Key,
        record: &str,
        fingerprint: &Fingerprint,
    ) -> Result<Option<Begin>, StoreError> {
        let asked = Instant::now();
        let fields: Vec<Value> = self
            .script(
                &READ_HASH_RECORD,
                &[record],
                &[fingerprint.as_bytes().as_slice()],
            )
            .await?;
        let answer = ScriptAnswer::new("begin_record", &fields);
        let remaining = |i| answer.field(i).map(remaining_from_pttl);
        Ok(match (answer.field(0)?, fields.get(1)) {
            (0, None) => None,
            (4, None) => Some(Begin::Mismatch),
            (2, Some(_)) => Some(Begin::InProgress {
                remaining: remaining(1)?.unwrap_or_default(),
            }),
            (3, Some(Value::BulkString(response))) => {
                let response = Bytes::from(response.clone());
                if let (Some(replays), Some(left)) = (self.replays(), remaining(2)?) {
                    replays.keep(key, *fingerprint, response.clone(), asked, left);
                }
                Some(Begin::Completed { response })
            }
            _ => return Err(answer.unexpected()),
        })
    }
}

impl RedisStore {
    /// What the record `key` holds, in either layout: `record_state.lua`'s answer read.
    pub(crate) async fn read_record_state(
        &self,
        key: &Key,
    ) -> Result<Option<RecordState>, StoreError> {
        let record = self.key(key, Kind::Record);
        let fields: Vec<Value> = self.script(&RECORD_STATE, &[&record], &[]).await?;
        state_of(&fields).ok_or_else(|| StoreError::unexpected("record_state", &fields))
    }

    /// Removes the record `key`, in either layout, with one `DEL` (in a script that also
    /// wakes its waiters), and the process's copy of it; whether a record was there.
    pub(crate) async fn delete_record(&self, key: &Key) -> Result<bool, StoreError> {
        let record = self.key(key, Kind::Record);
        let keys = [record.as_str()];
        let delete = self.script::<i64>(&REMOVE_RECORD, &keys, &[]);
        let deleted = self.replicated_if(&record, delete, |&deleted| deleted > 0);
        // Forgotten even when the `DEL` failed: it may have been applied all the same.
        let deleted = deleted.await;
        if let Some(replays) = self.replays() {
            replays.forget(key);
        }
        Ok(deleted? > 0)
    }
}

impl RedisStore {
    /// [`RecordStore::wait_for_record`](idem_core::RecordStore::wait_for_record): registers
    /// the waiter with `wait_for_record.lua`, then takes a wake-up from the record's list
    /// within `within` and the lease's time left.
    pub(crate) async fn wait_for_record_end(
        &self,
        key: &Key,
        within: Duration,
    ) -> Result<bool, StoreError> {
        let (record, waiters) = (
            self.key(key, Kind::Record),
            self.key(key, Kind::RecordWaiters),
        );
        // The registration must outlast the wait, and the moment its `BLPOP` takes to
        // reach Redis.
        let registered_ms = ttl_millis(within.saturating_add(self.timeout())).to_string();
        let keys = [record.as_str(), waiters.as_str()];
        let args = [registered_ms.as_bytes()];
        let registered = self.script::<i64>(&WAIT_FOR_RECORD, &keys, &args);
        let lease = match registered.await? {
            // Not in progress: look again at once.
            -2 => return Ok(true),
            // A record of an earlier version, whose end signals nobody: a short pause,
            // then the caller looks again.
            -3 => {
                tokio::time::sleep(within.min(RELEASE_POLL_INTERVAL)).await;
                return Ok(true);
            }
            left => remaining_from_pttl(left).unwrap_or_default(),
        };
        // The signal list's name: the record's prefix and `record_signal`, as the scripts
        // spell it.
        let signal = format!("{}_signal", &record);
        let woken = self.pop_wake_up(&signal, within.min(lease)).await?;
        Ok(woken || lease <= within)
    }
}

/// What `record_state.lua`'s answer says: `None` inside for no record, `None` outside for
/// an answer of no known shape.
fn state_of(fields: &[Value]) -> Option<Option<RecordState>> {
    let bulk = |i: usize| match fields.get(i) {
        Some(Value::BulkString(bytes)) => Some(bytes.as_slice()),
        _ => None,
    };
    let (pttl, rest) = match fields.split_first() {
        None => return Some(None),
        Some((Value::Int(pttl), rest)) => (*pttl, rest),
        Some(_) => return None,
    };
    let remaining = remaining_from_pttl(pttl)?;
    let (done, fingerprint, response) = match rest.len() {
        1 => {
            let value = bulk(1)?;
            let (&state, rest) = value.split_first()?;
            let fingerprint = rest.get(..AFTER_FINGERPRINT - 1)?;
            let response = &value[AFTER_FINGERPRINT..];
            match state {
                RUNNING | WAITED => (false, fingerprint, None),
                DONE => (true, fingerprint, Some(response)),
                _ => return None,
            }
        }
        3 => {
            let done = bulk(1)? == b"done";
            (done, bulk(2)?, bulk(3).filter(|_| done))
        }
        _ => return None,
    };
    let fingerprint = Fingerprint::from_bytes(fingerprint.try_into().ok()?);
    Some(Some(match (done, response) {
        (true, Some(response)) => RecordState::Completed {
            fingerprint,
            response: Bytes::copy_from_slice(response),
            remaining,
        },
        (false, _) => RecordState::InProgress {
            fingerprint,
            remaining,
        },
        (true, None) => return None,
    }))
}

/// The Redis error inside a store error, if it is one.
fn redis_error(error: &StoreError) -> Option<&RedisError> {
    error.backend_error::<RedisError>()
}

/// Whether a command failed because the key holds another type: a record in the hash
/// layout. Redis before 7.0 reports it, from a script, as a script error quoting the reply.
fn holds_a_hash(error: &StoreError) -> bool {
    redis_error(error).is_some_and(|error| {
        error.code() == Some("WRONGTYPE")
            || error
                .detail()
                .is_some_and(|detail| detail.contains("WRONGTYPE "))
    })
}

/// Whether Redis refused a write because it has reached `maxmemory`.
fn is_out_of_memory(error: &RedisError) -> bool {
    error.code() == Some("OOM")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_record_is_its_state_fingerprint_and_owner() {
        let (fingerprint, owner) = (Fingerprint::from_bytes([7; 32]), Owner::new("me").unwrap());
        let value = Running::new(&fingerprint, &owner);
        assert_eq!(value.as_bytes(), [b"r", &[7; 32][..], b"me"].concat());
        let longest = Owner::new("o".repeat(Owner::MAX_LEN)).unwrap();
        assert_eq!(
            Running::new(&fingerprint, &longest).as_bytes().len(),
            1 + 32 + Owner::MAX_LEN
        );
    }

    #[test]
    fn a_value_is_read_for_the_fingerprint_asking() {
        let (ours, theirs) = (
            Fingerprint::from_bytes([1; 32]),
            Fingerprint::from_bytes([2; 32]),
        );
        let owner = Owner::new("me").unwrap();
        let running = Bytes::copy_from_slice(Running::new(&ours, &owner).as_bytes());
        assert_eq!(Found::read(&running, &ours), Some(Found::Running));
        assert_eq!(Found::read(&running, &theirs), Some(Found::Mismatch));
        // Marked as waited for by a waiter's registration: still running.
        let mut waited = running.to_vec();
        waited[0] = WAITED;
        let waited = Bytes::from(waited);
        assert_eq!(Found::read(&waited, &ours), Some(Found::Running));
        assert_eq!(Found::read(&waited, &theirs), Some(Found::Mismatch));

        let done = Bytes::from([b"d", &[1; 32][..], b"200 ok"].concat());
        let response = Bytes::from_static(b"200 ok");
        assert_eq!(Found::read(&done, &ours), Some(Found::Done(response)));
        assert_eq!(Found::read(&done, &theirs), Some(Found::Mismatch));
        let empty = Bytes::from([b"d", &[1; 32][..]].concat());
        assert_eq!(Found::read(&empty, &ours), Some(Found::Done(Bytes::new())));

        for unknown in [&b""[..], b"d", &[b'x'; 40], &[b'r'; 20]] {
            assert_eq!(Found::read(&Bytes::copy_from_slice(unknown), &ours), None);
        }
    }
}
