// What the agreement (membership.cc) and a forming communicator's store (forming_store.cc) share:
// how long they wait on a mailbox, and the text their values carry.
#pragma once

#include <chrono>
#include <string>

#include "ringcomm/store.h"

namespace ringcomm {

// How long one liveness question waits for the connection to be accepted or refused.
constexpr std::chrono::milliseconds kProbeWait{200};
// How often a waiting rank asks the mailboxes of those it waits for whether they still live.
constexpr std::chrono::milliseconds kProbeInterval{100};
// How long one wait for a key in a mailbox blocks before the waiter looks around again.
constexpr std::chrono::milliseconds kWaitSlice{50};

inline Bytes bytesOf(const std::string& text) { return Bytes(text.begin(), text.end()); }
inline std::string textOf(const Bytes& bytes) { return std::string(bytes.begin(), bytes.end()); }

}  // namespace ringcomm
