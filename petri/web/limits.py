"""The limits of a request to the web app (API and UI alike), and their wording for ``/api/health``.

Read a limit as ``limits.MAX_...`` where it may be changed at run time (tests lower
:data:`MAX_TRAJECTORY_CELLS`): every reader then sees the same value.
"""

from __future__ import annotations

# the settings' own bounds, which their fields declare (petri.core.settings): max_denoising_steps, t_min, t_max,
# and the seed's (every request's, the probe's too)
from petri.core.settings import MAX_SEED, MAX_STEPS, MIN_TEMPERATURE  # noqa: F401

MIN_CONCEPTS = 2
MAX_CONCEPTS = 8
MAX_CONCEPT_CHARS = 64
MAX_SAMPLES = 64
MAX_EVENTS = 24
#: an event's, a template's or a condition's text (a seed's or a study's); the probe's texts have their own
#: limit (:data:`MAX_PROBE_TEXT_CHARS`)
MAX_EVENT_TEXT_CHARS = 2000
MAX_GROUP_CHARS = 64
#: ``include_trajectories`` returns samples × steps × canvas integers per event; capped per response.
MAX_TRAJECTORY_CELLS = 8_000_000
#: Seconds a client is told to wait (``Retry-After``) when the model is busy.
RETRY_AFTER_S = 5
#: Largest request body (bytes) of a POST route; a bigger one is refused with 413 before it is parsed.
#: The largest valid seed request is far smaller (24 events of 2,000 characters).
MAX_BODY_BYTES = 1024 * 1024
#: Largest file the Gradio UI accepts (a study file); Gradio's own default is no limit at all.
MAX_UPLOAD_BYTES = 4 * 1024 * 1024
#: With ``busy_wait_s`` > 0, a model request is admitted while at most this many API model jobs are
#: in flight (running or waiting for the one-job lock), so at most ``MAX_QUEUED + 1`` are: one running
#: and ``MAX_QUEUED`` waiting, or ``MAX_QUEUED + 1`` waiting while the UI holds the model. One more is
#: refused with 503, so waiting requests never hold every worker thread of the server.
MAX_QUEUED = 8
#: (event, template) batches of one study run from the web (``python -m petri study`` has no limit).
MAX_STUDY_BATCHES = 600
#: The work one synchronous ``POST /api/seed`` may ask for, in token-steps (events × samples × max
#: steps × canvas). The embedded model on a 2-core CPU does about 3,700 token-steps a second
#: (12 samples × 32 steps × 64 positions in 6.6 s), so this is about a minute and a half there;
#: larger work goes to ``POST /api/jobs/seed``.
SYNC_MAX_TOKEN_STEPS = 400_000
#: Jobs that may wait in the job queue at once (``POST /api/jobs/*``); one more is a 503.
MAX_QUEUED_JOBS = 16

#: The probe (``POST /api/probe``): the probe's own limits (questions per request, alternatives per
#: question, denoising steps read, noise draws, full-vocabulary top-k, items of a labelled set), the
#: characters of a question's name or an alternative, and how often the web reads a set (repeats).
from petri.core.probe import MAX_ALTERNATIVES, MAX_TOP_K  # noqa: E402
from petri.core.probe import MAX_ITEMS as MAX_PROBE_ITEMS  # noqa: E402
from petri.core.probe import MAX_QUESTIONS as MAX_PROBE_QUESTIONS  # noqa: E402
from petri.core.probe import MAX_SAMPLES as MAX_PROBE_DRAWS  # noqa: E402
from petri.core.probe import MAX_STEPS as MAX_PROBE_STEPS  # noqa: E402
from petri.core.probe import MAX_TEXT_CHARS as MAX_PROBE_TEXT_CHARS  # noqa: E402

MAX_PROBE_NAME_CHARS = 64
MAX_PROBE_REPEATS = 10

LIMITS = {
    "concepts": f"{MIN_CONCEPTS}-{MAX_CONCEPTS} per request, each 1-{MAX_CONCEPT_CHARS} characters, "
    "no control characters, no leading/trailing whitespace, no duplicates",
    "samples": f"1-{MAX_SAMPLES} per event",
    "events": f"1-{MAX_EVENTS} per request",
    "text": f"event and template at most {MAX_EVENT_TEXT_CHARS} characters each; group labels at most "
    f"{MAX_GROUP_CHARS}",
    "max_denoising_steps": f"1-{MAX_STEPS}",
    "temperature": f"t_min and t_max {MIN_TEMPERATURE}-10",
    "template": "placeholders {event} and {concepts} only (no format specs or attributes); "
    "the prompt plus the canvas must fit the model's positions",
    "seed": f"0-{MAX_SEED}",
    "positions": "one canvas start per concept; every anchor must fit the free canvas without overlap",
    "include_trajectories": f"at most {MAX_TRAJECTORY_CELLS:,} argmax values (events × samples × steps × canvas) "
    "per response",
    "body": f"at most {MAX_BODY_BYTES:,} bytes of JSON per request (else 413)",
    "study": f"at most {MAX_STUDY_BATCHES} (event, template) batches; concepts, events, templates and groups "
    "within the limits above",
    "probe": f"POST /api/probe: 1-{MAX_PROBE_QUESTIONS} questions of 1-{MAX_ALTERNATIVES} alternatives "
    f"(names and alternatives 1-{MAX_PROBE_NAME_CHARS} characters; the prompt, frame, instructions, a question's "
    f"text, a pin and an item's prompt 1-{MAX_PROBE_TEXT_CHARS:,}), steps 1-{MAX_PROBE_STEPS}, samples "
    f"1-{MAX_PROBE_DRAWS} or \"auto\", top_k 1-{MAX_TOP_K}; a labelled set (items or a shipped set) at most "
    f"{MAX_PROBE_ITEMS} items, repeats 1-{MAX_PROBE_REPEATS}, runs as a job",
    "sync_seed": f"POST /api/seed: at most {SYNC_MAX_TOKEN_STEPS:,} token-steps (events × samples × "
    "max_denoising_steps × canvas); larger work: POST /api/jobs/seed",
}
