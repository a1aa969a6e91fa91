// UCX as a message network (transport/message_network.h): one UCP worker per communicator, an
// endpoint per peer, a frame per active message (its FrameHeader the message's header; payloads
// past UCX's eager size move by rendezvous, zero-copy where the lane allows).
//
// UCX endpoints do not authenticate. Worker addresses travel only through the job's store
// (authenticated), each with a fresh nonce; a peer proves the job's secret in its first message
// (an HMAC naming both ranks and the receiver's nonce), and the receiver accepts frames only from
// the endpoints that proved it. Built only where CMake found UCX (ucx_unavailable.cc otherwise).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bootstrap/rendezvous.h"
#include "common/deadline.h"
#include "ringcomm/config.h"
#include "ringcomm/store.h"
#include "transport/message_network.h"

namespace ringcomm::transport {

// The UCX API this build was compiled against ("1.13"), or "" for a build without UCX. The
// library itself loads when first needed (ucx_api.h).
std::string ucxHeaders();
// The UCX library that loads here ("1.13.1"), or "" with why not in `whyNot`. Loads it.
std::string ucxVersion(std::string* whyNot = nullptr);

// The lanes UCX offers on this machine, by kind of peer ("same host: posix, sysv, cma; other
// hosts: tcp (eth0); device memory: cuda_copy"), for `ringcomm info`. Empty without UCX.
std::string ucxLanes();
// Whether UCX reaches other hosts by RDMA from here (an rc, dc or ud lane on some device).
bool ucxOffersRdma();

// Connects to `peers` (ranks of the rendezvous) through UCX, meeting in `store`; every peer has
// proved the job's secret, and been told this rank's proof was accepted, on return. `watch` as in
// connectPeers.
std::unique_ptr<MessageNetwork> connectUcx(Store& store, int rank,
                                           const bootstrap::Rendezvous& rendezvous,
                                           const std::vector<int>& peers, const Config& config,
                                           const Operation& op,
                                           const std::function<void()>& watch);

}  // namespace ringcomm::transport
