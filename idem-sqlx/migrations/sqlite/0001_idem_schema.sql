-- idem's tables in SQLite: anti-repeat windows and locks, one-time tokens and idempotency
-- records. Times are milliseconds since 1970 (UTC) by SQLite's clock, read when a
-- statement runs. Every row carries its expiry; a row past it counts as absent to every
-- operation, and the store's purge deletes it later, a bounded batch at a time.
--
-- Safe to run more than once. An application may copy this file into its own migrations
-- instead of calling `migrate()`.

-- Windows and locks: one row per held key.
CREATE TABLE IF NOT EXISTS idem_locks (
    key        TEXT NOT NULL PRIMARY KEY,
    owner      TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    -- The fencing token of the current hold; NULL when none was asked for.
    fence      INTEGER
);
CREATE INDEX IF NOT EXISTS idem_locks_expires_at ON idem_locks (expires_at);

-- The last fencing token drawn, for every lock: one row. An acquisition draws `last + 1`
-- and these triggers move `last` up in the same statement, so tokens keep growing across
-- release, expiry, purge and restarts.
CREATE TABLE IF NOT EXISTS idem_fence (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    last INTEGER NOT NULL
);
INSERT OR IGNORE INTO idem_fence (id, last) VALUES (1, 0);
CREATE TRIGGER IF NOT EXISTS idem_locks_fence_on_insert AFTER INSERT ON idem_locks
WHEN NEW.fence IS NOT NULL
BEGIN
    UPDATE idem_fence SET last = NEW.fence WHERE last < NEW.fence;
END;
CREATE TRIGGER IF NOT EXISTS idem_locks_fence_on_update AFTER UPDATE OF fence ON idem_locks
WHEN NEW.fence IS NOT NULL
BEGIN
    UPDATE idem_fence SET last = NEW.fence WHERE last < NEW.fence;
END;

-- One-time tokens, each in its scope (a client). `issued` (the rowid) orders them: a new
-- token gets one above every token held, a scope keeps its newest few, and past the
-- store's token capacity the oldest are evicted.
CREATE TABLE IF NOT EXISTS idem_tokens (
    issued     INTEGER PRIMARY KEY,
    scope      TEXT NOT NULL,
    token      TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    UNIQUE (scope, token)
);
CREATE INDEX IF NOT EXISTS idem_tokens_scope_issued ON idem_tokens (scope, issued);
CREATE INDEX IF NOT EXISTS idem_tokens_expires_at ON idem_tokens (expires_at);

-- Idempotency records: in progress (an owner, no response) or completed (a response, no
-- owner), never both.
CREATE TABLE IF NOT EXISTS idem_records (
    key         TEXT NOT NULL PRIMARY KEY,
    fingerprint BLOB NOT NULL,
    owner       TEXT,
    response    BLOB,
    expires_at  INTEGER NOT NULL,
    CHECK ((owner IS NULL) <> (response IS NULL))
);
CREATE INDEX IF NOT EXISTS idem_records_expires_at ON idem_records (expires_at);
