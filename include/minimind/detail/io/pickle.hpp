#pragma once
// A restricted pickle machine for the data.pkl of a torch.save'd state dict. Python's pickle is a
// program that may call any importable function; this machine knows only the opcodes and the
// globals that torch.save writes for {name: tensor} (protocol 2):
//   collections.OrderedDict        called with () to make an empty ordered dict
//   torch._utils._rebuild_tensor_v2 called with (storage, offset, size, stride, requires_grad, hooks)
//   torch._utils._rebuild_parameter called with (tensor, requires_grad, hooks) (state_dict(keep_vars=True))
//   torch.<Type>Storage            only inside a persistent id ('storage', type, key, location, numel)
// Everything else (another global such as os.system, REDUCE of anything else, lists, objects, ...)
// is refused with a minimind::Error naming the opcode or global and its byte offset. Nothing is
// ever called, imported or executed: "calling" an allowed global just builds a record.
#include "minimind/error.hpp"
#include "minimind/detail/io/byte_reader.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace minimind::io::pickle {

// A storage as a persistent id names it: the zip entry data/<key> holds `numel` elements.
struct StorageRecord {
  std::string type;  // "FloatStorage", "HalfStorage", ...
  std::string key;
  int64_t numel = 0;
};

// A tensor as _rebuild_tensor_v2 describes it: a strided view into a storage.
struct TensorRecord {
  StorageRecord storage;
  int64_t storage_offset = 0;
  std::vector<int64_t> size, stride;
};

namespace detail {

struct Object;
using Ref = std::shared_ptr<Object>;

struct Object {
  enum class Kind { None, Bool, Int, String, Tuple, Dict, Global, Storage, Tensor };
  Kind kind = Kind::None;
  int64_t integer = 0;  // Int, Bool
  std::string text;     // String; Global as "module.name"
  std::vector<Ref> items;                   // Tuple
  std::vector<std::pair<Ref, Ref>> entries;  // Dict, in insertion order
  bool ordered_dict = false;  // made by collections.OrderedDict()
  bool frozen = false;        // placed inside another object: no more items, so no cycles
  int depth = 0;              // nesting, bounded so destruction cannot recurse deeply
  StorageRecord storage;
  TensorRecord tensor;
};

inline const char* kind_name(Object::Kind kind) {
  switch (kind) {
    case Object::Kind::None: return "None";
    case Object::Kind::Bool: return "a bool";
    case Object::Kind::Int: return "an int";
    case Object::Kind::String: return "a string";
    case Object::Kind::Tuple: return "a tuple";
    case Object::Kind::Dict: return "a dict";
    case Object::Kind::Global: return "a global";
    case Object::Kind::Storage: return "a storage";
    case Object::Kind::Tensor: return "a tensor";
  }
  return "?";
}

inline const char* opcode_name(uint8_t op) {
  switch (op) {
    case 'I': return "INT"; case 'J': return "BININT"; case 'K': return "BININT1"; case 'M': return "BININT2";
    case 'L': return "LONG"; case 0x8a: return "LONG1"; case 0x8b: return "LONG4"; case 'S': return "STRING";
    case 'T': return "BINSTRING"; case 'U': return "SHORT_BINSTRING"; case 'B': return "BINBYTES";
    case 'C': return "SHORT_BINBYTES"; case 0x8e: return "BINBYTES8"; case 0x96: return "BYTEARRAY8";
    case 0x97: return "NEXT_BUFFER"; case 0x98: return "READONLY_BUFFER"; case 'N': return "NONE";
    case 0x88: return "NEWTRUE"; case 0x89: return "NEWFALSE"; case 'V': return "UNICODE";
    case 0x8c: return "SHORT_BINUNICODE"; case 'X': return "BINUNICODE"; case 0x8d: return "BINUNICODE8";
    case 'F': return "FLOAT"; case 'G': return "BINFLOAT"; case ']': return "EMPTY_LIST"; case 'a': return "APPEND";
    case 'e': return "APPENDS"; case 'l': return "LIST"; case ')': return "EMPTY_TUPLE"; case 't': return "TUPLE";
    case 0x85: return "TUPLE1"; case 0x86: return "TUPLE2"; case 0x87: return "TUPLE3"; case '}': return "EMPTY_DICT";
    case 'd': return "DICT"; case 's': return "SETITEM"; case 'u': return "SETITEMS"; case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS"; case 0x91: return "FROZENSET"; case '0': return "POP"; case '2': return "DUP";
    case '(': return "MARK"; case '1': return "POP_MARK"; case 'g': return "GET"; case 'h': return "BINGET";
    case 'j': return "LONG_BINGET"; case 'p': return "PUT"; case 'q': return "BINPUT"; case 'r': return "LONG_BINPUT";
    case 0x94: return "MEMOIZE"; case 0x82: return "EXT1"; case 0x83: return "EXT2"; case 0x84: return "EXT4";
    case 'c': return "GLOBAL"; case 0x93: return "STACK_GLOBAL"; case 'R': return "REDUCE"; case 'b': return "BUILD";
    case 'i': return "INST"; case 'o': return "OBJ"; case 0x81: return "NEWOBJ"; case 0x92: return "NEWOBJ_EX";
    case 0x80: return "PROTO"; case '.': return "STOP"; case 0x95: return "FRAME"; case 'P': return "PERSID";
    case 'Q': return "BINPERSID";
  }
  return "unknown";
}

inline bool is_storage_type(const std::string& name) {
  static const char* const kTypes[] = {"FloatStorage", "HalfStorage", "BFloat16Storage", "DoubleStorage",
                                       "LongStorage",  "IntStorage",  "ShortStorage",    "CharStorage",
                                       "ByteStorage",  "BoolStorage"};
  for (const char* t : kTypes)
    if (name == t) return true;
  return false;
}

class Machine {
 public:
  Machine(std::span<const std::byte> data, const std::string& source) : r_(data, source) {}

  Ref run() {
    if (r_.size() < 2 || std::to_integer<uint8_t>(r_.data()[0]) != 0x80) {
      r_.fail(0, "not a pickle (no PROTO opcode at the start)");
    }
    while (true) {
      op_at_ = r_.offset();
      const uint8_t op = r_.read<uint8_t>("pickle opcode");
      switch (op) {
        case 0x80: {  // PROTO
          const uint8_t protocol = r_.read<uint8_t>("pickle protocol");
          if (op_at_ != 0) fail("PROTO may only come first");
          if (protocol != 2 && protocol != 3) {
            fail("pickle protocol " + std::to_string(protocol) + " is not supported (torch.save writes protocol 2)");
          }
          break;
        }
        case '.': return stop();
        case 'N': push(make(Object::Kind::None)); break;
        case 0x88: push(make_int(1, Object::Kind::Bool)); break;  // NEWTRUE
        case 0x89: push(make_int(0, Object::Kind::Bool)); break;  // NEWFALSE
        case 'K': push(make_int(r_.read<uint8_t>("BININT1 operand"))); break;
        case 'M': push(make_int(r_.read<uint16_t>("BININT2 operand"))); break;
        case 'J': push(make_int(r_.read<int32_t>("BININT operand"))); break;
        case 0x8a: push(make_int(read_long1())); break;
        case 'X': {  // BINUNICODE
          const uint32_t n = r_.read<uint32_t>("BINUNICODE length");
          auto s = make(Object::Kind::String);
          s->text = std::string(r_.chars(n, "BINUNICODE string"));
          push(std::move(s));
          break;
        }
        case 'c': push(global()); break;
        case '(': marks_.push_back(stack_.size()); break;
        case ')': push(make(Object::Kind::Tuple)); break;
        case 't': push(tuple(pop_mark())); break;
        case 0x85: push(tuple(pop_n(1))); break;
        case 0x86: push(tuple(pop_n(2))); break;
        case 0x87: push(tuple(pop_n(3))); break;
        case '}': push(make(Object::Kind::Dict)); break;
        case 's': {  // SETITEM
          auto kv = pop_n(2);
          set_items(top("SETITEM target"), kv);
          break;
        }
        case 'u': {  // SETITEMS
          auto kv = pop_mark();
          set_items(top("SETITEMS target"), kv);
          break;
        }
        case 'q': memo_[r_.read<uint8_t>("BINPUT index")] = top("BINPUT"); break;
        case 'r': memo_[r_.read<uint32_t>("LONG_BINPUT index")] = top("LONG_BINPUT"); break;
        case 'h': push(memo_get(r_.read<uint8_t>("BINGET index"))); break;
        case 'j': push(memo_get(r_.read<uint32_t>("LONG_BINGET index"))); break;
        case 'Q': push(persistent_id(pop("BINPERSID"))); break;
        case 'R': {  // REDUCE
          Ref args = pop("REDUCE arguments");
          Ref callable = pop("REDUCE callable");
          push(reduce(callable, args));
          break;
        }
        case 'b': build(); break;
        default:
          fail("pickle opcode 0x" + hex(op) + " (" + opcode_name(op) +
               ") is outside the subset torch.save writes for a state dict; refused, nothing was executed");
      }
    }
  }

 private:
  static constexpr int kMaxDepth = 32;

  [[noreturn]] void fail(const std::string& message) const { r_.fail(op_at_, message); }

  static std::string hex(uint8_t v) {
    const char* d = "0123456789abcdef";
    return {d[v >> 4], d[v & 15]};
  }

  Ref make(Object::Kind kind) const {
    auto o = std::make_shared<Object>();
    o->kind = kind;
    return o;
  }
  Ref make_int(int64_t v, Object::Kind kind = Object::Kind::Int) const {
    auto o = make(kind);
    o->integer = v;
    return o;
  }

  // LONG1: n bytes of little-endian two's complement; more than 8 cannot be a size or an offset.
  int64_t read_long1() {
    const uint8_t n = r_.read<uint8_t>("LONG1 length");
    if (n > 8) fail("LONG1 integer of " + std::to_string(n) + " bytes is too large");
    auto bytes = r_.bytes(n, "LONG1 integer");
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= std::to_integer<uint64_t>(bytes[i]) << (8 * i);
    if (n > 0 && n < 8 && (std::to_integer<uint8_t>(bytes[n - 1]) & 0x80)) v |= ~uint64_t{0} << (8 * n);  // sign-extend
    return static_cast<int64_t>(v);
  }

  std::string read_line(const char* what) {
    std::string line;
    while (true) {
      const char c = static_cast<char>(r_.read<uint8_t>(what));
      if (c == '\n') return line;
      if (line.size() >= 256) fail(std::string(what) + " is longer than 256 bytes");
      line += c;
    }
  }

  Ref global() {
    const std::string module = read_line("GLOBAL module");
    const std::string name = read_line("GLOBAL name");
    const bool allowed = (module == "collections" && name == "OrderedDict") ||
                         (module == "torch._utils" && (name == "_rebuild_tensor_v2" || name == "_rebuild_parameter")) ||
                         (module == "torch" && is_storage_type(name));
    if (!allowed) {
      fail("pickle global " + module + "." + name +
           " is not allowed (only collections.OrderedDict, torch._utils._rebuild_tensor_v2 / _rebuild_parameter and "
           "torch.*Storage); "
           "refused, nothing was executed");
    }
    auto g = make(Object::Kind::Global);
    g->text = module + "." + name;
    return g;
  }

  void push(Ref o) { stack_.push_back(std::move(o)); }
  Ref pop(const char* what) {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) fail(std::string(what) + ": the pickle stack is empty");
    Ref o = std::move(stack_.back());
    stack_.pop_back();
    return o;
  }
  Ref& top(const char* what) {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) fail(std::string(what) + ": the pickle stack is empty");
    return stack_.back();
  }
  std::vector<Ref> pop_n(size_t n) {
    std::vector<Ref> out(n);
    for (size_t i = n; i-- > 0;) out[i] = pop("TUPLE/SETITEM operand");
    return out;
  }
  std::vector<Ref> pop_mark() {
    if (marks_.empty()) fail("no MARK on the pickle stack");
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<Ref> out(std::make_move_iterator(stack_.begin() + static_cast<std::ptrdiff_t>(mark)),
                         std::make_move_iterator(stack_.end()));
    stack_.resize(mark);
    return out;
  }
  Ref memo_get(uint32_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) fail("memo entry " + std::to_string(index) + " was never stored");
    return it->second;
  }

  // An object placed inside another can no longer change, so no container can come to hold
  // itself, and its depth is final.
  int adopt(const Ref& child) {
    child->frozen = true;
    return child->depth + 1;
  }
  void check_depth(const Ref& o) {
    if (o->depth > kMaxDepth) fail("objects nested more than " + std::to_string(kMaxDepth) + " deep");
  }

  Ref tuple(std::vector<Ref> items) {
    auto t = make(Object::Kind::Tuple);
    for (const auto& item : items) t->depth = std::max(t->depth, adopt(item));
    t->items = std::move(items);
    check_depth(t);
    return t;
  }

  void set_items(const Ref& dict, const std::vector<Ref>& kv) {
    if (dict->kind != Object::Kind::Dict) fail(std::string("SETITEM(S) on ") + kind_name(dict->kind) + ", not a dict");
    if (dict->frozen) fail("SETITEM(S) on a dict that is already inside another object");
    if (kv.size() % 2 != 0) fail("SETITEMS with an odd number of operands");
    for (size_t i = 0; i < kv.size(); i += 2) {
      if (kv[i] == dict || kv[i + 1] == dict) fail("a dict may not contain itself");
      dict->depth = std::max({dict->depth, adopt(kv[i]), adopt(kv[i + 1])});
      dict->entries.emplace_back(kv[i], kv[i + 1]);
    }
    check_depth(dict);
  }

  static bool is_int(const Ref& o) { return o->kind == Object::Kind::Int; }
  static bool is_empty_dict(const Ref& o) { return o->kind == Object::Kind::Dict && o->entries.empty(); }

  std::vector<int64_t> int_tuple(const Ref& o, const char* what) const {
    if (o->kind != Object::Kind::Tuple) fail(std::string("_rebuild_tensor_v2: ") + what + " is " + kind_name(o->kind) + ", not a tuple");
    std::vector<int64_t> out;
    for (const auto& item : o->items) {
      if (!is_int(item) || item->integer < 0) fail(std::string("_rebuild_tensor_v2: ") + what + " must hold non-negative ints");
      out.push_back(item->integer);
    }
    return out;
  }

  // ('storage', torch.<Type>Storage, key, location, numel)
  Ref persistent_id(const Ref& pid) {
    const auto& t = pid->items;
    if (pid->kind != Object::Kind::Tuple || t.size() != 5 || t[0]->kind != Object::Kind::String || t[0]->text != "storage" ||
        t[1]->kind != Object::Kind::Global || t[1]->text.rfind("torch.", 0) != 0 || t[2]->kind != Object::Kind::String ||
        t[3]->kind != Object::Kind::String || !is_int(t[4]) || t[4]->integer < 0) {
      fail("persistent id is not ('storage', torch.<Type>Storage, key, location, numel) as torch.save writes it");
    }
    const std::string type = t[1]->text.substr(6);
    if (!is_storage_type(type)) fail("persistent id names " + t[1]->text + ", not a storage type");
    auto s = make(Object::Kind::Storage);
    s->storage = {type, t[2]->text, t[4]->integer};
    return s;
  }

  Ref reduce(const Ref& callable, const Ref& args) {
    if (callable->kind != Object::Kind::Global) fail(std::string("REDUCE of ") + kind_name(callable->kind) + ", which is not callable");
    if (args->kind != Object::Kind::Tuple) fail("REDUCE arguments are " + std::string(kind_name(args->kind)) + ", not a tuple");
    const auto& a = args->items;
    if (callable->text == "collections.OrderedDict") {
      if (!a.empty()) fail("collections.OrderedDict called with arguments; torch.save calls it with ()");
      auto d = make(Object::Kind::Dict);
      d->ordered_dict = true;
      return d;
    }
    if (callable->text == "torch._utils._rebuild_tensor_v2") {
      // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
      if (a.size() != 6 && a.size() != 7) fail("_rebuild_tensor_v2 takes 6 or 7 arguments, got " + std::to_string(a.size()));
      if (a[0]->kind != Object::Kind::Storage) fail("_rebuild_tensor_v2: the first argument is not a storage");
      if (!is_int(a[1]) || a[1]->integer < 0) fail("_rebuild_tensor_v2: the storage offset is not a non-negative int");
      if (a[4]->kind != Object::Kind::Bool) fail("_rebuild_tensor_v2: requires_grad is not a bool");
      if (!is_empty_dict(a[5])) fail("_rebuild_tensor_v2: backward hooks are not supported");
      if (a.size() == 7 && a[6]->kind != Object::Kind::None && !is_empty_dict(a[6])) {
        fail("_rebuild_tensor_v2: tensor metadata is not supported");
      }
      auto t = make(Object::Kind::Tensor);
      t->tensor.storage = a[0]->storage;
      t->tensor.storage_offset = a[1]->integer;
      t->tensor.size = int_tuple(a[2], "size");
      t->tensor.stride = int_tuple(a[3], "stride");
      if (t->tensor.size.size() != t->tensor.stride.size()) fail("_rebuild_tensor_v2: size and stride differ in length");
      return t;
    }
    if (callable->text == "torch._utils._rebuild_parameter") {
      // An nn.Parameter is its tensor here: (tensor, requires_grad, backward_hooks).
      if (a.size() != 3 || a[0]->kind != Object::Kind::Tensor || a[1]->kind != Object::Kind::Bool || !is_empty_dict(a[2])) {
        fail("_rebuild_parameter takes (tensor, requires_grad, no backward hooks)");
      }
      return a[0];
    }
    fail("REDUCE of " + callable->text + " is not allowed (it is only a storage type); refused, nothing was executed");
  }

  // BUILD sets an object's state. torch.save's only use: an OrderedDict state_dict's attributes
  // ({'_metadata': ...}), which carry nothing the tensors need and are dropped.
  void build() {
    Ref state = pop("BUILD state");
    const Ref& target = top("BUILD target");
    if (!(target->kind == Object::Kind::Dict && target->ordered_dict) || state->kind != Object::Kind::Dict) {
      fail(std::string("BUILD of ") + kind_name(target->kind) + " with " + kind_name(state->kind) +
           " is outside what torch.save writes (only an OrderedDict's attribute dict)");
    }
    adopt(state);
  }

  Ref stop() {
    if (!marks_.empty()) fail("STOP with an unclosed MARK");
    if (stack_.size() != 1) fail("STOP with " + std::to_string(stack_.size()) + " objects on the stack, not one");
    if (r_.remaining() != 0) fail(std::to_string(r_.remaining()) + " bytes follow STOP");
    return stack_.back();
  }

  ByteReader r_;
  size_t op_at_ = 0;
  std::vector<Ref> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint32_t, Ref> memo_;
};

}  // namespace detail

// The {name: tensor} a torch.save'd state dict holds, in the file's order. `source` names the
// pickle in errors (e.g. "model.pth (archive/data.pkl)").
inline std::vector<std::pair<std::string, TensorRecord>> parse_state_dict(std::span<const std::byte> data,
                                                                          const std::string& source) {
  using detail::Object;
  detail::Ref root = detail::Machine(data, source).run();
  if (root->kind != Object::Kind::Dict) {
    throw Error(source + ": the pickle holds " + detail::kind_name(root->kind) + ", not a state dict");
  }
  std::vector<std::pair<std::string, TensorRecord>> out;
  for (const auto& [key, value] : root->entries) {
    if (key->kind != Object::Kind::String) throw Error(source + ": a state dict key is " + detail::kind_name(key->kind) + ", not a string");
    if (value->kind != Object::Kind::Tensor) {
      throw Error(source + ": \"" + key->text + "\" is " + detail::kind_name(value->kind) +
                  ", not a tensor (a training checkpoint rather than a state dict?)");
    }
    out.emplace_back(key->text, value->tensor);
  }
  return out;
}

}  // namespace minimind::io::pickle
