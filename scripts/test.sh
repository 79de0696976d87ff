#!/usr/bin/env bash
# Builds CachedEmbeddings and runs the whole test suite: the Release build's
# tests (the Python module's pytest suite among them), then the same tests
# built with AddressSanitizer + UndefinedBehaviorSanitizer (without the
# Python module: an instrumented extension cannot load into an uninstrumented
# python3), then dlrm-serve's request parser under libFuzzer for 60 seconds,
# then the concurrency tests under ThreadSanitizer. Run scripts/setup.sh
# first (the README's command does).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
# ctest runs $jobs tests at once, each with OpenMP teams as wide as the
# machine: spinning threads of one test then hold the cores another test's
# threads wait for. Waiting threads sleep instead (on 2 cores: the Release
# tests 218 -> 147 s, the ASan tests 226 -> 173 s); no result depends on it.
export OMP_WAIT_POLICY=PASSIVE

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

echo "== libFuzzer: dlrm-serve's request parser (fuzz/infer_request_fuzzer.cc), 60 seconds"
# Skipped, with a line that says so, where clang's libFuzzer is missing
# (Debian: clang and libclang-rt-14-dev, which scripts/setup.sh installs).
probe=$(mktemp -d)
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' > "$probe/p.cc"
if command -v clang++ >/dev/null && clang++ -fsanitize=fuzzer "$probe/p.cc" -o "$probe/p" 2>/dev/null; then
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCEMB_BUILD_FUZZERS=ON -DCEMB_BUILD_DLRM=OFF \
    -DCEMB_BUILD_TESTS=OFF -DCEMB_BUILD_BENCH=OFF -DCEMB_BUILD_APPS=OFF -DCEMB_BUILD_PYTHON=OFF >/dev/null
  cmake --build build-fuzz -j"$jobs" --target infer_request_fuzzer
  rm -rf build-fuzz/corpus && mkdir -p build-fuzz/corpus  # new inputs go here, not into the seeds
  if ! build-fuzz/fuzz/infer_request_fuzzer -max_total_time=60 -artifact_prefix=build-fuzz/ \
         build-fuzz/corpus fuzz/corpus/infer_request > build-fuzz/fuzz.log 2>&1; then
    tail -n 60 build-fuzz/fuzz.log
    echo "infer_request_fuzzer failed: the input is in build-fuzz/crash-* (or leak-*, timeout-*)" >&2
    exit 1
  fi
  grep -E "^Done [0-9]+ runs" build-fuzz/fuzz.log
else
  echo "skipped: clang++ with libFuzzer is missing (Debian: apt-get install clang libclang-rt-14-dev)"
fi
rm -rf "$probe"

echo "== ThreadSanitizer build (clang, LLVM OpenMP) and the concurrency tests (label tsan)"
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DCEMB_SANITIZE=thread -DCEMB_BUILD_BENCH=OFF -DCEMB_BUILD_APPS=OFF -DCEMB_BUILD_PYTHON=OFF >/dev/null
cmake --build build-tsan -j"$jobs" --target cache_stress_test ssd_stress_test ssd_snapshot_stress_test data_loader_test tables_step_cycle_test \
  server_batcher_test
TSAN_OPTIONS=halt_on_error=1 ctest --test-dir build-tsan --output-on-failure -j"$jobs" -L tsan
