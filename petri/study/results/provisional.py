"""A study's statistics while it runs: the numbers of the batches stored so far, computed by the very
functions the final analysis uses (:func:`petri.study.results.analysis.study_tables`,
:func:`~petri.study.results.analysis.events_table`, :func:`petri.stats.groups.compare_levels`), so once every batch
is in they are the final numbers. The UI redraws the instability figure, the ranked events and the
event-level Mann-Whitney from them as batches land. Never imports torch.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import pandas as pd

from petri.core.wording import counted
from petri.runs.store import RunStore
from petri.stats.groups import LevelComparisons, compare_levels
from petri.study.execution.runner import StudyBatch, batch_key, split_key, study_batch
from petri.study.results.analysis import batch_tables, events_table, group_summary_table, study_tables
from petri.study.results.statistics import PEEKING_WARNING
from petri.study.schema import Study

#: The tidy tables the provisional statistics are computed from.
PROVISIONAL_TABLES = ("segments", "samples")


@dataclass
class ProvisionalStatistics:
    """The statistics of ``batches_done`` of ``batches_total`` batches.

    ``events``: one :func:`~petri.study.results.analysis.events_table` row per event with at least one batch
    (an event whose templates are not all in yet counts with the ones that are); ``segments``: the
    segments table of those batches; ``comparison``: the event-level and segment-level tests of the
    study's compared groups, or ``None`` until each group has 2 events (``waiting`` says why);
    ``events_per_group``: events so far per group label (every study group, 0 where none yet).
    """

    batches_done: int
    batches_total: int
    events: pd.DataFrame
    segments: pd.DataFrame
    comparison: LevelComparisons | None
    events_per_group: dict[str, int]
    waiting: str = ""

    @property
    def groups_table(self) -> pd.DataFrame:
        """The groups table of the batches so far (:func:`~petri.study.results.analysis.group_summary_table`;
        with every batch in, the final analysis's ``group_summary``)."""
        if self.events.empty:
            return pd.DataFrame()
        return group_summary_table(self.events, self.segments, list(self.events_per_group))

    @property
    def final(self) -> bool:
        return self.batches_done >= self.batches_total

    @property
    def warning(self) -> str:
        """Why provisional numbers must not decide when to stop (:data:`PEEKING_WARNING`); ``""`` once final."""
        return "" if self.final else PEEKING_WARNING

    def label(self) -> str:
        """``"provisional: 12 of 36 batches; events so far: benign 3, contradictory 2"`` or ``"final: …"``."""
        counts = ", ".join(f"{g} {n}" for g, n in self.events_per_group.items())
        state = "final" if self.final else "provisional"
        return f"{state}: {self.batches_done} of {counted(self.batches_total, 'batch')}; events so far: {counts}"


def provisional_statistics(
    study: Study,
    batches: Sequence[StudyBatch],
    batches_total: int,
    max_steps: int,
    *,
    seed: int = 0,
    n_bootstrap: int = 2000,
    confidence: float = 0.95,
    tables_of: Callable[[StudyBatch], dict[str, pd.DataFrame]] | None = None,
) -> ProvisionalStatistics:
    """The statistics of the batches so far (``batches`` in any order, put in the runner's order
    here; each is one (event, template) batch). ``seed`` is the study's base seed (the bootstrap and permutation seeds of the final
    analysis). With every batch of the run in, ``events`` and ``comparison`` equal
    :func:`petri.study.results.analysis.analyze`'s ``events`` and ``comparison``. ``tables_of`` gives a
    batch's segments and samples tables (:meth:`BatchReader.tables` keeps them; default: built here)."""
    groups = {g: 0 for g in study.groups}
    if not batches:
        return ProvisionalStatistics(0, batches_total, pd.DataFrame(), pd.DataFrame(), None, groups,
                                     "no batch is in yet")
    # the runner's order (events outer, templates inner, both in study order): the bootstrap resamples
    # segment rows by index, so the same rows in another order would give another CI
    event_order = {e.id: i for i, e in enumerate(study.events)}
    template_order = {t.id: i for i, t in enumerate(study.templates)}
    condition_order = {c.id: i for i, c in enumerate(study.conditions)}
    ordered = sorted(batches, key=lambda b: (event_order[b.event_id], template_order[b.template_id],
                                             condition_order.get(b.condition, 0)))
    tables = study_tables(list(ordered), study.id, names=PROVISIONAL_TABLES, tables_of=tables_of)
    events = events_table(tables, study, max_steps, n_boot=n_bootstrap, confidence=confidence, seed=seed)
    events = events[events["n_samples"] > 0].reset_index(drop=True)
    for g, n in events.groupby("group", sort=False).size().items():
        groups[g] = int(n)
    if len(study.comparison) < 2:
        return ProvisionalStatistics(len(batches), batches_total, events, tables["segments"], None, groups,
                                     "a paired study with one group has no group test")
    a, b = study.comparison
    comparison, waiting = None, ""
    if min(groups.get(a, 0), groups.get(b, 0)) < 2:
        waiting = f"the test needs 2 events in each of {a} and {b} (so far {groups.get(a, 0)} and {groups.get(b, 0)})"
    else:
        try:
            comparison = compare_levels(tables["segments"], group_col="group", groups=(a, b), event_col="event_id",
                                        n_bootstrap=n_bootstrap, confidence=confidence, seed=seed)
        except ValueError as err:  # e.g. an event with no observed segment yet
            waiting = str(err)
    return ProvisionalStatistics(len(batches), batches_total, events, tables["segments"], comparison, groups, waiting)


def stored_batches(store: RunStore, run_id: str, study: Study, template_ids: Sequence[str], seed: int,
                   skip: Collection[str] = ()) -> list[StudyBatch]:
    """The batches of study run ``run_id`` stored so far (read from the store while the run goes on),
    as the runner returns them: only the chosen templates, each with its group and batch seed;
    those whose keys are in ``skip`` are not read."""
    events = {e.id for e in study.events}
    conditions = {c.id for c in study.conditions} if study.paired else {""}
    chosen = set(template_ids)
    out = []
    for key, _, traj in store.load_events(run_id, skip=skip):
        event_id, template_id, condition = split_key(key)
        if (template_id in chosen and event_id in events and condition in conditions
                and key == batch_key(event_id, template_id, condition)):
            out.append(study_batch(study, key, seed, traj))
    return out


class BatchReader:
    """The stored batches of one study run, read as they land: each :meth:`read` decodes only the
    batches stored since the previous one, and :meth:`tables` builds each batch's tables once, so
    following a run costs the same per batch at its end as at its start (but the concatenation
    and the statistics)."""

    def __init__(self, store: RunStore, run_id: str, study: Study, template_ids: Sequence[str], seed: int):
        self.store, self.run_id, self.study, self.template_ids, self.seed = store, run_id, study, tuple(template_ids), seed
        self._held: dict[str, StudyBatch] = {}
        self._tables: dict[str, dict[str, pd.DataFrame]] = {}

    def read(self) -> list[StudyBatch]:
        """Every batch of the run stored so far."""
        for batch in stored_batches(self.store, self.run_id, self.study, self.template_ids, self.seed, skip=self._held):
            self._held[batch.key] = batch
        return list(self._held.values())

    def tables(self, batch: StudyBatch) -> dict[str, pd.DataFrame]:
        """``batch``'s :data:`PROVISIONAL_TABLES` (built on first use, then kept)."""
        if batch.key not in self._tables:
            self._tables[batch.key] = batch_tables(batch, self.study.id, PROVISIONAL_TABLES)
        return self._tables[batch.key]
