"""A local stand-in of the ZeroGPU device API that the real ``spaces`` package calls, for running
``spaces.GPU`` in ZeroGPU mode off-Space (tests/web/test_zerogpu_spaces.py).

The endpoints and their answers are those ``spaces`` 0.51.3 expects (``spaces/zero/api.py``,
``spaces/zero/client.py``; read, not copied): ``POST /startup-report`` (200), ``POST /schedule``
(query ``cgroupPath``, ``taskId``, ``enableQueue``, ``tokenVersion``, ``durationSeconds``,
``gpuSize``, ``token``; 200 with JSON ``idle``, ``nvidiaIndex``, ``nvidiaUUID``, ``allowToken``),
``POST /allow`` (``allowToken``, ``pid``: the forked child that may use the GPU; 200), ``POST
/release`` (``allowToken``, ``fail``; 200) and ``GET /queue-size``. Every request is recorded
(:attr:`DeviceApi.calls`). What the platform does behind them (quota, queueing, a GPU per
allowed pid, killing a child past its duration) is not stood in for, except one thing a test asks
for: :attr:`DeviceApi.kill_after_allow_s` kills the allowed child that long after ``/allow``, as the
platform ends a task whose time ran out.

    with DeviceApi() as api:   # api.url → SPACES_ZERO_DEVICE_API_URL
        ...
    api.calls                  # [("schedule", {"taskId": "…", …}), ("allow", {…}), …]
"""

from __future__ import annotations

import json
import os
import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

#: The GPU UUID every schedule answers with.
GPU_UUID = "GPU-00000000-petri-standin"


class DeviceApi:
    """The stand-in, served on a free loopback port in a thread while used as a context manager.
    ``idle``: what each ``/schedule`` answers for ``idle`` (whether the last child may be reused),
    one value per call in order (then False)."""

    def __init__(self, idle: tuple[bool, ...] = ()):
        self.calls: list[tuple[str, dict[str, str]]] = []
        self.idle = list(idle)
        self.kill_after_allow_s: float | None = None
        self._allowed = 0
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                self._answer()

            def do_POST(self) -> None:
                self._answer()

            def _answer(self) -> None:
                url = urlsplit(self.path)
                name, params = url.path.strip("/"), dict(parse_qsl(url.query))
                api.calls.append((name, params))
                body: object = None
                if name == "schedule":
                    api._allowed += 1
                    idle = api.idle.pop(0) if api.idle else False
                    body = {"idle": idle, "nvidiaIndex": 0, "nvidiaUUID": GPU_UUID,
                            "allowToken": f"allow-{api._allowed}"}
                elif name == "allow" and api.kill_after_allow_s is not None:
                    pid = int(params["pid"])
                    threading.Timer(api.kill_after_allow_s, lambda: _kill(pid)).start()
                elif name == "queue-size":
                    body = 0.0
                elif name not in ("startup-report", "allow", "release"):
                    self.send_response(404)
                    self.end_headers()
                    return
                data = json.dumps(body).encode() if body is not None else b""
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def named(self, name: str) -> list[dict[str, str]]:
        """The parameters of every recorded call to endpoint ``name``, oldest first."""
        return [params for called, params in self.calls if called == name]

    def __enter__(self) -> DeviceApi:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
