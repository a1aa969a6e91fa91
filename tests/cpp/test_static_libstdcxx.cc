// libringcomm linked with -static-libstdc++ -static-libgcc (ringcomm_static_libstdcxx), as some
// toolchains' g++ links it, used by this program, which links the system's libstdc++.so as
// Python does once torch or numpy is loaded. Only the public API is used, as the bindings and the
// torch backend use it. tests/test_cpp_units.py checks that the library exports none of its copy
// of libstdc++; this checks that it works beside the system's, and that its errors reach the
// caller: with a private unwinder in the library (before it linked libgcc_s), the first error
// that left it aborted the process.
//
// The failure that an exported copy caused, ranks given port 0 by the rendezvous, showed in a
// Python process (torch imported first, the module and the library each with a copy) and not in
// this program: the exports are what the test checks for it.
#include <chrono>
#include <cstddef>
#include <exception>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "ringcomm/communicator.h"
#include "ringcomm/config.h"
#include "ringcomm/errors.h"
#include "ringcomm/options.h"
#include "ringcomm/store.h"
#include "ringcomm/types.h"
#include "ringcomm/work.h"

using namespace ringcomm;
using namespace std::chrono_literals;

namespace {

// This program's own use of iostreams and locales, through the system libstdc++: it sets up that
// copy's state first, as an import of torch does before ringcomm is loaded.
std::string formattedHere(unsigned long value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

}  // namespace

TEST(staticLibstdcxxTwoRanksOverTcp) {
  CHECK_EQ(formattedHere(65535), std::string("65535"));
  auto store = std::make_shared<HashStore>();
  Config config;
  config.transport = TransportKind::Tcp;  // the rendezvous formats and parses ports
  config.listenAddress = "127.0.0.1";
  config.timeout = 30s;
  config.secret = "the ranks' shared secret";  // the data links' handshake proves it
  constexpr int kRanks = 2;
  constexpr size_t kCount = 1000;
  std::vector<std::vector<float>> data(kRanks, std::vector<float>(kCount));
  std::vector<std::string> errors(kRanks);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kRanks; ++rank) {
    ranks.emplace_back([&, rank] {
      try {
        auto comm = Communicator::createInScope(store, "static-libstdcxx", rank, kRanks, config);
        std::vector<float>& mine = data[rank];
        for (size_t i = 0; i < kCount; ++i) mine[i] = static_cast<float>(rank + 1);
        AllreduceOptions options;
        options.input = mine.data();
        options.output = mine.data();
        options.count = kCount;
        options.type = DataType::Float32;
        comm->allreduce(options)->wait();
        comm->shutdown();
      } catch (const std::exception& error) {
        errors[rank] = error.what();
      }
    });
  }
  for (std::thread& rank : ranks) rank.join();
  for (int rank = 0; rank < kRanks; ++rank) {
    CHECK_EQ(errors[rank], std::string());
    for (float value : data[rank]) CHECK_EQ(value, 3.0f);
  }
}

// An error thrown inside the library (its libstdc++ and unwinder) is caught here (the system's)
// by its own type and by its bases: the typeinfo is the library's, exported.
TEST(staticLibstdcxxErrorsCrossTheBoundary) {
  bool caught = false;
  try {
    parseAlgorithm("no-such-algorithm");
  } catch (const InvalidArgument& error) {
    caught = std::string(error.what()).find("no-such-algorithm") != std::string::npos;
  }
  CHECK(caught);

  HashStore store;
  caught = false;
  try {
    store.get("never-set", 10ms);
  } catch (const TimeoutError& error) {
    caught = std::string(error.what()).find("never-set") != std::string::npos;
  }
  CHECK(caught);

  caught = false;
  try {
    store.get("never-set", 10ms);
  } catch (const std::runtime_error&) {
    caught = true;
  }
  CHECK(caught);
}
