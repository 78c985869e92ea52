"""Where the project's shipped files are: the embedded model and the study files.

``assets/`` sits at the top of the source checkout. An installed copy (``pip install .``) puts the
same files under ``<prefix>/share/concept-petri-dish/assets`` (the wheel's data files). A folder
the process is told of (:func:`use_assets_dir`, which an entry point calls with ``PETRI_ASSETS``
from :class:`petri.core.config.PetriConfig`) wins over both.
"""

from __future__ import annotations

import sys
from pathlib import Path

_CHECKOUT_ASSETS = Path(__file__).resolve().parents[2] / "assets"
_INSTALLED_ASSETS = Path(sys.prefix) / "share" / "concept-petri-dish" / "assets"
#: The folders this process was told of (:func:`use_assets_dir`, :func:`use_shipped_study_dir`).
_TOLD: dict[str, Path | None] = {"assets": None, "shipped_study": None}


def _folder(folder: str | Path | None) -> Path | None:
    return Path(folder).expanduser() if folder else None


def use_assets_dir(folder: str | Path | None) -> None:
    """Tell this process where its assets folder is (``None``: the default places). An entry point
    calls it once with its configuration's ``assets`` (``PETRI_ASSETS``,
    :class:`petri.core.config.PetriConfig`); a worker loading a
    :class:`petri.study.execution.executors.ModelSpec` with the folder its spec carries."""
    _TOLD["assets"] = _folder(folder)


def use_shipped_study_dir(folder: str | Path | None) -> None:
    """Tell this process which study run the Study tab opens with (``None``: the shipped one); the
    web server calls it once with its configuration's ``shipped_study`` (``PETRI_SHIPPED_STUDY``)."""
    _TOLD["shipped_study"] = _folder(folder)


def assets_dir() -> Path:
    """The assets folder: the one :func:`use_assets_dir` named, else the source checkout's, else the
    installed copy's (the first that exists; the checkout's path when none does, so messages name a
    real place)."""
    if _TOLD["assets"] is not None:
        return _TOLD["assets"]
    for candidate in (_CHECKOUT_ASSETS, _INSTALLED_ASSETS):
        if (candidate / "petri-tiny").is_dir():
            return candidate
    return _CHECKOUT_ASSETS


#: the embedded model a run loads when it names none (and no real DiffusionGemma is cached on a GPU)
DEFAULT_EMBEDDED = "petri-small"


def embedded_model_path() -> Path:
    """The default embedded model's checkpoint folder (``assets/petri-small``)."""
    return assets_dir() / DEFAULT_EMBEDDED


#: the embedded models, by the name ``--model`` accepts for each (model cards in ``assets/NAME/README.md``):
#: ``petri-small`` (DiffusionGemma's architecture, uniform diffusion, distilled from SmolLM2-135M-Instruct's
#: English; the default) and ``petri-small-mdm`` (a masked-diffusion ModernBERT on the same corpus and
#: tokenizer); ``petri-tiny`` and ``petri-tiny-mdm``, the first pair, smaller and faster, trained on
#: dictionary glosses (they write invented words; the tests use them where speed matters)
EMBEDDED_MODELS = ("petri-small", "petri-small-mdm", "petri-tiny", "petri-tiny-mdm")


def embedded_model_named(name: str) -> Path | None:
    """The folder of the embedded model called ``name`` (one of :data:`EMBEDDED_MODELS`), else ``None``."""
    return assets_dir() / name if name in EMBEDDED_MODELS else None


def checkpoint_source(name: str) -> str:
    """Where to load checkpoint ``name`` from: ``name`` itself when it is a folder (or a hub id), else
    the embedded model's folder when ``name`` is an embedded model's name (:data:`EMBEDDED_MODELS`)."""
    embedded = embedded_model_named(name)
    return str(embedded) if embedded is not None and not Path(name).expanduser().is_dir() else name


def studies_dir() -> Path:
    """The shipped study files (``assets/studies``)."""
    return assets_dir() / "studies"


def probe_set_path() -> Path:
    """The probe's shipped labelled set (``assets/probe/events.jsonl``, built from the shipped study's events)."""
    return assets_dir() / "probe" / "events.jsonl"


#: the committed run of the shipped study that the Study tab opens with (under ``assets/studies/results``)
SHIPPED_RUN = "inventory_order-en-petri-tiny"


def shipped_run_dir() -> Path:
    """The committed run of the shipped study (``assets/studies/results/inventory_order-en-petri-tiny``:
    its CSVs, ``run.json`` and ``report.md``), in a checkout and in an installed wheel alike."""
    return studies_dir() / "results" / SHIPPED_RUN


def shipped_study_dir() -> Path:
    """The study run the Study tab opens with: the folder :func:`use_shipped_study_dir` named (``PETRI_SHIPPED_STUDY``),
    else :func:`shipped_run_dir`."""
    told = _TOLD["shipped_study"]
    return told if told is not None else shipped_run_dir()
