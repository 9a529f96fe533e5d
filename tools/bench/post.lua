-- post.lua: wrk script for the ingestion benchmark: POST one small message per request, cycling
-- over the Sessions listed in $SBX_BENCH_SESSIONS, with the App key in $SBX_BENCH_KEY.
local sessions = {}
local token = os.getenv("SBX_BENCH_KEY") or ""
local counter = 0

function init(args)
    for line in io.lines(os.getenv("SBX_BENCH_SESSIONS")) do
        if #line > 0 then
            sessions[#sessions + 1] = line
        end
    end
    counter = math.random(1, #sessions)
end

function request()
    counter = counter + 1
    local sid = sessions[(counter % #sessions) + 1]
    return wrk.format("POST", "/v1/sessions/" .. sid .. "/messages", {
        ["Authorization"] = "Bearer " .. token,
        ["Content-Type"] = "application/json",
    }, '{"body":{"n":1}}')
end
