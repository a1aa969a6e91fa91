// Growing the default group in place (ringcomm/c10d/grow.py): the members' grow and a
// newcomer's join, on the core's Communicator::grow and Communicator::join. torch 2.13 has no
// grow API; the Python side files the new backend as torch's shrink_group files a shrunk one.
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend.h"
#include "ringcomm/communicator.h"
#include "ringcomm/config.h"
#include "ringcomm/options.h"
#include "ringcomm/store.h"

namespace ringcomm::c10d_backend {
namespace {

// The board of members' addresses (Communicator::publishDoor) that `spec` names: a directory
// (RINGCOMM_DOOR_DIR, any spec with a '/'), or the launcher's store ("host:port").
std::shared_ptr<Store> boardOf(const std::string& spec, const std::string& secret,
                               std::chrono::milliseconds wait) {
  if (spec.find('/') != std::string::npos) return std::make_shared<FileStore>(spec);
  const size_t colon = spec.rfind(':');
  return std::make_shared<TcpStore>(spec.substr(0, colon), std::stoi(spec.substr(colon + 1)),
                                    wait, secret);
}

}  // namespace

c10::intrusive_ptr<RingcommBackend> RingcommBackend::grow(int expect,
                                                          std::chrono::milliseconds timeout) {
  GrowOptions options;
  options.expect = expect;
  options.timeout = timeout;
  std::shared_ptr<Communicator> grown = communicator_->grow(options);
  if (!grown) return nullptr;
  return c10::make_intrusive<RingcommBackend>(std::move(grown));
}

c10::intrusive_ptr<RingcommBackend> RingcommBackend::join(
    const std::vector<std::string>& addresses, const std::string& board, const std::string& doorKey,
    std::chrono::milliseconds timeout, const std::string& secret) {
  Config config = Config::fromEnvironment();
  if (timeout.count() > 0) config.timeout = timeout;
  if (!secret.empty()) config.secret = secret;
  JoinOptions options;
  options.addresses = addresses;
  options.timeout = timeout;
  if (!board.empty()) {
    options.board = boardOf(board, config.secret, kBoardWait);
    options.doorKey = doorKey;
  }
  std::shared_ptr<Communicator> joined = Communicator::join(options, config);
  if (options.board) joined->publishDoor(options.board, doorKey);
  return c10::make_intrusive<RingcommBackend>(std::move(joined));
}

void RingcommBackend::publishDoor(const std::string& board, const std::string& doorKey,
                                  const std::string& secret) {
  communicator_->publishDoor(
      boardOf(board, secret.empty() ? communicator_->config().secret : secret, kBoardWait),
      doorKey);
}

}  // namespace ringcomm::c10d_backend
