// TCP plumbing shared by the rendezvous store and the TCP transport: an owning file descriptor,
// name resolution, listen / accept / connect-with-retry, and reads and writes that respect a
// deadline.
//
// Conventions:
//   - Every socket these helpers create is non-blocking and close-on-exec. Blocking is done in one
//     place, poll(), always with a deadline, so no call here can hang past the caller's deadline.
//   - Failures throw the core's errors (ringcomm/errors.h) with a plain message and an empty
//     FailureContext (no rank, no peer): a caller that knows which rank or store it was talking to
//     catches them and rethrows with that context (see TcpStore, the TCP transport).
//       TimeoutError    the deadline passed
//       TransportError  the connection failed, was refused, reset, or closed by the peer
//   - Writes never raise SIGPIPE (MSG_NOSIGNAL / SO_NOSIGPIPE): a dead peer is an exception.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "common/deadline.h"

namespace ringcomm::net {

// Owns one file descriptor (socket or pipe end) and closes it exactly once.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  explicit operator bool() const noexcept { return valid(); }
  // Gives up ownership without closing.
  int release() noexcept {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  // Closes the current descriptor (if any) and takes ownership of fd.
  void reset(int fd = -1) noexcept;

 private:
  int fd_ = -1;
};

// One resolved socket address (IPv4 or IPv6).
struct Address {
  sockaddr_storage storage{};
  socklen_t length = 0;

  int family() const { return storage.ss_family; }
  // The numeric host, e.g. "127.0.0.1" or "::1". An IPv4-mapped IPv6 address ("::ffff:10.0.0.1")
  // is written as the IPv4 address it maps.
  std::string host() const;
  int port() const;
  // "127.0.0.1:29500" or "[::1]:29500".
  std::string toString() const;
};

// "host:port", bracketing an IPv6 literal: "[::1]:29500". For messages.
std::string formatHostPort(const std::string& host, int port);
// strerror(error), naming the descriptor limit where it is the cause (EMFILE, ENFILE).
std::string errnoText(int error);

// now + timeout, saturating at Clock::time_point::max() instead of overflowing, so that a caller's
// "wait practically forever" (std::chrono::milliseconds::max()) stays a valid deadline.
Clock::time_point deadlineAfter(std::chrono::milliseconds timeout);
// deadline + extra, saturating likewise.
Clock::time_point extendDeadline(Clock::time_point deadline, std::chrono::milliseconds extra);
double secondsSince(Clock::time_point start);

// Resolves host:port with getaddrinfo (numeric addresses and host names). passive = for bind():
// host "" then means every interface. Throws TransportError naming host:port when nothing resolves.
std::vector<Address> resolve(const std::string& host, int port, bool passive);

// A listening TCP socket (SO_REUSEADDR, non-blocking). host "" or "0.0.0.0" = every IPv4
// interface, "::" = every interface (dual stack where the OS allows); anything else is resolved and
// the first address that binds is used. port 0 picks a free port (see localAddress().port()).
// Throws InvalidArgument for a port outside 0..65535, TransportError when nothing can be bound.
UniqueFd listenTcp(const std::string& host, int port, int backlog = SOMAXCONN);

// Accepts one pending connection from a non-blocking listener: the new socket is non-blocking,
// close-on-exec, with TCP_NODELAY. Returns an invalid UniqueFd when none is pending.
UniqueFd acceptTcp(int listenFd);

// Connects to host:port, retrying (with backoff) refused, unreachable and unresolvable attempts
// until the deadline, because the listener may start after us. Tries every resolved address. The
// socket returned is non-blocking with TCP_NODELAY. Throws TimeoutError naming host:port and the
// last error when the deadline passes, InvalidArgument for a port outside 1..65535. `retry`
// false: one round over the addresses (a listener known to be up, whose refusal is an answer),
// TransportError with the last error where none takes the connection.
UniqueFd connectTcp(const std::string& host, int port, Clock::time_point deadline,
                    bool retry = true);

void setNonBlocking(int fd);
void setNoDelay(int fd);
// SO_SNDBUF and SO_RCVBUF; the kernel may round (or cap) the value.
void setBufferSizes(int fd, int bytes);

// getsockname / getpeername. Throw TransportError when the socket has no such address.
Address localAddress(int fd);
Address peerAddress(int fd);

// Waits until fd is ready for events (POLLIN / POLLOUT), or has an error or hang-up pending, which
// the next read or write will report. Returns false when the deadline passes first.
bool waitReady(int fd, short events, Clock::time_point deadline);

// What is ready now, without blocking: returns the bytes moved, 0 when the call would block.
// Throws TransportError when the peer closed the connection (readSome) or it failed (both).
size_t readSome(int fd, void* data, size_t size);
size_t writeSome(int fd, const void* data, size_t size);

// Moves exactly size bytes, waiting with poll() as needed. Throws TimeoutError (saying how many
// bytes had moved) when the deadline passes, TransportError when the connection closes or fails.
void readFully(int fd, void* data, size_t size, Clock::time_point deadline);
void writeFully(int fd, const void* data, size_t size, Clock::time_point deadline);

// Wakes a thread blocked in poll() from another thread (the self-pipe trick): poll readFd() for
// POLLIN, call drain() when it fires, notify() from anywhere (async-signal-safe, never blocks).
class Wakeup {
 public:
  Wakeup();
  int readFd() const { return read_.get(); }
  void notify();
  void drain();

 private:
  UniqueFd read_;
  UniqueFd write_;
};

}  // namespace ringcomm::net
