-- The queues of idem's fair locks in SQLite: per lock name, the owners waiting for it, in
-- the order they came. A waiter's place lapses once SQLite's clock (whole milliseconds
-- since 1970) has passed `lapses_at`, unless the waiter renews it first; a lapsed place at
-- the head of a queue is dropped by the next attempt on the lock, and any other by the
-- store's purge.
--
-- Safe to run more than once. An application may copy this file into its own migrations
-- instead of calling `migrate()`.

-- `arrival` (the rowid) orders a lock's waiters: a new place gets one above every place
-- held, inside the `BEGIN IMMEDIATE` transaction of the attempt, so the queue's order is
-- the order in which the database saw them. Renewing a place keeps it.
CREATE TABLE IF NOT EXISTS idem_queue (
    arrival   INTEGER PRIMARY KEY,
    key       TEXT NOT NULL,
    owner     TEXT NOT NULL,
    lapses_at INTEGER NOT NULL,
    UNIQUE (key, owner)
);
CREATE INDEX IF NOT EXISTS idem_queue_key_arrival ON idem_queue (key, arrival);
CREATE INDEX IF NOT EXISTS idem_queue_lapses_at ON idem_queue (lapses_at);
