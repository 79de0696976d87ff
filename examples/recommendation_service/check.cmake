# Included by tests/consumer/run_consumer.cmake once the service is built
# against the installed package (WORK_DIR/build): runs it briefly, bounded by
# a request count (never by time), and checks what it printed, not how fast:
# the report's lines, a hit rate above 0 for every table, eviction ran
# (rows evicted, no flush); then that bad flags exit 2 with a message.
set(service ${WORK_DIR}/build/recommendation_service)
set(tables 4)
execute_process(
  COMMAND ${service} --threads 4 --requests 40000 --rows 200000 --tables ${tables} --cache_fraction 0.1
          --slow_tier ${WORK_DIR}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "recommendation_service exited with ${rc}")
endif()
foreach(line_regex
    "model: ${tables} tables x 200000 rows x 64 floats on a file in [^\n]*CLOCK cache of [0-9]+ rows"
    "load: 4 workers, closed loop"
    "served 40000 requests, 5120000 lookups in [0-9.]+ s: [0-9.e+]+ lookups/s"
    "latency \\(us\\): p50 [0-9.]+  p99 [0-9.]+  p99\\.9 [0-9.]+  max [0-9.]+")
  if(NOT out MATCHES "${line_regex}")
    message(FATAL_ERROR "no line matches: ${line_regex}")
  endif()
endforeach()
string(REGEX MATCHALL "t[0-9]+: hit rate [^\n]*" table_lines "${out}")
list(LENGTH table_lines n)
if(NOT n EQUAL tables)
  message(FATAL_ERROR "${n} table lines, expected ${tables}")
endif()
foreach(line IN LISTS table_lines)
  if(NOT line MATCHES "hit rate ([0-9.]+), lookups 1280000, migrations ([0-9]+), rows evicted ([0-9]+) in [0-9]+ eviction rounds, flushes 0$")
    message(FATAL_ERROR "unexpected table line: ${line}")
  endif()
  if(NOT CMAKE_MATCH_1 GREATER 0 OR NOT CMAKE_MATCH_2 GREATER 0 OR NOT CMAKE_MATCH_3 GREATER 0)
    message(FATAL_ERROR "a table with no hits, no migrations or no eviction: ${line}")
  endif()
endforeach()

# Bad flags: exit status 2 and a message naming the flag.
foreach(case
    "--threads|0|--threads: expected an integer in \\[1, 256\\], got '0'"
    "--cache_fraction|1.5|--cache_fraction: expected a fraction of the rows in \\(0, 1\\], got '1.5'"
    "--rows|12x|--rows: expected an integer in \\[1, 2\\^31\\), got '12x'"
    "--requests|-3|--requests: expected an integer > 0, got '-3'"
    "--frobnicate|1|unknown flag '--frobnicate'"
    "--tables|NONE|--tables: missing its value")
  string(REPLACE "|" ";" parts "${case}")
  list(GET parts 0 flag)
  list(GET parts 1 value)
  list(GET parts 2 expected)
  if(value STREQUAL "NONE")
    set(args ${flag})
  else()
    set(args ${flag} ${value})
  endif()
  execute_process(COMMAND ${service} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 2 OR NOT err MATCHES "^recommendation_service: ${expected}\n")
    message(FATAL_ERROR "${service} ${args}: exit ${rc}, stderr:\n${err}\nexpected exit 2 and: ${expected}")
  endif()
endforeach()
execute_process(COMMAND ${service} --seconds 1 --requests 5 RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "give one of them, not both")
  message(FATAL_ERROR "--seconds with --requests: exit ${rc}, stderr:\n${err}")
endif()
message("recommendation_service: report and bad flags as expected")
