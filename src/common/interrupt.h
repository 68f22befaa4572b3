// A per-thread check that long work runs at its natural stopping points (each block of a forward
// pass, each sample of an analysis, each progress update), so the work can be stopped from outside:
// the Python module installs one that throws when Ctrl-C is pending, the viewer's server one that
// throws when the client that asked for the work has gone. None by default: then a poll costs a
// thread-local read.
#pragma once

#include <functional>

namespace ss {

using InterruptPoll = std::function<void()>;

// Installs `poll` on this thread for the scope of the object (the previous one comes back after).
// The work and its stopping points run on the thread that installed the poll: two threads (two
// Python threads, two server connections) never see each other's.
class ScopedInterruptPoll {
 public:
  explicit ScopedInterruptPoll(InterruptPoll poll);
  ~ScopedInterruptPoll();
  ScopedInterruptPoll(const ScopedInterruptPoll&) = delete;
  ScopedInterruptPoll& operator=(const ScopedInterruptPoll&) = delete;

 private:
  InterruptPoll previous_;
};

// Runs this thread's poll (nothing when none is installed); whatever the poll throws propagates.
// Callers must be outside OpenMP parallel regions (a throw there would end the program).
void PollInterrupt();

}  // namespace ss
