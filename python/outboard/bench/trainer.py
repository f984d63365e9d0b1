"""A training process for ``outboard bench checkpoint``: ``python -m outboard.bench.trainer SPEC_JSON``.

Trains a numpy MLP (ReLU layers, MSE on synthetic data drawn on the fly from a fixed seed, SGD with
momentum: a state dict of weights, biases and momentum buffers, as a torch model's and optimizer's)
for one epoch of ``steps`` steps on one core, checkpointing every ``every`` steps by one placement:

- ``none``: no checkpoint;
- ``sync``: the trainer writes ``safetensors.numpy.save_file`` and fsyncs (torch.save's place);
- ``thread``: the trainer copies the state, a thread of its process writes and fsyncs (DCP
  ``async_save``'s thread mode);
- ``outboard``: ``Checkpointer.save`` (the copy into staging memory), the agent persists.

It prints one JSON object. Then, untimed, it trains again from the seed and compares the state at
every checkpointed step with what was written (read back with safetensors or outboard.checkpoint).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

#: Rows of each step's synthetic batch.
BATCH = 128
DEPTH = 4
LR, MOMENTUM = 1e-3, 0.9


def width_for(state_mb: float) -> int:
    """The layer width whose state (weights, biases and momentum: 2 × depth × width² floats) is
    about ``state_mb`` MiB."""
    return max(16, int((state_mb * 2**20 / (2 * DEPTH * 4)) ** 0.5))


class Mlp:
    def __init__(self, width: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.w = [(rng.standard_normal((width, width), dtype=np.float32) * np.float32((2 / width) ** 0.5))
                  for _ in range(DEPTH)]
        self.b = [np.zeros(width, np.float32) for _ in range(DEPTH)]
        self.mw = [np.zeros_like(w) for w in self.w]
        self.mb = [np.zeros_like(b) for b in self.b]
        self.data = np.random.default_rng(seed + 1)
        self.steps = 0

    def step(self) -> float:
        width = self.w[0].shape[0]
        x = self.data.standard_normal((BATCH, width), dtype=np.float32)
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
        return float(((acts[-1] - y) ** 2).mean())

    def state(self) -> dict[str, Any]:
        layers = range(DEPTH)
        return {"model": {**{f"layers.{i}.weight": self.w[i] for i in layers},
                          **{f"layers.{i}.bias": self.b[i] for i in layers}},
                "optimizer": {"state": {2 * i + k: {"momentum_buffer": (self.mw, self.mb)[k][i]}
                                        for i in layers for k in (0, 1)},
                              "param_groups": [{"lr": LR, "momentum": MOMENTUM, "params": list(range(2 * DEPTH))}]},
                "step": self.steps}


def flat(state: dict[str, Any]) -> dict[str, np.ndarray]:
    """The state's arrays by path, as safetensors files of the sync and thread placements hold them."""
    out = {f"model.{k}": v for k, v in state["model"].items()}
    out |= {f"optimizer.state.{k}.momentum_buffer": v["momentum_buffer"] for k, v in state["optimizer"]["state"].items()}
    return out


def write_durably(arrays: dict[str, np.ndarray], directory: Path, step: int) -> int:
    from safetensors.numpy import save_file
    tmp, final = directory / f".tmp-{step}.safetensors", directory / f"step-{step:012d}.safetensors"
    save_file(arrays, str(tmp))
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, final)
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return final.stat().st_size


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
        self.bytes += write_durably(flat(state), self.directory, step)
        self.stalls.append(time.perf_counter() - t0)
        self.durable.append(self.stalls[-1])


class Thread(Placement):
    def __init__(self, spec: dict[str, Any], state: dict[str, Any]) -> None:
        super().__init__(spec, state)
        self.writer: threading.Thread | None = None

    def save(self, step: int, state: dict[str, Any]) -> None:
        t0 = time.perf_counter()
        self.finish()  # one write in flight, as async_save's caller waits on the previous future
        snapshot = {k: v.copy() for k, v in flat(state).items()}

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


class Offloaded(Placement):
    def __init__(self, spec: dict[str, Any], state: dict[str, Any]) -> None:
        super().__init__(spec, state)
        from .. import Checkpointer, checkpoint, connect
        self.client = connect(spec["agent"], spin_us=0)
        # Staging sized once, before the epoch, as a trainer that knows its state's size does.
        self.ck = Checkpointer(self.directory, self.client, keep_last=0, staging_bytes=checkpoint.staging_size(state))
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


PLACEMENTS = {"none": Placement, "sync": Sync, "thread": Thread, "outboard": Offloaded}


def _memcpy_s(state: dict[str, Any]) -> float:
    """The warm copy of the state's arrays into one buffer: what a snapshot cannot beat."""
    arrays = list(flat(state).values())
    out = np.empty(sum(a.nbytes for a in arrays), np.uint8)
    times = []
    for _ in range(4):
        t0, at = time.perf_counter(), 0
        for a in arrays:
            out[at:at + a.nbytes] = a.reshape(-1).view(np.uint8)
            at += a.nbytes
        times.append(time.perf_counter() - t0)
    return float(np.median(times[1:]))


def _written(impl: str, directory: Path, step: int) -> dict[str, np.ndarray]:
    if impl == "outboard":
        from .. import checkpoint
        return flat(checkpoint.load(directory, step).state)
    from safetensors.numpy import load_file
    return load_file(str(directory / f"step-{step:012d}.safetensors"))


def run(spec: dict[str, Any]) -> dict[str, Any]:
    if spec.get("core") is not None:
        os.sched_setaffinity(0, {int(spec["core"])})
    impl, steps, every = spec["impl"], int(spec["steps"]), int(spec["every"])
    width = width_for(float(spec["state_mb"]))
    model = Mlp(width, int(spec["seed"]))
    placement = PLACEMENTS[impl](spec, model.state())
    saved: list[int] = []
    try:
        model.step()  # warm: the first matmul's set-up is not an epoch's
        cpu0, t0 = time.process_time(), time.perf_counter()
        for _ in range(steps):
            model.step()
            if impl != "none" and model.steps % every == 0:
                placement.save(model.steps, model.state())
                saved.append(model.steps)
        epoch_s, trainer_cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
        t1 = time.perf_counter()
        placement.finish()
        drain_s = time.perf_counter() - t1
        state_bytes = sum(a.nbytes for a in flat(model.state()).values())
        memcpy_s = _memcpy_s(model.state())
        # Untimed: the same training again, each checkpointed state compared with what was written.
        check, mismatches = Mlp(width, int(spec["seed"])), []
        check.step()
        for step in saved:
            while check.steps < step:
                check.step()
            written = _written(impl, placement.directory, step)
            expect = flat(check.state())
            if written.keys() != expect.keys() or any(not np.array_equal(written[k], v) for k, v in expect.items()):
                mismatches.append(step)
    finally:
        placement.close()
    return {"epoch_s": epoch_s, "trainer_cpu_s": trainer_cpu_s, "drain_s": drain_s,
            "checkpoints": len(saved), "stall_s": placement.stalls, "durable_s": placement.durable,
            "bytes": placement.bytes, "agent_cpu_s": placement.agent_cpu_s, "state_bytes": state_bytes,
            "memcpy_s": memcpy_s, "width": width, "mismatches": mismatches}


def main() -> int:
    spec = json.loads(sys.argv[1])
    try:
        result = run(spec)
    except Exception as e:  # reported to the suite, which records the cell as failed
        result = {"error": f"{type(e).__name__}: {e}"}
    finally:
        shutil.rmtree(spec["dir"], ignore_errors=True)
    print(json.dumps(result), flush=True)
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    sys.exit(main())
