"""The compiled CPU kernels as a user's process meets them: built at install, one library per
instruction-set level, loaded only from a directory no other user can write, refused when built
with the wrong flags, never compiled at run time, announced when missing; the same bits at every
level as the torch forms (the forms themselves: ``test_optimizer_kernels.py``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

import paddle_compat
from paddle_compat import _native, _native_build

from .optim_db import case
from .test_optimizer_kernels import DTYPES, FORMS, assert_same_run, keep_hardware_rsqrt, maker, train, use_native

ROOT = Path(__file__).resolve().parents[1]
BUILT = _native_build.find_libraries(_native._DIRECTORY)
needs_build = pytest.mark.skipif(not BUILT, reason="the compiled kernels are not built (pip install -e . builds them)")
COMPILER = shutil.which(os.environ.get("CC") or "cc") or shutil.which("gcc") or shutil.which("clang")
needs_compiler = pytest.mark.skipif(COMPILER is None or os.name != "posix", reason="no C compiler")
BASELINE = _native_build.LEVELS[0]

pytestmark = pytest.mark.filterwarnings("ignore:Accumulating with FP16/BF16:UserWarning")


def child(code: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 120) -> str:
    """Run ``code`` in a fresh Python process importing this checkout; its stdout (it must succeed)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("PADDLE_COMPAT_")}
    base["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env={**base, **(env or {})},
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture
def fresh_native(monkeypatch: pytest.MonkeyPatch):
    """paddle_compat._native as if this process had not used it yet."""
    monkeypatch.setattr(_native, "_loaded", None)
    monkeypatch.setattr(_native, "_status", None)
    monkeypatch.delenv("PADDLE_COMPAT_NATIVE", raising=False)
    monkeypatch.setattr(_native, "_enabled", None)


def test_the_environment_switch_is_read_once(fresh_native, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PADDLE_COMPAT_NATIVE", "0")
    assert _native.kernels() is None
    monkeypatch.setenv("PADDLE_COMPAT_NATIVE", "1")
    assert not _native.enabled() and _native.kernels() is None  # the first reading stays
    status = paddle_compat.native_status()
    assert not status.compiled and "PADDLE_COMPAT_NATIVE=0" in str(status)


@needs_build
def test_the_status_names_the_level_and_the_library() -> None:
    status = paddle_compat.native_status()
    assert status.compiled and status.library is not None and status.level is not None
    assert Path(status.library).parent == _native._DIRECTORY
    assert status.level in {level.name for level in BUILT} and status.level in str(status)


def test_without_the_libraries_one_warning_says_so_and_the_torch_forms_run(
    fresh_native, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(_native, "_DIRECTORY", tmp_path)
    p = torch.nn.Parameter(torch.ones(4))
    p.grad = torch.ones(4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        paddle_compat.optimizer.AdamW(0.1, parameters=[p]).step()
        paddle_compat.optimizer.SGD(0.1, parameters=[p]).step()
        status = paddle_compat.native_status()
    messages = [str(w.message) for w in caught if w.category is RuntimeWarning]
    assert len(messages) == 1 and "not built" in messages[0] and "native_status()" in messages[0]
    assert caught[0].filename == __file__  # points at the user's step
    assert not status.compiled and "not built" in status.reason
    assert torch.isfinite(p).all() and not torch.equal(p.detach(), torch.ones(4))


# --- where a library may come from --------------------------------------------------------------------
PLANTED = r"""
#include <stdio.h>
#include <stdlib.h>
/* what an attacker's library does: run code as whoever loads it */
__attribute__((constructor)) static void planted(void) {
    const char *mark = getenv("PLANTED_MARK");
    if (mark) { FILE *f = fopen(mark, "w"); if (f) fclose(f); }
}
int pc_selftest(void) { return 0; }
int pc_cpu_level(void) { return 0; }
"""


def compile_library(source: str, target: Path, *flags: str) -> Path:
    src = target.with_suffix(".c")
    src.write_text(source)
    subprocess.run([COMPILER, "-shared", "-fPIC", *flags, "-o", str(target), str(src)], check=True, timeout=120)
    return target


def mapped(path: Path) -> bool:
    maps = Path("/proc/self/maps")
    return maps.exists() and str(path) in maps.read_text()


@needs_compiler
@pytest.mark.parametrize("attack", ["directory-writable", "file-writable", "other-owner", "symlink"])
def test_a_planted_library_is_refused_without_being_loaded(
    attack, fresh_native, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    if attack == "other-owner" and os.getuid() != 0:
        pytest.skip("making a file another user's needs root")
    planted = tmp_path / "pkg"
    planted.mkdir(mode=0o755)
    elsewhere = tmp_path / "elsewhere.so"
    name = BASELINE.stem + ".abi3.so"
    library = compile_library(PLANTED, elsewhere if attack == "symlink" else planted / name)
    if attack == "symlink":
        (planted / name).symlink_to(library)
    elif attack == "directory-writable":
        planted.chmod(0o777)
    elif attack == "file-writable":
        library.chmod(0o666)
    else:
        os.chown(library, 4242, 4242)
    mark = tmp_path / "ran"
    monkeypatch.setenv("PLANTED_MARK", str(mark))
    monkeypatch.setattr(_native, "_DIRECTORY", planted)
    with pytest.warns(RuntimeWarning, match="refused") as caught:
        assert _native.kernels() is None
    assert len(caught) == 1
    assert not mark.exists() and not mapped(library)
    expected = {"directory-writable": "writable by other users", "file-writable": "writable by other users",
                "other-owner": "owned by another user", "symlink": "not a regular file"}[attack]
    assert expected in _native.status().reason


@needs_compiler
def test_the_checks_accept_a_private_copy(fresh_native, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The control of the test above: the same library, placed safely, is loaded (and runs)."""
    planted = tmp_path / "pkg"
    planted.mkdir(mode=0o755)
    library = compile_library(PLANTED, planted / (BASELINE.stem + ".abi3.so"))
    mark = tmp_path / "ran"
    monkeypatch.setenv("PLANTED_MARK", str(mark))
    assert _native_build.refusal(library) is None
    monkeypatch.setattr(_native, "_DIRECTORY", planted)
    with pytest.warns(RuntimeWarning, match="it has no version stamp"):  # loaded, then found wanting
        assert _native.kernels() is None
    assert mark.exists() and mapped(library)


FAST_MATH_CC = """#!/bin/sh
# a compiler whose users' builds get -ffast-math (a wrapper, a distribution's default)
exec {cc} "$@" -ffast-math
"""


@pytest.mark.parametrize("compiler", ["fast-math", "none"])
def test_an_install_without_a_fit_compiler_succeeds_without_the_kernels(compiler, tmp_path: Path) -> None:
    """The build step of an install, with a compiler that adds -ffast-math (the libraries fail
    their self-test) or with no compiler at all: it succeeds, says so, and installs no library."""
    if compiler == "fast-math" and COMPILER is None:
        pytest.skip("no C compiler to wrap")
    wrapper = tmp_path / "cc"
    wrapper.write_text(FAST_MATH_CC.format(cc=COMPILER) if compiler == "fast-math" else "")
    env = {**os.environ, "CC": str(wrapper) if compiler == "fast-math" else str(tmp_path / "no-such-cc")}
    if compiler == "none":
        env["PATH"] = str(tmp_path / "empty")
    wrapper.chmod(0o755)
    build = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(tmp_path / "lib"),
         "--build-temp", str(tmp_path / "tmp")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert build.returncode == 0, build.stderr  # the package still builds, without the kernels
    said = [line for line in build.stderr.splitlines() if line.startswith("paddle_compat: ")]
    assert len(said) == 1 and said[0].startswith("paddle_compat: the compiled CPU kernels were left out ("), said
    assert _native_build.find_libraries(tmp_path / "lib" / "paddle_compat") == {}


def test_an_in_place_build_without_a_compiler_succeeds_without_the_kernels(tmp_path: Path) -> None:
    """``build_ext --inplace`` (what an editable install runs) without a compiler: it succeeds, says
    so, and copies no library into the package (a level left out is not one to copy)."""
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "paddle_compat", tree / "paddle_compat",
                    ignore=shutil.ignore_patterns("_kernels_*", "__pycache__"))
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    env = {**os.environ, "CC": str(tmp_path / "no-such-cc"), "PATH": str(tmp_path / "empty")}
    build = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
                           cwd=tree, env=env, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    assert "paddle_compat: the compiled CPU kernels were left out (no C compiler: " in build.stderr
    assert _native_build.find_libraries(tree / "paddle_compat") == {}


@needs_compiler
def test_a_fast_math_library_is_refused_and_leaves_subnormals_alone(tmp_path: Path) -> None:
    """A library built with -ffast-math, in a safe place: loading it switches the thread to
    flush-to-zero; it is refused, the mode restored, and the torch forms run."""
    directory = tmp_path / "pkg"
    directory.mkdir(mode=0o755)
    source = (ROOT / "paddle_compat" / "_native.c").read_text()
    flags = [*_native_build.FLAGS, *BASELINE.flags, "-ffast-math"]
    compile_library(source, directory / (BASELINE.stem + ".abi3.so"), *flags, "-lm")
    out = child(f"""
        import warnings
        from pathlib import Path
        import torch
        from paddle_compat import _native
        _native._DIRECTORY = Path({str(directory)!r})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert _native.kernels() is None
        print(len(caught), _native.status().reason)
        print((torch.tensor([1e-40]) * 1).item() != 0)
    """, tmp_path)
    count, reason = out.splitlines()[0].split(" ", 1)
    # Older GCCs link crtfastmath into a -ffast-math library (flush-to-zero at load); newer ones
    # (seen: GCC 13) do not, and the self-test's NaN probe refuses it instead.
    assert count == "1" and "refused" in reason
    assert "flushed to zero" in reason or "NaN comparisons were folded away" in reason, reason
    assert out.splitlines()[1] == "True"


@pytest.mark.parametrize(("flag", "check"), [("-ffp-contract=fast", "contracted"),
                                             ("-ffinite-math-only", "NaN comparisons"),
                                             ("-fassociative-math", "reassociated"),
                                             ("-freciprocal-math", "division")])
@needs_compiler
def test_the_self_test_catches_each_unsafe_flag(flag, check, tmp_path: Path) -> None:
    """Each probe, alone: a library built with the flag (at the highest level this CPU runs, so that
    contraction has FMA instructions to use) fails the self-test, checked in a child process."""
    level = max((lv for lv in _native_build.LEVELS if lv.psabi <= _cpu_level()), key=lambda lv: lv.psabi)
    if flag == "-ffp-contract=fast" and level.psabi < 3 and level.psabi != 0:
        pytest.skip("this CPU has no FMA instructions to contract into")
    source = (ROOT / "paddle_compat" / "_native.c").read_text()
    flags = [f for f in _native_build.FLAGS if f != "-ffp-contract=off"] + [*level.flags, flag]
    if flag == "-fassociative-math":
        flags += ["-fno-signed-zeros", "-fno-trapping-math"]  # GCC reassociates only with both
    library = compile_library(source, tmp_path / "unsafe.so", *flags, "-lm")
    baseline = BUILT.get(BASELINE) or library
    problem = _native_build.selftest_in_child(baseline, library, level)
    assert problem is not None and check in problem


def _cpu_level() -> int:
    if BASELINE not in BUILT:
        pytest.skip("the baseline library is not built")
    import ctypes

    return int(ctypes.CDLL(str(BUILT[BASELINE])).pc_cpu_level())


# --- processes at first use ---------------------------------------------------------------------------
FIRST_STEP = """
    import hashlib, os
    import torch
    import paddle_compat
    import paddle_compat.optimizer as popt
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(n, generator=gen)) for n in (1000, 37)]
    opts = [popt.SGD(0.1, parameters=params), popt.Momentum(0.1, parameters=params),
            popt.AdamW(0.01, parameters=params)]
    for step in range(3):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen)
        for opt in opts:
            opt.step()
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in params)).hexdigest()
    print(paddle_compat.native_status().compiled, digest)
"""


@needs_build
@needs_compiler
def test_the_first_step_starts_no_compiler(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mark = tmp_path / "compiler-ran"
    for name in ("cc", "gcc", "clang", "ld"):
        (bin_dir / name).write_text(f"#!/bin/sh\ntouch {mark}\nexit 1\n")
        (bin_dir / name).chmod(0o755)
    out = child(FIRST_STEP, tmp_path, {"PATH": str(bin_dir), "CC": str(bin_dir / "cc")})
    assert out.startswith("True ") and not mark.exists()


@needs_build
def test_several_processes_at_first_use_write_nothing(tmp_path: Path) -> None:
    """Three processes start together (one with HOME unset): all run the compiled kernels with the
    same bits, and none writes a file (no cache, no build: not under HOME, not in the working
    directory)."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("PADDLE_COMPAT_", "XDG_")) and k != "HOME"}
    base["PYTHONPATH"] = str(ROOT)
    procs = []
    for i in range(3):
        env = base if i == 0 else {**base, "HOME": str(home)}
        procs.append(subprocess.Popen([sys.executable, "-c", textwrap.dedent(FIRST_STEP)], cwd=work, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    lines = {out.strip() for out, _ in outs}
    assert len(lines) == 1 and lines.pop().startswith("True ")
    assert list(home.iterdir()) == [] and list(work.iterdir()) == []


# --- the same bits at every level -----------------------------------------------------------------------
def runnable_levels() -> list[_native_build.Level]:
    cpu = _cpu_level()
    return [level for level in BUILT if level.psabi <= cpu]


@needs_build
@pytest.mark.parametrize(("name", "profile"), FORMS, ids=[f"{n}-{p}" for n, p in FORMS])
def test_every_level_gives_the_torch_forms_bits(name, profile, fresh_native, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each optimizer configuration, each dtype mix: every level this CPU runs, loaded through the
    same checks, against the torch forms."""
    levels = runnable_levels()
    if len(levels) < 2 and _native_build.LEVELS[0].psabi:
        pytest.skip("this CPU runs only one of the levels built")
    monkeypatch.setenv("PADDLE_COMPAT_PADDLE_CPU", profile)
    libraries = {level: _native.Kernels(_native._open(BUILT[level])) for level in levels}
    keep_hardware_rsqrt(monkeypatch)
    steps = case(name).options.get("steps", 3)
    for dtypes in DTYPES.values():
        dtype, grad_dtype, mp, main_grad = dtypes
        make = lambda ps, mp=mp: maker(name)(ps, mp)  # noqa: E731
        use_native(monkeypatch, False)
        reference = train(make, dtype, grad_dtype, main_grad, (300, 7, 1001), steps=steps)
        use_native(monkeypatch, True)
        for level, kern in libraries.items():
            monkeypatch.setattr(_native, "_loaded", kern)
            monkeypatch.setattr(_native, "_status", _native.NativeStatus(True, "test", level.name))
            assert_same_run(train(make, dtype, grad_dtype, main_grad, (300, 7, 1001), steps=steps), reference)


# --- the scaler's read-only check ---------------------------------------------------------------------
@needs_build
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_the_scalers_check_finds_what_decides_in_either_threads_half(dtype) -> None:
    """``pc_nonfinite``: two threads read tensors split at a cache line (``for_all`` in _native.c);
    a tensor read half by each is decided by either half: its NaN, or its largest magnitude (a
    negative one) when only unscaling makes that overflow."""
    kern = _native.kernels()
    n = 1 << 19
    tensors = [torch.full((n,), 0.5, dtype=dtype) for _ in range(3)] + [torch.empty(0, dtype=dtype)]
    total = sum(t.numel() for t in tensors)
    split = ((total + 1) // 2 + 63) & ~63
    first, second = split - n - 1, split - n + 1  # in tensors[1], on either side of the split
    top = torch.finfo(dtype).max

    def check(values: dict[int, float], inv: float, threads: int = 2) -> bool:
        xs = [t.clone() for t in tensors]
        for at, value in values.items():
            xs[1][at] = value
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return kern.nonfinite(xs, inv)
        finally:
            torch.set_num_threads(before)

    assert not check({}, 1.0) and not check({first: -7.0, second: 3.0}, 1.0)
    assert check({second: float("nan")}, 1.0) and check({first: float("inf"), second: float("nan")}, 1.0)
    assert check({first: -float("inf")}, 1.0, threads=1)
    # -max/2 in the second half overflows when unscaled by 4, not by 1
    assert check({second: -top / 2}, 4.0) and not check({second: -top / 2}, 1.0)


# --- the version stamp: a library built from another _native.c is refused --------------------------
@needs_compiler
def test_a_library_built_from_another_source_is_refused(fresh_native, monkeypatch, tmp_path: Path) -> None:
    """A library left from an older ``_native.c`` (a pull or an edit without reinstalling) would run
    with rows and formulas the Python side no longer describes: refused, saying to reinstall, and
    the torch forms run. One without a stamp (not built by setup.py, or older) is refused too."""
    directory = tmp_path / "pkg"
    directory.mkdir(mode=0o755)
    source = ROOT / "paddle_compat" / "_native.c"
    shutil.copy(source, directory / _native_build.SOURCE)
    library = directory / (BASELINE.stem + ".abi3.so")
    flags = [*_native_build.FLAGS, *BASELINE.flags, "-O1", "-lm"]
    monkeypatch.setattr(_native, "_DIRECTORY", directory)

    def status() -> _native.NativeStatus:
        monkeypatch.setattr(_native, "_loaded", None)
        monkeypatch.setattr(_native, "_status", None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return _native.status()

    compile_library(source.read_text(), library, *flags, *_native_build.stamp_flags(source))
    assert status().compiled
    with open(directory / _native_build.SOURCE, "a") as f:
        f.write("/* edited since the build */\n")
    refused = status()
    assert not refused.compiled and refused.reason == (
        f"{library.name} refused: it was built from another version of _native.c than this paddle_compat's; "
        "reinstall paddle_compat (pip install -e . again) to rebuild the kernels"
    )
    (directory / _native_build.SOURCE).unlink()  # a wheel: the library came with the Python side
    assert status().compiled
    other = tmp_path / "other"  # a new path: the loader would get the library loaded above again
    other.mkdir(mode=0o755)
    monkeypatch.setattr(_native, "_DIRECTORY", other)
    compile_library(source.read_text(), other / library.name, *flags)
    unstamped = status()
    assert not unstamped.compiled and "built without a version stamp" in unstamped.reason
    with pytest.warns(RuntimeWarning, match="pip install -e . again"):
        monkeypatch.setattr(_native, "_status", None)
        assert _native.kernels() is None


NO_PROCESS = """
    import sys
    import torch
    from tests.optim_db import CLASSES, new

    spawned = []
    sys.addaudithook(lambda event, args: spawned.append(event) if event in (
        "subprocess.Popen", "os.posix_spawn", "os.spawn", "os.system", "os.exec", "os.fork", "os.forkpty") else None)
    for dtype in (torch.float32, torch.float64):
        for cls in CLASSES:
            params = [torch.nn.Parameter(torch.ones(40, dtype=dtype)) for _ in range(2)]
            opt = new(cls, 0.01, params)
            for _ in range(2):
                for p in params:
                    p.grad = torch.full_like(p, 0.5)
                opt.step()
    print(sorted(set(spawned)))
"""


@pytest.mark.parametrize("native", ["1", "0"])
def test_no_step_starts_a_process(native, tmp_path: Path) -> None:
    """A step never starts a process (NAdam's float32 power looked for libm with ldconfig or a C
    compiler through ctypes.util), with the compiled kernels or their torch forms."""
    out = child(NO_PROCESS, tmp_path, {"PADDLE_COMPAT_NATIVE": native, "PYTHONWARNINGS": "ignore"})
    assert out.strip() == "[]"


def test_the_fallback_warning_names_the_optimizers_whose_bits_differ(fresh_native, monkeypatch, tmp_path) -> None:
    """Without the kernels the float32 updates of the optimizers whose Eigen square root needs the
    CPU's rsqrt are not Paddle's: the warning must say which (the case table marks them)."""
    from .optim_db import OPTIM_DB

    differ = [info.cls.__name__ for info in OPTIM_DB if info.eigen_sqrt]
    assert differ == ["RMSProp", "Adagrad", "Adadelta", "NAdam", "RAdam"]
    monkeypatch.setattr(_native, "_DIRECTORY", tmp_path)  # nothing built there
    with pytest.warns(RuntimeWarning) as caught:
        assert _native.kernels() is None
    message = str(caught[0].message)
    assert "the same bits, slower, except for float32 " + ", ".join(differ[:-1]) + f" and {differ[-1]}" in message
    assert "same results" not in message


# --- the row layout: declared in _native.py, spelled alike in _native.c and the Triton kernels ----
LAYOUT_ENUMS = ("dtype", "slot", "per", "dtype_field")


def c_enums(source: str) -> dict[str, dict[str, int]]:
    """The named enums of C source, as {enum: {name: value}} (values: integers or earlier names)."""
    import re

    enums: dict[str, dict[str, int]] = {}
    for name, body in re.findall(r"\benum\s+(\w+)\s*\{([^}]*)\}", re.sub(r"/\*.*?\*/", "", source, flags=re.S)):
        members, value = {}, -1
        for entry in filter(None, (e.strip() for e in body.split(","))):
            key, _, given = (part.strip() for part in entry.partition("="))
            value = (int(given, 0) if given.lstrip("-").isdigit() else members[given]) if given else value + 1
            members[key] = value
        enums[name] = members
    return enums


def test_the_c_source_spells_the_row_layout_of_the_python_side() -> None:
    """_native.c's enums of the row layout are _native.py's constants, name for name, and every
    constant of the layout is among them; its packed dtypes are read through those names."""
    import re

    source = (ROOT / "paddle_compat" / "_native.c").read_text()
    enums = c_enums(source)
    declared = {name: value for enum in LAYOUT_ENUMS for name, value in enums[enum].items()}
    assert declared == {name: getattr(_native, name) for name in declared}
    layout = {name for name in _native.__all__ if re.fullmatch(r"(S|P|DT)_\w+|ROW|PER", name)}
    assert layout == set(declared)
    assert _native.DTYPE == {torch.float32: _native.DT_F32, torch.float64: _native.DT_F64,
                             torch.bfloat16: _native.DT_BF16, torch.float16: _native.DT_F16}
    # the slots of rows and per-tensor numbers are read by name, never by number
    assert not re.findall(r"ROW \+ \d|PER \+ \d|PTR\([^()]*, \d+\)|>> (?:4|8|12)\) & 15", source)


def test_a_batch_row_puts_each_tensor_in_its_slot() -> None:
    """``Batch.add`` writes the slots the names say (the kernels read them by the same names)."""
    w, g, s1, s2, pw = (torch.zeros(8) for _ in range(5))
    p = torch.zeros(8, dtype=torch.bfloat16)
    batch = _native.Batch()
    batch.add(w, g, p, (s1, None, s2), (pw,), lr=0.5, decay=0.25, l2=0.125)
    row, per = batch.rows, batch.per
    assert len(row) == _native.ROW and len(per) == _native.PER
    assert row[_native.S_N] == 8
    assert (row[_native.S_W], row[_native.S_G], row[_native.S_P]) == (w.data_ptr(), g.data_ptr(), p.data_ptr())
    assert (row[_native.S_S1], row[_native.S_S2], row[_native.S_S3]) == (s1.data_ptr(), s2.data_ptr(), 0)
    assert (row[_native.S_POW1], row[_native.S_POW2], batch.pow3[0]) == (pw.data_ptr(), 0, 0)
    assert _native.packed_dtypes(row[_native.S_DT]) == (
        _native.DT_F32, _native.DT_F32, _native.DT_BF16, _native.DT_F32
    )
    assert (per[_native.P_LR], per[_native.P_DECAY], per[_native.P_L2]) == (0.5, 0.25, 0.125)


def test_the_triton_kernels_take_the_row_layout_of_the_python_side() -> None:
    """The Triton kernels' constexprs are _native.py's layout (the dtype codes as F32, F64, BF16,
    F16, NONE), and their rows and per-tensor numbers are read by those names, never by number."""
    import ast
    import re

    pytest.importorskip("triton")
    from paddle_compat.optimizer import _multi_tensor

    path = ROOT / "paddle_compat" / "optimizer" / "_triton_kernels.py"
    module = _multi_tensor._load(False)
    assert module is not None
    short = {"F32": "DT_F32", "F64": "DT_F64", "BF16": "DT_BF16", "F16": "DT_F16", "NONE": "DT_NONE"}
    tree = ast.parse(path.read_text())
    constants = [node.target.id for node in tree.body
                 if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)]
    assert {"ROW", "PER", "S_W", "S_P", "P_LR", "P_L2", "BF16", "NONE"} <= set(constants)
    for name in constants:
        assert getattr(module, name).value == getattr(_native, short.get(name, name)), name
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "_ptr" and len(node.args) > 2:
            row, slot, dtype = node.args[1:4]
            if isinstance(row, ast.Name) and row.id == "row":
                where = f"line {node.lineno}"
                assert isinstance(slot, ast.Name) and slot.id in constants, f"{where}: a row slot by number"
                assert not isinstance(dtype, ast.Constant), f"{where}: a dtype by number"
    source = path.read_text()
    assert not re.findall(r"\* PER\)|\* PER \+ \d|tl\.load\(row\)|row \+ \d", source)
