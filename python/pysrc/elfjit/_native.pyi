"""Type stubs of elfjit's extension module (python/src/lib.rs)."""

from collections.abc import Callable, Mapping, Sequence

from typing_extensions import Buffer

__version__: str

class Error(Exception):
    """Any elfjit failure; the message is the library's."""

class ArgumentError(Error):
    """A malformed argument: unknown target or language, opt level out of range."""

class CompileError(Error):
    """clang failed (its diagnostics are in the message) or overran its deadline."""

class ClangNotFoundError(CompileError):
    """No clang was found ($ELFJIT_CLANG, `clang`, `clang-NN` in PATH)."""

class LinkError(Error):
    """The loader rejected an object: malformed ELF, an unsupported or out-of-range
    relocation, an undefined symbol."""

class SymbolNotFoundError(Error):
    """The module defines no symbol of that name."""

class UnsupportedError(Error):
    """A request elfjit cannot serve, e.g. loading an object for another architecture."""

class ResourceError(Error):
    """The operating system refused: memory, pipes, starting clang."""

class InternalError(Error):
    """A bug in elfjit; please report the message."""

class Module:
    """Linked code and data in this process, given back to the code arena when
    garbage-collected: keep it alive while any address from it may be called."""

    def address(self, name: str) -> int:
        """The address of the global symbol `name` (function or data).

        Raises SymbolNotFoundError (naming the module's functions) if there is none."""
    @property
    def functions(self) -> list[str]:
        """The global functions the module defines, in symbol-table order."""
    @property
    def region(self) -> tuple[int, int]:
        """The module's code as (address, length)."""
    @property
    def arch(self) -> str:
        """The architecture the module was linked for ("x86_64", ...)."""
    def __contains__(self, name: str) -> bool: ...

Resolver = Mapping[str, int] | Callable[[str], int | None]

def load(objects: Buffer | Sequence[Buffer], resolver: Resolver | None = None) -> Module:
    """Links ELF objects for this host into the process-wide code arena.

    `objects` is one bytes-like object (bytes, bytearray, memoryview, a uint8 numpy
    array, mmap, ...) or a sequence of them, read in place through the buffer protocol.
    Undefined symbols resolve across the objects, then through `resolver` (a mapping of
    names to int addresses, or a callable returning an address or None), then in the
    process (dlsym, libm, compiler-rt helpers). Raises LinkError, UnsupportedError."""

def compile(
    source: str | bytes,
    lang: str = "c",
    opt: int = 2,
    target: str | None = None,
    cache: bool = False,
    flags: Sequence[str] | None = None,
    memory_limit: int | str | None = None,
) -> bytes:
    """Compiles C (lang="c") or LLVM IR (lang="ir") into a relocatable ELF object with
    clang, through pipes, with the GIL released.

    `target` names an architecture ("x86_64", "aarch64", "riscv64", "loongarch64",
    "ppc64le"; None is the host). `cache=True` uses elfjit's compile cache (in memory and
    in $ELFJIT_CACHE_DIR/objects or ~/.cache/elfjit/objects). `flags` are extra clang
    arguments. `memory_limit` bounds the memory clang may take: a number of bytes or a
    size such as "1G" or "512M", 0 for no limit; None is $ELFJIT_COMPILE_MEMORY, else
    4 GiB. clang running out of it raises CompileError naming the limit. Raises
    CompileError, ClangNotFoundError, ArgumentError."""

def host() -> str | None:
    """The host architecture's name, or None where elfjit does not support it."""

def prepare() -> None:
    """Takes a fresh process's one-time costs off its first load: maps the loader's code
    pages, opens what symbol lookups read, makes the process-wide code arena's first chunk
    and pages, and links a built-in object once so the first real load runs warm code.
    Call it at start-up or while the first kernel compiles (a few tenths of a
    millisecond); later calls return at once. Raises ResourceError if the arena cannot
    be made."""

def clang_path() -> str:
    """The clang elfjit compiles with (found on first use, then kept for the process)."""
