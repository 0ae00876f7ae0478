-- gather: write the outcomes of ended jobs into the output, once per line.
-- KEYS[1] bulk hash   KEYS[2] pending hash   KEYS[3] output hash
-- ARGV (GATHER in sluice/bulk/signatures.py): token, jprefix (job key prefix); then
--   groups {index, id, line, ok}: line index, job id, output line, '1' if the job
--   succeeded else '0'
-- Derived keys: jprefix..job id (same hash tag).
-- A line is written only while its index is still pending (HDEL = 1), so two
-- coordinators, or one run again after a crash, never write or count it twice.
-- A succeeded job's hash is deleted (its result is in the output now); a failed
-- one stays for the dead-letter list.
-- Returns {'ok', succeeded, failed} or {'lost'}.
local bulk, pending, output = KEYS[1], KEYS[2], KEYS[3]
if redis.call('HGET', bulk, BULK.token) ~= token then return reply{status = 'lost'} end
local ok, bad = 0, 0
for i = 1, N_GROUPS do
  local g = arg_group(i)
  if redis.call('HDEL', pending, g.index) == 1 then
    redis.call('HSET', output, g.index, g.line)
    if g.ok == '1' then
      ok = ok + 1
      redis.call('DEL', jprefix .. g.id)
    else
      bad = bad + 1
    end
  end
end
if ok > 0 then redis.call('HINCRBY', bulk, BULK.succeeded, ok) end
if bad > 0 then redis.call('HINCRBY', bulk, BULK.failed, bad) end
return reply{status = 'ok', succeeded = ok, failed = bad}
