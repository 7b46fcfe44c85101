// aah data <corpus>: prepare token shards.
#include <cstdio>

#include "cli/commands.h"
#include "io/synth.h"

namespace aah {

void add_data_commands(CLI::App& app, int& rc) {
  auto* data = app.add_subcommand("data", "Prepare a corpus: DIR/train.bin, DIR/val.bin, DIR/meta.json");
  data->require_subcommand(1);
  auto* synth =
      data->add_subcommand("synth", "Built-in synthetic corpus (local grammar + long-range key/value recall)");
  static std::string out;
  static SynthOptions so;
  synth->add_option("--out", out, "Output directory")->required();
  synth->add_option("--tokens", so.tokens, "Total tokens (train + val)")->capture_default_str();
  synth->add_option("--vocab", so.vocab_size, "Vocabulary size")->capture_default_str();
  synth->add_option("--seed", so.seed, "Generator seed")->capture_default_str();
  synth->add_option("--doc-tokens", so.doc_tokens, "Mean document length")->capture_default_str();
  synth->add_option("--min-distance", so.min_distance, "Shortest DEF-to-ASK distance")->capture_default_str();
  synth->add_option("--max-distance", so.max_distance, "Longest DEF-to-ASK distance")->capture_default_str();
  synth->callback([&rc] {
    synth_write(out, so);
    std::printf("wrote %s/train.bin, val.bin, meta.json\n", out.c_str());
    rc = 0;
  });
}

}  // namespace aah
