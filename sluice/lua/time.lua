-- The Redis server's clock, read on the node that holds a model's slot: a keyless
-- TIME cannot join a Redis Cluster pipeline, a script with a key can (ADR 0132).
-- KEYS[1] any key of the model (not read; it routes the call)
-- ARGV (TIME in sluice/registry.py): none
-- Returns TIME's reply: {seconds, microseconds}.
local t = redis.call('TIME')
return reply{seconds = t[1], microseconds = t[2]}
