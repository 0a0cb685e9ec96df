#!/usr/bin/python3
"""Byte-level BPE for the embedded demo model: a trainer, an encoder/decoder with Hugging Face
`tokenizers` semantics, and writers for tokenizer.json / tokenizer_config.json in the layout of
the real MiniMind2 tokenizer (../shared/minimind/minimind2/).

Standard library only (no `regex`, no `tokenizers`): the GPT-2 pre-tokenizer pattern

    's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+

is implemented as a hand-written scanner with Oniguruma's classes (what HF uses): `\\s` is the
Unicode White_Space set (so U+0085 is whitespace, U+FEFF is not), `\\p{L}` / `\\p{N}` are the
general categories L* / N* from `unicodedata`.

Usage:
    train_bpe.py train CORPUS OUTDIR [--vocab-size N]   # writes OUTDIR/tokenizer.json, tokenizer_config.json
    train_bpe.py encode TOKENIZER_JSON TEXT             # prints the ids
    train_bpe.py check-golden TOKENIZER_JSON JSONL      # compares with ../shared/golden/tokenizer/*.jsonl

As a module: `Tokenizer.from_file(path).encode(text)` / `.decode(ids)`.
"""
import argparse
import json
import os
import sys
import unicodedata

ADDED_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2 (as MiniMind2)

# tokenizer_config.json's chat_template: minimind-3's, byte for byte
# (../shared/minimind/minimind-3/tokenizer_config.json). It renders tools, tool calls, tool responses
# and a think block in every assistant turn, which the demo's chat samples are written in.
CHAT_TEMPLATE = (
    '{%- if tools %}\n    {{- \'<|im_start|>system\\n\' }}\n    {%- if messages[0].role == \'system\' %}\n        {{- messages[0].content + \'\\n\\n\' }}\n    {%- endif %}\n    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}\n    {%- for tool in tools %}\n        {{- "\\n" }}\n        {{- tool | tojson }}\n    {%- endfor %}\n    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}\n{%- else %}\n    {%- if messages[0].role == \'system\' %}\n        {{- \'<|im_start|>system\\n\' + messages[0].content + \'<|im_end|>\\n\' }}\n    {%- endif %}\n{%- endif %}\n{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}\n{%- for message in messages[::-1] %}\n    {%- set index = (messages|length - 1) - loop.index0 %}\n    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith(\'<tool_response>\') and message.content.endswith(\'</tool_response>\')) %}\n        {%- set ns.multi_step_tool = false %}\n        {%- set ns.last_query_index = index %}\n    {%- endif %}\n{%- endfor %}\n{%- for message in messages %}\n    {%- if message.content is string %}\n        {%- set content = message.content %}\n    {%- else %}\n        {%- set content = \'\' %}\n    {%- endif %}\n    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}\n        {{- \'<|im_start|>\' + message.role + \'\\n\' + content + \'<|im_end|>\' + \'\\n\' }}\n    {%- elif message.role == "assistant" %}\n        {%- set reasoning_content = \'\' %}\n        {%- if message.reasoning_content is string %}\n            {%- set reasoning_content = message.reasoning_content %}\n        {%- else %}\n            {%- if \'</think>\' in content %}\n                {%- set reasoning_content = content.split(\'</think>\')[0].rstrip(\'\\n\').split(\'<think>\')[-1].lstrip(\'\\n\') %}\n                {%- set content = content.split(\'</think>\')[-1].lstrip(\'\\n\') %}\n            {%- endif %}\n        {%- endif %}\n        {%- if true %}\n            {{- \'<|im_start|>\' + message.role + \'\\n<think>\\n\' + reasoning_content.strip(\'\\n\') + \'\\n</think>\\n\\n\' + content.lstrip(\'\\n\') }}\n        {%- endif %}\n        {%- if message.tool_calls %}\n            {%- for tool_call in message.tool_calls %}\n                {%- if (loop.first and content) or (not loop.first) %}\n                    {{- \'\\n\' }}\n                {%- endif %}\n                {%- if tool_call.function %}\n                    {%- set tool_call = tool_call.function %}\n                {%- endif %}\n                {{- \'<tool_call>\\n{"name": "\' }}\n                {{- tool_call.name }}\n                {{- \'", "arguments": \' }}\n                {%- if tool_call.arguments is string %}\n                    {{- tool_call.arguments }}\n                {%- else %}\n                    {{- tool_call.arguments | tojson }}\n                {%- endif %}\n                {{- \'}\\n</tool_call>\' }}\n            {%- endfor %}\n        {%- endif %}\n        {{- \'<|im_end|>\\n\' }}\n    {%- elif message.role == "tool" %}\n        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}\n            {{- \'<|im_start|>user\' }}\n        {%- endif %}\n        {{- \'\\n<tool_response>\\n\' }}\n        {{- content }}\n        {{- \'\\n</tool_response>\' }}\n        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}\n            {{- \'<|im_end|>\\n\' }}\n        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- \'<|im_start|>assistant\\n\' }}\n    {%- if open_thinking is defined and open_thinking is true %}\n        {{- \'<think>\\n\' }}\n    {%- else %}\n        {{- \'<think>\\n\\n</think>\\n\\n\' }}\n    {%- endif %}\n{%- endif %}'
)


# ---------------------------------------------------------------------------------------------
# GPT-2 byte <-> unicode map
# ---------------------------------------------------------------------------------------------
def bytes_to_unicode():
    """GPT-2's reversible map from the 256 byte values to printable unicode characters."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_TO_CHAR = bytes_to_unicode()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


def to_byte_chars(s):
    return "".join(BYTE_TO_CHAR[b] for b in s.encode("utf-8"))


def from_byte_chars(s):
    return bytes(CHAR_TO_BYTE[c] for c in s)


# ---------------------------------------------------------------------------------------------
# GPT-2 pre-tokenizer (scanner equivalent to the regex above, Oniguruma classes)
# ---------------------------------------------------------------------------------------------
_WHITE_SPACE = set([0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, 0x2028, 0x2029,
                    0x202F, 0x205F, 0x3000] + list(range(0x2000, 0x200B)))
_CONTRACTIONS = ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d")


def _is_space(c):
    return ord(c) in _WHITE_SPACE


def _is_letter(c):
    return unicodedata.category(c)[0] == "L"


def _is_number(c):
    return unicodedata.category(c)[0] == "N"


def _is_other(c):
    return not (_is_space(c) or _is_letter(c) or _is_number(c))


def pre_tokenize(text):
    """Split `text` like HF's ByteLevel pre-tokenizer (use_regex true) before the byte map."""
    out = []
    i, n = 0, len(text)
    while i < n:
        # 1. contractions (lowercase only, as in the pattern)
        m = next((c for c in _CONTRACTIONS if text.startswith(c, i)), None)
        if m is not None:
            out.append(m)
            i += len(m)
            continue
        # 2.-4. ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`
        matched = False
        for cls in (_is_letter, _is_number, _is_other):
            j = i + 1 if (text[i] == " " and i + 1 < n and cls(text[i + 1])) else i
            if j < n and cls(text[j]):
                k = j
                while k < n and cls(text[k]):
                    k += 1
                out.append(text[i:k])
                i = k
                matched = True
                break
        if matched:
            continue
        # 5. `\s+(?!\S)`, 6. `\s+`  (text[i] is whitespace here)
        k = i
        while k < n and _is_space(text[k]):
            k += 1
        if k == n or k - i == 1:
            out.append(text[i:k])  # whole run (at the end), or a single char via `\s+`
            i = k
        else:
            out.append(text[i:k - 1])  # leave the last whitespace char for the next piece
            i = k - 1
    return out


# ---------------------------------------------------------------------------------------------
# Encoder / decoder with HF semantics
# ---------------------------------------------------------------------------------------------
class Tokenizer:
    def __init__(self, vocab, merges, added_tokens):
        self.vocab = dict(vocab)                     # byte-level string -> id
        self.id_to_token = {i: t for t, i in self.vocab.items()}
        self.ranks = {tuple(m): r for r, m in enumerate(merges)}
        self.added = dict(added_tokens)              # content -> id
        for t, i in self.added.items():
            self.id_to_token[i] = t
        self.special_ids = set(self.added.values())
        self._cache = {}

    @classmethod
    def from_file(cls, path):
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
        m = d["model"]
        assert m["type"] == "BPE"
        merges = [tuple(x) if isinstance(x, list) else tuple(x.split(" ", 1)) for x in m["merges"]]
        added = {t["content"]: t["id"] for t in d["added_tokens"]}
        return cls(m["vocab"], merges, added)

    def _bpe(self, word):
        """Merge the byte-level symbols of one pre-token by merge rank (lowest first, leftmost)."""
        if word in self._cache:
            return self._cache[word]
        syms = list(word)
        while len(syms) > 1:
            best, best_i = None, -1
            for i in range(len(syms) - 1):
                r = self.ranks.get((syms[i], syms[i + 1]))
                if r is not None and (best is None or r < best):
                    best, best_i = r, i
            if best is None:
                break
            syms[best_i:best_i + 2] = [syms[best_i] + syms[best_i + 1]]
        ids = [self.vocab[s] for s in syms]
        self._cache[word] = ids
        return ids

    def _split_added(self, text):
        """Added tokens are matched on the raw text first: leftmost match, longest at a position."""
        pieces, i, start = [], 0, 0
        toks = sorted(self.added, key=len, reverse=True)
        while i < len(text):
            hit = next((t for t in toks if text.startswith(t, i)), None)
            if hit is None:
                i += 1
                continue
            if start < i:
                pieces.append((text[start:i], None))
            pieces.append((hit, self.added[hit]))
            i += len(hit)
            start = i
        if start < len(text):
            pieces.append((text[start:], None))
        return pieces

    def encode(self, text):
        """ids of `text` as HF `encode(text, add_special_tokens=False)` gives them."""
        ids = []
        for piece, added_id in self._split_added(text):
            if added_id is not None:
                ids.append(added_id)
                continue
            for word in pre_tokenize(piece):
                ids.extend(self._bpe(to_byte_chars(word)))
        return ids

    def tokens(self, ids):
        return [self.id_to_token[i] for i in ids]

    def decode(self, ids, skip_special_tokens=False):
        """HF ByteLevel decoding: added tokens as their text, the rest through the byte map,
        invalid UTF-8 replaced by U+FFFD."""
        out, buf = [], []
        for i in ids:
            t = self.id_to_token[i]
            if i in self.special_ids:
                if buf:
                    out.append(from_byte_chars("".join(buf)).decode("utf-8", errors="replace"))
                    buf = []
                if not skip_special_tokens:
                    out.append(t)
            else:
                buf.append(t)
        if buf:
            out.append(from_byte_chars("".join(buf)).decode("utf-8", errors="replace"))
        return "".join(out)


# ---------------------------------------------------------------------------------------------
# Trainer
# ---------------------------------------------------------------------------------------------
def merge_allowed(a, b):
    """The one constraint on top of plain BPE: a token is either pure ASCII or lies inside a
    single non-ASCII character (its bytes have no character start except possibly the first
    byte). So every Chinese character ends up as one token, Chinese words are sequences of
    character tokens, and a prompt cut at any character boundary encodes as a prefix of the
    training text's encoding: the prompt 今天天气 ends where the training text's 今天天气 ends,
    and 很 is a token of its own that can follow it."""
    bs = from_byte_chars(a + b)
    if all(x < 0x80 for x in bs):
        return True
    starts = [i for i, x in enumerate(bs) if x & 0xC0 != 0x80]
    return starts in ([], [0])


def train(lines, vocab_size, min_frequency=2, log=None):
    """Byte-level BPE over the pre-tokenized lines. Returns (vocab dict, merges list).

    Vocab: the added tokens (0..2), the 256 byte characters in code-point order (as the real
    MiniMind2 tokenizer.json has them), then one token per merge in merge order. Each step
    merges the most frequent adjacent pair (counted over pre-token occurrences); ties go to
    the pair with the smaller (left id, right id). Stops at vocab_size or when no allowed pair
    occurs min_frequency times.
    """
    word_counts = {}
    for line in lines:
        for w in pre_tokenize(line):
            bw = to_byte_chars(w)
            word_counts[bw] = word_counts.get(bw, 0) + 1
    vocab = {t: i for i, t in enumerate(ADDED_TOKENS)}
    for c in sorted(BYTE_TO_CHAR.values()):
        vocab[c] = len(vocab)
    words = [(list(w), c) for w, c in sorted(word_counts.items())]
    merges = []
    blocked = {}
    while len(vocab) < vocab_size:
        counts = {}
        for syms, c in words:
            for i in range(len(syms) - 1):
                p = (syms[i], syms[i + 1])
                counts[p] = counts.get(p, 0) + c
        best, best_key = None, None
        for p, c in counts.items():
            if c < min_frequency:
                continue
            ok = blocked.get(p)
            if ok is None:
                ok = blocked[p] = merge_allowed(*p)
            if not ok:
                continue
            key = (-c, vocab[p[0]], vocab[p[1]])
            if best_key is None or key < best_key:
                best, best_key = p, key
        if best is None:
            break
        a, b = best
        merges.append(best)
        vocab[a + b] = len(vocab)
        for syms, _ in words:
            i = 0
            while i < len(syms) - 1:
                if syms[i] == a and syms[i + 1] == b:
                    syms[i:i + 2] = [a + b]
                i += 1
        if log and len(merges) % 100 == 0:
            log(f"  {len(merges)} merges, last {from_byte_chars(a + b).decode('utf-8', 'replace')!r} "
                f"x{-best_key[0]}")
    return vocab, merges


# ---------------------------------------------------------------------------------------------
# Writers (layout of ../shared/minimind/minimind2/tokenizer.json and tokenizer_config.json)
# ---------------------------------------------------------------------------------------------
def _added_token_entry(i, content):
    return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}


def tokenizer_json(vocab, merges):
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [_added_token_entry(i, t) for i, t in enumerate(ADDED_TOKENS)],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [[a, b] for a, b in merges],
        },
    }


def tokenizer_config_json(model_max_length):
    return {
        "add_bos_token": False,
        "add_eos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                     "single_word": False, "special": True} for i, t in enumerate(ADDED_TOKENS)},
        "additional_special_tokens": [],
        "bos_token": "<|im_start|>",
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "legacy": True,
        "model_max_length": model_max_length,
        "pad_token": "<|endoftext|>",
        "sp_model_kwargs": {},
        "spaces_between_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": "<|endoftext|>",
        "chat_template": CHAT_TEMPLATE,
    }


def write_json(path, obj):
    """indent 2, raw UTF-8, no trailing newline: how the MiniMind files are written."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(obj, indent=2, ensure_ascii=False))


def check_against_golden(tok, jsonl_path):
    bad = 0
    n = 0
    with open(jsonl_path, encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            n += 1
            ids = tok.encode(d["text"])
            if ids != d["ids"] or tok.decode(ids) != d["decoded"]:
                bad += 1
                if bad <= 5:
                    print(f"MISMATCH {d['text'][:60]!r}\n  got  {ids[:20]}\n  want {d['ids'][:20]}")
    print(f"{jsonl_path}: {n - bad}/{n} lines identical")
    return bad == 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("corpus")
    t.add_argument("outdir")
    t.add_argument("--chat", help="chat samples (JSON lines of rendered conversations) to train on too")
    t.add_argument("--vocab-size", type=int, default=768)
    t.add_argument("--model-max-length", type=int, default=512)
    e = sub.add_parser("encode")
    e.add_argument("tokenizer_json")
    e.add_argument("text")
    g = sub.add_parser("check-golden")
    g.add_argument("tokenizer_json")
    g.add_argument("jsonl")
    args = ap.parse_args(argv)

    if args.cmd == "encode":
        tok = Tokenizer.from_file(args.tokenizer_json)
        ids = tok.encode(args.text)
        print(",".join(map(str, ids)))
        print(" | ".join(tok.decode([i]) for i in ids))
        return 0
    if args.cmd == "check-golden":
        return 0 if check_against_golden(Tokenizer.from_file(args.tokenizer_json), args.jsonl) else 1

    with open(args.corpus, encoding="utf-8") as f:
        lines = [l.rstrip("\n") for l in f if l.strip()]
    chats = []
    if args.chat:
        with open(args.chat, encoding="utf-8") as f:
            chats = [json.loads(l) for l in f if l.strip()]
    # The special tokens of a chat are added tokens, never merged: train on the text between them.
    splitter = Tokenizer({}, [], {t: i for i, t in enumerate(ADDED_TOKENS)})
    pieces = [p for c in chats for p, added in splitter._split_added(c) if added is None]
    print(f"train_bpe: {len(lines)} lines, {len(chats)} chats, target vocab {args.vocab_size}")
    vocab, merges = train(lines + pieces, args.vocab_size, log=print)
    print(f"train_bpe: vocab {len(vocab)} ({len(merges)} merges)")
    os.makedirs(args.outdir, exist_ok=True)
    tj = os.path.join(args.outdir, "tokenizer.json")
    write_json(tj, tokenizer_json(vocab, merges))
    write_json(os.path.join(args.outdir, "tokenizer_config.json"),
               tokenizer_config_json(args.model_max_length))
    # round trip of the corpus through the written file
    tok = Tokenizer.from_file(tj)
    ntok = 0
    for line in lines + chats:
        ids = tok.encode(line)
        ntok += len(ids)
        assert tok.decode(ids) == line, line
    print(f"train_bpe: corpus = {ntok} tokens ({sum(len(l) for l in lines + chats) / ntok:.2f} chars/token), "
          f"round trip ok; wrote {tj}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
