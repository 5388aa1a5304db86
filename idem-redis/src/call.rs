//! One call to Redis — a command, or a script by `EVALSHA` — on the shared connection,
//! under the store's timeout: the step every operation of [`RedisStore`] is made of.
//!
//! A call's future is what a guarded request holds while Redis answers, inline in the
//! request's own future: it keeps the command, the connection and redis-rs's future for
//! the answer, and nothing of the rare ways (opening a connection, loading a script after
//! `NOSCRIPT`, which are boxed apart), so that it stays small
//! (`store::tests::an_operations_future_stays_small`).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use idem_core::StoreError;
use idem_core::store::{Bounded, bounded};
use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisResult, Script, ServerErrorKind};

use crate::connection::{Connection, Connections};
use crate::store::{RedisStore, WROTE_ON};

impl RedisStore {
    /// Sends the call `build` makes for the shared connection (its check says which
    /// commands the server has), and reads the answer as `T`, under the store's timeout
    /// alone: waiting for replicas, where a write does, is bounded apart.
    pub(crate) fn query<'a, T: FromRedisValue + 'a>(
        &'a self,
        build: impl FnOnce(&Connection) -> Call<'a> + 'a,
    ) -> impl Future<Output = Result<T, StoreError>> + 'a {
        self.within(self.timeout(), self.send(build))
    }

    /// Runs `script` on `keys` with `args`.
    pub(crate) fn script<'a, T: FromRedisValue + 'a>(
        &'a self,
        script: &'a Script,
        keys: &'a [&'a str],
        args: &'a [&'a [u8]],
    ) -> impl Future<Output = Result<T, StoreError>> + 'a {
        self.query(move |_| Call::script(script, keys, args))
    }

    /// Runs a script whose answer is 0 or 1.
    pub(crate) async fn flag(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&[u8]],
    ) -> Result<bool, StoreError> {
        let answer: i64 = self.script(script, keys, args).await?;
        Ok(answer == 1)
    }

    /// `operation` under the store's timeout (with replica acknowledgements, the timeout
    /// and the time they may take): calls made inside it, each bounded too, are then
    /// bounded as one, so an operation of two commands takes no longer than one. A
    /// connection that stalled is dropped, so the next operation starts on a fresh one.
    pub(crate) fn bounded<T, F>(&self, operation: F) -> Dropping<'_, F>
    where
        F: Future<Output = Result<T, StoreError>>,
    {
        self.within(self.bound(), operation)
    }

    /// `operation` cut off after `bound`, the shared connection dropped if it is.
    fn within<T, F>(&self, bound: Duration, operation: F) -> Dropping<'_, F>
    where
        F: Future<Output = Result<T, StoreError>>,
    {
        Dropping {
            call: bounded(bound, operation),
            connections: self.connections(),
        }
    }

    /// The call `build` makes, on the shared connection.
    async fn send<'a, T: FromRedisValue>(
        &self,
        build: impl FnOnce(&Connection) -> Call<'a>,
    ) -> Result<T, StoreError> {
        let mut conn = match self.connections().ready() {
            Some(ready) => ready?,
            // Boxed: opening a connection is rare, and its future inline would size every
            // call's (`store::tests::an_operations_future_stays_small`).
            None => Box::pin(self.connections().open()).await?,
        };
        // Inside `replicated_if`: its `WAIT` goes on the connection the write went on.
        if self.waits_for_replicas() {
            let _ = WROTE_ON.try_with(|wrote_on| *wrote_on.borrow_mut() = Some(conn.clone()));
        }
        let Call { cmd, script } = build(&conn);
        let answer = conn
            .req_packed_command(&cmd)
            .await
            .and_then(redis::Value::extract_error);
        let answer = match answer {
            Err(error) if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                match script {
                    // Boxed: the rare way, as above
                    // (`store::tests::an_operations_future_stays_small`).
                    Some(script) => Box::pin(load_and_send(&mut conn, script, &cmd)).await,
                    None => Err(error),
                }
            }
            answer => answer,
        };
        answer
            .and_then(|value| Ok(redis::from_redis_value(value)?))
            .map_err(|error| self.failed(error))
    }
}

/// One call: a command, or a script's `EVALSHA` with the script, to load it on
/// `NOSCRIPT` (a server that restarted, or never saw it) and run it again.
pub(crate) struct Call<'a> {
    cmd: Cmd,
    script: Option<&'a Script>,
}

impl<'a> Call<'a> {
    /// A command.
    pub(crate) fn command(cmd: Cmd) -> Self {
        Self { cmd, script: None }
    }

    /// `script` on `keys` with `args`.
    pub(crate) fn script(script: &'a Script, keys: &[&str], args: &[&[u8]]) -> Self {
        let size = keys.iter().map(|key| key.len()).sum::<usize>()
            + args.iter().map(|arg| arg.len()).sum::<usize>()
            + 64;
        let mut cmd = Cmd::with_capacity(3 + keys.len() + args.len(), size);
        cmd.arg("EVALSHA")
            .arg(script.get_hash())
            .arg(keys.len())
            .arg(keys)
            .arg(args);
        Self {
            cmd,
            script: Some(script),
        }
    }
}

/// Loads `script`, then sends `cmd`, its `EVALSHA`, again.
async fn load_and_send(
    conn: &mut Connection,
    script: &Script,
    cmd: &Cmd,
) -> RedisResult<redis::Value> {
    script.load_async(conn).await?;
    conn.req_packed_command(cmd)
        .await
        .and_then(redis::Value::extract_error)
}

pin_project_lite::pin_project! {
    /// The future of [`RedisStore::bounded`]: the operation under the store's timeout,
    /// and the shared connection dropped when it times out.
    pub(crate) struct Dropping<'a, F> {
        #[pin]
        call: Bounded<F>,
        connections: &'a Connections,
    }
}

impl<T, F> Future for Dropping<'_, F>
where
    F: Future<Output = Result<T, StoreError>>,
{
    type Output = Result<T, StoreError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let answer = std::task::ready!(this.call.poll(cx));
        if let Err(StoreError::Timeout(_)) = answer {
            this.connections.discard();
        }
        Poll::Ready(answer)
    }
}
