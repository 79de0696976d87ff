#!/usr/bin/env bash
# The sitting on a machine with more cores, as one command: every comparison
# still owed there, from binaries built here and carried there with every
# library they load (that machine has neither our Debian packages nor a
# network). Two steps:
#
#   bash bench/run_16core.sh pack [DIR]      here: builds (Release), fills DIR (build-16core: the
#                                            build/ ignore pattern) and packs it as DIR.tar.gz
#                                            (about 35 MiB, under what a device run carries)
#   tar -xzf DIR.tar.gz && bash DIR/run_16core.sh run OUT
#                                            there: the comparisons, each under a time limit
#                                            (10 minutes in all on 16 cores); OUT/results.json
#                                            and OUT/results.md, the logs beside them
#
# With the device tool: pack, then run(command="tar -xzf build-16core.tar.gz &&
# bash build-16core/run_16core.sh run $OUT/16core", carry=["build-16core.tar.gz"]).
#
# DIR holds the programs, run through the C library and loader they were
# built with (DIR/lib/ld-linux-x86-64.so.2 --library-path DIR/lib), so the
# other machine's own C library does not matter; Open MPI's runtime (mpirun,
# its components and help files, relocated with OPAL_PREFIX); the Python
# module, for Debian's Python 3.11 and, where a Python 3.12 is here (PY312:
# its prefix, ~/.pyenv/versions/3.12.1 by default), for 3.12 as well (the
# other machine's), and the PyTorch peers' scripts; the configs.
#
# The comparisons, each skipped with its reason in the results when what it
# needs is missing (PyTorch is the other machine's own python3's, put at its
# best by bench/torch_blas.sh and recorded with the BLAS it runs on):
#   train   dlrm-train's step against the PyTorch DLRM's (bench/reference/dlrm_reference.py),
#           the Kaggle model, batch 2048, all cores; fp32, and bf16 where oneDNN has a bf16 matmul
#   tables  the tables' step from PyTorch: cemb.torch.EmbeddingBagCollection against
#           nn.EmbeddingBag(sparse=True) + SGD (bench/python_tables_bench.py), 8 tables, Zipf rows
#   serve   serve_bench: lookups/s and p99 at 1, 2, 4, 8, 16 threads
#   predict the Kaggle model in DRAM, closed loop: bench/predictor_bench against PyTorch's eager
#           inference (bench/torch_serve_bench.py closed), batches 1, 16, 256, 2048, 1 client and
#           THREADS clients, request-level and batch-level: samples/s and p50
#   mpi     dlrm-train under mpirun, 1 x 16, 2 x 8 and 4 x 4 (ranks x threads): samples/s
#   ssd     dlrm-train with every table on ssd against all in DRAM (bench-ssd's tables, fewer
#           rows), and the drive's own random-read rate (ssd_bench --limit_only)
#
# Environment (run): THREADS (all cores), PYTHON (python3), QUICK (1: tiny
# shapes and a few seconds each, to check the script on a small machine),
# ONLY (a list of comparisons to run), SSD_DIR (OUT/ssd: on the drive to test).
set -euo pipefail
shopt -s extglob

pack() {
  local dir root progs lib p py312=${PY312:-$HOME/.pyenv/versions/3.12.1}
  dir=$(realpath -m "$1")
  root=$(cd "$(dirname "$0")/.." && pwd)
  cd "$root"
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build --target dlrm-train serve_bench ssd_bench predictor_bench cemb_python cemb_serve_python >/dev/null
  # The modules again for Python 3.12, the other machine's (Python loads only
  # the .cpython-3XX-... build of its own version), in a build of their own.
  # A module cannot go through the carried loader, so it finds DIR/lib
  # through its RPATH, $ORIGIN/../../lib from DIR/python/cemb, set when it is
  # linked (no patchelf here); --disable-new-dtags makes it a DT_RPATH, which
  # unlike a RUNPATH also serves its libraries' own look-ups (libdnnl's
  # libOpenCL, libpmem2's libndctl, ...). Only the modules: no tests, apps or bench.
  local py312_built=0
  if [[ -x $py312/bin/python3.12 ]]; then
    cmake -S . -B build-py312 -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCEMB_BUILD_TESTS=OFF -DCEMB_BUILD_BENCH=OFF -DCEMB_BUILD_APPS=OFF \
      -DPython3_EXECUTABLE="$py312/bin/python3.12" -DPython3_ROOT_DIR="$py312" -DPython3_FIND_STRATEGY=LOCATION \
      -DCMAKE_MODULE_LINKER_FLAGS=-Wl,--disable-new-dtags \
      -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON '-DCMAKE_INSTALL_RPATH=$ORIGIN/../../lib' >/dev/null
    cmake --build build-py312 --target cemb_python cemb_serve_python >/dev/null
    py312_built=1
  else
    echo "run_16core.sh: no $py312/bin/python3.12 (PY312): the module is packed for Python 3.11 only" >&2
  fi
  rm -rf "$dir" && mkdir -p "$dir"/{bin,real,lib,configs,bench/reference,examples/python,python}
  progs=(build/apps/dlrm-train build/bench/serve_bench build/bench/ssd_bench build/bench/predictor_bench /usr/bin/orterun)
  cp -L "${progs[@]}" "$dir/real/"
  cp -r build/python/cemb "$dir/python/"
  ((py312_built)) && cp build-py312/python/cemb/*.cpython-312-*.so "$dir/python/cemb/"
  cp configs/*.yaml "$dir/configs/"
  cp bench/reference/dlrm_reference.py bench/reference/torch_mmap_dlrm.py "$dir/bench/reference/"
  cp bench/python_tables_bench.py bench/torch_serve_bench.py bench/torch_blas.sh "$dir/bench/"
  cp examples/python/train_dlrm.py "$dir/examples/python/"
  cp bench/run_16core.sh "$dir/"
  # Open MPI's runtime where OPAL_PREFIX=DIR/usr finds it, and PMIx's.
  mkdir -p "$dir/usr/lib/x86_64-linux-gnu" "$dir/usr/share"
  cp -rL /usr/lib/x86_64-linux-gnu/openmpi "$dir/usr/lib/x86_64-linux-gnu/"
  [[ -d /usr/lib/x86_64-linux-gnu/pmix2 ]] && cp -rL /usr/lib/x86_64-linux-gnu/pmix2 "$dir/usr/lib/x86_64-linux-gnu/"
  cp -rL /usr/share/openmpi "$dir/usr/share/"
  [[ -d /usr/share/pmix ]] && cp -rL /usr/share/pmix "$dir/usr/share/"
  # Every library the programs, the modules (3.11's and 3.12's) and Open MPI's components load.
  {
    for p in "$dir"/real/* "$dir"/python/cemb/*.so $(find "$dir/usr" -name '*.so*' -type f); do
      ldd "$p" 2>/dev/null | awk '/=> \// { print $3 } /^\s*\/lib.*ld-linux/ { print $1 }'
    done
  } | sort -u | while read -r lib; do
    # Open MPI's and PMIx's own libraries are already under DIR/usr.
    [[ $(realpath "$lib") == /usr/lib/x86_64-linux-gnu/@(openmpi|pmix2)/* ]] || cp -L "$lib" "$dir/lib/"
  done
  cp -L /lib64/ld-linux-x86-64.so.2 "$dir/lib/"
  for p in "$dir"/real/*; do  # each program through the carried loader
    cat >"$dir/bin/${p##*/}" <<'EOF'
#!/usr/bin/env bash
here=$(cd "$(dirname "$0")/.." && pwd)
mpi=$here/usr/lib/x86_64-linux-gnu
exec "$here/lib/ld-linux-x86-64.so.2" --library-path "$here/lib:$mpi/openmpi/lib:$mpi/pmix2/lib" \
  "$here/real/$(basename "$0")" "$@"
EOF
    chmod +x "$dir/bin/${p##*/}"
  done
  tar -C "$(dirname "$dir")" -czf "$dir.tar.gz" "$(basename "$dir")"
  echo "run_16core.sh: $(du -sh "$dir" | cut -f1) in $dir, $(du -h "$dir.tar.gz" | cut -f1) as $dir.tar.gz;" \
    "there: tar -xzf $(basename "$dir").tar.gz && bash $(basename "$dir")/run_16core.sh run OUT"
}

run() {
  local here out threads python quick only
  here=$(cd "$(dirname "$0")" && pwd)
  out=$(realpath -m "$1")
  mkdir -p "$out"
  threads=${THREADS:-$(nproc)}
  python=${PYTHON:-python3}
  quick=${QUICK:-0}
  only=${ONLY:-train tables serve predict mpi ssd}
  # Open MPI from DIR/usr; one machine, so no ssh: the isolated launcher.
  export OPAL_PREFIX=$here/usr PMIX_INSTALL_PREFIX=$here/usr/lib/x86_64-linux-gnu/pmix2 OMPI_MCA_plm=isolated
  export PATH=$here/bin:$PATH PYTHONPATH=$here/python
  local results=$out/results.tsv  # comparison, case, key, value: results.json is made from it
  : >"$results"
  record() { printf '%s\t%s\t%s\t%s\n' "$@" >>"$results"; }
  skip() { record "$1" - skipped "$2"; echo "  skipped: $2"; }
  limit() { timeout --kill-after=10 "$@"; }  # SECONDS COMMAND...
  has() { [[ " $only " == *" $1 "* ]]; }
  torch_ok=0
  "$python" -c 'import torch' 2>/dev/null && torch_ok=1
  echo "== $(date -u '+%F %H:%M') UTC, $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores," \
    "AMX $(grep -qw amx_tile /proc/cpuinfo && echo yes || echo no), $(awk '/^MemTotal/ { printf "%.0f", $2 / 1048576 }' /proc/meminfo) GiB;" \
    "threads $threads; python: $(command -v "$python" >/dev/null && "$python" --version 2>&1 || echo none), torch: $( ((torch_ok)) &&
      "$python" -c 'import torch; print(torch.__version__)' || echo none)" | tee "$out/machine.txt"
  local samples=$((40 * 2048)) steps=30 rows=4000000 serve_s=5 mpi_steps=60 predict_s=3 max_ind_range=0
  ((quick)) && samples=$((12 * 2048)) steps=4 rows=65536 serve_s=1 mpi_steps=4 predict_s=0.3 max_ind_range=1000

  # dlrm-train's ms/step from its summary record.
  cemb_ms() {  # LOG: "ms/step samples/s" of its summary record (no Python needed)
    grep '"type":"summary"' "$1" | tail -n 1 | awk '{
      n = split("train_seconds steps first_step samples_per_s", k, " ")
      for (i = 1; i <= n; ++i) { v[k[i]] = 0; if (match($0, "\"" k[i] "\":[0-9.e+-]+")) v[k[i]] = substr($0, RSTART + length(k[i]) + 3, RLENGTH - length(k[i]) - 3) }
      printf "%.2f %.0f\n", 1e3 * v["train_seconds"] / (v["steps"] - v["first_step"]), v["samples_per_s"] }'
  }
  # Runs a dlrm-train command (its output in OUT/NAME.txt, its records in
  # OUT/NAME.jsonl) and records the case's ms/step and samples/s, or why it failed.
  cemb_case() {  # COMPARISON CASE NAME COMMAND...
    local comparison=$1 case=$2 name=$3 ms sps
    shift 3
    if limit 240 "$@" --set "train.log_jsonl=$out/$name.jsonl" >"$out/$name.txt" 2>&1; then
      read -r ms sps <<<"$(cemb_ms "$out/$name.jsonl")"
      record "$comparison" "$case" ms_per_step "$ms"
      record "$comparison" "$case" samples_per_s "$sps"
      echo "  $case: $ms ms/step, $sps samples/s"
    else
      skip "$comparison" "$case: $(tail -n 2 "$out/$name.txt" | tr '\n' ' ')"
    fi
  }
  local common=(--set "data.samples=$samples" --set data.validation_fraction=0.05 --set train.eval_every=0
    --set "data.work_dir=$out/data")

  if has train; then
    echo "== train: dlrm-train against the PyTorch DLRM, Kaggle model, batch 2048, $threads threads"
    for p in fp32 bf16; do
      cemb_case train "cemb $p" "train-$p" dlrm-train --config "$here/configs/bench-kaggle.yaml" "${common[@]}" \
        --set "train.steps=$steps" --set model.mlp_precision=$p --set "train.threads=$threads"
    done
    # The peer at its best: OpenBLAS on this CPU's own kernels, or MKL.
    source "$here/bench/torch_blas.sh"
    if ((torch_ok)) && ! torch_blas "$python"; then
      skip train "torch: $blas"
    elif ((torch_ok)); then
      record train "torch fp32" blas "$blas"
      if limit 240 "$python" "$here/bench/reference/dlrm_reference.py" --model kaggle --threads "$threads" \
        --steps "$steps" --warmup 2 >"$out/train-torch.txt" 2>&1; then
        ms=$(sed -n 's/.*: \([0-9.]*\) ms\/step.*/\1/p' "$out/train-torch.txt" | tail -n 1)
        record train "torch fp32" ms_per_step "$ms"
        echo "  torch fp32: $ms ms/step ($(tail -n 1 "$out/train-torch.txt"))"
      else
        skip train "torch: $(tail -n 1 "$out/train-torch.txt")"
      fi
    else
      skip train "no torch in $python"
    fi
  fi

  if has tables; then
    echo "== tables: the tables' step from PyTorch, cemb against nn.EmbeddingBag"
    # What the bench imports, in its order: numpy and torch before cemb, so a
    # library both load (libstdc++) is the one torch brought, as it will be there.
    if ((torch_ok)) && "$python" -c 'import numpy, torch, cemb.dataset, cemb.torch' 2>"$out/tables-import.txt"; then
      local data
      limit 120 dlrm-train --config "$here/configs/bench-ssd.yaml" "${common[@]}" --set "model.tables.rows=$rows" \
        --set train.steps=1 >"$out/tables-prepare.txt" 2>&1 || true
      data=$(ls "$out"/data/*/train.bin 2>/dev/null | head -n 1 || true)
      for impl in cemb torch; do
        if [[ -n $data ]] && limit 180 "$python" "$here/bench/python_tables_bench.py" --data "$data" --impl $impl \
          --steps "$steps" --threads "$threads" >"$out/tables-$impl.txt" 2>&1; then
          ms=$(sed -n 's/.*ms\/step \([0-9.]*\).*/\1/p' "$out/tables-$impl.txt" | tail -n 1)
          record tables "$impl" ms_per_step "$ms"
          echo "  $impl: $ms ms/step"
        else
          skip tables "$impl: $(tail -n 1 "$out/tables-$impl.txt" 2>/dev/null || echo 'no prepared data')"
        fi
      done
    else
      skip tables "numpy, torch or the Python module does not import in $python: $(tail -n 1 "$out/tables-import.txt" 2>/dev/null)"
    fi
  fi

  if has serve; then
    echo "== serve: serve_bench, 1 to $threads threads"
    local list=1 t
    for t in 2 4 8 16 32 64; do ((t <= threads)) && list+=",$t"; done
    if limit 240 serve_bench --threads "$list" --seconds "$serve_s" >"$out/serve.txt" 2>&1; then
      # The table's rows: | storage | threads | lookups/s | ... | p99 us | ...
      awk -F'|' '$3 ~ /^ *[0-9]+ *$/ { gsub(/ /, ""); print $2 " " $3 " " $4 " " $8 }' "$out/serve.txt" |
        while read -r storage t lookups p99; do
          record serve "$storage, $t threads" lookups_per_s "$lookups"
          record serve "$storage, $t threads" p99_us "$p99"
        done
      grep '^|' "$out/serve.txt"
    else
      skip serve "$(tail -n 1 "$out/serve.txt")"
    fi
  fi

  if has predict; then
    echo "== predict: the Kaggle model in DRAM, closed loop, predictor_bench against PyTorch's eager inference"
    local kaggle=$out/kaggle
    # The columns both print: mode batch clients samples/s p50 p99.
    record_predict() {  # IMPL LOG
      awk '$2 ~ /^[0-9]+$/ { print $1, $2, $3, $4, $5, $6 }' "$2" | while read -r mode b c sps p50 p99; do
        record predict "$1 $mode, batch $b, $c clients" samples_per_s "$sps"
        record predict "$1 $mode, batch $b, $c clients" p50_us "$p50"
      done
      grep -E '^(mode|request|batch)' "$2"
    }
    if limit 240 dlrm-train --config "$here/configs/bench-kaggle.yaml" --set data.samples=24576 \
      --set "data.max_ind_range=$max_ind_range" --set "data.work_dir=$kaggle/data" --set train.steps=1 \
      --set "train.threads=$threads" --set "train.checkpoint_dir=$kaggle/ck" --export "$kaggle/npy" \
      >"$out/predict-prepare.txt" 2>&1; then
      local clients=1
      ((threads > 1)) && clients+=",$threads"
      if limit 240 predictor_bench --checkpoint "$kaggle/ck" --batches 1,16,256,2048 --clients "$clients" \
        --max_batch 2048 --pool 64 --seconds "$predict_s" >"$out/predict-cemb.txt" 2>&1; then
        record_predict cemb "$out/predict-cemb.txt"
      else
        skip predict "cemb: $(tail -n 1 "$out/predict-cemb.txt")"
      fi
      if ((torch_ok)) && limit 300 "$python" "$here/bench/torch_serve_bench.py" closed --npy "$kaggle/npy" \
        --checkpoint "$kaggle/ck" --batches 1,16,256,2048 --clients "$clients" --pool 64 --seconds "$predict_s" \
        >"$out/predict-torch.txt" 2>&1; then
        record predict "torch" blas "$(head -n 1 "$out/predict-torch.txt")"
        record_predict torch "$out/predict-torch.txt"
      else
        skip predict "torch: $( ((torch_ok)) && tail -n 1 "$out/predict-torch.txt" || echo "no torch in $python")"
      fi
    else
      skip predict "the model: $(tail -n 2 "$out/predict-prepare.txt" | tr '\n' ' ')"
    fi
    rm -rf "$kaggle"
  fi

  if has mpi; then
    echo "== mpi: dlrm-train under mpirun, ranks x threads"
    local ranks
    for ranks in 1 2 4; do
      t=$((threads / ranks))
      ((t >= 1)) || continue
      cemb_case mpi "${ranks}x$t" "mpi-$ranks" orterun --allow-run-as-root --oversubscribe --bind-to none -np "$ranks" \
        "$here/bin/dlrm-train" --config "$here/configs/bench-kaggle.yaml" "${common[@]}" --set "train.steps=$mpi_steps" \
        --set "train.threads=$t"
    done
  fi

  if has ssd; then
    echo "== ssd: every table on ssd against all in DRAM, bench-ssd at $rows rows a table"
    local dir=${SSD_DIR:-$out/ssd}
    mkdir -p "$dir"
    if limit 120 ssd_bench --limit_only 1 --dir "$dir" --rows $((quick ? 262144 : 16777216)) >"$out/ssd-drive.txt" 2>&1; then
      record ssd drive reads_per_s "$(sed -n 's/^limit: \([0-9]*\) random.*/\1/p' "$out/ssd-drive.txt")"
    else
      skip ssd "the drive: $(tail -n 1 "$out/ssd-drive.txt")"
    fi
    for kind in dram ssd; do
      local extra=()
      [[ $kind == ssd ]] && extra=(--set model.storage.kind=ssd --set "model.storage.slow_tier=$dir"
        --set "model.dram_budget=$((quick ? 64 : 1024))MiB")
      cemb_case ssd "$kind" "ssd-$kind" dlrm-train --config "$here/configs/bench-ssd.yaml" "${common[@]}" \
        --set "model.tables.rows=$rows" --set "train.steps=$steps" --set "train.threads=$threads" "${extra[@]}"
    done
    rm -rf "$dir"
  fi
  rm -rf "$out/data"

  # One JSON file and one table (awk: the other machine may have no Python).
  awk -F'\t' -v machine="$(cat "$out/machine.txt")" '
    function q(s) { gsub(/\\/, "\\\\", s); gsub(/"/, "\\\"", s); return "\"" s "\"" }
    BEGIN { printf "{\"machine\": %s, \"results\": [", q(machine) }
    { printf "%s\n {\"comparison\": %s, \"case\": %s, \"key\": %s, \"value\": %s}", (NR > 1 ? "," : ""), q($1), q($2), q($3), q($4) }
    END { print "\n]}" }' "$results" >"$out/results.json"
  { echo "$(cat "$out/machine.txt")"; echo; echo "| comparison | case | what | value |"; echo "|---|---|---|---|"
    awk -F'\t' '{ gsub(/\|/, "/"); print "| " $1 " | " $2 " | " $3 " | " $4 " |" }' "$results"; } >"$out/results.md"
  echo "== results: $out/results.json, $out/results.md"
  cat "$out/results.md"
}

case ${1:-} in
  pack) pack "${2:-build-16core}" ;;
  run) run "${2:?run OUT}" ;;
  *) sed -n '2,30p' "$0"; exit 2 ;;
esac
