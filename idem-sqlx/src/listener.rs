//! The listener of a [`PostgresStore`](crate::PostgresStore): one connection per store,
//! outside its pool, that `LISTEN`s on [`CHANNEL`] and wakes the store's [`Waiters`] by
//! each notification's payload.
//!
//! One channel for every key, with the key in the payload, rather than a channel per key:
//! the connection listens once for the store's life instead of running a `LISTEN` and an
//! `UNLISTEN` around every wait (a round trip before each waiter could ask), and a key
//! (at most [`Key::MAX_LEN`](idem_core::Key::MAX_LEN) bytes, with its topic two more) is
//! far within the 8,000 bytes a payload may have. Each store then receives the
//! notifications of every key some waiter (of any store) flagged, and drops
//! those nobody in it waits for with one look in a map.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgListener, PgPool, PgPoolOptions};

use crate::task::Background;
use crate::wake::Waiters;

/// The channel the statements notify and the listener listens on: `pg_notify`'s first
/// argument in PostgreSQL's notifying statements (written out there, which a test checks),
/// and in the functions `idem_wake` and `idem_wake_changed` of migrations 3 and 4, which
/// instances of earlier versions call.
pub(crate) const CHANNEL: &str = "idem_wake";

/// The first pause before connecting again after the listener's connection failed; each
/// failure in a row doubles it, up to [`LONGEST_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const LONGEST_PAUSE: Duration = Duration::from_secs(5);

/// Starts the listener of the store on `pool`: a task on the current runtime, with a
/// connection of its own made with the pool's options (named `… (idem listener)` in
/// `pg_stat_activity`), so that it never takes one of the pool's. `None` outside a Tokio
/// runtime.
pub(crate) fn spawn(pool: &PgPool, waiters: &Arc<Waiters>) -> Option<Background> {
    let options = (*pool.connect_options()).clone();
    let name = match options.get_application_name() {
        Some(name) => format!("{name} (idem listener)"),
        None => "idem listener".to_owned(),
    };
    let own = PgPoolOptions::new()
        .max_connections(1)
        .idle_timeout(None)
        .max_lifetime(None)
        .connect_lazy_with(options.application_name(&name));
    Background::spawn(listen(own, Arc::clone(waiters)))
}

/// Listens for as long as the store lives: connects, wakes every waiter (what was
/// notified before the `LISTEN` may have been missed), relays notifications until the
/// connection fails for good, and starts again after a pause.
async fn listen(pool: PgPool, waiters: Arc<Waiters>) {
    let mut pause = FIRST_PAUSE;
    loop {
        match listening(&pool).await {
            Ok(listener) => {
                pause = FIRST_PAUSE;
                waiters.wake_all();
                relay(listener, &waiters).await;
            }
            Err(error) => tracing::warn!(
                %error,
                "idem: the store's listener cannot connect; its waiters poll until it does"
            ),
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}

/// A listener on [`CHANNEL`].
async fn listening(pool: &PgPool) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(CHANNEL).await?;
    Ok(listener)
}

/// Wakes the waiters of each notification's payload, until the connection fails and
/// cannot be made again at once.
async fn relay(mut listener: PgListener, waiters: &Waiters) {
    loop {
        match listener.try_recv().await {
            Ok(Some(notification)) => waiters.wake(notification.payload()),
            // The connection was lost, and sqlx has made it again and listens again: what
            // was notified in between is lost, so every waiter asks again.
            Ok(None) => {
                tracing::info!("idem: the store's listener lost its connection and listens again");
                waiters.wake_all();
            }
            Err(error) => {
                tracing::warn!(
                    %error,
                    "idem: the store's listener failed; its waiters poll until it is back"
                );
                return;
            }
        }
    }
}
