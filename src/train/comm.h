// Data-parallel communication (Open MPI when built with it; a single process otherwise). Every
// rank computes the gradient of its slice of the global batch; AllReduceMean averages them, so the
// update equals the single-process one up to float summation order.
#pragma once

#include <cstdint>
#include <string>

namespace ss::train {

class Comm {
 public:
  // Initialises MPI if the program was started by mpirun (and MPI support is compiled in).
  static Comm& World();
  int rank() const { return rank_; }
  int size() const { return size_; }
  bool is_root() const { return rank_ == 0; }
  // In place: x <- mean over ranks of x.
  void AllReduceMean(float* x, int64_t n) const;
  void AllReduceMean(double* x, int64_t n) const;
  void AllReduceSum(double* x, int64_t n) const;
  void Barrier() const;
  // Aborts every rank (after an error on one): MPI_Abort, or nothing single-process.
  void Abort(int code) const;
  ~Comm();

 private:
  Comm();
  int rank_ = 0, size_ = 1;
  bool mpi_ = false;
};

}  // namespace ss::train
