"""cemb.torch: an EmbeddingBagCollection whose tables live in DRAM, behind a
DRAM cache, or on an NVMe drive, for a PyTorch training loop (docs/python.md).

The contract is TorchRec's, so that code written for
torchrec.EmbeddingBagCollection runs unchanged: tables are
``EmbeddingBagConfig``s, inputs are jagged features per key (a
``KeyedJaggedTensor``, this module's or TorchRec's when it is installed, with
per-value weights in a weighted collection), the output is a ``KeyedTensor``
whose ``values()`` are the pooled ``[batch, sum of embedding_dim x features]``
in the order of the tables' ``feature_names``, and ``state_dict()`` holds
``embedding_bags.<table>.weight``. The tables are not ``nn.Parameter``s: ``backward`` applies
the optimizer to the rows the batch read, in place, fused with the gradient's
reduction (the pattern of FBGEMM's table-batched embeddings), so a torch
optimizer never sees them and the dense parameters keep theirs.

    tables = [EmbeddingBagConfig(name="t0", num_embeddings=10**7, embedding_dim=64,
                                 feature_names=["f0"], storage="ssd", directory="/nvme")]
    ebc = EmbeddingBagCollection(tables, dram_budget="2GiB", batch_size=2048,
                                 optimizer="sgd", learning_rate=0.05)
    for features, next_features, dense, label in batches:
        pooled = ebc(features).values()   # [B, 64]; waits only for rows still in flight
        ebc.prefetch(next_features)       # the next batch's rows are read meanwhile
        loss = model(dense, pooled, label)
        loss.backward()                   # the tables' rows are updated here
        dense_optimizer.step()
"""
import collections
import dataclasses
import enum
import gc
import os
import pathlib
import re
import tempfile
import warnings
from typing import Dict, List, Optional, Sequence, Union

import torch

from cemb._cemb import Collection

__all__ = ["PoolingType", "DataType", "EmbeddingBagConfig", "JaggedTensor", "KeyedJaggedTensor", "KeyedTensor",
           "EmbeddingBagCollection"]


class PoolingType(enum.Enum):
    SUM = "SUM"
    MEAN = "MEAN"


class DataType(enum.Enum):
    FP32 = "FP32"
    BF16 = "BF16"


@dataclasses.dataclass
class EmbeddingBagConfig:
    """One table: its rows, their size and type, the features it serves, where it lives.

    storage: "dram" (all rows in DRAM), "dynamic" (a DRAM cache over a slow
    tier in `directory`, libpmem2: CXL or persistent memory, or any file
    system), "ssd" (rows in a file in `directory`, read and written with
    io_uring; DRAM holds the hot rows within the collection's dram_budget).
    The rows start uniform in +-sqrt(1/num_embeddings), as TorchRec's do.
    pooling: SUM, or MEAN (a bag's sum times 1/|bag|, an empty bag zeros; its
    rows' gradients scaled by the same), nn.EmbeddingBag's modes, both pooled
    and updated by the engine's kernels.
    """

    num_embeddings: int
    embedding_dim: int
    name: str = ""
    feature_names: List[str] = dataclasses.field(default_factory=list)  # default: [name]
    pooling: Union[PoolingType, str] = PoolingType.SUM
    data_type: Union[DataType, str] = DataType.FP32
    storage: str = "dram"
    directory: Optional[str] = None


def _offsets(lengths: torch.Tensor) -> torch.Tensor:
    return torch.cat([torch.zeros(1, dtype=lengths.dtype), torch.cumsum(lengths, 0).to(lengths.dtype)])


def _no_weights(what):
    return ValueError(f"{what}: no weights (give KeyedJaggedTensor(weights=...), one per value)")


class JaggedTensor:
    """One key's jagged values (``kjt["f0"]``, ``kjt.to_dict()``): its
    ``values``, one length per bag and its weights, if any, as TorchRec's
    JaggedTensor."""

    def __init__(self, values: torch.Tensor, lengths: torch.Tensor, weights: Optional[torch.Tensor] = None):
        self._values = values
        self._lengths = lengths
        self._weights = weights

    def values(self) -> torch.Tensor:
        return self._values

    def lengths(self) -> torch.Tensor:
        return self._lengths

    def offsets(self) -> torch.Tensor:
        return _offsets(self._lengths)

    def weights(self) -> torch.Tensor:
        if self._weights is None:
            raise _no_weights("JaggedTensor.weights()")
        return self._weights

    def weights_or_none(self) -> Optional[torch.Tensor]:
        return self._weights


class KeyedJaggedTensor:
    """Jagged features by key, laid out as TorchRec's: ``values`` of every key
    one after the other, and ``lengths`` (len(keys) x B, key-major) or
    ``offsets`` (len(keys) x B + 1) into them; int32 or int64, CPU, contiguous.
    ``weights``: one float per value (a weighted collection pools
    sum_j w_j row(j)), or None."""

    def __init__(self, keys: Sequence[str], values: torch.Tensor, weights: Optional[torch.Tensor] = None,
                 lengths: Optional[torch.Tensor] = None, offsets: Optional[torch.Tensor] = None):
        if (lengths is None) == (offsets is None):
            raise ValueError("KeyedJaggedTensor: give lengths or offsets, one of them")
        self._keys = list(keys)
        self._values = values
        self._weights = weights
        self._lengths = lengths if lengths is not None else offsets[1:] - offsets[:-1]

    @staticmethod
    def from_lengths_sync(keys, values, lengths, weights=None):
        return KeyedJaggedTensor(keys, values, weights=weights, lengths=lengths)

    @staticmethod
    def from_offsets_sync(keys, values, offsets, weights=None):
        return KeyedJaggedTensor(keys, values, weights=weights, offsets=offsets)

    def keys(self) -> List[str]:
        return self._keys

    def values(self) -> torch.Tensor:
        return self._values

    def lengths(self) -> torch.Tensor:
        return self._lengths

    def weights(self) -> torch.Tensor:
        if self._weights is None:
            raise _no_weights("KeyedJaggedTensor.weights()")
        return self._weights

    def weights_or_none(self) -> Optional[torch.Tensor]:
        return self._weights

    def offsets(self) -> torch.Tensor:
        """len(keys) x B + 1 offsets into values(), from 0."""
        return _offsets(self._lengths)

    def stride(self) -> int:
        """B: the bags per key."""
        return self._lengths.shape[0] // len(self._keys) if self._keys else 0

    def to_dict(self) -> Dict[str, JaggedTensor]:
        """Each key's values, lengths and weights (views), in key order."""
        b = self.stride()
        counts = self._lengths.view(len(self._keys), b).sum(dim=1).tolist() if self._keys else []
        out, start = {}, 0
        for i, (key, n) in enumerate(zip(self._keys, counts)):
            w = self._weights[start:start + n] if self._weights is not None else None
            out[key] = JaggedTensor(self._values[start:start + n], self._lengths[i * b:(i + 1) * b], w)
            start += n
        return out

    def __getitem__(self, key: str) -> JaggedTensor:
        if key not in self._keys:
            raise KeyError(f"KeyedJaggedTensor: no key '{key}' (it has {self._keys})")
        return self.to_dict()[key]


class KeyedTensor:
    """Dense tensors by key, concatenated along ``key_dim``, as TorchRec's
    KeyedTensor: the collection's output, ``values()`` ``[B, sum of widths]``
    with key k's columns at ``offset_per_key()[k]``, ``length_per_key()[k]``
    of them. ``kt["f0"]`` and ``to_dict()`` are views of ``values()``, so
    gradients through them reach the collection's backward."""

    def __init__(self, keys: Sequence[str], length_per_key: Sequence[int], values: torch.Tensor, key_dim: int = 1):
        if len(keys) != len(length_per_key):
            raise ValueError(f"KeyedTensor: {len(keys)} keys and {len(length_per_key)} lengths")
        if values.dim() > key_dim and values.shape[key_dim] != sum(length_per_key):
            raise ValueError(f"KeyedTensor: values have {values.shape[key_dim]} along dim {key_dim} where the "
                             f"lengths sum to {sum(length_per_key)}")
        self._keys = list(keys)
        self._length_per_key = list(length_per_key)
        self._values = values
        self._key_dim = key_dim
        self._index = {k: i for i, k in enumerate(self._keys)}

    @staticmethod
    def from_tensor_list(keys: Sequence[str], tensors: Sequence[torch.Tensor], key_dim: int = 1,
                         cat_dim: int = 1) -> "KeyedTensor":
        return KeyedTensor(keys, [t.shape[key_dim] for t in tensors], torch.cat(list(tensors), dim=cat_dim), key_dim)

    def keys(self) -> List[str]:
        return self._keys

    def values(self) -> torch.Tensor:
        return self._values

    def key_dim(self) -> int:
        return self._key_dim

    def length_per_key(self) -> List[int]:
        return self._length_per_key

    def offset_per_key(self) -> List[int]:
        """len(keys) + 1 offsets along key_dim, from 0."""
        out = [0]
        for n in self._length_per_key:
            out.append(out[-1] + n)
        return out

    def __getitem__(self, key: str) -> torch.Tensor:
        i = self._index.get(key)
        if i is None:
            raise KeyError(f"KeyedTensor: no key '{key}' (it has {self._keys})")
        return self._values.narrow(self._key_dim, self.offset_per_key()[i], self._length_per_key[i])

    def to_dict(self) -> Dict[str, torch.Tensor]:
        """Each key's slice of values() (views), in key order."""
        return dict(zip(self._keys, self._values.split(self._length_per_key, dim=self._key_dim)))

    def to(self, device, non_blocking: bool = False) -> "KeyedTensor":
        return KeyedTensor(self._keys, self._length_per_key, self._values.to(device, non_blocking=non_blocking),
                           self._key_dim)

    def __repr__(self) -> str:
        return (f"KeyedTensor(keys={self._keys}, length_per_key={self._length_per_key}, "
                f"values={self._values!r})")


_UNITS = {"": 1, "B": 1, "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40,
          "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}


def _bytes(text: Union[int, str, None]) -> int:
    """An int, or a size such as "512MiB" or "2GiB"."""
    if text is None:
        return 0
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*([0-9.]+)\s*([A-Za-z]*)\s*", str(text))
    if m is None or m.group(2).upper() not in _UNITS:
        raise ValueError(f"dram_budget: '{text}' is not a size (bytes, or e.g. 512MiB, 2GiB)")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def _enum(cls, value, what):
    if isinstance(value, cls):
        return value
    value = getattr(value, "value", value)  # another library's enum (TorchRec's PoolingType, DataType)
    try:
        return cls(str(value).upper())
    except ValueError:
        raise ValueError(f"{what}: '{value}' is not one of {[e.value.lower() for e in cls]}") from None


def _array(t: torch.Tensor, what: str):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{what}: a {type(t).__name__} where a tensor is needed")
    if t.device.type != "cpu":
        raise ValueError(f"{what}: on {t.device}, where the CPU is needed")
    if t.dim() != 1:
        raise ValueError(f"{what}: {t.dim()}-D where 1-D is needed")
    if not t.is_contiguous():
        raise ValueError(f"{what}: not contiguous (call .contiguous())")
    if t.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{what}: dtype {t.dtype} where torch.int32 or torch.int64 is needed")
    return t.numpy()


def _weights_array(w: torch.Tensor, count: int):
    """A KeyedJaggedTensor's weights as a float32 NumPy array (a view when
    they are float32 already), one per value."""
    what = "features.weights()"
    if not isinstance(w, torch.Tensor):
        raise TypeError(f"{what}: a {type(w).__name__} where a tensor is needed")
    if w.device.type != "cpu":
        raise ValueError(f"{what}: on {w.device}, where the CPU is needed")
    if w.dim() != 1:
        raise ValueError(f"{what}: {w.dim()}-D where 1-D is needed")
    if not w.is_floating_point():
        raise TypeError(f"{what}: dtype {w.dtype} where a floating dtype (torch.float32) is needed")
    if w.shape[0] != count:
        raise ValueError(f"{what}: {w.shape[0]} weights for {count} values (one weight per value)")
    if w.requires_grad and torch.is_grad_enabled():
        raise ValueError(f"{what}: requires grad, and the collection gives per-value weights no gradient "
                         "(pass weights.detach())")
    return w.detach().to(torch.float32).contiguous().numpy()


def _feature_arrays(features, order, weighted=False):
    """Per feature of `order`: its values and lengths as NumPy views of the
    KeyedJaggedTensor's tensors; its weights (weighted: float32, else None);
    and B. An unweighted collection ignores the weights, as TorchRec's does."""
    if isinstance(features, dict):
        raise TypeError("features: a KeyedJaggedTensor is needed (keys, values, lengths or offsets)")
    keys = list(features.keys())
    values = _array(features.values(), "features.values()")
    lengths = _array(features.lengths(), "features.lengths()")
    if len(keys) == 0 or lengths.shape[0] % len(keys) != 0:
        raise ValueError(f"features: {lengths.shape[0]} lengths for {len(keys)} keys (needs keys x batch)")
    batch = lengths.shape[0] // len(keys)
    # The per-key sums of the lengths cut the values into the keys' slices.
    # The engine checks every bag's length and every value as it converts
    # the batch, naming table, feature and bag; checked here is only what it
    # cannot see, that the slices are the values (when they are not, a
    # negative length, the likelier culprit, is searched for).
    counts = lengths.reshape(len(keys), batch).sum(axis=1)
    if int(counts.sum()) != values.shape[0] or (counts < 0).any():
        negative = (lengths < 0).nonzero()[0]
        if len(negative) > 0:
            k = int(negative[0])
            raise ValueError(f"feature '{keys[k // batch]}', bag {k % batch}: length {int(lengths[k])} < 0")
        raise ValueError(f"features: the lengths sum to {int(counts.sum())} where there are "
                         f"{values.shape[0]} values")
    starts = [0]
    for c in counts:
        starts.append(starts[-1] + int(c))
    weights = None
    if weighted:
        w = getattr(features, "weights_or_none", lambda: None)()
        if w is None:
            raise ValueError("features: no weights, and the collection is weighted (is_weighted=True): give "
                             "KeyedJaggedTensor(weights=...), one per value")
        weights = _weights_array(w, values.shape[0])
    where = {k: i for i, k in enumerate(keys)}
    v, l, w = [], [], ([] if weighted else None)
    for f in order:
        i = where.get(f)
        if i is None:
            raise ValueError(f"features: no key '{f}' (the input has {keys})")
        v.append(values[starts[i]:starts[i + 1]])
        l.append(lengths[i * batch:(i + 1) * batch])
        if weighted:
            w.append(weights[starts[i]:starts[i + 1]])
    return v, l, w, batch


class _Step:
    """A training forward's open step in the collection: its id, until its
    backward updates the rows or, when the output is dropped without one,
    until it is collected (the step is released then, its ssd rows unpinned)."""

    __slots__ = ("core", "id")

    def __init__(self, core, step_id):
        self.core = core
        self.id = step_id

    def __del__(self):
        if self.id is not None:
            try:
                self.core.release(self.id)
            except Exception:  # noqa: BLE001 (a finaliser cannot raise; nothing was written)
                pass


class _PooledLookup(torch.autograd.Function):
    """The collection's forward; its backward is the tables' optimizer step
    on the rows of this forward's batch (its step, held by the ctx)."""

    @staticmethod
    def forward(ctx, anchor, ebc, values, lengths, weights, batch):
        out = torch.empty(batch, ebc._core.output_width, dtype=torch.float32)
        ctx.step = _Step(ebc._core, ebc._core.forward(values, lengths, True, out.numpy(), True, weights))
        ctx.ebc = ebc
        return out

    @staticmethod
    def backward(ctx, grad):
        step = ctx.step
        if step.id is None:
            raise RuntimeError("backward: this forward's rows were updated by an earlier backward (one backward "
                               "per forward: the tables' optimizer step cannot run twice)")
        grad = grad.to(torch.float32).contiguous()
        ctx.ebc._core.backward(step.id, grad.numpy(), ctx.ebc.learning_rate)
        step.id = None
        return None, None, None, None, None, None


class EmbeddingBagCollection(torch.nn.Module):
    """Pooled embedding lookups of jagged features; the tables train in place.

    ``forward(features)`` returns a ``KeyedTensor``, as TorchRec's: its
    ``values()`` are ``[B, sum of embedding_dim x features]`` (features in
    table order), its keys the features, ``kt["f0"]`` and ``kt.to_dict()``
    their columns. ``is_weighted=True``: the features carry one weight per
    value (``KeyedJaggedTensor(weights=...)``), each bag pools
    ``sum_j w_j row(j)`` and the update scales value j's gradient by w_j
    (sum-pooled tables only, as nn.EmbeddingBag's per_sample_weights); an
    unweighted collection ignores weights, as TorchRec's does. Under autograd,
    ``backward`` runs the optimizer (``"sgd"`` or ``"rowwise_adagrad"``, at
    ``learning_rate``) on the rows the batch read, in place, and returns no
    gradient for them: the pattern of FBGEMM's table-batched embeddings. Each
    backward updates the rows its own forward looked up: several training
    forwards may await their backward (two towers over one collection,
    gradients accumulated over micro-batches), at most ``max_open_steps``,
    and their backwards may come in any order. A forward beyond that bound
    is refused before anything is written; a forward whose output is dropped
    without a backward releases its step when the output is collected. One
    backward per forward; a forward under ``torch.no_grad()`` or in eval mode
    updates nothing and leaves the open steps as they are. Each open step
    keeps its batch's ssd rows pinned until its backward: the ssd tables'
    share of dram_budget must hold them (a forward that finds no room is
    refused with the bytes needed).

    ``prefetch(next_features)`` starts reading the next batch's rows of the
    ssd tables while this step computes; every forward after it must get the
    prefetched batches, in order. Losses do not depend on it, nor on where
    the tables live: dram, dynamic and ssd train bit for bit alike.

    dram_budget (bytes, or "2GiB"): DRAM for the rows of the "dynamic" and
    "ssd" tables, split among them as dlrm-train splits model.dram_budget:
    what each needs, then the rows a ``traffic_sample`` (a few training
    batches' features, e.g. the first 64) looks up most, across tables, then
    size; required with an ssd table, with ``batch_size`` (and ``bag_size``,
    the values per bag it plans for): an ssd table pins the rows of
    ``prefetch_batches + 1`` batches.

    ``state_dict()`` holds ``embedding_bags.<name>.weight`` per table,
    TorchRec's keys (fp32, or bf16 for bf16 tables): the whole table in
    memory, for small tables; ``load_state_dict`` takes those keys or the
    ``<name>.weight`` of earlier versions. ``export(dir)``
    and ``init_from(dir)`` stream ``emb_l.<i>.weight.npy`` files, table i of
    the collection, dlrm-train's names; ``save(dir)``/``load(dir)`` are
    checkpoints with the optimizer state, which resume bit for bit.
    Errors are exceptions with the engine's message.
    """

    def __init__(self, tables: Sequence[EmbeddingBagConfig], is_weighted: bool = False, device=None, *,
                 dram_budget: Union[int, str, None] = None,
                 batch_size: int = 0, bag_size: int = 1, prefetch_batches: int = 1, max_open_steps: int = 4,
                 optimizer: str = "sgd",
                 learning_rate: float = 0.01, eps: float = 1e-8, directory: Optional[str] = None,
                 threads: int = 0, seed: int = 1, traffic_sample: Sequence = ()):
        super().__init__()
        if device is not None and torch.device(device).type != "cpu":
            raise ValueError(f"device: {device}, where the collection computes on the CPU (device=None or 'cpu')")
        self._is_weighted = bool(is_weighted)
        # Ours, or a config of TorchRec's (its names; storage and directory,
        # which it has not, default to DRAM).
        self.tables = [EmbeddingBagConfig(num_embeddings=t.num_embeddings, embedding_dim=t.embedding_dim, name=t.name,
                                          feature_names=list(t.feature_names),
                                          pooling=getattr(t, "pooling", PoolingType.SUM),
                                          data_type=getattr(t, "data_type", DataType.FP32),
                                          storage=getattr(t, "storage", "dram"), directory=getattr(t, "directory", None))
                       for t in tables]
        specs = []
        for t in self.tables:
            if not t.feature_names:
                t.feature_names = [t.name]
            t.pooling = _enum(PoolingType, t.pooling, f"table '{t.name}': pooling")
            t.data_type = _enum(DataType, t.data_type, f"table '{t.name}': data_type")
            if self._is_weighted and t.pooling != PoolingType.SUM:
                raise ValueError(f"table '{t.name}': pooling {t.pooling.value.lower()} in a weighted collection "
                                 "(is_weighted=True): per-value weights pool by weighted sum only (nn.EmbeddingBag "
                                 "takes per_sample_weights in mode 'sum' only)")
            specs.append(dict(name=t.name, num_embeddings=t.num_embeddings, embedding_dim=t.embedding_dim,
                              feature_names=list(t.feature_names), bf16=t.data_type == DataType.BF16,
                              pooling=t.pooling.value.lower(), storage=t.storage,
                              directory=t.directory or directory or ""))
        order = [f for t in self.tables for f in t.feature_names]
        sample = [tuple(_feature_arrays(kjt, order)[:2]) for kjt in traffic_sample]  # rows only: no weights
        # What makes the engine again (pickling, copy.deepcopy).
        self._specs = specs
        self._options = dict(dram_budget=_bytes(dram_budget), batch_size=batch_size, bag_size=bag_size,
                             prefetch_batches=prefetch_batches, max_open_steps=max_open_steps, optimizer=optimizer,
                             adagrad_eps=eps, threads=threads, seed=seed,
                             traffic_sample=[([v.copy() for v in vs], [l.copy() for l in ls]) for vs, ls in sample])
        self._core = Collection(specs, **self._options)
        self.learning_rate = learning_rate
        self._features = list(self._core.features)
        self._slices = collections.OrderedDict()  # feature -> (first column, dim)
        col = 0
        for t in self.tables:
            for f in t.feature_names:
                self._slices[f] = (col, t.embedding_dim)
                col += t.embedding_dim
        self._widths = [dim for _, dim in self._slices.values()]
        # Autograd calls a Function's backward only when an input needs a
        # gradient: this empty tensor is that input (not a parameter).
        self._anchor = torch.zeros(0, requires_grad=True)

    def feature_names(self) -> List[str]:
        return list(self._features)

    def is_weighted(self) -> bool:
        return self._is_weighted

    def embedding_bag_configs(self) -> List[EmbeddingBagConfig]:
        return self.tables

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def forward(self, features) -> KeyedTensor:
        values, lengths, weights, batch = _feature_arrays(features, self._features, self._is_weighted)
        if torch.is_grad_enabled() and self.training:
            if self._core.open_steps >= self._options["max_open_steps"]:
                gc.collect()  # outputs dropped inside reference cycles release their steps
            out = _PooledLookup.apply(self._anchor, self, values, lengths, weights, batch)
        else:
            out = torch.empty(batch, self._core.output_width, dtype=torch.float32)
            self._core.forward(values, lengths, True, out.numpy(), False, weights)
        return KeyedTensor(self._features, self._widths, out)

    def prefetch(self, features) -> None:
        """Starts reading the rows of the batch after the current one (ssd tables)."""
        values, lengths, weights, _ = _feature_arrays(features, self._features, self._is_weighted)
        self._core.prefetch(values, lengths, True, weights)

    def to_dict(self, pooled) -> Dict[str, torch.Tensor]:
        """Deprecated: ``pooled.to_dict()`` (the output is a KeyedTensor).
        The pooled output per feature, views of its columns; takes the
        KeyedTensor or its ``values()``."""
        warnings.warn("EmbeddingBagCollection.to_dict(pooled) is deprecated: the output is a KeyedTensor, "
                      "call pooled.to_dict()", DeprecationWarning, stacklevel=2)
        if isinstance(pooled, KeyedTensor):
            pooled = pooled.values()
        return {f: pooled[:, col:col + dim] for f, (col, dim) in self._slices.items()}

    def report(self) -> List[dict]:
        """Per table: its storage, kernel, DRAM and, for ssd tables, the tier's counters."""
        return self._core.report()

    # Pickling (torch.save(model), copy.deepcopy): the module's attributes,
    # and the tables as a checkpoint (save()'s files, held as bytes: the rows
    # and the optimizer state; of an ssd table the rows written so far). The
    # copy makes its tables again from the same configs, in the same
    # directories, and loads the checkpoint: it trains on bit for bit as the
    # original. Open steps and prefetched batches are not part of it.
    def __getstate__(self):
        state = self.__dict__.copy()
        core = state.pop("_core")
        with tempfile.TemporaryDirectory(prefix="cemb-pickle-", dir=self._scratch_directory()) as d:
            core.save(d)
            state["_checkpoint"] = {name: pathlib.Path(d, name).read_bytes() for name in sorted(os.listdir(d))}
        return state

    def __setstate__(self, state):
        state = dict(state)
        checkpoint = state.pop("_checkpoint")
        # A pickle of an earlier version: unweighted, its output's widths, its
        # tables' pooling (which it applied itself, after the engine's sums).
        state.setdefault("_is_weighted", False)
        state["_slices"] = collections.OrderedDict((f, tuple(s[:2])) for f, s in state["_slices"].items())
        state.setdefault("_widths", [dim for _, dim in state["_slices"].values()])
        state.pop("_any_mean", None)
        for spec, t in zip(state["_specs"], state["tables"]):
            spec.setdefault("pooling", _enum(PoolingType, t.pooling, "pooling").value.lower())
        super().__setstate__(state)
        self._core = Collection(self._specs, **self._options)
        with tempfile.TemporaryDirectory(prefix="cemb-pickle-", dir=self._scratch_directory()) as d:
            for name, data in checkpoint.items():
                pathlib.Path(d, name).write_bytes(data)
            self._core.load(d)

    def _scratch_directory(self) -> Optional[str]:
        """Where a pickled checkpoint passes: the first table's directory
        that is not DRAM (room for ssd snapshots), else the system's."""
        return next((t["directory"] for t in self._specs if t["storage"] != "dram" and t["directory"]), None)

    # Checkpoints and weights.
    def save(self, directory: str) -> None:
        self._core.save(str(directory))

    def load(self, directory: str) -> None:
        self._core.load(str(directory))

    def export(self, directory: str) -> None:
        self._core.export_npy(str(directory), "emb_l.")

    def init_from(self, directory: str) -> None:
        self._core.import_npy(str(directory), "emb_l.")

    # state_dict keys: TorchRec's, "embedding_bags.<table>.weight"; loading
    # takes "<table>.weight" too (this module's keys before).
    def _save_to_state_dict(self, destination, prefix, keep_vars):
        for i, t in enumerate(self.tables):
            w = torch.empty(t.num_embeddings, t.embedding_dim, dtype=torch.float32)
            self._core.read_table(i, w.numpy())
            destination[f"{prefix}embedding_bags.{t.name}.weight"] = \
                w.to(torch.bfloat16) if t.data_type == DataType.BF16 else w

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        for i, t in enumerate(self.tables):
            key = f"{prefix}embedding_bags.{t.name}.weight"
            if key not in state_dict and f"{prefix}{t.name}.weight" in state_dict:
                key = f"{prefix}{t.name}.weight"
            if key not in state_dict:
                missing_keys.append(f"{prefix}embedding_bags.{t.name}.weight")
                continue
            w = state_dict[key]
            if tuple(w.shape) != (t.num_embeddings, t.embedding_dim):
                error_msgs.append(f"{key}: shape {tuple(w.shape)} where "
                                  f"({t.num_embeddings}, {t.embedding_dim}) is needed")
                continue
            self._core.write_table(i, w.detach().to(torch.float32).contiguous().numpy())
        if strict:
            names = {k for t in self.tables for k in (f"{prefix}embedding_bags.{t.name}.weight",
                                                     f"{prefix}{t.name}.weight")}
            unexpected_keys.extend(k for k in state_dict if k.startswith(prefix) and k not in names)
