#include "train/comm.h"

#include <algorithm>
#include <cstdlib>
#include <vector>

#ifdef SINKSCOPE_HAVE_MPI
#include <mpi.h>
#endif

namespace ss::train {

Comm& Comm::World() {
  static Comm comm;
  return comm;
}

Comm::Comm() {
#ifdef SINKSCOPE_HAVE_MPI
  // Only initialise under a launcher: a plain run stays a plain process (no MPI start-up cost).
  if (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE")) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    mpi_ = true;
  }
#endif
}

Comm::~Comm() {
#ifdef SINKSCOPE_HAVE_MPI
  if (mpi_) MPI_Finalize();
#endif
}

void Comm::AllReduceMean(float* x, int64_t n) const {
  if (size_ == 1) return;
#ifdef SINKSCOPE_HAVE_MPI
  // Chunks below INT_MAX elements (MPI counts are int).
  for (int64_t off = 0; off < n; off += (1 << 30)) {
    const int count = static_cast<int>(std::min<int64_t>(n - off, 1 << 30));
    MPI_Allreduce(MPI_IN_PLACE, x + off, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  const float inv = 1.0f / size_;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
#endif
}

void Comm::AllReduceMean(double* x, int64_t n) const {
  if (size_ == 1) return;
#ifdef SINKSCOPE_HAVE_MPI
  MPI_Allreduce(MPI_IN_PLACE, x, static_cast<int>(n), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  for (int64_t i = 0; i < n; ++i) x[i] /= size_;
#endif
}

void Comm::AllReduceSum(double* x, int64_t n) const {
  if (size_ == 1) return;
#ifdef SINKSCOPE_HAVE_MPI
  MPI_Allreduce(MPI_IN_PLACE, x, static_cast<int>(n), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
#else
  (void)x;
  (void)n;
#endif
}

void Comm::Barrier() const {
#ifdef SINKSCOPE_HAVE_MPI
  if (mpi_) MPI_Barrier(MPI_COMM_WORLD);
#endif
}

void Comm::Abort(int code) const {
#ifdef SINKSCOPE_HAVE_MPI
  if (mpi_ && size_ > 1) MPI_Abort(MPI_COMM_WORLD, code);
#endif
}

}  // namespace ss::train
