#include "channel/frame.h"

#include <gtest/gtest.h>

#include <random>

namespace outboard::channel {
namespace {

FrameHeader request(uint64_t id, uint32_t service) {
  FrameHeader h;
  h.type = FrameType::kRequest;
  h.dst = 7;
  h.seq = 41;
  h.id = id;
  h.service = service;
  return h;
}

void expect_same(const FrameHeader& a, const FrameHeader& b) {
  EXPECT_EQ(a.type, b.type);
  EXPECT_EQ(a.status, b.status);
  EXPECT_EQ(a.flags, b.flags);
  EXPECT_EQ(a.dst, b.dst);
  EXPECT_EQ(static_cast<uint32_t>(a.seq), b.seq);  // the wire carries the low 32 bits
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.arg, b.arg);
  EXPECT_EQ(a.credit_bytes, b.credit_bytes);
  EXPECT_EQ(a.credit_msgs, b.credit_msgs);
  EXPECT_EQ(a.service, b.service);
}

// UCX 1.13's shared-memory short path takes up to 100 B: UCP's 8 B header,
// ours, and the payload. A 64 B request and its response must fit.
TEST(Frame, SmallRequestsAndResponsesFitUcxShortPath) {
  constexpr size_t kShortMax = 100, kUcpHeader = 8, kPayload = 64;
  WireHeader req = encode(request(123456789, 2));
  EXPECT_EQ(req.size, 24u);
  EXPECT_LE(kUcpHeader + req.size + kPayload, kShortMax);
  FrameHeader resp;
  resp.type = FrameType::kResponse;
  resp.id = 123456789;
  EXPECT_EQ(encode(resp).size, 20u);
  resp.credit_msgs = 1;
  resp.credit_bytes = 64;
  EXPECT_EQ(encode(resp).size, 32u);  // returned credits cost 12 B only when there are some
}

TEST(Frame, EveryCombinationOfFieldsRoundTrips) {
  std::mt19937_64 rng(5);
  for (unsigned mask = 0; mask < 64; ++mask) {
    FrameHeader h;
    h.type = static_cast<FrameType>(3 + mask % 7);  // kMessage .. kDoorbell
    h.dst = static_cast<uint32_t>(rng());
    h.seq = rng();
    if (mask & 1) h.id = rng() | 1;
    if (mask & 2) h.service = static_cast<uint32_t>(rng() % 100);
    if (mask & 4) h.credit_msgs = static_cast<uint32_t>(rng() % 300);
    if (mask & 8) h.credit_bytes = rng() % (1ull << 40) + 1;
    if (mask & 16) h.arg = rng() | 1;
    if (mask & 32) {
      h.flags = kFlagWantCredit;
      h.status = -5;
    }
    WireHeader w = encode(h);
    ASSERT_LE(w.size, kMaxWireHeader);
    FrameHeader back;
    ASSERT_EQ(decode(w.span(), back), DecodeError::kNone) << mask;
    expect_same(h, back);
  }
}

TEST(Frame, MalformedHeadersAreRejected) {
  FrameHeader h = request(9, 1);
  h.arg = 77;
  WireHeader w = encode(h);
  FrameHeader out;
  for (size_t n = 0; n < w.size; ++n)
    EXPECT_EQ(decode(w.span().first(n), out), DecodeError::kMalformed) << "truncated to " << n;
  std::vector<uint8_t> longer(w.span().begin(), w.span().end());
  longer.push_back(0);
  EXPECT_EQ(decode(longer, out), DecodeError::kMalformed);
  longer.pop_back();
  longer[0] = kWireVersion + 1;
  EXPECT_EQ(decode(longer, out), DecodeError::kVersion);
}

TEST(Frame, ASealedHeaderEndsInItsTagsPlace) {
  FrameHeader h = request(9, 1);
  const size_t plain = encode(h).size;
  h.flags |= kFlagSealed;
  WireHeader w = encode(h);
  ASSERT_EQ(w.size, plain + kWireTagBytes);
  ASSERT_LE(w.size, kMaxWireHeader);
  std::memset(w.bytes + plain, 0xab, kWireTagBytes);  // the sender's tag
  FrameHeader out;
  ASSERT_EQ(decode(w.span(), out), DecodeError::kNone);
  EXPECT_TRUE(out.flags & kFlagSealed);
  for (size_t cut = 1; cut <= kWireTagBytes; ++cut)
    EXPECT_EQ(decode(w.span().first(w.size - cut), out), DecodeError::kMalformed) << "tag cut by " << cut;
}

TEST(Frame, SequenceNumbersExtendAcrossTheLow32BitWrap) {
  EXPECT_EQ(extend_seq(5, 5), 5u);
  EXPECT_EQ(extend_seq(5, 9), 9u);  // ahead: a frame behind a rendezvous still in flight
  EXPECT_EQ(extend_seq(0xfffffffeull, 0x00000001), 0x100000001ull);
  EXPECT_EQ(extend_seq(0x100000002ull, 0xffffffff), 0xffffffffull);
  EXPECT_EQ(extend_seq(0x7'00000010ull, 0x00000010), 0x7'00000010ull);
}

}  // namespace
}  // namespace outboard::channel
