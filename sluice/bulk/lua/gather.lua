-- gather: write the outcomes of ended jobs into the output, once per line.
-- KEYS[1] bulk hash   KEYS[2] pending hash   KEYS[3] output hash
-- ARGV[1] token   ARGV[2] job key prefix
-- then groups of 4: line index, job id, output line, 1 if the job succeeded else 0
-- Derived keys: ARGV[2]..job id (same hash tag).
-- A line is written only while its index is still pending (HDEL = 1), so two
-- coordinators, or one run again after a crash, never write or count it twice.
-- A succeeded job's hash is deleted (its result is in the output now); a failed
-- one stays for the dead-letter list.
-- Returns {'ok', succeeded, failed} or {'lost'}.
local bulk, pending, output = KEYS[1], KEYS[2], KEYS[3]
if redis.call('HGET', bulk, 'token') ~= ARGV[1] then return {'lost'} end
local jprefix = ARGV[2]
local ok, bad = 0, 0
for i = 3, #ARGV, 4 do
  if redis.call('HDEL', pending, ARGV[i]) == 1 then
    redis.call('HSET', output, ARGV[i], ARGV[i + 2])
    if ARGV[i + 3] == '1' then
      ok = ok + 1
      redis.call('DEL', jprefix .. ARGV[i + 1])
    else
      bad = bad + 1
    end
  end
end
if ok > 0 then redis.call('HINCRBY', bulk, 'succeeded', ok) end
if bad > 0 then redis.call('HINCRBY', bulk, 'failed', bad) end
return {'ok', ok, bad}
