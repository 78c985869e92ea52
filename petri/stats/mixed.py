"""Events and templates as sources of variance: a crossed mixed model and a two-way cluster bootstrap.

Layer 1 (numpy / pandas / statsmodels; never torch). The unit is one **cell** = one (event, template)
batch: its value is the mean segment instability over that batch's samples (:func:`cell_values`).
Events are nested in groups and crossed with templates (every event is sampled under every template),
so a cell's value is modelled as

    y[e, t] = mu + beta * [group(e) == b] + u_e + v_t + eps[e, t],
    u_e ~ N(0, s2_event), v_t ~ N(0, s2_template), eps ~ N(0, s2_residual)

(statsmodels ``MixedLM`` with one all-covering group and two variance components, REML). ``beta`` is
the group effect in instability units (b minus a), with its Wald standard error, interval and p-value;
the intraclass correlations are ``s2_event / total`` and ``s2_template / total``. The residual holds the
event x template interaction and the sampling noise of the cell mean.

The assumption-light check, :func:`two_way_cluster_bootstrap`, resamples events (with replacement,
within each group) and templates (with replacement) independently and recomputes the difference of the
group means of the cells; its percentile interval does not lean on normal random effects.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["MixedResult", "BootstrapResult", "cell_values", "cell_matrix", "crossed_mixed_model", "dose_mixed_model",
           "two_way_cluster_bootstrap"]

MIN_EVENTS_PER_GROUP = 3
"""Below this many events in a group the mixed model is not fitted (the event variance is not estimable)."""


@dataclass(frozen=True)
class MixedResult:
    """The crossed mixed model of one comparison (see the module docstring). Variances are in
    squared instability units; ``effect`` is ``group_b - group_a``."""

    group_a: str
    group_b: str
    unit: str
    n_cells: int
    n_events: int
    n_templates: int
    n_events_a: int
    n_events_b: int
    effect: float
    se: float
    ci_low: float
    ci_high: float
    p_value: float
    confidence: float
    var_event: float
    var_template: float
    var_residual: float
    icc_event: float
    icc_template: float
    converged: bool
    method: str
    warnings: list[str] = field(default_factory=list)
    effect_label: str = ""  # what ``effect`` is, when not ``group_b - group_a`` (a dose slope)

    def summary(self) -> str:
        conf = f"{100 * self.confidence:g}%"
        return (
            f"mixed model ({self.unit}: {self.n_cells} cells = {self.n_events} events x {self.n_templates} templates): "
            f"{self.effect_label or f'{self.group_b} - {self.group_a}'} = {self.effect:+.4g} "
            f"(SE {self.se:.3g}, {conf} CI {self.ci_low:+.4g}, "
            f"{self.ci_high:+.4g}, p={_fmt_p(self.p_value)}); variance event {self.var_event:.3g}, template "
            f"{self.var_template:.3g}, residual {self.var_residual:.3g}; ICC event {self.icc_event:.2f}, "
            f"template {self.icc_template:.2f}" + ("" if self.converged else " (did NOT converge)")
        )

    def to_dict(self) -> dict[str, Any]:
        out = {k: _plain(v) for k, v in asdict(self).items() if k != "effect_label" or v}  # older files lack it
        out["summary"] = self.summary()
        return out


@dataclass(frozen=True)
class BootstrapResult:
    """Two-way cluster bootstrap of the difference of group means of the cells (b minus a)."""

    group_a: str
    group_b: str
    unit: str
    n_events_a: int
    n_events_b: int
    n_templates: int
    estimate: float
    ci_low: float
    ci_high: float
    confidence: float
    n_bootstrap: int
    seed: int
    method: str

    def summary(self) -> str:
        conf = f"{100 * self.confidence:g}%"
        return (f"two-way cluster bootstrap (events within group and templates resampled, {self.n_bootstrap} "
                f"resamples): {self.group_b} - {self.group_a} = {self.estimate:+.4g} [{conf} CI {self.ci_low:+.4g}, "
                f"{self.ci_high:+.4g}]")

    def to_dict(self) -> dict[str, Any]:
        out = {k: _plain(v) for k, v in asdict(self).items()}
        out["summary"] = self.summary()
        return out


def _plain(v: Any) -> Any:
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _fmt_p(p: float) -> str:
    if not math.isfinite(p):
        return "nan"
    return f"{p:.3g}" if p >= 1e-3 else f"{p:.2e}"


def cell_values(segments: pd.DataFrame, *, value: str = "instability", event_col: str = "event_id",
                template_col: str = "template_id", group_col: str = "group", extra: tuple[str, ...] = ()) -> pd.DataFrame:
    """One row per (event, template) cell: ``[event_col, template_col, group_col, value, "n_segments"]``,
    ``value`` the mean over the cell's non-NaN segment rows (cells with none are dropped). When
    ``group_col`` varies within an (event, template) (a paired study's ``condition``), one cell per
    (event, template, group); ``extra`` columns (e.g. ``dose``) are carried along (their first value)."""
    missing = [c for c in (event_col, template_col, group_col, value, *extra) if c not in segments.columns]
    if missing:
        raise ValueError(f"missing column(s) {missing}; have {list(segments.columns)}")
    seg = segments[segments[value].notna()]
    return (seg.groupby([event_col, template_col, group_col], sort=True)
            .agg(**{c: (c, "first") for c in extra}, **{value: (value, "mean"), "n_segments": (value, "size")})
            .reset_index())


def cell_matrix(cells: pd.DataFrame, group: str, templates: list[str], *, value: str = "instability",
                event_col: str = "event_id", template_col: str = "template_id",
                group_col: str = "group") -> np.ndarray:
    """The cells of one group as an ``[n_events, n_templates]`` array (NaN where a cell is missing),
    events sorted by id, templates in the order given."""
    sub = cells[cells[group_col] == group]
    wide = sub.pivot(index=event_col, columns=template_col, values=value).reindex(columns=templates)
    return wide.sort_index().to_numpy(dtype=float)


def _pick(cells: pd.DataFrame, groups: tuple[str, str], group_col: str) -> pd.DataFrame:
    present = set(cells[group_col])
    for g in groups:
        if g not in present:
            raise ValueError(f"group {g!r} not found in column {group_col!r}; have {sorted(map(str, present))}")
    return cells[cells[group_col].isin(groups)].copy()


def crossed_mixed_model(cells: pd.DataFrame, groups: tuple[str, str] = ("benign", "contradictory"), *,
                        value: str = "instability", event_col: str = "event_id", template_col: str = "template_id",
                        group_col: str = "group", confidence: float = 0.95) -> MixedResult:
    """Fit ``value ~ group`` with crossed random intercepts for event and template (REML) on the cells
    of ``groups`` (the others are ignored). With one template the template component is left out (and
    reported as 0 with a warning). Raises ``ValueError`` naming the group when it has fewer than
    :data:`MIN_EVENTS_PER_GROUP` events."""
    a, b = groups
    data = _pick(cells, groups, group_col)
    n_ev = data.groupby(group_col)[event_col].nunique()
    for g in groups:
        if n_ev.get(g, 0) < MIN_EVENTS_PER_GROUP:
            raise ValueError(f"group {g!r} has {int(n_ev.get(g, 0))} events; the mixed model needs at least "
                             f"{MIN_EVENTS_PER_GROUP}")
    data = data.assign(_x=(data[group_col] == b).astype(float))
    return _fit_crossed(data, value, event_col, template_col, confidence, group_a=str(a), group_b=str(b),
                        n_events_a=int(n_ev.get(a, 0)), n_events_b=int(n_ev.get(b, 0)),
                        unit=f"event x template cell (mean segment {value} of one batch)" if value == "instability"
                        else f"event x template cell (mean {value} of one batch)")


def dose_mixed_model(cells: pd.DataFrame, *, dose_col: str = "dose", value: str = "instability",
                     event_col: str = "event_id", template_col: str = "template_id",
                     confidence: float = 0.95) -> MixedResult:
    """Fit ``value ~ dose`` (dose a numeric fixed effect) with crossed random intercepts for event and
    template (REML) on the cells of a dose study, one row per (event, template, dose). ``effect`` is
    the slope: the change of ``value`` per unit of dose; ``group_a`` / ``group_b`` name the lowest and
    the highest dose. Raises ``ValueError`` with fewer than :data:`MIN_EVENTS_PER_GROUP` events or 2 doses."""
    if dose_col not in cells.columns:
        raise ValueError(f"missing column {dose_col!r}; have {list(cells.columns)}")
    doses = sorted(cells[dose_col].dropna().unique())
    n_events = int(cells[event_col].nunique())
    if len(doses) < 2 or n_events < MIN_EVENTS_PER_GROUP:
        raise ValueError(f"the dose model needs at least 2 doses and {MIN_EVENTS_PER_GROUP} events, got "
                         f"{len(doses)} doses and {n_events} events")
    data = cells[cells[dose_col].notna()].assign(_x=lambda d: d[dose_col].astype(float))
    fit = _fit_crossed(data, value, event_col, template_col, confidence, group_a=f"{dose_col} {doses[0]:g}",
                       group_b=f"{dose_col} {doses[-1]:g}", n_events_a=n_events, n_events_b=n_events,
                       unit=f"event x template x {dose_col} cell (mean {value} of one batch)")
    return replace(fit, effect_label=f"slope of {value} per unit {dose_col}",
                   method=fit.method.replace("the group effect", f"the {dose_col} slope (numeric fixed effect)"))


def _fit_crossed(data: pd.DataFrame, value: str, event_col: str, template_col: str, confidence: float, *,
                 group_a: str, group_b: str, n_events_a: int, n_events_b: int, unit: str) -> MixedResult:
    """Fit ``value ~ _x`` (``_x`` a column of ``data``) with crossed random intercepts for event and
    template as variance components of one all-covering group (REML); the effect is ``_x``'s coefficient."""
    from scipy import stats as sps
    from statsmodels.regression.mixed_linear_model import MixedLM  # here: only the mixed model needs it

    data = data.assign(_event=data[event_col].astype(str), _template=data[template_col].astype(str))
    n_templates = int(data["_template"].nunique())
    vc = {"event": "0 + C(_event)"}
    if n_templates >= 2:
        vc["template"] = "0 + C(_template)"
    model = MixedLM.from_formula(f"{value} ~ _x", data=data, groups=np.ones(len(data)), vc_formula=vc,
                                    re_formula="0")
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        fit = model.fit(reml=True)
    caught = sorted({str(w.message).splitlines()[0] for w in ws})
    names = list(model.exog_vc.names)
    vcomp = dict(zip(names, np.asarray(fit.vcomp, dtype=float)))
    var_event = float(vcomp.get("event", 0.0))
    var_template = float(vcomp.get("template", 0.0))
    if n_templates < 2:
        caught.append("one template only: the template variance cannot be estimated and is left out")
    var_res = float(fit.scale)
    total = var_event + var_template + var_res
    effect, se = float(fit.fe_params["_x"]), float(fit.bse_fe["_x"])
    z = float(sps.norm.ppf(0.5 + confidence / 2))
    p = float(2 * sps.norm.sf(abs(effect / se))) if se > 0 else float("nan")
    return MixedResult(
        group_a=group_a, group_b=group_b, unit=unit,
        n_cells=int(len(data)), n_events=int(data["_event"].nunique()), n_templates=n_templates,
        n_events_a=n_events_a, n_events_b=n_events_b, effect=effect, se=se,
        ci_low=effect - z * se, ci_high=effect + z * se, p_value=p, confidence=float(confidence),
        var_event=var_event, var_template=var_template, var_residual=var_res,
        icc_event=var_event / total if total > 0 else float("nan"),
        icc_template=var_template / total if total > 0 else float("nan"),
        converged=bool(fit.converged), warnings=caught,
        method="statsmodels MixedLM, REML, crossed random intercepts (event, template) as variance components "
               "of one group; Wald z interval and p for the group effect",
    )


def _boot_means(y: np.ndarray, w_events: np.ndarray, w_templates: np.ndarray) -> np.ndarray:
    """Weighted means of ``y`` ``[E, T]`` (NaN = missing) for weights ``[B, E]`` x ``[B, T]`` -> ``[B]``."""
    mask = np.isfinite(y)
    y0 = np.where(mask, y, 0.0)
    num = np.einsum("be,et,bt->b", w_events, y0, w_templates)
    den = np.einsum("be,et,bt->b", w_events, mask.astype(float), w_templates)
    with np.errstate(invalid="ignore", divide="ignore"):
        return num / den


def two_way_cluster_bootstrap(cells: pd.DataFrame, groups: tuple[str, str] = ("benign", "contradictory"), *,
                              value: str = "instability", event_col: str = "event_id",
                              template_col: str = "template_id", group_col: str = "group",
                              n_bootstrap: int = 2000, confidence: float = 0.95, seed: int = 0) -> BootstrapResult:
    """Percentile interval of ``mean(cells of b) - mean(cells of a)`` resampling events within each group
    and templates (one draw shared by both groups, as the design crosses them), seeded."""
    a, b = groups
    data = _pick(cells, groups, group_col)
    templates = sorted(data[template_col].astype(str).unique())
    data = data.assign(**{template_col: data[template_col].astype(str)})
    ya, yb = (cell_matrix(data, g, templates, value=value, event_col=event_col, template_col=template_col,
                          group_col=group_col) for g in groups)
    for g, y in zip(groups, (ya, yb)):
        if y.shape[0] < 2:
            raise ValueError(f"group {g!r} has {y.shape[0]} events; the cluster bootstrap needs at least 2")
    rng = np.random.default_rng(seed)
    n_t = len(templates)

    def counts(n: int) -> np.ndarray:
        return rng.multinomial(n, np.full(n, 1.0 / n), size=n_bootstrap).astype(float)

    wt = counts(n_t)
    diffs = _boot_means(yb, counts(yb.shape[0]), wt) - _boot_means(ya, counts(ya.shape[0]), wt)
    ones_t = np.ones((1, n_t))
    estimate = float(_boot_means(yb, np.ones((1, yb.shape[0])), ones_t)[0]
                     - _boot_means(ya, np.ones((1, ya.shape[0])), ones_t)[0])
    alpha = (1 - confidence) / 2
    low, high = np.nanquantile(diffs, [alpha, 1 - alpha])
    return BootstrapResult(
        group_a=str(a), group_b=str(b), unit="event x template cell (mean segment instability of one batch)",
        n_events_a=int(ya.shape[0]), n_events_b=int(yb.shape[0]), n_templates=n_t, estimate=estimate,
        ci_low=float(low), ci_high=float(high), confidence=float(confidence), n_bootstrap=int(n_bootstrap),
        seed=int(seed),
        method="two-way cluster bootstrap: events resampled with replacement within each group, templates "
               "resampled with replacement (one draw for both groups), difference of the mean cell values; "
               "percentile interval",
    )
