"""The torch dialect of ``GradScaler``, as newer Paddle accepts it (Paddle PR #77981).

"[Paddle test]" cases restate a case of Paddle's own ``test/amp/test_grad_scaler_out.py`` (same
inputs and expected values); "[decorator]" cases follow from how newer Paddle maps the arguments;
"[docs]" cases from newer Paddle's API page.
"""

from __future__ import annotations

import importlib

import pytest
import torch

from paddle_compat.amp import AmpScaler, GradScaler

PADDLE_DEFAULTS = {
    "enable": True,
    "init_loss_scaling": 2.0**16,
    "incr_ratio": 2.0,
    "decr_ratio": 0.5,
    "incr_every_n_steps": 2000,
    "decr_every_n_nan_or_inf": 1,
    "use_dynamic_loss_scaling": True,
}


def settings(scaler) -> dict:
    """The scaler's configuration under Paddle's names, read through Paddle's public getters."""
    return {
        "enable": scaler.is_enable(),
        "init_loss_scaling": scaler.get_init_loss_scaling(),
        "incr_ratio": scaler.get_incr_ratio(),
        "decr_ratio": scaler.get_decr_ratio(),
        "incr_every_n_steps": scaler.get_incr_every_n_steps(),
        "decr_every_n_nan_or_inf": scaler.get_decr_every_n_nan_or_inf(),
        "use_dynamic_loss_scaling": scaler.is_use_dynamic_loss_scaling(),
    }


def expect(**changes) -> dict:
    return {**PADDLE_DEFAULTS, **changes}


# -- construction: keywords ----------------------------------------------------------------


def test_no_arguments_gives_paddle_3_defaults():  # [Paddle test]
    assert settings(GradScaler()) == PADDLE_DEFAULTS


def test_all_five_torch_keywords_map_to_paddle_names():  # [Paddle test]
    s = GradScaler(enabled=True, init_scale=1024.0, growth_factor=3.0, backoff_factor=0.25, growth_interval=500)
    assert settings(s) == expect(init_loss_scaling=1024.0, incr_ratio=3.0, decr_ratio=0.25, incr_every_n_steps=500)


def test_torch_and_paddle_keywords_mix():  # [Paddle test]
    s = GradScaler(enable=True, init_loss_scaling=1024.0, growth_factor=3.0, decr_ratio=0.25, growth_interval=500)
    assert settings(s) == expect(init_loss_scaling=1024.0, incr_ratio=3.0, decr_ratio=0.25, incr_every_n_steps=500)


@pytest.mark.parametrize(
    "kwargs, name, value",
    [
        ({"init_scale": 512.0}, "init_loss_scaling", 512.0),
        ({"growth_factor": 5.0}, "incr_ratio", 5.0),
        ({"backoff_factor": 0.1}, "decr_ratio", 0.1),
        ({"growth_interval": 100}, "incr_every_n_steps", 100),
    ],
)
def test_each_alias_alone(kwargs, name, value):  # [Paddle test]
    assert settings(GradScaler(**kwargs)) == expect(**{name: value})


def test_enabled_false_alone_disables():  # [Paddle test]
    s = GradScaler(enabled=False)
    assert not s.is_enable()
    assert s.get_init_loss_scaling() == 1.0  # a disabled Paddle scaler reports 1.0


def test_torch_aliases_with_paddle_only_arguments():  # [Paddle test]
    s = GradScaler(enabled=True, init_scale=2048.0, decr_every_n_nan_or_inf=3, use_dynamic_loss_scaling=False)
    got = settings(s)
    assert (got["enable"], got["init_loss_scaling"], got["decr_every_n_nan_or_inf"]) == (True, 2048.0, 3)
    assert got["use_dynamic_loss_scaling"] is False


def test_torch_and_paddle_spellings_build_the_same_scaler():  # [Paddle test]
    torch_style = GradScaler(
        enabled=True, init_scale=1024.0, growth_factor=3.0, backoff_factor=0.25, growth_interval=500
    )
    paddle_style = GradScaler(
        enable=True, init_loss_scaling=1024.0, incr_ratio=3.0, decr_ratio=0.25, incr_every_n_steps=500
    )
    assert settings(torch_style) == settings(paddle_style)


@pytest.mark.parametrize(
    "kwargs, paddle_name, alias",
    [
        ({"enable": True, "enabled": False}, "enable", "enabled"),
        ({"init_loss_scaling": 1024.0, "init_scale": 2048.0}, "init_loss_scaling", "init_scale"),
        ({"incr_ratio": 2.0, "growth_factor": 3.0}, "incr_ratio", "growth_factor"),
        ({"decr_ratio": 0.5, "backoff_factor": 0.25}, "decr_ratio", "backoff_factor"),
        ({"incr_every_n_steps": 1000, "growth_interval": 2000}, "incr_every_n_steps", "growth_interval"),
    ],
)
def test_an_argument_and_its_alias_together_is_a_value_error(kwargs, paddle_name, alias):  # [Paddle test]
    # [decorator]: the exact text
    with pytest.raises(ValueError) as info:
        GradScaler(**kwargs)
    assert str(info.value) == f"Cannot specify both '{paddle_name}' and its alias '{alias}'"


def test_an_argument_and_its_alias_with_the_same_value_still_conflict():  # [decorator]
    with pytest.raises(ValueError, match=r"^Cannot specify both 'init_loss_scaling' and its alias 'init_scale'$"):
        GradScaler(init_loss_scaling=1024.0, init_scale=1024.0)


def test_the_first_conflict_in_alias_order_is_reported():  # [decorator]
    # order enabled, init_scale, growth_factor, backoff_factor, growth_interval
    with pytest.raises(ValueError, match=r"^Cannot specify both 'enable' and its alias 'enabled'$"):
        GradScaler(incr_ratio=2.0, growth_factor=3.0, enable=True, enabled=True)


def test_device_keyword_is_accepted_and_ignored():  # [Paddle test]
    s = GradScaler(device="cuda", init_scale=2048.0, growth_factor=3.0)
    assert settings(s) == expect(init_loss_scaling=2048.0, incr_ratio=3.0)


def test_device_keyword_with_a_paddle_style_call():  # [decorator]: the keyword is dropped whatever the call looks like
    assert settings(GradScaler(True, 1024.0, device="cpu")) == expect(init_loss_scaling=1024.0)


# -- construction: positional arguments ------------------------------------------------------


def test_paddle_positional_order_when_the_first_argument_is_a_bool():  # [Paddle test]
    s = GradScaler(True, 1024.0, 3.0, 0.25, 500, 2, True)
    assert settings(s) == expect(
        init_loss_scaling=1024.0, incr_ratio=3.0, decr_ratio=0.25, incr_every_n_steps=500, decr_every_n_nan_or_inf=2
    )


def test_paddle_positional_with_a_torch_keyword():  # [Paddle test]
    assert settings(GradScaler(True, 1024.0, growth_factor=5.0)) == expect(init_loss_scaling=1024.0, incr_ratio=5.0)


def test_torch_positional_order_when_the_first_argument_is_a_number():  # [Paddle test]
    s = GradScaler(1024.0, 3.0, 0.25, 500, True)
    assert settings(s) == expect(init_loss_scaling=1024.0, incr_ratio=3.0, decr_ratio=0.25, incr_every_n_steps=500)


def test_an_int_first_argument_is_torchs_init_scale():  # [decorator]: any non-bool, non-str first argument
    assert settings(GradScaler(1024)) == expect(init_loss_scaling=1024)


def test_torch_positional_enabled_false():  # [Paddle test]
    s = GradScaler(1024.0, 2.0, 0.5, 2000, False)
    assert not s.is_enable()
    assert s.get_init_loss_scaling() == 1.0


def test_torch_positional_init_scale_only():  # [Paddle test]
    assert settings(GradScaler(4096.0)) == expect(init_loss_scaling=4096.0)


def test_torch_positional_with_enabled_keyword():  # [Paddle test]
    s = GradScaler(1024.0, enabled=False)
    assert not s.is_enable()
    assert s.get_init_loss_scaling() == 1.0


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_leading_device_string_then_torch_positional_order(device):  # [Paddle test] (Paddle tests "cuda")
    s = GradScaler(device, 1024.0, 3.0, 0.25, 500, True)
    assert settings(s) == expect(init_loss_scaling=1024.0, incr_ratio=3.0, decr_ratio=0.25, incr_every_n_steps=500)


def test_device_string_alone():  # [Paddle test]
    assert settings(GradScaler("cuda")) == PADDLE_DEFAULTS


def test_device_string_and_init_scale():  # [Paddle test]
    assert settings(GradScaler("cuda", 1024.0)) == expect(init_loss_scaling=1024.0)


def test_device_string_with_torch_keywords():  # [Paddle test]
    assert settings(GradScaler("cuda", init_scale=512.0, enabled=True)) == expect(init_loss_scaling=512.0)


def test_an_argument_given_by_position_and_keyword_is_a_type_error():
    # Paddle keeps the keyword and drops the positional silently; we raise, as Python and torch do.
    with pytest.raises(TypeError, match=r"^GradScaler\(\) got multiple values for argument 'init_scale'$"):
        GradScaler(1024.0, init_scale=2048.0)
    with pytest.raises(TypeError, match=r"^GradScaler\(\) got multiple values for argument 'init_loss_scaling'$"):
        GradScaler("cuda", 1024.0, init_loss_scaling=512.0)


def test_a_sixth_torch_positional_is_a_type_error():
    # Paddle drops it silently; torch raises.
    with pytest.raises(TypeError, match=r"^GradScaler\(\) takes at most 5 positional arguments in torch's order"):
        GradScaler("cuda", 1024.0, 3.0, 0.25, 500, True, "surplus")


def test_paddle_positional_and_an_alias_for_the_same_argument_is_a_type_error():  # [decorator] -> Python's own error
    with pytest.raises(TypeError, match="init_loss_scaling"):
        GradScaler(True, 1024.0, init_scale=2048.0)


def test_bad_values_given_by_torch_name_are_still_rejected():
    # Validation is the project's (Paddle only asserts). Which name the message uses is open:
    # naming the alias the caller wrote is kinder.
    with pytest.raises(ValueError, match="growth_factor|incr_ratio"):
        GradScaler(growth_factor=0.5)
    with pytest.raises(ValueError, match="backoff_factor|decr_ratio"):
        GradScaler("cpu", 1024.0, 2.0, 1.5)


# -- torch-named methods ------------------------------------------------------------------------


def test_is_enabled():  # [Paddle test]
    assert GradScaler(enabled=True).is_enabled() is True
    assert GradScaler(enabled=False).is_enabled() is False


def test_get_scale_is_the_scale_and_zero_when_disabled():  # [Paddle test] (torch returns 1.0 when disabled)
    assert GradScaler(init_scale=2048.0).get_scale() == 2048.0
    assert GradScaler(enabled=False).get_scale() == 0.0


def test_growth_factor_accessors_are_incr_ratio():  # [Paddle test]
    s = GradScaler(growth_factor=3.0)
    assert s.get_growth_factor() == 3.0
    s.set_growth_factor(5.0)
    assert (s.get_growth_factor(), s.get_incr_ratio()) == (5.0, 5.0)


def test_backoff_factor_accessors_are_decr_ratio():  # [Paddle test]
    s = GradScaler(backoff_factor=0.25)
    assert s.get_backoff_factor() == 0.25
    s.set_backoff_factor(0.1)
    assert (s.get_backoff_factor(), s.get_decr_ratio()) == (0.1, 0.1)


def test_growth_interval_accessors_are_incr_every_n_steps():  # [Paddle test]
    s = GradScaler(growth_interval=500)
    assert s.get_growth_interval() == 500
    s.set_growth_interval(100)
    assert (s.get_growth_interval(), s.get_incr_every_n_steps()) == (100, 100)


def test_torch_setters_validate_like_paddles():
    s = GradScaler()
    for setter, bad in ((s.set_growth_factor, 1.0), (s.set_backoff_factor, 1.0), (s.set_growth_interval, 0)):
        with pytest.raises(ValueError):
            setter(bad)
    assert settings(s) == PADDLE_DEFAULTS


def _one_step(scaler, overflow: bool) -> None:
    w = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([w], lr=0.1)
    scaler.scale((w * (float("inf") if overflow else 1.0)).sum()).backward()
    scaler.step(opt)
    scaler.update()


def test_update_with_new_scale_sets_it_and_resets_the_counts():  # [docs] (torch keeps its growth tracker)
    s = GradScaler(init_scale=1024.0, growth_interval=3)
    _one_step(s, overflow=False)
    _one_step(s, overflow=False)
    assert s.state_dict()["incr_count"] == 2
    s.update(new_scale=64.0)
    assert s.get_scale() == 64.0
    assert (s.state_dict()["incr_count"], s.state_dict()["decr_count"]) == (0, 0)
    _one_step(s, overflow=False)
    assert s.get_scale() == 64.0  # a kept count (torch's rule) would have grown it to 128 here
    _one_step(s, overflow=False)
    _one_step(s, overflow=False)
    assert s.get_scale() == 128.0  # a full period after the reset


def test_update_with_new_scale_positional_and_on_a_disabled_scaler():  # [docs]
    s = GradScaler(init_scale=8.0)
    s.update(32.0)
    assert s.get_scale() == 32.0
    off = GradScaler(enabled=False)
    off.update(32.0)
    assert off.get_scale() == 0.0


# -- one class, three spellings -----------------------------------------------------------------


def test_the_same_trajectory_from_either_dialect():
    # Not a Paddle test: equal settings must also give equal dynamics (scale and counters).
    a = GradScaler("cpu", 32.0, 2.0, 0.5, 2)
    b = GradScaler(enable=True, init_loss_scaling=32.0, incr_ratio=2.0, decr_ratio=0.5, incr_every_n_steps=2)
    for overflow in (False, False, True, False, True, False, False):
        _one_step(a, overflow)
        _one_step(b, overflow)
        assert a.state_dict().keys() == b.state_dict().keys()
        assert all(
            torch.equal(x, y) if torch.is_tensor(x) else x == y
            for x, y in zip(a.state_dict().values(), b.state_dict().values())
        )
    assert a.get_scale() == 32.0  # after each step: 32, 64, 32, 32, 16, 16, 32


def test_gradscaler_is_an_ampscaler_and_keeps_its_own_defaults():  # [Paddle test]
    assert issubclass(GradScaler, AmpScaler)
    a, g = settings(AmpScaler()), settings(GradScaler())
    assert (a["init_loss_scaling"], g["init_loss_scaling"]) == (2.0**15, 2.0**16)
    assert (a["incr_every_n_steps"], g["incr_every_n_steps"]) == (1000, 2000)
    for shared in ("incr_ratio", "decr_ratio", "decr_every_n_nan_or_inf"):
        assert a[shared] == g[shared]


def test_ampscaler_takes_no_torch_dialect():  # [decorator]: only GradScaler.__init__ is decorated
    with pytest.raises(TypeError):
        AmpScaler(init_scale=1024.0)


# The next two cases restate Paddle's call-path tests. paddle_compat has no ``device``/``cuda``
# namespaces today: keep them only if the lead adds ``paddle_compat.device.amp.GradScaler`` and
# ``paddle_compat.cuda.amp.GradScaler`` as the same class.


@pytest.mark.parametrize("module", ["paddle_compat.device.amp", "paddle_compat.cuda.amp"])
def test_device_and_cuda_paths_are_the_same_class(module):  # [Paddle test]
    assert importlib.import_module(module).GradScaler is GradScaler


def test_aliases_through_the_other_paths():  # [Paddle test]
    device_amp = importlib.import_module("paddle_compat.device.amp")
    cuda_amp = importlib.import_module("paddle_compat.cuda.amp")
    s1 = device_amp.GradScaler(init_scale=512.0, growth_factor=4.0)
    assert (s1.get_init_loss_scaling(), s1.get_incr_ratio()) == (512.0, 4.0)
    s2 = cuda_amp.GradScaler(backoff_factor=0.3, growth_interval=800)
    assert (s2.get_decr_ratio(), s2.get_incr_every_n_steps()) == (0.3, 800)
