# Cross build for aarch64 (a BlueField's Arm cores, Grace) on a Debian x86_64 host: Debian's
# g++-aarch64-linux-gnu and the :arm64 -dev packages (multiarch, scripts/bootstrap.sh). `make agent-aarch64`.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

# arm64 libraries live in /usr/lib/aarch64-linux-gnu (multiarch), the cross libc in /usr/aarch64-linux-gnu.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# pkg-config sees only the arm64 .pc files and the architecture-independent ones.
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")

# Test discovery runs the aarch64 test binary under qemu-user. `-L /`: the multiarch loader and libc, a
# matching pair (the cross package's loader with the multiarch libc hangs at the first pthread_create).
set(CMAKE_CROSSCOMPILING_EMULATOR "qemu-aarch64-static;-L;/")
