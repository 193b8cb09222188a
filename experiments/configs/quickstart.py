"""`make run`: the end-to-end pipeline sized for 2 CPU cores.

Data -> tokenizer -> datasets -> the dialogue LM -> a BC agent, a CALM agent (on
the relabeled corpus, with its action head; played greedily, without planning)
and a BC customer (the first learned simulator) from it, an ILQL agent from the
BC agent -> each agent against a scripted customer and the learned one. With its name drill the
dialogue LM copies names after ~500-1,000 updates (docs/RESULTS.md, run F); the
wall time and the success this budget reaches are measured there. The other
numbers of docs/RESULTS.md come from longer runs of the same configs (the
commands are there); this is the pipeline end to end.
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.seed = 0

  config.airdialogue = ml_collections.ConfigDict()
  config.airdialogue.train_dialogues = 3000
  config.airdialogue.eval_dialogues = 500
  config.airdialogue.kb_size = 30
  # Held-out scenarios come from a different seed than the training corpus.
  config.airdialogue.train_seed = 0
  config.airdialogue.eval_seed = 1

  config.tokenizer = ml_collections.ConfigDict()
  config.tokenizer.vocab_size = 2048

  # Run name -> experiments/configs module (":argument" for get_config), its updates, how
  # often it evaluates (online evaluations pick each agent's checkpoint) and the run it
  # starts from (init_from, "" = random init). Every party starts from the dialogue LM.
  config.runs = ml_collections.ConfigDict({
      name: ml_collections.ConfigDict(dict(config=module, steps=steps, eval_every=every,
                                           init_from=parent))
      for name, module, steps, every, parent in (
          ("dialogue_lm", "lm_airdialogue_quick", 1000, 500, ""),
          ("bc_agent", "bc_airdialogue_quick", 200, 100, "dialogue_lm"),
          ("bc_customer", "bc_airdialogue_customer_quick", 200, 200, "dialogue_lm"),
          ("ilql_agent", "ilql_airdialogue_quick", 200, 200, "bc_agent"),
          ("calm_agent", "calm_airdialogue_quick", 200, 100, "dialogue_lm"),
      )})
  config.training = ml_collections.ConfigDict(dict(
      online_dialogues=32,  # Validation scenarios per evaluation (seed 2000).
  ))
  # (agent, customer): run names or party specs (ilql_dialogue/simulators.py).
  config.evaluation = ml_collections.ConfigDict(dict(
      num_dialogues=100,  # Held-out scenarios (seed 1000) per pair.
      batch_size=50,
      max_turns=40,  # Utterances before a dialogue fails.
      max_new_tokens=64,  # Per learned utterance.
      # Learned agents act greedily (selection decodes alike): on validation scenarios (seed
      # 2000) the make-run BC agent succeeds 0.41 greedy and 0.23 sampling (docs/RESULTS.md).
      agent_temperature=0.0,
      customer_temperature=1.0,  # The learned customer's sampling.
      # The corpus speaks the training phrasing families (family_split.json); each learned
      # agent also meets the held-out ones: its generalization gap.
      pairs=(("bc_agent", "scripted:volunteer"), ("ilql_agent", "scripted:volunteer"),
             ("calm_agent", "scripted:volunteer"),
             ("bc_agent", "scripted:volunteer/held_out"),
             ("ilql_agent", "scripted:volunteer/held_out"),
             ("calm_agent", "scripted:volunteer/held_out"),
             ("bc_agent", "bc_customer"), ("scripted_agent:oracle", "bc_customer")),
  ))
  return config
