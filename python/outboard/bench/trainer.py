"""A training process for ``outboard bench checkpoint``: ``python -m outboard.bench.trainer SPEC_JSON``.

Trains one epoch of ``steps`` steps on one core, checkpointing every ``every`` steps by one
placement, then prints one JSON object. The model: with PyTorch, ResNet-20 or ResNet-34 on
CIFAR-10-shaped synthetic batches (drawn on the fly from a fixed seed; SGD with momentum), widened
to the cell's state size; without it, a numpy MLP whose state dict has the same shape (weights,
biases, momentum buffers keyed by int). Placements:

- ``none``: no checkpoint;
- ``sync``: the trainer writes and fsyncs (``torch.save``; for the MLP ``safetensors`` save_file);
- ``thread``: DCP ``async_save`` (the trainer copies the state, a thread of its process writes;
  for the MLP the same by hand), ``process``: DCP's process mode (PyTorch 2.7 and later);
- ``outboard``: ``Checkpointer.save`` (the copy into staging memory), the agent persists.

Then, untimed, it trains again from the seed and compares the state at every checkpointed step with
what was written, read back by the placement's own reader.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from . import child

#: Rows (MLP) or images (ResNet) of each step's synthetic batch.
BATCH = {"mlp": 128, "resnet20": 32, "resnet34": 8}
DEPTH = 4  # the MLP's layers
LR, MOMENTUM = 1e-3, 0.9
#: Training steps after the epoch, each followed by a timed memcpy of the state (the stall's floor).
MEMCPY_STEPS = 3


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


class Mlp:
    """ReLU layers, MSE on synthetic data, SGD with momentum, in numpy; width set by the state size
    (2 × depth × width² floats)."""

    def __init__(self, state_mb: float, seed: int) -> None:
        width = max(16, int((state_mb * 2**20 / (2 * DEPTH * 4)) ** 0.5))
        rng = np.random.default_rng(seed)
        self.w = [(rng.standard_normal((width, width), dtype=np.float32) * np.float32((2 / width) ** 0.5))
                  for _ in range(DEPTH)]
        self.b = [np.zeros(width, np.float32) for _ in range(DEPTH)]
        self.mw = [np.zeros_like(w) for w in self.w]
        self.mb = [np.zeros_like(b) for b in self.b]
        self.data = np.random.default_rng(seed + 1)
        self.steps = 0

    def step(self) -> None:
        width = self.w[0].shape[0]
        x = self.data.standard_normal((BATCH["mlp"], width), dtype=np.float32)
        y = np.tanh(x[:, ::-1])  # a target the net can learn
        acts = [x]
        for w, b in zip(self.w, self.b):
            acts.append(np.maximum(acts[-1] @ w + b, 0))
        grad = (acts[-1] - y) * np.float32(2 / x.size)
        for i in reversed(range(DEPTH)):
            grad = grad * (acts[i + 1] > 0)
            gw, gb = acts[i].T @ grad, grad.sum(0)
            grad = grad @ self.w[i].T
            for p, m, g in ((self.w[i], self.mw[i], gw), (self.b[i], self.mb[i], gb)):
                m *= np.float32(MOMENTUM)
                m += g
                p -= np.float32(LR) * m
        self.steps += 1

    def state(self) -> dict[str, Any]:
        layers = range(DEPTH)
        return {"model": {**{f"layers.{i}.weight": self.w[i] for i in layers},
                          **{f"layers.{i}.bias": self.b[i] for i in layers}},
                "optimizer": {"state": {2 * i + k: {"momentum_buffer": (self.mw, self.mb)[k][i]}
                                        for i in layers for k in (0, 1)},
                              "param_groups": [{"lr": LR, "momentum": MOMENTUM, "params": list(range(2 * DEPTH))}]},
                "step": self.steps}


def _resnet(name: str, widen: float) -> Any:
    """ResNet-20 (He et al.'s CIFAR net: 3 stages of 3 basic blocks, 16-32-64 channels) or ResNet-34
    (basic blocks 3-4-6-3, 64-512 channels, a 3×3 stem without pooling for 32×32 images), channels
    times ``widen``."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
            self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
            self.short = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                          if stride != 1 or cin != cout else nn.Identity())

        def forward(self, x: Any) -> Any:
            return torch.relu(self.b2(self.c2(torch.relu(self.b1(self.c1(x))))) + self.short(x))

    blocks, widths = ((3, 3, 3), (16, 32, 64)) if name == "resnet20" else ((3, 4, 6, 3), (64, 128, 256, 512))
    widths = [max(4, int(round(w * widen))) for w in widths]
    layers: list[nn.Module] = [nn.Conv2d(3, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU()]
    cin = widths[0]
    for stage, (n, w) in enumerate(zip(blocks, widths)):
        for i in range(n):
            layers.append(Block(cin, w, 2 if i == 0 and stage > 0 else 1))
            cin = w
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 10)]
    return nn.Sequential(*layers)


class ResNet:
    """A torch ResNet trained with SGD and momentum on CIFAR-10-shaped synthetic batches, widened so
    that its state (parameters, buffers, momentum) is about ``state_mb`` MiB (never narrower than
    the paper's)."""

    def __init__(self, name: str, state_mb: float, seed: int) -> None:
        import torch
        torch.set_num_threads(1)
        torch.use_deterministic_algorithms(True)
        base = sum(t.numel() * t.element_size() for t in _resnet(name, 1.0).state_dict().values())
        widen = max(1.0, (state_mb * 2**20 / (2 * base)) ** 0.5)
        torch.manual_seed(seed)
        self.net = _resnet(name, widen)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.05, momentum=MOMENTUM)
        self.data = torch.Generator().manual_seed(seed + 1)
        self.batch, self.steps = BATCH[name], 0

    def step(self) -> None:
        import torch
        x = torch.randn(self.batch, 3, 32, 32, generator=self.data)
        y = torch.randint(0, 10, (self.batch,), generator=self.data)
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.steps += 1

    def state(self) -> dict[str, Any]:
        return {"model": self.net.state_dict(), "optimizer": self.opt.state_dict(), "step": self.steps}


def make_model(name: str, state_mb: float, seed: int) -> Mlp | ResNet:
    return Mlp(state_mb, seed) if name == "mlp" else ResNet(name, state_mb, seed)


def arrays(state: dict[str, Any]) -> dict[str, np.ndarray]:
    """The state's tensors by path ("model.layers.0.weight"), as numpy arrays."""
    from ..checkpoint import flatten
    return {leaf.name: leaf.value.detach().cpu().numpy() if hasattr(leaf.value, "cpu") else np.asarray(leaf.value)
            for leaf in flatten(state)[0]}


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durably(state: dict[str, Any], directory: Path, step: int) -> int:
    """torch.save (torch states) or safetensors' save_file (numpy), fsynced and renamed into place."""
    tmp, final = directory / f"tmp-{step}.pt", directory / f"step-{step:012d}"  # torch.save wants a plain name
    if any(hasattr(v, "cpu") for v in state["model"].values()):
        import torch
        torch.save(state, tmp)
    else:
        from safetensors.numpy import save_file
        save_file(arrays(state), str(tmp))
    _fsync(tmp)
    os.rename(tmp, final)
    _fsync(directory)
    return final.stat().st_size


def read_back(impl: str, kind: str, directory: Path, step: int) -> dict[str, np.ndarray]:
    """What a placement wrote for ``step``, by its own reader."""
    path = directory / f"step-{step:012d}"
    if impl.startswith("outboard"):
        from .. import checkpoint
        return arrays(checkpoint.load(directory, step).state)
    if kind == "mlp":
        from safetensors.numpy import load_file
        return load_file(str(path))
    import torch
    if impl in ("thread", "process"):  # DCP's directory
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
        dcp_to_torch_save(path, directory / "read-back.pt")
        path = directory / "read-back.pt"
    return arrays(torch.load(path, weights_only=False))


def agent_client(spec: dict[str, Any], directory: Path) -> tuple[Any, Path | str]:
    """A client of the spec's agent (TLS where it has ``connect`` keys), and ``directory`` as a
    Checkpointer of it names it: a TLS client's directory is its tenant's, under the agent's root,
    so it is named relative to that."""
    from .. import connect
    client = connect(spec["agent"], spin_us=0, **spec.get("connect", {}))
    return client, directory.name if spec.get("connect") else directory


class Placement:
    """How one placement checkpoints (this one: not at all): save() returns when the trainer may go
    on; finish() when all is durable. Records each save's stall and time to durable, and the bytes
    written."""

    def __init__(self, spec: dict[str, Any], state: dict[str, Any]) -> None:
        self.directory = Path(spec["dir"])
        self.stalls: list[float] = []
        self.durable: list[float] = []
        self.bytes = 0
        self.agent_cpu_s = 0.0

    def save(self, step: int, state: dict[str, Any]) -> None:
        pass

    def finish(self) -> None:
        pass

    def close(self) -> None:
        pass


class Sync(Placement):
    def save(self, step: int, state: dict[str, Any]) -> None:
        t0 = time.perf_counter()
        self.bytes += write_durably(state, self.directory, step)
        self.stalls.append(time.perf_counter() - t0)
        self.durable.append(self.stalls[-1])


class Thread(Placement):
    """The MLP's: the trainer copies its arrays, a thread of its process writes them (DCP async_save's
    thread mode, by hand)."""

    def __init__(self, spec: dict[str, Any], state: dict[str, Any]) -> None:
        super().__init__(spec, state)
        self.writer: threading.Thread | None = None

    def save(self, step: int, state: dict[str, Any]) -> None:
        t0 = time.perf_counter()
        self.finish()  # one write in flight, as async_save's caller waits on the previous future
        snapshot = {**state, "model": {k: v.copy() for k, v in state["model"].items()},
                    "optimizer": {"state": {k: {"momentum_buffer": v["momentum_buffer"].copy()}
                                            for k, v in state["optimizer"]["state"].items()}}}

        def write() -> None:
            self.bytes += write_durably(snapshot, self.directory, step)
            self.durable.append(time.perf_counter() - t0)

        self.writer = threading.Thread(target=write)
        self.writer.start()
        self.stalls.append(time.perf_counter() - t0)

    def finish(self) -> None:
        if self.writer is not None:
            self.writer.join()
            self.writer = None


class Dcp(Placement):
    """PyTorch's torch.distributed.checkpoint.async_save: it copies the state to CPU memory and
    returns; a thread (or, with ``process``, a process) of its own writes."""

    def __init__(self, spec: dict[str, Any], state: dict[str, Any]) -> None:
        super().__init__(spec, state)
        self.kwargs: dict[str, Any] = {}
        if spec["impl"] == "process":  # the writer process joins the trainer's process group: one of one
            import torch.distributed as dist
            from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType
            if not dist.is_initialized():
                dist.init_process_group("gloo", init_method=f"file://{self.directory}/.pg", rank=0, world_size=1)
            self.kwargs["async_checkpointer_type"] = AsyncCheckpointerType.PROCESS
        self.future: Any = None

    def save(self, step: int, state: dict[str, Any]) -> None:
        import torch.distributed.checkpoint as dcp
        t0 = time.perf_counter()
        self._wait()  # as DCP's docs do: the previous save done before the next starts
        path = self.directory / f"step-{step:012d}"
        self.future = dcp.async_save(state, checkpoint_id=str(path), **self.kwargs)
        self.future.add_done_callback(lambda f: self.durable.append(time.perf_counter() - t0))
        self.stalls.append(time.perf_counter() - t0)

    def _wait(self) -> None:
        if self.future is not None:
            self.future.result()
            self.future = None

    def finish(self) -> None:
        self._wait()
        self.bytes = sum(f.stat().st_size for f in self.directory.glob("step-*/**/*") if f.is_file())


class Offloaded(Placement):
    def __init__(self, spec: dict[str, Any], state: dict[str, Any]) -> None:
        super().__init__(spec, state)
        from .. import Checkpointer, checkpoint
        self.client, where = agent_client(spec, self.directory)
        # Staging sized once, before the epoch, as a trainer that knows its state's size does.
        self.ck = Checkpointer(where, self.client, keep_last=0, staging_bytes=checkpoint.staging_size(state))
        self.directory = self.ck.dir
        self.cpu0 = self.client.stats()["cpu_ns"]

    def save(self, step: int, state: dict[str, Any]) -> None:
        t0 = time.perf_counter()
        self.ck.save(step, state)
        self.stalls.append(time.perf_counter() - t0)

    def finish(self) -> None:
        self.ck.wait()
        s = self.ck.status()
        self.bytes = s.total_bytes
        self.durable = list(s.durable_log)
        self.agent_cpu_s = (self.client.stats()["cpu_ns"] - self.cpu0) / 1e9

    def close(self) -> None:
        self.ck.close()
        self.client.close()


def placement(spec: dict[str, Any], state: dict[str, Any]) -> Placement:
    impl, torch_model = spec["impl"], spec["model"] != "mlp"
    kinds = {"none": Placement, "sync": Sync, "thread": Dcp if torch_model else Thread, "process": Dcp,
             "outboard": Offloaded, "outboard-tls": Offloaded}
    return kinds[impl](spec, state)


def _memcpy_s(model: Mlp | ResNet) -> tuple[float, float]:
    """A plain memcpy of the state's arrays into one buffer (np.concatenate: C's memcpy per array),
    the stall's floor: warm (the same copy again, source and buffer in the caches) and where a
    checkpoint copies, right after a training step (``MEMCPY_STEPS`` of them, the median)."""
    def views() -> list[np.ndarray]:
        return [a.reshape(-1).view(np.uint8) for a in arrays(model.state()).values()]

    parts = views()
    out = np.empty(sum(a.nbytes for a in parts), np.uint8)

    def copy() -> float:
        t0 = time.perf_counter()
        np.concatenate(parts, out=out)
        return time.perf_counter() - t0

    warm = [copy() for _ in range(4)][1:]  # the first faults the buffer in
    after_step = []
    for _ in range(MEMCPY_STEPS):
        model.step()
        parts = views()
        after_step.append(copy())
    return float(np.median(warm)), float(np.median(after_step))


def run(spec: dict[str, Any]) -> dict[str, Any]:
    if spec.get("core") is not None:
        os.sched_setaffinity(0, {int(spec["core"])})
    impl, steps, every, kind = spec["impl"], int(spec["steps"]), int(spec["every"]), spec["model"]
    model = make_model(kind, float(spec["state_mb"]), int(spec["seed"]))
    model.step()  # warm: the first step's set-up is not an epoch's, and an optimizer's buffers exist after it
    place = placement(spec, model.state())
    saved: list[int] = []
    try:
        cpu0, t0 = time.process_time(), time.perf_counter()
        for _ in range(steps):
            model.step()
            if impl != "none" and model.steps % every == 0:
                place.save(model.steps, model.state())
                saved.append(model.steps)
        epoch_s, trainer_cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
        t1 = time.perf_counter()
        place.finish()
        drain_s = time.perf_counter() - t1
        state_bytes = sum(a.nbytes for a in arrays(model.state()).values())
        memcpy_s, memcpy_step_s = _memcpy_s(model)
        # Untimed: the same training again, each checkpointed state compared with what was written.
        check, mismatches = make_model(kind, float(spec["state_mb"]), int(spec["seed"])), []
        check.step()
        for step in saved:
            while check.steps < step:
                check.step()
            written, expect = read_back(impl, kind, place.directory, step), arrays(check.state())
            if written.keys() != expect.keys() or any(not np.array_equal(written[k], v) for k, v in expect.items()):
                mismatches.append(step)
    finally:
        place.close()
    return {"epoch_s": epoch_s, "trainer_cpu_s": trainer_cpu_s, "drain_s": drain_s,
            "checkpoints": len(saved), "stall_s": place.stalls, "durable_s": place.durable,
            "bytes": place.bytes, "agent_cpu_s": place.agent_cpu_s, "state_bytes": state_bytes,
            "memcpy_s": memcpy_s, "memcpy_step_s": memcpy_step_s, "mismatches": mismatches}


if __name__ == "__main__":
    sys.exit(child.main(run, lambda spec: shutil.rmtree(spec["dir"], ignore_errors=True)))
