# Run with cmake -P. Installs a built forge tree into a fresh prefix, then
# configures, builds and runs examples/consumer against it.
#
# Inputs (-D): FORGE_BUILD_DIR FORGE_CONSUMER_SOURCE_DIR FORGE_WORK_DIR
#   FORGE_CONFIG FORGE_MULTI_CONFIG FORGE_GENERATOR FORGE_MAKE_PROGRAM
#   FORGE_CXX_COMPILER FORGE_CXX_COMPILER_LAUNCHER FORGE_EXTRA_PREFIX_PATH ('|'-separated)
#   FORGE_TBB_DIR FORGE_CUDAToolkit_ROOT
# Eigen is a private dependency: the installed package must not name it, and
# the consumer is configured with Eigen hidden (CMAKE_DISABLE_FIND_PACKAGE_Eigen3).
cmake_minimum_required(VERSION 3.25)

foreach(var FORGE_BUILD_DIR FORGE_CONSUMER_SOURCE_DIR FORGE_WORK_DIR FORGE_GENERATOR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "consumer_package: ${var} is not set")
  endif()
endforeach()

set(prefix "${FORGE_WORK_DIR}/prefix")
set(build "${FORGE_WORK_DIR}/build")
file(REMOVE_RECURSE "${FORGE_WORK_DIR}")
file(MAKE_DIRECTORY "${prefix}" "${build}")

set(config_args)
if(FORGE_CONFIG)
  set(config_args --config "${FORGE_CONFIG}")
endif()

message(STATUS "consumer_package: installing ${FORGE_BUILD_DIR} into ${prefix}")
execute_process(
  COMMAND "${CMAKE_COMMAND}" --install "${FORGE_BUILD_DIR}" --prefix "${prefix}" ${config_args}
  COMMAND_ECHO STDOUT
  COMMAND_ERROR_IS_FATAL ANY)

file(GLOB_RECURSE package_files "${prefix}/*.cmake")
foreach(file IN LISTS package_files)
  file(STRINGS "${file}" eigen_lines REGEX "Eigen3")
  if(eigen_lines)
    message(FATAL_ERROR "consumer_package: ${file} names Eigen3, a private dependency: ${eigen_lines}")
  endif()
endforeach()

set(prefix_path "${prefix}")
if(FORGE_EXTRA_PREFIX_PATH)
  string(REPLACE "|" ";" extra_prefix_path "${FORGE_EXTRA_PREFIX_PATH}")
  list(APPEND prefix_path ${extra_prefix_path})
endif()

set(configure_args
  -S "${FORGE_CONSUMER_SOURCE_DIR}"
  -B "${build}"
  -G "${FORGE_GENERATOR}"
  "-DCMAKE_PREFIX_PATH=${prefix_path}")
if(FORGE_MAKE_PROGRAM)
  list(APPEND configure_args "-DCMAKE_MAKE_PROGRAM=${FORGE_MAKE_PROGRAM}")
endif()
if(FORGE_CXX_COMPILER)
  list(APPEND configure_args "-DCMAKE_CXX_COMPILER=${FORGE_CXX_COMPILER}")
endif()
if(FORGE_CXX_COMPILER_LAUNCHER)
  list(APPEND configure_args "-DCMAKE_CXX_COMPILER_LAUNCHER=${FORGE_CXX_COMPILER_LAUNCHER}")
endif()
if(FORGE_CONFIG AND NOT FORGE_MULTI_CONFIG)
  list(APPEND configure_args "-DCMAKE_BUILD_TYPE=${FORGE_CONFIG}")
endif()
list(APPEND configure_args "-DCMAKE_DISABLE_FIND_PACKAGE_Eigen3=ON")
# Dependencies the main build found at non-default locations.
if(FORGE_TBB_DIR)
  list(APPEND configure_args "-DTBB_DIR=${FORGE_TBB_DIR}")
endif()
if(FORGE_CUDAToolkit_ROOT)
  list(APPEND configure_args "-DCUDAToolkit_ROOT=${FORGE_CUDAToolkit_ROOT}")
endif()

message(STATUS "consumer_package: configuring ${FORGE_CONSUMER_SOURCE_DIR}")
execute_process(
  COMMAND "${CMAKE_COMMAND}" ${configure_args}
  COMMAND_ECHO STDOUT
  COMMAND_ERROR_IS_FATAL ANY)

message(STATUS "consumer_package: building")
execute_process(
  COMMAND "${CMAKE_COMMAND}" --build "${build}" ${config_args}
  COMMAND_ECHO STDOUT
  COMMAND_ERROR_IS_FATAL ANY)

set(exe "${build}/consumer")
if(FORGE_MULTI_CONFIG AND FORGE_CONFIG)
  set(exe "${build}/${FORGE_CONFIG}/consumer")
endif()
message(STATUS "consumer_package: running ${exe}")
execute_process(
  COMMAND "${exe}"
  COMMAND_ECHO STDOUT
  COMMAND_ERROR_IS_FATAL ANY)

message(STATUS "consumer_package: OK")
