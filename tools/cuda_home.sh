# Sourced by tools/nccl_compile_check.sh and tools/gpu/device_check.sh: where the CUDA toolkit is.
# find_cuda_home prints the first of CUDA_HOME, /usr/local/cuda, or two levels above nvcc's real path
# (a wrapper script named nvcc on the PATH hides the toolkit's folder) that holds the runtime headers;
# it returns 1 and prints nothing when none does.
find_cuda_home() {
  local d nvcc_path
  nvcc_path=$(readlink -f "$(command -v nvcc || echo /nonexistent)")
  for d in "${CUDA_HOME:-}" /usr/local/cuda "$(dirname "$(dirname "$nvcc_path")")"; do
    if [ -n "$d" ] && [ -f "$d/include/cuda_runtime_api.h" ]; then
      echo "$d"
      return 0
    fi
  done
  return 1
}
