#!/usr/bin/env python3
"""PyTorch's eager inference of the model a cemb checkpoint holds, timed as the C++ predictor is.

The model is bench/reference/dlrm_reference.py's Dlrm (imported, not copied:
nn.EmbeddingBag(mode="sum") tables, Linear + ReLU MLPs with a Sigmoid after the
top MLP's last layer, the dot interaction over the strictly lower triangle after
the bottom MLP's output) with every weight loaded from the .npy files that
`dlrm-train --export DIR` wrote from the same training run as the checkpoint
(dlrm_s_pytorch's state_dict names: emb_l.<t>.weight, bot_l.<2l>.weight, ...),
so that both score the same model. The checkpoint's SERVING manifest says the
interaction; only dot without self-interaction is built. Every forward runs
under torch.inference_mode().

Tables: --tables memory (np.load: ordinary memory) or --tables from_file: each
table's weight a view of torch.from_file(<npy>, shared=True, size=<file's
floats>) past the .npy header, i.e. the exported file mapped, the page cache as
the cache (PyTorch's own answer to tables larger than memory); the files are
synced and dropped from the page cache first (posix_fadvise DONTNEED), so a run
starts cold. --madvise random turns off the kernel's read-around on the maps
(not the default: torch.from_file has no such option).

Subcommands:
  check   scores N random samples with this model and with cemb.serve.Predictor
          (PYTHONPATH=<build>/python) on the checkpoint; exits 1 when they differ
          by more than --tolerance (1e-5).
  closed  closed-loop samples/s and request latency p50 / p99 at each --batches
          size, for --clients 1,2, two ways: request-level (one process per client,
          one torch and BLAS thread each: the processes are forked after the model
          is loaded and share its pages) and batch-level (one process whose
          clients are Python threads, torch and BLAS on every core). Each client
          cycles through --pool requests of uniform random rows (as
          bench/predictor_bench.cc's clients do), dense uniform in [0, 8).
  open    open-loop Poisson load, the discipline of bench/serve_load_bench.cc:
          --procs processes (forked after the model is loaded: they share its
          pages), each an independent Poisson stream at rate / procs served by
          --threads Python threads (one torch and BLAS thread per process);
          latency from each request's scheduled arrival; achieved = answers
          within the window; a rate passes when the answers in the window are
          >= --min_achieved (0.99) x its arrivals and p99 <= --max_p99_ms (25);
          unanswered --drain_seconds after the window = dropped (infinite
          latency). Rows ~ Zipf(--alpha) per table (inverse CDF; ranks spread
          over the table by rank * a_t + b_t mod rows), every request new, made
          before the clock starts; dense features from 16 blocks. --rates a,b,c
          and/or --find_max (doubling, then bisection to 5%; then 70% of it);
          --prewarm_seconds of closed-loop load first (fills the page cache).
          Also prints the major page faults per second and per request (the
          maps' reads from the drive).

BLAS: Debian's torch calls whatever libblas.so.3 is loaded (torch.__config__
says BLAS_INFO=generic); the script prints torch's build line and the BLAS
library, and where OpenBLAS picks a generic core on this CPU (0.3.21 on newer
Xeons: Prescott) sets OPENBLAS_CORETYPE to the best one it accepts
(bench/reference/torch_mmap_dlrm.py's choose_openblas_core). It refuses the
netlib reference BLAS (~40x slower sgemm) unless --allow_reference_blas.

  /usr/bin/python3 bench/torch_serve_bench.py closed --npy OUT/kaggle/npy --checkpoint OUT/kaggle/ck \\
      --batches 1,16,256,2048
  PYTHONPATH=build/python /usr/bin/python3 bench/torch_serve_bench.py check --npy OUT/kaggle/npy \\
      --checkpoint OUT/kaggle/ck
  memlimit 3G /usr/bin/python3 bench/torch_serve_bench.py open --npy OUT/ssd/npy --checkpoint OUT/ssd/ck \\
      --tables from_file --samples 64 --alpha 1.05 --find_max
"""
import argparse
import ctypes
import math
import multiprocessing as mp
import os
import re
import resource
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "reference"))
from torch_mmap_dlrm import choose_openblas_core, readahead_kb  # noqa: E402 (no torch imported there)

np = torch = nn = None  # imported in main(), after the BLAS environment is set


# --- the checkpoint and the model ---------------------------------------------

def resolve_checkpoint(path):
    """The step-N directory a checkpoint path names (as checkpoint/checkpoint.h's ResolveCheckpoint)."""
    if os.path.isfile(os.path.join(path, "MANIFEST")):
        return path
    latest = path if os.path.basename(path) == "LATEST" else os.path.join(path, "LATEST")
    if os.path.isfile(latest):
        return os.path.join(os.path.dirname(latest), open(latest).read().strip())
    steps = sorted(d for d in os.listdir(path) if d.startswith("step-"))
    if not steps:
        raise SystemExit(f"{path}: no checkpoint (no MANIFEST, LATEST or step-N)")
    return os.path.join(path, steps[-1])


def read_serving(checkpoint):
    step = resolve_checkpoint(checkpoint)
    lines = open(os.path.join(step, "SERVING")).read().splitlines()
    return step, dict(l.split("=", 1) for l in lines[1:] if "=" in l)


def npy_data_offset(path):
    """Byte offset of an .npy file's data, its shape and dtype."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read(f)
        return f.tell(), shape, dtype, fortran


def drop_from_page_cache(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def load_model(args):
    """The Dlrm of the checkpoint's manifest with the exported weights; its tables as --tables says."""
    from dlrm_reference import Dlrm
    step, m = read_serving(args.checkpoint)
    if m["interaction"] != "dot" or m["self_interaction"] != "0":
        raise SystemExit(f"{step}: interaction {m['interaction']} (self {m['self_interaction']}); only dot without "
                         "self-interaction is built here")
    if m["mlp_precision"] != "fp32" or m["table_dtype"] != "fp32":
        print(f"note: the checkpoint trained {m['mlp_precision']} MLPs, {m['table_dtype']} rows; scored in fp32 here")
    rows = [int(r) for r in m["table_rows"].split(",")]
    if any(h != "1" for h in m["hotness"].split(",")):
        raise SystemExit(f"{step}: multi-hot tables; requests here are one row per table")
    dim, dense = int(m["dim"]), int(m["num_dense"])
    bottom = [dense] + [int(w) for w in m["bottom_mlp"].split(",")]
    top = [int(w) for w in m["top_mlp"].split(",")]
    model = Dlrm(dim, bottom, top, [1] * len(rows))  # one-row tables, replaced below
    for name, mlp in (("bot_l", model.bottom), ("top_l", model.top)):
        state = {k: torch.from_numpy(np.load(os.path.join(args.npy, f"{name}.{k}.npy"))) for k in mlp.state_dict()}
        mlp.load_state_dict(state)
    maps = []
    for t, n in enumerate(rows):
        path = os.path.join(args.npy, f"emb_l.{t}.weight.npy")
        offset, shape, dtype, fortran = npy_data_offset(path)
        if shape != (n, dim) or dtype != np.float32 or fortran:
            raise SystemExit(f"{path}: {shape} {dtype} where ({n}, {dim}) float32 (C order) is needed")
        if args.tables == "memory":
            w = torch.from_numpy(np.load(path))
        else:
            drop_from_page_cache(path)
            floats = os.path.getsize(path) // 4
            flat = torch.from_file(path, shared=True, size=floats, dtype=torch.float32)
            w = flat[offset // 4: offset // 4 + n * dim].view(n, dim)
            if args.madvise == "random":
                libc = ctypes.CDLL(None, use_errno=True)
                libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
                page = w.data_ptr() & ~4095
                if libc.madvise(page, w.data_ptr() + n * dim * 4 - page, 1) != 0:  # MADV_RANDOM
                    raise OSError(ctypes.get_errno(), f"madvise(MADV_RANDOM) on {path}")
            maps.append(path)
        model.tables[t] = nn.EmbeddingBag(n, dim, mode="sum", _weight=w)
        assert model.tables[t].weight.data_ptr() == w.data_ptr()  # the loaded or mapped weight, not a copy
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model, rows, dense, step, maps


def set_threads(n):
    """torch's threads and OpenBLAS's pool (which torch.set_num_threads does not size)."""
    torch.set_num_threads(n)
    for lib in sorted({l.split()[-1] for l in open("/proc/self/maps") if "blas" in l.rsplit("/", 1)[-1]}):
        try:
            ctypes.CDLL(lib).openblas_set_num_threads(n)
            break
        except (OSError, AttributeError):
            pass


def blas_description(build):
    """Whether torch's BLAS is one to compare with (OpenBLAS, or the MKL a PyPI torch links in), and which."""
    if "BLAS_INFO=mkl" in build:
        return True, "MKL (linked into torch)"
    libs = sorted({l.split()[-1] for l in open("/proc/self/maps") if "blas" in l.rsplit("/", 1)[-1]})
    for lib in libs:
        try:
            cdll = ctypes.CDLL(lib)
            cdll.openblas_get_corename.restype = ctypes.c_char_p
            return True, (f"OpenBLAS core {cdll.openblas_get_corename().decode()}, "
                          f"{cdll.openblas_get_num_threads()} threads ({' '.join(libs)})")
        except (OSError, AttributeError):
            pass
    return False, f"not OpenBLAS: {' '.join(libs) or 'no libblas loaded'}"


def on_threads(fn, n):
    """fn(0), ..., fn(n - 1), each on a thread of its own; returns when all have."""
    threads = [threading.Thread(target=fn, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def uniform_request(rng, rows, dense, batch):
    d = torch.from_numpy((rng.random((batch, dense), dtype=np.float32) * 8).astype(np.float32))
    idx = [torch.from_numpy(rng.integers(0, n, batch, dtype=np.int64)) for n in rows]
    return d, idx


# --- check ---------------------------------------------------------------------

def check(args, model, rows, dense, step):
    from cemb.serve import Predictor  # PYTHONPATH=<build>/python
    rng = np.random.default_rng(args.seed)
    d, idx = uniform_request(rng, rows, dense, args.samples)
    offsets = [torch.arange(args.samples) for _ in rows]
    with torch.inference_mode():
        ours = model(d, offsets, idx).view(-1).numpy()
    p = Predictor.load(step, max_batch=256)
    theirs = p.predict(d.numpy(), np.stack([i.numpy() for i in idx], axis=1))
    diff = float(np.max(np.abs(ours - theirs)))
    print(f"check: {args.samples} samples of {step}: max |torch - cemb.serve| = {diff:.3g} "
          f"(tolerance {args.tolerance:g}); first scores torch {ours[:3]} cemb {theirs[:3]}")
    return 0 if diff <= args.tolerance else 1


# --- closed loop ---------------------------------------------------------------

def closed_process(model, rows, dense, batch, clients, threads, args, barrier, queue, seed):
    try:
        closed_clients(model, rows, dense, batch, clients, threads, args, barrier, queue, seed)
    except BaseException:
        queue.put(None)  # the parent stops waiting
        raise


def closed_clients(model, rows, dense, batch, clients, threads, args, barrier, queue, seed):
    set_threads(threads)
    offsets = torch.arange(batch)
    inner = threading.Barrier(clients)
    lat = [[] for _ in range(clients)]

    def client(c):
        rng = np.random.default_rng([seed, c])
        pool = [uniform_request(rng, rows, dense, batch) for _ in range(args.pool)]
        offs = [offsets] * len(rows)
        with torch.inference_mode():
            end = time.perf_counter() + args.warmup_seconds
            i = 0
            while time.perf_counter() < end:
                model(pool[i % len(pool)][0], offs, pool[i % len(pool)][1])
                i += 1
            if inner.wait() == 0:
                barrier.wait()
            inner.wait()
            end = time.perf_counter() + args.seconds
            while True:
                t0 = time.perf_counter()
                if t0 >= end:
                    break
                d, idx = pool[i % len(pool)]
                model(d, offs, idx)
                lat[c].append(time.perf_counter() - t0)
                i += 1

    on_threads(client, clients)
    queue.put([x for l in lat for x in l])


def closed(args, model, rows, dense):
    ctx = mp.get_context("fork")
    cores = os.cpu_count()
    print(f"{'mode':<14} {'batch':>5} {'clients':>7} {'samples/s':>12} {'p50 us':>10} {'p99 us':>10}  threads")
    for mode in args.modes.split(","):
        for batch in [int(b) for b in args.batches.split(",")]:
            for nc in [int(c) for c in args.clients.split(",")]:
                # request-level: a process per client, one thread; batch-level: one process, every core.
                procs, per, threads = (nc, 1, 1) if mode == "request-level" else (1, nc, cores)
                barrier, queue = ctx.Barrier(procs), ctx.Queue()
                ps = [ctx.Process(target=closed_process,
                                  args=(model, rows, dense, batch, per, threads, args, barrier, queue, 1000 + k))
                      for k in range(procs)]
                for p in ps:
                    p.start()
                got = [queue.get() for _ in ps]
                for p in ps:
                    p.join()
                if any(g is None for g in got) or any(p.exitcode != 0 for p in ps):
                    raise SystemExit("a closed-loop process failed")
                lat = np.array(sorted(x for g in got for x in g)) * 1e6
                print(f"{mode:<14} {batch:>5} {nc:>7} {len(lat) * batch / args.seconds:>12.0f} "
                      f"{lat[len(lat) // 2]:>10.1f} {lat[len(lat) * 99 // 100]:>10.1f}  "
                      f"{procs} x {threads}", flush=True)
    return 0


# --- open loop -----------------------------------------------------------------

class RowStream:
    """Zipf(alpha) rows of each table (uniform for alpha 0): ranks by inverse CDF, spread over the
    table by rank * a_t + b_t mod rows (a_t coprime with rows: a bijection)."""

    def __init__(self, rows, alpha, seed):
        self.rows, self.alpha = rows, alpha
        self.cdf, self.mul, self.add = {}, [], []
        for t, n in enumerate(rows):
            if alpha > 0 and n not in self.cdf:
                c = np.cumsum(np.arange(1, n + 1, dtype=np.float64) ** -alpha)
                self.cdf[n] = c / c[-1]
            a = int(n * 0.6180339887) | 1
            while math.gcd(a, n) != 1:
                a += 2
            self.mul.append(a)
            self.add.append(int(np.random.default_rng([seed, t]).integers(0, n)))

    def draw(self, rng, requests, samples):
        """Rows [requests, tables, samples] (int64)."""
        out = np.empty((requests, len(self.rows), samples), dtype=np.int64)
        for t, n in enumerate(self.rows):
            if self.alpha == 0:
                out[:, t] = rng.integers(0, n, (requests, samples), dtype=np.int64)
            else:
                rank = np.minimum(np.searchsorted(self.cdf[n], rng.random((requests, samples))), n - 1)
                out[:, t] = (rank.astype(np.int64) * self.mul[t] + self.add[t]) % n
        return out


def open_process(model, rows, dense, stream, args, proc, conn):
    """One process of the open loop: per measurement, its schedule and requests made first (then "ready"),
    then served from args.threads threads from the start time the parent sends."""
    set_threads(1)
    offsets = torch.arange(args.samples)
    blocks = np.random.default_rng([args.seed, proc, 0xde45e]).random((16, args.samples, dense), dtype=np.float32) * 8
    dense_blocks = [torch.from_numpy(np.ascontiguousarray(b)) for b in blocks]  # no cache depends on them
    request_no = 0
    while True:
        msg = conn.recv()
        if msg is None:
            return
        if msg[0] == "prewarm":  # closed loop on every thread until msg[1] (monotonic): fills the page cache
            faults0, sent = resource.getrusage(resource.RUSAGE_SELF).ru_majflt, [0] * args.threads

            def warm(w):
                r = np.random.default_rng([args.seed, proc, w, 0x9e3])
                with torch.inference_mode():
                    while time.monotonic() < msg[1]:
                        ids = stream.draw(r, 1, args.samples)[0]
                        model(dense_blocks[sent[w] % 16], [offsets] * len(rows), list(torch.from_numpy(ids)))
                        sent[w] += 1

            on_threads(warm, args.threads)
            conn.send((sum(sent), resource.getrusage(resource.RUSAGE_SELF).ru_majflt - faults0))
            continue
        rate, measurement = msg
        rng = np.random.default_rng([args.seed, proc, measurement, 0xa771])
        warm, end = args.warmup_seconds, args.warmup_seconds + args.seconds
        due = np.cumsum(rng.exponential(1.0 / rate, int(rate * end * 1.5 + 100)))
        due = due[due < end]
        # Every request's rows, made before the clock starts: [request, table, sample].
        ids = stream.draw(np.random.default_rng([args.seed, proc, request_no]), len(due), args.samples)
        request_no += len(due)
        conn.send("ready")
        start = conn.recv()
        lock, nxt = threading.Lock(), [0]
        out = [[] for _ in range(args.threads)]
        late, failed = [0] * args.threads, [0] * args.threads
        deadline = start + end + args.drain_seconds
        faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_majflt

        def worker(w):
            offs = [offsets] * len(rows)
            with torch.inference_mode():
                while True:
                    with lock:
                        k = nxt[0]
                        nxt[0] += 1
                    if k >= len(due) or time.monotonic() > deadline:
                        return
                    arrival = start + due[k]
                    wait = arrival - time.monotonic()
                    if wait > 0:
                        time.sleep(wait)
                    if time.monotonic() - arrival > 1e-3:
                        late[w] += 1
                    try:
                        model(dense_blocks[k % 16], offs, list(torch.from_numpy(ids[k])))
                    except Exception:  # noqa: BLE001 (counted; the run then fails)
                        failed[w] += 1
                    out[w].append((due[k], time.monotonic() - start))

        on_threads(worker, args.threads)
        samples = np.array([s for o in out for s in o], dtype=np.float64).reshape(-1, 2)
        conn.send((due, samples, sum(late), sum(failed),
                   resource.getrusage(resource.RUSAGE_SELF).ru_majflt - faults0))


def open_loop(args, model, rows, dense, maps):
    ctx = mp.get_context("fork")
    stream = RowStream(rows, args.alpha, args.seed)  # before the fork: the processes share its tables
    pipes, procs = [], []
    for k in range(args.procs):
        a, b = ctx.Pipe()
        p = ctx.Process(target=open_process, args=(model, rows, dense, stream, args, k, b))
        p.start()
        pipes.append(a)
        procs.append(p)
    measurements = [0]
    if maps:
        print(f"tables mapped from {os.path.dirname(maps[0])} (torch.from_file, shared; dropped from the page "
              f"cache first; madvise {args.madvise}; read_ahead_kb {readahead_kb(maps[0])})")
    print(f"open loop: {args.procs} processes x {args.threads} request threads (1 torch thread each), requests of "
          f"{args.samples} samples, rows {f'Zipf({args.alpha})' if args.alpha > 0 else 'uniform'}; "
          f"{args.warmup_seconds} s warm-up + {args.seconds} s per rate, drain {args.drain_seconds} s")

    def measure(rate, note=""):
        for c in pipes:
            c.send((rate / args.procs, measurements[0]))
        measurements[0] += 1
        for c in pipes:
            if c.recv() != "ready":
                raise SystemExit("an open-loop process failed")
        start = time.monotonic() + 0.02
        for c in pipes:
            c.send(start)
        got = [c.recv() for c in pipes]
        warm, end = args.warmup_seconds, args.warmup_seconds + args.seconds
        deadline = end + args.drain_seconds
        arrivals = sum(int(np.sum(g[0] >= warm)) for g in got)
        s = np.concatenate([g[1] for g in got])
        due, done = s[:, 0], s[:, 1]
        in_window = int(np.sum((done >= warm) & (done <= end)))
        achieved = in_window / args.seconds
        kept_up = in_window / arrivals if arrivals else 1.0
        lat = np.sort((done - due)[(due >= warm) & (done <= deadline)]) * 1e3
        late, failed, faults = sum(g[2] for g in got), sum(g[3] for g in got), sum(g[4] for g in got)
        sent, elapsed = len(s), float(done.max()) if len(s) else 0.0

        def pct(q):  # the dropped requests are the slowest
            if arrivals == 0:
                return 0.0
            i = math.ceil(q * arrivals) - 1
            return float(lat[i]) if i < len(lat) else math.inf

        p50, p99, p999 = pct(0.5), pct(0.99), pct(0.999)
        ok = arrivals > 0 and failed == 0 and kept_up >= args.min_achieved and p99 <= args.max_p99_ms
        ms = lambda x: "inf" if math.isinf(x) else f"{x:.3f}"  # noqa: E731
        print(f"{rate:>10.1f} {achieved:>10.1f} {kept_up:>7.4f} {achieved * args.samples:>11.0f} {ms(p50):>9} "
              f"{ms(p99):>9} {ms(p999):>9} {late:>6} {arrivals - len(lat):>7} {faults / max(elapsed, 1e-9):>9.0f} "
              f"{faults / max(sent, 1):>8.1f}  {'yes' if ok else 'no'}{note}", flush=True)
        if failed:
            raise SystemExit(f"{failed} requests failed")
        return ok

    try:
        if args.prewarm_seconds > 0:
            t0 = time.monotonic()
            for c in pipes:
                c.send(("prewarm", t0 + args.prewarm_seconds))
            got = [c.recv() for c in pipes]
            print(f"prewarm: {time.monotonic() - t0:.1f} s closed loop on {args.procs} x {args.threads} threads, "
                  f"{sum(g[0] for g in got)} requests, {sum(g[1] for g in got)} major faults", flush=True)
        print(f"{'offered/s':>10} {'achieved/s':>10} {'kept up':>7} {'samples/s':>11} {'p50 ms':>9} {'p99 ms':>9} "
              f"{'p99.9 ms':>9} {'late':>6} {'dropped':>7} {'majflt/s':>9} {'flt/req':>8}  pass", flush=True)
        for r in [float(x) for x in args.rates.split(",") if x]:
            measure(r)
        if args.find_max:
            lo, hi, rate = 0.0, math.inf, args.start_rate
            for _ in range(args.max_measurements):
                if measure(rate):
                    lo = rate
                else:
                    hi = rate
                if math.isinf(hi):
                    rate = 2 * lo
                elif lo == 0:
                    if hi < args.start_rate / 64:  # no rate passes: give up
                        break
                    rate = hi / 2
                elif hi / lo - 1 > args.precision:
                    rate = (lo + hi) / 2
                else:
                    break
            if lo > 0:
                print(f"max QPS: {lo:.1f} requests/s ({lo * args.samples:.0f} samples/s): answers >= "
                      f"{args.min_achieved} x arrivals and p99 <= {args.max_p99_ms} ms; the next rate up failed at "
                      f"{hi:.1f}", flush=True)
                measure(0.7 * lo, "  (70% of max QPS)")
            else:
                print(f"max QPS: none found (every rate tried failed, the lowest {hi:.1f} requests/s)")
    finally:
        for c in pipes:
            c.send(None)
        for p in procs:
            p.join()
    return 0


def main():
    global np, torch, nn
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["check", "closed", "open"])
    ap.add_argument("--npy", required=True, help="the model's .npy files (dlrm-train --export DIR)")
    ap.add_argument("--checkpoint", required=True, help="the checkpoint of the same run (its SERVING manifest)")
    ap.add_argument("--tables", choices=["memory", "from_file"], default="memory")
    ap.add_argument("--madvise", choices=["none", "random"], default="none")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--allow_reference_blas", action="store_true")
    g = ap.add_argument_group("check")
    g.add_argument("--tolerance", type=float, default=1e-5)
    g = ap.add_argument_group("closed")
    g.add_argument("--batches", default="1,16,256,2048")
    g.add_argument("--clients", default="1,2")
    g.add_argument("--modes", default="request-level,batch-level")
    g.add_argument("--pool", type=int, default=16, help="requests each client cycles through")
    g = ap.add_argument_group("open")
    g.add_argument("--samples", type=int, default=64, help="samples per request (check: samples scored)")
    g.add_argument("--alpha", type=float, default=1.05)
    g.add_argument("--rates", default="")
    g.add_argument("--find_max", action="store_true")
    g.add_argument("--start_rate", type=float, default=50)
    g.add_argument("--precision", type=float, default=0.05)
    g.add_argument("--min_achieved", type=float, default=0.99)
    g.add_argument("--max_p99_ms", type=float, default=25)
    g.add_argument("--max_measurements", type=int, default=24)
    g.add_argument("--procs", type=int, default=os.cpu_count())
    g.add_argument("--threads", type=int, default=4, help="Python request threads per process")
    g.add_argument("--prewarm_seconds", type=float, default=0, help="closed-loop load before the first rate")
    g = ap.add_argument_group("timing (closed and open)")
    g.add_argument("--seconds", type=float, default=5)
    g.add_argument("--warmup_seconds", type=float, default=1)
    g.add_argument("--drain_seconds", type=float, default=1)
    args = ap.parse_args()

    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(os.cpu_count()))
    blas_choice = choose_openblas_core()  # sets OPENBLAS_CORETYPE before torch loads OpenBLAS
    import numpy
    import torch as torch_module
    np, torch, nn = numpy, torch_module, torch_module.nn
    build = torch.__config__.show()
    info = ", ".join(re.findall(r"\b(?:BLAS_INFO|LAPACK_INFO|USE_MKLDNN)=[^,\s]*", build) +
                     re.findall(r"CPU capability usage: \S+", build))
    blas_ok, blas = blas_description(build)
    print(f"torch {torch.__version__} ({info}); {blas}; {blas_choice}; "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}", flush=True)
    if not blas_ok and not args.allow_reference_blas:
        raise SystemExit("torch's BLAS is neither OpenBLAS nor MKL (the reference BLAS: sgemm ~40x slower): install "
                         "libopenblas0, or put its libblas.so.3 first in LD_LIBRARY_PATH; --allow_reference_blas "
                         "to measure it anyway")
    t0 = time.perf_counter()
    model, rows, dense, step, maps = load_model(args)
    print(f"model: {step}: {len(rows)} tables ({sum(rows)} rows x {model.tables[0].weight.shape[1]}), bottom "
          f"{[l.out_features for l in model.bottom if isinstance(l, nn.Linear)]}, top "
          f"{[l.out_features for l in model.top if isinstance(l, nn.Linear)]}, dot; tables {args.tables}; "
          f"loaded in {time.perf_counter() - t0:.1f} s", flush=True)
    if args.command == "check":
        return check(args, model, rows, dense, step)
    if args.command == "closed":
        return closed(args, model, rows, dense)
    return open_loop(args, model, rows, dense, maps)


if __name__ == "__main__":
    sys.exit(main())
