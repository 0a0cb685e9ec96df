# Sourced by the scripts that drive minimind-server from outside (openai_client/run.sh,
# load/run.sh): start_server BUILD_DIR [flags] starts it on a free loopback port and sets
# server_pid, server_url and server_work (its stdout/stderr); stop_server sends SIGTERM and
# returns the exit status. An EXIT trap kills a server still running and removes server_work.

start_server() {
  local build="$1"
  shift
  [ -d "$build" ] || { echo "build directory $build not found" >&2; return 1; }
  local binary
  binary="$(cd "$build" && pwd)/bin/minimind-server"
  [ -x "$binary" ] || { echo "$binary not found; build the minimind-server target first" >&2; return 1; }
  server_work="$(mktemp -d)"
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
