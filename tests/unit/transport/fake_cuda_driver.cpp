// A fake CUDA driver, for cuda_driver_test.cpp only: the six calls
// CudaDriver makes, over devices the test sets, with a context current per
// thread as the real driver keeps it. Error numbers and names are cuda.h's.
namespace {

enum { kNoDevice = 100, kInvalidDevice = 101, kInvalidValue = 1, kMaxDevices = 4 };

int devices;
char primary[kMaxDevices];  // a primary context is the address of its byte
thread_local void* current;

}  // namespace

extern "C" {

void fake_cuda_set_devices(int n) { devices = n; }
void* fake_cuda_primary(int device) { return &primary[device]; }

int cuInit(unsigned flags) { return flags != 0 ? kInvalidValue : devices > 0 ? 0 : kNoDevice; }

int cuDeviceGet(int* device, int ordinal) {
  if (ordinal < 0 || ordinal >= devices) return kInvalidDevice;
  *device = ordinal;
  return 0;
}

int cuDevicePrimaryCtxRetain(void** context, int device) {
  if (device < 0 || device >= devices) return kInvalidDevice;
  *context = &primary[device];
  return 0;
}

int cuCtxGetCurrent(void** context) {
  *context = current;
  return 0;
}

int cuCtxSetCurrent(void* context) {
  current = context;
  return 0;
}

int cuGetErrorName(int error, const char** name) {
  switch (error) {
    case kNoDevice: *name = "CUDA_ERROR_NO_DEVICE"; return 0;
    case kInvalidDevice: *name = "CUDA_ERROR_INVALID_DEVICE"; return 0;
    default: *name = nullptr; return kInvalidValue;
  }
}

}  // extern "C"
