// outboard-graph-bench: one cell of `outboard bench graph` for one runtime,
// as CSV rows (one per repetition) in the reference protocol's columns plus
// build/create/start-up times, per-instance state and idle CPU.
//
//   outboard-graph-bench --runtime outboard --pattern random --n 4096 --mode M3 --instances 100 --threads 2
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>

#include "bench/graph/workload.h"

namespace {

using namespace outboard::bench::graph;

long max_rss_kb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string first;
  f >> first;
  return first;
}

constexpr const char* kColumns =
    "runtime,version,pattern,n,edges,K,mode,threads,body,body_ns,rep,wall_ns,per_instance_ns,per_task_ns,cpu_ns,"
    "rss_kb,loadavg,build_ns,create_ns,startup_ns,state_bytes,idle_cpu_pct,check,lat_p50_ns,lat_p90_ns,lat_p99_ns";

// Percentile of per-instance latencies (0 when the runtime does not measure them).
uint64_t percentile(std::vector<uint64_t> v, double q) {
  if (v.empty()) return 0;
  size_t k = std::min(v.size() - 1, static_cast<size_t>(q * double(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(k), v.end());
  return v[k];
}

int usage(const char* why) {
  std::fprintf(stderr,
               "outboard-graph-bench: %s\n"
               "usage: outboard-graph-bench --runtime outboard|tbb|omp|pthread|sequential|offload --pattern "
               "chain|independent|tree|fanin|random|seed [--n N] [--mode M1|M2|M3|M4|sync] [--instances K] "
               "[--threads T] [--window W] [--engine-threads E] [--body empty|1us|10us|seed] [--reps R] "
               "[--warmup W] [--warmup-ms MS] [--ns-per-iteration X] [--timeline FILE (outboard, M3)] "
               "[--agent HOST:PORT (offload)] [--header]\n"
               "       outboard-graph-bench --calibrate   (prints the spin body's ns per iteration)\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> opt{{"n", "256"}, {"mode", "M2"}, {"instances", "100"}, {"threads", "1"},
                                         {"window", "8"}, {"engine-threads", "0"}, {"body", "empty"},
                                         {"reps", "10"}, {"warmup", "2"}, {"warmup-ms", "200"},
                                         {"ns-per-iteration", "0"}, {"timeline", ""}};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--header") {
      std::puts(kColumns);
      continue;
    }
    if (a == "--calibrate") {
      std::printf("%.6f\n", calibrate_spin());
      return 0;
    }
    if (a.rfind("--", 0) != 0 || i + 1 >= argc) return usage(("bad argument " + a).c_str());
    opt[a.substr(2)] = argv[++i];
  }
  if (!opt.count("runtime") || !opt.count("pattern")) return usage("--runtime and --pattern are required");
  try {
    Cell cell;
    cell.mode = opt["mode"];
    cell.instances = static_cast<uint32_t>(std::stoul(opt["instances"]));
    cell.threads = static_cast<unsigned>(std::stoul(opt["threads"]));
    cell.window = static_cast<unsigned>(std::stoul(opt["window"]));
    cell.engine_threads = static_cast<unsigned>(std::stoul(opt["engine-threads"]));
    if (cell.threads == 0 || cell.instances == 0) return usage("--threads and --instances must be at least 1");
    Workload w(make_dag(opt["pattern"], static_cast<uint32_t>(std::stoul(opt["n"]))), parse_body(opt["body"]),
               std::stod(opt["ns-per-iteration"]));
    const std::string& rt = opt["runtime"];
    std::unique_ptr<Runner> runner = rt == "outboard"     ? make_outboard(cell.threads, cell.engine_threads)
                                     : rt == "tbb"        ? make_tbb(cell.threads)
                                     : rt == "omp"        ? make_omp(cell.threads)
                                     : rt == "pthread"    ? make_pthread()
                                     : rt == "sequential" ? make_sequential()
                                     : rt == "offload"    ? (opt.count("agent") ? make_offload(opt["agent"]) : nullptr)
                                                          : nullptr;
    if (!runner) return usage(("unknown runtime " + rt + " (offload needs --agent)").c_str());
    const std::string timeline = opt["timeline"];
    if (!timeline.empty() && (rt != "outboard" || cell.mode != "M3"))
      return usage("--timeline needs --runtime outboard and --mode M3");
    const int reps = std::stoi(opt["reps"]), warmup = std::stoi(opt["warmup"]);
    // Warm-up runs until both W runs and MS milliseconds have passed: a fresh
    // process on these VMs runs its first ~100 ms slow and erratic (a single
    // thread too), which a fixed count of short runs does not cover.
    const uint64_t warmup_ns = std::stoull(opt["warmup-ms"]) * 1'000'000;
    const uint64_t n = w.dag().size(), K = cell.instances;
    struct Row {
      Measure m;
      std::string check, load;
    };
    std::vector<Row> rows;
    Stopwatch warming;
    for (int r = -warmup; r < reps; ++r) {
      if (r == 0 && warming.wall_ns() < warmup_ns) r = -1;
      w.reset_counts();
      std::string load = loadavg();
      Measure m = runner->run(w, cell);
      std::string check = "ok";
      if (w.executed() != K * n || w.errors() != 0)
        check = "FAIL executed " + std::to_string(w.executed()) + " of " + std::to_string(K * n) + ", " +
                std::to_string(w.errors()) + " errors";
      if (r >= 0) rows.push_back({m, check, load});
    }
    // One more run with per-node timing on: when each node of each instance
    // ran, relative to the first start, and its predecessors for checking.
    if (!timeline.empty()) {
      cell.record_timeline = true;
      w.reset_counts();
      Measure m = runner->run(w, cell);
      if (w.executed() != K * n || w.errors() != 0) throw std::runtime_error("the timeline run failed its check");
      uint64_t t0 = UINT64_MAX;
      for (const Span& s : m.timeline) t0 = std::min(t0, s.start_ns);
      std::ofstream out(timeline);
      out << "instance,node,start_ns,end_ns,preds\n";
      for (const Span& s : m.timeline) {
        out << s.instance << ',' << s.node << ',' << s.start_ns - t0 << ',' << s.end_ns - t0 << ',';
        const auto& preds = w.dag().preds[s.node];
        for (size_t i = 0; i < preds.size(); ++i) out << (i ? ";" : "") << preds[i];
        out << '\n';
      }
      if (!out) throw std::runtime_error("could not write " + timeline);
    }
    // Idle CPU: what the pool burns over 200 ms with nothing to do.
    Stopwatch idle;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    double idle_pct = 100.0 * double(idle.cpu_ns()) / double(idle.wall_ns());
    bool failed = false;
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& row = rows[i];
      failed |= row.check != "ok";
      std::printf("%s,%s,%s,%llu,%zu,%llu,%s,%u,%s,%.0f,%zu,%llu,%.1f,%.2f,%llu,%ld,%s,%llu,%llu,%llu,%zu,%.1f,%s,%llu,%llu,%llu\n",
                  runner->name().c_str(), runner->version().c_str(), w.dag().pattern.c_str(),
                  (unsigned long long)n, w.dag().edges, (unsigned long long)K, cell.mode.c_str(), cell.threads,
                  opt["body"].c_str(), w.body_ns(), i, (unsigned long long)row.m.wall_ns,
                  double(row.m.wall_ns) / K, double(row.m.wall_ns) / double(K * n), (unsigned long long)row.m.cpu_ns,
                  max_rss_kb(), row.load.c_str(), (unsigned long long)row.m.build_ns,
                  (unsigned long long)row.m.create_ns, (unsigned long long)runner->startup_ns(), row.m.state_bytes,
                  idle_pct, row.check.c_str(), (unsigned long long)percentile(row.m.latency_ns, 0.5),
                  (unsigned long long)percentile(row.m.latency_ns, 0.9),
                  (unsigned long long)percentile(row.m.latency_ns, 0.99));
    }
    return failed ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "outboard-graph-bench: %s\n", e.what());
    return 1;
  }
}
