! The Fortran program for the interposer's tests: each collective Outboard may offload, called
! from Fortran (mpif.h, `use mpi` when built with -DUSE_MPI_MODULE, or `use mpi_f08` and its
! handle types with -DUSE_MPI_F08), checked against the MPI
! library's blocking collective, MPI_IN_PLACE included, completed by Wait, Waitall and Testall, on
! MPI_COMM_WORLD and on a communicator from MPI_Cart_create and MPI_Cart_sub. Rank 0 prints "ok
! fortran" or names what differed (and the program stops with status 1).
program collectives
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
  integer, parameter :: n = 5
  integer :: ierr, rank, nranks, i, bad, allbad
#ifdef USE_MPI_F08
  type(MPI_Request) :: req, reqs(2)
  type(MPI_Comm) :: cart, row
  type(MPI_Status) :: stat, stats(2)
#else
  integer :: req, reqs(2), cart, row
  integer :: stat(MPI_STATUS_SIZE), stats(MPI_STATUS_SIZE, 2)
#endif
  logical :: done
  integer, allocatable :: send(:), recv(:), want(:), counts(:), displs(:)
  double precision :: x(n), sum_x(n), want_x(n)

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  allocate(send(n * nranks), recv(n * nranks), want(n * nranks), counts(nranks), displs(nranks))
  bad = 0
  do i = 1, n * nranks
    send(i) = rank * 1000 + i
  end do

  call MPI_Ialltoall(send, n, MPI_INTEGER, recv, n, MPI_INTEGER, MPI_COMM_WORLD, req, ierr)
  call MPI_Wait(req, stat, ierr)
  call MPI_Alltoall(send, n, MPI_INTEGER, want, n, MPI_INTEGER, MPI_COMM_WORLD, ierr)
  call expect(all(recv == want), 'MPI_Ialltoall')

  recv = send
  call MPI_Ialltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, n, MPI_INTEGER, MPI_COMM_WORLD, req, ierr)
  call MPI_Wait(req, MPI_STATUS_IGNORE, ierr)
  call expect(all(recv == want), 'MPI_Ialltoall in place')

  counts = n
  do i = 1, nranks
    displs(i) = (i - 1) * n
  end do
  call MPI_Ialltoallv(send, counts, displs, MPI_INTEGER, recv, counts, displs, MPI_INTEGER, MPI_COMM_WORLD, &
                      req, ierr)
  call MPI_Wait(req, stat, ierr)
  call expect(all(recv == want), 'MPI_Ialltoallv')

  call MPI_Iallgather(send, n, MPI_INTEGER, recv, n, MPI_INTEGER, MPI_COMM_WORLD, req, ierr)
  call MPI_Wait(req, stat, ierr)
  call MPI_Allgather(send, n, MPI_INTEGER, want, n, MPI_INTEGER, MPI_COMM_WORLD, ierr)
  call expect(all(recv == want), 'MPI_Iallgather')

  recv(1:n) = send(1:n)
  call MPI_Ibcast(recv, n, MPI_INTEGER, nranks - 1, MPI_COMM_WORLD, req, ierr)
  call MPI_Wait(req, stat, ierr)
  want(1:n) = send(1:n)
  call MPI_Bcast(want, n, MPI_INTEGER, nranks - 1, MPI_COMM_WORLD, ierr)
  call expect(all(recv(1:n) == want(1:n)), 'MPI_Ibcast')

  do i = 1, n
    x(i) = dble(mod(rank + i, 3) + 1)
  end do
  call MPI_Iallreduce(x, sum_x, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, req, ierr)
  call MPI_Wait(req, stat, ierr)
  call MPI_Allreduce(x, want_x, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
  call expect(all(sum_x == want_x), 'MPI_Iallreduce')

  sum_x = x
  call MPI_Iallreduce(MPI_IN_PLACE, sum_x, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, req, ierr)
  call MPI_Wait(req, stat, ierr)
  call expect(all(sum_x == want_x), 'MPI_Iallreduce in place')

  ! two in flight, completed by Waitall, then by a Testall loop
  call MPI_Ialltoall(send, n, MPI_INTEGER, recv, n, MPI_INTEGER, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Iallreduce(x, sum_x, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, reqs(2), ierr)
  call MPI_Waitall(2, reqs, stats, ierr)
  call MPI_Alltoall(send, n, MPI_INTEGER, want, n, MPI_INTEGER, MPI_COMM_WORLD, ierr)
  call expect(all(recv == want) .and. all(sum_x == want_x), 'MPI_Waitall')
  recv = 0
  call MPI_Ialltoall(send, n, MPI_INTEGER, recv, n, MPI_INTEGER, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Iallreduce(x, sum_x, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, reqs(2), ierr)
  done = .false.
  do while (.not. done)
    call MPI_Testall(2, reqs, done, MPI_STATUSES_IGNORE, ierr)
  end do
  call expect(all(recv == want) .and. all(sum_x == want_x), 'MPI_Testall')

  ! P3DFFT's rows: a Cartesian grid's sub-communicator (here all ranks)
  call MPI_Cart_create(MPI_COMM_WORLD, 2, [nranks, 1], [.false., .false.], .false., cart, ierr)
  call MPI_Cart_sub(cart, [.true., .false.], row, ierr)
  call MPI_Iallreduce(x, sum_x, n, MPI_DOUBLE_PRECISION, MPI_SUM, row, req, ierr)
  call MPI_Wait(req, stat, ierr)
  call expect(all(sum_x == want_x), 'MPI_Iallreduce on a MPI_Cart_sub communicator')
  call MPI_Comm_free(row, ierr)
  call MPI_Comm_free(cart, ierr)

  call MPI_Allreduce(bad, allbad, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (rank == 0 .and. allbad == 0) print '(a)', 'ok fortran'
  call MPI_Finalize(ierr)
  if (allbad /= 0) stop 1

contains

  subroutine expect(same, what)
    logical, intent(in) :: same
    character(*), intent(in) :: what
    if (.not. same) then
      print '(a, i0, 3a)', 'rank ', rank, ': ', what, ' differs from the blocking collective'
      bad = bad + 1
    end if
  end subroutine expect

end program collectives
