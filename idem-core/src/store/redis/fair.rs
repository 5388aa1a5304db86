//! [`FairStore`] for [`RedisStore`]: a fair lock's queue beside its lock, under its hash
//! tag: `namespace:{key}:queue` (owners in arrival order), `…:places` (when each place
//! lapses, by the server's clock) and `…:turn:<owner>` (a waiter's wake-ups).

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, Value};

use super::{Kind, RedisStore, SIGNAL_KEPT_MS, fair_script, int, remaining_from_pttl, unexpected};
use crate::key::{Key, Owner};
use crate::store::{FairStore, Fencing, FencingToken, StoreError, Turn, ttl_millis};

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
        let turns = self.turn_prefix(key);
        let keys = [
            self.key(key, Kind::Lock),
            self.key(key, Kind::Fence),
            self.key(key, Kind::Queue),
            self.key(key, Kind::Places),
            format!("{turns}{}", owner.as_str()),
        ];
        let args = [
            owner.as_str().to_owned(),
            ttl_millis(ttl).to_string(),
            if fencing == Fencing::On { "1" } else { "0" }.to_owned(),
            place.map_or(0, ttl_millis).to_string(),
            turns,
            SIGNAL_KEPT_MS.to_owned(),
        ];
        let (keys, args) = (&keys, &args);
        let answer: Vec<Value> = self
            .run(|mut conn| async move {
                let mut invocation = ACQUIRE_IN_TURN.prepare_invoke();
                for key in keys {
                    invocation.key(key);
                }
                for arg in args {
                    invocation.arg(arg);
                }
                invocation.invoke_async(&mut conn).await
            })
            .await?;
        let turn = scripted_turn(&answer, fencing)?;
        if let Turn::Acquired { .. } = turn {
            self.replicated(&keys[0]).await?;
        }
        Ok(turn)
    }

    async fn wait_for_turn(
        &self,
        key: &Key,
        owner: &Owner,
        within: Duration,
    ) -> Result<bool, StoreError> {
        let turn = format!("{}{}", self.turn_prefix(key), owner.as_str());
        self.pop_wake_up(&turn, within).await
    }

    async fn leave_queue(&self, key: &Key, owner: &Owner) -> Result<(), StoreError> {
        let turns = self.turn_prefix(key);
        let turn = format!("{turns}{}", owner.as_str());
        self.flag(
            &LEAVE_QUEUE,
            &[
                &self.key(key, Kind::Lock),
                &self.key(key, Kind::Queue),
                &self.key(key, Kind::Places),
                &turn,
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
    let field = |i: usize| {
        answer
            .get(i)
            .ok_or_else(|| unexpected("acquire_in_turn", answer))
            .and_then(|value| int("acquire_in_turn", value))
    };
    let token =
        || field(1).map(|n| (fencing == Fencing::On).then(|| FencingToken::new(n.unsigned_abs())));
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
        _ => Err(unexpected("acquire_in_turn", answer)),
    }
}
