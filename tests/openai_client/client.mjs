// The official openai npm client against a running minimind-server: lists the models, completes a
// chat, streams the same chat, runs a tool round trip and a json_schema reply, and reads the
// server's errors as the client's typed exceptions.
// Usage: node client.mjs http://127.0.0.1:PORT/v1 [API_KEY]  (the server's --api-key, when it has one)
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = process.argv[2];
if (!baseURL) {
  console.error('usage: node client.mjs BASE_URL (e.g. http://127.0.0.1:8080/v1)');
  process.exit(2);
}
// Without API_KEY the server wants no key, but the client insists on one. No retries: a failure must show.
const apiKey = process.argv[3];
const client = new OpenAI({ baseURL, apiKey: apiKey ?? 'unused', maxRetries: 0, timeout: 60_000 });

let passed = 0;
let failed = 0;
async function check(name, body) {
  try {
    await body();
    passed++;
    console.log(`ok: ${name}`);
  } catch (error) {
    failed++;
    console.log(`FAILED: ${name}: ${error?.stack ?? error}`);
  }
}

function checkUsage(usage) {
  assert.ok(Number.isInteger(usage.prompt_tokens) && usage.prompt_tokens > 0, 'prompt_tokens');
  assert.ok(Number.isInteger(usage.completion_tokens) && usage.completion_tokens > 0, 'completion_tokens');
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
}

let model = '';
await check('models.list names the loaded model', async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.equal(ids.length, 1);
  model = ids[0];
  assert.ok(model.length > 0);
  assert.equal((await client.models.retrieve(model)).id, model);
});

// Greedy with ignore_eos so the reply has a known length and the stream must equal it.
const request = {
  model,
  messages: [{ role: 'user', content: '小明家养了一只猫' }],
  temperature: 0,
  max_tokens: 16,
  ignore_eos: true,
};

let whole = null;
await check('chat.completions.create returns a chat.completion with usage', async () => {
  whole = await client.chat.completions.create({ ...request, model });
  assert.equal(whole.object, 'chat.completion');
  assert.equal(whole.model, model);
  assert.equal(whole.choices.length, 1);
  assert.equal(whole.choices[0].message.role, 'assistant');
  assert.equal(typeof whole.choices[0].message.content, 'string');
  assert.ok(whole.choices[0].message.content.length > 0);
  assert.equal(whole.choices[0].finish_reason, 'length');
  checkUsage(whole.usage);
  assert.equal(whole.usage.completion_tokens, 16);
});

await check('a streamed chat gives the same text in chunks, then usage', async () => {
  const stream = await client.chat.completions.create({ ...request, model, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    if (chunk.choices.length === 0) continue;
    text += chunk.choices[0].delta.content ?? '';
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  assert.ok(chunks > 2, `only ${chunks} chunks`);
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(finish, 'length');
  // The same prompt again: the prompt cache holds all of it but the last position, whose logits
  // are computed anew.
  const cached = whole.usage.prompt_tokens - 1;
  assert.deepEqual(usage, { ...whole.usage, prompt_tokens_details: { cached_tokens: cached } });
});

await check('completions.create continues a raw prompt', async () => {
  const reply = await client.completions.create({ model, prompt: '这块石头', temperature: 0, max_tokens: 8 });
  assert.equal(reply.object, 'text_completion');
  assert.equal(typeof reply.choices[0].text, 'string');
  checkUsage(reply.usage);
});

await check('a bad parameter is a BadRequestError naming it', async () => {
  await assert.rejects(client.chat.completions.create({ ...request, model, temperature: -1 }), (error) => {
    assert.ok(error instanceof OpenAI.BadRequestError, `got ${error?.constructor?.name}`);
    assert.equal(error.status, 400);
    assert.equal(error.param, 'temperature');
    assert.equal(error.type, 'invalid_request_error');
    return true;
  });
});

await check('an unknown model is a NotFoundError', async () => {
  await assert.rejects(client.models.retrieve('no-such-model'), (error) => {
    assert.ok(error instanceof OpenAI.NotFoundError, `got ${error?.constructor?.name}`);
    assert.equal(error.code, 'model_not_found');
    return true;
  });
});

// Tools as the client sends them. The demo model writes no <tool_call> of its own, so with
// tool_choice "auto" the reply is text; what is checked is that every field the client sends is
// taken, and that a conversation holding a call and its result (the second half of a round trip)
// is answered.
const tools = [{
  type: 'function',
  function: {
    name: 'get_weather',
    description: '查询城市天气',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
}];

await check('tools with tool_choice auto and parallel_tool_calls are taken; the reply is a message', async () => {
  const reply = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: '北京天气怎么样？' }], tools, tool_choice: 'auto', parallel_tool_calls: false,
    temperature: 0, max_tokens: 16,
  });
  assert.equal(reply.choices[0].message.role, 'assistant');
  assert.equal(typeof reply.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(reply.choices[0].finish_reason));
});

await check('a call and its tool result in the history are answered, streamed and not', async () => {
  const messages = [
    { role: 'user', content: '北京天气怎么样？' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "北京"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"sky": "晴", "temp": 20}' },
  ];
  // Without the tools list, which alone fills most of the demo model's 512 positions.
  const reply = await client.chat.completions.create({ model, messages, temperature: 0, max_tokens: 16 });
  assert.equal(typeof reply.choices[0].message.content, 'string');
  const stream = await client.chat.completions.create({ model, messages, temperature: 0, max_tokens: 16, stream: true });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
  assert.equal(text, reply.choices[0].message.content);
});

await check('a tool result answering no call is a BadRequestError naming tool_call_id', async () => {
  await assert.rejects(client.chat.completions.create({
    model, tools, messages: [{ role: 'user', content: 'q' }, { role: 'tool', tool_call_id: 'call_9', content: 'r' }],
  }), (error) => {
    assert.ok(error instanceof OpenAI.BadRequestError, `got ${error?.constructor?.name}`);
    assert.equal(error.param, 'messages[1].tool_call_id');
    return true;
  });
});

await check('a field the server does not honour is a BadRequestError naming it, not ignored', async () => {
  await assert.rejects(client.chat.completions.create({ ...request, model, presence_penalty: 0.5 }), (error) => {
    assert.ok(error instanceof OpenAI.BadRequestError, `got ${error?.constructor?.name}`);
    assert.equal(error.param, 'presence_penalty');
    return true;
  });
});

// The whole tool round trip with a forced call, which constrained decoding makes well formed
// whatever the model: tools + a named tool_choice -> a call whose arguments validate -> the
// call and a `tool` message sent back -> a reply. Streamed and not.
function checkArguments(text) {
  const args = JSON.parse(text);
  assert.ok(typeof args === 'object' && args !== null && !Array.isArray(args), text);
  assert.deepEqual(Object.keys(args), ['c'], text);
  assert.equal(typeof args.c, 'string', text);
}
// One-letter names: the tools block alone takes most of the demo model's 512 positions.
const forcedTools = [{
  type: 'function',
  function: { name: 'w', strict: true, parameters: { type: 'object', properties: { c: { type: 'string' } }, required: ['c'] } },
}];
for (const stream of [false, true]) {
  await check(`a tool round trip with a named tool_choice${stream ? ', streamed' : ''}`, async () => {
    const question = { role: 'user', content: '北京天气？' };
    const ask = { model, messages: [question], tools: forcedTools, tool_choice: { type: 'function', function: { name: 'w' } },
      temperature: 0, max_tokens: 24 };
    let call;
    let finish;
    if (!stream) {
      const reply = await client.chat.completions.create(ask);
      finish = reply.choices[0].finish_reason;
      assert.equal(reply.choices[0].message.tool_calls.length, 1);
      call = reply.choices[0].message.tool_calls[0];
    } else {
      const calls = [];
      for await (const chunk of await client.chat.completions.create({ ...ask, stream: true })) {
        const choice = chunk.choices[0];
        if (!choice) continue;
        for (const piece of choice.delta.tool_calls ?? []) {
          if (!calls[piece.index]) calls[piece.index] = { id: piece.id, type: piece.type, function: { name: piece.function.name, arguments: '' } };
          calls[piece.index].function.arguments += piece.function.arguments ?? '';
        }
        if (choice.finish_reason) finish = choice.finish_reason;
      }
      assert.equal(calls.length, 1);
      call = calls[0];
    }
    assert.equal(finish, 'tool_calls');
    assert.equal(call.type, 'function');
    assert.equal(call.function.name, 'w');
    checkArguments(call.function.arguments);
    const answer = await client.chat.completions.create({
      model, temperature: 0, max_tokens: 16, stream: false,
      messages: [question, { role: 'assistant', content: null, tool_calls: [call] }, { role: 'tool', tool_call_id: call.id, content: '{"sky": "晴"}' }],
    });
    assert.equal(typeof answer.choices[0].message.content, 'string');
  });
}

await check('response_format json_schema: the content parses and follows the schema', async () => {
  const reply = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: '小明家养了一只猫' }], temperature: 0, max_tokens: 60,
    response_format: { type: 'json_schema', json_schema: { name: 'pet', strict: true, schema: {
      type: 'object', properties: { animal: { type: 'string', enum: ['猫', '狗'] }, age: { type: 'integer' }, names: { type: 'array', items: { type: 'string' }, maxItems: 2 } },
      required: ['animal', 'age'] } } },
  });
  const pet = JSON.parse(reply.choices[0].message.content);
  assert.ok(['猫', '狗'].includes(pet.animal));
  assert.ok(Number.isInteger(pet.age));
  if ('names' in pet) assert.ok(Array.isArray(pet.names) && pet.names.length <= 2 && pet.names.every((n) => typeof n === 'string'));
  assert.deepEqual(Object.keys(pet).filter((k) => !['animal', 'age', 'names'].includes(k)), []);
  assert.equal(reply.choices[0].finish_reason, 'stop');
});

if (apiKey) {
  await check('a wrong key is an AuthenticationError with code invalid_api_key', async () => {
    const wrong = new OpenAI({ baseURL, apiKey: apiKey + 'x', maxRetries: 0, timeout: 60_000 });
    const error = await wrong.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }).then(() => null, (e) => e);
    assert.ok(error instanceof OpenAI.AuthenticationError, `got ${error?.constructor?.name}`);
    assert.equal(error.status, 401);
    assert.equal(error.code, 'invalid_api_key');
  });
}

console.log(`openai client: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
