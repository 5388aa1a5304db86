-- The queues of idem's fair locks in PostgreSQL: per lock name, the owners waiting for it,
-- in the order they came. A waiter's place lapses at `lapses_at` (the database's clock)
-- unless the waiter renews it; a lapsed place at the head of a queue is dropped by the
-- next attempt on the lock, and any other by the store's purge.
--
-- Safe to run more than once. An application may copy this file into its own migrations
-- instead of calling `migrate()`.

-- `arrival` orders a lock's waiters: it is drawn from a sequence when a waiter takes its
-- place, inside the transaction that serialises attempts on the lock, so the queue's
-- order is the order in which the database saw them. Renewing a place keeps it.
CREATE SEQUENCE IF NOT EXISTS idem_queue_arrival AS bigint;
CREATE TABLE IF NOT EXISTS idem_queue (
    key       text COLLATE "C" NOT NULL,
    owner     text NOT NULL,
    arrival   bigint NOT NULL DEFAULT nextval('idem_queue_arrival'),
    lapses_at timestamptz NOT NULL,
    PRIMARY KEY (key, owner)
);
ALTER SEQUENCE idem_queue_arrival OWNED BY idem_queue.arrival;
CREATE INDEX IF NOT EXISTS idem_queue_key_arrival ON idem_queue (key, arrival);
CREATE INDEX IF NOT EXISTS idem_queue_lapses_at ON idem_queue (lapses_at);
