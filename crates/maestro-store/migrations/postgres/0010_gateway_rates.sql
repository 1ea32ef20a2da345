-- The LLM gateway's rate limits across nodes: the requests and tokens each virtual key used in
-- each minute (`minute` is the minute's start, Unix milliseconds). Gateways that share the
-- store count each request here in one conditional upsert; old minutes are swept.

CREATE TABLE gateway_rate_windows (
    key_id   TEXT NOT NULL,
    minute   BIGINT NOT NULL,
    requests BIGINT NOT NULL,
    tokens   BIGINT NOT NULL,
    PRIMARY KEY (key_id, minute)
);
