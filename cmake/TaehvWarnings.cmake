# taehv_enable_warnings(<target>): the project's warning set, per target (never global flags).
function(taehv_enable_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<CXX_COMPILER_ID:GNU,Clang>:-Wall -Wextra -Wpedantic -Wshadow=local -Wnon-virtual-dtor
      -Wcast-align -Woverloaded-virtual -Wnull-dereference -Wformat=2>)
endfunction()
