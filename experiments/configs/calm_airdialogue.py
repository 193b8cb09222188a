"""CALM on AirDialogue (calm/): one table-conditioned LM for both roles, a reward token, the
auxiliary action head; the paper's size (GPT-2 small, lr 1e-4).

    make run  # AirDialogue corpora and tokenizer in runs/quickstart
    python -m calm.data --config=experiments/configs/calm_airdialogue.py \
        [--config.calm_data.relabel=False]
    python -m experiments.train --config=experiments/configs/calm_airdialogue.py \
        --workdir=runs/calm_airdialogue [--config.calm_data.relabel=False] \
        [--config.algorithm.action_head_weight=0] [--config.model.init_from=LM_WORKDIR]
    python -m experiments.evaluate --agent=calm:n=4,m=2,h=6:runs/calm_airdialogue ...

Data (calm/data.py): the pipeline's official-format training corpus, relabeled when
`calm_data.relabel` (False = 'CALM without relabeling'), prepared by `python -m calm.data`
(same config and overrides) into `task.root`, which follows `calm_data`. Task pretraining on
synthetic scenes comes from `model.init_from`, the dialogue LM (domains/airdialogue/lm_task.py);
`calm_data.scene_every=2` also puts scenes with the head's targets into every second CALM
batch. `algorithm.action_head_weight=0` is 'CALM without the auxiliary head'; planning is a
party option (`planning` below, or the `calm:` spec), N=1 being 'CALM without planning'.

The head is the pooled state head (calm/state.py), and the agent acts by it
(`planning.action=head`): it tracks the intent and solves the official rules under it, which
is what makes an agent book the right flight at this size (docs/RESULTS.md).
"""

import ml_collections

from experiments.configs import bc_airdialogue


def calm_sections(c: ml_collections.ConfigDict) -> None:
  """Turns a BC agent config into CALM's: algorithm, data and planning sections."""
  c.algorithm = ml_collections.ConfigDict(dict(
      name="calm",
      action_head_weight=1.0,  # 0 = the ablation without the auxiliary head.
      # "linear" | "state" (tracks the intent, solves the rules: calm/state.py) | "pooled" (the
      # state head, each field attending over the dialogue; the only one that books, RESULTS.md)
      # | "shared" (pooled, each return field reading with its departure field's values: the
      # return airport read 0.89 at 500 updates where pooled read 0.06, RESULTS.md).
      head="shared",
      # The tracking loss (mean over fields) on rows with the intent's codes: 10 learns the
      # airports and price limit in a quarter of the updates 1 takes (docs/RESULTS.md).
      state_weight=10.0,
      head_hidden_dim=0,  # The linear head's hidden layer; 0 = none.
      # What the pooled fields read: "others" = not the agent's own turns (the intent is what
      # the customer said), "all" = every position (calm/state.py says why not).
      reads="others",
  ))
  c.calm_data = ml_collections.ConfigDict(dict(
      source_root="runs/quickstart",  # The pipeline's workdir: official corpora, tokenizer.
      relabel=True,  # Relabel the training split (calm.relabel); False = the ablation.
      seed=0,  # Relabeling seed.
      scene_every=2,  # Every K-th batch generator scenes with head targets (calm/scenes.py).
      scene_table_swap=0.0,  # Share of scene rows under another row's table (ditto).
  ))
  # Follows calm_data; calm/data.py:prepared_root computes the same path.
  c.task.root = (c.calm_data.get_ref("source_root") + "/calm/relabel="
                 + c.calm_data.get_ref("relabel").to_str() + ",seed="
                 + c.calm_data.get_ref("seed").to_str())
  # Defaults of the planning party (calm/planning.py) for this run's workdir; a `calm:` spec
  # overrides them. n=1 plays without planning.
  c.planning = ml_collections.ConfigDict(dict(
      n=4,  # Candidate utterances per agent turn.
      m=2,  # Imagined continuations per candidate.
      horizon=6,  # Imagined utterances per continuation (both sides).
      score="reward_token",  # "reward_token" | "head" | "ask" (calm/planning.py says why).
      temperature=1.0,  # Sampling of candidates and imagined turns.
      greedy_candidate=1,  # Candidate 0 is the greedy reply: planning never lacks it.
      margin=0.0,  # How much a sampled candidate must outscore the greedy one to replace it.
      action="head",  # "lm" | "head": who picks the closing block's status and flight.
      ask=0.0,  # > 0: the state head gates closing (calm/planning.py, Asking; RESULTS.md: no gain).
      reader="",  # A frozen reader's directory (calm/frozen_tracker.py) for the closing action.
      blend=0,  # 1: the reader's posterior times the state head's (calm/planning.py).
      gate="words",  # What the ask gate reads: "words" (the model's head) or "reader".
      ask_once=0,  # 1: a field the agent has asked about no longer holds the gate.
      keep_asking=0,  # 1: a held row says a question rather than a search (score="ask").
      ask_name=0,  # 1: the gate also holds while the reader's name pointer doubts a name.
      ranked_start=0,  # 1: candidate j starts with the LM's j-th likeliest token ("ask").
  ))


def get_config() -> ml_collections.ConfigDict:
  c = bc_airdialogue.get_config()
  calm_sections(c)
  c.optim.learning_rate = 1e-4
  return c
