#!/usr/bin/env python3
"""Chat with a MiniMind checkpoint through the minimind module: upstream's eval_llm.py
(jingyaogong/minimind) without PyTorch. [0] asks its eight fixed prompts, [1] reads prompts from
stdin; each reply streams as it is generated, then its speed is printed. As upstream: a fresh
random seed per prompt, --historys earlier turns kept as context, and with a pretrained (not
chat-tuned) checkpoint (--weight pretrain) the prompt is the bos token and the bare text.

  PYTHONPATH=build/python python3 python/examples/eval_llm.py --load_from path/to/MiniMind2-Small
"""
import argparse
import pathlib
import random
import time

import minimind

PROMPTS = [
    '你有什么特长？',
    '为什么天空是蓝色的',
    '请用Python写一个计算斐波那契数列的函数',
    '解释一下"光合作用"的基本过程',
    '如果明天下雨，我应该如何出门',
    '比较一下猫和狗作为宠物的优缺点',
    '解释什么是机器学习',
    '推荐一些中国的美食',
]


def main():
    demo = pathlib.Path(__file__).resolve().parents[2] / "examples" / "models" / "demo"
    parser = argparse.ArgumentParser(description="MiniMind模型推理与对话 (minimind.cpp)")
    parser.add_argument("--load_from", default=str(demo),
                        help="checkpoint: a directory (config.json, model.safetensors, tokenizer.json) or a .safetensors/.pth/.gguf file")
    parser.add_argument("--weight", default="full_sft", help="as upstream: a name containing 'pretrain' means no chat template")
    parser.add_argument("--dtype", default="f32", help="weights held as f32, bf16 or q8")
    parser.add_argument("--threads", default=0, type=int, help="threads per forward pass (0 = one per core)")
    parser.add_argument("--max_new_tokens", default=8192, type=int)
    parser.add_argument("--temperature", default=0.85, type=float)
    parser.add_argument("--top_p", default=0.95, type=float)
    parser.add_argument("--open_thinking", default=0, type=int, help="minimind-3: leave the think block open (1)")
    parser.add_argument("--historys", default=0, type=int, help="earlier turns kept as context (even; 0 = none)")
    parser.add_argument("--show_speed", default=1, type=int)
    parser.add_argument("--mode", type=int, choices=[0, 1], help="0: the fixed prompts, 1: type prompts (asked when not given)")
    args = parser.parse_args()

    model = minimind.load(args.load_from, dtype=args.dtype, threads=args.threads)
    print(f"{model.config['architecture']}: {model.num_parameters / 1e6:.3f} M parameters, held as {model.dtype}, {model.threads} thread(s)")
    mode = args.mode if args.mode is not None else int(input("[0] 自动测试\n[1] 手动输入\n"))
    prompts = PROMPTS if mode == 0 else iter(lambda: input("💬: "), "")

    conversation = []
    for prompt in prompts:
        if mode == 0:
            print(f"💬: {prompt}")
        conversation = conversation[-args.historys:] if args.historys else []
        conversation.append({"role": "user", "content": prompt})
        # top_k 50: transformers' generate applies its default top_k=50 to upstream's call too.
        sampling = dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
                        top_k=50, repetition_penalty=1.0, seed=random.randint(0, 31415926), stream=True)
        print("🧠: ", end="", flush=True)
        start = time.time()
        if "pretrain" in args.weight:
            bos = model.tokenizer.bos_id
            pieces = model.generate(([bos] if bos is not None else []) + model.tokenizer.encode(prompt), **sampling)
        else:
            pieces = model.chat(conversation, open_thinking=bool(args.open_thinking), **sampling)
        response = ""
        for piece in pieces:
            print(piece, end="", flush=True)
            response += piece
        conversation.append({"role": "assistant", "content": response})
        generated = pieces.stats["generated_tokens"]
        print(f"\n[Speed]: {generated / (time.time() - start):.2f} tokens/s\n\n" if args.show_speed else "\n\n")


if __name__ == "__main__":
    main()
