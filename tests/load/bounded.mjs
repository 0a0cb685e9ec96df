// A bounded load test of a running minimind-server (started by bounded.sh): CLIENTS connections
// send REQUESTS greedy completions in all, half of them streamed, then a warm-up's worth again.
// Fails unless every reply is a well-formed 200 or the documented 503 server_overloaded, some
// of each came, a prompt's greedy replies are all the same text, and the server's resident memory
// after the run is within RSS_BOUND_KIB of what it was after the warm-up.
// Usage: node bounded.mjs URL SERVER_PID   (Node's own http module: no npm packages)
import http from "node:http";
import fs from "node:fs";

const [url, pid] = process.argv.slice(2);
if (!url || !pid) throw new Error("usage: node bounded.mjs URL SERVER_PID");
const CLIENTS = 16, WARMUP = 400, REQUESTS = 400, MAX_TOKENS = 12, RSS_BOUND_KIB = 8192;
const prompts = ["今天天气", "小明家养了一只猫", "这块石头很硬", "你好", "天气很好，我们"];
const agent = new http.Agent({ keepAlive: true, maxSockets: CLIENTS });

function rssKiB() {
  const line = fs.readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) => l.startsWith("VmRSS:"));
  return Number(line.split(/\s+/)[1]);
}

function post(body) {
  return new Promise((resolve, reject) => {
    const req = http.request(`${url}/v1/completions`, { method: "POST", agent, headers: { "Content-Type": "application/json" } }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (d) => (text += d));
      res.on("end", () => resolve({ status: res.statusCode, type: res.headers["content-type"] ?? "", text }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(JSON.stringify(body));
  });
}

function fail(message, reply) {
  throw new Error(`${message}: ${reply.status} ${reply.type} ${reply.text.slice(0, 300)}`);
}

// The text of a 200 reply, checked for shape; null for a 503 server_overloaded.
function replyText(reply, stream) {
  if (reply.status === 503) {
    const code = JSON.parse(reply.text)?.error?.code;
    if (code !== "server_overloaded") fail("a 503 that is not server_overloaded", reply);
    return null;
  }
  if (reply.status !== 200) fail("unexpected status", reply);
  if (!stream) {
    if (reply.type !== "application/json") fail("not JSON", reply);
    const r = JSON.parse(reply.text);
    const choice = r.choices?.[0];
    if (r.object !== "text_completion" || typeof choice?.text !== "string" || choice.finish_reason !== "length" ||
        r.usage?.completion_tokens !== MAX_TOKENS || r.usage.total_tokens !== r.usage.prompt_tokens + MAX_TOKENS) {
      fail("a malformed completion", reply);
    }
    return choice.text;
  }
  if (!reply.type.startsWith("text/event-stream")) fail("not server-sent events", reply);
  const events = reply.text.split("\n\n").filter((e) => e.length > 0);
  if (events.some((e) => !e.startsWith("data: ")) || events.at(-1) !== "data: [DONE]") fail("malformed events", reply);
  const chunks = events.slice(0, -1).map((e) => JSON.parse(e.slice(6)));
  const last = chunks.at(-1);
  if (last?.choices?.[0]?.finish_reason !== "length" || last.usage?.completion_tokens !== MAX_TOKENS) fail("a malformed last chunk", reply);
  return chunks.map((c) => c.choices[0].text).join("");
}

const firstText = new Map();  // prompt -> its first greedy reply
const counts = { 200: 0, 503: 0 };
async function run(total) {
  let next = 0;
  async function client() {
    while (next < total) {
      const i = next++;
      const prompt = prompts[i % prompts.length], stream = i % 2 === 1;
      const body = { prompt, max_tokens: MAX_TOKENS, temperature: 0, ignore_eos: true, stream };
      const text = replyText(await post(body), stream);
      if (text === null) {
        ++counts[503];
        continue;
      }
      ++counts[200];
      if (!firstText.has(prompt)) firstText.set(prompt, text);
      else if (firstText.get(prompt) !== text) throw new Error(`greedy replies to ${prompt} differ: ${JSON.stringify(firstText.get(prompt))} vs ${JSON.stringify(text)}`);
    }
  }
  await Promise.all(Array.from({ length: CLIENTS }, client));
}

const start = Date.now();
// The warm-up brings every connection thread and malloc arena the load needs into memory, so
// growth over the measured run is what a leak would show.
await run(WARMUP);
const before = rssKiB();
counts[200] = counts[503] = 0;
await run(REQUESTS);
const after = rssKiB();
agent.destroy();
const seconds = (Date.now() - start) / 1000;
console.log(`load: ${CLIENTS} clients, ${REQUESTS} requests (after ${WARMUP} warm-up) in ${seconds.toFixed(1)} s: ` +
            `${counts[200]} x 200, ${counts[503]} x 503 server_overloaded; RSS ${before} KiB -> ${after} KiB (bound +${RSS_BOUND_KIB})`);
if (counts[200] === 0 || counts[503] === 0) throw new Error("expected both 200s and 503s (is the queue small enough?)");
if (firstText.size !== prompts.length) throw new Error("some prompt never got a 200");
if (after - before > RSS_BOUND_KIB) throw new Error(`resident memory grew by ${after - before} KiB over the run`);
