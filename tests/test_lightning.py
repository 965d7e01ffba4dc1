"""Our GradScaler in real Lightning (2.6): the stock MixedPrecision plugin, our plugins for the
Trainer and Fabric, checkpoint and resume through the trainer. CPU, tiny models, few steps."""

import math
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

L = pytest.importorskip("lightning.pytorch")
from lightning.fabric import Fabric  # noqa: E402
from lightning.fabric.utilities.warnings import PossibleUserWarning  # noqa: E402
from lightning.pytorch.plugins.precision import MixedPrecision  # noqa: E402

from paddle_compat import optimizer as popt  # noqa: E402
from paddle_compat.amp import GradScaler, auto_cast  # noqa: E402
from paddle_compat.amp.amp_state import amp_global_state  # noqa: E402
from paddle_compat.integrations.lightning import (  # noqa: E402
    HoldScheduleOnSkippedSteps,
    PaddleFabricMixedPrecision,
    PaddleMixedPrecision,
)

# Lightning 2.6 calls a torch pytree API that torch 2.13 deprecates; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated")


class Net(L.LightningModule):
    """Linear regression on 3 batches an epoch; the loss of the calls in ``bad`` is made inf."""

    def __init__(self, bad=()):
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(4, 2)
        self.bad = set(bad)
        self.calls = 0
        self.dtypes = []  # per call: (linear's output, exp of it, the recorded AMP dtype)

    def training_step(self, batch, batch_idx):
        x, y = batch
        out = self.layer(x)
        self.dtypes.append((out.dtype, torch.exp(out).dtype, amp_global_state().amp_dtype))
        loss = torch.nn.functional.mse_loss(out.float(), y)
        if self.calls in self.bad:
            loss = loss * math.inf
        self.calls += 1
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        return DataLoader(TensorDataset(torch.randn(12, 4, generator=g), torch.randn(12, 2, generator=g)), batch_size=4)


class Record(L.Callback):
    """After each batch: the parameters, the scale and whether the step was skipped."""

    def __init__(self, scaler):
        self.scaler, self.params, self.scales, self.skipped = scaler, [], [], []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.params.append([p.detach().clone() for p in module.parameters()])
        self.scales.append(self.scaler.get_scale())
        self.skipped.append(self.scaler.last_step_skipped())


def fit(model, plugin, scaler, max_epochs=1, ckpt_path=None, **trainer_kwargs):
    record = Record(scaler)
    trainer = L.Trainer(
        accelerator="cpu", devices=1, max_epochs=max_epochs, plugins=[plugin], callbacks=[record], logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, **trainer_kwargs,
    )
    trainer.fit(model, ckpt_path=ckpt_path)
    return trainer, record


def same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


def assert_skipped_exactly(record, skipped_index, before_params):
    """Step ``skipped_index`` left every parameter as it was; every other step moved them."""
    previous = before_params
    for i, params in enumerate(record.params):
        assert same(params, previous) == (i == skipped_index), i
        previous = params


# -- (a) Lightning's own MixedPrecision plugin with our scaler ----------------------------------


def test_stock_plugin_the_dtype_policy_trap():
    """Lightning computes under torch.autocast, which records nothing in Paddle's AMP state: a
    dynamic scaler sees float32 at its first scale() and switches itself off, as Paddle's
    would. The overflow then goes into the weights."""
    amp_global_state().amp_dtype = "float32"  # a fresh process: no auto_cast entered yet
    scaler = GradScaler(init_loss_scaling=1024)
    model = Net(bad={1})
    with pytest.warns(UserWarning) as caught:
        _, record = fit(model, MixedPrecision("16-mixed", "cpu", scaler=scaler), scaler)
    ours = [w for w in caught if "GradScaler" in str(w.message)]
    assert [str(w.message)[:66] for w in ours] == [
        "It is not recommended to use dynamic loss scaling for float32, so ",
        "GradScaler.scale() ran while the AMP dtype was float32, e.g. befor",
    ]
    # Both point at the line that called scale(): Lightning's plugin.
    assert {w.filename.replace("\\", "/").rsplit("/", 4)[-4:] == ["pytorch", "plugins", "precision", "amp.py"]
            for w in ours} == {True}
    assert not scaler.is_enable() and scaler.state_dict() == {}
    assert not all(torch.isfinite(p).all() for p in record.params[1])


def test_stock_plugin_recipe_records_float16_before_fit():
    """The recipe for the stock plugin: enter auto_cast(dtype='float16') once in the training
    thread before fit (Paddle records the dtype of the last auto_cast entered, for good)."""
    amp_global_state().amp_dtype = "float32"
    with auto_cast(dtype="float16"):
        pass
    scaler = GradScaler(init_loss_scaling=1024)
    model = Net(bad={1})
    start = [p.detach().clone() for p in model.parameters()]
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # the scaler must not switch itself off
        # Lightning's advice (no GPU used, few loader workers), seen on a 16-core GPU machine
        warnings.filterwarnings("ignore", category=PossibleUserWarning)
        _, record = fit(model, MixedPrecision("16-mixed", "cpu", scaler=scaler), scaler, gradient_clip_val=1.0)
    assert record.scales == [1024.0, 512.0, 512.0]
    assert record.skipped == [False, True, False]
    assert_skipped_exactly(record, 1, start)
    assert scaler.get_skipped_steps() == 1
    # torch.autocast's rules, not Paddle's: exp of a float16 tensor stays float16 on CPU.
    assert model.dtypes[0][:2] == (torch.float16, torch.float16)


# -- (b) PaddleMixedPrecision ---------------------------------------------------------------------


def test_plugin_computes_with_paddles_rules_and_skips_on_overflow():
    amp_global_state().amp_dtype = "float32"  # the plugin itself records float16
    scaler = GradScaler(init_loss_scaling=1024, incr_every_n_steps=1)
    model = Net(bad={1})
    start = [p.detach().clone() for p in model.parameters()]
    _, record = fit(model, PaddleMixedPrecision("float16", scaler=scaler), scaler, gradient_clip_val=1.0)
    # linear is on Paddle's white list, exp on its black list
    assert model.dtypes == [(torch.float16, torch.float32, "float16")] * 3
    assert record.scales == [2048.0, 1024.0, 2048.0]
    assert record.skipped == [False, True, False]
    assert_skipped_exactly(record, 1, start)


def test_plugin_default_scaler_and_custom_lists():
    plugin = PaddleMixedPrecision(custom_black_list=["linear"])
    assert isinstance(plugin.scaler, GradScaler) and plugin.scaler.get_init_loss_scaling() == 2.0**16
    assert plugin.precision == "16-mixed"
    model = Net()
    fit(model, plugin, plugin.scaler, max_steps=1)
    assert model.dtypes[0][0] == torch.float32  # linear black-listed by the user


def test_plugin_bfloat16_without_scaler_and_with_a_static_one():
    model = Net()
    plugin = PaddleMixedPrecision("bfloat16")
    assert plugin.scaler is None and plugin.precision == "bf16-mixed"
    fit(model, plugin, GradScaler(), max_steps=1)
    assert model.dtypes[0] == (torch.bfloat16, torch.float32, "bfloat16")

    # Lightning's own plugin refuses a scaler with bf16; ours takes one, with Paddle's rules:
    # a static scaler keeps its scale and still skips the overflowing step.
    scaler = GradScaler(init_loss_scaling=8, use_dynamic_loss_scaling=False)
    model = Net(bad={1})
    start = [p.detach().clone() for p in model.parameters()]
    _, record = fit(model, PaddleMixedPrecision("bfloat16", scaler=scaler), scaler)
    assert record.scales == [8.0, 8.0, 8.0] and record.skipped == [False, True, False]
    assert_skipped_exactly(record, 1, start)


def test_plugin_bfloat16_with_a_dynamic_scaler_switches_it_off_as_paddle_does():
    scaler = GradScaler()
    with pytest.warns(UserWarning, match="dynamic loss scaling for bfloat16"):
        fit(Net(), PaddleMixedPrecision("bfloat16", scaler=scaler), scaler, max_steps=1)
    assert not scaler.is_enable()


@pytest.mark.parametrize(
    "kwargs, exc, message",
    [
        ({"dtype": "float32"}, ValueError, "dtype must be 'float16' or 'bfloat16'"),
        ({"level": "O3"}, ValueError, "level must be one of O0, OD, O1, O2"),
        ({"scaler": object()}, TypeError, "scaler must be a paddle_compat.amp.GradScaler"),
    ],
)
def test_plugin_rejects_bad_arguments(kwargs, exc, message):
    with pytest.raises(exc, match=message):
        PaddleMixedPrecision(**kwargs)


def test_plugin_checkpoint_resumes_the_scaler_and_the_trajectory(tmp_path):
    def make():
        scaler = GradScaler(init_loss_scaling=1024, incr_every_n_steps=2)
        return scaler, PaddleMixedPrecision(scaler=scaler)

    # Uninterrupted: two epochs of 3 steps, overflows at steps 1 and 4.
    scaler, plugin = make()
    full = Net(bad={1, 4})
    _, full_record = fit(full, plugin, scaler, max_epochs=2)
    assert full_record.scales == [1024.0, 512.0, 512.0, 1024.0, 512.0, 512.0]

    # One epoch, a checkpoint, then a fresh trainer, plugin and scaler resume from it.
    scaler, plugin = make()
    first = Net(bad={1})
    trainer, _ = fit(first, plugin, scaler, max_epochs=1)
    path = tmp_path / "last.ckpt"
    trainer.save_checkpoint(path)
    saved = torch.load(path, weights_only=False)["PaddleMixedPrecision"]
    assert saved == {**scaler.state_dict(), "scale": saved["scale"]} and saved["scale"].tolist() == [512.0]
    assert (saved["incr_count"], saved["skipped_steps"]) == (1, 1)

    scaler, plugin = make()
    resumed = Net(bad={1})  # its second call is step 4 of the run
    _, record = fit(resumed, plugin, scaler, max_epochs=2, ckpt_path=path)
    assert record.scales == full_record.scales[3:]  # needs the restored incr_count to grow at step 3
    assert scaler.get_skipped_steps() == 2
    assert same(record.params[-1], full_record.params[-1])


# -- Fabric ---------------------------------------------------------------------------------------


def test_fabric_plugin_trains_clips_and_skips():
    amp_global_state().amp_dtype = "float32"
    scaler = GradScaler(init_loss_scaling=1024, incr_every_n_steps=1)
    fabric = Fabric(accelerator="cpu", devices=1, plugins=[PaddleFabricMixedPrecision(scaler=scaler)])
    torch.manual_seed(0)
    dtypes = []
    module = torch.nn.Linear(4, 2)
    module.register_forward_hook(lambda m, inputs, out: dtypes.append((inputs[0].dtype, out.dtype)))
    model, optimizer = fabric.setup(module, torch.optim.SGD(module.parameters(), lr=0.1))
    x, y = torch.randn(8, 4), torch.randn(8, 2)
    history = []
    for step in range(3):
        out = model(x)  # Fabric hands the output back in float32
        loss = torch.nn.functional.mse_loss(out.float(), y) * (math.inf if step == 1 else 1.0)
        fabric.backward(loss)
        # unscales first; Fabric raises on a non-finite norm unless told not to (as with torch's scaler)
        fabric.clip_gradients(model, optimizer, max_norm=1.0, error_if_nonfinite=False)
        optimizer.step()
        optimizer.zero_grad()
        history.append(([p.detach().clone() for p in model.parameters()], scaler.get_scale()))
    assert dtypes == [(torch.float32, torch.float16)] * 3  # inputs left alone; linear is white-listed
    assert [s for _, s in history] == [2048.0, 1024.0, 2048.0]
    assert same(history[1][0], history[0][0]) and not same(history[2][0], history[1][0])


# -- the standalone pytorch_lightning package ------------------------------------------------------


def test_standalone_pytorch_lightning_plugin():
    pl = pytest.importorskip("pytorch_lightning")
    from paddle_compat.integrations.pytorch_lightning import PaddleMixedPrecision as StandalonePlugin

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 2)
            self.dtypes = []

        def training_step(self, batch, batch_idx):
            out = self.layer(batch[0])
            self.dtypes.append(out.dtype)
            return out.float().pow(2).mean() * (math.inf if batch_idx == 1 else 1.0)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    scaler = GradScaler(init_loss_scaling=1024)
    model = Tiny()
    trainer = pl.Trainer(
        accelerator="cpu", max_steps=2, plugins=[StandalonePlugin(scaler=scaler)], logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )
    trainer.fit(model, DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4))
    assert model.dtypes == [torch.float16] * 2
    assert scaler.get_scale() == 512.0 and scaler.get_skipped_steps() == 1


# -- paddle_compat's optimizers and Paddle's schedulers, as configure_optimizers returns them -------


class PaddleNet(Net):
    """``Net`` with Paddle's SGD driven by Paddle's StepDecay, the scheduler stepped per
    ``interval``; records the rate the group shows at each call."""

    def __init__(self, bad=(), interval="step", fused=False):
        super().__init__(bad)
        self.interval, self.fused, self.rates = interval, fused, []

    def training_step(self, batch, batch_idx):
        self.rates.append(self.trainer.optimizers[0].param_groups[0]["lr"])
        return super().training_step(batch, batch_idx)

    def configure_optimizers(self):
        sched = popt.lr.StepDecay(learning_rate=0.1, step_size=1, gamma=0.5)
        opt = popt.SGD(learning_rate=sched, parameters=self.parameters(), fused=self.fused)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": self.interval}}


@pytest.mark.parametrize("interval", ["step", "epoch"])
def test_paddle_optimizer_and_scheduler_clip_unscaled_and_skip(interval):
    scaler = GradScaler(init_loss_scaling=1024)
    model = PaddleNet(bad={1}, interval=interval)
    start = [p.detach().clone() for p in model.parameters()]
    _, record = fit(model, PaddleMixedPrecision(scaler=scaler), scaler, max_epochs=2, gradient_clip_val=0.5)
    assert record.skipped == [False, True, False, False, False, False]
    assert_skipped_exactly(record, 1, start)
    # the rate the group shows follows the scheduler at once (Lightning steps it, skipped step or not)
    per_step, per_epoch = [0.1, 0.05, 0.025, 0.0125, 0.00625, 0.003125], [0.1] * 3 + [0.05] * 3
    assert model.rates == (per_step if interval == "step" else per_epoch)
    # clipped on unscaled gradients: the first step moves the weights by lr * 0.5 (clipped at 0.5;
    # clipping the gradients still scaled by 1024 would move them 1024 times less)
    moved = torch.cat([(a - b).flatten() for a, b in zip(record.params[0], start)]).norm()
    assert moved.item() == pytest.approx(0.1 * 0.5, rel=1e-3)


def test_a_fused_paddle_optimizer_trains_the_same_but_lightning_refuses_to_clip_it():
    runs = []
    for fused in (False, True):
        scaler = GradScaler(init_loss_scaling=1024)
        model = PaddleNet(bad={1}, fused=fused)
        _, record = fit(model, PaddleMixedPrecision(scaler=scaler), scaler, max_epochs=2)
        runs.append((record, scaler.get_scale()))
    (plain, plain_scale), (fused, fused_scale) = runs
    assert plain.skipped == fused.skipped and plain.scales == fused.scales and plain_scale == fused_scale
    assert all(same(a, b) for a, b in zip(plain.params, fused.params))  # bit for bit
    scaler = GradScaler(init_loss_scaling=1024)
    with pytest.raises(RuntimeError, match="SGD, does not allow for gradient clipping because it performs unscaling"):
        fit(PaddleNet(fused=True), PaddleMixedPrecision(scaler=scaler), scaler, gradient_clip_val=1.0)


def test_paddle_optimizer_and_scheduler_resume_from_a_lightning_checkpoint(tmp_path):
    def run(max_epochs, ckpt_path=None, bad=(1,)):
        scaler = GradScaler(init_loss_scaling=1024, incr_every_n_steps=2)
        model = PaddleNet(bad=bad)
        trainer, record = fit(model, PaddleMixedPrecision(scaler=scaler), scaler, max_epochs=max_epochs,
                              ckpt_path=ckpt_path, gradient_clip_val=0.5)
        return trainer, model, record

    _, full, full_record = run(2)
    trainer, _, _ = run(1)
    trainer.save_checkpoint(tmp_path / "epoch1.ckpt")
    _, resumed, record = run(2, ckpt_path=tmp_path / "epoch1.ckpt", bad=())
    assert resumed.rates == full.rates[3:] and record.scales == full_record.scales[3:]
    assert same(record.params[-1], full_record.params[-1])
    sched = resumed.trainer.lr_scheduler_configs[0].scheduler
    assert sched.last_epoch == 6 and sched.optimizer is resumed.trainer.optimizers[0]


def test_fabric_clips_a_paddle_optimizer_and_refuses_a_fused_one():
    amp_global_state().amp_dtype = "float32"
    for fused in (False, True):
        scaler = GradScaler(init_loss_scaling=1024)
        fabric = Fabric(accelerator="cpu", devices=1, plugins=[PaddleFabricMixedPrecision(scaler=scaler)])
        torch.manual_seed(0)
        module = torch.nn.Linear(4, 2)
        sched = popt.lr.ExponentialDecay(learning_rate=0.1, gamma=0.5)
        model, optimizer = fabric.setup(module, popt.SGD(learning_rate=sched, parameters=module.parameters(),
                                                         fused=fused))
        start = [p.detach().clone() for p in model.parameters()]
        x, y = torch.randn(8, 4), torch.randn(8, 2)
        fabric.backward(torch.nn.functional.mse_loss(model(x).float(), y))
        if fused:
            with pytest.raises(NotImplementedError, match="not implemented for optimizers handling the unscaling"):
                fabric.clip_gradients(model, optimizer, max_norm=0.5)
            continue
        fabric.clip_gradients(model, optimizer, max_norm=0.5)  # unscales first
        optimizer.step()
        sched.step()
        moved = torch.cat([(p.detach() - s).flatten() for p, s in zip(model.parameters(), start)]).norm()
        assert moved.item() == pytest.approx(0.1 * 0.5, rel=1e-3)
        assert optimizer.param_groups[0]["lr"] == 0.05


def test_paddle_reduce_on_plateau_with_a_monitor():
    class Plateau(PaddleNet):
        def training_step(self, batch, batch_idx):
            self.log("train_loss", 1.0)  # never improves: the rate drops after each epoch past the first
            return super().training_step(batch, batch_idx)

        def configure_optimizers(self):
            sched = popt.lr.ReduceOnPlateau(learning_rate=0.1, patience=0, factor=0.5)
            opt = popt.Adam(learning_rate=sched, parameters=self.parameters())
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "monitor": "train_loss"}}

    scaler = GradScaler(init_loss_scaling=1024)
    model = Plateau()
    fit(model, PaddleMixedPrecision(scaler=scaler), scaler, max_epochs=3)
    assert model.rates == [0.1] * 6 + [0.05] * 3


# -- skipped steps and the schedule ---------------------------------------------------------------


def paddle_loop(bad, epochs=2):
    """PaddleNet's run as a plain Paddle-style loop (README): minimize, and the scheduler stepped
    only when the step was not skipped."""
    net = Net()
    layer, data = net.layer, net.train_dataloader()
    sched = popt.lr.StepDecay(learning_rate=0.1, step_size=1, gamma=0.5)
    opt = popt.SGD(learning_rate=sched, parameters=layer.parameters())
    scaler = GradScaler(init_loss_scaling=1024)
    params, rates, calls = [], [], 0
    for _ in range(epochs):
        for x, y in data:
            rates.append(opt.get_lr())
            with auto_cast():
                loss = torch.nn.functional.mse_loss(layer(x).float(), y)
                if calls in bad:
                    loss = loss * math.inf
            calls += 1
            scaled = scaler.scale(loss)
            scaled.backward()
            scaler.minimize(opt, scaled)
            if not scaler._cache_found_inf:
                sched.step()
            opt.clear_grad()
            params.append([p.detach().clone() for p in layer.parameters()])
    return params, rates, scaler.get_scale()


class HeldNet(HoldScheduleOnSkippedSteps, PaddleNet):
    pass


def test_the_mixin_holds_the_schedule_on_skipped_steps_as_paddles_loop_does():
    bad = {1, 4}
    params, rates, scale = paddle_loop(bad)
    scaler = GradScaler(init_loss_scaling=1024)
    model = HeldNet(bad=bad)
    _, record = fit(model, PaddleMixedPrecision(scaler=scaler), scaler, max_epochs=2)
    assert record.skipped == [False, True, False, False, True, False]
    assert model.rates == rates == [0.1, 0.05, 0.05, 0.025, 0.0125, 0.0125]
    assert all(same(a, b) for a, b in zip(record.params, params)) and scaler.get_scale() == scale  # bit for bit

    # without it, Lightning steps the schedule on the skipped steps too: one step of drift per overflow
    scaler = GradScaler(init_loss_scaling=1024)
    drifting = PaddleNet(bad=bad)
    _, record = fit(drifting, PaddleMixedPrecision(scaler=scaler), scaler, max_epochs=2)
    assert drifting.rates == [0.1, 0.05, 0.025, 0.0125, 0.00625, 0.003125]
    assert not same(record.params[-1], params[-1])


def test_the_mixin_leaves_a_per_epoch_schedule_alone():
    scaler = GradScaler(init_loss_scaling=1024)
    model = HeldNet(bad={2, 5}, interval="epoch")  # each epoch's last step overflows
    fit(model, PaddleMixedPrecision(scaler=scaler), scaler, max_epochs=3)
    assert model.rates == [0.1] * 3 + [0.05] * 3 + [0.025] * 3


def test_a_resumed_fabric_run_keeps_the_scale(tmp_path):
    """Fabric checkpoints what ``fabric.save`` is given: the scaler goes in its state (the
    documented recipe), and ``fabric.load`` restores it, scale and counters."""

    def run(steps, bad, path=None, load=None):
        amp_global_state().amp_dtype = "float32"
        scaler = GradScaler(init_loss_scaling=1024, incr_every_n_steps=1)
        fabric = Fabric(accelerator="cpu", devices=1, plugins=[PaddleFabricMixedPrecision(scaler=scaler)])
        torch.manual_seed(0)
        module = torch.nn.Linear(4, 2)
        model, optimizer = fabric.setup(module, torch.optim.SGD(module.parameters(), lr=0.1))
        state = {"model": model, "optimizer": optimizer, "scaler": scaler}
        start = 0
        if load is not None:
            start = fabric.load(load, state)["step"]
        g = torch.Generator().manual_seed(0)
        batches = [(torch.randn(8, 4, generator=g), torch.randn(8, 2, generator=g)) for _ in range(6)]
        scales = []
        for step in range(start, steps):
            x, y = batches[step]
            loss = torch.nn.functional.mse_loss(model(x).float(), y) * (math.inf if step in bad else 1.0)
            fabric.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            scales.append(scaler.get_scale())
        if path is not None:
            fabric.save(path, {**state, "step": steps})
        return scales, [p.detach().clone() for p in model.parameters()], scaler

    full_scales, full_params, _ = run(6, bad={1, 4})
    assert full_scales == [2048.0, 1024.0, 2048.0, 4096.0, 2048.0, 4096.0]
    run(3, bad={1}, path=tmp_path / "fabric.ckpt")
    scales, params, scaler = run(6, bad={4}, load=tmp_path / "fabric.ckpt")
    assert scales == full_scales[3:]  # from the 2048 saved (a fresh scaler's first would be 2048, not 4096)
    assert scaler.get_skipped_steps() == 2 and same(params, full_params)
