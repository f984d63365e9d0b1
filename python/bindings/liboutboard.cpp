// liboutboard.so is the static layers linked whole (CMakeLists.txt); a
// shared library target needs a source of its own, and this is it.
