# WebAssembly with SIMD128 and threads, built by Debian's emscripten (3.1.6), run by node:
#   NODE_PATH=/usr/share/nodejs cmake -S . -B build-wasm -DCMAKE_TOOLCHAIN_FILE=cmake/wasm32-emscripten.cmake
# (emscripten's optimizer needs Debian's node-acorn on NODE_PATH). ctest runs the tests with node.
if(DEFINED ENV{EMSCRIPTEN})
  set(MINIMIND_EMSCRIPTEN_ROOT $ENV{EMSCRIPTEN})
else()
  set(MINIMIND_EMSCRIPTEN_ROOT /usr/share/emscripten)
endif()
# Eigen, nlohmann-json and doctest are headers only: their CMake packages are found where the
# host installed them, outside emscripten's sysroot.
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
include(${MINIMIND_EMSCRIPTEN_ROOT}/cmake/Modules/Platform/Emscripten.cmake)

# Those headers sit in /usr/include beside the host's C library: searched last (-idirafter), and
# never as -isystem, which would put the host's libc before emscripten's.
list(APPEND CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES /usr/include)
if(MINIMIND_BUILD_WEB)
  # The web page's build (examples/web): one thread, so it runs on any static file server (threads
  # need SharedArrayBuffer, which a browser gives only to a cross-origin-isolated page), in a web
  # worker that fetches its model over HTTP instead of reading node's file system.
  set(CMAKE_CXX_FLAGS_INIT "-msimd128 -fexceptions -idirafter /usr/include")
  set(CMAKE_EXE_LINKER_FLAGS_INIT "-fexceptions -sENVIRONMENT=worker -sALLOW_MEMORY_GROWTH=1")
  return()
endif()
set(CMAKE_CXX_FLAGS_INIT "-msimd128 -pthread -fexceptions -idirafter /usr/include")
# The thread pool's workers are web workers, started ahead (a worker cannot start while the main
# thread waits for it); NODERAWFS gives the tests node's file system (golden cases, tokenizers).
# The tests throw and catch (minimind::Error): -fexceptions. node 20's fetch cannot load the .wasm: --no-experimental-fetch.
set(CMAKE_EXE_LINKER_FLAGS_INIT
    "-pthread -fexceptions -sPTHREAD_POOL_SIZE=4 -sNODERAWFS=1 -sENVIRONMENT=node,worker -sALLOW_MEMORY_GROWTH=1 -sEXIT_RUNTIME=1")
set(CMAKE_CROSSCOMPILING_EMULATOR node --no-experimental-fetch)
