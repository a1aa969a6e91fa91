#include "common/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>

#include "ringcomm/errors.h"

namespace ringcomm::net {

namespace {

#ifdef MSG_NOSIGNAL
constexpr int kSendFlags = MSG_NOSIGNAL;
#else
constexpr int kSendFlags = 0;  // SO_NOSIGPIPE is set on the socket instead (macOS)
#endif

// Connect retry schedule: the first retry comes soon (the listener is usually a moment late), then
// backs off so that many ranks waiting for a slow server do not flood it with SYNs.
constexpr auto kFirstRetryDelay = std::chrono::milliseconds(10);
constexpr auto kMaxRetryDelay = std::chrono::milliseconds(500);
// One attempt on one address may wait this long for the handshake, so that a black-holed address
// does not use up the whole deadline before the next resolved address is tried.
constexpr auto kConnectAttemptTimeout = std::chrono::milliseconds(5000);

std::string formatSeconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", seconds);
  return text;
}

[[noreturn]] void throwTransport(const std::string& operation, const std::string& what,
                                 double elapsedSeconds = 0.0) {
  throw TransportError(what, FailureContext{operation, -1, -1, elapsedSeconds});
}

void checkSyscall(int result, const char* what) {
  if (result < 0) throwTransport(what, std::string(what) + " failed: " + errnoText(errno));
}

// A non-blocking, close-on-exec stream socket.
UniqueFd makeSocket(int family) {
  UniqueFd fd(::socket(family, SOCK_STREAM, 0));
  if (!fd) throwTransport("socket", "socket() failed: " + errnoText(errno));
  checkSyscall(::fcntl(fd.get(), F_SETFD, FD_CLOEXEC), "fcntl(FD_CLOEXEC)");
  setNonBlocking(fd.get());
#ifdef SO_NOSIGPIPE
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof(one));
#endif
  return fd;
}

// Milliseconds for poll() until the deadline: 0 once it has passed, -1 (forever) for max().
int pollTimeoutMs(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return -1;
  auto now = Clock::now();
  if (deadline <= now) return 0;
  // Round up, so that poll() does not return just before the deadline and force a spin.
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
  return static_cast<int>(std::min<int64_t>(left, INT_MAX));
}

// Two sockets of one host can connect to each other with no listener at all when the source port
// the kernel picks equals the destination port (TCP simultaneous open). That "connection" leads
// nowhere; treat it as refused.
bool connectedToItself(int fd) {
  try {
    Address local = localAddress(fd);
    Address peer = peerAddress(fd);
    return local.port() == peer.port() && local.host() == peer.host();
  } catch (const TransportError&) {
    return false;
  }
}

}  // namespace

std::string errnoText(int error) {
  std::string text = std::strerror(error);
  if (error == EMFILE || error == ENFILE) {
    // Said where it happens: out of descriptors, a connection's failure otherwise reads as a
    // peer that is gone.
    rlimit limit{};
    text += error == ENFILE ? " (the system's table of open files is full)"
            : ::getrlimit(RLIMIT_NOFILE, &limit) == 0
                ? " (this process's descriptor limit, ulimit -n " +
                      std::to_string(limit.rlim_cur) + ", is reached)"
                : " (this process's descriptor limit, ulimit -n, is reached)";
  }
  return text;
}

void UniqueFd::reset(int fd) noexcept {
  // close() is not retried on EINTR: on Linux the descriptor is released regardless.
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::string Address::host() const {
  char text[INET6_ADDRSTRLEN] = {0};
  if (family() == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&storage);
    ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text));
  } else if (family() == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&storage);
    if (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr)) {
      ::inet_ntop(AF_INET, &v6->sin6_addr.s6_addr[12], text, sizeof(text));
    } else {
      ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof(text));
    }
  } else {
    return "<unknown address family " + std::to_string(family()) + ">";
  }
  return text;
}

int Address::port() const {
  if (family() == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  }
  if (family() == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  }
  return -1;
}

std::string Address::toString() const { return formatHostPort(host(), port()); }

std::string formatHostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

Clock::time_point deadlineAfter(std::chrono::milliseconds timeout) {
  return extendDeadline(Clock::now(), timeout);
}

Clock::time_point extendDeadline(Clock::time_point deadline, std::chrono::milliseconds extra) {
  if (extra.count() <= 0) return deadline;
  // Compare in milliseconds: converting milliseconds::max() to the clock's nanoseconds overflows.
  auto headroom =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - deadline);
  if (extra >= headroom) return Clock::time_point::max();
  return deadline + extra;
}

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<Address> resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  std::string service = std::to_string(port);
  addrinfo* list = nullptr;
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &list);
  if (rc != 0) {
    std::string reason = rc == EAI_SYSTEM ? errnoText(errno) : ::gai_strerror(rc);
    throwTransport("resolve", "cannot resolve " + formatHostPort(host, port) + ": " + reason);
  }
  std::vector<Address> addresses;
  for (addrinfo* entry = list; entry != nullptr; entry = entry->ai_next) {
    if (entry->ai_addrlen > sizeof(sockaddr_storage)) continue;
    Address address;
    std::memcpy(&address.storage, entry->ai_addr, entry->ai_addrlen);
    address.length = entry->ai_addrlen;
    addresses.push_back(address);
  }
  ::freeaddrinfo(list);
  if (addresses.empty()) {
    throwTransport("resolve", "cannot resolve " + formatHostPort(host, port) + ": no address");
  }
  return addresses;
}

UniqueFd listenTcp(const std::string& host, int port, int backlog) {
  if (port < 0 || port > 65535) {
    throw InvalidArgument("listen port must be in 0..65535, got " + std::to_string(port));
  }
  std::vector<Address> candidates;
  if (host.empty() || host == "0.0.0.0") {
    // getaddrinfo(nullptr, AI_PASSIVE) may list "::" first; "every interface" here means IPv4's
    // wildcard, so that the choice does not depend on the resolver's ordering.
    Address any;
    auto* v4 = reinterpret_cast<sockaddr_in*>(&any.storage);
    v4->sin_family = AF_INET;
    v4->sin_addr.s_addr = htonl(INADDR_ANY);
    v4->sin_port = htons(static_cast<uint16_t>(port));
    any.length = sizeof(sockaddr_in);
    candidates.push_back(any);
  } else {
    candidates = resolve(host, port, /*passive=*/true);
  }

  std::string lastError = "no address";
  for (const Address& address : candidates) {
    UniqueFd fd = makeSocket(address.family());
    int one = 1;
    // A restarted job can bind its port again while connections of the previous one sit in
    // TIME_WAIT. Without it a restart could fail to bind while those linger, so a socket that
    // refuses it is passed over for this address, saying why (the error names it).
    if (::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
      lastError = "setsockopt(SO_REUSEADDR) on " + address.toString() + ": " + errnoText(errno);
      continue;
    }
    if (address.family() == AF_INET6) {
      // "::" also accepts IPv4 where the OS allows it. Where it does not (a system that keeps
      // IPv6 sockets IPv6-only), the socket still listens on IPv6, which is what the address
      // names: best effort, deliberately not a failure.
      int zero = 0;
      (void)::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    }
    const auto* raw = reinterpret_cast<const sockaddr*>(&address.storage);
    if (::bind(fd.get(), raw, address.length) != 0) {
      lastError = "bind " + address.toString() + ": " + errnoText(errno);
      continue;
    }
    if (::listen(fd.get(), backlog) != 0) {
      lastError = "listen " + address.toString() + ": " + errnoText(errno);
      continue;
    }
    return fd;
  }
  throwTransport("listen", "cannot listen on " + formatHostPort(host, port) + ": " + lastError);
}

UniqueFd acceptTcp(int listenFd) {
  while (true) {
    int fd = ::accept(listenFd, nullptr, nullptr);
    if (fd >= 0) {
      UniqueFd accepted(fd);
      checkSyscall(::fcntl(fd, F_SETFD, FD_CLOEXEC), "fcntl(FD_CLOEXEC)");
      setNonBlocking(fd);
      setNoDelay(fd);
#ifdef SO_NOSIGPIPE
      int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof(one));
#endif
      return accepted;
    }
    // ECONNABORTED: the client gave up while queued; look at the next one.
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return UniqueFd();
    throwTransport("accept", "accept() failed: " + errnoText(errno));
  }
}

UniqueFd connectTcp(const std::string& host, int port, Clock::time_point deadline, bool retry) {
  if (port <= 0 || port > 65535) {
    throw InvalidArgument("connect port must be in 1..65535, got " + std::to_string(port));
  }
  const auto start = Clock::now();
  auto retryDelay = std::chrono::duration_cast<Clock::duration>(kFirstRetryDelay);
  std::string lastError;
  while (true) {
    std::vector<Address> addresses;
    try {
      // Resolved again on every round: a host name may appear in DNS after the job starts.
      addresses = resolve(host, port, /*passive=*/false);
    } catch (const TransportError& error) {
      lastError = error.what();
    }
    for (const Address& address : addresses) {
      UniqueFd fd = makeSocket(address.family());
      int rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address.storage),
                         address.length);
      // A non-blocking connect interrupted by a signal goes on in the background, like EINPROGRESS.
      if (rc != 0 && errno != EINPROGRESS && errno != EINTR) {
        lastError = errnoText(errno);
        continue;
      }
      if (rc != 0) {
        auto attemptDeadline =
            std::min(deadline, extendDeadline(Clock::now(), kConnectAttemptTimeout));
        if (!waitReady(fd.get(), POLLOUT, attemptDeadline)) {
          lastError = "no answer to the connection request";
          continue;
        }
        int error = 0;
        socklen_t length = sizeof(error);
        if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length) != 0) error = errno;
        if (error != 0) {
          lastError = errnoText(error);
          continue;
        }
      }
      if (connectedToItself(fd.get())) {
        lastError = errnoText(ECONNREFUSED);
        continue;
      }
      setNoDelay(fd.get());
      return fd;
    }
    auto now = Clock::now();
    if (!retry && now < deadline) {
      throwTransport("connect", "connect to " + formatHostPort(host, port) + ": " + lastError,
                     secondsSince(start));
    }
    if (now >= deadline) {
      double waited = secondsSince(start);
      throw TimeoutError("connect to " + formatHostPort(host, port) + " timed out after " +
                             formatSeconds(waited) + " s (last error: " + lastError + ")",
                         FailureContext{"connect", -1, -1, waited});
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(retryDelay, deadline - now));
    retryDelay = std::min<Clock::duration>(retryDelay * 2, kMaxRetryDelay);
  }
}

void setNonBlocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  checkSyscall(flags, "fcntl(F_GETFL)");
  checkSyscall(::fcntl(fd, F_SETFL, flags | O_NONBLOCK), "fcntl(O_NONBLOCK)");
}

void setNoDelay(int fd) {
  // Store requests and protocol headers are small and latency-bound: never wait for Nagle.
  int one = 1;
  checkSyscall(::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)), "TCP_NODELAY");
}

void setBufferSizes(int fd, int bytes) {
  checkSyscall(::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes)), "SO_SNDBUF");
  checkSyscall(::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes)), "SO_RCVBUF");
}

namespace {

// A socket's own address or its peer's, as `query` (getsockname, getpeername) gives it.
Address addressOf(int fd, int (*query)(int, sockaddr*, socklen_t*), const char* call) {
  Address address;
  address.length = sizeof(address.storage);
  checkSyscall(query(fd, reinterpret_cast<sockaddr*>(&address.storage), &address.length), call);
  return address;
}

}  // namespace

Address localAddress(int fd) { return addressOf(fd, ::getsockname, "getsockname"); }

Address peerAddress(int fd) { return addressOf(fd, ::getpeername, "getpeername"); }

bool waitReady(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd entry{fd, events, 0};
    int rc = ::poll(&entry, 1, pollTimeoutMs(deadline));
    if (rc > 0) return true;  // ready, or an error / hang-up the next call will report
    if (rc == 0) {
      // poll() may wake a little early (timer slack); only the deadline itself ends the wait.
      if (Clock::now() >= deadline) return false;
      continue;
    }
    if (errno != EINTR) throwTransport("poll", "poll() failed: " + errnoText(errno));
  }
}

size_t readSome(int fd, void* data, size_t size) {
  if (size == 0) return 0;
  while (true) {
    ssize_t n = ::recv(fd, data, size, 0);
    if (n > 0) return static_cast<size_t>(n);
    if (n == 0) throwTransport("receive", "connection closed by peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    throwTransport("receive", "receive failed: " + errnoText(errno));
  }
}

size_t writeSome(int fd, const void* data, size_t size) {
  if (size == 0) return 0;
  while (true) {
    ssize_t n = ::send(fd, data, size, kSendFlags);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    throwTransport("send", "send failed: " + errnoText(errno));
  }
}

namespace {

// readFully and writeFully: `size` bytes moved by `moveSome(done)` (the bytes it moved from offset
// `done` on), waiting for `events` whenever the socket takes none; a TimeoutError past `deadline`
// says how far the `operation` got ("of N bytes received").
template <typename MoveSome>
void moveFully(int fd, size_t size, Clock::time_point deadline, short events,
               const char* operation, const char* moved, MoveSome moveSome) {
  const auto start = Clock::now();
  size_t done = 0;
  while (done < size) {
    size_t n = moveSome(done);
    done += n;
    if (n == 0 && !waitReady(fd, events, deadline)) {
      double waited = secondsSince(start);
      throw TimeoutError(std::string(operation) + " timed out after " + formatSeconds(waited) +
                             " s (" + std::to_string(done) + " of " + std::to_string(size) +
                             " bytes " + moved + ")",
                         FailureContext{operation, -1, -1, waited});
    }
  }
}

}  // namespace

void readFully(int fd, void* data, size_t size, Clock::time_point deadline) {
  auto* bytes = static_cast<uint8_t*>(data);
  moveFully(fd, size, deadline, POLLIN, "receive", "received",
            [&](size_t done) { return readSome(fd, bytes + done, size - done); });
}

void writeFully(int fd, const void* data, size_t size, Clock::time_point deadline) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  moveFully(fd, size, deadline, POLLOUT, "send", "sent",
            [&](size_t done) { return writeSome(fd, bytes + done, size - done); });
}

Wakeup::Wakeup() {
  int fds[2];
  checkSyscall(::pipe(fds), "pipe");
  read_.reset(fds[0]);
  write_.reset(fds[1]);
  for (int fd : fds) {
    checkSyscall(::fcntl(fd, F_SETFD, FD_CLOEXEC), "fcntl(FD_CLOEXEC)");
    setNonBlocking(fd);
  }
}

void Wakeup::notify() {
  char byte = 1;
  // A full pipe already holds a pending wake-up, so EAGAIN loses nothing.
  while (::write(write_.get(), &byte, 1) < 0 && errno == EINTR) {
  }
}

void Wakeup::drain() {
  char buffer[64];
  while (true) {
    ssize_t n = ::read(read_.get(), buffer, sizeof(buffer));
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    return;  // empty (EAGAIN), or the write end is gone
  }
}

}  // namespace ringcomm::net
