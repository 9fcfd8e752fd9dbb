# Less compile time, the same sources and flags: unity groups for the few files of a target
# that use the same header-only library heavily (Asio, CLI11, nlohmann/json). Compiled as one
# file, the library's templates are instantiated and optimised once instead of once per file
# (about half the CPU time of those files). The other libraries' files are compiled in
# batches of 8 (hvdrun_unity_batches): at -O3 most of a small file's time goes to the
# standard library's inline functions it emits, which a batch emits once (about 40% less).
# Names in the anonymous namespaces of a target's files must therefore differ.
# HVDRUN_UNITY_GROUPS=OFF compiles each file on its own.
# Precompiled headers were tried and left out: with them GCC 12 reports -Wstringop-overflow
# and -Warray-bounds inside libstdc++ that it keeps quiet about without them.
option(HVDRUN_UNITY_GROUPS "Compile the groups of files that share a heavy header-only library as one" ON)

# hvdrun_unity_group(TARGET GROUP SOURCE...): the SOURCEs of TARGET compiled as one file.
function(hvdrun_unity_group target group)
  if(HVDRUN_UNITY_GROUPS)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_MODE GROUP)
    set_source_files_properties(${ARGN} TARGET_DIRECTORY ${target} PROPERTIES UNITY_GROUP ${group})
  endif()
endfunction()

# hvdrun_unity_batches(TARGET): TARGET's sources compiled 8 at a time.
function(hvdrun_unity_batches target)
  if(HVDRUN_UNITY_GROUPS)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_MODE BATCH UNITY_BUILD_BATCH_SIZE 8)
  endif()
endfunction()
