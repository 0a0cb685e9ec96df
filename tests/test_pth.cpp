// PyTorch state dicts (io/pth.hpp, io/zip.hpp, io/pickle.hpp): the committed files, saved by
// torch.save as upstream MiniMind saves them, give the safetensors path's logits; tensors are
// viewed in the mapped file unless strided; and a .pth is data, never code: every global other
// than the few torch.save needs, every opcode outside its subset, and every broken zip or view
// is refused with an Error naming it and its byte offset.
#include <doctest/doctest.h>
#include <minimind/detail/io/pickle.hpp>
#include <minimind/detail/io/pth.hpp>
#include <minimind/minimind.hpp>

#include "checkpoint_writer.hpp"
#include "format_files.hpp"
#include "pth_builder.hpp"

#include <unistd.h>

using namespace minimind;
using namespace minimind::testing;

namespace {

io::TensorTable parse(std::string image, const std::string& name = "test.pth") {
  static std::vector<std::string> keep;  // the table views the image
  keep.push_back(std::move(image));
  return io::parse_pth(as_bytes(keep.back()), name, nullptr);
}

std::string f32s(std::initializer_list<float> v) { return f32_bytes(std::vector<float>(v)); }

// A valid image of one 2 x 3 float tensor "w" = 0..5, to break in one place.
std::string one_tensor(StateDictPickle::Tensor t = {"w", "FloatStorage", "0", 6, 0, {2, 3}, {3, 1}},
                       std::string storage = f32s({0, 1, 2, 3, 4, 5})) {
  return pth_image(StateDictPickle::state_dict({t}), {{"0", storage}});
}

// A pickle: PROTO 2, `body`, STOP.
std::string pickle(const std::string& body) { return std::string("\x80\x02", 2) + body + "."; }

void check_refused(const std::string& pkl, const std::string& message) {
  CAPTURE(message);
  CHECK_THROWS_WITH_AS(parse(pth_image(pkl, {})), doctest::Contains(message.c_str()), Error);
}

}  // namespace

TEST_CASE("every committed .pth gives the logits of the golden case it was saved from") {
  for (const auto& entry : formats_manifest().at("pth")) {
    const std::string file = entry.at("file").get<std::string>();
    CAPTURE(file);
    const auto reference_dir = repo_path(entry.at("reference"));
    const io::TensorTable table = io::read_pth(source_dir() / file);
    const Config config = Config::from_pretrained(reference_dir, &table);
    const auto model = MiniMindForCausalLM<float>::from_tensors(config, table, one_thread());
    const auto prompts = reference_prompts(entry);
    if (entry.at("compare") == "f16-all") {
      // {k: v.half()} of an F32 checkpoint: the same rounding done here gives the same logits.
      const io::TensorTable rounded = rounded_to_f16(io::read_safetensors_checkpoint(reference_dir), false);
      const auto reference = MiniMindForCausalLM<float>::from_tensors(Config::from_pretrained(reference_dir, &rounded),
                                                                      rounded, one_thread());
      const Comparison c = compare_logits(reference, model, prompts);
      MESSAGE(file << ": max |logit diff| " << c.max_abs << " vs the F16-rounded safetensors");
      CHECK(c.max_abs == 0.0);
    } else {
      const auto reference = MiniMindForCausalLM<float>::from_pretrained(reference_dir, one_thread());
      const Comparison c = compare_logits(reference, model, prompts);
      MESSAGE(file << ": max |logit diff| " << c.max_abs << " vs safetensors");
      CHECK(c.max_abs <= 1e-5);
    }
  }
}

TEST_CASE("upstream's float32 state_dict: lm_head.weight is the embedding's storage, viewed once in the file") {
  const io::TensorTable table = io::read_pth(formats_dir() / "pth" / "mm2-dense-f32.pth");
  const auto& embed = table.require("model.embed_tokens.weight");
  const auto& head = table.require("lm_head.weight");
  CHECK(head.bytes.data() == embed.bytes.data());
  CHECK(embed.dtype == io::Dtype::F32);
  CHECK(reinterpret_cast<uintptr_t>(embed.bytes.data()) % 64 == 0);  // torch aligns each entry to 64
  LoadOptions row_major = one_thread();
  row_major.f32_panels = false;  // (held in f32_panels, the weights are a copy in another layout)
  const auto model = MiniMindForCausalLM<float>::from_tensors(
      Config::from_pretrained(data_dir() / "golden" / "mm2-dense-f32", &table), table, row_major);
  CHECK(model.is_tied());
  CHECK(model.model.embed_tokens.weight().is_view());
}

TEST_CASE("strided tensors: offset views stay in place, a transposed one is copied in row-major order") {
  const io::TensorTable table = io::read_pth(formats_dir() / "pth" / "mm3-dense-strided.pth");
  const auto& k = table.require("model.layers.0.self_attn.k_proj.weight");
  const auto& v = table.require("model.layers.0.self_attn.v_proj.weight");
  const auto& q = table.require("model.layers.0.self_attn.q_proj.weight");
  CHECK(v.bytes.data() == k.bytes.data() + k.bytes.size());  // one storage, v at an offset
  CHECK(v.owner == k.owner);
  CHECK(q.owner != k.owner);  // gathered into its own buffer, on a cache line as the kernels want
  CHECK(reinterpret_cast<uintptr_t>(q.bytes.data()) % kCacheLine == 0);
  const io::TensorTable golden = io::read_safetensors_checkpoint(data_dir() / "golden" / "mm3-dense");
  const auto& want = golden.require(q.name);
  CHECK(std::memcmp(q.bytes.data(), want.bytes.data(), want.bytes.size()) == 0);
}

TEST_CASE("the pickle records: sizes, strides, offsets and storage keys as torch wrote them") {
  std::string pkl = StateDictPickle::state_dict({{"a", "HalfStorage", "7", 10, 4, {2, 3}, {1, 2}},
                                                       {"b", "BFloat16Storage", "1", 70000, 65536, {3}, {1}}});
  const auto records = io::pickle::parse_state_dict(as_bytes(pkl), "x.pkl");
  REQUIRE(records.size() == 2);
  CHECK(records[0].first == "a");
  CHECK(records[0].second.storage.type == "HalfStorage");
  CHECK(records[0].second.storage.key == "7");
  CHECK(records[0].second.storage.numel == 10);
  CHECK(records[0].second.storage_offset == 4);
  CHECK(records[0].second.size == std::vector<int64_t>{2, 3});
  CHECK(records[0].second.stride == std::vector<int64_t>{1, 2});
  CHECK(records[1].second.storage_offset == 65536);
  CHECK(records[1].second.storage.numel == 70000);
}

TEST_CASE("a strided view built here: values gathered in row-major order") {
  // Storage 0..9; a [2, 3] view at offset 1 with strides (1, 3): rows {1, 4, 7} and {2, 5, 8}.
  const auto table = parse(one_tensor({"w", "FloatStorage", "0", 10, 1, {2, 3}, {1, 3}}, f32s({0, 1, 2, 3, 4, 5, 6, 7, 8, 9})));
  const auto& w = table.require("w");
  REQUIRE(w.bytes.size() == 24);
  std::vector<float> got(6);
  std::memcpy(got.data(), w.bytes.data(), 24);
  CHECK(got == std::vector<float>{1, 4, 7, 2, 5, 8});
  // A size-1 dimension's stride does not matter: still contiguous, still in place.
  const auto in_place = parse(one_tensor({"w", "FloatStorage", "0", 6, 0, {1, 6}, {99, 1}}));
  CHECK(in_place.require("w").owner == nullptr);  // the caller's image, not a copy
}

TEST_CASE("state_dict(keep_vars=True): an nn.Parameter is read as its tensor") {
  std::string pkl = StateDictPickle::state_dict({{"w", "FloatStorage", "0", 2, 0, {2}, {1}}});
  const size_t at = pkl.find("ctorch._utils\n_rebuild_tensor_v2");
  pkl.insert(at, "ctorch._utils\n_rebuild_parameter\n(");
  pkl.insert(pkl.rfind("u."), std::string("\x88") + "ccollections\nOrderedDict\n)Rt" + "R");  // (tensor, True, {}) -> R
  const auto table = parse(pth_image(pkl, {{"0", f32s({1, 2})}}));
  CHECK(table.require("w").shape == std::vector<int64_t>{2});
  std::string hooked = pkl;
  hooked.replace(hooked.rfind(")Rt"), 3, "}" + StateDictPickle::unicode("h") + "K\x01st");
  CHECK_THROWS_WITH_AS(parse(pth_image(hooked, {{"0", f32s({1, 2})}})), doctest::Contains("_rebuild_parameter takes"), Error);
}

TEST_CASE("DDP's module. and torch.compile's _orig_mod. prefixes are dropped") {
  const std::string pkl = StateDictPickle::state_dict({{"module._orig_mod.w", "FloatStorage", "0", 2, 0, {2}, {1}},
                                                       {"module._orig_mod.b", "FloatStorage", "0", 2, 0, {1}, {1}}});
  const auto table = parse(pth_image(pkl, {{"0", f32s({1, 2})}}));
  CHECK(table.contains("w"));
  CHECK(table.contains("b"));
  CHECK(table.describe() == "test.pth");
}

TEST_CASE("the archive folder is found whatever torch named it, and zip64 fields are read") {
  std::vector<ZipEntry> entries = {{"my_model/data.pkl", StateDictPickle::state_dict({{"w", "FloatStorage", "0", 2, 0, {2}, {1}}})},
                                   {"my_model/data/0", f32s({7, 8}), 0, std::nullopt, std::nullopt, std::nullopt, true},
                                   {"my_model/byteorder", "little"}};
  const auto table = parse(zip_image(entries));
  float w[2];
  std::memcpy(w, table.require("w").bytes.data(), 8);
  CHECK(w[1] == 8.0f);
}

// ---- bad input ----

TEST_CASE("truncated .pth files, at every eighth of their length") {
  for (const std::string name : {"mm2-dense-f16.pth", "mm3-dense-strided.pth"}) {
    const std::string image = read_file(formats_dir() / "pth" / name);
    CHECK_NOTHROW(parse(image, name));
    for (const auto& prefix : truncations(image)) {
      CAPTURE(name);
      CAPTURE(prefix.size());
      CHECK_THROWS_AS(parse(prefix, name), Error);
    }
  }
}

TEST_CASE("not a zip archive, or not torch.save's") {
  CHECK_THROWS_WITH_AS(parse("hello"), doctest::Contains("too short for a zip archive"), Error);
  CHECK_THROWS_WITH_AS(parse(std::string(100, 'x')), doctest::Contains("no zip end-of-central-directory record"), Error);
  CHECK_THROWS_WITH_AS(parse(std::string("\x80\x02\x8a\x0a", 4) + std::string(60, '\0')),
                       doctest::Contains("legacy (pre-1.6) torch.save format"), Error);
  CHECK_THROWS_WITH_AS(parse(zip_image({{"archive/weights.bin", "x"}})), doctest::Contains("no <archive>/data.pkl"), Error);
  CHECK_THROWS_WITH_AS(parse(zip_image({{"a/data.pkl", pickle("}")}, {"b/data.pkl", pickle("}")}})),
                       doctest::Contains("several <archive>/data.pkl"), Error);
  std::vector<ZipEntry> big_endian = {{"archive/data.pkl", pickle("}")}, {"archive/byteorder", "big"}};
  CHECK_THROWS_WITH_AS(parse(zip_image(big_endian)), doctest::Contains("byte order \"big\" is not supported"), Error);
}

TEST_CASE("compressed, corrupt and duplicated zip entries") {
  std::vector<ZipEntry> entries = {{"archive/data.pkl", pickle("}"), 8}};
  CHECK_THROWS_WITH_AS(parse(zip_image(entries)),
                       doctest::Contains("entry \"archive/data.pkl\" is compressed (method 8, deflate); only stored"), Error);
  entries = {{"archive/data.pkl", pickle("}"), 0, 0x12345678u}};
  CHECK_THROWS_WITH_AS(parse(zip_image(entries)), doctest::Contains("is corrupt: CRC-32"), Error);
  entries = {{"archive/data.pkl", pickle("}")}, {"archive/data.pkl", pickle("}")}};
  CHECK_THROWS_WITH_AS(parse(zip_image(entries)), doctest::Contains("entry \"archive/data.pkl\" appears twice"), Error);
}

TEST_CASE("zip entries and directories beyond the file") {
  std::vector<ZipEntry> entries = {{"archive/data.pkl", pickle("}"), 0, std::nullopt, uint64_t{1} << 30}};
  CHECK_THROWS_WITH_AS(parse(zip_image(entries)), doctest::Contains("lies beyond the end of the"), Error);
  entries = {{"archive/data.pkl", pickle("}"), 0, std::nullopt, std::nullopt, uint64_t{1} << 31}};
  CHECK_THROWS_WITH_AS(parse(zip_image(entries)), doctest::Contains("beyond the end of the"), Error);
  entries = {{"archive/data.pkl", pickle("}"), 0, std::nullopt, std::nullopt, 7}};  // not a local header there
  CHECK_THROWS_WITH_AS(parse(zip_image(entries)), doctest::Contains("no local header at its recorded offset"), Error);
  entries = {{"archive/data.pkl", pickle("}"), 0, std::nullopt, uint64_t{1} << 40, std::nullopt, true}};  // zip64 size
  CHECK_THROWS_WITH_AS(parse(zip_image(entries)), doctest::Contains("lies beyond the end of the"), Error);
  // The end records pointing past the file.
  std::string image = one_tensor();
  const size_t end = image.size() - 22;
  std::string far = image;
  far.replace(end + 16, 4, le(0x7FFFFFFF, 4));  // classic directory offset
  far.replace(end - 20 - 56 + 48, 8, le(uint64_t{1} << 50, 8));  // zip64 directory offset
  CHECK_THROWS_WITH_AS(parse(far), doctest::Contains("central directory ["), Error);
  std::string many = image;
  many.replace(end - 20 - 56 + 32, 8, le(uint64_t{1} << 40, 8));  // zip64 entry count
  many.replace(end - 20 - 56 + 24, 8, le(uint64_t{1} << 40, 8));
  CHECK_THROWS_WITH_AS(parse(many), doctest::Contains("entry count 1099511627776 is more than"), Error);
}

TEST_CASE("pickle globals other than torch.save's are refused, never executed") {
  const auto marker = std::filesystem::temp_directory_path() / ("minimind_pwned_" + std::to_string(::getpid()));
  std::filesystem::remove(marker);
  // os.system("touch <marker>") as a malicious .pth would spell it.
  const std::string attack = pickle("cos\nsystem\n" + StateDictPickle::unicode("touch " + marker.string()) + "\x85R");
  CHECK_THROWS_WITH_AS(parse(pth_image(attack, {})),
                       doctest::Contains("at byte 2: pickle global os.system is not allowed"), Error);
  CHECK_FALSE(std::filesystem::exists(marker));
  check_refused(pickle("cbuiltins\neval\n"), "pickle global builtins.eval is not allowed");
  check_refused(pickle("cposix\nsystem\n"), "pickle global posix.system is not allowed");
  check_refused(pickle("ctorch\nload\n"), "pickle global torch.load is not allowed");
  check_refused(pickle("ctorch._utils\n_rebuild_qtensor\n"), "torch._utils._rebuild_qtensor is not allowed");
  check_refused(pickle("ctorch.nn.modules.linear\nLinear\n"), "torch.nn.modules.linear.Linear is not allowed");
  // An allowed name still cannot be called unless it is one of the two callables.
  check_refused(pickle("ctorch\nFloatStorage\n)R"), "REDUCE of torch.FloatStorage is not allowed");
  check_refused(pickle("ccollections\nOrderedDict\n" + StateDictPickle::unicode("x") + "\x85R"),
                "collections.OrderedDict called with arguments");
}

TEST_CASE("pickle opcodes outside the state-dict subset are refused with their name and offset") {
  check_refused(pickle("]"), "at byte 2: pickle opcode 0x5d (EMPTY_LIST) is outside the subset");
  check_refused(pickle(StateDictPickle::unicode("os") + StateDictPickle::unicode("system") + "\x93"),
                "pickle opcode 0x93 (STACK_GLOBAL)");
  check_refused(pickle("(ios\nsystem\n"), "pickle opcode 0x69 (INST)");
  check_refused(pickle("G" + std::string(8, '\0')), "pickle opcode 0x47 (BINFLOAT)");
  check_refused(pickle("\x81"), "pickle opcode 0x81 (NEWOBJ)");
  check_refused(pickle("Vabc\n"), "pickle opcode 0x56 (UNICODE)");
  check_refused(pickle(std::string("\x01", 1)), "pickle opcode 0x01 (unknown)");
  check_refused(std::string("\x80\x04\x95", 3), "pickle protocol 4 is not supported");
  check_refused("}.", "not a pickle (no PROTO opcode at the start)");
}

TEST_CASE("malformed pickles: stack, memo, nesting, cycles, trailing bytes") {
  check_refused(pickle("s"), "SETITEM");
  check_refused(pickle("t"), "no MARK on the pickle stack");
  check_refused(pickle("h\x05"), "memo entry 5 was never stored");
  check_refused(std::string("\x80\x02}", 3), "pickle opcode needs 1 bytes but only 0 remain");
  check_refused(pickle("}}"), "STOP with 2 objects on the stack");
  check_refused(pickle("}") + "}", "1 bytes follow STOP");
  check_refused(pickle("(}"), "STOP with an unclosed MARK");
  check_refused(pickle("K\x01"), "the pickle holds an int, not a state dict");
  check_refused(pickle(std::string(40, ')') + std::string(39, '\x86')), "nested more than 32 deep");
  check_refused(pickle("}q\x01" + StateDictPickle::unicode("self") + "h\x01s"), "a dict may not contain itself");
  // A dict placed inside another is frozen, so no longer chain can close a cycle either.
  check_refused(pickle("}q\x01}q\x02" + StateDictPickle::unicode("a") + "h\x01sh\x01" + StateDictPickle::unicode("b") +
                       "h\x02s"),
                "already inside another object");
  check_refused(pickle("X\xff\xff\xff\x7f"), "BINUNICODE string needs 2147483647 bytes");
  check_refused(pickle("\x8a\x09" + std::string(9, '\0')), "LONG1 integer of 9 bytes is too large");
  check_refused(pickle("ccollections\nOrderedDict\n)R}K\x01" "b"), "BUILD of a dict with an int");
}

TEST_CASE("persistent ids and tensor records that torch.save would not write") {
  check_refused(pickle(StateDictPickle::unicode("storage") + "\x85Q"), "persistent id is not ('storage'");
  const std::string bad_rebuild = "ctorch._utils\n_rebuild_tensor_v2\n(K\x01" + StateDictPickle::integer(0) + ")t";
  check_refused(pickle("}" + StateDictPickle::unicode("w") + bad_rebuild + "Rs"), "takes 6 or 7 arguments");
  // A storage with a wrong type name inside the persistent id.
  check_refused(pickle("(" + StateDictPickle::unicode("storage") + "ccollections\nOrderedDict\n" +
                       StateDictPickle::unicode("0") + StateDictPickle::unicode("cpu") + "K\x01tQ"),
                "persistent id is not ('storage'");
  // Backward hooks would need pickled functions.
  std::string hooks = StateDictPickle::state_dict({{"w", "FloatStorage", "0", 1, 0, {1}, {1}}});
  hooks.replace(hooks.find(")R"), 2, "}" + StateDictPickle::unicode("h") + "K\x01s");
  check_refused(hooks, "backward hooks are not supported");
}

TEST_CASE("storages and views that do not fit") {
  using T = StateDictPickle::Tensor;
  CHECK_THROWS_WITH_AS(parse(one_tensor({"w", "FloatStorage", "9", 6, 0, {2, 3}, {3, 1}})),
                       doctest::Contains("tensor \"w\": its storage entry archive/data/9 is missing"), Error);
  CHECK_THROWS_WITH_AS(parse(one_tensor(T{"w", "FloatStorage", "0", 7, 0, {2, 3}, {3, 1}})),
                       doctest::Contains("holds 24 bytes, not the 7 x 4"), Error);
  CHECK_THROWS_WITH_AS(parse(one_tensor(T{"w", "FloatStorage", "0", 6, 1, {2, 3}, {3, 1}})),
                       doctest::Contains("shape [2, 3] at storage offset 1 reaches beyond its storage of 6"), Error);
  CHECK_THROWS_WITH_AS(parse(one_tensor(T{"w", "FloatStorage", "0", 6, 0, {2, 3}, {4, 1}})),
                       doctest::Contains("reaches beyond its storage"), Error);
  CHECK_THROWS_WITH_AS(parse(one_tensor(T{"w", "FloatStorage", "0", 6, 0, {4, 3}, {0, 1}})),
                       doctest::Contains("more elements than its storage of 6 (broadcast views"), Error);
  CHECK_THROWS_WITH_AS(parse(one_tensor(T{"w", "FloatStorage", "0", 6, 0, {int64_t{1} << 40, 3}, {int64_t{1} << 40, 1}})),
                       doctest::Contains("more elements than its storage"), Error);
  CHECK_THROWS_WITH_AS(parse(one_tensor(T{"w", "FloatStorage", "0", 6, 0, {2, 3}, {3}})),
                       doctest::Contains("size and stride differ in length"), Error);
  CHECK_THROWS_WITH_AS(parse(one_tensor(T{"w", "LongStorage", "0", 3, 0, {3}, {1}})),
                       doctest::Contains("tensor \"w\": storage type torch.LongStorage is not supported"), Error);
  CHECK_THROWS_WITH_AS(parse(one_tensor(T{"w", "FloatStorage", "0", 6, 0, {2, 3}, {3, 1}}, std::string(20, '\0'))),
                       doctest::Contains("holds 20 bytes"), Error);
  // A value that is not a tensor: a training checkpoint rather than a state dict.
  const std::string epoch = pickle("}" + StateDictPickle::unicode("epoch") + "K\x03s");
  CHECK_THROWS_WITH_AS(parse(pth_image(epoch, {})), doctest::Contains("\"epoch\" is an int, not a tensor"), Error);
  // Zero-sized tensors are fine and point nowhere.
  CHECK(parse(one_tensor(T{"w", "FloatStorage", "0", 6, 0, {0, 3}, {3, 1}})).require("w").bytes.empty());
}
