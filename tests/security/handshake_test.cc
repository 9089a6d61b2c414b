// The handshake messages of net/auth.h as pure functions: what passes,
// and that nothing else does.
#include <gtest/gtest.h>

#include <set>

#include "net/auth.h"
#include "util.h"

namespace kolo::auth {
namespace {

using sectest::job_key;
using sectest::other_key;

TEST(Handshake, RightKeyIsAcceptedBothWays) {
  const Challenge ch = make_challenge(Channel::Data, 1);
  std::string why;
  const auto parsed = parse_challenge(ch.data(), ch.size(), &why);
  ASSERT_TRUE(parsed) << why;
  EXPECT_EQ(parsed->channel, Channel::Data);
  EXPECT_EQ(parsed->rank, 1);
  EXPECT_FALSE(parsed->open);

  const Answer ans = make_answer(job_key(), ch, {3, 4, 1});
  const auto who = check_answer(&job_key(), ch, ans.data(), ans.size(), &why);
  ASSERT_TRUE(who) << why;
  EXPECT_EQ(who->rank, 3);
  EXPECT_EQ(who->size, 4);
  EXPECT_EQ(who->peer, 1);

  const Verdict v = make_verdict(&job_key(), ch, ans, true);
  EXPECT_EQ(check_verdict(job_key(), ch, ans, v.data(), v.size()), VerdictStatus::Accepted);
}

TEST(Handshake, WrongKeyIsRejected) {
  const Challenge ch = make_challenge(Channel::Store, -1);
  const Answer ans = make_answer(other_key(), ch, {0, 2, -1});
  std::string why;
  EXPECT_FALSE(check_answer(&job_key(), ch, ans.data(), ans.size(), &why));
  EXPECT_EQ(why, "wrong credentials (not this job's secret)");
}

TEST(Handshake, AnAcceptorWithAnotherKeyCannotProveItself) {
  const Challenge ch = make_challenge(Channel::Store, -1);
  const Answer ans = make_answer(job_key(), ch, {0, 2, -1});
  const Verdict forged = make_verdict(&other_key(), ch, ans, true);
  EXPECT_EQ(check_verdict(job_key(), ch, ans, forged.data(), forged.size()), VerdictStatus::Forged);
  const Verdict refused = make_verdict(&job_key(), ch, ans, false);
  EXPECT_EQ(check_verdict(job_key(), ch, ans, refused.data(), refused.size()), VerdictStatus::Rejected);
}

TEST(Handshake, EveryBitOfTheAnswerIsCovered) {
  const Challenge ch = make_challenge(Channel::Data, 0);
  const Answer good = make_answer(job_key(), ch, {1, 2, 0});
  for (std::size_t i = 0; i < good.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      Answer bad = good;
      bad[i] ^= static_cast<unsigned char>(1 << bit);
      std::string why;
      EXPECT_FALSE(check_answer(&job_key(), ch, bad.data(), bad.size(), &why)) << "byte " << i << " bit " << bit;
    }
  }
}

TEST(Handshake, EveryBitOfTheVerdictIsCovered) {
  const Challenge ch = make_challenge(Channel::Data, 0);
  const Answer ans = make_answer(job_key(), ch, {1, 2, 0});
  const Verdict good = make_verdict(&job_key(), ch, ans, true);
  for (std::size_t i = 0; i < good.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      Verdict bad = good;
      bad[i] ^= static_cast<unsigned char>(1 << bit);
      EXPECT_NE(check_verdict(job_key(), ch, ans, bad.data(), bad.size()), VerdictStatus::Accepted)
          << "byte " << i << " bit " << bit;
    }
  }
}

TEST(Handshake, AnAnswerCannotBeReplayedOnAnotherConnectionOrChannel) {
  const Challenge first = make_challenge(Channel::Data, 0);
  const Answer ans = make_answer(job_key(), first, {1, 2, 0});
  std::string why;
  // A fresh challenge has a fresh nonce.
  const Challenge second = make_challenge(Channel::Data, 0);
  EXPECT_FALSE(check_answer(&job_key(), second, ans.data(), ans.size(), &why));
  // The same nonce on the store channel.
  Challenge store = first;
  store[9] = static_cast<unsigned char>(Channel::Store);
  EXPECT_FALSE(check_answer(&job_key(), store, ans.data(), ans.size(), &why));
  // A verdict is no answer, nor the reverse.
  const Verdict v = make_verdict(&job_key(), first, ans, true);
  EXPECT_FALSE(check_answer(&job_key(), first, v.data(), v.size(), &why));
}

TEST(Handshake, NoncesAreFresh) {
  std::set<std::string> nonces;
  for (int i = 0; i < 100; ++i) {
    const Challenge ch = make_challenge(Channel::Store, -1);
    nonces.emplace(reinterpret_cast<const char*>(ch.data()) + 16, kNonceBytes);
  }
  EXPECT_EQ(nonces.size(), 100u);
}

TEST(Handshake, KeysDependOnTheWholeSecret) {
  const Challenge ch = make_challenge(Channel::Store, -1);
  const Answer ans = make_answer(Key::from_secret("secret-a"), ch, {});
  std::string why;
  const Key same = Key::from_secret("secret-a");
  EXPECT_TRUE(check_answer(&same, ch, ans.data(), ans.size(), &why)) << why;
  for (const char* other : {"secret-b", "secret-a ", "secret-", ""}) {
    const Key k = Key::from_secret(other);
    EXPECT_FALSE(check_answer(&k, ch, ans.data(), ans.size(), &why)) << other;
  }
  const Key r1 = Key::random(), r2 = Key::random();
  const Answer by_r1 = make_answer(r1, ch, {});
  EXPECT_FALSE(check_answer(&r2, ch, by_r1.data(), by_r1.size(), &why));
}

TEST(Handshake, AnOpenChallengeNeedsNoProof) {
  const Challenge ch = make_challenge(Channel::Store, -1, /*open=*/true);
  const Answer ans = make_answer(job_key(), ch, {});
  std::string why;
  EXPECT_TRUE(check_answer(nullptr, ch, ans.data(), ans.size(), &why)) << why;
  const Verdict v = make_verdict(nullptr, ch, ans, true);
  EXPECT_EQ(check_verdict(job_key(), ch, ans, v.data(), v.size()), VerdictStatus::Accepted);
}

TEST(Handshake, ForeignBytesAreNoChallengeOrAnswer) {
  const std::string http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  const auto* p = reinterpret_cast<const unsigned char*>(http.data());
  EXPECT_FALSE(answer_prefix_ok(p, 1));  // 'G' is not 'K'
  const Challenge ch = make_challenge(Channel::Store, -1);
  EXPECT_TRUE(answer_prefix_ok(ch.data(), 4));  // "KOLO" may still become an answer
  std::string why;
  EXPECT_FALSE(parse_challenge(p, http.size(), &why));
  std::string padded = http + std::string(kChallengeBytes - http.size(), ' ');
  EXPECT_FALSE(parse_challenge(reinterpret_cast<const unsigned char*>(padded.data()), padded.size(), &why));
  EXPECT_EQ(why, "it does not speak kolo's handshake");
  padded.resize(kAnswerBytes, ' ');
  EXPECT_FALSE(check_answer(&job_key(), ch, reinterpret_cast<const unsigned char*>(padded.data()),
                            padded.size(), &why));
  EXPECT_EQ(why, "not a kolo handshake");
}

TEST(Handshake, RandomSecretsAre32HexDigits) {
  const std::string a = random_secret(), b = random_secret();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos) << a;
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace kolo::auth
