#!/usr/bin/env bash
# The main job: builds CachedEmbeddings (Release) and trains the default DLRM
# (configs/default.yaml: Kaggle-shaped model on synthetic data it generates,
# two tables on the slow tier behind a DRAM cache), ending with the
# evaluation, the per-phase time breakdown and the cache report. Extra
# arguments go to dlrm-train (e.g. --set train.epochs=1). Run
# scripts/setup.sh first (the README's command does).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target dlrm-train dlrm-data
exec ./build/apps/dlrm-train --config configs/default.yaml "$@"
