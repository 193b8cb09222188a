"""Simulator panels: the simulators a run may train against, and those kept for evaluation.

A policy that is trained and evaluated against the same simulator measures
how well it exploits that simulator, not how well it talks to users
(simulator collapse: docs/METHODS.md, Online RL and Co-Training). A panel
config file (experiments/configs/panel_*.py) splits a task's simulators into `training` and `held_out`; the launcher
refuses, at start-up, to train against any held-out simulator
(`refuse_held_out`, from `config.rl.panel`).

A member is a party spec (`make_party`), optionally with the
temperature it is sampled at (decoding is one of the axes a panel varies), as
a string or a mapping {spec, temperature}. Held-out specs may be shell
patterns (`scripted:*`: every scripted customer style).

Two specs are the same simulator when they have the same source
(`source`): wrappers that change how a simulator is sampled (`pick:`) keep
its source, a scripted style is one simulator whatever its phrasing family,
a checkpoint is its resolved directory, and an LLM behind an endpoint is
(base_url, model). So `pick:k=5:runs/panel/c3` is refused when `runs/panel/c3`
is held out, and `scripted:terse/train` when `scripted:terse` is.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
from typing import Any, Iterable, Mapping

from ilql_dialogue import party_spec


@dataclasses.dataclass(frozen=True)
class Member:
  spec: str
  temperature: float | None = None  # None: the caller's default sampling temperature.


@dataclasses.dataclass(frozen=True)
class Panel:
  """A task's simulators split into those to train against and those held out."""
  training: tuple[Member, ...]
  held_out: tuple[Member, ...]

  def __post_init__(self):
    for member in self.training:
      pattern = self.held_out_pattern(member.spec)
      if pattern is not None:
        raise ValueError(f"simulator panel: training member {member.spec!r} is also held out "
                         f"(as {pattern!r}); a panel's two halves must not share a simulator")

  def held_out_pattern(self, spec: str) -> str | None:
    """The held-out member that `spec` is the same simulator as, or None."""
    spec_source = source(spec)
    for member in self.held_out:
      if fnmatch.fnmatchcase(spec_source, source(member.spec)):
        return member.spec
    return None


def source(spec: str | party_spec.PartySpec) -> str:
  """The simulator behind a party spec, whatever wraps or rephrases it (module docstring)."""
  parsed = party_spec.parse(spec) if isinstance(spec, str) else spec
  if parsed.inner is not None:
    return source(parsed.inner)
  if parsed.kind == party_spec.CHECKPOINT:
    return os.path.realpath(parsed.text)
  if parsed.kind == party_spec.CLASS:
    return parsed.text
  if "base_url" in parsed.options and "model" in parsed.options:  # An endpoint's model.
    return f"{parsed.kind}:{str(parsed.options['base_url']).rstrip('/')}/{parsed.options['model']}"
  # A named party (a scripted style or skill): its phrasing family is not a new user.
  return f"{parsed.kind}:{parsed.target.split('/', 1)[0]}" if parsed.target else parsed.text


def _members(entries: Iterable[Any] | str, half: str) -> tuple[Member, ...]:
  if isinstance(entries, str):  # One member (a config's FieldReference to one simulator).
    entries = (entries,)
  members = []
  for entry in entries:
    if isinstance(entry, str):
      members.append(Member(entry))
    elif isinstance(entry, Mapping) and "spec" in entry and set(entry) <= {"spec", "temperature"}:
      members.append(Member(entry["spec"], entry.get("temperature")))
    else:
      raise ValueError(f"simulator panel {half}: {entry!r} is not a party spec or a mapping "
                       f"{{spec, temperature}}")
  return tuple(members)


def from_config(panel: Mapping[str, Any]) -> Panel:
  """A Panel from a config section with `training` and `held_out` lists (or single specs)."""
  missing = {"training", "held_out"} - set(panel)
  if missing:
    raise ValueError(f"simulator panel: missing {sorted(missing)}; has {sorted(panel)}")
  return Panel(_members(panel["training"], "training"), _members(panel["held_out"], "held_out"))


def refuse_held_out(rl: Mapping[str, Any]) -> None:
  """Raises ValueError when config.rl trains against a simulator its panel holds out.

  Without `rl.panel` nothing is checked, so configs written before panels
  keep working.
  """
  if rl.get("panel") is None:
    return
  _refuse(rl["panel"], f"config.rl.opponent={rl['opponent']!r}", rl["opponent"],
          "held-out simulators are for evaluation only; train")


def refuse_held_out_selection(config: Mapping[str, Any]) -> None:
  """Raises ValueError when the run's checkpoint selection plays a simulator its panel holds out.

  config.selection keeps the checkpoint with the best online evaluation
  (config.online_eval), so choosing it against a held-out simulator tunes
  the run to that simulator as surely as training against it would.
  Without `rl.panel`, or without an online evaluation that selects, nothing
  is checked.
  """
  rl, online = config.get("rl") or {}, config.get("online_eval") or {}
  selection = config.get("selection") or {}
  if (rl.get("panel") is None or online.get("num_dialogues", 0) <= 0
      or not selection.get("metric")):
    return
  _refuse(rl["panel"], f"config.online_eval.opponent={online['opponent']!r}", online["opponent"],
          f"config.selection.metric={selection['metric']!r} selects checkpoints by it; select")


def _refuse(panel_config: Mapping[str, Any], field: str, spec: str, why: str) -> None:
  """Raises ValueError naming `field` when `spec` is a held-out simulator of the panel."""
  panel = from_config(panel_config)
  pattern = panel.held_out_pattern(spec)
  if pattern is not None:
    raise ValueError(f"{field} is held out by config.rl.panel (as {pattern!r}): {why} against "
                     f"one of {list(dict.fromkeys(m.spec for m in panel.training))}")
