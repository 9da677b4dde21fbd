# The per-line scan the source-reading layer checks share
# (check_rocksdb.cmake, check_queue_keys.cmake, check_server_includes.cmake):
# what the build's include roots cannot prove alone (system headers,
# string literals, or a layer that links what it must not include).
#
#   include(${CMAKE_CURRENT_LIST_DIR}/line_scan.cmake)
#   line_scan(<out_var> ROOT <dir> FILES <file>... MATCH <regex>
#             [ONLY_PATHS <regex>] [SKIP_PATHS <regex>]
#             [ALLOW "<path>|<line regex>"...] [USED_ALLOWANCES <var>])
#
# Appends to <out_var> (a list, in the caller's scope) "<path>:<line>:
# <text>" for every line of FILES that matches MATCH, where <path> is the
# file's path relative to ROOT, filtered by ONLY_PATHS / SKIP_PATHS (regexes
# on <path>), except lines an ALLOW entry names: the exact <path> and a
# line matching its regex (no ';' in an entry: it would split the list).
# USED_ALLOWANCES gets the ALLOW entries that matched something, so a check
# can say which exceptions are still in use.
function(line_scan out_var)
  cmake_parse_arguments(S "" "ROOT;MATCH;ONLY_PATHS;SKIP_PATHS;USED_ALLOWANCES" "FILES;ALLOW" ${ARGN})
  if(NOT S_ROOT OR NOT S_MATCH)
    message(FATAL_ERROR "line_scan: ROOT and MATCH are required")
  endif()
  set(found ${${out_var}})
  set(used "")
  if(S_USED_ALLOWANCES)
    set(used ${${S_USED_ALLOWANCES}})
  endif()
  foreach(f ${S_FILES})
    file(RELATIVE_PATH rel ${S_ROOT} ${f})
    if(S_ONLY_PATHS AND NOT rel MATCHES "${S_ONLY_PATHS}")
      continue()
    endif()
    if(S_SKIP_PATHS AND rel MATCHES "${S_SKIP_PATHS}")
      continue()
    endif()
    file(STRINGS ${f} lines)
    set(n 0)
    foreach(line IN LISTS lines)
      math(EXPR n "${n} + 1")
      if(NOT line MATCHES "${S_MATCH}")
        continue()
      endif()
      set(allowed FALSE)
      foreach(a ${S_ALLOW})
        string(FIND "${a}" "|" bar)
        string(SUBSTRING "${a}" 0 ${bar} afile)
        math(EXPR from "${bar} + 1")
        string(SUBSTRING "${a}" ${from} -1 aline)
        if(rel STREQUAL afile AND line MATCHES "${aline}")
          set(allowed TRUE)
          list(APPEND used "${a}")
        endif()
      endforeach()
      if(NOT allowed)
        list(APPEND found "${rel}:${n}: ${line}")
      endif()
    endforeach()
  endforeach()
  set(${out_var} ${found} PARENT_SCOPE)
  if(S_USED_ALLOWANCES)
    list(REMOVE_DUPLICATES used)
    set(${S_USED_ALLOWANCES} ${used} PARENT_SCOPE)
  endif()
endfunction()
