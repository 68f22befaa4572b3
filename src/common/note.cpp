#include "common/note.h"

#include <cstdio>
#include <mutex>
#include <utility>

namespace ss {
namespace {

std::mutex& NoteMutex() {
  static std::mutex mutex;
  return mutex;
}

NoteSink& CurrentSink() {
  static NoteSink sink;
  return sink;
}

}  // namespace

void Note(const std::string& line) {
  std::lock_guard<std::mutex> lock(NoteMutex());
  if (CurrentSink()) {
    CurrentSink()(line);
  } else {
    std::fprintf(stderr, "sinkscope: note: %s\n", line.c_str());
  }
}

NoteSink SetNoteSink(NoteSink sink) {
  std::lock_guard<std::mutex> lock(NoteMutex());
  return std::exchange(CurrentSink(), std::move(sink));
}

}  // namespace ss
