"""The demo's Paddle original, recording its trace under the torch port's names and layouts.

    python -m paddle_compat.parity record -o traces/paddle examples/parity/demo_paddle.py
    python examples/parity/demo_paddle.py --out traces/paddle --forward paddle     # on a GPU

``--forward port`` (the default, and the only choice on CPU): each step, the port (torch, float16
auto_cast) computes the loss and gradients from Paddle's current parameters; Paddle's own
GradScaler and AdamW then take the step. Paddle 3.3.1 has no float16 CPU kernels for matmul, so
this is how a CPU run checks the scaler and the optimizer bit for bit.

``--forward paddle``: Paddle runs the whole step itself, ``paddle.amp.auto_cast`` included (GPU:
compare with tolerances, since the two frameworks' matmul kernels round differently).
"""

from __future__ import annotations

import argparse
import contextlib

import demo_port  # the torch port, beside this file
import numpy as np
import paddle
import torch

from paddle_compat.parity import TraceRecorder, paddle_side


def paddle_model() -> paddle.nn.Sequential:
    return paddle.nn.Sequential(
        paddle.nn.Linear(32, 128),
        paddle.nn.GELU(),
        paddle.nn.Linear(128, 128),
        paddle.nn.GELU(),
        paddle.nn.Linear(128, 1),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=demo_port.STEPS)
    parser.add_argument("--forward", choices=["port", "paddle"], default="port")
    parser.add_argument("--out", help="trace path (default: where `python -m paddle_compat.parity record` asks)")
    parser.add_argument("--full-max-elements", type=int, default=None, help="sample larger tensors (golden traces)")
    parser.add_argument("--sample", type=int, default=16)
    args = parser.parse_args(argv)
    on_gpu = args.forward == "paddle"
    paddle.set_device("gpu" if on_gpu else "cpu")
    torch.set_num_threads(1)

    port = demo_port.make_model()  # the shared starting point: the port's initial weights
    model = paddle_model()
    paddle_side.copy_params_to_paddle(port, model)
    opt = paddle.optimizer.AdamW(
        learning_rate=demo_port.LR, parameters=model.parameters(), weight_decay=demo_port.WEIGHT_DECAY
    )
    kwargs = dict(init_loss_scaling=demo_port.INIT_SCALE, incr_every_n_steps=demo_port.INCR_EVERY)
    scaler = paddle.amp.GradScaler(**kwargs) if on_gpu else paddle_side.scaler(**kwargs)
    meta = {
        "variant": "paddle",
        "forward": args.forward,
        "steps": args.steps,
        "init_loss_scaling": demo_port.INIT_SCALE,
    }
    rec = TraceRecorder(
        model, opt, scaler, port=port, full_max_elements=args.full_max_elements, sample=args.sample, meta=meta
    )
    with contextlib.nullcontext() if on_gpu else paddle_side.gpu_unscale_semantics():
        for x, y in demo_port.batches(args.steps):
            if on_gpu:
                with paddle.amp.auto_cast():
                    out = model(paddle.to_tensor(x.numpy()).cuda())
                loss = paddle.nn.functional.mse_loss(out.astype("float32"), paddle.to_tensor(y.numpy()).cuda())
                scaled = scaler.scale(loss)
                scaled.backward()
            else:
                paddle_side.copy_params(model, port)
                port.zero_grad(set_to_none=True)
                loss = demo_port.loss_of(port, x, y)
                scale = torch.from_numpy(np.asarray(scaler.state_dict()["scale"], np.float32).reshape(1))
                (loss * scale).backward()  # what GradScaler.scale(loss) computes
                paddle_side.copy_grads(port, model)
                scaled = paddle.to_tensor((loss * scale).detach().numpy())
            scaler.minimize(opt, scaled)
            rec.record(loss)
            opt.clear_grad()
    print(f"paddle demo: {len(rec.trace)} steps -> {rec.save(args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
