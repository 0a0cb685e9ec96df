# Sourced by the scripts that drive minimind-server from outside (openai_client/run.sh,
# web/run.sh, load/run.sh): start_server BUILD_DIR [flags] starts it on a free loopback port and
# sets server_pid, server_url and server_work (its stdout/stderr); stop_server sends SIGTERM and
# returns the exit status. An EXIT trap kills a server still running and removes server_work.
# npm_ci_once and stop_server_after are what the Node-driven tests share.

start_server() {
  local build="$1"
  shift
  [ -d "$build" ] || { echo "build directory $build not found" >&2; return 1; }
  local binary
  binary="$(cd "$build" && pwd)/bin/minimind-server"
  [ -x "$binary" ] || { echo "$binary not found; build the minimind-server target first" >&2; return 1; }
  server_work="$(mktemp -d)"
  # Made here, not by the redirection below, which runs in the background and may come after the
  # first read of stdout (a failed sed under set -e would end the caller).
  : >"$server_work/stdout"
  "$binary" --host 127.0.0.1 --port 0 "$@" >"$server_work/stdout" 2>"$server_work/stderr" &
  server_pid=$!
  trap 'kill -KILL "$server_pid" 2>/dev/null || true; rm -rf "$server_work"' EXIT
  # The first stdout line names the address once the model is loaded.
  server_url=""
  for _ in $(seq 1 300); do
    server_url="$(sed -n 's|^minimind-server: listening on \(http://[^ ]*\)$|\1|p' "$server_work/stdout")"
    [ -n "$server_url" ] && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "minimind-server did not start:" >&2
  cat "$server_work/stderr" >&2
  return 1
}

stop_server() {
  kill -TERM "$server_pid"
  local status=0
  wait "$server_pid" || status=$?
  return "$status"
}

# npm_ci_once DIR MODULE: installs DIR's packages, pinned by its package-lock.json, unless MODULE
# is already there.
npm_ci_once() {
  if [ ! -d "$1/node_modules/$2" ]; then
    (cd "$1" && npm ci --no-audit --no-fund --loglevel=error)
  fi
}

# stop_server_after WHAT STATUS: stops the server and fails, showing its stderr, unless both the
# client (WHAT, which exited with STATUS) and the server after SIGTERM exited 0.
stop_server_after() {
  local server_status=0
  stop_server || server_status=$?
  if [ "$2" -ne 0 ] || [ "$server_status" -ne 0 ]; then
    echo "run.sh: $1 exit $2, server exit $server_status after SIGTERM (both must be 0)" >&2
    echo "--- server stderr:" >&2
    cat "$server_work/stderr" >&2
    return 1
  fi
}
