// The detokenize service and its C++ client against a real agent over real
// UCX, with GPT-2's vocabulary: streamed text equals the host's DecodeStream.
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <random>

#include "../agent_fixture.h"
#include "../vocab_cache.h"
#include "outboard/detokenize_client.h"

namespace outboard {

// The friend the detokenizer names: sets where its stream names stand.
struct RemoteDetokenizerNames {
  static void set_last(RemoteDetokenizer& d, uint32_t name) { d.last_stream_ = name; }
};

namespace {

class DetokenizeServiceTest : public testing::AgentFixture {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(testing::cached_vocab("gpt2.tiktoken"))) GTEST_SKIP() << "run `outboard vocab fetch` first";
    start_agent();
    conn_ = connect();
    ASSERT_TRUE(conn_);
    auto local = Tokenizer::from_tiktoken(testing::cached_vocab("gpt2.tiktoken"));
    ASSERT_TRUE(local.ok()) << local.status().to_string();
    local_ = std::make_unique<Tokenizer>(std::move(local).value());
    detok_ = open("gpt2", *conn_);
  }
  void TearDown() override {
    detok_.reset();
    conn_.reset();
    stop_agent();
  }
  static std::unique_ptr<RemoteDetokenizer> open(const std::string& name, Connection& conn) {
    auto r = RemoteDetokenizer::open(conn, name, Deadline::after_ms(10000));
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? std::move(r).value() : nullptr;
  }
  std::vector<int32_t> ids(std::string_view text) {
    std::vector<int32_t> out;
    EXPECT_TRUE(local_->encode(text, out, EncodeOptions{.allow_special = true}).ok());
    return out;
  }

  std::unique_ptr<Connection> conn_;
  std::unique_ptr<Tokenizer> local_;
  std::unique_ptr<RemoteDetokenizer> detok_;
};

// Every sequence in 1..4-id steps, all open ones in one request per step.
std::vector<std::string> stream_all(RemoteDetokenizer& detok, const std::vector<std::vector<int32_t>>& docs) {
  std::vector<uint32_t> streams;
  for (size_t k = 0; k < docs.size(); ++k) streams.push_back(detok.open_stream());
  std::vector<std::string> texts(docs.size());
  std::vector<size_t> pos(docs.size(), 0), live;
  std::mt19937 rng(7);
  for (;;) {
    std::vector<StreamStep> steps;
    live.clear();
    for (size_t k = 0; k < docs.size(); ++k) {
      if (pos[k] >= docs[k].size()) continue;
      const size_t n = std::min<size_t>(1 + rng() % 4, docs[k].size() - pos[k]);
      steps.push_back({streams[k], std::span(docs[k]).subspan(pos[k], n), pos[k] + n == docs[k].size()});
      pos[k] += n;
      live.push_back(k);
    }
    if (steps.empty()) return texts;
    auto out = detok.step(steps, Deadline::after_ms(5000));
    EXPECT_TRUE(out.ok()) << out.status().to_string();
    if (!out.ok()) return texts;
    EXPECT_EQ(out->size(), steps.size());
    for (size_t i = 0; i < live.size(); ++i) {
      EXPECT_TRUE(out->error(i).ok()) << out->error(i).to_string();
      texts[live[i]] += out->text(i);
    }
  }
}

TEST_F(DetokenizeServiceTest, StreamedTextEqualsTheLocalDecodeForEverySequence) {
  const std::vector<std::string> docs = {"naïve café — 日本語 🙂🙂 done", "", "x", "  two leading spaces\n\ttab",
                                         "<|endoftext|> is text here", std::string(300, 'a') + "🙂"};
  std::vector<std::vector<int32_t>> doc_ids;
  for (const auto& d : docs) doc_ids.push_back(ids(d));
  EXPECT_EQ(stream_all(*detok_, doc_ids), docs);
  EXPECT_EQ(detok_->vocab_size(), local_->vocab_size());
  // A file of this process's is uploaded and streams the same.
  auto uploaded = open(testing::cached_vocab("gpt2.tiktoken"), *conn_);
  ASSERT_TRUE(uploaded);
  EXPECT_EQ(stream_all(*uploaded, doc_ids), docs);
}

TEST_F(DetokenizeServiceTest, ABadStepFailsAloneAndLeavesItsStreamAsItWas) {
  const std::vector<int32_t> emoji = ids("a🙂b");  // the emoji spans several ids: the stream holds its first bytes
  ASSERT_GE(emoji.size(), 4u);
  const uint32_t a = detok_->open_stream();
  const uint32_t b = detok_->open_stream();
  const std::vector<StreamStep> first = {{a, std::span(emoji).first(2)}, {b, std::span(emoji).first(1)}};
  auto out = detok_->step(first, Deadline::after_ms(5000));
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(out->text(0), "a");
  EXPECT_EQ(out->text(1), "a");

  const int32_t unknown = 10'000'000;
  const std::vector<StreamStep> bad = {{a, {&unknown, 1}}, {b, std::span(emoji).subspan(1)}, {99'999, {&unknown, 1}}};
  out = detok_->step(bad, Deadline::after_ms(5000));
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(out->error(0).code(), Code::kNotFound);
  EXPECT_NE(out->error(0).message().find("token id 10000000"), std::string::npos) << out->error(0).message();
  EXPECT_EQ(out->text(0), "");
  EXPECT_TRUE(out->error(1).ok());
  EXPECT_EQ(out->text(1), "🙂b");
  EXPECT_EQ(out->error(2).code(), Code::kNotFound);
  EXPECT_NE(out->error(2).message().find("stream 99999"), std::string::npos) << out->error(2).message();

  const std::vector<StreamStep> rest = {{a, std::span(emoji).subspan(2), /*finish=*/true}};
  out = detok_->step(rest, Deadline::after_ms(5000));
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->text(0), "🙂b");  // a kept what it held before the bad id
  EXPECT_EQ(detok_->step(rest, Deadline::after_ms(5000))->error(0).code(), Code::kNotFound);  // finish closed it
}

// Its ids fail, but the client forgot the stream as it sent the step: the agent closes it too (else
// it would hold it, and a name come round again would continue it).
TEST_F(DetokenizeServiceTest, AFinishingStepWhoseIdsFailClosesItsStream) {
  const std::vector<int32_t> hello = ids("hello");
  const int32_t unknown = 10'000'000;
  const uint32_t s = detok_->open_stream();
  const std::vector<StreamStep> first = {{s, hello}};
  ASSERT_EQ(detok_->step(first, Deadline::after_ms(5000))->text(0), "hello");
  const std::vector<StreamStep> last = {{s, {&unknown, 1}, /*finish=*/true}};
  EXPECT_EQ(detok_->step(last, Deadline::after_ms(5000))->error(0).code(), Code::kNotFound);
  auto after = detok_->step(first, Deadline::after_ms(5000));
  ASSERT_TRUE(after.ok());
  EXPECT_NE(after->error(0).message().find("is not open"), std::string::npos) << after->error(0).to_string();
}

// Past 2^32 streams the names wrap; one still open is skipped, so a new sequence never continues it.
TEST_F(DetokenizeServiceTest, StreamNamesWrapPastThoseStillOpen) {
  const std::vector<int32_t> emoji = ids("🙂");  // several ids: a stream stepped with the first holds bytes
  ASSERT_GE(emoji.size(), 2u);
  const uint32_t held = detok_->open_stream();  // 1
  const std::vector<StreamStep> begin = {{held, std::span(emoji).first(1)}};
  ASSERT_EQ(detok_->step(begin, Deadline::after_ms(5000))->text(0), "");
  RemoteDetokenizerNames::set_last(*detok_, UINT32_MAX - 1);
  EXPECT_EQ(detok_->open_stream(), UINT32_MAX);
  EXPECT_EQ(detok_->open_stream(), 0u);
  const uint32_t next = detok_->open_stream();
  EXPECT_EQ(next, 2u);  // 1 is open
  const std::vector<int32_t> hello = ids("hello");
  const std::vector<StreamStep> fresh = {{next, hello, /*finish=*/true}};
  EXPECT_EQ(detok_->step(fresh, Deadline::after_ms(5000))->text(0), "hello");
  const std::vector<StreamStep> rest = {{held, std::span(emoji).subspan(1), /*finish=*/true}};
  EXPECT_EQ(detok_->step(rest, Deadline::after_ms(5000))->text(0), "🙂");
}

// A server's pipeline: each step submitted before the one before it is answered; the answers run
// in order, equal step()'s, and a bad step fails alone in its place.
TEST_F(DetokenizeServiceTest, SubmittedStepsRunInOrderAndAnswerAsStepDoes) {
  const std::vector<int32_t> text = ids("naïve café — 🙂 done");
  const uint32_t s = detok_->open_stream();
  const int32_t unknown = 10'000'000;
  std::vector<std::vector<StreamStep>> steps;
  for (size_t at = 0; at < text.size(); ++at) {
    steps.push_back({{s, std::span(text).subspan(at, 1), at + 1 == text.size()}});
    if (at == 2) steps.push_back({{s, {&unknown, 1}}});
  }
  std::vector<std::optional<Result<SteppedText>>> answers(steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    ASSERT_TRUE(detok_->submit(steps[i], Deadline::after_ms(5000), [&answers, i](Result<SteppedText> r) {
                  answers[i] = std::move(r);
                }).ok());
  }
  ASSERT_TRUE(conn_->wait_until(Deadline::after_ms(5000), [&] { return answers.back().has_value(); }));
  std::string streamed;
  for (size_t i = 0; i < answers.size(); ++i) {
    ASSERT_TRUE(answers[i] && answers[i]->ok()) << i;
    const SteppedText& out = **answers[i];
    if (i == 3) {
      EXPECT_EQ(out.error(0).code(), Code::kNotFound) << out.error(0).to_string();
      continue;
    }
    EXPECT_TRUE(out.error(0).ok()) << i << ": " << out.error(0).to_string();
    streamed += out.text(0);
  }
  EXPECT_EQ(streamed, "naïve café — 🙂 done");
}

TEST_F(DetokenizeServiceTest, StreamsAreTheConnectionsOwnAndLimitsKeepItUsable) {
  const std::vector<int32_t> hello = ids("hello");
  const uint32_t mine = detok_->open_stream();
  auto other_conn = connect();
  ASSERT_TRUE(other_conn);
  auto other = open("gpt2", *other_conn);
  ASSERT_TRUE(other);
  const std::vector<StreamStep> step = {{mine, hello}};
  auto theirs = other->step(step, Deadline::after_ms(5000));
  ASSERT_TRUE(theirs.ok());
  EXPECT_EQ(theirs->error(0).code(), Code::kNotFound);
  EXPECT_EQ(other->close_stream(mine, Deadline::after_ms(5000)).code(), Code::kNotFound);

  // Over the service's per-request limit: the request fails, naming it; the stream is untouched.
  const std::vector<int32_t> huge((1u << 20) + 1, hello[0]);
  const std::vector<StreamStep> too_big = {{mine, huge}};
  auto refused = detok_->step(too_big, Deadline::after_ms(10000));
  EXPECT_EQ(refused.status().code(), Code::kTooBig);
  EXPECT_NE(refused.status().message().find("kMaxStepIds"), std::string::npos) << refused.status().to_string();
  auto mine_out = detok_->step(step, Deadline::after_ms(5000));
  ASSERT_TRUE(mine_out.ok()) << mine_out.status().to_string();
  EXPECT_EQ(mine_out->text(0), "hello");
  EXPECT_TRUE(detok_->close_stream(mine, Deadline::after_ms(5000)).ok());
  EXPECT_EQ(detok_->close_stream(mine, Deadline::after_ms(5000)).code(), Code::kNotFound);
}

}  // namespace
}  // namespace outboard
