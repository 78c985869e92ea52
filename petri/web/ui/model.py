"""The Model tab: the served model, its sampler defaults, the request limits and its model card."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING

from petri.app.service import PetriService
from petri.core.paths import checkpoint_source
from petri.engine.torch.prompt_cache import PROMPT_CACHE_ENV
from petri.web.limits import LIMITS

if TYPE_CHECKING:
    from petri.engine.base import EngineFacts


def model_card(model_source: str | None) -> str:
    """The model folder's README.md (a model card), if the model came from a local folder (an
    embedded model's name, e.g. ``petri-small-mdm``, is its folder)."""
    if not model_source:
        return ""
    folder = Path(checkpoint_source(model_source)).expanduser()
    readme = folder / "README.md"
    try:
        if folder.is_dir() and readme.is_file():
            text = readme.read_text(encoding="utf-8", errors="replace")[:20000]
            if text.startswith("---"):  # YAML front matter of a Hub model card
                end = text.find("\n---", 3)
                text = text[end + 4 :].lstrip() if end != -1 else text
            return text
    except OSError:
        pass
    return ""


#: The packages that make up each backend, named on the tab with their installed versions.
BACKEND_PACKAGES = {"torch": (("PyTorch", "torch"), ("transformers", "transformers")), "mlx": (("MLX", "mlx"),)}


def _installed(package: str) -> str:
    """``package``'s installed version (read from its metadata; the package is never imported)."""
    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def backend_line(facts: EngineFacts) -> str:
    """``PyTorch 2.x · transformers 4.x (`ModelClass`)`` for the served model's backend."""
    backend = facts.backend
    parts = [f"{label} {_installed(package)}" for label, package in BACKEND_PACKAGES.get(backend, ((backend, backend),))]
    return " · ".join(parts) + (f" (`{facts.architecture}`)" if facts.architecture else "")


def kept_prompts_line(facts: EngineFacts) -> str:
    """How many encoder caches the served model keeps for prompts sent again (:mod:`petri.engine.torch.prompt_cache`)."""
    if facts.kept_prompt_bytes is None:
        return "none (the model has no prompt encoder)"
    if facts.kept_prompt_bytes == 0:
        return f"none (`{PROMPT_CACHE_ENV}=0`, or a public server without it)"
    return (f"encoder caches of recent prompts, up to {facts.kept_prompt_bytes / 2**20:,.0f} MiB (`{PROMPT_CACHE_ENV}`); "
            "a prompt sent again skips the encoder, with the same samples")


def model_markdown(service: PetriService, model_source: str | None) -> str:
    """The tab's text: a property table, the sampler defaults, the limits, then the model card."""
    info, facts = service.model_info(), service.model_facts()
    defaults = service.default_settings()
    lines = [
        "| property | value |", "|---|---|",
        f"| model | `{info['model_id']}` |",
        f"| source | `{model_source or 'in-process'}` |",
        f"| backend | {backend_line(facts)} |",
        f"| device | `{info['device']}` |",
        f"| dtype | `{info['dtype']}` |",
        f"| canvas length | {info['canvas_length']} tokens |",
        f"| vocabulary | {info['vocab_size']} tokens |",
        f"| run store | `{service.store_path}` |",
        f"| kept prompts | {kept_prompts_line(facts)} |",
        "",
        "**Sampler defaults** (from the model's generation config): "
        + ", ".join(f"`{k}={v}`" for k, v in defaults.to_dict().items()),
        "",
        "**Request limits** (UI and `POST /api/seed`): " + "; ".join(f"{k}: {v}" for k, v in LIMITS.items()),
    ]
    card = model_card(model_source)
    lines += ["", "---", "### Model card", "", card if card else "_No model card (README.md) in the model folder._"]
    return "\n".join(lines)
