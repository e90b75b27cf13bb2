"""Reading a HuggingFace model directory from disk: ``config.json`` and the weights
(``model.safetensors``, or ``pytorch_model.bin`` loaded with ``weights_only=True``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from bench.errors import UserError

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def read_json(path: Path, what: str, key: str) -> dict[str, Any]:
    if not path.exists():
        raise UserError(f"{key}={path.parent}: no {path.name}; expected {what}")
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def weights_file(directory: str | Path, key: str) -> Path:
    """The weights file of a HuggingFace directory (safetensors preferred)."""
    root = Path(directory)
    if not root.is_dir():
        raise UserError(f"{key}={directory}: no such directory; give a HuggingFace model directory "
                        "(config.json + model.safetensors or pytorch_model.bin)")
    for name in WEIGHT_FILES:
        if (root / name).exists():
            return root / name
    raise UserError(f"{key}={directory}: neither {' nor '.join(WEIGHT_FILES)} found (sharded checkpoints "
                    "are not supported; save the model as one file)")


def load_weights(directory: str | Path, key: str) -> dict[str, Tensor]:
    path = weights_file(directory, key)
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    return torch.load(path, map_location="cpu", weights_only=True)


def strip_prefix(sd: dict[str, Tensor], prefixes: tuple[str, ...]) -> dict[str, Tensor]:
    """Keys without the first matching model prefix (``model.``, ``wav2vec2.``), others unchanged."""
    out = {}
    for name, value in sd.items():
        for prefix in prefixes:
            if name.startswith(prefix):
                name = name[len(prefix):]
                break
        out[name] = value
    return out
