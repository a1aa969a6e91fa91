// The logger, and the parsing of RINGCOMM_DEBUG / RINGCOMM_DEBUG_SUBSYS for Config.
#include "common/log.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

#include "common/process.h"
#include "common/trace.h"
#include "ringcomm/config.h"
#include "ringcomm/errors.h"

namespace ringcomm {
namespace {

// Each level's words, together so that RINGCOMM_DEBUG, toString() and the log's lines agree.
struct LevelNames {
  LogLevel level;
  const char* name;   // RINGCOMM_DEBUG's word for it, and toString()'s
  const char* alias;  // another word RINGCOMM_DEBUG takes for it, or null
  const char* word;   // what its lines say after the subsystem
};

constexpr LevelNames kLevelNames[] = {
    {LogLevel::None, "NONE", "OFF", ""},
    {LogLevel::Warn, "WARN", "WARNING", "warning"},
    {LogLevel::Info, "INFO", nullptr, "info"},
    {LogLevel::Trace, "TRACE", nullptr, "trace"},
};

const LevelNames* namesOf(LogLevel level) {
  for (const LevelNames& names : kLevelNames) {
    if (names.level == level) return &names;
  }
  return nullptr;
}

}  // namespace

namespace log {

std::atomic<int> gLevel{static_cast<int>(LogLevel::Warn)};
std::atomic<uint32_t> gSubsystems{kLogAll};

namespace {

// A line longer than this is cut (a message names ranks and sizes, not data).
constexpr size_t kLineBytes = 2048;

struct Sink {
  std::mutex mutex;
  bool configured = false;
  int rank = -1;
  std::string host;
  std::string filePattern;  // RINGCOMM_DEBUG_FILE, opened at the first line
  FILE* file = nullptr;     // nullptr: stderr
  bool fileTried = false;
};

Sink& sink() {
  static Sink* instance = new Sink();  // never destroyed: threads may log during exit
  return *instance;
}

// RINGCOMM_DEBUG_FILE's %h, %p and %r (%% is a percent sign).
std::string expand(const std::string& pattern, const std::string& host, int rank) {
  std::string path;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%' || i + 1 == pattern.size()) {
      path += pattern[i];
      continue;
    }
    const char what = pattern[++i];
    if (what == 'h') {
      path += host;
    } else if (what == 'p') {
      path += std::to_string(getpid());
    } else if (what == 'r') {
      path += std::to_string(rank);
    } else {
      path += what == '%' ? "%" : std::string("%") + what;
    }
  }
  return path;
}

// Called with the sink's mutex held.
FILE* output(Sink& s) {
  if (s.filePattern.empty()) return stderr;
  // A file named after the rank waits for the rank: the lines before it go to stderr.
  if (s.rank < 0 && s.filePattern.find("%r") != std::string::npos) return stderr;
  if (!s.fileTried) {
    s.fileTried = true;
    const std::string path = expand(s.filePattern, s.host, s.rank);
    s.file = std::fopen(path.c_str(), "a");
    if (s.file == nullptr) {
      std::fprintf(stderr, "ringcomm: warning: cannot open RINGCOMM_DEBUG_FILE=%s; logging to "
                           "stderr\n", path.c_str());
    } else {
      setvbuf(s.file, nullptr, _IOLBF, 0);
    }
  }
  return s.file != nullptr ? s.file : stderr;
}

const char* levelWord(LogLevel level) {
  const LevelNames* names = namesOf(level);
  return names != nullptr ? names->word : "";
}

}  // namespace

int rank() {
  Sink& s = sink();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.rank;
}

void write(LogLevel level, uint32_t subsystem, const char* format, ...) {
  char message[kLineBytes];
  va_list arguments;
  va_start(arguments, format);
  std::vsnprintf(message, sizeof(message), format, arguments);
  va_end(arguments);
  Sink& s = sink();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.host.empty()) s.host = hostName();
  const std::string rankText = s.rank >= 0 ? std::to_string(s.rank) : "-";
  char line[kLineBytes + 256];
  const int n = std::snprintf(line, sizeof(line), "%s:%d:%s [%s] ringcomm: %s: %s\n",
                              s.host.c_str(), static_cast<int>(getpid()), rankText.c_str(),
                              logSubsystemName(static_cast<LogSubsystem>(subsystem)),
                              levelWord(level), message);
  if (n <= 0) return;
  const size_t length = std::min(static_cast<size_t>(n), sizeof(line) - 1);
  if (line[length - 1] != '\n') line[length - 1] = '\n';  // cut short: still one line
  FILE* out = output(s);
  std::fwrite(line, 1, length, out);
  std::fflush(out);
}

}  // namespace log

namespace {

struct SubsystemName {
  LogSubsystem subsystem;
  const char* name;
};

constexpr SubsystemName kSubsystemNames[] = {
    {kLogInit, "INIT"},         {kLogStore, "STORE"}, {kLogAuth, "AUTH"},
    {kLogTransport, "TRANSPORT"}, {kLogAlgo, "ALGO"},  {kLogCuda, "CUDA"},
    {kLogQueue, "QUEUE"},       {kLogTrace, "TRACE"},
};

std::string upper(std::string text) {
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

std::string trimmed(const std::string& text) {
  const size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t") - begin + 1);
}

}  // namespace

LogLevel parseLogLevel(const std::string& text) {
  const std::string word = upper(trimmed(text));
  for (const LevelNames& names : kLevelNames) {
    if (word == names.name || (names.alias != nullptr && word == names.alias)) return names.level;
  }
  throw InvalidArgument("RINGCOMM_DEBUG must be NONE, WARN, INFO or TRACE; got '" + text + "'");
}

const char* toString(LogLevel level) {
  const LevelNames* names = namesOf(level);
  return names != nullptr ? names->name : "?";
}

uint32_t parseLogSubsystems(const std::string& text) {
  std::string list = trimmed(text);
  const bool excluding = !list.empty() && list[0] == '^';
  if (excluding) list = list.substr(1);
  uint32_t mask = 0;
  size_t begin = 0;
  while (begin <= list.size()) {
    const size_t end = std::min(list.find(',', begin), list.size());
    const std::string name = upper(trimmed(list.substr(begin, end - begin)));
    begin = end + 1;
    if (name.empty()) continue;
    if (name == "ALL") {
      mask = kLogAll;
      continue;
    }
    bool known = false;
    for (const SubsystemName& entry : kSubsystemNames) {
      if (name == entry.name) {
        mask |= entry.subsystem;
        known = true;
      }
    }
    if (!known) {
      std::string names;
      for (const SubsystemName& entry : kSubsystemNames) names += std::string(entry.name) + ",";
      throw InvalidArgument("RINGCOMM_DEBUG_SUBSYS: unknown subsystem '" + name +
                            "'; known: " + names + "ALL (a leading ^ excludes)");
    }
  }
  return excluding ? ~mask : mask;
}

const char* logSubsystemName(LogSubsystem subsystem) {
  for (const SubsystemName& entry : kSubsystemNames) {
    if (entry.subsystem == subsystem) return entry.name;
  }
  return "ALL";
}

void configureObservability(const Config& config, int rank) {
  log::Sink& s = log::sink();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (rank >= 0 && s.rank < 0) s.rank = rank;
    if (!s.configured) {
      s.configured = true;
      s.filePattern = config.logFile;
      log::gSubsystems.store(config.logSubsystems, std::memory_order_relaxed);
      log::gLevel.store(static_cast<int>(config.logLevel), std::memory_order_relaxed);
    }
  }
  trace::configure(config, rank);
}

bool logEnabled(LogLevel level, const std::string& subsystem) {
  return log::enabled(level, parseLogSubsystems(subsystem));
}

void logMessage(LogLevel level, const std::string& subsystem, const std::string& text) {
  const uint32_t mask = parseLogSubsystems(subsystem);
  if (log::enabled(level, mask)) log::write(level, mask, "%s", text.c_str());
}

}  // namespace ringcomm
