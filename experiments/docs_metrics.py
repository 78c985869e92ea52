"""The Concepts page's generated lists, made from the code's declarations: the recorded arrays
(:data:`petri.core.recorded.RECORDED`) and every registered metric of every level (per sample:
:mod:`petri.measure.sample_metrics`; per segment, pair and event: :mod:`petri.measure.level_metrics`).

    python experiments/docs_metrics.py            # print both blocks
    python experiments/docs_metrics.py --write    # replace them in docs/concepts.md

``tests/docs/test_metric_list.py`` fails when a block of the page differs from what this makes, so a
metric or a recorded field registered, changed or removed shows on the Concepts page or the tests go red.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # the checkout's petri
    sys.path.insert(0, str(REPO))

from petri.core.recorded import RECORDED  # noqa: E402
from petri.measure.level_metrics import every_metric  # noqa: E402

PAGE = REPO / "docs" / "concepts.md"
#: name → (begin marker, end marker) of each generated block.
MARKERS = {
    "recorded": ("<!-- recorded: made by experiments/docs_metrics.py -->", "<!-- /recorded -->"),
    "metrics": ("<!-- metrics: made by experiments/docs_metrics.py -->", "<!-- /metrics -->"),
}
#: Where each level's metrics show: its table and its API model (the metric list's third column).
WHERE = {"sample": ("`samples.csv`", "`SampleOut`"), "segment": ("`segments.csv`", "`SegmentOut`"),
         "pair": ("`pairs.csv`", "`PairOut`"), "event": (None, "`preservation` (`PreservationOut`)")}


def where(metric) -> str:
    """The table and the API model ``metric`` shows in (the API's only where its ``api`` is set)."""
    table, model = WHERE[metric.level]
    return ", ".join(w for w in (table, model if metric.api else None) if w)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def recorded_block() -> str:
    """The table of recorded arrays, between its two markers."""
    rows = ["| array | dtype | shape | what it holds |", "|---|---|---|---|"]
    for f in RECORDED:
        notes = []
        if f.finished is not None:
            notes.append(f"{f.finished!r} past a sample's last step".replace("nan", "NaN"))
        if f.optional:
            notes.append("absent (`None`) in runs stored before it was recorded")
        tail = f" ({'; '.join(notes)})" if notes else ""
        rows.append(f"| `{f.name}` | {f.dtype} | ({', '.join(f.shape)}{',' if len(f.shape) == 1 else ''}) | "
                    f"{_cell(f.meaning)}{tail} |")
    begin, end = MARKERS["recorded"]
    return "\n".join([begin, *rows, end])


def metrics_block() -> str:
    """The list of every registered metric, between its two markers."""
    rows = ["| level | metric | where | type | unit | what it is |", "|---|---|---|---|---|---|"]
    for m in every_metric():
        rows.append(f"| {m.level} | `{m.column}` | {where(m)} | {m.dtype.__name__} | {m.unit or '—'} | "
                    f"{_cell(m.description)} |")
    begin, end = MARKERS["metrics"]
    return "\n".join([begin, *rows, end])


BLOCKS = {"recorded": recorded_block, "metrics": metrics_block}


def page_block(text: str, name: str) -> str | None:
    """The page's block ``name`` with its markers (None: the page has none)."""
    begin, end = MARKERS[name]
    start, stop = text.find(begin), text.find(end)
    return text[start:stop + len(end)] if start >= 0 and stop > start else None


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="replace the blocks in docs/concepts.md")
    args = ap.parse_args(argv)
    if not args.write:
        print("\n\n".join(make() for make in BLOCKS.values()))
        return
    text = PAGE.read_text(encoding="utf-8")
    for name, make in BLOCKS.items():
        old = page_block(text, name)
        if old is None:
            raise SystemExit(f"{PAGE.relative_to(REPO)} has no {' ... '.join(MARKERS[name])} block")
        text = text.replace(old, make())
    PAGE.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
