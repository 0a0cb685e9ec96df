#!/usr/bin/env bash
# The bounded load test CI runs: the demo model's server with 2 slots and a queue of 2 on
# loopback, a fixed number of requests from 16 clients (bounded.mjs says what is checked), then
# SIGTERM, which must exit 0. Needs node (no npm packages).
# Usage: tests/load/bounded.sh BUILD_DIR
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:?usage: bounded.sh BUILD_DIR}"
source "$here/../start_server.sh"

start_server "$build" --slots 2 --queue 2 --threads 1
node "$here/bounded.mjs" "$server_url" "$server_pid" || { cat "$server_work/stderr" | tail -n 20 >&2; exit 1; }
status=0
stop_server || status=$?
[ "$status" -eq 0 ] || { echo "load: the server exited $status after SIGTERM" >&2; exit 1; }
