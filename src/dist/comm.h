// The processes of a data-parallel run (`mpirun -np N aah train ...`): rank, size and the few collectives the
// training loop needs. One interface, two implementations chosen at build time: a single process (size 1, every
// collective a no-op) and MPI (CMake option AAH_MPI). Only the main thread calls it.
//
// Collectives give the same result, bit for bit, on every rank: all-gathers are combined by the caller in rank
// order, and a float all-reduce is MPI's (for 2 ranks a + b, the same on both; checked at every checkpoint).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace aah {

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "single" or "mpi (Open MPI 4.1.4)"
  // In place: x becomes the sum over ranks.
  virtual void allreduce_sum(float* x, size_t n) = 0;
  virtual void allreduce_sum(double* x, size_t n) = 0;
  // all (size, n) = every rank's `mine` (n), in rank order.
  virtual void allgather(const double* mine, size_t n, double* all) = 0;
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // Non-blocking float all-reduce (sum, in place): started now, finished by wait_all(); x must stay untouched
  // until then. Lets gradient buckets travel while backward goes on.
  virtual void iallreduce_sum(float* x, size_t n) = 0;
  virtual void wait_all() = 0;
  // Ends every process of the job with `code` after printing `why` (one rank's error must not leave the others
  // waiting in a collective).
  [[noreturn]] virtual void abort(int code, const std::string& why) = 0;

  double seconds = 0;  // wall time spent inside communication calls (blocking parts)
};

// The job's communicator. With an MPI build launched by mpirun (or another MPI launcher) the first call initializes
// MPI; otherwise (no launcher, or a build without MPI) it is the single process. A build without MPI started by a
// launcher with more than one process refuses to run (each copy would train alone into the same directory).
Comm& comm_world();
bool comm_built_with_mpi();
// Finalizes MPI if comm_world() initialized it (call once, at the end of main).
void comm_finalize();
// For main's error path: true when this process is one of several (an error must then end the whole job).
bool comm_is_parallel();

// FNV-1a over bytes: a cheap fingerprint to check that every rank holds the same parameters.
uint64_t comm_fingerprint(const void* data, size_t bytes);

}  // namespace aah
