#include "queue/negotiation.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <utility>

#include "ringcomm/errors.h"

namespace ringcomm::queue {
namespace {

// Little-endian fields, appended in order; the reader checks every length against what is left.
class Writer {
 public:
  template <typename T>
  void put(T value) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(&value);
    out_.insert(out_.end(), bytes, bytes + sizeof(T));
  }
  void putString(const std::string& text) {
    put<uint32_t>(static_cast<uint32_t>(text.size()));
    out_.insert(out_.end(), text.begin(), text.end());
  }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), left_(size) {}
  template <typename T>
  T get() {
    T value;
    std::memcpy(&value, take(sizeof(T)), sizeof(T));
    return value;
  }
  std::string getString() {
    const uint32_t length = get<uint32_t>();
    const auto* bytes = reinterpret_cast<const char*>(take(length));
    return std::string(bytes, length);
  }

 private:
  const uint8_t* take(size_t n) {
    if (n > left_) throw Error("tensor queue: a peer sent a malformed cycle message");
    const uint8_t* at = data_;
    data_ += n;
    left_ -= n;
    return at;
  }
  const uint8_t* data_;
  size_t left_;
};

constexpr uint8_t kJoin = 1;
constexpr uint8_t kShutdown = 2;
constexpr uint8_t kAwaiting = 4;
constexpr uint8_t kDeviceMemory = 1;  // an announcement's flags

std::string shapeText(const std::vector<int64_t>& shape) {
  std::ostringstream text;
  text << "[";
  for (size_t i = 0; i < shape.size(); ++i) text << (i ? ", " : "") << shape[i];
  text << "]";
  return text.str();
}

// Whether two ranks' announcements of one name can run as one collective.
bool compatible(const Announcement& a, const Announcement& b) {
  if (a.op != b.op || a.type != b.type || a.device != b.device) return false;
  switch (a.op) {
    case TensorOp::Allreduce:
      return a.shape == b.shape && reduceAlike(a, b);
    case TensorOp::Allgather:  // the first dimension may differ
      return a.shape.size() == b.shape.size() &&
             std::equal(a.shape.begin() + (a.shape.empty() ? 0 : 1), a.shape.end(),
                        b.shape.begin() + (b.shape.empty() ? 0 : 1));
    case TensorOp::Broadcast:
      return a.shape == b.shape && a.root == b.root;
    case TensorOp::Reducescatter:
      return a.shape == b.shape && a.reduceOp == b.reduceOp && a.prescale == b.prescale &&
             a.postscale == b.postscale;
    case TensorOp::Alltoall:  // each rank sends rows of its own count; the row shape must match
      return a.shape.size() == b.shape.size() && !a.shape.empty() &&
             std::equal(a.shape.begin() + 1, a.shape.end(), b.shape.begin() + 1) &&
             a.splits.size() == b.splits.size();
  }
  return false;
}

}  // namespace

bool reduceAlike(const Announcement& a, const Announcement& b) {
  return a.op == TensorOp::Allreduce && b.op == TensorOp::Allreduce && a.type == b.type &&
         a.reduceOp == b.reduceOp && a.compression == b.compression &&
         a.prescale == b.prescale && a.postscale == b.postscale && a.device == b.device;
}

Announcement Announcement::of(const TensorRequest& request) {
  Announcement a;
  a.op = request.op;
  a.type = request.type;
  a.reduceOp = request.reduceOp;
  a.compression = request.compression;
  a.root = request.root;
  a.prescale = request.prescale;
  a.postscale = request.postscale;
  a.device = request.deviceMemory;
  a.shape = request.shape;
  a.splits = request.splits;
  a.name = request.name;
  return a;
}

size_t Announcement::count() const {
  size_t count = 1;
  for (int64_t dim : shape) count *= static_cast<size_t>(dim);
  return count;
}

std::string Announcement::describe() const {
  std::ostringstream text;
  text << toString(op) << " of " << toString(type) << " " << shapeText(shape)
       << (device ? " on CUDA" : "");
  if (op == TensorOp::Allreduce || op == TensorOp::Reducescatter) {
    text << " (" << toString(reduceOp);
    if (compression != Compression::None) text << ", " << toString(compression) << " on the wire";
    if (prescale != 1.0) text << ", prescale " << prescale;
    if (postscale != 1.0) text << ", postscale " << postscale;
    text << ")";
  }
  if (op == TensorOp::Broadcast) text << " from root " << root;
  if (op == TensorOp::Alltoall) text << " split " << shapeText(splits);
  return text.str();
}

std::vector<uint8_t> encode(const CycleMessage& message) {
  Writer out;
  out.put<uint8_t>((message.join ? kJoin : 0) | (message.shutdown ? kShutdown : 0) |
                   (message.awaiting ? kAwaiting : 0));
  out.put<uint32_t>(static_cast<uint32_t>(message.expired.size()));
  for (const Expiry& expiry : message.expired) {
    out.putString(expiry.name);
    out.putString(expiry.reason);
  }
  out.put<uint32_t>(static_cast<uint32_t>(message.announcements.size()));
  for (const Announcement& a : message.announcements) {
    out.put<uint8_t>(static_cast<uint8_t>(a.op));
    out.put<uint8_t>(static_cast<uint8_t>(a.type));
    out.put<uint8_t>(static_cast<uint8_t>(a.reduceOp));
    out.put<uint8_t>(static_cast<uint8_t>(a.compression));
    out.put<int32_t>(a.root);
    out.put<double>(a.prescale);
    out.put<double>(a.postscale);
    out.put<uint8_t>(a.device ? kDeviceMemory : 0);
    out.put<uint32_t>(static_cast<uint32_t>(a.shape.size()));
    for (int64_t dim : a.shape) out.put<int64_t>(dim);
    out.put<uint32_t>(static_cast<uint32_t>(a.splits.size()));
    for (int64_t rows : a.splits) out.put<int64_t>(rows);
    out.putString(a.name);
  }
  return out.take();
}

CycleMessage decode(const uint8_t* data, size_t size) {
  Reader in(data, size);
  CycleMessage message;
  const auto flags = in.get<uint8_t>();
  message.join = (flags & kJoin) != 0;
  message.shutdown = (flags & kShutdown) != 0;
  message.awaiting = (flags & kAwaiting) != 0;
  const auto expiries = in.get<uint32_t>();
  for (uint32_t i = 0; i < expiries; ++i) {
    Expiry expiry;
    expiry.name = in.getString();
    expiry.reason = in.getString();
    message.expired.push_back(std::move(expiry));
  }
  const auto count = in.get<uint32_t>();
  for (uint32_t i = 0; i < count; ++i) {
    Announcement a;
    a.op = static_cast<TensorOp>(in.get<uint8_t>());
    a.type = static_cast<DataType>(in.get<uint8_t>());
    a.reduceOp = static_cast<ReduceOp>(in.get<uint8_t>());
    a.compression = static_cast<Compression>(in.get<uint8_t>());
    a.root = in.get<int32_t>();
    a.prescale = in.get<double>();
    a.postscale = in.get<double>();
    a.device = (in.get<uint8_t>() & kDeviceMemory) != 0;
    const auto dims = in.get<uint32_t>();
    for (uint32_t d = 0; d < dims; ++d) a.shape.push_back(in.get<int64_t>());
    const auto parts = in.get<uint32_t>();
    for (uint32_t d = 0; d < parts; ++d) a.splits.push_back(in.get<int64_t>());
    a.name = in.getString();
    message.announcements.push_back(std::move(a));
  }
  return message;
}

const Announcement& ReadyTensor::reference() const {
  for (const auto& a : byRank) {
    if (a) return *a;
  }
  throw Error("tensor queue: '" + name + "' is ready but no rank announced it");
}

int ReadyTensor::contributors() const {
  return static_cast<int>(std::count_if(byRank.begin(), byRank.end(),
                                        [](const auto& a) { return a.has_value(); }));
}

ReadinessTable::ReadinessTable(int size, JoinPolicy joinPolicy)
    : size_(size), joinPolicy_(joinPolicy), joined_(size, false) {}

bool ReadinessTable::isReady(const Entry& entry) const {
  for (int r = 0; r < size_; ++r) {
    if (!entry.byRank[r] && !joined_[r]) return false;
  }
  return true;
}

std::string ReadinessTable::disagreement(const std::string& name, const Entry& entry) const {
  int first = -1;
  for (int r = 0; r < size_; ++r) {
    if (!entry.byRank[r]) continue;
    if (first < 0) {
      first = r;
      continue;
    }
    const Announcement& a = *entry.byRank[first];
    const Announcement& b = *entry.byRank[r];
    if (!compatible(a, b)) {
      return "ranks disagree about '" + name + "': rank " + std::to_string(first) +
             " submitted " + a.describe() + ", rank " + std::to_string(r) + " " + b.describe();
    }
  }
  const Announcement& a = *entry.byRank[first];
  if (a.op == TensorOp::Allgather && a.shape.empty()) {
    // As in Horovod: a 0-d tensor has no first dimension to concatenate along.
    return "'" + name + "': rank " + std::to_string(first) +
           " tried to allgather a rank-zero tensor (a 0-d tensor has no first dimension)";
  }
  const bool someMissing = std::any_of(entry.byRank.begin(), entry.byRank.end(),
                                       [](const auto& announced) { return !announced; });
  // As in Horovod: a rank that has joined has no rows to keep or to send.
  if (someMissing && (a.op == TensorOp::Reducescatter || a.op == TensorOp::Alltoall)) {
    return "'" + name + "': " + std::string(toString(a.op)) +
           " while some ranks have joined is not supported";
  }
  if (!someMissing) return "";
  if (joinPolicy_ == JoinPolicy::Zeros) {
    // Horovod's policy: a joined rank only ever contributes zeros, to all-reduces.
    if (a.op == TensorOp::Allgather || a.op == TensorOp::Broadcast) {
      return "'" + name + "': " + std::string(toString(a.op)) +
             " while some ranks have joined is not supported (a joined rank has no data; "
             "join_policy='contributors' gathers the other ranks' rows and relays broadcasts)";
    }
    return "";
  }
  if (a.op == TensorOp::Broadcast && joined_[a.root] && !entry.byRank[a.root]) {
    return "'" + name + "': broadcast from root " + std::to_string(a.root) +
           ", which has joined (it has no data to send)";
  }
  if (a.op == TensorOp::Allreduce && a.reduceOp == ReduceOp::Avg &&
      a.type != DataType::Float32 && a.type != DataType::Float64) {
    return "'" + name + "': an average while some ranks have joined divides by the ranks that "
           "contributed, which needs float32 or float64; got " + std::string(toString(a.type));
  }
  // A joined rank contributes the op's identity, which a prescale would change (1 x p).
  if (a.op == TensorOp::Allreduce && a.prescale != 1.0 &&
      (a.reduceOp == ReduceOp::Prod || a.reduceOp == ReduceOp::Min ||
       a.reduceOp == ReduceOp::Max)) {
    return "'" + name + "': " + std::string(toString(a.reduceOp)) +
           " with a prescale factor while some ranks have joined is not supported (a joined "
           "rank's identity value would be scaled)";
  }
  return "";
}

CycleOutcome ReadinessTable::record(const std::vector<CycleMessage>& messages) {
  CycleOutcome outcome;
  for (int r = 0; r < size_; ++r) {
    const CycleMessage& message = messages[r];
    if (message.shutdown && outcome.shutdownBy < 0) outcome.shutdownBy = r;
    if (message.join && !joined_[r]) {
      joined_[r] = true;
      lastJoined_ = r;  // ranks joining in one cycle: the highest counts as last
    }
    for (const Announcement& a : message.announcements) {
      auto [it, created] = entries_.try_emplace(a.name);
      if (created) {
        it->second.byRank.assign(size_, std::nullopt);
        it->second.order = nextOrder_++;
      }
      it->second.byRank[r] = a;
    }
  }

  // Expiries before readiness: a name one rank gave up on runs nowhere, even when its last
  // announcement arrived in this same cycle.
  for (const CycleMessage& message : messages) {
    for (const Expiry& expiry : message.expired) {
      if (entries_.erase(expiry.name) == 0) continue;  // another rank expired it this cycle
      outcome.expired.push_back(expiry);
    }
  }

  std::vector<std::pair<uint64_t, std::string>> ready;
  for (const auto& [name, entry] : entries_) {
    if (isReady(entry)) ready.emplace_back(entry.order, name);
  }
  std::sort(ready.begin(), ready.end());
  for (const auto& [order, name] : ready) {
    auto it = entries_.find(name);
    ReadyTensor tensor;
    tensor.name = name;
    tensor.error = disagreement(name, it->second);
    tensor.byRank = std::move(it->second.byRank);
    entries_.erase(it);
    outcome.ready.push_back(std::move(tensor));
  }

  if (std::all_of(joined_.begin(), joined_.end(), [](bool j) { return j; })) {
    outcome.allJoined = true;
    outcome.lastJoined = lastJoined_;
    joined_.assign(size_, false);
    lastJoined_ = -1;
  }
  return outcome;
}

std::vector<int> ReadinessTable::missing(const std::string& name) const {
  std::vector<int> ranks;
  auto it = entries_.find(name);
  if (it == entries_.end()) return ranks;
  for (int r = 0; r < size_; ++r) {
    if (!it->second.byRank[r] && !joined_[r]) ranks.push_back(r);
  }
  return ranks;
}

}  // namespace ringcomm::queue
