#include "transport/cuda_driver.h"

#include <dlfcn.h>

#include <string>
#include <type_traits>

namespace outboard::transport {

// The few driver calls used, declared as cuda.h does (CUresult is an enum of
// int size, CUdevice an int, CUcontext a pointer), so no build needs CUDA.
struct CudaDriver::Api {
  using Result = int;
  using Context = void*;
  void* library = nullptr;
  Result (*init)(unsigned flags) = nullptr;
  Result (*device_get)(int* device, int ordinal) = nullptr;
  Result (*primary_context_retain)(Context* context, int device) = nullptr;
  Result (*context_get_current)(Context* context) = nullptr;
  Result (*context_set_current)(Context context) = nullptr;
  Result (*error_name)(Result error, const char** name) = nullptr;
  Context primary = nullptr;  // retained for the process's life, as the runtime keeps it

  [[nodiscard]] std::string describe(Result r) const {
    const char* name = nullptr;
    if (error_name == nullptr || error_name(r, &name) != 0 || name == nullptr) name = "an unknown CUDA error";
    return std::string(name) + " (" + std::to_string(r) + ")";
  }
  Status check(Result r, const char* call) const {
    if (r == 0) return {};
    return Status(Code::kUnsupported, std::string("CUDA driver: ") + call + ": " + describe(r));
  }
};

CudaDriver& CudaDriver::get() {
  static CudaDriver driver(kCudaDriverLibrary);
  return driver;
}

CudaDriver::CudaDriver(const std::string& library) : api_(std::make_unique<Api>()) {
  Api& a = *api_;
  a.library = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (a.library == nullptr) {
    const char* why = dlerror();
    loaded_ = Status(Code::kUnsupported, "no CUDA driver: " + library + " does not load (" +
                                             (why != nullptr ? why : "no reason given") +
                                             "): GPU memory needs an NVIDIA GPU and its driver");
    return;
  }
  const auto bind = [&](auto& fn, const char* symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(a.library, symbol));
    if (fn == nullptr && loaded_.ok())
      loaded_ = Status(Code::kUnsupported, "CUDA driver " + library + " has no " + symbol);
  };
  bind(a.init, "cuInit");
  bind(a.device_get, "cuDeviceGet");
  bind(a.primary_context_retain, "cuDevicePrimaryCtxRetain");
  bind(a.context_get_current, "cuCtxGetCurrent");
  bind(a.context_set_current, "cuCtxSetCurrent");
  bind(a.error_name, "cuGetErrorName");
  if (!loaded_.ok()) return;
  int device = 0;
  if (loaded_ = a.check(a.init(0), "cuInit"); !loaded_.ok()) return;
  if (loaded_ = a.check(a.device_get(&device, kCudaDevice), "cuDeviceGet"); !loaded_.ok()) return;
  loaded_ = a.check(a.primary_context_retain(&a.primary, device), "cuDevicePrimaryCtxRetain");
}

// The library is never closed: UCX's CUDA modules use the same one, and its
// code may still run at exit.
CudaDriver::~CudaDriver() = default;

Status CudaDriver::use_context() {
  if (!loaded_.ok()) return loaded_;
  const Api& a = *api_;
  Api::Context current = nullptr;
  OB_RETURN_IF_ERROR(a.check(a.context_get_current(&current), "cuCtxGetCurrent"));
  if (current != nullptr) return {};
  return a.check(a.context_set_current(a.primary), "cuCtxSetCurrent");
}

}  // namespace outboard::transport
