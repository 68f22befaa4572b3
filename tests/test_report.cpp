#include <gtest/gtest.h>

#include <filesystem>

#include "common/error.h"
#include "common/file_util.h"
#include "report/report.h"

namespace ss::report {

TEST(Report, TableAlignsColumns) {
  std::string t = FormatTable({{"layer", "rate"}, {"0", "0.125"}, {"10", "1"}});
  EXPECT_EQ(t, "layer  rate\n------------\n0      0.125\n10     1\n");
}

TEST(Report, ChartsAndPageAreSelfContained) {
  std::string line = LineChart({{"a<b", {0, 1, 2}, {1, 4, 9}}}, {.title = "t", .x_label = "x"});
  EXPECT_NE(line.find("<polyline"), std::string::npos);
  EXPECT_NE(line.find("a&lt;b"), std::string::npos);  // escaped series name
  std::string heat = Heatmap({{0.0, 0.5}, {1.0, 0.25}}, {.title = "h"});
  EXPECT_EQ(std::count(heat.begin(), heat.end(), '\n') > 4, true);
  EXPECT_NE(heat.find("rgb(8,48,107)"),
            std::string::npos);  // the max value gets the darkest colour
  HtmlPage page("Report & <test>");
  page.Raw(heat);
  page.Table({{"k", "v"}, {"<x>", "1"}});
  std::string html = page.Render();
  EXPECT_NE(html.find("Report &amp; &lt;test&gt;"), std::string::npos);
  EXPECT_NE(html.find("<td>&lt;x&gt;</td>"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org/2000/svg"));  // no remote resources
}

// Fuzz finding: x values near 1.6e16 that differ by a few units made the tick loop step by less
// than the values' spacing (v += step left v unchanged) and grow until memory ran out.
TEST(Report, ChartTicksOnAHugeNarrowRangeEnd) {
  const double x0 = 15552777777777777.0;
  const std::string chart = LineChart({{"s", {x0, x0 + 2, x0 + 4}, {1, 2, 3}}}, {.title = "t"});
  EXPECT_NE(chart.find("</svg>"), std::string::npos);
  EXPECT_LT(chart.size(), 100000u);
  const std::string wide = LineChart({{"s", {1, 2, 1.5e16}, {0, 1e300, -1e300}}}, {.title = "t"});
  EXPECT_NE(wide.find("</svg>"), std::string::npos);
}

TEST(Report, WriteJsonIsAtomicAndFailsClearly) {
  auto path = (std::filesystem::temp_directory_path() / "sinkscope_report_test.json").string();
  WriteJson(path, {{"schema", "x/1"}});
  EXPECT_EQ(ReadFile(path), "{\n  \"schema\": \"x/1\"\n}\n");
  std::filesystem::remove(path);
  EXPECT_THROW(WriteJson("/nonexistent-dir/x.json", {}), ss::Error);
  EXPECT_THROW(CheckWritable("/nonexistent-dir/x.json", "--json"), ss::Error);
}

TEST(Report, FormatNumber) {
  EXPECT_EQ(FormatNumber(0.12345), "0.123");
  EXPECT_EQ(FormatNumber(123456.0), "1.23e+05");
  EXPECT_EQ(FormatNumber(NAN), "nan");
}

}  // namespace ss::report
