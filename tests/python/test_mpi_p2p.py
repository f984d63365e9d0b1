"""Point-to-point offload (`outboard mpirun --p2p`) under real mpirun and real agents (one for the
job, or one per rank forwarding their ranks' sends to each other), for each MPI installed: an
unmodified program (tests/mpi/p2p.c, built here by that MPI's mpicc) checks every message it
receives; the report says what went to the agent. `--p2p` (OUTBOARD_MPI_P2P=1) offloads the
communicators several agents serve; the tests with one agent ask for `--p2p all` (=all) to send
its ranks' messages through it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from outboard import mpi
from outboard._agent import LocalAgent
from test_mpi import FORTRAN_FLAVOURS, MPIF90, _killed_mid_wait, _outboard, _report_lines, _run_job, build

PROGRAM = Path(__file__).resolve().parents[2] / "tests" / "mpi" / "p2p.c"
FORTRAN = PROGRAM.with_suffix(".F90")
FLOOD = 64  # messages of 64 KiB rank 1 sends before rank 0 posts a receive


@pytest.fixture(scope="module", params=sorted(mpi.MPIS))
def built(request, tmp_path_factory) -> tuple[mpi.Mpi, Path]:
    """(the MPI, the test program built with its mpicc)."""
    return build(request.param, PROGRAM, tmp_path_factory)


def _counts(line: str) -> tuple[int, int]:
    """(offloaded, passed through) from a report line's text."""
    words = line.split()
    return int(words[0]), int(words[2])


@pytest.mark.parametrize("agents", ["node", "rank"])
@pytest.mark.parametrize("ranks", [2, 3])
def test_every_point_to_point_call_goes_to_the_agent_and_every_message_arrives(built, ranks, agents) -> None:
    """With an agent per rank every message crosses from the sender's agent to the receiver's:
    ANY_SOURCE from several agents, each sender's messages in order, Ssend answered only once
    matched, the flood buffered by the receiver's agent."""
    which, exe = built
    run = _outboard("mpirun", "-np", str(ranks), "--agents", agents, "--p2p", "all", "--report", str(exe), str(FLOOD))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "ok p2p" in run.stdout
    lines = _report_lines(run.stderr)
    for op in ("MPI_Isend", "MPI_Irecv", "MPI_Sendrecv", "MPI_Probe"):
        offloaded, passed = _counts(lines[op])
        assert offloaded > 0 and passed == 0, (op, lines[op])
    # MPI_PROC_NULL stays with MPI, which completes it at once: once per rank, each way.
    for op in ("MPI_Send", "MPI_Recv"):
        assert lines[op].endswith(f"passed through (MPI_PROC_NULL: {ranks})"), (op, lines[op])
    # Each rank starts its persistent requests 15 times (6 rounds of two, a vector send, a
    # receive cancelled and started again).
    assert _counts(lines["MPI_Start"]) == (15 * ranks, 0), lines["MPI_Start"]
    # The flood alone is FLOOD sends and receives.
    assert _counts(lines["MPI_Isend"])[0] >= FLOOD and _counts(lines["MPI_Recv"])[0] >= FLOOD


@pytest.mark.parametrize("agents", ["node", "rank"])
def test_by_default_point_to_point_goes_to_the_agents_only_where_several_serve_the_communicator(built, agents) -> None:
    """One agent for the job: every message stays with MPI's shared memory, counted as such (its
    persistent requests are MPI's own, whose starts are not counted); an agent per rank: world
    spans them and every message goes to the agents."""
    _, exe = built
    run = _outboard("mpirun", "-np", "2", "--agents", agents, "--p2p", "--report", str(exe), "4")
    assert run.returncode == 0 and "ok p2p" in run.stdout, run.stdout + run.stderr
    lines = _report_lines(run.stderr)
    for op in ("MPI_Isend", "MPI_Irecv", "MPI_Probe"):
        offloaded, passed = _counts(lines[op])
        if agents == "rank":
            assert offloaded > 0 and passed == 0, (op, lines[op])
        else:
            assert offloaded == 0 and lines[op].endswith(f"(one agent serves the communicator: {passed})"), lines[op]
    assert ("MPI_Start" in lines) == (agents == "rank")
    assert _counts(lines["MPI_Ialltoall"]) == (2, 0)  # collectives go to the one agent either way


def test_without_p2p_point_to_point_stays_with_mpi_and_is_not_counted(built) -> None:
    _, exe = built
    run = _outboard("mpirun", "-np", "2", "--report", str(exe), "4")
    assert run.returncode == 0 and "ok p2p" in run.stdout, run.stdout + run.stderr
    lines = _report_lines(run.stderr)
    assert "MPI_Isend" not in lines and "MPI_Recv" not in lines, lines
    assert _counts(lines["MPI_Ialltoall"]) == (2, 0)


def test_a_flood_over_the_agents_budget_waits_for_its_receives_and_loses_nothing(built) -> None:
    """With 1 MiB for unexpected messages, 4 MiB sent before any receive: the agent buffers what
    fits and holds the rest with their senders until their receives come."""
    which, exe = built
    with LocalAgent(*mpi.NODE_AGENT_ARGS, "--mpi-unexpected-bytes", "1M") as agent:
        cmd = mpi.command([str(exe), str(FLOOD)], 2, which, agent=agent.address, report=True, p2p="all")
        run = _run_job(cmd)
    assert run.returncode == 0 and "ok p2p" in run.stdout, run.stdout + run.stderr
    assert _counts(_report_lines(run.stderr)["MPI_Isend"])[0] >= FLOOD


def test_a_flood_across_agents_stays_within_the_window_and_the_budget_and_loses_nothing(built) -> None:
    """An agent per rank, each with 1 MiB for unexpected messages and 256 KiB of forwards in
    flight: of the 4 MiB rank 1 sends before rank 0 receives, its agent forwards 256 KiB at a time
    and rank 0's holds at most its budget plus that window; the rest waits in rank 1's memory."""
    which, exe = built
    args = (*mpi.NODE_AGENT_ARGS, "--mpi-unexpected-bytes", "1M", "--mpi-forward-window-bytes", "256K")
    with LocalAgent(*args, env=mpi.PEER_AGENT_ENV) as a, LocalAgent(*args, env=mpi.PEER_AGENT_ENV) as b:
        cmd = mpi.command([str(exe), str(FLOOD)], 2, which, agent=f"{a.address},{b.address}", report=True, p2p="agents")
        run = _run_job(cmd)
    assert run.returncode == 0 and "ok p2p" in run.stdout, run.stdout + run.stderr
    assert _counts(_report_lines(run.stderr)["MPI_Isend"])[0] >= FLOOD


def test_a_rank_whose_agent_cannot_reach_its_memory_leaves_point_to_point_with_mpi_on_every_rank(built) -> None:
    _, exe = built
    run = _outboard("mpirun", "-np", "2", "--p2p", "all", "--report", str(exe), "4", env={"OUTBOARD_MPI_EXPOSE": "0"})
    assert run.returncode == 0 and "ok p2p" in run.stdout, run.stdout + run.stderr
    for rank in (0, 1):
        assert f"outboard-mpi: rank {rank}: its agent cannot reach its memory: OUTBOARD_MPI_EXPOSE=0: point-to-point " \
               "passes through on every rank" in run.stderr, run.stderr
    assert "MPI_Isend" not in _report_lines(run.stderr)


def test_the_agent_killed_while_a_rank_waits_for_a_message_fails_the_wait(built) -> None:
    which, exe = built
    with LocalAgent(*mpi.NODE_AGENT_ARGS) as agent:
        out, err, took = _killed_mid_wait(which, exe, [agent], agent, p2p="all")
    assert took < 15, took  # the connection's keepalive, not rank 1's 20 s
    assert "rank 0: MPI_Wait failed" in out, out + err
    assert "outboard-mpi: MPI_Irecv from rank 1, tag 0, on communicator 0 failed: " in err, err


def test_another_ranks_agent_killed_while_a_rank_waits_for_its_message_fails_the_wait(built) -> None:
    """An agent per rank: rank 0's receive from rank 1 waits at rank 0's agent, which watches rank
    1's; that one killed, the receive fails at once, naming it, and rank 0's agent lives on."""
    which, exe = built
    with (LocalAgent(*mpi.NODE_AGENT_ARGS, env=mpi.PEER_AGENT_ENV) as mine,
          LocalAgent(*mpi.NODE_AGENT_ARGS, env=mpi.PEER_AGENT_ENV) as other):
        out, err, took = _killed_mid_wait(which, exe, [mine, other], other, p2p="agents")
        assert mine.process.poll() is None
    assert took < 15, took  # the failure itself comes within milliseconds; the rest is mpirun's teardown
    assert "rank 0: MPI_Wait failed" in out, out + err
    assert re.search(rf"outboard-mpi: MPI_Irecv from rank 1, tag 0, on communicator 0 failed: .*rank 1 left \(its "
                     rf"agent {re.escape(other.address)} ended\)", err), err


def test_a_receive_never_matched_is_reported_at_mpi_finalize_not_a_hang(built) -> None:
    _, exe = built
    run = _outboard("mpirun", "-np", "2", "--p2p", "all", str(exe), "unmatched")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "outboard-mpi: rank 0: MPI_Irecv from rank any, tag 123, on communicator 0 never completed before " \
           "MPI_Finalize; dropped" in run.stderr, run.stderr


@pytest.mark.parametrize("flavour", sorted(FORTRAN_FLAVOURS))
def test_fortran_point_to_point_goes_to_the_agent_like_c(built, flavour, tmp_path) -> None:
    """Open MPI's Fortran libraries (mpif.h's, and f08's through it) and MPICH's f08 one call PMPI_
    directly, so the interposer wraps their Fortran symbols; MPICH's others call the C functions."""
    which, _ = built
    fc = shutil.which(MPIF90[which.name])
    if not fc:
        pytest.skip(f"{MPIF90[which.name]} not installed (gfortran: scripts/bootstrap.sh installs it)")
    exe = tmp_path / "p2p_fortran"
    subprocess.run([fc, "-O1", *FORTRAN_FLAVOURS[flavour], "-o", str(exe), str(FORTRAN)], check=True,
                   capture_output=True)
    run = _outboard("mpirun", "-np", "3", "--p2p", "all", "--report", str(exe))
    assert run.returncode == 0 and "ok fortran p2p" in run.stdout, run.stdout + run.stderr
    # Sendrecv_replace counts as the Sendrecv it becomes.
    calls = {"MPI_Isend": 9, "MPI_Irecv": 9, "MPI_Send": 5, "MPI_Recv": 4, "MPI_Sendrecv": 6, "MPI_Probe": 3,
             "MPI_Start": 18}
    assert _report_lines(run.stderr) == {op: f"{n} offloaded {0:8} passed through" for op, n in calls.items()}
