"""What the edges (the HTTP routes, the UI, the server) read through the service: the stored runs
and jobs, and the served model's facts. Mixed into :class:`petri.app.service.PetriService`, so an
edge asks the service (``service.load_events(run_id)``) and never reaches through it into the run
store or the loaded model (``service.store.load_events``)."""

from __future__ import annotations

from typing import Any

from petri.core.settings import FamilySettings
from petri.core.trajectory import Trajectory
from petri.engine.base import EngineFacts, SamplingModel
from petri.runs.store import RunStore


class RunsView:
    """The reads of a service that holds ``store`` (a :class:`~petri.runs.store.RunStore`) and
    ``lm`` (a :class:`~petri.engine.base.SamplingModel`)."""

    store: RunStore
    lm: SamplingModel

    # ------------------------------------------------------------------------------ stored runs
    def get_run(self, run_id: str) -> dict[str, Any] | None:
        """The stored run's row (status, kind, model, request, times), ``None`` if there is none."""
        return self.store.get_run(run_id)

    def load_events(self, run_id: str) -> list[tuple[str, str | None, Trajectory]]:
        """The run's stored events in order: ``(key, group, trajectory)``."""
        return self.store.load_events(run_id)

    def load_results(self, run_id: str) -> dict[str, Any]:
        """The documents a probe run stores (a read, an evaluation's tables), by name."""
        return self.store.load_results(run_id)

    def runs_for(self, owner: str | None, limit: int, public: bool) -> list[dict[str, Any]]:
        """The stored runs a caller may list, newest first: every run on a local server; on a
        public one the runs of ``owner`` (none without an owner)."""
        if not public:
            return self.store.list_runs(limit)
        return self.store.list_owned_runs(owner, limit) if owner else []

    def owns_run(self, run_id: str, owner: str | None) -> bool:
        """Whether ``owner`` submitted the stored run (a public server's rule for opening it)."""
        return self.store.owns_run(run_id, owner)

    def remove_run(self, run_id: str, owner: str | None) -> None:
        """Delete a stored run (``owner``: only if it is theirs; ``None``: any run, a local server)."""
        self.store.remove_run(run_id, owner)

    @property
    def store_path(self) -> str:
        """Where the run store lives (the Model tab and a reopened study's report name it)."""
        return str(self.store.path)

    def close_store(self) -> None:
        """Close the run store (a server that exits, after :meth:`~petri.app.service.PetriService.shutdown`)."""
        self.store.close()

    # ------------------------------------------------------------------------------ stored jobs
    def stored_job(self, job_id: str) -> dict[str, Any] | None:
        """A job as the store recorded it (one no longer in the live queue), ``None`` if unknown."""
        return self.store.get_job(job_id)

    def stored_jobs(self, owner: str | None, limit: int, offset: int, any_owner: bool) -> list[dict[str, Any]]:
        """Recorded jobs newest first: ``owner``'s, or everyone's with ``any_owner``."""
        return self.store.list_jobs(owner, limit, offset, any_owner=any_owner)

    # ------------------------------------------------------------------------------ the model
    def model_info(self) -> dict[str, str | int]:
        """The served model: ``model_id``, ``device``, ``dtype``, ``canvas_length``, ``vocab_size``."""
        return self.lm.describe()

    def model_facts(self) -> EngineFacts:
        """What the served model is and how it runs, as data (:meth:`~petri.engine.base.SamplingModel.facts`)."""
        return self.lm.facts()

    def default_settings(self) -> FamilySettings:
        """The served model's sampler settings (its family's settings type)."""
        return self.lm.default_settings()

    @property
    def model_id(self) -> str:
        return self.lm.model_id

    @property
    def canvas_length(self) -> int:
        return self.lm.canvas_length
