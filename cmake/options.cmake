# Every build option of CachedEmbeddings, in one place.
option(CEMB_BUILD_TESTS "Build the GoogleTest suites under tests/" ${PROJECT_IS_TOP_LEVEL})
option(CEMB_BUILD_BENCH "Build the Google Benchmark programs under bench/" ${PROJECT_IS_TOP_LEVEL})
option(CEMB_BUILD_APPS "Build the executables under apps/ (dlrm-train, dlrm-data, ...)" ${PROJECT_IS_TOP_LEVEL})
option(CEMB_BUILD_DLRM "Build cemb::dlrm, cemb::distributed and dlrm-train (needs oneDNN, yaml-cpp and Open MPI); OFF builds the table libraries alone" ON)
option(CEMB_ENABLE_AVX512 "Compile the AVX-512 kernels (chosen at run time only where the CPU has them)" ON)
option(CEMB_ENABLE_AVX2 "Compile the AVX2+FMA kernels (chosen at run time only where the CPU has them)" ON)
set(CEMB_SANITIZE "" CACHE STRING
    "Sanitizers for the whole build: '' (none), 'address;undefined', or 'thread'")
option(CEMB_BUILD_FUZZERS "Build the libFuzzer targets under fuzz/ (needs clang)" OFF)
if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  set(CMAKE_BUILD_TYPE Release CACHE STRING "Build type (Release by default)" FORCE)
endif()
