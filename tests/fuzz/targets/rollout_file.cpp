// libFuzzer target: a rollout store step file (HDF5) read back as a resume and `rayless inspect` read
// it: rollouts/rank-00000/step-00000000.h5.
#include "fuzz_input.h"
#include "rayless/rollout/rollout_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto file = rayless::fuzz::write_input("rollouts/rank-00000/step-00000000.h5", data, size);
  const std::string dir = (rayless::fuzz::work_dir() / "rollouts").string();
  rayless::fuzz::parse_or_refuse([&] {
    rayless::RolloutAttrs attrs;
    rayless::read_rollouts(dir, 0, 0, "", "", &attrs);
  });
  return rayless::fuzz::parse_or_refuse([&] {
    for (const auto& entry : rayless::list_rollouts(file.string())) rayless::read_rollout_entry(entry);
  });
}
