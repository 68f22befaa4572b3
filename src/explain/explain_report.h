// What `sinkscope explain` writes: the JSON document (schema "sinkscope.explain/1"), the terminal
// summary and the self-contained HTML page, built from an ExplainResult (no model is run here).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "analysis/analyze_report.h"
#include "explain/explain.h"

namespace ss::explain {

inline constexpr const char* kExplainSchema = "sinkscope.explain/1";

struct ExplainReport {
  analysis::ModelIdentity model;
  std::string source;     // where the samples came from
  std::string condition;  // first-token condition of the samples
  uint64_t seed = 0;
  ExplainResult result;
};

nlohmann::json ReportJson(const ExplainReport& report);
std::string ReportSummary(const ExplainReport& report);
std::string ReportHtml(const ExplainReport& report);

}  // namespace ss::explain
