// ThreadSanitizer builds only (ATTNSERVE_SANITIZE=thread): makes absl::Mutex and
// absl::CondVar visible to TSan.
//
// Debian's abseil is not instrumented. absl::Mutex takes and releases its lock with
// atomic instructions inside libabsl_synchronization.so, which TSan cannot see, so every
// access our code makes under an absl::Mutex (the session store, the metrics) would be
// reported as a race between the threads that take turns holding it. This file defines
// the public lock, unlock and wait entry points in the test executable; the dynamic
// linker binds our code's calls to these definitions (an executable's symbols come first),
// and each one calls the library's own function (dlsym RTLD_NEXT) and tells TSan what
// happened: acquire after taking the lock, release before giving it up. Reader locks are
// treated as exclusive, which can only hide a read-read pair, never a race.
//
// The annotations use the mutex's address, as TSan's own pthread_mutex interceptors do.
//
// A Condition (LockWhen, Await) may be evaluated by whichever thread releases the mutex,
// inside the library's Unlock, after our release annotation. Each one is wrapped so that
// its evaluation, in any thread, is bracketed by acquire and release like a critical
// section (what abseil's own TSan build does in EvalConditionAnnotated).
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#define ATTNSERVE_STR2(x) #x
#define ATTNSERVE_STR(x) ATTNSERVE_STR2(x)

namespace {

// "_ZN4absl<len><inline namespace>" + rest: the Itanium mangling of absl::<ns>::<rest>.
std::string Mangled(const char* rest) {
#if ABSL_OPTION_USE_INLINE_NAMESPACE
  const char* ns = ATTNSERVE_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  return "_ZN4absl" + std::to_string(std::strlen(ns)) + ns + rest;
#else
  return std::string("_ZN4absl") + rest;
#endif
}

template <typename F>
F Real(const char* rest) {
  const std::string name = Mangled(rest);
  void* p = dlsym(RTLD_NEXT, name.c_str());
  if (p == nullptr) {
    std::fprintf(stderr, "tsan_absl_sync: %s not found in abseil: %s\n", name.c_str(),
                 dlerror());
    std::abort();
  }
  return reinterpret_cast<F>(p);
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN
namespace {

// `cond`, evaluated as if under `mu` (see the file comment). Lives on the waiting
// thread's stack for the whole wait, which is as long as the library may evaluate it.
class AnnotatedCondition {
 public:
  AnnotatedCondition(const Condition& cond, Mutex* mu) : cond_(&cond), mu_(mu) {}
  Condition condition() { return Condition(&Eval, this); }

 private:
  static bool Eval(AnnotatedCondition* self) {
    __tsan_acquire(self->mu_);
    const bool value = self->cond_->Eval();
    __tsan_release(self->mu_);
    return value;
  }
  const Condition* cond_;
  Mutex* mu_;
};

}  // namespace

using MuFn = void (*)(Mutex*);
using MuTry = bool (*)(Mutex*);
using MuCond = void (*)(Mutex*, const Condition&);
using MuCondDur = bool (*)(Mutex*, const Condition&, Duration);
using MuCondTime = bool (*)(Mutex*, const Condition&, Time);

void Mutex::Lock() {
  static const MuFn real = Real<MuFn>("5Mutex4LockEv");
  real(this);
  __tsan_acquire(this);
}
void Mutex::ReaderLock() {
  static const MuFn real = Real<MuFn>("5Mutex10ReaderLockEv");
  real(this);
  __tsan_acquire(this);
}
void Mutex::Unlock() {
  static const MuFn real = Real<MuFn>("5Mutex6UnlockEv");
  __tsan_release(this);
  real(this);
}
void Mutex::ReaderUnlock() {
  static const MuFn real = Real<MuFn>("5Mutex12ReaderUnlockEv");
  __tsan_release(this);
  real(this);
}
bool Mutex::TryLock() {
  static const MuTry real = Real<MuTry>("5Mutex7TryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}
bool Mutex::ReaderTryLock() {
  static const MuTry real = Real<MuTry>("5Mutex13ReaderTryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}
void Mutex::LockWhen(const Condition& cond) {
  static const MuCond real = Real<MuCond>("5Mutex8LockWhenERKNS0_9ConditionE");
  real(this, AnnotatedCondition(cond, this).condition());
  __tsan_acquire(this);
}
void Mutex::ReaderLockWhen(const Condition& cond) {
  static const MuCond real = Real<MuCond>("5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  real(this, AnnotatedCondition(cond, this).condition());
  __tsan_acquire(this);
}
bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  static const MuCondDur real =
      Real<MuCondDur>("5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const bool met = real(this, AnnotatedCondition(cond, this).condition(), timeout);
  __tsan_acquire(this);  // held on return either way
  return met;
}
bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, Duration timeout) {
  static const MuCondDur real =
      Real<MuCondDur>("5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const bool met = real(this, AnnotatedCondition(cond, this).condition(), timeout);
  __tsan_acquire(this);
  return met;
}
bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  static const MuCondTime real =
      Real<MuCondTime>("5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const bool met = real(this, AnnotatedCondition(cond, this).condition(), deadline);
  __tsan_acquire(this);
  return met;
}
bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  static const MuCondTime real =
      Real<MuCondTime>("5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const bool met = real(this, AnnotatedCondition(cond, this).condition(), deadline);
  __tsan_acquire(this);
  return met;
}
void Mutex::Await(const Condition& cond) {
  static const MuCond real = Real<MuCond>("5Mutex5AwaitERKNS0_9ConditionE");
  __tsan_release(this);
  real(this, AnnotatedCondition(cond, this).condition());
  __tsan_acquire(this);
}
bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  static const MuCondDur real =
      Real<MuCondDur>("5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  __tsan_release(this);
  const bool met = real(this, AnnotatedCondition(cond, this).condition(), timeout);
  __tsan_acquire(this);
  return met;
}
bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  static const MuCondTime real =
      Real<MuCondTime>("5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  __tsan_release(this);
  const bool met = real(this, AnnotatedCondition(cond, this).condition(), deadline);
  __tsan_acquire(this);
  return met;
}

using CvWait = void (*)(CondVar*, Mutex*);
using CvWaitDur = bool (*)(CondVar*, Mutex*, Duration);
using CvWaitTime = bool (*)(CondVar*, Mutex*, Time);

void CondVar::Wait(Mutex* mu) {
  static const CvWait real = Real<CvWait>("7CondVar4WaitEPNS0_5MutexE");
  __tsan_release(mu);
  real(this, mu);
  __tsan_acquire(mu);
}
bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  static const CvWaitDur real =
      Real<CvWaitDur>("7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  __tsan_release(mu);
  const bool timed_out = real(this, mu, timeout);
  __tsan_acquire(mu);
  return timed_out;
}
bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  static const CvWaitTime real =
      Real<CvWaitTime>("7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  __tsan_release(mu);
  const bool timed_out = real(this, mu, deadline);
  __tsan_acquire(mu);
  return timed_out;
}

ABSL_NAMESPACE_END
}  // namespace absl
