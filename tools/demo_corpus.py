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

Usage: demo_corpus.py OUT.txt [--seed N] [--repeat K]
"""
import argparse
import collections
import random
import sys

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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--repeat", type=int, default=8, help="copies per unit of weight")
    args = ap.parse_args(argv)
    lines = make_corpus(args.seed, args.repeat)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    n_distinct = len(set(lines))
    print(f"demo_corpus: {len(lines)} lines ({n_distinct} distinct), {sum(len(l) for l in lines)} chars -> {args.out}")
    check(lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
