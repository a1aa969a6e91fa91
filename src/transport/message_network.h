// A network that moves whole messages (UCX), beside the byte streams (TCP, shared-memory rings)
// that a stream link frames. Each of its peers is a network link (peer_link.h: networkLink),
// which keeps the numbering and the checks, and Transport the order and the waiting; a network
// only starts sends, hands over what arrived, and says when it needs progress or has failed.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "transport/frame.h"

namespace ringcomm::transport {

// Where a message's bytes are: host memory, or CUDA device memory (to and from a network that
// takes it only: MessageNetwork::takesDeviceMemory).
enum class Memory { Host, Cuda };

class MessageNetwork {
 public:
  // Where one send or receive stands; the network sets it, from its progress (or from the
  // thread that closes it): `failure` first, then `done` (release), read after `done` (acquire).
  struct Completion {
    std::atomic<bool> done{false};
    std::string failure;  // set before done when the operation failed

    bool isDone() const { return done.load(std::memory_order_acquire); }
  };

  virtual ~MessageNetwork() = default;
  virtual const char* kind() const = 0;  // "ucx"
  // Whether this network links this rank to `peer` (its kind chose it for the pair).
  virtual bool reaches(int peer) const = 0;
  // Whether send() and receive() take CUDA device memory (a UCX built with CUDA moves it with
  // its CUDA lanes: copies, IPC within a host, GPUDirect RDMA where the fabric has it).
  virtual bool takesDeviceMemory() const = 0;

  // Starts sending the peer's frame number `sequence` (from 1, per peer): `data` stays valid
  // until `completion` is done.
  virtual void send(int peer, uint64_t sequence, const FrameHeader& header, const void* data,
                    Memory memory, std::shared_ptr<Completion> completion) = 0;
  // The header of the peer's frame number `sequence`, once it has arrived (null before).
  virtual const FrameHeader* arrived(int peer, uint64_t sequence) = 0;
  // Takes that arrived frame's payload into `data` (header.bytes long): copied at once, or read
  // from the sender's memory (rendezvous) by the time `completion` is done.
  // Whatever memory the sender's bytes were in.
  virtual void receive(int peer, uint64_t sequence, void* data, Memory memory,
                       std::shared_ptr<Completion> completion) = 0;

  // Memory that stays in use for long (scratch buffers): registered with the network once, so
  // that messages from and into it skip the per-message registration (RDMA). Until forgotten.
  virtual void registerMemory(void* data, size_t bytes) = 0;
  virtual void forgetMemory(void* data) = 0;

  // Moves what can move; true when anything happened (a message arrived, an operation ended).
  virtual bool progress() = 0;
  // A descriptor to poll() for input before sleeping, after readyToSleep() said yes; -1: none.
  virtual int eventFd() const = 0;
  // False when events are already waiting (progress again instead of sleeping).
  virtual bool readyToSleep() = 0;
  // Empty while the link to `peer` is healthy; else why it is not, naming the rank.
  virtual std::string failure(int peer) const = 0;
  // Every link fails from now on, for peers too: they are told at once. From any thread (the
  // engine's may be using the network meanwhile).
  virtual void close() = 0;
};

}  // namespace ringcomm::transport
