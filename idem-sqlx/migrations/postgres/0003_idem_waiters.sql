-- Who waits, in PostgreSQL: the statements that let waiters go (a lock's release, a place
-- given up in a fair lock's queue, a record completed or abandoned) call `idem_wake`,
-- which sends a `NOTIFY` on the channel `idem_wake` only when a waiter is registered for
-- what changed. PostgreSQL commits the transactions that notify one at a time, so a
-- notification nobody waits for costs every other commit of the server.
--
-- Safe to run more than once. An application may copy this file into its own migrations
-- instead of calling `migrate()`.

-- One row per waiting operation, for as long as it waits: `payload` is what it waits for,
-- as the notification names it (`l:<key>` a lock or a fair lock's queue, `r:<key>` a
-- record); `waiter` a random name of the wait. A waiter deletes its row when its wait
-- ends; a row whose waiter died first counts no longer once `expires_at` (the database's
-- clock) has passed, the end of the wait, and the store's purge deletes it.
CREATE TABLE IF NOT EXISTS idem_waiters (
    payload    text COLLATE "C" NOT NULL,
    waiter     text COLLATE "C" NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (payload, waiter)
);
CREATE INDEX IF NOT EXISTS idem_waiters_expires_at ON idem_waiters (expires_at);

-- Notifies `payload` on `idem_wake` if a live waiter is registered for it; called by the
-- statement that changed the row, after the change. The registration and this check are
-- ordered by an advisory lock on the payload (a class of idem's own, the first key): a
-- waiter registers under it exclusively (trying, never waiting), this function takes it
-- shared until its transaction ends, and then looks with a snapshot of its own, taken
-- after the lock. So either the registration committed first, and the check sees it, or
-- the change's transaction had committed when the waiter registered, and the waiter's
-- next question, which comes after its registration, sees the change. A waiter that could
-- not take the lock asks again shortly instead of sleeping.
--
-- Only READ COMMITTED gives each statement of the function a snapshot of its own; in a
-- transaction of a stricter isolation level (an application's, around
-- `complete_record_in`), it notifies without looking.
CREATE OR REPLACE FUNCTION idem_wake(payload text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF current_setting('transaction_isolation') = 'read committed' THEN
        PERFORM pg_advisory_xact_lock_shared(hashtext('idem_wake'), hashtext($1));
        IF NOT EXISTS (
            SELECT FROM idem_waiters AS waiting
            WHERE waiting.payload = $1 AND waiting.expires_at > clock_timestamp()
        ) THEN
            RETURN;
        END IF;
    END IF;
    PERFORM pg_notify('idem_wake', $1);
END
$$;
