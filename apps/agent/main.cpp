// outboard-agent: flags -> config -> agent. Needs no Python, so it runs on a
// DPU's Arm cores as well as on a spare core of the host.
#include <csignal>
#include <cstdio>

#include "outboard/agent.h"
#include "outboard/log.h"

namespace {
outboard::Agent* g_agent = nullptr;
void on_signal(int) {
  if (g_agent) g_agent->stop();
}
}  // namespace

int main(int argc, char** argv) {
  auto options = outboard::agent_options();
  outboard::Status st = options.parse(argc, argv);
  if (options.help_requested()) {
    std::fputs(options.usage().c_str(), stdout);
    return 0;
  }
  if (st.ok()) {
    auto level = outboard::log::parse_level(options.str("log-level"));
    if (level.ok()) outboard::log::set_level(level.value());
  }
  auto config = st.ok() ? outboard::agent_config_from(options) : outboard::Result<outboard::AgentConfig>(st);
  if (!config.ok()) {
    std::fprintf(stderr, "outboard-agent: %s\n\n%s", config.status().to_string().c_str(), options.usage().c_str());
    return 2;
  }
  auto agent = outboard::Agent::create(config.value());
  if (agent.ok()) st = agent.value()->start();
  if (!agent.ok() || !st.ok()) {
    std::fprintf(stderr, "outboard-agent: %s\n", (agent.ok() ? st : agent.status()).to_string().c_str());
    return 1;
  }
  g_agent = agent.value().get();
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::printf("outboard-agent listening on %s\n", g_agent->address().c_str());
  std::fflush(stdout);
  st = g_agent->run();
  g_agent = nullptr;
  if (!st.ok()) {
    std::fprintf(stderr, "outboard-agent: %s\n", st.to_string().c_str());
    return 1;
  }
  return 0;
}
