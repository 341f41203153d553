"""The elfjit Python API: compile, load, call; buffers; resolvers; errors; the GIL."""

from __future__ import annotations

import ast
import ctypes
import mmap
import os
import re
import stat
import threading
from pathlib import Path

import numpy as np
import pytest

import elfjit
import elfjit._native
from conftest import REPO, run_python

KERNELS = """
int add(int a, int b) { return a + b; }
float dot(const float *a, const float *b, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}
int counter;
int bump(void) { return ++counter; }
"""

ADD = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int)


@pytest.fixture(scope="module")
def kernels() -> bytes:
    return elfjit.compile(KERNELS)


def test_compile_load_call(kernels: bytes) -> None:
    assert kernels[:4] == b"\x7fELF"
    m = elfjit.load(kernels)
    assert m.functions == ["add", "dot", "bump"]
    assert m.arch == elfjit.host()
    assert ADD(m.address("add"))(2, 40) == 42
    dot = ctypes.CFUNCTYPE(
        ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int
    )(m.address("dot"))
    a = np.array([1, 2, 3], dtype=np.float32)
    b = np.array([4, 5, 6], dtype=np.float32)
    assert dot(a.ctypes.data, b.ctypes.data, 3) == 32.0
    bump = ctypes.CFUNCTYPE(ctypes.c_int)(m.address("bump"))
    assert (bump(), bump()) == (1, 2)
    assert ctypes.c_int.from_address(m.address("counter")).value == 2
    start, length = m.region
    assert length > 0 and start <= m.address("dot") < start + length
    assert "add" in m and "counter" in m and "nope" not in m
    assert "functions=[\"add\", \"dot\", \"bump\"]" in repr(m)


def test_prepare_is_optional_and_repeatable(kernels: bytes) -> None:
    assert elfjit.prepare() is None
    assert elfjit.prepare() is None
    m = elfjit.load(kernels)
    assert ADD(m.address("add"))(2, 40) == 42


def test_ir_at_every_opt_level_and_flags() -> None:
    ir = "define i64 @twice(i64 %x) {\n  %y = shl i64 %x, 1\n  ret i64 %y\n}\n"
    for opt in range(4):
        m = elfjit.load(elfjit.compile(ir, lang="ir", opt=opt))
        twice = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(m.address("twice"))
        assert twice(-21) == -42
    m = elfjit.load(elfjit.compile(b"int value(void) { return VALUE; }", flags=["-DVALUE=5"]))
    assert ctypes.CFUNCTYPE(ctypes.c_int)(m.address("value"))() == 5


def test_foreign_target_compiles_but_does_not_load() -> None:
    obj = elfjit.compile("int f(int x) { return x + 1; }", target="aarch64")
    assert int.from_bytes(obj[18:20], "little") == 183  # e_machine EM_AARCH64
    with pytest.raises(elfjit.UnsupportedError, match="aarch64"):
        elfjit.load(obj)


def test_compiler_rt_helpers_resolve() -> None:
    src = """
    unsigned __int128 div(unsigned __int128 a, unsigned __int128 b) { return a / b; }
    float round_bf16(float x) { return (float)(__bf16)x; }
    """
    m = elfjit.load(elfjit.compile(src))
    f = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_float)(m.address("round_bf16"))
    assert f(1.0 + 1.0 / 256) == 1.0 and f(3.0) == 3.0


def test_every_buffer_kind_is_accepted(kernels: bytes) -> None:
    with mmap.mmap(-1, len(kernels)) as mapped:
        mapped.write(kernels)
        views = [
            kernels,
            bytearray(kernels),
            memoryview(kernels),
            np.frombuffer(kernels, dtype=np.uint8),
            memoryview(bytearray(b"xx" + kernels))[2:],
            mapped,
        ]
        for view in views:
            assert ADD(elfjit.load(view).address("add"))(1, 2) == 3


def test_non_buffers_and_strided_buffers_are_type_errors(kernels: bytes) -> None:
    with pytest.raises(TypeError, match="not str"):
        elfjit.load("not bytes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="C-contiguous"):
        elfjit.load(memoryview(kernels)[::2])
    with pytest.raises(TypeError, match="int"):
        elfjit.load(42)  # type: ignore[arg-type]


def test_several_objects_link_together() -> None:
    caller = elfjit.compile("int callee(int);\nint caller(int x) { return callee(x) + 1; }")
    callee = elfjit.compile("int callee(int x) { return x * 2; }")
    for objects in ([caller, callee], (caller, callee), iter([caller, callee])):
        m = elfjit.load(objects)
        assert ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(m.address("caller"))(20) == 41
    with pytest.raises(elfjit.LinkError, match="callee"):
        elfjit.load([caller])


SCALED = "extern int external_scale;\nint scaled(int x) { return x * external_scale; }\n"


def test_resolver_mapping_and_callable() -> None:
    obj = elfjit.compile(SCALED)
    scale = ctypes.c_int(3)
    with pytest.raises(elfjit.LinkError, match="external_scale"):
        elfjit.load(obj)
    m = elfjit.load(obj, resolver={"external_scale": ctypes.addressof(scale)})
    scaled = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(m.address("scaled"))
    assert scaled(14) == 42
    asked: list[str] = []

    def resolve(name: str) -> int | None:
        asked.append(name)
        return ctypes.addressof(scale) if name == "external_scale" else None

    m = elfjit.load(obj, resolver=resolve)
    assert asked == ["external_scale"]
    scale.value = 5
    assert ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(m.address("scaled"))(2) == 10
    # None falls through to the process (memcpy is found by dlsym).
    uses_memcpy = elfjit.compile(
        "void *memcpy(void *, const void *, unsigned long);\n"
        "void copy(char *d, const char *s, unsigned long n) { memcpy(d, s, n); }"
    )
    elfjit.load(uses_memcpy, resolver=lambda name: None)


def test_resolver_failures_are_raised() -> None:
    obj = elfjit.compile(SCALED)

    def broken(name: str) -> int:
        raise ValueError(f"no {name} here")

    with pytest.raises(ValueError, match="no external_scale here"):
        elfjit.load(obj, resolver=broken)
    with pytest.raises(TypeError, match="external_scale"):
        elfjit.load(obj, resolver=lambda name: "not an address")
    with pytest.raises(TypeError, match="external_scale"):
        elfjit.load(obj, resolver={"external_scale": -1})
    with pytest.raises(TypeError, match="mapping .* or a callable"):
        elfjit.load(obj, resolver=42)  # type: ignore[arg-type]


def test_a_callable_resolver_cannot_change_a_mutable_object_under_the_loader() -> None:
    # A callable runs Python code during the link, so mutable buffers are copied first.
    obj = bytearray(elfjit.compile(SCALED))
    scale = ctypes.c_int(3)

    def resolve_and_scribble(name: str) -> int:
        obj[:] = bytes(len(obj))
        return ctypes.addressof(scale)

    m = elfjit.load(obj, resolver=resolve_and_scribble)
    assert ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(m.address("scaled"))(2) == 6


def test_errors_carry_the_library_messages() -> None:
    with pytest.raises(elfjit.ArgumentError) as e:
        elfjit.compile("int x;", target="vax")
    assert str(e.value) == (
        "bad target: unknown architecture `vax`; one of x86_64, aarch64, riscv64, "
        "loongarch64, ppc64le"
    )
    with pytest.raises(elfjit.ArgumentError, match=r"^bad lang: unknown language `rust`"):
        elfjit.compile("int x;", lang="rust")
    for opt in (-1, 4):
        with pytest.raises(elfjit.ArgumentError, match=rf"^bad opt level: {opt} \(0 to 3\)$"):
            elfjit.compile("int x;", opt=opt)
    with pytest.raises(elfjit.CompileError, match="error: expected"):
        elfjit.compile("int f( {")
    with pytest.raises(elfjit.LinkError):
        elfjit.load(b"this is not an ELF object")
    m = elfjit.load(elfjit.compile("int only(void) { return 1; }"))
    with pytest.raises(elfjit.SymbolNotFoundError) as e:
        m.address("missing")
    assert str(e.value) == "no symbol `missing` in the module; its global functions: only"
    for cls in (
        elfjit.ArgumentError,
        elfjit.CompileError,
        elfjit.ClangNotFoundError,
        elfjit.LinkError,
        elfjit.SymbolNotFoundError,
        elfjit.UnsupportedError,
        elfjit.ResourceError,
        elfjit.InternalError,
    ):
        assert issubclass(cls, elfjit.Error) and cls.__module__ == "elfjit"
    assert issubclass(elfjit.ClangNotFoundError, elfjit.CompileError)


def test_compile_memory_limit() -> None:
    """clang past the memory limit is a CompileError naming it; sizes are bytes or text."""
    huge = 'asm(".fill 268435456");\nint f(void) { return 1; }\n'
    for limit in ("128M", 128 << 20):
        with pytest.raises(
            elfjit.CompileError,
            match=r"exceeded the compiler memory limit of 128 MiB \(ELFJIT_COMPILE_MEMORY\)",
        ):
            elfjit.compile(huge, memory_limit=limit)
    for limit in (None, 0, "0", "128M", 128 << 20):
        assert elfjit.compile("int f(void) { return 1; }", memory_limit=limit)[:4] == b"\x7fELF"
    with pytest.raises(elfjit.ArgumentError, match=r"^bad memory_limit: -1 "):
        elfjit.compile("int x;", memory_limit=-1)
    with pytest.raises(elfjit.ArgumentError, match=r"^bad memory_limit: `lots`: expected a size"):
        elfjit.compile("int x;", memory_limit="lots")


def test_messages_match_the_c_abi() -> None:
    """The same failures through libelfjit.so give the same text: both are the library's."""
    lib = ctypes.CDLL(os.environ.get("ELFJIT_CAPI_LIB", str(REPO / "target/debug/libelfjit.so")))
    lib.elfjit_last_error.restype = ctypes.c_char_p
    lib.elfjit_load.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p]
    foreign = elfjit.compile("int f(int x) { return x + 1; }", target="aarch64")
    for obj in (b"this is not an ELF object", elfjit.compile(SCALED), foreign):
        with pytest.raises(elfjit.Error) as e:
            elfjit.load(obj)
        handle = ctypes.c_void_p()
        assert lib.elfjit_load(obj, len(obj), ctypes.byref(handle)) != 0
        assert lib.elfjit_last_error().decode() == str(e.value)


def test_clang_not_found() -> None:
    out = run_python(
        "import elfjit\n"
        "try:\n"
        "    elfjit.compile('int x;')\n"
        "except elfjit.ClangNotFoundError as e:\n"
        "    print('raised:', e)\n",
        env={"ELFJIT_CLANG": "/nonexistent/clang"},
    )
    assert "raised: no clang found (tried ELFJIT_CLANG=/nonexistent/clang" in out


def test_cache_writes_once_and_hits(tmp_path: Path) -> None:
    out = run_python(
        "import elfjit, pathlib\n"
        "a = elfjit.compile('int k(void) { return 7; }')\n"
        "d = pathlib.Path(__import__('os').environ['ELFJIT_CACHE_DIR']) / 'objects'\n"
        "print('uncached', len(list(d.glob('*.obj'))) if d.exists() else 0)\n"
        "b = elfjit.compile('int k(void) { return 7; }', cache=True)\n"
        "n = len(list(d.glob('*.obj')))\n"
        "c = elfjit.compile('int k(void) { return 7; }', cache=True)\n"
        "print('cached', n, len(list(d.glob('*.obj'))), a == b == c)\n",
        # A fresh cache directory has no compile server: spawn rather than build one.
        env={"ELFJIT_CACHE_DIR": str(tmp_path), "ELFJIT_COMPILER": "spawn"},
    )
    uncached = re.search(r"uncached (\d+)", out)
    cached = re.search(r"cached (\d+) (\d+) (\w+)", out)
    assert uncached and cached, out
    assert uncached.group(1) == "0"
    assert int(cached.group(1)) >= 1 and cached.group(1) == cached.group(2)
    assert cached.group(3) == "True"


def test_the_gil_is_released_while_compiling(tmp_path: Path) -> None:
    """clang (a wrapper) waits until the main thread has run Python code during the
    compile; with the GIL held the main thread could not, and the wrapper gives up."""
    started, release = tmp_path / "started", tmp_path / "release"
    wrapper = tmp_path / "clang"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'[ "$1" = --version ] && exec {elfjit.clang_path()} "$@"\n'
        f"touch {started}\n"
        f"for i in $(seq 200); do [ -e {release} ] && exec {elfjit.clang_path()} \"$@\"; sleep 0.05; done\n"
        "echo 'the main thread never ran during the compile' >&2; exit 1\n"
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    out = run_python(
        "import elfjit, os, threading, time\n"
        "result = []\n"
        "t = threading.Thread(target=lambda: result.append(elfjit.compile('int k(void) { return 1; }')))\n"
        "t.start()\n"
        f"while not os.path.exists({str(started)!r}) and t.is_alive(): time.sleep(0.01)\n"
        f"open({str(release)!r}, 'w').close()\n"
        "t.join()\n"
        "print('object', result[0][:4] if result else None)\n",
        env={"ELFJIT_CLANG": str(wrapper)},
    )
    assert "object b'\\x7fELF'" in out


def test_threads_compile_and_load_at_once() -> None:
    results: dict[int, int] = {}

    def work(i: int) -> None:
        m = elfjit.load(elfjit.compile(f"long k{i}(long x) {{ return x * {i + 1}; }}"))
        results[i] = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_long)(m.address(f"k{i}"))(10)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: 10 * (i + 1) for i in range(4)}


def test_a_dropped_module_gives_its_memory_back(kernels: bytes) -> None:
    """A module the garbage collector frees returns its memory to the code arena: after a
    warm-up, thousands of load, call and drop cycles run at a few dozen addresses at most
    (the page-granular pool hands a freed run out again after 16 others), not a new one
    each time, and add no mappings."""

    def mappings() -> int:
        return len(Path("/proc/self/maps").read_text().splitlines())

    warm_up, cycles = 100, 3000
    seen: set[int] = set()
    before = 0
    for i in range(cycles):
        m = elfjit.load(kernels)
        add = m.address("add")
        assert ADD(add)(i, 1) == i + 1
        if i >= warm_up:
            seen.add(add)
        del m
        if i == warm_up - 1:
            before = mappings()
    assert len(seen) <= 32, f"{len(seen)} distinct addresses"
    assert mappings() <= before + 2


def test_stubs_list_exactly_what_the_module_exports() -> None:
    stub = ast.parse((Path(elfjit.__file__).parent / "_native.pyi").read_text())
    declared = set()
    for node in stub.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            declared.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            declared.add(node.target.id)
    declared.discard("Resolver")  # a type alias, only for the stubs
    exported = {n for n in dir(elfjit._native) if not n.startswith("__") or n == "__version__"}
    exported -= {"_native"}
    assert declared == exported
    assert (Path(elfjit.__file__).parent / "py.typed").exists()
    module_methods = {
        n.name
        for c in stub.body
        if isinstance(c, ast.ClassDef) and c.name == "Module"
        for n in c.body
        if isinstance(n, ast.FunctionDef)
    }
    assert module_methods == {"address", "functions", "region", "arch", "__contains__"}


def test_readme_python_example_runs() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme.split("\n## From Python", 1)
    assert len(section) == 2, "README.md has no '## From Python' section"
    block = re.search(r"```python\n(.*?)```", section[1], re.S)
    assert block, "no ```python block under '## From Python'"
    run_python(block.group(1))
