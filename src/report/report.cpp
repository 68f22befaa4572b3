#include "report/report.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

#include "common/file_util.h"

namespace ss::report {

std::string JsonText(const nlohmann::json& doc, int indent) {
  return doc.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

void WriteJson(const std::string& path, const nlohmann::json& doc) {
  WriteFileAtomic(path, JsonText(doc));
}

std::string FormatTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], row[i].size());
    }
  std::string out;
  for (size_t r = 0; r < rows.size(); ++r) {
    for (size_t i = 0; i < rows[r].size(); ++i) {
      out += rows[r][i];
      if (i + 1 < rows[r].size()) out += std::string(width[i] - rows[r][i].size() + 2, ' ');
    }
    out += "\n";
    if (r == 0) {
      size_t total = 0;
      for (size_t i = 0; i < width.size(); ++i) total += width[i] + (i + 1 < width.size() ? 2 : 0);
      out += std::string(total, '-') + "\n";
    }
  }
  return out;
}

Progress::Progress(std::string label, int64_t total, std::string unit)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      total_(total),
      enabled_(isatty(fileno(stderr))),
      start_(std::chrono::steady_clock::now()),
      last_draw_() {}

void Progress::Update(int64_t done) {
  PollProgress();
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (done < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  double elapsed = std::chrono::duration<double>(now - start_).count();
  double rate = elapsed > 0 ? done / elapsed : 0;
  double eta = rate > 0 ? (total_ - done) / rate : 0;
  std::fprintf(stderr, "\r%s %lld/%lld %s  %.1f %s/s  ETA %.0fs   ", label_.c_str(),
               static_cast<long long>(done), static_cast<long long>(total_), unit_.c_str(), rate,
               unit_.c_str(), eta);
  std::fflush(stderr);
}

void Progress::Finish() {
  if (enabled_ && !finished_) std::fprintf(stderr, "\r\033[K");
  finished_ = true;
}

Progress::~Progress() { Finish(); }

std::string EscapeHtml(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string FormatNumber(double v, int precision) {
  if (std::isnan(v)) return "nan";
  if (v != 0 && (std::fabs(v) >= 1e5 || std::fabs(v) < 1e-3))
    return fmt::format("{:.{}g}", v, precision);
  return fmt::format("{:.{}f}", v, precision);
}

namespace {

const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                          "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

// Sequential colour scale from white to dark blue.
std::array<int, 3> ScaleRgb(double t) {
  t = std::clamp(std::isnan(t) ? 0.0 : t, 0.0, 1.0);
  return {static_cast<int>(247 - t * (247 - 8)), static_cast<int>(251 - t * (251 - 48)),
          static_cast<int>(255 - t * (255 - 107))};
}

std::string ScaleColour(double t) {
  auto [r, g, b] = ScaleRgb(t);
  return fmt::format("rgb({},{},{})", r, g, b);
}

// ---- A minimal PNG writer (RFC 2083 / ISO 15948): 8-bit RGB, no filtering, and a zlib stream
// (RFC 1950) of stored deflate blocks (RFC 1951 section 3.2.4), so no compression library is
// needed.

uint32_t Crc32(const std::string& bytes) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
      t[n] = c;
    }
    return t;
  }();
  uint32_t c = 0xffffffffu;
  for (unsigned char b : bytes) c = table[(c ^ b) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

void PutBigEndian(std::string& out, uint32_t v) {
  for (int i = 3; i >= 0; --i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

std::string PngChunk(const char* type, const std::string& data) {
  std::string body = std::string(type, 4) + data;
  std::string out;
  PutBigEndian(out, static_cast<uint32_t>(data.size()));
  out += body;
  PutBigEndian(out, Crc32(body));
  return out;
}

// rgb: (height, width, 3) bytes.
std::string EncodePng(const std::string& rgb, int width, int height) {
  std::string raw;  // each scanline: filter byte 0 (none), then the pixels
  for (int y = 0; y < height; ++y) {
    raw += '\0';
    raw.append(rgb, static_cast<size_t>(y) * width * 3, static_cast<size_t>(width) * 3);
  }
  std::string z = "\x78\x01";  // zlib header: deflate, 32K window, no dictionary
  for (size_t pos = 0; pos < raw.size() || pos == 0; pos += 65535) {
    const size_t n = std::min<size_t>(65535, raw.size() - pos);
    z += static_cast<char>(pos + n >= raw.size() ? 1 : 0);  // BFINAL, BTYPE = 00 (stored)
    z += static_cast<char>(n & 0xff);
    z += static_cast<char>(n >> 8);
    z += static_cast<char>(~n & 0xff);
    z += static_cast<char>((~n >> 8) & 0xff);
    z.append(raw, pos, n);
    if (raw.empty()) break;
  }
  uint32_t a = 1, b = 0;  // Adler-32 of the uncompressed data
  for (unsigned char c : raw) {
    a = (a + c) % 65521;
    b = (b + a) % 65521;
  }
  PutBigEndian(z, (b << 16) | a);
  std::string ihdr;
  PutBigEndian(ihdr, static_cast<uint32_t>(width));
  PutBigEndian(ihdr, static_cast<uint32_t>(height));
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // 8-bit, RGB, deflate, no filter, no interlace
  return std::string("\x89PNG\r\n\x1a\n", 8) + PngChunk("IHDR", ihdr) + PngChunk("IDAT", z) +
         PngChunk("IEND", "");
}

std::string Base64(const std::string& bytes) {
  static const char* kDigits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = uint32_t(uint8_t(bytes[i])) << 16 | uint32_t(uint8_t(bytes[i + 1])) << 8 |
                       uint8_t(bytes[i + 2]);
    for (int k = 3; k >= 0; --k) out += kDigits[(v >> (6 * k)) & 63];
  }
  if (i < bytes.size()) {
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    if (i + 1 < bytes.size()) v |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    out += kDigits[(v >> 18) & 63];
    out += kDigits[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kDigits[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string FormatTick(double t) {
  return t == std::floor(t) && std::fabs(t) < 1e6 ? fmt::format("{:.0f}", t) : FormatNumber(t, 2);
}

// Round numbers for axis ticks.
std::vector<double> Ticks(double lo, double hi, int target) {
  std::vector<double> ticks;
  if (!(hi > lo)) {
    ticks.push_back(lo);
    return ticks;
  }
  double raw = (hi - lo) / target;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) {
      step = m * mag;
      break;
    }
  // Counted, not stepped: with a range far below the magnitude (steps near 1e16) v += step would
  // not move v, and the loop would never end (found by fuzzing the trace report).
  const double first = std::ceil(lo / step) * step;
  const double count = std::floor((hi - first) / step + 1e-9) + 1;
  if (!(count >= 1 && count <= 4.0 * target + 4) || first + step == first) return {lo, hi};
  for (int i = 0; i < static_cast<int>(count); ++i) ticks.push_back(first + i * step);
  return ticks;
}

}  // namespace

std::string LineChart(const std::vector<Series>& series, const ChartOptions& o) {
  const double left = 64, right = 150, top = 30, bottom = 44;
  const double pw = o.width - left - right, ph = o.height - top - bottom;
  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
  auto ty = [&](double y) { return o.log_y ? std::log10(std::max(y, 1e-300)) : y; };
  for (const auto& s : series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.y[i]) || !std::isfinite(s.x[i])) continue;
      xmin = std::min(xmin, s.x[i]);
      xmax = std::max(xmax, s.x[i]);
      ymin = std::min(ymin, ty(s.y[i]));
      ymax = std::max(ymax, ty(s.y[i]));
    }
  if (o.has_reference) {
    ymin = std::min(ymin, ty(o.reference_y));
    ymax = std::max(ymax, ty(o.reference_y));
  }
  if (!std::isfinite(xmin)) xmin = 0, xmax = 1, ymin = 0, ymax = 1;
  if (xmax == xmin) xmax = xmin + 1;
  // A flat series (or float noise around one value) gets a unit range, not ticks that all read
  // alike.
  if (ymax - ymin <= 1e-6 * std::max(1.0, std::fabs(ymax))) ymax = ymin + 1;
  if (!o.log_y && ymin > 0 && ymin < 0.3 * ymax) ymin = 0;
  double pad = (ymax - ymin) * 0.05;
  ymax += pad;
  if (ymin != 0 || o.log_y) ymin -= pad;
  auto px = [&](double x) { return left + (x - xmin) / (xmax - xmin) * pw; };
  auto py = [&](double y) { return top + ph - (ty(y) - ymin) / (ymax - ymin) * ph; };
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n",
      o.width, o.height);
  svg += fmt::format("<text x=\"{}\" y=\"18\" font-size=\"13\" font-weight=\"bold\">{}</text>\n",
                     left, EscapeHtml(o.title));
  svg += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#999\"/>\n", left,
      top, pw, ph);
  for (double t : Ticks(xmin, xmax, 6)) {
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#eee\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        px(t), top, top + ph, top + ph + 14, FormatTick(t));
  }
  for (double t : Ticks(ymin, ymax, 5)) {
    double yv = o.log_y ? std::pow(10.0, t) : t;
    double y = top + ph - (t - ymin) / (ymax - ymin) * ph;
    svg += fmt::format(
        "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#eee\"/>"
        "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
        left, left + pw, y, left - 4, y + 4, FormatNumber(yv, 2));
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", left + pw / 2,
                     o.height - 8, EscapeHtml(o.x_label));
  svg += fmt::format(
      "<text x=\"14\" y=\"{0}\" transform=\"rotate(-90 14 {0})\" "
      "text-anchor=\"middle\">{1}</text>\n",
      top + ph / 2, EscapeHtml(o.y_label + (o.log_y ? " (log)" : "")));
  if (o.has_reference) {
    double y = py(o.reference_y);
    svg += fmt::format(
        "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#555\" "
        "stroke-dasharray=\"4 3\"/><text x=\"{1}\" y=\"{3:.1f}\" "
        "text-anchor=\"end\" fill=\"#555\">{4}</text>\n",
        left, left + pw, y, y - 3, EscapeHtml(o.reference_label));
  }
  for (size_t k = 0; k < series.size(); ++k) {
    const auto& s = series[k];
    const char* colour = kPalette[k % 10];
    std::string points;
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.y[i])) continue;
      points += fmt::format("{:.1f},{:.1f} ", px(s.x[i]), py(s.y[i]));
    }
    svg +=
        fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\" points=\"{}\"/>\n",
                    colour, points);
    if (s.x.size() <= 40)
      for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
        if (std::isfinite(s.y[i]))
          svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.5\" fill=\"{}\"/>\n",
                             px(s.x[i]), py(s.y[i]), colour);
    double ly = top + 10 + 16 * k;
    svg += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"3\" fill=\"{}\"/>"
        "<text x=\"{}\" y=\"{}\">{}</text>\n",
        left + pw + 10, ly - 4, colour, left + pw + 26, ly, EscapeHtml(s.name));
  }
  svg += "</svg>\n";
  return svg;
}

std::string Heatmap(const std::vector<std::vector<double>>& values, const HeatmapOptions& o) {
  const int rows = static_cast<int>(values.size());
  const int cols = rows ? static_cast<int>(values[0].size()) : 0;
  int cell = o.cell;
  if (cols * cell > 900) cell = std::max(2, 900 / std::max(cols, 1));
  if (rows * cell > 900) cell = std::max(2, std::min(cell, 900 / std::max(rows, 1)));
  const int left = 60, top = 36;
  const int width = left + cols * cell + 80, height = top + rows * cell + 40;
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "font-family=\"sans-serif\" font-size=\"10\">\n",
      width, height);
  svg += fmt::format("<text x=\"{}\" y=\"16\" font-size=\"13\" font-weight=\"bold\">{}</text>\n",
                     left, EscapeHtml(o.title));
  const double span = o.max_value > o.min_value ? o.max_value - o.min_value : 1.0;
  const bool annotate = o.annotate && cell >= 20 && !o.raster;
  if (o.raster && rows > 0 && cols > 0) {
    std::string rgb(static_cast<size_t>(rows) * cols * 3, '\0');
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) {
        const double v = c < static_cast<int>(values[r].size()) ? values[r][c] : o.min_value;
        const auto px = ScaleRgb((v - o.min_value) / span);
        for (int k = 0; k < 3; ++k)
          rgb[(static_cast<size_t>(r) * cols + c) * 3 + k] = static_cast<char>(px[k]);
      }
    svg += fmt::format(
        "<image x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" "
        "preserveAspectRatio=\"none\" style=\"image-rendering:pixelated\" "
        "href=\"data:image/png;base64,{}\"/>\n",
        left, top, cols * cell, rows * cell, Base64(EncodePng(rgb, cols, rows)));
  }
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; !o.raster && c < cols && c < static_cast<int>(values[r].size()); ++c) {
      double t = (values[r][c] - o.min_value) / span;
      svg += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\">"
          "<title>{} {}, {} {}: {}</title></rect>\n",
          left + c * cell, top + r * cell, cell, cell, ScaleColour(t), EscapeHtml(o.row_label), r,
          EscapeHtml(o.col_label), c, FormatNumber(values[r][c]));
      if (annotate)
        svg += fmt::format(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"8\" "
            "fill=\"{}\">{}</text>\n",
            left + c * cell + cell / 2, top + r * cell + cell / 2 + 3, t > 0.55 ? "#fff" : "#222",
            FormatNumber(values[r][c], 2));
    }
    if (r % std::max(1, (12 + cell - 1) / cell) == 0)  // labels at least 12 px apart
      svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", left - 4,
                         top + r * cell + cell / 2 + 3, r);
  }
  int step = std::max(1, (20 + cell - 1) / cell);  // column labels at least 20 px apart
  for (int c = 0; c < cols; c += step)
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                       left + c * cell + cell / 2, top - 4, c);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                     left + cols * cell / 2, top + rows * cell + 16, EscapeHtml(o.col_label));
  svg += fmt::format(
      "<text x=\"14\" y=\"{0}\" transform=\"rotate(-90 14 {0})\" "
      "text-anchor=\"middle\">{1}</text>\n",
      top + rows * cell / 2, EscapeHtml(o.row_label));
  // Colour bar.
  const int bx = left + cols * cell + 20;
  for (int i = 0; i < 10; ++i)
    svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"{}\" fill=\"{}\"/>\n", bx,
                       top + i * std::max(rows * cell, 60) / 10, std::max(rows * cell, 60) / 10 + 1,
                       ScaleColour(1.0 - i / 9.0));
  svg += fmt::format("<text x=\"{}\" y=\"{}\">{}</text><text x=\"{}\" y=\"{}\">{}</text>\n",
                     bx + 15, top + 8, FormatNumber(o.max_value, 2), bx + 15,
                     top + std::max(rows * cell, 60), FormatNumber(o.min_value, 2));
  svg += "</svg>\n";
  return svg;
}

HtmlPage::HtmlPage(std::string title) : title_(std::move(title)) {}

void HtmlPage::Heading(const std::string& text, int level) {
  body_ += fmt::format("<h{0}>{1}</h{0}>\n", level, EscapeHtml(text));
}
void HtmlPage::Paragraph(const std::string& text) { body_ += "<p>" + EscapeHtml(text) + "</p>\n"; }
void HtmlPage::Raw(const std::string& html) { body_ += "<div class=\"fig\">" + html + "</div>\n"; }

void HtmlPage::Table(const std::vector<std::vector<std::string>>& rows) {
  body_ += "<table>\n";
  for (size_t r = 0; r < rows.size(); ++r) {
    body_ += "<tr>";
    for (const auto& cell : rows[r])
      body_ += fmt::format("<{0}>{1}</{0}>", r == 0 ? "th" : "td", EscapeHtml(cell));
    body_ += "</tr>\n";
  }
  body_ += "</table>\n";
}

std::string HtmlPage::Render() const {
  return fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>{0}</title>\n"
      "<style>body{{font-family:sans-serif;max-width:1100px;margin:24px auto;padding:0 16px;"
      "color:#222}} table{{border-collapse:collapse;margin:8px 0 16px}} "
      "td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right;font-size:13px}} "
      "th{{background:#f3f3f3}} .fig{{margin:10px 0 18px}} h1{{font-size:22px}} "
      "h2{{font-size:18px;margin-top:28px}} h3{{font-size:15px}}</style></head>\n"
      "<body>\n<h1>{0}</h1>\n{1}<footer><p style=\"color:#888;font-size:11px\">generated by "
      "sinkscope</p></footer>\n</body></html>\n",
      EscapeHtml(title_), body_);
}

void HtmlPage::Save(const std::string& path) const { WriteFileAtomic(path, Render()); }

}  // namespace ss::report
