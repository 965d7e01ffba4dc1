"""Hugging Face's Trainer (transformers 5) with Paddle's optimizer and scheduler, our scaler and
``auto_cast``, as docs/integrations.md writes it: clipping at HF's default max_grad_norm on
unscaled gradients, skipped steps holding the schedule, resume from HF's checkpoints with the
scaler. CPU, a tiny model built from a config (no download)."""

import math
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here needs the hub; never reach for it
transformers = pytest.importorskip("transformers")
from accelerate.state import AcceleratorState, GradientState  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments  # noqa: E402

from paddle_compat import optimizer as popt  # noqa: E402
from paddle_compat.amp import GradScaler, auto_cast  # noqa: E402
from paddle_compat.integrations.accelerate import use_grad_scaler  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_accelerate_state():
    yield  # the Trainer's Accelerator keeps process-wide singletons; leave none behind
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


class PaddleAmpTrainer(Trainer):
    """The recipe's Trainer: the forward under Paddle's auto_cast; ``bad`` steps overflow."""

    bad: tuple[int, ...] = ()

    def compute_loss_context_manager(self):
        return auto_cast(dtype="float16")

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        return loss * math.inf if self.state.global_step in self.bad else loss


class Record(TrainerCallback):
    """After each step: the scale, whether it was skipped, the group's rate, the parameters; and
    the logged grad_norm and learning_rate."""

    def __init__(self, scaler):
        self.scaler, self.steps, self.logs = scaler, [], []

    def on_step_end(self, args, state, control, model=None, optimizer=None, **kwargs):
        self.steps.append((self.scaler.get_scale(), self.scaler.last_step_skipped(), optimizer.param_groups[0]["lr"],
                           [p.detach().clone() for p in model.parameters()]))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if "grad_norm" in logs:
            self.logs.append((logs["grad_norm"], logs["learning_rate"]))


def data():
    g = torch.Generator().manual_seed(0)
    return [{"input_ids": (ids := torch.randint(0, 16, (8,), generator=g)), "labels": ids} for _ in range(24)]


def model():
    torch.manual_seed(0)
    config = GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=16, n_positions=8, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config)


def train(out, *, bad=(), optimizer="adamw", resume=None, max_steps=6, **args):
    net = model()
    sched = popt.lr.LinearWarmup(popt.lr.CosineAnnealingDecay(1e-2, T_max=10), 2, 0.0, 1e-2)
    if optimizer == "adamw":
        opt = popt.AdamW(learning_rate=sched, parameters=net.parameters())
    else:
        opt = popt.SGD(learning_rate=0.5, parameters=net.parameters())
        sched = popt.lr.StepDecay(0.5, step_size=100)
        opt.set_lr_scheduler(sched)
    scaler = GradScaler(init_loss_scaling=1024, incr_every_n_steps=2)
    args = TrainingArguments(output_dir=str(out), per_device_train_batch_size=4, max_steps=max_steps, logging_steps=1,
                             save_steps=3, report_to="none", use_cpu=True, disable_tqdm=True, **args)
    record = Record(scaler)
    trainer = PaddleAmpTrainer(model=net, args=args, train_dataset=data(), optimizers=(opt, sched), callbacks=[record])
    trainer.bad = bad
    use_grad_scaler(trainer.accelerator, scaler)
    trainer.train(resume_from_checkpoint=resume)
    return trainer, record, scaler, sched


def test_skips_hold_the_schedule_and_clipping_sees_unscaled_gradients(tmp_path):
    trainer, record, scaler, sched = train(tmp_path, bad=(1,))
    assert trainer.args.max_grad_norm == 1.0  # HF's default
    assert [s[:2] for s in record.steps] == [(1024.0, False), (512.0, True), (512.0, False), (1024.0, False),
                                             (1024.0, False), (2048.0, False)]
    # LinearWarmup(2 steps) then cosine: the skipped step does not advance it
    rates = [s[2] for s in record.steps]
    assert rates[:3] == [0.005, 0.005, 0.01] and sched.last_epoch == 5 and rates[-1] == sched()
    assert [lr for _, lr in record.logs] == [0.0] + rates[:-1]  # HF logs the rate the step used
    # the logged norms are those of the unscaled gradients (scaled ones would be ~1024 times larger)
    norms = [n for n, _ in record.logs]
    assert math.isnan(norms[1]) and all(0.1 < n < 10 for n in norms[:1] + norms[2:])
    assert any(n > 1.0 for n in norms[2:])  # so the clip at 1.0 engaged
    assert scaler.get_skipped_steps() == 1


def test_the_clip_at_max_grad_norm_moves_sgd_by_lr_times_the_clipped_norm(tmp_path):
    net = model()
    start = [p.detach().clone() for p in net.parameters()]
    _, record, _, _ = train(tmp_path, optimizer="sgd", max_steps=1, max_grad_norm=0.1)
    (norm, _), = record.logs
    moved = torch.cat([(a - b).flatten() for a, b in zip(record.steps[0][3], start)]).norm().item()
    assert norm > 0.1 and moved == pytest.approx(0.5 * 0.1, rel=1e-3)  # 0.1 / 1024 if clipped while scaled


def test_resume_from_an_hf_checkpoint_continues_bit_for_bit(tmp_path):
    _, full, full_scaler, full_sched = train(tmp_path / "full", bad=(1, 4))
    train(tmp_path / "part", bad=(1,), max_steps=3)
    checkpoint = tmp_path / "part" / "checkpoint-3"
    assert {"optimizer.pt", "scheduler.pt", "scaler.pt"} <= set(os.listdir(checkpoint))
    _, resumed, scaler, sched = train(tmp_path / "part", bad=(4,), resume=str(checkpoint))
    assert [s[:3] for s in resumed.steps] == [s[:3] for s in full.steps[3:]]
    assert all(torch.equal(a, b) for a, b in zip(resumed.steps[-1][3], full.steps[-1][3]))
    assert scaler.state_dict() == {**full_scaler.state_dict(), "scale": scaler.state_dict()["scale"]}
    assert sched.state_dict() == full_sched.state_dict()
