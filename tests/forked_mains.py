"""Runs many `python -m MODULE FLAGS...` commands for one test, importing the heavy libraries
once: this process imports JAX, the core and the plug-ins, then forks a child per command,
which runs the main as `python -m` would (its own flags, stdout, stderr and exit status).

    python tests/forked_mains.py < commands.json > results.json

stdin: a JSON list of [module, flag, ...]; stdout: a JSON list of {"returncode", "stdout",
"stderr"}, in order. Up to two children run at once (the suite's cores). Forking before any
JAX backend starts is safe: importing JAX starts no thread.
"""

import json
import os
import runpy
import sys
import tempfile

import jax  # noqa: F401 (imported once, before the forks)

from ilql_dialogue import registry

TIMEOUT_S = 300


def _child(command: list[str], out_path: str, err_path: str) -> None:
  for fd, path in ((1, out_path), (2, err_path)):
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(target, fd)
    os.close(target)
  sys.argv = [command[0], *command[1:]]
  status = 0
  try:
    runpy.run_module(command[0], run_name="__main__", alter_sys=True)
  except SystemExit as e:
    status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
  except BaseException:  # noqa: BLE001 (reported as python would)
    import traceback

    traceback.print_exc()
    status = 1
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(status)


def main() -> None:
  registry.load_plugins()
  commands = json.load(sys.stdin)
  folder = tempfile.mkdtemp(prefix="forked_mains_")
  results: list[dict | None] = [None] * len(commands)
  running: dict[int, int] = {}  # pid -> command index

  def reap() -> None:
    pid, status = os.wait()
    i = running.pop(pid)
    with open(os.path.join(folder, f"{i}.out")) as out, open(
        os.path.join(folder, f"{i}.err")) as err:
      results[i] = {"returncode": os.waitstatus_to_exitcode(status), "stdout": out.read(),
                    "stderr": err.read()}

  for i, command in enumerate(commands):
    if len(running) == 2:
      reap()
    pid = os.fork()
    if pid == 0:
      _child(command, os.path.join(folder, f"{i}.out"), os.path.join(folder, f"{i}.err"))
    running[pid] = i
  while running:
    reap()
  json.dump(results, sys.stdout)


if __name__ == "__main__":
  main()
