// The prompt cache's benchmarks (issue 46) against running servers: minimind-server's
// /v1/completions, or llama-server's native /completion, both given prompts as token ids (random,
// fresh every round, so nothing is cached from an earlier round). Prints one line per round.
//
//   chat      a 10-turn conversation: each turn sends the whole history (150 more ids a turn, 1500
//             at turn 10) for one new token; the latency of turn 10 with the cache (turns 1-9
//             run before it) against turn 10 of another conversation with cache_prompt false.
//   shared    32 clients at once, each a 500-id system prompt shared by all and 20 ids of its
//             own, 128 new tokens (greedy, ignore_eos): aggregate tokens/s with and without the
//             cache (cache_prompt true, false).
//   distinct  16 clients, each two requests in a row of 128 distinct ids, 128 new tokens: tokens/s
//             of each server given, rounds alternating (this branch against main, say).
//
// Usage: [SEED=N] node prompt_cache.mjs chat|shared|distinct ROUNDS VOCAB minimind|llama URL [URL...]
// (Node's own http module: no npm packages.) A non-200 reply or a short one stops it.
import http from "node:http";

const [scenario, roundsArg, vocabArg, api, ...urls] = process.argv.slice(2);
const rounds = Number(roundsArg), vocab = Number(vocabArg);
if (!["chat", "shared", "distinct"].includes(scenario) || !(rounds > 0) || !(vocab > 3) || !["minimind", "llama"].includes(api) || urls.length === 0) {
  throw new Error("usage: node prompt_cache.mjs chat|shared|distinct ROUNDS VOCAB minimind|llama URL [URL...]");
}
// A connection per request: a kept-alive one that the server closes when idle can be reset under a new request.
const agent = new http.Agent({ keepAlive: false, maxSockets: 64 });

// A fixed-seed generator, so that a run sends the same prompts as another of the same SEED
// (environment; default 12345): give another seed to a server that has seen this one's.
let state = Number(process.env.SEED ?? 12345) >>> 0;
function randomIds(n) {
  const ids = [];
  for (let i = 0; i < n; ++i) {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    ids.push(3 + (state >>> 8) % (vocab - 3));
  }
  return ids;
}

// Posts a greedy completion of `ids`; resolves to {seconds, tokens, cached}.
function complete(url, ids, maxTokens, cachePrompt) {
  // cache_prompt only when false: a minimind-server from before the cache refuses the field.
  const [path, body] = api === "minimind"
    ? ["/v1/completions", { prompt: ids, max_tokens: maxTokens, temperature: 0, ignore_eos: true, ...(cachePrompt ? {} : { cache_prompt: false }) }]
    : ["/completion", { prompt: ids, n_predict: maxTokens, temperature: 0, ignore_eos: true, cache_prompt: cachePrompt }];
  const start = process.hrtime.bigint();
  return new Promise((resolve, reject) => {
    const req = http.request(url + path, { method: "POST", agent, headers: { "Content-Type": "application/json" } }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (d) => (text += d));
      res.on("end", () => {
        const seconds = Number(process.hrtime.bigint() - start) / 1e9;
        if (res.statusCode !== 200) return reject(new Error(`${url}${path}: ${res.statusCode} ${text.slice(0, 300)}`));
        const r = JSON.parse(text);
        const tokens = api === "minimind" ? r.usage.completion_tokens : r.tokens_predicted;
        const cached = api === "minimind" ? r.usage.prompt_tokens_details?.cached_tokens : r.tokens_cached ?? r.timings?.cache_n;
        if (tokens !== maxTokens) return reject(new Error(`${url}${path}: ${tokens} tokens, not ${maxTokens}`));
        resolve({ seconds, tokens, cached });
      });
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(JSON.stringify(body));
  });
}

const fmt = (x, digits = 3) => x.toFixed(digits);

async function chat(url) {
  const turns = 10, perTurn = 150;
  let history = [];
  let last;
  for (let turn = 1; turn <= turns; ++turn) {
    history = history.concat(randomIds(perTurn));
    last = await complete(url, history, 1, true);
  }
  const without = await complete(url, randomIds(turns * perTurn), 1, false);
  return `turn 10 (${history.length} ids): first token ${fmt(last.seconds)} s with the cache (${last.cached} cached), ` +
         `${fmt(without.seconds)} s without: ${fmt(without.seconds / last.seconds, 1)}x`;
}

async function shared(url, cachePrompt) {
  const clients = 32, newTokens = 128;
  const system = randomIds(500);
  const prompts = Array.from({ length: clients }, () => system.concat(randomIds(20)));
  const start = process.hrtime.bigint();
  const replies = await Promise.all(prompts.map((p) => complete(url, p, newTokens, cachePrompt)));
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  const cached = replies.reduce((sum, r) => sum + (r.cached ?? 0), 0);
  return { rate: (clients * newTokens) / seconds, seconds, cached };
}

async function distinct(url) {
  const clients = 16, newTokens = 128, each = 2;
  const start = process.hrtime.bigint();
  await Promise.all(Array.from({ length: clients }, async () => {
    for (let i = 0; i < each; ++i) await complete(url, randomIds(128), newTokens, true);
  }));
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  return (clients * each * newTokens) / seconds;
}

// A warm-up round first: connection threads, malloc arenas and the servers' first steps.
if (scenario === "distinct") for (const url of urls) await distinct(url);
else await complete(urls[0], randomIds(64), 4, false);

for (let round = 1; round <= rounds; ++round) {
  if (scenario === "chat") {
    console.log(`round ${round}: ${await chat(urls[0])}`);
  } else if (scenario === "shared") {
    // Alternating which goes first.
    const order = round % 2 === 1 ? [true, false] : [false, true];
    const results = {};
    for (const cachePrompt of order) results[cachePrompt] = await shared(urls[0], cachePrompt);
    const on = results[true], off = results[false];
    console.log(`round ${round}: 32 clients sharing 500 ids: ${fmt(on.rate, 0)} tokens/s with the cache (${fmt(on.seconds, 2)} s, ` +
                `${on.cached} prompt ids cached), ${fmt(off.rate, 0)} tokens/s without (${fmt(off.seconds, 2)} s): ${fmt(on.rate / off.rate, 2)}x`);
  } else {
    const order = round % 2 === 1 ? urls : [...urls].reverse();
    const rates = new Map();
    for (const url of order) rates.set(url, await distinct(url));
    console.log(`round ${round}: 16 clients, distinct prompts: ` + urls.map((u) => `${u} ${fmt(rates.get(u), 0)} tokens/s`).join(", ") +
                (urls.length === 2 ? `: ${fmt(rates.get(urls[0]) / rates.get(urls[1]), 3)}x` : ""));
  }
}
agent.destroy();
