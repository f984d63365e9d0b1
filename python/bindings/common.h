// What every binding file shares: Status -> Python exception, deadlines,
// zero-copy conversions.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <algorithm>
#include <chrono>
#include <span>
#include <string_view>
#include <vector>

#include "outboard/buffer.h"
#include "outboard/clock.h"
#include "outboard/memory_kind.h"
#include "outboard/status.h"

namespace outboard {

namespace nb = nanobind;

// Carries a Status to the translator, which raises outboard.errors.<Class>.
struct StatusError {
  Status status;
};

[[noreturn]] inline void raise(const Status& st) { throw StatusError{st}; }
inline void check(const Status& st) {
  if (!st.ok()) raise(st);
}
template <typename T>
T unwrap(Result<T>&& r) {
  if (!r.ok()) raise(r.status());
  return std::move(r).value();
}

// Lets Ctrl-C interrupt long native loops that run without the GIL.
inline void check_signals() {
  nb::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw nb::python_error();
}

inline Deadline deadline_in(double seconds) {
  seconds = std::min(seconds, 1e9);  // "forever" (inf) without overflowing the clock
  return Deadline::after(std::chrono::nanoseconds(static_cast<int64_t>(seconds * 1e9)));
}

inline std::span<const uint8_t> view(const nb::bytes& b) {
  return {reinterpret_cast<const uint8_t*>(b.c_str()), b.size()};
}

inline nb::bytes to_bytes(const Buffer& b) { return nb::bytes(reinterpret_cast<const char*>(b.data()), b.size()); }

// Hands a vector to numpy without copying it.
template <typename T>
nb::ndarray<nb::numpy, T, nb::ndim<1>> to_numpy(std::vector<T>&& v) {
  auto* owned = new std::vector<T>(std::move(v));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T, nb::ndim<1>>(owned->data(), {owned->size()}, owner);
}

// Where an array's memory is, from its DLPack device type (ndarray::device_type()), as registration
// needs it: a GPU's own memory, or memory the CPU reaches (pinned host memory too); other devices are
// refused naming theirs.
MemoryKind memory_kind(int dlpack_device);

// str (as UTF-8) or bytes, viewed without copying.
std::string_view text_view(nb::handle h);
// Each text of a list (which keeps them alive) viewed.
std::vector<std::string_view> text_views(const nb::list& texts);

// Raises outboard.errors.<Class> for a StatusError; every extension module
// registers it.
void register_status_errors();

/// The areas of outboard._core, one file each.
void bind_channel(nb::module_& m);
void bind_checkpoint(nb::module_& m);
void bind_tokenizer(nb::module_& m);
void bind_graph(nb::module_& m);

}  // namespace outboard
