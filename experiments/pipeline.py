"""`python -m experiments.pipeline --workdir=DIR [--config=...] [--config.key=value]`.

The main job behind `make run`: it checks the config (every stage's section,
each run's training config, the evaluated pairs) and hands it to
`pipeline_lib.run`.
"""

import os
import signal
import sys

import ml_collections
from absl import flags, logging

from experiments import cli, configs, pipeline_lib
from experiments.configs import quickstart
from ilql_dialogue import init_from

_CONFIG = cli.define_config_file(
    "config", "experiments/configs/quickstart.py", "Pipeline configuration file.")
_WORKDIR = flags.DEFINE_string("workdir", "runs/quickstart", "Where every stage writes.")


def validate(config: ml_collections.ConfigDict, workdir: str) -> None:
  """Raises cli.BadInput before the first stage, not after an hour of them: the sections
  against the defaults (quickstart.py), each run's config, each pair's roles."""
  cli.output_dir(workdir, "--workdir")
  defaults = quickstart.get_config()
  for section in defaults:
    if section not in config:
      raise cli.BadInput(f"config: section {section!r} missing")
    if isinstance(defaults[section], ml_collections.ConfigDict) and section != "runs":
      missing = sorted(set(defaults[section]) - set(config[section]))
      if missing:
        raise cli.BadInput(f"config.{section}: field(s) {missing} missing")
      cli.check_known_fields(config[section], defaults[section], f"config.{section}")
  roles = {}
  for name, run in config.runs.items():
    where = f"config.runs.{name}.config={run.config}"
    module = run.config.partition(":")[0]
    if not os.path.isfile(os.path.join(os.path.dirname(configs.__file__), f"{module}.py")):
      raise cli.BadInput(f"{where}: no such module in experiments/configs")
    try:
      run_config = pipeline_lib.run_config(config, name, workdir)
    except AttributeError:  # run_config sets fields of the run's task and train sections.
      raise cli.BadInput(f"{where}: not a task config (experiments/configs/bc_*.py, ilql_*.py)"
                         ) from None
    cli.check_train_fields(run_config, where)
    roles[name] = run_config.task.role
  for agent, customer in config.evaluation.pairs:
    _check_party(config, roles, agent, "agent", "config.evaluation.pairs")
    _check_party(config, roles, customer, "customer", "config.evaluation.pairs")
  collapse = config.collapse
  for arm in collapse.arms:
    if arm not in roles:
      raise cli.BadInput(f"config.collapse.arms: {arm!r} is not a run of config.runs")
  if collapse.arms:
    if not collapse.held_out:
      raise cli.BadInput("config.collapse.held_out: empty; the comparison is on held-out "
                         "customers")
    for spec in (collapse.start,) + tuple(collapse.arms):
      _check_party(config, roles, spec, "agent", "config.collapse")
    for spec in (collapse.training_simulator,) + tuple(collapse.held_out):
      _check_party(config, roles, spec, "customer", "config.collapse")


def _check_party(config: ml_collections.ConfigDict, roles: dict[str, str], spec: str,
                 role: str, what: str) -> None:
  """A party the pipeline plays: one of its runs (at a step it saves) or a party spec."""
  name, step = init_from.split_step(spec)
  if name not in roles:
    cli.check_party(spec, role, what)
  elif step is not None and not _saves(config.runs[name], step):
    raise cli.BadInput(f"{what}: {spec}: run {name!r} saves no checkpoint "
                       f"at step {step} (every {config.runs[name].eval_every} to "
                       f"{config.runs[name].steps})")
  elif roles[name] != role:
    raise cli.BadInput(f"{what}: run {name!r} plays the {roles[name]}, paired as the {role}")


def _saves(run: ml_collections.ConfigDict, step: int) -> bool:
  """Whether a pipeline run checkpoints at `step` (every eval_every, and at its last step)."""
  return 0 < step <= run.steps and (step % run.eval_every == 0 or step == run.steps)


def main(argv):
  del argv
  validate(_CONFIG.value, _WORKDIR.value)
  try:
    pipeline_lib.run(_CONFIG.value, _WORKDIR.value)
  except pipeline_lib.Stopped as e:  # Not a failure: exit as a process SIGTERM ended would.
    logging.warning("%s", e)
    sys.exit(128 + signal.SIGTERM)


if __name__ == "__main__":
  cli.run(main)
