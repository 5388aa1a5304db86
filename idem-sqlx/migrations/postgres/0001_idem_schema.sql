-- idem's tables in PostgreSQL: anti-repeat windows and locks, one-time tokens and
-- idempotency records. Every row carries its expiry; a row past it counts as absent to
-- every operation (compared with the database's clock, so instances with skewed clocks
-- agree), and the store's purge deletes it later, a bounded batch at a time.
--
-- Safe to run more than once. An application may copy this file into its own migrations
-- instead of calling `migrate()`.

-- Windows and locks: one row per held key.
CREATE TABLE IF NOT EXISTS idem_locks (
    key        text COLLATE "C" PRIMARY KEY,
    owner      text NOT NULL,
    expires_at timestamptz NOT NULL,
    -- The fencing token of the current hold, from idem_fence; NULL when none was asked for.
    fence      bigint
);
CREATE INDEX IF NOT EXISTS idem_locks_expires_at ON idem_locks (expires_at);

-- Fencing tokens of every lock. A sequence never goes back: tokens keep growing across
-- release, expiry, purge and restarts.
CREATE SEQUENCE IF NOT EXISTS idem_fence AS bigint;

-- One-time tokens, each in its scope (a client). `issued` orders them: a scope keeps its
-- newest few, and past the store's token capacity the oldest are evicted.
CREATE SEQUENCE IF NOT EXISTS idem_token_issued AS bigint;
CREATE TABLE IF NOT EXISTS idem_tokens (
    scope      text COLLATE "C" NOT NULL,
    token      text COLLATE "C" NOT NULL,
    expires_at timestamptz NOT NULL,
    issued     bigint NOT NULL DEFAULT nextval('idem_token_issued'),
    PRIMARY KEY (scope, token)
);
ALTER SEQUENCE idem_token_issued OWNED BY idem_tokens.issued;
CREATE INDEX IF NOT EXISTS idem_tokens_scope_issued ON idem_tokens (scope, issued);
CREATE INDEX IF NOT EXISTS idem_tokens_issued ON idem_tokens (issued);
CREATE INDEX IF NOT EXISTS idem_tokens_expires_at ON idem_tokens (expires_at);

-- Idempotency records: in progress (an owner, no response) or completed (a response, no
-- owner), never both.
CREATE TABLE IF NOT EXISTS idem_records (
    key         text COLLATE "C" PRIMARY KEY,
    fingerprint bytea NOT NULL,
    owner       text,
    response    bytea,
    expires_at  timestamptz NOT NULL,
    CONSTRAINT idem_records_in_progress_or_completed CHECK ((owner IS NULL) <> (response IS NULL))
);
CREATE INDEX IF NOT EXISTS idem_records_expires_at ON idem_records (expires_at);
