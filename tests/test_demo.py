"""The README's first command: the demo runs, explains its skipped steps, and has a --help."""

import pytest

from paddle_compat import demo


def test_demo_runs_and_says_why_steps_are_skipped(capsys):
    assert demo.main(["--steps", "12", "--device", "cpu"]) == 0
    out = capsys.readouterr().out.splitlines()
    steps = [line for line in out if line.startswith("step ")]
    assert len(steps) == 12
    assert "skipped: float16 grads overflowed; the scale halved" in steps[0]  # the scale starts too high
    assert "skipped: the batch holds a NaN" in steps[5]  # the corrupted batch, half-way
    assert out[-1].startswith("summary: loss")


def test_demo_help_describes_every_option(capsys):
    with pytest.raises(SystemExit) as info:
        demo.main(["--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    for option in ("--steps", "--device", "--seed"):
        assert option in text
    assert "(default: 80)" in text and "first float16 gradients overflow" in text


def test_demo_refuses_bad_arguments(capsys):
    with pytest.raises(SystemExit) as info:
        demo.main(["--steps", "0"])
    assert info.value.code == 2 and "--steps must be at least 1" in capsys.readouterr().err
