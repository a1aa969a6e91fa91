// A new process joins a running communicator (Communicator::join), and the grown communicator
// that it and the members form together (their side is Communicator::grow,
// core/communicator_regroup.cc).
//
// The newcomer's way in, all through members' mailboxes (core/membership.h), whose connections
// prove the job's secret both ways:
//
//   1. Find a member: the addresses it was given, then those the members keep on the board (the
//      launcher's store, publishDoor), read afresh on every pass since members change. A mailbox
//      whose communicator was replaced (a shrink, a grow) points on to its successor.
//   2. Knock: count a knock in that mailbox ("door/knocks") and leave its Joiner there: a random
//      id and the address of a mailbox of its own, which answers for it while it waits (the
//      members admit only newcomers whose mailbox proves the secret, as they do ranks).
//   3. Wait for the welcome the member writes once the members' agreement admitted it: the round
//      and the leader's mailbox, where the leader wrote every member's address by new rank.
//   4. Form the grown communicator there with the members (formAmong). Where that fails (someone
//      died meanwhile), the members agree again and welcome it anew: it waits for that.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "auth/handshake.h"
#include "common/bytes.h"
#include "common/log.h"
#include "common/socket.h"
#include "core/forming.h"
#include "core/membership.h"
#include "ringcomm/communicator.h"
#include "ringcomm/errors.h"
#include "ringcomm/options.h"
#include "ringcomm/store.h"

namespace ringcomm {
namespace {

// How often a waiting newcomer looks for its welcome, and whether its member still lives.
constexpr std::chrono::milliseconds kWelcomeLook{50};
constexpr std::chrono::milliseconds kMemberLook{500};

std::string joinText(const Bytes& bytes) { return std::string(bytes.begin(), bytes.end()); }
Bytes joinBytes(const std::string& text) { return Bytes(text.begin(), text.end()); }

MailboxAddress parseHostPort(const std::string& text) {
  const size_t colon = text.rfind(':');
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return MailboxAddress{host, std::stoi(text.substr(colon + 1))};
}

std::string formatted(const MailboxAddress& address) {
  return net::formatHostPort(address.host, address.port);
}

// A random name for this newcomer, the same across its knocks.
std::string newcomerId() {
  uint8_t bytes[8];
  auth::randomBytes(bytes, sizeof(bytes));
  static const char* digits = "0123456789abcdef";
  std::string id;
  for (uint8_t b : bytes) {
    id += digits[b >> 4];
    id += digits[b & 15];
  }
  return id;
}

// The newcomer's side (the steps above), with what it learned so far.
class Newcomer {
 public:
  Newcomer(const JoinOptions& options, const Config& config)
      : options_(options), config_(config), id_(newcomerId()),
        deadline_(net::deadlineAfter(options.timeout.count() > 0 ? options.timeout
                                                                   : config.timeout)) {}

  std::shared_ptr<Communicator> join() {
    for (;;) {
      std::optional<MailboxAddress> member = findMember();
      while (member) {
        try {
          if (std::shared_ptr<Communicator> joined = knockAt(member)) return joined;
        } catch (const TimeoutError&) {
          if (Clock::now() >= deadline_) throw;
          member = std::nullopt;
        } catch (const TransportError&) {
          member = std::nullopt;  // its mailbox closed under this newcomer: find another
        }
      }
      std::this_thread::sleep_for(kDoorLook);
    }
  }

 private:
  // The first member whose mailbox proves the secret, among those given and on the board.
  std::optional<MailboxAddress> findMember() {
    std::vector<MailboxAddress> candidates;
    for (const std::string& address : options_.addresses) {
      candidates.push_back(parseHostPort(address));
    }
    if (options_.board) {
      if (const std::optional<Bytes> door = options_.board->tryGet(options_.doorKey, kDoorLook)) {
        for (const MailboxAddress& address : decodeMembers(*door)) candidates.push_back(address);
      }
    }
    const std::vector<Reach> reached = candidates.empty()
                                           ? std::vector<Reach>{}
                                           : probeMailboxes(candidates, config_.secret,
                                                            Clock::now() + kDoorLook);
    bool strangers = !candidates.empty();
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (reached[i] == Reach::Answers) return candidates[i];
      strangers = strangers && reached[i] == Reach::Unproven;
    }
    std::string tried;
    for (const MailboxAddress& address : candidates) tried += " " + formatted(address);
    if (strangers) {
      // Every one answered without proving the secret: this process has another secret than
      // the job's, or these are another job's addresses.
      throw TransportError(
          "ringcomm: join: no member proved the job's secret at" + tried +
              ": this process's secret is not the job's (RINGCOMM_SECRET / RINGCOMM_SECRET_FILE "
              "must be the members'), or these addresses are another job's",
          FailureContext{"join", -1, -1, 0.0});
    }
    if (Clock::now() >= deadline_) {
      throw TimeoutError("ringcomm: join: no member answered by the deadline (tried" +
                             (tried.empty() ? std::string(" none: the board held no addresses")
                                            : tried) +
                             ")",
                         FailureContext{"join", -1, -1, 0.0});
    }
    return std::nullopt;
  }

  // A mailbox of this newcomer's own, on the address that reaches the member: it answers for
  // this process while it waits, and the members watch it as they form the grown communicator.
  void openMailbox(Store& door) {
    if (config_.listenAddress.empty()) config_.listenAddress = listenAddressFor(config_, door);
    mailbox_ = std::make_shared<TcpStoreServer>(config_.listenAddress, 0, config_.secret);
    own_ = MailboxAddress{config_.listenAddress, mailbox_->port()};
  }

  // Knocks at `member` and waits there. Returns the grown communicator, or nullptr with `member`
  // set to where the members went on (a replaced communicator's successor), or unset where the
  // member is gone.
  std::shared_ptr<Communicator> knockAt(std::optional<MailboxAddress>& member) {
    const std::shared_ptr<Store> door = std::make_shared<TcpStore>(
        member->host, member->port, std::max(std::chrono::milliseconds(1), kDoorLook),
        config_.secret);
    if (!mailbox_) openMailbox(*door);
    // Knocks where the members are now: a replaced communicator points on.
    if (const std::optional<Bytes> next = door->tryGet("door/successor", kDoorLook)) {
      member = parseHostPort(joinText(*next));
      return nullptr;
    }
    const int64_t knock = door->add("door/knocks", 1);
    door->set("door/knock/" + std::to_string(knock),
              joinBytes("join " + id_ + " " + own_.host + " " + std::to_string(own_.port)));
    RINGCOMM_LOG(LogLevel::Info, kLogInit, "join: knocked at %s as newcomer %s",
                 formatted(*member).c_str(), id_.c_str());
    const MailboxAddress at = *member;
    member = std::nullopt;
    return awaitWelcome(*door, at, knock, member);
  }

  // Waits at `member` for the welcome of knock `knock`; forms the grown communicator on each
  // welcome (a new round after one that failed). nullptr where the member went on without it:
  // `next` then says where (its communicator was replaced), or stays unset (it died).
  std::shared_ptr<Communicator> awaitWelcome(Store& door, const MailboxAddress& member,
                                             int64_t knock, std::optional<MailboxAddress>& next) {
    std::string lastRound;
    auto lastLook = Clock::now();
    for (;;) {
      if (Clock::now() >= deadline_) {
        throw TimeoutError("ringcomm: join: the members did not admit this newcomer (" + id_ +
                               ", knocked at " + formatted(member) +
                               ") by the deadline: they admit newcomers when they call grow()",
                           FailureContext{"join", -1, -1, 0.0});
      }
      std::optional<Bytes> welcome;
      welcome = door.tryGet("door/welcome/" + std::to_string(knock), kDoorLook);
      if (welcome) {
        std::istringstream words(joinText(*welcome));
        std::string round;
        MailboxAddress leader;
        words >> round >> leader.host >> leader.port;
        if (round != lastRound) {
          lastRound = round;
          try {
            return meet(leader, round);
          } catch (const PeerError& error) {
            RINGCOMM_LOG(LogLevel::Warn, kLogInit,
                         "join: the grown communicator did not form (%s); waiting for the "
                         "members to agree again",
                         error.what());
          }
        }
      }
      if (Clock::now() - lastLook >= kMemberLook) {
        lastLook = Clock::now();
        if (const std::optional<Bytes> successor = door.tryGet("door/successor", kDoorLook)) {
          next = parseHostPort(joinText(*successor));
          return nullptr;
        }
        if (probeMailbox(member, config_.secret, Clock::now() + kDoorLook) != Reach::Answers) {
          return nullptr;
        }
      }
      std::this_thread::sleep_for(kWelcomeLook);
    }
  }

  std::shared_ptr<Communicator> meet(const MailboxAddress& leader, const std::string& round) {
    const std::shared_ptr<Store> meeting = std::make_shared<TcpStore>(
        leader.host, leader.port, std::max(std::chrono::milliseconds(1), kDoorLook),
        config_.secret);
    const std::vector<MailboxAddress> members =
        decodeMembers(meeting->get(round + "/members", kDoorLook * 5));
    int rank = -1;
    int leading = -1;
    for (size_t r = 0; r < members.size(); ++r) {
      if (members[r].host == own_.host && members[r].port == own_.port) rank = static_cast<int>(r);
      if (members[r].host == leader.host && members[r].port == leader.port) {
        leading = static_cast<int>(r);
      }
    }
    if (rank < 0) {
      throw TransportError("ringcomm: join: the members' list of round " + round +
                               " does not name this newcomer",
                           FailureContext{"join", -1, -1, 0.0});
    }
    std::vector<int> former;
    std::istringstream formerRanks(joinText(meeting->get(round + "/former", kDoorLook * 5)));
    for (int r; formerRanks >> r;) former.push_back(r);
    std::shared_ptr<Communicator> joined =
        formAmong(meeting, members, rank, leading, round + "/comm/", config_, deadline_);
    former.resize(members.size(), -1);
    setFormerRanks(*joined, std::move(former));
    keepAlive(*joined, mailbox_);  // holds its claim to go on (FormingStore::commit)
    RINGCOMM_LOG(LogLevel::Info, kLogInit, "join: newcomer %s is rank %d of %d", id_.c_str(),
                 joined->rank(), joined->size());
    return joined;
  }

  const JoinOptions options_;
  Config config_;
  const std::string id_;
  const Clock::time_point deadline_;
  std::shared_ptr<TcpStoreServer> mailbox_;  // while it waits
  MailboxAddress own_;
};

}  // namespace

Bytes encodeMembers(const std::vector<MailboxAddress>& members) {
  std::string text;
  for (const MailboxAddress& member : members) {
    text += member.host + " " + std::to_string(member.port) + "\n";
  }
  return joinBytes(text);
}

std::vector<MailboxAddress> decodeMembers(const Bytes& text) {
  std::vector<MailboxAddress> members;
  std::istringstream lines(joinText(text));
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    MailboxAddress member;
    if (words >> member.host >> member.port) {
      members.push_back(member);
    } else if (!line.empty()) {  // the board's "host:port" form (publishDoor)
      members.push_back(parseHostPort(line));
    }
  }
  return members;
}

std::shared_ptr<Communicator> formAmong(std::shared_ptr<Store> meeting,
                                        const std::vector<MailboxAddress>& members, int rank,
                                        int leader, const std::string& scope,
                                        const Config& config, Clock::time_point deadline) {
  std::vector<std::pair<int, MailboxAddress>> watched;
  for (size_t r = 0; r < members.size(); ++r) {
    if (static_cast<int>(r) != rank) watched.emplace_back(static_cast<int>(r), members[r]);
  }
  const auto forming = std::make_shared<FormingStore>(
      std::move(meeting), std::move(watched), scope, rank, leader, config.secret,
      members.at(static_cast<size_t>(rank)));
  const auto setup = std::max(std::chrono::milliseconds(1), millisecondsLeft(deadline));
  try {
    std::shared_ptr<Communicator> formed =
        createCommunicator(forming, scope, rank, static_cast<int>(members.size()), config, setup,
                           [&forming] { forming->check(); }, /*withMailbox=*/true);
    forming->commit(deadline);
    return formed;
  } catch (const std::exception& error) {
    forming->abandon(error.what());  // whatever ended it: the others stop too (as join())
    throw;
  }
}

std::shared_ptr<Communicator> Communicator::join(const JoinOptions& options,
                                                 const Config& config) {
  options.validate();
  if (config.secret.empty()) {
    throw InvalidArgument("join: no job secret (Config::secret): a newcomer proves the job's "
                          "secret to the members (RINGCOMM_SECRET, RINGCOMM_SECRET_FILE)");
  }
  return Newcomer(options, config).join();
}

}  // namespace ringcomm
