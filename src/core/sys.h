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
std::string format_duration(double seconds);  // "1h02m", "3m05s", "12s"
// The CPU as benchmarks name it: /proc/cpuinfo's model name, its core count and the widest vector ISA this
// build runs ("AMD EPYC, 2 cores, AVX2/FMA"); "unknown CPU" when /proc/cpuinfo cannot be read.
std::string cpu_description();

}  // namespace aah
