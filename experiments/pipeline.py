"""`python -m experiments.pipeline --workdir=DIR [--config=...] [--config.key=value]`.

The main job behind `make run`: it checks the config (every stage's section,
each run's training config, the evaluated pairs) and hands it to
`pipeline_lib.run`.
"""

import os

import ml_collections
from absl import flags

from experiments import cli, configs, pipeline_lib
from experiments.configs import quickstart

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
    for spec, role in ((agent, "agent"), (customer, "customer")):
      if spec not in roles:
        cli.check_party(spec, role, "config.evaluation.pairs")
      elif roles[spec] != role:
        raise cli.BadInput(f"config.evaluation.pairs: run {spec!r} plays the {roles[spec]}, "
                           f"paired as the {role}")


def main(argv):
  del argv
  validate(_CONFIG.value, _WORKDIR.value)
  pipeline_lib.run(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
  cli.run(main)
