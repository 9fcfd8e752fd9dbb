# The Debian package (scripts/package-deb.sh: configure with -DHVDRUN_PACKAGE_DEB=ON and
# prefix /usr, then cpack -G DEB): what `cmake --install` puts under /usr, Debian's
# documentation files, and the dependencies computed from the binaries (dpkg-shlibdeps).
# Python: the package in /usr/lib/python3/dist-packages; python3-torch is recommended.

# Debian's layout: the man page compressed, the changelog and copyright file.
add_custom_command(OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/deb/hvdrun.1.gz
  COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/deb
  COMMAND gzip -9nc ${PROJECT_SOURCE_DIR}/man/hvdrun.1 > ${CMAKE_CURRENT_BINARY_DIR}/deb/hvdrun.1.gz
  DEPENDS ${PROJECT_SOURCE_DIR}/man/hvdrun.1)
# The changelog's date: the commit's (SOURCE_DATE_EPOCH, set by package-deb.sh), so that
# the same sources make the same package.
string(TIMESTAMP HVDRUN_DEB_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)
set(HVDRUN_DEB_MAINTAINER "hvdrun maintainers <hvdrun@users.noreply.github.com>")
configure_file(${PROJECT_SOURCE_DIR}/packaging/debian/changelog.in ${CMAKE_CURRENT_BINARY_DIR}/deb/changelog @ONLY)
add_custom_command(OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/deb/changelog.gz
  COMMAND gzip -9nc ${CMAKE_CURRENT_BINARY_DIR}/deb/changelog > ${CMAKE_CURRENT_BINARY_DIR}/deb/changelog.gz
  DEPENDS ${CMAKE_CURRENT_BINARY_DIR}/deb/changelog)
add_custom_target(hvdrun_deb_docs ALL DEPENDS ${CMAKE_CURRENT_BINARY_DIR}/deb/hvdrun.1.gz
  ${CMAKE_CURRENT_BINARY_DIR}/deb/changelog.gz)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/deb/hvdrun.1.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/deb/changelog.gz ${PROJECT_SOURCE_DIR}/packaging/debian/copyright
  DESTINATION ${CMAKE_INSTALL_DOCDIR})

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME hvdrun)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${HVDRUN_DEB_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "launcher and runtime for distributed training (horovodrun compatible)")
# The extended description (CPack puts the summary above it).
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "hvdrun starts a data-parallel training job on the slots of one or many
hosts (over SSH, Slurm or a command such as kubectl exec), as horovodrun and
mpirun do, and its workers' collectives (allreduce, allgather, broadcast, ...)
run over TCP and shared memory. The package holds hvdrun, libhvdrun with its C
header, CMake package and pkg-config file, the Python package hvdrun (a
Horovod-style hvdrun.torch), the horovod shim of --horovod-compat, the man page
and bash and zsh completion.")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # hvdrun_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)  # the shlibs file
set(CPACK_DEBIAN_PACKAGE_DEPENDS "python3:any")  # the Python package and the horovod shim
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3-torch")
# ldconfig runs by dpkg's trigger (triggers), not from postinst and postrm as CPack would
# write them: our own postinst and postrm keep CPack from writing its own.
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/packaging/debian/prerm
  ${PROJECT_SOURCE_DIR}/packaging/debian/postinst ${PROJECT_SOURCE_DIR}/packaging/debian/postrm
  ${PROJECT_SOURCE_DIR}/packaging/debian/triggers)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_STRIP_FILES ON)
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
include(CPack)
