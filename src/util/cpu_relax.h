// A spin-wait hint: lets the sibling thread run and, polling a cache line
// another core is about to write, lets the write through sooner.
#pragma once

namespace outboard {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace outboard
