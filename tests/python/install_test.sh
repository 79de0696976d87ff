#!/usr/bin/env bash
# `cmake --install` puts the package cemb under <prefix>/lib/python3/dist-packages,
# where it imports and trains without the build tree.
# Usage: install_test.sh PYTHON BUILD_DIR
set -euo pipefail
python=$1 build=$2
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
cd "$prefix"
PYTHONPATH="$prefix/lib/python3/dist-packages" "$python" - "$prefix" <<'PY'
import sys
import torch
import cemb.torch as ct
assert ct.__file__.startswith(sys.argv[1]), ct.__file__
ebc = ct.EmbeddingBagCollection([ct.EmbeddingBagConfig(name="t", num_embeddings=10, embedding_dim=4)])
kjt = ct.KeyedJaggedTensor(["t"], torch.tensor([1, 2, 3]), lengths=torch.tensor([2, 1]))
ebc(kjt).values().sum().backward()
print("installed cemb imports and trains from", ct.__file__)
PY
