"""Device decisions, in one place: which kernels' formulas a tensor follows, how a value crosses
devices, and on which device and stream work on a tensor is ordered.

The rules, and why:

- A tensor on a CUDA device follows Paddle's GPU formulas; any other follows its CPU ones
  (``gpu_kernels``; the tests force it to run the GPU formulas on CPU tensors).
- A copy onto a GPU is stream-ordered: it never needs a host sync. A copy onto the host is read by
  the host as soon as the call returns, so it waits for the data (``copy_to``); a non-blocking copy
  from a GPU into pageable host memory could be read before it lands.
- A flag or table a kernel reads lives on the kernel's own device (``on_device``): a pointer into
  another GPU's memory is invalid there.
- Only plain dense tensors on the CPU or a CUDA device reach a kernel's raw pointer
  (``addressable``): a DTensor, FakeTensor, meta, sparse or subclass tensor takes the torch forms.
- Work on a tensor is enqueued on its device's current stream, with that device current
  (``device_of``), and an event marking a copy out of a tensor is recorded on that same stream
  (``copy_to_host_async``), not on the stream of whatever device happens to be current.
- While a CUDA graph is captured, nothing takes pinned memory or records an event for the host
  (``_multi_tensor.Launch.refresh``, ``FoundInf.in_flight``): values exist only at replays.
  State a replay moves is written in place, into tensors made before the capture (``capturing``,
  ``ScaleTracker``): a tensor made or filled during the capture is made anew at each replay.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "PLAIN_TYPES", "address", "addressable", "capturing", "copy_to", "copy_to_host_async", "device_of", "gpu_kernels",
    "on_device", "upload",
]

# The tensor types whose data_ptr() is their data (subclasses, DTensor and FakeTensor among them,
# may have none, or a wrapper's)
PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)


def gpu_kernels(t: Tensor) -> bool:
    """Whether updates of ``t`` follow Paddle's GPU kernels (CUDA tensors) rather than its CPU ones."""
    return t.is_cuda


def capturing(device: torch.device) -> bool:
    """Whether work on ``device`` is being captured into a CUDA graph now, on the current stream (the
    tests force it on the CPU)."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def addressable(t: Tensor) -> bool:
    """Whether the compiled CPU kernels and the GPU kernels may read ``t``'s memory through a raw
    pointer: a plain tensor (exactly ``torch.Tensor`` or ``nn.Parameter``: no DTensor, FakeTensor,
    functional or other subclass, whose pointer is not its data), on the CPU or a CUDA device (not
    meta), strided (not sparse), without a lazy negation (a conjugation concerns complex dtypes,
    which no kernel takes). Contiguity, sizes and dtypes are the kernels' own checks."""
    return type(t) in PLAIN_TYPES and (t.is_cpu or t.is_cuda) and t.layout == torch.strided and not t.is_neg()


def address(t: Tensor) -> int:
    """``t.data_ptr()``, or for a tensor that has none to give (a FakeTensor, a DTensor) its ``id``:
    a key that says whether the same memory is meant, never read through. (Callers with many
    tensors try ``data_ptr()`` on all first: this costs a few checks more per tensor.)"""
    return t.data_ptr() if addressable(t) else id(t)


def copy_to(t: Tensor, device: torch.device) -> Tensor:
    """``t`` on ``device`` (``t`` itself when it is there): without a host sync onto a GPU, waiting
    for the data onto the host."""
    if t.device == device:
        return t
    return t.to(device, non_blocking=device.type != "cpu")


def upload(t: Tensor, device: torch.device) -> Tensor:
    """A host tensor made for ``device`` (a kernel's table): onto a GPU through pinned memory,
    without a host sync (torch's caching host allocator keeps the pinned block until the copy is
    done); elsewhere ``t`` itself."""
    if device.type != "cuda":
        return t
    return t.pin_memory().to(device, non_blocking=True)


def on_device(t: Tensor, device: torch.device, cache: dict[torch.device, Tensor]) -> Tensor:
    """``copy_to(t, device)``, made once per device while ``cache`` lives (``t`` itself on its own)."""
    found = cache.get(device)
    if found is None:
        found = cache[device] = copy_to(t, device)
    return found


@contextlib.contextmanager
def device_of(device: torch.device) -> Iterator[None]:
    """Make ``device`` current while launching work on its tensors (a no-op off CUDA)."""
    if device.type != "cuda":
        yield
        return
    with torch.cuda.device(device):
        yield


def copy_to_host_async(t: Tensor) -> tuple[Tensor, Any]:
    """Start copying a CUDA tensor into pinned host memory: the host tensor and the event that
    marks the copy's end, recorded on the stream the copy was enqueued on (the current stream of
    ``t``'s device)."""
    with device_of(t.device):
        stream = torch.cuda.current_stream(t.device)
        host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        host.copy_(t, non_blocking=True)
        event = torch.cuda.Event()
        event.record(stream)
    return host, event
