#!/usr/bin/env bash
# The in-browser page: drives build-web/web (minimind-web's folder, served as static files from
# 127.0.0.1, then by minimind-server --web-root, cross-origin isolated) in headless Chromium
# (browser.mjs); the expected probability of 很 after 今天天气 comes from the native minimind-next --json,
# for the demo model and for the GGUF file minimind-convert makes of it.
# Usage: tests/web/browser.sh BUILD_DIR WEB_BUILD_DIR [--bench]   (BUILD_DIR holds bin/minimind-next,
# bin/minimind-convert and bin/minimind-server, WEB_BUILD_DIR the built minimind-web target; the screenshots go to
# WEB_BUILD_DIR/web-screenshot-*.png)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="$(cd "${1:?usage: browser.sh BUILD_DIR WEB_BUILD_DIR}" && pwd)"
web_build="$(cd "${2:?usage: browser.sh BUILD_DIR WEB_BUILD_DIR}" && pwd)"
source "$here/../start_server.sh"  # npm_ci_once

npm_ci_once "$here" puppeteer-core
[ -f "$web_build/web/minimind-web.wasm" ] || { echo "$web_build/web/minimind-web.wasm not found; build the minimind-web target first" >&2; exit 1; }

# The probability of 很, the first of the next tokens after 今天天气, by the native minimind-next.
first_probability() {
  "$build/bin/minimind-next" --json --prompt 今天天气 "$@" |
    node -e 'const j = JSON.parse(require("fs").readFileSync(0, "utf8")); if (j.top[0].text !== "很") process.exit(1); console.log(j.top[0].probability)'
}
probability="$(first_probability)"

start_server "$build" --web-root "$web_build/web" --slots 1 --threads 1
# The demo model as a q8_0 GGUF file for the page's file input, in the directory start_server's
# EXIT trap removes.
gguf="$server_work/demo-q8_0.gguf"
"$build/bin/minimind-convert" "$here/../../examples/models/demo" "$gguf" --type q8_0 2>"$server_work/convert.log" ||
  { cat "$server_work/convert.log" >&2; exit 1; }
gguf_probability="$(first_probability --model "$gguf")"
page_status=0
node "$here/browser.mjs" "$web_build/web" "$here/../../examples/models/demo" "$probability" "$web_build/web-screenshot" "$server_url" \
  "$gguf" "$gguf_probability" "${3:-}" ||
  page_status=$?
stop_server_after "in-browser page" "$page_status"
echo "browser.sh: in-browser page in headless Chromium: ok"
