"""Score a model that dlrm-train wrote, from NumPy arrays or torch tensors.

    p = cemb.serve.Predictor.load("/ckpt")          # a checkpoint directory, its LATEST, or a step-N
    probs = p.predict(dense, sparse)                # dense [n, 13] floats, sparse [n, tables] rows
    probs = p.predict_criteo(integers, categorical) # raw Criteo: [n, 13] ints, [n, 26] ids

The C++ predictor (serve/predictor.h, docs/serving.md) does the work; a
torch tensor in gives a torch tensor out. Calls release the GIL, so Python
threads score at once.
"""
from cemb._serve import Predictor as _Predictor

__all__ = ["Predictor"]


def _numpy(x):
    if hasattr(x, "detach"):  # a torch tensor
        return x.detach().cpu().contiguous().numpy(), True
    return x, False


class Predictor:
    """A checkpoint opened read-only; ``predict`` may be called from many threads."""

    def __init__(self, impl):
        self._p = impl

    @classmethod
    def load(cls, path, **options):
        """Options (serve/predictor.h's PredictorOptions): max_batch=256, contexts=0,
        threads_per_context=0, verify_checksums=True, ssd_cache_bytes=1 GiB,
        serve_in_place=True. Tables that trained on ssd are served in place from the
        checkpoint's snapshots, with ssd_cache_bytes of DRAM for their rows
        (serve_in_place=False: loaded into DRAM; docs/serving.md)."""
        return cls(_Predictor.open(str(path), **options))

    def _out(self, probs, as_torch):
        if as_torch:
            import torch
            return torch.from_numpy(probs)
        return probs

    def predict(self, dense, sparse):
        """Probabilities [n] from preprocessed inputs: dense [n, num_dense] float32 and sparse [n, num_tables] row indices."""
        d, t1 = _numpy(dense)
        s, t2 = _numpy(sparse)
        return self._out(self._p.predict(d, s), t1 or t2)

    def predict_criteo(self, integers, categorical):
        """Probabilities [n] from raw Criteo features through the training's preprocessing."""
        i, t1 = _numpy(integers)
        c, t2 = _numpy(categorical)
        return self._out(self._p.predict_criteo(i, c), t1 or t2)

    def __getattr__(self, name):  # checkpoint, num_dense, num_tables, precision, warning, table_rows, interaction,
        # verification, snapshot_tables
        return getattr(self._p, name)
