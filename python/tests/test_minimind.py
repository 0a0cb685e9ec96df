"""The Python module against the references: the golden cases' logits and greedy ids (made by
tools/make_golden.py's PyTorch model), the golden tokenizer lines (Hugging Face tokenizers), and
the C++ programs' own output for the same calls."""
import json
import subprocess
import threading

import numpy as np
import pytest

import minimind
from conftest import DEMO, ROOT, SHARED, program, require

GOLDEN_CASES = ["tiny-mm2", "tiny-mm2-f16", "tiny-mm2-bf16", "tiny-mm3", "tiny-mm3-moe", "tiny-untied"]
LOGITS_TOLERANCE = 1e-4


def run(name, *args):
    out = subprocess.run([str(program(name)), *args], capture_output=True, check=True)
    return out.stdout.decode()


# --- golden cases -------------------------------------------------------------------------------

@pytest.mark.parametrize("case", GOLDEN_CASES)
def test_golden_logits_and_greedy_ids(case):
    d = require(SHARED / "golden" / case, "the golden case " + case)
    expected = json.loads((d / "expected.json").read_text())
    m = minimind.load(d, threads=1)
    vocab = expected["vocab_size"]
    for prompt in expected["prompts"]:
        ids = prompt["ids"]
        if prompt["logits_file"]:
            reference = np.fromfile(d / prompt["logits_file"], dtype="<f4").reshape(prompt["logits_shape"])
            logits = m.logits(ids)
            assert logits.dtype == np.float32 and logits.shape == (len(ids), vocab)
            assert np.abs(logits - reference).max() <= LOGITS_TOLERANCE, prompt["name"]
        last = m.logits(ids, all_positions=False)
        assert last.shape == (1, vocab)
        assert np.abs(last[0] - np.array(prompt["last_logits"], dtype=np.float32)).max() <= LOGITS_TOLERANCE, prompt["name"]
        greedy = m.generate_ids(ids, max_new_tokens=expected["greedy_n"], temperature=0, ignore_eos=True)
        assert greedy == prompt["greedy_ids"], prompt["name"]


def test_demo_model_golden():
    golden = json.loads((DEMO / "golden.json").read_text())
    m = minimind.load(DEMO, threads=1)
    for prompt in golden["prompts"]:
        assert m.tokenizer.encode(prompt["text"]) == prompt["ids"]
        last = m.logits(prompt["ids"])[-1]
        assert np.abs(last - np.array(prompt["last_logits"], dtype=np.float32)).max() <= LOGITS_TOLERANCE, prompt["name"]
        assert m.generate_ids(prompt["text"], max_new_tokens=golden["greedy_n"], temperature=0) == prompt["greedy_ids"]
        assert m.generate(prompt["text"], max_new_tokens=golden["greedy_n"], temperature=0) == prompt["greedy_text"]
        assert m.generate_ids(prompt["ids"], max_new_tokens=golden["greedy_n"], temperature=0,
                              ignore_eos=True) == prompt["greedy_ignore_eos_ids"]


def test_logits_are_a_numpy_array_that_owns_its_rows(demo):
    ids = demo.tokenizer.encode("今天天气很好")
    first = demo.logits(ids)
    copy = first.copy()
    demo.logits([5, 6, 7])  # another forward pass must not write over the first array
    assert np.array_equal(first, copy)
    assert first.flags["C_CONTIGUOUS"] and not first.flags["OWNDATA"]
    assert np.array_equal(demo.logits(np.array(ids, dtype=np.int64)), first)  # numpy ids
    # The last row alone goes through the one-position products, all rows through the GEMM: the
    # same sums in another order where f32 is held row-major (bit for bit only in f32_panels).
    np.testing.assert_allclose(demo.logits(ids, all_positions=False)[0], first[-1], rtol=0, atol=1e-5)


# --- tokenizer ------------------------------------------------------------------------------------

@pytest.mark.parametrize("tokenizer,case", [("minimind2", "tiny-mm2"), ("minimind-3", "tiny-mm3")])
def test_tokenizer_golden_lines(tokenizer, case):
    lines = require(SHARED / "golden" / "tokenizer" / f"{tokenizer}.jsonl", f"the golden {tokenizer} tokenizer lines")
    t = minimind.load(require(SHARED / "golden" / case, "the golden case " + case)).tokenizer
    count = 0
    for line in lines.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        assert t.encode(entry["text"]) == entry["ids"], entry["text"]
        assert t.decode(entry["ids"]) == entry["decoded"], entry["text"]
        count += 1
    assert count == 473


def test_token_pieces_and_special_tokens(demo):
    t = demo.tokenizer
    assert t.token_to_id("<|im_end|>") == 2 and t.token_to_id("no such token") is None
    assert t.decode([1, 484, 2], skip_special_tokens=True) == "今"
    assert b"".join(t.token_to_piece(i) for i in t.encode("今天")) == "今天".encode()
    assert t.vocab_size == demo.config["vocab_size"] == 1024


# --- the same results as the programs -----------------------------------------------------------

@pytest.mark.parametrize("prompt", ["小明家养了一只", "The cat", "今天"])
def test_greedy_ids_and_text_equal_minimind_generate(demo, prompt):
    args = ["--model", str(DEMO), "--prompt", prompt, "--max-new-tokens", "24", "--threads", "1"]
    greedy = run("minimind-generate", *args, "--temperature", "0", "--print-ids").strip()
    assert demo.generate_ids(prompt, max_new_tokens=24, temperature=0) == [int(i) for i in greedy.split(",")]
    assert demo.generate(prompt, max_new_tokens=24, temperature=0) + "\n" == run("minimind-generate", *args, "--temperature", "0")
    sampled = run("minimind-generate", *args, "--temperature", "1.5", "--top-k", "20", "--seed", "7", "--print-ids").strip()
    assert demo.generate_ids(prompt, max_new_tokens=24, temperature=1.5, top_k=20, seed=7) == [int(i) for i in sampled.split(",")]


def test_chat_equals_minimind_generate_chat(demo):
    expected = run("minimind-generate", "--model", str(DEMO), "--chat", "--system", "你好", "--prompt", "今天天气",
                   "--temperature", "0", "--max-new-tokens", "20")
    messages = [{"role": "system", "content": "你好"}, {"role": "user", "content": "今天天气"}]
    assert demo.chat(messages, temperature=0, max_new_tokens=20) + "\n" == expected
    assert demo.apply_chat_template(messages) == ("<|im_start|>system\n你好<|im_end|>\n<|im_start|>user\n今天天气<|im_end|>\n"
                                                  "<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_trace_is_minimind_next_trace_json(demo):
    expected = json.loads(run("minimind-next", "--model", str(DEMO), "--prompt", "今天天气", "--trace", "--json", "--top", "3"))
    assert demo.trace("今天天气", top=3) == expected
    assert demo.trace("今天天气")["top"][0]["piece"] == "很"
    with_maps = demo.trace([308, 262], attention=True)
    assert len(with_maps["layers"][0]["attention"]) == demo.config["num_attention_heads"]


def test_config_and_load_options(demo):
    c = demo.config
    assert (c["architecture"], c["hidden_size"], c["num_hidden_layers"], c["head_dim"]) == ("MiniMindForCausalLM", 128, 4, 32)
    assert demo.num_parameters == 918656 and demo.threads == 1
    q8 = minimind.load(DEMO, dtype="q8", threads=2)
    assert q8.dtype == "q8" and q8.threads == 2
    assert q8.generate_ids("今天天气", max_new_tokens=4, temperature=0)[0] == 477  # 很, as f32
    short = minimind.load(DEMO, config_overrides={"max_position_embeddings": 8})
    assert short.config["max_position_embeddings"] == 8
    assert demo.generation_config["eos_token_ids"] == [2, 0]


def test_lora_adapters_equal_minimind_next_lora(demo, tmp_path):
    adapters = ROOT / "tests" / "data" / "lora" / "adapters"
    one, two = adapters / "demo-random-1.pth", adapters / "demo-random-2.pth"
    expected = json.loads(run("minimind-next", "--model", str(DEMO), "--prompt", "今天天气", "--trace", "--json", "--top", "3",
                              "--lora", str(one), "--lora-scaled", f"{two}:0.5"))
    adapted = minimind.load(DEMO, threads=1, adapters=[one, (str(two), 0.5)])
    assert adapted.trace("今天天气", top=3) == expected
    assert adapted.trace("今天天气", top=3) != demo.trace("今天天气", top=3)
    with pytest.raises(minimind.Error, match="no_such_adapter"):
        minimind.load(DEMO, adapters=[tmp_path / "no_such_adapter.pth"])
    with pytest.raises(minimind.Error, match="not one string"):
        minimind.load(DEMO, adapters=str(one))
    with pytest.raises(minimind.Error, match=r"adapters\[0\]"):
        minimind.load(DEMO, adapters=[(one, 1.0, 2.0)])


# --- streaming ------------------------------------------------------------------------------------

def test_stream_yields_the_same_text_piece_by_piece(demo):
    whole = demo.generate("小明家养了一只", max_new_tokens=30, temperature=0.9, seed=3)
    it = demo.generate("小明家养了一只", max_new_tokens=30, temperature=0.9, seed=3, stream=True)
    assert it.stats is None or it.stats["generated_tokens"] >= 0
    pieces = list(it)
    assert len(pieces) > 3 and "".join(pieces) == whole
    assert it.stats["generated_tokens"] == demo.last_stats["generated_tokens"]
    assert list(it) == []  # exhausted stays exhausted
    chat_pieces = list(demo.chat([{"role": "user", "content": "今天天气"}], temperature=0, max_new_tokens=12, stream=True))
    assert "".join(chat_pieces) == demo.chat([{"role": "user", "content": "今天天气"}], temperature=0, max_new_tokens=12)


def test_stream_stopped_early_is_safe(demo):
    for _ in range(20):
        it = demo.generate("今天天气", max_new_tokens=400, ignore_eos=True, stream=True)
        assert isinstance(next(it), str)
        del it  # the generation thread is stopped and joined
    with demo.generate("The cat", max_new_tokens=400, ignore_eos=True, stream=True) as it:
        next(it)
    with pytest.raises(StopIteration):
        next(it)
    assert it.stats["stop"] == "stopped" and it.stats["generated_tokens"] < 400
    # the model keeps the iterator's generation alive, not the other way round: dropping every
    # other reference to the model while iterating is safe
    it = minimind.load(DEMO, threads=1).generate("今天天气", max_new_tokens=12, temperature=0, stream=True)
    assert "".join(it) == "很好，我们去公园散步。"


def test_threads_share_one_model(demo):
    expected = demo.generate_ids("小明家养了一只", max_new_tokens=20, temperature=0.8, seed=11)
    results = [None] * 4

    def work(i):
        results[i] = demo.generate_ids("小明家养了一只", max_new_tokens=20, temperature=0.8, seed=11)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [expected] * 4


# --- errors ----------------------------------------------------------------------------------------

def test_errors_are_minimind_error_with_the_library_message(demo, tmp_path):
    assert issubclass(minimind.Error, RuntimeError)
    with pytest.raises(minimind.Error, match="no_such_model"):
        minimind.load(tmp_path / "no_such_model")
    (tmp_path / "broken.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(minimind.Error, match="config.json: missing"):
        minimind.load(tmp_path / "broken.safetensors")
    (tmp_path / "config.json").write_bytes((DEMO / "config.json").read_bytes())
    with pytest.raises(minimind.Error, match="broken.safetensors"):
        minimind.load(tmp_path / "broken.safetensors")
    with pytest.raises(minimind.Error, match='unknown weight format "f64"'):
        minimind.load(DEMO, dtype="f64")
    with pytest.raises(minimind.Error, match="threads"):
        minimind.load(DEMO, threads=-1)


def test_bad_ids_and_arguments(demo):
    with pytest.raises(minimind.Error, match="1024"):
        demo.logits([1, 1024])
    with pytest.raises(minimind.Error, match="-1"):
        demo.generate([5, -1])
    with pytest.raises(minimind.Error, match="1024"):
        demo.tokenizer.decode([1024])
    with pytest.raises(minimind.Error, match=r"ids\[1\].*out of range"):
        demo.logits([1, 2**40])
    with pytest.raises(TypeError, match=r"ids\[0\]"):
        demo.logits([1.5])
    with pytest.raises(TypeError, match="string"):
        demo.logits("今天")
    with pytest.raises(minimind.Error, match="no token ids"):
        demo.logits([])
    with pytest.raises(minimind.Error, match="512"):
        demo.logits([5] * 513)
    with pytest.raises(minimind.Error, match="top_p"):
        demo.generate("今天", top_p=0)
    with pytest.raises(minimind.Error, match="temperature"):
        demo.generate("今天", temperature=-1, stream=True)
    with pytest.raises(minimind.Error, match="seed"):
        demo.generate("今天", seed=-2)
    with pytest.raises(minimind.Error, match="prompt has no tokens"):
        demo.generate("")
    with pytest.raises(minimind.Error, match='unknown role "User"'):
        demo.chat([{"role": "User", "content": "hi"}])
    with pytest.raises(minimind.Error, match='unknown key "name"'):
        demo.chat([{"role": "user", "content": "hi", "name": "x"}])
    with pytest.raises(TypeError, match=r"messages\[0\]\[\"content\"\]"):
        demo.chat([{"role": "user", "content": 5}])
    with pytest.raises(minimind.Error, match="invalid UTF-8 at byte offset 2"):
        demo.tokenizer.encode(b"ab\xff")
    assert demo.tokenizer.encode("今天".encode()) == demo.tokenizer.encode("今天")
    with pytest.raises(UnicodeEncodeError):
        demo.tokenizer.encode("\ud800")
