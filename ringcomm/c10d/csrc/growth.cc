// Growing the default group in place (ringcomm/c10d/grow.py): the members' grow and a
// newcomer's join, on the core's Communicator::grow and Communicator::join. torch 2.13 has no
// grow API; the Python side files the new backend as torch's shrink_group files a shrunk one.
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend.h"

namespace ringcomm::c10d_backend {

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
    const size_t colon = board.rfind(':');
    options.board = std::make_shared<TcpStore>(board.substr(0, colon),
                                               std::stoi(board.substr(colon + 1)), kBoardWait,
                                               config.secret);
    options.doorKey = doorKey;
  }
  std::shared_ptr<Communicator> joined = Communicator::join(options, config);
  if (options.board) joined->publishDoor(options.board, doorKey);
  return c10::make_intrusive<RingcommBackend>(std::move(joined));
}

void RingcommBackend::publishDoor(const std::string& board, const std::string& doorKey,
                                  const std::string& secret) {
  const size_t colon = board.rfind(':');
  communicator_->publishDoor(
      std::make_shared<TcpStore>(board.substr(0, colon), std::stoi(board.substr(colon + 1)),
                                 kBoardWait, secret.empty() ? communicator_->config().secret
                                                            : secret),
      doorKey);
}

}  // namespace ringcomm::c10d_backend
