"""cemb.torch.EmbeddingBagCollection (python/cemb/torch.py) trained from a
PyTorch loop: against nn.EmbeddingBag with sparse SGD, across storage kinds
and prefetch, its checkpoints and weights, bad inputs, memory and threads."""
import collections
import copy
import io
import os
import threading

import pytest
import torch

from cemb._cemb import Collection
from cemb.torch import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor, KeyedTensor

BATCH = 64
DENSE = 4
LR = 0.05
# Three tables: two of dim 8 (one mean-pooled, one serving two features),
# one of dim 4 between them, so that one group of tables is written in
# place and the other through the scratch matrix.
TABLES = [
    dict(name="t0", num_embeddings=5000, embedding_dim=8, feature_names=["f0"], pooling="sum"),
    dict(name="t1", num_embeddings=3000, embedding_dim=4, feature_names=["f1"], pooling="mean"),
    dict(name="t2", num_embeddings=8000, embedding_dim=8, feature_names=["f2a", "f2b"], pooling="sum"),
]
FEATURES = [("f0", 5000), ("f1", 3000), ("f2a", 8000), ("f2b", 8000)]
WIDTH = 8 + 4 + 8 * 2


def configs(storage="dram", directory=None, data_type="fp32", tables=None):
    return [EmbeddingBagConfig(**t, storage=storage, directory=directory, data_type=data_type)
            for t in (tables or TABLES)]


def batches(steps, seed=3, index_dtype=torch.int64):
    """Skewed rows (hot rows shared between batches), 0 to 3 values per bag."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        values, lengths = [], []
        for _, rows in FEATURES:
            n = torch.randint(0, 4, (BATCH,), generator=g)
            u = torch.rand(int(n.sum()), generator=g)
            values.append((u * u * rows).to(index_dtype))
            lengths.append(n.to(index_dtype))
        kjt = KeyedJaggedTensor([f for f, _ in FEATURES], torch.cat(values), lengths=torch.cat(lengths))
        dense = torch.rand(BATCH, DENSE, generator=g)
        label = (torch.rand(BATCH, generator=g) > 0.5).float()
        out.append((kjt, dense, label))
    return out


def top():
    torch.manual_seed(7)
    return torch.nn.Sequential(torch.nn.Linear(WIDTH + DENSE, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))


def train(ebc, data, prefetch=False, mlp=None):
    """Losses of a small model over `ebc`, dense SGD at LR."""
    mlp = mlp or top()
    opt = torch.optim.SGD(mlp.parameters(), lr=LR)
    losses = []
    for k, (kjt, dense, label) in enumerate(data):
        if prefetch and k == 0:
            ebc.prefetch(kjt)
        pooled = ebc(kjt).values()
        if prefetch and k + 1 < len(data):
            ebc.prefetch(data[k + 1][0])
        logit = mlp(torch.cat([pooled, dense], dim=1)).squeeze(1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, label)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def make(tmp_path=None, storage="dram", tables=None, **kw):
    """A collection of `tables` (dicts; TABLES by default) in `storage`."""
    directory = None
    if storage != "dram":
        directory = str(tmp_path / storage)
        os.makedirs(directory, exist_ok=True)
        # Budgets a little above what the tables need (343 KiB for ssd: the
        # pinned batches, maps and log buffers; 138 KiB for dynamic) and below
        # their 464 KiB of rows: batches miss and evict.
        kw.setdefault("dram_budget", 400 << 10 if storage == "ssd" else 200 << 10)
        kw.setdefault("batch_size", BATCH)
        kw.setdefault("bag_size", 3 if storage == "ssd" else 1)
    return EmbeddingBagCollection(configs(storage, directory, tables=tables), learning_rate=LR, **kw)


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_losses_match_nn_embedding_bag_with_sparse_sgd_or_adagrad(optimizer):
    """sgd: torch.optim.SGD; adagrad (element-wise, FBGEMM's EXACT_ADAGRAD): torch.optim.Adagrad, both
    over sparse gradients of nn.EmbeddingBag."""
    ebc = make(optimizer=optimizer)
    state = ebc.state_dict()
    bags = torch.nn.ModuleDict()
    for t in TABLES:
        bags[t["name"]] = torch.nn.EmbeddingBag(t["num_embeddings"], t["embedding_dim"], mode=t["pooling"],
                                                sparse=True)
        bags[t["name"]].weight.data.copy_(state["embedding_bags." + t["name"] + ".weight"])
    sparse_opt = torch.optim.SGD(bags.parameters(), lr=LR) if optimizer == "sgd" else \
        torch.optim.Adagrad(bags.parameters(), lr=LR, eps=1e-8)
    data = batches(20)
    mlp = top()
    opt = torch.optim.SGD(mlp.parameters(), lr=LR)
    reference = []
    for kjt, dense, label in data:
        per_key = {}
        lengths = kjt.lengths().view(len(FEATURES), BATCH)
        start = 0
        for i, (f, _) in enumerate(FEATURES):
            n = int(lengths[i].sum())
            per_key[f] = (kjt.values()[start:start + n], torch.cat([torch.zeros(1, dtype=torch.int64),
                                                                   lengths[i].cumsum(0)[:-1]]))
            start += n
        pooled = torch.cat([bags[t["name"]](*per_key[f]) for t in TABLES for f in t["feature_names"]], dim=1)
        logit = mlp(torch.cat([pooled, dense], dim=1)).squeeze(1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, label)
        opt.zero_grad()
        sparse_opt.zero_grad()
        loss.backward()
        opt.step()
        sparse_opt.step()
        reference.append(loss.item())
    ours = train(ebc, data)
    assert ours == pytest.approx(reference, rel=1e-6 if optimizer == "sgd" else 1e-5)
    # The tables moved the same way too.
    after = ebc.state_dict()
    for t in TABLES:
        torch.testing.assert_close(after["embedding_bags." + t["name"] + ".weight"], bags[t["name"]].weight.data, rtol=1e-5, atol=1e-7)


def test_dram_dynamic_and_ssd_give_bit_identical_losses(tmp_path):
    data = batches(20)
    dram = train(make(), data)
    dynamic = make(tmp_path, "dynamic")
    ssd = make(tmp_path, "ssd")
    assert train(dynamic, data) == dram
    assert train(ssd, data) == dram
    assert all(r["misses"] > 0 for r in dynamic.report())  # the caches missed
    report = {r["name"]: r for r in ssd.report()}
    assert report["t2"]["storage"] == "ssd"
    assert report["t2"]["fetched_rows"] > 0  # rows came back from the file


def test_prefetch_on_or_off_gives_bit_identical_losses(tmp_path):
    data = batches(20)
    off = train(make(tmp_path, "ssd"), data)
    ssd = make(tmp_path, "ssd", prefetch_batches=1)
    on = train(ssd, data, prefetch=True)
    assert on == off
    assert all(r["sync_fetches"] == 0 for r in ssd.report())


def test_a_traffic_sample_gives_the_budget_to_the_rows_looked_up_most(tmp_path):
    # Two ssd tables of equal size and a budget that holds ~600 rows beyond
    # what they need. By size they get equal DRAM. The sample looks up 1,500
    # rows of "hot" twice each and 2,944 rows of "cold" once: by traffic,
    # hot's rows come first (dlrm-train's split, tables/dram_budget.h).
    def kjt(hot_rows, cold_rows):
        return KeyedJaggedTensor(["h", "c"], torch.cat([hot_rows, cold_rows]),
                                 lengths=torch.ones(2 * BATCH, dtype=torch.int64))
    hot, cold = torch.arange(1500).repeat(2), torch.arange(3000)
    sample = [kjt(hot[k * BATCH:(k + 1) * BATCH], cold[k * BATCH:(k + 1) * BATCH]) for k in range(3000 // BATCH)]
    tables = [EmbeddingBagConfig(name=n, num_embeddings=20000, embedding_dim=8, feature_names=[f], storage="ssd",
                                 directory=str(tmp_path)) for n, f in (("hot", "h"), ("cold", "c"))]
    def dram(**kw):
        ebc = EmbeddingBagCollection(tables, dram_budget=540 << 10, batch_size=BATCH, learning_rate=LR, **kw)
        return {r["name"]: r["dram_bytes"] for r in ebc.report()}
    by_size = dram()
    assert by_size["hot"] == pytest.approx(by_size["cold"], rel=0.01)
    by_traffic = dram(traffic_sample=sample)
    assert by_traffic["hot"] > 1.5 * by_traffic["cold"], by_traffic
    with pytest.raises(IndexError, match=r"traffic sample, batch 0: table 'cold', feature 'c', bag 0, index 0: row 20000"):
        dram(traffic_sample=[kjt(torch.zeros(BATCH, dtype=torch.int64), torch.full((BATCH,), 20000))])


def test_forward_after_prefetch_must_get_the_prefetched_batch():
    ebc = make()
    data = batches(2)
    ebc.prefetch(data[0][0])
    with pytest.raises(RuntimeError, match="not the batch prefetch"):
        ebc(data[1][0])


def test_int32_and_int64_inputs_agree():
    a = train(make(), batches(5, index_dtype=torch.int64))
    b = train(make(), batches(5, index_dtype=torch.int32))
    assert a == b


def test_bf16_rows():
    ebc = EmbeddingBagCollection(configs(data_type="bf16"), learning_rate=LR)
    losses = train(ebc, batches(5))
    assert all(l == l for l in losses)
    w = ebc.state_dict()["embedding_bags.t0.weight"]
    assert w.dtype == torch.bfloat16


def test_a_torchrec_style_config_is_taken():
    # TorchRec's EmbeddingBagConfig has these fields and its own enums
    # (PoolingType.MEAN.value == "MEAN"); TorchRec is not a dependency.
    import enum
    import types

    class Pooling(enum.Enum):
        MEAN = "MEAN"

    foreign = types.SimpleNamespace(name="t", num_embeddings=50, embedding_dim=4, feature_names=["f"],
                                    pooling=Pooling.MEAN)
    ebc = EmbeddingBagCollection([foreign], learning_rate=LR)
    kjt = KeyedJaggedTensor(["f"], torch.tensor([1, 2, 3]), lengths=torch.tensor([2, 1]))
    pooled = ebc(kjt).values()
    w = ebc.state_dict()["embedding_bags.t.weight"]
    torch.testing.assert_close(pooled[0], (w[1] + w[2]) / 2)  # mean pooling
    assert ebc.tables[0].storage == "dram"


def test_eval_forward_updates_nothing():
    ebc = make()
    kjt = batches(1)[0][0]
    before = ebc.state_dict()["embedding_bags.t0.weight"].clone()
    ebc.eval()
    first = ebc(kjt).values()
    second = ebc(kjt).values()
    assert torch.equal(first, second)
    assert torch.equal(ebc.state_dict()["embedding_bags.t0.weight"], before)


def test_the_output_is_a_keyed_tensor_as_torchrecs():
    """TorchRec's KeyedTensor (torchrec/sparse/jagged_tensor.py): keys, length_per_key, values
    concatenated along key_dim=1, offset_per_key from 0, kt[key] = values.narrow(1, offset, length),
    to_dict = values.split(length_per_key, dim=1)."""
    ebc = make()
    kt = ebc(batches(1)[0][0])
    assert isinstance(kt, KeyedTensor)
    pooled = kt.values()
    assert pooled.shape == (BATCH, WIDTH)
    assert kt.keys() == ["f0", "f1", "f2a", "f2b"]
    assert kt.length_per_key() == [8, 4, 8, 8]
    assert kt.offset_per_key() == [0, 8, 12, 20, 28]
    assert kt.key_dim() == 1
    d = kt.to_dict()
    assert list(d) == ["f0", "f1", "f2a", "f2b"]
    for key, (start, width) in {"f0": (0, 8), "f1": (8, 4), "f2a": (12, 8), "f2b": (20, 8)}.items():
        assert torch.equal(d[key], pooled[:, start:start + width]), key
        assert torch.equal(kt[key], pooled[:, start:start + width]), key
    with pytest.raises(KeyError, match="no key 'f9'"):
        kt["f9"]
    # ebc.to_dict(pooled), the earlier way, still works, and says it is deprecated.
    with pytest.deprecated_call():
        old = ebc.to_dict(kt)
    assert all(torch.equal(old[k], d[k]) for k in d)
    with pytest.deprecated_call():
        assert torch.equal(ebc.to_dict(pooled)["f1"], pooled[:, 8:12])
    # from_tensor_list, as TorchRec's.
    built = KeyedTensor.from_tensor_list(["a", "b"], [torch.ones(2, 3), torch.zeros(2, 1)])
    assert built.length_per_key() == [3, 1] and built.values().shape == (2, 4)


def test_gradients_through_a_keyed_tensors_pieces_reach_the_tables():
    """A loss built from kt["f0"] and kt.to_dict()["f2b"] updates exactly the rows it read,
    as the same loss over values() does (the backward of the pooled values is the collection's)."""
    kjt = batches(1, seed=21)[0][0]
    via_keys, via_values = make(), make()
    kt = via_keys(kjt)
    loss = (kt["f0"] * 2).sum() + (kt.to_dict()["f2b"] * kt.to_dict()["f2b"]).sum()
    loss.backward()
    pooled = via_values(kjt).values()
    ((pooled[:, 0:8] * 2).sum() + (pooled[:, 20:28] * pooled[:, 20:28]).sum()).backward()
    fresh = make().state_dict()
    moved = False
    for key, value in via_values.state_dict().items():
        assert torch.equal(via_keys.state_dict()[key], value), key
        moved |= not torch.equal(value, fresh[key])
    assert moved  # the backward did update rows


def test_save_and_load_resume_bit_for_bit(tmp_path):
    for optimizer in ("sgd", "rowwise_adagrad", "adagrad"):
        data = batches(20)
        # Element-wise AdaGrad's rows carry their accumulators: twice the bytes.
        budget = {"dram_budget": 800 << 10} if optimizer == "adagrad" else {}
        whole = make(tmp_path, "ssd", optimizer=optimizer, **budget)
        mlp_free = lambda ebc, d: [float(ebc(kjt).values().sum()) for kjt, _, _ in d]  # noqa: E731
        # A made-up loss per step so that the dense model plays no part.
        def steps(ebc, d):
            out = []
            for kjt, _, _ in d:
                pooled = ebc(kjt).values()
                loss = (pooled * pooled).sum() * 1e-2
                loss.backward()
                out.append(loss.item())
            return out
        losses = steps(whole, data)
        first = make(tmp_path, "ssd", optimizer=optimizer, **budget)
        steps(first, data[:10])
        ckpt = tmp_path / f"ckpt-{optimizer}"
        ckpt.mkdir()
        first.save(str(ckpt))
        resumed = make(tmp_path, "dram", optimizer=optimizer)  # a checkpoint may move its tables
        resumed.load(str(ckpt))
        assert steps(resumed, data[10:]) == losses[10:]
        assert mlp_free(resumed, data[:1]) == mlp_free(whole, data[:1])


def test_state_dict_and_export_round_trip(tmp_path):
    a = make()
    train(a, batches(5))
    b = make(seed=99)
    b.load_state_dict(a.state_dict())
    for k, v in a.state_dict().items():
        assert torch.equal(b.state_dict()[k], v)
    c = make(tmp_path, "ssd", seed=5)
    a.export(str(tmp_path))
    assert sorted(p.name for p in tmp_path.glob("emb_l.*.weight.npy")) == [
        "emb_l.0.weight.npy", "emb_l.1.weight.npy", "emb_l.2.weight.npy"]
    c.init_from(str(tmp_path))
    for k, v in a.state_dict().items():
        assert torch.equal(c.state_dict()[k], v)
    with pytest.raises(RuntimeError, match="Unexpected key"):
        b.load_state_dict({**a.state_dict(), "embedding_bags.t9.weight": torch.zeros(1)})
    with pytest.raises(RuntimeError, match="shape"):
        b.load_state_dict({**a.state_dict(), "embedding_bags.t0.weight": torch.zeros(3, 8)})


def kjt_of(values, lengths, dtype=torch.int64):
    return KeyedJaggedTensor(["f0", "f1", "f2a", "f2b"], torch.tensor(values, dtype=dtype),
                             lengths=torch.tensor(lengths, dtype=dtype))


def test_bad_inputs_raise_clear_errors(tmp_path):
    ebc = make()
    with pytest.raises(IndexError, match=r"table 't2', feature 'f2b', bag 1, index 0: row 8000 >= 8000"):
        ebc(kjt_of([1, 2, 3, 4, 8000], [1, 0, 1, 0, 1, 1, 0, 1]))
    with pytest.raises(IndexError, match=r"table 't1', feature 'f1', bag 0, index 1: row -1 < 0"):
        ebc(kjt_of([1, 2, -1, 4], [1, 0, 2, 0, 0, 1, 0, 0]))
    with pytest.raises(ValueError, match="lengths sum to 5 where there are 4 values"):
        ebc(kjt_of([1, 2, 3, 4], [1, 0, 2, 0, 1, 1, 0, 0]))
    with pytest.raises(ValueError, match=r"feature 'f0', bag 1: length -1 < 0"):
        ebc(kjt_of([1, 2, 3, 4], [2, -1, 1, 0, 1, 1, 0, 0]))
    with pytest.raises(ValueError, match="7 lengths for 4 keys"):
        ebc(kjt_of([1, 2, 3, 4], [1, 1, 1, 1, 0, 0, 0]))
    with pytest.raises(TypeError, match="dtype torch.float32 where torch.int32 or torch.int64"):
        ebc(KeyedJaggedTensor(["f0", "f1", "f2a", "f2b"], torch.ones(4), lengths=torch.ones(4, dtype=torch.int64)))
    strided = torch.arange(8, dtype=torch.int64)[::2]
    with pytest.raises(ValueError, match="not contiguous"):
        ebc(KeyedJaggedTensor(["f0", "f1", "f2a", "f2b"], strided, lengths=torch.ones(4, dtype=torch.int64)))
    with pytest.raises(ValueError, match="no key 'f2b'"):
        ebc(KeyedJaggedTensor(["f0", "f1", "f2a"], torch.ones(3, dtype=torch.int64),
                              lengths=torch.ones(3, dtype=torch.int64)))
    with pytest.raises(FileNotFoundError, match="directory /nonexistent/cemb: no such directory"):
        EmbeddingBagCollection(configs("ssd", "/nonexistent/cemb"), dram_budget="1MiB", batch_size=BATCH)
    with pytest.raises(ValueError, match="dram_budget: required"):
        EmbeddingBagCollection(configs("ssd", str(tmp_path)), batch_size=BATCH)
    with pytest.raises(ValueError, match="cannot hold"):
        EmbeddingBagCollection(configs("ssd", str(tmp_path)), dram_budget=1000, batch_size=BATCH)
    with pytest.raises(RuntimeError, match="backward: step 12345 is not open"):
        ebc._core.backward(12345, torch.zeros(BATCH, WIDTH).numpy(), LR)
    pooled = ebc(batches(1)[0][0]).values()
    pooled.sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="updated by an earlier backward"):
        pooled.sum().backward()
    # After every refusal the collection still trains.
    assert len(train(ebc, batches(2))) == 2


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_a_thousand_steps_do_not_grow_resident_memory(tmp_path):
    ebc = make(tmp_path, "ssd")
    data = batches(50)
    mlp = top()
    def run(steps):
        for k in range(steps):
            kjt, dense, label = data[k % len(data)]
            pooled = ebc(kjt).values()
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                mlp(torch.cat([pooled, dense], dim=1)).squeeze(1), label)
            loss.backward()
    run(200)  # warm: buffers, the allocator's pools
    before = rss_bytes()
    run(1000)
    assert rss_bytes() - before < 4 << 20


def test_two_threads_on_separate_collections():
    data = batches(10)
    expected = train(make(), data)
    # Made here: torch's global RNG, which initialises the MLPs, is not per thread.
    collections = [make(), make()]
    mlps = [top(), top()]
    results = [None, None]

    def worker(i):
        results[i] = train(collections[i], data, mlp=mlps[i])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [expected, expected]


# --- each backward updates the rows of its own forward ------------------------

def linear_loss(pooled, seed):
    """A loss whose gradient does not depend on the rows (a fixed matrix), so
    that a reference may run the same updates in another interleaving."""
    g = torch.Generator().manual_seed(seed)
    return (pooled * torch.randn(pooled.shape, generator=g)).sum()


def eval_pooled(ebc, kjt):
    with torch.no_grad():
        return ebc(kjt).values()


@pytest.mark.parametrize("storage", ["dram", "dynamic", "ssd"])
@pytest.mark.parametrize("optimizer", ["sgd", "rowwise_adagrad"])
@pytest.mark.parametrize("order", ["first_forward_first", "last_forward_first"])
def test_two_forwards_then_their_backwards_in_either_order(tmp_path, storage, optimizer, order):
    a, b = [kjt for kjt, _, _ in batches(2, seed=11)]
    ebc = make(tmp_path, storage, optimizer=optimizer)
    reference = make(tmp_path, storage, optimizer=optimizer)
    expected_a, expected_b = eval_pooled(reference, a), eval_pooled(reference, b)
    # Two towers over one collection: both forwards, then both backwards.
    pooled_a, pooled_b = ebc(a).values(), ebc(b).values()
    assert torch.equal(pooled_a, expected_a) and torch.equal(pooled_b, expected_b)
    steps = [(pooled_a, a, 1), (pooled_b, b, 2)]
    if order == "last_forward_first":
        steps.reverse()
    for pooled, _, seed in steps:
        linear_loss(pooled, seed).backward()
    assert ebc._core.open_steps == 0
    # The reference runs each forward right before its backward, in the same
    # order: the same updates of the same rows, bit for bit.
    for _, kjt, seed in steps:
        linear_loss(reference(kjt).values(), seed).backward()
    for key, value in reference.state_dict().items():
        assert torch.equal(ebc.state_dict()[key], value), key


def test_the_issues_example_moves_row_1_by_its_gradient():
    ebc = EmbeddingBagCollection([EmbeddingBagConfig(name="t0", num_embeddings=10, embedding_dim=4,
                                                     feature_names=["f0"])], learning_rate=0.1)
    before = ebc.state_dict()["embedding_bags.t0.weight"].clone()
    o1 = ebc(KeyedJaggedTensor(keys=["f0"], values=torch.tensor([1]), lengths=torch.tensor([1]))).values()
    o2 = ebc(KeyedJaggedTensor(keys=["f0"], values=torch.tensor([2]), lengths=torch.tensor([1]))).values()
    o1.sum().backward()
    after = ebc.state_dict()["embedding_bags.t0.weight"]
    assert torch.equal(after[1], before[1] - 0.1)  # o1's gradient is all ones
    assert torch.equal(after[2], before[2])
    (2 * o2).sum().backward()
    assert torch.equal(ebc.state_dict()["embedding_bags.t0.weight"][2], before[2] - 0.1 * 2)


@pytest.mark.parametrize("storage", ["dram", "ssd"])
def test_an_eval_or_no_grad_forward_between_a_forward_and_its_backward(tmp_path, storage):
    a, c = [kjt for kjt, _, _ in batches(2, seed=12)]
    ebc = make(tmp_path, storage)
    reference = make(tmp_path, storage)
    expected_c = eval_pooled(reference, c)
    pooled = ebc(a).values()
    ebc.eval()
    assert torch.equal(ebc(c).values(), expected_c)
    ebc.train()
    with torch.no_grad():
        assert torch.equal(ebc(c).values(), expected_c)
    linear_loss(pooled, 1).backward()
    linear_loss(reference(a).values(), 1).backward()
    for key, value in reference.state_dict().items():
        assert torch.equal(ebc.state_dict()[key], value), key


def test_open_steps_are_bounded_and_a_dropped_output_releases_its_step(tmp_path):
    ebc = make(tmp_path, "ssd", max_open_steps=2)
    data = [kjt for kjt, _, _ in batches(4, seed=13)]
    ebc(data[0])  # the output is dropped: its step ends, its rows are unpinned
    assert ebc._core.open_steps == 0
    first, second = ebc(data[0]), ebc(data[1])
    before = ebc.state_dict()
    with pytest.raises(RuntimeError, match=r"2 training forwards await their backward \(max_open_steps = 2\)"):
        ebc(data[2])
    for key, value in before.items():  # refused before anything was written
        assert torch.equal(ebc.state_dict()[key], value), key
    linear_loss(second.values(), 2).backward()
    third = ebc(data[2])
    del first
    assert ebc._core.open_steps == 1
    linear_loss(third.values(), 3).backward()
    assert ebc._core.open_steps == 0
    # An output dropped inside a reference cycle: the bound collects it.
    cycle = [ebc(data[0]), ebc(data[1])]
    cycle.append(cycle)
    del cycle
    linear_loss(ebc(data[2]).values(), 4).backward()
    # A thousand forwards whose outputs are dropped pin nothing for good.
    for k in range(1000):
        ebc(data[k % len(data)])
    assert ebc._core.open_steps == 0


def test_a_load_drops_the_steps_that_await_their_backward(tmp_path):
    ebc = make()
    pooled = ebc(batches(1)[0][0]).values()
    ebc.save(str(tmp_path))
    ebc.load(str(tmp_path))
    with pytest.raises(RuntimeError, match="is not open"):
        pooled.sum().backward()


@pytest.mark.parametrize("storage", ["dram", "ssd"])
def test_deepcopy_and_torch_save_copy_the_rows_and_the_optimizer_state(tmp_path, storage):
    data = batches(12)
    ebc = make(tmp_path, storage, optimizer="rowwise_adagrad")
    train(ebc, data[:6])
    model = torch.nn.ModuleDict({"sparse": ebc, "dense": top()})
    copied = copy.deepcopy(model)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    state = ebc.state_dict()
    for other in (copied, loaded):
        assert other["sparse"] is not ebc
        for key, value in state.items():
            assert torch.equal(other["sparse"].state_dict()[key], value), key
    # The copies are the collection's, not views of it: training one leaves
    # the others; and they train on bit for bit alike (the optimizer state
    # came with them).
    losses = train(copied["sparse"], data[6:], mlp=copied["dense"])
    for key, value in state.items():
        assert torch.equal(ebc.state_dict()[key], value), key
    assert train(loaded["sparse"], data[6:], mlp=loaded["dense"]) == losses
    assert train(ebc, data[6:], mlp=model["dense"]) == losses


def test_keyed_jagged_tensor_has_torchrecs_accessors():
    kjt = KeyedJaggedTensor(["a", "b"], torch.tensor([5, 6, 7, 8, 9]), lengths=torch.tensor([2, 0, 1, 2]))
    assert kjt.stride() == 2
    assert kjt.offsets().tolist() == [0, 2, 2, 3, 5]
    d = kjt.to_dict()
    assert list(d) == ["a", "b"]
    assert d["a"].values().tolist() == [5, 6] and d["a"].lengths().tolist() == [2, 0]
    assert d["b"].values().tolist() == [7, 8, 9] and d["b"].offsets().tolist() == [0, 1, 3]
    assert kjt["b"].lengths().tolist() == [1, 2]
    with pytest.raises(KeyError, match="no key 'c'"):
        kjt["c"]
    from_offsets = KeyedJaggedTensor.from_offsets_sync(["a", "b"], kjt.values(), kjt.offsets())
    assert from_offsets.lengths().tolist() == [2, 0, 1, 2]


# --- TorchRec's contract: per-value weights, state_dict keys, checkpoints -------

SUM_TABLES = [dict(t, pooling="sum") for t in TABLES]


def weighted(data, seed=5):
    """The batches with one weight per value in [-1, 2) (negative ones too)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for kjt, dense, label in data:
        w = torch.rand(kjt.values().shape[0], generator=g) * 3 - 1
        out.append((KeyedJaggedTensor(kjt.keys(), kjt.values(), weights=w, lengths=kjt.lengths()), dense, label))
    return out


def make_weighted(tmp_path=None, storage="dram", **kw):
    return make(tmp_path, storage, tables=SUM_TABLES, is_weighted=True, **kw)


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_weighted_features_match_nn_embedding_bag_with_per_sample_weights(optimizer):
    """TorchRec's weighted EmbeddingBagCollection pools each feature with
    nn.EmbeddingBag(mode="sum")(values, offsets, per_sample_weights=weights); the reference is
    that, with sparse SGD or Adagrad: the pooled values every step and the tables after."""
    ebc = make_weighted(optimizer=optimizer)
    assert ebc.is_weighted()
    state = ebc.state_dict()
    bags = torch.nn.ModuleDict()
    for t in SUM_TABLES:
        bags[t["name"]] = torch.nn.EmbeddingBag(t["num_embeddings"], t["embedding_dim"], mode="sum", sparse=True)
        bags[t["name"]].weight.data.copy_(state["embedding_bags." + t["name"] + ".weight"])
    sparse_opt = torch.optim.SGD(bags.parameters(), lr=LR) if optimizer == "sgd" else \
        torch.optim.Adagrad(bags.parameters(), lr=LR, eps=1e-8)
    for step, (kjt, _, _) in enumerate(weighted(batches(12))):
        jagged = kjt.to_dict()
        expected = torch.cat([bags[t["name"]](jagged[f].values(), jagged[f].offsets()[:-1],
                                              per_sample_weights=jagged[f].weights())
                              for t in SUM_TABLES for f in t["feature_names"]], dim=1)
        pooled = ebc(kjt).values()
        torch.testing.assert_close(pooled, expected, rtol=1e-5, atol=1e-6, msg=lambda m: f"step {step}: {m}")
        sparse_opt.zero_grad()
        linear_loss(expected, step).backward()
        sparse_opt.step()
        linear_loss(pooled, step).backward()
    after = ebc.state_dict()
    for t in SUM_TABLES:
        key = "embedding_bags." + t["name"] + ".weight"
        torch.testing.assert_close(after[key], bags[t["name"]].weight.data, rtol=1e-5, atol=1e-6, msg=key)
        assert not torch.equal(after[key], state[key])


def test_a_weighted_value_scales_its_row_and_its_update_by_hand():
    ebc = EmbeddingBagCollection([EmbeddingBagConfig(name="t0", num_embeddings=10, embedding_dim=4,
                                                     feature_names=["f0"])], is_weighted=True, learning_rate=0.1)
    w = ebc.state_dict()["embedding_bags.t0.weight"].clone()
    kjt = KeyedJaggedTensor(["f0"], torch.tensor([1, 2, 1, 3]), weights=torch.tensor([0.5, 2.0, -1.0, 0.0]),
                            lengths=torch.tensor([2, 0, 2]))
    pooled = ebc(kjt).values()
    torch.testing.assert_close(pooled, torch.stack([0.5 * w[1] + 2.0 * w[2], torch.zeros(4), -w[1] + 0.0 * w[3]]))
    pooled.sum().backward()  # every bag's gradient is ones
    after = ebc.state_dict()["embedding_bags.t0.weight"]
    torch.testing.assert_close(after[1], w[1] - 0.1 * (0.5 - 1.0))
    torch.testing.assert_close(after[2], w[2] - 0.1 * 2.0)
    torch.testing.assert_close(after[3], w[3])  # weight 0: no change (the row was read)


@pytest.mark.parametrize("storage", ["dynamic", "ssd"])
def test_weighted_features_train_bit_for_bit_alike_in_every_storage_with_prefetch(tmp_path, storage):
    data = weighted(batches(10))
    expected = train(make_weighted(), data)
    ebc = make_weighted(tmp_path, storage, prefetch_batches=1)
    assert train(ebc, data, prefetch=True) == expected


def test_the_prefetched_batch_must_have_the_same_weights():
    ebc = make_weighted(prefetch_batches=1)
    kjt = weighted(batches(1))[0][0]
    other = KeyedJaggedTensor(kjt.keys(), kjt.values(), weights=kjt.weights() + 1, lengths=kjt.lengths())
    ebc.prefetch(kjt)
    with pytest.raises(RuntimeError, match="not the batch prefetch"):
        ebc(other)
    ebc(kjt).values().sum().backward()  # the prefetched one is still taken


def test_an_unweighted_collection_ignores_weights_as_torchrecs_does():
    kjt, _, _ = batches(1)[0]
    ebc = make()
    assert not ebc.is_weighted()
    with torch.no_grad():
        plain = ebc(kjt).values()
        assert torch.equal(ebc(weighted([(kjt, None, None)])[0][0]).values(), plain)


def test_weights_errors_name_what_is_wrong():
    kjt, _, _ = batches(1)[0]
    ebc = make_weighted()
    with pytest.raises(ValueError, match=r"no weights, and the collection is weighted \(is_weighted=True\)"):
        ebc(kjt)
    n = kjt.values().shape[0]
    short = KeyedJaggedTensor(kjt.keys(), kjt.values(), weights=torch.ones(n - 1), lengths=kjt.lengths())
    with pytest.raises(ValueError, match=f"features.weights\\(\\): {n - 1} weights for {n} values"):
        ebc(short)
    ints = KeyedJaggedTensor(kjt.keys(), kjt.values(), weights=torch.ones(n, dtype=torch.int64), lengths=kjt.lengths())
    with pytest.raises(TypeError, match="features.weights\\(\\): dtype torch.int64"):
        ebc(ints)
    learned = KeyedJaggedTensor(kjt.keys(), kjt.values(), weights=torch.ones(n, requires_grad=True),
                                lengths=kjt.lengths())
    with pytest.raises(ValueError, match="no gradient"):
        ebc(learned)
    with torch.no_grad():
        ebc(learned)  # no gradient asked for: taken
    with pytest.raises(ValueError, match=r"table 't1': pooling mean in a weighted collection"):
        EmbeddingBagCollection(configs(), is_weighted=True)
    with pytest.raises(ValueError, match="KeyedJaggedTensor.weights\\(\\): no weights"):
        kjt.weights()
    # float64 weights are taken (as float32), as TorchRec's float weights are.
    f64 = KeyedJaggedTensor(kjt.keys(), kjt.values(), weights=torch.full((n,), 0.5, dtype=torch.float64),
                            lengths=kjt.lengths())
    halves = KeyedJaggedTensor(kjt.keys(), kjt.values(), weights=torch.full((n,), 0.5), lengths=kjt.lengths())
    with torch.no_grad():
        assert torch.equal(ebc(f64).values(), ebc(halves).values())
    # The engine's own check, reached without the Python layer's.
    with pytest.raises(ValueError, match="table 't0', feature 'f0': 2 weights for 3 values"):
        v = [torch.tensor([1, 2, 3]).numpy()] + [torch.zeros(0, dtype=torch.int64).numpy()] * 3
        l = [torch.tensor([3]).numpy()] + [torch.zeros(1, dtype=torch.int64).numpy()] * 3
        w = [torch.ones(2).numpy()] + [torch.ones(0).numpy()] * 3
        ebc._core.forward(v, l, True, torch.empty(1, WIDTH).numpy(), False, w)


def test_state_dict_keys_are_torchrecs_and_the_earlier_keys_still_load():
    a = make()
    train(a, batches(3))
    state = a.state_dict()
    assert list(state) == ["embedding_bags.t0.weight", "embedding_bags.t1.weight", "embedding_bags.t2.weight"]
    # Inside a parent module, under its prefix, as TorchRec's model.sparse.embedding_bags.<table>.weight.
    parent = torch.nn.ModuleDict({"sparse": a})
    assert "sparse.embedding_bags.t2.weight" in parent.state_dict()
    # The keys of earlier versions, "<table>.weight", load too.
    b = make(seed=99)
    b.load_state_dict({k[len("embedding_bags."):]: v for k, v in state.items()})
    for k, v in state.items():
        assert torch.equal(b.state_dict()[k], v), k
    c = torch.nn.ModuleDict({"sparse": make(seed=98)})
    c.load_state_dict(parent.state_dict())
    for k, v in state.items():
        assert torch.equal(c["sparse"].state_dict()[k], v), k
    with pytest.raises(RuntimeError, match=r"Missing key\(s\).*embedding_bags.t1.weight"):
        make().load_state_dict({k: v for k, v in state.items() if "t1" not in k})


@pytest.mark.parametrize("into", ["ssd", "dram"])
def test_an_ssd_checkpoint_loads_into_a_collection_made_with_another_seed(tmp_path, into):
    """An ssd table's checkpoint holds the rows written; the others are computed from the seed
    the snapshot carries, which the loading table takes: the loaded collection is the saved one,
    whatever seed it was made with, and trains on bit for bit alike."""
    data = batches(12)
    saved = make(tmp_path, "ssd", seed=1)
    train(saved, data[:4])
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    saved.save(str(ckpt))
    loaded = make(tmp_path, into, seed=7)
    assert not torch.equal(loaded.state_dict()["embedding_bags.t2.weight"],
                           saved.state_dict()["embedding_bags.t2.weight"])
    loaded.load(str(ckpt))
    for k, v in saved.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k
    assert train(loaded, data[4:]) == train(saved, data[4:])


# --- mean pooling in the engine's kernels; a batch checked once --------------

# A mean table of a compile-time dim (16), a sum table, and a mean table of a
# run-time dim (5) serving two features (written through the scratch matrix).
MEAN_TABLES = [
    dict(name="m16", num_embeddings=300, embedding_dim=16, feature_names=["a"], pooling="mean"),
    dict(name="s8", num_embeddings=200, embedding_dim=8, feature_names=["b"], pooling="sum"),
    dict(name="m5", num_embeddings=100, embedding_dim=5, feature_names=["c", "d"], pooling="mean"),
]
MEAN_FEATURES = [("a", 300), ("b", 200), ("c", 100), ("d", 100)]


def mean_batches(steps, batch=24, seed=11):
    """0 to 5 values per bag (empty bags in every feature), rows repeated within and across bags."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        values, lengths = [], []
        for _, rows in MEAN_FEATURES:
            n = torch.randint(0, 6, (batch,), generator=g)
            n[0] = 0
            values.append(torch.randint(0, rows // 4, (int(n.sum()),), generator=g))
            lengths.append(n)
        out.append(KeyedJaggedTensor([f for f, _ in MEAN_FEATURES], torch.cat(values), lengths=torch.cat(lengths)))
    return out


@pytest.mark.parametrize("storage", ["dram", "ssd"])
def test_mean_tables_pool_and_update_as_nn_embedding_bag_mean(tmp_path, storage):
    """Forward within 1e-6 (absolute) of nn.EmbeddingBag(mode="mean") (and "sum" for the sum table), empty bags
    zeros; after each SGD step every row within 1e-6 of the reference's (its dense gradient, 1/|bag| per row).
    ssd: the update plans are made by the prefetch."""
    kw = dict(dram_budget=256 << 10, batch_size=24, bag_size=5) if storage == "ssd" else {}
    ebc = EmbeddingBagCollection(configs(storage, str(tmp_path) if storage == "ssd" else None, tables=MEAN_TABLES),
                                 learning_rate=LR, prefetch_batches=1, **kw)
    state = ebc.state_dict()
    bags = {t["name"]: torch.nn.EmbeddingBag(t["num_embeddings"], t["embedding_dim"], mode=t["pooling"])
            for t in MEAN_TABLES}
    for name, bag in bags.items():
        bag.weight.data.copy_(state["embedding_bags." + name + ".weight"])
    data = mean_batches(3)
    ebc.prefetch(data[0])
    for step, kjt in enumerate(data):
        pooled = ebc(kjt).values()
        if step + 1 < len(data):
            ebc.prefetch(data[step + 1])
        per_key = kjt.to_dict()
        expected = torch.cat([bags[t["name"]](per_key[f].values(), per_key[f].offsets()[:-1])
                              for t in MEAN_TABLES for f in t["feature_names"]], dim=1)
        torch.testing.assert_close(pooled, expected, rtol=0, atol=1e-6)
        assert torch.equal(pooled[0], torch.zeros(pooled.shape[1]))  # every feature's bag 0 is empty
        linear_loss(pooled, step).backward()
        linear_loss(expected, step).backward()
        with torch.no_grad():
            for bag in bags.values():
                bag.weight -= LR * bag.weight.grad
                bag.weight.grad = None
        after = ebc.state_dict()
        for name, bag in bags.items():
            torch.testing.assert_close(after["embedding_bags." + name + ".weight"], bag.weight.data, rtol=0,
                                       atol=1e-6, msg=f"step {step}, table {name}")
    assert not torch.equal(after["embedding_bags.m5.weight"], state["embedding_bags.m5.weight"])


def test_the_engine_pools_a_mean_table_and_scales_its_update_by_hand():
    """The module under cemb.torch (no PyTorch arithmetic): bag [1, 2, 1] pools (2 w1 + w2) / 3, an empty bag
    zeros; with gradient rows g0, g1, g2, row 1 moves by lr (2 g0 / 3 + g2), row 2 by lr g0 / 3."""
    core = Collection([dict(name="t", num_embeddings=4, embedding_dim=3, feature_names=["f"], bf16=False,
                            pooling="mean", storage="dram", directory="")])
    w = torch.empty(4, 3)
    core.read_table(0, w.numpy())
    values, lengths = torch.tensor([1, 2, 1, 1]), torch.tensor([3, 0, 1])
    out = torch.full((3, 3), float("nan"))
    step = core.forward([values.numpy()], [lengths.numpy()], True, out.numpy(), True)
    torch.testing.assert_close(out, torch.stack([(2 * w[1] + w[2]) / 3, torch.zeros(3), w[1]]), rtol=0, atol=1e-7)
    grad = torch.tensor([[3.0, -6.0, 1.5], [100.0, 100.0, 100.0], [1.0, 2.0, 4.0]])
    core.backward(step, grad.numpy(), 0.5)
    after = torch.empty(4, 3)
    core.read_table(0, after.numpy())
    torch.testing.assert_close(after[1], w[1] - 0.5 * (2 * grad[0] / 3 + grad[2]), rtol=0, atol=1e-6)
    torch.testing.assert_close(after[2], w[2] - 0.5 * grad[0] / 3, rtol=0, atol=1e-6)
    assert torch.equal(after[0], w[0]) and torch.equal(after[3], w[3])  # the empty bag's gradient reaches no row
    with pytest.raises(ValueError, match=r"unknown table 't' pooling 'max' \(expected one of sum, mean\)"):
        Collection([dict(name="t", num_embeddings=4, embedding_dim=3, feature_names=["f"], bf16=False,
                         pooling="max", storage="dram", directory="")])


def test_a_pickle_of_an_earlier_version_keeps_its_mean_tables():
    """Earlier versions divided by the bag lengths in PyTorch: their specs had no pooling, their slices a flag."""
    ebc = make()
    kjt = batches(1)[0][0]
    state = ebc.__getstate__()
    for spec in state["_specs"]:
        del spec["pooling"]
    state["_slices"] = collections.OrderedDict((f, (col, dim, f == "f1")) for f, (col, dim) in state["_slices"].items())
    state["_any_mean"] = True
    del state["_widths"]
    old = EmbeddingBagCollection.__new__(EmbeddingBagCollection)
    old.__setstate__(state)
    with torch.no_grad():
        assert torch.equal(old(kjt).values(), ebc(kjt).values())


def test_a_bad_batch_is_named_by_the_engine_once_it_is_past_torch(tmp_path):
    """What PyTorch's side no longer checks (each bag's length, offsets) the engine names, table and feature
    included; an ssd table's bags, no longer checked again by its layer, are refused as the others are."""
    ebc = make()
    # A negative length that leaves the keys' counts right: the engine finds it.
    with pytest.raises(ValueError, match=r"^table 't0', feature 'f0', bag 1: length -1 < 0$"):
        ebc(kjt_of([1, 2, 3, 4], [2, -1, 1, 0, 1, 1, 0, 0]))
    with pytest.raises(ValueError, match=r"^table 't1', feature 'f1', bag 1: length -2 < 0$"):
        ebc(kjt_of([1, 2, 3, 4, 5, 6], [1, 0, 2, -2, 2, 1, 1, 1]))
    # One that makes a key's count negative: PyTorch's side cannot cut the values, and names it.
    with pytest.raises(ValueError, match=r"^feature 'f1', bag 0: length -3 < 0$"):
        ebc(kjt_of([1, 2, 3, 4], [3, 1, -3, 0, 1, 1, 0, 1]))
    # Offsets, given to the engine directly.
    def offsets(first, rest=()):
        v = [torch.tensor([1, 2, 3]).numpy()] + [torch.zeros(0, dtype=torch.int64).numpy()] * 3
        o = [torch.tensor(first).numpy()] + [torch.tensor(r).numpy() for r in rest or [[0, 0, 0]] * 3]
        ebc._core.forward(v, o, False, torch.empty(2, WIDTH).numpy(), False)
    with pytest.raises(ValueError, match=r"table 't0', feature 'f0': offsets\[0\] is 1, not 0"):
        offsets([1, 2, 3])
    with pytest.raises(ValueError, match=r"table 't0', feature 'f0', bag 1: offsets decrease \(1 after 2\)"):
        offsets([0, 2, 1])
    with pytest.raises(ValueError, match=r"table 't0', feature 'f0', bag 1: ends at value 4, past the 3 values"):
        offsets([0, 2, 4])
    with pytest.raises(ValueError, match=r"table 't0', feature 'f0': the bags hold 2 values where there are 3"):
        offsets([0, 1, 2])
    with pytest.raises(ValueError, match=r"table 't1', feature 'f1': 1 bags where feature 'f0' has 2"):
        offsets([0, 2, 3], [[0, 0], [0, 0, 0], [0, 0, 0]])
    assert len(train(ebc, batches(2))) == 2
    ssd = make(tmp_path, "ssd", prefetch_batches=1)
    bad = kjt_of([1, 2, 3, 4, 8000], [1, 0, 1, 0, 1, 1, 0, 1])
    for call in (ssd.prefetch, ssd):
        with pytest.raises(IndexError, match=r"^table 't2', feature 'f2b', bag 1, index 0: row 8000 >= 8000 "
                                             r"\(num_embeddings\)$"):
            call(bad)
    assert len(train(ssd, batches(2))) == 2
