-- reclaim: requeue (in their original place) or dead-letter jobs whose lease expired.
-- KEYS[1] in-flight zset    KEYS[2] stats hash    KEYS[3] dead-letter list
-- KEYS[4] per-owner unfinished-job counts
-- KEYS[5] retries waiting out their backoff (zset, due ms; docs/adr/0153): a
--   reclaimed job waits there, and due ones are moved into their queues (with a
--   wake token) here too, so a retry is never stranded while no worker claims.
-- ARGV: declared by name in sluice/queue/signatures.py (RECLAIM); a requeued job
--   pushes a token onto its bucket's wake list (wprefix..bucket).
-- Derived keys: jprefix..id, qprefix..bucket, wprefix..bucket (same hash tag).
-- Also drops up to limit dead-letter ids whose record expired (the autoscaler
-- runs this every period, so the dead-letter count stays honest without failures).
-- Returns the number of leases reclaimed.
local ended = {}
local now = now_ms()
local rt = {key = KEYS[5], base = backoff_ms, cap = backoff_max_ms}
local n = reclaim_expired(KEYS[1], KEYS[2], KEYS[3], jprefix, qprefix, now,
                          limit, max_attempts, dead_ttl, ended, wprefix, KEYS[4], rt)
promote_due(KEYS[5], jprefix, qprefix, now, limit, wprefix)
publish_ended(channel, ended, jprefix, nprefix)
drop_expired_dead(KEYS[3], jprefix, limit)
return reply{reclaimed = n}
