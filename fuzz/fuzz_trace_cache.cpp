// Fuzzes the trace cache (DIR/.sinkscope-trace-cache/<key>.json, one profile per checkpoint) and
// the per-checkpoint result JSON the MPI ranks exchange. AnalyseCheckpoints treats an entry that
// does not parse (JSON error or ss::Error) as damaged and recomputes it; an entry that loads feeds
// the stage classifier and the reports, which are run here on it.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "common/error.h"
#include "trace/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  std::vector<ss::trace::CheckpointResult> results;
  try {
    ss::trace::CheckpointResult r;
    r.ref.path = "fuzz/step-1";
    r.ref.step = 1;
    r.ok = true;
    r.profile = ss::trace::ProfileFromJson(j, "fuzz/cache.json");
    results.push_back(r);
    r.ref.step = 2;
    results.push_back(r);
  } catch (const ss::Error&) {
  }
  try {
    results.push_back(ss::trace::ResultFromJson(j));
  } catch (const ss::Error&) {
  } catch (const nlohmann::json::exception&) {  // the MPI gather's own JSON: fails the run cleanly
  }
  if (results.empty()) return 0;
  ss::trace::TraceSettings settings;
  ss::trace::AssignStages(results, settings.stage);
  (void)ss::trace::TraceJson(results, settings).dump();
  (void)ss::trace::TraceTable(results, settings.stage);
  (void)ss::trace::TraceHtml(results, settings);
  return 0;
}
