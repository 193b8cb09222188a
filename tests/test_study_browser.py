"""The participant page (workflows/study/static) in a real browser against a real study server.

Debian's chromium runs headless under Playwright through a whole AirDialogue participant path
and a whole Persuasion for Good one, as a person would: instructions, the private card, a chat
whose agent writes HTML (it must show as text and never run), the closing donation, the survey
and the completion code. Each page's screenshot goes to the test's tmp folder and, with
STUDY_SCREENSHOTS=DIR, to DIR as well, so the pages can be looked at.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import re
import shutil
import sqlite3

import httpx
import pytest

import study_fixtures

CHROMIUM = "/usr/bin/chromium"
STATIC = pathlib.Path(__file__).resolve().parent.parent / "workflows" / "study" / "static"
PERSON_HTML = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=3"> hi'
MAX_CHARS = 200


def test_static_page_builds_no_markup_from_text():
  """The page code never parses text as HTML and has no inline script or style (CSP)."""
  script = (STATIC / "app.js").read_text(encoding="utf-8")
  for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(",
               "new Function", "setAttribute('on", 'setAttribute("on'):
    assert sink not in script, sink
  html = (STATIC / "index.html").read_text(encoding="utf-8")
  assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), "inline <script>"
  assert not re.search(r"<style\b|\sstyle=|\son[a-z]+=", html), "inline style or handler"


@pytest.fixture(scope="module")
def browser():
  sync_api = pytest.importorskip(
      "playwright.sync_api", reason="needs playwright (requirements-dev.txt)")
  if not os.access(CHROMIUM, os.X_OK):
    pytest.skip(f"needs Debian's chromium at {CHROMIUM} (apt-get install chromium; .ci/run)")
  sync_api.expect.set_options(timeout=20_000)
  with sync_api.sync_playwright() as playwright:
    chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
    yield chromium
    chromium.close()


class Visit:
  """One participant's page: a browser page that records script errors and CSP violations and
  saves named screenshots."""

  def __init__(self, browser, url: str, shots: pathlib.Path, prefix: str):
    self.page = browser.new_page(viewport={"width": 1200, "height": 860})
    self.url = url
    self.shots = shots
    self.prefix = prefix
    self.problems = []
    self.page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
    self.page.on("console", self._console)
    self.page.on("dialog", lambda dialog: self.problems.append(f"dialog: {dialog.message}"))

  def _console(self, message) -> None:
    if message.type == "error" and "favicon" not in message.text and (
        "Content Security Policy" in message.text or "Uncaught" in message.text):
      self.problems.append(f"console: {message.text}")

  def shot(self, name: str) -> None:
    path = self.shots / f"{self.prefix}-{name}.png"
    self.page.screenshot(path=str(path), full_page=True)
    if os.environ.get("STUDY_SCREENSHOTS"):
      os.makedirs(os.environ["STUDY_SCREENSHOTS"], exist_ok=True)
      shutil.copy(path, os.environ["STUDY_SCREENSHOTS"])

  def pwned(self):
    return self.page.evaluate("() => window.__pwned")

  def body_text(self) -> str:
    return self.page.locator("body").inner_text()


def arms_by_link(workdir: str, links: list[str]) -> dict[str, str]:
  """link -> its arm, read from the study database (the page itself must never tell)."""
  with sqlite3.connect(os.path.join(workdir, "study.sqlite")) as db:
    arm_of = dict(db.execute("SELECT token_sha256, arm FROM participants"))
  return {link: arm_of[hashlib.sha256(study_fixtures.token(link).encode()).hexdigest()]
          for link in links}


def api_state(base_url: str, link: str) -> dict:
  reply = httpx.get(f"{base_url}/api/s/{study_fixtures.token(link)}", timeout=30)
  reply.raise_for_status()
  return reply.json()


def messages(visit: Visit) -> list[tuple[str, str]]:
  """(speaker label, text) of every message shown."""
  items = visit.page.locator("#messages .message")
  return [(item.locator(".message-speaker").inner_text(), item.locator(".message-text")
           .text_content()) for item in items.all()]


def expect_card(visit: Visit, state: dict) -> None:
  """The page shows the person's private card exactly as the API gives it."""
  from playwright.sync_api import expect
  assert state["card"], "the study shows the person a card"
  expect(visit.page.locator("#card-list dt")).to_have_text([label for label, _ in state["card"]])
  expect(visit.page.locator("#card-list dd")).to_have_text([value for _, value in state["card"]])


def send(visit: Visit, text: str, *, shown: int) -> None:
  """Types `text`, sends it with Enter and waits until `shown` messages are on the page."""
  from playwright.sync_api import expect
  box = visit.page.get_by_label("Your message")
  expect(box).to_be_enabled()
  box.fill(text)
  box.press("Enter")
  expect(visit.page.locator("#messages .message")).to_have_count(shown)


def answer_survey(visit: Visit, state: dict, number_answer: str | None = None) -> None:
  """Checks the survey shows the study's items; submitting it empty is refused with a message;
  answers every item (Likert: point 4; number items: `number_answer`)."""
  from playwright.sync_api import expect
  page = visit.page
  expect(page.get_by_role("heading", name="A few questions")).to_be_visible()
  items = page.locator("#survey-items .survey-item")
  expect(items).to_have_count(len(state["survey"]))
  page.get_by_role("button", name="Submit answers").click()
  expect(page.get_by_role("alert")).to_contain_text("Please answer every question")
  for index, item in enumerate(state["survey"]):
    node = items.nth(index)
    expect(node).to_contain_text(item["text"])
    if item.get("type") == "number":
      field = node.get_by_role("spinbutton")
      field.fill(str(item["max"] + 1))  # Out of range: refused on the page.
      page.get_by_role("button", name="Submit answers").click()
      expect(page.get_by_role("alert")).to_contain_text(str(index + 1))
      field.fill(number_answer)
    else:
      expect(node).to_contain_text(item["low"])
      expect(node).to_contain_text(item["high"])
      expect(node.get_by_role("radio")).to_have_count(item["scale"])
      node.get_by_role("radio", name=re.compile(r"^4\b")).check()
  visit.shot("4-survey")
  page.get_by_role("button", name="Submit answers").click()


def expect_done(visit: Visit, base_url: str) -> None:
  """The completion code page shows the code the server stored; a reload shows it again."""
  from playwright.sync_api import expect
  page = visit.page
  expect(page.get_by_role("heading", name="Thank you for taking part")).to_be_visible()
  code = page.locator("#completion-code")
  expect(code).to_have_text(re.compile(r"^[0-9A-F]{8}$"))
  state = api_state(base_url, visit.url)
  assert state["phase"] == "done" and code.inner_text() == state["completion_code"]
  visit.shot("5-done")
  page.reload()
  expect(code).to_have_text(state["completion_code"])


def expect_no_arm_named(visit: Visit, arms: dict[str, str]) -> None:
  """Neither an arm's name nor its party spec is anywhere on the page."""
  source = visit.page.content()
  for name, spec in arms.items():
    assert name not in source and spec not in source, (name, spec)


@pytest.fixture
def shots(tmp_path):
  folder = tmp_path / "screenshots"
  folder.mkdir()
  return folder


def test_airdialogue_participant_path(browser, tmp_path, shots):
  """Instructions -> card + chat with an HTML-writing agent (shown as text) -> the agent's
  action block ends it -> survey -> completion code; a reload continues where the person was."""
  from playwright.sync_api import expect
  arms = {"oracle_arm": study_fixtures.ORACLE, "html_arm": study_fixtures.HTML_AGENT}
  config = study_fixtures.tiny_study_config(
      "airdialogue", arms=arms, participants_per_arm=1, limits={"max_message_chars": MAX_CHARS})
  workdir = str(tmp_path / "study")
  base_url, links, _, stop = study_fixtures.start_server(config, workdir)
  try:
    arm_of = arms_by_link(workdir, links)
    html_link = next(link for link in links if arm_of[link] == "html_arm")
    oracle_link = next(link for link in links if arm_of[link] == "oracle_arm")
    visit = Visit(browser, html_link, shots, "airdialogue")
    page = visit.page

    # Instructions.
    page.goto(html_link)
    state = api_state(base_url, html_link)
    assert state["phase"] == "instructions"
    expect(page.locator("#instructions-text p")).to_have_text(state["instructions"])
    expect_no_arm_named(visit, arms)
    visit.shot("1-instructions")

    # Card and chat: nothing yet, the person opens.
    page.get_by_role("button", name="Start").click()
    box = page.get_by_label("Your message")
    expect(box).to_be_enabled()
    expect_card(visit, api_state(base_url, html_link))
    expect(box).to_have_attribute("maxlength", str(MAX_CHARS))
    box.fill("abc")
    expect(page.locator("#char-counter")).to_have_text(f"3 / {MAX_CHARS}")

    # While the reply is on its way: "typing", the input disabled.
    held = []
    page.route("**/message", lambda route: held.append(route))
    box.fill(PERSON_HTML)
    box.press("Enter")
    expect(page.locator("#chat-status")).to_have_text("The agent is typing…")
    expect(box).to_be_disabled()
    expect(page.get_by_role("button", name="Send")).to_be_disabled()
    assert held, "the page posted the message"
    held.pop().continue_()
    page.unroute("**/message")
    expect(page.locator("#messages .message")).to_have_count(2)
    assert messages(visit) == [("You", PERSON_HTML), ("Agent", study_fixtures.HTML)]
    expect(page.locator("#chat-status")).to_have_text("")
    expect(page.locator("#messages img, #messages script")).to_have_count(0)
    assert visit.pwned() is None

    # A reload continues the same dialogue.
    page.reload()
    expect(page.locator("#messages .message")).to_have_count(2)
    expect_card(visit, api_state(base_url, html_link))

    # An over-long message (the page's own limit lifted) is refused by the server, and the
    # page says why, naming the limit, and keeps the text.
    page.evaluate("() => { document.getElementById('message-input').maxLength = 100000; }")
    box.fill("x" * (MAX_CHARS + 1))
    box.press("Enter")
    expect(page.get_by_role("alert")).to_contain_text(str(MAX_CHARS))
    expect(page.locator("#messages .message")).to_have_count(2)
    expect(box).to_have_value("x" * (MAX_CHARS + 1))
    page.reload()
    send(visit, "I would like to book a flight.", shown=4)
    expect(page.get_by_role("alert")).to_be_hidden()
    visit.shot("2-chat")

    # The agent's third reply carries its action block: the dialogue ends in front of the
    # person, who reads it and goes on to the survey.
    send(visit, "My name is Jane Doe.", shown=6)
    expect(page.locator("#chat-ended")).to_contain_text("The conversation has ended.")
    expect(box).to_be_hidden()
    last_speaker, last_text = messages(visit)[-1]
    assert last_speaker == "Agent" and last_text.startswith(study_fixtures.HTML)
    assert visit.pwned() is None
    visit.shot("3-ended")
    page.get_by_role("button", name="Continue to the questions").click()
    expect(page.get_by_role("heading", name="A few questions")).to_be_visible()

    state = api_state(base_url, html_link)
    assert state["phase"] == "survey" and state["ended"]
    answer_survey(visit, state)
    expect_done(visit, base_url)
    assert visit.pwned() is None and not visit.problems, visit.problems
    expect_no_arm_named(visit, arms)

    # The scripted oracle arm answers the person too (its reply as plain text).
    oracle = Visit(browser, oracle_link, shots, "airdialogue-oracle")
    oracle.page.goto(oracle_link)
    oracle.page.get_by_role("button", name="Start").click()
    send(oracle, "Hello, I need to book a flight.", shown=2)
    speaker, text = messages(oracle)[-1]
    assert speaker == "Agent" and text.strip()
    expect_no_arm_named(oracle, arms)
    assert not oracle.problems, oracle.problems
  finally:
    stop()


def test_persuasion_participant_path(browser, tmp_path, shots, p4g_data_dir):
  """The agent opens (its HTML shown as text); the person ends the dialogue by donating; the
  survey's number item is range-checked; the completion code."""
  del p4g_data_dir
  from playwright.sync_api import expect
  arms = {"ask_arm": study_fixtures.P4G_PERSUADER, "html_arm": study_fixtures.HTML_AGENT}
  config = study_fixtures.tiny_study_config("persuasion", arms=arms, participants_per_arm=1)
  workdir = str(tmp_path / "study")
  base_url, links, _, stop = study_fixtures.start_server(config, workdir)
  try:
    arm_of = arms_by_link(workdir, links)
    html_link = next(link for link in links if arm_of[link] == "html_arm")
    visit = Visit(browser, html_link, shots, "persuasion")
    page = visit.page

    page.goto(html_link)
    expect(page.get_by_role("button", name="Start")).to_be_visible()
    expect_no_arm_named(visit, arms)
    visit.shot("1-instructions")

    page.get_by_role("button", name="Start").click()
    expect(page.locator("#messages .message")).to_have_count(1)
    assert messages(visit) == [("Agent", study_fixtures.HTML)]
    expect_card(visit, api_state(base_url, html_link))
    expect(page.locator("#card-list")).to_contain_text("Save the Children")

    send(visit, PERSON_HTML, shown=3)
    assert messages(visit)[1:] == [("You", PERSON_HTML), ("Agent", study_fixtures.HTML)]
    expect(page.locator("#messages img, #messages script")).to_have_count(0)
    assert visit.pwned() is None
    visit.shot("2-chat")

    # The donation ends the dialogue: out of range refused on the page, then $1.50.
    donation = page.get_by_label(re.compile("Your donation in dollars"))
    donation.fill("2.5")
    page.get_by_role("button", name="End and donate").click()
    expect(page.get_by_role("alert")).to_contain_text("$0.00 to $2.00")
    donation.fill("1.5")
    visit.shot("3-closing")
    page.get_by_role("button", name="End and donate").click()
    expect(page.get_by_role("heading", name="A few questions")).to_be_visible()

    state = api_state(base_url, html_link)
    assert state["phase"] == "survey" and state["ended"]
    assert state["turns"][-1]["you"] and "1.50" in state["turns"][-1]["text"]
    answer_survey(visit, state, number_answer="1")
    expect_done(visit, base_url)
    assert visit.pwned() is None and not visit.problems, visit.problems
    expect_no_arm_named(visit, arms)
  finally:
    stop()
