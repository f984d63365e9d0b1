// outboard._core: converts types and releases the GIL; no logic lives here.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <atomic>
#include <functional>
#include <mutex>
#include <thread>

#include "bench/native/loops.h"
#include "common.h"
#include "outboard/channel.h"
#include "outboard/checksum.h"
#include "outboard/log.h"
#include "outboard/stats.h"
#include "outboard/tokenize_client.h"
#include "outboard/tokenizer.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace outboard {
namespace {

std::span<const uint8_t> view(const nb::bytes& b) {
  return {reinterpret_cast<const uint8_t*>(b.c_str()), b.size()};
}

nb::bytes to_bytes(const Buffer& b) { return nb::bytes(reinterpret_cast<const char*>(b.data()), b.size()); }

using ByteArray = nb::ndarray<uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using IdArray = nb::ndarray<nb::numpy, int32_t, nb::ndim<1>>;
using IdInput = nb::ndarray<const int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// Hands a vector to numpy without copying it.
template <typename T>
nb::ndarray<nb::numpy, T, nb::ndim<1>> to_numpy(std::vector<T>&& v) {
  auto* owned = new std::vector<T>(std::move(v));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T, nb::ndim<1>>(owned->data(), {owned->size()}, owner);
}

// str (as UTF-8) or bytes, viewed without copying.
std::string_view text_view(nb::handle h) {
  if (PyBytes_Check(h.ptr())) return {PyBytes_AS_STRING(h.ptr()), static_cast<size_t>(PyBytes_GET_SIZE(h.ptr()))};
  if (PyUnicode_Check(h.ptr())) {
    Py_ssize_t n = 0;
    const char* s = PyUnicode_AsUTF8AndSize(h.ptr(), &n);
    if (!s) {
      PyErr_Clear();
      raise({Code::kInvalidArgument, "text is not encodable as UTF-8 (lone surrogate); pass bytes instead"});
    }
    return {s, static_cast<size_t>(n)};
  }
  raise({Code::kInvalidArgument, "text must be str or bytes"});
}

EncodeOptions encode_options(bool allow_special, bool ordinary, std::string_view utf8, bool add_special_tokens) {
  EncodeOptions o;
  o.allow_special = allow_special;
  o.ordinary = ordinary;
  o.add_special_tokens = add_special_tokens;
  if (utf8 == "replace") o.utf8 = Utf8Policy::kReplace;
  else if (utf8 != "strict") raise({Code::kInvalidArgument, "utf8 policy '" + std::string(utf8) + "' is not 'strict' or 'replace'"});
  return o;
}
using Float64Array = nb::ndarray<nb::numpy, double, nb::ndim<1>>;

// A registered region and, for user memory, the array that owns it.
struct PyRegion {
  Region region;
  nb::object owner;
};

std::vector<std::string_view> text_views(const nb::list& texts) {
  std::vector<std::string_view> views;
  views.reserve(texts.size());
  for (nb::handle h : texts) views.push_back(text_view(h));  // the list keeps them alive
  return views;
}

// Per text: None, or (code, message) for a text that failed.
nb::list errors_to_python(std::span<const Status> statuses) {
  nb::list errors;
  for (const Status& st : statuses)
    errors.append(st.ok() ? nb::object(nb::none()) : nb::object(nb::make_tuple(static_cast<int>(st.code()), st.message())));
  return errors;
}

// (ids viewing the registered buffer, offsets, per-text None or (code, message), agent timing).
nb::tuple batch_to_python(EncodedBatch b) {
  // The ids stay where the agent wrote them; the array holds the slots.
  auto* hold = new std::shared_ptr<const void>(b.keepalive());
  nb::capsule owner(hold, [](void* p) noexcept { delete static_cast<std::shared_ptr<const void>*>(p); });
  nb::ndarray<nb::numpy, const int32_t, nb::ndim<1>> ids(b.ids().data(), {b.ids().size()}, owner);
  nb::list errors = errors_to_python(b.errors());
  const AgentTiming& tm = b.timing();
  nb::dict timing;
  timing["queued_before"] = tm.queued_before;
  timing["queue_ns"] = tm.queue_ns;
  timing["tokenize_ns"] = tm.tokenize_ns;
  timing["cpu_ns"] = tm.cpu_ns;
  timing["put_ns"] = tm.put_ns;
  std::vector<uint64_t> offsets = b.offsets();
  return nb::make_tuple(ids, to_numpy(std::move(offsets)), errors, timing);
}

// Batches submitted without waiting, finished by whoever progresses the
// connection and collected here by token. Completion callbacks run under the
// connection's lock, so they only queue (into state they share, which outlives
// this object if it goes first): Python is touched in collect(), after the
// lock is let go.
class Completions {
 public:
  explicit Completions(Connection& c) : conn_(c), queue_(std::make_shared<Queue>()) {}

  void submit(RemoteTokenizer& t, uint64_t token, std::span<const std::string_view> texts, const OffloadOptions& o,
              Deadline deadline, Connection::Credit credit) {
    auto done = [q = queue_, token, &conn = conn_](Result<EncodedBatch> r) {
      {
        std::lock_guard lock(q->mu);
        q->done.emplace_back(token, std::move(r));
      }
      // Finished by another thread's progress: the collector may be asleep.
      if (std::this_thread::get_id() != q->collector.load(std::memory_order_relaxed)) conn.wake();
    };
    check(t.submit(texts, o, deadline, std::move(done), credit));
  }

  nb::list collect(double timeout) {
    {
      nb::gil_scoped_release release;
      queue_->collector.store(std::this_thread::get_id(), std::memory_order_relaxed);
      auto any = [q = queue_.get()] {
        std::lock_guard lock(q->mu);
        return !q->done.empty();
      };
      if (!any()) (void)conn_.wait_until(deadline_in(timeout), any);
    }
    return take();
  }

  // What an event loop calls once it has progressed the connection itself.
  nb::list take() {
    std::vector<std::pair<uint64_t, Result<EncodedBatch>>> ready;
    queue_->collector.store(std::this_thread::get_id(), std::memory_order_relaxed);
    {
      std::lock_guard lock(queue_->mu);
      ready.swap(queue_->done);
    }
    nb::list out;
    for (auto& [token, r] : ready) {
      const bool ok = r.ok();
      nb::object result = ok ? nb::object(batch_to_python(std::move(r).value()))
                             : nb::object(nb::make_tuple(static_cast<int>(r.status().code()), r.status().message()));
      out.append(nb::make_tuple(token, ok, result));
    }
    return out;
  }

 private:
  struct Queue {
    std::mutex mu;
    std::atomic<std::thread::id> collector;
    std::vector<std::pair<uint64_t, Result<EncodedBatch>>> done;
  };
  Connection& conn_;
  std::shared_ptr<Queue> queue_;
};

}  // namespace
}  // namespace outboard

NB_MODULE(_core, m) {
  using namespace outboard;
  m.doc() = "Private extension of the outboard package; use the public API in outboard.";
  bind_graph(m);

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const StatusError& e) {
      nb::object errors = nb::module_::import_("outboard.errors");
      // A message may quote a peer's bytes that are not UTF-8: escaped, the
      // error keeps its type (a UnicodeDecodeError would replace it).
      const std::string& text = e.status.message();
      nb::object message = nb::steal(PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()),
                                                           "backslashreplace"));
      nb::object exc = errors.attr("from_code")(static_cast<int>(e.status.code()), message);
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    }
  });

  m.def("set_log_level", [](const std::string& level) { log::set_level(unwrap(log::parse_level(level))); },
        "level"_a);
  m.def("transport_version", &transport_version);
  m.def("code_name", [](int code) { return std::string(code_name(static_cast<Code>(code))); });

  nb::class_<PyRegion>(m, "Region")
      .def_prop_ro("size", [](const PyRegion& r) { return r.region.size(); })
      .def_prop_ro("descriptor", [](const PyRegion& r) {
        auto d = r.region.descriptor();
        return nb::bytes(reinterpret_cast<const char*>(d.data()), d.size());
      })
      .def("array", [](PyRegion& r) {
        return nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(r.region.data(), {r.region.size()}, nb::find(&r));
      }, "A numpy view of the region (no copy).");

  nb::class_<RemoteRegion>(m, "RemoteRegion")
      .def_prop_ro("size", &RemoteRegion::size)
      .def_prop_ro("mapped", &RemoteRegion::mapped,
                   "True when the peer's region is mapped into this process: one-sided calls are CPU copies.");

  nb::class_<Connection>(m, "Connection")
      .def_static(
          "connect",
          [](const std::string& address, uint64_t max_msg_size, double connect_timeout, uint64_t keepalive_ms,
             uint32_t spin_us, bool map_peer_regions, uint32_t ring_slots, const std::string& session) {
            ChannelConfig cfg;
            cfg.session = session;
            cfg.map_peer_regions = map_peer_regions;
            cfg.ring_slots = ring_slots;
            cfg.max_msg_size = max_msg_size;
            cfg.connect_timeout_ms = static_cast<int64_t>(connect_timeout * 1000);
            cfg.keepalive_ms = keepalive_ms;
            cfg.spin_us = spin_us;
            nb::gil_scoped_release release;
            return unwrap(Connection::connect(address, cfg));
          },
          "address"_a, "max_msg_size"_a = ChannelConfig{}.max_msg_size, "connect_timeout"_a = 5.0,
          "keepalive_ms"_a = ChannelConfig{}.keepalive_ms, "spin_us"_a = ChannelConfig{}.spin_us,
          "map_peer_regions"_a = ChannelConfig{}.map_peer_regions, "ring_slots"_a = ChannelConfig{}.ring_slots,
          "session"_a = "")
      .def("request",
           [](Connection& c, std::string_view service, nb::bytes payload, double timeout) {
             Result<Buffer> r = [&] {
               nb::gil_scoped_release release;
               return c.request(service, view(payload), deadline_in(timeout));
             }();
             return to_bytes(unwrap(std::move(r)));
           },
           "service"_a, "payload"_a, "timeout"_a)
      .def("send",
           [](Connection& c, nb::bytes payload, std::string_view service, double timeout) {
             Status st;
             {
               nb::gil_scoped_release release;
               st = c.send(view(payload), deadline_in(timeout), service);
             }
             check(st);
           },
           "payload"_a, "service"_a, "timeout"_a)
      .def("receive",
           [](Connection& c, double timeout) {
             Result<Incoming> r = [&] {
               nb::gil_scoped_release release;
               return c.receive(deadline_in(timeout));
             }();
             Incoming in = unwrap(std::move(r));
             if (in.kind == Incoming::Kind::kNotify) return nb::make_tuple("notify", in.cookie, in.offset, in.length);
             return nb::make_tuple("message", to_bytes(in.data));
           },
           "timeout"_a)
      .def("progress", &Connection::progress, nb::call_guard<nb::gil_scoped_release>())
      .def("progress_until_idle", &Connection::progress_until_idle, "max_rounds"_a,
           nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("event_fd", &Connection::event_fd)
      .def("arm",
           [](Connection& c) {
             nb::gil_scoped_release release;  // arm() progresses first
             Status st = c.arm();
             if (st.code() == Code::kAgain) return false;
             check(st);
             return true;
           },
           "Arms event_fd; False when events are pending (call progress instead of waiting).")
      .def("submit",
           [](Connection& c, std::string_view service, nb::bytes payload, double timeout, nb::callable done) {
             // The callback runs inside progress() (GIL released there): take it back.
             auto fn = std::make_shared<nb::object>(done);
             check(c.submit(service, Buffer::copy_of(view(payload)), deadline_in(timeout),
                            [fn](Result<Buffer> r) {
                              nb::gil_scoped_acquire gil;
                              if (r.ok())
                                (*fn)(to_bytes(r.value()), nb::none());
                              else
                                (*fn)(nb::none(), nb::module_::import_("outboard.errors")
                                                      .attr("from_code")(static_cast<int>(r.status().code()),
                                                                         r.status().message()));
                              fn->reset();
                            }));
           },
           "service"_a, "payload"_a, "timeout"_a, "done"_a,
           "Asynchronous request: done(response, error) runs from progress(). Raises Again without credit.")
      .def("close", &Connection::close, nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("is_open", &Connection::is_open)
      .def_prop_ro("close_reason", [](const Connection& c) { return c.close_reason().to_string(); })
      .def_prop_ro("peer_max_msg_size", &Connection::peer_max_msg_size)
      .def_prop_ro("peer_services", &Connection::peer_services)
      .def_prop_ro("agent_info",
                   [](const Connection& c) {
                     nb::dict info;
                     for (const auto& [name, value] : c.agent_info()) info[name.c_str()] = value;
                     return info;
                   })
      .def_prop_ro("send_credits", &Connection::send_credits)
      .def_prop_ro("lanes", &Connection::lanes)
      .def("register_memory",
           [](Connection& c, ByteArray array) {
             auto r = c.register_memory(array.data(), array.size());
             return PyRegion{unwrap(std::move(r)), nb::cast(array)};
           },
           "array"_a, nb::keep_alive<0, 1>())
      .def("allocate_memory", [](Connection& c, size_t size) { return PyRegion{unwrap(c.allocate_memory(size)), {}}; },
           "size"_a)
      .def("import_region", [](Connection& c, nb::bytes d) { return unwrap(c.import_region(view(d))); }, "descriptor"_a)
      .def("put",
           [](Connection& c, const RemoteRegion& r, uint64_t offset, nb::bytes data, double timeout) {
             Status st;
             {
               nb::gil_scoped_release release;
               st = c.put(r, offset, view(data), deadline_in(timeout));
             }
             check(st);
           },
           "region"_a, "offset"_a, "data"_a, "timeout"_a)
      .def("get",
           [](Connection& c, const RemoteRegion& r, uint64_t offset, size_t size, double timeout) {
             Buffer out(size);
             Status st;
             {
               nb::gil_scoped_release release;
               st = c.get(r, offset, out.span(), deadline_in(timeout));
             }
             check(st);
             return to_bytes(out);
           },
           "region"_a, "offset"_a, "size"_a, "timeout"_a)
      .def("flush",
           [](Connection& c, double timeout) {
             Status st;
             {
               nb::gil_scoped_release release;
               st = c.flush(deadline_in(timeout));
             }
             check(st);
           },
           "timeout"_a)
      .def("put_notify",
           [](Connection& c, const RemoteRegion& r, uint64_t offset, nb::bytes data, uint64_t cookie, double timeout,
              std::string_view service) {
             Status st;
             {
               nb::gil_scoped_release release;
               st = c.put_notify(r, offset, view(data), cookie, deadline_in(timeout), service);
             }
             check(st);
           },
           "region"_a, "offset"_a, "data"_a, "cookie"_a, "timeout"_a, "service"_a = "")
      .def("put_signal",
           [](Connection& c, const RemoteRegion& r, uint64_t offset, nb::bytes data, uint64_t signal_offset,
              uint64_t signal, double timeout) {
             Status st;
             {
               nb::gil_scoped_release release;
               st = c.put_signal(r, offset, view(data), signal_offset, signal, deadline_in(timeout));
             }
             check(st);
           },
           "region"_a, "offset"_a, "data"_a, "signal_offset"_a, "signal"_a, "timeout"_a,
           "Put, then the 8-byte signal, ordered: a peer polling the signal word sees the data.")
      .def("wait_signal",
           [](Connection& c, const PyRegion& r, uint64_t offset, uint64_t at_least, double timeout) {
             Status st;
             {
               nb::gil_scoped_release release;
               st = c.wait_signal(r.region, offset, at_least, deadline_in(timeout));
             }
             check(st);
           },
           "region"_a, "offset"_a, "at_least"_a, "timeout"_a,
           "Busy-polls until the 8-byte word at offset of our region is at least at_least (a peer's put_signal).")
      .def("fence", [](Connection& c) { check(c.fence()); });

  // Native benchmark loops (bench/native): the GIL is released while they run.
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
                    double timeout) {
          std::vector<std::string_view> views = text_views(texts);
          return open_loop([&] { return bench::open_loop_agent(c, tok, views, arrivals, timeout); });
        },
        "connection"_a, "tokenizer"_a, "texts"_a, "arrivals"_a, "timeout"_a,
        "Open loop, each text submitted natively to the agent.");

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
  nb::class_<Tokenizer>(m, "Tokenizer")
      .def_static("from_tiktoken",
                  [](const std::string& path, std::vector<std::pair<std::string, int32_t>> specials) {
                    return unwrap(Tokenizer::from_tiktoken(path, std::move(specials)));
                  },
                  "path"_a, "specials"_a = std::vector<std::pair<std::string, int32_t>>{})
      .def_static("from_vocab_merges",
                  [](const std::string& vocab, const std::string& merges) {
                    return unwrap(Tokenizer::from_vocab_merges(vocab, merges));
                  },
                  "vocab_json"_a, "merges_txt"_a)
      .def_static("bert_wordpiece",
                  [](const std::string& vocab, bool lowercase, int strip_accents) {
                    WordPieceOptions o;
                    o.lowercase = lowercase;
                    o.strip_accents = strip_accents;
                    return unwrap(Tokenizer::bert_wordpiece(vocab, o));
                  },
                  "vocab_txt"_a, "lowercase"_a = true, "strip_accents"_a = -1)
      .def_static("from_tokenizer_json",
                  [](const std::string& path) { return unwrap(Tokenizer::from_tokenizer_json(path)); }, "path"_a)
      .def_prop_ro("config_report", [](const Tokenizer& t) { return std::string(t.config_report()); })
      .def("encode",
           [](const Tokenizer& t, nb::handle text, bool allow_special, bool ordinary, std::string_view utf8,
              bool add_special_tokens) {
             std::string_view view = text_view(text);
             EncodeOptions o = encode_options(allow_special, ordinary, utf8, add_special_tokens);
             std::vector<int32_t> ids;
             Status st;
             {
               nb::gil_scoped_release release;
               st = t.encode(view, ids, o);
             }
             check(st);
             return to_numpy(std::move(ids));
           },
           "text"_a, "allow_special"_a = false, "ordinary"_a = false, "utf8"_a = "strict",
           "add_special_tokens"_a = false)
      .def("encode_batch",
           [](const Tokenizer& t, nb::list texts, bool allow_special, bool ordinary, std::string_view utf8,
              unsigned threads, bool add_special_tokens) {
             std::vector<std::string_view> views;
             views.reserve(texts.size());
             for (nb::handle h : texts) views.push_back(text_view(h));  // the list keeps them alive
             EncodeOptions o = encode_options(allow_special, ordinary, utf8, add_special_tokens);
             std::vector<int32_t> ids;
             std::vector<uint64_t> offsets;
             Status st;
             {
               nb::gil_scoped_release release;
               st = t.encode_batch(views, ids, offsets, o, threads);
             }
             check(st);
             return nb::make_tuple(to_numpy(std::move(ids)), to_numpy(std::move(offsets)));
           },
           "texts"_a, "allow_special"_a = false, "ordinary"_a = false, "utf8"_a = "strict", "threads"_a = 1,
           "add_special_tokens"_a = false)
      .def("encode_each",
           [](const Tokenizer& t, nb::list texts, bool allow_special, bool ordinary, std::string_view utf8,
              bool add_special_tokens, uint64_t max_len, uint64_t capacity, uint64_t max_text_bytes) {
             std::vector<std::string_view> views;
             views.reserve(texts.size());
             for (nb::handle h : texts) views.push_back(text_view(h));  // the list keeps them alive
             EncodeOptions o = encode_options(allow_special, ordinary, utf8, add_special_tokens);
             TextLimits limits;
             limits.max_text_bytes = max_text_bytes;
             limits.max_len = max_len;
             if (capacity != 0) limits.capacity = capacity;
             std::vector<int32_t> ids;
             std::vector<uint64_t> offsets;
             std::vector<Status> statuses;
             {
               nb::gil_scoped_release release;
               statuses = t.encode_each(views, ids, offsets, o, limits);
             }
             return nb::make_tuple(to_numpy(std::move(ids)), to_numpy(std::move(offsets)), errors_to_python(statuses));
           },
           "texts"_a, nb::kw_only(), "allow_special"_a = false, "ordinary"_a = false, "utf8"_a = "strict",
           "add_special_tokens"_a = false, "max_len"_a = 0, "capacity"_a = 0, "max_text_bytes"_a,
           "Per text, what an agent's tokenize service does: (ids, offsets, per-text None or (code, message)); "
           "0 is no limit for max_len and capacity.")
      .def("decode",
           [](const Tokenizer& t, IdInput ids) {
             auto r = t.decode({ids.data(), ids.size()});
             std::string s = unwrap(std::move(r));
             return nb::bytes(s.data(), s.size());
           },
           "ids"_a)
      .def_prop_ro("vocab_size", &Tokenizer::vocab_size)
      .def("special_id", &Tokenizer::special_id, "text"_a)
      .def_static("unicode_version", [] { return std::string(Tokenizer::unicode_version()); });

  nb::class_<RemoteTokenizer>(m, "RemoteTokenizer")
      .def_static(
          "open",
          [](Connection& c, const std::string& name, double timeout, uint64_t pool_ids, nb::object output) {
            OutputMemory memory;
            if (!output.is_none()) {
              auto ids = nb::cast<nb::ndarray<int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>>(output);
              memory.ids = {ids.data(), ids.shape(0)};
              // Batches may outlive the tokenizer, and their last view may go on any thread.
              memory.owner = std::shared_ptr<void>(output.release().ptr(), [](void* o) {
                if (!Py_IsInitialized()) return;
                nb::gil_scoped_acquire gil;
                Py_DECREF(static_cast<PyObject*>(o));
              });
            }
            Result<std::unique_ptr<RemoteTokenizer>> r = Status();
            {
              nb::gil_scoped_release release;
              r = memory.owner ? RemoteTokenizer::open(c, name, deadline_in(timeout), std::move(memory))
                               : RemoteTokenizer::open(c, name, deadline_in(timeout), pool_ids);
            }
            return unwrap(std::move(r));
          },
          "connection"_a, "name"_a, "timeout"_a, "pool_ids"_a = uint64_t{1} << 22, "output"_a = nb::none(),
          nb::keep_alive<0, 1>(),
          "`output`: a writable 1-D int32 array (pinned host memory, say) the ids land in first.")
      .def_prop_ro("vocab_size", &RemoteTokenizer::vocab_size)
      .def(
          "encode_batch",
          [](RemoteTokenizer& t, nb::list texts, bool allow_special, bool ordinary, std::string_view utf8,
             bool add_special_tokens, uint32_t max_len, uint64_t capacity, double timeout) {
            std::vector<std::string_view> views = text_views(texts);
            OffloadOptions o{encode_options(allow_special, ordinary, utf8, add_special_tokens), max_len, capacity};
            Result<EncodedBatch> r = Status();
            {
              nb::gil_scoped_release release;
              r = t.encode_batch(views, o, deadline_in(timeout));
            }
            return batch_to_python(unwrap(std::move(r)));
          },
          "texts"_a, "allow_special"_a = false, "ordinary"_a = false, "utf8"_a = "strict",
          "add_special_tokens"_a = false, "max_len"_a = 0, "capacity"_a = 0, "timeout"_a = 10.0,
          "(ids viewing the registered buffer, offsets, per-text None or (code, message), agent timing).")
      .def(
          "submit",
          [](RemoteTokenizer& t, Completions& into, uint64_t token, nb::list texts, bool allow_special, bool ordinary,
             std::string_view utf8, bool add_special_tokens, uint32_t max_len, uint64_t capacity, double timeout,
             bool wait_credit) {
            std::vector<std::string_view> views = text_views(texts);
            OffloadOptions o{encode_options(allow_special, ordinary, utf8, add_special_tokens), max_len, capacity};
            nb::gil_scoped_release release;  // a new slab may take a round trip
            into.submit(t, token, views, o, deadline_in(timeout),
                        wait_credit ? Connection::Credit::kWait : Connection::Credit::kFail);
          },
          "completions"_a, "token"_a, "texts"_a, "allow_special"_a = false, "ordinary"_a = false, "utf8"_a = "strict",
          "add_special_tokens"_a = false, "max_len"_a = 0, "capacity"_a = 0, "timeout"_a = 10.0,
          "wait_credit"_a = true,
          "encode_batch without waiting: the result is collected from `completions` under `token`. Without "
          "wait_credit, raises Again (nothing sent) when the agent's window is full.");

  nb::class_<Completions>(m, "Completions")
      .def(nb::init<Connection&>(), "connection"_a, nb::keep_alive<1, 2>())
      .def("collect", &Completions::collect, "timeout"_a,
           "[(token, ok, result)] of batches finished since the last call, waiting up to `timeout` s (driving the "
           "connection) for one; result is encode_batch's tuple, or (code, message).")
      .def("take", &Completions::take,
           "collect() for an event loop that progresses the connection itself: what is ready, never waiting. "
           "Batches finished by other threads wake the connection's event_fd.");

  nb::class_<bench::ArrivalTimer>(m, "ArrivalTimer")
      .def("__init__", [](bench::ArrivalTimer* t) { new (t) bench::ArrivalTimer(unwrap(bench::ArrivalTimer::create())); })
      .def_prop_ro("fd", &bench::ArrivalTimer::fd)
      .def("set", [](bench::ArrivalTimer& t, uint64_t ns) { check(t.set(ns)); }, "monotonic_ns"_a,
           "Readable from time.monotonic_ns() == monotonic_ns on.")
      .def("clear", &bench::ArrivalTimer::clear);

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
