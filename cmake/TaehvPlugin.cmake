# taehv_add_plugin(<name> SOURCES ... [LIBRARIES ...] [INSTALL_DIR dir])
# Builds backend plugin <name> as the MODULE library taehv_plugin_<name>.so (ALIAS taehv::plugin_<name>) with
# hidden visibility: only the two entry symbols of taehv/plugin_api.h are exported, nothing of the static
# libraries linked in either. Installs it into INSTALL_DIR, default TAEHV_PLUGIN_INSTALL_DIR.
#
# The one definition, for both sides: the build tree includes it from the top-level CMakeLists.txt (plugins go to
# TAEHV_PLUGIN_OUTPUT_DIR, the build tree's plugin folder, and get the project's warnings), the installed package
# from taehvConfig.cmake (out-of-tree backends; installed into the prefix's plugin folder).
function(taehv_add_plugin name)
  cmake_parse_arguments(P "" "INSTALL_DIR" "SOURCES;LIBRARIES" ${ARGN})
  if(NOT P_INSTALL_DIR)
    set(P_INSTALL_DIR "${TAEHV_PLUGIN_INSTALL_DIR}")
  endif()
  set(target taehv_plugin_${name})
  add_library(${target} MODULE ${P_SOURCES})
  add_library(taehv::plugin_${name} ALIAS ${target})
  set_target_properties(${target} PROPERTIES
    PREFIX ""
    OUTPUT_NAME "taehv_plugin_${name}"
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  if(TAEHV_PLUGIN_OUTPUT_DIR)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${TAEHV_PLUGIN_OUTPUT_DIR}")
  endif()
  target_link_libraries(${target} PRIVATE taehv::plugin_api ${P_LIBRARIES})
  # --exclude-libs: static libraries linked in (taehv::process, ...) export nothing either.
  target_link_options(${target} PRIVATE -Wl,--no-undefined -Wl,--exclude-libs,ALL)
  if(COMMAND taehv_enable_warnings)
    taehv_enable_warnings(${target})
  endif()
  install(TARGETS ${target} LIBRARY DESTINATION "${P_INSTALL_DIR}")
endfunction()
