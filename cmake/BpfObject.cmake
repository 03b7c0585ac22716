# bpf_object(NAME SOURCE): compile SOURCE with clang -target bpf (with BTF),
# generate NAME.skel.h with bpftool, and expose an INTERFACE target
# incxdp_bpf_NAME that carries the skeleton's include dir and libbpf.
# Modelled on libbpf-bootstrap's tools/cmake/FindBpfObject.cmake.

find_program(BPF_CLANG NAMES clang clang-14 REQUIRED)
find_program(BPFTOOL NAMES bpftool PATHS /usr/sbin /usr/local/sbin REQUIRED)

execute_process(COMMAND uname -m OUTPUT_VARIABLE BPF_HOST_ARCH OUTPUT_STRIP_TRAILING_WHITESPACE)
if(BPF_HOST_ARCH STREQUAL "x86_64")
  set(BPF_TARGET_ARCH x86)
  set(BPF_MULTIARCH_INC /usr/include/x86_64-linux-gnu)
elseif(BPF_HOST_ARCH STREQUAL "aarch64")
  set(BPF_TARGET_ARCH arm64)
  set(BPF_MULTIARCH_INC /usr/include/aarch64-linux-gnu)
else()
  set(BPF_TARGET_ARCH ${BPF_HOST_ARCH})
  set(BPF_MULTIARCH_INC /usr/include/${BPF_HOST_ARCH}-linux-gnu)
endif()

# -mcpu=v3 (kernel >= 5.1): 32-bit ALU and jumps. The engine adds and
# checksums 32-bit words; without alu32 every u32 temporary costs two shifts
# to clear its upper half (the ICRC walk ran ~10% faster with it).
set(BPF_CFLAGS -g -O2 -target bpf -mcpu=v3 -D__TARGET_ARCH_${BPF_TARGET_ARCH}
    -Wall -Wextra -Werror -Wno-unused-parameter -Wno-address-of-packed-member
    -I${CMAKE_SOURCE_DIR}/bpf/include -I${CMAKE_SOURCE_DIR}/bpf/lib
    -idirafter ${BPF_MULTIARCH_INC})

function(bpf_object name source)
  set(obj ${CMAKE_CURRENT_BINARY_DIR}/${name}.bpf.o)
  set(skel ${CMAKE_CURRENT_BINARY_DIR}/skel/${name}.skel.h)
  # clang's depfile names every header the object includes, so a header
  # added after configuring still triggers a rebuild (a configure-time glob
  # would not see it).
  add_custom_command(
    OUTPUT ${obj}
    COMMAND ${BPF_CLANG} ${BPF_CFLAGS} -MD -MF ${obj}.d -c ${CMAKE_CURRENT_SOURCE_DIR}/${source} -o ${obj}
    DEPENDS ${source}
    DEPFILE ${obj}.d
    COMMENT "BPF ${name}.bpf.o")
  add_custom_command(
    OUTPUT ${skel}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/skel
    COMMAND ${BPFTOOL} gen skeleton ${obj} name ${name} > ${skel}
    DEPENDS ${obj}
    COMMENT "skeleton ${name}.skel.h")
  add_custom_target(${name}_skel DEPENDS ${skel})
  # The skeletons embed the objects, so nothing loads these at run time;
  # they are installed for inspection (bpftool, llvm-objdump) and other loaders.
  install(FILES ${obj} DESTINATION ${CMAKE_INSTALL_LIBDIR}/incxdp/bpf COMPONENT runtime)
  add_library(incxdp_bpf_${name} INTERFACE)
  add_dependencies(incxdp_bpf_${name} ${name}_skel)
  target_include_directories(incxdp_bpf_${name} INTERFACE ${CMAKE_CURRENT_BINARY_DIR}/skel)
  target_link_libraries(incxdp_bpf_${name} INTERFACE PkgConfig::LIBBPF)
endfunction()
