// The console table of sample completions (log.num_completions_to_print), as TRL's log_completions
// shows them: one line per completion with its prompt and completion cut to fit the terminal, each
// reward function's score and the advantage.
#pragma once
#include <string>
#include <vector>

namespace rayless {

struct SampleRow {
  std::string prompt, completion;
  std::vector<double> rewards;  // one per reward function
  double advantage = 0;
};

// `width`: the terminal's columns (at least 60 used). Newlines and tabs in texts show as spaces.
std::string sample_table(int64_t step, const std::vector<SampleRow>& rows, const std::vector<std::string>& reward_names,
                         int width);

// The terminal's width: $COLUMNS, else the stdout terminal's, else 120.
int terminal_width();

}  // namespace rayless
