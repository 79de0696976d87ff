#!/usr/bin/env bash
# Installs the Debian 12 packages CachedEmbeddings builds with, if any are
# missing (with --library: only those the table libraries need). Idempotent: when everything is there it only checks (well under a
# second). Needs root (apt-get) only when something must be installed.
set -euo pipefail

# What cemb::embedding, cemb::cache, cemb::ssd (and cemb::base, cemb::data) need to
# build, install and be used by a service: `setup.sh --library` installs only
# these (tests/consumer/minimal_debian.sh proves they are enough).
library_packages=(
  g++ cmake ninja-build pkg-config
  libpmem2-dev         # PMDK libpmem2: the persistent-memory tier
  libxsimd-dev         # xsimd 8.1: ISA-generic SIMD kernels
  libabsl-dev          # Abseil 2022-06: Status, flat_hash_map
  liburing-dev         # liburing 2.3: the ssd tier's block I/O (cemb::ssd, which
                       # cemb::cache links: storage.h's kind "ssd")
)
# The rest: dlrm-train, the Python module, the tests, the benchmarks and the
# sanitizer builds.
packages=(
  "${library_packages[@]}"
  libdnnl-dev          # oneDNN 2.6: the MLPs of dlrm/
  ocl-icd-opencl-dev   # oneDNN's CMake config requires OpenCL (Debian builds it
                       # with the OpenCL GPU runtime); libdnnl-dev only recommends it
  libyaml-cpp-dev libcli11-dev
  libbenchmark-dev libgtest-dev libgmock-dev
  libomp-dev           # LLVM OpenMP, for the clang ThreadSanitizer build
  clang libclang-rt-14-dev   # sanitizer runtimes, libFuzzer (libclang_rt.fuzzer*.a)
  libopenmpi-dev openmpi-bin # Open MPI 4.1: cemb::distributed and mpirun for multi-rank
                       # training; not a library package: a service
                       # that links cemb::embedding/cache never talks MPI
  libcpp-httplib-dev   # cpp-httplib 0.11: dlrm-serve's HTTP server (cemb::server)
  libsimdjson-dev      # simdjson 3.0: its request parser (measured against nlohmann::json)
  nlohmann-json3-dev   # nlohmann::json 3.11: where a refused request body breaks; bench/json_parse_bench
  pybind11-dev python3-dev   # the Python module cemb (python/): pybind11 2.10 and the headers
  python3-numpy python3-torch python3-pytest  # its PyTorch layer, example and tests
)
case "${1:-}" in
  --library) packages=("${library_packages[@]}") ;;
  "") ;;
  *) echo "usage: setup.sh [--library]" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages are installed"
  exit 0
fi

echo "setup: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "setup: these Debian packages are missing and installing them needs root:" >&2
  echo "  sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
