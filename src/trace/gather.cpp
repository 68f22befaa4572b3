#include <string>
#include <vector>

#include "common/error.h"
#include "trace/trace.h"

#ifdef SINKSCOPE_HAVE_MPI
#include <mpi.h>
#endif

namespace ss::trace {

std::vector<CheckpointResult> GatherResults(const std::vector<CheckpointResult>& local, int rank,
                                            int ranks) {
  if (ranks <= 1) return local;
#ifdef SINKSCOPE_HAVE_MPI
  // MPI is initialised by train::Comm::World() (the caller got rank/ranks from it).
  nlohmann::json mine = nlohmann::json::array();
  for (size_t i = rank; i < local.size(); i += ranks) mine.push_back(ResultJson(local[i]));
  const std::string bytes = mine.dump();
  int n = static_cast<int>(bytes.size());
  std::vector<int> counts(ranks), displs(ranks);
  MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int total = 0;
  for (int r = 0; r < ranks; ++r) {
    displs[r] = total;
    total += counts[r];
  }
  std::string all(static_cast<size_t>(total), '\0');
  MPI_Allgatherv(bytes.data(), n, MPI_CHAR, all.data(), counts.data(), displs.data(), MPI_CHAR,
                 MPI_COMM_WORLD);
  std::vector<CheckpointResult> out = local;
  for (int r = 0; r < ranks; ++r) {
    const nlohmann::json part = nlohmann::json::parse(all.substr(displs[r], counts[r]));
    size_t i = r;
    for (const auto& j : part) {
      SS_ASSERT(i < out.size());
      CheckpointResult res = ResultFromJson(j);
      res.cached = local[i].cached;
      out[i] = std::move(res);
      i += ranks;
    }
  }
  return out;
#else
  SS_ASSERT(false && "GatherResults with ranks > 1 needs an MPI build");
  return local;
#endif
}

}  // namespace ss::trace
