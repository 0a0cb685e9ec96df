#!/usr/bin/env bash
# Starts minimind-server (demo model) on a free loopback port, runs the official openai npm client
# against it (client.mjs), stops the server with SIGTERM and requires exit 0 from both.
# Usage: tests/openai_client/run.sh BUILD_DIR   (BUILD_DIR holds bin/minimind-server)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:?usage: run.sh BUILD_DIR}"
source "$here/../start_server.sh"

# The client comes from the npm registry, pinned by package-lock.json.
if [ ! -d "$here/node_modules/openai" ]; then
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
fi

start_server "$build" --slots 2
client_status=0
node "$here/client.mjs" "$server_url/v1" || client_status=$?
server_status=0
stop_server || server_status=$?
if [ "$client_status" -ne 0 ] || [ "$server_status" -ne 0 ]; then
  echo "run.sh: openai client exit $client_status, server exit $server_status after SIGTERM (both must be 0)" >&2
  echo "--- server stderr:" >&2
  cat "$server_work/stderr" >&2
  exit 1
fi
echo "run.sh: openai client against minimind-server: ok"
