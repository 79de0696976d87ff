#!/usr/bin/env bash
# Installs the Debian 12 packages CachedEmbeddings builds with, if any are
# missing. Idempotent: when everything is there it only checks (well under a
# second). Needs root (apt-get) only when something must be installed.
set -euo pipefail

packages=(
  g++ cmake ninja-build pkg-config
  libdnnl-dev          # oneDNN 2.6: the MLPs of dlrm/
  libomp-dev           # LLVM OpenMP, for the clang ThreadSanitizer build
  libpmem2-dev         # PMDK libpmem2: the persistent-memory tier
  libxsimd-dev         # xsimd 8.1: ISA-generic SIMD kernels
  libabsl-dev          # Abseil 2022-06: Status, flat_hash_map
  libbenchmark-dev libgtest-dev libgmock-dev
  libyaml-cpp-dev libcli11-dev
  clang libclang-rt-14-dev   # sanitizer runtimes, libFuzzer
)

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
