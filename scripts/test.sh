#!/usr/bin/env bash
# Builds CachedEmbeddings and runs the whole test suite: the Release build's
# tests (the Python module's pytest suite among them), then the same tests
# built with AddressSanitizer + UndefinedBehaviorSanitizer (without the
# Python module: an instrumented extension cannot load into an uninstrumented
# python3). Run scripts/setup.sh first (the README's command does).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

echo "== Release build and tests"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"

echo "== AddressSanitizer + UndefinedBehaviorSanitizer build and tests"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCEMB_SANITIZE="address;undefined" -DCEMB_BUILD_BENCH=OFF -DCEMB_BUILD_APPS=OFF -DCEMB_BUILD_PYTHON=OFF >/dev/null
cmake --build build-asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs" -LE no_sanitizer

echo "== ThreadSanitizer build (clang, LLVM OpenMP) and the concurrency tests (label tsan)"
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DCEMB_SANITIZE=thread -DCEMB_BUILD_BENCH=OFF -DCEMB_BUILD_APPS=OFF -DCEMB_BUILD_PYTHON=OFF >/dev/null
cmake --build build-tsan -j"$jobs" --target cache_stress_test ssd_stress_test ssd_snapshot_stress_test data_loader_test tables_step_cycle_test
TSAN_OPTIONS=halt_on_error=1 ctest --test-dir build-tsan --output-on-failure -j"$jobs" -L tsan
