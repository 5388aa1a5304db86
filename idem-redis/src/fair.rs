//! [`FairStore`] for [`RedisStore`]: a fair lock's queue beside its lock, under its hash
//! tag: `namespace:{key}:queue` (owners in arrival order), `…:places` (when each place
//! lapses, by the server's clock) and `…:turn:<owner>` (a waiter's wake-ups).

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, Value};

use idem_core::store::{Fencing, Turn, ttl_millis};
use idem_core::{FairStore, Key, Owner, StoreError};

use crate::RedisStore;
use crate::store::{Kind, SIGNAL_KEPT_MS, ScriptAnswer, fair_script, remaining_from_pttl};

static ACQUIRE_IN_TURN: LazyLock<Script> =
    LazyLock::new(|| fair_script(include_str!("scripts/acquire_in_turn.lua")));
static LEAVE_QUEUE: LazyLock<Script> =
    LazyLock::new(|| fair_script(include_str!("scripts/leave_queue.lua")));

impl FairStore for RedisStore {
    async fn acquire_in_turn(
        &self,
        key: &Key,
        owner: &Owner,
        ttl: Duration,
        fencing: Fencing,
        place: Option<Duration>,
    ) -> Result<Turn, StoreError> {
        let (lock, turns) = (self.key(key, Kind::Lock), self.key(key, Kind::Turns));
        let keys = [
            lock.as_str(),
            &self.key(key, Kind::Fence),
            &self.key(key, Kind::Queue),
            &self.key(key, Kind::Places),
            &self.turn_list(key, owner),
        ];
        let (ttl, place) = (
            ttl_millis(ttl).to_string(),
            place.map_or(0, ttl_millis).to_string(),
        );
        let fenced = if fencing == Fencing::On { "1" } else { "0" };
        let args = [
            owner.as_str().as_bytes(),
            ttl.as_bytes(),
            fenced.as_bytes(),
            place.as_bytes(),
            turns.as_bytes(),
            SIGNAL_KEPT_MS.as_bytes(),
        ];
        let acquire = async {
            let answer: Vec<Value> = self.script(&ACQUIRE_IN_TURN, &keys, &args).await?;
            scripted_turn(&answer, fencing)
        };
        self.replicated_if(&lock, acquire, |turn| matches!(turn, Turn::Acquired { .. }))
            .await
    }

    async fn wait_for_turn(
        &self,
        key: &Key,
        owner: &Owner,
        within: Duration,
    ) -> Result<bool, StoreError> {
        self.pop_wake_up(&self.turn_list(key, owner), within).await
    }

    async fn leave_queue(&self, key: &Key, owner: &Owner) -> Result<(), StoreError> {
        let turns = self.key(key, Kind::Turns);
        self.flag(
            &LEAVE_QUEUE,
            &[
                &self.key(key, Kind::Lock),
                &self.key(key, Kind::Queue),
                &self.key(key, Kind::Places),
                &self.turn_list(key, owner),
            ],
            &[
                owner.as_str().as_bytes(),
                turns.as_bytes(),
                SIGNAL_KEPT_MS.as_bytes(),
            ],
        )
        .await?;
        Ok(())
    }
}

/// Reads `acquire_in_turn.lua`'s answer: `{1, token}` acquired, `{2, token, pttl}`
/// already ours, `{0, 0, pttl or -2 when free, next}` queued; the token counts only with fencing.
fn scripted_turn(answer: &[Value], fencing: Fencing) -> Result<Turn, StoreError> {
    let answer = ScriptAnswer::new("acquire_in_turn", answer);
    let (field, token) = (|i| answer.field(i), || answer.token(fencing));
    match field(0)? {
        1 => Ok(Turn::Acquired { fence: token()? }),
        2 => Ok(Turn::Reentered {
            remaining: remaining_from_pttl(field(2)?).unwrap_or_default(),
            fence: token()?,
        }),
        0 => Ok(Turn::Queued {
            next: field(3)? == 1,
            remaining: remaining_from_pttl(field(2)?),
        }),
        _ => Err(answer.unexpected()),
    }
}
