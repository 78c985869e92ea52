"""The access rule of :mod:`petri.web.access` on the UI's side: a browser is a caller, its handlers
and the files Gradio serves answer only to it.

- **Who**: on a public server the first page a browser loads sets a server-issued token in the
  HttpOnly cookie ``petri_caller`` (:class:`CallerMiddleware`); every Gradio event handler reads it
  (or an ``X-Petri-Token`` header) through ``gr.Request`` (:meth:`UiAccess.caller`). A client that
  calls ``/gradio_api/call/<handler>`` without it is a caller with no token: it lists nothing and
  opens nothing.
- **What**: a run id that reaches a handler (Open, the sample slider, anything else) goes through
  :meth:`UiAccess.open_run` (the rule of :meth:`~petri.web.access.Caller.may_open`); another
  caller's run reads as "no stored run", as the API's 404 does.
- **Files**: a caller's downloads are written into its own folder under Gradio's cache,
  ``<cache>/petri-exports/<key>/`` (:func:`export_dir`), where ``key`` is an HMAC of the caller's
  owner id under a secret of this process (unguessable, and no token in a path). Gradio serves a
  file of its cache in place, so :class:`CallerMiddleware` answers ``/gradio_api/file=`` (and its
  older spellings) for a path in that folder only to the caller whose key it carries; anyone else
  gets a 404. On a local server every caller shares one folder, as everything else is shared.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path
from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import JSONResponse

from petri.web.access import CALLER_COOKIE, CALLER_HEADER, AccessPolicy, Caller, TokenError, caller_from, new_token

#: The Gradio routes that serve a file by path.
FILE_ROUTES = ("/gradio_api/file=", "/file=", "/gradio_api/file/", "/file/")
#: Keys each caller's download folder (this process only: a restart starts new folders).
_FOLDER_SECRET = secrets.token_bytes(32)


def export_root() -> Path:
    """``<Gradio's cache>/petri-exports``: the parent of every caller's download folder."""
    from gradio.utils import get_upload_folder  # what each Block's GRADIO_CACHE is

    return Path(os.path.abspath(get_upload_folder())) / "petri-exports"


def folder_key(caller: Caller) -> str:
    """The name of ``caller``'s download folder: ``shared`` without an owner (a local server)."""
    if caller.owner is None:
        return "shared"
    return hmac.new(_FOLDER_SECRET, caller.owner.encode(), hashlib.sha256).hexdigest()[:32]


def export_dir(caller: Caller | None) -> Path:
    """The folder ``caller``'s downloads are written into (created when first asked)."""
    folder = export_root() / folder_key(caller or Caller(public=False))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def served_path(path: str) -> list[Path]:
    """The file paths a Gradio file route for URL path ``path`` may open (the path as given and
    once more unquoted), normalised; empty for any other route."""
    for prefix in FILE_ROUTES:
        if path.startswith(prefix):
            rest = path[len(prefix):]
            return [Path(os.path.abspath(p)) for p in {rest, unquote(rest)} if p]
    return []


def may_fetch(caller: Caller, files: list[Path], root: Path) -> bool:
    """False when one of ``files`` lies in a download folder (under ``root``) that is not ``caller``'s."""
    mine = root / folder_key(caller)
    for file in files:
        for form in {file, Path(os.path.realpath(file))}:
            if form.is_relative_to(root) and not form.is_relative_to(mine):
                return False
    return True


class CallerMiddleware:
    """ASGI middleware of a public server's UI: a 400 for a malformed ``X-Petri-Token`` on a UI
    path, the ``petri_caller`` cookie on the first UI response of a browser without one, and a 404
    for a Gradio file route naming another caller's download."""

    def __init__(self, app, policy: AccessPolicy):
        self.app, self.policy = app, policy

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "")
        if scope["type"] != "http" or not self.policy.public or path.startswith("/api/"):
            return await self.app(scope, receive, send)
        request = Request(scope)
        try:
            caller = caller_from(self.policy, request.headers, request.cookies)
        except TokenError as err:
            return await JSONResponse({"detail": str(err)}, status_code=400)(scope, receive, send)
        files = served_path(path)
        if files and not may_fetch(caller, files, export_root()):
            return await JSONResponse({"detail": "file: not found"}, status_code=404)(scope, receive, send)
        if caller.token is not None:
            return await self.app(scope, receive, send)
        cookie = _cookie(new_token(), secure=_is_https(request))

        async def send_with_cookie(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"set-cookie", cookie.encode())]}
            await send(message)

        return await self.app(scope, receive, send_with_cookie)


def _is_https(request: Request) -> bool:
    return request.url.scheme == "https" or request.headers.get("x-forwarded-proto", "") == "https"


def _cookie(token: str, secure: bool) -> str:
    """The ``Set-Cookie`` value: HttpOnly; over HTTPS also ``SameSite=None; Secure`` (a Hugging Face
    Space runs in a frame of another site), else ``SameSite=Lax``."""
    same_site = "SameSite=None; Secure" if secure else "SameSite=Lax"
    return f"{CALLER_COOKIE}={token}; Path=/; Max-Age=31536000; HttpOnly; {same_site}"


class UiAccess:
    """The UI handlers' side of the access rule (one per app, over its :class:`AccessPolicy`)."""

    def __init__(self, policy: AccessPolicy = AccessPolicy()):
        self.policy = policy

    def caller(self, request) -> Caller:
        """The caller of a Gradio event (its ``gr.Request``; None: a direct call, local)."""
        if request is None:
            return Caller(public=self.policy.public)
        try:
            return caller_from(self.policy, getattr(request, "headers", None) or {}, getattr(request, "cookies", None) or {})
        except TokenError as err:
            import gradio as gr

            raise gr.Error(str(err), title="Who are you?") from None

    def submitter(self, request) -> Caller:
        """The caller of a handler that stores a run: on a public server it needs its cookie."""
        caller = self.caller(request)
        if caller.public and caller.token is None:
            import gradio as gr

            raise gr.Error(f"this server is public and keeps each visitor's runs private: it needs the "
                           f"{CALLER_COOKIE} cookie it set when the page loaded (allow cookies for this site "
                           f"and reload), or an {CALLER_HEADER} header", title="Who are you?")
        return caller

    @staticmethod
    def open_run(service, caller: Caller, run_id: str) -> dict:
        """Stored run ``run_id`` if ``caller`` may open it, else ``gr.Error`` (another caller's run
        reads as a run that is not there)."""
        import gradio as gr

        from petri.runs.store import check_run_id

        try:
            run_id = check_run_id((run_id or "").strip())
        except ValueError as err:
            raise gr.Error(str(err), title="Runs") from None
        run = service.get_run(run_id)
        if run is None or not caller.may_open(service, run_id):
            raise gr.Error(f"run_id: no stored run {run_id!r}", title="Runs")
        return run
