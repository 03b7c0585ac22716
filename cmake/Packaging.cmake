# What `cmake --install` puts where (GNUInstallDirs), the pkg-config file,
# the CMake package (incxdp::incxdp) and CPack's .deb. Included last from
# the root CMakeLists, once every installed target exists.
include(CMakePackageConfigHelpers)

# Topologies and the documentation.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/topo/topologies/
  DESTINATION ${CMAKE_INSTALL_DATADIR}/incxdp/topologies COMPONENT runtime)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR}
  COMPONENT runtime)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}
  COMPONENT runtime)

# pkg-config: incxdp.pc locates the prefix from its own directory.
file(RELATIVE_PATH INCXDP_PC_PREFIX "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
string(REGEX REPLACE "/$" "" INCXDP_PC_PREFIX "${INCXDP_PC_PREFIX}")
if(INCXDP_PC_PREFIX STREQUAL "")
  set(INCXDP_PC_PREFIX ".")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/incxdp.pc.in ${PROJECT_BINARY_DIR}/incxdp.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/incxdp.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
  COMPONENT dev)

# CMake package: find_package(incxdp) -> incxdp::incxdp.
set(INCXDP_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/incxdp)
install(EXPORT incxdpTargets NAMESPACE incxdp:: DESTINATION ${INCXDP_CMAKE_DIR} COMPONENT dev)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/incxdpConfig.cmake.in
  ${PROJECT_BINARY_DIR}/incxdpConfig.cmake INSTALL_DESTINATION ${INCXDP_CMAKE_DIR})
# 0.x: a minor release may change the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/incxdpConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/incxdpConfig.cmake
  ${PROJECT_BINARY_DIR}/incxdpConfigVersion.cmake DESTINATION ${INCXDP_CMAKE_DIR} COMPONENT dev)

# cpack -G DEB (in the build directory): one package with everything
# installed, the Python module included when it was built.
set(CPACK_PACKAGE_NAME incxdp)
set(CPACK_PACKAGE_VENDOR "incxdp")
set(CPACK_PACKAGE_CONTACT "incxdp maintainers <maintainers@incxdp.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "In-network AllReduce on Linux XDP: CLI, host library, BPF objects")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL OFF)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
# Debian ships binaries without debug info (RelWithDebInfo builds carry it).
set(CPACK_STRIP_FILES ON)
# dpkg-shlibdeps derives Depends from the ELF files (libbpf1, libxdp1,
# libyaml-cpp0.7, libfmt9, ...); iproute2 is what `incxdp topo` runs.
find_program(DPKG_SHLIBDEPS dpkg-shlibdeps)
if(DPKG_SHLIBDEPS)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "iproute2")
else()
  set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "libbpf1, libxdp1, libyaml-cpp0.7, libfmt9, libnl-genl-3-200, zlib1g, iproute2")
endif()
include(CPack)
