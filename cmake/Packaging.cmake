# Why: programs outside this tree use flashjit from an install, through
# find_package(flashjit CONFIG) or pkg-config. This file installs
# libflashjit.so, the public headers and nothing else of the layers' headers,
# the CMake package (flashjit::flashjit, flashjit::cxx) and flashjit.pc.
include(CMakePackageConfigHelpers)

# The C API's header, the C++ API's headers (FlashJIT.h, Backward.h,
# Decode.h) and
# every project header they include, directly or not. The configure step below checks this
# list against FlashJIT.h's include chain.
set(FLASHJIT_PUBLIC_HEADERS
  runtime/include/flashjit/flashjit.h
  runtime/include/flashjit/FlashJIT.h
  runtime/include/flashjit/Backward.h
  runtime/include/flashjit/Decode.h
  runtime/include/flashjit/Runtime/CacheOptions.h
  runtime/include/flashjit/Runtime/DeviceInfo.h
  runtime/include/flashjit/Runtime/ErrorCode.h
  runtime/include/flashjit/Runtime/TunedConfigs.h
  runtime/include/flashjit/Runtime/TuningOptions.h
  dialect/include/flashjit/Dialect/AttentionSpec.h
  templates/include/flashjit/Templates/DecodeKernel.h
  templates/include/flashjit/Templates/KernelABI.h
  templates/include/flashjit/Templates/Target.h
  templates/include/flashjit/Templates/TileConfig.h
  autotune/include/flashjit/Autotune/DecodeTuning.h
  autotune/include/flashjit/Autotune/ShapeBuckets.h
  autotune/include/flashjit/Autotune/TuningDatabase.h
)

# FlashJIT.h's include chain within the project: an installed header that
# includes one left out does not compile, and one listed but never included
# is an internal header published for nothing.
set(_fj_include_dirs runtime/include dialect/include templates/include
                     autotune/include compiler/include)
set(_fj_closure runtime/include/flashjit/flashjit.h)
set(_fj_queue flashjit/FlashJIT.h flashjit/Backward.h flashjit/Decode.h)
while(_fj_queue)
  list(POP_FRONT _fj_queue _fj_name)
  set(_fj_path "")
  foreach(_fj_dir IN LISTS _fj_include_dirs)
    if(EXISTS ${PROJECT_SOURCE_DIR}/${_fj_dir}/${_fj_name})
      set(_fj_path ${_fj_dir}/${_fj_name})
      break()
    endif()
  endforeach()
  if(NOT _fj_path)
    message(FATAL_ERROR "FlashJIT.h's chain includes ${_fj_name}, which no "
                        "layer's include folder has")
  endif()
  if(_fj_path IN_LIST _fj_closure)
    continue()
  endif()
  list(APPEND _fj_closure ${_fj_path})
  set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY
               CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${_fj_path})
  file(STRINGS ${PROJECT_SOURCE_DIR}/${_fj_path} _fj_lines
       REGEX "^#include \"flashjit/")
  foreach(_fj_line IN LISTS _fj_lines)
    string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" _fj_inc "${_fj_line}")
    list(APPEND _fj_queue ${_fj_inc})
  endforeach()
endwhile()
set(_fj_missing ${_fj_closure})
list(REMOVE_ITEM _fj_missing ${FLASHJIT_PUBLIC_HEADERS})
set(_fj_extra ${FLASHJIT_PUBLIC_HEADERS})
list(REMOVE_ITEM _fj_extra ${_fj_closure})
if(_fj_missing OR _fj_extra)
  message(FATAL_ERROR "FLASHJIT_PUBLIC_HEADERS (cmake/Packaging.cmake) is not "
    "flashjit.h plus FlashJIT.h's include chain: add [${_fj_missing}], "
    "remove [${_fj_extra}]")
endif()

foreach(_fj_header IN LISTS FLASHJIT_PUBLIC_HEADERS)
  string(REGEX REPLACE "^[a-z]+/include/" "" _fj_rel ${_fj_header})
  get_filename_component(_fj_subdir ${_fj_rel} DIRECTORY)
  install(FILES ${_fj_header}
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/${_fj_subdir})
endforeach()

install(TARGETS FlashjitC EXPORT flashjitTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS FlashjitCxx EXPORT flashjitCxxTargets)

set(FLASHJIT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/flashjit)
install(EXPORT flashjitTargets NAMESPACE flashjit::
        DESTINATION ${FLASHJIT_CMAKE_DIR})
install(EXPORT flashjitCxxTargets NAMESPACE flashjit::
        DESTINATION ${FLASHJIT_CMAKE_DIR})
configure_package_config_file(cmake/flashjitConfig.cmake.in
  ${PROJECT_BINARY_DIR}/flashjitConfig.cmake
  INSTALL_DESTINATION ${FLASHJIT_CMAKE_DIR})
# A 0.x minor version may change the C++ API (the soname is major.minor):
# 0.4.2 serves a request for 0.4 or 0.4.1, not one for 0.3 or 0.5.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/flashjitConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/flashjitConfig.cmake
              ${PROJECT_BINARY_DIR}/flashjitConfigVersion.cmake
        DESTINATION ${FLASHJIT_CMAKE_DIR})

# flashjit.pc finds its prefix from its own place, so the install can move.
set(_fj_pcdir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
string(REGEX REPLACE "[^/]+" ".." FLASHJIT_PC_PREFIX "${_fj_pcdir}")
# dlpack's folder when the compiler does not search it anyway.
set(FLASHJIT_PC_DLPACK_CFLAGS "")
if(NOT FLASHJIT_DLPACK_INCLUDE_DIR IN_LIST CMAKE_C_IMPLICIT_INCLUDE_DIRECTORIES)
  set(FLASHJIT_PC_DLPACK_CFLAGS " -I${FLASHJIT_DLPACK_INCLUDE_DIR}")
endif()
configure_file(cmake/flashjit.pc.in ${PROJECT_BINARY_DIR}/flashjit.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/flashjit.pc DESTINATION ${_fj_pcdir})
