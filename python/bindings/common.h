// What every binding file shares: Status -> Python exception, deadlines.
#pragma once

#include <nanobind/nanobind.h>

#include <algorithm>
#include <chrono>

#include "outboard/clock.h"
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

/// Defined in graph.cpp.
void bind_graph(nb::module_& m);

}  // namespace outboard
