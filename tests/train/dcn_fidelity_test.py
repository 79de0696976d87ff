"""DLRM-DCNv2 fidelity: dlrm-train, with configs/mlperf-dlrmv2.yaml on a small shape, computes the
same first 20 fp32 losses (within 1e-5 relative) as a plain PyTorch implementation of the same model
written here from the formulas, from the same initial weights, on the same multi-hot batches.

The PyTorch model (DcnDlrm below) is written from the definitions, not from our code:
  bottom = ReLU MLP(dense)                              13 -> ... -> dim (ReLU after every layer)
  x0     = [bottom, sum of table t's rows of the bag, t = 0..T-1]        (concatenated, [n, (T+1) dim])
  x_{l+1} = x0 * (W_l (V_l x_l) + b_l) + x_l            (low rank; x0 * (W_l x_l + b_l) + x_l full rank)
  logit  = MLP(x_L)                                     (ReLU between layers, none after the last)
  loss   = mean BCE(sigmoid(logit), label)
  tables: torch.optim.Adagrad(lr, eps), element-wise, as MLPerf's reference trains them (it hands
          torch.optim.Adagrad to apply_optimizer_in_backward: FBGEMM's EXACT_ADAGRAD, m += g^2,
          w -= lr g / (sqrt(m) + eps) per weight, a row's gradients summed over the batch first);
          or row-wise Adagrad (FBGEMM's EXACT_ROWWISE_ADAGRAD) by hand: s_r += mean(g_r^2);
          r -= lr g_r / (sqrt(s_r) + eps); or SGD
  dense:  torch.optim.Adagrad(lr, eps)                  (or SGD for both parts in the SGD case)
Its state_dict names are the files dlrm-train's model.init_from reads: emb_l.<t>.weight,
bot_l.<2k>.weight/bias, crossnet.W_kernels.<l>, crossnet.V_kernels.<l> (crossnet.kernels.<l> at full
rank), crossnet.bias.<l>, top_l.<2k>.weight/bias.

Usage: python3 dcn_fidelity_test.py DLRM_DATA DLRM_TRAIN SOURCE_DIR
Exit 0: every case agrees; 1: a case differs (the first step that does is printed); 77: no torch.
"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

try:
    import torch
except ImportError:
    print("no torch here: skipped")
    sys.exit(77)

STEPS, BATCH, DIM, CAP = 20, 64, 16, 300
# MLPerf DLRM-DCNv2's per-table hotness (the issue's list; configs/mlperf-dlrmv2.yaml).
HOTNESS = [3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1]
MLPERF_SIZES = [40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282, 10, 2209,
                11938, 155, 4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108, 36]
SIZES = [min(s, CAP) for s in MLPERF_SIZES]
BOTTOM, TOP, LAYERS = [32, DIM], [64, 32, 1], 3


def load_dataset_module(source_dir):
    """python/cemb/dataset.py by path (pure NumPy; the compiled module need not be built)."""
    spec = importlib.util.spec_from_file_location("cemb_dataset", os.path.join(source_dir, "python/cemb/dataset.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class CrossNet(torch.nn.Module):
    def __init__(self, width, layers, rank):
        super().__init__()
        self.rank = rank
        if rank > 0:
            self.W_kernels = torch.nn.ParameterList(
                [torch.nn.Parameter(torch.randn(width, rank) * 0.1) for _ in range(layers)])
            self.V_kernels = torch.nn.ParameterList(
                [torch.nn.Parameter(torch.randn(rank, width) * 0.1) for _ in range(layers)])
        else:
            self.kernels = torch.nn.ParameterList(
                [torch.nn.Parameter(torch.randn(width, width) * 0.05) for _ in range(layers)])
        # Not zero (TorchRec's init) so that the bias path is checked from step 0.
        self.bias = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(width) * 0.1) for _ in range(layers)])

    def forward(self, x0):
        x = x0
        for l in range(len(self.bias)):
            if self.rank > 0:
                o = (x @ self.V_kernels[l].t()) @ self.W_kernels[l].t() + self.bias[l]
            else:
                o = x @ self.kernels[l].t() + self.bias[l]
            x = x0 * o + x
        return x


def mlp(sizes, last_relu):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes) or last_relu:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


class DcnDlrm(torch.nn.Module):
    def __init__(self, rank):
        super().__init__()
        self.emb_l = torch.nn.ModuleList([torch.nn.EmbeddingBag(n, DIM, mode="sum") for n in SIZES])
        for e in self.emb_l:
            torch.nn.init.uniform_(e.weight, -0.1, 0.1)
        self.bot_l = mlp([13] + BOTTOM, last_relu=True)
        width = (len(SIZES) + 1) * DIM
        self.crossnet = CrossNet(width, LAYERS, rank)
        self.top_l = mlp([width] + TOP, last_relu=False)

    def forward(self, dense, bags):
        x0 = torch.cat([self.bot_l(dense)] + [e(b) for e, b in zip(self.emb_l, bags)], dim=1)
        return self.top_l(self.crossnet(x0)).squeeze(1)


def reference_losses(model, labels, dense, bags, optimizer, embedding_optimizer, lr, eps):
    """optimizer: the dense part's, "adagrad" or "sgd"; embedding_optimizer: the tables', "adagrad"
    (torch.optim.Adagrad over the EmbeddingBag weights too, as MLPerf's reference), "rowwise_adagrad"
    or "sgd" (by hand below)."""
    dense_params = [p for n, p in model.named_parameters() if not n.startswith("emb_l.")]
    if embedding_optimizer == "adagrad":  # untouched rows have a zero gradient: m and w stay
        dense_params += [e.weight for e in model.emb_l]
    opt = torch.optim.Adagrad(dense_params, lr=lr, eps=eps) if optimizer == "adagrad" else \
        torch.optim.SGD(dense_params, lr=lr)
    state = [torch.zeros(n, dtype=torch.float32) for n in SIZES]
    losses = []
    for step in range(STEPS):
        rows = slice(step * BATCH, (step + 1) * BATCH)
        batch_bags = [torch.from_numpy(np.ascontiguousarray(b[rows]).astype(np.int64)) for b in bags]
        logit = model(torch.from_numpy(np.ascontiguousarray(dense[rows])), batch_bags)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, torch.from_numpy(np.array(labels[rows])))
        losses.append(loss.item())
        opt.zero_grad()
        for e in model.emb_l:
            e.weight.grad = None
        loss.backward()
        opt.step()
        with torch.no_grad():
            for t, e in enumerate(model.emb_l):
                g = e.weight.grad
                if embedding_optimizer == "rowwise_adagrad":
                    state[t] += (g * g).mean(dim=1)
                    e.weight -= lr * g / (state[t].sqrt() + eps).unsqueeze(1)
                elif embedding_optimizer == "sgd":
                    e.weight -= lr * g
    return losses


def run_case(name, rank, optimizer, embedding_optimizer, lr, tools, work):
    dlrm_data, dlrm_train, source_dir = tools
    data = os.path.join(work, "data.bin")
    if not os.path.exists(data):
        subprocess.run([dlrm_data, "generate", "--output", data, "--samples", str(STEPS * BATCH),
                        "--table-sizes", ",".join(map(str, SIZES)), "--hotness", ",".join(map(str, HOTNESS)),
                        "--distribution", "zipf", "--alpha", "1.05", "--seed", "7"],
                       check=True, stdout=subprocess.DEVNULL)
    labels, dense, bags, sizes = load_dataset_module(source_dir).open_bags(data)
    assert sizes == SIZES, sizes

    torch.manual_seed(11)
    model = DcnDlrm(rank)
    init = os.path.join(work, f"init-{name}")
    os.makedirs(init)
    for key, value in model.state_dict().items():
        np.save(os.path.join(init, key + ".npy"), value.numpy())
    eps = 1e-8
    want = reference_losses(model, labels, dense, bags, optimizer, embedding_optimizer, lr, eps)

    log = os.path.join(work, f"{name}.jsonl")
    settings = {
        "data.source": "binary", "data.path": data, "data.split": "none",
        "model.tables.sizes": "[" + ",".join(map(str, SIZES)) + "]",
        "model.embedding_dim": DIM, "model.bottom_mlp": str(BOTTOM), "model.top_mlp": str(TOP),
        "model.dcn_layers": LAYERS, "model.dcn_rank": rank,
        "model.mlp_precision": "fp32", "model.table_dtype": "fp32", "model.dram_budget": "64MiB",
        "model.storage.slow_tier": work, "model.init_from": init,
        "optimizer.embedding": embedding_optimizer,
        "optimizer.dense": optimizer, "optimizer.learning_rate": lr, "optimizer.adagrad_eps": eps,
        "train.batch_size": BATCH, "train.steps": STEPS, "train.shuffle": "false", "train.threads": 2,
        "train.log_jsonl": log, "train.log_every": 1, "train.progress": "false",
        "train.eval_every": 0,
    }
    command = [dlrm_train, "--config", os.path.join(source_dir, "configs/mlperf-dlrmv2.yaml")]
    for key, value in settings.items():
        command += ["--set", f"{key}={value}"]
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        print(f"{name}: dlrm-train failed ({run.returncode}):\n{run.stdout}\n{run.stderr}")
        return False
    got = {}
    with open(log) as f:
        for line in f:
            record = json.loads(line)
            if record.get("type") == "step":
                got[record["step"]] = record["loss"]
    for step, w in enumerate(want):
        g = got.get(step)
        if g is None or abs(g - w) > 1e-5 * abs(w):
            print(f"{name}: step {step}: dlrm-train loss {g}, PyTorch {w:.9g} (relative tolerance 1e-5)")
            return False
    print(f"{name}: {STEPS} losses agree (first {want[0]:.6f}, last {want[-1]:.6f}; "
          f"largest relative difference {max(abs(got[s] - w) / abs(w) for s, w in enumerate(want)):.2e})")
    return True


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    torch.set_num_threads(2)
    tools = tuple(sys.argv[1:4])
    with tempfile.TemporaryDirectory() as work:
        # The config as it stands (element-wise Adagrad on the tables), the row-wise option, SGD.
        ok = run_case("adagrad-low-rank", rank=8, optimizer="adagrad", embedding_optimizer="adagrad", lr=0.01,
                      tools=tools, work=work)
        ok = run_case("rowwise-adagrad-low-rank", rank=8, optimizer="adagrad", embedding_optimizer="rowwise_adagrad",
                      lr=0.01, tools=tools, work=work) and ok
        ok = run_case("sgd-full-rank", rank=0, optimizer="sgd", embedding_optimizer="sgd", lr=0.1, tools=tools,
                      work=work) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
