# Cross-build for aarch64 Linux with Debian's cross compiler (scripts/arm64_env.sh installs it), tests run
# under qemu-user: `cmake -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake` then
# `ctest --test-dir build-arm64` runs every C test through CMAKE_CROSSCOMPILING_EMULATOR.
# QEMU_CPU in the environment (e.g. max) picks the emulated CPU; the default is qemu's own default model.
set(CMAKE_SYSTEM_NAME Linux)
# This file's absolute path (a relative -DCMAKE_TOOLCHAIN_FILE=cmake/... is not usable from another directory):
# the install test configures its downstream consumer with it.
set(ATTN_TOOLCHAIN_FILE ${CMAKE_CURRENT_LIST_FILE})
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(ATTN_AARCH64_TRIPLE aarch64-linux-gnu CACHE STRING "GNU triple of the aarch64 cross toolchain")
set(CMAKE_C_COMPILER ${ATTN_AARCH64_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${ATTN_AARCH64_TRIPLE}-g++)

# Debian: the cross libc lives in /usr/aarch64-linux-gnu, multiarch arm64 packages (cmocka, cJSON from
# `dpkg --add-architecture arm64`) in /usr/lib/aarch64-linux-gnu and /usr/include.
set(CMAKE_FIND_ROOT_PATH /usr/${ATTN_AARCH64_TRIPLE})
set(CMAKE_LIBRARY_ARCHITECTURE ${ATTN_AARCH64_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

find_program(ATTN_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64)
if(ATTN_QEMU_AARCH64)
  # -E LD_LIBRARY_PATH: the dynamic loader of the cross libc (found through -L) must load that same libc, not
  # the multiarch libc6:arm64 that cmocka/cJSON pull in under /lib/aarch64-linux-gnu (its default search
  # path): mixing the two builds hangs every pthread_create (seen with qemu 7.2, glibc 2.36-8cross1 vs -9).
  set(CMAKE_CROSSCOMPILING_EMULATOR ${ATTN_QEMU_AARCH64} -L /usr/${ATTN_AARCH64_TRIPLE}
      -E LD_LIBRARY_PATH=/usr/${ATTN_AARCH64_TRIPLE}/lib)
endif()

# The CPython extension needs the *target's* Python headers (pyconfig.h); FindPython would hand it the build
# machine's x86-64 ones. Off by default here: an aarch64 wheel then carries libattn.so and uses the ctypes
# binding. -DATTN_PYTHON_EXT=ON (with Python3_INCLUDE_DIR of an aarch64 Python) builds it anyway.
set(ATTN_PYTHON_EXT OFF CACHE BOOL "Build the CPython extension attn._ext (needs Python development headers)")
