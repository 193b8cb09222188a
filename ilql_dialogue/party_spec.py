"""The one grammar of party specs, parsed once into a typed `PartySpec`.

    KIND:[OPTIONS:]TARGET     a registered party kind (registry.PartyKind), e.g.
                              scripted:terse/held_out, pick:k=5,pick=uniform:runs/x,
                              calm:n=4:runs/x; a wrapper kind's TARGET is a spec itself
    KIND:OPTIONS              a kind without a target, e.g. vs_llm:k=5,base_url=URL,model=M
    PATH[@STEP]               a training workdir: its selected checkpoint (best/, else
                              the latest), or the one saved at STEP
    module.path:Class[?a=1,b=x]   a user's class implementing the party protocol,
                              constructed with the options as keywords (and `role=`
                              if its __init__ takes one)

OPTIONS are `name=value` pairs joined by commas, each cast by its kind's type.
`make_party`, the command-line checks and panels all read this value.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import types
from typing import Any, Mapping

from ilql_dialogue import init_from, registry

CHECKPOINT, CLASS = "checkpoint", "class"
CLASS_RE = re.compile(r"^(?P<target>[A-Za-z_][\w.]*:[A-Za-z_]\w*)(?:\?(?P<options>.*))?$")
_OPTIONS_HEAD_RE = re.compile(r"^(?P<options>\w+=[^,:]*(?:,\w+=[^,:]*)*):")


@dataclasses.dataclass(frozen=True)
class PartySpec:
  """A parsed party spec. `target`: a kind's name text, a workdir, or module:Class."""

  text: str
  kind: str
  target: str = ""
  options: Mapping[str, Any] = dataclasses.field(default_factory=lambda: types.MappingProxyType({}))
  step: int | None = None
  inner: PartySpec | None = None

  @property
  def checkpoint(self) -> PartySpec | None:
    """The checkpoint this spec plays through (itself or a wrapped one), if any."""
    if self.kind == CHECKPOINT:
      return self
    return self.inner.checkpoint if self.inner is not None else None

  def __str__(self) -> str:
    return self.text


def parse_options(spec: str, text: str, types_: Mapping[str, Any], what: str = "") -> dict[str, Any]:
  """'k=3,pick=tail' -> {'k': 3, 'pick': 'tail'}, each cast by `types_`; errors name the spec."""
  whose = f"{what} option" if what else "option"
  options = {}
  for item in filter(None, text.split(",")):
    name, eq, value = item.partition("=")
    if not eq:
      raise ValueError(f"party spec {spec!r}: {whose} {item!r} is not name=value")
    if name not in types_:
      raise ValueError(f"party spec {spec!r}: unknown {whose} {name!r}; known: {sorted(types_)}")
    try:
      options[name] = types_[name](value)
    except ValueError:
      raise ValueError(f"party spec {spec!r}: {whose} {name}={value!r} is not a "
                       f"{getattr(types_[name], '__name__', 'valid value')}") from None
  return options


def _literal(value: str) -> Any:
  """A class option's value: a Python literal (1, 0.1, True, 'x') or else the text."""
  try:
    return ast.literal_eval(value)
  except (ValueError, SyntaxError):
    return value


def parse(text: str) -> PartySpec:
  """Parses a spec (module docstring); raises ValueError naming the spec."""
  if not text:
    raise ValueError("party spec '': empty")
  head, sep, rest = text.partition(":")
  kind = registry.party_kind(head) if sep else None
  if kind is not None:
    if kind.target == "none":
      return PartySpec(text, kind.name, options=parse_options(text, rest, kind.options, kind.name))
    match = _OPTIONS_HEAD_RE.match(rest) if kind.options else None
    options_text, target = (match["options"], rest[match.end():]) if match else ("", rest)
    if not target:
      raise ValueError(f"party spec {text!r}: nothing after {kind.name}:"
                       + (f" (expected {kind.usage})" if kind.usage else ""))
    options = parse_options(text, options_text, kind.options, kind.name)
    inner = parse(target) if kind.target == "party" else None
    return PartySpec(text, kind.name, target, options, inner=inner)
  match = CLASS_RE.match(text)
  if match:
    options = {}
    for item in filter(None, (match["options"] or "").split(",")):
      name, eq, value = item.partition("=")
      if not eq or not name.isidentifier():
        raise ValueError(f"party spec {text!r}: class option {item!r} is not name=value")
      options[name] = _literal(value)
    return PartySpec(text, CLASS, match["target"], types.MappingProxyType(options))
  workdir, step = init_from.split_step(text)
  return PartySpec(text, CHECKPOINT, workdir, step=step)


def usage() -> str:
  """The forms a spec may take, for error messages."""
  kinds = [k.usage or f"{k.name}:..." for k in registry.party_kinds().values()]
  return ", ".join(kinds + ["a training workdir PATH[@STEP]", "module.path:Class[?opt=value]"])
