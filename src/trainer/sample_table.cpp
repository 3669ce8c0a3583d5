#include "rayless/trainer/sample_table.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace rayless {
namespace {

// Cuts UTF-8 text to at most `columns` code points (an ellipsis marks the cut), one line.
std::string fit(const std::string& text, size_t columns) {
  std::string flat;
  for (char c : text) flat += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? ' ' : c;  // one line, no controls
  size_t points = 0, i = 0;
  for (; i < flat.size(); ++i) {
    if ((static_cast<unsigned char>(flat[i]) & 0xC0) == 0x80) continue;  // continuation byte
    if (points == columns) break;
    ++points;
  }
  if (i >= flat.size()) return flat + std::string(columns - points, ' ');
  // too long: keep columns - 1 code points and an ellipsis
  size_t keep = 0, cut = 0;
  for (; cut < flat.size(); ++cut) {
    if ((static_cast<unsigned char>(flat[cut]) & 0xC0) == 0x80) continue;
    if (keep == columns - 1) break;
    ++keep;
  }
  return flat.substr(0, cut) + "\xE2\x80\xA6";
}

std::string number(double v) {
  if (std::isnan(v)) return "       -";
  char text[32];
  std::snprintf(text, sizeof text, "%8.3f", v);
  return text;
}

}  // namespace

std::string sample_table(int64_t step, const std::vector<SampleRow>& rows, const std::vector<std::string>& reward_names,
                         int width) {
  width = std::max(width, 60);
  std::string header;
  for (const std::string& name : reward_names) {  // 8 columns: names cut short (ASCII names fit exactly)
    const std::string cut = name.substr(0, 8);
    header += " " + cut + std::string(8 - cut.size(), ' ');
  }
  header += " advantage";
  const size_t numbers = header.size();
  const size_t text = (static_cast<size_t>(width) - numbers - 5) / 2;  // prompt | completion
  std::string out = "samples at step " + std::to_string(step) + ":\n";
  out += fit("prompt", text) + " | " + fit("completion", text) + " |" + header + "\n";
  for (const SampleRow& row : rows) {
    out += fit(row.prompt, text) + " | " + fit(row.completion, text) + " |";
    for (double r : row.rewards) out += " " + number(r);
    out += "  " + number(row.advantage) + "\n";
  }
  return out;
}

int terminal_width() {
  if (const char* columns = std::getenv("COLUMNS")) {
    const int n = std::atoi(columns);
    if (n > 0) return n;
  }
  struct winsize size {};
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return 120;
}

}  // namespace rayless
