"""Suite ``mpi-apps``: application proxies (issue C2), each a small real C program built with the
project against each MPI, run under mpirun stock, with the MPI's own progress thread, and with its
point-to-point and collectives offloaded to the agent (`outboard mpirun --p2p`). Each run reports
its time per iteration (the slowest rank's; p50 and p90 over the iterations after warm-up), its own
correctness check (the final state against a single-process run from the same start), the ranks'
CPU per iteration and the agent's (every process of it).

Built so far: the 3D stencil (`outboard-mpi-stencil-<mpi>`: a 7-point Jacobi stencil on a periodic
grid, halos exchanged with 6 neighbours by Irecv/Isend while the interior updates; checked against
a single-process run) and the CG solver (`outboard-mpi-cg-<mpi>`: pipelined CG on the 3D
Laplacian, its two dot products in one Iallreduce overlapped with the next matrix-vector product
and its halo exchange; checked against the classic CG's residual on the same system). Regime: shared
memory, one agent for the job on the ranks' host. On these two cores communication is CPU work
and the agent shares the ranks' cores, so this is the control, where the goal is only to cost no
more than 5 %. The wire-bound regime, where offload should pay, needs point-to-point between
agents (each rank's agent forwarding its sends to the receiver's), which is not built yet.
Published figures for comparison (another machine: MVAPICH2-DPU on BlueField-2 clusters): the 3D
stencil up to 18 % shorter with Isend/Irecv offloaded, PETSc's CG-like solver up to 24 % with its
reductions offloaded.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from ... import mpi
from ..._agent import LocalAgent, find_executable
from ..declare import Case, Column, Goal, Impl, Measurement, Options, Suite
from .mpi import progress_settings, run_env, run_job

IMPLS = ["stock", "progress", "outboard"]
#: Where an iteration's time goes (the ranks' mean µs), as each proxy reports it.
PHASES = {"stencil": ["post_us", "interior_us", "wait_us", "boundary_us"],
          "cg": ["multiply_us", "wait_us", "update_us"]}


def executable(which: mpi.Mpi, proxy: str) -> str:
    return find_executable(f"outboard-mpi-{proxy}-{which.name}", f"OUTBOARD_MPI_{proxy.upper()}_{which.name.upper()}")


def _iterations(options: Options) -> tuple[int, int]:
    """(timed iterations, warm-up)."""
    return (20, 3) if options.smoke else (100, 10) if options.quick else (400, 40)


class AppsEnv:
    """The options and one agent for the offloaded rows."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.agent: LocalAgent | None = None
        self.hung: set[tuple] = set()
        self.run_env = run_env()

    def __enter__(self) -> AppsEnv:
        self.agent = LocalAgent(*mpi.NODE_AGENT_ARGS, log_level=self.options.log_level).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.agent is not None:
            self.agent.stop()

    def run(self, impl: str, p: dict[str, Any]) -> dict[str, Any]:
        which = mpi.MPIS[p["mpi"]]
        iterations, warmup = _iterations(self.options)
        program = [executable(which, p["proxy"]), str(p["n"]), str(iterations), str(warmup)]
        agents = [self.agent] if impl == "outboard" else []
        if impl == "outboard":
            cmd = mpi.command(program, p["np"], which, agent=self.agent.address, p2p=True)
        else:
            extra_env, args = progress_settings(which) if impl == "progress" else ({}, [])
            cmd = mpi.launch(program, p["np"], which, extra_env, args)
        out, helper_s = run_job(cmd, self.run_env, agents, (impl, *sorted(p.items())), self.hung)
        if impl == "outboard":
            out["helper_cpu_us"] = helper_s * 1e6 / (iterations + warmup)
        return out


def _measure(impl: str):
    def measure(env: AppsEnv, p: dict[str, Any]) -> Measurement:
        out = env.run(impl, p)
        metrics = {k: out[k] for k in ("p50_us", "p90_us", "rank_cpu_us", "helper_cpu_us", "halo_bytes",
                                       *PHASES[p["proxy"]]) if k in out}
        correctness = {k: out[k] for k in ("check", "iterations", "dims", "residual", "classic_residual") if k in out}
        return Measurement(metrics, out["check"] == "ok", correctness)
    return measure


def _unavailable(impl: str):
    def why(env: AppsEnv, p: dict[str, Any]) -> str | None:
        which = mpi.MPIS[p["mpi"]]
        if not any(shutil.which(name) for name in which.launchers):
            return f"{which.family} is not installed ({which.package})"
        try:
            executable(which, p["proxy"])
            if impl == "outboard":
                mpi.interposer(which)
        except mpi.NotFound as e:
            return str(e)
        return None
    return why


SHM = Case(
    "shm", "Shared memory (one agent for the job, on the ranks' two cores)",
    sweep={"mpi": sorted(mpi.MPIS), "proxy": ["stencil", "cg"], "np": [2, 4], "n": [32, 64]},
    quick={"np": [2], "n": [48]},
    impls=[Impl(i, _measure(i), _unavailable(i)) for i in IMPLS],
    columns=[Column("p50 µs/iteration", "p50_us", 1), Column("p90 µs/iteration", "p90_us", 1),
             Column("rank CPU µs/iteration", "rank_cpu_us", 1), Column("agent CPU µs/iteration", "helper_cpu_us", 1),
             Column("pack+post µs", "post_us", 1), Column("interior µs", "interior_us", 1),
             Column("A·x with halos µs", "multiply_us", 1), Column("wait µs", "wait_us", 1),
             Column("unpack+boundary µs", "boundary_us", 1), Column("vector updates µs", "update_us", 1),
             Column("halo B/rank", "halo_bytes", 0)],
    reference="stock", ratio_metric="p50_us", ours="outboard", also_ratio=["progress"],
    goal=Goal(1.05),
    notes="Goal (issue C2), shared-memory regime: no proxy slower than stock by more than 5 % (p50 time per "
          "iteration). The phase columns say where an iteration's time goes (the ranks' mean; the stencil's: pack+post, "
          "interior, wait, unpack+boundary; CG's: A·x with its halo exchange, the wait for the dot products, the "
          "vector updates). Every message goes to the agent, which matches it and copies it from the sender's buffer "
          "into the receiver's through the kernel: a wake-up of the agent and of the rank per message, which a "
          "shared-memory MPI does not pay. `progress` on Open MPI is stock here (its thread acts on TCP only).")

SUITE = Suite(
    name="mpi-apps", title="MPI application proxies: stock, with the MPI's progress thread, offloaded to the agent",
    cases=[SHM],
    charts=[],
    setup=lambda options: AppsEnv(options),
    describe=lambda env: {"mpi_agent": env.agent.address if env.agent else "none", "cores": os.cpu_count()},
    help="MPI application proxies (3D stencil, CG): time per iteration, checked, CPU; stock vs progress thread vs "
         "Outboard",
    quick_help="a short run (about a minute: the stencil and CG at 48^3 points per rank, np 2, both MPIs)",
    uses_agent=False,
    notes=__doc__.split("\n\n", 1)[1].replace("\n", " ").replace("``", "`").strip())
