#include "common/interrupt.h"

#include <utility>

namespace ss {

namespace {
InterruptPoll& InstalledPoll() {
  thread_local InterruptPoll poll;
  return poll;
}
}  // namespace

ScopedInterruptPoll::ScopedInterruptPoll(InterruptPoll poll)
    : previous_(std::move(InstalledPoll())) {
  InstalledPoll() = std::move(poll);
}
ScopedInterruptPoll::~ScopedInterruptPoll() { InstalledPoll() = std::move(previous_); }

void PollInterrupt() {
  if (const InterruptPoll& poll = InstalledPoll()) poll();
}

}  // namespace ss
