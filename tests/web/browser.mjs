// Drives the in-browser page (minimind-web's folder, served as static files from 127.0.0.1 by this
// script) in headless Chromium: the demo model loads with progress shown; inspecting 今天天气 shows 很
// first with the probability minimind-next printed (within 1e-5); the controls that need the server
// (Think, JSON mode, Tools) are disabled with a tooltip saying so; a chat reply streams in; the page
// shows the tokens/s it measured; the demo model's files opened through the file input load and
// give the same probability, and so does a GGUF file of it (minimind-convert's) opened there, with
// the probability minimind-next printed for that file; no page error, and no request but to the
// page's own origin. Then the
// same folder from ISOLATED_ORIGIN (minimind-server --web-root, which sends the cross-origin
// isolation headers): the page is cross-origin isolated, runs the threaded build on every core
// (at most 8), and inspecting gives the same probability.
// Usage: node browser.mjs WEB_DIR MODEL_DIR EXPECTED_PROBABILITY SCREENSHOT_PREFIX ISOLATED_ORIGIN GGUF GGUF_PROBABILITY [--bench]
// (screenshots: SCREENSHOT_PREFIX-chat.png, -inspect.png and -isolated.png)
// --bench also prints prefill/decode tokens/s timed inside the page's worker (minimind-bench's pp/tg),
// one thread and threaded.
import http from "node:http";
import fs from "node:fs";
import path from "node:path";
import puppeteer from "puppeteer-core";

const [webDir, modelDir, expectedText, screenshot, isolatedOrigin, gguf, ggufExpectedText, benchFlag] = process.argv.slice(2);
if (!webDir || !modelDir || !expectedText || !screenshot || !isolatedOrigin || !gguf || !ggufExpectedText) {
  throw new Error("usage: node browser.mjs WEB_DIR MODEL_DIR EXPECTED_PROBABILITY SCREENSHOT ISOLATED_ORIGIN GGUF GGUF_PROBABILITY [--bench]");
}
const problems = [];
const types = { ".html": "text/html; charset=utf-8", ".js": "text/javascript", ".wasm": "application/wasm", ".json": "application/json" };

// A plain static file server, as any would be: no cross-origin isolation headers, so the page runs
// the single-threaded build it ships.
const served = [];
const server = http.createServer((req, res) => {
  const name = decodeURIComponent(new URL(req.url, "http://x").pathname);
  const file = path.join(webDir, name.endsWith("/") ? name + "index.html" : name);
  served.push(name);
  if (!file.startsWith(path.resolve(webDir)) || !fs.existsSync(file) || !fs.statSync(file).isFile()) {
    res.writeHead(404).end();
    return;
  }
  res.writeHead(200, { "Content-Type": types[path.extname(file)] || "application/octet-stream", "Content-Length": fs.statSync(file).size });
  fs.createReadStream(file).pipe(res);
});
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const origin = "http://127.0.0.1:" + server.address().port;

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  // CI runs as root in a container, where Chromium's sandbox cannot start.
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});

async function inspectFirst(page) {
  await page.$eval('[data-testid="prompt"]', (e) => { e.value = ""; });
  await page.$eval('[data-testid="topk"]', (e) => e.replaceChildren());
  await page.type('[data-testid="prompt"]', "今天天气");
  await page.click('[data-testid="inspect"]');
  await page.waitForSelector('[data-testid="topk"] li', { timeout: 60000 });
  return page.$eval('[data-testid="topk"] li', (e) => ({ text: e.textContent, probability: Number(e.dataset.probability) }));
}

function checkFirst(first, when, expected = Number(expectedText)) {
  if (!first.text.includes("很") || !(Math.abs(first.probability - expected) <= 1e-5)) {
    problems.push(`${when}: the first top-k row is ${JSON.stringify(first.text)} with probability ${first.probability}, expected 很 with ${expected}`);
  }
  console.log(`browser.mjs: ${when}: first top-k row ${JSON.stringify(first.text.replace(/\s+/g, " "))} p=${first.probability} (minimind-next: ${expected})`);
}

// A page at `at` whose errors and requests outside that origin are problems; the requests it made
// are listed in `intercepted`. Resolves once the demo model is loaded.
async function openPage(at, intercepted) {
  const page = await browser.newPage();
  await page.setViewport({ width: 1366, height: 900 });
  page.on("pageerror", (e) => problems.push("page error: " + e.message));
  page.on("console", (m) => { if (m.type() === "error") problems.push("console error: " + m.text()); });
  await page.setRequestInterception(true);
  page.on("request", (request) => {
    const target = request.url();
    intercepted.push(target);
    if (target.startsWith("data:") || target.startsWith("blob:") || new URL(target).origin === at) return request.continue();
    problems.push("request outside the page's origin: " + target);
    request.abort();
  });
  await page.goto(at + "/", { waitUntil: "load" });
  await page.waitForSelector("#model-name[data-loaded]", { timeout: 120000 });
  console.log("browser.mjs: loaded from " + at + ": " + (await page.$eval("#model-name", (e) => e.textContent)));
  return page;
}

// minimind-bench's pp128 and tg128 timed in the page's worker, median of 5 after a warm-up; the demo
// model, then random weights of minimind2-small's shape (minimind-bench --shape).
async function bench(page, label) {
  for (const shape of [null, "minimind2-small"]) {
    if (shape) {
      await page.evaluate((name) => { delete document.getElementById("model-name").dataset.loaded; worker.postMessage({ type: "shape", name }); }, shape);
      await page.waitForSelector("#model-name[data-loaded]", { timeout: 120000 });
    }
    const runs = { prefill_tokens_per_second: [], decode_tokens_per_second: [] };
    for (let r = 0; r <= 5; ++r) {
      const result = await page.evaluate(() => ask({ type: "bench", prompt: 128, decode: 128 }));
      if (r > 0) for (const key in runs) runs[key].push(result[key]);
    }
    const median = (xs) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    console.log("browser.mjs: bench " + (shape || "demo") + ", " + label + ": pp128 " + median(runs.prefill_tokens_per_second).toFixed(1) +
                " tok/s, tg128 " + median(runs.decode_tokens_per_second).toFixed(1) + " tok/s (median of 5)");
  }
}

try {
  const intercepted = [];
  const page = await openPage(origin, intercepted);
  if (await page.$eval("#model-name", (e) => e.dataset.threads) !== "1") problems.push("a page that is not cross-origin isolated runs more than one thread");

  checkFirst(await inspectFirst(page), "demo model");
  const lensRows = await page.$$eval("#lens tr", (rows) => rows.length);
  if (lensRows < 2) problems.push("the logit lens table is empty");

  // Thinking, tools, JSON mode and the adapter picker need the server: disabled here, with a
  // tooltip saying so.
  const serverOnly = await page.$$eval(".server-only", (es) => es.map((e) => {
    const controls = [...e.querySelectorAll("input, textarea, button, select")];
    return { title: e.title, testids: controls.map((c) => c.dataset.testid).filter(Boolean),
             enabled: controls.filter((c) => !c.disabled).map((c) => c.id) };
  }));
  const serverOnlyTestids = serverOnly.flatMap((e) => e.testids);
  if (["think", "json-mode", "tools", "lora"].some((id) => !serverOnlyTestids.includes(id)) ||
      serverOnly.some((e) => !e.title.includes("minimind-server") || e.enabled.length)) {
    problems.push("the server-only controls are not disabled with a tooltip: " + JSON.stringify(serverOnly));
  }

  // Chat, greedy: the reply must reach the page in several pieces while it is generated.
  await page.click("#tab-chat");
  await page.$eval("#temperature", (e) => { e.value = "0"; });
  await page.$eval("#max-tokens", (e) => { e.value = "48"; });
  await page.$eval('[data-testid="prompt"]', (e) => { e.value = ""; });
  await page.type('[data-testid="prompt"]', "请介绍一下你自己");
  await page.evaluate(() => {
    window.replyTexts = [];
    new MutationObserver(() => {
      const reply = document.querySelector('[data-testid="reply"]');
      if (reply && reply.textContent) window.replyTexts.push(reply.textContent);
    }).observe(document.getElementById("conversation"), { childList: true, characterData: true, subtree: true });
  });
  await page.click('[data-testid="send"]');
  await page.waitForFunction(() => document.querySelector('[data-testid="reply"]') && !document.getElementById("send").disabled, { timeout: 60000 });
  const reply = await page.$eval('[data-testid="reply"]', (e) => e.textContent);
  const texts = await page.evaluate(() => window.replyTexts);
  if (!reply.trim()) problems.push("the chat reply is empty");
  if (new Set(texts).size < 2) problems.push("the reply did not stream: " + new Set(texts).size + " distinct states of the reply");
  if (texts.some((t) => !reply.startsWith(t))) problems.push("a streamed state of the reply is not a prefix of the final reply");
  console.log("browser.mjs: reply streamed in " + new Set(texts).size + " updates: " + JSON.stringify(reply.slice(0, 60)));
  const errors = await page.$$eval(".message.error", (es) => es.map((e) => e.textContent));
  if (errors.length) problems.push("error messages on the page: " + errors.join("; "));

  const speed = await page.$eval('[data-testid="speed"]', (e) => ({ text: e.textContent, decode: Number(e.dataset.decode), prefill: Number(e.dataset.prefill) }));
  if (!(speed.decode > 0) || !(speed.prefill > 0) || !/tok\/s/.test(speed.text)) problems.push("the page shows no measured speed: " + JSON.stringify(speed));
  console.log("browser.mjs: the page measured: " + speed.text);
  await page.screenshot({ path: screenshot + "-chat.png", fullPage: true });

  // The user's own checkpoint: files that are not one say so in one line; then the demo model's
  // files, opened through the file input.
  const input = await page.$('[data-testid="open-model"]');
  await input.uploadFile(path.join(modelDir, "tokenizer.json"));
  await page.waitForFunction(() => document.getElementById("model-name").textContent.startsWith("Could not load"), { timeout: 60000 });
  console.log("browser.mjs: tokenizer.json alone: " + (await page.$eval("#model-name", (e) => e.textContent)));
  await input.uploadFile(...["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"].map((f) => path.join(modelDir, f)));
  await page.waitForSelector("#model-name[data-loaded]", { timeout: 120000 });
  const opened = await page.$eval("#model-name", (e) => e.dataset.loaded);
  if (!opened.includes("model.safetensors")) problems.push("the opened model is named " + JSON.stringify(opened));
  await page.click("#tab-inspect");
  checkFirst(await inspectFirst(page), "opened from the file input");
  await page.select("#layer", "1");
  await page.select("#head", "1");
  await page.screenshot({ path: screenshot + "-inspect.png", fullPage: true });

  // The same model as one GGUF file.
  await input.uploadFile(gguf);
  await page.waitForFunction((name) => (document.getElementById("model-name").dataset.loaded || "").startsWith(name), { timeout: 120000 }, path.basename(gguf));
  checkFirst(await inspectFirst(page), "a GGUF file opened from the file input", Number(ggufExpectedText));

  // Cross-origin isolated (minimind-server --web-root): the threaded build, the same probability.
  const isolatedRequests = [];
  const isolated = await openPage(isolatedOrigin, isolatedRequests);
  const cores = await isolated.evaluate(() => navigator.hardwareConcurrency);
  const threads = Number(await isolated.$eval("#model-name", (e) => e.dataset.threads));
  if (!(await isolated.evaluate(() => crossOriginIsolated))) problems.push("the page from minimind-server --web-root is not cross-origin isolated");
  if (threads !== Math.min(cores, 8)) problems.push(`the isolated page runs ${threads} threads on ${cores} cores`);
  if (cores > 1 && !isolatedRequests.some((u) => u.endsWith("/minimind-web-threads.wasm"))) problems.push("the isolated page did not load minimind-web-threads.wasm");
  await isolated.click("#tab-inspect");
  checkFirst(await inspectFirst(isolated), `from minimind-server --web-root, cross-origin isolated, ${threads} threads`);
  await isolated.screenshot({ path: screenshot + "-isolated.png", fullPage: true });

  if (benchFlag === "--bench") {
    await bench(page, "1 thread");
    await bench(isolated, threads + " threads");
  }

  // Every request the static server saw came through the page's interception too (the worker's included).
  const seen = new Set(intercepted.map((u) => new URL(u).pathname));
  const missed = served.filter((p) => !seen.has(p));
  if (missed.length) problems.push("requests the interception did not see: " + missed.join(", "));
  console.log("browser.mjs: " + served.length + " requests, all to " + origin);
} finally {
  await browser.close();
  server.close();
}
if (problems.length) {
  for (const p of problems) console.error("browser.mjs: " + p);
  process.exit(1);
}
console.log("browser.mjs: ok");
