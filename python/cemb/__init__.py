"""CachedEmbeddings from Python: embedding tables in DRAM, behind a DRAM cache, or on an NVMe drive.

``cemb.torch.EmbeddingBagCollection`` is the PyTorch layer (docs/python.md);
``cemb.Collection`` is the engine under it, over NumPy arrays.
"""
from cemb._cemb import Collection

__all__ = ["Collection"]
