// outboard._bench: the native loops behind `outboard bench` (bench/native),
// kept out of outboard._core. They take _core's objects (the modules share
// nanobind's type registry and one liboutboard); the GIL is released while
// they run.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>
#include <nanobind/stl/function.h>

#include <functional>

#include "bench/native/loops.h"
#include "common.h"
#include "outboard/channel.h"
#include "outboard/tokenize_client.h"
#include "outboard/tokenizer.h"

namespace nb = nanobind;
using namespace nb::literals;

NB_MODULE(_bench, m) {
  using namespace outboard;
  m.doc() = "Private extension of the outboard package: benchmark loops.";
  register_status_errors();
  const bench::Interrupt interrupt = [] {
    check_signals();
    return Status{};
  };
  // A latency loop run without the GIL: (samples in µs, mismatches).
  const auto samples = [](const auto& run) {
    decltype(run()) r = Status{};
    {
      nb::gil_scoped_release release;
      r = run();
    }
    auto v = unwrap(std::move(r));
    return nb::make_tuple(to_numpy(std::move(v.samples_us)), v.mismatches);
  };
  m.def("bench_round_trips",
        [interrupt, samples](Connection& c, size_t size, size_t iterations, size_t warmup, double timeout) {
          return samples([&] { return bench::round_trips(c, size, iterations, warmup, timeout, interrupt); });
        },
        "connection"_a, "size"_a, "iterations"_a, "warmup"_a, "timeout"_a,
        "Round trips to `echo`: (samples in µs, mismatched responses).");
  m.def("bench_stream",
        [interrupt](Connection& c, size_t size, uint64_t count, bool reuse_payload, double timeout) {
          Result<bench::Stream> r = Status{};
          {
            nb::gil_scoped_release release;
            r = bench::stream(c, size, count, reuse_payload, timeout, interrupt);
          }
          bench::Stream s = unwrap(std::move(r));
          nb::dict d;
          d["seconds"] = s.seconds;
          d["messages"] = s.messages;
          d["bytes"] = s.bytes;
          d["verified"] = s.verified;
          return d;
        },
        "connection"_a, "size"_a, "count"_a, "reuse_payload"_a, "timeout"_a,
        "One-way messages to `sink`, verified by its tally.");
  m.def("bench_session",
        [](const std::string& address, size_t size, uint64_t count, double timeout) {
          Result<bench::Session> r = Status{};
          {
            nb::gil_scoped_release release;
            r = bench::session(address, size, count, timeout);
          }
          bench::Session s = unwrap(std::move(r));
          nb::dict d;
          d["connect_us"] = s.connect_us;
          d["stream_us"] = s.stream_us;
          d["verified"] = s.verified;
          return d;
        },
        "address"_a, "size"_a, "count"_a, "timeout"_a, "Connect, stream `count` messages to `sink`, close.");
  m.def("bench_one_sided_bandwidth",
        [interrupt](std::vector<Connection*> conns, bool put, size_t size, size_t ops, size_t iterations,
                    size_t warmup, bool reuse_buffer, double timeout, bool gpu_target) {
          Result<bench::OneSidedBandwidth> r = Status{};
          {
            nb::gil_scoped_release release;
            r = bench::one_sided_bandwidth(conns, put, size, ops, iterations, warmup, reuse_buffer,
                                           gpu_target ? MemoryKind::kCuda : MemoryKind::kHost, timeout, interrupt);
          }
          bench::OneSidedBandwidth b = unwrap(std::move(r));
          nb::dict d;
          d["iteration_us"] = to_numpy(std::move(b.iteration_us));
          d["ops"] = b.ops;
          d["bytes"] = b.bytes;
          d["verified"] = b.verified;
          return d;
        },
        "connections"_a, "put"_a, "size"_a, "ops"_a, "iterations"_a, "warmup"_a, "reuse_buffer"_a, "timeout"_a,
        "gpu_target"_a = false,
        "perftest-shaped put/get bandwidth into the agent's memory service regions, verified; gpu_target: "
        "puts into agent regions in GPU memory (needs a CUDA device and a CUDA-enabled UCX on the agent).");
  m.def("bench_posted_writes",
        [](Connection& c, bool gpu, size_t size, size_t ops, size_t iterations, size_t warmup, double timeout) {
          Result<bench::PostedWrites> r = Status{};
          {
            nb::gil_scoped_release release;
            r = bench::posted_writes(c, gpu, size, ops, iterations, warmup, timeout);
          }
          bench::PostedWrites w = unwrap(std::move(r));
          nb::dict d;
          d["wall_ns"] = w.wall_ns;
          d["kernel_ns"] = w.kernel_ns;
          d["ops"] = w.ops;
          d["bytes"] = w.bytes;
          d["verified"] = w.verified;
          return d;
        },
        "connection"_a, "gpu"_a, "size"_a, "ops"_a, "iterations"_a, "warmup"_a, "timeout"_a,
        "GPUNetIO's experiment on one host: perftest-shaped stores into the agent's mapped region, each "
        "iteration signalled in a word the agent polls; gpu: by a CUDA kernel, else by this thread.");
  m.def("bench_one_sided_latency",
        [interrupt, samples](Connection& c, bool notify, size_t size, size_t iterations, size_t warmup,
                             double timeout) {
          return samples(
              [&] { return bench::one_sided_latency(c, notify, size, iterations, warmup, timeout, interrupt); });
        },
        "connection"_a, "notify"_a, "size"_a, "iterations"_a, "warmup"_a, "timeout"_a,
        "Get round trips, or write-with-notify answered by the agent: (samples in µs, mismatches).");

  m.def("bench_signal_ping_pong",
        [interrupt, samples](Connection& c, size_t size, size_t iterations, size_t warmup, double timeout) {
          return samples([&] { return bench::signal_ping_pong(c, size, iterations, warmup, timeout, interrupt); });
        },
        "connection"_a, "size"_a, "iterations"_a, "warmup"_a, "timeout"_a,
        "put_signal ping-pongs mirrored by the agent polling memory: (round trips in µs, mismatches).");

  // Runs an open loop without the GIL; its figures as a dict of arrays and numbers.
  const auto open_loop = [](const std::function<Result<bench::OpenLoop>()>& run) {
    Result<bench::OpenLoop> r = Status{};
    {
      nb::gil_scoped_release release;
      r = run();
    }
    bench::OpenLoop v = unwrap(std::move(r));
    nb::dict d;
    d["latency_us"] = to_numpy(std::move(v.latency_us));
    d["checksums"] = to_numpy(std::move(v.checksums));
    d["failed"] = v.failed;
    d["wall_s"] = v.wall_s;
    d["cpu_s"] = v.cpu_s;
    d["submit_cpu_s"] = v.submit_cpu_s;
    d["completion_cpu_s"] = v.completion_cpu_s;
    d["wait_cpu_s"] = v.wait_cpu_s;
    return d;
  };
  m.def("bench_core_to_core",
        [](int core_a, int core_b, size_t batches, size_t round_trips, double timeout) {
          Result<bench::CoreToCore> r = Status{};
          {
            nb::gil_scoped_release release;
            r = bench::core_to_core(core_a, core_b, batches, round_trips, timeout);
          }
          return to_numpy(unwrap(std::move(r)).one_way_ns);
        },
        "core_a"_a, "core_b"_a, "batches"_a, "round_trips"_a, "timeout"_a,
        "One-way ns per batch of cache-line round trips between threads pinned to the two cores.");
  m.def("bench_open_loop_arrivals",
        [open_loop](std::vector<double> arrivals) {
          return open_loop([&]() -> Result<bench::OpenLoop> { return bench::open_loop_arrivals(arrivals); });
        },
        "arrivals"_a, "The load generator alone: wakes at each arrival (s from the start), hands on nothing.");
  m.def("bench_open_loop_host",
        [open_loop](const Tokenizer& tok, nb::list texts, std::vector<double> arrivals, unsigned threads,
                    double timeout) {
          std::vector<std::string_view> views = text_views(texts);
          return open_loop([&] { return bench::open_loop_host(tok, views, arrivals, threads, timeout); });
        },
        "tokenizer"_a, "texts"_a, "arrivals"_a, "threads"_a, "timeout"_a,
        "Open loop, each text tokenized in this process on `threads` native threads.");
  m.def("bench_open_loop_agent",
        [open_loop](Connection& c, RemoteTokenizer& tok, nb::list texts, std::vector<double> arrivals,
                    double timeout, bool time_phases) {
          std::vector<std::string_view> views = text_views(texts);
          return open_loop([&] { return bench::open_loop_agent(c, tok, views, arrivals, timeout, time_phases); });
        },
        "connection"_a, "tokenizer"_a, "texts"_a, "arrivals"_a, "timeout"_a, "time_phases"_a = false,
        "Open loop, each text submitted natively to the agent; time_phases: the CPU of submit, wait and "
        "completion too (four thread-clock reads a request).");


  nb::class_<bench::ArrivalTimer>(m, "ArrivalTimer")
      .def("__init__", [](bench::ArrivalTimer* t) { new (t) bench::ArrivalTimer(unwrap(bench::ArrivalTimer::create())); })
      .def_prop_ro("fd", &bench::ArrivalTimer::fd)
      .def("set", [](bench::ArrivalTimer& t, uint64_t ns) { check(t.set(ns)); }, "monotonic_ns"_a,
           "Readable from time.monotonic_ns() == monotonic_ns on.")
      .def("clear", &bench::ArrivalTimer::clear);

}
