-- The budget ledger: caps on tokens and micro-USD (1 USD = 1,000,000) that concurrent callers
-- reserve from before they spend, then settle to what they spent. A job tree's cap is the
-- budget `job:<root job id>`; other callers name their own budgets.
--
-- A reservation adds to `reserved_*` only when spent + reserved + the charge fits every limit,
-- in one conditional UPDATE, so callers on several processes or nodes never pass a cap together.
-- The limits are the ones the last reservation gave (NULL: no cap on that amount).

CREATE TABLE budgets (
    id                 TEXT PRIMARY KEY,
    max_tokens         BIGINT,
    max_micro_usd      BIGINT,
    spent_tokens       BIGINT NOT NULL DEFAULT 0,
    spent_micro_usd    BIGINT NOT NULL DEFAULT 0,
    reserved_tokens    BIGINT NOT NULL DEFAULT 0,
    reserved_micro_usd BIGINT NOT NULL DEFAULT 0,
    created_at         BIGINT NOT NULL,
    updated_at         BIGINT NOT NULL
);

-- One row per reservation: `open` until it is settled (the call was made), released (it was
-- not) or expired (its holder never came back: `budget_sweep` returns it to the budget).
-- Closed rows are kept a day past their expiry so that a late settle stays idempotent.
CREATE TABLE budget_reservations (
    id          TEXT PRIMARY KEY,
    budget_id   TEXT NOT NULL REFERENCES budgets (id) ON DELETE CASCADE,
    state       TEXT NOT NULL CHECK (state IN ('open', 'settled', 'released', 'expired')),
    tokens      BIGINT NOT NULL,
    micro_usd   BIGINT NOT NULL,
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL
);
CREATE INDEX budget_reservations_expiry ON budget_reservations (state, expires_at);
CREATE INDEX budget_reservations_budget ON budget_reservations (budget_id);

-- A job's own caps (NULL: none), kept with it so that a worker on any node enforces them.
ALTER TABLE jobs ADD COLUMN budget_max_tokens BIGINT;
ALTER TABLE jobs ADD COLUMN budget_max_micro_usd BIGINT;
