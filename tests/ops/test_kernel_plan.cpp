// The kernel plan (kernel_plan.h): every op in `rayless version`'s output (the binary driven), every
// kernel named with its switch when off (none hidden), the docs naming every entry and switch, and the
// tests' overrides.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "rayless/base/cpu_features.h"
#include "rayless/ops/kernel_plan.h"

using namespace rayless::ops;

namespace {

std::vector<Kernel> all_kernels() {
  std::vector<Kernel> out;
  for (int k = 0; k < kKernelCount; ++k) out.push_back(static_cast<Kernel>(k));
  return out;
}

// The lines a command prints on stdout.
std::vector<std::string> output_lines(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  REQUIRE(pipe);
  std::string text;
  std::array<char, 4096> buffer;
  while (const size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe.get())) text.append(buffer.data(), n);
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("kernel plan: rayless version prints every entry of the plan, once, as the plan describes it") {
  const auto lines = output_lines(std::string(RAYLESS_BINARY_DIR) + "/rayless version");
  std::vector<std::string> kernel_lines;
  for (const auto& line : lines)
    if (line.rfind("kernel ", 0) == 0) kernel_lines.push_back(line);
  const std::vector<std::string> entries = KernelPlan::entries();
  REQUIRE(entries.size() >= 18);
  CHECK(kernel_lines.size() == entries.size());
  for (const std::string& entry : entries) {
    INFO(entry);
    int found = 0;
    for (const auto& line : kernel_lines) found += line.rfind("kernel " + entry + " ", 0) == 0;
    CHECK(found == 1);
  }
  // the ops the issue names are there by these names
  for (const char* op : {"linear", "transpose", "bfloat16_products", "generation_linear.float32",
                         "generation_linear.bfloat16", "attention.backward", "attention.packed", "attention.decode",
                         "rms_norm.backward", "rms_norm.decode", "rotary.forward", "rotary.backward", "rotary.decode",
                         "silu_times.backward", "silu_times.decode", "adamw_update", "sum_of_squares", "fused_logprobs"}) {
    INFO(op);
    CHECK(std::find(entries.begin(), entries.end(), op) != entries.end());
  }
}

TEST_CASE("kernel plan: with every kernel off, the plan names each kernel and why (no kernel is hidden)") {
  std::vector<std::unique_ptr<KernelOverride>> off;
  for (Kernel k : all_kernels()) off.push_back(std::make_unique<KernelOverride>(k, false));
  std::string plan;
  for (const auto& line : kernel_plan().describe()) plan += line + "\n";
  CAPTURE(plan);
  for (Kernel k : all_kernels()) {
    INFO(KernelPlan::name(k));
    CHECK_FALSE(kernel_plan().on(k));
    CHECK(plan.find(std::string(KernelPlan::name(k)) + ": ") != std::string::npos);
  }
}

TEST_CASE("kernel plan: each kernel's switch is RAYLESS_KERNEL_ and its name in capitals, all distinct") {
  std::set<std::string> names, switches;
  for (Kernel k : all_kernels()) {
    const std::string name = KernelPlan::name(k), variable = KernelPlan::switch_name(k);
    INFO(name);
    CHECK(!name.empty());
    CHECK(variable.rfind("RAYLESS_KERNEL_", 0) == 0);
    CHECK(variable.size() == std::string("RAYLESS_KERNEL_").size() + name.size());
    names.insert(name);
    switches.insert(variable);
  }
  CHECK(names.size() == static_cast<size_t>(kKernelCount));
  CHECK(switches.size() == static_cast<size_t>(kKernelCount));
}

TEST_CASE("kernel plan: docs/kernels.md names every entry, every kernel and every switch") {
  const std::string docs = read_file(std::string(RAYLESS_SOURCE_DIR) + "/docs/kernels.md");
  REQUIRE(!docs.empty());
  for (const std::string& entry : KernelPlan::entries()) {
    INFO(entry);
    CHECK(docs.find("| `" + entry + "` |") != std::string::npos);
  }
  for (Kernel k : all_kernels()) {
    INFO(KernelPlan::name(k));
    CHECK(docs.find("| `" + std::string(KernelPlan::name(k)) + "` | `" + KernelPlan::switch_name(k) + "`") !=
          std::string::npos);
  }
  for (const char* group : {"RAYLESS_AVX2=0", "RAYLESS_AVX512=0", "RAYLESS_AMX=0"}) CHECK(docs.find(group) != std::string::npos);
}

TEST_CASE("kernel plan: an override turns a kernel on or off while it lives, nested ones restore in turn") {
  const Kernel k = Kernel::decode_rotary;  // portable: runnable on every CPU
  const bool planned = kernel_plan().on(k);
  {
    const KernelOverride off(k, false);
    CHECK_FALSE(kernel_plan().on(k));
    {
      const KernelOverride on(k, true);
      CHECK(kernel_plan().on(k));
    }
    CHECK_FALSE(kernel_plan().on(k));
  }
  CHECK(kernel_plan().on(k) == planned);
}

TEST_CASE("kernel plan: an override cannot turn on a kernel the CPU cannot run") {
  if (rayless::cpu_has_avx512f()) {
    // the plan prefers oneDNN's kernel over the AVX2 rows kernel there; an override lifts that preference
    const KernelOverride rows(Kernel::avx2_linear, true);
    CHECK(kernel_plan().on(Kernel::avx2_linear) == (rayless::cpu_has_avx2() && rayless::cpu_has_fma()));
    return;
  }
  const KernelOverride wanted(Kernel::avx512_transpose, true);
  CHECK_FALSE(kernel_plan().on(Kernel::avx512_transpose));
}
