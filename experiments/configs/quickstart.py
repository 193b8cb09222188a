"""`make run`: the end-to-end pipeline sized for 2 CPU cores.

Data -> tokenizer -> datasets -> the dialogue LM -> a BC agent, a CALM agent (on
the relabeled corpus and generator scenes; it acts by its state head, whose
tracked intent a rule solver, calm/state.solve, turns into the booking; played
greedily, without planning: tables call it "CALM + intent tracker (rule solver)")
and a BC customer (the first learned simulator) from it, an ILQL agent from the
BC agent -> each agent against the scripted volunteer (training and held-out
phrasing families), the people-like customers and the learned one -> the
simulator-collapse comparison, short: three GRPO arms from the BC agent (one
simulator, Co-Training, a mixed population), then the start and each arm against
the BC customer and the held-out customers (a BC customer of another seed, the
held-out families, the people-like customers). With its name
drill the dialogue LM copies names after ~500-1,000 updates (docs/RESULTS.md,
run F); the wall time and the success this budget reaches are measured there.
The other numbers of docs/RESULTS.md come from longer runs of the same configs
(the commands are there); this is the pipeline end to end.
"""

import ml_collections

from experiments.configs import collapse_airdialogue_quick

# The simulator-collapse arms: GRPO updates each (6 rollout batches of 8 scenarios x 4),
# held-out scenarios per agent x customer. Sized to fit make run's time budget (docs/RESULTS.md).
ARM_STEPS, COLLAPSE_DIALOGUES = 12, 50
ARM_VALIDATION_DIALOGUES = 32  # The arms' one evaluation against the learned customer.
# The arms make run trains: one simulator, Co-Training, and a fixed population that speaks in
# many ways (collapse_airdialogue_quick.py; `temperature` and `population` run apart).
ARMS = ("single", "cotrain", "mixed")
MIXED_MEMBERS = (*collapse_airdialogue_quick.MIXED_SCRIPTED, "bc_customer")
# The customers no arm trains against: a learned one of another seed, the held-out phrasing
# families, and customers written apart in the real dataset's people's habits.
PEOPLE = ("people:silent", "people:partial")
# What tables and report.json call a run whose name says less than what it is (the run keeps
# its name: its workdir and evaluation files).
LABELS = {"calm_agent": "CALM + intent tracker (rule solver)",
          **{f"{arm}_arm": text for arm, text in collapse_airdialogue_quick.LABELS.items()}}


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
  # `set`: (dotted field, value) pairs set on the run's config, a run's name becoming its
  # workdir. `label`: what the tables call it ("" = its name).
  config.runs = ml_collections.ConfigDict({
      name: ml_collections.ConfigDict(dict(config=module, steps=steps, eval_every=every,
                                           init_from=parent, set=overrides,
                                           label=LABELS.get(name, "")))
      for name, module, steps, every, parent, overrides in (
          ("dialogue_lm", "lm_airdialogue_quick", 1000, 500, "", ()),
          ("bc_agent", "bc_airdialogue_quick", 200, 100, "dialogue_lm", ()),
          # 1,200 updates: the customer states its airports and dates only after ~800-1,200,
          # and its held-out loss stops falling there (the oracle against it at T = 1: 0.05 at
          # 200 updates, 0.31 at 1,200; docs/RESULTS.md, sections 1 and 9).
          ("bc_customer", "bc_airdialogue_customer_quick", 1200, 200, "dialogue_lm", ()),
          ("ilql_agent", "ilql_airdialogue_quick", 200, 200, "bc_agent", ()),
          # 2,000 updates: at 1,000 the LM still closes before asking what a customer left out
          # (people:partial 0.55, 0.66 at 2,000; docs/RESULTS.md, section 22).
          ("calm_agent", "calm_airdialogue_quick", 2000, 500, "dialogue_lm", ()),
          # A second customer (another seed: data order, dropout) that no arm trains against,
          # at 200 updates (1,200 would not fit make run's 20 minutes): a weaker simulator.
          ("bc_customer_s1", "bc_airdialogue_customer_quick", 200, 200, "dialogue_lm",
           (("seed", 1),)),
      ) + tuple(
          # The simulator-collapse arms (collapse_airdialogue_quick.py) at equal budget, from
          # the BC agent, against the BC customer; the panel refuses the held-out customers.
          # Selected at their last step (one validation: the start is the table's first row).
          (f"{arm}_arm", f"collapse_airdialogue_quick:{arm}", ARM_STEPS, ARM_STEPS,
           "bc_agent", (("simulator", "bc_customer"),
                        ("train.eval_at_start", False),
                        # One evaluation selects nothing: a few dialogues log its return.
                        ("online_eval.num_dialogues", ARM_VALIDATION_DIALOGUES))
           + ((("rl.population.members", MIXED_MEMBERS),
               ("rl.panel.training", MIXED_MEMBERS),
               ("rl.panel.held_out", ("bc_customer_s1", "people:*"))) if arm == "mixed" else
              (("rl.panel.held_out", ("bc_customer_s1", "scripted:*", "people:*")),)))
          for arm in ARMS)})
  config.training = ml_collections.ConfigDict(dict(
      # Validation scenarios per evaluation (seed 2000) that pick each agent's checkpoint: at
      # 32 (s.e. ~0.08) one CALM seed of three was picked at a step that copies names 0.58 of
      # the time (docs/RESULTS.md, "CALM's ablation table"). 128 (s.e. <= 0.045) keeps make
      # run inside its 20 minutes; each of CALM's four evaluations of 256 took about 25 s.
      online_dialogues=128,
  ))
  # (agent, customer): run names or party specs (ilql_dialogue/party_spec.py).
  config.evaluation = ml_collections.ConfigDict(dict(
      num_dialogues=100,  # Held-out scenarios (seed 1000) per pair.
      batch_size=50,
      max_turns=40,  # Utterances before a dialogue fails.
      max_new_tokens=64,  # Per learned utterance.
      # Learned agents act greedily (selection decodes alike): on validation scenarios (seed
      # 2000) the make-run BC agent succeeds 0.41 greedy and 0.23 sampling (docs/RESULTS.md).
      agent_temperature=0.0,
      # The learned customer's sampling, chosen on validation scenarios (docs/RESULTS.md,
      # section 28): the oracle succeeds 0.63 against it at T = 0.7 and 0.46 at T = 1 (0.62 at
      # T = 1 with min-p 0.2), and 0.68 of its utterances are unique (0.77 at T = 1, 0.40
      # greedy). customer_min_p: its min-p filter (0: off).
      customer_temperature=0.7,
      customer_min_p=0.0,
      # The corpus speaks the training phrasing families (family_split.json); each learned
      # agent also meets the held-out ones: its generalization gap.
      # The people-like customers (domains/airdialogue/people_like.py) are written apart from
      # every family, in the real dataset's people's habits: `silent` volunteers nothing.
      pairs=tuple((agent, customer) for customer in (
          "scripted:volunteer", "scripted:volunteer/held_out", *PEOPLE)
                  for agent in ("bc_agent", "ilql_agent", "calm_agent"))
      + tuple(("scripted_agent:oracle", customer) for customer in PEOPLE)
      + (("bc_agent", "bc_customer"), ("scripted_agent:oracle", "bc_customer")),
      # The same with the learned customer decoding greedily: how well it states its intent
      # when it does not sample.
      greedy_customer_pairs=(("scripted_agent:oracle", "bc_customer"),),
  ))
  # The simulator-collapse comparison, short (docs/RESULTS.md has it at 100 updates x 3 seeds):
  # the BC agent and each arm against the training simulator and the held-out customers, on
  # COLLAPSE_DIALOGUES held-out scenarios (seed 1000) each.
  config.collapse = ml_collections.ConfigDict(dict(
      start="bc_agent",
      arms=tuple(f"{arm}_arm" for arm in ARMS),
      training_simulator="bc_customer",
      held_out=("bc_customer_s1", "scripted:volunteer/held_out", *PEOPLE),
      num_dialogues=COLLAPSE_DIALOGUES,
  ))
  return config
