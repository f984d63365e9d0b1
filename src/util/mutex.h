// Clang thread-safety annotations (checked with -Wthread-safety in the clang
// build; empty elsewhere) and a mutex that carries them: members a lock
// guards say so (OB_GUARDED_BY), and functions that need it held say that
// (OB_REQUIRES). Abseil's thread_annotations.h, trimmed to what we use.
#pragma once

#include <mutex>

#if defined(__clang__)
#define OB_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define OB_THREAD_ANNOTATION(x)
#endif

#define OB_CAPABILITY(name) OB_THREAD_ANNOTATION(capability(name))
#define OB_SCOPED_CAPABILITY OB_THREAD_ANNOTATION(scoped_lockable)
#define OB_GUARDED_BY(x) OB_THREAD_ANNOTATION(guarded_by(x))
#define OB_PT_GUARDED_BY(x) OB_THREAD_ANNOTATION(pt_guarded_by(x))
#define OB_REQUIRES(...) OB_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define OB_EXCLUDES(...) OB_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define OB_ACQUIRE(...) OB_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define OB_RELEASE(...) OB_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define OB_RETURN_CAPABILITY(x) OB_THREAD_ANNOTATION(lock_returned(x))
#define OB_NO_THREAD_SAFETY_ANALYSIS OB_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace outboard {

/// std::mutex, annotated as a capability. Thread mode: multi.
class OB_CAPABILITY("mutex") Mutex {
 public:
  void lock() OB_ACQUIRE() { mu_.lock(); }
  void unlock() OB_RELEASE() { mu_.unlock(); }
  /// For a std::condition_variable's wait (through MutexLock::native()).
  std::mutex& native() { return mu_; }

 private:
  std::mutex mu_;
};

/// std::recursive_mutex, annotated as a capability.
class OB_CAPABILITY("mutex") RecursiveMutex {
 public:
  void lock() OB_ACQUIRE() { mu_.lock(); }
  void unlock() OB_RELEASE() { mu_.unlock(); }

 private:
  std::recursive_mutex mu_;
};

/// Holds a RecursiveMutex for its scope. A wait that sleeps without it
/// releases and retakes the mutex itself (it declares it held: OB_REQUIRES).
class OB_SCOPED_CAPABILITY RecursiveLock {
 public:
  explicit RecursiveLock(RecursiveMutex& mu) OB_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~RecursiveLock() OB_RELEASE() { mu_.unlock(); }
  RecursiveLock(const RecursiveLock&) = delete;
  RecursiveLock& operator=(const RecursiveLock&) = delete;

 private:
  RecursiveMutex& mu_;
};

/// Holds a Mutex for its scope; native() lends the held lock to a
/// std::condition_variable, whose waits release and retake it.
class OB_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) OB_ACQUIRE(mu) : lock_(mu.native()) {}
  ~MutexLock() OB_RELEASE() = default;
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;
  std::unique_lock<std::mutex>& native() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace outboard
