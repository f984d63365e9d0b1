"""A loading process for ``outboard bench checkpoint``'s ``load`` case: ``python -m outboard.bench.loader
SPEC_JSON``.

With ``"save": true`` it saves the cell's state (``tensors`` arrays of ``state_mb`` MiB in all, drawn
from ``seed``) as step 1 of ``dir`` through the agent; otherwise it loads that checkpoint once, by
``impl``, and prints one JSON object: the load's time, CPU and peak RSS growth, and the names of the
tensors that differ from the state it saves (made again from the seed, after the timing):

- ``safetensors``: ``safetensors.numpy.load_file`` of the tensors file (the peer: the manifest
  unchecked);
- ``outboard``: ``outboard.checkpoint.load(dir)``, every byte checked against the manifest;
- ``outboard-agent``, ``outboard-agent-tls``: ``Checkpointer.load(through_agent=True)``, the files
  read through the agent (plaintext, or TLS as from another host).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from . import child
from .trainer import agent_client

#: The step the load case saves, and loads back.
STEP = 1


def state(state_mb: float, tensors: int, seed: int) -> dict[str, np.ndarray]:
    """Distinct float32 tensors of ``state_mb`` MiB in all."""
    rng = np.random.default_rng(seed)
    n = max(1, int(state_mb * 2**20) // (4 * tensors))
    return {f"layer{i}": rng.integers(0, 1 << 32, n, np.uint32).view(np.float32) for i in range(tensors)}


def _status_mb(field: str) -> float:
    """A figure of /proc/self/status (VmRSS, or VmHWM: the peak), in MiB."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) / 1024


def _checkpointer(spec: dict[str, Any]) -> Any:
    from .. import Checkpointer
    client, where = agent_client(spec, Path(spec["dir"]))
    return Checkpointer(where, client, keep_last=0)


def run(spec: dict[str, Any]) -> dict[str, Any]:
    if spec.get("save"):
        with _checkpointer(spec) as ck:
            ck.save(STEP, state(spec["state_mb"], spec["tensors"], spec["seed"]))
            ck.wait()
            # Read once, untimed: the first read of pages just written ran 3x slower here than later
            # ones, and it would fall to whichever implementation the harness runs first.
            with open(ck.dir / f"step-{STEP:012d}" / "tensors.safetensors", "rb") as f:
                while f.read(1 << 20):
                    pass
            return {"saved": str(ck.dir)}
    impl, directory = spec["impl"], Path(spec["dir"])
    ck = _checkpointer(spec) if impl.startswith("outboard-agent") else None
    with open("/proc/self/clear_refs", "w") as f:  # the peak RSS from here (ru_maxrss keeps the parent's, from before exec)
        f.write("5")
    rss0, cpu0, t0 = _status_mb("VmRSS"), time.process_time(), time.perf_counter()
    if impl == "safetensors":
        from safetensors.numpy import load_file
        loaded = load_file(str(directory / f"step-{STEP:012d}" / "tensors.safetensors"))
    elif impl == "outboard":
        from .. import checkpoint
        loaded = checkpoint.load(directory, STEP).state
    else:
        loaded = ck.load(STEP, through_agent=True)
    load_s, cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
    rss_mb = _status_mb("VmHWM") - rss0
    if ck is not None:
        ck.close()
        ck.client.close()
    want = state(spec["state_mb"], spec["tensors"], spec["seed"])
    return {"load_s": load_s, "cpu_s": cpu_s, "peak_rss_growth_mb": rss_mb,
            "bytes": sum(a.nbytes for a in want.values()),
            "mismatches": sorted(k for k, a in want.items()
                                 if k not in loaded or not np.array_equal(np.asarray(loaded[k]).view(np.uint32),
                                                                          a.view(np.uint32)))}


if __name__ == "__main__":
    sys.exit(child.main(run))
