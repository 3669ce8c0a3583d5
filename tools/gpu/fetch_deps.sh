#!/usr/bin/env bash
# Downloads (here, where apt works) the Debian packages rayless builds against that the GPU machine
# lacks — Open MPI, HDF5, TOML++, Boost.Program_options, Catch2, nlohmann-json, PCRE2 — with the
# libraries they need at run time, into .gpu-deps/debs/ (git-ignored). The device run carries that
# folder (the run tool's carry: [".gpu-deps"]) and tools/gpu/device_check.sh unpacks it with
# dpkg-deb -x into .gpu-deps/prefix, never into /. The closure takes the first of each "a | b"
# alternative and leaves out what every glibc system has and what a build does not use (compilers,
# Fortran, perl, docs). libpcre2-8-0 is carried although most systems have it: libpcre2-dev's
# libpcre2-8.so points at it inside the prefix.
# Then it runs tools/gpu/fetch_wheels.sh (TRL and datasets for the side-by-side), which checks the
# total that travels against the run tool's 64 MiB.
#   tools/gpu/fetch_deps.sh     # prints the packages, the wheels and the total size
set -euo pipefail
root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=$root_dir/.gpu-deps/debs
rm -rf "$out" && mkdir -p "$out"
mapfile -t packages < <(/usr/bin/python3 - <<'PY'
import re, subprocess
wanted = ["openmpi-bin", "libopenmpi-dev", "libhdf5-dev", "libtomlplusplus-dev", "libboost-program-options1.74-dev",
          "catch2", "nlohmann-json3-dev", "libpcre2-dev"]
skip = re.compile(r"^(libc6|libc6-dev|libc-dev-bin|libgcc-s1|libstdc\+\+6|libstdc\+\+-.*-dev|zlib1g|libzstd1|liblzma5|"
                  r"libbz2-1\.0|libssl3|libcrypt1|libcrypt-dev|linux-libc-dev|libselinux1|libtinfo6|"
                  r"libgmp10|libffi8|libsystemd0|libudev1|libcap2|libgcrypt20|libgpg-error0|liblz4-1|debconf|"
                  r"perl.*|libperl.*|dpkg|tar|gcc.*|g\+\+.*|cpp.*|binutils.*|gfortran.*|libgfortran-.*-dev|"
                  r"libgcc-.*-dev|flang.*|libflang.*|libllvm.*|libclang.*|libmlir.*|openssh-client|"
                  r"libjs-.*|autoconf|automake|autotools-dev|m4|libtool|mpi-default-.*|sensible-utils|"
                  r"libc\.so.*|zlib1g-dev|libjpeg.*-dev|libssl-dev|libcurl4-.*-dev|libevent-dev|libhwloc-dev|"
                  r"libibverbs-dev|libltdl-dev|libnuma-dev|libpmix-dev|install-info|adduser|debianutils|"
                  r"libhdf5-.*fortran.*|libhdf5-openmpi.*|libhdf5-mpi.*|libboost1\.74-tools-dev)$")
seen, todo = set(), list(wanted)
while todo:
    pkg = todo.pop()
    if pkg in seen or skip.match(pkg):
        continue
    seen.add(pkg)
    text = subprocess.run(["apt-cache", "depends", "--no-recommends", "--no-suggests", "--no-conflicts",
                           "--no-breaks", "--no-replaces", "--no-enhances", pkg], capture_output=True, text=True).stdout
    in_alternatives = False
    for line in text.splitlines()[1:]:
        m = re.match(r"\s*(\|?)(Depends|PreDepends): (\S+)", line)
        if not m:
            continue
        first = not in_alternatives
        in_alternatives = m.group(1) == "|"
        name = m.group(3)
        if first and not name.startswith("<"):
            todo.append(name)
for p in sorted(seen):
    print(p)
PY
)
echo "fetch_deps: ${#packages[@]} packages: ${packages[*]}"
(cd "$out" && apt-get download "${packages[@]}" 2>&1 | grep -v "^W: Download is performed unsandboxed" || true)
echo "fetch_deps: $(du -sh "$out" | cut -f1) in $out (the run tool carries at most 64 MiB with the tree)"
# the side-by-side's Python wheels beside them; it prints what travels in all and fails over 64 MiB
"$root_dir/tools/gpu/fetch_wheels.sh"
