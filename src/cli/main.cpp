// aah <command>: thin parsing and printing; the work happens in the layers below (see cli/commands.h).
#include <unistd.h>

#include <csignal>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <string>

#include "cli/commands.h"
#include "core/check.h"
#include "core/sys.h"
#include "dist/comm.h"
#include "kernels/bf16/bf16.h"
#include "model/config.h"

// aah info: what aah sees on this machine.
static void print_info() {
  std::printf("cpu: %s\n", aah::cpu_description().c_str());
#ifdef __AVX512F__
  std::puts("attention tile products: AVX-512 (16-wide) and AVX2");
#elif defined(__AVX2__)
  std::puts("attention tile products: AVX2 (8-wide)");
#else
  std::puts("attention tile products: scalar");
#endif
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  const char* detected = std::getenv("AAH_OPENBLAS_DETECTED");
  std::string how;
  if (forced && detected)
    how = aah::str_cat(" (OPENBLAS_CORETYPE=", forced, " set by aah: OpenBLAS took this CPU for ", detected, ")");
  else if (forced)
    how = aah::str_cat(" (OPENBLAS_CORETYPE=", forced, ")");
  std::printf("openblas core: %s%s\n", aah::blas_corename().c_str(), how.c_str());
  std::printf("openmp threads: %d\n", aah::num_threads());
  const std::string note = aah::blas_coretype_note_here();
  if (!note.empty()) std::printf("%s\n", note.c_str());
  // What train.precision=bf16 would run here, with the two products' rates timed now (about 0.05 s): a CPU can
  // have bf16 instructions that run slower than its fp32 ones.
  std::string isa;
  if (aah::bf16::cpu_supported(&isa)) {
    const aah::bf16::ProductRates rates = aah::bf16::product_rates();
    const aah::bf16::AttnKernel kernel = aah::bf16::attn_kernel(32);
    const std::string attention = kernel == aah::bf16::AttnKernel::fp32
                                      ? "attention in fp32 (no bf16 attention kernel in this build for this CPU)"
                                      : aah::str_cat("attention's products ", aah::bf16::attn_kernel_how(kernel),
                                                     " (head dims that are multiples of 32)");
    std::printf(
        "bf16 (train.precision=bf16): products on oneDNN (%s), %.0f GFLOP/s against the fp32 sgemm's %.0f; %s\n",
        isa.c_str(), rates.bf16_gflops, rates.fp32_gflops, attention.c_str());
    if (const std::string warning = aah::bf16::slow_product_warning(rates); !warning.empty())
      std::printf("note: %s\n", warning.c_str());
  } else {
    std::printf(
        "bf16 (train.precision=bf16): not available (oneDNN found %s; bf16 needs AVX-512 BF16 or AMX): fp32 only\n",
        isa.c_str());
  }
}

int main(int argc, char** argv) {
  // OpenBLAS misread this CPU as an old one (SSE kernels, ~4x slower matrix products): restart once with the core
  // type forced (core/sys.h). Only when the user has not set OPENBLAS_CORETYPE; if exec fails, go on as we are.
  if (!std::getenv("OPENBLAS_CORETYPE")) {
    const std::string fix = aah::blas_coretype_fix_here();
    if (!fix.empty() && ::setenv("AAH_OPENBLAS_DETECTED", aah::blas_corename().c_str(), 1) == 0 &&
        ::setenv("OPENBLAS_CORETYPE", fix.c_str(), 1) == 0)
      ::execv("/proc/self/exe", argv);
  }
  // A file-size limit (ulimit -f) makes a write fail with EFBIG, which every writer reports naming its file, instead
  // of killing aah mid-write with SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
  aah::choose_thread_count();  // fewer OpenMP threads when other processes hold cores (OMP_NUM_THREADS overrides)
  CLI::App app{
      "aah - Asymmetric Attention Heads: train, evaluate and benchmark decoder-only Transformers whose attention\n"
      "heads each get their own causal window.\n\n"
      "Typical use:\n"
      "  aah data synth --out data/synth             # built-in corpus with long-range recall\n"
      "  aah train --data data/synth --out runs/a    # train (every key: aah --help-config)\n"
      "  aah eval --run runs/a --data data/synth     # validation loss and perplexity\n"
      "  aah probe heads --run runs/a --data data/synth   # which heads retrieve (synth data)\n"
      "  aah suite --preset cpu-small --out runs/cpu-small   # the five main regimes side by side + report\n"
      "  aah bench train                             # training speed of the bench-c reference config\n"};
  app.set_help_all_flag("--help-all", "Help for every command");
  bool help_config = false;
  app.add_flag("--help-config", help_config, "List every configuration key with its default and meaning");
  bool help_regimes = false, markdown = false;
  app.add_flag("--help-regimes", help_regimes, "List every regime (aah.regime) and the knobs it sets");
  app.add_flag("--markdown", markdown, "With --help-config / --help-regimes: a Markdown table (docs/config.md, docs/regimes.md)");
  app.require_subcommand(0, 1);
  int rc = 0;
  aah::add_data_commands(app, rc);
  aah::add_train_commands(app, rc);
  aah::add_bench_commands(app, rc);
  aah::add_generate_commands(app, rc);
  aah::add_suite_commands(app, rc);
  aah::add_probe_commands(app, rc);
  auto* info =
      app.add_subcommand("info", "What aah sees on this machine: CPU, vector kernels, OpenBLAS core, threads, bf16");
  info->callback(print_info);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const aah::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    if (aah::comm_is_parallel()) aah::comm_world().abort(1, "error");  // the other ranks must not wait for this one
    aah::comm_finalize();
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    if (aah::comm_is_parallel()) aah::comm_world().abort(2, "error");
    aah::comm_finalize();
    return 2;
  }
  aah::comm_finalize();
  if (help_config && markdown) {
    std::fputs(aah::config_markdown().c_str(), stdout);
  } else if (help_regimes) {
    if (markdown) {
      std::fputs(aah::controller_regimes_markdown().c_str(), stdout);
    } else {
      std::puts("Regimes (--set aah.regime=NAME; variants combine with a main regime by '+'):");
      for (auto& r : aah::controller_regime_names()) std::printf("  %s\n", r.c_str());
      std::puts("(aah --help-regimes --markdown: what each sets and does)");
    }
  } else if (help_config) {
    std::puts("Configuration keys (--set key=value; JSON files nest train.* and aah.* as objects):");
    for (auto& [k, v] : aah::config_describe(aah::Config{})) std::printf("  %s = %s\n", k.c_str(), v.c_str());
  } else if (app.get_subcommands().empty()) {
    std::fputs(app.help().c_str(), stdout);
  }
  // Everything printed (tables, JSON, tokens, generated text) must have reached its file: a full disk or a
  // file-size limit behind a redirection is an error, not a short output with exit 0.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "error: writing the standard output failed: %s%s\n", std::strerror(errno),
                 errno == EFBIG ? " (a file-size limit: ulimit -f)" : errno == ENOSPC ? " (the disk is full)" : "");
    return 1;
  }
  return rc;
}
