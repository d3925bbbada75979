# The CUDA backend's build (FORGE_CUDA: AUTO, ON or OFF).
#
# AUTO turns the backend on when CMake finds the CUDA Toolkit and its nvcc
# compiles a test program; ON fails when either is missing; OFF builds the
# stub (src/backend/cuda/no_cuda.cpp). With the backend on:
#   - the CUDA language is enabled, for C++20, with nvcc's host compiler the
#     project's C++ compiler;
#   - CMAKE_CUDA_ARCHITECTURES defaults to `native` when a GPU is visible at
#     configure time, else to 90 (H100/H200: sm_90 code plus compute_90 PTX,
#     which later GPUs compile at load time), so that machines without a GPU
#     still compile every CUDA source;
#   - ccache wraps nvcc as it wraps the C++ compiler;
#   - forge links the CUDA runtime statically and cuBLAS/cuBLASLt privately;
#     none of them is needed by the public headers, so a CPU-only consumer of
#     a CUDA build only needs the toolkit's libraries at link time;
#   - cuDNN (cudnn.h and libcudnn, in the toolkit or the system's folders,
#     or under CUDNN_ROOT, such as a pip wheel's nvidia/cudnn) is linked
#     privately, by path, when found, and src/backend/cuda/cudnn/
#     conv_cudnn.cpp gives the conv entries; when it is missing,
#     cudnn/no_cudnn.cpp leaves them empty (any FORGE_CUDA mode).
# Sets FORGE_CUDA_ENABLED and FORGE_CUDNN_FOUND, and defines
# forge_cuda_configure_target(target).

string(TOUPPER "${FORGE_CUDA}" _forge_cuda_mode)
if(NOT _forge_cuda_mode MATCHES "^(AUTO|ON|TRUE|YES|1|OFF|FALSE|NO|0)$")
  message(FATAL_ERROR "FORGE_CUDA must be AUTO, ON or OFF (got \"${FORGE_CUDA}\")")
endif()

set(FORGE_CUDA_ENABLED OFF)
set(_forge_cuda_why "FORGE_CUDA=OFF")
if(NOT _forge_cuda_mode MATCHES "^(OFF|FALSE|NO|0)$")
  set(_forge_cuda_required OFF)
  if(NOT _forge_cuda_mode STREQUAL "AUTO")
    set(_forge_cuda_required ON)
  endif()

  find_package(CUDAToolkit QUIET)
  if(NOT CUDAToolkit_FOUND)
    set(_forge_cuda_why "no CUDA Toolkit found (set CUDAToolkit_ROOT)")
  else()
    if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND CUDAToolkit_NVCC_EXECUTABLE)
      set(CMAKE_CUDA_COMPILER "${CUDAToolkit_NVCC_EXECUTABLE}" CACHE FILEPATH "nvcc")
    endif()
    if(NOT CMAKE_CUDA_HOST_COMPILER AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      set(CMAKE_CUDA_HOST_COMPILER "${CMAKE_CXX_COMPILER}" CACHE FILEPATH "nvcc's host compiler")
    endif()
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(_forge_cuda_arch 90)
      find_program(FORGE_NVIDIA_SMI nvidia-smi)
      if(FORGE_NVIDIA_SMI)
        execute_process(COMMAND "${FORGE_NVIDIA_SMI}" -L
          OUTPUT_VARIABLE _forge_gpus RESULT_VARIABLE _forge_smi_rc ERROR_QUIET TIMEOUT 20)
        if(_forge_smi_rc EQUAL 0 AND _forge_gpus MATCHES "GPU [0-9]")
          set(_forge_cuda_arch native)
        endif()
      endif()
      set(CMAKE_CUDA_ARCHITECTURES ${_forge_cuda_arch} CACHE STRING
          "CUDA architectures (default: native with a visible GPU, else 90 with PTX)")
    endif()
    include(CheckLanguage)
    check_language(CUDA)
    if(CMAKE_CUDA_COMPILER)
      set(FORGE_CUDA_ENABLED ON)
    else()
      set(_forge_cuda_why "the CUDA Toolkit's nvcc cannot compile a test program")
    endif()
  endif()
  if(_forge_cuda_required AND NOT FORGE_CUDA_ENABLED)
    message(FATAL_ERROR "FORGE_CUDA=ON, but ${_forge_cuda_why}")
  endif()
endif()

if(NOT FORGE_CUDA_ENABLED)
  message(STATUS "forge: CUDA backend OFF (${_forge_cuda_why})")
  return()
endif()

enable_language(CUDA)
# CMake before 3.26 knows no C++20 flag for nvcc (its NVIDIA-CUDA module
# stops at 17) and refuses CUDA_STANDARD 20; nvcc 12+ takes -std=c++20.
if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_EXTENSIONS OFF)
if(FORGE_CCACHE_PROGRAM AND NOT CMAKE_CUDA_COMPILER_LAUNCHER)
  set(CMAKE_CUDA_COMPILER_LAUNCHER "${FORGE_CCACHE_PROGRAM}")
endif()
message(STATUS "forge: CUDA backend ON (CUDA ${CUDAToolkit_VERSION}, nvcc ${CMAKE_CUDA_COMPILER}, "
               "architectures ${CMAKE_CUDA_ARCHITECTURES})")

find_path(FORGE_CUDNN_INCLUDE_DIR cudnn.h
  HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_INCLUDE_DIRS}
  PATH_SUFFIXES include)
# libcudnn.so.9 too: the pip wheel (nvidia-cudnn-cu*) ships no unversioned
# link. NAMES_PER_DIR keeps the first folder that has either, CUDNN_ROOT's.
find_library(FORGE_CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 NAMES_PER_DIR
  HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_LIBRARY_DIR}
  PATH_SUFFIXES lib64 lib lib/x86_64-linux-gnu)
set(FORGE_CUDNN_FOUND OFF)
if(FORGE_CUDNN_INCLUDE_DIR AND FORGE_CUDNN_LIBRARY)
  set(FORGE_CUDNN_FOUND ON)
  message(STATUS "forge: cuDNN ${FORGE_CUDNN_LIBRARY} (conv on CUDA)")
else()
  message(STATUS "forge: cuDNN not found (set CUDNN_ROOT): conv is not supported on CUDA devices")
endif()

function(forge_cuda_configure_target target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-fno-math-errno>)
  # A static forge carries these as $<LINK_ONLY:...>, so the package config
  # runs find_dependency(CUDAToolkit) when CUDA is on.
  target_link_libraries(${target} PRIVATE CUDA::cudart_static CUDA::cublas CUDA::cublasLt)
  set_target_properties(${target} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
  # cuDNN's sources live outside src/CMakeLists.txt's glob of backend/cuda/.
  set(_cudnn_dir ${PROJECT_SOURCE_DIR}/src/backend/cuda/cudnn)
  if(FORGE_CUDNN_FOUND)
    target_sources(${target} PRIVATE ${_cudnn_dir}/conv_cudnn.cpp)
    target_include_directories(${target} SYSTEM PRIVATE ${FORGE_CUDNN_INCLUDE_DIR})
    target_link_libraries(${target} PRIVATE ${FORGE_CUDNN_LIBRARY})
  else()
    target_sources(${target} PRIVATE ${_cudnn_dir}/no_cudnn.cpp)
  endif()
endfunction()
