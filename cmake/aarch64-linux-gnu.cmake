# Cross-compiling for 64-bit ARM Linux with Debian's g++-aarch64-linux-gnu; the tests run under
# qemu-user (Debian qemu-user-static), which ctest calls through CMAKE_CROSSCOMPILING_EMULATOR:
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64-static -L /usr/aarch64-linux-gnu)
# Programs (cmake, pkg-config) are the host's; libraries come from the target's root. Eigen,
# nlohmann-json and doctest are headers only, the same for every architecture: their CMake
# packages are found where the host installed them.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
