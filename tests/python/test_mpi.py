"""The MPI interposer (src/mpi) under real mpirun, for each MPI installed: an unmodified program
(tests/mpi/collectives.c, built here by that MPI's mpicc) runs every collective Outboard may offload
and checks each against the MPI library's blocking result; the report says what passed through and
why. The agent's MPI service is not built yet, so every offloadable call passes through as
"no agent"."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from outboard import mpi
from outboard.errors import NotFound

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "tests" / "mpi" / "collectives.c"
FORTRAN = ROOT / "tests" / "mpi" / "collectives.F90"
RUN_TIMEOUT_S = 120
ROUNDS = 3
COMMS = 3  # world, a duplicate, a split
MPICC = {"openmpi": "mpicc.openmpi", "mpich": "mpicc.mpich"}
MPIF90 = {"openmpi": "mpif90.openmpi", "mpich": "mpif90.mpich"}
# mpif.h declares no interfaces, so gfortran >= 10 rejects one buffer passed as two types.
FORTRAN_FLAVOURS = {"mpif.h": ["-fallow-argument-mismatch"], "use mpi": ["-DUSE_MPI_MODULE"]}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    if os.geteuid() == 0:  # CI runs as root; Open MPI refuses that unless told
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


@pytest.fixture(scope="module", params=sorted(mpi.MPIS))
def built(request, tmp_path_factory) -> tuple[mpi.Mpi, Path]:
    """(the MPI, the test program built with its mpicc)."""
    which = mpi.MPIS[request.param]
    cc = shutil.which(MPICC[which.name])
    if not cc:
        pytest.skip(f"{MPICC[which.name]} not installed ({which.package}: scripts/bootstrap.sh installs it)")
    try:
        mpi.interposer(which)
    except NotFound as e:
        pytest.skip(str(e))
    exe = tmp_path_factory.mktemp(which.name) / "collectives"
    subprocess.run([cc, "-O1", "-Wall", "-Werror", "-o", str(exe), str(PROGRAM)], check=True)
    return which, exe


def _report_lines(stderr: str) -> dict[str, str]:
    """The report's lines after its heading: operation -> what happened to its calls."""
    report = stderr[stderr.index("outboard-mpi report:"):].splitlines()[1:]
    return {line.split()[0]: line.split(None, 1)[1] for line in report}


def _outboard(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "outboard.cli", *args], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, env=_env())


@pytest.mark.parametrize("ranks", [2, 3])
def test_every_collective_matches_the_blocking_one_and_the_report_says_why_it_passed_through(built, ranks) -> None:
    which, exe = built
    run = _outboard("mpirun", "-np", str(ranks), "--report", str(exe), str(ROUNDS))
    assert run.returncode == 0, run.stderr
    assert f"ok {ROUNDS} rounds" in run.stdout
    assert run.stderr.count("outboard-mpi: no agent serves this job") == 1  # one warning, from rank 0
    assert re.search(rf"^outboard-mpi report: {ranks} ranks on {which.family}", run.stderr, re.M)
    each = ranks * ROUNDS * COMMS  # every rank calls each operation once per round and communicator
    assert _report_lines(run.stderr) == {
        "MPI_Ialltoall": f"0 offloaded {each + ranks:8} passed through (non-contiguous datatype: {ranks}, "
                         f"no agent: {each})",
        "MPI_Ialltoallv": f"0 offloaded {each:8} passed through (no agent: {each})",
        "MPI_Iallgather": f"0 offloaded {each + ranks:8} passed through (intercommunicator: {ranks}, no agent: {each})",
        "MPI_Ibcast": f"0 offloaded {each:8} passed through (no agent: {each})",
        "MPI_Iallreduce": f"0 offloaded {each + 2 * ranks:8} passed through (datatype not int, long, float or "
                          f"double (C or Fortran): {ranks}, op not sum, min, max or prod: {ranks}, no agent: {each})",
    }


def test_without_report_only_the_warning_is_printed(built) -> None:
    _, exe = built
    run = _outboard("mpirun", "-np", "2", str(exe), "1")
    assert run.returncode == 0 and "ok 1 rounds" in run.stdout, run.stderr
    assert "outboard-mpi report" not in run.stderr and "no agent serves this job" in run.stderr


def test_the_program_picks_its_interposer_and_the_wrong_one_refuses_to_run(built) -> None:
    which, exe = built
    assert mpi.detect(str(exe)) == which
    dry = _outboard("mpirun", "-np", "2", "--dry-run", str(exe))
    assert dry.returncode == 0 and f"liboutboard_mpi_{which.name}.so" in dry.stdout
    other = next(m for m in mpi.MPIS.values() if m != which)
    try:
        wrong = mpi.interposer(other)
    except NotFound:
        pytest.skip(f"only {which.family} is built here")
    cmd = mpi.command([str(exe), "1"], 2, which)
    cmd = [a.replace(str(mpi.interposer(which)), str(wrong)) for a in cmd]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=_env())
    assert run.returncode != 0 and "ok" not in run.stdout
    assert (f"liboutboard_mpi_{other.name}.so is built for {other.family} but this program runs on "
            f"'{which.family}") in run.stderr


@pytest.mark.parametrize("flavour", sorted(FORTRAN_FLAVOURS))
def test_fortran_calls_are_routed_and_reported_like_c_ones(built, flavour, tmp_path) -> None:
    which, _ = built
    fc = shutil.which(MPIF90[which.name])
    if not fc:
        pytest.skip(f"{MPIF90[which.name]} not installed (gfortran: scripts/bootstrap.sh installs it)")
    exe = tmp_path / "fortran"
    subprocess.run([fc, "-O1", *FORTRAN_FLAVOURS[flavour], "-o", str(exe), str(FORTRAN)], check=True,
                   capture_output=True)
    run = _outboard("mpirun", "-np", "2", "--report", str(exe))
    assert run.returncode == 0 and "ok fortran" in run.stdout, run.stdout + run.stderr
    # Open MPI's Fortran library calls PMPI_ directly (the interposer wraps its Fortran symbols);
    # MPICH's calls the C functions. Either way every call is seen, in-place ones included.
    calls = {"MPI_Ialltoall": 2, "MPI_Ialltoallv": 1, "MPI_Iallgather": 1, "MPI_Ibcast": 1, "MPI_Iallreduce": 2}
    assert _report_lines(run.stderr) == {op: f"0 offloaded {2 * n:8} passed through (no agent: {2 * n})"
                                         for op, n in calls.items()}


def test_bad_arguments_are_named() -> None:
    run = _outboard("mpirun", "-np", "0", "./app")
    assert run.returncode == 2 and "-np 0: needs at least 1 rank" in run.stderr
    run = _outboard("mpirun", "-np", "2")
    assert run.returncode == 2 and "no program to run" in run.stderr
