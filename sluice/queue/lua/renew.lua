-- renew: extend the leases this worker still holds.
-- KEYS[1] in-flight zset   KEYS[2] workers running a bulk batch (its entry follows)
-- ARGV: declared by name in sluice/queue/signatures.py (RENEW): jprefix, worker,
--   lease_ms, then one group per job id.
-- Derived keys: jprefix..id (same hash tag).
-- A lease is renewed only while the job is running under this worker; returns the
-- ids whose lease was lost (reclaimed, cancelled or ended elsewhere).
local inflight = KEYS[1]
local expiry = now_ms() + lease_ms
local lost = {}
for i = 1, N_GROUPS do
  local id = arg_group(i).id
  local f = redis.call('HMGET', jprefix .. id, JOB.status, JOB.worker)
  if f[1] == 'running' and f[2] == worker then
    redis.call('ZADD', inflight, 'XX', expiry, id)
  else
    reply_group(lost, {lost = id})
  end
end
if KEYS[2] then redis.call('ZADD', KEYS[2], 'XX', expiry, worker) end
return lost
