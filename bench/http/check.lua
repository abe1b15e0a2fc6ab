-- wrk script for tally's /v1/check: GET with Authorization and X-Tally-Endpoint,
-- tokens rotated round-robin from the file given after `--` (one per line).
-- Usage: wrk -t1 -c50 -d10s -s bench/http/check.lua http://127.0.0.1:PORT -- TOKENS [ENDPOINT]
local tokens = {}
local endpoint = "search"
local i = 0

function init(args)
    for line in io.lines(args[1]) do
        if #line > 0 then
            tokens[#tokens + 1] = line
        end
    end
    if args[2] then
        endpoint = args[2]
    end
    -- each wrk thread starts at its own offset
    i = math.random(#tokens) - 1
end

function request()
    i = i % #tokens + 1
    return wrk.format("GET", "/v1/check", {
        ["Authorization"] = "Bearer " .. tokens[i],
        ["X-Tally-Endpoint"] = endpoint,
    })
end
