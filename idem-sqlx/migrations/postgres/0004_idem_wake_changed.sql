-- Who waits, looked up without a lock of its own: the statements that change the row a
-- waiter waits on (a lock's release, a record completed, abandoned or removed) call
-- `idem_wake_changed` instead of `idem_wake`. It sends a `NOTIFY` on the channel
-- `idem_wake` only when a waiter is registered for what changed, as `idem_wake` does, but
-- takes no advisory lock first: the order between a registration and this look comes from
-- the row itself. A waiter registers only while it holds a `FOR SHARE` lock on the row it
-- waits on (or when there is no such row), taken without waiting (`SKIP LOCKED`), and
-- keeps it until its registration commits; the statement that changes the row takes the
-- row's own lock first, and calls this function after. So either the registration
-- committed before the change locked the row, and the look (a snapshot of its own, taken
-- after) sees it, or the change had locked the row, the registration skipped it and did
-- not register, and the waiter asks again shortly. An advisory lock on every notifying
-- statement cost PostgreSQL about a tenth of the rate of a first idempotent request.
--
-- `idem_wake` stays, with its advisory lock, for a place given up in a fair lock's queue,
-- a row no waiter locks.
--
-- Safe to run more than once. An application may copy this file into its own migrations
-- instead of calling `migrate()`.
CREATE OR REPLACE FUNCTION idem_wake_changed(payload text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF current_setting('transaction_isolation') = 'read committed' AND NOT EXISTS (
        SELECT FROM idem_waiters AS waiting
        WHERE waiting.payload = $1 AND waiting.expires_at > clock_timestamp()
    ) THEN
        RETURN;
    END IF;
    PERFORM pg_notify('idem_wake', $1);
END
$$;
