# Install: taehv-run (+ taehv-train) into bin/, plugins into lib/taehv/plugins, the plugin API headers
# (taehv/plugin_api.h, taehv/checked.h, taehv/parse.h, taehv/env.h, taehv/shell_quote.h, taehv/utf8.h) into
# include/taehv/, and a
# CMake package: find_package(taehv) gives the imported target taehv::plugin_api and the function taehv_add_plugin()
# (cmake/TaehvPlugin.cmake, the same file the build tree uses) for out-of-tree backends.
include(CMakePackageConfigHelpers)
install(TARGETS taehv-run RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET taehv-train)
  install(TARGETS taehv-train RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(TARGETS taehv_plugin_api EXPORT taehvTargets)
install(FILES core/plugin_api/include/taehv/plugin_api.h core/plugin_api/include/taehv/parse.h
  core/plugin_api/include/taehv/checked.h core/plugin_api/include/taehv/env.h
  core/plugin_api/include/taehv/shell_quote.h core/plugin_api/include/taehv/utf8.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/taehv)
set(TAEHV_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/taehv)
install(EXPORT taehvTargets NAMESPACE taehv:: DESTINATION ${TAEHV_CMAKE_DIR})
configure_package_config_file(cmake/taehvConfig.cmake.in ${PROJECT_BINARY_DIR}/taehvConfig.cmake
  INSTALL_DESTINATION ${TAEHV_CMAKE_DIR} PATH_VARS TAEHV_PLUGIN_SUBDIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/taehvConfigVersion.cmake COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/taehvConfig.cmake ${PROJECT_BINARY_DIR}/taehvConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/TaehvPlugin.cmake DESTINATION ${TAEHV_CMAKE_DIR})
