#!/usr/bin/env python3
"""Trains a DLRM in PyTorch whose embedding tables live in cemb: the MLPs and
the dot interaction are torch modules, the tables a cemb.torch
EmbeddingBagCollection in DRAM, behind a DRAM cache, or on an NVMe drive.

Data: the engine's binary dataset (dlrm-data preprocess / generate; docs/data.md),
memory-mapped, or a Criteo TSV file (label, 13 integers, 26 hex ids; each id
taken modulo --rows), read whole. Batches are taken in file order; the last
--eval-batches batches are held out and evaluated at the end (log loss, AUC,
accuracy).

    PYTHONPATH=build/python /usr/bin/python3 examples/python/train_dlrm.py --data train.bin
    PYTHONPATH=build/python /usr/bin/python3 examples/python/train_dlrm.py --data day_0.tsv --rows 1000000
    # tables on the drive, 2 GiB of DRAM for their hot rows, a 4x smaller memory cap:
    ../shared/tools/memlimit 2G /usr/bin/python3 examples/python/train_dlrm.py --data train.bin \
        --storage ssd --directory /nvme/cemb --dram-budget 1GiB

Prints a progress line every --progress steps and, at the end, one summary line
a script can parse ("train_dlrm: steps N, samples/s X, second half Y, ...").
"""
import argparse
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn

from cemb.dataset import open_binary
from cemb.torch import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor


def read_tsv(path, rows):
    """A Criteo TSV file: dense log(1 + max(x, 0)), ids (hex) modulo rows; empty fields are 0."""
    labels, dense, index = [], [], []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 40:
                raise SystemExit(f"{path}:{n}: {len(fields)} fields where a Criteo line has 40")
            try:
                labels.append(float(fields[0]))
                dense.append([math.log1p(max(float(x), 0.0)) if x else 0.0 for x in fields[1:14]])
                index.append([[int(x, 16) % rows if x else 0] for x in fields[14:]])
            except ValueError as e:
                raise SystemExit(f"{path}:{n}: {e}") from None
    return (np.array(labels, np.float32), np.array(dense, np.float32), np.array(index, np.int64), [rows] * 26)


def mlp(widths, sigmoid_last):
    layers = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        layers.append(nn.Sigmoid() if sigmoid_last and i == len(widths) - 2 else nn.ReLU())
    return nn.Sequential(*layers)


class Dlrm(nn.Module):
    """DLRM's dense part over pooled embeddings [B, T x dim]: the bottom MLP, the dot
    interaction (the strictly lower triangle, after the bottom output), the top MLP."""

    def __init__(self, dim, tables, bottom, top):
        super().__init__()
        self.dim, self.tables = dim, tables
        self.bottom = mlp(bottom, sigmoid_last=False)
        pairs = (tables + 1) * tables // 2
        self.top = mlp([dim + pairs] + top, sigmoid_last=True)
        rows, cols = torch.tril_indices(tables + 1, tables + 1, offset=-1)
        self.register_buffer("li", rows)
        self.register_buffer("lj", cols)

    def forward(self, dense, pooled):
        x = self.bottom(dense)
        t = torch.cat([x, pooled], dim=1).view(-1, self.tables + 1, self.dim)
        z = torch.bmm(t, t.transpose(1, 2))[:, self.li, self.lj]
        return self.top(torch.cat([x, z], dim=1))


def features_of(index, keys):
    """A batch's [B, T, K] indices as a KeyedJaggedTensor (key t: every sample's K ids of table t)."""
    b, t, k = index.shape
    values = torch.from_numpy(np.ascontiguousarray(index.transpose(1, 0, 2)).reshape(-1).astype(np.int64))
    return KeyedJaggedTensor(keys, values, lengths=torch.full((t * b,), k, dtype=torch.int64))


def auc(scores, labels):
    """The area under the ROC curve (ties counted half)."""
    order = np.argsort(scores, kind="mergesort")
    s, y = scores[order], labels[order]
    ranks = np.empty(len(s))
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[i:j + 1] = (i + j) / 2 + 1
        i = j + 1
    pos = y.sum()
    neg = len(y) - pos
    return float((ranks[y == 1].sum() - pos * (pos + 1) / 2) / (pos * neg)) if pos and neg else float("nan")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="a binary dataset (.bin) or a Criteo TSV file")
    p.add_argument("--rows", type=int, default=1_000_000, help="TSV: rows per table (ids modulo it)")
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--bottom", default="512,256,64", help="bottom MLP widths after the dense inputs")
    p.add_argument("--top", default="512,512,256,1", help="top MLP widths after the interaction")
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--steps", type=int, default=0, help="0: every training batch")
    p.add_argument("--eval-batches", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "rowwise_adagrad"], help="the tables' optimizer")
    p.add_argument("--storage", default="dram", choices=["dram", "dynamic", "ssd"])
    p.add_argument("--directory", default="", help="dynamic, ssd: where the tables' files go")
    p.add_argument("--dram-budget", default="", help="dynamic, ssd: DRAM for hot rows (e.g. 1GiB)")
    p.add_argument("--prefetch", type=int, default=1, help="batches whose rows are read ahead (ssd)")
    p.add_argument("--traffic-batches", type=int, default=64,
                   help="dynamic, ssd: the first N batches are the traffic sample the DRAM budget is split by "
                        "(their hottest rows first, as dlrm-train does); 0: by size")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--progress", type=int, default=50, help="a progress line every N steps (0: none)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if args.data.endswith(".tsv") or args.data.endswith(".txt"):
        labels, dense, index, sizes = read_tsv(args.data, args.rows)
    else:
        labels, dense, index, sizes = open_binary(args.data)
    n, tables = len(labels), len(sizes)
    batches = n // args.batch
    train_batches = batches - args.eval_batches
    steps = train_batches if args.steps == 0 else min(args.steps, train_batches)
    if steps < 2:
        raise SystemExit(f"{args.data}: {n} samples, too few for 2 training batches of {args.batch} "
                         f"and {args.eval_batches} held out")
    if args.storage != "dram" and not (args.directory and args.dram_budget):
        raise SystemExit(f"--storage {args.storage} needs --directory and --dram-budget")
    if args.directory:
        os.makedirs(args.directory, exist_ok=True)

    keys = [f"cat_{t}" for t in range(tables)]
    configs = [EmbeddingBagConfig(name=f"t{t}", num_embeddings=rows, embedding_dim=args.dim, feature_names=[keys[t]],
                                  storage=args.storage, directory=args.directory or None)
               for t, rows in enumerate(sizes)]
    t0 = time.perf_counter()
    sample = []
    if args.storage != "dram":
        sample = [features_of(index[k * args.batch:(k + 1) * args.batch], keys)
                  for k in range(min(args.traffic_batches, train_batches))]
    ebc = EmbeddingBagCollection(configs, dram_budget=args.dram_budget or None, batch_size=args.batch,
                                 bag_size=index.shape[2], prefetch_batches=args.prefetch,
                                 optimizer=args.optimizer, learning_rate=args.lr, threads=args.threads,
                                 seed=args.seed, traffic_sample=sample)
    del sample
    model = Dlrm(args.dim, tables, [dense.shape[1]] + [int(w) for w in args.bottom.split(",")],
                 [int(w) for w in args.top.split(",")])
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = nn.BCELoss()
    setup_s = time.perf_counter() - t0

    def batch(k):
        s = slice(k * args.batch, (k + 1) * args.batch)
        return (features_of(index[s], keys), torch.from_numpy(np.ascontiguousarray(dense[s])),
                torch.from_numpy(np.ascontiguousarray(labels[s])).view(-1, 1))

    print(f"train_dlrm: {tables} tables of up to {max(sizes)} rows x {args.dim} ({args.storage}), "
          f"{steps} steps of {args.batch}, {args.eval_batches} held out; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads", flush=True)
    losses, ends = [], []
    emb_s = 0.0
    start = time.perf_counter()
    current = batch(0)
    if args.prefetch > 0:
        ebc.prefetch(current[0])
    for k in range(steps):
        features, x, y = current
        e0 = time.perf_counter()
        pooled = ebc(features).values()  # the KeyedTensor's [B, tables x dim], as TorchRec's
        emb_s += time.perf_counter() - e0
        if k + 1 < steps:
            current = batch(k + 1)
            if args.prefetch > 0:
                ebc.prefetch(current[0])  # its rows are read while this step computes
        loss = loss_fn(model(x, pooled), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()  # the tables' rows are updated here
        opt.step()
        losses.append(loss.item())
        ends.append(time.perf_counter())
        if args.progress and ((k + 1) % args.progress == 0 or k + 1 == steps):
            elapsed = ends[-1] - start
            recent = losses[-args.progress:]
            print(f"step {k + 1}/{steps}  loss {sum(recent) / len(recent):.5f}  "
                  f"{(k + 1) * args.batch / elapsed:,.0f} samples/s  "
                  f"tables forward {100 * emb_s / elapsed:.0f}% of the time", flush=True)
    total = ends[-1] - start

    model.eval()
    ebc.eval()
    scores, truth, eval_loss = [], [], 0.0
    with torch.no_grad():
        for k in range(train_batches, batches):
            features, x, y = batch(k)
            p_ = model(x, ebc(features).values())
            eval_loss += float(loss_fn(p_, y)) * len(y)
            scores.append(p_.view(-1).numpy())
            truth.append(y.view(-1).numpy())
    scores, truth = np.concatenate(scores), np.concatenate(truth)
    held = len(truth)
    print(f"validation: log loss {eval_loss / held:.5f}  AUC {auc(scores, truth):.4f}  "
          f"accuracy {float(((scores > 0.5) == (truth > 0.5)).mean()):.4f}  ({held} samples)")
    ssd = [r for r in ebc.report() if r["storage"] == "ssd"]
    if ssd:
        reads = sum(r["block_reads"] for r in ssd)
        written = sum(r["bytes_written"] for r in ssd)
        dirty = sum(r["rows_written"] for r in ssd) * args.dim * 4
        hits = sum(r["hit_rate"] * r["prefetch_rows"] for r in ssd) / max(1, sum(r["prefetch_rows"] for r in ssd))
        print(f"ssd tables: hit rate {hits:.3f}, {reads / steps:.0f} block reads per step, "
              f"{written / 2**20:.0f} MiB written for {dirty / 2**20:.0f} MiB of dirty rows, "
              f"DRAM {sum(r['dram_bytes'] for r in ssd) / 2**20:.0f} MiB")
    half = steps // 2
    second = (steps - half) * args.batch / (ends[-1] - ends[half - 1])
    print(f"train_dlrm: steps {steps}, samples/s {steps * args.batch / total:.0f}, second half {second:.0f}, "
          f"ms/step {1e3 * total / steps:.1f}, loss first {losses[0]:.6f} last {losses[-1]:.6f}, "
          f"setup {setup_s:.1f} s, storage {args.storage}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
