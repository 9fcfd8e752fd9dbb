// The cycle message codec: what one rank encodes, every peer decodes alike; a malformed
// message is refused, never read past its end (the fuzzer, cycle_message_fuzzer.cc, covers
// arbitrary bytes).
#include "collectives/engine/cycle_message.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace hvdrun {
namespace {

Spec spec(const std::string& name, OpKind kind) {
  Spec s;
  s.name = name;
  s.kind = kind;
  s.dtype = HVD_FLOAT64;
  s.op = HVD_OP_MAX;
  s.root = kind == OpKind::kBroadcast ? 1 : -1;
  s.prescale = 0.5;
  s.postscale = 4;
  s.counts = {7, 9};
  s.row_elems = kind == OpKind::kAlltoall ? 3 : 0;
  if (kind == OpKind::kAlltoall) s.splits = {1, 6};
  return s;
}

// The framed message as the engine sends it: `offset` bytes first, the header, the eager data.
std::string framed(const CycleMessage& m, const std::string& eager, size_t offset = 8) {
  std::string out(offset, '\0');
  encode_header(m, static_cast<uint32_t>(eager.size()), &out);
  out.resize(eager_start(out.size()));
  return out + eager;
}

TEST(CycleMessage, WhatOneRankEncodesIsWhatEveryPeerDecodes) {
  CycleMessage m;
  m.flags = kFlagJoined | kFlagLeaving;
  set_bit(&m.bits, 3);
  set_bit(&m.bits, 130);
  m.invalid = {"stale.a", "stale.b"};
  m.specs = {spec("a", OpKind::kAllreduce), spec("b", OpKind::kBroadcast), spec("c", OpKind::kAlltoall)};
  m.specs[0].dtypes = {HVD_FLOAT64, HVD_INT32};
  m.specs[0].shapes = {2, 7, 1, 1, 9};  // [7,1] and [9]
  const std::string eager(24, 'e');
  std::string raw = framed(m, eager);
  CycleMessage got;
  ASSERT_TRUE(decode_message(raw, 8, &got));
  EXPECT_EQ(got.flags, m.flags);
  EXPECT_EQ(got.bits, m.bits);
  EXPECT_TRUE(bit(got.bits, 3) && bit(got.bits, 130) && !bit(got.bits, 4) && !bit(got.bits, 9999));
  EXPECT_EQ(got.invalid, m.invalid);
  ASSERT_EQ(got.specs.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(got.specs[i].same_as(m.specs[i])) << got.specs[i].name;
  EXPECT_EQ(std::string(got.eager), eager);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(got.eager.data()) % 8, reinterpret_cast<uintptr_t>(raw.data()) % 8)
      << "the eager data is 8-byte aligned within the message";
}

TEST(CycleMessage, AnEmptyMessageIsTheSteadyStatesSmallest) {
  CycleMessage m, got;
  std::string raw = framed(m, "");
  ASSERT_TRUE(decode_message(raw, 8, &got));
  EXPECT_EQ(got.flags, 0);
  EXPECT_TRUE(got.bits.empty() && got.invalid.empty() && got.specs.empty() && got.eager.empty());
}

TEST(CycleMessage, TruncatedExtendedOrDuplicatedMessagesAreRefused) {
  CycleMessage m;
  m.specs = {spec("a", OpKind::kAllreduce), spec("b", OpKind::kAllgatherv)};
  std::string raw = framed(m, std::string(16, 'x'));
  CycleMessage got;
  ASSERT_TRUE(decode_message(raw, 8, &got));
  for (size_t cut = 8; cut < raw.size(); ++cut)
    EXPECT_FALSE(decode_message(raw.substr(0, cut), 8, &got)) << "truncated to " << cut << " bytes";
  EXPECT_FALSE(decode_message(raw + "z", 8, &got)) << "bytes after the message";
  m.specs[1].name = "a";
  EXPECT_FALSE(decode_message(framed(m, ""), 8, &got)) << "one name announced twice";
  m.specs = {spec("g", OpKind::kAllreduce)};
  m.specs[0].dtypes = {HVD_FLOAT32};  // two tensors, one dtype
  EXPECT_FALSE(decode_message(framed(m, ""), 8, &got)) << "a group's dtypes not one per tensor";
  m.specs[0].dtypes.clear();
  m.specs[0].shapes = {1, 7};  // two tensors, one shape
  EXPECT_FALSE(decode_message(framed(m, ""), 8, &got)) << "shapes not one per tensor";
  m.specs[0].shapes = {1, 7, 3, 9};  // the second claims three dimensions, gives one
  EXPECT_FALSE(decode_message(framed(m, ""), 8, &got)) << "a shape longer than the shapes";
  m.specs[0].shapes = {1, 7, 1, 9};
  EXPECT_TRUE(decode_message(framed(m, ""), 8, &got));
  EXPECT_EQ(got.specs[0].shapes, m.specs[0].shapes);
}

}  // namespace
}  // namespace hvdrun
