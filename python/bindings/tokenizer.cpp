// outboard._core tokenizer classes: Tokenizer (in this process), and
// RemoteTokenizer with its Completions and RemoteDetokenizer (on an agent).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include "common.h"
#include "gpu/gpu_tokenizer.h"
#include "outboard/channel.h"
#include "outboard/detokenize_client.h"
#include "outboard/tokenize_client.h"
#include "outboard/tokenizer.h"

namespace outboard {
namespace {

using namespace nb::literals;
using IdInput = nb::ndarray<const int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

EncodeOptions encode_options(bool allow_special, bool ordinary, std::string_view utf8, bool add_special_tokens) {
  EncodeOptions o;
  o.allow_special = allow_special;
  o.ordinary = ordinary;
  o.add_special_tokens = add_special_tokens;
  if (utf8 == "replace") o.utf8 = Utf8Policy::kReplace;
  else if (utf8 != "strict") raise({Code::kInvalidArgument, "utf8 policy '" + std::string(utf8) + "' is not 'strict' or 'replace'"});
  return o;
}

// A failure as Python sees it: (code, message), for errors.from_code.
nb::tuple status_tuple(const Status& st) { return nb::make_tuple(static_cast<int>(st.code()), st.message()); }

bool all_ok(std::span<const Status> statuses) {
  return std::all_of(statuses.begin(), statuses.end(), [](const Status& st) { return st.ok(); });
}

// Per text: None, or (code, message) for a text that failed.
nb::list errors_to_python(std::span<const Status> statuses) {
  nb::list errors;
  for (const Status& st : statuses)
    errors.append(st.ok() ? nb::object(nb::none()) : nb::object(status_tuple(st)));
  return errors;
}

// An agent's batch as Python sees it: the ids stay where the agent wrote them
// (arrays view this object, which holds the slots); errors and timing become
// Python objects only when asked for, off the hot path of a batch that
// succeeded.
struct AgentBatch {
  EncodedBatch batch;
};

using IdsView = nb::ndarray<nb::numpy, const int32_t, nb::ndim<1>>;
using OffsetsView = nb::ndarray<nb::numpy, const uint64_t, nb::ndim<1>>;

nb::dict timing_to_python(const AgentTiming& tm) {
  nb::dict timing;
  timing["queued_before"] = tm.queued_before;
  timing["queue_ns"] = tm.queue_ns;
  timing["tokenize_ns"] = tm.tokenize_ns;
  timing["cpu_ns"] = tm.cpu_ns;
  timing["put_ns"] = tm.put_ns;
  return timing;
}

// Each (stream, ids) of a Python list: an int32 array is viewed in place,
// any other sequence of ints is copied (an id outside int32 is refused, not
// wrapped into another id). `views` point into the arrays and copies.
struct ParsedSteps {
  std::vector<StreamStep> views;
  std::vector<IdInput> arrays;
  std::vector<std::vector<int32_t>> copies;
};

ParsedSteps parse_steps(nb::sequence steps, const std::vector<bool>& finish) {
  const size_t n = nb::len(steps);
  if (finish.size() != n)
    raise({Code::kInvalidArgument, std::to_string(finish.size()) + " finish flags for " + std::to_string(n) + " steps"});
  ParsedSteps parsed{std::vector<StreamStep>(n), std::vector<IdInput>(n), std::vector<std::vector<int32_t>>(n)};
  auto& [views, arrays, copies] = parsed;
  for (size_t i = 0; i < n; ++i) {
    auto step = nb::cast<nb::sequence>(steps[i]);
    if (nb::len(step) != 2) raise({Code::kInvalidArgument, "step " + std::to_string(i) + " is not (stream, ids)"});
    views[i].stream = nb::cast<uint32_t>(step[0]);
    views[i].finish = finish[i];
    if (nb::try_cast(step[1], arrays[i], /*convert=*/false)) {
      views[i].ids = {arrays[i].data(), arrays[i].size()};
      continue;
    }
    for (nb::handle id : nb::cast<nb::sequence>(step[1])) {
      const auto v = nb::cast<int64_t>(id);
      if (v < INT32_MIN || v > INT32_MAX)
        raise({Code::kInvalidArgument, "step " + std::to_string(i) + ": id " + std::to_string(v) + " is not an int32"});
      copies[i].push_back(static_cast<int32_t>(v));
    }
    views[i].ids = copies[i];
  }
  return parsed;
}

// Per step its text, or (code, message) where it failed.
nb::list texts_of(const SteppedText& out) {
  nb::list texts;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!out.error(i).ok()) {
      texts.append(status_tuple(out.error(i)));
      continue;
    }
    const std::string_view t = out.text(i);
    texts.append(nb::str(t.data(), t.size()));
  }
  return texts;
}

nb::list step_streams(RemoteDetokenizer& d, nb::sequence steps, std::vector<bool> finish, double timeout) {
  const ParsedSteps parsed = parse_steps(steps, finish);
  Result<SteppedText> r = Status();
  {
    nb::gil_scoped_release release;
    r = d.step(parsed.views, deadline_in(timeout));
  }
  return texts_of(unwrap(std::move(r)));
}

nb::object result_object(EncodedBatch&& batch) { return nb::cast(AgentBatch{std::move(batch)}); }
nb::object result_object(SteppedText&& text) { return texts_of(text); }

// Requests submitted without waiting (tokenize batches, detokenize steps),
// finished by whoever progresses the connection and collected here by token.
// Completion callbacks run under the connection's lock, so they only queue
// (into state they share, which outlives this object if it goes first):
// Python is touched in collect(), after the lock is let go.
template <class T>
class Completions {
 public:
  explicit Completions(Connection& c) : conn_(c), queue_(std::make_shared<Queue>()) {}

  // The completion callback for `token`'s request.
  std::function<void(Result<T>)> on_done(uint64_t token) {
    return [q = queue_, token, &conn = conn_](Result<T> r) {
      {
        std::lock_guard lock(q->mu);
        q->done.emplace_back(token, std::move(r));
      }
      // Finished by another thread's progress: the collector may be asleep.
      if (std::this_thread::get_id() != q->collector.load(std::memory_order_relaxed)) conn.wake();
    };
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
    std::vector<std::pair<uint64_t, Result<T>>> ready;
    queue_->collector.store(std::this_thread::get_id(), std::memory_order_relaxed);
    {
      std::lock_guard lock(queue_->mu);
      ready.swap(queue_->done);
    }
    nb::list out;
    for (auto& [token, r] : ready) {
      const bool ok = r.ok();
      nb::object result = ok ? result_object(std::move(r).value()) : nb::object(status_tuple(r.status()));
      out.append(nb::make_tuple(token, ok, result));
    }
    return out;
  }

 private:
  struct Queue {
    std::mutex mu;
    std::atomic<std::thread::id> collector;
    std::vector<std::pair<uint64_t, Result<T>>> done;
  };
  Connection& conn_;
  std::shared_ptr<Queue> queue_;
};

using BatchCompletions = Completions<EncodedBatch>;
using StepCompletions = Completions<SteppedText>;

template <class T>
void bind_completions(nb::module_& m, const char* name, const char* what) {
  nb::class_<Completions<T>>(m, name)
      .def(nb::init<Connection&>(), "connection"_a, nb::keep_alive<1, 2>())
      .def("collect", &Completions<T>::collect, "timeout"_a,
           (std::string("[(token, ok, result)] of ") + what +
            " finished since the last call, waiting up to `timeout` s (driving the connection) for one; result "
            "is (code, message) where not ok.")
               .c_str())
      .def("take", &Completions<T>::take,
           "collect() for an event loop that progresses the connection itself: what is ready, never waiting. "
           "Requests finished by other threads wake the connection's event_fd.");
}

}  // namespace

void bind_tokenizer(nb::module_& m) {
  m.attr("DEFAULT_PIECE_CACHE_BYTES") = kDefaultPieceCacheBytes;
  m.def("vocab_format_of", [](std::string_view path) -> std::optional<int> {
    const auto f = Tokenizer::vocab_format_of(path);
    return f ? std::optional<int>(static_cast<int>(*f)) : std::nullopt;
  }, "path"_a);
  nb::enum_<Pretokenizer>(m, "Pretokenizer")
      .value("r50k", Pretokenizer::kR50k)
      .value("cl100k", Pretokenizer::kCl100k)
      .value("o200k", Pretokenizer::kO200k)
      .value("tekken", Pretokenizer::kTekken);
  nb::class_<Tokenizer>(m, "Tokenizer")
      .def_static("from_tiktoken",
                  [](const std::string& path, std::vector<std::pair<std::string, int32_t>> specials,
                     Pretokenizer pretokenizer) {
                    return unwrap(Tokenizer::from_tiktoken(path, std::move(specials), pretokenizer));
                  },
                  "path"_a, "specials"_a = std::vector<std::pair<std::string, int32_t>>{},
                  "pretokenizer"_a = Pretokenizer::kR50k)
      .def_static("from_file", [](const std::string& path) { return unwrap(Tokenizer::from_file(path)); }, "path"_a)
      .def_static("from_tekken_json",
                  [](const std::string& path) { return unwrap(Tokenizer::from_tekken_json(path)); }, "path"_a)
      .def_static("from_sentencepiece",
                  [](const std::string& path) { return unwrap(Tokenizer::from_sentencepiece(path)); }, "path"_a)
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
      .def("with_piece_cache", &Tokenizer::with_piece_cache, "max_bytes"_a)
      .def_prop_ro("piece_cache_bytes", &Tokenizer::piece_cache_bytes)
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
             const std::vector<std::string_view> views = text_views(texts);
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
             const std::vector<std::string_view> views = text_views(texts);
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
             return nb::make_tuple(to_numpy(std::move(ids)), to_numpy(std::move(offsets)),
                                   all_ok(statuses) ? nb::object(nb::none()) : nb::object(errors_to_python(statuses)));
           },
           "texts"_a, nb::kw_only(), "allow_special"_a = false, "ordinary"_a = false, "utf8"_a = "strict",
           "add_special_tokens"_a = false, "max_len"_a = 0, "capacity"_a = 0, "max_text_bytes"_a,
           "Per text, what an agent's tokenize service does: (ids, offsets, None when every text succeeded "
           "else per text None or (code, message)); "
           "0 is no limit for max_len and capacity.")
      .def("decode",
           [](const Tokenizer& t, IdInput ids) {
             auto r = t.decode({ids.data(), ids.size()});
             std::string s = unwrap(std::move(r));
             return nb::bytes(s.data(), s.size());
           },
           "ids"_a)
      .def("token_text", [](const Tokenizer& t, int32_t id) { return unwrap(t.token_text(id)); }, "id"_a)
      .def("tokens",
           [](const Tokenizer& t) {
             nb::list out;
             for (size_t id = 0; id < t.vocab_size(); ++id) {
               auto r = t.token_text(static_cast<int32_t>(id));
               out.append(r.ok() ? nb::object(nb::str(r->data(), r->size())) : nb::object(nb::none()));
             }
             return out;
           },
           "Every id's spelling (None for an id the vocabulary leaves unused).")
      .def("char_offsets",
           [](const Tokenizer& t, nb::handle text, IdInput ids) {
             auto spans = unwrap(t.char_offsets(text_view(text), {ids.data(), ids.size()}));
             std::vector<uint32_t> flat;
             flat.reserve(2 * spans.size());
             for (const auto& [begin, end] : spans) flat.push_back(begin), flat.push_back(end);
             return to_numpy(std::move(flat));
           },
           "text"_a, "ids"_a, "[start, end) per id as a flat array (start0, end0, start1, ...).")
      .def_prop_ro("vocab_size", &Tokenizer::vocab_size)
      .def("special_id", &Tokenizer::special_id, "text"_a)
      .def("special_tokens", &Tokenizer::special_tokens, "[(text, id)] of every special token, by id.")
      .def_static("unicode_version", [] { return std::string(Tokenizer::unicode_version()); });

  // GPT-2's BPE or BERT's WordPiece on a CUDA device, the ids into the caller's device memory (a torch
  // CUDA tensor, by DLPack).
  using DeviceIds = nb::ndarray<int32_t, nb::ndim<1>, nb::c_contig, nb::device::cuda>;
  m.def("cuda_usable", [] {
    const Status st = gpu::cuda_usable();
    return st.ok() ? std::optional<std::string>() : std::optional<std::string>(st.message());
  }, "None where a CUDA device is usable by this build; else why not.");
  nb::class_<gpu::GpuTokenizer>(m, "GpuTokenizer")
      .def_static("create", [](const Tokenizer& t) { return unwrap(gpu::GpuTokenizer::create(t)); }, "tokenizer"_a)
      .def("encode_batch",
           [](gpu::GpuTokenizer& g, nb::list texts, DeviceIds output, bool ordinary) {
             const std::vector<std::string_view> views = text_views(texts);
             std::vector<uint32_t> offsets;
             gpu::GpuTokenizer::Stages stages;
             Status st;
             {
               nb::gil_scoped_release release;
               st = g.encode(views, ordinary, output.data(), output.shape(0), offsets, &stages);
             }
             check(st);
             nb::dict times;
             times["copy_in"] = stages.copy_in_ns;
             times["kernels"] = stages.kernels_ns;
             times["copy_out"] = stages.copy_out_ns;
             return nb::make_tuple(to_numpy(std::vector<int64_t>(offsets.begin(), offsets.end())), times);
           },
           "texts"_a, "output"_a, "ordinary"_a = false,
           "(offsets, stage ns from CUDA events); text i's ids are output[offsets[i]:offsets[i + 1]].")
      .def_prop_ro("device_bytes", &gpu::GpuTokenizer::device_bytes);

  nb::class_<DecodeStream>(m, "DecodeStream")
      .def(nb::init<Tokenizer>(), "tokenizer"_a)
      .def("step",
           [](DecodeStream& d, IdInput ids) {
             std::string out;
             check(d.step({ids.data(), ids.size()}, out));
             return out;  // valid UTF-8: a str
           },
           "ids"_a)
      .def("finish",
           [](DecodeStream& d) {
             std::string out;
             d.finish(out);
             return out;
           })
      .def_prop_ro("pending_bytes", &DecodeStream::pending_bytes);
  nb::class_<RemoteTokenizer>(m, "RemoteTokenizer")
      .def_static(
          "open",
          [](Connection& c, const std::string& name, double timeout, uint64_t pool_ids, nb::object output) {
            OutputMemory memory;
            if (!output.is_none()) {
              // numpy's, or by DLPack a CUDA tensor (GPU memory) or pinned host memory.
              auto ids = nb::cast<nb::ndarray<int32_t, nb::ndim<1>, nb::c_contig>>(output);
              memory.kind = memory_kind(ids.device_type());
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
          "`output`: a writable 1-D int32 array (pinned host memory, or a CUDA tensor) the ids land in first.")
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
            return AgentBatch{unwrap(std::move(r))};
          },
          "texts"_a, "allow_special"_a = false, "ordinary"_a = false, "utf8"_a = "strict",
          "add_special_tokens"_a = false, "max_len"_a = 0, "capacity"_a = 0, "timeout"_a = 10.0,
          "(ids viewing the registered buffer, offsets, per-text None or (code, message), agent timing).")
      .def(
          "submit",
          [](RemoteTokenizer& t, BatchCompletions& into, uint64_t token, nb::list texts, bool allow_special, bool ordinary,
             std::string_view utf8, bool add_special_tokens, uint32_t max_len, uint64_t capacity, double timeout,
             bool wait_credit) {
            std::vector<std::string_view> views = text_views(texts);
            OffloadOptions o{encode_options(allow_special, ordinary, utf8, add_special_tokens), max_len, capacity};
            nb::gil_scoped_release release;  // a new slab may take a round trip
            check(t.submit(views, o, deadline_in(timeout), into.on_done(token),
                           wait_credit ? Connection::Credit::kWait : Connection::Credit::kFail));
          },
          "completions"_a, "token"_a, "texts"_a, "allow_special"_a = false, "ordinary"_a = false, "utf8"_a = "strict",
          "add_special_tokens"_a = false, "max_len"_a = 0, "capacity"_a = 0, "timeout"_a = 10.0,
          "wait_credit"_a = true,
          "encode_batch without waiting: the result is collected from `completions` under `token`. Without "
          "wait_credit, raises Again (nothing sent) when the agent's window is full.");

  nb::class_<RemoteDetokenizer>(m, "RemoteDetokenizer")
      .def_static(
          "open",
          [](Connection& c, const std::string& name, double timeout) {
            nb::gil_scoped_release release;
            return unwrap(RemoteDetokenizer::open(c, name, deadline_in(timeout)));
          },
          "connection"_a, "name"_a, "timeout"_a, nb::keep_alive<0, 1>())
      .def_prop_ro("vocab_size", &RemoteDetokenizer::vocab_size)
      .def("open_stream", &RemoteDetokenizer::open_stream,
           "A new stream's handle (no round trip: its first step begins it on the agent).")
      .def(
          "close_stream",
          [](RemoteDetokenizer& d, uint32_t stream, double timeout) {
            nb::gil_scoped_release release;
            check(d.close_stream(stream, deadline_in(timeout)));
          },
          "stream"_a, "timeout"_a)
      .def("step", &step_streams, "steps"_a, "finish"_a, "timeout"_a,
           "[(stream, ids)] and a finish flag per step -> per step its text, or (code, message) where it failed.")
      .def(
          "submit",
          [](RemoteDetokenizer& d, StepCompletions& into, uint64_t token, nb::sequence steps, std::vector<bool> finish,
             double timeout) {
            const ParsedSteps parsed = parse_steps(steps, finish);
            nb::gil_scoped_release release;  // waits for a send credit at most
            check(d.submit(parsed.views, deadline_in(timeout), into.on_done(token)));
          },
          "completions"_a, "token"_a, "steps"_a, "finish"_a, "timeout"_a,
          "step without waiting: the texts are collected from `completions` under `token`.");

  nb::class_<AgentBatch>(m, "AgentBatch", "A batch the agent tokenized; its arrays keep it (and its slots) alive.")
      .def_prop_ro("ids", [](nb::handle self) -> nb::object {
        const EncodedBatch& b = nb::cast<const AgentBatch&>(self).batch;
        if (b.memory_kind() == MemoryKind::kCuda)  // the caller's CUDA tensor was torch's
          return nb::cast(nb::ndarray<nb::pytorch, const int32_t, nb::ndim<1>>(
              b.ids().data(), {b.ids().size()}, self, {}, nb::dtype<int32_t>(), nb::device::cuda::value));
        return nb::cast(IdsView(b.ids().data(), {b.ids().size()}, self));
      }, "Ids of all texts back to back, where the agent put them (a torch CUDA tensor in GPU memory).")
      .def_prop_ro("offsets", [](nb::handle self) {
        const EncodedBatch& b = nb::cast<const AgentBatch&>(self).batch;
        return OffsetsView(b.offsets().data(), {b.offsets().size()}, self);
      }, "Text i is ids[offsets[i]:offsets[i+1]].")
      .def_prop_ro("ok", [](const AgentBatch& b) { return all_ok(b.batch.errors()); }, "Every text succeeded.")
      .def_prop_ro("errors", [](const AgentBatch& b) { return errors_to_python(b.batch.errors()); },
                   "Per text: None, or (code, message) for a text that failed.")
      .def_prop_ro("timing", [](const AgentBatch& b) { return timing_to_python(b.batch.timing()); },
                   "What the agent reported: queued_before, queue_ns, tokenize_ns, cpu_ns, put_ns.")
      .def("__len__", [](const AgentBatch& b) { return b.batch.errors().size(); });

  bind_completions<EncodedBatch>(m, "Completions", "batches (each result an AgentBatch)");
  bind_completions<SteppedText>(m, "StepCompletions", "detokenize steps (each result the steps' texts, as step's)");
}

}  // namespace outboard
