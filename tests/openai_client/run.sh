#!/usr/bin/env bash
# Starts minimind-server (demo model) on a free loopback port, runs the official openai npm client
# against it (client.mjs) with an API key the server requires, stops the server with SIGTERM and
# requires exit 0 from both.
# Usage: tests/openai_client/run.sh BUILD_DIR   (BUILD_DIR holds bin/minimind-server)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:?usage: run.sh BUILD_DIR}"
source "$here/../start_server.sh"

npm_ci_once "$here" openai  # the official client, pinned by package-lock.json

start_server "$build" --slots 2 --api-key openai-client-test-key
client_status=0
node "$here/client.mjs" "$server_url/v1" openai-client-test-key || client_status=$?
stop_server_after "openai client" "$client_status"
echo "run.sh: openai client against minimind-server: ok"
