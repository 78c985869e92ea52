"""Two configurations of one study side by side (two models, two tiers, two templates, two seeds of
settings): the paired tests of :mod:`petri.stats.paired` on the output folders of two ``petri study`` runs.
Never imports torch.

Pairs: events (``events.csv``, matched on ``event_id``) for the Wilcoxon signed-rank test of the
event-level instability; samples (``samples.csv``, matched on ``event_id``, ``template_id``, ``sample``:
the same batch seed) for the exact McNemar test of "every anchor intact in the final text". Two runs of
a paired (within-event) study are matched on the ``condition`` as well: the unit is (event, condition).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from petri.stats.paired import match_pairs, mcnemar_exact, wilcoxon_paired

__all__ = ["compare_runs"]


def _read(folder: Path, name: str) -> pd.DataFrame:
    path = folder / name
    if not path.is_file():
        raise ValueError(f"{folder}: no {name} (is it the output folder of `petri study`?)")
    return pd.read_csv(path)


def compare_runs(dir_a: str | Path, dir_b: str | Path) -> dict[str, Any]:
    """The paired tests of run ``b`` against run ``a`` (JSON-serialisable dict with both summaries)."""
    a, b = Path(dir_a), Path(dir_b)
    labels = (a.name, b.name)
    ea, eb = _read(a, "events.csv"), _read(b, "events.csv")
    cond = ["condition"] if "condition" in ea.columns and "condition" in eb.columns else []  # a paired study's units
    ev = match_pairs(ea, eb, ["event_id", *cond], ["instability"])
    w = wilcoxon_paired(ev["instability_a"], ev["instability_b"])
    sa, sb = (_read(f, "samples.csv") for f in (a, b))
    for s in (sa, sb):
        s["all_intact"] = s["anchors_intact"] == s["n_anchors"]
    sm = match_pairs(sa, sb, ["event_id", "template_id", *cond, "sample"], ["all_intact"])
    m = mcnemar_exact(sm["all_intact_a"], sm["all_intact_b"])
    return {
        "runs": [str(a), str(b)],
        "wilcoxon": {"unit": "event (event-level instability)", **w.to_dict(), "summary": w.summary(labels)},
        "mcnemar": {"unit": "sample (every anchor intact in the final text), matched on event, template, sample",
                    **m.to_dict(), "summary": m.summary("every anchor intact", labels)},
    }
