"""Runs a test script on eight fake CPU devices.

XLA_FLAGS must be set before jax is imported, hence a subprocess.
"""

import os
import subprocess
import sys

from compile_flags import FAST_COMPILE

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_on_eight_devices(script: str, success_marker: str) -> None:
  """Fails the calling test unless `script` exits cleanly and prints `success_marker`."""
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": REPO,
         "XLA_FLAGS": f"--xla_force_host_platform_device_count=8 {FAST_COMPILE}"}
  result = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
  assert success_marker in result.stdout
