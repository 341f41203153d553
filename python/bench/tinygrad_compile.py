"""tinygrad compile time through the switch: spawned clang against elfjit's compile server.

    .venv/bin/python python/bench/tinygrad_compile.py

Realises ELFJIT_BENCH_OPS (100) distinct small tinygrad operations, each a new kernel
(its constants and shape differ, so neither tinygrad's caches nor elfjit's can serve it;
one more, untimed, first: tinygrad's own set-up takes seconds),
once in a fresh interpreter with ``ELFJIT_COMPILER=spawn`` (a clang per kernel, as
tinygrad itself compiles) and once with the variable unset (the compile server pool,
started by the first compile while clang is spawned meanwhile, as any program sees it),
alternating which goes first for ELFJIT_BENCH_ROUNDS (3) rounds. Prints, per compiler,
the median over the rounds of: the whole run of the operations (tinygrad's own Python
work included), the time spent in ``ClangCompiler.compile`` (which the switch routes to
``elfjit.compile``), and the ratios server / spawn.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

OPS = int(os.environ.get("ELFJIT_BENCH_OPS", "100"))
ROUNDS = int(os.environ.get("ELFJIT_BENCH_ROUNDS", "3"))


def child() -> None:
    """One run in this interpreter: prints a JSON line with the timings."""
    os.environ.setdefault("DEV", "CPU")
    os.environ["CACHELEVEL"] = "0"
    import elfjit.tinygrad

    elfjit.tinygrad.install()
    from tinygrad import Tensor
    from tinygrad.runtime.support import compiler_cpu

    compiling = [0.0, 0]
    compile_kernel = compiler_cpu.ClangCompiler.compile

    def timed(self, src):  # type: ignore[no-untyped-def]
        t = time.perf_counter()
        try:
            return compile_kernel(self, src)
        finally:
            compiling[0] += time.perf_counter() - t
            compiling[1] += 1

    def op(i: int) -> None:
        # A new shape and new constants each time: a kernel tinygrad has not seen.
        x = Tensor.ones(16 + i).contiguous().realize()
        (x * (1.5 + i) + float(i)).exp2().realize()

    # tinygrad's own first-use work (seconds: imports, its device's set-up) is not timed.
    op(OPS)
    compiler_cpu.ClangCompiler.compile = timed
    start = time.perf_counter()
    for i in range(OPS):
        op(i)
    whole = time.perf_counter() - start
    print(json.dumps({"whole": whole, "compile": compiling[0], "kernels": compiling[1]}))


def run(mode: str) -> dict:
    env = dict(os.environ)
    if mode == "spawn":
        env["ELFJIT_COMPILER"] = "spawn"
    else:
        env.pop("ELFJIT_COMPILER", None)
    out = subprocess.run(
        [sys.executable, __file__, "--child"], env=env, check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    results: dict[str, list[dict]] = {"spawn": [], "server": []}
    for r in range(ROUNDS):
        order = ["spawn", "server"] if r % 2 == 0 else ["server", "spawn"]
        for mode in order:
            results[mode].append(run(mode))
    med = {
        mode: {k: statistics.median(x[k] for x in runs) for k in ("whole", "compile", "kernels")}
        for mode, runs in results.items()
    }
    for mode, m in med.items():
        print(
            f"{mode:7} {OPS} ops: whole {m['whole'] * 1e3:8.1f} ms, compiling "
            f"{m['compile'] * 1e3:8.1f} ms over {m['kernels']:.0f} kernels "
            f"({m['compile'] / m['whole']:.0%} of the run)"
        )
    s, v = med["spawn"], med["server"]
    print(
        f"server / spawn: compiling {v['compile'] / s['compile']:.2f}x, "
        f"whole {v['whole'] / s['whole']:.2f}x (speed-up {s['whole'] / v['whole']:.2f}x); "
        f"median of {ROUNDS} rounds"
    )


if __name__ == "__main__":
    if sys.argv[1:] == ["--child"]:
        child()
    else:
        main()
