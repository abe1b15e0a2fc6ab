-- Fixed-window limiter, the script a user would write: INCRBY + PEXPIRE.
-- KEYS[1] the counter (one per token), ARGV[1] limit N, ARGV[2] window in ms,
-- ARGV[3] cost (default 1). Returns {1, 0} admitted or {0, ms to wait} refused.
-- A refused request is not charged (DECRBY), as tally does not charge refusals.
-- The window starts at the key's first request (PEXPIRE), not on the wall clock.
local limit = tonumber(ARGV[1])
local cost = tonumber(ARGV[3] or '1')
local n = redis.call('INCRBY', KEYS[1], cost)
if n == cost then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if n > limit then
    redis.call('DECRBY', KEYS[1], cost)
    return {0, redis.call('PTTL', KEYS[1])}
end
return {1, 0}
