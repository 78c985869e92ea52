"""What the loaders read off a checkpoint before and after loading it: its ``model_type`` (which
family loads it, :func:`petri.engine.families.registry.family_for_model_type`; read without torch,
so the backend choice can use it) and a cheap fingerprint of its weights."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

def weights_fingerprint(model: Any, dtype: torch.dtype) -> str:  # a transformers model
    """A cheap fingerprint of the weights (config, dtype, and the name, shape and first 64 values of
    every tensor), so a retrained checkpoint under the same folder name gets a new study run id
    instead of a wrong resume. 16 hex characters. Where the checkpoint was loaded from
    (``_name_or_path``) is left out: the same weights give the same run id in every checkout."""
    import torch

    config = json.loads(model.config.to_json_string(use_diff=False))
    config.pop("_name_or_path", None)
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode())
    digest.update(str(dtype).encode())
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            digest.update(name.encode())
            digest.update(str(tuple(tensor.shape)).encode())
            head = tensor.detach()
            while head.dim() > 1:  # the first row, as a view: never copies a large tensor
                head = head[0]
            digest.update(head.reshape(-1)[:64].to("cpu", torch.float32).numpy().tobytes())
    return digest.hexdigest()[:16]


def model_type_of(source: str) -> str | None:
    """The ``model_type`` in a checkpoint's ``config.json`` (a folder, or a hub id in the local
    cache), ``None`` when there is none to read."""
    path = Path(source) / "config.json"
    if not path.is_file():
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(source, "config.json")
        if not isinstance(found, str):
            return None
        path = Path(found)
    try:
        return json.loads(path.read_text()).get("model_type")
    except (OSError, ValueError):
        return None
