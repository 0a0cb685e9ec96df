#!/usr/bin/env bash
# The soak test CI runs: the demo model's server with an API key, small limits (--max-body,
# --ctx) and the prompt cache on when the server has one (--cache-mb), 2000 mixed requests from
# 32 clients, then SIGTERM with streams running, which must exit 0 (soak.mjs says what is
# checked). Needs node (no npm packages). A few seconds on 2 cores otherwise idle.
# Usage: tests/load/soak.sh BUILD_DIR
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:?usage: soak.sh BUILD_DIR}"
source "$here/../start_server.sh"

key="soak-$RANDOM$RANDOM"
flags=(--slots 4 --queue 24 --threads 1 --ctx 256 --max-body 8192 --api-key "$key")
# The prompt cache's bound is added to the memory the run may grow by (soak.mjs reads the flag).
# (--help read whole first: grep -q in a pipe could end it early, and pipefail would say no.)
help=$("$build/bin/minimind-server" --help 2>&1)
if [[ "$help" == *--cache-mb* ]]; then flags+=(--cache-mb 16); fi
start_server "$build" "${flags[@]}"
node "$here/soak.mjs" "$server_url" "$server_pid" "$key" || { tail -n 20 "$server_work/stderr" >&2; exit 1; }
# soak.mjs sent SIGTERM and saw the process end; its status:
status=0
wait "$server_pid" || status=$?
[ "$status" -eq 0 ] || { echo "soak: the server exited $status after SIGTERM" >&2; tail -n 20 "$server_work/stderr" >&2; exit 1; }
