// The soak test of a running minimind-server (started by soak.sh with an API key): CLIENTS
// connections send REQUESTS requests in all, a fixed pseudo-random mix of normal and streamed
// completions and chats, streams the client hangs up on mid-way, requests it abandons before the
// reply, bodies over --max-body, prompts over --ctx, malformed JSON, and requests without or
// with a wrong key, then SIGTERM with streams running. Fails unless
// - every reply is well-formed: a JSON body that parses into its kind's shape, or server-sent
//   events that parse and end with a last chunk or an error event, then data: [DONE];
// - every status is one docs/server.md documents for that kind of request (200, 400 naming the
//   field, 401 invalid_api_key, 413 request_too_large, 503 server_overloaded), with OpenAI's
//   error shape;
// - the server's resident memory at the end is within RSS_BOUND_KIB of what it was after the
//   warm-up (every slot and the queue full at once, then the first WARMUP requests), plus the
//   prompt cache's bound when the server was started with --cache-mb (read from its command line);
// - after SIGTERM the running streams end with a shutting_down error event and [DONE], and the
//   process exits (soak.sh checks its status) within EXIT_SECONDS.
// Usage: node soak.mjs URL SERVER_PID API_KEY   (Node's own modules: no npm packages)
import http from "node:http";
import fs from "node:fs";

const [url, pid, apiKey] = process.argv.slice(2);
if (!url || !pid || !apiKey) throw new Error("usage: node soak.mjs URL SERVER_PID API_KEY");
const CLIENTS = 32, REQUESTS = 2000, WARMUP = 1000, RSS_BOUND_KIB = 8192, EXIT_SECONDS = 5, REPLY_SECONDS = 60;

// The server's flags, from its command line: the limits the requests are made to cross.
const argv = fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
const flag = (name) => {
  const i = argv.indexOf(name);
  return i < 0 ? undefined : Number(argv[i + 1]);
};
const MAX_BODY = flag("--max-body"), CONTEXT = flag("--ctx");
if (!MAX_BODY || !CONTEXT) throw new Error("soak.sh must start the server with --max-body and --ctx");
const CACHE_KIB = (flag("--cache-mb") ?? 0) * 1024;

function rssKiB() {
  const line = fs.readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) => l.startsWith("VmRSS:"));
  return Number(line.split(/\s+/)[1]);
}

// Seeded: every run draws the same numbers, though which client gets which varies with timing.
let seed = 20261207;
function random() {
  seed = (seed + 0x6d2b79f5) | 0;
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const pick = (list) => list[Math.floor(random() * list.length)];

const prompts = ["今天天气", "小明家养了一只猫", "这块石头很硬", "你好", "天气很好，我们", "北京的天气怎么样？"];
const auth = { Authorization: `Bearer ${apiKey}` };
// A connection per request (with these options Node sends Connection: close), so that no request
// goes out on a kept-alive connection that the server is closing as idle (STALL_MS: the one such
// wait that remains).
const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });

function sampling() {
  return random() < 0.5 ? { temperature: 0 } : { temperature: 1, top_p: 0.9, seed: Math.floor(random() * 1e6) };
}
function completionBody(extra) {
  return { prompt: pick(prompts), max_tokens: 1 + Math.floor(random() * 8), ...sampling(), ...extra };
}
function chatBody(extra) {
  return { messages: [{ role: "user", content: pick(prompts) }], max_tokens: 1 + Math.floor(random() * 8), ...sampling(), ...extra };
}

// The kinds of request, each with how often it is sent, what it sends and which replies are right.
// `expect` lists the statuses it may get (503 server_overloaded whenever it reaches the queue).
const kinds = [
  { name: "completion", weight: 5, path: "/v1/completions", body: () => completionBody({}), expect: [200, 503] },
  { name: "chat", weight: 5, path: "/v1/chat/completions", body: () => chatBody({}), expect: [200, 503] },
  { name: "streamed completion", weight: 4, path: "/v1/completions", body: () => completionBody({ stream: true }), expect: [200, 503] },
  { name: "streamed chat", weight: 4, path: "/v1/chat/completions", body: () => chatBody({ stream: true, stream_options: { include_usage: true } }), expect: [200, 503] },
  // Long streams the client closes once some text has come.
  { name: "stream closed mid-way", weight: 3, path: "/v1/completions", hangUp: "mid-stream", expect: [200, 503],
    body: () => completionBody({ stream: true, max_tokens: 64, ignore_eos: true }) },
  // Requests the client closes a moment after sending, whatever has come back.
  { name: "abandoned", weight: 2, path: "/v1/chat/completions", hangUp: "at once", expect: [],
    body: () => chatBody({ max_tokens: 48, ignore_eos: true }) },
  { name: "body over --max-body", weight: 1, path: "/v1/completions", expect: [413], code: "request_too_large",
    body: () => ({ prompt: "a".repeat(MAX_BODY + 1 + Math.floor(random() * 1000)), max_tokens: 1 }) },
  { name: "prompt over --ctx", weight: 1, path: "/v1/completions", expect: [400], code: "context_length_exceeded", param: "prompt",
    body: () => ({ prompt: Array.from({ length: CONTEXT + 1 + Math.floor(random() * 50) }, () => 5 + Math.floor(random() * 100)), max_tokens: 1 }) },
  { name: "max_tokens over --ctx", weight: 1, path: "/v1/chat/completions", expect: [400], code: "context_length_exceeded", param: "max_tokens",
    body: () => chatBody({ max_tokens: CONTEXT }) },
  { name: "malformed JSON", weight: 2, path: "/v1/chat/completions", expect: [400],
    body: () => pick(['{"messages": [', "[1, 2]", "null", "", '{"messages": "hi"}', "[".repeat(100), '{"prompt": "x"}',
                      Buffer.from([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x3a, 0x31, 0x7d])]) },
  { name: "a wrong field", weight: 1, path: "/v1/completions", expect: [400],
    body: () => completionBody(pick([{ temperature: "hot" }, { n: 2 }, { max_tokens: 0 }, { user: "x" }, { stop: 3 }])) },
  { name: "no key", weight: 1, path: "/v1/completions", expect: [401], code: "invalid_api_key", headers: {}, body: () => completionBody({}) },
  { name: "wrong key", weight: 1, path: "/v1/chat/completions", expect: [401], code: "invalid_api_key",
    headers: { Authorization: `Bearer ${apiKey}x` }, body: () => chatBody({}) },
  { name: "models without a key", weight: 1, method: "GET", path: "/v1/models", expect: [401], code: "invalid_api_key", headers: {} },
  { name: "models", weight: 1, method: "GET", path: "/v1/models", expect: [200] },
  { name: "health", weight: 1, method: "GET", path: "/health", expect: [200], headers: {} },
];
const schedule = kinds.flatMap((k) => Array(k.weight).fill(k));

// httplib closes a connection whose request has not come within 5 s (its keep-alive wait, which
// applies to a connection's first request too). A client starved of CPU for that long (on a
// machine loaded far past its cores) sees its request refused by a close; that is not the
// server's fault. So the event loop's stalls are watched, and a close without a reply is
// forgiven only when the client stalled for STALL_MS while the request was out.
const STALL_MS = 4000;
const stalls = [];  // [time it ended, how long], of each stall over STALL_MS
let lastTick = Date.now();
const stallWatch = setInterval(() => {
  const now = Date.now();
  if (now - lastTick > STALL_MS) stalls.push([now, now - lastTick]);
  lastTick = now;
}, 50);
const stalledSince = (time) => stalls.some(([end]) => end >= time) || Date.now() - lastTick > STALL_MS;
let forgiven = 0;

function fail(what, reply, message) {
  throw new Error(`${what}: ${message}: ${reply.status} ${reply.type} ${String(reply.text).slice(0, 300)}`);
}

// Sends one request; resolves with its status, content type and text (as far as it came), or
// with { status: 0 } when the client hung up before any reply.
function send(kind) {
  const body = kind.body ? kind.body() : undefined;
  const payload = body === undefined ? undefined : Buffer.isBuffer(body) ? body : Buffer.from(typeof body === "string" ? body : JSON.stringify(body));
  return new Promise((resolve, reject) => {
    const headers = { ...(kind.headers ?? auth) };
    if (payload) headers["Content-Type"] = "application/json";
    const req = http.request(`${url}${kind.path}`, { method: kind.method ?? "POST", agent, headers });
    const timer = setTimeout(() => reject(new Error(`${kind.name}: no reply in ${REPLY_SECONDS} s`)), REPLY_SECONDS * 1000);
    const done = (reply) => {
      clearTimeout(timer);
      resolve(reply);
    };
    // A client that hangs up takes whatever came; any other must get its whole reply.
    const sentAt = Date.now();
    let responded = false;
    const broken = (e) => {
      if (kind.hangUp) return done({ status: 0 });
      if (!responded && e.code === "ECONNRESET" && stalledSince(sentAt)) {
        ++forgiven;
        return done({ status: 0 });
      }
      reject(new Error(`${kind.name}: ${e.message}`));
    };
    req.on("response", (res) => {
      responded = true;
      let text = "";
      res.setEncoding("utf8");
      const reply = () => ({ status: res.statusCode, type: res.headers["content-type"] ?? "", text });
      res.on("data", (d) => {
        text += d;
        if (kind.hangUp === "mid-stream" && text.includes('"text":"') && text.includes("\n\n")) {
          req.destroy();  // closes the socket
          done({ ...reply(), cut: true });
        }
      });
      res.on("end", () => done(reply()));
      res.on("error", broken);
    });
    req.on("error", broken);
    req.on("close", () => kind.hangUp && done({ status: 0 }));
    if (kind.hangUp === "at once") setTimeout(() => req.destroy(), Math.floor(random() * 30));
    req.end(payload);
  });
}

// OpenAI's error shape, with the code and param the kind expects.
function checkError(kind, reply) {
  if (!reply.type.startsWith("application/json")) fail(kind.name, reply, "an error that is not JSON");
  const e = JSON.parse(reply.text).error;
  if (typeof e?.message !== "string" || !e.message || typeof e.type !== "string" || !("param" in e) || !("code" in e)) {
    fail(kind.name, reply, "not OpenAI's error shape");
  }
  if (reply.status === 503 && e.code !== "server_overloaded") fail(kind.name, reply, "a 503 that is not server_overloaded");
  if (reply.status !== 503 && kind.code && e.code !== kind.code) fail(kind.name, reply, `code is not ${kind.code}`);
  if (kind.param && e.param !== kind.param) fail(kind.name, reply, `param is not ${kind.param}`);
  if (reply.status === 400 && !kind.code && e.type !== "invalid_request_error") fail(kind.name, reply, "a 400 that is not invalid_request_error");
}

function checkUsage(kind, reply, usage) {
  if (!Number.isInteger(usage?.prompt_tokens) || !Number.isInteger(usage.completion_tokens) ||
      usage.total_tokens !== usage.prompt_tokens + usage.completion_tokens) {
    fail(kind.name, reply, "malformed usage");
  }
}

// Server-sent events as far as they came: each `data: ` and JSON; a whole stream ends with a last
// chunk (finish_reason, usage) or an error event, then [DONE].
function checkEvents(kind, reply, object, { whole, shutdown = false }) {
  if (!reply.type.startsWith("text/event-stream")) fail(kind.name, reply, "not server-sent events");
  const events = reply.text.split("\n\n");
  const complete = events.pop() === "";  // text after the last blank line is an event cut short
  if (whole && !complete) fail(kind.name, reply, "the stream ends mid-event");
  if (events.some((e) => !e.startsWith("data: ") || e.includes("\n"))) fail(kind.name, reply, "an event that is not one data: line");
  const done = events.indexOf("data: [DONE]");
  if (done >= 0 && done !== events.length - 1) fail(kind.name, reply, "events after data: [DONE]");
  if (whole && done < 0) fail(kind.name, reply, "no data: [DONE] at the end");
  const chunks = events.filter((e) => e !== "data: [DONE]").map((e) => JSON.parse(e.slice(6)));
  for (const c of chunks) {
    if (c.error) continue;
    if (c.object !== object || typeof c.id !== "string" || !Array.isArray(c.choices)) fail(kind.name, reply, "a malformed chunk");
  }
  if (!whole) return;
  const last = chunks.filter((c) => !c.error && c.choices.length > 0).at(-1);
  const error = chunks.at(-1)?.error;
  if (shutdown) {
    if (error?.code !== "shutting_down" && !last?.choices[0].finish_reason) fail(kind.name, reply, "neither finished nor shutting_down");
    return;
  }
  if (error) fail(kind.name, reply, "an error event");
  if (!["stop", "length"].includes(last?.choices[0].finish_reason)) fail(kind.name, reply, "no finish_reason in the last chunk");
  checkUsage(kind, reply, last.usage);
}

function check(kind, reply) {
  if (reply.status === 0) return;  // hung up before the reply (kind.hangUp, or forgiven)
  if (!kind.expect.includes(reply.status) && !(kind.hangUp && [200, 503].includes(reply.status))) {
    fail(kind.name, reply, `status not among ${kind.expect}`);
  }
  if (reply.status !== 200) {
    if (!reply.cut) checkError(kind, reply);
    return;
  }
  const chat = kind.path === "/v1/chat/completions";
  if (reply.type.startsWith("text/event-stream")) {
    return checkEvents(kind, reply, chat ? "chat.completion.chunk" : "text_completion", { whole: !reply.cut });
  }
  if (reply.cut) return;
  if (!reply.type.startsWith("application/json")) fail(kind.name, reply, "not JSON");
  const r = JSON.parse(reply.text);
  if (kind.path === "/health") {
    if (r.status !== "ok" || !Number.isInteger(r.slots_idle)) fail(kind.name, reply, "a malformed /health");
  } else if (kind.path === "/v1/models") {
    if (r.object !== "list" || r.data?.[0]?.object !== "model") fail(kind.name, reply, "a malformed model list");
  } else {
    const choice = r.choices?.[0];
    const content = chat ? choice?.message?.content : choice?.text;
    if (r.object !== (chat ? "chat.completion" : "text_completion") || typeof content !== "string" ||
        !["stop", "length"].includes(choice.finish_reason)) {
      fail(kind.name, reply, "a malformed reply");
    }
    checkUsage(kind, reply, r.usage);
  }
}

const statuses = {};
// Sends `total` requests from CLIENTS clients, then waits for the server to be idle (connections
// of the last requests torn down, slots freed) and returns its resident memory.
async function run(total) {
  let sent = 0;
  async function client() {
    while (sent < total) {
      ++sent;
      const kind = schedule[Math.floor(random() * schedule.length)];
      const reply = await send(kind);
      check(kind, reply);
      const key = `${kind.name} ${reply.status || "hung up"}`;
      statuses[key] = (statuses[key] ?? 0) + 1;
    }
  }
  await Promise.all(Array.from({ length: CLIENTS }, client));
  const deadline = Date.now() + 10000;
  while (true) {
    const health = JSON.parse((await send({ name: "health", method: "GET", path: "/health", headers: {} })).text);
    if (health.slots_idle === health.slots_total && health.queued === 0) return rssKiB();
    if (Date.now() > deadline) throw new Error("slots still busy 10 s after the last reply (a client that hung up holds one?)");
    await sleep(20);
  }
}

// The warm-up starts with every client at once sending the longest chat of the mix, so that every
// slot and the whole queue hold a request (each with its first KV block) together, and the
// scheduler's steps reach their largest (every slot prefilling the longest prompt together, then
// decoding to the longest length), whose buffers it keeps: the most memory the mix ever needs is
// taken before the measurement, not in it. 503s are expected there.
const longestPrompt = prompts.reduce((a, b) => (b.length > a.length ? b : a));
const saturating = { name: "saturating", path: "/v1/chat/completions", expect: [200, 503],
                     body: () => ({ messages: [{ role: "user", content: longestPrompt }], max_tokens: 64, ignore_eos: true, temperature: 0 }) };
async function saturate() {
  await Promise.all(Array.from({ length: CLIENTS }, async () => check(saturating, await send(saturating))));
}

const start = Date.now();
await saturate();
const rssAfterWarmup = await run(WARMUP);
const rssAtEnd = await run(REQUESTS - WARMUP);
const seconds = (Date.now() - start) / 1000;
console.log(`soak: ${CLIENTS} clients, ${REQUESTS} requests in ${seconds.toFixed(1)} s; RSS ${rssAfterWarmup} KiB after ${WARMUP} -> ` +
            `${rssAtEnd} KiB (bound +${RSS_BOUND_KIB} KiB + cache ${CACHE_KIB} KiB)`);
for (const [key, n] of Object.entries(statuses).sort()) console.log(`soak:   ${String(n).padStart(4)} x ${key}`);
if (forgiven > 0) console.log(`soak: ${forgiven} connections closed unanswered while this client stalled over ${STALL_MS} ms (the machine is overloaded)`);
if (rssAtEnd - rssAfterWarmup > RSS_BOUND_KIB + CACHE_KIB) throw new Error(`resident memory grew by ${rssAtEnd - rssAfterWarmup} KiB after the warm-up`);

// SIGTERM with streams running: each ends with a shutting_down error event (or had just finished),
// and the process is gone (a zombie, until soak.sh reaps it) within EXIT_SECONDS.
const long = { name: "stream at SIGTERM", path: "/v1/completions", expect: [200],
               body: () => ({ prompt: pick(prompts), max_tokens: CONTEXT - 16, ignore_eos: true, stream: true }) };
const streams = [];
let started = 0;
await new Promise((resolve) => {
  for (let i = 0; i < 4; ++i) {
    streams.push(new Promise((done, reject) => {
      const req = http.request(`${url}${long.path}`, { method: "POST", agent, headers: { ...auth, "Content-Type": "application/json" } }, (res) => {
        let text = "", first = true;
        res.setEncoding("utf8");
        res.on("data", (d) => {
          text += d;
          if (first && text.includes('"text":"')) {
            first = false;
            if (++started === 4) resolve();
          }
        });
        res.on("end", () => done({ status: res.statusCode, type: res.headers["content-type"] ?? "", text }));
        res.on("error", reject);
      });
      req.on("error", reject);
      req.end(JSON.stringify(long.body()));
    }));
  }
});
const signalled = Date.now();
process.kill(Number(pid), "SIGTERM");
for (const reply of await Promise.all(streams)) {
  if (reply.status !== 200) fail(long.name, reply, "not 200");
  checkEvents(long, reply, "text_completion", { whole: true, shutdown: true });
}
agent.destroy();
clearInterval(stallWatch);
const exited = () => {
  try {
    return fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1][0] === "Z";
  } catch {
    return true;  // already reaped
  }
};
while (!exited()) {
  if (Date.now() - signalled > EXIT_SECONDS * 1000) throw new Error(`the server still runs ${EXIT_SECONDS} s after SIGTERM`);
  await sleep(20);
}
console.log(`soak: SIGTERM with 4 streams running: they ended with shutting_down, the server exited in ${Date.now() - signalled} ms`);
