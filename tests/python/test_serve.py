"""cemb.serve: a checkpoint of dlrm-train scored from NumPy and torch.

Needs dlrm-train (CEMB_DLRM_TRAIN, set by ctest); skipped without it. The
reference is a plain NumPy forward of the model's exported weights
(dlrm-train --export: DLRM_Net.state_dict()'s names), so the predictor is
checked against an implementation that shares none of its code.
"""
import os
import subprocess
import threading

import numpy as np
import pytest

DLRM_TRAIN = os.environ.get("CEMB_DLRM_TRAIN")
pytestmark = pytest.mark.skipif(not DLRM_TRAIN, reason="CEMB_DLRM_TRAIN (dlrm-train) not given")

TABLES, ROWS = 6, 500


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    d = tmp_path_factory.mktemp("serve")
    config = d / "model.yaml"
    config.write_text(f"""
data: {{source: synthetic, samples: 4096, validation_fraction: 0.25, seed: 2, work_dir: {d}/data}}
model:
  embedding_dim: 8
  bottom_mlp: [16, 8]
  top_mlp: [16, 1]
  mlp_precision: fp32
  tables: {{count: {TABLES}, rows: {ROWS}}}
  storage: {{kind: dram, slow_tier: {d}}}
  table_storage: {{"1": {{kind: ssd}}}}
  dram_budget: 16MiB
train: {{batch_size: 256, steps: 4, threads: 2, progress: false, checkpoint_dir: {d}/ck}}
""")
    subprocess.run([DLRM_TRAIN, "--config", str(config), "--export", str(d / "npy")], check=True,
                   stdout=subprocess.DEVNULL)
    return d


def test_an_ssd_table_is_served_in_place(trained):
    import cemb.serve
    import time

    p = cemb.serve.Predictor.load(trained / "ck", ssd_cache_bytes=64 << 10, contexts=2, max_batch=64)
    assert [t["table"] for t in p.snapshot_tables] == [1]
    assert p.snapshot_tables[0]["path"].endswith("/model/emb_l.1.ssd")
    dense, sparse = samples(300, 7)
    np.testing.assert_allclose(p.predict(dense, sparse), numpy_forward(trained / "npy", dense, sparse), rtol=1e-5)
    assert p.snapshot_tables[0]["rows_read"] > 0
    for _ in range(500):
        if p.verification != "pending":
            break
        time.sleep(0.01)
    assert p.verification == "ok"
    with pytest.raises(ValueError, match="ssd_cache_bytes"):
        cemb.serve.Predictor.load(trained / "ck", ssd_cache_bytes=1024)


def numpy_forward(npy, dense, sparse):
    def w(name):
        return np.load(npy / f"{name}.npy").astype(np.float64)

    x = dense.astype(np.float64)
    for l in (0, 2):
        x = np.maximum(x @ w(f"bot_l.{l}.weight").T + w(f"bot_l.{l}.bias"), 0)
    feats = [x] + [w(f"emb_l.{t}.weight")[sparse[:, t]] for t in range(TABLES)]
    f = np.stack(feats, axis=1)  # [n, F, D]
    z = f @ f.transpose(0, 2, 1)
    i, j = np.tril_indices(len(feats), -1)
    top = np.concatenate([x, z[:, i, j]], axis=1)
    top = np.maximum(top @ w("top_l.0.weight").T + w("top_l.0.bias"), 0)
    logit = top @ w("top_l.2.weight").T + w("top_l.2.bias")
    return 1 / (1 + np.exp(-logit[:, 0]))


def samples(n, seed):
    rng = np.random.default_rng(seed)
    return (rng.uniform(0, 4, (n, 13)).astype(np.float32), rng.integers(0, ROWS, (n, TABLES), dtype=np.int64))


def test_numpy_batches_score_as_the_model_computes(trained):
    from cemb.serve import Predictor

    p = Predictor.load(trained / "ck")
    assert (p.num_dense, p.num_tables, p.interaction, p.precision) == (13, TABLES, "dot", "fp32")
    dense, sparse = samples(300, 1)
    probs = p.predict(dense, sparse)
    assert probs.dtype == np.float32 and probs.shape == (300,)
    np.testing.assert_allclose(probs, numpy_forward(trained / "npy", dense, sparse), rtol=1e-5, atol=1e-6)
    # int32 rows, and each sample alone: the same bits.
    assert np.array_equal(p.predict(dense, sparse.astype(np.int32)), probs)
    alone = np.concatenate([p.predict(dense[k:k + 1], sparse[k:k + 1]) for k in range(0, 300, 7)])
    assert np.array_equal(alone, probs[::7])


def test_torch_tensors_in_give_a_tensor_out(trained):
    torch = pytest.importorskip("torch")
    from cemb.serve import Predictor

    p = Predictor.load(trained / "ck", contexts=2, threads_per_context=1)
    dense, sparse = samples(64, 2)
    with torch.inference_mode():
        out = p.predict(torch.from_numpy(dense), torch.from_numpy(sparse))
    assert isinstance(out, torch.Tensor) and out.shape == (64,)
    assert np.array_equal(out.numpy(), p.predict(dense, sparse))


def test_python_threads_score_at_once(trained):
    from cemb.serve import Predictor

    p = Predictor.load(trained / "ck", contexts=2, threads_per_context=1)
    dense, sparse = samples(400, 3)
    expected = p.predict(dense, sparse)
    got = np.zeros(400, np.float32)

    def work(w):
        for s in range(w * 100, (w + 1) * 100, 10):
            got[s:s + 10] = p.predict(dense[s:s + 10], sparse[s:s + 10])

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert np.array_equal(got, expected)


def test_bad_inputs_are_python_errors(trained):
    from cemb.serve import Predictor

    p = Predictor.load(trained / "ck")
    dense, sparse = samples(4, 4)
    sparse[2, 1] = ROWS
    with pytest.raises(IndexError, match="emb1, bag 2"):
        p.predict(dense, sparse)
    with pytest.raises(ValueError, match="shape"):
        p.predict(dense[:, :5], sparse)
    with pytest.raises(RuntimeError, match="Criteo"):  # synthetic data: no raw preprocessing
        p.predict_criteo(np.zeros((4, 13), np.int64), np.zeros((4, 26), np.int64))
    with pytest.raises(FileNotFoundError):
        Predictor.load(trained / "nothing")


def decoded_tables(npy, out, fmt):
    """A copy of the exported weights whose tables are rows of `fmt` decoded
    to fp32, written from the formats' definitions (fp16: IEEE half, nearest
    even; int8: FBGEMM's 8-bit row-wise quantisation), not from our code."""
    out.mkdir()
    for f in npy.iterdir():
        w = np.load(f)
        if f.name.startswith("emb_l."):
            if fmt == "fp16":
                w = w.astype(np.float16).astype(np.float32)
            else:
                lo, hi = w.min(axis=1, keepdims=True), w.max(axis=1, keepdims=True)
                scale = ((hi - lo) / np.float32(255)).astype(np.float32)
                inverse = (np.float32(255) / ((hi - lo) + np.float32(1e-8))).astype(np.float32)
                q = np.rint((w - lo) * inverse)
                w = (q.astype(np.float64) * scale + lo).astype(np.float32)
        np.save(out / f.name, w)
    return out


@pytest.mark.parametrize("fmt", ["fp16", "int8"])
def test_a_converted_checkpoint_scores_as_its_decoded_rows(trained, fmt):
    from cemb.serve import Predictor

    convert = os.environ.get("CEMB_DLRM_CONVERT")
    if not convert:
        pytest.skip("CEMB_DLRM_CONVERT (dlrm-convert) not given")
    subprocess.run([convert, "--checkpoint", str(trained / "ck"), "--format", fmt, "--out",
                    str(trained / f"ck-{fmt}")], check=True, stdout=subprocess.DEVNULL)
    p = Predictor.load(trained / f"ck-{fmt}", ssd_cache_bytes=64 << 10, contexts=2, max_batch=64)
    assert [t["table"] for t in p.snapshot_tables] == [1]  # trained on ssd: still in place
    dense, sparse = samples(300, 9)
    reference = numpy_forward(decoded_tables(trained / "npy", trained / f"npy-{fmt}", fmt), dense, sparse)
    np.testing.assert_allclose(p.predict(dense, sparse), reference, rtol=1e-5, atol=1e-6)
