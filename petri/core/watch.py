"""What a caller watches a run through and stops it with, as one object that travels down the seed,
study and probe paths (the edge → the service → the runner) instead of separate ``on_step``,
``progress``, ``cancel`` and ``show_progress`` arguments.

Below the service the pieces part again: a sampler takes ``on_step`` and ``cancel`` (the
:class:`~petri.engine.base.SamplingModel` protocol), a study executor ``cancel``. :data:`NO_WATCH`
is the default: nobody watches, nothing cancels, no progress bar.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from petri.core.cancel import CancelToken


@dataclass(frozen=True)
class Watch:
    """How a run is watched and stopped.

    Attributes:
        on_step: called with every denoising step (a :class:`~petri.engine.base.LiveStep`) for the
            live views; costs a host copy per step, so ``None`` unless someone draws them.
        progress: called as the run advances: a study with a
            :class:`~petri.study.execution.runner.StudyProgress` after each stored (or found stored) batch, a
            seed with the index of the event whose steps come next (before its first step). An
            exception it raises aborts the run (what is stored stays).
        cancel: stops the run within one denoising step (:class:`~petri.core.cancel.Cancelled`).
        show_progress: draw a tqdm bar on stderr (the command line's study).
    """

    on_step: Callable[[Any], None] | None = None
    progress: Callable[[Any], None] | None = None
    cancel: CancelToken | None = None
    show_progress: bool = False

    def cancelled_by(self, token: CancelToken) -> Watch:
        """This watch, stopped by ``token`` (the service's token for a synchronous call, a job's own)."""
        return replace(self, cancel=token)


#: Nobody watches, nothing cancels, no bar.
NO_WATCH = Watch()
