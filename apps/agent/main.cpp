// outboard-agent: flags -> config -> agent. Needs no Python, so it runs on a
// DPU's Arm cores as well as on a spare core of the host.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "outboard/agent.h"
#include "outboard/channel.h"
#include "outboard/log.h"
#include "outboard/version.h"

namespace {
// Message buffers cycle through the same sizes. With glibc's defaults a
// burst of 64 KiB messages freed at once was trimmed back to the OS and
// faulted in again for the next: ~9k brk calls and ~30k page faults a second
// on the agent while streaming. Keeping that much freed heap instead (and
// serving buffers up to kHeapMmapBytes from it) gave 10-50% more streaming
// throughput in interleaved runs.
constexpr int kHeapKeepBytes = 64 << 20;
constexpr int kHeapMmapBytes = 4 << 20;

outboard::Agent* g_agent = nullptr;
void on_signal(int) {
  if (g_agent) g_agent->stop();
}
}  // namespace

int main(int argc, char** argv) {
#if defined(__GLIBC__)
  mallopt(M_TRIM_THRESHOLD, kHeapKeepBytes);
  mallopt(M_MMAP_THRESHOLD, kHeapMmapBytes);
#endif
  if (argc == 2 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("outboard-agent %s, %s\n", outboard::version(), outboard::transport_version().c_str());
    return 0;
  }
  // A session process, started by the agent for the clients of one token.
  if (argc == 3 && std::strcmp(argv[1], "--session-fd") == 0) return outboard::run_agent_session(std::atoi(argv[2]));
  // Keys for a quick start of the secure channel (see --cert, --key, --ca, --psk-file).
  if ((argc == 3 || argc == 4) && std::strcmp(argv[1], "--keys-init") == 0) {
    outboard::Status made = outboard::init_keys(argv[2], argc == 4 ? argv[3] : "outboard agent");
    if (!made.ok()) {
      std::fprintf(stderr, "outboard-agent: %s\n", made.to_string().c_str());
      return 1;
    }
    std::printf("keys in %s: ca.pem (ca.key), agent.pem agent.key, client.pem client.key, psk.txt\n", argv[2]);
    return 0;
  }
  auto options = outboard::agent_options();
  outboard::Status st = options.parse(argc, argv);
  if (options.help_requested()) {
    std::fputs(options.usage().c_str(), stdout);
    std::fputs("\nalone on the command line:\n  --version\n      Outboard's version and the UCX library loaded (its file)\n"
               "  --keys-init DIR [NAME]\n      a CA and agent and client keys in DIR (NAME: the agent certificate's "
               "common name)\n",
               stdout);
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
