"""The study's web server (FastAPI): the participant API, the admin API and the page.

A participant's link carries their token (`/s/TOKEN`); every API reply is their whole state
(`Sessions.state`, sessions.py: the checks, phases, turns and agent replies), and the page
draws only from it. Participants never see an arm's name or spec. Admin routes take
`Authorization: Bearer ADMIN_TOKEN` (WORKDIR/admin_token).

    GET  /s/TOKEN                 the page (static/index.html)
    GET  /api/s/TOKEN             state (the first visit: invited -> instructions)
    POST /api/s/TOKEN/start       instructions -> chat (the agent's opening turn, if it opens)
    POST /api/s/TOKEN/message     {"text", "turn"}: the person's turn and the agent's reply
    POST /api/s/TOKEN/close       {"value"}: the person's closing statement (e.g. a donation)
    POST /api/s/TOKEN/survey      {"answers": {item id: number}} -> done, completion code
    GET  /api/admin/bot/TOKEN     the person's private context and seed, for bot participants
    GET  /api/admin/summary       counts per arm and phase
    GET  /api/admin/export?format=jsonl|official
    GET  /v1/models, POST /v1/chat/completions   with config.openai_model only: that model,
                                  OpenAI-compatible (workflows/serve.py), e.g. for a
                                  `vs_llm:...,base_url=http://HOST:PORT/v1` arm; no token
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Any, Callable

import fastapi
from fastapi import responses, staticfiles
from fastapi.exceptions import RequestValidationError

from workflows import http_serving
from workflows import serve as openai_serve
from workflows.study import agents as agents_lib
from workflows.study import assignment
from workflows.study import config as study_config
from workflows.study import sessions as sessions_lib

STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
SECURITY_HEADERS = (
    (b"content-security-policy", b"default-src 'self'; script-src 'self'; style-src 'self'; "
                                 b"object-src 'none'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
)
PRIVATE_PREFIXES = ("/api/", "/v1/")  # Answers never cached (people's state; model replies).


def _json_response(status: int, detail: str) -> responses.JSONResponse:
  return responses.JSONResponse({"detail": detail}, status_code=status)


def _too_large(max_bytes: int) -> responses.JSONResponse:
  return _json_response(413, f"the request body is over {max_bytes} bytes (max_body_bytes)")


def _validation_detail(error: RequestValidationError) -> tuple[int, str]:
  """400 for a body that is not JSON, else 422 naming each wrong field."""
  problems = error.errors()
  if any(p.get("type") == "json_invalid" for p in problems):
    return 400, "malformed JSON body"
  return 422, "; ".join(f"{'.'.join(str(x) for x in p.get('loc', ()))}: {p.get('msg', '')}"
                        for p in problems) or "invalid request"


def make_app(study: study_config.Study, workdir: str, *,
             link_base: str = "http://127.0.0.1:8000", agents: agents_lib.Agents | None = None,
             chat_model: Any = None, clock: Callable[[], float] = time.time) -> fastapi.FastAPI:
  """The study's app over `workdir`: the arms' parties built (or `agents`), then its database
  created with the invitations (links in WORKDIR/links.txt under `link_base`) or reopened.

  With config.openai_model (or a `chat_model`, e.g. serve.tiny_chat_model() in tests) the
  app also serves that model as config.openai_name on /v1, its requests batched as the
  config's `batch` says (`app.state.batcher`), to requests bearing WORKDIR/openai_key. `app.state.sessions` holds the Sessions
  (tests read its store).
  """
  assignment.check_workdir(study, workdir)  # Refused before any weight loads.
  config = study.config
  if chat_model is None and config.openai_model:
    chat_model = openai_serve.load_chat_model(config.openai_model)
  api_key = None
  if chat_model is not None:
    # The model's routes take their own key; this server's vs_llm arms (built next) send it
    # as the openai client's key unless OPENAI_API_KEY names another.
    api_key = assignment.openai_key(workdir)
    os.environ.setdefault("OPENAI_API_KEY", api_key)
  agents = agents or agents_lib.Agents(study)
  try:
    store = assignment.open_study(study, workdir, link_base)
  except BaseException:
    agents.close()
    raise
  sessions = sessions_lib.Sessions(study, store, agents, clock)

  @contextlib.asynccontextmanager
  async def lifespan(app: fastapi.FastAPI):
    del app
    yield
    agents.close()
    store.close()

  app = fastapi.FastAPI(title="study", docs_url=None, redoc_url=None, openapi_url=None,
                        lifespan=lifespan)
  app.state.sessions = sessions

  @app.exception_handler(RequestValidationError)
  async def on_invalid(request: fastapi.Request, error: RequestValidationError):
    del request
    return _json_response(*_validation_detail(error))

  @app.get("/s/{token}", include_in_schema=False)
  async def page(token: str):
    del token  # The page reads it from its address.
    index = os.path.join(STATIC, "index.html")
    if not os.path.isfile(index):
      raise fastapi.HTTPException(404, "the study page is not installed "
                                       "(workflows/study/static/index.html)")
    return responses.FileResponse(index, media_type="text/html")

  app.mount("/static", staticfiles.StaticFiles(directory=STATIC, check_dir=False), name="static")

  @app.get("/api/s/{token}")
  async def get_state(token: str):
    return await sessions.view(token)

  @app.post("/api/s/{token}/start")
  async def post_start(token: str):
    return await sessions.start(token)

  @app.post("/api/s/{token}/message")
  async def post_message(token: str, body: sessions_lib.MessageBody):
    return await sessions.message(token, body)

  @app.post("/api/s/{token}/close")
  async def post_close(token: str, body: sessions_lib.CloseBody):
    return await sessions.close(token, body)

  @app.post("/api/s/{token}/survey")
  async def post_survey(token: str, body: sessions_lib.SurveyBody):
    return await sessions.survey(token, body)

  async def require_admin(authorization: str | None = fastapi.Header(None)) -> None:
    sessions.check_admin(authorization)  # On the event loop's thread, as the store wants.

  admin = fastapi.APIRouter(prefix="/api/admin", dependencies=[fastapi.Depends(require_admin)])

  @admin.get("/bot/{token}")
  async def admin_bot(token: str):
    return sessions.bot(token)

  @admin.get("/summary")
  async def admin_summary():
    return sessions.summary()

  @admin.get("/export")
  async def admin_export(format: str = "jsonl"):  # noqa: A002 (the query parameter's name)
    return _export(sessions, format)

  app.include_router(admin)
  app.add_middleware(http_serving.BodyLimit, max_bytes=study.limits.max_body_bytes,
                     too_large=_too_large, prefix="/api/")
  if chat_model is not None:
    batch = config.batch
    openai_app = openai_serve.make_app(
        chat_model, config.openai_name,
        {"max_batch": batch.max_batch, "wait_s": batch.wait_ms / 1000}, api_key=api_key)
    app.include_router(openai_app.router)  # Its shutdown (the batcher's close) comes along.
    openai_serve.add_body_limit(app)
    app.state.batcher = openai_app.state.batcher
  app.add_middleware(http_serving.SecurityHeaders, headers=SECURITY_HEADERS,
                     no_store=PRIVATE_PREFIXES)
  return app


def _export(sessions: sessions_lib.Sessions, form: str) -> responses.Response:
  """The ended dialogues as Dialogue JSONL, or AirDialogue's official {"data", "kb"} (one
  object per dialogue each; workflows/study/export.py)."""
  from workflows.study import export  # The report's exporter; it reads the database itself.

  if form == "jsonl":
    return responses.Response(export.dialogues_jsonl(sessions.store.path),
                              media_type="application/x-ndjson")
  if form == "official":
    try:
      data, kb = export.official(sessions.store.path)
    except ValueError as e:
      raise fastapi.HTTPException(400, str(e)) from None
    return responses.JSONResponse({"data": [json.loads(line) for line in data],
                                   "kb": [json.loads(line) for line in kb]})
  raise fastapi.HTTPException(400, f"format={form!r}; jsonl or official")


def serve(config: Any, workdir: str, host: str = http_serving.LOOPBACK, port: int = 8000) -> None:
  """Checks the config, opens (or creates) the study in `workdir`, builds the arms' parties
  (and loads config.openai_model) and serves on host:port until interrupted."""
  study = study_config.load(config)
  app = make_app(study, workdir, link_base=f"http://{host}:{port}")
  sessions = app.state.sessions
  print(f"study: {sessions.store.count_participants()} invitations "
        f"({len(study.config.arms)} arms x {study.config.participants_per_arm}); links in "
        f"{os.path.join(workdir, assignment.LINKS)}, admin token in "
        f"{os.path.join(workdir, assignment.ADMIN_TOKEN)}", flush=True)

  def ready(url: str) -> None:
    print(f"serving on {url}/s/TOKEN", flush=True)
    if study.config.openai_model:
      print(f"and {study.config.openai_model} as {study.config.openai_name!r} (OpenAI-compatible)"
            f" on {url}/v1", flush=True)

  http_serving.serve_forever(app, host, port, ready=ready)
