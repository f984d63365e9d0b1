"""Suite ``mpi-apps``: application proxies (issue C2), each a small real C program built with the
project against each MPI, run under mpirun stock, with the MPI's own progress thread, and with its
point-to-point and collectives offloaded to the agents (`outboard mpirun --p2p`: point-to-point
where several agents serve a communicator; in shared memory also `--p2p all`, through the one
agent, as `outboard-all`). Each run reports
its time per iteration (the slowest rank's; p50 and p90 over the iterations after warm-up), its own
correctness check (the final state against a single-process run from the same start), the ranks'
CPU per iteration and the agent's (every process of it).

The proxies: the 3D stencil (`outboard-mpi-stencil-<mpi>`: a 7-point Jacobi stencil on a periodic
grid, halos exchanged with 6 neighbours by Irecv/Isend while the interior updates; checked against
a single-process run), the CG solver (`outboard-mpi-cg-<mpi>`: pipelined CG on the 3D Laplacian,
its two dot products in one Iallreduce overlapped with the next matrix-vector product and its halo
exchange; checked against the classic CG's residual on the same system) and the distributed 3D FFT
(`outboard-mpi-fft-<mpi>`, P3DFFT's pattern: a complex forward FFT in pencils over a 2D grid of
ranks, FFTW on the local pencils, each batch of pencils' transpose an Ialltoall on a row or column
communicator, travelling while the next batch's FFTs run; checked against one process's FFTW 3D
transform; its grid's side is the multiple of 16 nearest n·∛np, so that a rank holds about n³
points as in the others; built where FFTW is installed, Debian's libfftw3-dev). Two regimes, as
`outboard bench mpi`'s. Shared memory, one agent for the job on the ranks' host: on these two
cores communication is CPU work and the agent shares the ranks' cores, so this is the control,
where the goal is only to cost no more than 5 %. Wire-bound (root only: a namespace whose loopback
is shaped, TCP only, an agent per rank), where offload should pay: each rank's agent forwards its
sends to the receiver's over the shaped link, and the agents run the collectives between them.
Published figures for comparison (another machine: MVAPICH2-DPU on BlueField-2 clusters): the 3D
stencil up to 18 % shorter with Isend/Irecv offloaded, PETSc's CG-like solver up to 24 % with its
reductions offloaded, P3DFFT up to 30 % with its Ialltoall offloaded (P3DFFT++ 14–49 % with
Ialltoallv, ISC 2024).
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from ... import mpi
from ..._agent import find_executable
from ..declare import Case, Column, Goal, Impl, Measurement, Options, Suite
from .mpi import WIRE_RATE, MpiEnv

IMPLS = ["stock", "progress", "outboard"]
#: The interposer's point-to-point mode (`outboard mpirun --p2p`) of each offloaded implementation:
#: outboard-all sends even one agent's communicators through it (the path the default rule avoids).
P2P = {"outboard": "agents", "outboard-all": "all"}
#: Where an iteration's time goes (the ranks' mean µs), as each proxy reports it.
PHASES = {"stencil": ["post_us", "interior_us", "wait_us", "boundary_us"],
          "cg": ["multiply_us", "wait_us", "update_us"],
          "fft": ["fft_us", "ialltoall_us", "wait_us"]}


def executable(which: mpi.Mpi, proxy: str) -> str:
    return find_executable(f"outboard-mpi-{proxy}-{which.name}", f"OUTBOARD_MPI_{proxy.upper()}_{which.name.upper()}")


def argument(proxy: str, n: int, ranks: int) -> int:
    """The proxy's N for a rank of about n³ points: the FFT's is its global grid's side (the
    multiple of 16 nearest n·∛ranks: pencils and batches divide it evenly), the others' a rank's
    cube's."""
    return max(16, round(n * ranks ** (1 / 3) / 16) * 16) if proxy == "fft" else n


def _iterations(options: Options) -> tuple[int, int]:
    """(timed iterations, warm-up)."""
    return (20, 3) if options.smoke else (100, 10) if options.quick else (400, 40)


class AppsEnv(MpiEnv):
    """The mpi suite's: one agent for the job (shared memory), or one per rank in the shaped
    namespace (wire-bound)."""

    def run_proxy(self, impl: str, p: dict[str, Any], wire: bool) -> dict[str, Any]:
        which = mpi.MPIS[p["mpi"]]
        iterations, warmup = _iterations(self.options)
        program = [executable(which, p["proxy"]), str(argument(p["proxy"], p["n"], p["np"])), str(iterations),
                   str(warmup)]
        offloaded = impl in P2P
        out, helper_s, agents = self.job("outboard" if offloaded else impl, which, program, p["np"], wire,
                                         (impl, *sorted(p.items())), p2p=P2P.get(impl, ""))
        if offloaded:
            out["helper_cpu_us"] = helper_s * 1e6 / (iterations + warmup) / agents
        return out


def _measure(impl: str, wire: bool):
    def measure(env: AppsEnv, p: dict[str, Any]) -> Measurement:
        out = env.run_proxy(impl, p, wire)
        metrics = {k: out[k] for k in ("p50_us", "p90_us", "rank_cpu_us", "helper_cpu_us", "halo_bytes",
                                       "transpose_bytes", *PHASES[p["proxy"]]) if k in out}
        correctness = {k: out[k] for k in ("check", "n", "iterations", "dims", "batches", "residual",
                                           "classic_residual") if k in out}
        return Measurement(metrics, out["check"] == "ok", correctness)
    return measure


def _unavailable(impl: str, wire: bool):
    def why(env: AppsEnv, p: dict[str, Any]) -> str | None:
        which = mpi.MPIS[p["mpi"]]
        if not any(shutil.which(name) for name in which.launchers):
            return f"{which.family} is not installed ({which.package})"
        try:
            executable(which, p["proxy"])
        except mpi.NotFound as e:
            return f"{e}; it is built only where FFTW is installed (libfftw3-dev)" if p["proxy"] == "fft" else str(e)
        try:
            if impl in P2P:
                mpi.interposer(which)
        except mpi.NotFound as e:
            return str(e)
        return env.wire() if wire else None
    return why


COLUMNS = [Column("p50 µs/iteration", "p50_us", 1), Column("p90 µs/iteration", "p90_us", 1),
             Column("rank CPU µs/iteration", "rank_cpu_us", 1), Column("agent CPU µs/iteration", "helper_cpu_us", 1),
             Column("pack+post µs", "post_us", 1), Column("interior µs", "interior_us", 1),
             Column("A·x with halos µs", "multiply_us", 1), Column("FFTs+packing µs", "fft_us", 1),
             Column("post Ialltoall µs", "ialltoall_us", 1), Column("wait µs", "wait_us", 1),
             Column("unpack+boundary µs", "boundary_us", 1), Column("vector updates µs", "update_us", 1),
             Column("halo B/rank", "halo_bytes", 0), Column("transposed B/rank", "transpose_bytes", 0)]

SHM = Case(
    "shm", "Shared memory (one agent for the job, on the ranks' two cores)",
    sweep={"mpi": sorted(mpi.MPIS), "proxy": sorted(PHASES), "np": [2, 4], "n": [32, 64]},
    quick={"np": [2], "n": [48]},
    impls=[Impl(i, _measure(i, False), _unavailable(i, False)) for i in [*IMPLS, "outboard-all"]],
    columns=COLUMNS,
    reference="stock", ratio_metric="p50_us", ours="outboard", also_ratio=["progress", "outboard-all"],
    goal=Goal(1.05),
    notes="Goal (issue C2), shared-memory regime: no proxy slower than stock by more than 5 % (p50 time per "
          "iteration). The phase columns say where an iteration's time goes (the ranks' mean; the stencil's: pack+post, "
          "interior, wait, unpack+boundary; CG's: A·x with its halo exchange, the wait for the dot products, the "
          "vector updates; the FFT's: FFTs with packing and unpacking, posting the Ialltoalls, waiting for them). "
          "One agent serves every rank here, so by `--p2p`'s rule point-to-point stays with MPI (`outboard`) and only "
          "collectives go to the agent; `outboard-all` (`--p2p all`) sends every message through the agent too, "
          "which matches it and copies it from the sender's buffer into the receiver's through the kernel: a "
          "wake-up of the agent and of the rank per message, which a shared-memory MPI does not pay. An offloaded "
          "Ialltoall is staged through the agent's shared area. "
          "`progress` on Open MPI is stock here (its thread acts on TCP only).")

WIRE = Case(
    "wire", f"Wire-bound (a network namespace whose loopback is shaped to {WIRE_RATE}; TCP only; root only)",
    sweep={"mpi": sorted(mpi.MPIS), "proxy": sorted(PHASES), "np": [2], "n": [32, 64]},
    quick={"n": [48]},
    impls=[Impl(i, _measure(i, True), _unavailable(i, True)) for i in IMPLS],
    columns=COLUMNS, reference="stock", ratio_metric="p50_us", ours="outboard", also_ratio=["progress"],
    goal=Goal(0.8),
    notes="Goals (issue C2), wire-bound regime: every proxy's p50 time per iteration with offload at most 0.8× "
          "stock's and at most stock's with its progress thread. The set-up is `outboard bench mpi`'s: an agent "
          "per rank in the namespace, as each node's: a rank hands its sends and collectives to its agent through "
          "shared memory, and the agents forward sends and exchange collective shares over the shaped link (so every "
          "byte a proxy's timed loop moves crosses it, as stock's does over TCP).")

SUITE = Suite(
    name="mpi-apps", title="MPI application proxies: stock, with the MPI's progress thread, offloaded to the agent",
    cases=[SHM, WIRE],
    charts=[],
    setup=lambda options: AppsEnv(options),
    describe=lambda env: {"mpi_agent": env.agent.address if env.agent else "none", "cores": os.cpu_count()},
    help="MPI application proxies (3D stencil, CG, 3D FFT): time per iteration, checked, CPU; stock vs progress thread vs "
         "Outboard",
    quick_help="a short run (a few minutes: the three proxies at about 48^3 points per rank, np 2, both MPIs; as "
               "root also wire-bound, a few minutes more)",
    uses_agent=False,
    notes=__doc__.split("\n\n", 1)[1].replace("\n", " ").replace("``", "`").strip())
