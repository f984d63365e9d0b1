// libFuzzer: the agent's configuration as an operator (or a launcher that
// passes user input along) writes it: sizes, the --json file, command-line
// arguments, and the setup a session process reads. Each is accepted or
// refused with a Status; what is accepted turns into an AgentConfig.
#include <string>
#include <vector>

#include "agent/session.h"
#include "outboard/agent.h"
#include "outboard/config.h"

using namespace outboard;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0:
      (void)config::parse_size(text);
      break;
    case 1: {
      auto options = agent_options();
      if (options.apply_json(text, "fuzz").ok()) (void)agent_config_from(options);
      break;
    }
    case 2: {
      // NUL-separated arguments.
      std::vector<std::string> args{"outboard-agent"};
      size_t start = 0;
      for (size_t i = 0; i <= text.size(); ++i)
        if (i == text.size() || text[i] == '\0') {
          args.push_back(text.substr(start, i - start));
          start = i + 1;
        }
      std::vector<const char*> argv;
      for (const auto& a : args) {
        if (a.find("json") != std::string::npos) return 0;  // --json reads a file: not the parser under test
        argv.push_back(a.c_str());
      }
      auto options = agent_options();
      if (argv.size() < 64 && options.parse(static_cast<int>(argv.size()), argv.data()).ok() &&
          options.str("json").empty())
        (void)agent_config_from(options);
      break;
    }
    case 3:
      (void)agent::decode_setup(text);
      break;
  }
  return 0;
}
