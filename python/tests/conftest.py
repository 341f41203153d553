"""Shared set-up of the Python tests (run by ./scripts/test-python, or
`.venv/bin/python -m pytest python/tests`).

tinygrad reads its settings from the environment when it is imported, so they are set
here, before any test module imports it: the CPU device, and no tinygrad disk cache (so
every kernel is compiled and loaded in this run, not fetched from ~/.cache/tinygrad).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

os.environ["DEV"] = "CPU"
os.environ["CACHELEVEL"] = "0"
# tinygrad's own compiler runs $CC: with the switch nothing may run it, in this process or
# in the compile workers tinygrad spawns (the tests that want it pass a real one).
os.environ["CC"] = "/nonexistent/clang-run-by-tinygrad-itself"

REPO = Path(__file__).resolve().parents[2]


def writable_executable_mappings() -> list[str]:
    """The lines of /proc/self/maps whose pages are writable and executable."""
    with open("/proc/self/maps") as maps:
        return [line.rstrip() for line in maps if line.split()[1].startswith("rwx")]


def run_python(code: str, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    """Runs `code` in a fresh interpreter of this environment (without the tinygrad
    switch's ELFJIT_TINYGRAD unless `env` sets it); returns its stdout, or fails the test
    with its output."""
    full_env = {**os.environ, "DEV": "CPU", "CACHELEVEL": "0", **(env or {})}
    if "ELFJIT_TINYGRAD" not in (env or {}):
        full_env.pop("ELFJIT_TINYGRAD", None)
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout
