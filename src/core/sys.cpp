#include "core/sys.h"

#include "core/check.h"

#include <omp.h>
#include <strings.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>

extern "C" char* openblas_get_corename(void);

namespace aah {

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

static double status_field_mb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  size_t klen = std::strlen(key);
  while (std::getline(f, line))
    if (line.compare(0, klen, key) == 0) return std::atof(line.c_str() + klen) / 1024.0;
  return 0;
}

double peak_rss_mb() { return status_field_mb("VmHWM:"); }
double current_rss_mb() { return status_field_mb("VmRSS:"); }

static size_t meminfo_bytes(const char* key) {
  std::ifstream f("/proc/meminfo");
  std::string line;
  const size_t klen = std::strlen(key);
  while (std::getline(f, line))
    if (line.compare(0, klen, key) == 0) return size_t(std::atoll(line.c_str() + klen)) * 1024;
  return 0;
}

size_t machine_memory_bytes() { return meminfo_bytes("MemTotal:"); }
size_t available_memory_bytes() { return meminfo_bytes("MemAvailable:"); }

int num_threads() { return omp_get_max_threads(); }

double measure_cpu_capacity(int n, double seconds) {
  double share_sum = 0;  // per thread: its CPU time / its own wall window (thread start-up is outside it)
#pragma omp parallel num_threads(n) reduction(+ : share_sum)
  {
    timespec a{}, b{};
    const double t0 = now_seconds();
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    volatile uint64_t x = 1;
    while (now_seconds() - t0 < seconds) x = x * 6364136223846793005ULL + 1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    const double cpu = double(b.tv_sec - a.tv_sec) + 1e-9 * double(b.tv_nsec - a.tv_nsec);
    share_sum += cpu / std::max(1e-9, now_seconds() - t0);
  }
  return share_sum;
}

namespace {
int g_all_threads = 0;      // the CPUs OpenMP saw at start; 0 when the team is not ours to change
double g_last_check = 0;    // now_seconds() of the last capacity measurement
}  // namespace

int choose_thread_count() {
  const int n = omp_get_max_threads();
  if (std::getenv("OMP_NUM_THREADS") || n <= 1) return n;
  g_all_threads = n;
  g_last_check = now_seconds();
  // the larger of two samples: a passing task can only make one look smaller
  const double capacity = std::max(measure_cpu_capacity(n, 0.02), measure_cpu_capacity(n, 0.02));
  const int free_cores = std::clamp(int(capacity + 0.25), 1, n);
  if (free_cores < n) {
    omp_set_num_threads(free_cores);
    std::fprintf(stderr, "[aah] %d of %d cores free at start (other processes hold the rest): %d OpenMP thread%s; "
                 "OMP_NUM_THREADS=%d forces all\n", free_cores, n, free_cores, free_cores == 1 ? "" : "s", n);
  }
  return free_cores;
}

void thread_count_recheck() {
  constexpr double kEvery = 30;  // seconds between measurements: 20 ms each, under 0.1% of the time
  if (g_all_threads <= 1 || now_seconds() - g_last_check < kEvery) return;
  const int free_cores = std::clamp(int(measure_cpu_capacity(g_all_threads, 0.02) + 0.25), 1, g_all_threads);
  g_last_check = now_seconds();
  if (free_cores == omp_get_max_threads()) return;
  omp_set_num_threads(free_cores);
  std::fprintf(stderr, "[aah] %d of %d cores free now: %d OpenMP thread%s (results do not depend on it)\n", free_cores,
               g_all_threads, free_cores, free_cores == 1 ? "" : "s");
}

std::string format_duration(double s) {
  char b[32];
  if (s < 0 || s != s) return "?";
  long t = long(s + 0.5);
  if (t >= 3600)
    std::snprintf(b, sizeof b, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else if (t >= 60)
    std::snprintf(b, sizeof b, "%ldm%02lds", t / 60, t % 60);
  else
    std::snprintf(b, sizeof b, "%lds", t);
  return b;
}


std::string cpu_description() {
  std::ifstream f("/proc/cpuinfo");
  std::string line, model;
  int cores = 0;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0 && model.empty()) model = line.substr(line.find(':') + 2);
    if (line.rfind("processor", 0) == 0) cores++;
  }
  if (model.empty()) return "unknown CPU";
  // What the kernels of this build run (the dispatch picks by compile flags and the CPU alike).
  const char* isa = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") ? "AVX-512"
                    : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")       ? "AVX2/FMA"
                                                                                              : "SSE";
  return model + ", " + std::to_string(cores) + (cores == 1 ? " core, " : " cores, ") + isa;
}

std::string blas_coretype_fix(const std::string& corename, bool avx2_fma, bool avx512) {
  // OpenBLAS's core types with AVX2 and FMA kernels (0.3.21's names; later versions add more, which keep theirs).
  static const char* const kModern[] = {"Haswell", "SkylakeX", "Cooperlake", "SapphireRapids", "Zen", "Excavator"};
  for (const char* m : kModern)
    if (corename == m) return "";
  if (avx512) return "SkylakeX";
  if (avx2_fma) return "Haswell";
  return "";
}

std::string blas_corename() { return openblas_get_corename(); }

bool cpu_avx2_fma() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
bool cpu_avx512() {
  return cpu_avx2_fma() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512cd");
}

std::string blas_coretype_fix_here() { return blas_coretype_fix(blas_corename(), cpu_avx2_fma(), cpu_avx512()); }

std::string blas_coretype_note(const char* coretype, const std::string& corename, bool avx512) {
  if (!coretype || !*coretype || !avx512) return "";
  static const char* const kAvx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};  // 0.3.21's names
  for (const char* m : kAvx512)
    if (strcasecmp(corename.c_str(), m) == 0) return "";
  return str_cat("note: OPENBLAS_CORETYPE=", coretype, " makes OpenBLAS run its ", corename,
                 " kernels, narrower than this CPU's (it has AVX-512; OpenBLAS's AVX-512 kernels measured 1.6-1.8x ",
                 "faster at sgemm): matrix products and any figure relative to them are slower than they could be. ",
                 "Unset it to let OpenBLAS choose.");
}

std::string blas_coretype_note_here() {
  if (std::getenv("AAH_OPENBLAS_DETECTED")) return "";  // aah set the variable itself (main.cpp)
  return blas_coretype_note(std::getenv("OPENBLAS_CORETYPE"), blas_corename(), cpu_avx512());
}

}  // namespace aah
