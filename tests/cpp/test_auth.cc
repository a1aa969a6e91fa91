// The handshakes' cryptography (src/auth): SHA-256 against FIPS 180-4's examples, HMAC-SHA256
// against RFC 4231's test cases, and the handshake itself over a socket pair: the right secret
// is admitted, a wrong one, another purpose, a replayed reply and a forged proof are not.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "auth/handshake.h"
#include "auth/sha256.h"
#include "check.h"
#include "ringcomm/errors.h"

using namespace ringcomm;
using namespace ringcomm::auth;

namespace {

std::string hex(const Digest& digest) {
  std::string text;
  char pair[3];
  for (uint8_t byte : digest) {
    std::snprintf(pair, sizeof(pair), "%02x", byte);
    text += pair;
  }
  return text;
}

std::string sha256Hex(const std::string& data) { return hex(sha256(data.data(), data.size())); }

// Two ends of a connected socket pair, blocking reads with deadlines work on them.
struct Pair {
  net::UniqueFd a;
  net::UniqueFd b;
  Pair() {
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) throw Error("socketpair failed");
    a = net::UniqueFd(fds[0]);
    b = net::UniqueFd(fds[1]);
  }
};

// Runs the accepting side on `fd` (blocking, by hand): sends the hello, reads the reply, sends
// the proof when it checks out. Returns the caller it admitted, or -2 when it refused.
int32_t acceptOn(int fd, const std::string& secret, Purpose purpose, std::vector<uint8_t>* seen) {
  Acceptor acceptor(secret, purpose);
  const auto deadline = net::deadlineAfter(std::chrono::seconds(5));
  net::writeFully(fd, acceptor.hello().data(), kHelloBytes, deadline);
  std::vector<uint8_t> reply(kReplyBytes);
  net::readFully(fd, reply.data(), reply.size(), deadline);
  if (seen != nullptr) *seen = reply;
  const auto accepted = acceptor.check(reply.data());
  if (!accepted) {
    ::shutdown(fd, SHUT_RDWR);
    return -2;
  }
  net::writeFully(fd, accepted->second.data(), kProofBytes, deadline);
  return accepted->first.from;
}

}  // namespace

TEST(sha256MatchesFips180Examples) {
  CHECK_EQ(sha256Hex(""), std::string("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
  CHECK_EQ(sha256Hex("abc"), std::string("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
  CHECK_EQ(sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
           std::string("248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
  // A million 'a's, fed in uneven pieces: the block boundary handling.
  Sha256 hash;
  const std::string piece(997, 'a');
  size_t fed = 0;
  while (fed + piece.size() <= 1000000) {
    hash.update(piece);
    fed += piece.size();
  }
  hash.update(std::string(1000000 - fed, 'a'));
  CHECK_EQ(hex(hash.finish()),
           std::string("cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
}

TEST(hmacSha256MatchesRfc4231) {
  CHECK_EQ(hex(hmacSha256(std::string(20, '\x0b'), {"Hi There"})),
           std::string("b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"));
  CHECK_EQ(hex(hmacSha256("Jefe", {"what do ya ", "want for nothing?"})),  // parts concatenate
           std::string("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"));
  // A key longer than a block is hashed first.
  CHECK_EQ(hex(hmacSha256(std::string(131, '\xaa'),
                          {"Test Using Larger Than Block-Size Key - Hash Key First"})),
           std::string("60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"));
}

TEST(handshakeAdmitsTheSecretAndNamesTheCaller) {
  Pair pair;
  int32_t admitted = -1;
  std::thread server([&] { admitted = acceptOn(pair.a.get(), "s3cret", Purpose::Data, nullptr); });
  connectHandshake(pair.b.get(), "s3cret", Purpose::Data, Caller{3, 1},
                   net::deadlineAfter(std::chrono::seconds(5)), "rank 1");
  server.join();
  CHECK_EQ(admitted, 3);
}

TEST(handshakeRefusesWrongSecretsPurposesAndReplays) {
  auto attempt = [](const std::string& serverSecret, Purpose serverPurpose,
                    const std::string& clientSecret, Purpose clientPurpose) {
    Pair pair;
    int32_t admitted = -1;
    std::thread server([&] {
      try {
        admitted = acceptOn(pair.a.get(), serverSecret, serverPurpose, nullptr);
      } catch (const Error&) {
        admitted = -3;
      }
    });
    bool clientRefused = false;
    try {
      connectHandshake(pair.b.get(), clientSecret, clientPurpose, Caller{1, 0},
                       net::deadlineAfter(std::chrono::seconds(5)), "the test peer");
    } catch (const TransportError&) {
      clientRefused = true;
    }
    ::shutdown(pair.b.get(), SHUT_RDWR);
    server.join();
    return std::make_pair(admitted, clientRefused);
  };
  const auto wrongSecret = attempt("ours", Purpose::Data, "theirs", Purpose::Data);
  CHECK_EQ(wrongSecret.first, -2);
  CHECK(wrongSecret.second);
  const auto otherPurpose = attempt("ours", Purpose::Store, "ours", Purpose::Data);
  CHECK(otherPurpose.second);  // the client sees a hello of another purpose and gives up

  // A reply recorded from one handshake is worthless in the next: the nonce differs.
  Pair first;
  std::vector<uint8_t> recorded;
  std::thread server([&] { acceptOn(first.a.get(), "ours", Purpose::Data, &recorded); });
  connectHandshake(first.b.get(), "ours", Purpose::Data, Caller{1, 0},
                   net::deadlineAfter(std::chrono::seconds(5)), "rank 0");
  server.join();
  Acceptor fresh("ours", Purpose::Data);
  CHECK(!fresh.check(recorded.data()));
  // A forged proof (the right fields, random bytes where the HMAC goes).
  std::vector<uint8_t> forged = recorded;
  randomBytes(forged.data() + kReplyBytes - kProofBytes, kProofBytes);
  CHECK(!fresh.check(forged.data()));
}
