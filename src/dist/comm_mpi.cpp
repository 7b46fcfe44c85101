// The MPI communicator (built with -DAAH_MPI=ON, Open MPI or any MPI-3 library). See comm.h.
#ifdef AAH_WITH_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only (the deprecated C++ bindings would need libmpi_cxx)
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/sys.h"
#include "dist/comm.h"

namespace aah {

namespace {

constexpr size_t kMaxCount = size_t(1) << 30;  // MPI counts are int: send big buffers in pieces

class MpiComm final : public Comm {
 public:
  MpiComm() {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      // Only the main thread calls MPI; OpenMP threads compute between the calls.
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    std::string v(version, size_t(len));
    v = v.substr(0, v.find_first_of(",\n"));
    backend_ = "mpi (" + v + ")";
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return backend_; }

  void allreduce_sum(float* x, size_t n) override {
    const double t0 = now_seconds();
    for (size_t i = 0; i < n; i += kMaxCount)
      check(MPI_Allreduce(MPI_IN_PLACE, x + i, int(std::min(kMaxCount, n - i)), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
            "MPI_Allreduce");
    seconds += now_seconds() - t0;
  }
  void allreduce_sum(double* x, size_t n) override {
    const double t0 = now_seconds();
    for (size_t i = 0; i < n; i += kMaxCount)
      check(MPI_Allreduce(MPI_IN_PLACE, x + i, int(std::min(kMaxCount, n - i)), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD),
            "MPI_Allreduce");
    seconds += now_seconds() - t0;
  }
  void allgather(const double* mine, size_t n, double* all) override {
    AAH_CHECK(n < kMaxCount);
    const double t0 = now_seconds();
    check(MPI_Allgather(mine, int(n), MPI_DOUBLE, all, int(n), MPI_DOUBLE, MPI_COMM_WORLD), "MPI_Allgather");
    seconds += now_seconds() - t0;
  }
  void broadcast(void* data, size_t bytes, int root) override {
    const double t0 = now_seconds();
    char* p = static_cast<char*>(data);
    for (size_t i = 0; i < bytes; i += kMaxCount)
      check(MPI_Bcast(p + i, int(std::min(kMaxCount, bytes - i)), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
    seconds += now_seconds() - t0;
  }
  void barrier() override {
    const double t0 = now_seconds();
    check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    seconds += now_seconds() - t0;
  }
  void iallreduce_sum(float* x, size_t n) override {
    const double t0 = now_seconds();
    for (size_t i = 0; i < n; i += kMaxCount) {
      MPI_Request r;
      check(MPI_Iallreduce(MPI_IN_PLACE, x + i, int(std::min(kMaxCount, n - i)), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                           &r),
            "MPI_Iallreduce");
      pending_.push_back(r);
    }
    // Give the library a chance to move earlier buckets along (Open MPI progresses on MPI calls).
    int flag = 0;
    MPI_Testall(int(pending_.size()), pending_.data(), &flag, MPI_STATUSES_IGNORE);
    if (flag) pending_.clear();
    seconds += now_seconds() - t0;
  }
  void wait_all() override {
    const double t0 = now_seconds();
    if (!pending_.empty())
      check(MPI_Waitall(int(pending_.size()), pending_.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    pending_.clear();
    seconds += now_seconds() - t0;
  }
  [[noreturn]] void abort(int code, const std::string& why) override {
    std::fprintf(stderr, "[dist] rank %d of %d: %s: ending the job\n", rank_, size_, why.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

 private:
  // With MPI_ERRORS_ARE_FATAL (the default) a failure never returns; this covers a changed handler.
  void check(int rc, const char* op) {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    abort(1, std::string(op) + " failed: " + std::string(msg, size_t(len)));
  }
  int rank_ = 0, size_ = 1;
  std::string backend_;
  std::vector<MPI_Request> pending_;
};

}  // namespace

Comm* comm_mpi_create() {
  static MpiComm c;
  return &c;
}

void comm_mpi_finalize() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace aah
#endif  // AAH_WITH_MPI
