#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <new>

#include "rayless/base/error.h"
#include "rayless/base/failure_message.h"

using namespace rayless;

TEST_CASE("failure_message: LibTorch's errors in one line without their stack trace") {
  try {
    torch::ones({2, 3}).add(torch::ones({4, 5}));
    FAIL("no error");
  } catch (const std::exception& e) {
    CHECK(std::string(e.what()).find('\n') != std::string::npos);  // LibTorch's own has lines of frames
    const std::string line = failure_message(e);
    CHECK(line.find('\n') == std::string::npos);
    CHECK(line.find("frame #") == std::string::npos);
    CHECK_THAT(line, Catch::Contains("The size of tensor a (3) must match the size of tensor b (5)"));
    CHECK_FALSE(is_out_of_memory(e));
  }
  CHECK(failure_message(InputError("data.jsonl:3: bad")) == "data.jsonl:3: bad");
}

TEST_CASE("failure_message: an allocation that fails names the phase that was running") {
  try {
    const MemoryPhase outer("generation 3");
    const MemoryPhase inner("sampling");
    torch::empty({int64_t{1} << 50}, torch::kFloat32);  // 4 PiB: the CPU allocator refuses
    FAIL("no error");
  } catch (const std::exception& e) {
    CHECK(is_out_of_memory(e));
    const std::string line = failure_message(e);
    CHECK_THAT(line, Catch::StartsWith("out of memory while sampling: "));
    CHECK_THAT(line, Catch::Contains("4503599627370496 bytes"));
    CHECK(line.find('\n') == std::string::npos);
  }
  // the failure's phase stays for the top of the command to name; a later scope gives it back
  CHECK(memory_phase() == "sampling");
  {
    const MemoryPhase outer("loading the model");
    {
      const MemoryPhase inner("reading config.json");
      CHECK(memory_phase() == "reading config.json");
    }
    CHECK(memory_phase() == "loading the model");
    CHECK_THAT(failure_message(std::bad_alloc()), Catch::Equals("out of memory while loading the model: std::bad_alloc "
                                                                "(lower the lengths or the batch, or give each rank more "
                                                                "memory; docs/models.md, Lengths and memory)"));
  }
  CHECK(memory_phase() == "sampling");
}

TEST_CASE("failure_message: a phase with bounds names the sizes and the settings to lower, exit 5") {
  try {
    const MemoryPhase phase("generation 2 (sampling)", "512 rows x 2012 positions, KV cache 3.9 GiB; bounded by "
                                                       "train.per_device_train_batch_size 64 x steps_per_generation 8");
    torch::empty({int64_t{1} << 50}, torch::kFloat32);
    FAIL("no error");
  } catch (const std::exception& e) {
    const std::string line = failure_message(e);
    CHECK_THAT(line, Catch::StartsWith("out of memory while generation 2 (sampling) (512 rows x 2012 positions, KV cache "
                                       "3.9 GiB; bounded by train.per_device_train_batch_size 64 x steps_per_generation 8): "));
    CHECK_THAT(line, Catch::EndsWith("(lower the settings named, or give each rank more memory; docs/models.md, Lengths and memory)"));
    CHECK(exit_code_for(e) == kExitOutOfMemory);
  }
  CHECK(exit_code_for(InputError("x")) == kExitInput);
  CHECK(exit_code_for(NonfiniteError("x")) == kExitNonfinite);
  CHECK(exit_code_for(RuntimeError("x")) == kExitRuntime);
}
