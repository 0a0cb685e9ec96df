// Renders the real MiniMind chat templates for a fixed list of conversations and writes the golden
// files tests/data/chat_template/<family>.json that tests/test_chat_template.cpp checks
// include/minimind/chat_template.hpp against, byte for byte.
//
// Run (Node 20, python3 with jinja2 — Debian: apt install nodejs npm python3-jinja2):
//   cd tools && npm ci
//   node render_chat_templates.mjs ../../shared/minimind/minimind2/tokenizer_config.json \
//                                  ../../shared/minimind/minimind-3/tokenizer_config.json
// Any tokenizer_config.json (or a checkpoint's) works; the family is told from the template text.
//
// Two engines render every case:
//  - Python jinja2, set up as transformers' apply_chat_template sets it up (trim_blocks,
//    lstrip_blocks, its own tojson). This is what MiniMind is trained and evaluated with, so its
//    output is the golden "rendered".
//  - @huggingface/jinja (pinned in package.json) as an independent cross-check. It differs from
//    jinja2 in ways that matter here: str.strip/lstrip/rstrip ignore their chars argument (it trims
//    all whitespace where minimind-3's template asks for '\n' only), and tojson prints floats as
//    JavaScript does (1e-05 as 0.00001). Where its output differs, the case also stores it as
//    "huggingface_jinja", and the script lists those cases, so a disagreement is never silent.
// The template text itself is not copied into the repository; each golden file records only the
// template's family, byte length and FNV-1a 64 hash (the fingerprint chat_template.hpp matches).

import { readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Template } from "@huggingface/jinja";

const here = dirname(fileURLToPath(import.meta.url));
const outDir = join(here, "..", "tests", "data", "chat_template");
// The package does not export its package.json, so read the installed copy's version directly.
const hfJinjaVersion = JSON.parse(
  readFileSync(join(here, "node_modules", "@huggingface", "jinja", "package.json"), "utf8"),
).version;

// transformers' rendering environment (transformers/utils/chat_template_utils.py), minus the
// generation-tag extension that none of these templates uses.
const PYTHON_RENDERER = String.raw`
import json, sys
import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)

def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)

env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=["jinja2.ext.loopcontrols"])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception

job = json.load(sys.stdin)
template = env.from_string(job["template"])
out = []
for case in job["cases"]:
    kwargs = dict(case["options"])
    kwargs.setdefault("add_generation_prompt", False)
    kwargs.setdefault("tools", None)
    try:
        out.append({"rendered": template.render(messages=case["messages"], **kwargs)})
    except Exception as e:
        out.append({"error": type(e).__name__ + ": " + str(e)})
print(json.dumps({"jinja2": jinja2.__version__, "results": out}))
`;

// FNV-1a 64 over the template's UTF-8 bytes: the fingerprint ChatTemplate recognises.
function fnv1a64(text) {
  let hash = 0xcbf29ce484222325n;
  for (const byte of Buffer.from(text, "utf8")) {
    hash ^= BigInt(byte);
    hash = (hash * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  return hash.toString(16).padStart(16, "0");
}

// Told apart by the generation-prompt variable each family reads; chat_template.hpp then checks
// the exact text, so a wrong guess here cannot produce a passing golden file.
function familyOf(template) {
  if (template.includes("open_thinking")) return "minimind-3";
  if (template.includes("You are a helpful assistant")) return "minimind2";
  throw new Error("not a MiniMind2 or minimind-3 chat template");
}

const user = (content) => ({ role: "user", content });
const assistant = (content, extra = {}) => ({ role: "assistant", content, ...extra });
const system = (content) => ({ role: "system", content });
const tool = (content) => ({ role: "tool", content });

const weatherTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "查询城市天气 (\"current\" only)",
    parameters: {
      type: "object",
      properties: { city: { type: "string", description: "城市名" }, days: { type: "integer" } },
      required: ["city"],
    },
  },
};
const timeTool = { type: "function", function: { name: "get_time", parameters: { type: "object", properties: {} } } };
const callWeather = { type: "function", function: { name: "get_weather", arguments: { city: "北京", days: 2 } } };

// Every case is rendered by both templates; each names the behaviour it pins down.
const cases = [
  { name: "user only", messages: [user("你好")], options: {} },
  { name: "user only, generation prompt", messages: [user("你好")], options: { add_generation_prompt: true } },
  { name: "system and user", messages: [system("你是一个AI助手。"), user("今天天气怎么样？")], options: { add_generation_prompt: true } },
  { name: "system only", messages: [system("Be brief.")], options: { add_generation_prompt: true } },
  { name: "assistant first", messages: [assistant("Hello!"), user("Hi")], options: { add_generation_prompt: true } },
  {
    name: "multi-turn user assistant user",
    messages: [user("1+1=?"), assistant("2"), user("再加1呢？")],
    options: { add_generation_prompt: true },
  },
  {
    name: "multi-turn with system, ends with assistant",
    messages: [system("sys"), user("a"), assistant("b"), user("c"), assistant("d")],
    options: {},
  },
  { name: "system message after the first", messages: [user("a"), system("mid-conversation rule"), user("b")], options: { add_generation_prompt: true } },
  { name: "two system messages", messages: [system("first"), system("second"), user("u")], options: {} },
  { name: "enable_thinking true", messages: [user("想一想")], options: { add_generation_prompt: true, enable_thinking: true } },
  { name: "enable_thinking false", messages: [user("想一想")], options: { add_generation_prompt: true, enable_thinking: false } },
  { name: "enable_thinking false without generation prompt", messages: [user("x")], options: { enable_thinking: false } },
  { name: "open_thinking true", messages: [user("想一想")], options: { add_generation_prompt: true, open_thinking: true } },
  { name: "open_thinking false", messages: [user("想一想")], options: { add_generation_prompt: true, open_thinking: false } },
  {
    name: "both thinking switches",
    messages: [system("s"), user("q")],
    options: { add_generation_prompt: true, enable_thinking: false, open_thinking: true },
  },
  { name: "assistant with think block", messages: [user("q"), assistant("<think>\n先算一下。\n</think>\n\n答案是2。")], options: {} },
  { name: "assistant with think block, no newlines", messages: [user("q"), assistant("<think>r</think>a")], options: {} },
  { name: "assistant with only a closing think tag", messages: [user("q"), assistant("reasoning\n</think>\n\nanswer")], options: {} },
  { name: "assistant with two think blocks", messages: [user("q"), assistant("<think>a</think>b<think>c</think>\nd")], options: {} },
  { name: "assistant with nested think tags", messages: [user("q"), assistant("<think>outer\n<think>\ninner\n</think>\nanswer")], options: {} },
  { name: "assistant with empty think block", messages: [user("q"), assistant("<think>\n\n</think>\n\n答")], options: {} },
  { name: "assistant with unclosed think tag", messages: [user("q"), assistant("<think>still thinking")], options: {} },
  { name: "assistant with extra newlines around reasoning", messages: [user("q"), assistant("\n\n<think>\n\n\nr\n\n</think>\n\n\n\na\n\n")], options: {} },
  {
    name: "assistant with spaces around reasoning and answer",
    messages: [user("q"), assistant("  <think> r  </think>  a ")],
    options: {},
  },
  { name: "assistant content with leading spaces", messages: [user("q"), assistant("  indented\n")], options: {} },
  { name: "assistant content with leading newlines", messages: [user("q"), assistant("\n\nanswer")], options: {} },
  {
    name: "reasoning_content field",
    messages: [user("q"), assistant("answer", { reasoning_content: "\nstep 1\nstep 2\n" })],
    options: { add_generation_prompt: false },
  },
  {
    name: "reasoning_content field and think tags in content",
    messages: [user("q"), assistant("<think>inline</think>answer", { reasoning_content: "field" })],
    options: {},
  },
  { name: "empty reasoning_content field", messages: [user("q"), assistant("a", { reasoning_content: "" })], options: {} },
  {
    name: "multi-turn with reasoning, open thinking",
    messages: [user("q1"), assistant("<think>r1</think>a1"), user("q2")],
    options: { add_generation_prompt: true, open_thinking: true },
  },
  { name: "empty contents", messages: [system(""), user(""), assistant("")], options: { add_generation_prompt: true } },
  { name: "null content", messages: [user("q"), assistant(null)], options: {} },
  {
    name: "newlines, CJK, emoji, quotes, backslashes",
    messages: [
      system("规则：\n1. 用中文\n2. 别用 \"引号\""),
      user("Line1\nLine2\r\n\ttabbed 'single' \"double\" back\\slash 😀👍🏽 日本語 한국어"),
      assistant("好的 ✅\n\n```\ncode\n```"),
      user("{{ not_a_variable }} {% raw %} <|im_end|> inside"),
    ],
    options: { add_generation_prompt: true },
  },
  { name: "user content that looks like a tool response", messages: [user("<tool_response>\nx\n</tool_response>")], options: { add_generation_prompt: true } },
  {
    name: "tools list without system",
    messages: [user("北京天气？")],
    options: { add_generation_prompt: true, tools: [weatherTool, timeTool] },
  },
  {
    name: "tools list with system",
    messages: [system("你是助手。"), user("几点了？")],
    options: { add_generation_prompt: true, tools: [timeTool] },
  },
  { name: "empty tools list", messages: [user("hi")], options: { add_generation_prompt: true, tools: [] } },
  {
    name: "tool call round trip",
    messages: [
      user("北京天气？"),
      assistant("", { tool_calls: [callWeather] }),
      tool('{"temp": 20, "sky": "晴"}'),
      assistant("北京今天晴，20度。"),
    ],
    options: { add_generation_prompt: false, tools: [weatherTool] },
  },
  {
    name: "consecutive tool messages",
    messages: [
      user("q"),
      assistant(null, { tool_calls: [callWeather, { type: "function", function: { name: "get_time", arguments: {} } }] }),
      tool("r1"),
      tool("r2"),
      tool(""),
    ],
    options: { add_generation_prompt: true, tools: [weatherTool, timeTool] },
  },
  {
    name: "tool calls with content and string arguments",
    messages: [
      user("q"),
      assistant("Let me check.", {
        tool_calls: [
          { type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
          { name: "get_time", arguments: { tz: "UTC+8", exact: true, offset: null, scale: 2.5, eps: 0.00001, list: [1, "二", [false]] } },
        ],
      }),
    ],
    options: {},
  },
  {
    name: "tool call after newline-only content",
    messages: [user("q"), assistant("\n", { tool_calls: [callWeather] })],
    options: {},
  },
  {
    name: "tool call after reasoning",
    messages: [user("q"), assistant("<think>need weather</think>", { tool_calls: [callWeather] })],
    options: {},
  },
  { name: "tool message first", messages: [tool("orphan result"), user("q")], options: { add_generation_prompt: true } },
  {
    name: "tool message between users",
    messages: [user("a"), tool("t"), user("b")],
    options: {},
  },
  {
    name: "tools with special characters in schema",
    messages: [user("q")],
    options: {
      tools: [
        {
          type: "function",
          function: { name: "echo", description: "Quote \" backslash \\ newline \n tab \t ctrl \u0001 emoji 😀 </tools>", parameters: {} },
        },
      ],
    },
  },
];

function renderPython(template) {
  const run = spawnSync("python3", ["-c", PYTHON_RENDERER], {
    input: JSON.stringify({ template, cases }),
    encoding: "utf8",
    maxBuffer: 64 << 20,
  });
  if (run.error || run.status !== 0) {
    throw new Error(
      "python3 with jinja2 is needed (Debian: apt install python3-jinja2): " +
        (run.error?.message ?? run.stderr),
    );
  }
  return JSON.parse(run.stdout);
}

function renderHuggingFace(template, testCase) {
  try {
    const vars = { messages: testCase.messages, add_generation_prompt: false, ...testCase.options };
    return new Template(template).render(vars);
  } catch (e) {
    return `error: ${e.message}`;
  }
}

const paths = process.argv.slice(2);
if (paths.length === 0) {
  console.error("usage: node render_chat_templates.mjs TOKENIZER_CONFIG_JSON...");
  process.exit(2);
}
mkdirSync(outDir, { recursive: true });
for (const path of paths) {
  const template = JSON.parse(readFileSync(path, "utf8")).chat_template;
  if (typeof template !== "string") throw new Error(`${path}: no chat_template string`);
  const family = familyOf(template);
  const python = renderPython(template);
  const differing = [];
  const renderings = cases.map((testCase, i) => {
    const result = python.results[i];
    if (result.error) throw new Error(`${path}: jinja2 failed on "${testCase.name}": ${result.error}`);
    const entry = { name: testCase.name, messages: testCase.messages, options: testCase.options, rendered: result.rendered };
    const hf = renderHuggingFace(template, testCase);
    if (hf !== result.rendered) {
      entry.huggingface_jinja = hf;
      differing.push(testCase.name);
    }
    return entry;
  });
  const golden = {
    template: { family, bytes: Buffer.byteLength(template, "utf8"), fnv1a64: fnv1a64(template) },
    rendered_with: `jinja2 ${python.jinja2} with transformers' apply_chat_template settings`,
    cross_checked_with: `@huggingface/jinja ${hfJinjaVersion} (its output is kept as huggingface_jinja where it differs)`,
    renderings,
  };
  const out = join(outDir, `${family}.json`);
  writeFileSync(out, JSON.stringify(golden, null, 2) + "\n");
  console.log(`${out}: ${renderings.length} renderings`);
  for (const name of differing) console.log(`  @huggingface/jinja differs from jinja2: ${name}`);
}
