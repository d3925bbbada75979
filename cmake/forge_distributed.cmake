# The distributed engines (src/distributed/, docs/DISTRIBUTED.md).
#
# FORGE_MPI (AUTO, ON, OFF): Open MPI, found with CMake's FindMPI (Debian:
# libopenmpi-dev openmpi-bin; scripts/setup installs them). AUTO uses it when
# found; ON fails without it; OFF builds the stub (no_mpi.cpp), whose
# ProcessGroup says how to build it. The sanitizer presets turn it off: the
# mpirun tests run in the release preset only.
# FORGE_NCCL (AUTO, ON, OFF): NCCL for CUDA tensors, from the CUDA Toolkit's
# folders (or NCCL_ROOT); AUTO uses it when the CUDA backend is on and
# nccl.h and libnccl are found; OFF builds no_nccl.cpp.
# Both are linked privately (a static forge carries them as link-only
# dependencies; forgeConfig.cmake finds MPI again for its consumers).
# Sets FORGE_MPI_ENABLED, FORGE_NCCL_ENABLED and, with MPI, FORGE_MPIEXEC
# with the flags every mpirun of the tests and scripts takes
# (FORGE_MPIEXEC_FLAGS).

function(_forge_engine_mode var out_mode)
  string(TOUPPER "${${var}}" _mode)
  if(_mode MATCHES "^(AUTO)$")
    set(${out_mode} AUTO PARENT_SCOPE)
  elseif(_mode MATCHES "^(ON|TRUE|YES|1)$")
    set(${out_mode} ON PARENT_SCOPE)
  elseif(_mode MATCHES "^(OFF|FALSE|NO|0)$")
    set(${out_mode} OFF PARENT_SCOPE)
  else()
    message(FATAL_ERROR "${var} must be AUTO, ON or OFF (got \"${${var}}\")")
  endif()
endfunction()

set(FORGE_MPI_ENABLED OFF)
_forge_engine_mode(FORGE_MPI _forge_mpi_mode)
if(NOT _forge_mpi_mode STREQUAL "OFF")
  # The C API, called from C++ (the project enables no C compiler); the
  # deprecated C++ bindings are left out.
  set(MPI_CXX_SKIP_MPICXX ON CACHE BOOL "forge uses MPI's C API only")
  find_package(MPI COMPONENTS CXX QUIET)
  if(MPI_CXX_FOUND)
    set(FORGE_MPI_ENABLED ON)
    message(STATUS "forge: MPI ${MPI_CXX_VERSION} (${MPIEXEC_EXECUTABLE})")
  elseif(_forge_mpi_mode STREQUAL "ON")
    message(FATAL_ERROR "FORGE_MPI=ON, but no MPI was found (Debian: apt-get install libopenmpi-dev openmpi-bin)")
  else()
    message(STATUS "forge: MPI not found: distributed training is off (install libopenmpi-dev openmpi-bin)")
  endif()
else()
  message(STATUS "forge: MPI off (FORGE_MPI=OFF)")
endif()

# Running as root (CI) and more ranks than cores (2-core machines) need these
# with Open MPI; they change nothing else.
set(FORGE_MPIEXEC_FLAGS --allow-run-as-root --oversubscribe)

set(FORGE_NCCL_ENABLED OFF)
_forge_engine_mode(FORGE_NCCL _forge_nccl_mode)
if(NOT _forge_nccl_mode STREQUAL "OFF")
  if(FORGE_CUDA_ENABLED)
    find_path(FORGE_NCCL_INCLUDE_DIR nccl.h
      HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS}
      PATH_SUFFIXES include)
    find_library(FORGE_NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR
      HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}
      PATH_SUFFIXES lib64 lib lib/x86_64-linux-gnu)
    if(FORGE_NCCL_INCLUDE_DIR AND FORGE_NCCL_LIBRARY)
      # 2.14 or later: ncclAvg, ncclBfloat16, ncclInProgress.
      file(STRINGS ${FORGE_NCCL_INCLUDE_DIR}/nccl.h _forge_nccl_major REGEX "^#define NCCL_MAJOR +[0-9]+")
      file(STRINGS ${FORGE_NCCL_INCLUDE_DIR}/nccl.h _forge_nccl_minor REGEX "^#define NCCL_MINOR +[0-9]+")
      string(REGEX REPLACE ".* ([0-9]+)$" "\\1" _forge_nccl_major "${_forge_nccl_major}")
      string(REGEX REPLACE ".* ([0-9]+)$" "\\1" _forge_nccl_minor "${_forge_nccl_minor}")
      set(FORGE_NCCL_VERSION "${_forge_nccl_major}.${_forge_nccl_minor}")
      if(FORGE_NCCL_VERSION VERSION_GREATER_EQUAL 2.14)
        set(FORGE_NCCL_ENABLED ON)
        message(STATUS "forge: NCCL ${FORGE_NCCL_VERSION} (${FORGE_NCCL_LIBRARY})")
      else()
        message(STATUS "forge: NCCL ${FORGE_NCCL_VERSION} is older than 2.14")
      endif()
    endif()
  endif()
  if(NOT FORGE_NCCL_ENABLED)
    if(_forge_nccl_mode STREQUAL "ON")
      message(FATAL_ERROR "FORGE_NCCL=ON, but the CUDA backend is off or nccl.h/libnccl were not found (set NCCL_ROOT)")
    endif()
    message(STATUS "forge: NCCL off (needs the CUDA backend and NCCL)")
  endif()
endif()

function(forge_distributed_configure_target target)
  if(FORGE_MPI_ENABLED)
    target_sources(${target} PRIVATE ${PROJECT_SOURCE_DIR}/src/distributed/mpi_comm.cpp)
    target_link_libraries(${target} PRIVATE MPI::MPI_CXX)
  else()
    target_sources(${target} PRIVATE ${PROJECT_SOURCE_DIR}/src/distributed/no_mpi.cpp)
  endif()
  if(FORGE_NCCL_ENABLED)
    target_sources(${target} PRIVATE ${PROJECT_SOURCE_DIR}/src/distributed/nccl_comm.cpp)
    target_include_directories(${target} SYSTEM PRIVATE ${FORGE_NCCL_INCLUDE_DIR})
    target_link_libraries(${target} PRIVATE ${FORGE_NCCL_LIBRARY})
  else()
    target_sources(${target} PRIVATE ${PROJECT_SOURCE_DIR}/src/distributed/no_nccl.cpp)
  endif()
endfunction()
