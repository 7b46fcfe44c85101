// Each command group registers its subcommands on the app; a subcommand's callback does the work and stores the
// process exit code in `rc`. Errors are thrown as aah::Error and printed by main on one line.
#pragma once
#include <cmath>
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>

namespace aah {
// CLI11's number checks let NaN and infinity through (every comparison with NaN is false): float flags also check
// this, "--budget: nan is not a finite number".
inline const CLI::Validator kFiniteNumber(
    [](std::string& s) -> std::string {
      char* end = nullptr;
      const double v = std::strtod(s.c_str(), &end);
      return end != s.c_str() && *end == '\0' && std::isfinite(v) ? "" : s + " is not a finite number";
    },
    "FINITE");

void add_data_commands(CLI::App& app, int& rc);   // data, tokenizer, tokenize     (cmd_data.cpp)
void add_train_commands(CLI::App& app, int& rc);  // train, eval                   (cmd_train.cpp)
void add_bench_commands(CLI::App& app, int& rc);  // bench train|attention|...     (cmd_bench.cpp)
void add_generate_commands(CLI::App& app, int& rc);  // generate                    (cmd_generate.cpp)
void add_suite_commands(CLI::App& app, int& rc);  // suite, report                 (cmd_suite.cpp)
void add_probe_commands(CLI::App& app, int& rc);  // probe heads                   (cmd_probe.cpp)
}  // namespace aah
