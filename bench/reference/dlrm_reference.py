#!/usr/bin/env python3
"""The PyTorch DLRM step that bench/run_dlrm.sh compares dlrm-train against, timed here.

A small, self-contained PyTorch model with the structure, initialisation and
optimizer of facebookresearch/dlrm's dlrm_s_pytorch.py (written for this
project, not copied): nn.EmbeddingBag(mode="sum", sparse=True) tables, Linear +
ReLU MLPs with a Sigmoid after the top MLP's last layer, the dot interaction
over the strictly lower triangle (no self-interaction) concatenated after the
bottom MLP's output, BCELoss (mean) and plain SGD on every parameter. Data are
random and made before the clock starts, as the reference's random data are
made by its loader outside the timed part of its loop.

It exists so that dlrm-train's ms/step can be compared with PyTorch's on the
same machine in the same sitting (bench/run_dlrm.sh), instead of with a number
measured on another day. Needs Debian's python3-torch (not a build or test
dependency of the project).

  /usr/bin/python3 bench/reference/dlrm_reference.py --model kaggle --threads 2
  /usr/bin/python3 bench/reference/dlrm_reference.py --model dlrm-s --threads 2
"""
import argparse
import ctypes
import math
import time

import numpy as np
import torch
import torch.nn as nn

# The 26 Criteo Kaggle cardinalities, the same as dlrm-train's synthetic Kaggle
# data (data/criteo.h).
KAGGLE_ROWS = [1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27, 14992,
               5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572]

MODELS = {
    # name: (dim, bottom, top, table rows, indices per lookup)
    "kaggle": (16, [13, 512, 256, 64, 16], [512, 256, 1], KAGGLE_ROWS, 1),
    # bench/dlrm_s_benchmark.sh
    "dlrm-s": (64, [512, 512, 64], [1024, 1024, 1024, 1], [1000000] * 8, 100),
}


def mlp(widths, sigmoid_last):
    layers = []
    for i in range(len(widths) - 1):
        n, m = widths[i], widths[i + 1]
        linear = nn.Linear(n, m, bias=True)
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(np.random.normal(0.0, math.sqrt(2 / (m + n)), (m, n)).astype(np.float32)))
            linear.bias.copy_(torch.from_numpy(np.random.normal(0.0, math.sqrt(1 / m), m).astype(np.float32)))
        layers.append(linear)
        layers.append(nn.Sigmoid() if sigmoid_last and i == len(widths) - 2 else nn.ReLU())
    return nn.Sequential(*layers)


class Dlrm(nn.Module):
    def __init__(self, dim, bottom, top, rows):
        super().__init__()
        self.tables = nn.ModuleList()
        for n in rows:
            w = np.random.uniform(-math.sqrt(1 / n), math.sqrt(1 / n), (n, dim)).astype(np.float32)
            self.tables.append(nn.EmbeddingBag(n, dim, mode="sum", sparse=True, _weight=torch.from_numpy(w)))
        self.bottom = mlp(bottom, sigmoid_last=False)
        f = len(rows) + 1
        self.top = mlp([dim + f * (f - 1) // 2] + top, sigmoid_last=True)
        self.li = torch.tensor([i for i in range(f) for j in range(i)])
        self.lj = torch.tensor([j for i in range(f) for j in range(i)])

    def forward(self, dense, offsets, indices):
        x = self.bottom(dense)
        ly = [t(i, o) for t, i, o in zip(self.tables, indices, offsets)]
        b, d = x.shape
        t = torch.cat([x] + ly, dim=1).view(b, -1, d)
        z = torch.bmm(t, t.transpose(1, 2))
        return self.top(torch.cat([x, z[:, self.li, self.lj]], dim=1))


def blas_threads():
    """The threads of the BLAS torch calls: OpenBLAS keeps its own pool, which
    torch.set_num_threads does not size (OPENBLAS_NUM_THREADS does). None when
    the loaded BLAS is not OpenBLAS."""
    for lib in sorted({l.split()[-1] for l in open("/proc/self/maps") if "blas" in l.rsplit("/", 1)[-1]}):
        try:
            return ctypes.CDLL(lib).openblas_get_num_threads()
        except (OSError, AttributeError):
            pass
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=sorted(MODELS), default="kaggle")
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--lr", type=float, default=0.1)
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    np.random.seed(123)
    dim, bottom, top, rows, hot = MODELS[args.model]
    model = Dlrm(dim, bottom, top, rows)
    loss_fn = nn.BCELoss(reduction="mean")
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)

    batches = []
    for _ in range(min(args.steps + args.warmup, 8)):
        dense = torch.rand(args.batch, bottom[0])
        offsets = [torch.arange(0, args.batch * hot, hot) for _ in rows]
        indices = [torch.randint(0, n, (args.batch * hot,)) for n in rows]
        target = torch.randint(0, 2, (args.batch, 1)).float()
        batches.append((dense, offsets, indices, target))

    times = []
    for step in range(args.steps + args.warmup):
        dense, offsets, indices, target = batches[step % len(batches)]
        t0 = time.perf_counter()
        loss = loss_fn(model(dense, offsets, indices), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
    times = np.array(times) * 1e3
    print(f"pytorch {torch.__version__} {args.model} batch {args.batch} threads {torch.get_num_threads()} "
          f"(blas {blas_threads()}): "
          f"{times.mean():.1f} ms/step (median {np.median(times):.1f}, min {times.min():.1f}) over {len(times)} steps")


if __name__ == "__main__":
    main()
