"""tinygrad kernel load time: tinygrad's own loader against elfjit, in the same run.

    .venv/bin/python python/bench/tinygrad_load.py

ELFJIT_BENCH_ROUNDS sets the number of rounds (30); ELFJIT_BENCH_QUICK=1 collects the
objects of one tensor program only (the test suite's smoke run: tinygrad's own code
generation, not the loads, takes most of this script's time).

Collects the ELF objects tinygrad 0.14.0's CPU device produces for a set of tensor
operations (compiled once, through the switch), then loads every object again and again
with tinygrad's own CPUProgram.__init__ (its Python relocator, into a writable and
executable mapping) and with elfjit's (elfjit.tinygrad installed), alternating which goes
first each round. Prints the median time per kernel load of each and their ratio. Only
the load is timed (constructing the CPUProgram): not compiling, calling or freeing.
"""

from __future__ import annotations

import gc
import os
import statistics
import time

os.environ.setdefault("DEV", "CPU")
os.environ.setdefault("CACHELEVEL", "0")

import elfjit.tinygrad  # noqa: E402

elfjit.tinygrad.install()

from tinygrad import Device, Tensor, dtypes  # noqa: E402
from tinygrad.runtime import ops_cpu  # noqa: E402

ROUNDS = int(os.environ.get("ELFJIT_BENCH_ROUNDS", "30"))
QUICK = os.environ.get("ELFJIT_BENCH_QUICK") == "1"


def collect_objects() -> list:
    """The TinyELF objects of the device's own programs and of a few tensor programs."""
    objects = []
    load = ops_cpu.CPUProgram.__init__

    def capture(self, dev, obj):  # type: ignore[no-untyped-def]
        objects.append(obj)
        load(self, dev, obj)

    ops_cpu.CPUProgram.__init__ = capture
    try:
        Tensor.manual_seed(0)
        a, b = Tensor.rand(32, 32), Tensor.rand(32, 32)
        img, w = Tensor.rand(1, 3, 16, 16), Tensor.rand(8, 3, 3, 3)
        programs = [a + b]
        programs += [] if QUICK else [
            (a @ b).relu(),
            a.softmax(),
            a.exp().log().sum(axis=1),
            a.argmax(axis=0),
            img.conv2d(w, padding=1).max_pool2d(),
            a.cast(dtypes.float16) * 2,
            a.cast(dtypes.bfloat16).cast(dtypes.float32).mean(),
            a.cumsum(axis=1),
        ]
        for t in programs:
            t.realize()
    finally:
        ops_cpu.CPUProgram.__init__ = load
    return [o for o in objects if o.lib[:4] == b"\x7fELF"]


def time_loads(device, objects: list) -> float:  # type: ignore[no-untyped-def]
    """Seconds per load, loading each object once (programs freed after the clock)."""
    programs = []
    gc.disable()
    start = time.perf_counter()
    for obj in objects:
        programs.append(ops_cpu.CPUProgram(device, obj))
    elapsed = time.perf_counter() - start
    gc.enable()
    del programs
    gc.collect()
    return elapsed / len(objects)


def main() -> None:
    objects = collect_objects()
    device = Device["CPU"]
    sizes = sorted(len(o.lib) for o in objects)
    times: dict[str, list[float]] = {"tinygrad": [], "elfjit": []}
    for r in range(ROUNDS):
        order = ["tinygrad", "elfjit"] if r % 2 == 0 else ["elfjit", "tinygrad"]
        for loader in order:
            if loader == "elfjit":
                elfjit.tinygrad.install()
            else:
                elfjit.tinygrad.uninstall()
            times[loader].append(time_loads(device, objects))
    elfjit.tinygrad.install()
    own, ours = (statistics.median(times[k]) for k in ("tinygrad", "elfjit"))
    print(f"kernels: {len(objects)} ELF objects of {sizes[0]}..{sizes[-1]} bytes, {ROUNDS} rounds")
    print(f"tinygrad's own loader: {own * 1e6:8.1f} us per kernel (median)")
    print(f"elfjit:                {ours * 1e6:8.1f} us per kernel (median)")
    print(f"ratio (tinygrad's time / elfjit's): {own / ours:.2f}")


main()
