# taehv_add_plugin(<name> SOURCES ... [LIBRARIES ...])
# Builds backend plugin <name> as a MODULE library named taehv_plugin_<name>.so into the plugin folder of
# the build tree, with hidden visibility (only the entry symbols of taehv/plugin_api.h are exported), and
# installs it into the plugin folder of the prefix.
function(taehv_add_plugin name)
  cmake_parse_arguments(P "" "" "SOURCES;LIBRARIES" ${ARGN})
  set(target taehv_plugin_${name})
  add_library(${target} MODULE ${P_SOURCES})
  add_library(taehv::plugin_${name} ALIAS ${target})
  set_target_properties(${target} PROPERTIES
    PREFIX ""
    OUTPUT_NAME "taehv_plugin_${name}"
    LIBRARY_OUTPUT_DIRECTORY "${TAEHV_PLUGIN_OUTPUT_DIR}"
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  target_link_libraries(${target} PRIVATE taehv::plugin_api ${P_LIBRARIES})
  # --exclude-libs: static libraries linked in (taehv::process, ...) export nothing either.
  target_link_options(${target} PRIVATE -Wl,--no-undefined -Wl,--exclude-libs,ALL)
  taehv_enable_warnings(${target})
  install(TARGETS ${target} LIBRARY DESTINATION "${TAEHV_PLUGIN_SUBDIR}")
endfunction()
