// Buffers from ringcomm::allocateSharedMemory: found by any address inside them, mapped by a peer
// (here this process itself, through its own pidfd) so that writes through either address meet,
// and a descriptor naming anything else is refused.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <thread>

#include "check.h"
#include "ringcomm/shared_memory.h"
#include "transport/shm/shared_buffers.h"

using namespace ringcomm;

TEST(sharedBuffersAreFoundByAnyRangeInside) {
  auto* buffer = static_cast<uint8_t*>(allocateSharedMemory(1 << 20));
  const auto inside = shm::findSharedBuffer(buffer + 4096, 100);
  CHECK(inside.has_value());
  CHECK_EQ(inside->offset, uint64_t{4096});
  CHECK_EQ(inside->bytes, uint64_t{1} << 20);
  CHECK(inside->serial != 0);
  CHECK(!shm::findSharedBuffer(buffer + (1 << 20) - 10, 11).has_value());  // runs past its end
  int local = 0;
  CHECK(!shm::findSharedBuffer(&local, sizeof(local)).has_value());
  freeSharedMemory(buffer);
  CHECK(!shm::findSharedBuffer(buffer, 1).has_value());
}

TEST(aPeerMapsTheSameMemory) {
  auto* buffer = static_cast<uint8_t*>(allocateSharedMemory(3 * 4096));
  const shm::SharedLocation location = *shm::findSharedBuffer(buffer, 1);
  {
    shm::PeerBufferMappings mappings;
    uint8_t* mapped = mappings.map(1, getpid(), location);
    CHECK(mapped != nullptr && mapped != buffer);
    mapped[5000] = 42;
    CHECK_EQ(int{buffer[5000]}, 42);
    CHECK(mappings.map(1, getpid(), location) == mapped);  // kept
  }
  freeSharedMemory(buffer);
}

TEST(aDescriptorOfAnotherFileIsRefused) {
  auto* buffer = static_cast<uint8_t*>(allocateSharedMemory(4096));
  shm::SharedLocation forged = *shm::findSharedBuffer(buffer, 1);
  const int other = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  CHECK(other >= 0);
  forged.fd = other;
  forged.bytes = static_cast<uint64_t>(lseek(other, 0, SEEK_END));
  shm::PeerBufferMappings mappings;
  CHECK(mappings.map(1, getpid(), forged) == nullptr);
  close(other);
  shm::PeerBufferMappings sizes;
  shm::SharedLocation wrongSize = *shm::findSharedBuffer(buffer, 1);
  wrongSize.bytes += 4096;
  CHECK(sizes.map(1, getpid(), wrongSize) == nullptr);
  // Another buffer of the same size, under this one's serial.
  auto* another = static_cast<uint8_t*>(allocateSharedMemory(4096));
  shm::SharedLocation swapped = *shm::findSharedBuffer(buffer, 1);
  swapped.fd = shm::findSharedBuffer(another, 1)->fd;
  shm::PeerBufferMappings serials;
  CHECK(serials.map(1, getpid(), swapped) == nullptr);
  CHECK(serials.map(2, getpid(), *shm::findSharedBuffer(another, 1)) != nullptr);  // per peer
  freeSharedMemory(another);
  freeSharedMemory(buffer);
}

TEST(aChildForkedWhileAnotherThreadAllocatesCanAllocate) {
  // Without the fork handlers, a fork while the allocating thread holds the registry's lock
  // leaves the child's copy locked: its first allocation would never return.
  std::atomic<bool> stop{false};
  std::thread churn([&stop] {
    // Lookups hold the lock most of the time this thread runs.
    auto* buffer = static_cast<uint8_t*>(allocateSharedMemory(4096));
    while (!stop.load()) (void)shm::findSharedBuffer(buffer, 1);
    freeSharedMemory(buffer);
  });
  int stuck = 0;
  for (int child = 0; child < 200; ++child) {
    const pid_t pid = fork();
    if (pid == 0) {
      alarm(10);  // a deadlocked child dies of SIGALRM instead of hanging the test
      freeSharedMemory(allocateSharedMemory(4096));
      _exit(0);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) ++stuck;
  }
  stop.store(true);
  churn.join();
  CHECK_EQ(stuck, 0);
}
