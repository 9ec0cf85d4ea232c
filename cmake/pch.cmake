# Precompiled headers (SUBAGENT_PCH, off by default until a whole build and suite have run with it).
# nlohmann/json reaches most translation units and costs seconds of parsing in each; Boost.Asio and
# <filesystem> follow. Every library of the project that links nlohmann/json reuses one of two
# prebuilt headers, chosen by what the library links (so the PCH follows the link graph: a library
# that does not link Boost gets no Asio): json + std, or json + std + Asio. Each is compiled once.
# The test binaries share a third one that adds doctest. Executables of one source (the programs,
# benchmarks and fuzz targets) are left alone: a PCH of their own would cost more than it saves,
# and an executable cannot reuse a library's PCH (-fPIE against -fPIC).
#
# PCH only saves parsing: a header that a file forgets to include is still found through the PCH, so
# a build with SUBAGENT_PCH=OFF (the default for now) is the check that every file includes what it
# uses. Clang (the sanitizer and fuzz builds) builds these PCHs too, with -fno-pch-timestamp.
#
# ccache caches compilations that use a PCH only with this sloppiness (the .gch is newer than the
# compilation's start and carries __DATE__/__TIME__), set through the launcher in CMakeLists.txt.
set(SUBAGENT_PCH_CCACHE_SLOPPINESS pch_defines,time_macros,include_file_mtime,include_file_ctime)

set(SUBAGENT_PCH_STD
  <algorithm> <chrono> <cstdint> <cstring> <filesystem> <fstream> <functional> <map> <memory>
  <optional> <set> <sstream> <stdexcept> <string> <string_view> <vector>)
set(SUBAGENT_PCH_JSON <nlohmann/json.hpp> ${SUBAGENT_PCH_STD})
set(SUBAGENT_PCH_ASIO ${SUBAGENT_PCH_JSON}
  <boost/asio/io_context.hpp> <boost/asio/post.hpp> <boost/asio/steady_timer.hpp>
  <boost/asio/posix/stream_descriptor.hpp>)
set(SUBAGENT_PCH_TEST ${SUBAGENT_PCH_ASIO} <doctest/doctest.h>)

# Every build-system target defined under `dir`, recursively.
function(_subagent_targets_under dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub ${subdirs})
    _subagent_targets_under(${sub} more)
    list(APPEND targets ${more})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

# Whether `target` links `wanted`, directly or through the project's own libraries.
function(_subagent_links target wanted out)
  set(seen)
  set(todo ${target})
  set(found OFF)
  while(todo)
    list(POP_FRONT todo t)
    if(t IN_LIST seen OR NOT TARGET ${t})
      continue()
    endif()
    list(APPEND seen ${t})
    get_target_property(aliased ${t} ALIASED_TARGET)
    if(aliased)
      set(t ${aliased})
    endif()
    if(t STREQUAL wanted)
      set(found ON)
      break()
    endif()
    get_target_property(imported ${t} IMPORTED)
    set(libs)
    if(NOT imported)
      get_target_property(type ${t} TYPE)
      if(NOT type STREQUAL "INTERFACE_LIBRARY")
        get_target_property(libs ${t} LINK_LIBRARIES)
      endif()
    endif()
    get_target_property(ilibs ${t} INTERFACE_LINK_LIBRARIES)
    foreach(l ${libs} ${ilibs})
      if(l AND NOT l MATCHES "^\\$<" AND NOT l MATCHES "-NOTFOUND$")
        list(APPEND todo ${l})
      endif()
    endforeach()
  endwhile()
  set(${out} ${found} PARENT_SCOPE)
endfunction()

# Number of C++ sources of `target` (generated and generator-expression entries included).
function(_subagent_cxx_source_count target out)
  get_target_property(srcs ${target} SOURCES)
  set(n 0)
  foreach(s ${srcs})
    if(s MATCHES "\\.(cpp|cc|cxx)(\\.in)?$")
      math(EXPR n "${n} + 1")
    endif()
  endforeach()
  set(${out} ${n} PARENT_SCOPE)
endfunction()

# Sources with their own COMPILE_DEFINITIONS would not match the PCH's macros (clang refuses such a
# PCH): they are compiled without it.
function(_subagent_skip_pch_for_own_definitions target)
  get_target_property(srcs ${target} SOURCES)
  get_target_property(dir ${target} SOURCE_DIR)
  foreach(s ${srcs})
    if(s MATCHES "^\\$<")
      continue()
    endif()
    get_source_file_property(defs ${s} TARGET_DIRECTORY ${target} COMPILE_DEFINITIONS)
    if(defs)
      set_source_files_properties(${s} TARGET_DIRECTORY ${target} PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
    endif()
  endforeach()
endfunction()

# Call once, after every target is defined, with the test binaries (none without BUILD_TESTING): the
# first builds the tests' PCH and the others reuse it (they share their compile flags).
function(subagent_precompile_headers)
  if(NOT SUBAGENT_PCH)
    return()
  endif()
  set(test_targets ${ARGN})

  # The hosts of the libraries' PCHs: object libraries compiled with the flags every library has.
  foreach(kind JSON ASIO)
    string(TOLOWER ${kind} k)
    add_library(subagent_pch_${k} OBJECT ${PROJECT_SOURCE_DIR}/cmake/pch_host.cpp)
    target_link_libraries(subagent_pch_${k} PRIVATE subagent_flags nlohmann_json::nlohmann_json Boost::headers
                          Threads::Threads)
    target_precompile_headers(subagent_pch_${k} PRIVATE ${SUBAGENT_PCH_${kind}})
  endforeach()

  if(test_targets)
    list(GET test_targets 0 test_host)
    target_precompile_headers(${test_host} PRIVATE ${SUBAGENT_PCH_TEST})
    _subagent_skip_pch_for_own_definitions(${test_host})
    foreach(t ${test_targets})
      if(NOT t STREQUAL test_host)
        target_precompile_headers(${t} REUSE_FROM ${test_host})
        _subagent_skip_pch_for_own_definitions(${t})
      endif()
    endforeach()
  endif()

  _subagent_targets_under(${PROJECT_SOURCE_DIR} all_targets)
  foreach(t ${all_targets})
    get_target_property(type ${t} TYPE)
    if(NOT type MATCHES "^(STATIC_LIBRARY|SHARED_LIBRARY|OBJECT_LIBRARY)$" OR t MATCHES "^subagent_pch_"
       OR t IN_LIST test_targets)
      continue()
    endif()
    _subagent_cxx_source_count(${t} n)
    if(n EQUAL 0)
      continue()
    endif()
    _subagent_links(${t} nlohmann_json::nlohmann_json json)
    if(NOT json)
      continue()
    endif()
    _subagent_links(${t} Boost::headers asio)
    if(asio)
      target_precompile_headers(${t} REUSE_FROM subagent_pch_asio)
    else()
      target_precompile_headers(${t} REUSE_FROM subagent_pch_json)
    endif()
    _subagent_skip_pch_for_own_definitions(${t})
  endforeach()
endfunction()
