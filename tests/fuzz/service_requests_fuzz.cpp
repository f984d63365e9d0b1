// libFuzzer: what a client may send to the agent's services, through a real
// agent in this process (Isolation::kNone: one UCX worker, real endpoints).
// The first byte picks the service and whether the rest goes as a request
// or a one-way message. A tokenizer, an output buffer, a graph region and
// a detokenize stream are opened first, so requests that name handle 0
// reach the code behind them. Every request is answered (or times out: a mirror waits for pings),
// and no input closes the connection.
#include <array>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include "outboard/agent.h"
#include "outboard/graph_offload.h"
#include "outboard/tokenize_client.h"

using namespace outboard;

namespace {

constexpr std::array<const char*, 7> kServices = {"echo", "graph", "memory", "sink", "stats", "tokenize", "detokenize"};

struct World {
  std::unique_ptr<Agent> agent;
  std::thread serving;
  std::unique_ptr<Connection> conn;
  std::unique_ptr<RemoteTokenizer> tokenizer;
  std::vector<uint8_t> region_memory = std::vector<uint8_t>(1 << 16);
  Region region;
};

void fail(const char* what, const Status& st) {
  std::fprintf(stderr, "fuzz setup: %s: %s\n", what, st.to_string().c_str());
  std::abort();
}

World& world() {
  static World* w = [] {
    auto* w = new World;
    AgentConfig config;
    config.isolation = Isolation::kNone;
    config.max_region_size = 1 << 20;
    config.tokenize_threads = 0;
    config.max_batch_texts = 64;
    config.max_text_bytes = 4096;
    config.max_vocab_bytes = 1 << 20;
    config.graph_max_instances = 64;
    config.graph_max_memory = 1 << 20;
    config.channel.max_msg_size = 1 << 20;
    auto agent = Agent::create(config);
    if (!agent.ok()) fail("agent", agent.status());
    w->agent = std::move(agent).value();
    if (Status st = w->agent->start(); !st.ok()) fail("start", st);
    w->serving = std::thread([w] { (void)w->agent->run(); });
    auto conn = Connection::connect(w->agent->address());
    if (!conn.ok()) fail("connect", conn.status());
    w->conn = std::move(conn).value();
    auto tok = RemoteTokenizer::open(*w->conn, "gpt2", Deadline::after_ms(30000), /*pool_ids=*/1 << 14);
    if (!tok.ok()) fail("tokenizer (run `outboard vocab fetch`)", tok.status());
    w->tokenizer = std::move(tok).value();
    auto region = w->conn->register_memory(w->region_memory.data(), w->region_memory.size());
    if (!region.ok()) fail("region", region.status());
    w->region = std::move(region).value();
    std::vector<uint8_t> bind{'B'};
    bind.insert(bind.end(), w->region.descriptor().begin(), w->region.descriptor().end());
    if (auto r = w->conn->request("graph", bind, Deadline::after_ms(5000)); !r.ok()) fail("graph bind", r.status());
    const std::string open = "Ogpt2";
    if (auto r = w->conn->request("detokenize", {reinterpret_cast<const uint8_t*>(open.data()), open.size()},
                                  Deadline::after_ms(30000));
        !r.ok())
      fail("detokenize open", r.status());
    // Stream 0 of tokenizer 0, begun by an empty step (flag kBegin = 2).
    const uint8_t stream[] = {'D', 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0};
    if (auto r = w->conn->request("detokenize", stream, Deadline::after_ms(5000)); !r.ok()) fail("detokenize stream", r.status());
    return w;
  }();
  return *w;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  World& w = world();
  const char* service = kServices[(data[0] & 0x7f) % kServices.size()];
  const bool one_way = data[0] & 0x80;
  std::span<const uint8_t> payload(data + 1, size - 1);
  if (one_way) {
    (void)w.conn->send(payload, Deadline::after_ms(1000), service);
  } else {
    (void)w.conn->request(service, payload, Deadline::after_ms(2000));
  }
  while (w.conn->receive(Deadline::now()).ok()) {  // what one-way messages sent back
  }
  if (!w.conn->is_open()) {
    std::fprintf(stderr, "a %s to '%s' closed the connection: %s\n", one_way ? "message" : "request", service,
                 w.conn->close_reason().to_string().c_str());
    std::abort();
  }
  return 0;
}
