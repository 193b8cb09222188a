r"""Writes a self-play AirDialogue corpus in the official format, with its statistics.

  python -m data_pipelines.airdialogue.generate --out_dir=/tmp/air --num_dialogues=5000 --seed=0

writes OUT_DIR/data.json, OUT_DIR/kb.json (line-aligned, official schema) and
OUT_DIR/stats.json (success overall / per agent / per customer style / per
phrasing family, status mixes). Phrasing families come from the training side
of family_split.json only. The same flags always produce byte-identical files.
"""

from __future__ import annotations

from absl import flags

from data_pipelines import cli
from data_pipelines.airdialogue import agents, customers, selfplay

_OUT_DIR = flags.DEFINE_string(
    "out_dir", None, "Directory for data.json, kb.json and stats.json.", required=True)
_NUM = flags.DEFINE_integer("num_dialogues", 1000, "How many dialogues to generate.", lower_bound=1)
_SEED = flags.DEFINE_integer("seed", 0, "Seed of every random draw.")
_KB_SIZE = flags.DEFINE_integer("kb_size", 30, "Flights per table.", lower_bound=1)
_CUSTOMER_MIX = flags.DEFINE_string(
    "customer_mix", ",".join(f"{k}:{v}" for k, v in selfplay.DEFAULT_CUSTOMER_MIX.items()),
    "Customer styles and weights, 'name:w,name:w'.")
_AGENT_MIX = flags.DEFINE_string(
    "agent_mix", ",".join(f"{k}:{v}" for k, v in selfplay.DEFAULT_AGENT_MIX.items()),
    "Agent skills and weights, 'name:w,name:w'.")
_CUSTOMER_FAMILY_MIX = flags.DEFINE_string(
    "customer_family_mix",
    ",".join(f"{k}:{v}" for k, v in selfplay.DEFAULT_CUSTOMER_FAMILY_MIX.items()),
    "Customer phrasing families and weights; training families only (family_split.json).")
_AGENT_FAMILY_MIX = flags.DEFINE_string(
    "agent_family_mix",
    ",".join(f"{k}:{v}" for k, v in selfplay.DEFAULT_AGENT_FAMILY_MIX.items()),
    "Agent phrasing families and weights; training families only (family_split.json).")
_NOISE_SCALE = flags.DEFINE_float(
    "typing_noise_scale", 1.0, "Multiplies each customer family's typing-noise rates (0: clean).",
    lower_bound=0.0)
_MAX_TURNS = flags.DEFINE_integer(
    "max_turns", selfplay.DEFAULT_MAX_TURNS, "Utterance cap per dialogue.", lower_bound=1)


def main(argv):
  del argv
  for flag, known, what in ((_CUSTOMER_MIX, customers.STYLES, "customer"),
                            (_AGENT_MIX, agents.AGENTS, "agent")):
    with cli.reported_as(f"--{flag.name}"):
      selfplay.parse_mix(flag.value, known, what)
  for flag, role in ((_CUSTOMER_FAMILY_MIX, "customer"), (_AGENT_FAMILY_MIX, "agent")):
    with cli.reported_as(f"--{flag.name}"):
      selfplay.parse_family_mix(flag.value, role)
  cli.output_dir(_OUT_DIR.value, "--out_dir")
  stats = selfplay.write_corpus(
      _OUT_DIR.value, _NUM.value, _SEED.value, _KB_SIZE.value, _CUSTOMER_MIX.value,
      _AGENT_MIX.value, _MAX_TURNS.value, _CUSTOMER_FAMILY_MIX.value, _AGENT_FAMILY_MIX.value,
      _NOISE_SCALE.value)
  print(f"wrote {stats['n']} dialogues to {_OUT_DIR.value}: "
        f"success_rate={stats['success_rate']:.3f}")


if __name__ == "__main__":
  cli.run(main)
