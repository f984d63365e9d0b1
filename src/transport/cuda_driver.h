// The CUDA driver, loaded at run time where GPU memory is asked for.
//
// libcuda.so.1 comes with a GPU's driver, not with the CUDA toolkit: loading
// it with dlopen keeps every build free of CUDA, lets a build from a machine
// without a GPU use one where it runs, and never loads it where no GPU memory
// is used.
#pragma once

#include <memory>
#include <string>

#include "outboard/status.h"

namespace outboard::transport {

/// The device whose primary context a thread without one is given: the first
/// one CUDA_VISIBLE_DEVICES leaves, as the CUDA runtime's default device.
inline constexpr int kCudaDevice = 0;

/// The shared library the driver is loaded from by default.
inline constexpr const char* kCudaDriverLibrary = "libcuda.so.1";

class CudaDriver {
 public:
  /// The process's driver, loaded from kCudaDriverLibrary on first use.
  static CudaDriver& get();
  /// A driver loaded from `library` (a path, or a name the loader searches).
  explicit CudaDriver(const std::string& library);
  ~CudaDriver();
  CudaDriver(const CudaDriver&) = delete;
  CudaDriver& operator=(const CudaDriver&) = delete;

  /// Makes a CUDA context current on the calling thread, unless one is: the
  /// primary context of kCudaDevice, the one the CUDA runtime (and torch)
  /// use, so memory they allocate belongs to it. UCX allocates, registers
  /// and maps GPU memory through the driver on the calling thread and needs
  /// one ("cuCtxSetFlags(CU_CTX_SYNC_MEMOPS) failed: invalid device
  /// context" without). Fails naming the library or the driver's error where
  /// there is no driver or no device.
  Status use_context();

 private:
  struct Api;
  std::unique_ptr<Api> api_;
  Status loaded_;  // why this driver cannot be used, or ok
};

}  // namespace outboard::transport
