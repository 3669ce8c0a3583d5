# The GPU machine's environment for tools/gpu/device_check.sh and tools/gpu/compare_trl.sh (sourced;
# each function says what it did through the caller's `say` and returns non-zero when it cannot):
#   use_carried_packages   the carried Debian packages (tools/gpu/fetch_deps.sh), unpacked into a prefix
#   use_cuda_and_nccl      the CUDA toolkit and PyTorch's NCCL, found for the CMake build
#   build_for_gpu DIR T..  rayless against python3's CUDA LibTorch, only the targets named
#   use_carried_wheels     TRL and datasets from the carried wheels (tools/gpu/fetch_wheels.sh), on PYTHONPATH
#   gpu_script_args        the prepared scripts' own arguments, --dry-run and --no-build
# root_dir must be set to the repository root.

# The arguments every prepared script takes: --dry-run (the same steps here, on the CPU, as ctest runs
# them) and --no-build (build/ is there already). Sets dry_run, build and passed_on (the other
# arguments, for a script that hands them on: passes = 1; otherwise they get the usage line and exit 2).
#   gpu_script_args USAGE PASSES "$@"
gpu_script_args() {
  local usage=$1 passes=$2 arg
  shift 2
  dry_run=0 build=1 passed_on=()
  for arg in "$@"; do
    case $arg in
      --dry-run) dry_run=1 ;;
      --no-build) build=0 ;;
      *) if [ "$passes" = 1 ]; then passed_on+=("$arg"); else echo "usage: $usage" >&2; exit 2; fi ;;
    esac
  done
}

# The carried Debian packages unpacked into a prefix, never into /
use_carried_packages() {
  local debs=$root_dir/.gpu-deps/debs prefix=$root_dir/.gpu-deps/prefix
  [ -d "$debs" ] || { say "no .gpu-deps/debs (run tools/gpu/fetch_deps.sh here and carry .gpu-deps)"; return 1; }
  if [ ! -f "$prefix/.unpacked" ]; then
    mkdir -p "$prefix"
    for d in "$debs"/*.deb; do dpkg-deb -x "$d" "$prefix" || return 1; done
    touch "$prefix/.unpacked"
  fi
  local arch=x86_64-linux-gnu usr=$prefix/usr
  mkdir -p "$prefix/bin"
  # Debian names the wrappers *.openmpi and links the plain names through alternatives: link them here
  for tool in mpicc mpicxx mpic++ mpirun mpiexec; do
    [ -e "$usr/bin/$tool.openmpi" ] && ln -sf "$usr/bin/$tool.openmpi" "$prefix/bin/$tool"
  done
  [ -e "$prefix/bin/mpirun" ] || ln -sf "$usr/bin/orterun" "$prefix/bin/mpirun"
  export PATH=$prefix/bin:$usr/bin:$PATH
  export OPAL_PREFIX=$usr  # Open MPI finds its libraries, plugins and help files relative to this
  export LD_LIBRARY_PATH=$usr/lib/$arch:$usr/lib/$arch/openmpi/lib:$usr/lib/$arch/hdf5/serial/lib:${LD_LIBRARY_PATH:-}
  export CMAKE_PREFIX_PATH=$usr:${CMAKE_PREFIX_PATH:-}
  export HDF5_ROOT=$usr/lib/$arch/hdf5/serial
  export PKG_CONFIG_PATH=$usr/lib/$arch/pkgconfig:$usr/share/pkgconfig:${PKG_CONFIG_PATH:-}
  # the carried .pc files say prefix=/usr: read them relative to the prefix (PCRE2's -I and -L)
  export PKG_CONFIG_SYSROOT_DIR=$prefix
  export RAYLESS_CMAKE_ARGS="-DMPI_C_COMPILER=$prefix/bin/mpicc -DMPI_CXX_COMPILER=$prefix/bin/mpicxx -DHDF5_C_COMPILER_EXECUTABLE=/nonexistent ${RAYLESS_CMAKE_ARGS:-}"
  say "packages from $prefix (OPAL_PREFIX=$OPAL_PREFIX)"
}

# The CUDA toolkit and NCCL as the machine has them: LibTorch's CMake config finds CUDA through
# CUDA_TOOLKIT_ROOT_DIR (a wrapper script named nvcc on the PATH hides the toolkit's folder), and
# NCCL comes with PyTorch as the nvidia-nccl wheel (nccl.h and libnccl.so.2, no unversioned link).
use_cuda_and_nccl() {
  local cuda_home
  . tools/cuda_home.sh
  cuda_home=$(find_cuda_home) || { say "no CUDA toolkit (CUDA_HOME, /usr/local/cuda, nvcc on the PATH)"; return 1; }
  local nccl_include=${RAYLESS_NCCL_INCLUDE_DIR:-}
  [ -n "$nccl_include" ] || nccl_include=$(python3 - <<'PY'
import glob, os, site, sys
roots = [p for p in sys.path if os.path.isdir(p)] + site.getsitepackages() + [site.getusersitepackages()]
for root in roots:
    for header in sorted(glob.glob(os.path.join(root, "nvidia", "**", "nccl.h"), recursive=True)):
        print(os.path.dirname(header)); sys.exit(0)
PY
)
  [ -n "$nccl_include" ] && [ -f "$nccl_include/nccl.h" ] || [ -f "$cuda_home/include/nccl.h" ] \
    || { say "no nccl.h beside CUDA or in python3's nvidia packages"; return 1; }
  export CUDA_HOME=$cuda_home PATH=$cuda_home/bin:$PATH
  export RAYLESS_CMAKE_ARGS="-DCUDA_TOOLKIT_ROOT_DIR=$cuda_home -DCUDAToolkit_ROOT=$cuda_home ${nccl_include:+-DRAYLESS_NCCL_INCLUDE_DIR=$nccl_include} ${RAYLESS_CMAKE_ARGS:-}"
  [ -n "$nccl_include" ] && export LD_LIBRARY_PATH=$nccl_include/../lib:${LD_LIBRARY_PATH:-}
  say "CUDA toolkit $cuda_home; nccl.h in ${nccl_include:-$cuda_home/include}"
}

# rayless with CUDA and NCCL against the LibTorch of the machine's python3, in DIR, only the targets
# named: the whole tree takes minutes more on the device's cores. A warm machine's earlier build in the
# same DIR is reused (only what changed is rebuilt).
build_for_gpu() {
  local build_dir=$1; shift
  local torch_dir
  torch_dir=$(python3 -c 'import torch.utils, os; print(os.path.join(torch.utils.cmake_prefix_path, "Torch"))') || return 1
  env Torch_DIR="$torch_dir" RAYLESS_CUDA=ON RAYLESS_NO_APT=1 RAYLESS_BUILD_DIR="$build_dir" \
    RAYLESS_BUILD_TARGETS="$*" ./tools/setup.sh
}

# TRL and datasets (with dill and multiprocess) from the carried wheels, installed without network
# into a scratch folder put first on PYTHONPATH; python3 already has torch, transformers, accelerate,
# pyarrow and the rest they need (fetch_wheels.sh checked that before the run).
use_carried_wheels() {
  local wheels=$root_dir/.gpu-deps/wheels site=${GPU_SITE_DIR:-/tmp/rayless-gpu-site}
  compgen -G "$wheels/*.whl" >/dev/null || { say "no .gpu-deps/wheels (run tools/gpu/fetch_deps.sh here and carry .gpu-deps)"; return 1; }
  python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" "$wheels"/*.whl || return 1
  export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
  local installed
  installed=$(python3 -c 'import trl, datasets; print("trl", trl.__version__, "datasets", datasets.__version__)') || return 1
  say "wheels installed into $site: $installed"
}
