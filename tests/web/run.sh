#!/usr/bin/env bash
# Starts minimind-server (demo model) on a free loopback port and drives its web page in headless
# Chromium (page.mjs); the expected probability of 很 after 今天天气 comes from minimind-next --json.
# Usage: tests/web/run.sh BUILD_DIR   (BUILD_DIR holds bin/minimind-server and bin/minimind-next;
# the screenshot goes to BUILD_DIR/web-screenshot.png)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="$(cd "${1:?usage: run.sh BUILD_DIR}" && pwd)"
source "$here/../start_server.sh"

npm_ci_once "$here" puppeteer-core

probability="$("$build/bin/minimind-next" --json --prompt 今天天气 |
  node -e 'const j = JSON.parse(require("fs").readFileSync(0, "utf8")); if (j.top[0].text !== "很") process.exit(1); console.log(j.top[0].probability)')"

# One LoRA adapter for the page's picker, at global scale 0 so that the other checks see the base model.
start_server "$build" --slots 2 --api-key page-test-key --lora "$here/../data/lora/adapters/demo-random-1.pth" --lora-init-without-apply
page_status=0
node "$here/page.mjs" "$server_url" "$probability" "$build/web-screenshot.png" page-test-key || page_status=$?
stop_server_after "page test" "$page_status"
echo "run.sh: web page in headless Chromium: ok"
