#!/usr/bin/env bash
# Proves that a service linking cemb::embedding, cemb::cache and cemb::tables needs only the
# table libraries' packages. Run it in a fresh Debian 12 root file system:
#   ../shared/tools/fresh-debian . -- 'bash tests/consumer/minimal_debian.sh'
# It installs only `scripts/setup.sh --library`'s packages, checks that
# oneDNN, yaml-cpp and OpenCL are absent, builds and installs the libraries
# without cemb::dlrm, then builds and runs tests/consumer/project (which asks
# for COMPONENTS embedding cache tables) against the installed package.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/setup.sh --library
for absent in libdnnl-dev libdnnl2 libyaml-cpp-dev ocl-icd-opencl-dev opencl-c-headers; do
  if dpkg-query -W -f='${Status}' "$absent" 2>/dev/null | grep -q "install ok installed"; then
    echo "minimal_debian: $absent is installed; this check needs a machine without it" >&2
    exit 1
  fi
done
build=build-minimal
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCEMB_BUILD_DLRM=OFF \
  -DCEMB_BUILD_TESTS=OFF -DCEMB_BUILD_BENCH=OFF -DCEMB_BUILD_APPS=OFF -DCEMB_BUILD_PYTHON=OFF >/dev/null
cmake --build "$build" -j"$(nproc)"
cmake -DBUILD_DIR="$PWD/$build" -DPROJECT_DIR="$PWD/tests/consumer/project" \
  -DWORK_DIR="$PWD/$build/consumer" -DGENERATOR=Ninja -DCXX=c++ \
  -P tests/consumer/run_consumer.cmake
echo "minimal_debian: the service built and ran with only the table libraries' packages"
