"""Suite ``checkpoint``: what checkpointing costs a training loop (and, case ``load``, what loading a
checkpoint back costs: its notes say how it is measured), by placement — none, the trainer
writing synchronously (torch.save), DCP's async_save (a thread; a process where PyTorch has it),
and Outboard (the trainer copies into staging memory, the agent persists): the agent reading the
staging itself (``outboard``), or over TLS (``outboard-tls``: a second agent, with keys from
``outboard keys init``), where the trainer's sender thread sends it the bytes in sealed pieces, as
to a remote agent.

Each cell and placement is a fresh trainer process (``outboard.bench.trainer``) on core 0, with
BLAS and torch held to one thread; the agent runs on core 1 (a DPU's cores in production): the
trainer has the host, the offload engine its own core. The trainer trains one epoch of ResNet-20
or ResNet-34 (PyTorch, CIFAR-10-shaped synthetic data, widened to the cell's state size) or,
without PyTorch, of a numpy MLP with the same state-dict shape (weights, biases, momentum buffers
keyed by int), checkpointing every ``every`` steps; every checkpoint written is read back
afterwards and compared with the state it was taken from (the same training again, same seed).
Columns: epoch time, the stall per checkpoint (the trainer's time in save), time until a checkpoint
is durable, trainer CPU (every thread of its process) and agent CPU (the session serving it), and
the stall over a plain memcpy of the state measured in the same process (its floor): right after a
training step, where a checkpoint copies, and warm (the same copy repeated, source and buffer in the
caches: a floor no snapshot taken between steps meets).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..._agent import LocalAgent, agent_executable
from ...errors import BadConfig
from .. import child, trainer
from ..declare import Case, Chart, Column, Goal, Impl, Measurement, Option, Options, Suite, numbers
from ..stats import summarize

#: Seconds one trainer process may take (its epoch and the check after it).
CELL_TIMEOUT_S = 600.0
TRAINER_CORE, AGENT_CORE = 0, 1
MODELS = {"mlp": "numpy MLP (4 ReLU layers, SGD with momentum; PyTorch not used)",
          "resnet20": "ResNet-20 (PyTorch, CIFAR-10 shapes, widened to the state size)",
          "resnet34": "ResNet-34 (PyTorch, CIFAR-10 shapes, widened to the state size)"}


def _trainer(impl: str):
    def measure(env: CheckpointEnv, p: dict[str, Any]) -> Measurement:
        spec = {"impl": impl, "model": env.model, "steps": p["steps"], "every": p["every"], "state_mb": p["state_mb"],
                "seed": 1,
                "core": env.trainer_core, "agent": env.tls_address if impl == "outboard-tls" else env.address,
                "connect": env.tls_connect if impl == "outboard-tls" else {},
                "dir": tempfile.mkdtemp(dir=env.root, prefix=f"{impl}-")}
        out = _process("trainer", impl, spec)
        n = max(1, out["checkpoints"])
        stall = summarize(out["stall_s"]) if out["stall_s"] else None
        metrics = {"epoch_s": out["epoch_s"], "trainer_cpu_s": out["trainer_cpu_s"],
                   "agent_cpu_ms_per_ckpt": out["agent_cpu_s"] * 1e3 / n, "checkpoints": out["checkpoints"],
                   "state_mb": out["state_bytes"] / 2**20, "memcpy_ms": out["memcpy_s"] * 1e3,
                   "memcpy_step_ms": out["memcpy_step_s"] * 1e3,
                   "written_mb": out["bytes"] / 2**20, "drain_s": out["drain_s"]}
        if stall:
            metrics |= {"stall_ms": {k: v * 1e3 for k, v in stall.items()},
                        "stall_vs_memcpy": stall["p50"] / out["memcpy_step_s"],
                        "stall_vs_warm_memcpy": stall["p50"] / out["memcpy_s"]}
        if out["durable_s"]:
            metrics["durable_ms"] = {k: v * 1e3 for k, v in summarize(out["durable_s"]).items()}
        return Measurement(metrics, not out["mismatches"],
                           {"checkpoints_read_back": out["checkpoints"], "differing_steps": out["mismatches"]})
    return measure


def _process(module: str, impl: str, spec: dict[str, Any]) -> dict[str, Any]:
    """What ``python -m outboard.bench.<module> SPEC`` printed (one JSON object), BLAS on one thread."""
    r = subprocess.run([sys.executable, "-m", f"outboard.bench.{module}", json.dumps(spec)], capture_output=True,
                       text=True, timeout=CELL_TIMEOUT_S,
                       env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    out = child.result(module, r.stdout, r.stderr, r.returncode)
    if "error" in out:
        raise RuntimeError(f"{module} ({impl}): {out['error']}")
    return out


def _loader(impl: str):
    def measure(env: CheckpointEnv, p: dict[str, Any]) -> Measurement:
        out = _process("loader", impl, {**env.saved(p, tls=impl == "outboard-agent-tls"), "impl": impl})
        metrics = {"load_s": out["load_s"], "gb_s": out["bytes"] / out["load_s"] / 1e9, "cpu_s": out["cpu_s"],
                   "peak_rss_growth_mb": out["peak_rss_growth_mb"], "state_mb": out["bytes"] / 2**20}
        return Measurement(metrics, not out["mismatches"], {"differing_tensors": out["mismatches"]})
    return measure


def _no_agent(env: CheckpointEnv, p: dict[str, Any]) -> str | None:
    return None if env.address else "no agent"


def _no_tls_agent(env: CheckpointEnv, p: dict[str, Any]) -> str | None:
    return None if env.tls_address else "a TLS agent is started only without --agent"


def _no_process_mode(env: CheckpointEnv, p: dict[str, Any]) -> str | None:
    if env.model == "mlp":
        return "DCP's process mode needs PyTorch (pip install outboard[torch])"
    try:
        from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType
    except ImportError:
        return "this PyTorch's async_save has no process mode (2.7 and later)"
    return None if hasattr(AsyncCheckpointerType, "PROCESS") else "this PyTorch's async_save has no process mode"


def _model(value: str) -> str:
    if value == "auto":
        return "resnet20" if trainer.torch_available() else "mlp"
    if value not in MODELS:
        raise BadConfig(f"--model is {value!r}; expected auto or one of {', '.join(MODELS)}")
    if value != "mlp" and not trainer.torch_available():
        raise BadConfig(f"--model {value} needs PyTorch (make bench-deps, or pip install outboard[torch])")
    return value


EPOCH = Case(
    "epoch", "One epoch with a checkpoint every `every` steps: cost over no checkpoint, by placement",
    sweep={"state_mb": [16, 128], "every": [5, 10], "steps": [20]},
    quick={"state_mb": [8], "every": [5], "steps": [10]},
    impls=[Impl("none", _trainer("none")), Impl("sync", _trainer("sync")), Impl("thread", _trainer("thread")),
           Impl("process", _trainer("process"), _no_process_mode), Impl("outboard", _trainer("outboard"), _no_agent),
           Impl("outboard-tls", _trainer("outboard-tls"), _no_tls_agent)],
    columns=[Column("epoch s", "epoch_s", 3), Column("stall ms p50", "stall_ms.p50", 2),
             Column("stall ms p99", "stall_ms.p99", 2), Column("stall ÷ memcpy", "stall_vs_memcpy", 2),
             Column("stall ÷ warm memcpy", "stall_vs_warm_memcpy", 2),
             Column("durable ms p50", "durable_ms.p50", 1), Column("trainer CPU s", "trainer_cpu_s", 3),
             Column("agent CPU ms/ckpt", "agent_cpu_ms_per_ckpt", 1), Column("state MiB", "state_mb", 1),
             Column("written MiB", "written_mb", 1)],
    reference="none", ratio_metric="epoch_s", also_ratio=("sync", "thread", "process", "outboard-tls"), goal=Goal(1.05),
    notes="Ratios are epoch time over the same run's no-checkpoint epoch. Goals: Outboard ≤ 1.05× and below "
          "`thread` (DCP async_save's thread mode: the trainer copies, its own thread writes; for the numpy MLP "
          "the same by hand); stall ≤ 1.5× a memcpy of the state right after a training step (as the stall's copy "
          "is; the warm memcpy's ratio beside it). `sync` is torch.save (for the MLP safetensors' save_file), "
          "fsynced. Durable: from the save call to the checkpoint fsynced and in place. `outboard-tls` pays "
          "for the encryption in the trainer's process (its sender thread) and the agent's.")

LOAD = Case(
    "load", "Loading a checkpoint back: safetensors' reader, Outboard's from the disk and through the agent",
    sweep={"state_mb": [64, 512], "tensors": [64]},
    quick={"state_mb": [64]},
    impls=[Impl("safetensors", _loader("safetensors")), Impl("outboard", _loader("outboard")),
           Impl("outboard-agent", _loader("outboard-agent"), _no_agent),
           Impl("outboard-agent-tls", _loader("outboard-agent-tls"), _no_tls_agent)],
    columns=[Column("load s", "load_s", 3), Column("GB/s", "gb_s", 2), Column("CPU s", "cpu_s", 3),
             Column("peak RSS growth MiB", "peak_rss_growth_mb", 0), Column("state MiB", "state_mb", 0)],
    reference="safetensors", ratio_metric="load_s", also_ratio=("outboard-agent", "outboard-agent-tls"),
    notes="Each load is a fresh process; the checkpoint's files are in the page cache (saved once per cell, "
          "then read by every repetition), as for a trainer that resumes soon after saving: a cold disk adds "
          "its read time to every reader alike. `safetensors` is `safetensors.numpy.load_file`, which checks "
          "nothing against the manifest; Outboard checks every byte's sha256 as it loads. Through the agent the "
          "files come in 4 MiB reads, two in flight ahead of the one being copied, over TLS sealed. Peak RSS "
          "growth: the load's own, over the process's before it (the checkpoint held once is its size).")

SUITE = Suite(
    name="checkpoint", title="Checkpoint offload: the trainer snapshots, the agent persists",
    cases=[EPOCH, LOAD],
    charts=[Chart("epoch", "state_mb", "epoch_s", "Epoch time by placement", "s", split=["every"])],
    setup=lambda options: CheckpointEnv(options),
    describe=lambda env: {"training_model": MODELS[env.model], "trainer_core": env.trainer_core,
                          "agent_core": env.agent_core, "checkpoint_root": str(env.root)},
    help="checkpointing during training: none, synchronous, a writer thread, offloaded to the agent",
    quick_help="a short run (under a minute with the MLP: 8 MiB of state, every ratio from three repetitions)",
    options=[Option("--model", "the model trained: auto (resnet20 with PyTorch, else mlp), mlp, resnet20, resnet34",
                    default="auto", parse=_model),
             Option("--state-mb", "state sizes in MiB, instead of the sweep's (a model is never narrower than "
                    "its paper's)", parse=numbers("--state-mb", float, 1), sweep="state_mb", metavar="MIB,..."),
             Option("--every", "checkpoint every N steps, instead of the sweep's", parse=numbers("--every", int, 1),
                    sweep="every", metavar="N,..."),
             Option("--steps", "steps per epoch, instead of the sweep's", parse=numbers("--steps", int, 1),
                    sweep="steps", metavar="N,...")],
    notes=__doc__.split("\n\n", 1)[1].replace("\n", " ").strip())


class CheckpointEnv:
    """A directory for the run's checkpoints (on the disk of the system's temporary directory),
    and an agent rooted there on its own core (--agent's, which must then have its
    --checkpoint-root above it, else a local one, and a second local one that takes TLS clients
    only)."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.model = options.extra.get("model") or _model("auto")
        cores = sorted(os.sched_getaffinity(0))
        self.trainer_core = cores[TRAINER_CORE % len(cores)]
        self.agent_core = cores[AGENT_CORE % len(cores)]
        self.root = Path(tempfile.mkdtemp(prefix="outboard-bench-checkpoint-", dir="/var/tmp"))
        self.address: str | None = options.agent
        self.tls_address: str | None = None
        self.tls_connect: dict[str, str] = {}
        self._agents: list[LocalAgent] = []
        self._saved: dict[tuple[float, int, bool], dict[str, Any]] = {}

    def __enter__(self) -> CheckpointEnv:
        if self.address is None:
            self.address = self._start().address
            keys = self.root / "keys"
            made = subprocess.run([agent_executable(), "--keys-init", str(keys), "outboard agent"], capture_output=True,
                                  text=True)  # `outboard keys init`
            if made.returncode != 0:
                raise BadConfig(f"outboard keys init {keys}: {made.stderr.strip()}")
            self.tls_address = self._start("--secure", "always", "--cert", str(keys / "agent.pem"),
                                           "--key", str(keys / "agent.key"), "--ca", str(keys / "ca.pem")).address
            self.tls_connect = {"secure": "always", "cert": str(keys / "client.pem"), "key": str(keys / "client.key"),
                                "ca": str(keys / "ca.pem")}
        return self

    def saved(self, p: dict[str, Any], tls: bool) -> dict[str, Any]:
        """Where the load case's checkpoint of cell ``p`` lies (saved through the plaintext agent, or
        the TLS one, the first time it is asked for), as a loader's spec."""
        key = (p["state_mb"], p["tensors"], tls)
        if key not in self._saved:
            spec = {"state_mb": p["state_mb"], "tensors": p["tensors"], "seed": 1,
                    "agent": self.tls_address if tls else self.address, "connect": self.tls_connect if tls else {},
                    "dir": tempfile.mkdtemp(dir=self.root, prefix=f"load-{p['state_mb']:g}-")}
            _process("loader", "save", {**spec, "save": True})  # TLS: into its tenant's directory of that name
            self._saved[key] = spec
        return self._saved[key]

    def _start(self, *args: str) -> LocalAgent:
        agent = LocalAgent("--checkpoint-root", str(self.root), "--cores", str(self.agent_core), "--spin-us", "0",
                           *args, log_level=self.options.log_level).start()
        self._agents.append(agent)
        return agent

    def __exit__(self, *exc: object) -> None:
        for agent in self._agents:
            agent.stop()
        shutil.rmtree(self.root, ignore_errors=True)
