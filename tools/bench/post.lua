-- post.lua: wrk script for the ingestion benchmark: POST one small message per request, cycling
-- over the Sessions listed in $SBX_BENCH_SESSIONS, with the App key in $SBX_BENCH_KEY.
--
-- Each thread starts at its own place in the list, spread evenly over the threads of every wrk
-- that runs at once: $SBX_BENCH_PART is "k/n" for the k-th of n (default "0/1"), each with at most
-- THREADS threads. Otherwise they would walk the Sessions in step, every thread of every wrk
-- writing the same Session at the same moment (math.random would not spread them: LuaJIT's
-- generator starts from the same seed in every thread), which no real traffic does.
local THREADS = 2 -- tools/bench/lib.mjs, runWrkAsync
local sessions = {}
local token = os.getenv("SBX_BENCH_KEY") or ""
local counter = 0
local next_thread = 0

function setup(thread)
    thread:set("thread_index", next_thread)
    next_thread = next_thread + 1
end

function init(args)
    for line in io.lines(os.getenv("SBX_BENCH_SESSIONS")) do
        if #line > 0 then
            sessions[#sessions + 1] = line
        end
    end
    local part, parts = (os.getenv("SBX_BENCH_PART") or "0/1"):match("^(%d+)/(%d+)$")
    part, parts = tonumber(part or 0), tonumber(parts or 1)
    local slot = part * THREADS + (thread_index or 0) % THREADS
    counter = math.floor(slot * #sessions / (parts * THREADS))
end

function request()
    counter = counter + 1
    local sid = sessions[(counter % #sessions) + 1]
    return wrk.format("POST", "/v1/sessions/" .. sid .. "/messages", {
        ["Authorization"] = "Bearer " .. token,
        ["Content-Type"] = "application/json",
    }, '{"body":{"n":1}}')
end
