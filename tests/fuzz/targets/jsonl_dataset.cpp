// libFuzzer target: a JSONL prompt dataset (prompt strings or chat messages lists), strict and with
// data.skip_invalid.
#include "fuzz_input.h"
#include "rayless/prompts/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto file = rayless::fuzz::write_input("prompts.jsonl", data, size);
  rayless::fuzz::parse_or_refuse([&] { rayless::load_prompt_dataset(file.string()); });
  return rayless::fuzz::parse_or_refuse(
      [&] { rayless::load_prompt_dataset(file.string(), "question", "conversation", /*skip_invalid=*/true); });
}
