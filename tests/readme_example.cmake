# Fails unless the first C++ block of README.md is examples/quickstart.cpp
# without its opening comment line, so the README's example stays compiled.
# Usage: cmake -DFORGE_SOURCE_DIR=<repo> -P readme_example.cmake
file(READ "${FORGE_SOURCE_DIR}/README.md" readme)
file(READ "${FORGE_SOURCE_DIR}/examples/quickstart.cpp" example)
string(FIND "${readme}" "```cpp\n" begin)
if(begin EQUAL -1)
  message(FATAL_ERROR "README.md has no ```cpp block")
endif()
math(EXPR begin "${begin} + 7")
string(SUBSTRING "${readme}" ${begin} -1 rest)
string(FIND "${rest}" "```" end)
string(SUBSTRING "${rest}" 0 ${end} block)
string(REGEX REPLACE "^//[^\n]*\n" "" example "${example}")
if(NOT block STREQUAL example)
  message(FATAL_ERROR "README.md's example differs from examples/quickstart.cpp")
endif()
