"""tinygrad's CPU device on elfjit: tensor operations against numpy, W^X, the switches."""

from __future__ import annotations

import importlib.metadata
import math
from collections.abc import Callable

import numpy as np
import pytest

import elfjit
import elfjit.tinygrad
from conftest import REPO, run_python, writable_executable_mappings

# Installed before tinygrad is imported: it patches tinygrad as ops_cpu loads.
elfjit.tinygrad.install()

from tinygrad import Device, Tensor, dtypes  # noqa: E402

rng = np.random.default_rng(16)
A = rng.standard_normal((4, 5)).astype(np.float32)
B = rng.standard_normal((4, 5)).astype(np.float32)
POS = rng.uniform(0.1, 3.0, (4, 5)).astype(np.float32)
M = rng.standard_normal((4, 6)).astype(np.float32)
N = rng.standard_normal((6, 3)).astype(np.float32)
BM = rng.standard_normal((2, 4, 6)).astype(np.float32)
BN = rng.standard_normal((2, 6, 3)).astype(np.float32)
IMG = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
KERNEL = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
BIAS = rng.standard_normal(4).astype(np.float32)
IDX = np.array([[0, 4], [1, 1], [3, 2], [2, 0]], dtype=np.int32)
I64 = np.array([7, -7, 100, -100, 10**12, -(10**12) - 3, 5, 0], dtype=np.int64)
D64 = np.array([2, 2, -3, 7, 7, 1000003, -5, 3], dtype=np.int64)
I32 = rng.integers(-1000, 1000, 16).astype(np.int32)


def T(x: np.ndarray) -> Tensor:
    return Tensor(x)


def bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 (round to nearest even) -> float32, in numpy."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return rounded.astype(np.uint32).view(np.float32)


def np_conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray, pad: int) -> np.ndarray:
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    kh, kw = w.shape[2:]
    oh, ow = x.shape[2] - kh + 1, x.shape[3] - kw + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow), np.float32)
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = np.einsum("nchw,ochw->no", x[:, :, i : i + kh, j : j + kw], w)
    return out + b[None, :, None, None]


def np_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def pool(x: np.ndarray, reduce: Callable[..., np.ndarray]) -> np.ndarray:
    n, c, h, w = x.shape
    return reduce(x.reshape(n, c, h // 2, 2, w // 2, 2), axis=(3, 5))


def scatter_ref() -> np.ndarray:
    out = A.copy()
    for r in range(4):
        for k in range(2):
            out[r, IDX[r, k]] = B[r, k]
    return out


def gelu_ref(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


# (name, tinygrad, numpy, rtol, atol)
Op = tuple[str, Callable[[], Tensor], Callable[[], np.ndarray], float, float]
F32 = (1e-5, 1e-6)
OPS: list[Op] = [
    # elementwise
    ("add", lambda: T(A) + T(B), lambda: A + B, *F32),
    ("sub", lambda: T(A) - T(B), lambda: A - B, *F32),
    ("mul", lambda: T(A) * T(B), lambda: A * B, *F32),
    ("div", lambda: T(A) / T(POS), lambda: A / POS, *F32),
    ("neg", lambda: -T(A), lambda: -A, *F32),
    ("abs", lambda: T(A).abs(), lambda: np.abs(A), *F32),
    ("maximum", lambda: T(A).maximum(T(B)), lambda: np.maximum(A, B), *F32),
    ("minimum", lambda: T(A).minimum(T(B)), lambda: np.minimum(A, B), *F32),
    ("where", lambda: (T(A) > T(B)).where(T(A), T(B) * 2), lambda: np.where(A > B, A, B * 2), *F32),
    ("pow", lambda: T(POS) ** 1.7, lambda: POS**1.7, 1e-5, 1e-5),
    ("sqrt", lambda: T(POS).sqrt(), lambda: np.sqrt(POS), *F32),
    ("reciprocal", lambda: T(POS).reciprocal(), lambda: 1 / POS, *F32),
    ("relu", lambda: T(A).relu(), lambda: np.maximum(A, 0), *F32),
    ("sigmoid", lambda: T(A).sigmoid(), lambda: 1 / (1 + np.exp(-A)), 1e-5, 1e-6),
    ("tanh", lambda: T(A).tanh(), lambda: np.tanh(A), 1e-5, 1e-6),
    ("gelu", lambda: T(A).gelu(), lambda: gelu_ref(A), 1e-5, 1e-6),
    ("clip", lambda: T(A).clip(-0.5, 0.5), lambda: np.clip(A, -0.5, 0.5), *F32),
    ("floor", lambda: (T(A) * 3).floor(), lambda: np.floor(A * 3), *F32),
    ("ceil", lambda: (T(A) * 3).ceil(), lambda: np.ceil(A * 3), *F32),
    ("compare", lambda: (T(A) < T(B)).cast(dtypes.int32), lambda: (A < B).astype(np.int32), 0, 0),
    # transcendental
    ("exp", lambda: T(A).exp(), lambda: np.exp(A), 1e-5, 1e-6),
    ("log", lambda: T(POS).log(), lambda: np.log(POS), 1e-5, 1e-6),
    ("exp2", lambda: T(A).exp2(), lambda: np.exp2(A), 1e-5, 1e-6),
    ("log2", lambda: T(POS).log2(), lambda: np.log2(POS), 1e-5, 1e-6),
    ("sin", lambda: (T(A) * 4).sin(), lambda: np.sin(A * 4), 1e-5, 1e-5),
    ("cos", lambda: (T(A) * 4).cos(), lambda: np.cos(A * 4), 1e-5, 1e-5),
    ("erf", lambda: T(A).erf(), lambda: np.vectorize(math.erf)(A), 1e-4, 1e-5),
    # reductions
    ("sum", lambda: T(A).sum(), lambda: A.sum(), 1e-5, 1e-5),
    ("sum_axis", lambda: T(A).sum(axis=1), lambda: A.sum(axis=1), 1e-5, 1e-5),
    ("mean", lambda: T(A).mean(axis=0), lambda: A.mean(axis=0), 1e-5, 1e-6),
    ("max", lambda: T(A).max(axis=1), lambda: A.max(axis=1), *F32),
    ("min", lambda: T(A).min(), lambda: A.min(), *F32),
    ("prod", lambda: T(POS).prod(axis=1), lambda: POS.prod(axis=1), 1e-5, 1e-6),
    ("var", lambda: T(A).var(axis=1), lambda: A.var(axis=1, ddof=1), 1e-5, 1e-6),
    ("std", lambda: T(A).std(), lambda: A.std(ddof=1), 1e-5, 1e-6),
    ("cumsum", lambda: T(A).cumsum(axis=1), lambda: A.cumsum(axis=1), 1e-5, 1e-5),
    # matmul, convolution, pooling, softmax
    ("matmul", lambda: T(M) @ T(N), lambda: M @ N, 1e-5, 1e-5),
    ("batched_matmul", lambda: T(BM) @ T(BN), lambda: BM @ BN, 1e-5, 1e-5),
    ("matvec", lambda: T(M) @ T(N[:, 0].copy()), lambda: M @ N[:, 0], 1e-5, 1e-5),
    (
        "conv2d",
        lambda: T(IMG).conv2d(T(KERNEL), T(BIAS), padding=1),
        lambda: np_conv2d(IMG, KERNEL, BIAS, 1),
        1e-4,
        1e-4,
    ),
    ("max_pool2d", lambda: T(IMG).max_pool2d(), lambda: pool(IMG, np.max), *F32),
    ("avg_pool2d", lambda: T(IMG).avg_pool2d(), lambda: pool(IMG, np.mean), 1e-5, 1e-6),
    ("softmax", lambda: T(A).softmax(), lambda: np_softmax(A), 1e-5, 1e-6),
    ("log_softmax", lambda: T(A).log_softmax(), lambda: np.log(np_softmax(A)), 1e-5, 1e-5),
    ("argmax", lambda: T(A).argmax(axis=1), lambda: A.argmax(axis=1), 0, 0),
    ("argmax_all", lambda: T(A).argmax(), lambda: np.array(A.argmax()), 0, 0),
    ("argmin", lambda: T(A).argmin(axis=0), lambda: A.argmin(axis=0), 0, 0),
    # indexing and scatter
    ("slice", lambda: T(A)[1:3, ::2], lambda: A[1:3, ::2], 0, 0),
    ("fancy_index", lambda: T(A)[Tensor([3, 0, 2])], lambda: A[[3, 0, 2]], 0, 0),
    ("gather", lambda: T(A).gather(1, Tensor(IDX)), lambda: np.take_along_axis(A, IDX, 1), 0, 0),
    ("scatter", lambda: T(A).scatter(1, Tensor(IDX), T(B[:, :2].copy())), scatter_ref, 0, 0),
    (
        "scatter_add",
        lambda: Tensor.zeros(4, 5).contiguous().scatter_reduce(1, Tensor(IDX), Tensor.ones(4, 2), reduce="sum"),
        lambda: np.stack([np.bincount(r, minlength=5) for r in IDX]).astype(np.float32),
        0,
        0,
    ),
    ("one_hot", lambda: Tensor([0, 3, 1]).one_hot(4), lambda: np.eye(4, dtype=np.int32)[[0, 3, 1]], 0, 0),
    ("masked_fill", lambda: T(A).masked_fill(T(A) < 0, 0.0), lambda: np.where(A < 0, 0, A), 0, 0),
    # movement
    ("permute", lambda: T(BM).permute(2, 0, 1).contiguous(), lambda: BM.transpose(2, 0, 1), 0, 0),
    ("pad_flip", lambda: T(A).pad(((1, 0), (0, 2))).flip(1), lambda: np.pad(A, ((1, 0), (0, 2)))[:, ::-1], 0, 0),
    ("cat_stack", lambda: Tensor.stack(T(A), T(B)).cat(T(A)[None], dim=0), lambda: np.stack([A, B, A]), 0, 0),
    # float16 and bfloat16
    # tinygrad folds cast(float16).cast(float32) away: the float16 results are read as such.
    ("float16_cast", lambda: T(A * 100).cast(dtypes.float16), lambda: (A * 100).astype(np.float16), 0, 0),
    (
        "float16_arith",
        lambda: (T(A).cast(dtypes.float16) * T(B).cast(dtypes.float16) + 1).cast(dtypes.float32),
        lambda: (A.astype(np.float16) * B.astype(np.float16) + np.float16(1)).astype(np.float32),
        2e-3,
        2e-3,
    ),
    (
        "float64_to_float16",
        lambda: T(A.astype(np.float64) * 100).cast(dtypes.float16),
        lambda: (A.astype(np.float64) * 100).astype(np.float16),
        0,
        0,
    ),
    ("bfloat16_cast", lambda: T(A * 100).cast(dtypes.bfloat16).cast(dtypes.float32), lambda: bf16(A * 100), 0, 0),
    (
        "bfloat16_arith",
        lambda: (T(A).cast(dtypes.bfloat16) * T(B).cast(dtypes.bfloat16)).cast(dtypes.float32),
        lambda: bf16(bf16(A) * bf16(B)),
        0,
        0,
    ),
    (
        "float64_to_bfloat16",
        lambda: T(A.astype(np.float64) * 100).cast(dtypes.bfloat16).cast(dtypes.float32),
        lambda: bf16(A * 100),
        0,
        0,
    ),
    (
        "float16_to_bfloat16",
        lambda: T(A.astype(np.float16)).cast(dtypes.bfloat16).cast(dtypes.float32),
        lambda: bf16(A.astype(np.float16).astype(np.float32)),
        0,
        0,
    ),
    # integers
    ("int64_floordiv", lambda: T(I64) // T(D64), lambda: I64 // D64, 0, 0),
    ("int64_mod", lambda: T(I64) % T(D64), lambda: I64 % D64, 0, 0),
    ("int64_mul", lambda: T(I64) * 3 - T(D64), lambda: I64 * 3 - D64, 0, 0),
    ("int32_bitwise", lambda: (T(I32) & 0x5A) ^ (T(I32) | 3), lambda: (I32 & 0x5A) ^ (I32 | 3), 0, 0),
    ("int32_shift", lambda: (T(I32) << 3) + (T(I32).abs() >> 2), lambda: (I32 << 3) + (np.abs(I32) >> 2), 0, 0),
    ("int_to_float", lambda: T(I32).cast(dtypes.float32) / 7, lambda: I32.astype(np.float32) / 7, 1e-6, 1e-6),
]


def test_there_are_at_least_forty_ops() -> None:
    assert len(OPS) >= 40
    assert len({name for name, *_ in OPS}) == len(OPS)


@pytest.mark.parametrize("name,op,reference,rtol,atol", OPS, ids=[o[0] for o in OPS])
def test_op_matches_numpy(
    name: str, op: Callable[[], Tensor], reference: Callable[[], np.ndarray], rtol: float, atol: float
) -> None:
    before = elfjit.tinygrad.loads()
    got = op().numpy()
    want = reference()
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    np.testing.assert_allclose(got.astype(np.float64), np.asarray(want).astype(np.float64), rtol=rtol, atol=atol)
    assert elfjit.tinygrad.loads() > before, "no kernel went through elfjit"


def test_the_switch_is_what_loaded_the_kernels() -> None:
    from tinygrad.runtime import ops_cpu
    from tinygrad.runtime.support import compiler_cpu

    assert Device.DEFAULT == "CPU"
    assert ops_cpu.CPUProgram.__init__ is elfjit.tinygrad._program_init
    assert compiler_cpu.ClangCompiler.compile is elfjit.tinygrad._clang_compile
    assert elfjit.tinygrad.installed()


def test_no_mapping_is_writable_and_executable_after_the_ops() -> None:
    # Runs after every op above in a whole run; on its own it still runs some.
    (T(A).exp() @ T(N[:5].copy())).softmax().numpy()
    assert elfjit.tinygrad.loads() > 0
    assert writable_executable_mappings() == []


RWX_COUNT = "print('rwx', len(writable_executable_mappings()))\n"
# The same check as writable_executable_mappings(), in the child (importing conftest
# there would reset DEV).
PRELUDE = (
    "def writable_executable_mappings():\n"
    "    return [l for l in open('/proc/self/maps') if l.split()[1].startswith('rwx')]\n"
    "def kernel_permissions():\n"
    "    # The permissions of the mapping that holds each loaded program's entry.\n"
    "    import gc\n"
    "    from tinygrad.runtime.ops_cpu import CPUProgram\n"
    "    maps = [l.split() for l in open('/proc/self/maps')]\n"
    "    spans = [(*(int(x, 16) for x in m[0].split('-')), m[1]) for m in maps]\n"
    "    programs = [o for o in gc.get_objects() if isinstance(o, CPUProgram)]\n"
    "    return sorted({p for o in programs for lo, hi, p in spans if lo <= o.addr < hi})\n"
)


def test_tinygrad_own_loader_leaves_writable_executable_mappings() -> None:
    """The check above can fail: tinygrad's own loader maps kernels RWX."""
    out = run_python(
        PRELUDE + "from tinygrad import Tensor\n"
        "assert (Tensor([1.0, 2.0]) * 3).sum().item() == 9.0\n"
        "print('kernel pages', kernel_permissions())\n" + RWX_COUNT,
        # tinygrad runs `clang` by that name, or $CC.
        env={"CC": elfjit.clang_path()},
    )
    assert "kernel pages ['rwxp']" in out and int(out.split("rwx ")[1]) >= 1, out


def test_environment_variable_installs_the_switch() -> None:
    out = run_python(
        PRELUDE + "import sys\n"
        "assert 'elfjit.tinygrad' in sys.modules, 'the .pth hook did not run'\n"
        "from tinygrad import Tensor\n"
        "import elfjit.tinygrad\n"
        "assert (Tensor([1.0, 2.0]) * 3).sum().item() == 9.0\n"
        "print('installed', elfjit.tinygrad.installed(), 'loads', elfjit.tinygrad.loads())\n"
        "print('kernel pages', kernel_permissions())\n" + RWX_COUNT,
        # No clang by that name and no $CC: tinygrad alone could not compile.
        env={"ELFJIT_TINYGRAD": "1", "CC": ""},
    )
    assert "installed True" in out and "kernel pages ['r-xp']" in out and "rwx 0" in out, out
    assert int(out.split("loads")[1].split()[0]) >= 1, out


def test_a_compile_server_starts_when_tinygrad_imports_its_compiler() -> None:
    """Before any kernel: importing tinygrad's CPU compiler under the switch starts
    elfjit's compile server in the background (a child running the server binary), so
    the first kernels need not spawn clang while it starts."""
    out = run_python(
        "import os, time\n"
        "import elfjit.tinygrad\n"
        "elfjit.tinygrad.install()\n"
        "import tinygrad.runtime.support.compiler_cpu\n"
        "def servers():\n"
        "    found = []\n"
        "    for task in os.listdir('/proc/self/task'):\n"
        "        with open(f'/proc/self/task/{task}/children') as f:\n"
        "            for pid in f.read().split():\n"
        "                try:\n"
        "                    exe = os.readlink(f'/proc/{pid}/exe')\n"
        "                except OSError:\n"
        "                    continue\n"
        "                if os.path.basename(exe).startswith('compile-server-'):\n"
        "                    found.append(pid)\n"
        "    return found\n"
        "deadline = time.monotonic() + 120\n"
        "while not servers() and time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n"
        "print('servers', len(servers()))\n",
        env={"ELFJIT_COMPILER": ""},
    )
    assert "servers 1" in out, out


def test_compiler_rt_helpers_on_a_generic_cpu() -> None:
    """For a CPU without F16C, clang calls __extendhfsf2 / __truncsfhf2: elfjit resolves
    them (and reaches them through stubs when they are far)."""
    out = run_python(
        PRELUDE + "import elfjit, elfjit.tinygrad, numpy as np\n"
        "asked = set()\n"
        "load = elfjit.load\n"
        "elfjit.load = lambda lib, resolver=None: load(lib, resolver=lambda n: asked.add(n))\n"
        "elfjit.tinygrad.install()\n"
        "from tinygrad import Tensor, dtypes\n"
        "x = np.array([1.5, -2.25, 3.1, 1e-3, 1000.0], dtype=np.float32)\n"
        "h = Tensor(x).cast(dtypes.float16).numpy()\n"
        "np.testing.assert_array_equal(h, x.astype(np.float16))\n"
        "y = (Tensor(h) * 2 - 1).numpy()\n"
        "np.testing.assert_allclose(y, h * np.float16(2) - np.float16(1), rtol=1e-3)\n"
        "print('helpers', sorted(asked))\n" + RWX_COUNT,
        env={"DEV": "CPU::x86_64,x86-64"},
    )
    assert "__extendhfsf2" in out and "__truncsfhf2" in out and "rwx 0" in out, out


@pytest.mark.parametrize("renderer", ["LLVM", "X86"])
def test_other_cpu_renderers(renderer: str) -> None:
    """DEV=CPU:LLVM (ELF from libLLVM) and DEV=CPU:X86 (raw machine code): every program
    sits in read + execute pages. (With LLVM, tinygrad's diagnostic callback, a ctypes
    closure, has libffi map one writable and executable trampoline page: not a kernel.)"""
    out = run_python(
        PRELUDE + "import elfjit.tinygrad\n"
        "elfjit.tinygrad.install()\n"
        "from tinygrad import Tensor\n"
        "assert (Tensor([1.0, 2.0, 3.0]) * 2 + 1).sum().item() == 15.0\n"
        "print('loads', elfjit.tinygrad.loads(), 'kernel pages', kernel_permissions())\n",
        env={"DEV": f"CPU:{renderer}"},
    )
    assert "kernel pages ['r-xp']" in out and int(out.split("loads")[1].split()[0]) >= 1, out


def test_unsupported_versions_fail_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    assert elfjit.tinygrad.check_version("0.14.0") == "0.14.0"
    with pytest.raises(elfjit.tinygrad.UnsupportedTinygradError) as e:
        elfjit.tinygrad.check_version("0.13.0")
    assert "supports tinygrad 0.14.0, but tinygrad 0.13.0 is installed" in str(e.value)
    assert isinstance(e.value, elfjit.Error)

    def version(name: str) -> str:
        return "0.15.0" if name == "tinygrad" else importlib.metadata.version(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    with pytest.raises(elfjit.tinygrad.UnsupportedTinygradError, match="0.15.0 is installed"):
        elfjit.tinygrad.install()


def test_unsupported_version_fails_the_import_under_the_environment_variable() -> None:
    out = run_python(
        "import importlib.metadata as md\n"
        "real = md.version\n"
        "md.version = lambda n: '0.99.0' if n == 'tinygrad' else real(n)\n"
        "try:\n"
        "    import tinygrad.runtime.ops_cpu\n"
        "except Exception as e:\n"
        "    print(type(e).__name__, e)\n",
        env={"ELFJIT_TINYGRAD": "1"},
    )
    assert out.startswith("UnsupportedTinygradError elfjit.tinygrad supports tinygrad 0.14.0"), out


def test_load_benchmark_runs() -> None:
    out = run_python(
        (REPO / "python/bench/tinygrad_load.py").read_text(),
        env={"ELFJIT_BENCH_ROUNDS": "2", "ELFJIT_BENCH_QUICK": "1"},
    )
    assert "ratio" in out, out

