// outboard._core graph classes: Graph, Instance, Executor. Python bodies run
// with the GIL (the slow path); engine nodes run natively without it.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <memory>
#include <vector>

#include "common.h"
#include "outboard/graph.h"

namespace outboard {
namespace {

using namespace nb::literals;
using graph::NodeId;
using Bytes = nb::ndarray<uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// Python objects reach the runtime as borrowed pointers: the Python wrappers
// (outboard/graph.py) own them, where the garbage collector sees them.
Status call_python(PyObject* fn, void* data) {
  nb::gil_scoped_acquire gil;
  try {
    nb::handle body(fn);
    body(data ? nb::handle(static_cast<PyObject*>(data)) : nb::none());
    return {};
  } catch (nb::python_error& e) {
    std::string name = nb::cast<std::string>(nb::str(e.type().attr("__name__")));
    return {Code::kFailed, name + ": " + nb::cast<std::string>(nb::str(e.value()))};
  }
}

const graph::Engine& engine_named(const std::string& name) {
  if (name == "sha256") return graph::sha256_engine();
  if (name == "dma") return graph::copy_engine();
  raise({Code::kNotFound, "engine '" + name + "' (built-ins: sha256, dma)"});
}

struct PyExecutor;

// An instance and its engine tasks, one slot per node (setting a node again
// reuses it). The Python wrapper waits for its run before it drops it
// (outboard.graph.Instance.__del__).
struct PyInstance {
  std::unique_ptr<graph::Instance> instance;
  std::map<NodeId, graph::Sha256Task> sha;
  std::map<NodeId, graph::CopyTask> copy;

  template <typename Task>
  void set_task(std::map<NodeId, Task>& tasks, NodeId node, const Task& task) {
    Task& slot = tasks[node];
    check(instance->set_data(node, &slot));  // bad state while in flight: the slot stays as it was
    slot = task;
  }
};

struct PyExecutor {
  std::unique_ptr<graph::Executor> executor;
  ~PyExecutor() {
    nb::gil_scoped_release release;  // draining may need Python bodies to run
    executor.reset();
  }
};

}  // namespace

void bind_graph(nb::module_& m) {
  nb::class_<graph::Graph>(m, "Graph")
      .def_static("create", [](const std::string& name) { return graph::Graph::create(name); }, "name"_a = "graph")
      .def("add_user",
           [](graph::Graph& g, const std::string& name, nb::object fn) {
             if (!PyCallable_Check(fn.ptr())) raise({Code::kInvalidArgument, "body of '" + name + "' is not callable"});
             PyObject* borrowed = fn.ptr();
             return unwrap(g.add_user(name, [borrowed](void* data) { return call_python(borrowed, data); }));
           }, "name"_a, "body"_a)
      .def("add_engine",
           [](graph::Graph& g, const std::string& name, const std::string& engine) {
             return unwrap(g.add_engine(name, engine_named(engine)));
           }, "name"_a, "engine"_a)
      .def("add_subgraph",
           [](graph::Graph& g, const std::string& name, std::shared_ptr<graph::Graph> sub) {
             return unwrap(g.add_subgraph(name, std::move(sub)));
           }, "name"_a, "sub"_a)
      .def("add_dependency", [](graph::Graph& g, NodeId a, NodeId b) { check(g.add_dependency(a, b)); }, "before"_a,
           "after"_a)
      .def("freeze", [](graph::Graph& g) { check(g.freeze()); })
      .def_prop_ro("frozen", &graph::Graph::frozen)
      .def_prop_ro("name", &graph::Graph::name)
      .def_prop_ro("edges", &graph::Graph::edges)
      .def("__len__", &graph::Graph::size)
      .def("node_name", [](const graph::Graph& g, NodeId n) {
        if (n >= g.size()) raise({Code::kInvalidArgument, "node " + std::to_string(n) + " does not exist"});
        return g.node_name(n);
      })
      .def_prop_ro("instance_state_bytes", &graph::Graph::instance_state_bytes);

  nb::class_<PyInstance>(m, "Instance")
      .def_static("create",
                  [](std::shared_ptr<graph::Graph> g) {
                    auto p = std::make_unique<PyInstance>();
                    p->instance = unwrap(graph::Instance::create(std::move(g)));
                    return p.release();
                  }, nb::rv_policy::take_ownership)
      .def("set_data",
           [](PyInstance& p, NodeId node, nb::handle obj) {
             if (node < p.instance->graph().size() && p.instance->graph().node_kind(node) != graph::NodeKind::kUser)
               raise({Code::kInvalidArgument, "node " + std::to_string(node) + " is not a Python node"});
             check(p.instance->set_data(node, obj.is_none() ? nullptr : obj.ptr()));
           }, "node"_a, "data"_a.none())
      .def("set_sha256",
           [](PyInstance& p, NodeId node, Bytes src, Bytes digest) {
             if (digest.shape(0) < 32) raise({Code::kInvalidArgument, "digest buffer of " + std::to_string(digest.shape(0)) + " B is under 32 B"});
             p.set_task(p.sha, node, graph::Sha256Task{src.data(), src.shape(0), digest.data()});
           }, "node"_a, "src"_a, "digest"_a)
      .def("set_copy",
           [](PyInstance& p, NodeId node, Bytes src, Bytes dst) {
             if (dst.shape(0) < src.shape(0))
               raise({Code::kInvalidArgument, "copy of " + std::to_string(src.shape(0)) + " B into " +
                                                  std::to_string(dst.shape(0)) + " B"});
             p.set_task(p.copy, node, graph::CopyTask{src.data(), dst.data(), src.shape(0)});
           }, "node"_a, "src"_a, "dst"_a)
      .def("enable_timing", [](PyInstance& p, bool on) { check(p.instance->enable_timing(on)); }, "on"_a = true)
      .def("timing",
           [](PyInstance& p) {
             auto t = p.instance->timing();
             auto* out = new std::vector<uint64_t>();
             for (const auto& x : t) out->push_back(x.start_ns), out->push_back(x.end_ns);
             nb::capsule owner(out, [](void* v) noexcept { delete static_cast<std::vector<uint64_t>*>(v); });
             return nb::ndarray<nb::numpy, uint64_t, nb::ndim<2>>(out->data(), {t.size(), 2}, owner);
           })
      .def_prop_ro("in_flight", [](PyInstance& p) { return p.instance->in_flight(); })
      .def_prop_ro("graph_name", [](PyInstance& p) { return p.instance->graph().name(); });

  nb::class_<PyExecutor>(m, "Executor")
      .def_static("create",
                  [](unsigned threads, unsigned engine_threads, uint32_t max_in_flight,
                     std::optional<uint32_t> spin_us, const std::string& completion, bool callers_execute) {
                    graph::ExecutorConfig c{.threads = threads, .engine_threads = engine_threads,
                                            .max_in_flight = max_in_flight, .callers_execute = callers_execute};
                    if (spin_us) c.spin_us = *spin_us;
                    if (completion == "queued") c.completion = graph::CompletionMode::kQueued;
                    else if (completion != "inline")
                      raise({Code::kInvalidArgument, "completion '" + completion + "' is not inline or queued"});
                    auto p = std::make_unique<PyExecutor>();
                    p->executor = unwrap(graph::Executor::create(c));
                    return p.release();
                  }, "threads"_a, "engine_threads"_a, "max_in_flight"_a, "spin_us"_a, "completion"_a,
                  "callers_execute"_a, nb::rv_policy::take_ownership)
      .def("submit",
           [](PyExecutor& ex, PyInstance& inst) {
             {
               nb::gil_scoped_release release;
               check(ex.executor->submit(*inst.instance));
             }
           }, "instance"_a)
      .def("wait",
           [](PyExecutor& ex, PyInstance& inst, double timeout) {
             Status st;
             {
               nb::gil_scoped_release release;
               st = ex.executor->wait(*inst.instance, deadline_in(timeout));
             }
             check(st);
           }, "instance"_a, "timeout"_a)
      .def("progress", [](PyExecutor& ex) {
        nb::gil_scoped_release release;
        return ex.executor->progress();
      })
      .def("drain", [](PyExecutor& ex, double timeout) {
        Status st;
        {
          nb::gil_scoped_release release;
          st = ex.executor->drain(deadline_in(timeout));
        }
        check(st);
      }, "timeout"_a)
      .def("event_fd", [](PyExecutor& ex) { return unwrap(ex.executor->event_fd()); })
      .def_prop_ro("in_flight", [](PyExecutor& ex) { return ex.executor->in_flight(); });
}

}  // namespace outboard
