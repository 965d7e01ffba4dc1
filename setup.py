"""The compiled CPU kernels, built when the package is built or installed (``pip install .``,
``pip install -e .``, wheels): ``paddle_compat/_native.c`` as one plain shared library per
instruction-set level (``paddle_compat/_native_build.py``), loaded with ctypes at run time
(``paddle_compat/_native.py``), never imported as a Python module.

They are optional: without a working C compiler, or when a library fails its self-test (a compiler
that adds ``-ffast-math``, say), the package installs without it, says so here, and the optimizers
run their torch forms (slower; the same bits except for float32 RMSProp, Adagrad, Adadelta, NAdam
and RAdam, whose Eigen square roots need the CPU's ``rsqrtps`` from the kernels: see
``paddle_compat/_native.py``; ``paddle_compat.native_status()`` tells which run).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_ext import build_ext
from setuptools.errors import CCompilerError, ExecError, PlatformError

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("_native_build", HERE / "paddle_compat" / "_native_build.py")
assert _spec is not None and _spec.loader is not None
native_build = importlib.util.module_from_spec(_spec)
sys.modules["_native_build"] = native_build  # its NamedTuple needs a module to live in
_spec.loader.exec_module(native_build)

SOURCE = f"paddle_compat/{native_build.SOURCE}"
# the stamp: the loader refuses a library built from another _native.c than its own
STAMP = native_build.stamp_flags(HERE / SOURCE)


def _say(message: str) -> None:
    print(f"paddle_compat: {message}", file=sys.stderr)


class OptionalKernels(build_ext):
    """Builds each level's library if it can; a failed build or self-test leaves that level out."""

    def run(self) -> None:
        try:
            super().run()
        except (CCompilerError, ExecError, PlatformError, OSError) as exc:
            _say(f"the compiled CPU kernels were not built ({exc}); the optimizers will use their torch forms")

    def build_extension(self, ext: Extension) -> None:
        level = next(level for level in native_build.LEVELS if f"paddle_compat.{level.stem}" == ext.name)
        baseline = Path(self.get_ext_fullpath(f"paddle_compat.{native_build.LEVELS[0].stem}"))
        if level != native_build.LEVELS[0] and not baseline.exists():
            return  # the higher levels are never loaded without the baseline's (said once, below)
        problem = "not built"
        for threads in (native_build.OPENMP, ()):
            ext.extra_compile_args = [*native_build.FLAGS, *level.flags, *threads, *STAMP]
            ext.extra_link_args = [*native_build.LINK_FLAGS, *threads]
            try:
                super().build_extension(ext)
            except (CCompilerError, ExecError, PlatformError, OSError) as exc:
                compiler = getattr(self.compiler, "compiler_so", None) or ["cc"]
                if shutil.which(compiler[0]) is None:
                    problem = f"no C compiler: {compiler[0]} not found"
                    break
                problem = str(exc)
                continue
            library = Path(self.get_ext_fullpath(ext.name))
            problem = native_build.selftest_in_child(baseline, library, level)
            if problem is None:
                return
            library.unlink()
            break
        if level == native_build.LEVELS[0]:
            _say(f"the compiled CPU kernels were left out ({problem}); the optimizers will use their torch forms "
                 "(the same results, slower)")
        else:
            _say(f"the {level.name} kernels were left out: {problem}")

    def get_output_mapping(self) -> dict[str, str]:
        # An editable install (strict mode: links to these files) takes only the libraries built.
        return {built: source for built, source in super().get_output_mapping().items() if Path(source).exists()}


class Wheel(bdist_wheel):
    """Without a library built, a wheel of Python files only: ``py3-none-any``, not a platform's."""

    def run_command(self, command: str) -> None:
        super().run_command(command)
        if command == "build" and not any(Path(path).exists() for path in
                                          self.get_finalized_command("build_ext").get_outputs()):
            self.root_is_pure = True


ext_modules = [] if os.name == "nt" else [
    Extension(f"paddle_compat.{level.stem}", [SOURCE], libraries=["m"], py_limited_api=True, optional=True)
    for level in native_build.LEVELS
]

setup(
    ext_modules=ext_modules,
    cmdclass={"build_ext": OptionalKernels, "bdist_wheel": Wheel},
    # plain C libraries: one wheel per platform serves every Python version
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
