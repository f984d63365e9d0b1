// Conversions every binding file and both extension modules share.
#include "common.h"

#include <string>

namespace outboard {

MemoryKind memory_kind(int dlpack_device) {
  switch (dlpack_device) {
    case nb::device::cpu::value:
    case nb::device::cuda_host::value:
      return MemoryKind::kHost;
    case nb::device::cuda::value:
      return MemoryKind::kCuda;
    default:
      raise(Status(Code::kInvalidArgument, "an array on DLPack device type " + std::to_string(dlpack_device) +
                                               ": only CPU and CUDA memory can be registered"));
  }
}

std::string_view text_view(nb::handle h) {
  if (PyBytes_Check(h.ptr())) return {PyBytes_AS_STRING(h.ptr()), static_cast<size_t>(PyBytes_GET_SIZE(h.ptr()))};
  if (PyUnicode_Check(h.ptr())) {
    Py_ssize_t n = 0;
    const char* s = PyUnicode_AsUTF8AndSize(h.ptr(), &n);
    if (!s) {
      PyErr_Clear();
      raise({Code::kInvalidArgument, "text is not encodable as UTF-8 (lone surrogate); pass bytes instead"});
    }
    return {s, static_cast<size_t>(n)};
  }
  raise({Code::kInvalidArgument, "text must be str or bytes"});
}

std::vector<std::string_view> text_views(const nb::list& texts) {
  std::vector<std::string_view> views;
  views.reserve(texts.size());
  for (nb::handle h : texts) views.push_back(text_view(h));  // the list keeps them alive
  return views;
}

void register_status_errors() {
nb::register_exception_translator([](const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const StatusError& e) {
    nb::object errors = nb::module_::import_("outboard.errors");
    // A message may quote a peer's bytes that are not UTF-8: escaped, the
    // error keeps its type (a UnicodeDecodeError would replace it).
    const std::string& text = e.status.message();
    nb::object message = nb::steal(PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()),
                                                         "backslashreplace"));
    nb::object exc = errors.attr("from_code")(static_cast<int>(e.status.code()), message);
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  }
});
}

}  // namespace outboard
