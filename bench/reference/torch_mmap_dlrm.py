#!/usr/bin/env python3
"""The PyTorch user's answer to tables larger than memory, timed against the ssd tier.

PyTorch's own way to train embedding tables that do not fit in memory is to put
their weights in files mapped into memory, torch.from_file(path, shared=True),
and let the kernel's page cache be the cache: a lookup that misses faults the
page in from the disk, and the sparse SGD update dirties the mapped pages,
which the kernel writes back when it needs the memory. This script is that
model, so that bench/run_ssd_dlrm.sh (PEER=1) can compare dlrm-train's ssd tier
with it on the same machine, the same data and under the same `memlimit`.

The model is dlrm_reference.py's Dlrm (imported, not copied: Linear + ReLU
MLPs with a Sigmoid last, the dot interaction over the strictly lower triangle
concatenated after the bottom MLP's output, BCELoss, plain SGD on every
parameter), with configs/bench-ssd.yaml's shape by default: bottom 13-512-256-64,
top 512-512-256-1, D = 64, batch 2048, lr 0.1. Each table is
nn.EmbeddingBag(mode="sum", sparse=True) whose weight is the [rows, dim] view
of torch.from_file(<dir>/table-<t>.f32, shared=True, size=rows * dim); the
file is written once at the start (uniform in +-sqrt(1/rows), the reference's
init), synced and dropped from the page cache, so the run starts cold like the
ssd tier. The MLPs are in ordinary memory. --in_memory reads the files into
ordinary memory instead: the same PyTorch step without the page cache, which
separates PyTorch's own step time from what the mapping costs.

The data are the samples dlrm-train trains on: its prepared binary dataset
(docs/data.md, data/dataset.h; dlrm-train writes it under data.work_dir, as
<work_dir>/synthetic-<hash>/train.bin), mapped with numpy.memmap. The number
and sizes of the tables come from the file's header. Batches are taken in file
order (batch k is samples [kB, kB + B)); dlrm-train shuffles within blocks of
65536 samples unless train.shuffle is false, so with shuffling the two see the
same samples in a different order (the synthetic samples are independent, so
the rows' statistics are the same). The file is read by the cemb package's
reader (cemb.dataset: PYTHONPATH=<build>/python). Batch assembly (memmap slices to tensors)
is inside the timed loop, as dlrm-train's loader thread is part of its run.

The losses are not bit-identical to dlrm-train's: the initial weights come from
numpy's RNG here and from dlrm-train's own there, so only the first step's
loss and the trend agree in spirit. For a closer check at small scale,
--export_init DIR writes the initial weights as .npy files under
DLRM_Net.state_dict()'s names, which dlrm-train reads with
`--set model.init_from=DIR --set train.shuffle=false`; then the step losses of
the two agree to float rounding.

Under `memlimit` (a cgroup memory limit, page cache included) the mapped pages
count against the limit; the kernel reclaims them, writing dirty ones back,
and the process is not killed. A fault on a mapped page reads up to the
device's read_ahead_kb around it (printed; 128 KiB by default), so random
lookups read far more than they use; --madvise random turns that off, and
--init zeros (the files are holes) removes the reads of never-written rows, as
the ssd tier's lazy initialisation does. Neither is the default: the default
is what torch.from_file gives a PyTorch user.

Prints one line a script can parse:

  torch_mmap: steps N, samples/s X, second half Y, ms/step Z, loss first A last B, ...

Needs Debian's python3-torch and libopenblas0 (a benchmark-only dependency,
like dlrm_reference.py; not a build or test dependency of the project):

  PYTHONPATH=build/python /usr/bin/python3 bench/reference/torch_mmap_dlrm.py --data WORK/synthetic-XXXX/train.bin --dir /nvme/torch
  PYTHONPATH=build/python memlimit 3G /usr/bin/python3 bench/reference/torch_mmap_dlrm.py --data ... --dir ... --steps 300
"""
import argparse
import ctypes
import math
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


# OpenBLAS cores by how much of the vector ISA their kernels use (as bench/run_dlrm.sh):
# 3 AVX-512, 2 AVX2, 1 AVX, 0 the generic fallbacks (Prescott, Core2, Nehalem, ...).
CORE_RANK = {"skylakex": 3, "cooperlake": 3, "sapphirerapids": 3, "haswell": 2, "zen": 2, "sandybridge": 1}


def openblas_core(env):
    """The core OpenBLAS picks under env (OPENBLAS_VERBOSE=2 prints "Core: X"), or None. 0.3.21 as Debian
    builds it may first say "Core not found: COOPERLAKE" for an OPENBLAS_CORETYPE asked for, then
    "Core: Cooperlake" on this Sapphire Rapids guest: the "Core:" line is the core it runs (as
    bench/torch_blas.sh reads it)."""
    out = subprocess.run([sys.executable, "-c", "import torch; torch.ones(64, 64) @ torch.ones(64, 64)"],
                         env=dict(env, OPENBLAS_VERBOSE="2"), capture_output=True, text=True)
    m = re.search(r"^Core: (\S+)", out.stdout + out.stderr, re.M)
    return m.group(1) if m else None


def choose_openblas_core():
    """Sets OPENBLAS_CORETYPE, before torch is imported, where OpenBLAS 0.3.21 falls back to a
    generic core on a CPU it does not know (newer Xeons report Prescott: sgemm ~4x slower). A
    caller's OPENBLAS_CORETYPE is kept where its core uses as much of the vector ISA as this CPU
    allows, else dropped (a machine's environment may name Haswell on a CPU with AVX-512: torch's
    inference then ran 1.6x slower). Returns a description of the core used."""
    core = openblas_core(os.environ)
    if core is None:
        return "not OpenBLAS (torch's sgemm may be the ~10x slower reference BLAS)"
    flags = set(next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), []))
    wanted = []
    if {"avx512_bf16", "avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        wanted.append("COOPERLAKE")
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"} <= flags:
        wanted.append("SKYLAKEX")
    if {"avx2", "fma"} <= flags:
        wanted.append("HASWELL")
    if "avx" in flags:
        wanted.append("SANDYBRIDGE")
    best = CORE_RANK[wanted[0].lower()] if wanted else 0
    dropped = ""
    if "OPENBLAS_CORETYPE" in os.environ:
        caller = os.environ["OPENBLAS_CORETYPE"]
        if CORE_RANK.get(core.lower(), 0) >= best:
            return f"OpenBLAS {core} (OPENBLAS_CORETYPE={caller}, set by the caller)"
        dropped = f"; the caller's OPENBLAS_CORETYPE={caller} ({core}) dropped: below this CPU's best"
        del os.environ["OPENBLAS_CORETYPE"]
        core = openblas_core(os.environ) or "unknown"
    if CORE_RANK.get(core.lower(), 0) >= best:
        return f"OpenBLAS {core} (detected{dropped})"
    for c in wanted:
        forced = openblas_core(dict(os.environ, OPENBLAS_CORETYPE=c))
        if forced and CORE_RANK.get(forced.lower(), 0) == CORE_RANK[c.lower()]:
            os.environ["OPENBLAS_CORETYPE"] = c
            return f"OpenBLAS {forced} (OPENBLAS_CORETYPE={c}; detected {core}, a generic fallback{dropped})"
    return f"OpenBLAS {core} (detected, a generic fallback; no better core accepted{dropped})"


def readahead_kb(path):
    """The read-ahead of the block device holding path (/sys/dev/block/M:m[/..]/queue), or None.
    A fault on a mapped file reads up to this much around the faulting page."""
    st = os.stat(path)
    base = f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    for q in (f"{base}/queue/read_ahead_kb", f"{base}/../queue/read_ahead_kb"):
        try:
            return int(open(q).read())
        except (OSError, ValueError):
            pass
    return None


def write_table(path, rows, dim, rng, init, chunk_rows=1 << 16):
    """Writes rows x dim float32 to path, uniform in +-sqrt(1/rows), or a file of holes (zeros,
    nothing written) for init "zeros"; syncs it and drops it from the page cache (a cold start,
    as the ssd tier's)."""
    import numpy as np
    bound = math.sqrt(1 / rows)
    if os.path.exists(path):
        os.unlink(path)  # a new file, not an old one's blocks and dirty pages truncated
    with open(path, "wb") as f:
        if init == "zeros":
            f.truncate(rows * dim * 4)
        else:
            for r in range(0, rows, chunk_rows):
                n = min(chunk_rows, rows - r)
                f.write(rng.uniform(-bound, bound, (n, dim)).astype(np.float32).tobytes())
        f.flush()
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="dlrm-train's prepared train.bin")
    p.add_argument("--dir", required=True, help="where the table files go (on the drive under test)")
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--bottom", default="512,256,64", help="bottom MLP widths after the dense inputs")
    p.add_argument("--top", default="512,512,256,1", help="top MLP widths after the interaction")
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--steps", type=int, default=0, help="0 = every full batch of the file")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--seed", type=int, default=123)
    p.add_argument("--export_init", default="", help="also write the initial weights as .npy files here "
                   "(dlrm-train's model.init_from; small tables only)")
    p.add_argument("--in_memory", action="store_true", help="read the table files into ordinary memory instead "
                   "of mapping them: the same step without the page cache (needs the tables' size in memory)")
    p.add_argument("--init", choices=["uniform", "zeros"], default="uniform",
                   help="zeros: the table files are holes (no init written, none read back: a fault reads no "
                   "disk until the page was written back), the nearest a mapping comes to the ssd tier's lazy "
                   "initialisation; the model then starts from zero tables")
    p.add_argument("--madvise", choices=["none", "random"], default="none",
                   help="random: madvise(MADV_RANDOM) on each mapping, which turns off the kernel's read-around: "
                   "a fault reads up to the device's read_ahead_kb around the page (128 KiB by default; "
                   "torch.from_file has no such option, a user would need ctypes)")
    p.add_argument("--losses", default="", help="also write every step's loss here, one a line")
    args = p.parse_args()

    # OpenBLAS sizes its own thread pool from the environment when torch loads it.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    blas = choose_openblas_core()

    import numpy as np
    import torch
    import torch.nn as nn
    sys.path.insert(0, HERE)
    from dlrm_reference import Dlrm, blas_threads
    from cemb.dataset import open_bags, read_header  # PYTHONPATH=<build>/python

    torch.set_num_threads(args.threads)
    h = read_header(args.data)
    rows, hot, dim = h["sizes"], h["hotness"], args.dim
    bottom = [h["dense"]] + [int(w) for w in args.bottom.split(",")]
    top = [int(w) for w in args.top.split(",")]
    steps = h["samples"] // args.batch if args.steps == 0 else args.steps
    if steps < 2 or steps * args.batch > h["samples"]:
        raise SystemExit(f"{args.data}: {h['samples']} samples, fewer than {max(steps, 2)} batches of {args.batch}")

    # Dlrm with one-row tables (its MLPs, interaction and forward as they are), then every
    # table replaced by one whose weight is the mapped file.
    np.random.seed(args.seed)
    model = Dlrm(dim, bottom, top, [1] * len(rows))
    os.makedirs(args.dir, exist_ok=True)
    rng = np.random.RandomState(args.seed + 1)
    t0 = time.perf_counter()
    for t, n in enumerate(rows):
        path = os.path.join(args.dir, f"table-{t}.f32")
        write_table(path, n, dim, rng, args.init)
        if args.in_memory:
            w = torch.from_numpy(np.fromfile(path, dtype=np.float32)).view(n, dim)
        else:
            w = torch.from_file(path, shared=True, size=n * dim, dtype=torch.float32).view(n, dim)
            if args.madvise == "random":
                libc = ctypes.CDLL(None, use_errno=True)
                libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
                if libc.madvise(w.data_ptr(), n * dim * 4, 1) != 0:  # MADV_RANDOM
                    raise OSError(ctypes.get_errno(), f"madvise(MADV_RANDOM) on {path}")
        model.tables[t] = nn.EmbeddingBag(n, dim, mode="sum", sparse=True, _weight=w)
        assert model.tables[t].weight.data_ptr() == w.data_ptr()  # the mapping itself, not a copy
    init_s = time.perf_counter() - t0
    if args.export_init:
        os.makedirs(args.export_init, exist_ok=True)
        for t, table in enumerate(model.tables):
            np.save(os.path.join(args.export_init, f"emb_l.{t}.weight.npy"), table.weight.detach().numpy())
        for name, mlp in (("bot_l", model.bottom), ("top_l", model.top)):
            for k, v in mlp.state_dict().items():
                np.save(os.path.join(args.export_init, f"{name}.{k}.npy"), v.numpy())

    loss_fn = nn.BCELoss(reduction="mean")
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    T, B = len(rows), args.batch
    labels_all, dense_all, bags, _ = open_bags(args.data)  # bags[t]: [N, K_t]
    offsets = [torch.arange(0, B * k, k) for k in hot]

    losses, ends = [], []
    start = time.perf_counter()
    for step in range(steps):
        s = slice(step * B, (step + 1) * B)
        dense = torch.from_numpy(np.ascontiguousarray(dense_all[s]))
        target = torch.from_numpy(np.ascontiguousarray(labels_all[s])).view(B, 1)
        indices = [torch.from_numpy(bags[t][s].astype(np.int64).reshape(-1)) for t in range(T)]
        loss = loss_fn(model(dense, offsets, indices), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        ends.append(time.perf_counter())
    total = ends[-1] - start
    if args.losses:
        with open(args.losses, "w") as f:
            f.writelines(f"{l!r}\n" for l in losses)
    half = steps // 2
    second = (steps - half) * B / (ends[-1] - ends[half - 1])
    print(f"torch_mmap: steps {steps}, samples/s {steps * B / total:.0f}, second half {second:.0f}, "
          f"ms/step {1e3 * total / steps:.1f}, loss first {losses[0]:.6f} last {losses[-1]:.6f}, "
          f"init {init_s:.1f} s; torch {torch.__version__}, threads {torch.get_num_threads()} "
          f"(blas {blas_threads()}), {blas}; {T} tables of {max(rows)} rows x {dim} "
          f"{'read into memory from' if args.in_memory else 'mapped from'} {args.dir} (init {args.init}, "
          f"madvise {args.madvise}, read_ahead_kb {readahead_kb(args.dir)})", flush=True)


if __name__ == "__main__":
    main()
