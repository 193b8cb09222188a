"""Registers CALM: its algorithm (calm/model.py) and its planning agent (`calm:`, calm/planning.py)."""

from __future__ import annotations

from calm import model, planning
from ilql_dialogue import registry

registry.register_algorithm("calm", model.CALM.from_config)
registry.register_party_kind(registry.PartyKind(
    "calm", planning.from_spec, options=planning.OPTIONS, target="party",
    usage="calm:[n=N,m=M,h=H,score=S,temp=T,greedy=G,margin=D,act=A,ask=P,reader=DIR,blend=B:]PATH"))
