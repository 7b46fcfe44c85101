// aah probe heads.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "eval/probe.h"

namespace aah {

void add_probe_commands(CLI::App& app, int& rc) {
  auto* probe = app.add_subcommand("probe", "Probes of a trained model");
  probe->require_subcommand(1);
  auto* heads = probe->add_subcommand(
      "heads",
      "Which heads retrieve, on a synth corpus at full windows: per (layer, head), the attention mass from the query "
      "that predicts a question's value (the key in ASK k) to its DEF k v, and the retrieval accuracy drop when that "
      "head alone is cut to the smallest candidate window");
  static ProbeHeadsOptions po;
  static bool json = false;
  heads->add_option("--run", po.run, "Run directory (or Hugging Face directory)")->required();
  heads->add_option("--data", po.data, "synth corpus directory (aah data synth)")->required();
  heads->add_option("--set", po.sets, "Override a key, e.g. --set train.eval_windows=64");
  heads->add_flag("--json", json, "Print one JSON object: heads [{layer, head, def_mass, accuracy_drop}], accuracy_full");
  heads->callback([&rc] {
    const nlohmann::json r = probe_heads(po);
    if (json) {
      std::printf("%s\n", r.dump().c_str());
    } else {
      std::printf("retrieval accuracy %.4f at full windows (%lld questions, context %d); cut window %d\n",
                  r["accuracy_full"].get<double>(), (long long)r["questions"].get<int64_t>(), r["context"].get<int>(),
                  r["cut_window"].get<int>());
      std::printf("layer head  def_mass  accuracy_drop\n");
      for (auto& h : r["heads"])
        std::printf("%5d %4d  %8.4f  %+13.4f\n", h["layer"].get<int>(), h["head"].get<int>(),
                    h["def_mass"].get<double>(), h["accuracy_drop"].get<double>());
    }
    rc = 0;
  });
}

}  // namespace aah
