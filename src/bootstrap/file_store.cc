// FileStore (ringcomm/store.h): one file a key in a directory, written whole and renamed into
// place.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include "auth/handshake.h"
#include "common/deadline.h"
#include "ringcomm/errors.h"
#include "ringcomm/store.h"

namespace ringcomm {
namespace {

// How often get() looks again for a key not there yet.
constexpr std::chrono::milliseconds kLookInterval{20};

// A key as a file name: letters, digits, '-' and '.' as they are, every other byte as %XX.
std::string fileNameOf(const std::string& key) {
  static const char* digits = "0123456789ABCDEF";
  std::string name;
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '-' || c == '.') {
      name += static_cast<char>(c);
    } else {
      name += '%';
      name += digits[c >> 4];
      name += digits[c & 15];
    }
  }
  return name;
}

}  // namespace

FileStore::FileStore(std::string directory) : directory_(std::move(directory)) {
  if (directory_.empty()) throw InvalidArgument("FileStore: the directory is empty");
  // Only this user's: it tells newcomers where to knock (they prove the job's secret there, so
  // a forged file costs them time, not the job's safety).
  if (::mkdir(directory_.c_str(), 0700) != 0 && errno != EEXIST) {
    throw InvalidArgument("FileStore: cannot make the directory " + directory_ + ": " +
                          std::strerror(errno));
  }
}

std::string FileStore::pathOf(const std::string& key) const {
  return directory_ + "/" + fileNameOf(key);
}

void FileStore::set(const std::string& key, const Bytes& value) {
  uint8_t nonce[8];
  auth::randomBytes(nonce, sizeof(nonce));
  std::string staged = pathOf(key) + ".staged-";
  for (uint8_t b : nonce) staged += std::to_string(b);
  {
    std::ofstream out(staged, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(value.data()), static_cast<std::streamsize>(value.size()));
    if (!out) throw TransportError("FileStore: cannot write " + staged, FailureContext{});
  }
  if (::rename(staged.c_str(), pathOf(key).c_str()) != 0) {
    ::unlink(staged.c_str());
    throw TransportError("FileStore: cannot write " + pathOf(key) + ": " + std::strerror(errno),
                         FailureContext{});
  }
}

Bytes FileStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    std::ifstream in(pathOf(key), std::ios::binary);
    if (in) return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (Clock::now() >= deadline) {
      throw TimeoutError("FileStore: no " + pathOf(key) + " within the timeout", FailureContext{});
    }
    std::this_thread::sleep_for(kLookInterval);
  }
}

int64_t FileStore::add(const std::string& key, int64_t /*delta*/) {
  throw InvalidArgument("FileStore keeps values, not counters: add('" + key +
                        "') is for a served store");
}

}  // namespace ringcomm
