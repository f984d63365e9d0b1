! Point-to-point from Fortran (mpif.h, `use mpi` when built with -DUSE_MPI_MODULE, or `use mpi_f08`
! and its handle types with -DUSE_MPI_F08), each result checked: a ring of Isend/Irecv completed by
! Waitall, Send and Recv with MPI_ANY_SOURCE and the status's source, tag and count, Ssend,
! Sendrecv, Sendrecv_replace, Probe and Iprobe, a persistent ring (Send_init, Recv_init, Startall,
! Waitall, Request_free) over three rounds, a matched probe (Mprobe, then Mrecv of the probed
! size), and the 1-based indices of Waitany, Testany and Waitsome. Rank 0 prints "ok fortran p2p"
! or names what differed (and the program stops with status 1).
#ifdef USE_MPI_F08
! f08's ierror is OPTIONAL: some calls below leave it out.
#define IERR
#define STAT(field) stat%field
#define STAT1(field) stats(1)%field
#define STATS1 stats(1)
#else
#define IERR , ierr
#define STAT(field) stat(field)
#define STAT1(field) stats(field, 1)
#define STATS1 stats(:, 1)
#endif
program p2p
#if defined(USE_MPI_F08)
  use mpi_f08
  implicit none
#elif defined(USE_MPI_MODULE)
  use mpi
  implicit none
#else
  implicit none
  include 'mpif.h'
#endif
  integer, parameter :: n = 100
  integer :: ierr, rank, nranks, right, left, i, count, bad, allbad, round, first, outcount, idx(2)
#ifdef USE_MPI_F08
  type(MPI_Request) :: reqs(2), preqs(2)
  type(MPI_Message) :: msg
  type(MPI_Status) :: stat, stats(2)
#else
  integer :: reqs(2), preqs(2), msg, stat(MPI_STATUS_SIZE), stats(MPI_STATUS_SIZE, 2)
#endif
  integer :: out(n), in(n)
  logical :: found

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  right = mod(rank + 1, nranks)
  left = mod(rank + nranks - 1, nranks)
  bad = 0
  do i = 1, n
    out(i) = rank * 1000 + i
  end do

  in = -1
  call MPI_Irecv(in, n, MPI_INTEGER, left, 1, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Isend(out, n, MPI_INTEGER, right, 1, MPI_COMM_WORLD, reqs(2), ierr)
  call MPI_Waitall(2, reqs, stats, ierr)
  call MPI_Get_count(STATS1, MPI_INTEGER, count, ierr)
  call expect(STAT1(MPI_SOURCE) == left .and. STAT1(MPI_TAG) == 1 .and. count == n, 'Irecv status')
  call expect(all(in == out - rank * 1000 + left * 1000), 'Isend/Irecv ring')

  ! Every rank but 0 sends rank 0 (n - rank) integers with tag rank; rank 0 takes any source.
  if (rank /= 0) then
    call MPI_Send(out, n - rank, MPI_INTEGER, 0, rank, MPI_COMM_WORLD, ierr)
  else
    do i = 1, nranks - 1
      call MPI_Recv(in, n, MPI_INTEGER, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, stat, ierr)
      call MPI_Get_count(stat, MPI_INTEGER, count, ierr)
      call expect(STAT(MPI_TAG) == STAT(MPI_SOURCE) .and. count == n - STAT(MPI_SOURCE) .and. &
                  in(1) == STAT(MPI_SOURCE) * 1000 + 1, 'Recv from any source')
    end do
  end if
  ! Any tag would also take the messages below, sent by ranks already past this point.
  call MPI_Barrier(MPI_COMM_WORLD, ierr)

  if (mod(rank, 2) == 0 .and. rank + 1 < nranks) then
    call MPI_Ssend(out, n, MPI_INTEGER, rank + 1, 2, MPI_COMM_WORLD, ierr)
  else if (mod(rank, 2) == 1) then
    call MPI_Recv(in, n, MPI_INTEGER, rank - 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
    call expect(in(n) == (rank - 1) * 1000 + n, 'Ssend')
  end if

  in = -1
  call MPI_Sendrecv(out, n, MPI_INTEGER, right, 3, in, n, MPI_INTEGER, left, 3, MPI_COMM_WORLD, stat, ierr)
  call expect(STAT(MPI_SOURCE) == left .and. in(1) == left * 1000 + 1, 'Sendrecv')
  in = out
  call MPI_Sendrecv_replace(in, n, MPI_INTEGER, right, 4, left, 4, MPI_COMM_WORLD, stat, ierr)
  call expect(in(n) == left * 1000 + n, 'Sendrecv_replace')

  if (rank == 1) call MPI_Send(out, 7, MPI_INTEGER, 0, 5, MPI_COMM_WORLD, ierr)
  if (rank == 0 .and. nranks > 1) then
    call MPI_Probe(MPI_ANY_SOURCE, 5, MPI_COMM_WORLD, stat, ierr)
    call MPI_Get_count(stat, MPI_INTEGER, count, ierr)
    call expect(STAT(MPI_SOURCE) == 1 .and. count == 7, 'Probe')
    call MPI_Recv(in, count, MPI_INTEGER, 1, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
    call MPI_Iprobe(1, 5, MPI_COMM_WORLD, found, MPI_STATUS_IGNORE, ierr)
    call expect(.not. found, 'Iprobe after the receive')
  end if

  call MPI_Recv_init(in, n, MPI_INTEGER, left, 6, MPI_COMM_WORLD, preqs(1), ierr)
  call MPI_Send_init(out, n, MPI_INTEGER, right, 6, MPI_COMM_WORLD, preqs(2), ierr)
  do round = 1, 3
    out(1) = rank * 1000 + round
    in = -1
    call MPI_Startall(2, preqs, ierr)
    call MPI_Waitall(2, preqs, stats, ierr)
    call expect(STAT1(MPI_SOURCE) == left .and. in(1) == left * 1000 + round .and. &
                preqs(1) /= MPI_REQUEST_NULL, 'persistent ring')
  end do
  call MPI_Request_free(preqs(1), ierr)
  call MPI_Request_free(preqs(2), ierr)
  call expect(preqs(1) == MPI_REQUEST_NULL .and. preqs(2) == MPI_REQUEST_NULL, 'Request_free')

  if (rank == 1) call MPI_Send(out, 9, MPI_INTEGER, 0, 7, MPI_COMM_WORLD, ierr)
  if (rank == 0 .and. nranks > 1) then
    in = -1
    call MPI_Mprobe(MPI_ANY_SOURCE, 7, MPI_COMM_WORLD, msg, stat, ierr)
    call MPI_Get_count(stat, MPI_INTEGER, count, ierr)
    call expect(STAT(MPI_SOURCE) == 1 .and. count == 9, 'Mprobe')
    call MPI_Mrecv(in, count, MPI_INTEGER, msg, stat, ierr)
    call expect(msg == MPI_MESSAGE_NULL .and. in(9) == 1000 + 9 .and. in(10) == -1, 'Mrecv')
  end if

  in = -1
  call MPI_Irecv(in, n, MPI_INTEGER, left, 8, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Isend(out, n, MPI_INTEGER, right, 8, MPI_COMM_WORLD, reqs(2), ierr)
  call MPI_Waitany(2, reqs, first, stat, ierr)
  call expect((first == 1 .or. first == 2) .and. reqs(first) == MPI_REQUEST_NULL, 'Waitany')
  found = .false.
  do while (.not. found)
    call MPI_Testany(2, reqs, i, found, MPI_STATUS_IGNORE IERR)
  end do
  call expect(i == 3 - first .and. in(n) == left * 1000 + n, 'Testany')
  call MPI_Irecv(in, n, MPI_INTEGER, left, 9, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Isend(out, n, MPI_INTEGER, right, 9, MPI_COMM_WORLD, reqs(2), ierr)
  call MPI_Waitsome(2, reqs, outcount, idx, stats, ierr)
  call expect(outcount >= 1 .and. all(idx(1:outcount) >= 1 .and. idx(1:outcount) <= 2), 'Waitsome')
  call expect(reqs(idx(1)) == MPI_REQUEST_NULL, 'Waitsome')
  call MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE IERR)

  call MPI_Allreduce(bad, allbad, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (rank == 0 .and. allbad == 0) print '(a)', 'ok fortran p2p'
  call MPI_Finalize(ierr)
  if (allbad /= 0) stop 1

contains

  subroutine expect(ok, what)
    logical, intent(in) :: ok
    character(*), intent(in) :: what
    if (.not. ok) then
      print '(a, i0, 2a)', 'rank ', rank, ': wrong result from ', what
      bad = bad + 1
    end if
  end subroutine expect

end program p2p
