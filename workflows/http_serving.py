"""What our web servers share: a body-size limit, security headers, and running under uvicorn.

The OpenAI-compatible endpoint (workflows/serve.py) and the human-study server
(workflows/study/app.py) both answer clients we do not control. Each refuses an oversized
body before anything parses it, binds loopback unless a host is named, and runs either on a
thread (tests, benchmarks) or in the foreground until interrupted (the experiments' mains).
Each app keeps its own error body and header set; the plumbing is written once, here.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any, Callable, Iterator, Mapping, Sequence

import uvicorn
from starlette import responses

LOOPBACK = "127.0.0.1"
ASGIApp = Callable[..., Any]


class BodyLimit:
  """ASGI middleware: a request body over `max_bytes`, on a path under `prefix`, is answered
  with `too_large(max_bytes)` (a 413 response in the app's own error format) before any route
  parses it: at once by its Content-Length, else as soon as the part read passes the limit
  (a body sent without a length). Paths elsewhere pass untouched, so one app can hold routes
  of different limits (a middleware per prefix)."""

  def __init__(self, app: ASGIApp, max_bytes: int,
               too_large: Callable[[int], responses.Response], prefix: str = "/"):
    self.app, self.max_bytes, self.too_large, self.prefix = app, max_bytes, too_large, prefix

  async def __call__(self, scope: Mapping[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http" or not scope["path"].startswith(self.prefix):
      return await self.app(scope, receive, send)
    length = dict(scope.get("headers", [])).get(b"content-length")
    if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
      return await self.too_large(self.max_bytes)(scope, receive, send)
    chunks, size, more = [], 0, True
    while more:
      message = await receive()
      if message["type"] != "http.request":  # The client left: let the app see it.
        return await self.app(scope, _replay([message]), send)
      chunks.append(message.get("body", b""))
      size += len(chunks[-1])
      if size > self.max_bytes:
        return await self.too_large(self.max_bytes)(scope, receive, send)
      more = message.get("more_body", False)
    body = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
    return await self.app(scope, _replay([body], receive), send)


def _replay(messages: list[Mapping[str, Any]], then: Any = None) -> Any:
  """An ASGI `receive` that gives `messages` first, then whatever `then` receives."""
  async def receive() -> Mapping[str, Any]:
    if messages:
      return messages.pop(0)
    if then is not None:
      return await then()
    return {"type": "http.disconnect"}
  return receive


class SecurityHeaders:
  """ASGI middleware: sets `headers` (name, value bytes pairs, replacing the app's own of
  those names) on every response, and `Cache-Control: no-store` on paths under any of the
  `no_store` prefixes (answers that hold a person's private state)."""

  def __init__(self, app: ASGIApp, headers: Sequence[tuple[bytes, bytes]],
               no_store: Sequence[str] = ()):
    self.app, self.headers, self.no_store = app, list(headers), tuple(no_store)
    self._replaced = {name.lower() for name, _ in self.headers}

  async def __call__(self, scope: Mapping[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
      return await self.app(scope, receive, send)
    replaced, added = self._replaced, self.headers
    if scope["path"].startswith(self.no_store):
      replaced = replaced | {b"cache-control"}
      added = added + [(b"cache-control", b"no-store")]

    async def send_with_headers(message: Mapping[str, Any]) -> None:
      if message["type"] == "http.response.start":
        headers = [h for h in message.get("headers", []) if h[0].lower() not in replaced]
        message = {**message, "headers": headers + added}
      await send(message)

    return await self.app(scope, receive, send_with_headers)


def bind(host: str = LOOPBACK, port: int = 0) -> socket.socket:
  """A TCP socket bound to host:port (port 0: a free one), IPv6 when the host is."""
  sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
  sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
  sock.bind((host, port))
  return sock


def base_url(host: str, sock: socket.socket) -> str:
  """`http://HOST:PORT` of a bound socket (the port it really got)."""
  return f"http://{f'[{host}]' if ':' in host else host}:{sock.getsockname()[1]}"


def free_port(host: str = LOOPBACK) -> int:
  """A port free at the moment, for a server whose address must be known before it starts
  (e.g. the study writes its links first)."""
  with bind(host, 0) as sock:
    return sock.getsockname()[1]


def _server(app: ASGIApp, lifespan: str) -> uvicorn.Server:
  return uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False,
                                       server_header=False, lifespan=lifespan))


@contextlib.contextmanager
def running(app: ASGIApp, host: str = LOOPBACK, port: int = 0, *,
            lifespan: str = "on") -> Iterator[str]:
  """Serves `app` with uvicorn on a thread while the block runs; yields its base URL.

  `lifespan="off"` skips the app's start-up and shutdown (a benchmark that serves one
  app's parties in several studies closes them itself).
  """
  sock = bind(host, port)
  server = _server(app, lifespan)
  thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
  thread.start()
  try:
    while not server.started:
      if not thread.is_alive():
        raise RuntimeError("the server stopped while starting")
      time.sleep(0.01)
    yield base_url(host, sock)
  finally:
    server.should_exit = True
    thread.join()
    sock.close()


def serve_forever(app: ASGIApp, host: str = LOOPBACK, port: int = 8000, *,
                  ready: Callable[[str], None] | None = None) -> None:
  """Serves `app` in the foreground until SIGINT or SIGTERM (then the app's shutdown runs).
  `ready(base_url)` runs once the socket is bound, e.g. to print where it listens."""
  sock = bind(host, port)
  try:
    if ready is not None:
      ready(base_url(host, sock))
    server = _server(app, "on")
    server.run(sockets=[sock])
  finally:
    sock.close()
  if not server.started:
    raise RuntimeError("the server did not start (see the log above)")
