# One list per fact: the specialised feature sizes are listed once, in
# embedding/internal/feature_sizes.h (CEMB_FOR_EACH_FEATURE_SIZE), and every
# storage's table types follow from it (CEMB_FOR_EACH_TABLE_TYPE). Fails,
# naming the file, where a library's source spells out table types of two or
# more of those sizes by hand (e.g. "SsdTable<T, 16> ... SsdTable<T, 32>").
#
#   cmake -DROOT=<source dir> -P tests/lint/one_list.cmake
cmake_minimum_required(VERSION 3.20)
file(READ "${ROOT}/embedding/internal/feature_sizes.h" list_header)
string(REGEX MATCHALL "CEMB_FEATURE_SIZE_X\\(X, [0-9]+," entries "${list_header}")
string(REGEX MATCHALL "[0-9]+" sizes "${entries}")
list(LENGTH sizes n)
if(n LESS 2)
  message(FATAL_ERROR "one_list: found ${n} sizes in embedding/internal/feature_sizes.h; the lint needs updating")
endif()
list(JOIN sizes "|" alternatives)

set(offenders)
foreach(dir base embedding cache ssd tables data distributed dlrm train apps examples)
  file(GLOB_RECURSE files "${ROOT}/${dir}/*.h" "${ROOT}/${dir}/*.cc")
  foreach(f ${files})
    file(READ "${f}" text)
    string(REGEX MATCHALL "Table<[^<>;()]*,[ \n\\\\]*(${alternatives})>" hits "${text}")
    string(REGEX MATCHALL "[0-9]+>" ends "${hits}")  # each hit's size, with its '>'
    string(REPLACE ">" "" seen "${ends}")
    list(REMOVE_DUPLICATES seen)
    list(LENGTH seen distinct)
    if(distinct GREATER 1)
      file(RELATIVE_PATH rel "${ROOT}" "${f}")
      list(JOIN seen ", " named)
      list(APPEND offenders "${rel} (table types of sizes ${named})")
    endif()
  endforeach()
endforeach()
if(offenders)
  list(JOIN offenders "\n  " lines)
  message(FATAL_ERROR "one_list: table types spelled out by hand; use CEMB_FOR_EACH_TABLE_TYPE "
                      "(embedding/internal/feature_sizes.h):\n  ${lines}")
endif()
message(STATUS "one_list: every list of table types follows CEMB_FOR_EACH_FEATURE_SIZE (${alternatives})")
