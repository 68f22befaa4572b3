// Output helpers shared by every verb: machine-readable files (JSON, CSV) written atomically,
// terminal tables, a progress line (terminal only), and a self-contained HTML page with inline SVG
// charts (no scripts, no network).
#pragma once

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/interrupt.h"

namespace ss::report {

// `doc` pretty-printed with a final newline. Paths and token pieces are bytes, not always UTF-8:
// a byte that is not becomes U+FFFD here instead of an exception (JSON strings are UTF-8).
std::string JsonText(const nlohmann::json& doc, int indent = 2);
// Writes JsonText(doc) to `path` atomically (temporary file, then rename).
void WriteJson(const std::string& path, const nlohmann::json& doc);

// A text table with aligned columns: the first row is the header.
std::string FormatTable(const std::vector<std::vector<std::string>>& rows);

// A progress line on stderr, redrawn in place, shown only when stderr is a terminal (quiet when
// piped or in CI). Shows done/total, rate and ETA.
// Every Progress::Update first runs the thread's interrupt poll (common/interrupt.h), drawn or not:
// a long computation stops at its next progress point when the poll throws.
using ProgressPoll = InterruptPoll;
using ScopedProgressPoll = ScopedInterruptPoll;
inline void PollProgress() { PollInterrupt(); }

class Progress {
 public:
  Progress(std::string label, int64_t total, std::string unit = "it");
  void Update(int64_t done);
  void Finish();
  ~Progress();

 private:
  std::string label_, unit_;
  int64_t total_;
  bool enabled_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// ---- SVG charts (strings of <svg>...</svg>, sized in px).

struct Series {
  std::string name;
  std::vector<double> x;
  std::vector<double> y;
};

struct ChartOptions {
  std::string title;
  std::string x_label;
  std::string y_label;
  int width = 640;
  int height = 320;
  bool log_y = false;
  // Optional horizontal reference line (drawn dashed), e.g. a threshold.
  bool has_reference = false;
  double reference_y = 0;
  std::string reference_label;
};

std::string LineChart(const std::vector<Series>& series, const ChartOptions& options);

struct HeatmapOptions {
  std::string title;
  std::string row_label;   // e.g. "layer"
  std::string col_label;   // e.g. "head"
  double min_value = 0.0;  // colour scale range
  double max_value = 1.0;
  int cell = 22;         // px per cell (shrinks for large matrices)
  bool annotate = true;  // print values in cells when they fit
  // Draw the cells as one embedded PNG (one pixel per cell, scaled up) instead of one <rect> each:
  // for large matrices (attention patterns), where rects would make the page megabytes long.
  // No per-cell tooltips or annotations then.
  bool raster = false;
};

// values[r][c]; rows drawn top to bottom.
std::string Heatmap(const std::vector<std::vector<double>>& values, const HeatmapOptions& options);

// ---- HTML page

class HtmlPage {
 public:
  explicit HtmlPage(std::string title);
  void Heading(const std::string& text, int level = 2);
  void Paragraph(const std::string& text);  // escaped
  void Raw(const std::string& html);        // trusted markup (an SVG from this file)
  void Table(const std::vector<std::vector<std::string>>& rows);  // first row is the header
  std::string Render() const;
  void Save(const std::string& path) const;  // atomic

 private:
  std::string title_;
  std::string body_;
};

std::string EscapeHtml(const std::string& text);
std::string FormatNumber(double v, int precision = 3);  // compact: 0.123, 1.2e+05, nan

}  // namespace ss::report
