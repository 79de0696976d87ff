#!/usr/bin/env bash
# torch_blas PYTHON: puts the PyTorch peer at its best before it is timed.
# Sourced by bench/run_dlrm.sh and bench/run_16core.sh.
#
# Debian's torch does its matmuls in whatever libblas.so.3 is installed: the
# netlib reference BLAS that python3-torch pulls in alone is ~10x slower.
# OpenBLAS 0.3.21 falls back to generic kernels on CPUs it does not know
# (newer Xeons: "Core: Prescott", sgemm ~4x slower): torch_blas probes the
# core OpenBLAS picked and, on such a fallback, exports OPENBLAS_CORETYPE for
# the best core this CPU's flags allow that OpenBLAS accepts. A caller's
# OPENBLAS_CORETYPE is kept unless its core is below this CPU's best (then
# dropped, and said). A torch built with MKL (PyPI's) is taken as it is.
#
#   source bench/torch_blas.sh
#   torch_blas "$python" || { echo "$blas" >&2; exit 1; }   # blas: what the peer runs on, or why not
# One torch matmul with OPENBLAS_VERBOSE=2: prints "core=<OpenBLAS core, empty
# when torch's BLAS is not OpenBLAS>" and "lib=<the BLAS libraries loaded>".
blas_probe() {
  OPENBLAS_VERBOSE=2 "$TORCH_BLAS_PYTHON" - 2>&1 <<'PY' | sed -n 's/^Core: \(.*\)/core=\1/p; s/^lib=/&/p'
import torch
torch.ones(64, 64) @ torch.ones(64, 64)
libs = {l.split()[-1] for l in open("/proc/self/maps") if "blas" in l.rsplit("/", 1)[-1]}
print("lib=" + " ".join(sorted(libs)))
PY
}
# How much of the vector ISA an OpenBLAS core's kernels use: 3 AVX-512, 2 AVX2,
# 1 AVX, 0 older (the generic fallbacks: Prescott, Katmai, Core2, Nehalem, ...).
core_rank() {
  case ${1,,} in
    skylakex | cooperlake | sapphirerapids) echo 3 ;;
    haswell | zen) echo 2 ;;
    sandybridge | bulldozer | piledriver | steamroller | excavator) echo 1 ;;
    *) echo 0 ;;
  esac
}
# The OPENBLAS_CORETYPE names (OpenBLAS 0.3.21's) this CPU can run, best first.
cpu_cores() {
  local flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
  has() { local f; for f; do [[ $flags == *" $f "* ]] || return 1; done; }
  has avx512_bf16 avx512f avx512bw avx512vl avx512dq && echo COOPERLAKE
  has avx512f avx512bw avx512vl avx512dq avx512cd && echo SKYLAKEX
  if has avx2 fma; then
    grep -q -m1 AuthenticAMD /proc/cpuinfo && echo ZEN
    echo HASWELL
  fi
  has avx && echo SANDYBRIDGE
  return 0
}

torch_blas() {  # PYTHON; sets blas, may export OPENBLAS_CORETYPE; 1: a BLAS too slow to compare with
  TORCH_BLAS_PYTHON=$1
  local probe core lib cores c forced build
  # torch.__config__.show()'s BLAS line: Debian's says BLAS_INFO=generic, i.e.
  # whichever libblas.so.3 is installed (listed at the end of the header).
  build=$("$TORCH_BLAS_PYTHON" -c 'import torch; print(torch.__version__, torch.__config__.show())' |
    grep -o -E '^[^ ]+|(BLAS_INFO|LAPACK_INFO)=[^,]*' | paste -sd' ' || true)
  if [[ $build == *BLAS_INFO=mkl* ]]; then
    blas="torch $build (MKL)"
    return 0
  fi
  probe=$(blas_probe)
  core=$(sed -n 's/^core=//p' <<< "$probe") lib=$(sed -n 's/^lib=//p' <<< "$probe")
  if [[ -z $core ]]; then
    blas="torch's BLAS is neither OpenBLAS nor MKL (${lib:-none found}): its sgemm is ~10x slower;"
    blas+=" apt-get install libopenblas0 (update-alternatives --config libblas.so.3-x86_64-linux-gnu)"
    return 1
  fi
  mapfile -t cores < <(cpu_cores)
  local dropped=""
  # A caller's OPENBLAS_CORETYPE below this CPU's best (a machine's
  # environment may name Haswell on a CPU with AVX-512) is dropped.
  if [[ -n ${OPENBLAS_CORETYPE:-} ]] &&
    ((${#cores[@]} > 0 && $(core_rank "$core") < $(core_rank "${cores[0]}"))); then
    dropped="; the caller's OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE ($core) dropped: below this CPU's best"
    unset OPENBLAS_CORETYPE
    core=$(blas_probe | sed -n 's/^core=//p')
  fi
  if [[ -n ${OPENBLAS_CORETYPE:-} ]]; then
    blas="OpenBLAS core $core (OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE, set by the caller)"
  else
    blas="OpenBLAS core $core (detected$dropped)"
    if ((${#cores[@]} > 0 && $(core_rank "$core") < $(core_rank "${cores[0]}"))); then
      blas="OpenBLAS core $core (detected), a generic fallback on this CPU; no better core accepted$dropped"
      for c in "${cores[@]}"; do  # the first one OpenBLAS accepts and runs
        if forced=$(OPENBLAS_CORETYPE=$c blas_probe | sed -n 's/^core=//p') &&
          (($(core_rank "$forced") == $(core_rank "$c"))); then
          export OPENBLAS_CORETYPE=$c
          blas="OpenBLAS core $forced (OPENBLAS_CORETYPE=$c; detected $core, a generic fallback on this CPU$dropped)"
          break
        fi
      done
    fi
  fi
  blas="torch $build, $blas, $lib"
}
