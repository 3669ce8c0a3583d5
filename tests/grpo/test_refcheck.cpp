// rayless-refcheck must be able to fail: a case whose expected loss was altered is reported.
#include <catch2/catch.hpp>
#include <hdf5.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

namespace fs = std::filesystem;

namespace {

void scale_scalar_dataset(const std::string& file_path, const char* dataset_path, double factor) {
  hid_t file = H5Fopen(file_path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(file >= 0);
  hid_t dataset = H5Dopen2(file, dataset_path, H5P_DEFAULT);
  REQUIRE(dataset >= 0);
  double value = 0;
  REQUIRE(H5Dread(dataset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value) >= 0);
  value *= factor;
  REQUIRE(H5Dwrite(dataset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value) >= 0);
  H5Dclose(dataset);
  H5Fclose(file);
}

// Runs a command; returns its exit status and appends its stdout to `output`.
int run(const std::string& command, std::string& output) {
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 512> buffer{};
  while (fgets(buffer.data(), buffer.size(), pipe)) output += buffer.data();
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("refcheck reports an altered case and exits non-zero") {
  const fs::path program = fs::path(RAYLESS_BINARY_DIR) / "rayless-refcheck";
  INFO("needs the rayless-refcheck target built: " << program);
  REQUIRE(fs::exists(program));
  const fs::path source = fs::path(RAYLESS_TEST_DATA) / "trl-reference";
  const fs::path directory = fs::path(RAYLESS_BINARY_DIR) / "test-refcheck-altered";
  fs::remove_all(directory);
  fs::create_directories(directory);
  fs::copy_file(source / "adv_000.h5", directory / "adv_000.h5");
  fs::copy_file(source / "loss_003_dapo.h5", directory / "loss_003_dapo.h5");

  std::string output;
  CHECK(run(program.string() + " " + directory.string(), output) == 0);
  CHECK(output.find("2 passed, 0 failed") != std::string::npos);

  scale_scalar_dataset((directory / "loss_003_dapo.h5").string(), "expected/loss", 1.001);
  output.clear();
  const int status = run(program.string() + " " + directory.string(), output);
  INFO(output);
  CHECK(status != 0);
  CHECK(output.find("loss_003_dapo.h5: loss: largest error") != std::string::npos);
  CHECK(output.find("1 passed, 1 failed") != std::string::npos);
  fs::remove_all(directory);
}
