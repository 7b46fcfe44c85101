// `aah eval`: the inference evaluation of a run directory (or a Hugging Face Qwen3 directory) on validation tokens,
// under the run's window policy, with the inference metrics of spec section 8.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace aah {

struct EvalRunOptions {
  std::string run;    // run directory
  std::string data;   // DIR with val.bin, or
  std::string text;   // any UTF-8 text file, tokenized with the run's tokenizer.json
  std::vector<std::string> sets;  // --set key=value on top of the run's config
  int position_bucket = 64;       // tokens per loss_by_position bucket
};

// Returns one JSON object:
//   val_loss, val_ppl, tokens, windows (evaluation windows of context tokens), context
//   inference_acr    sum_W f_W * W / T, f_W the fraction of (layer, head, sequence) executions with window W
//   window_fractions {"W": f_W}
//   pair_ratio       executed causal (query, key) pairs / full causal pairs, over the evaluated sequences
//   attn_work_ratio  attention multiply-adds the kernels counted / the same kernels with every window full
//   tokens_per_s     after warmup (the first micro-batch is not timed; all of them when there is only one)
//   peak_rss_mb      this process's peak resident memory
//   window_map       (L, H) windows in force at the end of the evaluation
//   regime, windows_decided_at_eval (true when the checkpoint's cached decisions were not for this regime)
//   loss_by_position {"bucket": P, "start": [0, P, ...], "loss": [mean nats], "tokens": [count]}: the loss at
//                    positions t in [start, start + P) of the windows (position t predicts token t + 1)
//   retrieval        synth data only (eval/retrieval.h): {"accuracy", "loss", "n", "buckets": [{"lo", "hi", "n",
//                    "accuracy", "loss"}, ...]} of the value after ASK k, by DEF-ASK distance within a window
// A Hugging Face directory (config.json without a train block) is evaluated at its max_position_embeddings, capped
// at 8192 and by memory, unless --set train.context=N is given.
nlohmann::json eval_run(const EvalRunOptions& opt);

}  // namespace aah
