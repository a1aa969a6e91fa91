// How a communicator comes to be: create() (core/communicator.cc) and the regroupings
// (core/communicator_regroup.cc), and the grown communicator that members and newcomers form
// together (core/joining.cc).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/bytes.h"
#include "common/deadline.h"
#include "core/membership.h"
#include "ringcomm/communicator.h"
#include "ringcomm/config.h"
#include "ringcomm/store.h"

namespace ringcomm {

// How long one look at a mailbox or at the board of members' addresses may take (a store round
// trip; longer only where a host is lost).
constexpr std::chrono::milliseconds kDoorLook{200};

// Creates a communicator: `setupTimeout` bounds its rendezvous and connections (a regrouping's
// are bounded by its deadline), config.timeout its collectives. `watch`, where given, is called
// while connecting and raises where the communicator can no longer form (FormingStore::check).
// `withMailbox`: serves a mailbox however few its ranks (a regrouping's, which may grow later);
// otherwise only with two ranks or more.
std::shared_ptr<Communicator> createCommunicator(std::shared_ptr<Store> store,
                                                 const std::string& scope, int rank, int size,
                                                 const Config& config,
                                                 std::chrono::milliseconds setupTimeout,
                                                 const std::function<void()>& watch,
                                                 bool withMailbox);

// Communicator::formerRanks() of a communicator that replaced another (`ranks`, by rank).
void setFormerRanks(Communicator& communicator, std::vector<int> ranks);

// Keeps `owner` (a mailbox others may still read) as long as `communicator`.
void keepAlive(Communicator& communicator, std::shared_ptr<void> owner);

// The address this rank listens on: Config's, its interface's, or the one that reaches `store`.
std::string listenAddressFor(const Config& config, Store& store);

// The members of a grown communicator, by new rank: their mailboxes, which each watches while it
// forms. One "host port" line each.
Bytes encodeMembers(const std::vector<MailboxAddress>& members);
std::vector<MailboxAddress> decodeMembers(const Bytes& text);

// Forms the grown communicator of `members` as member `rank`, meeting in `meeting` (the mailbox
// of member `leader`, who watches the others while they form: FormingStore) under `scope`: every
// member and newcomer ends with it, or all raise TransportError and agree again.
std::shared_ptr<Communicator> formAmong(std::shared_ptr<Store> meeting,
                                        const std::vector<MailboxAddress>& members, int rank,
                                        int leader, const std::string& scope,
                                        const Config& config, Clock::time_point deadline);

}  // namespace ringcomm
