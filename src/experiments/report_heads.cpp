// The heads that matter (probe.json of a full run, synth data): per head the attention mass on the DEF and the
// retrieval accuracy drop when that head alone is cut, beside each regime's final window of the same (layer, head)
// in its run of the same seed. One seed, the lowest probed: a head index names nothing across seeds, while runs of
// one seed start from the same weights and see the same batches.
#include <algorithm>

#include "core/check.h"
#include "experiments/report_content.h"
#include "experiments/report_stats.h"

namespace aah::report {

namespace {

constexpr double kHeadMatters = 0.10;  // a head matters at an accuracy drop of at least this

std::string heads_note(const RunData& probed, int cut) {
  const int T = probed.cfg.train.context;
  return str_cat(
      "Probe of full-s", probed.seed, " at full windows, context ", T,
      " (`aah probe heads`): DEF mass = "
      "attention probability from the query that predicts a question's value to its DEF k v; accuracy drop = "
      "retrieval accuracy with every head full minus with this head alone cut to window ",
      cut,
      ". Heads sorted by "
      "the drop; * = the head matters (drop >= ",
      fixed(kHeadMatters, 2),
      "). Window columns: the final window of the "
      "same (layer, head) in each regime's seed-",
      probed.seed,
      " run (same initial weights and batches; a head "
      "index names nothing across seeds, so seeds are not averaged). The other seeds' probes are in their runs' "
      "probe.json.");
}

// The summary's line: the heads that matter (as "layer.head"), or that none does.
std::string heads_summary(const RunData& probed, const std::vector<std::string>& matter) {
  std::string list;
  for (const auto& m : matter) list += (list.empty() ? "" : ", ") + m;
  return matter.empty() ? str_cat("- **Heads that matter** (full-s", probed.seed,
                                  "): no single head's cut drops "
                                  "retrieval accuracy by ",
                                  fixed(kHeadMatters, 2), " or more.\n")
                        : str_cat("- **Heads that matter** for retrieval (full-s", probed.seed,
                                  ", accuracy drop >= ", fixed(kHeadMatters, 2), " when cut alone): ", list,
                                  ". Their final windows per regime are in the heads table.\n");
}

}  // namespace

HeadsSection heads_section(const SuiteRuns& s) {
  HeadsSection out;
  const RunData* probed = nullptr;
  for (const RunData* r : regime_runs(s.runs, "full"))
    if (!r->probe.is_null() && (!probed || r->seed < probed->seed)) probed = r;
  if (!probed) return out;
  const int cut = probed->probe.value("cut_window", 0);
  std::vector<json> rows(probed->probe["heads"].begin(), probed->probe["heads"].end());  // checked on reading
  std::stable_sort(rows.begin(), rows.end(), [](const json& a, const json& b) {
    return a["accuracy_drop"].get<double>() > b["accuracy_drop"].get<double>();
  });
  out.table.header = {"head (layer.head)", "DEF mass", str_cat("accuracy drop, cut to ", cut)};
  for (const auto& g : s.regimes)
    if (g != "full") out.table.header.push_back(g + " window");
  std::vector<std::string> matter;
  for (size_t i = 0; i < rows.size(); i++) {
    const int l = rows[i]["layer"].get<int>(), h = rows[i]["head"].get<int>();
    const double mass = rows[i]["def_mass"].get<double>(), drop = rows[i]["accuracy_drop"].get<double>();
    const bool matters = drop >= kHeadMatters;
    if (matters) matter.push_back(str_cat(l, ".", h));
    json jh = {{"layer", l},         {"head", h},
               {"def_mass", mass},   {"accuracy_drop", drop},
               {"matters", matters}, {"windows", json::object()}};
    std::vector<std::string> row = {str_cat(l, ".", h, matters ? " *" : ""), fixed(mass, 3), fixed(drop, 3)};
    for (const auto& g : s.regimes) {
      if (g == "full") continue;
      const RunData* r = seed_run(regime_runs(s.runs, g), probed->seed);
      const json& map = r ? r->eval["window_map"] : json();
      const bool has = r && size_t(l) < map.size() && size_t(h) < map[size_t(l)].size();
      row.push_back(has ? std::to_string(map[size_t(l)][size_t(h)].get<int>()) : "–");
      jh["windows"][g] = has ? map[size_t(l)][size_t(h)] : json();
    }
    out.heads.push_back(jh);
    if (i < 8 || matters) out.table.rows.push_back(row);  // the 8 that matter most, and every one that matters
  }
  out.note = heads_note(*probed, cut);
  if (s.have_full) out.summary = heads_summary(*probed, matter);
  return out;
}

}  // namespace aah::report
