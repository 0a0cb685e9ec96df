#!/usr/bin/python3
"""Generates the training text of the embedded demo model: a small, regular, bilingual
(Chinese + English) corpus of templated sentences, one document per line, deterministic
(fixed seed, no input files).

The corpus is a weighted list of sentences. Each "fact" (a prompt such as 今天天气 and its
continuations) has one dominant sentence and a few rarer variants, so that the model learns
a clear most-likely continuation (greedy decoding reproduces the dominant sentence) while the
distribution after the prompt is not a single spike. Around the facts there is filler made
from templates (who likes which food, who does what where) with a seeded random choice of
slot values, for variety.

Chat samples (--chat OUT.jsonl): conversations rendered with the demo's chat template
(minimind-3's, tools/train_bpe.py CHAT_TEMPLATE, by jinja2 with the template's tojson), one JSON
string per line, so that minimind-chat and the web page show thinking and tool calls: questions
about the facts answered with and without a think block, and questions for two made-up tools,
get_weather(city) and add(a, b) (DEMO_TOOLS, the web page's default tools), answered with a
<tool_call>, a tool message and an answer that repeats the tool's result.

Usage: demo_corpus.py OUT.txt [--chat OUT.jsonl] [--seed N] [--repeat K]
"""
import argparse
import collections
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_bpe import CHAT_TEMPLATE  # noqa: E402

# (sentence, weight). The first sentence of each group is the one greedy decoding must give.
FACTS = [
    # 今天天气 -> 很 (42 of 48), then 好
    ("今天天气很好，我们去公园散步。", 30),
    ("今天天气很冷，记得多穿衣服。", 6),
    ("今天天气很热，我们去游泳吧。", 6),
    ("今天天气不错，适合出去玩。", 4),
    ("今天天气晴朗。", 2),
    ("明天天气很冷，可能会下雪。", 5),
    ("昨天天气很热。", 4),
    ("明天会下雨，记得带伞。", 4),
    # 小明家养了一只 -> 猫
    ("小明家养了一只猫，它喜欢吃鱼。", 24),
    ("小明家养了一只狗。", 3),
    ("小红家养了一只狗，它每天都很开心。", 10),
    ("小刚家养了一只兔子，它喜欢吃胡萝卜。", 8),
    ("小丽家养了一只小鸟，它会唱歌。", 6),
    ("小明喜欢和猫一起玩。", 4),
    # 这块石头 -> 很硬
    ("这块石头很硬。", 24),
    ("这块石头很重，我搬不动。", 4),
    ("这块石头很大。", 3),
    ("这块蛋糕很甜。", 8),
    ("这块木头很轻。", 6),
    ("这块布很软。", 5),
    # other Chinese
    ("猫喜欢吃鱼，狗喜欢吃肉。", 6),
    ("妈妈在厨房做饭。", 6),
    ("爸爸在客厅看书。", 5),
    ("我们一起学习中文。", 5),
    ("春天来了，花都开了。", 5),
    ("太阳从东方升起。", 5),
    ("他每天早上跑步。", 4),
    ("你好，很高兴认识你。", 6),
    ("谢谢你的帮助。", 4),
    # English: The cat -> eats fish.
    ("The cat eats fish.", 24),
    ("The cat sleeps on the bed.", 4),
    ("The dog eats meat.", 10),
    ("The dog runs in the park.", 3),
    ("The bird eats seeds.", 6),
    ("The cow eats grass.", 6),
    ("The rabbit eats carrots.", 5),
    ("The weather is very good today.", 10),
    ("The weather is cold.", 3),
    ("This stone is very hard.", 8),
    ("Tom has a small dog.", 6),
    ("Mary has a white cat.", 6),
    ("I like to read books.", 6),
    ("We go to school every day.", 5),
    ("The sun rises in the east.", 5),
    ("Hello, how are you?", 5),
    ("I am fine, thank you.", 5),
]

# Filler templates: slot values drawn with the seeded RNG. Their prompts (我喜欢吃 / Tom likes
# ...) are not golden prompts; they only add variety of characters and words.
ZH_PEOPLE = ["我", "你", "他", "她", "我们", "妈妈", "爸爸", "老师", "小明", "小红"]
ZH_FOODS = ["苹果", "香蕉", "米饭", "面条", "西瓜", "饺子", "鸡蛋", "牛奶"]
ZH_PLACES = ["学校", "公园", "商店", "图书馆", "医院", "北京", "上海"]
ZH_ACTS = ["去{p}。", "在{p}等你。", "明天去{p}。"]
EN_PEOPLE = ["Tom", "Mary", "John", "Lucy", "My friend", "The teacher"]
EN_FOODS = ["apples", "bread", "rice", "noodles", "milk", "oranges", "cake"]
EN_PLACES = ["school", "the park", "the shop", "the library", "home"]


def filler(rng, n):
    out = []
    for _ in range(n):
        k = rng.randrange(4)
        if k == 0:
            out.append(f"{rng.choice(ZH_PEOPLE)}喜欢吃{rng.choice(ZH_FOODS)}。")
        elif k == 1:
            out.append(rng.choice(ZH_PEOPLE) + rng.choice(ZH_ACTS).format(p=rng.choice(ZH_PLACES)))
        elif k == 2:
            out.append(f"{rng.choice(EN_PEOPLE)} likes {rng.choice(EN_FOODS)}.")
        else:
            out.append(f"{rng.choice(EN_PEOPLE)} goes to {rng.choice(EN_PLACES)}.")
    return out


def make_corpus(seed=1234, repeat=8, filler_share=0.25):
    rng = random.Random(seed)
    lines = []
    for s, w in FACTS:
        lines += [s] * (w * repeat)
    lines += filler(rng, int(len(lines) * filler_share))
    rng.shuffle(lines)
    return lines


def continuations(lines, prefix):
    """How often each next character follows `prefix` (at the start of a line)."""
    c = collections.Counter(l[len(prefix)] for l in lines if l.startswith(prefix) and len(l) > len(prefix))
    return c.most_common()


# prompt -> the character (or English word) that must be its clear most frequent continuation
CHECKS = [("今天天气", "很"), ("今天天气很", "好"), ("小明家养了一只", "猫"), ("这块石头", "很"),
          ("这块石头很", "硬")]


def check(lines):
    for prefix, want in CHECKS:
        cont = continuations(lines, prefix)
        total = sum(n for _, n in cont)
        top, n = cont[0]
        second = cont[1][1] if len(cont) > 1 else 0
        print(f"  after {prefix!r}: " + ", ".join(f"{c}:{k}" for c, k in cont) + f" (top share {n / total:.2f})")
        assert top == want and n >= 2 * second, (prefix, cont)
    eng = collections.Counter(l.split()[2] for l in lines if l.startswith("The cat "))
    print(f"  after 'The cat': {dict(eng)}")
    assert eng.most_common(1)[0][0] == "eats"


# The made-up tools of the chat samples, in the order and key order the web page offers them
# (examples/web/index.html): the template renders each with tojson, so the prompt the page's
# default tools make is the one the model was trained on.
DEMO_TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "查询城市的天气",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "两数相加",
        "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                       "required": ["a", "b"]}}},
]

# (question, reasoning, answer): answered after a think block holding the reasoning (2 of 3
# samples) or an empty one. The reasoning always opens with 用户 / The user, so after an open
# "<think>\n" (--think, open_thinking) the model starts reasoning rather than closing the block.
CHAT_QA = [
    ("今天天气怎么样？", "用户问今天的天气。今天天气很好，适合去公园。", "今天天气很好，我们去公园散步。"),
    ("小明家养了什么？", "用户问小明家的宠物。小明家养了一只猫。", "小明家养了一只猫，它喜欢吃鱼。"),
    ("这块石头怎么样？", "用户问这块石头。这块石头很硬。", "这块石头很硬。"),
    ("你好", "用户在打招呼，我也打招呼。", "你好，很高兴认识你。"),
    ("你是谁？", "用户问我是谁。我是一个很小的演示模型。", "我是一个很小的演示模型。"),
    ("What does the cat eat?", "The user asks about the cat. The cat eats fish.", "The cat eats fish."),
    ("Hello", "The user says hello. I say hello too.", "Hello, how are you?"),
    ("How is the weather today?", "The user asks about the weather. It is good today.", "The weather is very good today."),
]

CITIES = [("北京", "Beijing"), ("上海", "Shanghai"), ("广州", "Guangzhou"), ("杭州", "Hangzhou"), ("南京", "Nanjing")]
WEATHER = [("晴", "sunny"), ("多云", "cloudy"), ("小雨", "rainy"), ("阴", "overcast")]


_compiled_template = None


def render_chat(messages, tools=None):
    global _compiled_template
    if _compiled_template is None:
        import jinja2  # python3-jinja2: the template rendered by the engine Hugging Face uses

        env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
        # Hugging Face's tojson: json.dumps with non-ASCII kept and keys in their given order.
        env.filters["tojson"] = lambda x: json.dumps(x, ensure_ascii=False)
        _compiled_template = env.from_string(CHAT_TEMPLATE)
    return _compiled_template.render(messages=messages, tools=tools, add_generation_prompt=False)


def assistant(answer, reasoning=""):
    return {"role": "assistant", "content": answer, "reasoning_content": reasoning}


def tool_round(question, name, arguments, result, answer, reasoning=""):
    call = {"id": "call_0", "type": "function", "function": {"name": name, "arguments": arguments}}
    return [{"role": "user", "content": question},
            {"role": "assistant", "content": "", "reasoning_content": reasoning, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_0", "content": json.dumps(result, ensure_ascii=False)},
            assistant(answer)]


def weather_round(rng):
    (zh, en), (w_zh, w_en) = rng.choice(CITIES), rng.choice(WEATHER)
    t = rng.randrange(5, 36)
    if rng.random() < 0.7:
        q = rng.choice(["{c}的天气怎么样？", "{c}今天天气如何？", "查一下{c}的天气。"]).format(c=zh)
        return tool_round(q, "get_weather", {"city": zh}, {"city": zh, "weather": w_zh, "temperature": t},
                          f"{zh}今天{w_zh}，{t}度。", f"用户想知道{zh}的天气，我调用 get_weather。" if rng.random() < 0.5 else "")
    q = rng.choice(["What is the weather in {c}?", "How is the weather in {c}?"]).format(c=en)
    return tool_round(q, "get_weather", {"city": en}, {"city": en, "weather": w_en, "temperature": t},
                      f"It is {w_en} in {en}, {t} degrees.",
                      f"The user wants the weather in {en}. I call get_weather." if rng.random() < 0.5 else "")


def add_round(rng):
    a, b = rng.randrange(1, 20), rng.randrange(1, 20)
    if rng.random() < 0.6:
        return tool_round(rng.choice(["{a}加{b}等于几？", "算一下{a}加{b}。"]).format(a=a, b=b), "add", {"a": a, "b": b},
                          {"result": a + b}, f"{a}加{b}等于{a + b}。",
                          f"用户要算{a}加{b}，我调用 add。" if rng.random() < 0.5 else "")
    return tool_round(f"What is {a} plus {b}?", "add", {"a": a, "b": b}, {"result": a + b}, f"{a} plus {b} is {a + b}.",
                      f"The user wants {a} plus {b}. I call add." if rng.random() < 0.5 else "")


def make_chat(seed=1234, n_qa=900, n_tools=1500):
    """Rendered conversations: the facts' questions (with and without tools offered, thinking 2
    of 3 times), and tool rounds."""
    rng = random.Random(seed + 1)
    docs = []
    for _ in range(n_qa):
        q, r, a = rng.choice(CHAT_QA)
        tools = DEMO_TOOLS if rng.random() < 0.3 else None
        docs.append(render_chat([{"role": "user", "content": q}, assistant(a, r if rng.random() < 2 / 3 else "")], tools))
    for _ in range(n_tools):
        docs.append(render_chat((weather_round if rng.random() < 0.5 else add_round)(rng), DEMO_TOOLS))
    return docs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--chat", help="also write the chat samples here (JSON lines)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--repeat", type=int, default=8, help="copies per unit of weight")
    args = ap.parse_args(argv)
    lines = make_corpus(args.seed, args.repeat)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    n_distinct = len(set(lines))
    print(f"demo_corpus: {len(lines)} lines ({n_distinct} distinct), {sum(len(l) for l in lines)} chars -> {args.out}")
    check(lines)
    if args.chat:
        docs = make_chat(args.seed)
        with open(args.chat, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(d, ensure_ascii=False) + "\n" for d in docs)
        print(f"demo_corpus: {len(docs)} chat samples ({len(set(docs))} distinct), "
              f"{sum(len(d) for d in docs)} chars -> {args.chat}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
