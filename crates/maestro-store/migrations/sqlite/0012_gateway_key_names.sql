-- The gateway's keys are told apart by name (usage is summed by it), so a name belongs to one
-- key, revoked keys included. Keys that share a name from before keep it on the oldest; each
-- other gets its id beside it, "name (id)", and so do its usage records, so that their usage
-- is summed apart. A usage record also says whether its tokens are an estimate: 1 when the
-- answer reported no usage and the key's budget was charged the whole reservation, which the
-- record then holds.

UPDATE gateway_usage SET key_name = key_name || ' (' || key_id || ')'
WHERE key_id IN (
    SELECT k.id FROM gateway_keys k
    WHERE EXISTS (
        SELECT 1 FROM gateway_keys o
        WHERE o.name = k.name
          AND (o.created_at < k.created_at OR (o.created_at = k.created_at AND o.id < k.id))
    )
);

UPDATE gateway_keys SET name = name || ' (' || id || ')'
WHERE EXISTS (
    SELECT 1 FROM gateway_keys o
    WHERE o.name = gateway_keys.name
      AND (o.created_at < gateway_keys.created_at
           OR (o.created_at = gateway_keys.created_at AND o.id < gateway_keys.id))
);

CREATE UNIQUE INDEX gateway_keys_name ON gateway_keys (name);

ALTER TABLE gateway_usage ADD COLUMN estimated INTEGER NOT NULL DEFAULT 0;
