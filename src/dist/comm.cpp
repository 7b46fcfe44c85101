// The single-process communicator and the choice between it and MPI (see comm.h).
#include "dist/comm.h"

#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/check.h"

namespace aah {

#ifdef AAH_WITH_MPI
Comm* comm_mpi_create();  // comm_mpi.cpp
void comm_mpi_finalize();
#endif

namespace {

class SingleComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "single"; }
  void allreduce_sum(float*, size_t) override {}
  void allreduce_sum(double*, size_t) override {}
  void allgather(const double* mine, size_t n, double* all) override {
    if (all != mine) std::memcpy(all, mine, n * sizeof(double));
  }
  void broadcast(void*, size_t, int) override {}
  void barrier() override {}
  void iallreduce_sum(float*, size_t) override {}
  void wait_all() override {}
  [[noreturn]] void abort(int code, const std::string&) override { std::exit(code); }
};

// Processes in the job as the launcher says (Open MPI, MPICH/Hydra, PMIx); 0 when not started by one.
int launcher_size() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"})
    if (const char* s = std::getenv(v)) return std::atoi(s);
  return 0;
}

Comm* g_comm = nullptr;
bool g_mpi = false;

}  // namespace

bool comm_built_with_mpi() {
#ifdef AAH_WITH_MPI
  return true;
#else
  return false;
#endif
}

Comm& comm_world() {
  if (g_comm) return *g_comm;
  const int n = launcher_size();
#ifdef AAH_WITH_MPI
  if (n > 0) {
    g_comm = comm_mpi_create();
    g_mpi = true;
    return *g_comm;
  }
#else
  if (n > 1)
    fail("[dist] started by an MPI launcher with ", n, " processes, but this aah was built without MPI: install ",
         "libopenmpi-dev openmpi-bin (scripts/setup.sh) and rebuild (cmake -DAAH_MPI=ON), or run one process");
#endif
  static SingleComm single;
  g_comm = &single;
  return *g_comm;
}

void comm_finalize() {
#ifdef AAH_WITH_MPI
  if (g_mpi) comm_mpi_finalize();
#endif
}

bool comm_is_parallel() { return g_comm && g_comm->size() > 1; }

uint64_t comm_fingerprint(const void* data, size_t bytes) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace aah
