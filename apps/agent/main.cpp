// outboard-agent: flags -> config -> agent. Needs no Python, so it runs on a
// DPU's Arm cores as well as on a spare core of the host.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
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

// --keys-init DIR [NAME] [--agent-host H]..., --keys-issue DIR NAME
// [--agent [--agent-host H]...], --keys-revoke DIR CERT: keys for a quick
// start of the secure channel (see --cert, --key, --ca, --crl, --psk-file).
int keys_command(int argc, char** argv) {
  const std::string command = argv[1];
  std::vector<std::string> args, hosts;
  bool agent = false;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--agent-host") == 0 && i + 1 < argc) hosts.push_back(argv[++i]);
    else if (std::strcmp(argv[i], "--agent") == 0) agent = true;
    else args.push_back(argv[i]);
  }
  outboard::Status st;
  std::string done;
  if (command == "--keys-init" && (args.size() == 1 || args.size() == 2) && !agent) {
    st = outboard::init_keys(args[0], args.size() == 2 ? args[1] : "outboard agent", hosts);
    done = "keys in " + args[0] + ": ca.pem (ca.key), crl.pem, agent.pem agent.key, client.pem client.key, psk.txt";
  } else if (command == "--keys-issue" && args.size() == 2 && (agent || hosts.empty())) {
    st = outboard::issue_keys(args[0], args[1], agent, hosts);
    done = "keys in " + args[0] + ": " + args[1] + ".pem " + args[1] + ".key";
  } else if (command == "--keys-revoke" && args.size() == 2 && !agent && hosts.empty()) {
    st = outboard::revoke_certificate(args[0], args[1]);
    done = args[1] + " is revoked in " + args[0] + "/crl.pem";
  } else {
    std::fprintf(stderr, "outboard-agent: %s: wrong arguments (see --help)\n", command.c_str());
    return 2;
  }
  if (!st.ok()) {
    std::fprintf(stderr, "outboard-agent: %s\n", st.to_string().c_str());
    return 1;
  }
  std::printf("%s\n", done.c_str());
  return 0;
}

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
  if (argc >= 2 && (std::strcmp(argv[1], "--keys-init") == 0 || std::strcmp(argv[1], "--keys-issue") == 0 ||
                    std::strcmp(argv[1], "--keys-revoke") == 0))
    return keys_command(argc, argv);
  auto options = outboard::agent_options();
  outboard::Status st = options.parse(argc, argv);
  if (options.help_requested()) {
    std::fputs(options.usage().c_str(), stdout);
    std::fputs("\nalone on the command line:\n  --version\n      Outboard's version and the UCX library loaded (its file)\n"
               "  --keys-init DIR [NAME] [--agent-host H]...\n      a CA, an empty CRL and agent and client keys in DIR "
               "(NAME: the agent certificate's common name; H: each host name or IP address it lists, default "
               "loopback and this host's)\n"
               "  --keys-issue DIR NAME [--agent [--agent-host H]...]\n      DIR/NAME.pem and NAME.key signed by DIR's "
               "CA, for a client (or an agent)\n"
               "  --keys-revoke DIR CERT\n      adds CERT to DIR/crl.pem, which agents given --crl read again\n",
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
