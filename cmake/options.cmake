# Every build option of CachedEmbeddings, in one place.
option(CEMB_BUILD_TESTS "Build the GoogleTest suites under tests/" ${PROJECT_IS_TOP_LEVEL})
option(CEMB_BUILD_BENCH "Build the Google Benchmark programs under bench/" ${PROJECT_IS_TOP_LEVEL})
option(CEMB_BUILD_APPS "Build the executables under apps/ (dlrm-train, dlrm-data, ...)" ${PROJECT_IS_TOP_LEVEL})
option(CEMB_BUILD_DLRM "Build cemb::dlrm, cemb::distributed and dlrm-train (needs oneDNN, yaml-cpp and Open MPI); OFF builds the table libraries alone" ON)
option(CEMB_ENABLE_AVX512 "Compile the AVX-512 kernels (chosen at run time only where the CPU has them)" ON)
option(CEMB_ENABLE_AVX2 "Compile the AVX2+FMA kernels (chosen at run time only where the CPU has them)" ON)
option(CEMB_BUILD_PYTHON "Build the Python module cemb under python/ (needs pybind11-dev and python3-dev; its tests python3-torch, python3-numpy and python3-pytest)" ${PROJECT_IS_TOP_LEVEL})
# Debian's interpreter, whose dist-packages hold python3-torch; a python3
# earlier on PATH (pyenv) has none of Debian's packages.
if(EXISTS /usr/bin/python3 AND NOT DEFINED Python3_EXECUTABLE)
  set(Python3_EXECUTABLE /usr/bin/python3 CACHE FILEPATH "The Python the module is built for and tested with")
endif()
set(CEMB_PYTHON_INSTALL_DIR lib/python3/dist-packages CACHE STRING
    "Where `cmake --install` puts the package cemb, under the prefix (Debian's python3 reads /usr/local/lib/python3/dist-packages)")
set(CEMB_SANITIZE "" CACHE STRING
    "Sanitizers for the whole build: '' (none), 'address;undefined', or 'thread'")
option(CEMB_BUILD_FUZZERS "Build the libFuzzer targets under fuzz/ (needs clang)" OFF)
if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  set(CMAKE_BUILD_TYPE Release CACHE STRING "Build type (Release by default)" FORCE)
endif()
