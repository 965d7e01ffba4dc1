"""How the compiled CPU kernels (``_native.c``) are built and checked: the instruction-set levels,
the flags, the libraries' names, and the checks a library must pass before it is used.

Standard library only: ``setup.py`` runs it to build the kernels when the package is built or
installed (torch may not be importable there), and ``_native`` uses it to find and check them.
Every level is compiled from the same source with the same IEEE flags (no FMA contraction, no
fast-math), so every level gives the same bits; a level only lets the compiler use wider vectors.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.machinery
import os
import platform
import stat
import struct
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

__all__ = [
    "FLAGS", "LEVELS", "LINK_FLAGS", "OPENMP", "SOURCE", "Level", "check_loaded", "find_libraries", "refusal",
    "selftest_in_child", "source_stamp", "stamp_flags", "stamp_refusal",
]


class Level(NamedTuple):
    name: str  # as the compiler spells it (``-march=``), or "generic"
    psabi: int  # the x86-64 psABI level (pc_cpu_level), 0 elsewhere
    flags: tuple[str, ...]

    @property
    def stem(self) -> str:
        """The library's module name: ``_kernels_x86_64_v3`` (its file adds an extension suffix)."""
        return "_kernels_" + self.name.replace("-", "_")


def _levels(machine: str) -> tuple[Level, ...]:
    """The levels built for a machine, lowest first (the lowest runs on every CPU of it)."""
    if machine.lower() in ("x86_64", "amd64"):
        return tuple(Level(f"x86-64{suffix}", n, (f"-march=x86-64{suffix}",)) for suffix, n in
                     (("", 1), ("-v3", 3), ("-v4", 4)))
    return (Level("generic", 0, ()),)  # aarch64, arm64: one level, the architecture's baseline


LEVELS = _levels(platform.machine())

# IEEE semantics: no contraction into FMAs the source does not spell out, no fast-math; errno is
# not needed from sqrt (letting it vectorise), which changes no value.
FLAGS = ("-O3", "-std=c99", "-ffp-contract=off", "-fno-fast-math", "-fno-math-errno")
# Tried first: threads from the OpenMP runtime torch has loaded (see for_all in _native.c); a
# compiler without OpenMP (Apple's clang) builds single-threaded kernels.
OPENMP = ("-fopenmp",)
# Linked stripped (the symbol table only: the entry points ctypes finds stay in the dynamic one);
# Apple's linker ignores -s.
LINK_FLAGS = ("-s",) if sys.platform != "darwin" else ()

# pc_selftest's failed checks (see _native.c)
_SELFTEST = {
    1: "fmaf is not a single rounding",
    2: "sqrtf is not correctly rounded",
    3: "the float32 to bfloat16/float16 conversions round wrongly",
    4: "the float16 to float32 conversion is wrong",
    5: "a*b + c was contracted into an FMA (built without -ffp-contract=off)",
    6: "NaN comparisons were folded away (built with -ffinite-math-only or -ffast-math)",
    7: "subnormal numbers are flushed to zero (FTZ/DAZ)",
    8: "a sum was reassociated (built with -fassociative-math or -ffast-math)",
    9: "a division was replaced by a product (built with -freciprocal-math or -ffast-math)",
}


SOURCE = "_native.c"  # beside this file in a source tree (an editable install); absent from wheels


def source_stamp(source: Path) -> int:
    """The version stamp of a build of ``source``: 56 bits of its SHA-256 (a positive int64)."""
    return int.from_bytes(hashlib.sha256(source.read_bytes()).digest()[:7], "big")


def stamp_flags(source: Path) -> list[str]:
    """The compiler flags that put ``source``'s stamp into the library (``pc_source_stamp``)."""
    return [f"-DPC_SOURCE_STAMP={source_stamp(source)}LL"]


def stamp_refusal(lib: ctypes.CDLL, directory: Path) -> str | None:
    """Why a loaded library does not match the Python side beside it (``None``: it does): built
    from another ``_native.c`` than the one in ``directory`` (a source tree pulled or edited
    without a rebuild), or with no stamp. With no source there (a wheel), the library and the
    Python side were installed together: any stamped build is taken."""
    again = "reinstall paddle_compat (pip install -e . again) to rebuild the kernels"
    try:
        function = lib.pc_source_stamp
    except AttributeError:
        return f"it was built from an older paddle_compat (it has no version stamp); {again}"
    function.restype = ctypes.c_int64
    stamp = function()
    if stamp == 0:
        return f"it was built without a version stamp (not by setup.py); {again}"
    source = directory / SOURCE
    if source.exists() and stamp != source_stamp(source):
        return f"it was built from another version of {SOURCE} than this paddle_compat's; {again}"
    return None


def find_libraries(directory: Path) -> dict[Level, Path]:
    """The built libraries in ``directory`` (the package's own), by level."""
    found = {}
    for level in LEVELS:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = directory / (level.stem + suffix)
            if os.path.lexists(path):
                found[level] = path
                break
    return found


def refusal(path: Path) -> str | None:
    """Why the library at ``path`` must not be loaded (``None``: it may).

    It is refused unless it is a regular file (not a link) in a directory, both owned by this user
    or by root, neither writable by the group or by others: no other user can have put it there or
    can replace it.
    """
    if not hasattr(os, "getuid"):
        return "no owner checks on this platform"
    owners = {os.getuid(), 0}
    try:
        checks = [(path.parent, os.stat(path.parent), stat.S_ISDIR), (path, os.lstat(path), stat.S_ISREG)]
    except OSError as exc:
        return f"cannot inspect {path}: {exc}"
    for what, info, kind in checks:
        if not kind(info.st_mode):
            return f"{what} is not a {'directory' if kind is stat.S_ISDIR else 'regular file'}"
        if info.st_uid not in owners:
            return f"{what} is owned by another user (uid {info.st_uid})"
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"{what} is writable by other users (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def _subnormals_flushed() -> bool:
    """Whether this thread flushes subnormal floats to zero (Python's floats use the same unit)."""
    tiny = struct.unpack("<d", struct.pack("<q", 1 << 20))[0]  # a subnormal, 2**-1054, made without arithmetic
    return tiny * 0.5 == 0.0


def check_loaded(lib: ctypes.CDLL) -> str | None:
    """What is wrong with a library just loaded (``None``: nothing): the process's floating-point
    mode after loading it, and its self-test."""
    if _subnormals_flushed():
        return _SELFTEST[7] + " since it was loaded (startup code of a -ffast-math build)"
    code = lib.pc_selftest()
    return f"self-test: {_SELFTEST.get(code, f'check {code}')}" if code else None


# The check of a fresh build, run in a child so that a library that changes the process's
# floating-point mode as it loads changes only the child's.
_CHILD = """
import ctypes, sys
sys.path[:0] = [sys.argv[1]]
import _native_build as nb
base, lib = ctypes.CDLL(sys.argv[2]), ctypes.CDLL(sys.argv[3])
level = int(sys.argv[4])
if level > base.pc_cpu_level():
    sys.exit(0)  # this CPU cannot run the level: checked when loaded on one that can
problem = nb.check_loaded(lib)
sys.exit(problem)
"""


def selftest_in_child(baseline: Path, library: Path, level: Level) -> str | None:
    """Run ``library``'s checks in a child process (``baseline``: the lowest level's library, which
    tells whether this CPU runs ``level``). ``None`` when it passes or this CPU cannot run it."""
    here = str(Path(__file__).parent)
    args = [sys.executable, "-I", "-c", _CHILD, here, str(baseline), str(library), str(level.psabi)]
    try:
        result = subprocess.run(args, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"its self-test did not run: {exc}"
    if result.returncode:
        return result.stderr.strip().splitlines()[-1] if result.stderr.strip() else f"exit {result.returncode}"
    return None
