#include "transport/cuda_driver.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>

namespace outboard::transport {
namespace {

// fake_cuda_driver.cpp, a fake driver for this test only: the real one needs a GPU.
constexpr const char* kFake = OUTBOARD_FAKE_CUDA_DRIVER;

struct Fake {
  Fake() : handle(dlopen(kFake, RTLD_NOW | RTLD_LOCAL)) {
    set_devices = reinterpret_cast<void (*)(int)>(dlsym(handle, "fake_cuda_set_devices"));
    primary = reinterpret_cast<void* (*)(int)>(dlsym(handle, "fake_cuda_primary"));
    get_current = reinterpret_cast<int (*)(void**)>(dlsym(handle, "cuCtxGetCurrent"));
    set_current = reinterpret_cast<int (*)(void*)>(dlsym(handle, "cuCtxSetCurrent"));
  }
  ~Fake() { dlclose(handle); }
  void* current() const {
    void* c = nullptr;
    get_current(&c);
    return c;
  }
  void* handle;
  void (*set_devices)(int) = nullptr;
  void* (*primary)(int) = nullptr;
  int (*get_current)(void**) = nullptr;
  int (*set_current)(void*) = nullptr;
};

TEST(CudaDriverTest, ADriverThatDoesNotLoadIsNamedWithTheLoadersReason) {
  CudaDriver driver("/nonexistent/libcuda.so.1");
  Status st = driver.use_context();
  EXPECT_EQ(st.code(), Code::kUnsupported);
  EXPECT_NE(st.message().find("no CUDA driver: /nonexistent/libcuda.so.1 does not load (/nonexistent/libcuda.so.1: "
                              "cannot open shared object file"),
            std::string::npos)
      << st.to_string();
  EXPECT_NE(st.message().find("GPU memory needs an NVIDIA GPU and its driver"), std::string::npos);
}

TEST(CudaDriverTest, EveryThreadWithoutAContextGetsTheDevicesPrimaryOne) {
  Fake fake;
  ASSERT_NE(fake.handle, nullptr) << dlerror();
  fake.set_devices(2);
  CudaDriver driver(kFake);
  ASSERT_EQ(fake.current(), nullptr);
  ASSERT_TRUE(driver.use_context().ok());
  EXPECT_EQ(fake.current(), fake.primary(kCudaDevice));
  void* on_thread = nullptr;
  Status thread_status;
  std::thread([&] {
    thread_status = driver.use_context();
    on_thread = fake.current();
  }).join();
  EXPECT_TRUE(thread_status.ok()) << thread_status.to_string();
  EXPECT_EQ(on_thread, fake.primary(kCudaDevice));
  fake.set_current(nullptr);
}

TEST(CudaDriverTest, AThreadsOwnContextIsKept) {
  Fake fake;
  ASSERT_NE(fake.handle, nullptr) << dlerror();
  fake.set_devices(2);
  CudaDriver driver(kFake);
  fake.set_current(fake.primary(1));  // as torch.cuda.set_device(1) leaves it
  ASSERT_TRUE(driver.use_context().ok());
  EXPECT_EQ(fake.current(), fake.primary(1));
  fake.set_current(nullptr);
}

TEST(CudaDriverTest, NoDeviceIsNamedWithTheDriversError) {
  Fake fake;
  ASSERT_NE(fake.handle, nullptr) << dlerror();
  fake.set_devices(0);
  CudaDriver driver(kFake);
  Status st = driver.use_context();
  EXPECT_EQ(st.code(), Code::kUnsupported);
  EXPECT_EQ(st.message(), "CUDA driver: cuInit: CUDA_ERROR_NO_DEVICE (100)");
  EXPECT_EQ(fake.current(), nullptr);
}

// The process's driver: where the machine has none (this one, CI), GPU memory
// is refused naming libcuda.so.1; on a GPU machine a thread gets a context.
TEST(CudaDriverTest, TheProcesssDriverGivesAContextOrSaysWhyNot) {
  void* real = dlopen(kCudaDriverLibrary, RTLD_NOW | RTLD_LOCAL);
  Status st = CudaDriver::get().use_context();
  if (real == nullptr) {
    EXPECT_EQ(st.code(), Code::kUnsupported);
    EXPECT_NE(st.message().find(std::string("no CUDA driver: ") + kCudaDriverLibrary + " does not load"),
              std::string::npos)
        << st.to_string();
    return;
  }
  dlclose(real);
  if (!st.ok()) {  // a driver without a device
    EXPECT_NE(st.message().find("CUDA driver: cu"), std::string::npos) << st.to_string();
    GTEST_SKIP() << "the CUDA driver loads but gives no context: " << st.to_string();
  }
  std::thread([] { EXPECT_TRUE(CudaDriver::get().use_context().ok()); }).join();
}

}  // namespace
}  // namespace outboard::transport
