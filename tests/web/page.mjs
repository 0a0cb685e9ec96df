// Drives minimind-server's page in headless Chromium: a chat reply streams into `reply`; inspecting
// 今天天气 shows 很 first with the probability minimind-next printed; the page shows the tokens/s
// it measured (from the stream's usage chunk); with Think the streamed reasoning_content shows in
// `thinking`, folded above the answer; with the demo's tools a question gives a `tool-call` (name
// and arguments as streamed), and the result typed into `tool-result` goes back as a tool message
// with its tool_call_id and gets a reply; JSON mode's reply parses; the LoRA picker lists the
// server's adapter and a chat sends the one picked; no page error and no request to any host but
// the server; with API_KEY (the server's --api-key) the page asks for the key exactly once.
// Usage: node page.mjs SERVER_URL EXPECTED_PROBABILITY SCREENSHOT [API_KEY]
// (the thinking and tool round trip: SCREENSHOT with -tools before its extension)
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

  await checkThinkingToolsAndJson(page, screenshot.replace(/(\.[a-z]+)?$/, "-tools$1"));
  if (keyPrompts !== (apiKey ? 1 : 0)) problems.push(`the page asked for the API key ${keyPrompts} times`);
} finally {
  await browser.close();
}
// Each chat request's body and its streamed deltas, in order, recorded in the page by wrapping
// its fetch (the page's own reading of the stream is untouched: it reads the original response).
// In the page rather than through the protocol, which decodes an event stream's bytes as
// windows-1252 since its content type names no charset.
async function watchChats(page) {
  await page.evaluate(() => {
    window.chatLog = [];
    const original = window.fetch;
    window.fetch = async (url, init) => {
      const response = await original(url, init);
      if (String(url).endsWith("/v1/chat/completions")) {
        const entry = { request: JSON.parse(init.body), deltas: null };
        window.chatLog.push(entry);
        response.clone().text().then((text) => {
          entry.deltas = text.split("\n").filter((line) => line.startsWith("data: {"))
            .map((line) => JSON.parse(line.slice(6)).choices?.[0]?.delta).filter(Boolean);
        });
      }
      return response;
    };
  });
  const last = async () => {
    await page.waitForFunction(() => window.chatLog.length > 0 && window.chatLog.at(-1).deltas !== null);
    return page.evaluate(() => window.chatLog.at(-1));
  };
  return { last };
}

async function sendAndWait(page, selector) {
  const before = await page.$$eval(".message.assistant", (m) => m.length);
  await page.click(selector);
  await page.waitForFunction((n) => document.querySelectorAll(".message.assistant").length > n && !document.getElementById("send").disabled, {}, before);
}

async function checkThinkingToolsAndJson(page, toolsScreenshot) {
  await page.click("#tab-chat");
  await page.click("#clear");
  const chats = await watchChats(page);
  await page.$eval("#max-tokens", (e) => { e.value = "64"; });
  await page.$eval('[data-testid="prompt"]', (e) => { e.value = ""; });  // inspect leaves its text there

  // Thinking: open_thinking is sent; the reasoning streams into `thinking`, folded once the answer comes.
  await page.click('[data-testid="think"]');
  await page.type('[data-testid="prompt"]', "你好");
  await sendAndWait(page, '[data-testid="send"]');
  let exchange = await chats.last();
  let deltas = exchange.deltas;
  const reasoning = deltas.map((d) => d.reasoning_content ?? "").join("");
  const answer = deltas.map((d) => d.content ?? "").join("");
  const shown = await page.$eval('[data-testid="thinking"]', (e) => ({ text: e.textContent, folded: !e.parentElement.open, visible: !e.parentElement.hidden }));
  if (exchange.request.open_thinking !== true) problems.push("Think did not send open_thinking: " + JSON.stringify(exchange.request));
  if (!reasoning) problems.push("the demo model did not think after 你好 with Think on: " + JSON.stringify(exchange));
  if (shown.text !== reasoning || shown.visible !== (reasoning !== "")) problems.push(`the thinking shown ${JSON.stringify(shown)} is not the streamed ${JSON.stringify(reasoning)}`);
  if (answer && !shown.folded) problems.push("the thinking is not folded once the answer came");
  if ((await page.$eval('[data-testid="reply"]', (e) => e.textContent)) !== answer) problems.push("the answer shown is not the streamed content");
  console.log(`page.mjs: thinking ${JSON.stringify(reasoning)} (folded: ${shown.folded}), answer ${JSON.stringify(answer)}`);
  await page.click('[data-testid="think"]');

  // Tools, in a new chat: the demo's tools; a tool call with its name and arguments; its result sent back.
  await page.click("#clear");
  await page.click("#tool-options summary");
  await page.click("#tools-example");
  await page.type('[data-testid="prompt"]', "北京的天气怎么样？");
  await sendAndWait(page, '[data-testid="send"]');
  exchange = await chats.last();
  if (!Array.isArray(exchange.request.tools) || exchange.request.tools.length !== 2) problems.push("the tools were not sent");
  deltas = exchange.deltas;
  const streamedCall = deltas.flatMap((d) => d.tool_calls ?? []);
  const call = await page.$eval('[data-testid="tool-call"]', (e) => ({ name: e.dataset.name, arguments: e.dataset.arguments, text: e.textContent }))
    .catch(() => null);
  if (!call) {
    const errors = await page.$$eval(".message.error", (m) => m.map((e) => e.textContent));
    problems.push("no tool call shown for 北京的天气怎么样？; streamed " + JSON.stringify(deltas) + "; errors shown " + JSON.stringify(errors));
    return;
  }
  const streamedArguments = streamedCall.map((c) => c.function?.arguments ?? "").join("");
  if (call.name !== "get_weather" || call.arguments !== streamedArguments || !call.text.includes("get_weather")) {
    problems.push(`the tool call shown ${JSON.stringify(call)} is not the streamed get_weather(${streamedArguments})`);
  }
  let args = null;
  try { args = JSON.parse(call.arguments); } catch (_) { /* reported below */ }
  if (!args || typeof args.city !== "string") problems.push("the call's arguments have no city: " + call.arguments);
  console.log(`page.mjs: tool call ${call.name}(${call.arguments})`);
  const result = '{"city": "北京", "weather": "晴", "temperature": 25}';
  await page.type('[data-testid="tool-result"]', result);
  await sendAndWait(page, '[data-testid="tool-send"]');
  const history = (await chats.last()).request.messages;
  const callId = streamedCall.find((c) => c.id)?.id;
  const assistant = history.at(-2), tool = history.at(-1);
  if (!callId || assistant.tool_calls?.[0]?.id !== callId || assistant.tool_calls[0].function.name !== "get_weather" ||
      tool.role !== "tool" || tool.tool_call_id !== callId || tool.content !== result) {
    problems.push("the tool round trip's history is wrong: " + JSON.stringify(history.slice(-2)));
  }
  const afterTool = await page.$eval('[data-testid="reply"]', (e) => e.textContent);
  if (!afterTool.trim()) problems.push("no reply after the tool's result");
  console.log(`page.mjs: after the tool's result: ${JSON.stringify(afterTool)}`);

  // JSON mode: response_format json_object, and the reply parses.
  await page.screenshot({ path: toolsScreenshot, fullPage: true });
  await page.$eval('[data-testid="tools"]', (e) => { e.value = ""; });
  await page.click("#clear");
  await page.click('[data-testid="json-mode"]');
  await page.type('[data-testid="prompt"]', "你好");
  await sendAndWait(page, '[data-testid="send"]');
  if ((await chats.last()).request.response_format?.type !== "json_object") problems.push("JSON mode did not send response_format");
  const json = await page.$eval('[data-testid="reply"]', (e) => e.textContent);
  try { JSON.parse(json); } catch (e) { problems.push("the JSON mode reply does not parse: " + JSON.stringify(json)); }
  console.log(`page.mjs: JSON mode reply ${json}`);
  await page.click('[data-testid="json-mode"]');

  // The LoRA picker lists the server's adapters (run.sh starts it with one, at global scale 0).
  // Picked, a chat runs it alone at scale 1; "none" sends an empty list, the base model.
  await page.waitForSelector("#lora-picker:not([hidden])");
  const adapters = await page.$$eval('[data-testid="lora"] option', (options) => options.map((o) => [o.value, o.textContent]));
  if (!adapters.some(([value, text]) => value === "0" && text === "demo-random-1.pth")) problems.push("the LoRA picker lists " + JSON.stringify(adapters));
  for (const [choice, expected] of [["0", [{ id: 0, scale: 1 }]], ["none", []]]) {
    await page.select('[data-testid="lora"]', choice);
    await page.click("#clear");
    await page.type('[data-testid="prompt"]', "你好");
    await sendAndWait(page, '[data-testid="send"]');
    const exchange = await chats.last();
    if (JSON.stringify(exchange.request.lora) !== JSON.stringify(expected)) problems.push(`the picker's ${choice} sent lora ${JSON.stringify(exchange.request.lora)}`);
    if (!exchange.deltas.some((d) => d.content)) problems.push(`no reply with the picker's ${choice}: ${JSON.stringify(exchange.deltas)}`);
  }
  console.log("page.mjs: LoRA picker " + JSON.stringify(adapters));
}

if (problems.length) {
  for (const p of problems) console.error("page.mjs: " + p);
  process.exit(1);
}
console.log("page.mjs: ok");
