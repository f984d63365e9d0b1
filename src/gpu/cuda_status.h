// A CUDA runtime error as a Status, for the .cu files of src/gpu (which alone include CUDA).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "outboard/status.h"

namespace outboard::gpu {

inline Status cuda_error(cudaError_t e, const std::string& what) {
  return {Code::kIoError, what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")"};
}

/// Returns from the calling function with cuda_error(…, what) unless `call` succeeds.
#define OB_CUDA_TRY(call, what)                                                              \
  do {                                                                                       \
    if (const cudaError_t ob_e_ = (call); ob_e_ != cudaSuccess) return cuda_error(ob_e_, what); \
  } while (0)

}  // namespace outboard::gpu
