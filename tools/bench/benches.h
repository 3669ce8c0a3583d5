// The commands of rayless-bench, one file each (they share the CLI's option parsing, src/cli/options.h).
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"

namespace rayless::cli {

int bench_logprobs(const Args& args);   // bench_logprobs.cpp
int bench_threshold(const Args& args);  // bench_threshold.cpp (run under mpirun)
int bench_model(const Args& args);      // bench_model.cpp
int bench_decode(const Args& args);     // bench_decode.cpp: one decode step vs the machine's limits
int bench_generation(const Args& args);  // bench_generation.cpp: the engine vs the old loop, long-tail lengths
int bench_products(const Args& args);   // bench_products.cpp: generation's weight products, kernel by kernel
int bench_rollouts(const Args& args);   // bench_rollouts.cpp
int bench_zero_memory(const Args& args);  // bench_zero_memory.cpp: bytes per rank at each ZeRO stage
int init_model(const Args& args);       // init_model.cpp: seeded HF model directory from a config.json

// Shared by the commands (bench_common.cpp).
using BenchClock = std::chrono::steady_clock;
double seconds_since(BenchClock::time_point start);
// The JSON in `file` (a model's config.json); InputError naming the file when it is not JSON.
nlohmann::json read_json_file(const std::string& file);
// A --rows list ("1,16"): positive integers, else InputError naming `command` and the list.
std::vector<int64_t> parse_rows(const std::string& list, const std::string& command);

}  // namespace rayless::cli
