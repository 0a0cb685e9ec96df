#!/usr/bin/env bash
# A bounded load test of minimind-server on loopback: wrk with 64 connections for 30 s posting
# greedy chat completions (post_chat.lua). Reports requests/s, latency p50/p99, tokens/s, failures
# other than 503 (the documented answer of a full queue), and the server's RSS before and after.
# Not part of CI. Needs wrk (Debian: apt-get install -y wrk).
# Usage: tests/load/run.sh BUILD_DIR [extra minimind-server flags, e.g. --slots 2 --queue 64]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:?usage: run.sh BUILD_DIR [server flags]}"
shift
command -v wrk >/dev/null || { echo "load: wrk not found (apt-get install -y wrk)" >&2; exit 1; }
readonly connections=64 duration=30s
source "$here/../start_server.sh"

start_server "$build" "$@"
rss() { awk '/^VmRSS/ {print $2 " " $3}' "/proc/$server_pid/status"; }
head -n 1 "$server_work/stderr"
echo "server: $server_url, flags: ${*:-(defaults)}; wrk: $connections connections, $duration"
echo "RSS at start: $(rss)"
# A 3 s warm-up first, so "before" already holds what every connection thread and malloc arena
# needs once; growth over the measured run is then what a leak would show.
wrk -t2 -c"$connections" -d3s --timeout 20s -s "$here/post_chat.lua" "$server_url" >/dev/null
echo "RSS before: $(rss)"
wrk -t2 -c"$connections" -d"$duration" --timeout 20s --latency -s "$here/post_chat.lua" "$server_url" | sed -n '/^requests\/s:/,$p'
sleep 1
kill -0 "$server_pid" 2>/dev/null || { echo "load: the server died" >&2; exit 1; }
echo "RSS after: $(rss)"
status=0
stop_server || status=$?
echo "server exit status after SIGTERM: $status"
[ "$status" -eq 0 ]
