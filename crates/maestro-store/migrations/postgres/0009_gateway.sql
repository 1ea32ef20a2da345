-- The LLM gateway: its virtual keys and one row per request it proxied. A key is stored as the
-- SHA-256 (lowercase hex) of the secret only, with a short prefix to recognise it by; the key
-- itself is shown once, when it is created. Budgets are in micro-USD and tokens; `period` is
-- NULL for a total, else 'day', 'week' or 'month'. `models` is a JSON array of public model
-- names, NULL for every model. Times are Unix milliseconds.

CREATE TABLE gateway_keys (
    id               TEXT PRIMARY KEY,
    name             TEXT NOT NULL,
    hash             TEXT NOT NULL UNIQUE,
    prefix           TEXT NOT NULL,
    models           TEXT,
    budget_micro_usd BIGINT,
    budget_tokens    BIGINT,
    period           TEXT CHECK (period IN ('day', 'week', 'month')),
    rpm              BIGINT,
    tpm              BIGINT,
    expires_at       BIGINT,
    created_at       BIGINT NOT NULL,
    created_by       TEXT NOT NULL,
    revoked_at       BIGINT
);

CREATE TABLE gateway_usage (
    id                BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at                BIGINT NOT NULL,
    key_id            TEXT,
    key_name          TEXT,
    endpoint          TEXT NOT NULL,
    model             TEXT NOT NULL,
    upstream          TEXT,
    upstream_model    TEXT,
    prompt_tokens     BIGINT NOT NULL,
    completion_tokens BIGINT NOT NULL,
    cost_usd          DOUBLE PRECISION,
    latency_ms        BIGINT NOT NULL,
    status            TEXT NOT NULL,
    http_status       BIGINT NOT NULL,
    job               TEXT,
    movement          TEXT
);
CREATE INDEX gateway_usage_at ON gateway_usage (at);
CREATE INDEX gateway_usage_key ON gateway_usage (key_id, at);
CREATE INDEX gateway_usage_job ON gateway_usage (job, at);
