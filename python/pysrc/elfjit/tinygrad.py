"""tinygrad's CPU device on elfjit, with no change to tinygrad's source.

    import elfjit.tinygrad
    elfjit.tinygrad.install()      # or: ELFJIT_TINYGRAD=1 python program.py
    from tinygrad import Tensor    # DEV=CPU: every kernel is now loaded by elfjit

tinygrad 0.14.0's CPU device (``DEV=CPU``) compiles each kernel's C with ``clang -c`` and
loads the object itself (``tinygrad/runtime/ops_cpu.py``, ``CPUProgram.__init__``, with the
relocator of ``tinygrad/runtime/support/elf.py``): into a mapping that is writable *and*
executable, with x86_64 and aarch64 relocations only and no far-call path. The switch
replaces exactly two methods, the narrowest points where that happens:

- ``CPUProgram.__init__`` links the object with :func:`elfjit.load`: pages never writable
  and executable, calls beyond ±2 GiB through stubs, compiler-rt helpers (``__truncsfbf2``,
  ``__truncdfbf2``, ``__extendhfsf2``, ...) resolved. Everything else tinygrad reads from a
  program (``addr``, ``fxn``, ``name``, ``signature``, ``runtimevars``, ``lvp``) is set as
  tinygrad sets it. Raw machine code (``DEV=CPU:X86``, no ELF) is copied into a fresh
  mapping that is then made read + execute.
- ``ClangCompiler.compile`` compiles through :func:`elfjit.compile`: with the clang
  elfjit finds (``$ELFJIT_CLANG``, ``clang``, else the newest ``clang-NN`` in ``PATH``;
  tinygrad itself runs ``clang`` by that name, or ``$CC``), on pipes with a deadline, with
  elfjit's flags for the target plus tinygrad's CPU flags.

Only the tinygrad versions in :data:`SUPPORTED_VERSIONS` are patched; any other fails
with :class:`UnsupportedTinygradError` saying so.

``ELFJIT_TINYGRAD=1`` does the same for programs that cannot call :func:`install`: the
wheel ships a ``.pth`` hook that, when the variable is set at interpreter start, patches
tinygrad as soon as ``tinygrad.runtime.ops_cpu`` is imported (and fails that import on
an unsupported version).
"""

from __future__ import annotations

import ctypes
import importlib.abc
import importlib.machinery
import importlib.metadata
import mmap
import os
import platform
import sys
import threading
import types
from typing import Any

import elfjit

#: The tinygrad releases whose CPU device this module knows how to patch.
SUPPORTED_VERSIONS: tuple[str, ...] = ("0.14.0",)

#: Set to ``1`` at interpreter start to install the switch without calling install().
ENV_VAR = "ELFJIT_TINYGRAD"

_OPS_CPU = "tinygrad.runtime.ops_cpu"
_COMPILER_CPU = "tinygrad.runtime.support.compiler_cpu"

# tinygrad's CPU architecture names -> elfjit's.
_TARGETS = {"x86_64": "x86_64", "arm64": "aarch64", "riscv64": "riscv64"}


class UnsupportedTinygradError(elfjit.UnsupportedError):
    """The installed tinygrad is not a version this switch supports (or is missing)."""


_lock = threading.RLock()
_finder: _PatchOnImport | None = None
# "Class.method" -> (class, method name, tinygrad's function), while patched.
_originals: dict[str, tuple[type, str, Any]] = {}
_saved_env: str | None = None
_loads = 0


def check_version(version: str | None = None) -> str:
    """Returns the installed tinygrad's version (or checks `version`), raising
    UnsupportedTinygradError unless it is one of SUPPORTED_VERSIONS."""
    if version is None:
        try:
            version = importlib.metadata.version("tinygrad")
        except importlib.metadata.PackageNotFoundError:
            raise UnsupportedTinygradError(
                "tinygrad is not installed; elfjit.tinygrad supports tinygrad "
                f"{' '.join(SUPPORTED_VERSIONS)} (pip install tinygrad=={SUPPORTED_VERSIONS[-1]})"
            ) from None
    if version not in SUPPORTED_VERSIONS:
        raise UnsupportedTinygradError(
            f"elfjit.tinygrad supports tinygrad {', '.join(SUPPORTED_VERSIONS)}, but tinygrad "
            f"{version} is installed: install tinygrad=={SUPPORTED_VERSIONS[-1]}, or run without "
            f"the switch (unset {ENV_VAR}, do not call elfjit.tinygrad.install())"
        )
    return version


def install() -> None:
    """Makes tinygrad's CPU device compile and load every kernel through elfjit.

    Checks tinygrad's version now; patches tinygrad's modules now if they are imported,
    else as they are. Also sets ELFJIT_TINYGRAD=1 in this process's environment, so the
    interpreters tinygrad spawns to compile kernels in parallel install the switch too
    (call install() before tinygrad compiles anything: workers already running keep
    tinygrad's compiler). Idempotent. Raises UnsupportedTinygradError on an unsupported
    tinygrad, and elfjit.UnsupportedError off Linux or on a host elfjit does not
    support."""
    if not sys.platform.startswith("linux") or elfjit.host() is None:
        raise elfjit.UnsupportedError(
            f"elfjit.tinygrad runs on Linux hosts elfjit supports, not {sys.platform} "
            f"{platform.machine()}"
        )
    check_version()
    _install()


def install_from_environment() -> bool:
    """Installs the switch, checking the version when tinygrad is imported, if
    ELFJIT_TINYGRAD=1 (the wheel's .pth hook calls this at interpreter start). Returns
    whether it did."""
    if os.environ.get(ENV_VAR) != "1":
        return False
    _install()
    return True


def uninstall() -> None:
    """Gives tinygrad back its own compiler and loader (for kernels compiled and loaded
    from now on), and ELFJIT_TINYGRAD its previous value."""
    global _finder
    with _lock:
        if not installed():
            return
        if _finder is not None:
            if _finder in sys.meta_path:
                sys.meta_path.remove(_finder)
            _finder = None
        for cls, method, original in _originals.values():
            setattr(cls, method, original)
        _originals.clear()
        if _saved_env is None:
            os.environ.pop(ENV_VAR, None)
        else:
            os.environ[ENV_VAR] = _saved_env


def installed() -> bool:
    """Whether the switch is installed (tinygrad patched, or patched when imported)."""
    with _lock:
        return bool(_originals) or _finder is not None


def loads() -> int:
    """How many tinygrad programs elfjit has loaded in this process."""
    return _loads


def _install() -> None:
    global _finder, _saved_env
    with _lock:
        if installed():
            return
        _saved_env = os.environ.get(ENV_VAR)
        os.environ[ENV_VAR] = "1"
        waiting = set()
        for name in _PATCHES:
            module = sys.modules.get(name)
            if module is not None:
                _patch(name, module)
            else:
                waiting.add(name)
        if waiting:
            _finder = _PatchOnImport(waiting)
            sys.meta_path.insert(0, _finder)


def _patch(name: str, module: types.ModuleType) -> None:
    """Replaces tinygrad's method in `module` (ops_cpu or compiler_cpu), once."""
    check_version()
    attribute, replacement = _PATCHES[name]
    cls_name, method = attribute.split(".")
    cls = getattr(module, cls_name)
    with _lock:
        if attribute in _originals:
            return
        _originals[attribute] = (cls, method, getattr(cls, method))
        setattr(cls, method, replacement)
    if name == _COMPILER_CPU:
        # tinygrad is about to compile: a compile server starts now, in the background,
        # so that its first kernels find it ready instead of spawning clang while it
        # starts (nothing under ELFJIT_COMPILER=spawn).
        try:
            elfjit.prepare()
        except elfjit.Error:
            pass  # the first compile says it again


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches a tinygrad module right after it executes, so installing the switch never
    imports tinygrad early (tinygrad reads its settings from the environment at
    import)."""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def find_spec(
        self, fullname: str, path: Any, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _PatchingLoader(fullname, spec.loader)
        return spec


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, name: str, loader: importlib.abc.Loader) -> None:
        self._name, self._loader = name, loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self._loader.exec_module(module)
        _patch(self._name, module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


def _program_init(self: Any, dev: Any, obj: Any) -> None:
    """CPUProgram.__init__ on elfjit (tinygrad 0.14.0's attributes, set as it sets them)."""
    global _loads
    self.dev, self.name, self.signature = dev, obj.name, obj.signature
    self.runtimevars = {name: slot for name, slot, *_ in obj.signature if name == "core_id"}
    self.lvp = obj.target.renderer == "LVP"
    lib = obj.lib
    if lib[:4] == b"\x7fELF":
        self._elfjit_module = module = elfjit.load(lib)
        self.addr = _entry(module, obj.name)
    else:
        self._elfjit_code, self.addr = _map_code(lib)
    self.fxn = (
        ctypes.CFUNCTYPE(None, ctypes.c_void_p)(self.addr)
        if self.lvp
        else ctypes.CFUNCTYPE(None)(self.addr)
    )
    _loads += 1


def _entry(module: elfjit.Module, name: str) -> int:
    """The kernel's entry: the function named like the program, else the only function
    (tinygrad's own loader jumps to the start of the image)."""
    if name in module:
        return module.address(name)
    functions = module.functions
    if len(functions) == 1:
        return module.address(functions[0])
    return module.address(name)  # raises SymbolNotFoundError, listing the functions


_PROT_READ_EXEC = mmap.PROT_READ | mmap.PROT_EXEC
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.mprotect.restype = ctypes.c_int


def _map_code(code: bytes) -> tuple[mmap.mmap, int]:
    """Position-independent machine code with nothing to relocate (tinygrad's X86
    renderer): written into a fresh private mapping, which is then made read + execute."""
    if platform.machine() not in ("x86_64", "AMD64"):
        raise elfjit.UnsupportedError(
            f"raw machine code (not ELF) is x86_64 code; this host is {platform.machine()}"
        )
    memory = mmap.mmap(
        -1,
        max(len(code), 1),
        flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
        prot=mmap.PROT_READ | mmap.PROT_WRITE,
    )
    memory.write(code)
    address = ctypes.addressof(ctypes.c_char.from_buffer(memory))
    if _libc.mprotect(address, len(memory), _PROT_READ_EXEC) != 0:
        errno = ctypes.get_errno()
        raise elfjit.ResourceError(f"mprotect(read + execute): {os.strerror(errno)}")
    return memory, address


def _clang_compile(self: Any, src: str) -> bytes:
    """ClangCompiler.compile on elfjit.compile (tinygrad 0.14.0's flags: -O2, its CPU
    flags in self.args after elfjit's for the target)."""
    from tinygrad.device import CompileError

    target = _TARGETS.get(self.arch)
    if target is None:
        raise CompileError(f"elfjit.tinygrad: tinygrad architecture {self.arch!r} is not one of {sorted(_TARGETS)}")
    try:
        return elfjit.compile(src, lang="c", opt=2, target=target, flags=list(self.args))
    except elfjit.Error as e:
        raise CompileError(str(e)) from e


# What the switch replaces, per tinygrad module.
_PATCHES: dict[str, tuple[str, Any]] = {
    _OPS_CPU: ("CPUProgram.__init__", _program_init),
    _COMPILER_CPU: ("ClangCompiler.compile", _clang_compile),
}
