"""A study run planned once, where the request enters (``POST /api/study`` and ``POST /api/jobs/study``
through :func:`petri.web.api.requests.prepare_study`, the UI's Study tab through the same, the
command line's ``petri study``), and passed whole down to :func:`petri.study.execution.runner.run_study`, as a
seed's :class:`~petri.core.plan.SeedPlan` is.

A :class:`StudyPlan` is checked when it is made: ``samples`` at least 1, the study's language has
its noun analyser here (:meth:`~petri.study.schema.Study.noun_method`), every template id named is
the study's. Nothing here loads a model.
"""

from __future__ import annotations

from dataclasses import dataclass

from petri.core.settings import FamilySettings
from petri.study.schema import Study, Template


@dataclass(frozen=True)
class StudyPlan:
    """A study run: the ``study``, ``samples`` layouts per (event, template) batch, the base ``seed``
    (each batch's seed derives from it and the batch's ids), the sampler ``settings`` (``None``: the
    model's, or the executor's, defaults, read when it runs) and the ``templates`` run (ids, study
    order kept; ``None``: all of them). Raises ``ValueError`` (``samples``) or
    :class:`~petri.study.checks.StudyError` (``language``, ``templates``) naming the field."""

    study: Study
    samples: int = 12
    seed: int = 0
    settings: FamilySettings | None = None
    templates: tuple[str, ...] | None = None

    def __post_init__(self):
        if self.samples < 1:
            raise ValueError(f"samples must be >= 1, got {self.samples}")
        if self.templates is not None:
            object.__setattr__(self, "templates", tuple(self.templates))
        self.study.noun_method()  # the analysis needs the language's noun analyser: refused before sampling
        self.study.select_templates(self.templates)

    @property
    def chosen(self) -> tuple[Template, ...]:
        """The templates run, in study order."""
        return self.study.select_templates(self.templates)

    @property
    def template_ids(self) -> tuple[str, ...]:
        return tuple(t.id for t in self.chosen)
