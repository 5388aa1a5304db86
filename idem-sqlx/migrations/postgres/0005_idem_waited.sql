-- Who waits, kept on the row waited on: a waiter flags the lock or the record in progress
-- it waits for (`waited`) before it asks, and the statements that change that row (a
-- lock's release, a record completed, abandoned or removed) notify the channel
-- `idem_wake` only when the row they changed was flagged, read from the change's own
-- `RETURNING`: no function call and no look at another table on the hot path. The flag's
-- `UPDATE` takes the row's lock without waiting (`SKIP LOCKED`), and the change takes it
-- before it reads the flag, so either the flag committed first and the change notifies, or
-- the waiter could not flag the row and asks again shortly. The flag goes with its row.
--
-- Adding a column with a constant default rewrites no table (PostgreSQL 11 on).
-- `idem_waiters` and the functions `idem_wake` and `idem_wake_changed` of migrations 3
-- and 4 stay for instances of earlier versions until every instance runs this one; this
-- version only purges `idem_waiters`.
--
-- Safe to run more than once. An application may copy this file into its own migrations
-- instead of calling `migrate()`.
ALTER TABLE idem_locks ADD COLUMN IF NOT EXISTS waited boolean NOT NULL DEFAULT false;
ALTER TABLE idem_records ADD COLUMN IF NOT EXISTS waited boolean NOT NULL DEFAULT false;
