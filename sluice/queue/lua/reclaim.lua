-- reclaim: requeue (in their original place) or dead-letter jobs whose lease expired.
-- KEYS[1] in-flight zset    KEYS[2] stats hash    KEYS[3] dead-letter list
-- KEYS[4] per-owner unfinished-job counts
-- ARGV: declared by name in sluice/queue/signatures.py (RECLAIM); a requeued job
--   pushes a token onto its bucket's wake list (wprefix..bucket).
-- Derived keys: jprefix..id, qprefix..bucket, wprefix..bucket (same hash tag).
-- Also drops up to limit dead-letter ids whose record expired (the autoscaler
-- runs this every period, so the dead-letter count stays honest without failures).
-- Returns the number of leases reclaimed.
local ended = {}
local n = reclaim_expired(KEYS[1], KEYS[2], KEYS[3], jprefix, qprefix, now_ms(),
                          limit, max_attempts, dead_ttl, ended, wprefix, KEYS[4])
publish_ended(channel, ended, jprefix, nprefix)
drop_expired_dead(KEYS[3], jprefix, limit)
return reply{reclaimed = n}
