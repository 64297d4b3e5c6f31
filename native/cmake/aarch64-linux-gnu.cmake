# Cross-compiling the runner for arm64 Linux (the phone's CPU side, the UNO Q's Debian) on an x86 Debian host:
# Debian's g++-aarch64-linux-gnu, its arm64 multiarch -dev packages (dpkg --add-architecture arm64), and the
# ExecuTorch runtime from the manylinux aarch64 wheel, passed as CMAKE_PREFIX_PATH by `deployc native build
# --arch aarch64`.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Headers and libraries from the arm64 packages and the wheel only; programs (flatc) from the host.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
# pkg-config must read the arm64 .pc files, not the host's (deployc passes its own list, which adds the
# arm64 packages it unpacked itself).
if(NOT DEFINED ENV{PKG_CONFIG_LIBDIR})
  set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
endif()
set(ENV{PKG_CONFIG_SYSROOT_DIR} "")
