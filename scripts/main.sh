#!/usr/bin/env bash
# The main job: builds CachedEmbeddings (Release) and runs it. Until
# dlrm-train lands (issue 5), that is the embedding lookup/update benchmark
# on a small default grid, ending with a summary table. Run scripts/setup.sh
# first (the README's command does).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
exec bash bench/run_embedding.sh --small
