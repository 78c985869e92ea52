"""The Validity page's and the README's figure: the anchor-congruence positive control beside the
shipped study, on one model (default petri-small).

    python3 experiments/validity_stats.py && python3 experiments/validity_figure.py   # docs/images/positive_control.png

Left: each congruence event's mean pair instability with its fitting triple and with an unrelated one
(one line per event; the paired test from ``experiments/results/validity_ladder.json`` in the title).
Right: the shipped inventory / order study's event means by group (benign, contradictory, control),
with its contradictory-vs-benign AUC. Plotly, written as PNG by kaleido (needs a Chrome or Chromium).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from validity_stats import RESULTS, VALIDITY, inventory_folder, read_events  # noqa: E402

GROUPS = ("benign", "contradictory", "control")


def figure(model: str):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    ladder = json.loads((RESULTS / "validity_ladder.json").read_text(encoding="utf-8"))["models"][model]
    c, inv = ladder["congruence"], ladder["inventory_order"]
    fit = read_events(VALIDITY / f"anchor_congruence-{model}-fitting")
    unrel = read_events(VALIDITY / f"anchor_congruence-{model}-unrelated")
    shipped = read_events(REPO / inventory_folder(model))
    fig = make_subplots(rows=1, cols=2, column_widths=[0.55, 0.45], horizontal_spacing=0.12, subplot_titles=(
        f"Positive control: concepts that fit vs unrelated ({c['n']} events)<br>"
        f"<sup>higher on {round(c['share_up'] * c['n'])} of {c['n']}; mean {c['mean']:+.2f} "
        f"[{c['ci95'][0]:+.2f}, {c['ci95'][1]:+.2f}], Wilcoxon p = {c['wilcoxon_p']:.2g}</sup>",
        f"Shipped study: contradictions ({sum(1 for r in shipped.values() if r['group'] == 'contradictory')} events)<br>"
        f"<sup>vs benign AUC {inv['contradictory_vs_benign']['auc']:.2f}, p = {inv['contradictory_vs_benign']['p']:.2g}; "
        f"vs control AUC {inv['contradictory_vs_control']['auc']:.2f}</sup>"))
    for eid in sorted(set(fit) & set(unrel)):
        a, b = float(fit[eid]["instability"]), float(unrel[eid]["instability"])
        fig.add_trace(go.Scatter(x=["fitting", "unrelated"], y=[a, b], mode="lines+markers", showlegend=False,
                                 line={"color": "#c0392b" if b > a else "#2e86c1", "width": 1.5}, opacity=0.7,
                                 hovertext=eid), row=1, col=1)
    for g in GROUPS:
        ys = [float(r["instability"]) for r in shipped.values() if r["group"] == g]
        fig.add_trace(go.Box(y=ys, name=g, boxpoints="all", jitter=0.4, pointpos=0, showlegend=False,
                             marker={"color": "#555"}, line={"color": "#888"}), row=1, col=2)
    fig.update_yaxes(title_text="mean pair instability per event", row=1, col=1)
    fig.update_yaxes(title_text="mean pair instability per event", row=1, col=2)
    fig.update_layout(width=1000, height=460, margin={"t": 90, "l": 60, "r": 20, "b": 40}, template="simple_white",
                      title={"text": f"{model}: the anchor-congruence positive control beside the shipped study", "x": 0.5})
    return fig


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="petri-small")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "images" / "positive_control.png")
    args = ap.parse_args(argv)
    figure(args.model).write_image(str(args.out), scale=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
