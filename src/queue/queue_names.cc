// The names of the tensor queue's enums, each one table: TensorOp's in errors and traces, and as
// Horovod's timeline spells them; JoinPolicy's (common/enum_names.h), which its parser reads.
#include <string>

#include "common/enum_names.h"
#include "queue/tensor_queue_impl.h"
#include "ringcomm/tensor_queue.h"

namespace ringcomm {
namespace {

// Each operation's name in errors and traces, and Horovod's, as its timeline spells it
// (NEGOTIATE_ALLREDUCE...).
struct TensorOpNames {
  TensorOp op;
  const char* name;
  const char* horovodName;
};

constexpr TensorOpNames kTensorOpNames[] = {
    {TensorOp::Allreduce, "allreduce", "ALLREDUCE"},
    {TensorOp::Allgather, "allgather", "ALLGATHER"},
    {TensorOp::Broadcast, "broadcast", "BROADCAST"},
    {TensorOp::Reducescatter, "reducescatter", "REDUCESCATTER"},
    {TensorOp::Alltoall, "alltoall", "ALLTOALL"},
};

// The operation's row; null for a value the table lacks (an integer cast to the enum).
const TensorOpNames* rowOf(TensorOp op) {
  for (const TensorOpNames& names : kTensorOpNames) {
    if (names.op == op) return &names;
  }
  return nullptr;
}

constexpr EnumName<JoinPolicy> kJoinPolicyNames[] = {
    {JoinPolicy::Zeros, "zeros"},
    {JoinPolicy::Contributors, "contributors"},
};

}  // namespace

const char* toString(TensorOp op) {
  const TensorOpNames* names = rowOf(op);
  return names != nullptr ? names->name : "?";
}

const char* toString(JoinPolicy policy) {
  return nameIn(kJoinPolicyNames, policy, "?");
}

JoinPolicy parseJoinPolicy(const std::string& name) {
  return parseIn(kJoinPolicyNames, name, "join policy");
}

const char* queue::horovodName(TensorOp op) {
  const TensorOpNames* names = rowOf(op);
  return names != nullptr ? names->horovodName : "OPERATION";
}

}  // namespace ringcomm
