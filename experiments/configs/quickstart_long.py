"""`make run`'s pipeline at the budget its targets take: the same stages and models, trained
longer (docs/RESULTS.md, "make run at ten times its budget").

    python -m experiments.pipeline --config=experiments/configs/quickstart_long.py \
        --workdir=runs/quickstart_long
    # the dialogue LM, the customer and the oracle against it along its training only:
    python -m experiments.pipeline --config=experiments/configs/quickstart_long.py:customer \
        --workdir=runs/quickstart_long
    # the same on five times the corpus (15,000 dialogues), 4,000 customer updates: whether the
    # customer's ceiling is its data (it memorizes 3,000 dialogues from 2,000 updates on)
    python -m experiments.pipeline --config=experiments/configs/quickstart_long.py:customer_data \
        --workdir=runs/quickstart_long_data
    # make run's three targets in one report: the whole pipeline on that corpus and customer
    python -m experiments.pipeline --config=experiments/configs/quickstart_long.py:targets \
        --workdir=runs/quickstart_targets

The dialogue LM is make run's (1,000 updates); the learned customer trains 8,000 updates
(make run: 200; the oracle plays its checkpoints every 2,000), the BC and CALM agents 2,000
(200) and ILQL 1,000 from the BC agent (200). Every pair plays 200 held-out scenarios.
"""

import ml_collections

from experiments.configs import quickstart

# part -> (customer updates, oracle every, training dialogues). "targets": every stage on the
# corpus and customer budget the oracle's 0.8 took (customer_data), the agents as in "all".
PARTS = {"all": (8000, 2000, 3000), "customer": (8000, 2000, 3000),
         "customer_data": (4000, 1000, 15000), "targets": (4000, 1000, 15000)}
CUSTOMER_ONLY = ("customer", "customer_data")


def get_config(part: str = "all") -> ml_collections.ConfigDict:
  if part not in PARTS:
    raise ValueError(f"quickstart_long.py:{part}: expected one of {sorted(PARTS)}")
  customer_steps, customer_every, train_dialogues = PARTS[part]
  c = quickstart.get_config()
  c.airdialogue.train_dialogues = train_dialogues
  runs = {name: dict(config=module, steps=steps, eval_every=every, init_from=parent,
                     label=quickstart.LABELS.get(name, ""))
          for name, module, steps, every, parent in (
              ("dialogue_lm", "lm_airdialogue_quick", 1000, 500, ""),
              ("bc_customer", "bc_airdialogue_customer_quick", customer_steps, customer_every,
               "dialogue_lm"),
              ("bc_agent", "bc_airdialogue_quick", 2000, 500, "dialogue_lm"),
              ("ilql_agent", "ilql_airdialogue_quick", 1000, 500, "bc_agent"),
              ("calm_agent", "calm_airdialogue_quick", 2000, 500, "dialogue_lm"))}
  oracle_pairs = tuple(("scripted_agent:oracle", f"bc_customer@{step}")
                       for step in range(customer_every, customer_steps, customer_every))
  oracle_pairs += (("scripted_agent:oracle", "bc_customer"),)
  pairs = oracle_pairs + tuple(p for p in c.evaluation.pairs if p not in oracle_pairs)
  if part in CUSTOMER_ONLY:
    runs = {name: runs[name] for name in ("dialogue_lm", "bc_customer")}
    pairs = oracle_pairs
  c.runs = ml_collections.ConfigDict(runs)
  c.collapse.arms = ()  # The simulator-collapse comparison has its own runs (RESULTS.md).
  c.evaluation.update(num_dialogues=200, batch_size=200, pairs=pairs)
  return c
