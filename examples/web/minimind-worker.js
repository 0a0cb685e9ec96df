// The web page's model, off the page's thread: loads minimind-web (the library in WebAssembly),
// puts a checkpoint's files into its in-memory file system and answers the page's messages.
// Page -> worker: {type: "load-demo"} | {type: "open", files: [File]} | {type: "inspect", text, top}
//   | {type: "chat", messages, options} | {type: "stop"} | {type: "bench", prompt, decode}
//   | {type: "shape", name} (random weights of a published shape, for bench).
// Worker -> page: {type: "progress", text, fraction} | {type: "loaded", info} | {type: "trace", trace}
//   | {type: "piece", text} | {type: "done", finish_reason, speed} | {type: "bench", result} | {type: "error", message}.
"use strict";

// Threads need SharedArrayBuffer, which the browser gives only to a cross-origin isolated page
// (minimind-server --web-root sends the headers): there the build with pthreads, one per core
// (at most 8), else the one-thread build. The pthreads' workers load the same script.
const threads = self.crossOriginIsolated ? Math.min(navigator.hardwareConcurrency || 1, 8) : 1;
const library = threads > 1 ? "minimind-web-threads.js" : "minimind-web.js";
importScripts(library);

const demoFiles = ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"];
const modulePromise = createMiniMind({ threadPool: threads - 1, mainScriptUrlOrBlob: library });
let stopRequested = false;
let generating = false;
let loads = 0;

function progress(text, fraction) { postMessage({ type: "progress", text, fraction }); }

// The library answers in JSON, an error as {"error": "..."}.
function call(result) {
  const value = JSON.parse(result);
  if (value.error) throw new Error(value.error);
  return value;
}

// Fetches the demo model beside the page, with the bytes received so far as progress.
async function fetchDemo() {
  const total = [];
  const responses = [];
  for (const name of demoFiles) {
    const response = await fetch("model/" + name);
    if (!response.ok) throw new Error("model/" + name + ": HTTP " + response.status);
    responses.push(response);
    total.push(Number(response.headers.get("Content-Length")) || 0);
  }
  const expected = total.reduce((a, b) => a + b, 0);
  let received = 0;
  const files = [];
  for (let i = 0; i < demoFiles.length; ++i) {
    const reader = responses[i].body.getReader();
    const chunks = [];
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      chunks.push(value);
      received += value.length;
      progress("Downloading the demo model: " + (received / 1e6).toFixed(1) + " MB", expected ? received / expected : 0);
    }
    files.push({ name: demoFiles[i], bytes: await new Blob(chunks).arrayBuffer() });
  }
  return files;
}

// Writes the files to a fresh directory and loads them: the GGUF file if there is one, else the
// directory (config.json + model.safetensors + tokenizer.json).
async function load(files, label) {
  const module = await modulePromise;
  const dir = "/models/" + ++loads;
  module.FS.mkdirTree(dir);
  let gguf = null;
  for (const file of files) {
    module.FS.writeFile(dir + "/" + file.name, new Uint8Array(file.bytes));
    if (file.name.toLowerCase().endsWith(".gguf")) gguf = dir + "/" + file.name;
  }
  progress("Loading " + label + " into the model", 1);
  await new Promise((resolve) => setTimeout(resolve, 0));  // lets the message out before the work
  const info = call(module.load(gguf || dir));
  if (loads > 1) removeTree(module, "/models/" + (loads - 1));
  info.name = label;
  postMessage({ type: "loaded", info });
}

// The previous model's files: the library has its own copy of the weights once loaded.
function removeTree(module, dir) {
  if (!module.FS.analyzePath(dir).exists) return;
  for (const name of module.FS.readdir(dir)) {
    if (name !== "." && name !== "..") module.FS.unlink(dir + "/" + name);
  }
  module.FS.rmdir(dir);
}

async function openFiles(fileList) {
  const files = [];
  let read = 0;
  const total = fileList.reduce((sum, f) => sum + f.size, 0);
  for (const f of fileList) {
    progress("Reading " + f.name, total ? read / total : 0);
    files.push({ name: f.name, bytes: await f.arrayBuffer() });
    read += f.size;
  }
  const gguf = fileList.find((f) => f.name.toLowerCase().endsWith(".gguf"));
  if (!gguf && !fileList.some((f) => f.name === "config.json")) {
    throw new Error("open a .gguf file, or config.json + model.safetensors + tokenizer.json together");
  }
  await load(files, (gguf ? gguf.name : "model.safetensors") + " from disk");
}

// A turn of the event loop without setTimeout's 4 ms clamp, so a Stop message gets in.
function yieldToMessages() {
  return new Promise((resolve) => {
    const channel = new MessageChannel();
    channel.port1.onmessage = resolve;
    channel.port2.postMessage(0);
  });
}

// Streams the reply piece by piece; tokens/s as measured here: prefill over the prompt's tokens,
// decode over the tokens after the first (which the prefill produced).
async function chat(messages, options) {
  const module = await modulePromise;
  stopRequested = false;
  generating = true;
  try {
    const prefillStart = performance.now();
    const started = call(module.startChat(JSON.stringify(messages), JSON.stringify(options)));
    const prefillEnd = performance.now();
    let tokens = 0, finish = "stopped", decodeSeconds = 0, sliceStart = performance.now();
    for (;;) {
      const t0 = performance.now();
      const out = call(module.step(1));
      decodeSeconds += (performance.now() - t0) / 1000;  // tokens - 1 forward passes in all
      tokens += out.tokens;
      if (out.text) postMessage({ type: "piece", text: out.text });
      if (out.finish_reason) { finish = out.finish_reason; break; }
      if (performance.now() - sliceStart > 30) {  // a Stop can arrive between slices
        await yieldToMessages();
        sliceStart = performance.now();
        if (stopRequested) break;
      }
    }
    const prefillSeconds = (prefillEnd - prefillStart) / 1000;
    postMessage({ type: "done", finish_reason: finish, speed: {
      prompt_tokens: started.prompt_tokens, prefill_tokens_per_second: started.prompt_tokens / prefillSeconds,
      tokens, decode_tokens_per_second: tokens > 1 && decodeSeconds > 0 ? (tokens - 1) / decodeSeconds : 0 } });
  } finally {
    generating = false;
  }
}

onmessage = async (event) => {
  const message = event.data;
  if (message.type === "stop") { stopRequested = true; return; }
  try {
    const module = await modulePromise;
    if (message.type === "load-demo") await load(await fetchDemo(), "demo model");
    else if (message.type === "open") await openFiles(Array.from(message.files));
    else if (message.type === "inspect") postMessage({ type: "trace", trace: call(module.inspect(message.text, message.top, true)) });
    else if (message.type === "chat") {
      if (generating) throw new Error("a reply is already being generated");
      await chat(message.messages, message.options);
    } else if (message.type === "shape") postMessage({ type: "loaded", info: { ...call(module.loadShape(message.name)), name: message.name + " (random weights)" } });
    else if (message.type === "bench") postMessage({ type: "bench", result: call(module.bench(message.prompt, message.decode)) });
    else throw new Error("unknown message " + message.type);
  } catch (e) {
    postMessage({ type: "error", request: message.type, message: e.message || String(e) });
  }
};
