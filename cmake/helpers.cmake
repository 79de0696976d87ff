include(GNUInstallDirs)

# Compiler flags for the code of an instruction set, applied to single
# translation units. Shared headers are never compiled with them.
set(CEMB_FLAGS_AVX2 -mavx2 -mfma -mf16c -mbmi2)
# GCC 12 warns falsely inside its own avx512fintrin.h (_mm512_undefined_*).
set(CEMB_FLAGS_AVX512 -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx2 -mfma -mf16c -mbmi2
    $<$<CXX_COMPILER_ID:GNU>:-Wno-maybe-uninitialized>)

# cemb_add_library(<name> SOURCES ... HEADERS ... [AVX2_SOURCES ...]
#                  [AVX512_SOURCES ...] [DEPS ...] [PRIVATE_DEPS ...])
# Declares the library target cemb_<name>, its alias cemb::<name>, its ISA
# translation units, and its installation under include/cemb/<name>/.
function(cemb_add_library name)
  cmake_parse_arguments(ARG "" ""
    "SOURCES;HEADERS;AVX2_SOURCES;AVX512_SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  set(sources ${ARG_SOURCES})
  if(CEMB_ENABLE_AVX2)
    list(APPEND sources ${ARG_AVX2_SOURCES})
    set_source_files_properties(${ARG_AVX2_SOURCES} PROPERTIES COMPILE_OPTIONS "${CEMB_FLAGS_AVX2}")
  endif()
  if(CEMB_ENABLE_AVX512)
    list(APPEND sources ${ARG_AVX512_SOURCES})
    set_source_files_properties(${ARG_AVX512_SOURCES} PROPERTIES COMPILE_OPTIONS "${CEMB_FLAGS_AVX512}")
  endif()
  add_library(cemb_${name} ${sources} ${ARG_HEADERS})
  add_library(cemb::${name} ALIAS cemb_${name})
  set_target_properties(cemb_${name} PROPERTIES EXPORT_NAME ${name}
                        POSITION_INDEPENDENT_CODE ON)
  target_compile_features(cemb_${name} PUBLIC cxx_std_20)
  # Public: kernels.h, compiled in the users' code, must not name the
  # kernels of an ISA the library was built without.
  target_compile_definitions(cemb_${name} PUBLIC
    $<$<BOOL:${CEMB_ENABLE_AVX2}>:CEMB_HAVE_AVX2_KERNELS=1>
    $<$<BOOL:${CEMB_ENABLE_AVX512}>:CEMB_HAVE_AVX512_KERNELS=1>)
  target_include_directories(cemb_${name} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/cemb>)
  target_link_libraries(cemb_${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  install(TARGETS cemb_${name} EXPORT CachedEmbeddingsTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  foreach(header ${ARG_HEADERS})
    get_filename_component(dir ${header} DIRECTORY)
    install(FILES ${header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/cemb/${name}/${dir})
  endforeach()
endfunction()

# cemb_add_test(<name> SOURCES ... DEPS ... [LABELS ...])
function(cemb_add_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE
    CEMB_SHARED_DIR="${PROJECT_SOURCE_DIR}/../shared"
    CEMB_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  # One label per test: gtest_discover_tests flattens a list of labels.
  # ctest -L matches a regular expression, so "cache_tsan" is selected by
  # both -L cache and -L tsan.
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "${ARG_LABELS}")
endfunction()

# cemb_add_bench(<name> SOURCES ... DEPS ...)
function(cemb_add_bench name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} benchmark::benchmark)
endfunction()
