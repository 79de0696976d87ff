#!/usr/bin/env bash
# examples/python/train_dlrm.py on a small shape, as CI runs it: a synthetic
# Zipf dataset from dlrm-data, the tables on the ssd tier with a DRAM budget
# below their size, then the same model from a Criteo TSV in DRAM.
# Usage: example_test.sh PYTHON DLRM_DATA SOURCE_DIR
set -euo pipefail
python=$1 dlrm_data=$2 src=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$dlrm_data" generate --output "$work/train.bin" --samples 16384 --max-table-size 20000 --distribution zipf >/dev/null
"$dlrm_data" generate --tsv --output "$work/day.tsv" --samples 4096 --max-table-size 20000 >/dev/null
small=(--batch 256 --dim 16 --bottom 32,16 --top 32,1 --progress 20 --eval-batches 4)
"$python" "$src/examples/python/train_dlrm.py" --data "$work/train.bin" "${small[@]}" \
  --storage ssd --directory "$work/ssd" --dram-budget 6MiB
"$python" "$src/examples/python/train_dlrm.py" --data "$work/day.tsv" --rows 5000 "${small[@]}"
