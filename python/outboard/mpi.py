"""Running an unmodified MPI program under Outboard's interposer (src/mpi): which MPI the program
is built for, the interposer library built for that MPI, and the launcher command that preloads it.

The interposer intercepts the non-blocking collectives Outboard may offload, and with ``p2p``
point-to-point too: "agents" (OUTBOARD_MPI_P2P=1) on the communicators several agents serve,
"all" (=all) on every one. It passes everything else to the MPI library; ``report=True``
(OUTBOARD_MPI_REPORT=1) makes rank 0 print, at MPI_Finalize, what was offloaded and what passed
through, and why.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import _core
from ._agent import LocalAgent
from .errors import BadConfig, NotFound

#: Seconds ldd may take to list a program's libraries.
LDD_TIMEOUT_S = 10.0
#: The agent mpirun starts shares the host's cores with the ranks: it sleeps at once when idle
#: (a polling agent kept a rank off its core: 64 KiB ialltoall, np 2 on 2 cores, Overall 184-204
#: -> 143-155 µs, overlap 0-27 -> 62-63 %; 1 MiB Overall 1,441-1,857 -> 1,265-1,344 µs). An agent
#: on cores of its own (a DPU's) polls as its options say.
NODE_AGENT_ARGS = ("--spin-us", "0")
#: Agents of one job send each other their ranks' blocks over the network (TCP even on one host, as
#: between nodes); an agent's same-host sessions have TCP only when its UCX_TLS names it.
PEER_AGENT_ENV = {"UCX_TLS": "posix,tcp"}


@dataclass(frozen=True)
class Mpi:
    name: str  # the ABI's name in liboutboard_mpi_<name>.so and in --mpi
    family: str  # what its MPI_Get_library_version starts with
    launchers: tuple[str, ...]  # its own mpirun first, the generic name last
    soname: str  # the MPI library a program built for it links
    package: str  # the Debian package whose pkg-config file the build looks for

    def env_args(self, env: Mapping[str, str]) -> list[str]:
        """Launcher arguments that set ``env`` in every rank."""
        if self.name == "openmpi":
            return [a for k, v in env.items() for a in ("-x", f"{k}={v}")]
        return [a for k, v in env.items() for a in ("-genv", k, v)]

    def launcher(self) -> str:
        for name in self.launchers:
            path = shutil.which(name)
            if path and (name != "mpirun" or _family_of_launcher(path) == self.name):
                return path
        raise NotFound(f"no launcher for {self.family} on PATH (looked for {', '.join(self.launchers)}): "
                       f"install {self.family}'s runtime")


MPIS = {m.name: m for m in (
    Mpi("openmpi", "Open MPI", ("mpirun.openmpi", "mpirun"), "libmpi.so", "libopenmpi-dev"),
    Mpi("mpich", "MPICH", ("mpirun.mpich", "mpiexec.hydra", "mpirun"), "libmpich.so", "libmpich-dev"),
)}


# Point-to-point modes: the environment's value for each ("": not offloaded).
P2P_MODES = {"": "", "agents": "1", "all": "all"}


def run(program: Sequence[str], ranks: int, mpi: Mpi | None = None, report: bool = False,
        launcher_args: Sequence[str] = (), agents: str = "node", p2p: str = "") -> int:
    """Runs ``program``; ``agents``: "node" starts one agent for the job's ranks on this host (a
    DPU's role), "rank" one per rank (they exchange their ranks' data agent to agent, as the agents
    of different nodes do), "off" none (every call passes through). Returns the launcher's exit
    status."""
    if agents == "off":
        return subprocess.run(command(program, ranks, mpi, report, launcher_args, p2p=p2p)).returncode
    if agents not in ("node", "rank"):
        raise BadConfig(f"--agents {agents}: expected node, rank or off")
    with contextlib.ExitStack() as stack:
        started = [stack.enter_context(LocalAgent(*NODE_AGENT_ARGS, env=PEER_AGENT_ENV if agents == "rank" else None))
                   for _ in range(ranks if agents == "rank" else 1)]
        address = ",".join(a.address for a in started)
        return subprocess.run(command(program, ranks, mpi, report, launcher_args, address, p2p)).returncode


def interposer(mpi: Mpi) -> Path:
    """The interposer built for ``mpi``, installed beside the compiled module (an editable install
    keeps the sources elsewhere)."""
    path = Path(_core.__file__).parent / f"liboutboard_mpi_{mpi.name}.so"
    if not path.exists():
        raise NotFound(f"{path.name} was not built: the build found no {mpi.family} "
                       f"(install {mpi.package}, then `make build`)")
    return path


def _family_of_launcher(path: str) -> str | None:
    real = os.path.realpath(path)
    hops = [path, real] + ([os.readlink(path)] if os.path.islink(path) else [])
    text = " ".join(hops)
    if "openmpi" in text or "orterun" in text:
        return "openmpi"
    if "mpich" in text or "hydra" in text:
        return "mpich"
    return None


def detect(program: str) -> Mpi:
    """The MPI ``program`` links (its shared libraries, by ldd), else the one `mpirun` belongs to."""
    exe = shutil.which(program) or program
    try:
        libs = subprocess.run(["ldd", exe], capture_output=True, text=True, timeout=LDD_TIMEOUT_S).stdout
    except (OSError, subprocess.TimeoutExpired):
        libs = ""
    linked = [m for m in MPIS.values() if f"{m.soname}." in libs]
    if len(linked) == 1:
        return linked[0]
    if len(linked) > 1:
        raise BadConfig(f"{program} links both {' and '.join(m.soname for m in linked)}: pass --mpi")
    generic = shutil.which("mpirun")
    family = _family_of_launcher(generic) if generic else None
    if family:
        return MPIS[family]
    raise BadConfig(f"cannot tell which MPI {program} uses (it links no {' or '.join(m.soname for m in MPIS.values())}"
                    f" and `mpirun` is {generic or 'not on PATH'}): pass --mpi {'|'.join(MPIS)}")


def command(program: Sequence[str], ranks: int, mpi: Mpi | None = None, report: bool = False,
            launcher_args: Sequence[str] = (), agent: str | None = None, p2p: str = "") -> list[str]:
    """The launcher command that runs ``program`` on ``ranks`` ranks with the interposer preloaded;
    ``agent``: the address of the agent its ranks hand collectives to (one session per job), or
    several, comma-separated (world rank r uses the one at r modulo their count); ``p2p``: point-to-point
    goes to the agents too, "agents" where several serve a communicator, "all" everywhere."""
    if ranks < 1:
        raise BadConfig(f"-np {ranks}: needs at least 1 rank")
    if not program:
        raise BadConfig("no program to run")
    mpi = mpi or detect(program[0])
    env = {"LD_PRELOAD": " ".join(p for p in (str(interposer(mpi)), os.environ.get("LD_PRELOAD", "")) if p)}
    if report:
        env["OUTBOARD_MPI_REPORT"] = "1"
    if p2p not in P2P_MODES:
        raise BadConfig(f"--p2p {p2p}: expected {' or '.join(m for m in P2P_MODES if m)}")
    if p2p:
        env["OUTBOARD_MPI_P2P"] = P2P_MODES[p2p]
    if agent:
        env["OUTBOARD_MPI_AGENT"] = agent
        env["OUTBOARD_SESSION_TOKEN"] = secrets.token_hex(32)  # the job's ranks share one session
    return launch(program, ranks, mpi, env, launcher_args)


def launch(program: Sequence[str], ranks: int, mpi: Mpi, env: Mapping[str, str] | None = None,
           launcher_args: Sequence[str] = ()) -> list[str]:
    """``mpi``'s launcher command for ``program`` on ``ranks`` ranks with ``env`` in each."""
    extra = list(launcher_args)
    # Open MPI refuses more ranks than cores unless told; MPICH's Hydra oversubscribes by default.
    if mpi.name == "openmpi" and ranks > (os.cpu_count() or 1) and "--oversubscribe" not in extra:
        extra.append("--oversubscribe")
    return [mpi.launcher(), *extra, *mpi.env_args(env or {}), "-np", str(ranks), *program]
