-- reclaim: requeue (in their original place) or dead-letter jobs whose lease expired.
-- KEYS[1] in-flight zset    KEYS[2] stats hash    KEYS[3] dead-letter list
-- KEYS[4] per-owner unfinished-job counts
-- ARGV[1] job key prefix    ARGV[2] queue key prefix   ARGV[3] done channel
-- ARGV[4] limit             ARGV[5] max attempts       ARGV[6] dead-letter TTL s
-- ARGV[7] wake list prefix: a requeued job pushes a token onto its bucket's list
-- Derived keys: ARGV[1]..id, ARGV[2]..bucket, ARGV[7]..bucket (same hash tag).
-- Also drops up to ARGV[4] dead-letter ids whose record expired (the autoscaler
-- runs this every period, so the dead-letter count stays honest without failures).
-- Returns the number of leases reclaimed.
local ended = {}
local n = reclaim_expired(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], now_ms(),
                          tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), ended,
                          ARGV[7], KEYS[4])
publish_ended(ARGV[3], ended)
drop_expired_dead(KEYS[3], ARGV[1], tonumber(ARGV[4]))
return n
