// outboard._core StateWalker: the walk of a training state that each checkpoint save makes
// (outboard.checkpoint.flatten). Done in Python it cost ~9 µs per tensor (calls, small objects, then
// json.dumps of the tree): 1.7 ms of ResNet-20's snapshot, whose bytes copy in 0.4 ms; here what is
// left is mostly torch's own attribute reads (~0.5 ms for its 193 tensors).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>
#include <nanobind/stl/string.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>

#include "common.h"
#include "outboard/channel.h"

namespace outboard {
namespace {

using namespace nb::literals;
using ByteArray = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// An in-band save's pieces: half the agent's largest (checkpoint_wire::kMaxPieceBytes), and at most
// this many in flight: with the save's own request, and another of the connection's (a List), they
// fit the 4 requests the agent queues per connection (a piece over them would end the save).
constexpr uint64_t kInBandPieceBytes = 4ull << 20;
constexpr int kInBandWindow = 2;

// An in-band save (services/checkpoint_wire.h) for a link where the agent cannot read the staging
// (TLS): the save request, then the tensors' bytes from `staging`, back to back in pieces, each a
// request of `prefix` (version, kind, handle, step), its u64 offset and the bytes. The save's answer,
// which comes once the agent wrote the last; the first error otherwise (the save's, which names why,
// over a piece's).
nb::bytes save_in_band(Connection& c, nb::bytes save, nb::bytes prefix, ByteArray staging,
                       const std::vector<uint64_t>& offsets, const std::vector<uint64_t>& sizes, double timeout) {
  if (offsets.size() != sizes.size())
    raise(Status(Code::kInvalidArgument, "save_in_band: " + std::to_string(offsets.size()) + " offsets, " +
                                             std::to_string(sizes.size()) + " sizes"));
  const uint8_t* base = staging.data();
  const uint64_t size = staging.shape(0);
  for (size_t i = 0; i < offsets.size(); ++i)
    if (offsets[i] > size || sizes[i] > size - offsets[i])
      raise(Status(Code::kInvalidArgument, "save_in_band: tensor " + std::to_string(i) + " (" +
                                               std::to_string(sizes[i]) + " B at " + std::to_string(offsets[i]) +
                                               ") ends past the staging's " + std::to_string(size) + " B"));
  // Written by the callbacks (inside progress, on whichever thread progresses), read here.
  struct State {
    std::mutex mu;
    int in_flight = 0;
    bool answered = false;
    Result<Buffer> answer = Status(Code::kTimedOut, "no answer");
    Status failed;  // the first piece that failed
    bool stopped() const { return answered || !failed.ok(); }
  };
  auto state = std::make_shared<State>();
  const std::span<const uint8_t> head = view(prefix);
  const Deadline deadline = deadline_in(timeout);
  nb::gil_scoped_release release;
  check(c.submit("checkpoint", Buffer::copy_of(view(save)), deadline, [state](Result<Buffer> r) {
    std::lock_guard lock(state->mu);
    state->answer = std::move(r);
    state->answered = true;
  }, Connection::Credit::kWait));
  uint64_t at = 0;  // in the tensors' bytes
  size_t tensor = 0;
  uint64_t done = 0;  // of that tensor
  while (true) {
    while (tensor < sizes.size() && done == sizes[tensor]) ++tensor, done = 0;
    if (tensor == sizes.size()) break;
    if (!c.wait_until(deadline, [&] {
          std::lock_guard lock(state->mu);
          return state->in_flight < kInBandWindow || state->stopped();
        }))
      raise(Status(Code::kTimedOut, "checkpoint: the agent took no piece within the save's timeout"));
    {
      std::lock_guard lock(state->mu);
      if (state->stopped()) break;  // the save failed: its answer says why
      ++state->in_flight;
    }
    uint64_t n = 0;  // this piece's bytes, gathered across tensors
    for (size_t t = tensor; t < sizes.size() && n < kInBandPieceBytes; ++t) n += sizes[t] - (t == tensor ? done : 0);
    n = std::min(n, kInBandPieceBytes);
    Buffer piece(head.size() + 8 + n);
    std::memcpy(piece.data(), head.data(), head.size());
    std::memcpy(piece.data() + head.size(), &at, 8);
    for (uint64_t filled = 0; filled < n;) {
      while (done == sizes[tensor]) ++tensor, done = 0;
      const uint64_t take = std::min(n - filled, sizes[tensor] - done);
      std::memcpy(piece.data() + head.size() + 8 + filled, base + offsets[tensor] + done, take);
      filled += take, done += take;
    }
    at += n;
    check(c.submit("checkpoint", std::move(piece), deadline, [state](Result<Buffer> r) {
      std::lock_guard lock(state->mu);
      --state->in_flight;
      if (!r.ok() && state->failed.ok()) state->failed = r.status();
    }, Connection::Credit::kWait));
  }
  if (!c.wait_until(deadline, [&] {
        std::lock_guard lock(state->mu);
        return state->answered && state->in_flight == 0;
      }))
    raise(Status(Code::kTimedOut, "checkpoint: the save was not answered within its timeout"));
  Result<Buffer> answer = [&]() -> Result<Buffer> {
    std::lock_guard lock(state->mu);
    if (state->answer.ok() && !state->failed.ok()) return state->failed;
    return std::move(state->answer);
  }();
  nb::gil_scoped_acquire gil;
  return to_bytes(unwrap(std::move(answer)));
}

// Containers nested deeper than this are refused (a state that holds itself would recurse forever).
constexpr int kMaxStateDepth = 256;

// One tensor or array of the state: where the snapshot copies it from, and its part of the request.
struct Leaf {
  std::string name;  // its path in the state, e.g. "model.fc.weight"
  nb::object value;  // the tensor or array
  uint8_t code = 0;  // wire dtype (services/checkpoint_wire.h)
  nb::tuple shape;
  uint64_t nbytes = 0;
  // What Region.gather copies from: the array, or a CPU tensor's (address, bytes); None: the value needs
  // numpy or torch to copy it (strided, byte-swapped, on a GPU).
  nb::object source;
};

// The Python types and dtype tables a walk recognizes, and the attribute names it reads, made once rather
// than per save.
struct StateWalker {
  nb::object ndarray, generic, tensor;  // tensor: none until the process imported torch
  nb::object asarray, mapping;
  nb::dict numpy_codes, torch_codes;
  nb::object strided;
  nb::object b2a_base64 = nb::module_::import_("binascii").attr("b2a_base64");
  static nb::str name(const char* s) { return nb::steal<nb::str>(PyUnicode_InternFromString(s)); }
  nb::str dtype = name("dtype"), layout = name("layout"), nbytes = name("nbytes"), is_cpu = name("is_cpu"),
          is_contiguous = name("is_contiguous"), is_neg = name("is_neg"), data_ptr = name("data_ptr"),
          shape = name("shape"), device = name("device"), isnative = name("isnative"), flags = name("flags"),
          c_contiguous = name("c_contiguous");
};

// One walk: the leaves, the plan key (names, dtypes, shapes: equal keys stage alike) and the JSON tree, where
// each tensor is {"tensor": name}.
class Walk {
 public:
  explicit Walk(const StateWalker& w) : w_(w) {}

  nb::tuple run(nb::handle state) {
    std::string path;
    node(state, path, 0);
    return nb::make_tuple(leaves_, nb::bytes(key_.data(), key_.size()), nb::bytes(json_.data(), json_.size()));
  }

 private:
  [[noreturn]] static void refuse(const std::string& path, const std::string& what) {
    raise(Status(Code::kInvalidArgument,
                 "state item " + std::string(nb::repr(nb::str(path.data(), path.size())).c_str()) + ": " + what));
  }

  bool is_a(nb::handle x, nb::handle type) const {  // a subclass check: no __instancecheck__ to call
    return type.is_valid() && PyObject_TypeCheck(x.ptr(), reinterpret_cast<PyTypeObject*>(type.ptr()));
  }

  void node(nb::handle x, std::string& path, int depth) {
    PyObject* p = x.ptr();
    if (is_a(x, w_.tensor)) return torch_leaf(x, path);
    if (is_a(x, w_.ndarray) || is_a(x, w_.generic)) return numpy_leaf(x, path);
    if (PyFloat_Check(p) && !std::isfinite(PyFloat_AsDouble(p))) {  // JSON has no NaN or inf
      const double v = PyFloat_AsDouble(p);
      json_ += std::isnan(v) ? "{\"float\":\"nan\"}" : v > 0 ? "{\"float\":\"inf\"}" : "{\"float\":\"-inf\"}";
      return;
    }
    if (x.is_none() || PyUnicode_Check(p) || PyLong_Check(p) || PyFloat_Check(p)) {
      json_ += "{\"v\":";
      scalar(x, path);
      json_ += '}';
      return;
    }
    if (PyBytes_Check(p) || PyByteArray_Check(p)) {
      nb::bytes b64 = nb::borrow<nb::bytes>(w_.b2a_base64(x, "newline"_a = false));
      (json_ += "{\"bytes\":\"").append(b64.c_str(), b64.size()) += "\"}";
      return;
    }
    if (PyDict_Check(p) || PyList_Check(p) || PyTuple_Check(p) || nb::isinstance(x, w_.mapping)) {
      if (depth == kMaxStateDepth) refuse(path, "nested deeper than " + std::to_string(kMaxStateDepth) + " containers");
      return container(x, path, depth + 1);
    }
    refuse(path, "a " + std::string(nb::type_name(x.type()).c_str()) +
                     " is not a tensor, array, dict, list, tuple or scalar");
  }

  void container(nb::handle x, std::string& path, int depth) {
    const size_t base = path.size();
    if (!path.empty()) path += '.';
    const size_t prefix = path.size();
    const bool sequence = PyList_Check(x.ptr()) || PyTuple_Check(x.ptr());
    json_ += sequence ? (PyList_Check(x.ptr()) ? "{\"list\":[" : "{\"tuple\":[") : "{\"dict\":[";
    if (sequence) {
      // Indexed while in range and each item held: the walk calls Python code, which may change a list.
      for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(x.ptr()); ++i) {
        if (i) json_ += ',';
        path.resize(prefix);
        path += std::to_string(i);
        node(nb::borrow(PySequence_Fast_GET_ITEM(x.ptr(), i)), path, depth);
      }
    } else if (PyDict_CheckExact(x.ptr())) {  // others (OrderedDict) may order their items otherwise
      const Py_ssize_t size = PyDict_GET_SIZE(x.ptr());
      PyObject *k = nullptr, *v = nullptr;
      for (Py_ssize_t at = 0; PyDict_Next(x.ptr(), &at, &k, &v);) {
        if (PyDict_GET_SIZE(x.ptr()) != size) refuse(path.substr(0, base), "a dict changed size during the save");
        pair(nb::borrow(k), nb::borrow(v), path, base, prefix, depth);
      }
    } else {
      nb::list items(x.attr("items")());
      for (nb::handle item : items) pair(item[0], item[1], path, base, prefix, depth);
    }
    json_ += "]}";
    path.resize(base);
  }

  // One [key, value] of a dict, both held while the walk goes below them.
  void pair(nb::object k, nb::object v, std::string& path, size_t base, size_t prefix, int depth) {
    if (!(k.is_none() || PyUnicode_Check(k.ptr()) || PyLong_Check(k.ptr()))) {
      path.resize(base);
      refuse(path, "key " + std::string(nb::repr(k).c_str()) + " is not str, int, bool or None");
    }
    if (json_.back() != '[') json_ += ',';
    json_ += '[';
    scalar(k, path);
    json_ += ',';
    path.resize(prefix);
    path += PyUnicode_Check(k.ptr()) ? utf8(k, path) : std::string_view(nb::str(k).c_str());
    node(v, path, depth);
    json_ += ']';
  }

  // A JSON null, bool, int, finite float or string.
  void scalar(nb::handle x, const std::string& path) {
    if (x.is_none()) {
      json_ += "null";
    } else if (PyBool_Check(x.ptr())) {
      json_ += x.ptr() == Py_True ? "true" : "false";
    } else if (PyUnicode_Check(x.ptr())) {
      quoted(utf8(x, path));
    } else if (PyLong_Check(x.ptr())) {
      int overflow = 0;
      const long long v = PyLong_AsLongLongAndOverflow(x.ptr(), &overflow);
      if (!overflow) {
        json_ += std::to_string(v);
      } else if (const unsigned long long u = PyLong_AsUnsignedLongLong(x.ptr()); !PyErr_Occurred()) {
        json_ += std::to_string(u);
      } else {  // JSON readers (the agent's among them) would make it a float
        PyErr_Clear();
        refuse(path, "an int of " + std::string(nb::str(x.attr("bit_length")()).c_str()) +
                         " bits is outside the 64-bit range a checkpoint keeps exactly");
      }
    } else {
      char buf[32];
      const auto r = std::to_chars(buf, buf + sizeof buf, PyFloat_AsDouble(x.ptr()));  // shortest round trip
      json_.append(buf, r.ptr);
      if (std::strpbrk(json_.c_str() + json_.size() - (r.ptr - buf), ".e") == nullptr) json_ += ".0";  // stays a float
    }
  }

  // A str's UTF-8, valid while the str lives.
  static std::string_view utf8(nb::handle s, const std::string& path) {
    Py_ssize_t n = 0;
    const char* p = PyUnicode_AsUTF8AndSize(s.ptr(), &n);
    if (p == nullptr) {
      PyErr_Clear();
      refuse(path, "a str that is not valid Unicode (a lone surrogate)");
    }
    return {p, static_cast<size_t>(n)};
  }

  void quoted(std::string_view text) {
    json_ += '"';
    size_t plain = 0;  // text[plain, i) needs no escape
    for (size_t i = 0; i < text.size(); ++i) {
      const auto c = static_cast<unsigned char>(text[i]);
      if (c != '"' && c != '\\' && c >= 0x20) continue;
      json_.append(text.substr(plain, i - plain));
      plain = i + 1;
      static constexpr char kHex[] = "0123456789abcdef";
      if (c == '"' || c == '\\') {
        (json_ += '\\') += static_cast<char>(c);
      } else {
        ((json_ += "\\u00") += kHex[c >> 4]) += kHex[c & 15];
      }
    }
    json_.append(text.substr(plain));
    json_ += '"';
  }

  static nb::object get(nb::handle x, const nb::str& name) {
    return nb::steal(raise_if_null(PyObject_GetAttr(x.ptr(), name.ptr())));
  }
  static nb::object call(nb::handle x, const nb::str& method) {
    return nb::steal(raise_if_null(PyObject_CallMethodNoArgs(x.ptr(), method.ptr())));
  }
  static PyObject* raise_if_null(PyObject* o) {
    if (o == nullptr) throw nb::python_error();
    return o;
  }
  static int code_of(const nb::dict& codes, nb::handle dtype) {  // -1: none
    PyObject* code = PyDict_GetItemWithError(codes.ptr(), dtype.ptr());
    if (code == nullptr && PyErr_Occurred()) throw nb::python_error();
    return code == nullptr ? -1 : nb::cast<int>(nb::handle(code));
  }

  void torch_leaf(nb::handle x, const std::string& path) {
    nb::object dtype = get(x, w_.dtype);
    const int code = code_of(w_.torch_codes, dtype);
    if (code < 0)
      refuse(path, "torch dtype " + std::string(nb::str(dtype).c_str()) + " has no safetensors counterpart");
    nb::object layout = get(x, w_.layout);
    if (!layout.is(w_.strided))
      refuse(path, "a " + std::string(nb::str(layout).c_str()) + " tensor (only dense ones are saved)");
    const auto nbytes = nb::cast<uint64_t>(get(x, w_.nbytes));
    nb::object source = nb::none();
    std::string device = "cpu";
    if (get(x, w_.is_cpu).is(Py_True)) {  // conj bits exist only for complex dtypes, which have no code
      if (call(x, w_.is_contiguous).is(Py_True) && call(x, w_.is_neg).is(Py_False))
        source = nb::make_tuple(call(x, w_.data_ptr), nbytes);
    } else {
      device = nb::str(get(x, w_.device)).c_str();
    }
    json_ += "{\"tensor\":";
    leaf(x, path, static_cast<uint8_t>(code), get(x, w_.shape), nbytes, std::move(source));
    json_ += ",\"torch\":";
    quoted(device);
    json_ += '}';
  }

  void numpy_leaf(nb::handle x, const std::string& path) {
    const bool scalar = PyObject_TypeCheck(x.ptr(), reinterpret_cast<PyTypeObject*>(w_.generic.ptr()));
    nb::object a = scalar ? w_.asarray(x) : nb::borrow(x);
    nb::object dtype = get(a, w_.dtype);
    const bool native = get(dtype, w_.isnative).is(Py_True);
    const int code = code_of(w_.numpy_codes, native ? dtype : dtype.attr("newbyteorder")("="));
    if (code < 0)
      refuse(path, "numpy dtype " + std::string(nb::str(dtype).c_str()) + " has no safetensors counterpart");
    nb::object source = native && get(get(a, w_.flags), w_.c_contiguous).is(Py_True) ? a : nb::none();
    json_ += "{\"tensor\":";
    leaf(a, path, static_cast<uint8_t>(code), get(a, w_.shape), nb::cast<uint64_t>(get(a, w_.nbytes)),
         std::move(source));
    if (scalar) json_ += ",\"scalar\":true";
    json_ += '}';
  }

  // Records a leaf under a name no other leaf has ("tensor" for a bare one; "#1", "#2"… after a name taken,
  // as "a.b" by a nested key and by a key "a.b"), and writes the name.
  void leaf(nb::handle value, const std::string& path, uint8_t code, nb::object shape, uint64_t nbytes,
            nb::object source) {
    if (!PyTuple_Check(shape.ptr()) || PyTuple_GET_SIZE(shape.ptr()) > UINT8_MAX)
      refuse(path, "shape " + std::string(nb::repr(shape).c_str()) + " is not a tuple of at most 255 sizes");
    std::string name = path.empty() ? "tensor" : path;
    for (int n = 1; names_.count(name); ++n) name = (path.empty() ? "tensor" : path) + "#" + std::to_string(n);
    names_.insert(name);
    quoted(name);
    const auto length = static_cast<uint32_t>(name.size());
    key_.append(reinterpret_cast<const char*>(&length), sizeof length).append(name);
    key_ += static_cast<char>(code);
    key_ += static_cast<char>(PyTuple_GET_SIZE(shape.ptr()));
    for (nb::handle d : nb::borrow<nb::tuple>(shape)) {
      uint64_t v = 0;
      if (!nb::try_cast(d, v))
        refuse(path, "shape " + std::string(nb::repr(shape).c_str()) + " holds something that is not a size");
      key_.append(reinterpret_cast<const char*>(&v), sizeof v);
    }
    leaves_.append(
        Leaf{std::move(name), nb::borrow(value), code, nb::borrow<nb::tuple>(shape), nbytes, std::move(source)});
  }

  const StateWalker& w_;
  nb::list leaves_;
  std::unordered_set<std::string> names_;
  std::string key_, json_;
};

}  // namespace

void bind_checkpoint(nb::module_& m) {
  nb::class_<Leaf>(m, "StateLeaf")
      .def_ro("name", &Leaf::name)
      .def_ro("value", &Leaf::value)
      .def_ro("code", &Leaf::code)
      .def_ro("shape", &Leaf::shape)
      .def_ro("nbytes", &Leaf::nbytes)
      .def_ro("source", &Leaf::source);
  nb::class_<StateWalker>(m, "StateWalker")
      .def(
          "__init__",
          [](StateWalker* w, nb::type_object ndarray, nb::type_object generic, nb::object asarray, nb::object mapping,
             nb::dict numpy_codes, std::optional<nb::type_object> tensor, nb::dict torch_codes, nb::object strided) {
            new (w) StateWalker{std::move(ndarray),     std::move(generic), tensor ? *tensor : nb::object(),
                                std::move(asarray),     std::move(mapping), std::move(numpy_codes),
                                std::move(torch_codes), std::move(strided)};
          },
          "ndarray"_a, "generic"_a, "asarray"_a, "mapping"_a, "numpy_codes"_a, "tensor"_a.none(), "torch_codes"_a,
          "strided"_a.none())
      .def(
          "walk", [](const StateWalker& w, nb::handle state) { return Walk(w).run(state); }, "state"_a,
          "(leaves, plan key, JSON tree) of a state: see outboard.checkpoint.flatten.");
  m.def("save_in_band", &save_in_band, "connection"_a, "save"_a, "prefix"_a, "staging"_a, "offsets"_a, "sizes"_a,
        "timeout"_a,
        "An in-band checkpoint save: the request, then the tensors' bytes (staging[offsets[i]:+sizes[i]], "
        "back to back) in pieces; the save's answer.");
}

}  // namespace outboard
