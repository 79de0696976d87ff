#!/usr/bin/env python3
"""The tables' step from PyTorch, cemb against nn.EmbeddingBag: forward, backward
and the SGD update of T tables, nothing else, on the same batches.

  --impl cemb    cemb.torch.EmbeddingBagCollection (storage --storage), SGD in backward
  --impl torch   one nn.EmbeddingBag(mode="sum", sparse=True) per table and
                 torch.optim.SGD over their sparse gradients: PyTorch's own
                 way to train tables in DRAM

A step: pooled = lookup(batch); pooled.backward(G) with a fixed random G of the
output's shape; the optimizer step. The indices are the ones dlrm-train trains
on: its prepared binary dataset (--data, docs/data.md; bench/run_ssd_dlrm.sh
prepares the bench-ssd one: 8 tables x 4,000,000 rows, one-hot, Zipf 1.05),
taken in file order, batch k = samples [kB, kB + B); a multi-hot dataset
(dlrm-data generate --hotness K) gives bags of K values. Both start from the same
uniform rows (cemb's seed; nn.EmbeddingBag's weights are filled from the
collection, so the two also end equal up to float rounding: --check).

Prints one line a script can parse:
  python_tables: impl cemb, steps N, ms/step X (median of the second half), samples/s Y, ...

  PYTHONPATH=build/python /usr/bin/python3 bench/python_tables_bench.py --data train.bin --impl cemb
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="a prepared binary dataset (train.bin)")
    p.add_argument("--impl", choices=["cemb", "torch"], required=True)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--storage", default="dram", choices=["dram", "ssd"])
    p.add_argument("--directory", default="")
    p.add_argument("--dram-budget", default="")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    args = p.parse_args()

    sys.path.insert(0, os.path.join(HERE, "..", "examples", "python"))
    from train_dlrm import features_of
    from cemb.dataset import open_binary
    from cemb.torch import EmbeddingBagCollection, EmbeddingBagConfig

    torch.set_num_threads(args.threads)
    _, _, index, sizes = open_binary(args.data)
    steps = min(args.steps, len(index) // args.batch)
    keys = [f"cat_{t}" for t in range(len(sizes))]
    t0 = time.perf_counter()
    ebc = EmbeddingBagCollection(
        [EmbeddingBagConfig(name=f"t{t}", num_embeddings=n, embedding_dim=args.dim, feature_names=[keys[t]],
                            storage=args.storage, directory=args.directory or None) for t, n in enumerate(sizes)],
        dram_budget=args.dram_budget or None, batch_size=args.batch, learning_rate=args.lr, threads=args.threads)
    if args.impl == "torch":
        bags = []
        for t, n in enumerate(sizes):
            w = torch.empty(n, args.dim)
            ebc._core.read_table(t, w.numpy())
            bags.append(torch.nn.EmbeddingBag(n, args.dim, mode="sum", sparse=True, _weight=w))
        del ebc
        opt = torch.optim.SGD([b.weight for b in bags], lr=args.lr)
        hot = index.shape[2]  # values per bag
        offsets = torch.arange(0, args.batch * hot, hot, dtype=torch.int64)
    setup_s = time.perf_counter() - t0
    grad = torch.rand(args.batch, len(sizes) * args.dim, generator=torch.Generator().manual_seed(1)) - 0.5

    batches = [features_of(index[k * args.batch:(k + 1) * args.batch], keys) for k in range(steps)]
    times = []
    for k in range(steps):
        kjt = batches[k]
        s = time.perf_counter()
        if args.impl == "cemb":
            ebc(kjt).values().backward(grad)
        else:
            per_table = kjt.values().view(len(sizes), -1)
            pooled = torch.cat([b(per_table[t], offsets) for t, b in enumerate(bags)], dim=1)
            opt.zero_grad(set_to_none=True)
            pooled.backward(grad)
            opt.step()
        times.append(time.perf_counter() - s)
    median = statistics.median(times[steps // 2:])
    print(f"python_tables: impl {args.impl}, steps {steps}, ms/step {1e3 * median:.2f} (median of the second "
          f"half), samples/s {args.batch / median:.0f}, storage {args.storage}, {len(sizes)} tables of "
          f"{max(sizes)} rows x {args.dim}, {index.shape[2]} per bag, batch {args.batch}, "
          f"threads {torch.get_num_threads()}, "
          f"torch {torch.__version__}, setup {setup_s:.1f} s", flush=True)


if __name__ == "__main__":
    main()
