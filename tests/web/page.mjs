// Drives minimind-server's page in headless Chromium: a chat reply streams into `reply`; inspecting
// 今天天气 shows 很 first with the probability minimind-next printed; the page shows the tokens/s
// it measured (from the stream's usage chunk); no page error and no request
// to any host but the server; with API_KEY (the server's --api-key) the page asks for the key
// exactly once. Usage: node page.mjs SERVER_URL EXPECTED_PROBABILITY SCREENSHOT [API_KEY]
import puppeteer from "puppeteer-core";

const [url, expectedProbability, screenshot, apiKey] = process.argv.slice(2);
if (!url || !expectedProbability || !screenshot) throw new Error("usage: node page.mjs SERVER_URL EXPECTED_PROBABILITY SCREENSHOT");
const origin = new URL(url).origin;
const problems = [];

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  // CI runs as root in a container, where Chromium's sandbox cannot start.
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1366, height: 900 });
  let keyPrompts = 0;
  page.on("dialog", (dialog) => { keyPrompts++; return apiKey ? dialog.accept(apiKey) : dialog.dismiss(); });
  page.on("pageerror", (e) => problems.push("page error: " + e.message));
  // With a key, the first request's 401 (which makes the page ask) is logged by Chromium as an error.
  page.on("console", (m) => { if (m.type() === "error" && !(apiKey && m.text().includes("status of 401"))) problems.push("console error: " + m.text()); });
  await page.setRequestInterception(true);
  page.on("request", (request) => {
    const target = request.url();
    if (target.startsWith("data:") || new URL(target).origin === origin) return request.continue();
    problems.push("request outside the server: " + target);
    request.abort();
  });
  await page.goto(url + "/", { waitUntil: "load" });

  // Chat: the reply streams in (several chunks of the server's stream, shown as they come) and the stream ends.
  // Greedy, so the reply is the same every run and long enough to arrive in several pieces.
  await page.$eval("#temperature", (e) => { e.value = "0"; });
  await page.$eval("#max-tokens", (e) => { e.value = "32"; });
  await page.type('[data-testid="prompt"]', "请介绍一下你自己");
  // Watched from before the click: a short reply can stream in completely within a few ms.
  await page.evaluate(() => {
    window.replyLengths = [];
    new MutationObserver(() => {
      const reply = document.querySelector('[data-testid="reply"]');
      if (reply) window.replyLengths.push(reply.textContent.length);
    }).observe(document.getElementById("conversation"), { childList: true, characterData: true, subtree: true });
  });
  // The server's stream as sent: the reply must arrive as several SSE chunks, and the page must
  // show exactly their text (judged from the bytes, not from how fast the DOM changed).
  const streamBody = new Promise((resolve) => {
    page.on("response", (response) => {
      if (new URL(response.url()).pathname === "/v1/chat/completions") response.text().then(resolve, (e) => resolve("error: " + e));
    });
  });
  await page.click('[data-testid="send"]');
  await page.waitForFunction(() => document.querySelector('[data-testid="reply"]') && !document.getElementById("send").disabled);
  const lengths = (await page.evaluate(() => window.replyLengths)).filter((n) => n > 0);
  const reply = await page.$eval('[data-testid="reply"]', (e) => e.textContent);
  if (!reply.trim()) problems.push("the chat reply is empty");
  const chunks = (await streamBody).split("\n").filter((line) => line.startsWith("data: {"))
    .map((line) => JSON.parse(line.slice(6)).choices?.[0]?.delta?.content ?? "").filter((text) => text.length > 0);
  if (chunks.length < 2) problems.push("the reply did not stream: " + chunks.length + " content chunks");
  if (chunks.join("") !== reply) problems.push("the reply shown " + JSON.stringify(reply) + " is not the streamed text " + JSON.stringify(chunks.join("")));
  console.log("page.mjs: reply streamed in " + chunks.length + " chunks (" + lengths.length + " page updates): " + JSON.stringify(reply.slice(0, 60)));

  const speed = await page.$eval('[data-testid="speed"]', (e) => ({ text: e.textContent, decode: Number(e.dataset.decode), prefill: Number(e.dataset.prefill) }));
  if (!(speed.decode > 0) || !(speed.prefill > 0)) problems.push("the page shows no measured speed: " + JSON.stringify(speed));
  console.log("page.mjs: the page measured: " + speed.text);

  // Inspect: the raw text's next-token top-k.
  await page.$eval('[data-testid="prompt"]', (e) => { e.value = ""; });
  await page.type('[data-testid="prompt"]', "今天天气");
  await page.click('[data-testid="inspect"]');
  await page.waitForSelector('[data-testid="topk"] li');
  const first = await page.$eval('[data-testid="topk"] li', (e) => e.textContent);
  const shown = Number(expectedProbability).toFixed(4);
  if (!first.includes("很") || !first.includes(shown)) {
    problems.push(`the first top-k row is ${JSON.stringify(first)}, expected 很 with ${shown}`);
  }
  console.log("page.mjs: first top-k row " + JSON.stringify(first.replace(/\s+/g, " ")) + ", minimind-next says " + shown);
  const lensRows = await page.$$eval("#lens tr", (rows) => rows.length);
  if (lensRows < 2) problems.push("the logit lens table is empty");
  await page.select("#layer", "1");
  await page.select("#head", "1");
  await page.screenshot({ path: screenshot, fullPage: true });
  if (keyPrompts !== (apiKey ? 1 : 0)) problems.push(`the page asked for the API key ${keyPrompts} times`);
} finally {
  await browser.close();
}
if (problems.length) {
  for (const p of problems) console.error("page.mjs: " + p);
  process.exit(1);
}
console.log("page.mjs: ok");
