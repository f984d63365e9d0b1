// outboard._core: converts types and releases the GIL; no logic lives here.
// One file per area (channel.cpp, checkpoint.cpp, tokenizer.cpp, graph.cpp); the benchmark
// loops are another module's (bench.cpp: outboard._bench).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include "common.h"
#include "outboard/channel.h"
#include "outboard/checksum.h"
#include "outboard/version.h"
#include "outboard/log.h"
#include "outboard/stats.h"

namespace nb = nanobind;
using namespace nb::literals;

NB_MODULE(_core, m) {
  using namespace outboard;
  m.doc() = "Private extension of the outboard package; use the public API in outboard.";
  register_status_errors();
  bind_channel(m);
  bind_checkpoint(m);
  bind_tokenizer(m);
  bind_graph(m);

  m.def("set_log_level", [](const std::string& level) { log::set_level(unwrap(log::parse_level(level))); },
        "level"_a);
  m.def("version", &version);
  m.def("transport_version", &transport_version);
  m.def("transport_carries_gpu_memory", &transport_carries_gpu_memory);
  m.def("seal_engine", &seal_engine);
  m.def("code_name", [](int code) { return std::string(code_name(static_cast<Code>(code))); });
  m.def("summarize",
        [](std::vector<double> samples) {
          stats::Summary s = stats::summarize(std::move(samples));
          nb::dict d;
          d["count"] = s.count;
          d["min"] = s.min;
          d["p50"] = s.p50;
          d["p90"] = s.p90;
          d["p99"] = s.p99;
          d["p999"] = s.p999;
          d["max"] = s.max;
          return d;
        },
        "samples"_a, "Nearest-rank order statistics (outboard::stats::summarize).");
  m.def("checksum", [](nb::bytes data) { return checksum(view(data)); }, "data"_a);
  m.def(
      "checksum",
      [](nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu> a) {
        return checksum({static_cast<const uint8_t*>(a.data()), a.nbytes()});
      },
      "array"_a, "checksum() of a contiguous array's bytes, read in place (the ids of a batch, say).");
  m.def("pattern", [](size_t size, uint64_t seed) {
    Buffer b(size);
    fill_pattern(b.span(), seed);
    return to_bytes(b);
  }, "size"_a, "seed"_a);
}
