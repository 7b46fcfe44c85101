// libFuzzer target: a run configuration. The input is a config JSON, optionally followed by lines
// "\n--set key=value" (the command line's overrides). Applies, validates, resolves the controller configuration,
// and checks that config.json written for the result reads back to the same configuration.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "core/files.h"
#include "model/config.h"

using namespace aah;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input = fuzz::bytes_of(data, size);
  const std::string sep = "\n--set ";
  std::vector<std::string> parts;
  for (size_t pos = 0;;) {
    size_t next = input.find(sep, pos);
    parts.push_back(input.substr(pos, next == std::string::npos ? std::string::npos : next - pos));
    if (next == std::string::npos) break;
    pos = next + sep.size();
  }
  Config cfg;
  if (!parts[0].empty() && !fuzz::accepts([&] { config_apply_json(cfg, parse_json(parts[0], "fuzz.json"), "fuzz.json"); }))
    return 0;
  for (size_t i = 1; i < parts.size(); i++)
    if (!fuzz::accepts([&] { config_set(cfg, parts[i]); })) return 0;
  fuzz::accepts([&] {
    config_validate(cfg);
    controller_config_of(cfg);
    config_describe(cfg);
    // config.json of a valid configuration reads back to the same configuration.
    const nlohmann::json j = config_to_json(cfg);
    Config back;
    config_apply_json(back, parse_json(j.dump(), "config.json"), "config.json");
    config_validate(back);
    AAH_FUZZ_ASSERT(config_to_json(back) == j);
  });
  return 0;
}
