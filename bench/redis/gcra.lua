-- GCRA limiter with one theoretical arrival time (TAT) per key, the arithmetic
-- of redis-cell: emission interval T = window / N, burst tolerance = the full
-- window (a fresh key may spend N at once, then N per window, evenly).
-- KEYS[1] the TAT key (one per token), ARGV[1] limit N, ARGV[2] window in ms,
-- ARGV[3] cost (default 1). Times are integer microseconds from Redis TIME.
-- Returns {1, 0} admitted or {0, ms to wait} refused; refusals change nothing.
local limit = tonumber(ARGV[1])
local window_us = tonumber(ARGV[2]) * 1000
local cost = tonumber(ARGV[3] or '1')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = math.floor(window_us / limit)
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then
    tat = now
end
local new_tat = tat + interval * cost
local allow_at = new_tat - window_us
if allow_at > now then
    return {0, math.ceil((allow_at - now) / 1000)}
end
redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', math.ceil((new_tat - now) / 1000) + 1)
return {1, 0}
