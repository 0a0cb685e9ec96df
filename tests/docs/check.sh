#!/usr/bin/env bash
# Runs the commands of README.md and docs/*.md against an existing build directory, so that the
# documentation cannot rot: every fenced block tagged `sh` is run, in the checkout, each block in
# a fresh bash with `set -euo pipefail` and a time limit; other blocks (cpp, cmake, text) are not.
# An HTML comment on the line before a fence changes that:
#   <!-- doc-check: skip: REASON -->  not run (a download, minutes of benchmarking, another build)
#   <!-- doc-check: save FILE -->     the block is written to FILE (in the checkout) for the
#                                     commands after it; removed when the check ends
#   <!-- doc-check: in FILE -->       every line of the block must appear verbatim in FILE (the
#                                     README's test command, which .ci/run runs itself)
# `sudo` in a command: run as root (as in CI), the command runs without it; otherwise with
# `sudo -n`, and a command that would need a password is skipped with a note.
# The blocks run in the order they appear; those that build (`cmake --build build ...`) find
# everything built already in CI. The commands name build/, the build directory of the README.
# Usage: tests/docs/check.sh [FILE.md ...] (default: README.md docs/*.md), from anywhere.
set -euo pipefail
cd "$(dirname "$0")/../.."
docs=("$@")
[ ${#docs[@]} -gt 0 ] || docs=(README.md docs/*.md)
[ -x build/bin/minimind-next ] || { echo "doc-check: build/bin/minimind-next is missing; build first" >&2; exit 2; }

# Block-level timeout in seconds; the longest block compiles the README's library example.
limit=${DOC_CHECK_TIMEOUT:-600}
work=$(mktemp -d)
saved=()
cleanup() {
  local f
  for f in "${saved[@]}"; do rm -f -- "$f"; done
  rm -rf -- "$work"
}
trap cleanup EXIT

# What every block runs first: sudo as described above, and any server a block starts in the
# background stopped when the block ends, whatever happens.
cat >"$work/prelude.sh" <<'EOF'
set -euo pipefail
sudo() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command sudo -n true 2>/dev/null; then command sudo "$@"
  else echo "doc-check: skipped (not root, no password-less sudo): sudo $*" >&2
  fi
}
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
EOF

# Splits a Markdown file into its fenced blocks: writes $work/N.body and $work/N.info ("tag|marker|
# line") for N = 1, 2, ... and prints how many there are.
extract() {
  rm -f "$work"/*.body "$work"/*.info
  awk -v out="$work/" '
    /^<!-- doc-check: .* -->$/ { marker = $0; sub(/^<!-- doc-check: /, "", marker); sub(/ -->$/, "", marker); next }
    /^```/ && !inside { inside = 1; n++; tag = substr($0, 4); body = out n ".body";
                        printf "" > body; printf "%s|%s|%d\n", tag, marker, NR > (out n ".info"); marker = ""; next }
    /^```$/ && inside { inside = 0; close(body); next }
    inside { print >> body; next }
    { if ($0 != "") marker = "" }
    END { print n + 0 }' "$1"
}

failures=0
ran=0
for doc in "${docs[@]}"; do
  blocks=$(extract "$doc")
  for ((n = 1; n <= blocks; n++)); do
    IFS='|' read -r tag marker line <"$work/$n.info"
    body="$work/$n.body"
    where="$doc:$line"
    case "$marker" in
      skip:*) continue ;;
      save\ *)
        file=${marker#save }
        if [ -e "$file" ] && ! cmp -s "$body" "$file"; then
          echo "doc-check: $where: $file exists and differs; not overwritten" >&2
          failures=$((failures + 1))
          continue
        fi
        [ -e "$file" ] || saved+=("$file")
        cp "$body" "$file"
        continue ;;
      in\ *)
        file=${marker#in }
        while IFS= read -r want; do
          if ! grep -qxF -- "$want" "$file"; then
            echo "doc-check: $where: not in $file: $want" >&2
            failures=$((failures + 1))
          fi
        done <"$body"
        continue ;;
      "") ;;
      *)
        echo "doc-check: $where: unknown marker \"$marker\"" >&2
        failures=$((failures + 1))
        continue ;;
    esac
    [ "$tag" = sh ] || continue
    ran=$((ran + 1))
    start=$SECONDS
    log="$work/log"
    if timeout "$limit" bash -c "source '$work/prelude.sh'; source '$body'" >"$log" 2>&1; then
      echo "doc-check: ok ($((SECONDS - start)) s) $where"
    else
      status=$?
      echo "doc-check: FAILED (status $status) $where:" >&2
      sed 's/^/    /' "$body" >&2
      echo "  output:" >&2
      tail -n 20 "$log" | sed 's/^/    /' >&2
      failures=$((failures + 1))
    fi
  done
done
echo "doc-check: $ran blocks run, $failures failures"
[ "$failures" -eq 0 ]
