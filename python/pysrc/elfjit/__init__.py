"""elfjit: compile C or LLVM IR with clang and load the object into this process.

    import ctypes, elfjit
    obj = elfjit.compile("int add(int a, int b) { return a + b; }")
    m = elfjit.load(obj)
    add = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int)(m.address("add"))
    assert add(2, 40) == 42

Code pages are never writable and executable at once; far calls (to libm, compiler-rt
helpers, your own resolver's symbols) go through stubs. ``elfjit.tinygrad.install()``
puts tinygrad's CPU device on this loader.
"""

from __future__ import annotations

import importlib
import os
import warnings
from typing import TYPE_CHECKING

from elfjit._native import (
    ArgumentError,
    ClangNotFoundError,
    CompileError,
    Error,
    InternalError,
    LinkError,
    Module,
    ResourceError,
    SymbolNotFoundError,
    UnsupportedError,
    __version__,
    clang_path,
    compile,
    host,
    load,
    prepare,
)

if TYPE_CHECKING:
    from elfjit import tinygrad as tinygrad

# The compile servers this package carries, prebuilt (elfjit/_server/, one per LLVM major):
# the library uses the one for the clang it finds, if it passes its checks, before building
# one. Set for this process (and its children) unless the environment names another.
os.environ.setdefault("ELFJIT_SERVER_DIR", os.path.join(os.path.dirname(__file__), "_server"))

# The wheel carries no compiler: loading works without one, compiling needs a clang. Say
# so once, at import, rather than at the first compile of a program that may run long
# before it. (A PATH search only: no process is started unless ELFJIT_CLANG names one.)
try:
    clang_path()
except ClangNotFoundError as _not_found:
    warnings.warn(
        f"elfjit: no clang found ({_not_found}); elfjit.compile needs one. Install clang "
        "(Debian/Ubuntu: `apt install clang`, Fedora: `dnf install clang`, macOS: "
        "`xcode-select --install`), or set ELFJIT_CLANG to a clang executable.",
        RuntimeWarning,
        stacklevel=2,
    )

__all__ = [
    "ArgumentError",
    "ClangNotFoundError",
    "CompileError",
    "Error",
    "InternalError",
    "LinkError",
    "Module",
    "ResourceError",
    "SymbolNotFoundError",
    "UnsupportedError",
    "__version__",
    "clang_path",
    "compile",
    "host",
    "load",
    "prepare",
    "tinygrad",
]


def __getattr__(name: str) -> object:
    # `elfjit.tinygrad` is imported on first use: most programs never need it.
    if name == "tinygrad":
        return importlib.import_module("elfjit.tinygrad")
    raise AttributeError(f"module 'elfjit' has no attribute {name!r}")
