// Wall clock, peak resident memory, thread count.
#pragma once
#include <cstddef>
#include <string>

namespace aah {

double now_seconds();              // monotonic
double peak_rss_mb();              // VmHWM of this process
double current_rss_mb();           // VmRSS of this process
size_t machine_memory_bytes();     // MemTotal
size_t available_memory_bytes();   // MemAvailable
int num_threads();                 // OpenMP threads in use
// The CPU time n threads get while each spins for `seconds` of wall time, summed and divided by that wall time:
// about n on an idle machine, less where other processes hold cores (e.g. 1.33 for 2 threads on 2 cores that
// share them with one busy process). Measured, because /proc/stat and the load average count the whole host in a
// container, not the cores this process may use.
double measure_cpu_capacity(int n, double seconds);
// OpenMP's team size for this process, unless OMP_NUM_THREADS is set: the CPUs OpenMP sees, reduced to the
// capacity measured at start (measure_cpu_capacity, twice 20 ms) when other processes keep some of them busy. A team
// larger than the free cores waits at every barrier for a thread that is not running: a tiny model measured 7.6x
// slower with 2 threads beside one busy process, and equal with 1 thread (docs/building.md, "Busy machines").
// Returns the team size chosen, and says so on stderr when it is smaller than the CPUs. Results do not depend on the
// team size (reductions run in a fixed order over fixed chunks, kernels/cpu/gemm.h), so the choice changes speed
// only, and a start that caught a passing process is corrected by thread_count_recheck.
int choose_thread_count();
// During a long job (called after every training step; it costs a clock read): at most every 30 s, measures the
// capacity again (20 ms) and sets the team to the cores free now, raising it when a core held at start came free and
// lowering it when another process took one. Does nothing under OMP_NUM_THREADS or on one CPU.
void thread_count_recheck();
std::string format_duration(double seconds);  // "1h02m", "3m05s", "12s"
// OpenBLAS (Debian 12: 0.3.21) picks its kernels at load time from the CPU model. A CPU newer than it knows falls
// back to "Prescott" (SSE3 kernels): on an Intel Xeon model 207 (AVX-512) that measured 50-64 GFLOP/s for an sgemm
// of 1024^3 on 2 threads, against 215-290 with OPENBLAS_CORETYPE=SkylakeX. blas_coretype_fix returns the core type
// to force instead ("SkylakeX" where the CPU has AVX-512 F/BW/VL/DQ/CD, else "Haswell" where it has AVX2 and FMA)
// when `corename` is not one of OpenBLAS's AVX2 cores, and "" when nothing needs fixing. main() applies it by
// restarting itself once with OPENBLAS_CORETYPE set (OpenBLAS reads it only at load); a user's own
// OPENBLAS_CORETYPE is never overridden.
std::string blas_coretype_fix(const std::string& corename, bool avx2_fma, bool avx512);
std::string blas_corename();  // openblas_get_corename(): the kernels OpenBLAS runs in this process
bool cpu_avx2_fma();  // this CPU runs AVX2 and FMA
bool cpu_avx512();   // this CPU has AVX-512 F/BW/VL/DQ/CD (what OpenBLAS's SkylakeX kernels need)
// blas_coretype_fix for this process's OpenBLAS and CPU.
std::string blas_coretype_fix_here();
// A warning when the user's OPENBLAS_CORETYPE (`coretype`; aah's own fix never warns) has OpenBLAS run kernels
// (`corename`, what it runs) narrower than the CPU's: an AVX2 core such as Haswell on a CPU with AVX-512, where
// OpenBLAS's AVX-512 kernels measured 1.6-1.8x faster (sgemm of 1024^3, 2 threads, AMD Zen 5: 187 GFLOP/s against
// 307-345). "" when there is nothing to say. Benchmarks and `aah info` print it; aah never overrides a user's core
// type.
std::string blas_coretype_note(const char* coretype, const std::string& corename, bool avx512);
std::string blas_coretype_note_here();
// The CPU as benchmarks name it: /proc/cpuinfo's model name, its core count and the widest vector ISA this
// build runs ("AMD EPYC, 2 cores, AVX2/FMA"); "unknown CPU" when /proc/cpuinfo cannot be read.
std::string cpu_description();

}  // namespace aah
