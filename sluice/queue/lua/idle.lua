-- idle: before a worker blocks on its buckets' wake lists, drop stale tokens.
-- KEYS: pairs of (queue key, wake list) for each bucket the worker serves.
-- A bucket whose queue is empty has no job for its tokens to announce (their
-- jobs were taken by busy workers), so its list is emptied; without this an idle
-- worker would spin through up to 64 stale tokens, one empty claim each. Atomic,
-- so a submit after this script pushes a fresh token and no wake-up is lost.
-- Returns the number of tokens dropped.
local dropped = 0
for k = 1, #KEYS, 2 do
  if redis.call('ZCARD', KEYS[k]) == 0 then
    local n = redis.call('LLEN', KEYS[k + 1])
    if n > 0 then
      redis.call('DEL', KEYS[k + 1])
      dropped = dropped + n
    end
  end
end
return dropped
